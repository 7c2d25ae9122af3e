"""A re-run's directory listings taken ahead, by a second process (issue 15.3).

The walk (a `scandir` and an `lstat` a file) is most of what a re-run costs, and it keeps one
core busy while the other waits: a scan compares each directory with its listing, reads and
hashes what changed and writes the state, one directory after the other. A forked child walks
the directories the state knows, in the order the scan asks for them, and hands each listing
over through a pipe (`marshal`led, packed as the state keeps them) while the scan compares the ones
before it; when the scan would wait for it, the scan lists the next directory itself (the two
share the walk: `ListingPrefetch`). The pipe bounds how far the child runs ahead, so memory
does not grow with the tree: the scan holds at most a pipe's worth of listings it has not
asked for yet, and one it listed ahead of its turn.

The child runs `DirectoryInventory.list_dir` itself, the same code on the same inventory, and
reports what that noted (links skipped, names unreadable); the scan takes the listing and the
notes as if it had listed the directory at that moment. A directory the child did not list (new
since the last run), or any listing the child could not hand over (it died, it was killed), is
listed by the scan itself: the child only ever saves time.

A command begins it before it has loaded the rest of itself (`head_start`): `publish` from
cron spends a third of a re-run of 50,000 files starting (the interpreter, the command line,
then the scan, the documents' writers and their dependencies), and the child's listing
overlaps the last of these. The scan takes such a child over when it lists for the same
inventory, and otherwise ends it and starts its own.

Only where forking is safe and worth it: Linux, two CPUs to run on, a process with no other
thread (a thread holding a lock, the allocator's or the import system's, when the process
forks would leave it held for ever in the child) but a progress display's, and a tree of more
than a few thousand files. The child touches nothing but the tree, the pipe and its flags, and
leaves with `os._exit` (no buffers flushed twice, no handlers run, the state's connection left
alone).
"""

from __future__ import annotations

import contextlib
import marshal
import mmap
import os
import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .inventory import DirectoryInventory, ScanStats
from .listings import peek
from .packed import Listing

if TYPE_CHECKING:
    from .config import PublishConfig

__all__ = ["ListingPrefetch", "head_start", "scan_order", "usable"]

#: Below this many files (as the state's listings measure them: about 45 bytes a file, 32 of
#: them its stat) a re-run walks on its own: the fork and the pipe would cost more than the
#: walk they share.
MIN_BYTES = 150_000
#: How much of the child's work the pipe holds (Linux allows an unprivileged process up to
#: /proc/sys/fs/pipe-max-size, 1 MiB by default): about twenty directories of 1,000 files.
PIPE_BYTES = 1 << 20
_HEADER = 4

Listed = tuple[Listing, list[str]] | None
#: A directory's rank in the scan's order, its listing, and what listing it noted.
Frame = tuple[int, Listed, tuple[Any, ...]]


def _notes(s: ScanStats) -> tuple[Any, ...]:
    return (s.files, s.skipped_links, s.skipped_names, s.excluded, s.unreadable, s.unknown)


def usable() -> bool:
    """Whether this process may fork a lister now (see the module's note)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    me = threading.current_thread()
    if any(t is not me and not _harmless(t) for t in threading.enumerate()):
        return False
    try:
        return len(os.sched_getaffinity(0)) > 1
    except OSError:
        return False


@contextlib.contextmanager
def head_start(config: PublishConfig) -> Iterator[dict[str, ListingPrefetch]]:
    """The first set's listings begun now, before the command loads the scan (by set name, for
    `publish(head_starts=…)`), where a re-run would have its walk shared; the child is ended
    when the block is left, whether the scan took it over or not."""
    started: dict[str, ListingPrefetch] = {}
    s = config.sets[0]
    try:
        ready = s.dir.is_dir()
    except OSError:
        ready = False  # said by the run, as it would be without a head start
    try:
        if ready:
            inventory = DirectoryInventory.of_set(config, s)
            known = peek(config.state_file(s), inventory.signature(s.hashes))
            prefetch = ListingPrefetch.start(inventory, known)
            if prefetch is not None:
                started[s.name] = prefetch
        yield started
    finally:
        for prefetch in started.values():
            prefetch.close()


def scan_order(prefixes: Iterable[str]) -> list[str]:
    """Directories (relative paths ending in "/", "" for the root) in the order a scan comes
    to them: depth first, a directory's sub-directories by name ("a/x/" before "a-b/")."""
    return sorted(prefixes, key=lambda p: p.split("/"))


def _harmless(thread: threading.Thread) -> bool:
    """A thread whose locks the child never takes: rich's refresh of a progress display on a
    terminal (it holds the display's lock and writes to stderr, which the child leaves alone),
    so that a re-run run by hand shares its walk as one run from cron does."""
    kind = type(thread)
    return kind.__name__ == "_RefreshThread" and kind.__module__ == "rich.live"


class ListingPrefetch:
    """`list_dir` as `DirectoryInventory`'s, from a child that lists `prefixes` (in the order
    the scan asks for them) ahead of the scan. `close()` ends the child, whatever it did.

    The two share the walk through two flags a directory, in memory both processes share,
    each written by one side only. The child raises its flag before it lists a directory and
    passes over one whose scan's flag is up. The scan raises its flag when it comes to a
    directory: if the child's is down, the scan lists it itself; if it is up, the child is at
    it or past it, and while its listing comes the scan lists the next directory (unless the
    child has come to that one too), which it holds for its next question. So when the child
    has more to do than the scan (few changes) they take a directory each; when the scan has
    more (many changes), the child runs ahead, as far as the pipe holds. Should both raise
    their flags at once, either both list the directory (the scan drops the child's listing)
    or the child passes over it while the scan waits for it: the child's next listing tells
    the scan so, and it lists the directory itself."""

    def __init__(self, inventory: DirectoryInventory, prefixes: Iterable[str]) -> None:
        self.inventory = inventory
        order = list(prefixes)
        self._rank = {prefix: i for i, prefix in enumerate(order)}
        self._count = len(order)
        # The child's flags, then the scan's: one byte a directory (a byte is written whole).
        self._flags = mmap.mmap(-1, 2 * len(order))
        self._buffer = bytearray()
        self._order = order
        self._held: Frame | None = None  # the child's, read, not yet asked for
        self._ahead: Frame | None = None  # listed here ahead of its turn
        self._next = 0  # the directories before this rank are behind the scan
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
            self._flags.close()
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
        cls,
        inventory: DirectoryInventory,
        known: list[tuple[str, int]],
        started: ListingPrefetch | None = None,
    ) -> ListingPrefetch | None:
        """A prefetch of the directories `known` (prefix, size of its listing) when it is worth
        a second process here (`usable`), else None (the scan walks on its own). `started`:
        one begun before (`head_start`), taken over when it lists for the same inventory
        (what it noted then goes to `inventory`), else ended. Begun from what the state knew
        a moment before, it may list a directory the scan will not ask for, or not one it
        will: the scan lists that one itself, as any it does not hold."""
        if started is not None:
            if started.inventory.signature(()) == inventory.signature(()):
                started.inventory = inventory
                return started
            started.close()
        if len(known) < 2 or sum(size for _, size in known) < MIN_BYTES or not usable():
            return None
        try:
            return cls(inventory, scan_order(prefix for prefix, _ in known))
        except OSError:
            return None  # no process, pipe or shared page to be had: the scan walks alone

    # -- the child ---------------------------------------------------------------------------

    def _child(self, order: list[str], fd: int) -> None:  # pragma: no cover (in the child)
        # Ctrl-C reaches the whole process group: the parent stops the child itself.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        inventory = self.inventory
        root = str(inventory.root)
        flags = self._flags
        theirs = self._count
        for rank, prefix in enumerate(order):
            flags[rank] = 1
            if flags[theirs + rank]:
                continue  # the scan came to it first
            inventory.stats = ScanStats()
            directory = os.path.join(root, prefix) if prefix else root
            listed = inventory.list_dir(directory, prefix)
            sent = None if listed is None else (listed[0].text, listed[0].stats, listed[1])
            blob = marshal.dumps((rank, sent, _notes(inventory.stats)))
            data = len(blob).to_bytes(_HEADER, "little") + blob
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]

    # -- the scan's side ---------------------------------------------------------------------

    def list_dir(self, directory: str, prefix: str) -> Listed:
        """The directory's files and sub-directories, as `DirectoryInventory.list_dir`."""
        rank = self._rank.get(prefix)
        if rank is None or rank < self._next:
            return self.inventory.list_dir(directory, prefix)  # not one the child lists
        # The scan asks in the child's order: what it passed over (gone, or under a directory
        # gone) it will not ask for.
        self._next = rank + 1
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == rank:
            self._note(ahead[2])
            return ahead[1]
        if self._read_fd is None:
            return self.inventory.list_dir(directory, prefix)  # the child is gone
        flags, count = self._flags, self._count
        flags[count + rank] = 1
        if not flags[rank]:
            return self.inventory.list_dir(directory, prefix)  # the child has not come to it
        # The child is at it or past it. Unless it has come to the next one too, that one is
        # listed here meanwhile (kept for the scan's next question: one listing held).
        following = rank + 1
        if following < count and not flags[following]:
            flags[count + following] = 1
            self._ahead = (following, *self._list_here(self._order[following]))
        while True:
            got = self._held or self._receive()
            self._held = None
            if got is None:
                break  # the child is gone
            if got[0] < rank:
                continue  # of a directory the scan passed, or listed itself
            if got[0] > rank:
                self._held = got  # the child passed over this one: listed here
                break
            self._note(got[2])
            return got[1]
        return self.inventory.list_dir(directory, prefix)

    def _list_here(self, prefix: str) -> tuple[Listed, tuple[Any, ...]]:
        """A directory listed by the scan's process ahead of its turn, with what the listing
        noted (kept apart until its turn)."""
        inventory = self.inventory
        stats, inventory.stats = inventory.stats, ScanStats()
        try:
            root = str(inventory.root)
            listed = inventory.list_dir(os.path.join(root, prefix) if prefix else root, prefix)
            return listed, _notes(inventory.stats)
        finally:
            inventory.stats = stats

    def _receive(self) -> Frame | None:
        """The child's next listing (its rank, the listing, its notes); None when the child
        has no more to give."""
        fd = self._read_fd
        if fd is None:
            return None
        buffer = self._buffer
        while True:
            if len(buffer) >= _HEADER:
                size = int.from_bytes(buffer[:_HEADER], "little")
                if len(buffer) >= _HEADER + size:
                    try:
                        rank, sent, notes = marshal.loads(buffer[_HEADER : _HEADER + size])
                    except (ValueError, EOFError, TypeError):
                        self._stop()
                        return None
                    del buffer[: _HEADER + size]
                    listed = None if sent is None else (Listing(sent[0], sent[1]), sent[2])
                    return rank, listed, notes
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
        self._held = None

    def close(self) -> None:
        """End the child (killed if it is still listing) and reap it."""
        self._stop()
        if self._pid > 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self._pid, 0)
            self._pid = 0
            self._flags.close()

    def __enter__(self) -> ListingPrefetch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
