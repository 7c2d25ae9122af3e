"""A directory's files as a re-run compares them: names and stats packed (issue 15.3).

A re-run compares every directory with the listing the last scan kept, and after 1 % of the
files changed nearly every directory differs in a few files. Kept as a dictionary of
(size, mtime_ns, inode, ctime_ns) tuples, each side of that comparison built five Python
objects a file (1.1 ms a 1,000-file directory: the child's listing and the stored one
unmarshalled, then compared: half of what a re-run's scan spent). A `Listing` keeps the
names sorted and joined by "/" (which no file name holds) in one string, and the stats packed
in the same order, 32 bytes a file, in one bytes object: two listings of the same names are
compared with `memcmp` over runs of records, and only the few that differ are looked at one
by one (0.14 ms the same directory). Nothing is built a file unless its file differs.

A stat of all ones (`UNSURE`: a size no file has) stands for a file to be compared again
whatever its stat (racy, dirty, not recorded): it never equals a file's.

Imports nothing of the package: the inventory makes them, the state keeps them.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Iterator, Mapping

__all__ = ["GONE", "RECORD", "UNSURE", "Listing", "ListingDamaged", "Stat", "record", "unpack"]

#: A file's (size, mtime_ns, inode, ctime_ns), as `os.stat` tells them.
Stat = tuple[int, int, int, int]

RECORD = struct.Struct("<QqQq")
SIZE = RECORD.size
#: The record of a file to be compared again whatever its stat.
UNSURE = b"\xff" * SIZE
#: A name gone from a directory, among changes (`Listing.changed`).
GONE = False
#: Records compared at once before they are compared one by one (16: 512 bytes).
_RUN = 16 * SIZE
#: Changes above which `Listing.changed` builds the listing again rather than insert or
#: remove names one by one (each a move of everything after it).
_FEW = 32


class ListingDamaged(Exception):
    """A listing the state keeps cannot be read (its bytes damaged, or written by something
    else): the scan compares the tree whole with the snapshot instead, and makes the listings
    again (`Scan.run`)."""

    def __init__(self, prefix: str, why: str) -> None:
        super().__init__(f"{prefix or './'}: {why}")


def record(stat: Stat | None) -> bytes:
    """A file's stat as a listing packs it; `UNSURE` for None."""
    return UNSURE if stat is None else RECORD.pack(*stat)


def unpack(rec: bytes) -> Stat | None:
    """A file's stat from its record; None for `UNSURE`."""
    return None if rec == UNSURE else RECORD.unpack(rec)  # type: ignore[return-value]


def _differing(a: bytes, b: bytes) -> list[int]:
    """The indices of the records that differ between two runs of records of one length."""
    out = []
    n = len(a)
    for run in range(0, n, _RUN):
        end = run + _RUN
        if a[run:end] != b[run:end]:
            for at in range(run, min(end, n), SIZE):
                if a[at : at + SIZE] != b[at : at + SIZE]:
                    out.append(at // SIZE)
    return out


class Listing:
    """The files of one directory: `text`, their names sorted and joined by "/"; `stats`, their
    records (`record`) in the same order. Immutable."""

    __slots__ = ("_names", "stats", "text")

    def __init__(self, text: str, stats: bytes, names: list[str] | None = None) -> None:
        self.text = text
        self.stats = stats
        self._names = names

    EMPTY: Listing

    @classmethod
    def of_records(cls, files: Mapping[str, bytes]) -> Listing:
        """The listing of files given as {name: record}."""
        names = sorted(files)
        return cls("/".join(names), b"".join([files[n] for n in names]), names)

    @classmethod
    def load(cls, value: object, prefix: str) -> Listing:
        """A listing from its `parts()` (as the state or the lister's pipe kept them); raises
        `ListingDamaged` when they are not a listing's."""
        if (
            type(value) is not tuple
            or len(value) != 2
            or type(value[0]) is not str
            or type(value[1]) is not bytes
        ):
            raise ListingDamaged(prefix, f"a {type(value).__name__} where a listing was kept")
        text, stats = value
        count = text.count("/") + 1 if text else 0
        if len(stats) != count * SIZE:
            raise ListingDamaged(prefix, f"{count} names for {len(stats)} bytes of stats")
        return cls(text, stats)

    def parts(self) -> tuple[str, bytes]:
        return self.text, self.stats

    def names(self) -> list[str]:
        """The names, sorted (the list is the listing's own: not to be changed)."""
        names = self._names
        if names is None:
            names = self._names = self.text.split("/") if self.text else []
        return names

    def __len__(self) -> int:
        return len(self.stats) // SIZE

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Listing):
            return NotImplemented
        return self.text == other.text and self.stats == other.stats

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Listing({dict(self.items())!r})"

    def _find(self, name: str) -> int:
        """The index of `name`, -1 when the listing does not hold it."""
        names = self.names()
        i = bisect_left(names, name)
        return i if i < len(names) and names[i] == name else -1

    def record(self, name: str) -> bytes | None:
        """The record of `name`; None when the listing does not hold it."""
        i = self._find(name)
        return None if i < 0 else self.stats[i * SIZE : (i + 1) * SIZE]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._find(name) >= 0

    def items(self) -> Iterator[tuple[str, Stat | None]]:
        stats = self.stats
        for i, name in enumerate(self.names()):
            yield name, unpack(stats[i * SIZE : (i + 1) * SIZE])

    def differ(self, old: Listing, prefix: str = "") -> list[tuple[str, bytes | None]]:
        """The files that differ between this listing and `old` (changed, new, or gone), in
        name order, each with its record here (None: gone); raises `ListingDamaged` when
        `old` is not a listing of sorted names."""
        stats = self.stats
        if self.text == old.text:
            if stats == old.stats:
                return []
            names = self.names()
            return [
                (names[i], stats[i * SIZE : (i + 1) * SIZE]) for i in _differing(stats, old.stats)
            ]
        new_names, old_names = self.names(), old.names()
        if not old_names:
            return [(name, stats[i * SIZE : (i + 1) * SIZE]) for i, name in enumerate(new_names)]
        if old_names != sorted(old_names):
            raise ListingDamaged(prefix, "names out of order")
        if not new_names:
            return [(name, None) for name in old_names]
        added = set(new_names).difference(old_names)
        gone = set(old_names).difference(new_names)
        mine = _without(stats, new_names, added)
        theirs = _without(old.stats, old_names, gone)
        if len(mine) != len(theirs):
            raise ListingDamaged(prefix, "a name listed twice")
        out: list[tuple[str, bytes | None]] = [(name, None) for name in gone]
        for name in added:
            i = bisect_left(new_names, name)
            out.append((name, stats[i * SIZE : (i + 1) * SIZE]))
        at = _differing(mine, theirs)
        if at:
            # Their indices among the names both hold, as indices here.
            common = [i for i, n in enumerate(new_names) if n not in added] if added else None
            for k in at:
                i = common[k] if common is not None else k
                out.append((new_names[i], stats[i * SIZE : (i + 1) * SIZE]))
        out.sort()
        return out

    def changed(self, changes: Mapping[str, bytes | bool]) -> Listing:
        """This listing with `changes` made: {name: its record, or `GONE`}."""
        if not changes:
            return self
        names = list(self.names())
        stats = bytearray(self.stats)
        moves = 0
        for name, rec in changes.items():
            i = bisect_left(names, name)
            if i < len(names) and names[i] == name:
                if rec is GONE:
                    moves += 1
                else:
                    stats[i * SIZE : (i + 1) * SIZE] = rec  # type: ignore[assignment]
            elif rec is not GONE:
                moves += 1
        if moves:
            if moves > _FEW:
                return self._rebuilt(bytes(stats), changes)
            for name, rec in changes.items():
                i = bisect_left(names, name)
                present = i < len(names) and names[i] == name
                if rec is GONE:
                    if present:
                        del names[i]
                        del stats[i * SIZE : (i + 1) * SIZE]
                elif not present:
                    names.insert(i, name)
                    stats[i * SIZE : i * SIZE] = rec  # type: ignore[assignment]
        return Listing("/".join(names), bytes(stats), names)

    def _rebuilt(self, stats: bytes, changes: Mapping[str, bytes | bool]) -> Listing:
        """`changed` for many names in or out: through a dictionary, sorted again."""
        files = {n: stats[i * SIZE : (i + 1) * SIZE] for i, n in enumerate(self.names())}
        for name, rec in changes.items():
            if rec is GONE:
                files.pop(name, None)
            else:
                files[name] = rec  # type: ignore[assignment]
        return Listing.of_records(files)


Listing.EMPTY = Listing("", b"", [])


def _without(stats: bytes, names: list[str], drop: set[str]) -> bytes:
    """`stats` (the records of the sorted `names`) without the records of the names `drop`."""
    if not drop:
        return stats
    at = sorted(bisect_left(names, name) for name in drop)
    parts = []
    start = 0
    for i in at:
        parts.append(stats[start : i * SIZE])
        start = (i + 1) * SIZE
    parts.append(stats[start:])
    return b"".join(parts)
