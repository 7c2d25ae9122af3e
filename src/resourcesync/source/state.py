"""The state of a resource set: the last snapshot and the append-only change journal (SQLite).

One database per set (WAL mode): the snapshot (`resources`), the journal of changes, the
directory listings the last scan kept, the Change Lists, notifications and archives a Source
published. A scan of the set (`Scan`, in source/scan.py) compares an inventory with the snapshot
and records what changed in one transaction.

Change datetimes are distinct and strictly increasing within a set (microseconds), so
(URI, datetime) is unique, as the specification asks.

The snapshot is read through the view `snapshot`: the rows of `resources` overlaid by those of
`pending`, where a re-run writes what it changed (a row a key, NULL `uri` for one deleted).
`resources` is a B-tree in key order, so a re-run that changed every hundredth file rewrote a
page of it for each, scattered over the file (2.5 MB synced for 500 changes among 50,000
files); `pending` takes them in the order they are written, a few pages. They are folded into
`resources` when the Resource List is written (it reads every row anyway) or when they grow
past `FOLD_AT`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..errors import ResourceSyncError, StateDamaged
from ..hashing import parse_hashes
from ..model import Resource
from ..sitemap.write import entry_xml
from ..sqlite import connect, transaction
from ..w3cdt import format_w3c, parse_w3c
from .listings import ListingDamaged, Listings

__all__ = ["ArchiveRow", "ChangeListRow", "SetState", "StateError", "change_resource"]

#: The state's format, in `meta` (`schema`): 1 when the snapshot is all in `resources`, 2 while
#: `pending` holds rows, so that a resourcesync from before `pending` (which reads
#: `resources` alone and would publish the snapshot as it was) refuses the state instead.
SCHEMA_VERSION = 2
PLAIN_FORMAT = "1"
PENDING_FORMAT = "2"
#: How many pending rows a scan leaves before it folds them into `resources` itself (the
#: Resource List, written by default after a day or 10,000 changes, folds them before that).
FOLD_AT = 20_000
#: The snapshot's columns, as `resources` and `pending` both hold them.
COLUMNS = "key, uri, fingerprint, lastmod, length, type, hashes, xml"
#: A row written into `resources` over the one of its key: an upsert, not INSERT OR REPLACE (a
#: delete and an insert), so the row is written over in its page (a fifth fewer pages).
_OVER = (
    "ON CONFLICT (key) DO UPDATE SET uri = excluded.uri, fingerprint = excluded.fingerprint, "
    "lastmod = excluded.lastmod, length = excluded.length, type = excluded.type, "
    "hashes = excluded.hashes, xml = excluded.xml"
)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS resources (
    key TEXT PRIMARY KEY,
    uri TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    lastmod TEXT NOT NULL,
    length INTEGER NOT NULL,
    type TEXT,
    hashes TEXT NOT NULL,
    xml BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS changes (
    seq INTEGER PRIMARY KEY,
    key TEXT NOT NULL,
    uri TEXT NOT NULL,
    change TEXT NOT NULL,
    datetime TEXT NOT NULL,
    lastmod TEXT,
    length INTEGER,
    type TEXT,
    hashes TEXT,
    run INTEGER NOT NULL,
    xml BLOB
);
CREATE TABLE IF NOT EXISTS pending (
    seq INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    uri TEXT,
    fingerprint TEXT,
    lastmod TEXT,
    length INTEGER,
    type TEXT,
    hashes TEXT,
    xml BLOB
);
CREATE VIEW IF NOT EXISTS snapshot AS
    SELECT key, uri, fingerprint, lastmod, length, type, hashes, xml FROM resources AS r
    WHERE NOT EXISTS (SELECT 1 FROM pending AS p WHERE p.key = r.key)
    UNION ALL
    SELECT key, uri, fingerprint, lastmod, length, type, hashes, xml FROM pending
    WHERE uri IS NOT NULL;
CREATE TABLE IF NOT EXISTS dirs (
    path TEXT PRIMARY KEY,
    files BLOB NOT NULL,
    subdirs BLOB NOT NULL,
    delta BLOB
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dir_deltas (path TEXT PRIMARY KEY, delta BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    started TEXT NOT NULL,
    completed TEXT NOT NULL,
    resources INTEGER NOT NULL,
    created INTEGER NOT NULL,
    updated INTEGER NOT NULL,
    deleted INTEGER NOT NULL,
    first_seq INTEGER,
    last_seq INTEGER
);
CREATE TABLE IF NOT EXISTS changelists (
    id INTEGER PRIMARY KEY,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER,
    from_ TEXT NOT NULL,
    until TEXT
);
CREATE TABLE IF NOT EXISTS notifications (
    id INTEGER PRIMARY KEY,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    from_ TEXT NOT NULL,
    until TEXT NOT NULL,
    sent INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS framework (
    id INTEGER PRIMARY KEY,
    body BLOB NOT NULL,
    sent INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS archive (
    kind TEXT NOT NULL,
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL,
    url TEXT NOT NULL,
    at TEXT,
    completed TEXT,
    from_ TEXT,
    until TEXT,
    extra TEXT
);
-- A kind's documents in order, and a folder's: a Source that keeps its Change Dumps holds a
-- hundred thousand packages after a year, which a run must not read to find a few.
CREATE INDEX IF NOT EXISTS archive_by_kind ON archive (kind, id);
CREATE INDEX IF NOT EXISTS archive_by_path ON archive (kind, path);
"""
TICK = timedelta(microseconds=1)
#: A resource whose published bytes may differ from its recorded digests (a dump packaged other
#: bytes than the scan hashed): the next scan reads it and journals it as updated.
DIRTY = "dirty"


class StateError(ResourceSyncError):
    """The state database cannot be used (locked by another run, newer format, corrupt)."""


def change_resource(
    uri: str,
    change: str,
    when: str,
    lastmod: str | None,
    length: int | None,
    kind: str | None,
    hashes: str | None,
) -> Resource:
    res = Resource(loc=uri, change=change, datetime=parse_w3c(when))
    if change != "deleted":
        res.lastmod = _dt(lastmod)
        res.length = length
        res.type = kind
        res.hashes = parse_hashes(hashes) if hashes else {}
    return res


def _dt(text: str | None) -> datetime | None:
    return parse_w3c(text) if text else None


def _ts(value: datetime | None) -> str | None:
    return format_w3c(value) if value is not None else None


@dataclass
class ChangeListRow:
    """One Change List of the set: closed when `until` is set."""

    id: int
    first_seq: int
    last_seq: int | None
    from_: datetime
    until: datetime | None


@dataclass
class ArchiveRow:
    kind: str
    id: int
    path: str
    url: str
    at: datetime | None
    completed: datetime | None
    from_: datetime | None
    until: datetime | None
    extra: str | None


#: The kinds of the documents `archive` records (`SetState.archive`).
ARCHIVE_KINDS = ("resourcelist", "resourcedump", "changedump", "changedump-package")

#: The marks of `meta` that are times, and those that are counts or sequence numbers.
_TIME_MARKS = frozenset({"baselined", "last_datetime", "cd_until", "cd_from", "cn_from"})
_COUNT_MARKS = frozenset(
    {
        "cl_closed_written",
        "cn_start_seq",
        "cd_last_seq",
        "published_run",
        "resourcelist_seq",
        "resourcedump_seq",
        "schema",
    }
)

#: What mends a Source's damaged state (said with the error): its history cannot be read
#: back, so it starts again, and says so to its Destinations as a gap.
RESTART = (
    "set it aside (rename it) and publish again: a new Resource List, and Change Lists from "
    "then on (a Destination that synced before finds the gap and runs its baseline)"
)


class SetState:
    """The SQLite state of one resource set."""

    def __init__(self, path: str | Path, *, clock: Callable[[], datetime] | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.clock = clock or (lambda: datetime.now(UTC))
        self.db = connect(self.path, _SCHEMA, error=StateError, remedy=RESTART)
        self.listings = Listings(self.db)
        version = self.get("schema")
        if version is None:
            self.put("schema", PLAIN_FORMAT)
        elif int(version) > SCHEMA_VERSION:
            raise StateError(
                f"state written by a newer resourcesync (format {version})", source=str(path)
            )
        columns = {row[1] for row in self.db.execute("PRAGMA table_info(changes)")}
        if "xml" not in columns:
            # Change List entries serialized when journaled (NULL in a state from before).
            self.db.execute("ALTER TABLE changes ADD COLUMN xml BLOB")
        columns = {row[1] for row in self.db.execute("PRAGMA table_info(dirs)")}
        if "delta" not in columns:
            # Where a resourcesync from before `dir_deltas` kept a listing's changes since it
            # was last written whole; read, and emptied once taken in (source/listings.py).
            self.db.execute("ALTER TABLE dirs ADD COLUMN delta BLOB")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> SetState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- meta ------------------------------------------------------------------------------

    def get(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def put(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    @property
    def last_datetime(self) -> datetime | None:
        return _dt(self.get("last_datetime"))

    def next_datetime(self, floor: datetime | None = None) -> datetime:
        """A change time after every earlier one (and not before `floor`)."""
        now = self.clock()
        last = self.last_datetime
        candidate = max(now, floor) if floor else now
        if last is not None and candidate <= last:
            candidate = last + TICK
        return candidate.replace(tzinfo=UTC) if candidate.tzinfo is None else candidate

    # -- scanning (a scan of the set: source/scan.py) ------------------------------------

    def mark_dirty(self, keys: Iterable[str]) -> None:
        """Resources whose published bytes may differ from their recorded digests: the next
        scan reads them again and journals each as updated."""
        keys = list(keys)
        for table in ("resources", "pending"):
            self.db.executemany(
                f"UPDATE {table} SET fingerprint = ? WHERE key = ?", ((DIRTY, k) for k in keys)
            )
        # …and their directories' listings compare them again.
        try:
            for key in keys:
                self.listings.mark(key)
        except ListingDamaged:
            # Without listings the next scan compares the tree whole with the snapshot (which
            # holds the mark) and makes them again.
            self.listings.forget()
            self.db.execute("DELETE FROM meta WHERE key = 'dirs_for'")

    def write_rows(
        self, rows: list[tuple[Any, ...]], deleted: list[tuple[str]], *, pending: bool
    ) -> None:
        """Record rows of the snapshot (`COLUMNS`) and keys deleted from it (deletions first: a
        key can be deleted and written again in one batch): as pending rows, or (a first
        scan's, with none pending) into `resources` itself."""
        if not rows and not deleted:
            return
        if not pending:
            if deleted:
                self.db.executemany("DELETE FROM resources WHERE key = ?", deleted)
            if rows:
                self.db.executemany(
                    f"INSERT INTO resources ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) {_OVER}",
                    rows,
                )
            return
        if self.get("schema") != PENDING_FORMAT:
            self.put("schema", PENDING_FORMAT)
        if deleted:
            self.db.executemany("INSERT OR REPLACE INTO pending (key) VALUES (?)", deleted)
        if rows:
            self.db.executemany(
                f"INSERT OR REPLACE INTO pending ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

    def pending_rows(self) -> int:
        """How many rows `pending` holds."""
        return int(self.db.execute("SELECT COUNT(*) FROM pending").fetchone()[0])

    def fold(self) -> None:
        """Take the pending rows into `resources` (in the caller's transaction): the snapshot
        reads the same, from `resources` alone."""
        if self.db.execute("SELECT 1 FROM pending LIMIT 1").fetchone() is None:
            return
        self.db.execute(
            "DELETE FROM resources WHERE key IN (SELECT key FROM pending WHERE uri IS NULL)"
        )
        self.db.execute(
            f"INSERT INTO resources ({COLUMNS}) SELECT {COLUMNS} FROM pending "
            f"WHERE uri IS NOT NULL ORDER BY key {_OVER}"
        )
        self.db.execute("DELETE FROM pending")
        self.put("schema", PLAIN_FORMAT)

    # -- reading ---------------------------------------------------------------------------

    def resources(self) -> Iterator[Resource]:
        """The snapshot, in key order, as Resource List entries."""
        cur = self.db.execute(
            "SELECT uri, lastmod, length, type, hashes FROM snapshot ORDER BY key"
        )
        for uri, lastmod, length, kind, hashes in cur:
            yield Resource(
                loc=uri,
                lastmod=parse_w3c(lastmod),
                length=length,
                type=kind,
                hashes=parse_hashes(hashes),
            )

    def resource_xml(self) -> Iterator[bytes]:
        """The snapshot's Resource List entries, serialized, in key order."""
        for (xml,) in self.db.execute("SELECT xml FROM snapshot ORDER BY key"):
            yield bytes(xml)

    def resource_rows(self) -> Iterator[tuple[str, str, str, int, str | None, str]]:
        """(key, uri, lastmod, length, type, hashes) in key order (for dump packages)."""
        # A loop, not `yield from`: a generator closed after the database (a run stopped by
        # Ctrl-C or SIGTERM) must not close its cursor on a closed database (issue 14.4).
        for row in self.db.execute(  # noqa: UP028 (see above)
            "SELECT key, uri, lastmod, length, type, hashes FROM snapshot ORDER BY key"
        ):
            yield row

    def count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM snapshot").fetchone()[0])

    def changes(self, first_seq: int, last_seq: int | None = None) -> Iterator[Resource]:
        """Journal entries with first_seq ≤ seq (≤ last_seq), in order, as Change List entries."""
        if last_seq is None:
            cur = self.db.execute(
                "SELECT uri, change, datetime, lastmod, length, type, hashes FROM changes "
                "WHERE seq >= ? ORDER BY seq",
                (first_seq,),
            )
        else:
            cur = self.db.execute(
                "SELECT uri, change, datetime, lastmod, length, type, hashes FROM changes "
                "WHERE seq BETWEEN ? AND ? ORDER BY seq",
                (first_seq, last_seq),
            )
        for row in cur:
            yield change_resource(*row)

    def change_entries(self, first_seq: int, last_seq: int | None = None) -> Iterator[bytes]:
        """Like `changes`, as Change List entries serialized for version 1.1 (kept since they
        were journaled: rewriting the open Change List costs no parsing)."""
        hi = last_seq if last_seq is not None else 1 << 62
        # The entry alone (the other columns made into Python values for every entry cost
        # twice what the entries do: 8.9 against 2.8 ms for 4,500); the values only for an
        # entry journaled before entries were kept.
        cur = self.db.execute(
            "SELECT seq, xml FROM changes WHERE seq BETWEEN ? AND ? ORDER BY seq", (first_seq, hi)
        )
        for seq, xml in cur:
            if xml is not None:
                yield bytes(xml)
                continue
            row = self.db.execute(
                "SELECT uri, change, datetime, lastmod, length, type, hashes FROM changes "
                "WHERE seq = ?",
                (seq,),
            ).fetchone()
            yield entry_xml(change_resource(*row))

    def packaged_changes(self, first_seq: int, last_seq: int) -> Iterator[tuple[str, Resource]]:
        """(key, entry) of the journal entries in a range that a Change Dump package holds:
        every deletion, and of a key's other changes the last (a package holds one bitstream
        per key: the bytes there are now), in order."""
        cur = self.db.execute(
            "SELECT key, uri, change, datetime, lastmod, length, type, hashes FROM ("
            " SELECT *, ROW_NUMBER() OVER ("
            "  PARTITION BY key, change = 'deleted' ORDER BY seq DESC) AS latest"
            " FROM changes WHERE seq BETWEEN ? AND ?"
            ") WHERE change = 'deleted' OR latest = 1 ORDER BY seq",
            (first_seq, last_seq),
        )
        for key, *row in cur:
            yield key, change_resource(*row)

    def max_seq(self) -> int:
        return int(self.db.execute("SELECT COALESCE(MAX(seq), 0) FROM changes").fetchone()[0])

    def seq_time(self, seq: int) -> datetime | None:
        row = self.db.execute("SELECT datetime FROM changes WHERE seq = ?", (seq,)).fetchone()
        return _dt(row[0]) if row else None

    def last_run(self) -> tuple[int, datetime, datetime] | None:
        row = self.db.execute(
            "SELECT id, started, completed FROM runs ORDER BY id DESC LIMIT 1"
        ).fetchone()
        return (row[0], parse_w3c(row[1]), parse_w3c(row[2])) if row else None

    def recent_changes(self, limit: int = 50) -> list[dict[str, str]]:
        return [
            {"loc": uri, "change": change, "datetime": when}
            for uri, change, when in self.db.execute(
                "SELECT uri, change, datetime FROM changes ORDER BY seq DESC LIMIT ?", (limit,)
            )
        ]

    # -- change lists ----------------------------------------------------------------------

    def changelists(self, ids: Iterable[int] | None = None) -> list[ChangeListRow]:
        """The Change Lists (those of `ids`), in order."""
        query = "SELECT id, first_seq, last_seq, from_, until FROM changelists"
        if ids is None:
            found = list(self.db.execute(query + " ORDER BY id"))
        else:
            # Asked for a few hundred at a time (SQLite bounds the parameters of a query).
            wanted = sorted(set(ids))
            found = []
            for at in range(0, len(wanted), 500):
                part = wanted[at : at + 500]
                found += self.db.execute(
                    f"{query} WHERE id IN ({','.join('?' * len(part))}) ORDER BY id", part
                )
        rows = []
        # (One guard for all the rows, not one a row: a Source that keeps its history reads
        # thousands of them a run, in `check`.)
        with self._record(lambda: f"Change List {i}"):
            for i, first, last, f, u in found:
                rows.append(ChangeListRow(i, first, last, parse_w3c(f), _dt(u)))
        return rows

    def _check_changelists(self) -> None:
        """`changelists()` as `check` reads them: their times, each text once (a list begins
        where the one before it ended: thousands of lists, half as many times)."""
        read: set[str] = set()
        with self._record(lambda: f"Change List {i}"):
            # (`i` is named by the guard.)
            for i, f, u in self.db.execute("SELECT id, from_, until FROM changelists"):  # noqa: B007
                if f not in read:
                    parse_w3c(f)
                    read.add(f)
                if u and u not in read:
                    parse_w3c(u)
                    read.add(u)

    def closed_changelist_ids(self) -> list[int]:
        """The ids of the closed Change Lists, in order (without reading the rest of them)."""
        return [
            i
            for (i,) in self.db.execute(
                "SELECT id FROM changelists WHERE until IS NOT NULL ORDER BY id"
            )
        ]

    def first_changelist_from(self) -> datetime | None:
        """The `from` of the first Change List kept (None: none yet)."""
        row = self.db.execute("SELECT id, from_ FROM changelists ORDER BY id LIMIT 1").fetchone()
        if row is None:
            return None
        with self._record(f"Change List {row[0]}"):
            return parse_w3c(row[1])

    def open_changelist(self, start: datetime) -> ChangeListRow:
        """The open Change List, started at `start` when there is none yet."""
        row = self.db.execute(
            "SELECT id, first_seq, last_seq, from_, until FROM changelists "
            "WHERE until IS NULL ORDER BY id DESC LIMIT 1"
        ).fetchone()
        if row:
            with self._record(f"Change List {row[0]}"):
                return ChangeListRow(row[0], row[1], row[2], parse_w3c(row[3]), None)
        cur = self.db.execute(
            "INSERT INTO changelists (first_seq, last_seq, from_, until) VALUES (?, NULL, ?, NULL)",
            (self.max_seq() + 1, format_w3c(start)),
        )
        assert cur.lastrowid is not None
        return ChangeListRow(cur.lastrowid, self.max_seq() + 1, None, start, None)

    def close_changelist(self, row: ChangeListRow, last_seq: int, until: datetime) -> None:
        """Close a list after `last_seq` at `until`; the next one opens at `until`."""
        with self.transaction():
            self.db.execute(
                "UPDATE changelists SET last_seq = ?, until = ? WHERE id = ?",
                (last_seq, format_w3c(until), row.id),
            )
            self.db.execute(
                "INSERT INTO changelists (first_seq, last_seq, from_, until) "
                "VALUES (?, NULL, ?, NULL)",
                (last_seq + 1, format_w3c(until)),
            )
            last = self.last_datetime
            if last is None or until > last:
                self.put("last_datetime", format_w3c(until))

    def drop_changelists(self, ids: list[int], through_seq: int) -> None:
        """Forget closed Change Lists (`ids`) and the journal's changes up to `through_seq`
        (theirs), with the notifications sent of them; the journal's last change is kept, so
        that the next change is numbered after it."""
        with self.transaction():
            self.db.executemany("DELETE FROM changelists WHERE id = ?", [(i,) for i in ids])
            self.db.execute(
                "DELETE FROM changes WHERE seq <= ? AND seq < (SELECT MAX(seq) FROM changes)",
                (through_seq,),
            )
            self.db.execute(
                "DELETE FROM notifications WHERE sent = 1 AND last_seq <= ?", (through_seq,)
            )

    def count_changes(self, first_seq: int, last_seq: int | None = None) -> int:
        if last_seq is None:
            q = "SELECT COUNT(*) FROM changes WHERE seq >= ?"
            return int(self.db.execute(q, (first_seq,)).fetchone()[0])
        q = "SELECT COUNT(*) FROM changes WHERE seq BETWEEN ? AND ?"
        return int(self.db.execute(q, (first_seq, last_seq)).fetchone()[0])

    def nth_seq(self, first_seq: int, n: int) -> int:
        """The seq of the n-th journal entry (1-based) from first_seq."""
        row = self.db.execute(
            "SELECT seq FROM changes WHERE seq >= ? ORDER BY seq LIMIT 1 OFFSET ?",
            (first_seq, n - 1),
        ).fetchone()
        if row is None:
            raise ValueError("not that many changes")
        return int(row[0])

    # -- change notifications --------------------------------------------------------------

    def notifications(
        self, unsent_only: bool = False
    ) -> list[tuple[int, int, int, datetime, datetime]]:
        q = "SELECT id, first_seq, last_seq, from_, until FROM notifications"
        if unsent_only:
            q += " WHERE sent = 0"
        rows = []
        for i, a, b, f, u in self.db.execute(q + " ORDER BY id"):
            with self._record(f"change notification {i}"):
                rows.append((i, a, b, parse_w3c(f), parse_w3c(u)))
        return rows

    def add_notification(self, first: int, last: int, from_: datetime, until: datetime) -> None:
        self.db.execute(
            "INSERT INTO notifications (first_seq, last_seq, from_, until) VALUES (?, ?, ?, ?)",
            (first, last, format_w3c(from_), format_w3c(until)),
        )

    def mark_sent(self, notification: int) -> None:
        self.db.execute("UPDATE notifications SET sent = 1 WHERE id = ?", (notification,))

    def forget_sent_notifications(self) -> None:
        """Forget the notifications the hub took but the latest (the next one starts where it
        ends): one a run would be kept, and read, for ever."""
        self.db.execute(
            "DELETE FROM notifications WHERE sent = 1 AND id < (SELECT MAX(id) FROM notifications)"
        )

    # -- framework notifications -----------------------------------------------------------

    def add_framework(self, body: bytes) -> None:
        """Keep a framework notification payload until the hub has taken it."""
        self.db.execute("INSERT INTO framework (body) VALUES (?)", (body,))

    def framework_unsent(self) -> list[tuple[int, bytes]]:
        return [
            (i, bytes(b))
            for i, b in self.db.execute("SELECT id, body FROM framework WHERE sent = 0 ORDER BY id")
        ]

    def mark_framework_sent(self, row_id: int) -> None:
        """The hub took it: it is not kept (a Source running for months would keep them all)."""
        self.db.execute("DELETE FROM framework WHERE id = ?", (row_id,))

    # -- archives --------------------------------------------------------------------------

    def check(self) -> None:
        """Read whole what a run reads of what this Source published before and of the marks
        it keeps (its documents, Change Lists, notifications, times and counters): one that
        cannot be read is `StateDamaged` naming the state and what mends it — `publish` calls
        this before it writes anything, so a run never stops halfway on it. Of a Change Dump's
        packages, those of the live Change Dump: the closed dumps' (a hundred thousand after a
        year of runs every five minutes) are never read again, only let go whole."""
        for kind in ARCHIVE_KINDS:
            if kind != "changedump-package":
                self.archived(kind)
        self.live_packages()
        self._check_changelists()
        self.notifications()
        for key, value in self.db.execute("SELECT key, value FROM meta"):
            with self._record(f"mark {key}"):
                if key in _TIME_MARKS:
                    parse_w3c(value)
                elif key in _COUNT_MARKS:
                    int(value)

    @contextlib.contextmanager
    def _record(self, what: str | Callable[[], str]) -> Iterator[None]:
        """A record of this state read: one that cannot be read is `StateDamaged`. `what`
        names it, or tells which when called (one guard around thousands of rows read)."""
        try:
            yield
        except (ValueError, TypeError, ResourceSyncError) as exc:
            why = exc.message if isinstance(exc, ResourceSyncError) else str(exc)
            name = what() if callable(what) else what
            raise StateDamaged(
                f"the state's {name} cannot be read ({why}): {RESTART}", source=str(self.path)
            ) from None

    def archived(self, kind: str | None = None) -> list[ArchiveRow]:
        """The documents of a kind (None: of every kind) this Source published and keeps,
        oldest first. One whose record cannot be read (a time or its details damaged, or
        written by something else) is `StateDamaged` naming the state and what mends it, not
        a traceback: `publish` reads what a run reads of them before it writes anything
        (`check`)."""
        if kind is None:
            return self._archived("1", ())
        return self._archived("kind = ?", (kind,))

    def _archived(self, where: str, args: tuple[Any, ...], order: str = "id") -> list[ArchiveRow]:
        return list(self._archive_rows(where, args, order))

    def _archive_rows(self, where: str, args: tuple[Any, ...], order: str) -> Iterator[ArchiveRow]:
        """The rows of `archive` read one at a time (a reader that stops reads no further)."""
        # (One guard for all the rows: they are thousands after months.)
        with self._record(lambda: f"record of the {k} {p}"):
            for k, i, p, u, a, c, f, t, e in self.db.execute(
                "SELECT kind, id, path, url, at, completed, from_, until, extra FROM archive "
                f"WHERE {where} ORDER BY {order}",
                args,
            ):
                # Its details: a JSON object (a Resource List's, a package's), or a count.
                if e is not None and type(json.loads(e)) not in (dict, int):
                    raise ValueError(f"details {e[:40]!r}")
                yield ArchiveRow(k, i, p, u, _dt(a), _dt(c), _dt(f), _dt(t), e)

    def changedump_from(self) -> datetime | None:
        """Where the live Change Dump begins: where the last one closed ended, or the
        baseline (None before there is one)."""
        key = "cd_from" if self.get("cd_from") else "baselined"
        text = self.get(key)
        with self._record(f"mark {key}"):
            return parse_w3c(text) if text else None

    def live_packages(self, since: datetime | None = None) -> list[ArchiveRow]:
        """The packages of the live Change Dump (those from `since`, by default
        `changedump_from`, on), oldest first. Each package begins where the one before it
        ended (`publish_changedump`), so they are read from the newest back to the first that
        begins before `since`: a run reads the hundred or so of the live dump, not the
        hundred thousand a Source that keeps its Change Dumps holds after a year."""
        since = self.changedump_from() if since is None else since
        if since is None:
            return self.archived("changedump-package")
        live: list[ArchiveRow] = []
        for row in self._archive_rows("kind = 'changedump-package'", (), "id DESC"):
            if row.from_ is not None and row.from_ < since:
                break
            if row.from_ is not None:
                live.append(row)
        live.reverse()
        return live

    def forget_packages(self, *, folder: str | None = None, until: datetime | None = None) -> None:
        """Forget the Change Dump packages written into `folder` (a run killed before it
        recorded its own wrote there), or those up to `until` (the end of a closed Change
        Dump let go: the packages up to its last, in order as they were written) — by their
        records' text, without reading the thousands of others."""
        if folder is not None:
            self.db.execute(
                "DELETE FROM archive WHERE kind = 'changedump-package' AND path = ?", (folder,)
            )
        if until is None:
            return
        # The dump's `until` is its last package's, written by the same hand.
        ((last,),) = self.db.execute(
            "SELECT MAX(id) FROM archive WHERE kind = 'changedump-package' AND until = ?",
            (_ts(until),),
        )
        if last is not None:
            self.db.execute(
                "DELETE FROM archive WHERE kind = 'changedump-package' AND id <= ?", (last,)
            )
            return
        # Not found so (a state written otherwise): by their times.
        for package in self.archived("changedump-package"):
            if package.until is not None and package.until <= until:
                self.forget(package.id)

    def archived_paths(self, kind: str) -> set[str]:
        """Where the documents of a kind are (their paths only: nothing parsed)."""
        return {
            p
            for (p,) in self.db.execute("SELECT DISTINCT path FROM archive WHERE kind = ?", (kind,))
        }

    def archived_ids(self, kind: str) -> list[int]:
        """The ids of the documents of a kind, in order (nothing else read)."""
        return [
            i
            for (i,) in self.db.execute(
                "SELECT id FROM archive WHERE kind = ? ORDER BY id", (kind,)
            )
        ]

    def archived_count(self, kind: str) -> int:
        ((n,),) = self.db.execute("SELECT COUNT(*) FROM archive WHERE kind = ?", (kind,))
        return int(n)

    def archive(
        self,
        kind: str,
        path: str,
        url: str,
        *,
        at: datetime | None = None,
        completed: datetime | None = None,
        from_: datetime | None = None,
        until: datetime | None = None,
        extra: str | None = None,
    ) -> int:
        assert kind in ARCHIVE_KINDS, kind  # (what `check` reads)
        cur = self.db.execute(
            "INSERT INTO archive (kind, path, url, at, completed, from_, until, extra) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (kind, path, url, _ts(at), _ts(completed), _ts(from_), _ts(until), extra),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def forget(self, row_id: int) -> None:
        self.db.execute("DELETE FROM archive WHERE id = ?", (row_id,))

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        return transaction(self.db)
