"""The state of a resource set: the last snapshot and the append-only change journal (SQLite).

One database per set (WAL mode). A scan compares the inventory with the snapshot as two sorted
streams (the snapshot is read through a second connection, a stable view while the first one
writes), so memory does not grow with the number of resources. Only items whose fingerprint
changed are read and hashed; a file whose bytes did not change is not a change, whatever its
mtime says. Everything a scan finds is committed in one transaction: a run that dies half way
leaves the previous state as it was, and the next run finds the same changes again.

Change datetimes are distinct and strictly increasing within a set (microseconds), so
(URI, datetime) is unique, as the specification asks.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from ..errors import ResourceSyncError
from ..hashing import MultiHasher, format_hashes, parse_hashes
from ..model import Resource
from ..sitemap.write import entry_xml
from ..sqlite import connect, transaction
from ..w3cdt import format_w3c, parse_w3c
from .inventory import DirectoryInventory, Item, ScanStats, Stat, file_fingerprint
from .listings import Listings, stat_of

__all__ = ["ChangeListRow", "ScanResult", "SetState", "StateError"]

SCHEMA_VERSION = 1
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
CREATE TABLE IF NOT EXISTS dirs (
    path TEXT PRIMARY KEY,
    files BLOB NOT NULL,
    subdirs BLOB NOT NULL,
    delta BLOB
) WITHOUT ROWID;
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
"""
TICK = timedelta(microseconds=1)
#: A file modified less than this before it was read may be written again within the
#: granularity of its timestamp, its size unchanged: its fingerprint is recorded as racy, so the
#: next run reads it again (git's "racily clean" entries).
RACY_NS = 2_000_000_000
#: A resource whose published bytes may differ from its recorded digests (a dump packaged other
#: bytes than the scan hashed): the next scan reads it and journals it as updated.
DIRTY = "dirty"
_READ_ATTEMPTS = 4


class StateError(ResourceSyncError):
    """The state database cannot be used (locked by another run, newer format, corrupt)."""


def _same_file_state(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_size, a.st_mtime_ns, a.st_ctime_ns, a.st_ino) == (
        b.st_size,
        b.st_mtime_ns,
        b.st_ctime_ns,
        b.st_ino,
    )


def _change(
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
class ScanResult:
    """What one scan found."""

    run: int
    started: datetime
    completed: datetime
    resources: int = 0
    created: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    rehashed: int = 0
    touched: int = 0
    baseline: bool = False
    first_seq: int | None = None
    last_seq: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def changes(self) -> int:
        return self.created + self.updated + self.deleted


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


class DeletionsRefused(ResourceSyncError):
    """A scan whose deletions its `refuse` check would not publish: nothing was recorded."""


class SetState:
    """The SQLite state of one resource set."""

    def __init__(self, path: str | Path, *, clock: Callable[[], datetime] | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._clock = clock or (lambda: datetime.now(UTC))
        self.db = connect(self.path, _SCHEMA, error=StateError)
        self.listings = Listings(self.db)
        self._run_floor = 0  # (`scan`)
        version = self.get("schema")
        if version is None:
            self.put("schema", str(SCHEMA_VERSION))
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
            # A listing's changes since it was last written whole (see source/listings.py).
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
        now = self._clock()
        last = self.last_datetime
        candidate = max(now, floor) if floor else now
        if last is not None and candidate <= last:
            candidate = last + TICK
        return candidate.replace(tzinfo=UTC) if candidate.tzinfo is None else candidate

    # -- scanning --------------------------------------------------------------------------

    def scan(
        self,
        inventory: Iterable[Item],
        algorithms: Sequence[str],
        *,
        dry_run: bool = False,
        progress: Callable[[int], None] | None = None,
        uri_base: str | None = None,
        only: Iterable[str] | None = None,
        refuse: Callable[[ScanResult], str | None] | None = None,
    ) -> ScanResult:
        """Compare the inventory with the snapshot, record what changed, commit (unless dry).

        `refuse`: looks at what the scan found before it is recorded; a reason it returns is
        raised as `DeletionsRefused`, and nothing of the scan is recorded (a dry run too).

        `uri_base`: the inventory makes every URI from its key and this base, so while the base
        stays the same an unchanged item's URI need not be compared (nor even worked out).

        A `DirectoryInventory` is compared directory by directory with the listings the last
        scan kept (`_scan_tree`); `only` then limits the scan to those directories (relative
        paths ending in "/", "" for the root), when the state has listings to compare with.
        """
        algorithms = tuple(algorithms)
        started = self._clock()
        run_row = self.db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM runs").fetchone()
        result = ScanResult(run=run_row[0], started=started, completed=started)
        result.baseline = self.get("baselined") is None
        snapshot = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            snapshot.close()
            raise StateError(
                f"the state is in use by another run ({exc})", source=str(self.path)
            ) from None
        # The journal's last change before this run: this run's come after it (the journal
        # is looked at from there, never scanned whole: it holds the Source's whole history).
        self._run_floor = self.max_seq()
        try:
            snapshot.execute("BEGIN")
            old_rows = snapshot.execute(
                "SELECT key, uri, fingerprint, lastmod, length, type, hashes "
                "FROM resources ORDER BY key"
            )
            uris_stable = uri_base is not None and self.get("uri_base") == uri_base
            signature = None
            if isinstance(inventory, DirectoryInventory):
                signature = inventory.signature(algorithms)
                inventory.stats = ScanStats()
            if signature is not None and (
                result.baseline or (uris_stable and self.get("dirs_for") == signature)
            ):
                assert isinstance(inventory, DirectoryInventory)
                if result.baseline:
                    self._forget_listings()
                    only = None
                self._scan_tree(inventory, algorithms, result, progress, only)
                self.put("dirs_for", signature)
            else:
                self._merge(old_rows, inventory, algorithms, result, progress, uris_stable)
                if signature is not None:
                    self._rebuild_listings(signature)
                else:
                    self._forget_listings()
            if uri_base is not None:
                self.put("uri_base", uri_base)
            snapshot.execute("COMMIT")
            result.completed = self._clock()
            if result.changes:
                seqs = self.db.execute(
                    "SELECT MIN(seq), MAX(seq) FROM changes WHERE seq > ? AND run = ?",
                    (self._run_floor, result.run),
                ).fetchone()
                result.first_seq, result.last_seq = seqs
            self.db.execute(
                "INSERT INTO runs (id, started, completed, resources, created, updated, "
                "deleted, first_seq, last_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    result.run,
                    format_w3c(started),
                    format_w3c(result.completed),
                    result.resources,
                    result.created,
                    result.updated,
                    result.deleted,
                    result.first_seq,
                    result.last_seq,
                ),
            )
            if result.baseline:
                # Changes are listed from the moment the baseline scan began (the Resource
                # List's `at`): nothing between the two can fall through.
                self.put("baselined", format_w3c(started))
            if refuse is not None and (why := refuse(result)) is not None:
                raise DeletionsRefused(why)  # rolled back below
            self.db.execute("ROLLBACK" if dry_run else "COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self.db.execute("ROLLBACK")
            raise
        finally:
            snapshot.close()
        return result

    def _merge(
        self,
        old_rows: Iterator[tuple[Any, ...]],
        inventory: Iterable[Item],
        algorithms: tuple[str, ...],
        result: ScanResult,
        progress: Callable[[int], None] | None,
        uris_stable: bool,
    ) -> None:
        j = _Journal(self, algorithms, result)
        # What the inventory could not read this time stays as it was published (see
        # `ScanStats.unknown`): not listed is not deleted then.
        kept: Callable[[str], bool] = getattr(inventory, "kept", lambda key: False)

        def unlisted(row: tuple[Any, ...]) -> None:
            if kept(row[0]):
                result.unchanged += 1
            else:
                j.deleted(row)

        old = next(old_rows, None)
        previous_key: str | None = None
        for count, item in enumerate(inventory, 1):
            key = item.key
            if previous_key is not None and key <= previous_key:
                raise ResourceSyncError(
                    f"the inventory is not in ascending key order: {key!r} after {previous_key!r}"
                )
            previous_key = key
            while old is not None and old[0] < key:
                unlisted(old)
                old = next(old_rows, None)
            if progress is not None and count % 1000 == 0:
                progress(count)
            if old is not None and old[0] == key and not uris_stable and old[1] != item.uri:
                # The same key at another URI (the base URL moved): to a Destination that is a
                # resource gone and another one come.
                j.deleted(old)
                old = next(old_rows, None)
            if old is not None and old[0] == key:
                j.compare(item, old, uris_stable)
                old = next(old_rows, None)
            else:
                j.compare(item, None, uris_stable)
        while old is not None:
            unlisted(old)
            old = next(old_rows, None)
        j.flush()
        if j.journal and not uris_stable and result.deleted:
            # The base URL moved, so a URI can leave one key and come to another in the same
            # run (its old key deleted after the new one was created, in key order): it was
            # not deleted, and a Destination replaying the Change List must not delete it.
            gone = self.db.execute(
                "DELETE FROM changes WHERE seq > ? AND run = ? AND change = 'deleted' "
                "AND uri IN (SELECT uri FROM resources)",
                (self._run_floor, result.run),
            ).rowcount
            result.deleted -= gone
        j.finish()

    # -- the directory listings: a re-run that costs what changed -----------------------------

    def _scan_tree(
        self,
        inventory: DirectoryInventory,
        algorithms: tuple[str, ...],
        result: ScanResult,
        progress: Callable[[int], None] | None,
        only: Iterable[str] | None,
    ) -> None:
        """Compare each directory's files with its listing as the last scan left it (the
        `dirs` table): an unchanged file costs its `stat` and one comparison, and only the
        files whose fingerprint differs are looked up in the snapshot (and read when needed).
        A listing is kept only for the state of the files recorded in `resources`: a racy or
        dirty file is kept as None (never equal), so it is compared again.

        `only`: the relative paths of the directories to look at (the watcher's), instead of
        the whole tree; a sub-directory they hold that the state does not know is walked whole,
        one that is gone is deleted with everything under it."""
        j = _Journal(self, algorithms, result)
        listings = self.listings
        root = str(inventory.root)
        todo: list[tuple[str, bool]]
        if only is None:
            todo = [("", True)]
        else:
            todo = [(p, False) for p in sorted(listings.known(only), reverse=True)]
        done: set[str] = set()
        seen = 0
        while todo:
            prefix, recurse = todo.pop()
            if prefix in done:
                continue
            done.add(prefix)
            directory = os.path.join(root, prefix) if prefix else root
            listed = inventory.list_dir(directory, prefix)
            unknown = inventory.stats.unknown
            if listed is None and prefix in unknown:
                # It exists but cannot be listed now (permissions, an I/O error, a stale NFS
                # handle): what was published of it stays as it was, listing included, and
                # the next run looks again. Its deletion would be published otherwise.
                continue
            files, subdirs = listed if listed is not None else ({}, [])
            cached, old_files, delta, old_subdirs = listings.read(prefix)
            if unknown:
                # A name that could not be looked at keeps the state it was published with.
                into = cast("dict[str, Stat | None]", files)
                for name, st in old_files.items():
                    if name not in files and prefix + name in unknown:
                        into[name] = st
                subdirs += [n for n in old_subdirs if n not in subdirs and prefix + n in unknown]
            seen += len(files)
            differ: set[str] = set()
            # Stays empty when nothing differs: then a listing is stored only for a
            # directory the state did not hold, which is empty.
            kept: dict[str, Stat | None] = {}
            if files != old_files:
                # What differs (one lookup and comparison per file), then handled in key
                # order, as a whole scan would.
                old_get = old_files.get
                differ = {name for name, st in files.items() if old_get(name) != st}
                differ |= old_files.keys() - files.keys()
                result.unchanged += len(files) - len(differ & files.keys())
                kept = dict(files)
                # A first scan has nothing to look up.
                rows = {} if result.baseline else self._rows(prefix, differ)
                uri_prefix = inventory.uri_prefix(prefix)
                for name in sorted(differ):
                    old = rows.get(prefix + name)
                    st = files.get(name)
                    if st is None:
                        if old is not None:
                            j.deleted(old)
                        continue
                    item = inventory.item(directory, prefix, name, st, uri_prefix)
                    stored = j.compare(item, old, True)
                    kept[name] = stat_of(stored)
            else:
                result.unchanged += len(files)
            for name in sorted(set(old_subdirs) - set(subdirs)):
                self._delete_tree(j, prefix + name + "/")
            subdirs.sort()
            if cached is None or differ:
                listings.store(prefix, cached, delta, kept, differ, subdirs)
            elif subdirs != old_subdirs:
                listings.set_subdirs(prefix, subdirs)
            known = set(old_subdirs)
            for name in reversed(subdirs):
                if recurse or name not in known:
                    todo.append((prefix + name + "/", True))
            if progress is not None and seen >= 1000:
                progress(result.unchanged + j.count)
                seen = 0
            if j.pending() >= 2000:
                j.flush()
        j.flush()
        last = self.db.execute("SELECT resources FROM runs ORDER BY id DESC LIMIT 1").fetchone()
        j.finish(0 if result.baseline else last[0] if last is not None else None)

    def _rows(self, prefix: str, names: Iterable[str]) -> dict[str, tuple[Any, ...]]:
        """The snapshot's rows of some files of one directory, by key."""
        keys = [prefix + name for name in names]
        rows = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for row in self.db.execute(
                "SELECT key, uri, fingerprint, lastmod, length, type, hashes FROM resources "
                f"WHERE key IN ({marks})",
                chunk,
            ):
                rows[row[0]] = row
        return rows

    def _delete_tree(self, j: _Journal, prefix: str) -> None:
        """Everything recorded under a directory that is gone (or no longer published)."""
        j.flush()
        end = prefix[:-1] + chr(ord("/") + 1)
        rows = self.db.execute(
            "SELECT key, uri, fingerprint, lastmod, length, type, hashes FROM resources "
            "WHERE key >= ? AND key < ? ORDER BY key",
            (prefix, end),
        ).fetchall()
        for row in rows:
            j.deleted(row)
        j.flush()
        self.listings.drop_under(prefix)

    def _rebuild_listings(self, signature: str) -> None:
        """The directory listings of the snapshot, derived from `resources` (after a scan that
        did not keep them): grouped by directory in SQL, so memory holds one directory."""
        self.listings.rebuild(
            self.db.execute(
                "SELECT rtrim(key, replace(key, '/', '')) AS dir, key, fingerprint "
                "FROM resources ORDER BY dir, key"
            )
        )
        self.put("dirs_for", signature)

    def _forget_listings(self) -> None:
        self.listings.forget()
        self.db.execute("DELETE FROM meta WHERE key = 'dirs_for'")

    def _digests(
        self, item: Item, algorithms: tuple[str, ...], result: ScanResult
    ) -> tuple[int, dict[str, str]] | None:
        if item.hashes and all(a in item.hashes for a in algorithms):
            return item.length, {a: item.hashes[a] for a in algorithms}
        result.rehashed += 1
        try:
            if item.fspath is not None:
                return self._hash_file(item, algorithms, result)
            hasher = MultiHasher(algorithms)
            with item.open() as f:
                while chunk := f.read(1 << 20):
                    hasher.update(chunk)
        except OSError as exc:
            # Unreadable now (permissions, vanished): left as it was, reported, tried next run.
            result.problems.append(f"{item.key}: {exc.strerror or exc}")
            return None
        return hasher.length, hasher.hexdigests()

    def _hash_file(
        self, item: Item, algorithms: tuple[str, ...], result: ScanResult
    ) -> tuple[int, dict[str, str]] | None:
        """Hash a file and describe it by the stat of the bytes that were hashed: the file is
        read between two `fstat`s, again while they differ (it was written meanwhile), and the
        item's fingerprint, length and modification time become those of the second one. A
        file modified just before it was read gets a racy fingerprint (read again next run)."""
        assert item.fspath is not None
        for _ in range(_READ_ATTEMPTS):
            hasher = MultiHasher(algorithms)
            fd = os.open(item.fspath, os.O_RDONLY)
            try:
                before = os.fstat(fd)
                size = before.st_size
                step = size + 1 if size < (1 << 20) else 1 << 20
                while chunk := os.read(fd, step):
                    hasher.update(chunk)
                    if len(chunk) <= size and hasher.length == size and step > size:
                        break  # a small file in one read
                after = os.fstat(fd)
            finally:
                os.close(fd)
            if _same_file_state(before, after) and hasher.length == after.st_size:
                break
        else:
            result.problems.append(f"{item.key}: changing while it was read; tried next run")
            return None
        fingerprint = file_fingerprint(after)
        if time.time_ns() - max(after.st_mtime_ns, after.st_ctime_ns) < RACY_NS:
            fingerprint = "racy:" + fingerprint
        item.restat(fingerprint, after.st_size, after.st_mtime_ns)
        return hasher.length, hasher.hexdigests()

    def mark_dirty(self, keys: Iterable[str]) -> None:
        """Resources whose published bytes may differ from their recorded digests: the next
        scan reads them again and journals each as updated."""
        keys = list(keys)
        self.db.executemany(
            "UPDATE resources SET fingerprint = ? WHERE key = ?", ((DIRTY, k) for k in keys)
        )
        # …and their directories' listings compare them again.
        for key in keys:
            self.listings.mark(key)

    # -- reading ---------------------------------------------------------------------------

    def resources(self) -> Iterator[Resource]:
        """The snapshot, in key order, as Resource List entries."""
        cur = self.db.execute(
            "SELECT uri, lastmod, length, type, hashes FROM resources ORDER BY key"
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
        for (xml,) in self.db.execute("SELECT xml FROM resources ORDER BY key"):
            yield bytes(xml)

    def resource_rows(self) -> Iterator[tuple[str, str, str, int, str | None, str]]:
        """(key, uri, lastmod, length, type, hashes) in key order (for dump packages)."""
        # A loop, not `yield from`: a generator closed after the database (a run stopped by
        # Ctrl-C or SIGTERM) must not close its cursor on a closed database (issue 14.4).
        for row in self.db.execute(  # noqa: UP028 (see above)
            "SELECT key, uri, lastmod, length, type, hashes FROM resources ORDER BY key"
        ):
            yield row

    def count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM resources").fetchone()[0])

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
            yield _change(*row)

    def change_entries(self, first_seq: int, last_seq: int | None = None) -> Iterator[bytes]:
        """Like `changes`, as Change List entries serialized for version 1.1 (kept since they
        were journaled: rewriting the open Change List costs no parsing)."""
        hi = last_seq if last_seq is not None else 1 << 62
        cur = self.db.execute(
            "SELECT uri, change, datetime, lastmod, length, type, hashes, xml FROM changes "
            "WHERE seq BETWEEN ? AND ? ORDER BY seq",
            (first_seq, hi),
        )
        for *row, xml in cur:
            yield bytes(xml) if xml is not None else entry_xml(_change(*row))

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
            yield key, _change(*row)

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

    def changelists(self) -> list[ChangeListRow]:
        return [
            ChangeListRow(i, first, last, parse_w3c(f), _dt(u))
            for i, first, last, f, u in self.db.execute(
                "SELECT id, first_seq, last_seq, from_, until FROM changelists ORDER BY id"
            )
        ]

    def open_changelist(self, start: datetime) -> ChangeListRow:
        """The open Change List, started at `start` when there is none yet."""
        row = self.db.execute(
            "SELECT id, first_seq, last_seq, from_, until FROM changelists "
            "WHERE until IS NULL ORDER BY id DESC LIMIT 1"
        ).fetchone()
        if row:
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
        return [
            (i, a, b, parse_w3c(f), parse_w3c(u))
            for i, a, b, f, u in self.db.execute(q + " ORDER BY id")
        ]

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

    def archived(self, kind: str) -> list[ArchiveRow]:
        return [
            ArchiveRow(k, i, p, u, _dt(a), _dt(c), _dt(f), _dt(t), e)
            for k, i, p, u, a, c, f, t, e in self.db.execute(
                "SELECT kind, id, path, url, at, completed, from_, until, extra FROM archive "
                "WHERE kind = ? ORDER BY id",
                (kind,),
            )
        ]

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


class _Journal:
    """What a scan writes: snapshot rows, journal entries and deletions, in batches, with
    strictly increasing change times."""

    def __init__(self, state: SetState, algorithms: tuple[str, ...], result: ScanResult) -> None:
        self.state = state
        self.db = state.db
        self.algorithms = algorithms
        self.result = result
        self.journal = not result.baseline
        self.changes: list[tuple[Any, ...]] = []
        self.upserts: list[tuple[Any, ...]] = []
        self.deletes: list[tuple[str]] = []
        self.first_dt = state.last_datetime
        self.last_dt = self.first_dt
        #: Items compared (for progress).
        self.count = 0

    def stamp(self) -> str:
        now = self.state._clock()
        prev = self.last_dt
        t = now if prev is None or now > prev else prev + TICK
        self.last_dt = t
        return format_w3c(t)

    def pending(self) -> int:
        return max(len(self.upserts), len(self.changes))

    def flush(self) -> None:
        # Deletions first: a key can be deleted (moved URI) and written again in one batch.
        if self.deletes:
            self.db.executemany("DELETE FROM resources WHERE key = ?", self.deletes)
            self.deletes.clear()
        if self.upserts:
            self.db.executemany(
                "INSERT OR REPLACE INTO resources (key, uri, fingerprint, lastmod, length, "
                "type, hashes, xml) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                self.upserts,
            )
            self.upserts.clear()
        if self.changes:
            self.db.executemany(
                "INSERT INTO changes (key, uri, change, datetime, lastmod, length, type, "
                "hashes, run, xml) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(*row, entry_xml(_change(*row[1:8]))) for row in self.changes],
            )
            self.changes.clear()

    def finish(self, before: int | None = None) -> None:
        """`before`: how many resources the snapshot held before (the count follows from what
        this scan created and deleted, without counting the rows again)."""
        r = self.result
        r.resources = self.state.count() if before is None else before + r.created - r.deleted
        if self.last_dt is not None and self.last_dt != self.first_dt:
            self.state.put("last_datetime", format_w3c(self.last_dt))

    def upsert(
        self,
        key: str,
        uri: str,
        fingerprint: str,
        lastmod: datetime,
        length: int,
        kind: str | None,
        hashes: dict[str, str],
    ) -> tuple[Any, ...]:
        # The Resource List entry is serialized here, once, while its values are at hand.
        xml = entry_xml(Resource(loc=uri, lastmod=lastmod, length=length, type=kind, hashes=hashes))
        row = (key, uri, fingerprint, format_w3c(lastmod), length, kind, format_hashes(hashes), xml)
        self.upserts.append(row)
        return row

    def deleted(self, row: tuple[Any, ...]) -> None:
        key, uri, _, lastmod, length, kind, hashes = row
        self.deletes.append((key,))
        self.result.deleted += 1
        if self.journal:
            self.changes.append(
                (key, uri, "deleted", self.stamp(), lastmod, length, kind, hashes, self.result.run)
            )

    def compare(self, item: Item, old: tuple[Any, ...] | None, uris_stable: bool) -> str | None:
        """Record `item` against its row in the snapshot (`old`, None when new); returns the
        fingerprint the snapshot holds for it now (None: not recorded)."""
        result = self.result
        algorithms = self.algorithms
        key = item.key
        self.count += 1
        if self.pending() >= 2000:
            self.flush()
        if old is not None:
            _, old_uri, old_fp, old_lastmod, old_length, _, old_hashes = old
            if (
                old_fp == item.fingerprint
                and (uris_stable or old_uri == item.uri)
                and all(f"{a}:" in old_hashes for a in algorithms)
            ):
                result.unchanged += 1
                return str(old_fp)
            digests = self.state._digests(item, algorithms, result)
            if digests is None:
                return str(old_fp)
            length, hashes = digests
            stored = parse_hashes(old_hashes)
            same = length == old_length and all(
                stored.get(a) == v for a, v in hashes.items() if a in stored
            )
            if same and old_fp != DIRTY:
                # Touched, copied back, or new algorithms: not a change.
                result.touched += 1
                self.upsert(
                    key,
                    item.uri,
                    item.fingerprint,
                    parse_w3c(old_lastmod),
                    length,
                    item.type,
                    hashes,
                )
                return item.fingerprint
            result.updated += 1
            change = "updated"
        else:
            digests = self.state._digests(item, algorithms, result)
            if digests is None:
                return None
            length, hashes = digests
            result.created += 1
            change = "created"
        row = self.upsert(
            key, item.uri, item.fingerprint, item.modified(), length, item.type, hashes
        )
        if self.journal:
            self.changes.append((key, item.uri, change, self.stamp(), *row[3:7], self.result.run))
        return item.fingerprint
