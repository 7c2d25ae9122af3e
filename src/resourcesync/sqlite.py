"""The SQLite habits every state file shares: WAL, NORMAL sync, a schema, short transactions.

Ground floor: imports only errors.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import ResourceSyncError, StateDamaged, damaged_database, storage_failure

__all__ = [
    "connect",
    "connect_read_only",
    "damage",
    "healthy",
    "register",
    "scratch",
    "set_aside",
    "transaction",
]

#: The state databases this process opened last, each with what mends it when SQLite finds it
#: damaged (its owner's words: `sync --repair` for a copy's, a new baseline for a Source's).
#: A database an error comes from is one in use: among the last opened. (Bounded: a fleet
#: opens thousands over its life.)
_OPENED: dict[str, str] = {}
_KEPT = 16


class _Connection(sqlite3.Connection):
    """A connection that names its file on the errors of the statements it runs
    (`state_database`): SQLite's own name none, and a process may have several open."""

    _path: str | None = None

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        try:
            return super().execute(sql, parameters)
        except sqlite3.Error as exc:
            raise self._named(exc) from None

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        try:
            if self.in_transaction:
                return super().executemany(sql, parameters)
            # In autocommit mode SQLite commits each row as a transaction of its own: a
            # sync's plan of 20,000 rows cost twice what it costs in one (issue 15.1). One
            # transaction for the batch, which leaves nothing of itself when it fails.
            super().execute("BEGIN")
            try:
                cursor = super().executemany(sql, parameters)
                super().execute("COMMIT")
            except BaseException:
                if self.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        super().execute("ROLLBACK")
                raise
            return cursor
        except sqlite3.Error as exc:
            raise self._named(exc) from None

    def executescript(self, sql_script: str, /) -> sqlite3.Cursor:
        try:
            return super().executescript(sql_script)
        except sqlite3.Error as exc:
            raise self._named(exc) from None

    def close(self) -> None:
        try:
            super().close()
        except sqlite3.Error as exc:
            raise self._named(exc) from None

    def _named(self, exc: sqlite3.Error) -> sqlite3.Error:
        if getattr(exc, "state_database", None) is None:
            exc.state_database = self._path  # type: ignore[attr-defined]
        return exc


def _opened(db: sqlite3.Connection, path: Path | str) -> sqlite3.Connection:
    assert isinstance(db, _Connection)
    db._path = str(path)
    return db


def database_of(exc: BaseException) -> str | None:
    """The state database an SQLite error is of: the one whose statement raised it, else the
    one this process opened, when it opened one only."""
    named = getattr(exc, "state_database", None)
    if isinstance(named, str):
        return named
    return next(iter(_OPENED)) if len(_OPENED) == 1 else None


def register(path: Path | str, remedy: str) -> None:
    """`path` is a state database of this process, mended by `remedy` when damaged."""
    key = str(path)
    _OPENED.pop(key, None)
    _OPENED[key] = remedy
    while len(_OPENED) > _KEPT:
        del _OPENED[next(iter(_OPENED))]


def connect(
    path: Path,
    schema: str,
    *,
    error: type[ResourceSyncError] = ResourceSyncError,
    remedy: str = "",
) -> sqlite3.Connection:
    """Open (creating it and its folder when missing) a state database in autocommit mode,
    WAL journal, with `schema` applied. A file that is not a database is `StateDamaged`
    (`remedy` says what mends it), a disk that refuses it an `error`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    register(path, remedy)
    try:
        db = _opened(
            sqlite3.connect(path, timeout=30, isolation_level=None, factory=_Connection), path
        )
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(schema)
    except sqlite3.DatabaseError as exc:
        found = damage(exc, path)
        if found is not None:
            raise found from None
        # Its disk full or read-only: said as every command says it (the hint to free space).
        said = storage_failure(exc, path)
        if said is not None:  # the line names the database
            raise error(said[0], full=said[1]) from None
        raise error(f"cannot open the state database: {exc}", source=str(path)) from None
    return db


def scratch() -> sqlite3.Connection:
    """A private temporary database, for a run's planning tables where no state database
    holds them (SQLite spills it to a file: a plan of millions of URIs does not grow the
    process's memory), in autocommit mode with the state connections' habits (a batch of
    rows is one transaction)."""
    return sqlite3.connect("", isolation_level=None, factory=_Connection)


def damage(exc: BaseException, path: Path | str | None = None) -> StateDamaged | None:
    """`exc` as the one line that names the damaged state database and what mends it; None
    when `exc` is not SQLite finding a database damaged. Without `path`, the database is
    the one whose statement raised it, or found among those this process opened (each
    checked when there are several: SQLite's error does not name its file)."""
    if not damaged_database(exc):
        return None
    path = path if path is not None else getattr(exc, "state_database", None)
    if path is not None:
        found = [str(path)]
    else:
        opened = list(_OPENED)
        found = [p for p in opened if not healthy(p)] if len(opened) > 1 else opened
        found = found or opened
    if len(found) == 1:
        remedy = _OPENED.get(found[0], "")
        tail = f": {remedy}" if remedy else ""
        return StateDamaged(f"the state database is damaged ({exc}){tail}", source=found[0])
    where = f": one of {', '.join(found)}" if found else ""
    return StateDamaged(f"a state database is damaged ({exc}){where}")


def healthy(path: Path | str) -> bool:
    """Whether SQLite reads the whole of the database at `path` as sound (`PRAGMA
    quick_check`: every page and record, in time linear in its size; not the indexes' match
    with their tables). A missing file is not damaged."""
    if not os.path.exists(path):
        return True
    try:
        db = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=ro", uri=True, timeout=30)
    except sqlite3.DatabaseError as exc:
        return not damaged_database(exc)
    try:
        rows = db.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as exc:
        return not damaged_database(exc)
    finally:
        db.close()
    return rows == [("ok",)]


def set_aside(path: Path) -> Path:
    """Move a damaged state database (and its WAL files) out of the way, beside it, under a
    name that says so and when: kept for whoever wants to look into it, never read again.
    Returns its new name."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    for suffix in ("-wal", "-shm"):
        extra = path.with_name(path.name + suffix)
        if extra.exists():
            os.replace(extra, aside.with_name(aside.name + suffix))
    os.replace(path, aside)
    return aside


def connect_read_only(
    path: Path,
    *,
    error: type[ResourceSyncError] = ResourceSyncError,
    temp: bool = False,
    remedy: str = "",
) -> sqlite3.Connection:
    """Open a state database to read (`audit`, `ls`, a dry run): never created nor migrated.
    Where its folder can be written it is opened as it is and refuses writes (`query_only`;
    `temp`: but for temporary tables, which a dry run plans on, written only by discipline),
    so that SQLite removes its WAL files at close as after any run. On media that cannot be
    written (a read-only mount, a snapshot) it is opened read-only, and as immutable when
    SQLite cannot make a WAL database's shared-memory file there."""
    uri = path.absolute().as_uri()
    writable = os.access(path.parent, os.W_OK)
    register(path, remedy)
    modes = ["mode=rw"] if writable else ["mode=ro", "mode=ro&immutable=1"]
    why: sqlite3.DatabaseError | None = None
    for mode in modes:
        db = None
        try:
            db = _opened(
                sqlite3.connect(
                    f"{uri}?{mode}",
                    uri=True,
                    timeout=30,
                    isolation_level=None,
                    factory=_Connection,
                ),
                path,
            )
            if writable and not temp:
                db.execute("PRAGMA query_only = ON")
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        except sqlite3.DatabaseError as exc:
            if db is not None:
                db.close()
            why = exc
            continue
        return db
    found = damage(why, path) if why is not None else None
    if found is not None:
        raise found
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
