"""What a baseline takes into the copy's state as it is, without fetching it: files held for
a former address of the Source (a Source that moved: http to https, a new host name) whose
content is what it now lists, and — for a repair — files in place that the copy does not hold
but whose digest is the Source's (a state lost, or set aside as damaged). The planner asks
here where a place is held by another URI (`former_address`) and where a repair finds a file
it does not hold (`adopt`)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..hashing import checkable
from ..model import Resource
from .mirror import UnsafePath
from .options import Run
from .report import SetReport

if TYPE_CHECKING:
    from .plan import Plan  # which asks here

__all__ = ["Takeover"]


class Takeover:
    """One run's taking of files held (see the module docstring)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        #: Files held for a former address taken by the new URIs this list, and from where.
        self.moved = 0
        self._moved_from: set[str] = set()
        #: Places whose content changed at a move: decided once the whole list is read.
        self._changed_at_move: list[tuple[str, str, Resource, str]] = []

    def former_address(
        self, uri: str, path: str, res: Resource, key: str, other: str
    ) -> bool | None:
        """A Source that moved (http to https, a new host name) lists its resources under new
        URIs, each at the place the copy holds it for its old URI, which no mapping of this
        run covers: the new URI was refused ("maps to the same local file as …") and the
        copy kept holding the old one — its later changes and deletion then missed, and said
        ok. Where the copy holds what the Source lists there now (a digest both give, equal,
        and the length), the record goes over to the new URI: nothing fetched, and what
        happens to it next is applied. A repair takes the place whatever is held there (the
        digest then decides: taken as it is, or fetched). A file whose content changed at the
        move is the new URI's too when the run took others from the same former address
        (None: put off until the whole list is read, `moved_on`). Anything else stays
        refused (False): the file of another Source sharing DEST. True: `other`'s place is
        `uri`'s now."""
        state, mirror, opts = self.run.state, self.run.mirror, self.run.options
        if opts.dry_run or state.known(uri) is not None:
            return False
        try:
            mirror.relpath(other)
            return False  # covered by this run: the Source's own (two URIs, one file: refused)
        except UnsafePath:
            pass
        held = state.known(other)
        if held is None:
            return False
        listed = {a: v for a, v in checkable(res.hashes).items() if a in held.hashes}
        same_file = (
            bool(listed)
            and all(held.hashes[a] == v for a, v in listed.items())
            and (res.length is None or held.length is None or res.length == held.length)
        )
        if same_file:
            state.rekey(other, uri, key)
            self._moved_from.add(_origin(other))
        elif opts.repair:
            state.forget(other)
        else:
            self._changed_at_move.append((uri, path, res, other))
            return None
        self.moved += 1
        return True

    def moved_on(self, claim: Callable[..., bool], plan: Plan, report: SetReport, url: str) -> None:
        """Once the whole list is read: the files whose content changed when the Source
        moved are the new URI's (fetched) when the run took others from the same former
        address, else refused as before (`claim`, the planner's); and what was taken is said
        once, against the list (`url`)."""
        for uri, path, res, other in self._changed_at_move:
            if _origin(other) in self._moved_from:
                self.run.state.forget(other)
                self.moved += 1
            if claim(uri, plan, report, path, res=res):
                plan.add(uri, "fetch", res, held=False)
        self._changed_at_move.clear()
        self._moved_from.clear()
        if self.moved:
            report.problem(
                url,
                f"warning: {self.moved:,} files held for URIs no mapping of this run covers are "
                "this Source's now, under the URIs it lists for them (a Source that moved: "
                "http to https, a new host name)",
            )
            self.moved = 0

    def adopt(self, uri: str, res: Resource, key: str, report: SetReport) -> bool:
        """`--repair`: a file in place that the copy does not hold (its state was lost, set
        aside as damaged, or the files came by other means) whose digest — and length, when
        listed — are the Source's is the resource: taken into the state as it is, not
        fetched again. Without a digest in the list nothing tells, and it is fetched."""
        opts = self.run.options
        listed = checkable(res.hashes)
        if not opts.checksum or not listed:
            return False
        mirror = self.run.mirror
        try:
            path = mirror.location(uri)
            st = os.stat(path)
        except (UnsafePath, OSError):
            return False
        if not stat.S_ISREG(st.st_mode) or (res.length is not None and st.st_size != res.length):
            return False
        algo = next(iter(listed))
        got = mirror.local_digests(uri, ["md5", algo])
        if got is None or got[1].get(algo) != listed[algo]:
            return False
        report.unchanged += 1
        if opts.dry_run:
            return True
        if mirror.times and not mirror.same_time(st, res.lastmod):
            mirror.keep_time(path, res.lastmod, st)
        length, hashes = got
        self.run.state.record(
            uri, mirror.relpath(uri), length, hashes, res.lastmod, None, None, key, res.links
        )
        return True


def _origin(uri: str) -> str:
    """A URI's scheme and authority (where a Source was)."""
    parts = urlsplit(uri)
    return f"{parts.scheme}://{parts.netloc}".lower()
