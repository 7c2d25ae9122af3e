"""One scan of a resource set: the inventory compared with the snapshot its state holds.

A scan compares the inventory with the snapshot as two sorted streams (the snapshot is read
through a second connection, a stable view while the first one writes), or, for a directory
tree, each directory with the listing the last scan kept (`Scan._scan_tree`), so memory does not
grow with the number of resources. Only items whose fingerprint changed are read and hashed; a
file whose bytes did not change is not a change, whatever its mtime says. Everything a scan finds
is committed in one transaction: a run that dies half way leaves the previous state as it was,
and the next run finds the same changes again. What it writes goes through its `Journal`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..errors import ResourceSyncError
from ..hashing import MultiHasher, format_hashes, parse_hashes
from ..model import Resource
from ..sitemap.write import entry_xml
from ..w3cdt import format_w3c, parse_w3c
from .inventory import DirectoryInventory, Item, ScanStats, file_fingerprint
from .listings import ListingDamaged, record_of
from .packed import Listing, unpack
from .prefetch import ListingPrefetch
from .state import DIRTY, FOLD_AT, TICK, SetState, StateError, change_resource

__all__ = ["DeletionsRefused", "Journal", "Scan", "ScanResult"]

#: A file modified less than this before it was read may be written again within the
#: granularity of its timestamp, its size unchanged: its fingerprint is recorded as racy, so the
#: next run reads it again (git's "racily clean" entries).
RACY_NS = 2_000_000_000
_READ_ATTEMPTS = 4


def _same_file_state(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_size, a.st_mtime_ns, a.st_ctime_ns, a.st_ino) == (
        b.st_size,
        b.st_mtime_ns,
        b.st_ctime_ns,
        b.st_ino,
    )


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


class DeletionsRefused(ResourceSyncError):
    """A scan whose deletions its `refuse` check would not publish: nothing was recorded."""


class Scan:
    """One scan of a set: `Scan(state).run(inventory, algorithms)`."""

    def __init__(self, state: SetState) -> None:
        self.state = state
        self.db = state.db
        self._run_floor = 0  # (`run`)

    def run(
        self,
        inventory: Iterable[Item],
        algorithms: Sequence[str],
        *,
        dry_run: bool = False,
        progress: Callable[[int], None] | None = None,
        uri_base: str | None = None,
        only: Iterable[str] | None = None,
        refuse: Callable[[ScanResult], str | None] | None = None,
        prefetch: ListingPrefetch | None = None,
    ) -> ScanResult:
        """Compare the inventory with the snapshot, record what changed, commit (unless dry).

        `refuse`: looks at what the scan found before it is recorded; a reason it returns is
        raised as `DeletionsRefused`, and nothing of the scan is recorded (a dry run too).

        `uri_base`: the inventory makes every URI from its key and this base, so while the base
        stays the same an unchanged item's URI need not be compared (nor even worked out).

        A `DirectoryInventory` is compared directory by directory with the listings the last
        scan kept (`_scan_tree`); `only` then limits the scan to those directories (relative
        paths ending in "/", "" for the root), when the state has listings to compare with.
        `prefetch`: the tree's listings begun before (`prefetch.head_start`), for a whole
        re-run to take over (and end once its walk is done); whoever began it ends it too.
        """
        algorithms = tuple(algorithms)
        started = self.state.clock()
        run_row = self.db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM runs").fetchone()
        result = ScanResult(run=run_row[0], started=started, completed=started)
        result.baseline = self.state.get("baselined") is None
        snapshot = sqlite3.connect(self.state.path, timeout=30, isolation_level=None)
        try:
            self._begin()
        except StateError:
            snapshot.close()
            raise
        # The journal's last change before this run: this run's come after it (the journal
        # is looked at from there, never scanned whole: it holds the Source's whole history).
        self._run_floor = self.state.max_seq()
        try:
            snapshot.execute("BEGIN")
            old_rows = snapshot.execute(
                "SELECT key, uri, fingerprint, lastmod, length, type, hashes "
                "FROM snapshot ORDER BY key"
            )
            uris_stable = uri_base is not None and self.state.get("uri_base") == uri_base
            signature = None
            if isinstance(inventory, DirectoryInventory):
                signature = inventory.signature(algorithms)
                inventory.stats = ScanStats()
            if signature is not None and (
                result.baseline or (uris_stable and self.state.get("dirs_for") == signature)
            ):
                assert isinstance(inventory, DirectoryInventory)
                if result.baseline:
                    self._forget_listings()
                    only = None
                try:
                    self._scan_tree(inventory, algorithms, result, progress, only, prefetch)
                except ListingDamaged as exc:
                    # The listings are the state's own shortcut: a damaged one costs this run
                    # a whole comparison with the snapshot (which lists every file, so a file
                    # gone is still found gone), never a wrong Resource List. What the scan
                    # wrote is undone with the transaction, begun again: a savepoint would have
                    # SQLite copy every page the scan changes aside first, on every run (a
                    # temporary file of 22 MB after 2,000 changes among 200,000 files).
                    self.db.execute("ROLLBACK")
                    self._begin()
                    result = ScanResult(
                        run=result.run, started=started, completed=started, baseline=result.baseline
                    )
                    inventory.stats = ScanStats()
                    self._merge(old_rows, inventory, algorithms, result, progress, uris_stable)
                    self._rebuild_listings(signature)
                    result.problems.append(
                        f"the state's listing of {exc}: the tree compared whole with the "
                        "snapshot, the listings made again"
                    )
                self.state.put("dirs_for", signature)
            else:
                self._merge(old_rows, inventory, algorithms, result, progress, uris_stable)
                if signature is not None:
                    self._rebuild_listings(signature)
                else:
                    self._forget_listings()
            if uri_base is not None:
                self.state.put("uri_base", uri_base)
            snapshot.execute("COMMIT")
            result.completed = self.state.clock()
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
                self.state.put("baselined", format_w3c(started))
            if refuse is not None and (why := refuse(result)) is not None:
                raise DeletionsRefused(why)  # rolled back below
            if not dry_run and self.state.pending_rows() > FOLD_AT:
                self.state.fold()
            self.db.execute("ROLLBACK" if dry_run else "COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self.db.execute("ROLLBACK")
            raise
        finally:
            snapshot.close()
        return result

    def _begin(self) -> None:
        """The run's write transaction (the state's writers wait for each other 30 s)."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StateError(
                f"the state is in use by another run ({exc})", source=str(self.state.path)
            ) from None

    def _merge(
        self,
        old_rows: Iterator[tuple[Any, ...]],
        inventory: Iterable[Item],
        algorithms: tuple[str, ...],
        result: ScanResult,
        progress: Callable[[int], None] | None,
        uris_stable: bool,
    ) -> None:
        j = Journal(self.state, algorithms, result)
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
                "AND uri IN (SELECT uri FROM snapshot)",
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
        started: ListingPrefetch | None = None,
    ) -> None:
        """Compare each directory's files with its listing as the last scan left it (the
        `dirs` table): an unchanged file costs its `stat` and one comparison, and only the
        files whose fingerprint differs are looked up in the snapshot (and read when needed).
        A listing is kept only for the state of the files recorded in `resources`: a racy or
        dirty file is kept as None (never equal), so it is compared again.

        `only`: the relative paths of the directories to look at (the watcher's), instead of
        the whole tree; a sub-directory they hold that the state does not know is walked whole,
        one that is gone is deleted with everything under it."""
        j = Journal(self.state, algorithms, result)
        listings = self.state.listings
        todo: list[tuple[str, bool]]
        if only is None:
            todo = [("", True)]
        else:
            todo = [(p, False) for p in sorted(listings.known(only), reverse=True)]
        # A whole re-run has its directories listed ahead by a second process where that pays
        # (one begun before the scan, `started`, taken over).
        prefetch = None
        if only is None:
            prefetch = ListingPrefetch.start(inventory, listings.sizes(), started)
        try:
            self._compare_dirs(j, inventory, todo, prefetch or inventory, result, progress)
        finally:
            if prefetch is not None:
                prefetch.close()
        j.flush()
        last = self.db.execute("SELECT resources FROM runs ORDER BY id DESC LIMIT 1").fetchone()
        j.finish(0 if result.baseline else last[0] if last is not None else None)

    def _compare_dirs(
        self,
        j: Journal,
        inventory: DirectoryInventory,
        todo: list[tuple[str, bool]],
        lister: DirectoryInventory | ListingPrefetch,
        result: ScanResult,
        progress: Callable[[int], None] | None,
    ) -> None:
        """`_scan_tree`'s loop: each directory of `todo` (and, where it says so, the ones
        under it) listed by `lister` and compared with its listing."""
        listings = self.state.listings
        root = str(inventory.root)
        done: set[str] = set()
        seen = 0
        while todo:
            prefix, recurse = todo.pop()
            if prefix in done:
                continue
            done.add(prefix)
            directory = os.path.join(root, prefix) if prefix else root
            listed = lister.list_dir(directory, prefix)
            unknown = inventory.stats.unknown
            if listed is None and prefix in unknown:
                # It exists but cannot be listed now (permissions, an I/O error, a stale NFS
                # handle): what was published of it stays as it was, listing included, and
                # the next run looks again. Its deletion would be published otherwise.
                continue
            files, subdirs = listed if listed is not None else (Listing.EMPTY, [])
            cached, old_files, delta, old_subdirs = listings.read(prefix)
            if unknown:
                # A name that could not be looked at keeps the state it was published with.
                files = files.changed(
                    {
                        name: rec
                        for key in unknown
                        if key.startswith(prefix)
                        and "/" not in (name := key[len(prefix) :])
                        and name not in files
                        and (rec := old_files.record(name)) is not None
                    }
                )
                subdirs += [n for n in old_subdirs if n not in subdirs and prefix + n in unknown]
            seen += len(files)
            # The files that differ from the listing: changed, gone, or new (compared packed:
            # only the few that differ are looked at one by one), in name order.
            differ = files.differ(old_files, prefix)
            kept = files
            if differ:
                result.unchanged += len(files) - sum(1 for _, rec in differ if rec is not None)
                # A first scan has nothing to look up.
                rows = {} if result.baseline else self._rows(prefix, (n for n, _ in differ))
                uri_prefix = inventory.uri_prefix(prefix)
                # The files whose record is not the one listed: changed while they were read,
                # racy, or not recorded.
                recorded: dict[str, bytes | bool] = {}
                for name, rec in differ:
                    old = rows.get(prefix + name)
                    if rec is None:
                        if old is not None:
                            j.deleted(old)
                        continue
                    st = unpack(rec)
                    if st is None:
                        continue  # kept as published (it could not be looked at): as it was
                    item = inventory.item(directory, prefix, name, st, uri_prefix)
                    stored = record_of(j.compare(item, old, True))
                    if stored != rec:
                        recorded[name] = stored
                kept = files.changed(recorded)
            else:
                result.unchanged += len(files)
            for name in sorted(set(old_subdirs) - set(subdirs)):
                self._delete_tree(j, prefix + name + "/")
            subdirs.sort()
            if cached is None or differ:
                same = cached is not None and subdirs == old_subdirs
                listings.store(
                    prefix, cached, delta, kept, (n for n, _ in differ), None if same else subdirs
                )
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

    def _rows(self, prefix: str, names: Iterable[str]) -> dict[str, tuple[Any, ...]]:
        """The snapshot's rows of some files of one directory, by key."""
        keys = [prefix + name for name in names]
        rows = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for row in self.db.execute(
                "SELECT key, uri, fingerprint, lastmod, length, type, hashes FROM snapshot "
                f"WHERE key IN ({marks})",
                chunk,
            ):
                rows[row[0]] = row
        return rows

    def _delete_tree(self, j: Journal, prefix: str) -> None:
        """Everything recorded under a directory that is gone (or no longer published)."""
        j.flush()
        end = prefix[:-1] + chr(ord("/") + 1)
        rows = self.db.execute(
            "SELECT key, uri, fingerprint, lastmod, length, type, hashes FROM snapshot "
            "WHERE key >= ? AND key < ? ORDER BY key",
            (prefix, end),
        ).fetchall()
        for row in rows:
            j.deleted(row)
        j.flush()
        self.state.listings.drop_under(prefix)

    def _rebuild_listings(self, signature: str) -> None:
        """The directory listings of the snapshot, derived from `resources` (after a scan that
        did not keep them): grouped by directory in SQL, so memory holds one directory."""
        self.state.listings.rebuild(
            self.db.execute(
                "SELECT rtrim(key, replace(key, '/', '')) AS dir, key, fingerprint "
                "FROM snapshot ORDER BY dir, key"
            )
        )
        self.state.put("dirs_for", signature)

    def _forget_listings(self) -> None:
        self.state.listings.forget()
        self.db.execute("DELETE FROM meta WHERE key = 'dirs_for'")


def change_xml(entry: bytes, change: str, when: str) -> bytes:
    """The Change List entry of a resource created or updated, from its Resource List entry
    (`entry_xml`, as the snapshot keeps it): the same entry with the change and its time first
    in its `rs:md`, where the serializer puts them (a third of a change's cost in a re-run was
    serializing its entry a second time)."""
    return entry.replace(b"<rs:md", f'<rs:md change="{change}" datetime="{when}"'.encode(), 1)


class Journal:
    """What a scan writes: snapshot rows, journal entries and deletions, in batches, with
    strictly increasing change times."""

    def __init__(self, state: SetState, algorithms: tuple[str, ...], result: ScanResult) -> None:
        self.state = state
        self.db = state.db
        self.algorithms = algorithms
        self.result = result
        self.journal = not result.baseline
        if not self.journal:
            # A first scan writes `resources` itself, under no pending row (there are none
            # before a first scan is recorded; folded, should there be).
            state.fold()
        self.changes: list[tuple[Any, ...]] = []
        self.upserts: list[tuple[Any, ...]] = []
        self.deletes: list[tuple[str]] = []
        self.first_dt = state.last_datetime
        self.last_dt = self.first_dt
        #: Items compared (for progress).
        self.count = 0

    def stamp(self) -> str:
        now = self.state.clock()
        prev = self.last_dt
        t = now if prev is None or now > prev else prev + TICK
        self.last_dt = t
        return format_w3c(t)

    def pending(self) -> int:
        return max(len(self.upserts), len(self.changes))

    def flush(self) -> None:
        # A re-run's rows go to the state's pending rows, in the order they come (not a page
        # of `resources` rewritten for each); a first scan's to `resources` (state.py).
        self.state.write_rows(self.upserts, self.deletes, pending=self.journal)
        self.upserts.clear()
        self.deletes.clear()
        if self.changes:
            self.db.executemany(
                "INSERT INTO changes (key, uri, change, datetime, lastmod, length, type, "
                "hashes, run, xml) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                self.changes,
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

    def digests(self, item: Item) -> tuple[int, dict[str, str]] | None:
        """The length and digests of an item (read and hashed unless it carries them); None
        when it cannot be read now (reported; the next run tries again)."""
        algorithms = self.algorithms
        result = self.result
        if item.hashes and all(a in item.hashes for a in algorithms):
            return item.length, {a: item.hashes[a] for a in algorithms}
        result.rehashed += 1
        try:
            if item.fspath is not None:
                return self._hash_file(item)
            hasher = MultiHasher(algorithms)
            with item.open() as f:
                while chunk := f.read(1 << 20):
                    hasher.update(chunk)
        except OSError as exc:
            # Unreadable now (permissions, vanished): left as it was, reported, tried next run.
            result.problems.append(f"{item.key}: {exc.strerror or exc}")
            return None
        return hasher.length, hasher.hexdigests()

    def _hash_file(self, item: Item) -> tuple[int, dict[str, str]] | None:
        """Hash a file and describe it by the stat of the bytes that were hashed: the file is
        read between two `fstat`s, again while they differ (it was written meanwhile), and the
        item's fingerprint, length and modification time become those of the second one. A
        file modified just before it was read gets a racy fingerprint (read again next run)."""
        assert item.fspath is not None
        for _ in range(_READ_ATTEMPTS):
            hasher = MultiHasher(self.algorithms)
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
            self.result.problems.append(f"{item.key}: changing while it was read; tried next run")
            return None
        fingerprint = file_fingerprint(after)
        if time.time_ns() - max(after.st_mtime_ns, after.st_ctime_ns) < RACY_NS:
            fingerprint = "racy:" + fingerprint
        item.restat(fingerprint, after.st_size, after.st_mtime_ns)
        return hasher.length, hasher.hexdigests()

    def deleted(self, row: tuple[Any, ...]) -> None:
        key, uri, _, lastmod, length, kind, hashes = row
        self.deletes.append((key,))
        self.result.deleted += 1
        if self.journal:
            when = self.stamp()
            xml = entry_xml(change_resource(uri, "deleted", when, lastmod, length, kind, hashes))
            self.changes.append(
                (key, uri, "deleted", when, lastmod, length, kind, hashes, self.result.run, xml)
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
            digests = self.digests(item)
            if digests is None:
                return str(old_fp)
            length, hashes = digests
            try:
                stored = parse_hashes(old_hashes)
                same = length == old_length and all(
                    stored.get(a) == v for a, v in hashes.items() if a in stored
                )
                kept = parse_w3c(old_lastmod) if same else None
            except (ValueError, TypeError) as exc:
                # The snapshot's record of it, damaged: published as updated (a Destination
                # fetches it again and checks it), never taken for the file it was.
                result.problems.append(
                    f"the state's record of {key} cannot be read ({exc}): published as updated"
                )
                same, kept = False, None
            if same and kept is not None and old_fp != DIRTY:
                # Touched, copied back, or new algorithms: not a change.
                result.touched += 1
                self.upsert(key, item.uri, item.fingerprint, kept, length, item.type, hashes)
                return item.fingerprint
            result.updated += 1
            change = "updated"
        else:
            digests = self.digests(item)
            if digests is None:
                return None
            length, hashes = digests
            result.created += 1
            change = "created"
        row = self.upsert(
            key, item.uri, item.fingerprint, item.modified(), length, item.type, hashes
        )
        if self.journal:
            when = self.stamp()
            self.changes.append(
                (
                    key,
                    item.uri,
                    change,
                    when,
                    *row[3:7],
                    self.result.run,
                    change_xml(row[7], change, when),
                )
            )
        return item.fingerprint
