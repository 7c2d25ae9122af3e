"""Which relative paths a command takes: `--include` / `--exclude` fnmatch patterns (`*`
matches across `/`), the same for `publish` (files under DIR) and `sync`/`audit` (where each
URI lands under DEST).

Ground floor: imports nothing of ours.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["PathFilter"]


@dataclass(frozen=True)
class PathFilter:
    """A path is taken when it matches an `include` pattern (any path, when there is none)
    and no `exclude` pattern."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    @classmethod
    def of(cls, include: Iterable[str] = (), exclude: Iterable[str] = ()) -> PathFilter:
        return cls(tuple(include), tuple(exclude))

    def __bool__(self) -> bool:
        return bool(self.include or self.exclude)

    def excluded(self, rel: str) -> bool:
        """Whether the relative path `rel` (with `/`) is left out."""
        if any(fnmatch.fnmatchcase(rel, p) for p in self.exclude):
            return True
        return bool(self.include) and not any(fnmatch.fnmatchcase(rel, p) for p in self.include)
