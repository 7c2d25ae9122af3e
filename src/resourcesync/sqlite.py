"""The SQLite habits every state file shares: WAL, NORMAL sync, a schema, short transactions.

Ground floor: imports only errors.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from .errors import ResourceSyncError

__all__ = ["connect", "connect_read_only", "transaction"]


def connect(
    path: Path, schema: str, *, error: type[ResourceSyncError] = ResourceSyncError
) -> sqlite3.Connection:
    """Open (creating it and its folder when missing) a state database in autocommit mode,
    WAL journal, with `schema` applied. A file that is not a database is an `error`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        db = sqlite3.connect(path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(schema)
    except sqlite3.DatabaseError as exc:
        raise error(f"cannot open the state database: {exc}", source=str(path)) from None
    return db


def connect_read_only(
    path: Path, *, error: type[ResourceSyncError] = ResourceSyncError
) -> sqlite3.Connection:
    """Open a state database to read only (`audit`, `ls`): never created, migrated nor written.
    On media that cannot be written (a read-only mount, a snapshot), where SQLite cannot make a
    WAL database's shared-memory file, it is opened as immutable: nothing can change it there."""
    uri = path.absolute().as_uri()
    modes = ["mode=ro"]
    if not os.access(path.parent, os.W_OK):
        modes.append("mode=ro&immutable=1")
    why: sqlite3.DatabaseError | None = None
    for mode in modes:
        db = None
        try:
            db = sqlite3.connect(f"{uri}?{mode}", uri=True, timeout=30, isolation_level=None)
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        except sqlite3.DatabaseError as exc:
            if db is not None:
                db.close()
            why = exc
            continue
        return db
    raise error(f"cannot open the state database: {why}", source=str(path))


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE … COMMIT, rolled back when the block raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
