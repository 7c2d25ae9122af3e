"""A re-run's directory listings taken ahead, by a second process (issue 15.3).

The walk (a `scandir` and an `lstat` a file) is most of what a re-run costs, and it keeps one
core busy while the other waits: a scan compares each directory with its listing, reads and
hashes what changed and writes the state, one directory after the other. A forked child walks
the directories the state knows, in the order the scan asks for them, and hands each listing
over through a pipe (`marshal`led, as the state keeps them) while the scan compares the ones
before it. The pipe bounds how far the child runs ahead, so memory does not grow with the
tree: the scan holds at most a pipe's worth of listings it has not asked for yet.

The child runs `DirectoryInventory.list_dir` itself, the same code on the same inventory, and
reports what that noted (links skipped, names unreadable); the scan takes the listing and the
notes as if it had listed the directory at that moment. A directory the child did not list (new
since the last run), or any listing the child could not hand over (it died, it was killed), is
listed by the scan itself: the child only ever saves time.

Only where forking is safe and worth it: Linux, two CPUs to run on, a process with no other
thread (a thread holding a lock, the allocator's or the import system's, when the process
forks would leave it held for ever in the child), and a tree of more than a few thousand files.
The child touches nothing but the tree and the pipe, and leaves with `os._exit` (no buffers
flushed twice, no handlers run, the state's connection left alone).
"""

from __future__ import annotations

import contextlib
import marshal
import os
import signal
import sys
import threading
from collections.abc import Iterable
from typing import Any

from .inventory import DirectoryInventory, ScanStats, Stat

__all__ = ["ListingPrefetch"]

#: Below this many files (as the state's listings measure them) a re-run walks on its own: the
#: fork and the pipe would cost more than the walk they share.
MIN_BYTES = 200_000
#: How much of the child's work the pipe holds (Linux allows an unprivileged process up to
#: /proc/sys/fs/pipe-max-size, 1 MiB by default): about twenty directories of 1,000 files.
PIPE_BYTES = 1 << 20
_HEADER = 4

Listed = tuple[dict[str, Stat], list[str]] | None


def usable() -> bool:
    """Whether this process may fork a lister now (see the module's note)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    if threading.active_count() != 1:
        return False
    try:
        return len(os.sched_getaffinity(0)) > 1
    except OSError:
        return False


class ListingPrefetch:
    """`list_dir` as `DirectoryInventory`'s, from a child that lists `prefixes` (in the order
    the scan asks for them) ahead of the scan. `close()` ends the child, whatever it did."""

    def __init__(self, inventory: DirectoryInventory, prefixes: Iterable[str]) -> None:
        self.inventory = inventory
        order = list(prefixes)
        self._rank = {prefix: i for i, prefix in enumerate(order)}
        self._buffer = bytearray()
        self._next = 0  # the rank of the next listing the child hands over
        self._pid = 0
        read, write = os.pipe()
        try:
            import fcntl

            fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except (ImportError, AttributeError, OSError):
            pass  # the default 64 KiB: the child waits on the scan more often
        try:
            self._pid = os.fork()
        except OSError:
            os.close(read)
            os.close(write)
            raise
        if self._pid == 0:  # pragma: no cover (runs in the child, which leaves with _exit)
            code = 0
            try:
                os.close(read)
                self._child(order, write)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(write)
        self._read_fd: int | None = read

    @classmethod
    def start(
        cls, inventory: DirectoryInventory, known: list[tuple[str, int]]
    ) -> ListingPrefetch | None:
        """A prefetch of the directories `known` (prefix, size of its listing) when it is worth
        a second process here (`usable`), else None (the scan walks on its own)."""
        if len(known) < 2 or sum(size for _, size in known) < MIN_BYTES or not usable():
            return None
        # The scan's order: depth first, a directory's sub-directories by name (as the names
        # split on "/" sort: "a/x/" comes before "a-b/").
        prefixes = sorted((prefix for prefix, _ in known), key=lambda p: p.split("/"))
        try:
            return cls(inventory, prefixes)
        except OSError:
            return None  # no process or pipe to be had: the scan walks on its own

    # -- the child ---------------------------------------------------------------------------

    def _child(self, order: list[str], fd: int) -> None:  # pragma: no cover (in the child)
        # Ctrl-C reaches the whole process group: the parent stops the child itself.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        inventory = self.inventory
        root = str(inventory.root)
        for prefix in order:
            inventory.stats = ScanStats()
            directory = os.path.join(root, prefix) if prefix else root
            listed = inventory.list_dir(directory, prefix)
            s = inventory.stats
            notes = (s.files, s.skipped_links, s.skipped_names, s.excluded, s.unreadable, s.unknown)
            blob = marshal.dumps((listed, notes))
            data = len(blob).to_bytes(_HEADER, "little") + blob
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]

    # -- the scan's side ---------------------------------------------------------------------

    def list_dir(self, directory: str, prefix: str) -> Listed:
        """The directory's files and sub-directories, as `DirectoryInventory.list_dir`."""
        rank = self._rank.get(prefix)
        if rank is not None and rank >= self._next:
            # The scan asks in the child's order: listings before this one are of directories
            # it will not ask for (gone, or under one gone), dropped.
            while self._read_fd is not None:
                got = self._receive()
                if got is None:
                    break
                if self._next - 1 == rank:
                    listed, notes = got
                    self._note(notes)
                    return listed
        return self.inventory.list_dir(directory, prefix)

    def _receive(self) -> tuple[Listed, tuple[Any, ...]] | None:
        """The child's next listing and its notes; None when the child has no more to give."""
        fd = self._read_fd
        assert fd is not None
        buffer = self._buffer
        while True:
            if len(buffer) >= _HEADER:
                size = int.from_bytes(buffer[:_HEADER], "little")
                if len(buffer) >= _HEADER + size:
                    try:
                        listed, notes = marshal.loads(buffer[_HEADER : _HEADER + size])
                    except (ValueError, EOFError, TypeError):
                        self._stop()
                        return None
                    del buffer[: _HEADER + size]
                    self._next += 1
                    return listed, notes
            try:
                chunk = os.read(fd, PIPE_BYTES)
            except InterruptedError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                self._stop()
                return None
            buffer += chunk

    def _note(self, notes: tuple[Any, ...]) -> None:
        files, links, names, excluded, unreadable, unknown = notes
        s = self.inventory.stats
        s.files += files
        s.skipped_links += links
        s.skipped_names += names
        s.excluded += excluded
        s.unreadable += unreadable
        s.unknown |= unknown

    def _stop(self) -> None:
        """No more from the child: the scan lists what is left itself."""
        if self._read_fd is not None:
            os.close(self._read_fd)
            self._read_fd = None
        self._buffer.clear()

    def close(self) -> None:
        """End the child (killed if it is still listing) and reap it."""
        self._stop()
        if self._pid > 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self._pid, 0)
            self._pid = 0

    def __enter__(self) -> ListingPrefetch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
