"""The pages people see (issue 14.17), in headless Chromium at 1280 and 400 pixels wide: the
landing page and a `--listing` folder page fit the width (no sideways scrolling), have no empty
cell, show dates as people write them, link nothing that leads to a bare 404, and the landing
page shows the exact `sync` command that copies the Source. Screenshots are kept beside the
test's files (their paths are printed)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx
import pytest

from resourcesync.source.config import PublishConfig, SetConfig
from resourcesync.source.publish import publish
from resourcesync.source.server import create_app
from tests.servers import serve
from tests.source.test_server import CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM) and not os.environ.get("CI"),
    reason="Debian's chromium is not installed (.ci/run installs it)",
)

WIDTHS = (1280, 400)
HUMAN = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d UTC$")


def _site(tmp_path: Path, base: str) -> None:
    data = tmp_path / "data"
    for name, body in {
        "お知らせ/とても長い名前のファイル-" + "x" * 80 + ".txt": b"a" * 5000,
        "data/people.csv": b"name\n" * 100,
        "index.html": b"<p>hi</p>",
    }.items():
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_bytes(body)
    config = PublishConfig(
        out=tmp_path / "out", sets=[SetConfig("dataset", data, base + "/files/")]
    )
    publish(config)
    (data / "data" / "new.csv").write_bytes(b"new\n")
    publish(config)  # so that the page has recent changes too


def _check(page, what: str, shots: Path, width: int) -> None:  # type: ignore[no-untyped-def]
    shot = shots / f"{what}-{width}.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"{what} at {width} px scrolls sideways by {overflow} px"
    cells = page.locator("td").all_inner_texts()
    assert cells and all(c.strip() for c in cells), f"{what}: an empty cell: {cells}"
    times = page.locator("time").all_inner_texts()
    assert times and all(HUMAN.match(t) for t in times), times


def test_the_landing_and_listing_pages_at_desktop_and_phone_width(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    out = tmp_path / "out"
    out.mkdir()
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with serve(create_app(out, listing=True)) as base, sync_playwright() as p:
        _site(tmp_path, base)
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for width in WIDTHS:
                page = browser.new_page(viewport={"width": width, "height": 900})
                assert page.goto(base + "/").status == 200
                _check(page, "landing", shots, width)
                box = page.locator(".copy code").inner_text()
                assert box == f"resourcesync sync {base}/ copy/"
                # Every link on it leads somewhere (with --listing, the resources' folder too).
                for href in page.eval_on_selector_all("a", "els => els.map(e => e.href)"):
                    if href.startswith(base):
                        assert httpx.get(href, timeout=10).status_code == 200, href
                assert page.goto(base + "/files/data/").status == 200
                _check(page, "listing", shots, width)
                assert page.locator("th").all_inner_texts() == ["Name", "Size", "Modified"]
                assert "people.csv" in page.locator("table").inner_text()
                page.click("text=Parent folder")
                page.wait_for_url(base + "/files/")
                page.close()
        finally:
            browser.close()


def test_without_listing_the_resources_folder_is_not_a_link(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with serve(create_app(out)) as base:
        _site(tmp_path, base)
        page = httpx.get(base + "/", timeout=10).text
        assert f"<code>{base}/files/</code>" in page
        assert f'href="{base}/files/"' not in page
        assert httpx.get(base + "/files/", timeout=10).status_code == 404
