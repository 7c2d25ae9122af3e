"""What the Source's Change Lists say, planned: an incremental run's changes after the copy's
cursor, and those listed after a baseline's Resource List (`ChangePlanner`), each URI once in
its final state (`Plan.add`); which lists cover the changes after the cursor
(`lists_covering`), their entries in order (`change_entries`, `InOrder`), and what a
change listed late, behind the cursor, asks (`ChangePlanner._late`). A baseline's own plan,
and what every plan asks of a local file (`claim`), are `plan.Planner`'s.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from ..errors import ReadError, ResourceSyncError
from ..hashing import checkable
from ..iri import normal_uri
from ..model import CHANGES, Resource
from ..sitemap import open_document, walk
from ..sitemap.follow import FOLLOW_INDEX
from ..sitemap.read import DocumentReader
from ..w3cdt import ZONE_SPAN, format_w3c, seconds_before
from .discover import SetInfo
from .mirror import UnsafePath
from .paths import Unmapped
from .plan import (
    Plan,
    Planner,
    expect,
    resource_of,
    same,
    say_unknown_change,
    tell_warnings,
    undated_sig,
    unknown_change,
)
from .report import SetReport
from .state import Cursor, changed_column, keep_links, seconds_kept

__all__ = [
    "BEHIND",
    "NOTIFIED",
    "ZONELESS",
    "ChangePlanner",
    "InOrder",
    "change_entries",
    "lists_covering",
]

#: Change Lists one incremental run follows, nested ones included.
_MAX_LISTS = 100_000
#: State keys (with a set's key): since when the Source's lists have ended before the copy's
#: cursor, that the cursor came from a change notification, and how far (seconds) the set's
#: lists' times may be from the times meant (given without a zone, or naming a day: the cursor
#: may be one, `ChangePlanner.remembered_zones`).
BEHIND = "lists-behind:"
NOTIFIED = "cursor-notified:"
ZONELESS = "zoneless:"


class ChangePlanner:
    """Plans the changes the Source lists (see the module docstring), with its `Planner`'s
    claims on local files and its filters."""

    def __init__(self, planner: Planner) -> None:
        self.planner = planner
        self.run = planner.run

    def remembered_zones(self, s: SetInfo, key: str) -> None:
        """A set whose lists have given times without a zone or naming a day (`ZONELESS`,
        kept by earlier runs, with how far they may be from the times meant): the cursor may
        be one (a Resource List's `at` so written), as hours from the Change Lists' and the
        notifications' as any zone is."""
        kept = self.run.state.get(ZONELESS + key)
        if kept is not None:
            slack = seconds_kept(kept) or 0.0
            # ("1": kept by a resourcesync that knew of times without a zone only.)
            name = s.url("resourcelist") or s.url("changelist") or key
            self.planner.loose(name, slack if slack > 1 else ZONE_SPAN)

    def incremental(
        self, s: SetInfo, key: str, plan: Plan, report: SetReport, cursor: Cursor
    ) -> Cursor:
        url = s.url("changelist")
        if url is None:
            raise ReadError(
                "the Source offers no Change List to follow (use --baseline)",
                source=s.capabilitylist,
            )
        self.remembered_zones(s, key)
        lists, covered = self._covering(url, s, cursor, report)
        if lists is None:
            return cursor
        listed = later = False

        def watched(entries: Iterable[Resource]) -> Iterator[Resource]:
            nonlocal listed, later
            for res in entries:
                t = res.datetime
                if t is not None and t >= cursor.datetime:
                    later = later or t > cursor.datetime
                    listed = listed or res.loc == cursor.uri
                yield res

        entries = watched(self.entries(lists, report))
        # A copy taken to be the Source as of `--from`: nothing behind that time is its to
        # look at again.
        opts = self.run.options
        lookback = 0.0 if opts.since is not None else opts.lookback
        last = self.changes(entries, plan, report, cursor, lookback)
        # Lists that reach back to the cursor and end before it. Late lists look so (a
        # notification runs ahead of them; a cache or a replica serves an older list for a
        # while); so does a Source restored from a backup that has changed nothing since,
        # which no later change gives away. Told apart by time: a cursor read from these
        # lists that they have not held for `history_grace` is a history that changed.
        since = self._lists_behind(
            key,
            behind=bool(cursor.uri) and covered and not listed and not later,
            from_lists=listed or last != cursor,
        )
        if since is not None and time.time() - since >= opts.history_grace:
            report.gap = (
                f"the Source's Change Lists reach back to {format_w3c(cursor.datetime)} but "
                f"have not listed the change this copy last applied ({cursor.uri} at that "
                f"time, read from them) for {_duration(time.time() - since)}: its history "
                "changed (restored from a backup?), so what the copy applied since may differ "
                "from the Source (run with --baseline)"
            )
            report.changes = report.unchanged = 0  # nothing of the plan is applied
        if cursor.uri and covered and later and not listed:
            # Every change is listed, once per change (core §12.1): lists that reach back to
            # the change this copy last applied, go on past it, and do not hold it (nor a
            # later change of the same resource) are not the history this copy followed. The
            # Source was restored from a backup, or rewrote its lists: what the copy applied
            # since may be gone or different there, and no change list will say so. Nothing
            # is applied; a baseline brings the copy to what the Source holds now.
            report.gap = (
                f"the Source's Change Lists reach back to {format_w3c(cursor.datetime)} but no "
                f"longer list the change this copy last applied ({cursor.uri} at that time): "
                "its history changed (restored from a backup?), so what the copy applied "
                "since may differ from the Source (run with --baseline)"
            )
            report.changes = report.unchanged = 0  # nothing of the plan is applied
        return last

    def _lists_behind(self, key: str, *, behind: bool, from_lists: bool) -> float | None:
        """Since when (epoch seconds) the Source's lists have ended before the cursor of set
        `key` (`behind`: they do now; the first time is remembered, and forgotten once they
        do not); None when they do not, or when the cursor came from a notification (lists
        may lag those by design) that the lists have not caught up with (`from_lists`: the
        cursor is, or moves to, a change read from them)."""
        state, write = self.run.state, not self.run.options.dry_run
        notified = state.get(NOTIFIED + key) is not None
        if notified and from_lists and write:
            state.drop(NOTIFIED + key)
            notified = False
        kept = state.get(BEHIND + key)
        if not behind or notified:
            if kept is not None and write:
                state.drop(BEHIND + key)
            return None
        first = seconds_kept(kept)
        if first is None:
            # Not behind before, or a value that cannot be read: behind from now.
            if write:
                state.put(BEHIND + key, repr(time.time()))
            return time.time()
        return first

    def entries(self, lists: list[str], report: SetReport) -> Iterator[Resource]:
        def warn(reader: DocumentReader) -> None:
            tell_warnings(reader, report)

        return change_entries(self.run.client, lists, report.problem, warn, self.planner.loose)

    def changes(
        self,
        entries: Iterable[Resource],
        plan: Plan,
        report: SetReport,
        cursor: Cursor,
        lookback: float = 0.0,
    ) -> Cursor:
        """Plan the changes after the cursor (each URI once, its final state); returns the
        cursor the plan brings the copy to: the latest change time planned (issue 10.6).

        Only `rs:md@datetime` places a change in time: `<lastmod>` alone is the resource's
        Last-Modified (core 1.1 §7), so an entry without `datetime` is never skipped for its
        age (issue 10.3). Such undated entries are applied in the order listed, and one that
        an earlier run applied (same URI, change, lastmod, length and digests) is not applied
        again (issue 10.6).

        `lookback` seconds behind the cursor, the changes listed are looked at too: a Source
        that lists its changes by time from a database lists one whose transaction committed
        after a later one had been read behind it, where a cursor never looks again. What
        the copy does not hold as listed there is planned (see `_late`).

        Once a list read in this run gives a time without a zone (read as UTC), the look goes
        `ZONE_SPAN` (14 h) behind the cursor (unless `--lookback 0` or `--from`): such times
        may be any zone's, and the cursor may be another document's (a Resource List's `at`
        with its zone, the Change Lists' times without: Python's `fromtimestamp()`), hours
        apart — the changes of those hours were skipped as "before the cursor", and every run
        said ok. A change dated by its day (`2024-01-02`, read as its midnight UTC) may be at
        any time of it: the look goes back a day further (the planner's `slack`)."""
        last = cursor
        passed_cursor = cursor.uri == ""
        behind = seconds_before(cursor.datetime, lookback) if lookback > 0 else None
        any_late = False
        # What earlier runs left to do, planned before the changes (few rows).
        earlier = plan.uris() if behind is not None else set()
        planned_before: Callable[[str], bool] = earlier.__contains__
        opts = self.run.options
        # How far behind the cursor the look goes now (widened once a list's times are found
        # to be far from those meant; not with `--lookback 0` or `--from`).
        widened = lookback if opts.lookback > 0 and opts.since is None else float("inf")
        planner = self.planner
        mirror = self.run.mirror
        for res in entries:
            if planner.slack > widened:
                widened = planner.slack
                behind = seconds_before(cursor.datetime, widened)
                if not lookback:
                    # A baseline's plan (a lookup: it may hold millions): as it is now, which
                    # is what was planned before the changes and those planned since.
                    planned_before = plan.holds
                report.problem(planner.imprecise or "", _widened(widened))
            t = res.datetime
            late = False
            if t is not None and (
                t < cursor.datetime or (t == cursor.datetime and not passed_cursor)
            ):
                if t == cursor.datetime and res.loc == cursor.uri:
                    passed_cursor = True
                if behind is None or t < behind or res.change not in CHANGES:
                    continue
                # Behind the cursor: what earlier runs left to do (planned before the
                # changes) stands; the rest is checked against the copy once planned.
                if planned_before(res.loc):
                    continue
                if res.loc == cursor.uri and t + timedelta(seconds=planner.slack) < cursor.datetime:
                    # Older than the change of this resource the copy last applied (the
                    # cursor's): superseded — a notification delivered late, after the one
                    # that created it again, deleted the Source's file. (Only when surely
                    # older: a time without a zone, or naming its day, may be hours later.)
                    continue
                late = True
                any_late = True
            if not self.planner.taken(res.loc):
                if late:
                    continue
                report.excluded += 1
                if t is not None and t >= last.datetime:
                    last = Cursor(t, res.loc)  # left out by choice: the cursor moves on
                continue
            if res.change not in CHANGES:
                plan.add(res.loc, "unknown", res)
                say_unknown_change(res.loc, unknown_change(res.change), plan, report)
                continue
            try:
                path = mirror.location(res.loc)
            except UnsafePath as exc:
                if late:
                    continue  # refused when it was listed after the cursor
                if (
                    isinstance(exc, Unmapped)
                    and res.change == "deleted"
                    and self.run.state.known(res.loc) is None
                ):
                    # On another host, and nothing of the copy's to delete (a Source that moved
                    # deletes its old URIs, whose files its new ones took over): the cursor
                    # moves past it. (A URI that could not be mapped safely is still said.)
                    plan.add(res.loc, "gone", res)
                    if t is not None and t >= last.datetime:
                        last = Cursor(t, res.loc)
                    continue
                report.refuse(res.loc, exc)
                # Remembered while the Source lists it; forgotten once the Source deletes it.
                # Either way the change is dealt with: the cursor moves past it.
                plan.add(res.loc, "gone" if res.change == "deleted" else "refused", res)
                if t is not None and t >= last.datetime:
                    last = Cursor(t, res.loc)
                continue
            # (A change behind the cursor claims its file only once it is found missed.)
            if (
                res.change != "deleted"
                and not late
                and not self.planner.claim(res.loc, plan, report, path, res=res)
            ):
                continue
            if res.change == "deleted" and not late:
                self.planner.respell(res.loc, path, plan)
            action = "delete" if res.change == "deleted" else "fetch"
            sig = None if t is not None else undated_sig(res)
            plan.add(res.loc, action, res, sig=sig, late=late)
            if t is not None and not late:
                report.changes += 1
                if t >= last.datetime:
                    last = Cursor(t, res.loc)
        state = self.run.state
        if any_late:
            self._late(plan, report, cursor)
        # Undated changes already applied by an earlier run are not changes now.
        plan.flush()
        undated = plan.db.execute("SELECT uri, sig FROM plan WHERE sig IS NOT NULL").fetchall()
        for uri, sig in undated:
            if state.undated_sig(uri) == sig and not state.has_failure(uri):
                plan.drop(uri)
            else:
                report.changes += 1
        # A fetch planned for something we already hold as described is not needed: a
        # change listed after the cursor is one unless its digest says we hold it (without
        # one it is asked for with the copy's validators: a 304 costs little).
        for uri, res in plan.rows("fetch"):
            known = state.known(uri)
            if known is not None and same(known.hashes, known.length, res):
                try:
                    if self.planner.intact(uri, mirror.location(uri), known, res):
                        plan.keep(uri)
                        report.unchanged += 1
                        if not self.run.options.dry_run:
                            keep_links(state, known, res)
                except UnsafePath:
                    pass
        return last

    def _late(self, plan: Plan, report: SetReport, cursor: Cursor) -> None:
        """The changes listed behind the cursor (their final state per URI): what the copy
        holds as described is dropped from the plan; the rest — a change the copy never saw —
        is counted and warned of once. Held is what the copy's state says, not its files (a
        file changed here is `check_held`'s and `--repair`'s to find, not a change listed
        late) — but for a resource the state does not know, whose file may be in place from
        before the state (a copy made by other means, then followed with `--from`). A
        resource held that the entry gives nothing to compare with (no digest, no
        `<lastmod>`) is taken as held: it was applied when it was listed, and asking again
        every run would cry wolf."""
        state = self.run.state
        plan.flush()
        rows = plan.db.execute(
            "SELECT seq, uri, action, length, hashes, lastmod, datetime, links, type, encoding "
            "FROM plan WHERE late = 1 ORDER BY seq"
        ).fetchall()
        missed: list[str] = []
        dropped: list[tuple[str]] = []
        slack = timedelta(seconds=self.planner.slack)
        last = self._last_spelled(plan, rows)
        for seq, uri, action, *described in rows:
            if last[normal_uri(uri)] != seq:
                # Listed again after, under another spelling (RFC 3986 §6.2.2): the later
                # entry is the resource's state, as when the changes were first read.
                dropped.append((uri,))
                continue
            known = state.known(uri)
            res = resource_of(uri, *described)
            when = res.datetime
            if (
                known is not None
                and known.changed is not None
                and when is not None
                and changed_column(when + slack) < known.changed
            ):
                # Older than the change of it the copy applied last: superseded (a hub that
                # delivered it late, after a retry; the lists' later change is the Source's
                # state). Applied, a deletion took the file the Source has away, an update
                # asked for bytes the Source no longer has. (Only when surely older: a time
                # without a zone, or naming its day, may be hours later than read.)
                held = True
            elif action == "delete":
                held = known is None
            elif known is None:
                held = self._in_place(uri, res)
            elif not any(a in known.hashes for a in res.hashes) and (
                res.lastmod is None or known.lastmod is None
            ):
                held = True
            else:
                held = same(known.hashes, known.length, res, known.lastmod)
            claim = self.planner.claim
            if held or (action != "delete" and not claim(uri, plan, report, quiet=True)):
                dropped.append((uri,))  # (or its file is another URI's: refused before)
            else:
                missed.append(uri)
        plan.db.executemany("DELETE FROM plan WHERE uri = ?", dropped)
        if missed:
            report.changes += len(missed)
            more = f" (and {len(missed) - 1:,} more)" if len(missed) > 1 else ""
            report.problem(
                missed[0],
                f"warning: listed late — dated behind the change this copy last applied "
                f"({format_w3c(cursor.datetime)}), and not what the copy holds{more}: "
                "applied (the Source listed it after a later change was read)",
            )

    @staticmethod
    def _last_spelled(plan: Plan, late: list[Any]) -> dict[str, int]:
        """For each resource of the `late` plan rows (seq first), by its normal spelling: the
        `seq` of its last row in the plan, late or not. The rows from the first late one on
        are this run's changes (an incremental plan: few)."""
        if not late:
            return {}
        wanted = {normal_uri(row[1]) for row in late}
        last: dict[str, int] = {}
        for seq, uri in plan.db.execute("SELECT seq, uri FROM plan WHERE seq >= ?", (late[0][0],)):
            normal = normal_uri(uri)
            if normal in wanted:
                last[normal] = max(seq, last.get(normal, seq))
        return last

    def _in_place(self, uri: str, res: Resource) -> bool:
        """Whether the file `uri` maps to is there, as `res` describes it: its length, and its
        digest when the entry gives one we know."""
        listed = checkable(res.hashes)
        try:
            got = self.run.mirror.local_digests(uri, list(listed)[:1])
        except ResourceSyncError:
            return False
        if got is None:
            return False
        length, digests = got
        if res.length is not None and length != res.length:
            return False
        return all(listed.get(a) == d for a, d in digests.items())

    def covering_lists(
        self, url: str, s: SetInfo, cursor: Cursor, report: SetReport
    ) -> list[str] | None:
        return self._covering(url, s, cursor, report)[0]

    def _covering(
        self, url: str, s: SetInfo, cursor: Cursor, report: SetReport
    ) -> tuple[list[str] | None, bool]:
        """The lists covering the changes after `cursor` (None: a gap, said in the report),
        and whether they say (by their `from`) that they reach back before its time, and so
        list its change. Lists that start at that very time do not: a list ends at its last
        change (its `until`) and the next starts there, so once a Source has let the first go
        (it keeps them as long as it likes, core 1.1 §12) the lists start at the time of the
        change this copy last applied without listing it — every change after it listed."""
        lists, gap, earliest = lists_covering(
            self.run.client, url, s, cursor.datetime, slack=self.planner.slack
        )
        if gap is not None:
            report.gap = gap
        return lists, earliest is not None and earliest < cursor.datetime


class InOrder:
    """Changes are listed in forward chronological order (core §12.1, §13.1.1), and that order
    is what finds a Destination's first unprocessed change. An entry dated earlier than a
    change listed before it, or than its document's `from` (a Source dating a change by a
    file's kept mtime, or by a transaction that committed after a later one), is taken as
    listed: its `datetime` is raised to the latest before it, and the document is warned of
    once. Skipped for its date, the change would be lost for good while every run said ok;
    the validator still calls the document wrong."""

    def __init__(self) -> None:
        self.floor: datetime | None = None  # the latest change time listed so far
        self._floor_is = ""
        self._late: tuple[str, datetime, datetime, str] | None = None
        self._n_late = 0

    def start(self, from_: datetime | None, what: str) -> None:
        """A document (or package) begins, covering changes from `from_`."""
        self._late, self._n_late = None, 0
        if from_ is not None and (self.floor is None or from_ > self.floor):
            self.floor, self._floor_is = from_, f"{what}'s `from`"

    def see(self, res: Resource) -> None:
        t = res.datetime
        if t is None:
            return
        if self.floor is None or t > self.floor:
            self.floor, self._floor_is = t, "a change listed ahead of it"
        elif t < self.floor:
            self._n_late += 1
            self._late = self._late or (res.loc, t, self.floor, self._floor_is)
            res.datetime = self.floor

    def warning(self) -> str | None:
        """The document's warning, once it is read (None: in order)."""
        if self._late is None:
            return None
        loc, t, before, what = self._late
        more = f" (and {self._n_late - 1:,} more entries)" if self._n_late > 1 else ""
        return (
            f"warning: {loc} is dated {format_w3c(t)}, before {what} ({format_w3c(before)})"
            f"{more}: out of chronological order (core §12.1); taken as a change at that "
            "time, in the order listed"
        )


def _widened(slack: float) -> str:
    """What a run says when it looks `slack` seconds behind its cursor for the Source's
    imprecise times."""
    why = (
        "times without a zone (read as UTC) may be any zone's"
        if slack <= ZONE_SPAN
        else "times naming a day (read as its midnight UTC) may be any time of it, in any zone"
    )
    span = f"{slack / 3600:g} h" if slack < 172800 else _duration(slack)
    return (
        f"warning: the Source's {why}: the changes listed up to {span} behind the "
        "cursor are looked at too, and what the copy does not hold as listed is applied"
    )


def change_entries(
    client: Any,
    lists: list[str],
    problem: Callable[[str, str], None],
    warn: Callable[[DocumentReader], None] | None = None,
    loose: Callable[[str, float], None] | None = None,
) -> Iterator[Resource]:
    """The entries of the Change Lists in order, each dated no earlier than what precedes it
    (see `InOrder`). An entry that is itself a document (it carries `capability`: WEKO3
    lists its daily Change Lists so) is followed as one, never fetched as content (issue
    10.4)."""
    todo = list(lists)
    done: set[str] = set()
    order = InOrder()
    told = 0.0  # the most `loose` was told of
    while todo:
        list_url = todo.pop(0)
        if list_url in done:
            continue
        done.add(list_url)
        nested: list[str] = []
        with open_document(list_url, client=client) as reader:
            expect(reader.document.capability, "changelist", list_url)
            if reader.document.index:
                # An index among an index's parts (an index of indexes): its parts are read
                # in its place. Taken for Change Lists, its parts were "changes" with no
                # `change`, never applied.
                todo[:0] = [res.loc for res in reader]
                problem(
                    list_url,
                    "warning: a Change List Index listed as a part of a Change List Index: "
                    "its parts are read in its place",
                )
                if len(done) + len(todo) > _MAX_LISTS:
                    raise ReadError(
                        f"more than {_MAX_LISTS} Change Lists to follow", source=list_url
                    )
                continue
            order.start(reader.document.from_, "the list")
            for res in reader:
                if res.capability is not None:
                    if res.capability == "changelist":
                        nested.append(res.loc)
                    else:
                        problem(
                            res.loc,
                            f"a {res.capability} document listed in the Change List "
                            f"{list_url}: not a change, not fetched",
                        )
                    continue
                order.see(res)
                if loose is not None and reader.slack > told:
                    # Before the entry that (or whose list) gave such a time.
                    told = reader.slack
                    loose(list_url, told)
                yield res
            late = order.warning()
            if late is not None:
                problem(list_url, late)
            if warn is not None:
                warn(reader)
        if len(done) + len(nested) > _MAX_LISTS:
            raise ReadError(f"more than {_MAX_LISTS} Change Lists to follow", source=list_url)
        todo[:0] = nested


def lists_covering(
    client: Any, url: str, s: SetInfo, after: datetime, *, slack: float = 0.0
) -> tuple[list[str] | None, str | None, datetime | None]:
    """The Change Lists (in order) that together cover every change after `after`, the
    Change List Archive included; or (None, why) when the Source no longer lists some of that
    time (a gap). Third: the earliest `from` of the lists (None when they give none).

    Lists whose times have no zone (read as UTC) are taken to reach `after` when they start
    within `ZONE_SPAN` (14 h) of it: their times may be any zone's, and `after` another
    document's with its zone (a Resource List's `at`); a list in Japan's time written so
    looked nine hours late, a gap on every run, a baseline no help. Lists whose times name a
    day get the day as well (`DocumentReader.slack`). (Consecutive lists, of one Source's
    writing, are held to meet exactly.) `slack`: how far `after` may be from the time it
    means (a Resource List's `at` written so), so even lists with their zones get it."""
    candidates: dict[str, tuple[datetime | None, datetime | None]] = {}
    archive = None
    # Several Change Lists in the Capability List are the parts of one index (`SetInfo.also`).
    todo = [*reversed(s.more("changelist")), url]
    while todo:
        current = todo.pop()
        with open_document(current, client=client) as reader:
            doc = reader.document
            expect(doc.capability, "changelist", current)
            if doc.index:
                for res in reader:
                    candidates[res.loc] = (res.from_, res.until)
            else:
                candidates[current] = (doc.from_, doc.until)
            archive = doc.link("archives") or archive
            slack = max(slack, reader.slack)
        if current == url and not doc.index and doc.until is not None:
            # A closed Change List (given as SOURCE, say): the changes after it are in the
            # Source's current list, found by its `index` link or through its Capability
            # List (core §12.1) — polling the closed one would never see them (issue 10.5).
            later = _current_changelist(client, doc)
            if later is not None and later not in candidates:
                todo.append(later)
    earliest = min((f for f, _ in candidates.values() if f is not None), default=None)
    if earliest is None or earliest > after:
        # Walk back through the Change List Archive.
        archive_url = archive.href if archive else s.url("changelist-archive")
        also = () if archive else s.more("changelist-archive")
        if archive_url:
            for visit in walk(archive_url, mode=FOLLOW_INDEX, client=client, also=also):
                for _, res in visit.entries():
                    if not visit.reader.document.index:
                        candidates.setdefault(res.loc, (res.from_, res.until))
                slack = max(slack, visit.reader.slack)
        earliest = min((f for f, _ in candidates.values() if f is not None), default=None)
    try:
        reach = after + timedelta(seconds=slack)
    except OverflowError:
        reach = datetime.max.replace(tzinfo=after.tzinfo)
    if earliest is not None and earliest > reach:
        return (
            None,
            f"the Source lists changes from {format_w3c(earliest)} on; this copy is at "
            f"{format_w3c(after)}: the changes between are no longer listed "
            "(run with --baseline)",
            earliest,
        )
    back = seconds_before(after, slack) if slack else after
    chosen = [(f, u, loc) for loc, (f, u) in candidates.items() if u is None or u >= back]
    chosen.sort(key=lambda x: (x[0] is None, x[0] or after))
    # Consecutive lists must meet: a list ending before the next one starts leaves changes
    # unlisted (core §12.2: the lists of an index are contiguous) — a gap (issue 10.2).
    for (_, until, loc), (start, _, next_loc) in itertools.pairwise(chosen):
        if until is not None and start is not None and until < start:
            return (
                None,
                f"the Change List {loc} ends at {format_w3c(until)} but the next one, "
                f"{next_loc}, starts at {format_w3c(start)}: the changes between are not "
                "listed (run with --baseline)",
                earliest,
            )
    return [loc for _, _, loc in chosen], None, earliest


def _current_changelist(client: Any, doc: Any) -> str | None:
    """The Source's current Change List (or its index) from a closed list's links."""
    index = doc.link("index")
    if index is not None:
        return str(index.href)
    up = doc.link("up")
    if up is None:
        return None
    try:
        with open_document(up.href, client=client) as reader:
            if reader.document.capability != "capabilitylist":
                return None
            for entry in reader:
                if entry.capability == "changelist":
                    return entry.loc
    except ReadError:
        return None
    return None


def _duration(seconds: float) -> str:
    """A span as a person says it: `less than a minute`, `50 min`, `3.5 h`, `2 days`."""
    if seconds < 60:
        return "less than a minute"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"
