"""The one exception family. Every error carries where it happened.

Ground floor: imports nothing of ours. The CLI turns these into one line and an exit code.
"""

from __future__ import annotations


class ResourceSyncError(Exception):
    """An error with an address: the input (URL or file), and where known the line and entry."""

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        entry: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.source = source
        self.line = line
        self.entry = entry

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
