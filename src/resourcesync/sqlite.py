"""The SQLite habits every state file shares: WAL, NORMAL sync, a schema, short transactions.

Ground floor: imports only errors.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from .errors import ResourceSyncError

__all__ = ["connect", "transaction"]


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
