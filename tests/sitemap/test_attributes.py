"""An element with a huge number of attributes (issue 17.14): lxml hands attribute values over
in quadratic time, so 200,000 of them stalled the reader for over a minute. Wherever they are —
the root, a document-level rs:md or rs:ln, an entry, its rs:md or rs:ln, a foreign element
inside it — the document is refused with one line naming the line, after a linear count."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from resourcesync.sitemap.decode import MAX_ATTRIBUTES

N = 200_000
MANY = " ".join(f'a{i}="x"' for i in range(N))
ENTRY = "<loc>http://example.org/a</loc>"
PLACES = {
    "root": (f"<urlset {MANY} {{ns}}>", "", ""),
    "document md": ("<urlset {ns}>", f'<rs:md {MANY} capability="resourcelist"/>', ""),
    "document ln": ("<urlset {ns}>", f'<rs:ln {MANY} rel="up" href="http://e/"/>', ""),
    "entry": ("<urlset {ns}>", "", f"<url {MANY}>{ENTRY}</url>"),
    "entry md": ("<urlset {ns}>", "", f"<url>{ENTRY}<rs:md {MANY} length='1'/></url>"),
    "entry ln": ("<urlset {ns}>", "", f"<url>{ENTRY}<rs:ln {MANY} rel='x' href='h'/></url>"),
    "extension": ("<urlset {ns}>", "", f"<url>{ENTRY}<x:e><x:f {MANY}/></x:e></url>"),
}
NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/" xmlns:x="http://example.org/x/"'
)


@pytest.mark.parametrize("place", sorted(PLACES))
@pytest.mark.parametrize("command", ["cat", "validate"])
def test_an_element_with_200000_attributes_is_refused(
    tmp_path: Path, place: str, command: str
) -> None:
    root, header, entry = PLACES[place]
    md = "" if "document md" in place else '<rs:md capability="resourcelist"/>'
    text = "\n".join(
        ['<?xml version="1.0"?>', root.format(ns=NS), md + header, entry or f"<url>{ENTRY}</url>"]
    )
    path = tmp_path / "doc.xml"
    path.write_text(text + "\n</urlset>\n")
    # The timeout only keeps a regression from hanging the suite; it asserts no speed.
    result = subprocess.run(
        [sys.executable, "-m", "resourcesync", command, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert re.search(
        rf"with {N // 10}\d attributes \(at most {MAX_ATTRIBUTES} are read\)", result.stderr
    )
    assert f"{path}:" in result.stderr
