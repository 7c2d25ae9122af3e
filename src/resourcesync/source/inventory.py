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

import errno
import functools
import mimetypes
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol
from urllib.parse import quote

from ..filters import PathFilter
from .packed import RECORD, Listing, Stat

if TYPE_CHECKING:
    from .config import PublishConfig, SetConfig

__all__ = [
    "DirectoryInventory",
    "Inventory",
    "Item",
    "ScanStats",
    "Stat",
    "file_fingerprint",
    "guess_type",
    "path_to_uri",
]


# The built-in table only: the system's /etc/mime.types differs between machines, and the same
# tree must describe itself the same way wherever it is published.
# Built on first use: a re-run that finds nothing new never needs it.
@functools.cache
def _types() -> mimetypes.MimeTypes:
    if not mimetypes.inited:
        # A `MimeTypes` made before the module's own tables first reads the system's files
        # into them (`init()`: 5 ms of /etc/mime.types) though it keeps none of it. Marked
        # done, it does not; the module's functions still read them when first used (they
        # look for their table, not this flag).
        mimetypes.inited = True
    types = mimetypes.MimeTypes(filenames=())
    types.add_type("text/markdown", ".md")
    types.add_type("application/x-ndjson", ".jsonl")
    types.add_type("text/csv", ".csv")
    types.add_type("application/x-lirs", ".lirs")
    return types


# RFC 3986 sub-delims, ':' and '@' may stand in a path segment; everything else is encoded.
_SAFE = "/-._~!$&'()*+,;=:@"

#: A file's stat packed as a listing keeps it, where it is taken (`packed.record`).
_pack = RECORD.pack
_unpack = RECORD.unpack


_BY_SUFFIX: dict[str, str] = {}
# A compressed file is published as what it is (`a.tar.gz` is gzip data).
_COMPRESSED = {"gzip": "application/gzip", "bzip2": "application/x-bzip2", "xz": "application/x-xz"}


def guess_type(name: str) -> str:
    """The media type for a file name (`application/octet-stream` when unknown)."""
    dot = name.rfind(".")
    suffix = name[dot:].lower() if dot > 0 else ""
    kind = _BY_SUFFIX.get(suffix)
    if kind is None:
        guessed, encoding = _types().guess_type("x" + suffix, strict=False)
        kind = guessed or _COMPRESSED.get(encoding or "", "application/octet-stream")
        if len(_BY_SUFFIX) < 4096:
            _BY_SUFFIX[suffix] = kind
    return kind


def file_fingerprint(st: os.stat_result) -> str:
    """A file's fingerprint: what changes whenever its bytes may have changed. The change
    time is in it because the modification time can be set back (`touch -d`, `utime`) over
    other bytes of the same size; the change time cannot."""
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}:{st.st_ctime_ns}"


def path_to_uri(base_url: str, relpath: str) -> str:
    """`base/` + the percent-encoded relative path (UTF-8). Raises UnicodeEncodeError for
    names that are not valid Unicode (undecodable bytes)."""
    return base_url + quote(relpath, safe=_SAFE, encoding="utf-8", errors="strict")


class Item:
    """One resource as the inventory sees it now.

    `uri`, `type` and `lastmod` may be given, or worked out on first use: from `uri_fn`, from
    the key's file name, and from `mtime_ns`. A re-run reads them only for the items that
    changed, which is most of what makes it fast.
    """

    __slots__ = (
        "_lastmod",
        "_type",
        "_uri",
        "fingerprint",
        "fspath",
        "hashes",
        "key",
        "length",
        "mtime_ns",
        "open",
        "uri_fn",
    )

    def __init__(
        self,
        key: str,
        fingerprint: str,
        length: int,
        open: Callable[[], BinaryIO],
        *,
        uri: str | None = None,
        uri_fn: Callable[[], str] | None = None,
        type: str | None = None,
        lastmod: datetime | None = None,
        mtime_ns: int = 0,
        hashes: dict[str, str] | None = None,
        fspath: str | None = None,
    ) -> None:
        if uri is None and uri_fn is None:
            raise ValueError("an Item needs uri or uri_fn")
        self.key = key
        self.fingerprint = fingerprint
        self.length = length
        self.open = open
        self._uri = uri
        self.uri_fn = uri_fn
        self._type = type
        self._lastmod = lastmod
        self.mtime_ns = mtime_ns
        #: Known digests ({algorithm: hex}); when given for every configured algorithm, the
        #: bytes are not read to hash them.
        self.hashes = hashes or {}
        #: The file behind the item, when there is one (read directly, without `open`).
        self.fspath = fspath

    @property
    def uri(self) -> str:
        if self._uri is None:
            assert self.uri_fn is not None
            self._uri = self.uri_fn()
        return self._uri

    @property
    def type(self) -> str:
        if self._type is None:
            self._type = guess_type(self.key.rpartition("/")[2])
        return self._type

    def restat(self, fingerprint: str, length: int, mtime_ns: int) -> None:
        """Describe the item by a later look at it (the one its bytes were read under)."""
        self.fingerprint = fingerprint
        self.length = length
        if mtime_ns != self.mtime_ns:
            self.mtime_ns = mtime_ns
            self._lastmod = None

    def modified(self) -> datetime:
        """The resource's last modification time."""
        if self._lastmod is None:
            self._lastmod = _from_ns(self.mtime_ns)
        return self._lastmod


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
    #: What exists but could not be read this time (permissions, an I/O error, a stale NFS
    #: handle): keys of files, and prefixes ("dir/", "" for the root) of directories. What was
    #: published of them stays as it was — a directory that cannot be listed is not a
    #: directory emptied, and publishing its files' deletion would make every Destination
    #: delete them — and they are looked at again by the next run.
    unknown: set[str] = field(default_factory=set)


class DirectoryInventory:
    """The regular files under `root`, in key order (the relative POSIX path).

    Symbolic links are skipped unless `follow_symlinks` (then only those that resolve inside
    `root`); hidden names (`.git`, `.env`, editors' temporaries) unless `hidden`. `exclude`
    patterns (fnmatch, on the relative path; a pattern matching a directory prunes it) win over
    `include` patterns (when given, a file must match one). `skip` paths (the output and state
    directories, when they lie inside `root`) are never scanned.
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
        hidden: bool = False,
    ) -> None:
        self.root = Path(root)
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"
        self.include = tuple(include)
        self.exclude = tuple(exclude)
        self._filter = PathFilter(self.include, self.exclude)
        self._exclude_only = PathFilter(exclude=self.exclude)
        self.follow_symlinks = follow_symlinks
        self.hidden = hidden
        self._skip = {os.path.realpath(p) for p in skip}
        self._real_root = os.path.realpath(self.root)
        self.stats = ScanStats()

    @classmethod
    def of_set(cls, config: PublishConfig, s: SetConfig) -> DirectoryInventory:
        """The inventory of a set's directory as `publish` scans it (its output and state
        directories skipped where they lie inside it)."""
        return cls(
            s.dir,
            s.base_url,
            include=s.include,
            exclude=s.exclude,
            skip=[config.out, config.state],
            hidden=s.hidden,
        )

    def __iter__(self) -> Iterator[Item]:
        if not self.root.is_dir():
            raise NotADirectoryError(str(self.root))
        self.stats = ScanStats()
        yield from self._walk(str(self.root), "")

    def _excluded(self, rel: str) -> bool:
        """Excluded whatever the include patterns (a directory is pruned only then)."""
        return self._exclude_only.excluded(rel)

    def signature(self, algorithms: Iterable[str]) -> str:
        """What decides which files this inventory yields and how they are described: a state
        keeps its directory listings (`source/scan.py`) only while this stays the same. Its
        first member names the form of the listings (2: `packed.Listing`)."""
        return repr(
            (
                2,
                self._real_root,
                self.base_url,
                tuple(algorithms),
                self.include,
                self.exclude,
                sorted(self._skip),
                self.follow_symlinks,
                self.hidden,
            )
        )

    def list_dir(self, directory: str, prefix: str) -> tuple[Listing, list[str]] | None:
        """One directory, not its sub-directories: its files (their (size, mtime_ns, inode,
        ctime_ns), packed) and the names of its sub-directories (both as the walk would take
        them); None when it cannot be read."""
        listed = self._classify(directory, prefix)
        if listed is None:
            return None
        files, dirs = listed
        self.stats.files += len(files)
        return Listing.of_records(files), [entry.name for entry in dirs]

    def uri_prefix(self, prefix: str) -> str:
        """The URI of a directory (relative path `prefix`), which its files' URIs extend."""
        return path_to_uri(self.base_url, prefix)

    def item(
        self, directory: str, prefix: str, name: str, stat: Stat, uri_prefix: str | None = None
    ) -> Item:
        """The item of a file that `list_dir` described."""
        size, mtime_ns, ino, ctime_ns = stat
        path = os.path.join(directory, name)
        if uri_prefix is None:
            uri_prefix = path_to_uri(self.base_url, prefix)
        return Item(
            prefix + name,
            f"{size}:{mtime_ns}:{ino}:{ctime_ns}",
            size,
            partial(_open_binary, path),
            uri_fn=partial(_file_uri, uri_prefix, name),
            mtime_ns=mtime_ns,
            fspath=path,
        )

    def _classify(
        self, directory: str, prefix: str
    ) -> tuple[dict[str, bytes], list[os.DirEntry[str]]] | None:
        """The files ({name: stat}) and sub-directories of one directory that are published;
        None (noted in the stats) when it cannot be read or named."""
        # The hot loop of every run: a stat per file and as little else as possible.
        try:
            path_to_uri(self.base_url, prefix)
        except UnicodeEncodeError:
            self.stats.skipped_names.append(_printable(prefix))
            return None
        try:
            # Listed through a descriptor, so that each entry's stat is an fstatat() of its
            # name: the kernel does not walk the directory's path again for every file.
            fd = os.open(directory, _DIRECTORY)
        except OSError as exc:
            self._unreadable(prefix, exc)
            return None
        try:
            return self._entries(fd, directory, prefix)
        except OSError as exc:
            self._unreadable(prefix, exc)
            return None
        finally:
            os.close(fd)

    def _unreadable(self, key: str, exc: OSError) -> None:
        """A file or directory (`key`, a prefix for a directory) that could not be read: said,
        and unless it is gone, kept as it was published (`ScanStats.unknown`)."""
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return  # gone since it was listed: its deletion is real
        self.stats.unreadable.append(
            f"{key.rstrip('/') or '.'}: {exc.strerror}: kept as it was published, looked at "
            "again next run"
        )
        self.stats.unknown.add(key)

    def kept(self, key: str) -> bool:
        """Whether the file `key` is to stay as it was published: it, or a directory above it,
        could not be read by this scan."""
        unknown = self.stats.unknown
        if not unknown:
            return False
        if key in unknown or "" in unknown:
            return True
        end = key.find("/")
        while end != -1:
            if key[: end + 1] in unknown:
                return True
            end = key.find("/", end + 1)
        return False

    def _entries(
        self, fd: int, directory: str, prefix: str
    ) -> tuple[dict[str, bytes], list[os.DirEntry[str]]]:
        with os.scandir(fd) as it:
            entries = list(it)
        follow = self.follow_symlinks
        hidden = self.hidden
        filtering = bool(self.exclude or self.include)
        stats = self.stats
        isreg = stat.S_ISREG
        files: dict[str, bytes] = {}
        pack = _pack
        dirs = []
        if not follow and not filtering:
            return self._plain_entries(entries, directory, prefix)
        for entry in entries:
            name = entry.name
            if not hidden and name[0] == ".":
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=follow)
            except OSError:
                continue
            if entry.is_symlink() and not self._link_inside(os.path.join(directory, name)):
                stats.skipped_links += 1
                continue
            if is_dir:
                if os.path.realpath(os.path.join(directory, name)) in self._skip:
                    continue
                if self._excluded(prefix + name):
                    stats.excluded += 1
                    continue
                dirs.append(entry)
                continue
            if filtering and self._filtered(prefix + name):
                stats.excluded += 1
                continue
            try:
                st = entry.stat(follow_symlinks=follow)
            except OSError as exc:
                self._unreadable(prefix + name, exc)
                continue
            if not isreg(st.st_mode):
                continue
            if not name.isascii() and not _encodable(name):
                stats.skipped_names.append(_printable(prefix + name))
                continue
            files[name] = pack(st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
        return files, dirs

    def _plain_entries(
        self, entries: list[os.DirEntry[str]], directory: str, prefix: str
    ) -> tuple[dict[str, bytes], list[os.DirEntry[str]]]:
        """`_entries` without filters and without following links (the usual run), with one
        call into the entry per name: its `lstat`, which every file needs, tells a regular
        file, a directory and a symlink (skipped, as every link is when links are not
        followed) apart."""
        hidden = self.hidden
        stats = self.stats
        files: dict[str, bytes] = {}
        pack = _pack
        dirs = []
        for entry in entries:
            name = entry.name
            if not hidden and name[0] == ".":
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                self._unreadable(prefix + name, exc)
                continue
            mode = st.st_mode & _S_IFMT
            if mode != _S_IFREG:
                if mode == _S_IFDIR:
                    if os.path.realpath(os.path.join(directory, name)) not in self._skip:
                        dirs.append(entry)
                elif mode == _S_IFLNK:
                    stats.skipped_links += 1
                continue
            if not name.isascii() and not _encodable(name):
                stats.skipped_names.append(_printable(prefix + name))
                continue
            files[name] = pack(st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
        return files, dirs

    def _filtered(self, rel: str) -> bool:
        return self._filter.excluded(rel)

    def _walk(self, directory: str, prefix: str) -> Iterator[Item]:
        listed = self._classify(directory, prefix)
        if listed is None:
            return
        files, dirs = listed
        # Sorting a directory's names with "/" after the names of sub-directories makes the
        # depth-first walk produce relative paths in plain string order ("a-b" < "a/x").
        keyed = sorted([*((e.name + "/", e.name) for e in dirs), *((n, n) for n in files)])
        uri_prefix = path_to_uri(self.base_url, prefix)
        stats = self.stats
        for sort_key, name in keyed:
            if sort_key[-1] == "/":
                yield from self._walk(os.path.join(directory, name), prefix + name + "/")
                continue
            stats.files += 1
            yield self.item(directory, prefix, name, _unpack(files[name]), uri_prefix)

    def _link_inside(self, path: str) -> bool:
        if not self.follow_symlinks:
            return False
        real = os.path.realpath(path)
        return real == self._real_root or real.startswith(self._real_root + os.sep)


_DIRECTORY = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
_S_IFMT, _S_IFREG, _S_IFDIR, _S_IFLNK = 0o170000, stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK


def _file_uri(prefix: str, name: str) -> str:
    return prefix + quote(name, safe=_SAFE, encoding="utf-8", errors="strict")


def _open_binary(path: str) -> BinaryIO:
    return open(path, "rb")


def _encodable(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _printable(rel: str) -> str:
    return rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _from_ns(ns: int) -> datetime:
    """An exact UTC datetime (to the microsecond) from nanoseconds since the epoch."""
    seconds, rest = divmod(ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).replace(microsecond=rest // 1000)
