"""The directory listings a Source's state keeps between scans (issue 15.3).

A re-run compares each directory with the listing the last scan left (`SetState._scan_tree`):
its files as a `packed.Listing` (names sorted, stats packed; a file that must be compared again
(racy, dirty) as `UNSURE`), and its sub-directories. One row of the state's `dirs` table a
directory, `marshal`led. A re-run that finds a few changes in a directory keeps them as the
listing's delta instead of writing the listing again (after 1 % of 200,000 files changed, 200
listings were 11 MB to write and checkpoint); the listing is written whole when its delta
passes an eighth of it. The delta is a row of its own (`dir_deltas`): SQLite writes a row
again whole, its overflow pages included, whenever its size changes, so a delta kept in the
listing's row cost every changed directory its whole listing read back and written again (the
11 MB the delta was to spare: 69 MB written in all for 2,000 changes among 200,000 files).

Listings of another form (the dictionaries of tuples of a resourcesync from before
`packed.Listing`, with their deltas in the listing's row) are never read: the inventory's
signature names the form, and a state whose listings were kept for another signature is
compared whole with the snapshot once, its listings made again (`Scan.run`).

Ground floor of the Source's state: imports only the packed listing (and, to look at a state
before it is opened, `peek`, the SQLite habits).
"""

from __future__ import annotations

import marshal
import sqlite3
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .packed import GONE, SIZE, UNSURE, Listing, ListingDamaged, record

__all__ = ["Cached", "Delta", "Listing", "ListingDamaged", "Listings", "peek", "record_of"]

#: Names changed since the listing was written whole: their record, or `GONE`.
Delta = dict[str, bytes | bool]
#: A directory's listing as read: its bytes, its sub-directories' bytes, its delta's bytes.
Cached = tuple[bytes, bytes, bytes | None]

#: The number of changes a listing's delta may always hold before it is written whole.
_DELTA_MIN = 16


def record_of(fingerprint: str | None) -> bytes:
    """A file fingerprint (`inventory.file_fingerprint`) as a listing keeps it: `UNSURE` for
    one that must be compared again (racy, dirty, not recorded, or not a file's)."""
    if fingerprint is None:
        return UNSURE
    parts = fingerprint.split(":")
    if len(parts) != 4:
        return UNSURE
    try:
        size, mtime_ns, ino, ctime_ns = (int(p) for p in parts)
        return record((size, mtime_ns, ino, ctime_ns))
    except (ValueError, OverflowError):
        return UNSURE


def _listing_id(blob: bytes) -> bytes:
    """What names a listing's bytes, for its delta: their length and CRC-32 (18 µs a 55 KB
    listing, against 89 µs for 8 bytes of BLAKE2b: it is taken twice a changed directory on
    every re-run). It guards against a listing written whole by a writer that left the delta
    in place, not against an adversary; a delta named otherwise is dropped, and the files it
    held are compared again."""
    return len(blob).to_bytes(4, "little") + zlib.crc32(blob).to_bytes(4, "little")


def _loads(blob: bytes, prefix: str) -> Any:
    try:
        return marshal.loads(blob)
    except (ValueError, EOFError, TypeError) as exc:
        raise ListingDamaged(prefix, str(exc)) from None


def _subdirs(blob: bytes, prefix: str) -> list[str]:
    value = _loads(blob, prefix)
    if type(value) is not list:
        raise ListingDamaged(prefix, f"a {type(value).__name__} where sub-directories were kept")
    return value


def _delta(blob: bytes, over: bytes, prefix: str) -> Delta | None:
    """The delta `blob` kept over the listing whose bytes are `over`; None when it was kept
    over other bytes (a listing written whole since by a writer that left it in place)."""
    kept = _loads(blob, prefix)
    if type(kept) is not tuple or len(kept) != 2 or type(kept[1]) is not dict:
        raise ListingDamaged(prefix, "a delta of another shape")
    if kept[0] != _listing_id(over):
        return None
    delta: Delta = kept[1]
    for name, rec in delta.items():
        if (
            type(name) is not str
            or not name
            or "/" in name
            or not (rec is GONE or (type(rec) is bytes and len(rec) == SIZE))
        ):
            raise ListingDamaged(prefix, "a delta of another shape")
    return delta


def peek(path: Path, signature: str) -> list[tuple[str, int]]:
    """The directories whose listings the state database at `path` keeps for an inventory of
    `signature`, with their sizes (`Listings.sizes`), read before the state is opened to write
    (`prefetch.head_start`): none when it does not exist, cannot be read now, or keeps them
    for another inventory (the scan would not compare with them: `Scan.run`)."""
    if not path.is_file():
        return []
    from ..errors import ResourceSyncError
    from ..sqlite import connect_read_only

    try:
        db = connect_read_only(path)
    except ResourceSyncError:
        return []  # said by the run that opens it
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'dirs_for'").fetchone()
        if row is None or row[0] != signature:
            return []
        return Listings(db).sizes()
    except sqlite3.Error:
        return []
    finally:
        db.close()


class Listings:
    """The `dirs` table of a state database (its schema is the state's)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def read(self, prefix: str) -> tuple[Cached | None, Listing, Delta | None, list[str]]:
        """The row of the directory `prefix` (None when none is kept), its files with the
        delta applied, the delta (None: none), and its sub-directories."""
        cached: Cached | None = self.db.execute(
            "SELECT d.files, d.subdirs, x.delta FROM dirs AS d "
            "LEFT JOIN dir_deltas AS x ON x.path = d.path WHERE d.path = ?",
            (prefix,),
        ).fetchone()
        if cached is None:
            return None, Listing.EMPTY, None, []
        files = Listing.load(_loads(cached[0], prefix), prefix)
        delta = None if cached[2] is None else _delta(cached[2], cached[0], prefix)
        if delta:
            files = files.changed(delta)
        return cached, files, delta, _subdirs(cached[1], prefix)

    def store(
        self,
        prefix: str,
        cached: Cached | None,
        delta: Delta | None,
        files: Listing,
        differ: Iterable[str],
        subdirs: list[str] | None,
        *,
        whole: bool = False,
    ) -> None:
        """Keep the listing `files` of the directory `prefix`, of which the names `differ`
        changed since the row `cached` (with its `delta` applied) was read. A few changes are
        written as the listing's delta; the listing is written whole when the delta grows past
        an eighth of it, or when `whole`. `subdirs` None: unchanged."""
        if cached is not None and not whole:
            grown = dict(delta) if delta else {}
            for name in differ:
                rec = files.record(name)
                grown[name] = GONE if rec is None else rec
            if len(grown) <= max(_DELTA_MIN, len(files) // 8):
                blob = marshal.dumps((_listing_id(cached[0]), grown))
                self.db.execute(
                    "INSERT OR REPLACE INTO dir_deltas (path, delta) VALUES (?, ?)", (prefix, blob)
                )
                # The listing's row is written only when its sub-directories change.
                if subdirs is not None:
                    self.set_subdirs(prefix, subdirs)
                return
        if subdirs is None:
            subdirs = _subdirs(cached[1], prefix) if cached is not None else []
        self.db.execute(
            "INSERT OR REPLACE INTO dirs (path, files, subdirs, delta) VALUES (?, ?, ?, NULL)",
            (prefix, marshal.dumps(files.parts()), marshal.dumps(subdirs)),
        )
        self.db.execute("DELETE FROM dir_deltas WHERE path = ?", (prefix,))

    def set_subdirs(self, prefix: str, subdirs: list[str]) -> None:
        self.db.execute(
            "UPDATE dirs SET subdirs = ? WHERE path = ?", (marshal.dumps(subdirs), prefix)
        )

    def known(self, prefixes: Iterable[str]) -> set[str]:
        """Each directory, or its nearest ancestor that the listings hold (a new directory is
        found by listing its parent, which also applies the inventory's filters to it)."""
        out = set()
        for prefix in prefixes:
            while prefix:
                row = self.db.execute("SELECT 1 FROM dirs WHERE path = ?", (prefix,)).fetchone()
                if row is not None:
                    break
                head = prefix[:-1].rpartition("/")[0]
                prefix = head + "/" if head else ""
            out.add(prefix)
        return out

    def sizes(self) -> list[tuple[str, int]]:
        """Every directory the listings hold, with the size of its listing's bytes (what a
        walk of it will cost, roughly: SQLite tells a value's length without reading it)."""
        return self.db.execute("SELECT path, length(files) FROM dirs").fetchall()

    def drop_under(self, prefix: str) -> None:
        """Forget the listings of a directory (`prefix`, ending in "/") and all below it."""
        end = prefix[:-1] + chr(ord("/") + 1)
        self.db.execute("DELETE FROM dirs WHERE path >= ? AND path < ?", (prefix, end))
        self.db.execute("DELETE FROM dir_deltas WHERE path >= ? AND path < ?", (prefix, end))

    def forget(self) -> None:
        self.db.execute("DELETE FROM dirs")
        self.db.execute("DELETE FROM dir_deltas")

    def rebuild(self, rows: Iterator[tuple[str, str, str]]) -> None:
        """Every listing again, from (directory prefix, key, fingerprint) rows grouped by
        directory: memory holds one directory."""
        self.forget()
        subdirs: dict[str, set[str]] = {"": set()}
        current: str | None = None
        names: list[str] = []
        records: list[bytes] = []
        batch: list[tuple[str, bytes, bytes]] = []
        empty = marshal.dumps([])

        def close() -> None:
            if current is not None:
                # The rows come in key order (SQLite compares UTF-8 bytes, which order as
                # their code points do), so a directory's names come sorted; else sorted here.
                if names == sorted(names):
                    files = Listing("/".join(names), b"".join(records), names)
                else:
                    files = Listing.of_records(dict(zip(names, records, strict=True)))
                batch.append((current, marshal.dumps(files.parts()), empty))
                if len(batch) >= 500:
                    write()

        def write() -> None:
            self.db.executemany("INSERT INTO dirs (path, files, subdirs) VALUES (?, ?, ?)", batch)
            batch.clear()

        for prefix, key, fingerprint in rows:
            if prefix != current:
                close()
                current, names, records = prefix, [], []
                # Every directory up to the root holds the next one.
                child = prefix
                while child:
                    parent = child[:-1].rpartition("/")[0]
                    parent = parent + "/" if parent else ""
                    subdirs.setdefault(parent, set()).add(child[len(parent) : -1])
                    subdirs.setdefault(child, set())
                    child = parent
            names.append(key[len(prefix) :])
            records.append(record_of(fingerprint))
        close()
        write()
        nothing = marshal.dumps(Listing.EMPTY.parts())
        for prefix, below in subdirs.items():
            self.db.execute(
                "INSERT INTO dirs (path, files, subdirs) VALUES (?, ?, ?) "
                "ON CONFLICT (path) DO UPDATE SET subdirs = excluded.subdirs",
                (prefix, nothing, marshal.dumps(sorted(below))),
            )

    def mark(self, key: str) -> None:
        """The file `key` is to be compared again by the next scan, whatever its stat."""
        head, _, name = key.rpartition("/")
        prefix = head + "/" if head else ""
        cached, files, delta, _ = self.read(prefix)
        if name in files:
            files = files.changed({name: UNSURE})
            self.store(prefix, cached, delta, files, (name,), None)
