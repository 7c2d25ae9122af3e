"""What a run costs a Source with a long history (issue 15.3: a re-run costs what changed):
the Change List Index and the Change List Archive, which name every list kept (thousands, one
every 10,000 changes, kept for good by default), are written when a list is closed or dropped,
not by every run that adds to the open list; a closed list whose file is gone is written again
all the same; the leftovers of a killed run are found in one walk. A Change Dump's packages
(one a run, kept for good by default) are read as far as the live dump's, and its archive is
written when a dump closes."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from resourcesync.errors import StateDamaged
from resourcesync.sitemap import read_document
from resourcesync.source.publish import publish
from resourcesync.source.setrun import SetRun
from resourcesync.source.state import SetState
from tests.source.history import Clock, check_history, read_change_dumps, replay
from tests.source.test_publish_retention import _config as config
from tests.source.test_publish_retention import _now as now

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


def dumping(tmp_path: Path, **kw: object) -> tuple[Path, Callable[[], None], Clock]:
    """A set of one file that publishes a Change Dump (closed every three packages), published
    once: its data folder, its next run and its clock."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "seed.txt").write_bytes(b"0")
    clock = Clock()
    cfg = config(
        tmp_path,
        capabilities=("resourcelist", "changelist", "changedump"),
        changedump_max_packages=3,
        **kw,
    )

    def run() -> None:
        publish(cfg, clock=clock)

    run()
    return data, run, clock


def package_rows(tmp_path: Path) -> list[tuple[int, str, str]]:
    db = sqlite3.connect(tmp_path / "out" / ".resourcesync" / "set1.sqlite")
    try:
        return db.execute(
            "SELECT id, from_, until FROM archive WHERE kind = 'changedump-package' ORDER BY id"
        ).fetchall()
    finally:
        db.close()


def test_the_change_dump_archive_is_written_when_a_dump_closes_and_the_dumps_hold_every_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Source that keeps its Change Dumps (the default) holds a package a run: the live dump
    is found from its own packages, the archive written when a dump closes, and what the
    dumps hold is, run after run, every change."""
    data, run, _ = dumping(tmp_path)
    written = Written(monkeypatch)
    out = tmp_path / "out" / "set1"
    for round_ in range(11):
        closed_before = len(list(out.glob("changedumps/changedump-*.xml")))
        del written.names[:]
        (data / "seed.txt").write_bytes(f"seed {round_}".encode())
        (data / f"new{round_}.txt").write_bytes(b"n")
        run()
        closed = len(list(out.glob("changedumps/changedump-*.xml")))
        assert ("changedump-archive.xml" in written.names) == (closed > closed_before), round_
        _, archived = read_document(out / "changedump-archive.xml")
        assert len(archived) == closed
        live_doc, live = read_document(out / "changedump.xml")
        assert 1 <= len(live) <= 3
        assert (
            live_doc.from_ == live[0].from_ == (archived[-1].until if archived else live[0].from_)
        )
        dumps = read_change_dumps(tmp_path / "out", DOCS, "set1")
        assert len(dumps) == round_ + 1  # every package, once
        for (a, _), (b, _) in itertools.pairwise(dumps):
            assert a.until is not None and a.from_ is not None and a.from_ < a.until == b.from_
        h = check_history(tmp_path / "out", DOCS, "set1")
        changes = [e for _, entries in dumps for e in entries]
        # The first package begins at the first Resource List: from it, the dumps' changes
        # replayed are the Source now.
        first_at, first = h.archived[0] if h.archived else h.resourcelist
        assert first_at == dumps[0][0].from_
        assert replay(first, changes, first_at) == h.current == now(data)
    # A run that found nothing to package writes neither the dump nor its archive.
    del written.names[:]
    run()
    assert not {"changedump.xml", "changedump-archive.xml"} & set(written.names)


def test_the_closed_dumps_packages_are_not_read_again_the_live_ones_are_checked_first(
    tmp_path: Path,
) -> None:
    """The packages of the closed dumps (a hundred thousand after a year of runs every five
    minutes) are not read by a run: one whose record is damaged stops nothing. One of the
    live dump's, which a run reads, stops the run before it writes anything."""
    data, run, _ = dumping(tmp_path)
    for round_ in range(7):
        (data / f"new{round_}.txt").write_bytes(b"n")
        run()
    rows = package_rows(tmp_path)
    assert len(rows) == 7  # two dumps closed (3 + 3), one package live
    state = tmp_path / "out" / ".resourcesync" / "set1.sqlite"
    db = sqlite3.connect(state)
    with db:
        db.execute("UPDATE archive SET from_ = 'yesterday' WHERE id = ?", (rows[0][0],))
    db.close()
    (data / "again.txt").write_bytes(b"n")
    run()
    _, live = read_document(tmp_path / "out" / "set1" / "changedump.xml")
    assert len(live) == 2
    out = tmp_path / "out" / "set1"
    before = {p: p.read_bytes() for p in out.rglob("*.xml")}
    db = sqlite3.connect(state)
    with db:
        db.execute(
            "UPDATE archive SET extra = '{cut' WHERE id = ?", (package_rows(tmp_path)[-1][0],)
        )
    db.close()
    (data / "once more.txt").write_bytes(b"n")
    with pytest.raises(StateDamaged, match="record of the changedump-package"):
        run()
    assert {p: p.read_bytes() for p in out.rglob("*.xml")} == before


def test_packages_after_a_clock_set_back_still_follow_one_another(tmp_path: Path) -> None:
    """The machine's clock set back an hour between two runs: the next package still begins
    where the last ended and ends after it begins, in a folder of its own (the live dump is
    found by reading its packages back from the newest)."""
    data, run, clock = dumping(tmp_path)
    for round_ in range(5):
        (data / f"new{round_}.txt").write_bytes(b"n")
        if round_ in (2, 3):
            clock.now -= timedelta(hours=1)
        run()
    dumps = read_change_dumps(tmp_path / "out", DOCS, "set1")
    assert len(dumps) == 5
    folders = {p.loc.rpartition("/")[0] for p, _ in dumps}
    assert len(folders) == 5
    for (a, _), (b, _) in itertools.pairwise(dumps):
        assert a.until is not None and a.from_ is not None and a.from_ < a.until == b.from_
    names = sorted(e.loc.rpartition("/")[2] for _, entries in dumps for e in entries)
    assert names == sorted(f"new{r}.txt" for r in range(5))


def test_the_packages_of_a_dump_let_go_are_forgotten_by_their_ids_or_else_by_their_times(
    tmp_path: Path,
) -> None:
    """A closed dump's `until` is its last package's, written in the same form: the packages up
    to that one are forgotten without reading the others; a state whose times were written in
    another form is read for them."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    with SetState(tmp_path / "state.sqlite") as state:
        for n in range(6):
            state.archive(
                "changedump-package",
                f"changedumps/{n}",
                f"http://example.org/{n}.zip",
                from_=t0 + timedelta(minutes=n),
                until=t0 + timedelta(minutes=n + 1),
            )
        state.forget_packages(until=t0 + timedelta(minutes=2))
        assert [p.path for p in state.archived("changedump-package")] == [
            f"changedumps/{n}" for n in range(2, 6)
        ]
        # Written by another hand: `+00:00`, not `Z`.
        state.db.execute("UPDATE archive SET until = replace(until, 'Z', '+00:00')")
        state.forget_packages(until=t0 + timedelta(minutes=4))
        assert [p.path for p in state.archived("changedump-package")] == [
            f"changedumps/{n}" for n in range(4, 6)
        ]
        state.forget_packages(folder="changedumps/5")
        assert [p.path for p in state.archived("changedump-package")] == ["changedumps/4"]
        assert state.live_packages(t0 + timedelta(minutes=4)) == state.archived(
            "changedump-package"
        )
        assert state.live_packages(t0 + timedelta(minutes=5)) == []


def test_an_archive_kept_as_written_is_reported_as_it_is(tmp_path: Path) -> None:
    """A run that keeps the Change List Archive and the Change Dump Archive as an earlier run
    wrote them reports them as written: an index when they were split."""
    data = tmp_path / "data"
    data.mkdir()
    clock = Clock()
    cfg = config(
        tmp_path,
        capabilities=("resourcelist", "changelist", "changedump"),
        changelist_max_entries=1,
        changedump_max_packages=1,
        max_entries=2,
    )
    for round_ in range(5):
        (data / f"f{round_}.txt").write_bytes(b"x")
        publish(cfg, clock=clock)
    out = tmp_path / "out" / "set1"
    for name in ("changelist-archive.xml", "changedump-archive.xml"):
        assert read_document(out / name)[0].index, name
    written = {
        d.path: d for r in publish(cfg, clock=clock).sets for d in r.documents
    }  # (nothing changed: both kept)
    for name in ("changelist-archive.xml", "changedump-archive.xml"):
        info = written[f"set1/{name}"]
        assert info.index, name
        _, parts = read_document(out / name)
        assert info.entries == sum(
            len(read_document(out / p.loc.rsplit("/", 1)[1])[1]) for p in parts
        )


def test_lists_a_state_was_given_by_another_hand_are_shown_by_the_next_run(tmp_path: Path) -> None:
    """The index and the archives are written when what they show is not what the state
    holds, however the state came to hold it (here closed Change Lists and a closed Change
    Dump written into it directly, as `bench_longrun.py` gives a history): not only when a
    run closed one."""
    data, run, _ = dumping(tmp_path)
    (data / "a.txt").write_bytes(b"a")
    run()
    out = tmp_path / "out" / "set1"
    assert not read_document(out / "changelist.xml")[0].index
    db = sqlite3.connect(tmp_path / "out" / ".resourcesync" / "set1.sqlite")
    with db:
        ((first, start),) = db.execute(
            "SELECT first_seq, from_ FROM changelists WHERE until IS NULL"
        ).fetchall()
        db.execute("DELETE FROM changelists")
        hours = [f"2025-12-31T{h:02d}:00:00Z" for h in (20, 21, 22, 23)]
        for a, b in itertools.pairwise([*hours, start]):
            db.execute(
                "INSERT INTO changelists (first_seq, last_seq, from_, until) VALUES (?, ?, ?, ?)",
                (first, first - 1, a, b),
            )
        db.execute(
            "INSERT INTO changelists (first_seq, last_seq, from_, until) VALUES (?, NULL, ?, NULL)",
            (first, start),
        )
        db.execute(
            "INSERT INTO archive (kind, path, url, from_, until) VALUES ('changedump', ?, ?, ?, ?)",
            (
                "changedumps/changedump-x.xml",
                DOCS + "set1/changedumps/changedump-x.xml",
                *hours[:2],
            ),
        )
    db.close()
    run()  # (nothing changed in the files)
    index, lists = read_document(out / "changelist.xml")
    assert index.index and len(lists) == 5
    assert all((out / e.loc.removeprefix(DOCS + "set1/")).exists() for e in lists)
    assert len(read_document(out / "changelist-archive.xml")[1]) == 4
    (dump,) = read_document(out / "changedump-archive.xml")[1]
    assert dump.loc.endswith("changedump-x.xml")
