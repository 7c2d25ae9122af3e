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
from .mirror import UnsafePath
from .plan import Plan, Planner
from .report import SetReport

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
    same_time = mirror.same_time
    for known, lastmod in state.held(key):
        uri = known.uri
        if uri in skip or not planner.taken(uri):
            continue
        why = None
        try:
            path = mirror.mapped(uri)
            st = os.lstat(path)
        except UnsafePath:
            why = "it no longer maps to a place in the copy"
        except OSError:
            why = "missing"
        else:
            mode = st.st_mode & _S_IFMT
            if mode != stat.S_IFREG and mode != stat.S_IFLNK:
                why = "replaced by something that is not a file"
            elif known.length is not None and mode == stat.S_IFREG and st.st_size != known.length:
                why = "its size changed"
            elif mode == stat.S_IFLNK or (times and not same_time(st, lastmod)):
                # The slow path, as a baseline takes it: the place checked (a link must not
                # lead out of the copy), then the digest when the time is not the Source's.
                res = Resource(loc=uri, length=known.length, hashes=known.hashes, lastmod=lastmod)
                try:
                    intact = planner.intact(uri, mirror.location(uri), known, res)
                except UnsafePath:
                    intact = False
                if not intact:
                    why = "its content changed"
        if why is None:
            continue
        report.changed_here += 1
        again = "would be fetched again" if run.options.dry_run else "fetched again"
        report.problem(uri, f"warning: changed here ({why}) since this copy wrote it: {again}")
        res = Resource(
            loc=uri,
            length=known.length,
            hashes=known.hashes,
            lastmod=lastmod,
            links=[link_from_json(d) for d in known.links],
        )
        try:
            # Where it goes, checked as a baseline's plan checks it (a directory or a link
            # out of the copy in its place is refused, in a dry run too).
            mirror.location(uri)
        except UnsafePath as exc:
            report.refuse(uri, exc)
            plan.add(uri, "refused", res)  # remembered: not ok until it can be taken
            continue
        plan.add(uri, "fetch", res, held=True)
