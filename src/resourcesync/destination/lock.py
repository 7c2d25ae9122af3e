"""One sync at a time per copy: an advisory lock (flock) on DEST/.resourcesync/sync.lock, as
`publish` locks its OUTDIR. A second process stops at once, saying why; the kernel releases the
lock when its holder dies, so a killed run never leaves the copy locked. Within one process the
lock is shared (a follower applies notifications and catches up through the same copy)."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from ..errors import ResourceSyncError

__all__ = ["CopyLock"]

_guard = threading.Lock()
#: Locks this process holds: path → (file descriptor, holders).
_held: dict[str, tuple[int, int]] = {}


class CopyLock:
    def __init__(self, state_dir: Path, dest: Path) -> None:
        self.path = str(state_dir / "sync.lock")
        self.dest = dest
        self.held = False

    def acquire(self) -> None:
        with _guard:
            if self.path in _held:
                fd, n = _held[self.path]
                _held[self.path] = (fd, n + 1)
                self.held = True
                return
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise ResourceSyncError(
                    "another sync is running for this copy; wait for it to finish",
                    source=str(self.dest),
                ) from None
            _held[self.path] = (fd, 1)
            self.held = True

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        with _guard:
            fd, n = _held[self.path]
            if n > 1:
                _held[self.path] = (fd, n - 1)
                return
            del _held[self.path]
            os.close(fd)
