"""What a Destination knows about its copy (SQLite under DEST/.resourcesync/).

Per resource: URI, local path, length, digests, lastmod, ETag and Last-Modified of the last
fetch, and the time of the latest change the copy applied to it (`changed`). Per set: the
cursor — the last change fully applied (datetime and URI) — and the time of the Resource List
the baseline came from. Deletions that were not applied (no `--delete`) and fetches that
failed are kept until a later run applies or retries them: nothing is silently lost. Each
verified resource is committed as soon as it is in place, so a run killed at any moment
resumes where it was.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import sqlite3
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from ..errors import ResourceSyncError, StateDamaged
from ..jsonable import link_from_json, link_json
from ..model import Link, Resource
from ..sqlite import connect, connect_read_only, transaction
from ..w3cdt import format_w3c, parse_w3c

__all__ = [
    "CHANGED_LATER",
    "CHANGED_TO",
    "CopyState",
    "Cursor",
    "DestinationState",
    "Known",
    "change_of",
    "changed_column",
    "expected_column",
    "expected_of",
    "expected_resource",
    "hashes_column",
    "hashes_of",
    "known_of",
    "links_column",
    "path_key",
    "seconds_kept",
    "time_kept",
]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS resources (
    uri TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    length INTEGER,
    hashes TEXT NOT NULL,
    lastmod TEXT,
    etag TEXT,
    last_modified TEXT,
    set_key TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cursors (
    set_key TEXT PRIMARY KEY,
    datetime TEXT,
    uri TEXT,
    baseline_at TEXT,
    updated TEXT
);
CREATE TABLE IF NOT EXISTS pending_deletes (
    uri TEXT PRIMARY KEY,
    datetime TEXT,
    set_key TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS undated (
    uri TEXT PRIMARY KEY,
    sig TEXT NOT NULL,
    set_key TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS failed (
    uri TEXT PRIMARY KEY,
    expected TEXT NOT NULL,
    reason TEXT NOT NULL,
    set_key TEXT NOT NULL
);
"""


#: A digest's algorithm or value that JSON writes as it is (no quote, backslash, control or
#: non-ASCII character to escape): the usual hex and base64 tokens.
_PLAIN = re.compile(r"[A-Za-z0-9+/=._:-]*\Z")
#: The column of one such digest, as `hashes_column` writes it.
_ONE = re.compile(r'\{"([A-Za-z0-9+/=._:-]*)": "([A-Za-z0-9+/=._:-]*)"\}\Z')


def hashes_column(hashes: dict[str, str]) -> str:
    """A resource's digests as a state keeps them: `json.dumps(hashes, sort_keys=True)`,
    written directly for the usual single plain token (json's machinery was 1 % of a sync's
    CPU per resource, issue 15.1)."""
    if len(hashes) == 1:
        ((algo, value),) = hashes.items()
        if type(algo) is str and type(value) is str and _PLAIN.match(algo) and _PLAIN.match(value):
            return f'{{"{algo}": "{value}"}}'
    return json.dumps(hashes, sort_keys=True)


def column_json(column: str, kind: type, what: str, uri: str | None = None) -> Any:
    """A state's JSON column (`kind`: dict or list) as it was written; a value that cannot be
    read (damaged, or written by something else) is `StateDamaged` — without the database,
    which the state that read it adds (`CopyState` implementations) — never a traceback nor
    a value taken for another."""
    try:
        value = json.loads(column)
    except (ValueError, TypeError) as exc:
        why = str(exc)
    else:
        if type(value) is kind:
            return value
        why = f"a {type(value).__name__} where a {kind.__name__} was kept"
    of = f" of {uri}" if uri else ""
    raise StateDamaged(f"the state holds {what}{of} that cannot be read ({why})")


def column_time(column: str, what: str, uri: str | None = None) -> datetime:
    """A state's W3C datetime column as it was written; one that cannot be read is
    `StateDamaged` (as `column_json`), never a traceback."""
    try:
        return parse_w3c(column)
    except (ValueError, TypeError) as exc:
        of = f" of {uri}" if uri else ""
        raise StateDamaged(f"the state holds {what}{of} that cannot be read ({exc})") from None


def expected_column(column: str, uri: str) -> dict[str, Any]:
    """What a failed fetch expected, as a state's column keeps it: read whole (its times,
    digests and links as `expected_resource` takes them) or `StateDamaged`."""
    expected: dict[str, Any] = column_json(column, dict, "what a failed fetch expected", uri)
    try:
        expected_resource(uri, expected)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise StateDamaged(
            f"the state holds what a failed fetch expected of {uri} that cannot be read ({exc})"
        ) from None
    return expected


def time_kept(text: str | None) -> datetime | None:
    """A time a state keeps as W3C text where an unreadable one means no time (a held file's:
    the file then goes to its digest, and its record is made again when it is fetched)."""
    if not text:
        return None
    try:
        return parse_w3c(text)
    except ValueError:
        return None


def seconds_kept(text: str | None) -> float | None:
    """A number of seconds a state keeps as text (a time, a span), None when there is none or
    it cannot be read: such marks are the copy's own bookkeeping, started again from now."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def located(exc: StateDamaged, where: str, remedy: str | None = None) -> StateDamaged:
    """`column_json`'s `StateDamaged` naming the state database (`where`) and what mends it
    (one already named is as it was)."""
    if exc.source is not None:
        return exc
    tail = f": {remedy}" if remedy else ""
    return StateDamaged(exc.message + tail, source=where)


@contextlib.contextmanager
def reading(where: str, remedy: str | None = None) -> Iterator[None]:
    """`located` around a block (a `try` costs nothing in the hot paths: they use it)."""
    try:
        yield
    except StateDamaged as exc:
        raise located(exc, where, remedy) from None


def hashes_of(column: str, uri: str | None = None) -> dict[str, str]:
    """The digests a state's column holds (`hashes_column`'s inverse)."""
    one = _ONE.match(column)
    if one is not None:
        return {one[1]: one[2]}
    hashes: dict[str, str] = column_json(column, dict, "the digests", uri)
    return hashes


def links_column(links: Sequence[Link] | None) -> str | None:
    """An entry's links as a plan or a state keeps them (JSON; None for none): the Destination
    keeps what the Source said of each resource — `alternate`, `canonical`, `memento`,
    `patch`, `describedby`, `duplicate` … — for its users to see (issue 10.16)."""
    return json.dumps([link_json(ln) for ln in links], sort_keys=True) if links else None


def links_of(column: str | None, uri: str | None = None) -> list[dict[str, Any]]:
    """The links a state's column holds, as JSON objects."""
    return column_json(column, list, "the links", uri) if column else []  # type: ignore[no-any-return]


def keep_links(state: CopyState, known: Known, res: Resource) -> None:
    """A resource whose content we hold as listed: its links as the Source now gives them."""
    column = links_column(res.links)
    if links_of(column) != known.links:
        state.set_links(known.uri, res.links)


def expected_of(res: Resource) -> dict[str, Any]:
    """What a failed fetch remembers of the entry it was planned from, so that the next run
    asks for it as listed: its length and digests, and its times, type, coding and links (a
    retry that lost them took a sign-in page for the PDF, took a cache's copy from before the
    change, and recorded the copy without its `<lastmod>`)."""
    out: dict[str, Any] = {"length": res.length, "hashes": res.hashes}
    if res.lastmod is not None:
        out["lastmod"] = format_w3c(res.lastmod)
    if res.datetime is not None:
        out["datetime"] = format_w3c(res.datetime)
    if res.type is not None:
        out["type"] = res.type
    if res.encoding is not None:
        out["encoding"] = res.encoding
    if res.links:
        out["links"] = [link_json(ln) for ln in res.links]
    return out


def expected_resource(uri: str, expected: dict[str, Any]) -> Resource:
    """The entry `expected_of` remembered (a state written before it kept times, type and
    links: length and digests only)."""
    lastmod, when = expected.get("lastmod"), expected.get("datetime")
    return Resource(
        loc=uri,
        length=expected.get("length"),
        hashes=expected.get("hashes") or {},
        lastmod=parse_w3c(lastmod) if lastmod else None,
        datetime=parse_w3c(when) if when else None,
        type=expected.get("type"),
        encoding=expected.get("encoding"),
        links=[link_from_json(d) for d in expected.get("links") or ()],
        change=expected.get("change"),
    )


def path_key(path: str) -> str:
    """What two local paths share when one file system may take them for one file: the same
    name in NFC and NFD form (macOS), or in another case (macOS, Windows). Two URIs whose
    paths share a key must not both be written (issue 17.6, 17.7)."""
    return unicodedata.normalize("NFC", path).casefold()


def changed_column(when: datetime) -> str:
    """The time of a change as a state keeps it (`changed`): UTC to the microsecond, one width
    always, so that the text sorts as the times do (W3C text does not: `00:00:00.5Z` sorts
    before `00:00:00Z`) on either backend."""
    if when.tzinfo is not None:
        when = when.astimezone(UTC).replace(tzinfo=None)
    return when.isoformat(timespec="microseconds") + "Z"


#: How a recorded resource's `changed` is updated (SQLite and PostgreSQL alike, the table
#: named `{table}`): the later of the two, either may be NULL. A record made from a Resource
#: List's entry (no change) keeps the time of the change the copy applied before.
CHANGED_LATER = (
    "CASE WHEN excluded.changed > {table}.changed THEN excluded.changed "
    "ELSE COALESCE({table}.changed, excluded.changed) END"
)


def change_of(res: Resource) -> datetime | None:
    """The time of the change a record made from `res` holds it as of (`changed`): a change's
    time (`rs:md@datetime`, a v1.0 entry's `<lastmod>`); None for a Resource List's entry."""
    return res.change_time if res.change else None


#: `CHANGED_LATER` for an UPDATE of one row, the new time given three times as `?`.
CHANGED_TO = "CASE WHEN ? > changed THEN ? ELSE COALESCE(changed, ?) END"


def resource_row(r: Sequence[Any]) -> tuple[Any, ...]:
    """A `record` call's arguments as the columns of a stored resource: uri, path, length,
    hashes, lastmod, etag, last_modified, set_key, path (for its key), links, changed."""
    uri, path, length, hashes, lastmod, etag, last_modified, set_key = r[:8]
    links = r[8] if len(r) > 8 else None
    changed = r[9] if len(r) > 9 else None
    return (
        uri,
        path,
        length,
        hashes_column(hashes),
        format_w3c(lastmod) if lastmod else None,
        etag,
        last_modified,
        set_key,
        path,
        links_column(links),
        changed_column(changed) if changed is not None else None,
    )


_UPSERT_RESOURCE = (
    "INSERT INTO resources (uri, path, length, hashes, lastmod, etag, last_modified, set_key, "
    "path_key, links, changed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, path_key(?), ?, ?) "
    "ON CONFLICT (uri) DO UPDATE SET path = excluded.path, length = excluded.length, "
    "hashes = excluded.hashes, lastmod = excluded.lastmod, etag = excluded.etag, "
    "last_modified = excluded.last_modified, set_key = excluded.set_key, "
    "path_key = excluded.path_key, links = excluded.links, "
    "changed = " + CHANGED_LATER.format(table="resources")
)


#: A resource the copy holds, as an incremental run looks at its file: uri, path (relative to
#: DEST, or absolute), length, the `<lastmod>` it was recorded with (W3C text) and that time
#: as a POSIX timestamp (what `--times` gave the file).
Held = tuple[str, str, int | None, str | None, float | None]


class StateError(ResourceSyncError):
    """The destination's state cannot be used."""


@dataclass(frozen=True, slots=True)
class Cursor:
    """The last change fully applied: its datetime and URI (or the baseline's `at`, no URI)."""

    datetime: datetime
    uri: str = ""


@dataclass(slots=True)
class Known:
    """What the state holds for one resource."""

    uri: str
    path: str
    length: int | None
    hashes: dict[str, str]
    etag: str | None
    last_modified: str | None
    #: The links the Source gave for it (`link_json` form), as of the last time it was listed.
    links: list[dict[str, Any]] = field(default_factory=list)
    #: The Source's `<lastmod>` for what we hold (W3C Datetime), as of when it was recorded.
    lastmod: str | None = None
    #: The time of the latest change of it the copy applied (`changed_column` text; None: held
    #: from a Resource List or a dump only). A change dated before it, delivered or listed
    #: late, is superseded (`ChangePlanner._late`).
    changed: str | None = None


def known_of(row: Sequence[Any]) -> Known:
    """A stored resource as `Known`, from its columns uri, path, length, hashes, etag,
    last_modified, links, lastmod, changed (both backends select them so)."""
    return Known(
        row[0],
        row[1],
        row[2],
        hashes_of(row[3], row[0]),
        row[4],
        row[5],
        links_of(row[6], row[0]),
        row[7],
        row[8],
    )


class CopyState(Protocol):
    """The persistent state of one copy, as the sync, plan, transfer and audit stages use it.

    `DestinationState` keeps it in SQLite under DEST/.resourcesync/; a fleet keeps it in its
    shared store, so that any worker on any machine carries on where another left off. The
    planning scratch (`scratch()`: the run's temporary plan/seen/claims tables) is always a
    local SQLite connection: it lives for one run only. The methods taking no `plan` read that
    scratch's tables (`plan`, `seen`) by name.
    """

    def scratch(self) -> sqlite3.Connection: ...
    def close(self) -> None: ...
    def transaction(self) -> contextlib.AbstractContextManager[None]: ...
    def owner(self, key: str) -> str | None: ...
    def known(self, uri: str) -> Known | None: ...
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
    ) -> None: ...
    def record_many(self, rows: list[tuple[Any, ...]]) -> None: ...
    def mark_changed(self, rows: Sequence[tuple[str, datetime]]) -> None: ...
    def set_links(self, uri: str, links: Sequence[Link] | None) -> None: ...
    def relocate(self, uri: str, path: str) -> None: ...
    def rekey(self, old: str, new: str, set_key: str | None) -> None: ...
    def forget(self, uri: str) -> None: ...
    def uris(self, set_key: str) -> Iterator[str]: ...
    def all_known(self) -> Iterator[Known]: ...
    def held(self, set_key: str) -> Iterator[Held]: ...
    def count(self, set_key: str | None = None) -> int: ...
    def cursor(self, set_key: str) -> Cursor | None: ...
    def baseline_at(self, set_key: str) -> datetime | None: ...
    def set_cursor(
        self, set_key: str, cursor: Cursor, *, baseline_at: datetime | None = None
    ) -> None: ...
    def reset(self, set_key: str) -> None: ...
    def clear_outstanding(self, set_key: str) -> None: ...
    def undated_sig(self, uri: str) -> str | None: ...
    def pend_delete(self, uri: str, when: datetime | None, set_key: str) -> None: ...
    def pending_deletes(self, set_key: str | None = None) -> list[str]: ...
    def fail(self, uri: str, expected: dict[str, Any], reason: str, set_key: str) -> None: ...
    def failures(self, set_key: str) -> list[tuple[str, dict[str, Any], str]]: ...
    def has_failure(self, uri: str) -> bool: ...
    def clear_failure(self, uri: str) -> None: ...
    def unseen(self, set_key: str) -> list[str]: ...
    def supersede_kept(self) -> None: ...
    def remember_undated(self, set_key: str) -> None: ...
    def get(self, key: str) -> str | None: ...
    def put(self, key: str, value: str) -> None: ...
    def drop(self, key: str) -> None: ...


def unreadable_values(path: Path) -> str | None:
    """What of the copy's state at `path` cannot be read though SQLite reads its pages (a
    value damaged, or written by something else), None when every value can: `sync --repair`
    sets such a state aside as it does one SQLite finds damaged. Reads every row once."""
    if not path.exists():
        return None
    try:
        state = DestinationState.reading(path)
    except StateError:
        return None  # an older format: the next sync migrates it, then reads it
    try:
        for uri, hashes, links in state.db.execute("SELECT uri, hashes, links FROM resources"):
            hashes_of(hashes, uri)
            links_of(links, uri)
        for uri, expected in state.db.execute("SELECT uri, expected FROM failed"):
            expected_column(expected, uri)
        for key, when, baseline in state.db.execute(
            "SELECT set_key, datetime, baseline_at FROM cursors"
        ):
            if when is not None:
                column_time(when, "the cursor's time", f"set {key}")
            if baseline:
                column_time(baseline, "the time of its last baseline", f"set {key}")
    except StateDamaged as exc:
        return exc.message
    finally:
        state.close()
    return None


#: What mends a copy's damaged state (said with the error).
REPAIR = (
    "run `resourcesync sync SOURCE DEST --repair` on this copy: it sets the state aside and "
    "makes it again from the files and the Source"
)


class DestinationState:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = connect(path, _SCHEMA, error=StateError, remedy=REPAIR)
        self.db.create_function("path_key", 1, path_key, deterministic=True)
        self._migrate()

    @classmethod
    def reading(cls, path: Path, *, planning: bool = False) -> DestinationState:
        """The state of a copy opened to read only (`audit`, `ls`; a dry run, `planning` on
        temporary tables): nothing is written, not even a migration, and a copy on media that
        cannot be written (a read-only mount, a snapshot) can be read."""
        self = cls.__new__(cls)
        self.path = path
        self.db = connect_read_only(path, error=StateError, temp=planning, remedy=REPAIR)
        self.db.create_function("path_key", 1, path_key, deterministic=True)
        columns = {row[1] for row in self.db.execute("PRAGMA table_info(resources)")}
        if not {"path_key", "links"} <= columns:
            self.db.close()
            raise StateError(
                "a state from an older version of resourcesync: the next sync brings it up to date",
                source=str(path),
            )
        # (A state from before the times of changes were kept reads as holding none.)
        self._changed = "changed" if "changed" in columns else "NULL"
        return self

    def _migrate(self) -> None:
        columns = {row[1] for row in self.db.execute("PRAGMA table_info(resources)")}
        if "path_key" not in columns:
            # A state from before collisions were detected: add the key, and fill it in.
            with self.transaction():
                self.db.execute("ALTER TABLE resources ADD COLUMN path_key TEXT")
                self.db.execute("UPDATE resources SET path_key = path_key(path)")
        if "links" not in columns:
            self.db.execute("ALTER TABLE resources ADD COLUMN links TEXT")
        if "changed" not in columns:
            self.db.execute("ALTER TABLE resources ADD COLUMN changed TEXT")
        self._changed = "changed"
        self.db.execute("CREATE INDEX IF NOT EXISTS resources_path_key ON resources (path_key)")

    def owner(self, key: str) -> str | None:
        """The URI whose file has this `path_key`, if any."""
        row = self.db.execute(
            "SELECT uri FROM resources WHERE path_key = ? LIMIT 1", (key,)
        ).fetchone()
        return row[0] if row else None

    def scratch(self) -> sqlite3.Connection:
        """The connection a run's planning tables (temporary) live on."""
        return self.db

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> DestinationState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        return transaction(self.db)

    # -- resources -------------------------------------------------------------------------

    def known(self, uri: str) -> Known | None:
        row = self.db.execute(
            "SELECT uri, path, length, hashes, etag, last_modified, links, lastmod, "
            f"{self._changed} FROM resources WHERE uri = ?",
            (uri,),
        ).fetchone()
        if row is None:
            return None
        try:
            return known_of(row)
        except StateDamaged as exc:
            raise located(exc, str(self.path), REPAIR) from None

    def _reading(self) -> contextlib.AbstractContextManager[None]:
        return reading(str(self.path), REPAIR)

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
        """A resource verified and in place (committed at once); `changed`: the time of the
        change it was fetched for (None: a Resource List's entry)."""
        self.record_many(
            [(uri, path, length, hashes, lastmod, etag, last_modified, set_key, links, changed)]
        )

    def record_many(self, rows: list[tuple[Any, ...]]) -> None:
        """Several `record` calls in one transaction (rows as `record`'s arguments, `links`
        and `changed` optional)."""
        if not rows:
            return
        with self.transaction():
            self.db.executemany(_UPSERT_RESOURCE, [resource_row(r) for r in rows])
            uris = [(r[0],) for r in rows]
            # (A baseline's batches meet empty tables: a third of the recording was these
            # deletions finding nothing.)
            for table in ("failed", "pending_deletes"):
                if self.db.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None:
                    self.db.executemany(f"DELETE FROM {table} WHERE uri = ?", uris)

    def mark_changed(self, rows: Sequence[tuple[str, datetime]]) -> None:
        """The copy holds these resources as they are after a change at that time (each
        `(uri, time)`; a change whose bytes it held already): kept as their `changed` when
        later than what it was."""
        if not rows:
            return
        with self.transaction():
            self.db.executemany(
                f"UPDATE resources SET changed = {CHANGED_TO} WHERE uri = ?",
                [(*[changed_column(when)] * 3, uri) for uri, when in rows],
            )

    def set_links(self, uri: str, links: Sequence[Link] | None) -> None:
        """The Source now gives other links for a resource whose content we hold."""
        self.db.execute("UPDATE resources SET links = ? WHERE uri = ?", (links_column(links), uri))

    def relocate(self, uri: str, path: str) -> None:
        """The file of `uri` (its content unchanged) is now at `path` (as `record` takes it)."""
        self.db.execute(
            "UPDATE resources SET path = ?, path_key = path_key(?) WHERE uri = ?", (path, path, uri)
        )

    def rekey(self, old: str, new: str, set_key: str | None) -> None:
        """What the copy holds for `old` is `new`'s now (the Source moved, or spells the URI
        another way), in set `set_key` (None: the set it was in)."""
        with self.transaction():
            self.db.execute(
                "UPDATE resources SET uri = ?, set_key = COALESCE(?, set_key) WHERE uri = ?",
                (new, set_key, old),
            )
            self.db.execute("DELETE FROM pending_deletes WHERE uri = ?", (old,))
            self.db.execute("DELETE FROM failed WHERE uri = ?", (old,))

    def forget(self, uri: str) -> None:
        self.db.execute("DELETE FROM resources WHERE uri = ?", (uri,))
        self.db.execute("DELETE FROM pending_deletes WHERE uri = ?", (uri,))
        self.db.execute("DELETE FROM failed WHERE uri = ?", (uri,))

    def uris(self, set_key: str) -> Iterator[str]:
        for (uri,) in self.db.execute(
            "SELECT uri FROM resources WHERE set_key = ? ORDER BY uri", (set_key,)
        ):
            yield uri

    def all_known(self) -> Iterator[Known]:
        for row in self.db.execute(
            "SELECT uri, path, length, hashes, etag, last_modified, links, lastmod, "
            f"{self._changed} FROM resources ORDER BY uri"
        ):
            try:
                known = known_of(row)
            except StateDamaged as exc:
                raise located(exc, str(self.path), REPAIR) from None
            yield known

    def held(self, set_key: str) -> Iterator[Held]:
        """What the copy holds of a set, in URI order (see `Held`)."""
        # The time as a POSIX timestamp computed by SQLite: parsing it here was most of
        # the cost of a row (a look at every file is one row and one lstat).
        return self.db.execute(
            "SELECT uri, path, length, lastmod, (julianday(lastmod) - 2440587.5) * 86400.0 "
            "FROM resources WHERE set_key = ? ORDER BY uri",
            (set_key,),
        )

    def count(self, set_key: str | None = None) -> int:
        """Resources held: of one set, or in all."""
        if set_key is None:
            return int(self.db.execute("SELECT COUNT(*) FROM resources").fetchone()[0])
        row = self.db.execute("SELECT COUNT(*) FROM resources WHERE set_key = ?", (set_key,))
        return int(row.fetchone()[0])

    # -- cursor ----------------------------------------------------------------------------

    def cursor(self, set_key: str) -> Cursor | None:
        row = self.db.execute(
            "SELECT datetime, uri FROM cursors WHERE set_key = ?", (set_key,)
        ).fetchone()
        if row is None or row[0] is None:
            return None
        with self._reading():
            when = column_time(row[0], "the cursor's time", f"set {set_key}")
        return Cursor(when, row[1] or "")

    def baseline_at(self, set_key: str) -> datetime | None:
        row = self.db.execute(
            "SELECT baseline_at FROM cursors WHERE set_key = ?", (set_key,)
        ).fetchone()
        if not row or not row[0]:
            return None
        with self._reading():
            return column_time(row[0], "the time of its last baseline", f"set {set_key}")

    def set_cursor(
        self, set_key: str, cursor: Cursor, *, baseline_at: datetime | None = None
    ) -> None:
        at = baseline_at or self.baseline_at(set_key)
        self.db.execute(
            "INSERT OR REPLACE INTO cursors (set_key, datetime, uri, baseline_at, updated) "
            "VALUES (?, ?, ?, ?, datetime('now'))",
            (
                set_key,
                format_w3c(cursor.datetime),
                cursor.uri,
                format_w3c(at) if at is not None else None,
            ),
        )

    def reset(self, set_key: str) -> None:
        """Before a forced baseline: forget the cursor (resources stay, to be compared)."""
        self.db.execute("DELETE FROM cursors WHERE set_key = ?", (set_key,))

    def clear_outstanding(self, set_key: str) -> None:
        """Before a baseline: forget remembered failures and pending deletions, which the
        baseline derives again from the Source's current state (the final state wins)."""
        with self.transaction():
            self.db.execute("DELETE FROM failed WHERE set_key = ?", (set_key,))
            self.db.execute("DELETE FROM pending_deletes WHERE set_key = ?", (set_key,))

    # -- undated changes --------------------------------------------------------------------

    def undated_sig(self, uri: str) -> str | None:
        """The signature of the last undated change applied for this URI (see `plan.py`)."""
        row = self.db.execute("SELECT sig FROM undated WHERE uri = ?", (uri,)).fetchone()
        return row[0] if row else None

    # -- pending deletions and failures -----------------------------------------------------

    def pend_delete(self, uri: str, when: datetime | None, set_key: str) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO pending_deletes (uri, datetime, set_key) VALUES (?, ?, ?)",
            (uri, format_w3c(when) if when else None, set_key),
        )

    def pending_deletes(self, set_key: str | None = None) -> list[str]:
        if set_key is None:
            rows = self.db.execute("SELECT uri FROM pending_deletes ORDER BY uri")
        else:
            rows = self.db.execute(
                "SELECT uri FROM pending_deletes WHERE set_key = ? ORDER BY uri", (set_key,)
            )
        return [r[0] for r in rows]

    def fail(self, uri: str, expected: dict[str, Any], reason: str, set_key: str) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO failed (uri, expected, reason, set_key) VALUES (?, ?, ?, ?)",
            (uri, json.dumps(expected, sort_keys=True), reason, set_key),
        )

    def failures(self, set_key: str) -> list[tuple[str, dict[str, Any], str]]:
        with self._reading():
            return [
                (uri, expected_column(expected, uri), reason)
                for uri, expected, reason in self.db.execute(
                    "SELECT uri, expected, reason FROM failed WHERE set_key = ? ORDER BY uri",
                    (set_key,),
                )
            ]

    def has_failure(self, uri: str) -> bool:
        return self.db.execute("SELECT 1 FROM failed WHERE uri = ?", (uri,)).fetchone() is not None

    def clear_failure(self, uri: str) -> None:
        self.db.execute("DELETE FROM failed WHERE uri = ?", (uri,))

    # -- with the run's plan (the scratch tables) ------------------------------------------

    def unseen(self, set_key: str) -> list[str]:
        """Resources of the set the Source's listing did not name (not in `seen`)."""
        return [
            r[0]
            for r in self.db.execute(
                "SELECT uri FROM resources WHERE set_key = ? AND uri NOT IN (SELECT uri FROM seen)",
                (set_key,),
            )
        ]

    def supersede_kept(self) -> None:
        """The plan's kept URIs' remembered failures and pending deletions are superseded."""
        with self.transaction():
            self.db.execute(
                "DELETE FROM failed WHERE uri IN (SELECT uri FROM plan WHERE action='keep')"
            )
            self.db.execute(
                "DELETE FROM pending_deletes WHERE uri IN "
                "(SELECT uri FROM plan WHERE action = 'keep')"
            )

    def remember_undated(self, set_key: str) -> None:
        """The plan's undated changes applied (not failed) are remembered."""
        with self.transaction():
            self.db.execute(
                "INSERT OR REPLACE INTO undated (uri, sig, set_key) SELECT uri, sig, ? "
                "FROM plan WHERE sig IS NOT NULL AND uri NOT IN (SELECT uri FROM failed)",
                (set_key,),
            )

    def drop(self, key: str) -> None:
        self.db.execute("DELETE FROM meta WHERE key = ?", (key,))

    def get(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def put(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))
