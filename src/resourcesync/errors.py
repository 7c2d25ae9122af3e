"""The one exception family. Every error carries where it happened.

Ground floor: imports nothing of ours. The CLI turns these into one line and an exit code.
"""

from __future__ import annotations

import errno
import sys


class ResourceSyncError(Exception):
    """An error with an address: the input (URL or file), and where known the line and entry."""

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        entry: str | None = None,
        full: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.source = source
        self.line = line
        self.entry = entry
        #: Local storage is full: a command says it as it says any full disk (exit 1, "free
        #: some space and run again"), not as an input it could not use.
        self.full = full

    def where(self) -> str:
        """The address as `source:line` (or just the source), empty when unknown."""
        if self.source is None:
            return ""
        if self.line is not None:
            return f"{self.source}:{self.line}"
        return self.source

    def __str__(self) -> str:
        where = self.where()
        text = f"{where}: {self.message}" if where else self.message
        if self.entry:
            text += f" (entry {self.entry})"
        return text


class ReadError(ResourceSyncError):
    """An input could not be read or parsed: missing, unreachable, not XML, hostile, too big."""


class FormatError(ResourceSyncError):
    """An input was read but a value in it is not what the specification allows."""


class FetchError(ReadError):
    """An HTTP exchange failed after the retries allowed (so the input could not be read)."""


class Gone(FetchError):
    """The Source answered 404 Not Found or 410 Gone: it does not have the resource (now)."""


def fetch_error(status: int, reason: str, url: str) -> FetchError:
    """The error of an HTTP answer that is not the resource (`Gone` for 404 and 410)."""
    kind = Gone if status in (404, 410) else FetchError
    return kind(f"HTTP {status} {reason}".rstrip(), source=url)


class StateDamaged(ResourceSyncError):
    """A state database that SQLite finds damaged (a page that is not what it wrote, a file
    that is not a database): nothing more can be read from it or recorded in it. Waiting does
    not mend it; what does depends on whose state it is (`sqlite.damage`)."""


#: SQLite's primary result codes for a damaged database: SQLITE_CORRUPT, SQLITE_NOTADB.
_DAMAGED_CODES = frozenset({11, 26})


def damaged_database(exc: BaseException) -> bool:
    """Whether `exc` is SQLite finding a database damaged (`database disk image is
    malformed`, `file is not a database`), wherever in a run it surfaced: at the opening, or
    at the first read of a page that is not what was written (a disk, a copy or a hand that
    changed the file)."""
    sqlite3 = sys.modules.get("sqlite3")
    if sqlite3 is None or not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return False
    return code & 0xFF in _DAMAGED_CODES


#: errno values that mean "no room to write" (no space, over quota, file too large).
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def storage_failure(
    exc: BaseException, where: object = None, verb: str = "write", what: str = "the state database"
) -> tuple[str, bool] | None:
    """One line for local storage refusing a write — a file system (full, read-only,
    permission denied, a file in the way) or an SQLite state database — and whether it is
    full; None for any other exception. As every command and the fleet's syncs say it.
    `where`: named when the error names no file (an SQLite error never does: the database is
    then `what` `where`). `verb`: "read" for a command that only reads local files (`audit`,
    `ls`), whose file system refusing it is no failure to write."""
    if isinstance(exc, OSError):
        full = exc.errno in FULL_ERRNOS
        place = exc.filename or where
        hint = ": free some space and run again" if full else ""
        head = f"cannot {verb} {place}" if place else f"cannot {verb}"
        return f"{head}: {exc.strerror or exc}{hint}", full
    sqlite3 = sys.modules.get("sqlite3")
    if sqlite3 is not None and isinstance(exc, sqlite3.OperationalError):
        text = str(exc)
        named = f"{what} {where}" if where else "a state database"
        if "disk is full" in text or "disk I/O error" in text:
            return f"cannot write {named} ({text}): free some space and run again", True
        if "readonly" in text or "unable to open" in text:
            return f"cannot write {named} ({text})", False
    return None
