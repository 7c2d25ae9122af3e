"""Atomic file replacement: write beside the target, rename into place only on success.

A reader sees the old file or the new one, never half of one; a failed or interrupted write
leaves the old file as it was and no temporary file behind. Ground floor: imports only errors.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from types import TracebackType

from .errors import ResourceSyncError

__all__ = ["AtomicFile", "fsync_dir"]


class AtomicFile:
    """A binary file that becomes `path` when committed. Use as a context manager: it commits
    when the block ends normally and aborts when it raises.

    The new file keeps the permissions of the file it replaces (0644 for a new one); with
    `fsync`, its data is on disk before the rename (power-loss safety, at a cost). A missing
    directory is an error unless `make_parents`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: bool = False,
        buffering: int = 1 << 20,
        suffix: str = ".tmp",
        make_parents: bool = False,
    ) -> None:
        self.path = Path(path)
        self._fsync = fsync
        self._done = False
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
            if self._fsync:
                os.fsync(self.file.fileno())
            self.file.close()
            try:
                mode = self.path.stat().st_mode & 0o777
            except OSError:
                mode = 0o644
            os.chmod(self.tmp, mode)
            os.replace(self.tmp, self.path)
            if self._fsync:
                fsync_dir(self.path.parent)
        except BaseException:
            self._remove()
            raise

    def abort(self) -> None:
        """Give up: the temporary file goes, the old file stays (once)."""
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
            self.abort()


def fsync_dir(directory: Path) -> None:
    """Make a rename durable: fsync the directory that holds the entry."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
