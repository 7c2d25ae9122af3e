"""A set whose folder and base URL move together keeps its URIs: the published history must
not delete what the Resource List still holds (a sibling of issue 16 found by the Destination
catching up after a baseline)."""

from __future__ import annotations

from pathlib import Path

from resourcesync.sitemap import read_document
from resourcesync.source.config import PublishConfig, SetConfig
from resourcesync.source.publish import publish
from tests.source.history import Clock, check_history

DOCS = "http://example.org/"


def test_a_uri_that_changes_key_is_not_listed_as_deleted(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "one").mkdir(parents=True)
    (data / "one" / "a.txt").write_bytes(b"a")
    (data / "one" / "b.txt").write_bytes(b"b")
    clock = Clock()
    out = tmp_path / "out"
    publish(
        PublishConfig(out=out, sets=[SetConfig("set1", data, DOCS)], docs_url=DOCS), clock=clock
    )
    (data / "one" / "b.txt").write_bytes(b"b, changed")
    # The same URIs, now from the sub-folder under a deeper base URL.
    moved = PublishConfig(
        out=out, sets=[SetConfig("set1", data / "one", DOCS + "one/")], docs_url=DOCS
    )
    publish(moved, clock=clock)
    _, resources = read_document(out / "set1" / "resourcelist.xml")
    assert sorted(r.loc for r in resources) == [DOCS + "one/a.txt", DOCS + "one/b.txt"]
    _, changes = read_document(out / "set1" / "changelist.xml")
    assert [c.change for c in changes if c.change == "deleted"] == []
    check_history(out, DOCS, "set1")
