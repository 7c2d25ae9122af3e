"""Where a Source's resources come from.

An inventory is any iterable of `Item`s **in ascending order of `key`** (Python string order),
each with a cheap `fingerprint` that changes whenever the resource may have changed. Publishing
compares the stream with the last snapshot as two sorted streams, so memory stays flat; only
items whose fingerprint changed are read (and hashed) again.

`DirectoryInventory` scans a directory. Another source — a database table, an OAI-PMH feed — is
an iterable too: yield `Item(key=record id, uri=…, fingerprint=version or datestamp,
lastmod=…, length=…, type=…, open=lambda: stream of the bytes)` in key order (ORDER BY key), and
pass it to `publish` for a set (see README, "Inventories").
"""

from __future__ import annotations

import fnmatch
import mimetypes
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, Protocol
from urllib.parse import quote

__all__ = ["DirectoryInventory", "Inventory", "Item", "ScanStats", "guess_type", "path_to_uri"]

# The built-in table only: the system's /etc/mime.types differs between machines, and the same
# tree must describe itself the same way wherever it is published.
_TYPES = mimetypes.MimeTypes(filenames=())
_TYPES.add_type("text/markdown", ".md")
_TYPES.add_type("application/x-ndjson", ".jsonl")
_TYPES.add_type("text/csv", ".csv")
_TYPES.add_type("application/x-lirs", ".lirs")
# RFC 3986 sub-delims, ':' and '@' may stand in a path segment; everything else is encoded.
_SAFE = "/-._~!$&'()*+,;=:@"


def guess_type(name: str) -> str:
    """The media type for a file name (`application/octet-stream` when unknown)."""
    kind, _ = _TYPES.guess_type(name, strict=False)
    return kind or "application/octet-stream"


def path_to_uri(base_url: str, relpath: str) -> str:
    """`base/` + the percent-encoded relative path (UTF-8). Raises UnicodeEncodeError for
    names that are not valid Unicode (undecodable bytes)."""
    return base_url + quote(relpath, safe=_SAFE, encoding="utf-8", errors="strict")


@dataclass(slots=True)
class Item:
    """One resource as the inventory sees it now."""

    key: str
    uri: str
    fingerprint: str
    lastmod: datetime
    length: int
    type: str | None
    open: Callable[[], BinaryIO]
    #: Known digests ({algorithm: hex}); when given for every configured algorithm, the bytes
    #: are not read to hash them.
    hashes: dict[str, str] = field(default_factory=dict)
    #: The file behind the item, when there is one (dump packages read it directly).
    path: Path | None = None


class Inventory(Protocol):
    """Yields `Item`s in ascending key order."""

    def __iter__(self) -> Iterator[Item]: ...


@dataclass
class ScanStats:
    files: int = 0
    skipped_links: int = 0
    skipped_names: list[str] = field(default_factory=list)
    excluded: int = 0
    unreadable: list[str] = field(default_factory=list)


class DirectoryInventory:
    """The regular files under `root`, in key order (the relative POSIX path).

    Symbolic links are skipped unless `follow_symlinks` (then only those that resolve inside
    `root`). `exclude` patterns (fnmatch, on the relative path; a pattern matching a directory
    prunes it) win over `include` patterns (when given, a file must match one). `skip` paths
    (the output and state directories, when they lie inside `root`) are never scanned.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        base_url: str,
        *,
        include: Iterable[str] = (),
        exclude: Iterable[str] = (),
        skip: Iterable[str | os.PathLike[str]] = (),
        follow_symlinks: bool = False,
    ) -> None:
        self.root = Path(root)
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"
        self.include = tuple(include)
        self.exclude = tuple(exclude)
        self.follow_symlinks = follow_symlinks
        self._skip = {os.path.realpath(p) for p in skip}
        self._real_root = os.path.realpath(self.root)
        self.stats = ScanStats()

    def __iter__(self) -> Iterator[Item]:
        if not self.root.is_dir():
            raise NotADirectoryError(str(self.root))
        self.stats = ScanStats()
        yield from self._walk(str(self.root), "")

    def _excluded(self, rel: str) -> bool:
        return any(fnmatch.fnmatchcase(rel, p) for p in self.exclude)

    def _walk(self, directory: str, prefix: str) -> Iterator[Item]:
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except OSError as exc:
            self.stats.unreadable.append(f"{prefix or '.'}: {exc.strerror}")
            return
        # Sorting a directory's names with "/" after the names of sub-directories makes the
        # depth-first walk produce relative paths in plain string order ("a-b" < "a/x").
        keyed = []
        for entry in entries:
            try:
                is_link = entry.is_symlink()
                is_dir = entry.is_dir(follow_symlinks=self.follow_symlinks)
            except OSError:
                continue
            keyed.append((entry.name + "/" if is_dir else entry.name, entry, is_link, is_dir))
        keyed.sort(key=lambda k: k[0])
        for _, entry, is_link, is_dir in keyed:
            rel = prefix + entry.name
            if is_link and not self._link_inside(entry.path):
                self.stats.skipped_links += 1
                continue
            if is_dir:
                if os.path.realpath(entry.path) in self._skip or self._excluded(rel):
                    self.stats.excluded += 0 if os.path.realpath(entry.path) in self._skip else 1
                    continue
                yield from self._walk(entry.path, rel + "/")
                continue
            item = self._item(entry, rel)
            if item is not None:
                yield item

    def _link_inside(self, path: str) -> bool:
        if not self.follow_symlinks:
            return False
        real = os.path.realpath(path)
        return real == self._real_root or real.startswith(self._real_root + os.sep)

    def _item(self, entry: os.DirEntry[str], rel: str) -> Item | None:
        if self._excluded(rel) or (
            self.include and not any(fnmatch.fnmatchcase(rel, p) for p in self.include)
        ):
            self.stats.excluded += 1
            return None
        try:
            st = entry.stat(follow_symlinks=self.follow_symlinks)
        except OSError as exc:
            self.stats.unreadable.append(f"{rel}: {exc.strerror}")
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        try:
            uri = path_to_uri(self.base_url, rel)
        except UnicodeEncodeError:
            self.stats.skipped_names.append(
                rel.encode("utf-8", "surrogateescape").decode("latin-1")
            )
            return None
        self.stats.files += 1
        path = entry.path
        return Item(
            key=rel,
            uri=uri,
            fingerprint=f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}",
            lastmod=_from_ns(st.st_mtime_ns),
            length=st.st_size,
            type=guess_type(entry.name),
            open=lambda: open(path, "rb"),
            path=Path(path),
        )


def _from_ns(ns: int) -> datetime:
    """An exact UTC datetime (to the microsecond) from nanoseconds since the epoch."""
    seconds, rest = divmod(ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).replace(microsecond=rest // 1000)
