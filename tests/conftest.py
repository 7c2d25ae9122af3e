"""Shared fixtures. Tests that need the specifications' examples skip when ../shared is absent."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _no_notifier_left_running() -> Iterator[None]:
    """A `publish` whose hub refused leaves a thread of this process retrying the held
    notifications (as a long-running program wants); a test's is stopped when the test ends,
    so it does not post to a later test's servers or draw its jitter during a later test."""
    yield
    notify = sys.modules.get("resourcesync.source.notify")
    if notify is not None:
        notify.stop_background()


ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT.parent / "shared" / "specs"
EXAMPLES = SPECS / "examples"


def spec_example_files() -> list[Path]:
    """Every XML example document shipped with the specifications (empty when absent)."""
    if not EXAMPLES.is_dir():
        return []
    return sorted(p for p in EXAMPLES.rglob("*.xml"))


def notification_spec_examples() -> list[tuple[str, bytes]]:
    """The XML examples embedded in the Change Notification spec (name, document bytes)."""
    return html_spec_examples("resourcesync-change-notification-1.0.1.html", "change-notification")


def framework_spec_examples() -> list[tuple[str, bytes]]:
    """The XML examples embedded in the Framework Notification spec (name, document bytes)."""
    return html_spec_examples(
        "resourcesync-framework-notification-1.0.1.html", "framework-notification"
    )


def html_spec_examples(name: str, prefix: str) -> list[tuple[str, bytes]]:
    """The XML examples embedded in one of the HTML specs (name, document bytes)."""
    path = SPECS / name
    if not path.is_file():
        return []
    html = path.read_text(encoding="utf-8")
    out = []
    for i, block in enumerate(re.findall(r"(?s)<pre[^>]*>(.*?)</pre>", html), 1):
        text = unescape(re.sub(r"(?s)<[^>]+>", "", block))
        # Some examples are HTTP messages: the document starts after the headers.
        start = text.find("<?xml")
        if start < 0:
            start = text.find("<urlset")
        # Examples that elide the document ("<urlset ...") are not documents.
        if start >= 0 and ("</urlset>" in text or "</sitemapindex>" in text):
            out.append((f"{prefix}-pre-{i}", text[start:].strip().encode("utf-8")))
    return out


needs_specs = pytest.mark.skipif(not EXAMPLES.is_dir(), reason="../shared/specs is absent")


@pytest.fixture
def specs_dir() -> Path:
    if not SPECS.is_dir():
        pytest.skip("../shared/specs is absent")
    return SPECS
