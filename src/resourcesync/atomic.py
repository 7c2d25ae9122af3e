"""Atomic file replacement: write beside the target, rename into place only on success.

A reader sees the old file or the new one, never half of one; a failed or interrupted write
leaves the old file as it was and no temporary file behind. A file written again with the same
bytes can be left as it was (`keep_same`, `replace_unless_same`): its modification time, which
a server gives as Last-Modified and its ETag, then still says when it last changed. Ground
floor: imports only errors.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from types import TracebackType

from .errors import ResourceSyncError

__all__ = ["AtomicFile", "fsync_dir", "replace_unless_same", "same_bytes"]

#: How much of two files is compared at a time.
_COMPARED = 1 << 18


class AtomicFile:
    """A binary file that becomes `path` when committed. Use as a context manager: it commits
    when the block ends normally and aborts when it raises.

    The new file keeps the permissions of the file it replaces (0644 for a new one); with
    `fsync`, its data is on disk before the rename (power-loss safety, at a cost). A missing
    directory is an error unless `make_parents`. With `keep_same`, a file whose new bytes are
    the ones it holds is left as it was (`committed` then False).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: bool = False,
        buffering: int = 1 << 20,
        suffix: str = ".tmp",
        make_parents: bool = False,
        keep_same: bool = False,
    ) -> None:
        self.path = Path(path)
        self._fsync = fsync
        self._keep_same = keep_same
        self._done = False
        #: Whether `commit` put a new file in place (False: the same bytes were there).
        self.committed = False
        try:
            if make_parents:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(
                prefix=f".{self.path.name}.", suffix=suffix, dir=self.path.parent
            )
        except OSError as exc:
            raise ResourceSyncError(
                f"cannot write: {exc.strerror or exc}", source=str(self.path)
            ) from None
        self.tmp = Path(tmp)
        self.file = os.fdopen(fd, "wb", buffering=buffering)

    def write(self, data: bytes) -> int:
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()

    def tell(self) -> int:
        return self.file.tell()

    def commit(self) -> None:
        """Put the new file in place (once)."""
        if self._done:
            return
        self._done = True
        try:
            self.file.flush()
            if self._keep_same and same_bytes(self.tmp, self.path):
                self._remove()
                return
            if self._fsync:
                os.fsync(self.file.fileno())
            self.file.close()
            try:
                mode = self.path.stat().st_mode & 0o777
            except OSError:
                mode = 0o644
            os.chmod(self.tmp, mode)
            os.replace(self.tmp, self.path)
            self.committed = True
            if self._fsync:
                fsync_dir(self.path.parent)
        except BaseException as exc:
            self._remove()
            self.name_in(exc)
            raise

    def name_in(self, exc: BaseException | None) -> None:
        """Name the file in a write's `OSError` that names none (a full disk refuses a
        `write` or a `flush`, which know only a descriptor), so that it is said with the file
        it was to be."""
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = str(self.path)

    def abort(self, exc: BaseException | None = None) -> None:
        """Give up: the temporary file goes, the old file stays (once). `exc`, what made
        the writer give up, is given the file's name (`name_in`)."""
        self.name_in(exc)
        if self._done:
            return
        self._done = True
        self._remove()

    def _remove(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp)

    def __enter__(self) -> AtomicFile:
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
            self.abort(exc)


def same_bytes(new: Path, old: Path) -> bool:
    """Whether the file `old` holds exactly the bytes of `new` (False when it cannot be read,
    or is not a regular file: a symbolic link is replaced, as always). Sizes first: a file that
    changed is most often told by them, or by its first block (a document's header holds its
    time)."""
    try:
        with open(new, "rb") as a, open(old, "rb", opener=_regular_only) as b:
            b_stat = os.fstat(b.fileno())
            if not stat.S_ISREG(b_stat.st_mode) or b_stat.st_size != os.fstat(a.fileno()).st_size:
                return False
            while True:
                chunk = a.read(_COMPARED)
                if chunk != b.read(_COMPARED):
                    return False
                if not chunk:
                    return True
    except OSError:
        return False


def _regular_only(path: str, flags: int) -> int:
    """Open without following a symbolic link, nor waiting on a FIFO (`same_bytes` then sees
    what it opened is no regular file)."""
    return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))


def replace_unless_same(new: Path, target: Path) -> bool:
    """`os.replace(new, target)`, unless `target` holds the same bytes: then `new` is removed
    and `target` left as it was. Whether `target` was replaced."""
    if same_bytes(new, target):
        new.unlink()
        return False
    os.replace(new, target)
    return True


def fsync_dir(directory: Path) -> None:
    """Make a rename durable: fsync the directory that holds the entry."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
