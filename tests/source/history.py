"""Checks of a published history, read back with our reader (issue 16).

`check_history` replays the published Change Lists (through the index and the archive) onto each
published Resource List and compares the result with the latest Resource List brought to the
present by the same replay (the Resource List may be older than the last changes); it also
checks the structure: closed lists carry `until` equal to the next list's `from`, exactly one
list is open, every change appears in exactly one list, change times are strictly increasing.
"""

from __future__ import annotations

import itertools
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from resourcesync.model import Resource
from resourcesync.sitemap import read_document

__all__ = [
    "Clock",
    "History",
    "check_change_dumps",
    "check_history",
    "read_change_dumps",
    "read_history",
    "replay",
]

State = dict[str, tuple[int | None, str | None]]


class Clock:
    """A clock the tests move by hand (microsecond steps in between, as a real one would)."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(microseconds=7)
        return self.now


@dataclass
class History:
    """What a reader finds in a published set."""

    resourcelist: tuple[datetime, State]
    archived: list[tuple[datetime, State]]
    changes: list[Resource]
    lists: list[tuple[datetime | None, datetime | None, int]]
    #: The latest Resource List with every change after its `at` replayed: the Source now.
    #: (A Source may publish its Resource List less often than its Change Lists.)
    current: State


def _local(out: Path, docs: str, url: str) -> Path:
    assert url.startswith(docs), url
    return out / url.removeprefix(docs)


def _state(entries: list[Resource]) -> State:
    return {e.loc: (e.length, e.hashes.get("md5")) for e in entries}


def _archive(out: Path, docs: str, path: Path) -> list[Resource]:
    """An archive's entries (through its parts when it was split into an index)."""
    doc, entries = read_document(path)
    if not doc.index:
        return entries
    out_entries: list[Resource] = []
    for part in entries:
        _, more = read_document(_local(out, docs, part.loc))
        out_entries += more
    return out_entries


def _read_list(out: Path, docs: str, path: Path) -> tuple[datetime, State]:
    doc, entries = read_document(path)
    assert doc.at is not None, path
    if doc.index:
        parts: list[Resource] = []
        for part in entries:
            _, more = read_document(_local(out, docs, part.loc))
            parts += more
        entries = parts
    return doc.at, _state(entries)


def read_history(
    out: Path, docs: str, name: str, *, complete: bool = True, retention: bool = False
) -> History:
    """Read a set's Resource Lists and Change Lists as a Destination would find them.
    `retention`: the Source lets its oldest lists go (the archive, written first, may have
    let go lists the index still names after a kill)."""
    base = out / name
    latest = _read_list(out, docs, base / "resourcelist.xml")
    earlier = _archive(out, docs, base / "resourcelist-archive.xml")
    archived = [_read_list(out, docs, _local(out, docs, e.loc)) for e in earlier]
    doc, entries = read_document(base / "changelist.xml")
    lists: list[tuple[datetime | None, datetime | None, int]] = []
    changes: list[Resource] = []
    if doc.index:
        closed = _archive(out, docs, base / "changelist-archive.xml")
        in_index = [e.loc for e in entries if e.until is not None]
        in_archive = [e.loc for e in closed]
        if retention:
            # The oldest lists go from the archive first, then from the index.
            while in_index and in_index[0] not in in_archive:
                in_index.pop(0)
        # The archive is written before the index: after a kill it may name more lists.
        assert in_index == in_archive[: len(in_index)], "archive ≠ index"
        assert not complete or len(in_index) == len(closed), "archive ≠ index"
        for e in entries:
            child, items = read_document(_local(out, docs, e.loc))
            assert child.capability == "changelist" and not child.index
            assert (child.from_, child.until) == (e.from_, e.until), e.loc
            lists.append((child.from_, child.until, len(items)))
            changes += items
    else:
        lists.append((doc.from_, doc.until, len(entries)))
        changes += entries
    return History(latest, archived, changes, lists, replay(latest[1], changes, latest[0]))


def replay(start: State, changes: list[Resource], after: datetime) -> State:
    state = dict(start)
    for c in changes:
        assert c.datetime is not None
        if c.datetime <= after:
            continue
        if c.change == "deleted":
            state.pop(c.loc, None)
        else:
            state[c.loc] = (c.length, c.hashes.get("md5"))
    return state


def check_history(
    out: Path, docs: str, name: str, *, archived: bool = True, retention: bool = False
) -> History:
    """Assert the invariants of issue 16 on what is published now. `archived`: also replay from
    every archived Resource List (holds between runs; right after a kill only the latest
    Resource List is certain to have its changes published)."""
    h = read_history(out, docs, name, complete=archived, retention=retention)
    open_lists = [x for x in h.lists if x[1] is None]
    assert len(open_lists) == 1 and h.lists[-1][1] is None, h.lists
    for (_, until, _), (from_, _, _) in itertools.pairwise(h.lists):
        assert until is not None and until == from_, h.lists
    times = [c.datetime for c in h.changes]
    assert all(t is not None for t in times)
    assert all(a < b for a, b in itertools.pairwise(times)), "change times not increasing"  # type: ignore[operator]
    # Each change lies inside the interval of the list that holds it (so in exactly one).
    position = 0
    for from_, until, count in h.lists:
        for c in h.changes[position : position + count]:
            assert c.datetime is not None and from_ is not None
            assert from_ <= c.datetime, (c.loc, c.datetime, from_)
            assert until is None or c.datetime <= until, (c.loc, c.datetime, until)
        position += count
    latest = h.current
    if archived:
        for t, state in h.archived:
            got = replay(state, h.changes, t)
            assert got == latest, _diff(got, latest)
    return h


def _diff(got: State, want: State) -> str:
    keys = sorted(set(got) | set(want))
    lines = [
        f"{k}: replayed {got.get(k)} published {want.get(k)}"
        for k in keys
        if got.get(k) != want.get(k)
    ]
    return "; ".join(lines[:10])


def read_change_dumps(out: Path, docs: str, name: str) -> list[tuple[Resource, list[Resource]]]:
    """Every Change Dump package (live and archived Change Dumps), in order, with the entries
    of its manifest (the published copy, which must be the one inside the package)."""
    base = out / name
    packages: list[Resource] = []
    archived = _archive(out, docs, base / "changedump-archive.xml")
    for dump in archived:
        _, items = read_document(_local(out, docs, dump.loc))
        packages += items
    _, live = read_document(base / "changedump.xml")
    packages += live
    result = []
    seen = set()
    for p in packages:
        # A package can be in the live Change Dump and in the one just closed into the archive
        # for a moment (a run killed between the two): the same package, read once.
        if p.loc in seen:
            continue
        seen.add(p.loc)
        contents = p.link("contents")
        assert contents is not None, p.loc
        manifest = _local(out, docs, contents.href)
        with zipfile.ZipFile(_local(out, docs, p.loc)) as zf:
            assert zf.read("manifest.xml") == manifest.read_bytes(), p.loc
        doc, entries = read_document(manifest)
        assert doc.capability == "changedump-manifest"
        assert (doc.from_, doc.until) == (p.from_, p.until), p.loc
        result.append((p, entries))
    return result


def check_change_dumps(
    out: Path, docs: str, name: str, history: History, *, replayed: bool = True
) -> None:
    """The Change Dumps hold the published changes: consecutive intervals, each change once,
    the changes of the Change Lists; and (`replayed`: after a run that packaged the bytes it
    had hashed) replayed onto a Resource List they give the latest one."""
    dumps = read_change_dumps(out, docs, name)
    for (a, _), (b, _) in itertools.pairwise(dumps):
        assert a.until is not None and a.until == b.from_, (a.loc, b.loc)
    changes: list[Resource] = []
    for p, entries in dumps:
        for e in entries:
            assert e.datetime is not None and p.from_ is not None and p.until is not None
            assert p.from_ < e.datetime <= p.until, (p.loc, e.loc, e.datetime)
        changes += entries
    # The dumps hold the listed changes, in order; one can be missing only when its bytes were
    # gone by the time it was packaged and a later change of the same URI is in the dumps.
    got = [(c.loc, c.change, c.datetime) for c in changes]
    want = [(c.loc, c.change, c.datetime) for c in history.changes]
    held = set(got)
    it = iter(want)
    for g in got:
        assert g in it, f"{g} is in a Change Dump out of the listed order, or not listed"
    position = {g: i for i, g in enumerate(got)}
    for i, w in enumerate(want):
        if w in held or not replayed:
            continue
        following = [x for x in want[i + 1 :] if x[0] == w[0] and x in position]
        assert following, f"{w} is in no Change Dump and nothing later replaces it"
    if not replayed:
        return
    latest = history.current
    for t, state in [*history.archived, history.resourcelist]:
        assert replay(state, changes, t) == latest, _diff(replay(state, changes, t), latest)
