"""The directory listings a Source's state keeps between scans (issue 15.3).

A re-run compares each directory with the listing the last scan left (`SetState._scan_tree`):
its files as {name: (size, mtime_ns, inode, ctime_ns)}, None for a file that must be compared
again (racy, dirty), and its sub-directories. One row of the state's `dirs` table a directory,
`marshal`led. A re-run that finds a few changes in a directory keeps them as the listing's
delta instead of writing the listing again (after 1 % of 200,000 files changed, 200 listings
were 11 MB to write and checkpoint); the listing is written whole when its delta passes an
eighth of it. The delta is a row of its own (`dir_deltas`): SQLite writes a row again whole,
its overflow pages included, whenever its size changes, so a delta kept in the listing's row
cost every changed directory its whole listing read back and written again (the 11 MB the
delta was to spare: 69 MB written in all for 2,000 changes among 200,000 files).

Ground floor of the Source's state: imports only the inventory's types (and, to look at a
state before it is opened, `peek`, the SQLite habits).
"""

from __future__ import annotations

import marshal
import sqlite3
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .inventory import Stat

__all__ = ["Cached", "Delta", "Listing", "ListingDamaged", "Listings", "peek", "stat_of"]

Listing = dict[str, Stat | None]
#: Names changed since the listing was written whole: their stat, None, or `_GONE`.
Delta = dict[str, Stat | bool | None]
#: A directory's listing as read: its bytes, its sub-directories' bytes, a delta kept in the
#: listing's row (by a resourcesync from before `dir_deltas`), the delta kept apart.
Cached = tuple[bytes, bytes, bytes | None, bytes | None]

#: A name gone from a directory, in a listing's delta.
_GONE = False
#: The number of changes a listing's delta may always hold before it is written whole.
_DELTA_MIN = 16


def stat_of(fingerprint: str | None) -> Stat | None:
    """A file fingerprint (`inventory.file_fingerprint`) as a listing keeps it; None for one
    that must be compared again (racy, dirty, not recorded, or not a file's)."""
    if fingerprint is None:
        return None
    parts = fingerprint.split(":")
    if len(parts) != 4:
        return None
    try:
        size, mtime_ns, ino, ctime_ns = (int(p) for p in parts)
    except ValueError:
        return None
    return size, mtime_ns, ino, ctime_ns


def _listing_id(blob: bytes) -> bytes:
    """What names a listing's bytes, for its delta: their length and CRC-32 (18 µs a 55 KB
    listing, against 89 µs for 8 bytes of BLAKE2b: it is taken twice a changed directory on
    every re-run). It guards against a listing written whole by a writer that left the delta
    in place, not against an adversary; a delta named otherwise (an earlier resourcesync's
    BLAKE2b) is dropped once, and the files it held are compared again."""
    return len(blob).to_bytes(4, "little") + zlib.crc32(blob).to_bytes(4, "little")


class ListingDamaged(Exception):
    """A listing the state keeps cannot be read (its bytes damaged, or written by something
    else): the scan compares the tree whole with the snapshot instead, and makes the listings
    again (`Scan.run`)."""

    def __init__(self, prefix: str, why: str) -> None:
        super().__init__(f"{prefix or './'}: {why}")


def _loads(blob: bytes, kind: type, prefix: str) -> Any:
    """A listing's part (`kind`: dict for its files, tuple for its delta, list for its
    sub-directories) as `marshal` left it."""
    try:
        value = marshal.loads(blob)
    except (ValueError, EOFError, TypeError) as exc:
        raise ListingDamaged(prefix, str(exc)) from None
    if type(value) is not kind:
        raise ListingDamaged(prefix, f"a {type(value).__name__} where a {kind.__name__} was kept")
    return value


def _applied(cached: Cached | None, prefix: str = "") -> tuple[Listing, Delta | None]:
    """A directory's listing as the last scan left it, and the delta applied to it (None:
    none). A delta applies to the listing it was written over only (a digest of its bytes): a
    listing written whole again by a resourcesync that kept no deltas drops it. A delta in the
    listing's row was written by a resourcesync from before `dir_deltas`, after the one kept
    apart (which it did not read): it is the later of the two, applied last."""
    if cached is None:
        return {}, None
    files: Listing = _loads(cached[0], dict, prefix)
    if cached[2] is None and cached[3] is None:
        return files, None
    over_id = _listing_id(cached[0])
    applied: Delta | None = None
    for blob in (cached[3], cached[2]):
        if blob is None:
            continue
        kept = _loads(blob, tuple, prefix)
        if len(kept) != 2 or type(kept[1]) is not dict:
            raise ListingDamaged(prefix, "a delta of another shape")
        over, delta = kept
        if over != over_id:
            continue
        for name, st in delta.items():
            if st is False:  # _GONE
                files.pop(name, None)
            else:
                files[name] = st
        applied = delta if applied is None else {**applied, **delta}
    return files, applied


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
        delta applied, the delta, and its sub-directories."""
        cached: Cached | None = self.db.execute(
            "SELECT d.files, d.subdirs, d.delta, x.delta FROM dirs AS d "
            "LEFT JOIN dir_deltas AS x ON x.path = d.path WHERE d.path = ?",
            (prefix,),
        ).fetchone()
        files, delta = _applied(cached, prefix)
        subdirs: list[str] = _loads(cached[1], list, prefix) if cached else []
        return cached, files, delta, subdirs

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
                grown[name] = files.get(name, _GONE)
            if len(grown) <= max(_DELTA_MIN, len(files) // 8):
                blob = marshal.dumps((_listing_id(cached[0]), grown))
                self.db.execute(
                    "INSERT OR REPLACE INTO dir_deltas (path, delta) VALUES (?, ?)", (prefix, blob)
                )
                # The listing's row is written only when what it holds changes: its
                # sub-directories, or a delta of before `dir_deltas`, now folded into this one.
                if subdirs is not None:
                    self.db.execute(
                        "UPDATE dirs SET subdirs = ?, delta = NULL WHERE path = ?",
                        (marshal.dumps(subdirs), prefix),
                    )
                elif cached[2] is not None:
                    self.db.execute("UPDATE dirs SET delta = NULL WHERE path = ?", (prefix,))
                return
        if subdirs is None:
            subdirs = _loads(cached[1], list, prefix) if cached is not None else []
        self.db.execute(
            "INSERT OR REPLACE INTO dirs (path, files, subdirs, delta) VALUES (?, ?, ?, NULL)",
            (prefix, marshal.dumps(files), marshal.dumps(subdirs)),
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
        files: Listing = {}
        batch: list[tuple[str, bytes, bytes]] = []

        def close() -> None:
            if current is not None:
                batch.append((current, marshal.dumps(files), marshal.dumps([])))
                if len(batch) >= 500:
                    write()

        def write() -> None:
            self.db.executemany("INSERT INTO dirs (path, files, subdirs) VALUES (?, ?, ?)", batch)
            batch.clear()

        for prefix, key, fingerprint in rows:
            if prefix != current:
                close()
                current, files = prefix, {}
                # Every directory up to the root holds the next one.
                child = prefix
                while child:
                    parent = child[:-1].rpartition("/")[0]
                    parent = parent + "/" if parent else ""
                    subdirs.setdefault(parent, set()).add(child[len(parent) : -1])
                    subdirs.setdefault(child, set())
                    child = parent
            files[key[len(prefix) :]] = stat_of(fingerprint)
        close()
        write()
        for prefix, names in subdirs.items():
            self.db.execute(
                "INSERT INTO dirs (path, files, subdirs) VALUES (?, ?, ?) "
                "ON CONFLICT (path) DO UPDATE SET subdirs = excluded.subdirs",
                (prefix, marshal.dumps({}), marshal.dumps(sorted(names))),
            )

    def mark(self, key: str) -> None:
        """The file `key` is to be compared again by the next scan, whatever its stat. The
        listing is written whole with the mark: a resourcesync from before `dir_deltas`, which
        reads no delta kept apart, sees the mark too."""
        head, _, name = key.rpartition("/")
        prefix = head + "/" if head else ""
        cached, files, delta, _ = self.read(prefix)
        if name in files:
            files[name] = None
            self.store(prefix, cached, delta, files, (name,), None, whole=True)
