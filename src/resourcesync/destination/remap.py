"""A copy is kept under one set of mappings — the Source's base on DEST and each `--map`:
where each URI's file is. A run given other mappings (a `--map` forgotten from a cron line on
one run by hand, or added later to reorganise the copy) put what changed under them and left
the rest where the earlier ones had, and said ok: a copy split across two layouts, whose
deletions then looked for files where they were not.

The mappings a copy was made with are kept in its state, for each Source synced into it (by
its base URL: two Sources may share a DEST). A run given others looks at what the copy holds:
none of it elsewhere, the new ones are taken; some of it elsewhere, the run stops and says so,
unless it is a repair, which moves each file held to where it maps now (a rename: nothing
fetched again) and leaves the rest to the repair (fetched; the old file then a file not from
the Source, removed with --delete). A resource no mapping of the run covers is not elsewhere:
it is another Source's (or this one's at a former address, which the run refuses and says).
"""

from __future__ import annotations

import json
import os

from ..errors import ResourceSyncError
from .mirror import Mirror, UnsafePath
from .state import CopyState

__all__ = ["MAPPINGS", "Elsewhere", "follow_mappings"]

#: The state's key for the mappings the copy was made with.
MAPPINGS = "mappings"
_PAGE = 1000


def _signature(mirror: Mirror) -> str:
    return json.dumps([[m.prefix, os.fspath(m.directory)] for m in mirror.mappings])


class Elsewhere:
    """Counts the files held that the run's mappings put elsewhere, and names the first."""

    def __init__(self, mirror: Mirror) -> None:
        self.mirror = mirror
        self.count = 0
        self.example: tuple[str, str, str] | None = None

    def where(self, uri: str, path: str) -> str | None:
        """Where the run's mappings put `uri`'s file, held at `path`, when that is elsewhere;
        None when it is there, or when no mapping of the run covers `uri` (another
        Source's)."""
        try:
            new = self.mirror.relpath(uri)
        except UnsafePath:
            return None
        if new == path:
            return None
        self.count += 1
        if self.example is None:
            self.example = (uri, path, new)
        return new

    def error(self, *, repair: bool = True) -> ResourceSyncError:
        uri, old, new = self.example or ("", "", "")
        files = (
            "1 file this copy holds is"
            if self.count == 1
            else f"{self.count:,} files this copy holds are"
        )
        fix = ", or run `sync --repair` to move the copy to these" if repair else ""
        return ResourceSyncError(
            f"{files} not where these mappings put them (it was made with other --map "
            f"options: {uri} is at {old}; these put it at {new}): give the mappings it was "
            f"made with{fix}",
            source=str(self.mirror.dest),
        )


def follow_mappings(
    state: CopyState, mirror: Mirror, base: str | None, *, repair: bool, dry_run: bool
) -> str | None:
    """Check the run's mappings against the ones the copy was made with for the Source at
    `base` (see the module docstring). Returns what a repair did (for its report), None when
    nothing changed; raises when files held are elsewhere and the run is not a repair."""
    signature = _signature(mirror)
    key = f"{MAPPINGS} {base or ''}"
    if state.get(key) == signature:
        return None
    found = Elsewhere(mirror)
    for known in state.all_known():
        found.where(known.uri, known.path)
    elsewhere = found.count
    if elsewhere == 0:
        if not dry_run:
            state.put(key, signature)
        return None
    if not repair:
        raise found.error()
    if dry_run:
        return (
            f"warning: {elsewhere:,} files held are not where these mappings put them: the "
            "repair moves them"
        )
    moved = _move(state, mirror)
    state.put(key, signature)
    rest = elsewhere - moved
    also = f"; {rest:,} left to the repair" if rest else ""
    return f"warning: the mappings changed: {moved:,} files moved to where they map now{also}"


def _move(state: CopyState, mirror: Mirror) -> int:
    """Each file held at its old place, and none at its new one, renamed there (and the
    state told). Returns how many are where they map now."""
    scratch = state.scratch()
    scratch.execute(
        "CREATE TEMP TABLE IF NOT EXISTS remap (uri TEXT PRIMARY KEY, old TEXT, new TEXT)"
    )
    scratch.execute("DELETE FROM remap")
    found = Elsewhere(mirror)
    batch: list[tuple[str, str, str]] = []
    for known in state.all_known():
        new = found.where(known.uri, known.path)
        if new is not None:
            batch.append((known.uri, known.path, new))
            if len(batch) >= _PAGE:
                scratch.executemany("INSERT OR REPLACE INTO remap VALUES (?, ?, ?)", batch)
                batch.clear()
    scratch.executemany("INSERT OR REPLACE INTO remap VALUES (?, ?, ?)", batch)
    moved = 0
    after = ""
    while True:
        page = scratch.execute(
            "SELECT uri, old, new FROM remap WHERE uri > ? ORDER BY uri LIMIT ?",
            (after, _PAGE),
        ).fetchall()
        if not page:
            return moved
        after = page[-1][0]
        for uri, old, new in page:
            try:
                if not mirror.move_held(old, uri):
                    continue  # both there, or neither: the repair fetches it
            except (UnsafePath, OSError):
                continue  # not the copy's place, another file system: the repair fetches it
            # (A file found already moved — a repair killed between the rename and this —
            # is the state's too: the repair checks its digest like every other.)
            state.relocate(uri, new)
            moved += 1
