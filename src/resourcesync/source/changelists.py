"""The Change Lists (core 1.1 §12), rotated into an index and an archive, a stage of
`publish`: the open list, the closed ones (each written once, under a name of its own), the
Change List Index once one has been closed, and the Change List Archive."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..model import Capability, Link, Resource
from ..w3cdt import parse_w3c
from .setrun import SetRun
from .state import ChangeListRow

#: The state's mark of the lists the Change List Index and Archive show (`SetRun.listing`).
SHOWN = "cl_shown"

__all__ = ["cl_name", "publish_changelists"]


def publish_changelists(run: SetRun) -> None:
    state = run.state
    # The first Change List starts where the baseline began (the first Resource List's
    # `at`), so a Destination that baselined from it finds no gap.
    baseline = state.get("baselined")
    start = run.scan.started if baseline is None else parse_w3c(baseline)
    with state.transaction():
        current = state.open_changelist(start)
    rotated = _rotate(run, current)
    # Past `keep_changelists`, the oldest closed lists leave the index and the archive (and
    # the state, once the documents no longer name them).
    dropped = _to_drop(run)
    gone = {r.id for r in dropped}
    changed = rotated > 0 or bool(dropped)
    loaded: list[ChangeListRow] | None = None

    def every_list() -> list[ChangeListRow]:
        nonlocal loaded
        if loaded is None:
            loaded = [r for r in state.changelists() if r.id not in gone]
        return loaded

    open_row = state.open_changelist(start)
    closed_ids = [i for i in state.closed_changelist_ids() if i not in gone]
    # The index and the archive show the lists (their `from` and `until`, fixed once a list
    # is closed), not their entries: they are written again when the lists they show are
    # not those they showed when last written (a list closed or dropped, by this run or by
    # another hand), or the publication is done again in full — not by every run that adds
    # to the open list. A Source that keeps its history has thousands of lists (one every
    # 10,000 changes), which a run would otherwise read, look for on disk and serialize
    # twice: 140 ms a run at 5,000.
    shown = run.listing(closed_ids, open_row.id)
    whole = changed or run.renew or state.get(SHOWN) != shown
    archive_link = Link(rel="archives", href=run.link_url("changelist-archive.xml"))
    index_link = Link(rel="index", href=run.link_url("changelist.xml"))
    # A closed list is written once, under a name of its own (the open one has another:
    # the index a reader already holds keeps pointing at a list as it was, never at one
    # whose `until` or entries changed under it). The state remembers the last list written
    # closed (after it was written): a run killed in between writes it again, and so is one
    # whose file is missing (one listing of the folder tells). A state without the mark
    # rewrites every closed list once, which repairs a tree published when a closed list
    # kept the contents it had while open.
    written = int(state.get("cl_closed_written") or 0)
    present = _listed(run.path("changelists"))
    for row in state.changelists(
        i for i in closed_ids if i > written or _list_file(i) not in present
    ):
        doc = run.doc(
            Capability.CHANGELIST,
            from_=row.from_,
            until=row.until,
            links=[run.up, index_link],
        )
        run.write_changes(cl_name(row), doc, row.first_seq, row.last_seq)
        run.event(Capability.CHANGELIST, cl_name(row), "created", index="changelist.xml")
    if closed_ids and closed_ids[-1] > written:
        state.put("cl_closed_written", str(closed_ids[-1]))
    # The archive lists the closed Change Lists (before the index: it names closed lists
    # only, all written by now).
    if whole or not run.path("changelist-archive.xml").exists():
        entries = [
            Resource(loc=run.link_url(cl_name(r)), from_=r.from_, until=r.until)
            for r in every_list()
            if r.until is not None
        ]
        doc = run.doc(Capability.CHANGELIST_ARCHIVE, links=[run.up])
        index, n = run.split("changelist-archive.xml", doc, iter(entries))
        run.note(
            "changelist-archive",
            "changelist-archive.xml",
            run.doc(Capability.CHANGELIST_ARCHIVE),
            n,
            index=index,
        )
    else:
        run.kept("changelist-archive", "changelist-archive.xml", len(closed_ids))
    count = state.count_changes(open_row.first_seq)
    if closed_ids:
        # The open list lives among the others; changelist.xml becomes their index.
        open_doc = run.doc(Capability.CHANGELIST, from_=open_row.from_, links=[run.up, index_link])
        if run.redo or rotated or not run.path(cl_name(open_row)).exists():
            run.write_changes(cl_name(open_row), open_doc, open_row.first_seq)
            run.event(
                Capability.CHANGELIST,
                cl_name(open_row),
                "created" if rotated else "updated",
                index="changelist.xml",
            )
        index_doc = run.doc(
            Capability.CHANGELIST,
            index=True,
            from_=state.first_changelist_from(),
            links=[run.up, archive_link],
        )
        if whole or not run.path("changelist.xml").exists():
            run.write(
                "changelist.xml",
                index_doc,
                [
                    Resource(loc=run.link_url(cl_name(r)), from_=r.from_, until=r.until)
                    for r in every_list()
                ],
            )
        run.note("changelist", "changelist.xml", index_doc, len(closed_ids) + 1, index=True)
        if whole:
            # The open lists of before, now closed and out of the index.
            for row in every_list():
                if row.until is not None:
                    run.path(cl_name(row, open_=True)).unlink(missing_ok=True)
    else:
        doc = run.doc(Capability.CHANGELIST, from_=open_row.from_, links=[run.up, archive_link])
        if run.redo or changed or not run.path("changelist.xml").exists():
            existed = run.path("changelist.xml").exists()
            run.write_changes("changelist.xml", doc, open_row.first_seq)
            run.event(Capability.CHANGELIST, "changelist.xml", "updated" if existed else "created")
        run.note("changelist", "changelist.xml", doc, count)
    if whole:
        state.put(SHOWN, shown)
    if dropped:
        last = max(r.last_seq for r in dropped if r.last_seq is not None)
        state.drop_changelists(sorted(gone), last)
        run.dropped += len(dropped)
        for r in dropped:
            run.event(Capability.CHANGELIST, cl_name(r), "deleted", index="changelist.xml")
    if run.s.keep_changelists is not None:
        _sweep(run, every_list())


def _listed(folder: Path) -> set[str]:
    """The names in a folder (none when there is none)."""
    try:
        return set(os.listdir(folder))
    except OSError:
        return set()


def _list_file(list_id: int, open_: bool = False) -> str:
    """The name of a list's file in `changelists/`."""
    return f"changelist-{list_id:05d}-open.xml" if open_ else f"changelist-{list_id:05d}.xml"


def _to_drop(run: SetRun) -> list[ChangeListRow]:
    """The oldest closed lists past `keep_changelists`, as far as none holds a change that a
    Destination still needs from them: one after the live Resource List's (and Resource
    Dump's) `at` — a Destination that starts from it reads the changes after it — nor one
    the hub has not been told of, or the Change Dump has not packaged."""
    keep = run.s.keep_changelists
    if keep is None:
        return []
    state = run.state
    closed = [r for r in state.changelists() if r.until is not None]
    if len(closed) <= keep:
        return []
    floor = run.snapshot_floor()
    needed = _needed_seq(run)
    out = []
    for r in closed[: len(closed) - keep]:
        assert r.until is not None and r.last_seq is not None
        if floor is None or r.until > floor or (needed is not None and r.last_seq >= needed):
            break
        out.append(r)
    return out


def _needed_seq(run: SetRun) -> int | None:
    """The first change the hub or the Change Dump still needs (None: neither needs one)."""
    state, s = run.state, run.s
    needed: list[int] = []
    if s.hub:
        done = state.notifications()
        start = state.get("cn_start_seq")
        needed.append(done[-1][2] + 1 if done else int(start) + 1 if start is not None else 0)
        needed += [first for _, first, _, _, _ in state.notifications(unsent_only=True)]
    if "changedump" in s.capabilities:
        packaged = state.get("cd_last_seq")
        needed.append(int(packaged) + 1 if packaged is not None else 0)
    return min(needed) if needed else None


_LIST_FILE = re.compile(r"changelist-\d+(?:-open)?\.xml\Z")


def _sweep(run: SetRun, lists: list[ChangeListRow]) -> None:
    """Remove the files of `changelists/` that the index no longer names (lists dropped, the
    former names of lists now closed, those of a run killed before it removed them)."""
    folder = run.path("changelists")
    if not folder.is_dir():
        return
    closed = [r for r in lists if r.until is not None]
    named = {cl_name(r) for r in closed}
    if closed:
        named.add(cl_name(lists[-1]))  # the open list, among the others
    for p in folder.iterdir():
        if _LIST_FILE.match(p.name) and f"changelists/{p.name}" not in named:
            p.unlink(missing_ok=True)


def cl_name(row: ChangeListRow, *, open_: bool | None = None) -> str:
    return "changelists/" + _list_file(row.id, row.until is None if open_ is None else open_)


def _rotate(run: SetRun, current: ChangeListRow) -> int:
    """Close the open list when the policy says so; returns how many were closed."""
    state = run.state
    s = run.s
    closed = 0
    while True:
        count = state.count_changes(current.first_seq)
        if count > s.changelist_max_entries:
            last = state.nth_seq(current.first_seq, s.changelist_max_entries)
            until = state.seq_time(last)
            assert until is not None
        elif (
            s.changelist_max_age is not None
            and count > 0
            and (run.clock() - current.from_).total_seconds() >= s.changelist_max_age
        ):
            last = state.max_seq()
            until = state.next_datetime()
        else:
            break
        state.close_changelist(current, last, until)
        closed += 1
        current = state.open_changelist(until)
    run.rotated += closed
    return closed
