"""What the copy holds, looked at by every incremental run.

An incremental run learns from the Source's Change Lists what changed there; what changed
here — a file deleted, replaced, truncated or edited by something other than this copy — no
list tells. Without looking, a run would say ok over a copy with a file missing (issue 15's
sibling: found trying the tool as a user). So each run looks at every file it holds, as rsync's
quick check does: one `lstat`, its type and size against what the state recorded and, with
`--times`, its time against the `<lastmod>` the file was given (a time that differs sends the
file to its digest, as a baseline does). A file that is not what this copy wrote is fetched
again, verified against what the Source said of it when it was written (a change listed in
the same run replaces that plan: the final state per URI wins), and reported.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection

from ..jsonable import link_from_json
from ..model import Resource
from .mirror import MODIFY_WINDOW, UnsafePath
from .plan import Plan, Planner
from .report import SetReport
from .state import time_kept

__all__ = ["check_held"]

_S_IFMT = 0o170000


def check_held(
    planner: Planner, plan: Plan, key: str, report: SetReport, skip: Collection[str] = ()
) -> None:
    """Plan a fetch for each file of set `key` that is no longer what the copy wrote.

    `skip`: URIs already planned from what earlier runs left to do (failed fetches, pending
    deletions): their plan stands."""
    run = planner.run
    mirror, state = run.mirror, run.state
    times = mirror.times
    dest = str(mirror.dest)
    join, lstat = os.path.join, os.lstat
    window = MODIFY_WINDOW
    taken = planner.taken if run.options.filter else None
    for uri, stored, length, lastmod, stamp in state.held(key):
        if uri in skip or (taken is not None and not taken(uri)):
            continue
        why = None
        try:
            # Where this copy wrote it (as recorded: relative to DEST, or absolute).
            st = lstat(join(dest, stored))
        except OSError:
            why = "missing"
        else:
            mode = st.st_mode & _S_IFMT
            if mode != stat.S_IFREG and mode != stat.S_IFLNK:
                why = "replaced by something that is not a file"
            elif length is not None and mode == stat.S_IFREG and st.st_size != length:
                why = "its size changed"
            elif (
                mode == stat.S_IFLNK
                or (times and stamp is not None and abs(st.st_mtime - stamp) >= window)
            ) and not _intact(planner, uri, length, lastmod):
                why = "its content changed"
        if why is not None:
            _fetch_again(planner, plan, report, uri, lastmod, why)


def _intact(planner: Planner, uri: str, length: int | None, lastmod: str | None) -> bool:
    """The slow path, as a baseline takes it: the place checked (a link must not lead out of
    the copy), then the digest when the time is not the Source's (an intact file takes its
    time back)."""
    known = planner.run.state.known(uri)
    if known is None:
        return True  # no longer held: nothing to look at
    res = Resource(loc=uri, length=length, hashes=known.hashes, lastmod=time_kept(lastmod))
    try:
        return planner.intact(uri, planner.run.mirror.location(uri), known, res)
    except UnsafePath:
        return False


def _fetch_again(
    planner: Planner, plan: Plan, report: SetReport, uri: str, lastmod: str | None, why: str
) -> None:
    """Plan a file changed here to be fetched again, as the Source described it then."""
    run = planner.run
    known = run.state.known(uri)
    if known is None:
        return
    report.changed_here += 1
    again = "would be fetched again" if run.options.dry_run else "fetched again"
    report.problem(uri, f"warning: changed here ({why}) since this copy wrote it: {again}")
    res = Resource(
        loc=uri,
        length=known.length,
        hashes=known.hashes,
        lastmod=time_kept(lastmod),
        links=[link_from_json(d) for d in known.links],
    )
    try:
        # Where it goes, checked as a baseline's plan checks it (a directory or a link out
        # of the copy in its place is refused, in a dry run too).
        run.mirror.location(uri)
    except UnsafePath as exc:
        report.refuse(uri, exc)
        plan.add(uri, "refused", res)  # remembered: not ok until it can be taken
        return
    plan.add(uri, "fetch", res, held=True)
