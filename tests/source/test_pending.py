"""A re-run's rows kept pending (source/state.py): what a re-run changed is written to
`pending` in the order it comes, read through the view `snapshot` over `resources`, and folded
into `resources` when the Resource List is written or when the rows grow past `FOLD_AT`."""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from resourcesync.source.inventory import DirectoryInventory
from resourcesync.source.publish import publish
from resourcesync.source.scan import Scan, ScanResult
from resourcesync.source.state import SetState, StateError
from tests.source.test_publish_policy import config

BASE = "http://example.org/data/"


@pytest.fixture(autouse=True)
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written by the test count as settled (not racily clean): read when they change."""
    monkeypatch.setattr("resourcesync.source.scan.RACY_NS", 0)


def rescan(state: SetState, data: Path) -> ScanResult:
    return Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)


def readers(state: SetState) -> tuple[Any, ...]:
    """Everything the snapshot's readers give: the Resource List entries (as values and as
    the kept XML), the rows dump packages are made from, the count."""
    return (
        [(r.loc, r.lastmod, r.length, r.type, r.hashes) for r in state.resources()],
        list(state.resource_xml()),
        list(state.resource_rows()),
        state.count(),
    )


def fresh(tmp_path: Path, data: Path) -> tuple[Any, ...]:
    """The readers of a state made by one first scan of the tree as it is now."""
    path = tmp_path / "fresh.sqlite"
    with SetState(path) as state:
        rescan(state, data)
        assert state.pending_rows() == 0  # a first scan writes `resources` itself
        out = readers(state)
    for p in tmp_path.glob("fresh.sqlite*"):
        p.unlink()
    return out


def table(state: SetState, name: str) -> dict[str, tuple[Any, ...]]:
    return {row[0]: row for row in state.db.execute(f"SELECT key, uri, hashes FROM {name}")}


def tree(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    for d in ("a", "b", "b/c"):
        (data / d).mkdir(parents=True)
        for i in range(20):
            (data / d / f"f{i:02d}.txt").write_text(f"{d} {i}")
    return data


def test_a_rerun_writes_what_changed_pending_and_is_read_through_it(tmp_path: Path) -> None:
    data = tree(tmp_path)
    with SetState(tmp_path / "state.sqlite") as state:
        rescan(state, data)
        before = table(state, "resources")
        assert state.get("schema") == "1"
        (data / "a" / "f01.txt").write_text("changed")
        (data / "a" / "f02.txt").unlink()
        (data / "a" / "new.txt").write_text("new")
        shutil.rmtree(data / "b" / "c")
        result = rescan(state, data)
        assert (result.created, result.updated, result.deleted) == (1, 1, 21)
        # `resources` is as the first scan left it; the changes are the pending rows, a
        # deletion a row without a URI.
        assert table(state, "resources") == before
        pending = table(state, "pending")
        assert sorted(pending) == sorted(
            ["a/f01.txt", "a/f02.txt", "a/new.txt", *(f"b/c/f{i:02d}.txt" for i in range(20))]
        )
        assert [k for k, (_, uri, _) in pending.items() if uri is None] == [
            "a/f02.txt",
            *(f"b/c/f{i:02d}.txt" for i in range(20)),
        ]
        # Read through: every reader gives what a first scan of the tree now gives.
        assert readers(state) == fresh(tmp_path, data)
        assert state.get("schema") == "2"
        # Folded: the same snapshot, from `resources` alone.
        with state.transaction():
            state.fold()
        assert state.pending_rows() == 0
        assert state.get("schema") == "1"
        assert "a/f02.txt" not in table(state, "resources")
        assert readers(state) == fresh(tmp_path, data)
        again = rescan(state, data)
        assert (again.created, again.updated, again.deleted, again.rehashed) == (0, 0, 0, 0)
        assert state.pending_rows() == 0


def test_a_key_deleted_and_created_again_while_pending(tmp_path: Path) -> None:
    data = tree(tmp_path)
    with SetState(tmp_path / "state.sqlite") as state:
        rescan(state, data)
        (data / "a" / "f03.txt").unlink()
        assert rescan(state, data).deleted == 1
        (data / "a" / "f03.txt").write_text("back")
        assert rescan(state, data).created == 1
        (data / "a" / "new.txt").write_text("new")
        assert rescan(state, data).created == 1
        (data / "a" / "new.txt").unlink()
        assert rescan(state, data).deleted == 1
        assert state.pending_rows() == 2  # one row a key: the last
        assert readers(state) == fresh(tmp_path, data)


@pytest.mark.parametrize("fold_at", [20_000, 7, 0])
def test_random_changes_read_through_pending_rows_as_a_first_scan_makes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fold_at: int
) -> None:
    """Runs of random changes, the pending rows folded never, every few runs, or every run
    (by `FOLD_AT`) and now and then by hand: after each run the readers give what a first
    scan gives."""
    monkeypatch.setattr("resourcesync.source.scan.FOLD_AT", fold_at)
    rng = random.Random(fold_at)
    data = tmp_path / "data"
    names = [f"{d}f{i}" for d in ("", "x/", "x/y/", "z/") for i in range(8)]

    def write(name: str) -> None:
        p = data / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rng.randbytes(rng.randrange(0, 40)))

    for name in rng.sample(names, 16):
        write(name)
    with SetState(tmp_path / "state.sqlite") as state:
        rescan(state, data)
        for step in range(40):
            for _ in range(rng.randrange(1, 5)):
                existing = [p for p in data.rglob("*") if p.is_file()]
                op = rng.random()
                if op < 0.5 or not existing:
                    write(rng.choice(names))
                elif op < 0.8:
                    rng.choice(existing).unlink()
                else:
                    shutil.rmtree(data / rng.choice(["x", "x/y", "z"]), ignore_errors=True)
            result = rescan(state, data)
            if rng.random() < 0.1:
                with state.transaction():
                    state.fold()
            assert readers(state) == fresh(tmp_path, data), step
            assert result.resources == state.count()
            assert state.pending_rows() <= fold_at
            assert state.get("schema") == ("2" if state.pending_rows() else "1")


def test_an_earlier_resourcesync_refuses_a_state_with_pending_rows(tmp_path: Path) -> None:
    """One from before `pending` reads `resources` alone: it would publish the snapshot as it
    was before the pending rows. The format mark is 2 while there are any, which it refuses
    (it reads up to 1, as this one reads up to 2); 1 once folded, which it reads as its own."""
    data = tree(tmp_path)
    path = tmp_path / "state.sqlite"
    with SetState(path) as state:
        rescan(state, data)
        (data / "a" / "f01.txt").write_text("changed")
        rescan(state, data)

    def mark() -> str:
        db = sqlite3.connect(path)
        try:
            return str(db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0])
        finally:
            db.close()

    assert int(mark()) > 1
    with SetState(path) as state, state.transaction():
        state.fold()
    assert mark() == "1"
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = '3' WHERE key = 'schema'")
    db.commit()
    db.close()
    with pytest.raises(StateError, match=r"newer resourcesync \(format 3\)"):
        SetState(path)


def test_a_dry_run_leaves_no_pending_row(tmp_path: Path) -> None:
    data = tree(tmp_path)
    with SetState(tmp_path / "state.sqlite") as state:
        rescan(state, data)
        (data / "a" / "f01.txt").write_text("changed")
        result = Scan(state).run(
            DirectoryInventory(data, BASE), ["md5"], uri_base=BASE, dry_run=True
        )
        assert result.updated == 1
        assert state.pending_rows() == 0
        assert state.get("schema") == "1"


def test_the_resource_list_folds_the_pending_rows(tmp_path: Path) -> None:
    """Between two Resource Lists a re-run's rows stay pending (the Resource List stays as it
    was written); the run that writes the next one folds them first, and its entries are
    the snapshot's. A Resource Dump written meanwhile packages the snapshot read through."""
    data = tree(tmp_path)
    state_file = config(tmp_path, "3-changes").state_file(config(tmp_path, "3-changes").sets[0])
    publish(config(tmp_path, "3-changes"))
    live = tmp_path / "out" / "set1" / "resourcelist.xml"
    first = live.read_bytes()
    (data / "a" / "f01.txt").write_text("changed")
    publish(config(tmp_path, "3-changes"))
    assert live.read_bytes() == first
    with SetState(state_file) as state:
        assert state.pending_rows() == 1
    (data / "a" / "f02.txt").write_text("changed")
    (data / "a" / "f03.txt").unlink()
    publish(config(tmp_path, "3-changes"))
    assert live.read_bytes() != first
    with SetState(state_file) as state:
        assert state.pending_rows() == 0
        entries = b"".join(state.resource_xml())
    assert entries in live.read_bytes()
    assert b"a/f03.txt" not in live.read_bytes()
    assert b"a/f01.txt" in live.read_bytes()


def test_few_scattered_changes_write_few_pages(tmp_path: Path) -> None:
    """Fifty changes spread evenly over 4,000 files write their pending rows, journal entries
    and listings' deltas: a few dozen pages, not a page of `resources` for each change."""
    data = tmp_path / "data"
    for d in range(4):
        (data / f"d{d}").mkdir(parents=True)
        for i in range(1000):
            (data / f"d{d}" / f"f{i:04d}.txt").write_text(f"file {d} {i} " + "x" * 200)
    wal = tmp_path / "state.sqlite-wal"
    with SetState(tmp_path / "state.sqlite") as state:
        rescan(state, data)
        pages = state.db.execute("PRAGMA page_count").fetchone()[0]
        for run in range(3):
            for n in range(50):
                d, i = divmod(n * 80 + run, 1000)
                (data / f"d{d}" / f"f{i:04d}.txt").write_text(f"changed in run {run}")
            state.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            result = rescan(state, data)
            assert result.updated == 50
            frames = wal.stat().st_size // (4096 + 24)
            assert frames < 30, (run, frames, pages)
        assert readers(state) == fresh(tmp_path, data)
