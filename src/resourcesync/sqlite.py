"""The SQLite habits every state file shares: WAL, NORMAL sync, a schema, short transactions.

Ground floor: imports only errors.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from .errors import ResourceSyncError, storage_failure

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
        # Its disk full or read-only: said as every command says it (the hint to free space).
        said = storage_failure(exc)
        why = said[0] if said is not None else f"cannot open the state database: {exc}"
        raise error(why, source=str(path)) from None
    return db


def connect_read_only(
    path: Path, *, error: type[ResourceSyncError] = ResourceSyncError, temp: bool = False
) -> sqlite3.Connection:
    """Open a state database to read (`audit`, `ls`, a dry run): never created nor migrated.
    Where its folder can be written it is opened as it is and refuses writes (`query_only`;
    `temp`: but for temporary tables, which a dry run plans on, written only by discipline),
    so that SQLite removes its WAL files at close as after any run. On media that cannot be
    written (a read-only mount, a snapshot) it is opened read-only, and as immutable when
    SQLite cannot make a WAL database's shared-memory file there."""
    uri = path.absolute().as_uri()
    writable = os.access(path.parent, os.W_OK)
    modes = ["mode=rw"] if writable else ["mode=ro", "mode=ro&immutable=1"]
    why: sqlite3.DatabaseError | None = None
    for mode in modes:
        db = None
        try:
            db = sqlite3.connect(f"{uri}?{mode}", uri=True, timeout=30, isolation_level=None)
            if writable and not temp:
                db.execute("PRAGMA query_only = ON")
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
