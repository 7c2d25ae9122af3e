"""The journal of files put in place and not yet recorded (`DEST/.resourcesync/written`).

A transfer records what it wrote in batches, after the files are in place: a run killed in
between left files the state did not know. Fetched again by the next run while the Source
lists them, they were harmless; one the Source deleted meanwhile stayed for good (a deletion
of a file this copy never recorded is refused, issue 17.10) under an ok. So each file is named
in the journal (its md5 and place, one `write`) before its rename, and the journal is emptied
once its files are recorded; the run after a killed one removes the files the journal names
that the state does not hold, when they are still the bytes written (the Source's; fetched
again if it still lists them). `Mirror` keeps it: it alone writes into the tree.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from ..hashing import hash_file
from .paths import is_within

__all__ = ["JOURNAL_NAME", "Journal"]

#: The journal's file, in the state directory.
JOURNAL_NAME = "written"


class Journal:
    """The journal of one copy (its state directory `state_dir`). Nothing is written in a dry
    run; with `fsync`, each line is on the disk before the file it names takes its name."""

    def __init__(self, state_dir: Path, *, dry_run: bool, fsync: bool) -> None:
        self.path = state_dir / JOURNAL_NAME
        self.dry_run = dry_run
        self.fsync = fsync
        self._fd: int | None = None

    def open(self) -> None:
        """Name every file put in place from now on."""
        if self.dry_run or self._fd is not None:
            return
        self._fd = os.open(
            self.path,
            os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW,
            0o666,
        )

    def recorded(self) -> None:
        """The files named so far are recorded in the state: the journal starts again."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def write(self, md5: str, location: str) -> None:
        """Name the file about to be put in place at `location`, with the md5 of its bytes."""
        if self._fd is not None:
            os.write(self._fd, f"{md5} {location}\n".encode("utf-8", "surrogateescape"))
            if self.fsync:
                # On the disk before the rename is: a power cut must not keep the file and
                # lose its line.
                os.fsync(self._fd)

    def remove_unrecorded(
        self,
        recorded: Callable[[str], str | None],
        stored: Callable[[str], str],
        tops: Iterable[str],
        state_real: str,
    ) -> int:
        """After a run that did not finish: remove the files the journal names that are still
        the bytes it wrote and that the state does not record as such (`recorded(stored
        path)`: the md5 the state holds for that place, None when it holds nothing there;
        `stored(location)`: how the state names a place); return how many. A file changed
        since is kept, and so is one outside `tops` (the copy's directories, real paths) or in
        the state (`state_real`). The journal is emptied."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return 0
        if not data:
            return 0  # the last run recorded everything it put in place: nothing to write
        removed = 0
        tops = list(tops)
        for line in data.split(b"\n"):
            md5, _, location = line.decode("utf-8", "surrogateescape").partition(" ")
            if not location or recorded(stored(location)) == md5:
                continue
            # Only a place this copy writes to: the journal is a file whoever can write DEST
            # can edit, and must not lead a removal out of the copy (a link on the way, `..`).
            parent = os.path.realpath(os.path.dirname(location))
            if (
                os.path.normpath(location) != location
                or not any(is_within(parent, top) for top in tops)
                or is_within(parent, state_real)
            ):
                continue
            try:
                st = os.lstat(location)
                if not stat.S_ISREG(st.st_mode) or hash_file(location)[1]["md5"] != md5:
                    continue  # changed since: not what the run wrote, kept
                if not self.dry_run:
                    os.unlink(location)
                removed += 1
            except OSError:
                continue
        if not self.dry_run:
            with open(self.path, "wb"):
                pass
        return removed
