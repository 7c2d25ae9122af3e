"""Which relative paths a command takes: `--include` / `--exclude` fnmatch patterns (`*`
matches across `/`), the same for `publish` (files under DIR) and `sync`/`audit` (where each
URI lands under DEST).

Ground floor: imports nothing of ours.
"""

from __future__ import annotations

import fnmatch
import shlex
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

    def options(self) -> str:
        """The filter as the command line gives it (`--include 'a/*' --exclude '*.pdf'`, "" for
        none): what a copy remembers it was made with."""
        return " ".join(
            [f"--include {shlex.quote(p)}" for p in self.include]
            + [f"--exclude {shlex.quote(p)}" for p in self.exclude]
        )

    @classmethod
    def from_options(cls, text: str) -> PathFilter:
        """The filter `options()` gave as `text`."""
        words = shlex.split(text)
        pairs = list(zip(words[::2], words[1::2], strict=True))
        return cls.of(
            [p for flag, p in pairs if flag == "--include"],
            [p for flag, p in pairs if flag == "--exclude"],
        )

    def within(self, other: PathFilter) -> bool:
        """Whether every path this filter takes, `other` takes too, as their patterns show
        (it excludes all `other` excludes, and includes only some of what `other` includes):
        False when that cannot be told so."""
        if not set(other.exclude) <= set(self.exclude):
            return False
        return not other.include or (bool(self.include) and set(self.include) <= set(other.include))
