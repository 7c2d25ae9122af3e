"""A fleet copy's state in the fleet's store (issue 12): the Destination's `CopyState`, kept in
`fleet_copy_*` tables of the same database as the registry, keyed by the Source's name. In a
cluster that database is PostgreSQL, so any worker on any machine carries a copy on where
another left off (even one killed by -9 mid-sync): the copy's files are on the shared file
system, its state in the shared database, nothing of it on the worker.

One schema, both backends: the SQL is written once with `?` placeholders (the PostgreSQL store
translates them), upserts are `INSERT … ON CONFLICT … DO UPDATE`, which SQLite and PostgreSQL
both speak; URIs sort by their bytes on both (`COLLATE BINARY`, which PostgreSQL reads as
"C"), whatever the database's locale. The planning scratch of a run (`plan`, `seen`,
`claims`) is a private temporary SQLite database on the worker: it lives for one run only and
never crosses the network.

Upgrading: a copy synced before its state moved here (an embedded fleet turned distributed, or
a copy made with `resourcesync sync`) has `DEST/.resourcesync/state.sqlite`; the first run
imports it whole (no new baseline) and renames the file so that a stale copy of the state is
never read again.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import sqlite as sqlite_habits
from ..destination.state import (
    CHANGED_LATER,
    CHANGED_TO,
    Cursor,
    DestinationState,
    Held,
    Known,
    changed_column,
    column_time,
    expected_column,
    known_of,
    links_column,
    located,
    path_key,
    reading,
    resource_row,
    time_kept,
)
from ..errors import StateDamaged
from ..model import Link
from ..w3cdt import format_w3c

if TYPE_CHECKING:
    from .store import SQLStore

__all__ = ["COPY_SCHEMA", "COPY_TABLES", "StoreCopyState"]

COPY_SCHEMA = """
CREATE TABLE IF NOT EXISTS fleet_copy_resource (
  copy_name TEXT NOT NULL,
  uri TEXT COLLATE BINARY NOT NULL,
  path TEXT NOT NULL,
  path_key TEXT NOT NULL,
  length BIGINT,
  hashes TEXT NOT NULL,
  lastmod TEXT,
  etag TEXT,
  last_modified TEXT,
  set_key TEXT NOT NULL,
  links TEXT,
  changed TEXT,
  PRIMARY KEY (copy_name, uri)
);
CREATE INDEX IF NOT EXISTS fleet_copy_resource_key ON fleet_copy_resource (copy_name, path_key);
CREATE INDEX IF NOT EXISTS fleet_copy_resource_set ON fleet_copy_resource (copy_name, set_key, uri);
CREATE TABLE IF NOT EXISTS fleet_copy_cursor (
  copy_name TEXT NOT NULL,
  set_key TEXT NOT NULL,
  datetime TEXT,
  uri TEXT,
  baseline_at TEXT,
  updated TEXT,
  PRIMARY KEY (copy_name, set_key)
);
CREATE TABLE IF NOT EXISTS fleet_copy_pending (
  copy_name TEXT NOT NULL,
  uri TEXT COLLATE BINARY NOT NULL,
  datetime TEXT,
  set_key TEXT NOT NULL,
  PRIMARY KEY (copy_name, uri)
);
CREATE TABLE IF NOT EXISTS fleet_copy_undated (
  copy_name TEXT NOT NULL,
  uri TEXT COLLATE BINARY NOT NULL,
  sig TEXT NOT NULL,
  set_key TEXT NOT NULL,
  PRIMARY KEY (copy_name, uri)
);
CREATE TABLE IF NOT EXISTS fleet_copy_failed (
  copy_name TEXT NOT NULL,
  uri TEXT COLLATE BINARY NOT NULL,
  expected TEXT NOT NULL,
  reason TEXT NOT NULL,
  set_key TEXT NOT NULL,
  PRIMARY KEY (copy_name, uri)
);
CREATE TABLE IF NOT EXISTS fleet_copy_meta (
  copy_name TEXT NOT NULL,
  key TEXT NOT NULL,
  value TEXT NOT NULL,
  PRIMARY KEY (copy_name, key)
);
"""

#: Columns added after the first schema, for stores created before them: (table, column, type).
COPY_ADDED = (
    ("fleet_copy_resource", "links", "TEXT"),
    ("fleet_copy_resource", "changed", "TEXT"),
)

#: Every table holding a copy's state (a removed Source's rows go from each).
COPY_TABLES = (
    "fleet_copy_resource",
    "fleet_copy_cursor",
    "fleet_copy_pending",
    "fleet_copy_undated",
    "fleet_copy_failed",
    "fleet_copy_meta",
)

_UPSERT_RESOURCE = (
    "INSERT INTO fleet_copy_resource (copy_name, uri, path, length, hashes, lastmod, "
    "etag, last_modified, set_key, path_key, links, changed) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (copy_name, uri) DO UPDATE SET path = excluded.path, "
    "path_key = excluded.path_key, length = excluded.length, hashes = excluded.hashes, "
    "lastmod = excluded.lastmod, etag = excluded.etag, "
    "last_modified = excluded.last_modified, set_key = excluded.set_key, links = excluded.links, "
    "changed = " + CHANGED_LATER.format(table="fleet_copy_resource")
)
_UPSERT_CURSOR = (
    "INSERT INTO fleet_copy_cursor (copy_name, set_key, datetime, uri, baseline_at, updated) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (copy_name, set_key) DO UPDATE SET "
    "datetime = excluded.datetime, uri = excluded.uri, baseline_at = excluded.baseline_at, "
    "updated = excluded.updated"
)
_UPSERT_PENDING = (
    "INSERT INTO fleet_copy_pending (copy_name, uri, datetime, set_key) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (copy_name, uri) DO UPDATE SET datetime = excluded.datetime, "
    "set_key = excluded.set_key"
)
_UPSERT_UNDATED = (
    "INSERT INTO fleet_copy_undated (copy_name, uri, sig, set_key) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (copy_name, uri) DO UPDATE SET sig = excluded.sig, set_key = excluded.set_key"
)
_UPSERT_FAILED = (
    "INSERT INTO fleet_copy_failed (copy_name, uri, expected, reason, set_key) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (copy_name, uri) DO UPDATE SET "
    "expected = excluded.expected, reason = excluded.reason, set_key = excluded.set_key"
)
_UPSERT_META = (
    "INSERT INTO fleet_copy_meta (copy_name, key, value) VALUES (?, ?, ?) "
    "ON CONFLICT (copy_name, key) DO UPDATE SET value = excluded.value"
)

#: Rows per page when a set's URIs are read, and per statement when rows are written.
_PAGE = 500

#: What the local state file is renamed to once imported.
IMPORTED_SUFFIX = ".imported-to-fleet-db"


def _resource_row(name: str, row: Sequence[Any]) -> tuple[Any, ...]:
    columns = resource_row(row)
    # resource_row gives the path where SQLite computes its key: here it is computed in Python.
    return (name, *columns[:8], path_key(columns[8]), *columns[9:])


class StoreCopyState:
    """The state of the copy of Source `name`, in `store`'s database. `close()` closes the
    run's scratch only: the store belongs to whoever opened it."""

    def __init__(self, store: SQLStore, name: str) -> None:
        self.store = store
        self.name = name
        # A private temporary database SQLite spills to disk, so a plan of millions of URIs
        # does not grow the worker's memory (its batches one transaction each, as the
        # state's: each row its own was half a baseline plan's inserts).
        self._scratch = sqlite_habits.scratch()

    # -- plumbing -------------------------------------------------------------------------

    def _q(self, sql: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        return self.store._execute(sql, params)

    def scratch(self) -> sqlite3.Connection:
        return self._scratch

    def close(self) -> None:
        self._scratch.close()

    def __enter__(self) -> StoreCopyState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        return self.store._transaction()

    # -- resources ------------------------------------------------------------------------

    def owner(self, key: str) -> str | None:
        rows = self._q(
            "SELECT uri FROM fleet_copy_resource WHERE copy_name = ? AND path_key = ? LIMIT 1",
            (self.name, key),
        )
        return str(rows[0][0]) if rows else None

    def known(self, uri: str) -> Known | None:
        rows = self._q(
            "SELECT uri, path, length, hashes, etag, last_modified, links, lastmod, changed FROM "
            "fleet_copy_resource WHERE copy_name = ? AND uri = ?",
            (self.name, uri),
        )
        if not rows:
            return None
        try:
            return known_of(rows[0])
        except StateDamaged as exc:
            raise located(exc, self._where()) from None

    def _where(self) -> str:
        return f"{self.store.where()} (the copy of {self.name})"

    def record(
        self,
        uri: str,
        path: str,
        length: int | None,
        hashes: dict[str, str],
        lastmod: datetime | None,
        etag: str | None,
        last_modified: str | None,
        set_key: str,
        links: Sequence[Link] | None = None,
        changed: datetime | None = None,
    ) -> None:
        self.record_many(
            [(uri, path, length, hashes, lastmod, etag, last_modified, set_key, links, changed)]
        )

    def mark_changed(self, rows: Sequence[tuple[str, datetime]]) -> None:
        if not rows:
            return
        with self.transaction():
            self.store._executemany(
                f"UPDATE fleet_copy_resource SET changed = {CHANGED_TO} "
                "WHERE copy_name = ? AND uri = ?",
                [(*[changed_column(when)] * 3, self.name, uri) for uri, when in rows],
            )

    def set_links(self, uri: str, links: Sequence[Link] | None) -> None:
        self._q(
            "UPDATE fleet_copy_resource SET links = ? WHERE copy_name = ? AND uri = ?",
            (links_column(links), self.name, uri),
        )

    def relocate(self, uri: str, path: str) -> None:
        self._q(
            "UPDATE fleet_copy_resource SET path = ?, path_key = ? WHERE copy_name = ? AND uri = ?",
            (path, path_key(path), self.name, uri),
        )

    def rekey(self, old: str, new: str, set_key: str | None) -> None:
        with self.transaction():
            self._q(
                "UPDATE fleet_copy_resource SET uri = ?, set_key = COALESCE(?, set_key) "
                "WHERE copy_name = ? AND uri = ?",
                (new, set_key, self.name, old),
            )
            self._delete_uris(("fleet_copy_pending", "fleet_copy_failed"), [old])

    def record_many(self, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        with self.transaction():
            self.store._executemany(_UPSERT_RESOURCE, [_resource_row(self.name, r) for r in rows])
            self._delete_uris(("fleet_copy_failed", "fleet_copy_pending"), [r[0] for r in rows])

    def _delete_uris(self, tables: Sequence[str], uris: Sequence[str]) -> None:
        for i in range(0, len(uris), _PAGE):
            chunk = list(uris[i : i + _PAGE])
            marks = ", ".join("?" * len(chunk))
            for table in tables:
                self._q(
                    f"DELETE FROM {table} WHERE copy_name = ? AND uri IN ({marks})",
                    (self.name, *chunk),
                )

    def forget(self, uri: str) -> None:
        with self.transaction():
            self._delete_uris(
                ("fleet_copy_resource", "fleet_copy_pending", "fleet_copy_failed"), [uri]
            )

    def _paged(self, sql: str, params: Sequence[Any]) -> Iterator[Sequence[Any]]:
        """Rows of `sql` (which selects `uri` first and ends `AND uri > ? ORDER BY uri LIMIT ?`),
        page by page: flat memory for a copy of any size."""
        after = ""
        while True:
            page = self._q(sql, (*params, after, _PAGE))
            yield from page
            if len(page) < _PAGE:
                return
            after = page[-1][0]

    def uris(self, set_key: str) -> Iterator[str]:
        for row in self._paged(
            "SELECT uri FROM fleet_copy_resource WHERE copy_name = ? AND set_key = ? "
            "AND uri > ? ORDER BY uri LIMIT ?",
            (self.name, set_key),
        ):
            yield row[0]

    def all_known(self) -> Iterator[Known]:
        for r in self._paged(
            "SELECT uri, path, length, hashes, etag, last_modified, links, lastmod, changed "
            "FROM fleet_copy_resource WHERE copy_name = ? AND uri > ? ORDER BY uri LIMIT ?",
            (self.name,),
        ):
            try:
                known = known_of(r)
            except StateDamaged as exc:
                raise located(exc, self._where()) from None
            yield known

    def held(self, set_key: str) -> Iterator[Held]:
        for uri, path, length, lastmod in self._paged(
            "SELECT uri, path, length, lastmod FROM fleet_copy_resource WHERE copy_name = ? "
            "AND set_key = ? AND uri > ? ORDER BY uri LIMIT ?",
            (self.name, set_key),
        ):
            # As SQLite's `julianday` makes it in a copy's own state: no time when unreadable.
            when = time_kept(lastmod)
            yield uri, path, length, lastmod, when.timestamp() if when else None

    def count(self, set_key: str | None = None) -> int:
        sql = "SELECT count(*) FROM fleet_copy_resource WHERE copy_name = ?"
        args: tuple[str, ...] = (self.name,)
        if set_key is not None:
            sql, args = sql + " AND set_key = ?", (*args, set_key)
        rows = self._q(sql, args)
        return int(rows[0][0])

    # -- cursor ---------------------------------------------------------------------------

    def cursor(self, set_key: str) -> Cursor | None:
        rows = self._q(
            "SELECT datetime, uri FROM fleet_copy_cursor WHERE copy_name = ? AND set_key = ?",
            (self.name, set_key),
        )
        if not rows or rows[0][0] is None:
            return None
        with reading(self._where()):
            when = column_time(rows[0][0], "the cursor's time", f"set {set_key}")
        return Cursor(when, rows[0][1] or "")

    def baseline_at(self, set_key: str) -> datetime | None:
        rows = self._q(
            "SELECT baseline_at FROM fleet_copy_cursor WHERE copy_name = ? AND set_key = ?",
            (self.name, set_key),
        )
        if not rows or not rows[0][0]:
            return None
        with reading(self._where()):
            return column_time(rows[0][0], "the time of its last baseline", f"set {set_key}")

    def set_cursor(
        self, set_key: str, cursor: Cursor, *, baseline_at: datetime | None = None
    ) -> None:
        at = baseline_at or self.baseline_at(set_key)
        self._q(
            _UPSERT_CURSOR,
            (
                self.name,
                set_key,
                format_w3c(cursor.datetime),
                cursor.uri,
                format_w3c(at) if at is not None else None,
                format_w3c(datetime.now().astimezone()),
            ),
        )

    def reset(self, set_key: str) -> None:
        self._q(
            "DELETE FROM fleet_copy_cursor WHERE copy_name = ? AND set_key = ?",
            (self.name, set_key),
        )

    def clear_outstanding(self, set_key: str) -> None:
        with self.transaction():
            for table in ("fleet_copy_failed", "fleet_copy_pending"):
                self._q(
                    f"DELETE FROM {table} WHERE copy_name = ? AND set_key = ?",
                    (self.name, set_key),
                )

    # -- undated changes, pending deletions and failures --------------------------------

    def undated_sig(self, uri: str) -> str | None:
        rows = self._q(
            "SELECT sig FROM fleet_copy_undated WHERE copy_name = ? AND uri = ?", (self.name, uri)
        )
        return str(rows[0][0]) if rows else None

    def pend_delete(self, uri: str, when: datetime | None, set_key: str) -> None:
        self._q(_UPSERT_PENDING, (self.name, uri, format_w3c(when) if when else None, set_key))

    def pending_deletes(self, set_key: str | None = None) -> list[str]:
        if set_key is None:
            rows = self._q(
                "SELECT uri FROM fleet_copy_pending WHERE copy_name = ? ORDER BY uri", (self.name,)
            )
        else:
            rows = self._q(
                "SELECT uri FROM fleet_copy_pending WHERE copy_name = ? AND set_key = ? "
                "ORDER BY uri",
                (self.name, set_key),
            )
        return [r[0] for r in rows]

    def fail(self, uri: str, expected: dict[str, Any], reason: str, set_key: str) -> None:
        self._q(
            _UPSERT_FAILED, (self.name, uri, json.dumps(expected, sort_keys=True), reason, set_key)
        )

    def failures(self, set_key: str) -> list[tuple[str, dict[str, Any], str]]:
        with reading(self._where()):
            return [
                (r[0], expected_column(r[1], r[0]), r[2])
                for r in self._q(
                    "SELECT uri, expected, reason FROM fleet_copy_failed WHERE copy_name = ? "
                    "AND set_key = ? ORDER BY uri",
                    (self.name, set_key),
                )
            ]

    def has_failure(self, uri: str) -> bool:
        return bool(
            self._q(
                "SELECT 1 FROM fleet_copy_failed WHERE copy_name = ? AND uri = ?", (self.name, uri)
            )
        )

    def clear_failure(self, uri: str) -> None:
        self._q("DELETE FROM fleet_copy_failed WHERE copy_name = ? AND uri = ?", (self.name, uri))

    # -- with the run's plan (the scratch, local to this worker) -------------------------

    def _in_scratch(self, sql: str, uris: list[str]) -> set[str]:
        """Which of `uris` the scratch query `sql` (… `uri IN ({marks})`) selects."""
        found: set[str] = set()
        for i in range(0, len(uris), _PAGE):
            chunk = uris[i : i + _PAGE]
            marks = ", ".join("?" * len(chunk))
            found.update(r[0] for r in self._scratch.execute(sql.format(marks=marks), chunk))
        return found

    def unseen(self, set_key: str) -> list[str]:
        out: list[str] = []
        page: list[str] = []
        for uri in self.uris(set_key):
            page.append(uri)
            if len(page) == _PAGE:
                seen = self._in_scratch("SELECT uri FROM seen WHERE uri IN ({marks})", page)
                out += [u for u in page if u not in seen]
                page = []
        seen = self._in_scratch("SELECT uri FROM seen WHERE uri IN ({marks})", page)
        out += [u for u in page if u not in seen]
        return out

    def _outstanding(self) -> list[str]:
        """The URIs with a remembered failure or pending deletion (few, in any healthy copy)."""
        rows = self._q(
            "SELECT uri FROM fleet_copy_failed WHERE copy_name = ? UNION "
            "SELECT uri FROM fleet_copy_pending WHERE copy_name = ?",
            (self.name, self.name),
        )
        return [r[0] for r in rows]

    def supersede_kept(self) -> None:
        kept = self._in_scratch(
            "SELECT uri FROM plan WHERE action = 'keep' AND uri IN ({marks})", self._outstanding()
        )
        if kept:
            with self.transaction():
                self._delete_uris(("fleet_copy_failed", "fleet_copy_pending"), sorted(kept))

    def remember_undated(self, set_key: str) -> None:
        failed = {
            r[0]
            for r in self._q("SELECT uri FROM fleet_copy_failed WHERE copy_name = ?", (self.name,))
        }
        rows = [
            (self.name, uri, sig, set_key)
            for uri, sig in self._scratch.execute("SELECT uri, sig FROM plan WHERE sig IS NOT NULL")
            if uri not in failed
        ]
        if rows:
            with self.transaction():
                self.store._executemany(_UPSERT_UNDATED, rows)

    # -- the copy's own notes -------------------------------------------------------------

    def get(self, key: str) -> str | None:
        rows = self._q(
            "SELECT value FROM fleet_copy_meta WHERE copy_name = ? AND key = ?", (self.name, key)
        )
        return str(rows[0][0]) if rows else None

    def put(self, key: str, value: str) -> None:
        self._q(_UPSERT_META, (self.name, key, value))

    def drop(self, key: str) -> None:
        self._q("DELETE FROM fleet_copy_meta WHERE copy_name = ? AND key = ?", (self.name, key))

    # -- upgrading from a local state file -----------------------------------------------

    def empty(self) -> bool:
        """Whether the store holds nothing for this copy yet."""
        return not any(
            self._q(f"SELECT 1 FROM {table} WHERE copy_name = ? LIMIT 1", (self.name,))
            for table in ("fleet_copy_resource", "fleet_copy_cursor", "fleet_copy_failed")
        )

    def import_local(self, path: Path) -> int:
        """Take over the state file of a copy synced before (all of it, in one transaction),
        then rename the file so no one reads a stale state again. Returns the resources
        imported."""
        local = DestinationState(path)
        try:
            db = local.db
            n = 0
            with self.transaction():
                batch: list[tuple[Any, ...]] = []
                for row in db.execute(
                    "SELECT uri, path, length, hashes, lastmod, etag, last_modified, set_key, "
                    "path, links, changed FROM resources"
                ):
                    batch.append((self.name, *row[:8], path_key(row[8]), *row[9:]))
                    if len(batch) == _PAGE:
                        self.store._executemany(_UPSERT_RESOURCE, batch)
                        n += len(batch)
                        batch = []
                self.store._executemany(_UPSERT_RESOURCE, batch)
                n += len(batch)
                copies = (
                    (
                        _UPSERT_CURSOR,
                        "SELECT set_key, datetime, uri, baseline_at, updated FROM cursors",
                    ),
                    (_UPSERT_PENDING, "SELECT uri, datetime, set_key FROM pending_deletes"),
                    (_UPSERT_UNDATED, "SELECT uri, sig, set_key FROM undated"),
                    (_UPSERT_FAILED, "SELECT uri, expected, reason, set_key FROM failed"),
                    (_UPSERT_META, "SELECT key, value FROM meta WHERE key <> 'running'"),
                )
                for upsert, select in copies:
                    self.store._executemany(
                        upsert, [(self.name, *row) for row in db.execute(select)]
                    )
        finally:
            local.close()
        for suffix in ("", "-wal", "-shm"):
            part = path.with_name(path.name + suffix)
            if part.exists():
                part.rename(path.with_name(path.name + IMPORTED_SUFFIX + suffix))
        return n
