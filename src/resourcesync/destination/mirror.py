"""The local tree of a Destination: the one place that turns a URI into a path and writes there.

Everything the Destination writes goes through `Mirror`:

- `Mirror.path_for` decides where a URI lands and refuses (`UnsafePath`) whatever could land
  outside its mapping directory or in the state (`DEST/.resourcesync`): from the URI alone
  (`paths.UriMap`), then on the disk. The rules:

  * The URI must start with a mapping's prefix (the longest wins). Scheme and host compare
    case-insensitively, and `:80` (http) / `:443` (https) equal no port. A URI with userinfo
    (`user@host`) or a control character anywhere (tabs and newlines included, which urlsplit
    would silently drop) is refused.
  * The path after the prefix is split on "/" first, then each segment is percent-decoded
    (UTF-8, strict). A segment that is `.` or `..` (raw or encoded), that decodes to something
    holding "/" or "\\", that holds a raw "\\", NUL or another control character, that is empty
    in the middle (`a//b`), or is longer than 255 bytes is refused; so is a path longer than
    4096 bytes, and a name that looks like one of our temporary files (`.name.xxxxxxxx.part`).
    Decoding happens once: `%252e%252e` is the plain name `%2e%2e`.
  * A path ending in "/" (a directory page) maps to `…/index.html`, as wget does. A query is
    kept in the file name as `name?query` (not decoded; a "/" in it becomes `%2F`); a fragment
    is dropped.
  * Existing parents are resolved: a symlink that would take the path out of its mapping
    directory (or a mapping directory inside DEST that is itself a symlink out of DEST) is
    refused, as is a file where a directory is needed or a directory where the file should be
    (`guard.DiskGuard`, which remembers the directories it found safe for the run).

- `Mirror.incoming` receives one resource into a temporary file `.<name>.<random>.part` beside
  its target, checks its length and hashes, and only then renames it into place. A process
  killed at any moment leaves the old file or the new one at the final name, never a part of
  one; `Mirror.cleanup` removes the temporary files such a run leaves behind.

- `unpack.extract` unpacks a Resource Dump or Change Dump package member by member through
  `incoming`, each to where its URI maps, with limits on size and compression ratio.

- Each file is named in the copy's journal (`journal`) before it takes its name, until the
  state records it: the run after a killed one removes what it put in place unrecorded.

With `dry_run`, nothing is created, replaced or removed; what would be written is still hashed
and checked, so a dry run reports what a real one would.

Synchronous by design: the async engine calls it between awaits, one chunk at a time.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections import abc
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import TracebackType

from .. import rng
from ..atomic import fsync_dir
from ..errors import ResourceSyncError
from ..hashing import ALGORITHMS, MultiHasher, hash_file
from .guard import DiskGuard
from .journal import Journal
from .paths import (
    INDEX_NAME,
    MAX_NAME_BYTES,
    STATE_DIR_NAME,
    TEMP_OVERHEAD,
    TEMP_RE,
    Mapping,
    Root,
    UnsafePath,
    UriMap,
    is_within,
)

__all__ = [
    "INDEX_NAME",
    "STATE_DIR_NAME",
    "Incoming",
    "IntegrityError",
    "Located",
    "Mapping",
    "Mirror",
    "UnsafePath",
    "Written",
]


#: Seconds within which two modification times are the same (FAT keeps 2-second times).
MODIFY_WINDOW = 2.0
CHUNK = 1 << 20


class IntegrityError(ResourceSyncError):
    """Bytes received do not match the expected length or hash."""


@dataclass(slots=True)
class Written:
    """A resource received: where it is (or would be, in a dry run), its length and digests.

    `hashes` holds every digest computed: md5 always, and every expected algorithm we know.
    `location` is the path as a string (what the transfers use); `path` the same as a Path.
    """

    location: str
    length: int
    hashes: dict[str, str] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return Path(self.location)


def _set_times(fd: int, path: str, mtime: datetime) -> None:
    """Give the open file `fd` (at `path`) `mtime` as its access and modification times (best
    effort: a file system that refuses keeps the time of the write)."""
    t = mtime.timestamp()
    with contextlib.suppress(OSError):
        os.utime(fd if os.utime in os.supports_fd else path, (t, t))


def _temp_prefix(name: str) -> str:
    """'.' + name, cut (on a character boundary) so the temporary name fits in 255 bytes."""
    data = name.encode("utf-8")[: MAX_NAME_BYTES - TEMP_OVERHEAD]
    return "." + data.decode("utf-8", errors="ignore")


@dataclass(frozen=True, slots=True)
class Located:
    """Where a URI lands (from `Mirror.locate`): the path as a string, and its mapping."""

    path: str
    root: Root


class Mirror:
    """The local tree under `dest`, with URIs mapped into it by `mappings`.

    When several mappings have the same prefix, the last one given wins (so a user's `--map`
    overrides a default). A relative mapping directory is relative to `dest`.
    """

    def __init__(
        self,
        dest: Path,
        mappings: Sequence[Mapping],
        *,
        fsync: bool = False,
        dry_run: bool = False,
        backup_dir: Path | None = None,
        times: bool = False,
    ) -> None:
        self.dest = Path(dest).resolve()
        #: Where a file replaced or deleted goes first (at its path under DEST).
        self.backup_dir = Path(os.path.abspath(backup_dir)) if backup_dir else None
        if self.backup_dir is not None and (
            is_within(str(self.backup_dir), str(self.dest))
            or is_within(str(self.dest), str(self.backup_dir))
        ):
            raise ResourceSyncError(
                "the backup directory must not overlap the copy (it would be synced and "
                "audited as part of it)",
                source=str(self.backup_dir),
            )
        self._dest_str = str(self.dest)
        self._dest_prefix = self._dest_str.rstrip("/") + "/"
        self.state_dir = self.dest / STATE_DIR_NAME
        self._state_str = str(self.state_dir)
        #: What lies on the disk on the way to a path, checked before it is written.
        self.guard = DiskGuard(self.dest, self.state_dir, dry_run=dry_run)
        self.fsync = fsync
        self.dry_run = dry_run
        #: Whether a file written gets the time it is given (`incoming(mtime=…)`: the
        #: Source's `<lastmod>`) as its modification time.
        self.times = times
        #: The files put in place and not yet recorded (`open_journal`).
        self._journal = Journal(self.state_dir, dry_run=dry_run, fsync=fsync)
        uris = UriMap(self.dest, mappings, self.state_dir)
        self._roots = uris.roots
        #: Where a URI maps, from the URI alone (`UriMap.map`: the hot path, called direct).
        self._map: Callable[[str], tuple[str, Root]] = uris.map
        self._uris = uris

    @property
    def mappings(self) -> list[Mapping]:
        return self._uris.mappings

    # -- where a URI lands ------------------------------------------------------------------

    def check_state_dir(self, *, create: bool) -> None:
        """The state directory must be a real directory inside DEST (`DiskGuard`)."""
        self.guard.check_state_dir(create=create)

    def path_for(self, uri: str) -> Path:
        """The absolute local path of `uri`; raises UnsafePath (see the module docstring)."""
        return Path(self._locate(uri)[0])

    def location(self, uri: str) -> str:
        """`path_for` as a string (for the paths taken once a resource)."""
        return self._locate(uri)[0]

    def mapped(self, uri: str) -> str:
        """Where `uri` maps (an absolute path, as a string), from the URI alone (UnsafePath
        when the URI itself cannot be mapped); what lies on the disk there is checked by
        `path_for` and by every write."""
        return self._map(uri)[0]

    def relpath(self, uri: str) -> str:
        """Where `uri` maps, relative to DEST in POSIX form (absolute when mapped outside DEST).
        The mapping only: what lies on the disk there is checked by `path_for` and by every
        write, not here."""
        return self.stored(self._map(uri)[0])

    def stored(self, path: str | Path) -> str:
        """How a local path is kept in the state: relative to DEST, or absolute when a
        mapping puts it outside DEST."""
        text = os.fspath(path)
        if text.startswith(self._dest_prefix):
            return text[len(self._dest_prefix) :]
        return "." if text == self._dest_str else Path(text).as_posix()

    # The mapping works on strings: a Path made and printed twice a resource was 4–5 % of a
    # sync's CPU (issue 15.1). Paths are made at the edges (`path_for`, `Written.path`).

    def _locate(self, uri: str) -> tuple[str, Root]:
        """Where `uri` maps, with what lies on the disk on the way checked."""
        path, root = self._map(uri)
        self.guard.checked(uri, path, root)
        return path, root

    # -- writing ----------------------------------------------------------------------------

    def locate(self, uri: str) -> Located:
        """Where `uri` lands, checked on the disk as `path_for` does; hand it to `incoming`
        to write there without mapping the URI again (the disk is looked at again then)."""
        return Located(*self._locate(uri))

    def incoming(
        self,
        uri: str,
        *,
        length: int | None = None,
        hashes: abc.Mapping[str, str] | None = None,
        at: Located | None = None,
        mtime: datetime | None = None,
    ) -> Incoming:
        """Start receiving `uri` (at `at`, from `locate(uri)`, when given); raises
        UnsafePath before anything is created. With `times`, the file gets `mtime` (when
        given) as its modification time before it takes its name."""
        if at is None or self.backup_dir is not None:
            # (With a backup directory the old file is linked or copied: looked at again.)
            path, root = self._locate(uri)
        else:
            # Located moments ago: the way there is looked at again (remembered directories
            # cost nothing); the name itself needs no second look, as the temporary file is
            # created with O_EXCL|O_NOFOLLOW and renamed over whatever is there (a symlink
            # is replaced, never written through; a directory makes the rename fail).
            path, root = at.path, at.root
            self.guard.checked(uri, path, root, name=False)
        return Incoming(
            self, uri, path, root, length=length, hashes=hashes, mtime=mtime if self.times else None
        )

    @staticmethod
    def same_time(st: os.stat_result, mtime: datetime | None) -> bool:
        """Whether a file's modification time is `mtime` (None: any time is), within the
        2 seconds of the coarsest file systems' clocks (FAT), as rsync's --modify-window."""
        return mtime is None or abs(st.st_mtime - mtime.timestamp()) < MODIFY_WINDOW

    def keep_time(
        self, location: str, mtime: datetime | None, st: os.stat_result | None = None
    ) -> None:
        """A copy kept as it is (its content checked against what the Source lists) takes
        the time the Source now gives it, as rsync's and rclone's do when only the time
        changed: with `times`, not in a dry run; `st`, the file's stat when the caller has
        it. Best effort."""
        if not self.times or self.dry_run or mtime is None:
            return
        with contextlib.suppress(OSError):
            if st is None:
                st = os.stat(location)
            if not self.same_time(st, mtime):
                t = mtime.timestamp()
                os.utime(location, (t, t))

    def _make_parents(self, location: str, root: Root, uri: str) -> None:
        """Create the missing directories between the root and `location` (fsync'd when
        asked)."""
        if self.guard.known_dir(os.path.dirname(location), root):
            return  # there, and checked (the guard remembers directories)
        path = Path(location)
        missing = []
        current = path.parent
        while current != root.directory and not current.is_dir():
            missing.append(current)
            current = current.parent
        directory = root.directory
        try:
            if not directory.is_dir():
                os.makedirs(directory, exist_ok=True)
            for directory in reversed(missing):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(directory)
                    self.guard.made(str(directory))
                    if self.fsync:
                        fsync_dir(directory.parent)
        except OSError as exc:
            raise ResourceSyncError(
                f"cannot create {directory}: {exc.strerror or exc}", source=uri
            ) from None
        # Between the check and the mkdir a symlink could have appeared; look again.
        self.guard.check(path, root)

    def delete(self, uri: str) -> bool:
        """Remove the local copy of `uri` (never a directory) and the directories it leaves empty,
        up to its mapping directory. False when there is nothing to remove. In a dry run nothing
        is removed; the answer says whether something would be."""
        location, root = self._locate(uri)
        return self._remove(Path(location), root.directory, uri)

    def files(self) -> Iterator[str]:
        """Every file under DEST (links to files included), the state directory and our
        temporary files left out: what `audit` and `sync --repair` compare with the Source."""
        state = self._state_str
        for dirpath, dirnames, filenames in os.walk(self._dest_str):
            dirnames[:] = [d for d in dirnames if not is_within(os.path.join(dirpath, d), state)]
            for name in filenames:
                path = os.path.join(dirpath, name)
                if not TEMP_RE.match(name) and os.path.isfile(path):
                    yield path

    def move_held(self, stored: str, uri: str) -> bool:
        """Rename the file the state holds at `stored` (as `stored` gives it) to where `uri`
        maps now (the mappings changed: `remap.py`). True when it is there now (moved, or
        found moved by a repair killed before the state was told); False when both places or
        neither hold a file; UnsafePath when either place is not the copy's (the old
        one outside every mapping's directory or in the state, the new one as `location`
        checks it); OSError as the file system says (another file system)."""
        source = stored if os.path.isabs(stored) else os.path.join(self._dest_str, stored)
        inside = any(is_within(source, r.text) for r in self._roots) or is_within(
            source, self._dest_str
        )
        if not inside or is_within(source, self._state_str):
            raise UnsafePath(f"{source} is not a file of the copy", source=uri)
        target = self.location(uri)
        if not os.path.lexists(source):
            return os.path.isfile(target)
        if not os.path.isfile(source) or os.path.islink(source) or os.path.lexists(target):
            return False
        if not self.dry_run:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.rename(source, target)
        return True

    def remove_stray(self, path: str) -> bool:
        """Remove a file of DEST that no URI the Source lists maps to and that the copy does
        not hold (`sync --repair --delete`), as `delete` removes a resource's."""
        if not is_within(path, self._dest_str) or is_within(path, self._state_str):
            raise UnsafePath(f"{path} is not a file of the copy")
        return self._remove(Path(path), self.dest, path)

    def _remove(self, path: Path, top: Path, source: str) -> bool:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise ResourceSyncError(
                f"cannot delete {path}: {exc.strerror or exc}", source=source
            ) from None
        if stat.S_ISDIR(st.st_mode):  # pragma: no cover - _locate refuses directories
            raise UnsafePath(f"{path} is a directory", source=source)
        if self.dry_run:
            return True
        try:
            if self.backup_dir is not None:
                self.backup(path, source, move=True)
            else:
                os.unlink(path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise ResourceSyncError(
                f"cannot delete {path}: {exc.strerror or exc}", source=source
            ) from None
        if self.fsync:
            fsync_dir(path.parent)
        current = path.parent
        while current != top and is_within(str(current), str(top)):
            try:
                os.rmdir(current)
            except OSError:
                break
            if self.fsync:
                fsync_dir(current.parent)
            current = current.parent
        return True

    def backup(self, path: Path, uri: str, *, move: bool) -> None:
        """Keep `path` under the backup directory at its place under DEST (a mapping outside
        DEST: under its directory's name), replacing an older backup there: moved (a deletion)
        or hard-linked (a replacement: the file stays in place until the new one replaces it),
        copied when the backup directory is on another file system."""
        assert self.backup_dir is not None
        try:
            rel = path.relative_to(self.dest)
        except ValueError:
            root = next(r for r in self._roots if is_within(str(path), str(r.directory)))
            rel = Path(root.directory.name) / path.relative_to(root.directory)
        target = self.backup_dir / rel
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target)
            try:
                if move:
                    os.rename(path, target)
                else:
                    os.link(path, target)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                shutil.copy2(path, target)
                if move:
                    os.unlink(path)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise ResourceSyncError(
                f"cannot back {path} up to {target}: {exc.strerror or exc}", source=uri
            ) from None

    def local_digests(
        self, uri: str, algorithms: Iterable[str]
    ) -> tuple[int, dict[str, str]] | None:
        """(length, {algorithm: hexdigest}) of the local copy of `uri`, None when absent.
        Algorithms we do not know are left out."""
        path = self.path_for(uri)
        known = [a for a in dict.fromkeys(a.lower() for a in algorithms) if a in ALGORITHMS]
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would hang the read
                raise UnsafePath(f"{path} is not a regular file", source=uri)
            return hash_file(path, known)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ResourceSyncError(
                f"cannot read {path}: {exc.strerror or exc}", source=uri
            ) from None

    def cleanup(self) -> int:
        """Remove the temporary files a killed run left under every mapping directory (the
        state directory excepted); return how many there were. A dry run only counts them."""
        count = 0
        state = str(self.state_dir)
        seen: set[str] = set()
        for root in self._roots:
            top = str(root.directory)
            if top in seen or not os.path.isdir(top):
                continue
            seen.add(top)
            for dirpath, dirnames, filenames in os.walk(top):
                dirnames[:] = [
                    d for d in dirnames if not is_within(os.path.join(dirpath, d), state)
                ]
                for name in filenames:
                    if TEMP_RE.match(name):
                        count += 1
                        if not self.dry_run:
                            with contextlib.suppress(FileNotFoundError):
                                os.unlink(os.path.join(dirpath, name))
        return count

    # -- files put in place and not yet recorded (`journal`) ---------------------------------

    def open_journal(self) -> None:
        """Name every file put in place from now on in DEST/.resourcesync/written."""
        self._journal.open()

    def recorded(self) -> None:
        """The files named so far are recorded in the state: the journal starts again."""
        self._journal.recorded()

    def close_journal(self) -> None:
        self._journal.close()

    def remove_unrecorded(self, recorded: abc.Callable[[str], str | None]) -> int:
        """After a run that did not finish: remove the files its journal names that are still
        the bytes it wrote and that the state does not record as such (`recorded(stored
        path)`: the md5 the state holds for that place, None when it holds nothing there);
        return how many (`Journal.remove_unrecorded`)."""
        tops = [os.path.realpath(t) for t in [*(r.directory for r in self._roots), self.dest]]
        return self._journal.remove_unrecorded(recorded, self.stored, tops, self.guard.state_real)


class Incoming:
    """One resource being received into a temporary file beside its target.

    A context manager: the block's normal end commits, an exception aborts. `written` holds
    the result once committed.
    """

    def __init__(
        self,
        mirror: Mirror,
        uri: str,
        location: str,
        root: Root,
        *,
        length: int | None = None,
        hashes: abc.Mapping[str, str] | None = None,
        mtime: datetime | None = None,
    ) -> None:
        self.uri = uri
        self.location = location
        self._mtime = mtime
        self.length = length
        self.expected = {
            algo.lower(): value
            for algo, value in (hashes or {}).items()
            if algo.lower() in ALGORITHMS
        }
        self.written: Written | None = None
        self._mirror = mirror
        self._fsync = mirror.fsync
        self._hasher = MultiHasher(dict.fromkeys(["md5", *self.expected]))
        self._done = False
        self._fd: int | None = None
        self.tmp: str | None = None
        if mirror.dry_run:
            return
        mirror._make_parents(location, root, uri)
        directory, _, name = location.rpartition("/")
        prefix = f"{directory}/{_temp_prefix(name)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        for _ in range(100):
            # Unpredictable enough: the name is only ever created with O_EXCL|O_NOFOLLOW.
            tmp = f"{prefix}.{rng.getrandbits(32):08x}.part"
            try:
                fd = os.open(tmp, flags, 0o666)
            except FileExistsError:
                continue
            except OSError as exc:
                raise ResourceSyncError(
                    f"cannot write {location}: {exc.strerror or exc}", source=uri
                ) from None
            break
        else:  # pragma: no cover - 100 collisions of 32 random bits
            raise ResourceSyncError(f"cannot create a temporary file beside {location}", source=uri)
        self.tmp = tmp
        # Written through the descriptor: the pieces that arrive are already large, and a
        # buffered file object per resource costs its buffer (a megabyte) for a few hundred
        # bytes of a typical resource.
        self._fd = fd

    @property
    def path(self) -> Path:
        """Where the resource goes."""
        return Path(self.location)

    @property
    def received(self) -> int:
        """Bytes written so far."""
        return self._hasher.length

    def write(self, data: bytes) -> None:
        """Add bytes; more than the expected length is an IntegrityError at once (and aborts)."""
        if self._done:
            raise ValueError(f"{self.uri}: write after commit or abort")
        if self.length is not None and self._hasher.length + len(data) > self.length:
            self.abort()
            raise IntegrityError(
                f"more than the expected {self.length} bytes arrived", source=self.uri
            )
        self._hasher.update(data)
        if self._fd is not None:
            try:
                # Mostly written whole at once; the rest of a short write after it.
                done = os.write(self._fd, data)
                if done < len(data):
                    view = memoryview(data)[done:]
                    while view:
                        view = view[os.write(self._fd, view) :]
            except OSError as exc:
                self.abort()
                raise ResourceSyncError(
                    f"cannot write {self.location}: {exc.strerror or exc}", source=self.uri
                ) from None

    def commit(self) -> Written:
        """Check length and the expected digests; on success put the file in place (once).

        On a mismatch the temporary file goes, the previous file stays, and IntegrityError
        says what was expected and what arrived.
        """
        if self.written is not None:
            return self.written
        if self._done:
            raise ValueError(f"{self.uri}: commit after abort")
        got = self._hasher.hexdigests()
        problems = []
        if self.length is not None and self._hasher.length != self.length:
            problems.append(f"length: expected {self.length} bytes, got {self._hasher.length}")
        for algo, value in self.expected.items():
            if value.strip().lower() != got[algo]:
                problems.append(f"{algo}: expected {value}, got {got[algo]}")
        if problems:
            self.abort()
            raise IntegrityError("mismatch: " + "; ".join(problems), source=self.uri)
        if self._fd is not None and self.tmp is not None:
            try:
                fd, self._fd = self._fd, None
                try:
                    if self._mtime is not None:
                        # On the descriptor, before the rename: the file takes its name with
                        # its time (a run killed between the two left the time of the write).
                        _set_times(fd, self.tmp, self._mtime)
                    if self._fsync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                if self._mirror.backup_dir is not None and os.path.lexists(self.location):
                    try:
                        self._mirror.backup(self.path, self.uri, move=False)
                    except ResourceSyncError:
                        self.abort()  # the old file stays, not backed up: nothing replaced
                        raise
                self._mirror._journal.write(got["md5"], self.location)
                os.replace(self.tmp, self.location)
            except OSError as exc:
                self.abort()
                raise ResourceSyncError(
                    f"cannot put {self.location} in place: {exc.strerror or exc}",
                    source=self.uri,
                ) from None
            if self._fsync:
                fsync_dir(self.path.parent)
        self._done = True
        self.written = Written(self.location, self._hasher.length, got)
        return self.written

    def abort(self) -> None:
        """Give up: the temporary file goes, the previous file stays (idempotent)."""
        if self._done:
            return
        self._done = True
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)

    def __enter__(self) -> Incoming:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()
