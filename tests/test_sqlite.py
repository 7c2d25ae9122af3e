"""The state databases' connection (`resourcesync.sqlite`): a batch of rows is one
transaction, whether or not one is open around it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from resourcesync.sqlite import connect, database_of, scratch, transaction

SCHEMA = "CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v INTEGER);"


def test_a_batch_outside_a_transaction_is_all_or_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    db = connect(path, SCHEMA)
    db.executemany("INSERT INTO t VALUES (?, ?)", [("a", 1), ("b", 2)])
    assert not db.in_transaction  # committed: another connection sees the rows
    other = sqlite3.connect(path)
    assert other.execute("SELECT COUNT(*) FROM t").fetchone() == (2,)
    # The third row breaks the key: SQLite alone (autocommit) would keep the two before it.
    rows = (row for row in [("c", 3), ("d", 4), ("a", 5), ("e", 6)])  # a generator too
    with pytest.raises(sqlite3.IntegrityError) as caught:
        db.executemany("INSERT INTO t VALUES (?, ?)", rows)
    assert database_of(caught.value) == str(path)
    assert not db.in_transaction
    assert db.execute("SELECT k FROM t ORDER BY k").fetchall() == [("a",), ("b",)]
    assert other.execute("SELECT k FROM t ORDER BY k").fetchall() == [("a",), ("b",)]
    # The connection goes on as before.
    db.executemany("INSERT INTO t VALUES (?, ?)", [("c", 3)])
    assert other.execute("SELECT COUNT(*) FROM t").fetchone() == (3,)


def test_a_batch_inside_a_transaction_is_the_transactions(tmp_path: Path) -> None:
    db = connect(tmp_path / "s.sqlite", SCHEMA)
    with pytest.raises(RuntimeError), transaction(db):
        db.executemany("INSERT INTO t VALUES (?, ?)", [("a", 1), ("b", 2)])
        assert db.in_transaction  # not committed by the batch
        raise RuntimeError("the block fails")
    assert db.execute("SELECT COUNT(*) FROM t").fetchone() == (0,)
    with transaction(db):
        db.executemany("INSERT INTO t VALUES (?, ?)", [("a", 1), ("b", 2)])
    assert db.execute("SELECT COUNT(*) FROM t").fetchone() == (2,)


def test_a_batch_into_a_temporary_table(tmp_path: Path) -> None:
    """A run's plan lives in temporary tables of the state's connection: its batches take no
    lock on the state itself, which another process may be writing meanwhile."""
    path = tmp_path / "s.sqlite"
    db = connect(path, SCHEMA)
    db.execute("CREATE TEMP TABLE plan (uri TEXT UNIQUE)")
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another writer holds the state's write lock
    writer.execute("INSERT INTO t VALUES ('w', 1)")
    db.executemany("INSERT INTO plan VALUES (?)", [(f"u{i}",) for i in range(100)])
    writer.execute("COMMIT")
    assert db.execute("SELECT COUNT(*) FROM plan").fetchone() == (100,)
    assert db.execute("SELECT COUNT(*) FROM t").fetchone() == (1,)


def test_a_scratch_database_has_the_same_habits() -> None:
    """The planning tables of a copy whose state is not a file of its own (the fleet's) live
    in a private temporary database: its batches are one transaction each too."""
    db = scratch()
    db.execute("CREATE TABLE plan (uri TEXT UNIQUE)")
    with pytest.raises(sqlite3.IntegrityError):
        db.executemany("INSERT INTO plan VALUES (?)", [("a",), ("b",), ("a",)])
    assert not db.in_transaction
    assert db.execute("SELECT COUNT(*) FROM plan").fetchone() == (0,)
    db.executemany("INSERT INTO plan VALUES (?)", [("a",), ("b",)])
    assert db.execute("SELECT COUNT(*) FROM plan").fetchone() == (2,)
