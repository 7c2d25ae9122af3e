"""The published history of a Source (issue 16): every change in exactly one Change List, closed
lists carrying their `until`, one open list, and the replay of the published changes after a
Resource List's `at` giving the latest Resource List."""

from __future__ import annotations

import itertools
from pathlib import Path

from resourcesync.sitemap import read_document
from resourcesync.source.config import PublishConfig, SetConfig
from resourcesync.source.publish import publish
from tests.source.history import Clock, check_history

BASE = "http://example.org/data/"
DOCS = "http://example.org/"


def config(tmp_path: Path, **kw: object) -> PublishConfig:
    return PublishConfig(
        out=tmp_path / "out",
        sets=[SetConfig("set1", tmp_path / "data", BASE, **kw)],  # type: ignore[arg-type]
        docs_url=DOCS,
    )


def test_every_closed_change_list_carries_until_and_all_of_its_entries(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "seed.txt").write_bytes(b"0")
    clock = Clock()
    cfg = config(tmp_path, changelist_max_entries=3)
    publish(cfg, clock=clock)
    # Two changes a run against lists of three: each list is closed by a later run than the
    # one that opened it, and the same file is updated in several lists.
    for round_ in range(8):
        (data / f"new{round_}.txt").write_bytes(b"n")
        (data / "seed.txt").write_bytes(f"seed {round_}".encode())
        publish(cfg, clock=clock)
    out = tmp_path / "out" / "set1"
    _, lists = read_document(out / "changelist.xml")
    assert len(lists) >= 5
    total = 0
    for entry in lists:
        doc, entries = read_document(out / entry.loc.removeprefix(DOCS + "set1/"))
        assert doc.from_ == entry.from_ and doc.until == entry.until
        if entry is not lists[-1]:
            assert doc.until is not None and len(entries) == 3
        total += len(entries)
    assert total == 16
    for before, after in itertools.pairwise(lists):
        assert before.until is not None and before.until == after.from_
    check_history(tmp_path / "out", DOCS, "set1")
