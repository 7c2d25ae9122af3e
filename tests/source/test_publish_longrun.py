"""What a run costs a Source with a long history (issue 15.3: a re-run costs what changed):
the Change List Index and the Change List Archive, which name every list kept (thousands, one
every 10,000 changes, kept for good by default), are written when a list is closed or dropped,
not by every run that adds to the open list; a closed list whose file is gone is written again
all the same; the leftovers of a killed run are found in one walk."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from resourcesync.sitemap import read_document
from resourcesync.source.publish import publish
from resourcesync.source.setrun import SetRun
from tests.source.history import Clock, check_history
from tests.source.test_publish_retention import _config as config

DOCS = "http://example.org/"


class Written:
    """The names of the documents the runs wrote (whole or split)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        for method in ("write", "split"):
            original = getattr(SetRun, method)

            def counted(run: SetRun, name: str, *a: object, _f: object = original) -> object:
                self.names.append(name)
                return _f(run, name, *a)  # type: ignore[operator]

            monkeypatch.setattr(SetRun, method, counted)


def started(tmp_path: Path, max_entries: int, *names: str) -> tuple[Path, Callable[[], None]]:
    """A set (its files `names`) published once with lists of `max_entries`: its data
    folder, and its next run."""
    data = tmp_path / "data"
    data.mkdir()
    for name in names:
        (data / name).write_bytes(b"0")
    clock = Clock()
    cfg = config(tmp_path, changelist_max_entries=max_entries)

    def run() -> None:
        publish(cfg, clock=clock)

    run()
    return data, run


def test_the_index_and_the_archive_are_written_when_a_list_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, run = started(tmp_path, 5, "seed.txt")
    written = Written(monkeypatch)
    out = tmp_path / "out" / "set1"
    for round_ in range(14):
        before = len(list((out / "changelists").glob("*.xml"))) if round_ else 0
        del written.names[:]
        (data / "seed.txt").write_bytes(f"seed {round_}".encode())
        (data / f"new{round_}.txt").write_bytes(b"n")  # two changes a run, lists of five
        run()
        closed = [p for p in (out / "changelists").glob("changelist-?????.xml")]
        rotated = len(closed) > before - (1 if before else 0)
        index_written = "changelist.xml" in written.names
        archive_written = "changelist-archive.xml" in written.names
        if round_ >= 3:  # (the first lists, and the first index, come in the first rounds)
            assert index_written == archive_written == rotated, (round_, written.names)
        index, entries = read_document(out / "changelist.xml")
        _, archived = read_document(out / "changelist-archive.xml")
        if not index.index:
            assert not closed and not archived
            continue
        # Either way the index names every list, the archive every closed one.
        assert [e.loc.rsplit("/", 1)[1] for e in entries[:-1]] == sorted(p.name for p in closed)
        assert [(e.loc, e.from_, e.until) for e in archived] == [
            (e.loc, e.from_, e.until) for e in entries[:-1]
        ]
        assert entries[-1].loc.endswith("-open.xml") and entries[-1].until is None
    check_history(tmp_path / "out", DOCS, "set1")


def test_a_closed_list_whose_file_is_gone_is_written_again_by_the_next_run(
    tmp_path: Path,
) -> None:
    data, run = started(tmp_path, 2)
    for round_ in range(8):
        (data / f"f{round_}.txt").write_bytes(b"x")
        run()
    lists = tmp_path / "out" / "set1" / "changelists"
    kept = {p.name: p.read_bytes() for p in lists.glob("changelist-?????.xml")}
    assert len(kept) >= 2
    gone = sorted(kept)[0]
    (lists / gone).unlink()
    (data / "f0.txt").write_bytes(b"changed, not enough to close a list")
    run()
    assert (lists / gone).read_bytes() == kept[gone]
    # …and by a run that changed nothing.
    (lists / gone).unlink()
    run()
    assert (lists / gone).read_bytes() == kept[gone]
    check_history(tmp_path / "out", DOCS, "set1")


def test_the_leftovers_of_a_killed_run_are_removed_at_any_depth_and_nothing_else(
    tmp_path: Path,
) -> None:
    data, run = started(tmp_path, 1, "a.txt")
    (data / "a.txt").write_bytes(b"aa")
    run()
    out = tmp_path / "out"
    leftovers = [
        out / "set1" / ".changelist.xml.x1y2.tmp",
        out / "set1" / "changelists" / ".changelist-00001.xml.staged",
        out / "set1" / "changelists" / ".changelist-00002.xml.staged.relink",
        out / ".well-known" / ".resourcesync.abc.tmp",
        out / ".resourcesync" / ".published.json.q.tmp",
    ]
    others = [
        out / "set1" / ".tmp",  # (a dot file, not a temporary one: the name is all ending)
        out / "set1" / "changelists" / "notes.tmp",  # (not a dot file)
        out / "set1" / "changelists" / ".staged.keep",
    ]
    for p in leftovers + others:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"?")
    run()
    assert [p for p in leftovers if p.exists()] == []
    assert all(p.exists() for p in others)
