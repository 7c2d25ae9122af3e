"""Planning: documents → the final state of each URI (what to fetch, what to delete).

The plan lives in a temporary SQLite table, so a 1,000,000-entry Resource List costs megabytes,
not gigabytes. A URI planned twice keeps only its last action, moved to the end: changes apply
in the order of their last occurrence, each URI once, in its final state (`Plan.add`, the one
place that rule is kept).
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from ..errors import ReadError, ResourceSyncError
from ..hashing import ALGORITHMS, checkable
from ..jsonable import link_from_json
from ..model import Resource
from ..sitemap import open_document, walk
from ..sitemap.follow import FOLLOW_INDEX
from ..sitemap.read import DocumentReader
from ..w3cdt import format_w3c, parse_w3c, seconds_before
from .discover import SetInfo
from .mirror import UnsafePath
from .options import Run
from .paths import Unmapped
from .report import SetReport
from .state import Cursor, Known, hashes_column, hashes_of, keep_links, links_column, path_key
from .takeover import Takeover

__all__ = ["InOrder", "Plan", "Planner", "change_entries", "expect", "lists_covering", "same"]

_BATCH = 2000
#: Documents one walk of an index may read (10,000 parts of 50,000 entries is legitimate).
MAX_PARTS = 100_000
#: How deep indexes may nest.
MAX_DEPTH = 6
#: Change Lists one incremental run follows, nested ones included.
_MAX_LISTS = 100_000
#: State keys (with a set's key): since when the Source's lists have ended before the copy's
#: cursor, and that the cursor came from a change notification.
BEHIND = "lists-behind:"
NOTIFIED = "cursor-notified:"
#: Local paths claimed in memory before the claims move to their table (a dict lookup is a
#: twentieth of an SQLite insert; 100,000 claims are about 20 MB).
CLAIMS_IN_MEMORY = 100_000


class Plan:
    """The work for one set, in a temporary SQLite table (flat memory whatever the size)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        db.execute(
            "CREATE TEMP TABLE IF NOT EXISTS plan (seq INTEGER PRIMARY KEY, uri TEXT UNIQUE, "
            "action TEXT, length INTEGER, hashes TEXT, lastmod TEXT, datetime TEXT, sig TEXT, "
            "links TEXT, held INTEGER, late INTEGER, type TEXT, encoding TEXT)"
        )
        db.execute("CREATE TEMP TABLE IF NOT EXISTS seen (uri TEXT PRIMARY KEY)")
        db.execute("CREATE TEMP TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, uri TEXT)")
        db.execute("CREATE TEMP TABLE IF NOT EXISTS strays (path TEXT PRIMARY KEY)")
        self.batch: list[tuple[Any, ...]] = []
        #: The claims while they are few (None once they have moved to the `claims` table).
        self._claims: dict[str, str] | None = {}
        #: URIs said to be refused their local file (`Planner.claim`): said once a plan.
        self.refused_said: set[str] = set()
        self.reset()

    def reset(self) -> None:
        """Start again: nothing planned, seen or claimed."""
        self.batch.clear()
        self._claims = {}
        self.refused_said.clear()
        for table in ("plan", "seen", "claims", "strays"):
            self.db.execute(f"DELETE FROM {table}")

    def add(
        self,
        uri: str,
        action: str,
        res: Resource | None = None,
        *,
        sig: str | None = None,
        held: bool | None = None,
        late: bool = False,
    ) -> None:
        """Plan an action for a URI; a later one for the same URI replaces it (final state).

        Actions: `fetch`, `delete`, and `keep` (the final state is what we already hold: the
        URI's remembered failure or pending deletion is superseded). `sig` marks an undated
        change (see `undated_sig`). `held`: whether the copy's state held the URI when it was
        planned (None: not looked up), so the transfer need not look again. `late`: a change
        listed behind the copy's cursor (see `Planner.changes`)."""
        if res is None:
            self.batch.append(
                (uri, action, None, None, None, None, sig, None, held, late, None, None)
            )
        else:
            lastmod = format_w3c(res.lastmod) if res.lastmod else None
            when = res.change_time
            self.batch.append(
                (
                    uri,
                    action,
                    res.length,
                    hashes_column(res.hashes) if res.hashes else None,
                    lastmod,
                    # A Resource List's entry: its change time is its lastmod (formatted once).
                    lastmod if when is res.lastmod else format_w3c(when) if when else None,
                    sig,
                    links_column(res.links),
                    held,
                    late,
                    res.type,
                    res.encoding,
                )
            )
        if len(self.batch) >= _BATCH:
            self.flush()

    def keep(self, uri: str) -> None:
        """What we hold is the final state of this URI: nothing to transfer."""
        self.flush()
        self.db.execute("UPDATE plan SET action = 'keep' WHERE uri = ?", (uri,))

    def drop(self, uri: str) -> None:
        self.flush()
        self.db.execute("DELETE FROM plan WHERE uri = ?", (uri,))

    def flush(self) -> None:
        if self.batch:
            # A URI planned again replaces its row, and the new row takes the next `seq`: it
            # moves to the end, so changes apply in order of their last occurrence.
            self.db.executemany(
                "INSERT OR REPLACE INTO plan (uri, action, length, hashes, lastmod, datetime, "
                "sig, links, held, late, type, encoding) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                self.batch,
            )
            self.batch.clear()

    def claim(self, key: str, uri: str) -> str | None:
        """Claim a local path (by `path_key`) for `uri` in this run; the URI that claimed it
        first when that is another."""
        claims = self._claims
        if claims is not None:
            other = claims.setdefault(key, uri)
            if len(claims) > CLAIMS_IN_MEMORY:
                self.db.executemany("INSERT INTO claims (key, uri) VALUES (?, ?)", claims.items())
                self._claims = None
            return None if other == uri else other
        added = self.db.execute(
            "INSERT OR IGNORE INTO claims (key, uri) VALUES (?, ?)", (key, uri)
        ).rowcount
        if added:
            return None
        row = self.db.execute("SELECT uri FROM claims WHERE key = ?", (key,)).fetchone()
        return None if row is None or row[0] == uri else str(row[0])

    def claimed(self, key: str) -> bool:
        """Whether a URI of this run has claimed the local path of `path_key` `key`."""
        if self._claims is not None:
            return key in self._claims
        return self.db.execute("SELECT 1 FROM claims WHERE key = ?", (key,)).fetchone() is not None

    def stray(self, path: str) -> None:
        """A file of DEST that no URI of the Source maps to and the copy does not hold."""
        self.db.execute("INSERT OR IGNORE INTO strays (path) VALUES (?)", (path,))

    def strays(self) -> Iterator[str]:
        """The strays found, in order, a page at a time (flat memory)."""
        last = ""
        while True:
            page = self.db.execute(
                "SELECT path FROM strays WHERE path > ? ORDER BY path LIMIT 1000", (last,)
            ).fetchall()
            for (path,) in page:
                yield path
            if len(page) < 1000:
                return
            last = page[-1][0]

    def seen(self, uris: list[str]) -> None:
        self.db.executemany("INSERT OR IGNORE INTO seen (uri) VALUES (?)", [(u,) for u in uris])

    def count(self, action: str | None = None) -> int:
        self.flush()
        if action is None:
            return int(self.db.execute("SELECT COUNT(*) FROM plan").fetchone()[0])
        q = "SELECT COUNT(*) FROM plan WHERE action = ?"
        return int(self.db.execute(q, (action,)).fetchone()[0])

    def uris(self) -> set[str]:
        """The URIs planned so far."""
        self.flush()
        return {uri for (uri,) in self.db.execute("SELECT uri FROM plan")}

    def planned_bytes(self) -> int:
        """The bytes the planned fetches will bring, as far as the lists give lengths."""
        self.flush()
        row = self.db.execute("SELECT SUM(length) FROM plan WHERE action = 'fetch'").fetchone()
        return int(row[0] or 0)

    def planned(self, uri: str, action: str) -> Resource | None:
        """What is planned for `uri`, when it is `action`."""
        self.flush()
        row = self.db.execute(
            "SELECT uri, length, hashes, lastmod, datetime, links, type, encoding FROM plan "
            "WHERE uri = ? AND action = ?",
            (uri, action),
        ).fetchone()
        return None if row is None else _resource(*row)

    def rows(self, action: str) -> Iterator[tuple[str, Resource]]:
        for uri, res, _ in self.rows_held(action):
            yield uri, res

    def rows_held(self, action: str) -> Iterator[tuple[str, Resource, bool | None]]:
        """The planned URIs of `action`, in order, with whether the state held each when it
        was planned (None: not looked up)."""
        self.flush()
        last = 0
        while True:
            batch = self.db.execute(
                "SELECT seq, uri, length, hashes, lastmod, datetime, links, type, encoding, held "
                "FROM plan WHERE action = ? AND seq > ? ORDER BY seq LIMIT 1000",
                (action, last),
            ).fetchall()
            if not batch:
                return
            for seq, uri, length, hashes, lastmod, when, links, type_, coding, held in batch:
                last = seq
                res = _resource(uri, length, hashes, lastmod, when, links, type_, coding)
                yield uri, res, None if held is None else bool(held)


def _resource(
    uri: str,
    length: int | None,
    hashes: str | None,
    lastmod: str | None,
    when: str | None,
    links: str | None,
    type_: str | None = None,
    encoding: str | None = None,
) -> Resource:
    """A plan row as the entry it was planned from."""
    modified = parse_w3c(lastmod) if lastmod else None
    return Resource(
        loc=uri,
        length=length,
        hashes=hashes_of(hashes) if hashes else {},
        lastmod=modified,
        # A Resource List's entry changed when it was modified: the same text, read once.
        datetime=modified if when == lastmod else parse_w3c(when) if when else None,
        links=[link_from_json(d) for d in json.loads(links)] if links else [],
        type=type_,
        encoding=encoding,
    )


def expect(capability: str | None, wanted: str, url: str) -> None:
    """A document read as a `wanted` must say it is one: a Resource List that turns out to be
    something else is not an empty list (synced as such, it would delete the whole copy).
    One that says nothing (no `rs:md capability`, which the spec requires) is taken for what
    it was linked as; the validator reports it."""
    if capability is not None and capability != wanted:
        raise ReadError(f"expected a {wanted}, found a {capability}", source=url)


def tell_warnings(reader: DocumentReader, report: SetReport) -> None:
    """Rules the document bent that we read through (zone-less datetimes, base64 digests),
    once per document: reported, not failed."""
    for message in reader.warnings:
        report.problem(reader.name, f"warning: {message}")


def undated_sig(res: Resource) -> str:
    """What identifies an undated change entry, so that a run does not apply again what an
    earlier run applied (a list without `rs:md@datetime` gives no time to keep a cursor by)."""
    return json.dumps(
        [
            res.change,
            format_w3c(res.lastmod) if res.lastmod else None,
            res.length,
            sorted(res.hashes.items()),
        ]
    )


def same(
    known_hashes: dict[str, str],
    known_length: int | None,
    res: Resource,
    known_lastmod: str | None = None,
) -> bool:
    """Whether what we hold is what the Source describes: by digest when both give one; else
    (a Source that gives none, or another algorithm) by length and `<lastmod>` both (rsync's
    quick check, against the `<lastmod>` recorded with what we hold: `known_lastmod`). A
    length alone is no evidence: an edit often keeps it (a digit, a date, a flag)."""
    common = [a for a in res.hashes if a in known_hashes]
    if common:
        return all(known_hashes[a] == res.hashes[a] for a in common) and (
            res.length is None or known_length is None or res.length == known_length
        )
    return (
        res.length is not None
        and res.length == known_length
        and bool(known_hashes)
        and res.lastmod is not None
        and known_lastmod is not None
        and _same_time(known_lastmod, res.lastmod)
    )


def _same_time(recorded: str, lastmod: datetime) -> bool:
    try:
        return parse_w3c(recorded) == lastmod
    except ValueError:
        return False


class Planner:
    """Reads a set's documents and fills a `Plan`."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self._filter = run.options.filter
        #: The copy's state held nothing when this baseline began (a first baseline): nothing
        #: is looked up per URI, and the disk is looked at only by the writes.
        self._empty = False
        #: Files held that a baseline takes as they are (`takeover.py`).
        self.takeover = Takeover(run)

    def taken(self, uri: str) -> bool:
        """Whether `--include`/`--exclude` take `uri` (by where it lands under DEST); a URI
        that maps nowhere is taken, to be refused with its reason."""
        if not self._filter:
            return True
        try:
            rel = self.run.mirror.relpath(uri)
        except UnsafePath:
            return True
        return not self._filter.excluded(rel)

    # -- baseline ------------------------------------------------------------------------------

    def baseline(self, s: SetInfo, key: str, plan: Plan, report: SetReport) -> datetime | None:
        """Plan a baseline from the Resource List (or its index); returns its `at`."""
        url = s.url("resourcelist")
        if url is None:
            hint = (
                " (a copy made by other means follows its Change Lists with --from DATETIME)"
                if s.url("changelist")
                else ""
            )
            raise ReadError(f"the Source offers no Resource List{hint}", source=s.capabilitylist)
        self._empty = self.run.state.count() == 0
        try:
            return self._baseline(url, key, plan, report)
        finally:
            self._empty = False

    def _baseline(self, url: str, key: str, plan: Plan, report: SetReport) -> datetime | None:
        at: datetime | None = None
        seen: list[str] = []
        read = 0
        skipped: list[str] = []

        def skip(part: str, reason: str, referrer: str | None) -> None:
            skipped.append(part)
            report.problem(part, f"index part not read: {reason}")

        for visit in walk(
            url,
            mode=FOLLOW_INDEX,
            client=self.run.client,
            max_documents=MAX_PARTS,
            max_depth=MAX_DEPTH,
            on_skip=skip,
        ):
            doc = visit.reader.document
            expect(doc.capability, "resourcelist", visit.name)
            if at is None:
                at = doc.at or doc.completed
            if doc.index:
                for _ in visit.entries():
                    pass
                tell_warnings(visit.reader, report)
                continue
            # What the Source lists is remembered to find what it no longer lists (`extras`);
            # a first baseline holds nothing it could have stopped listing — but for what a
            # repair takes into the state as it plans (`_adopt`).
            track = not self._empty or self.run.options.repair
            for _, res in visit.entries():
                if track:
                    seen.append(res.loc)
                    if len(seen) >= _BATCH:
                        plan.seen(seen)
                        seen.clear()
                read += 1
                if read % _BATCH == 0 and self.run.progress:
                    self.run.progress("read", read, 0, 0)
                self.fetch_unless_held(res, plan, report, key)
            tell_warnings(visit.reader, report)
        plan.seen(seen)
        self.takeover.moved_on(self.claim, plan, report, url)
        if skipped:
            # What the unread parts list is unknown: deleting "unlisted" resources could
            # delete what the Source still lists (issue 17.11, 17.12).
            report.incomplete = (
                f"the Resource List could not be read whole ({len(skipped)} index "
                "part(s) not read): nothing was deleted"
            )
        else:
            self.extras(key, plan)
            if self.run.options.repair:
                self.find_strays(plan)
        return at

    def fetch_unless_held(self, res: Resource, plan: Plan, report: SetReport, key: str) -> None:
        uri = res.loc
        if not self.taken(uri):
            report.excluded += 1
            return
        mirror = self.run.mirror
        try:
            # The disk matters to the plan only where the copy may hold the file (and to a
            # dry run's report); every write looks at it again (`Mirror.incoming`), and what
            # it refuses then is refused and remembered just as here.
            if self._empty and not self.run.options.dry_run:
                path = mirror.mapped(uri)
            else:
                path = mirror.location(uri)
        except UnsafePath as exc:
            report.refuse(uri, exc)
            plan.add(uri, "refused", res)  # remembered: not ok until it can be taken
            return
        if not self.claim(uri, plan, report, path, res=res, set_key=key):
            return
        known = None if self._empty else self.run.state.known(uri)
        if (
            known is not None
            and same(known.hashes, known.length, res, known.lastmod)
            and self.intact(uri, path, known, res)
        ):
            report.unchanged += 1
            if not self.run.options.dry_run:
                keep_links(self.run.state, known, res)
            return
        if known is None and self.run.options.repair and self.takeover.adopt(uri, res, key, report):
            return
        plan.add(uri, "fetch", res, held=known is not None)

    def claim(
        self,
        uri: str,
        plan: Plan,
        report: SetReport,
        path: str | None = None,
        *,
        quiet: bool = False,
        res: Resource | None = None,
        set_key: str | None = None,
    ) -> bool:
        """Whether `uri` may have its local file: no other URI holds it, or claimed it first in
        this run, under any spelling a file system may take for the same name (`dir/` and
        `dir/index.html`, `q%3Fx` and `q?x`, NFC and NFD, case). The first owner keeps it; the
        other is refused and reported (issue 17.6, 17.7) and, given its entry (`res`),
        remembered as refused: the next run tries it again and says it again, so that none
        says ok over a copy that lacks it. `quiet`: refused, not reported (a change behind the
        cursor: reported when it was listed after it)."""
        mirror = self.run.mirror
        key = path_key(mirror.stored(path) if path is not None else mirror.relpath(uri))
        other = None if self._empty else self.run.state.owner(key)
        if other is not None and other != uri and res is not None and set_key and path:
            # Held for another URI: the Source's former address? (`takeover.py`)
            taken = self.takeover.former_address(uri, path, res, set_key, other)
            if taken is None:
                return False  # decided once the whole list is read
            if taken:
                other = None
        if other is None or other == uri:
            other = plan.claim(key, uri)
        if other is None or other == uri:
            return True
        if quiet or uri in plan.refused_said:
            return False  # (the changes after a baseline's list may list it again)
        plan.refused_said.add(uri)
        report.refused += 1
        try:
            mirror.relpath(other)
            hint = ""
        except UnsafePath:
            hint = (
                " (held for an address no mapping of this run covers: if the Source moved from "
                "there, `sync --repair` takes it)"
            )
        report.problem(
            uri,
            f"refused: it maps to the same local file as {other} "
            f"({mirror.relpath(uri)}), which keeps it{hint}",
        )
        if res is not None:
            plan.add(uri, "refused", res)  # remembered: not ok until it can be taken
        return False

    def intact(self, uri: str, path: str, known: Known, res: Resource) -> bool:
        """Whether the local file is still what we wrote: its size always; its digest too
        when a baseline was asked for (a repair run) and the Source gives one, or when the
        file's time is not the Source's `<lastmod>` (with `--times`: touched or edited here,
        or the Source gave it a new time). An intact file takes the Source's time
        (`Mirror.keep_time`); one whose digest differs is not intact (fetched again)."""
        try:
            st = os.stat(path)
        except OSError:
            return False
        if known.length is not None and st.st_size != known.length:
            return False
        opts = self.run.options
        mirror = self.run.mirror
        retime = mirror.times and not mirror.same_time(st, res.lastmod)
        listed = checkable(res.hashes)
        want = listed if opts.baseline and opts.checksum else {}
        if not want and opts.repair and opts.checksum:
            # No digest in the list: a repair holds the file to the one this copy wrote (what
            # `audit` compares it with), so an edit here that kept the size and time is found.
            want = known.hashes
        if retime and not want:
            # Ours and the Source's agree where both are given (`same`): any one will do.
            want = {**known.hashes, **listed}
        algos = [a for a in want if a in ALGORITHMS][:1]
        if algos:
            got = mirror.local_digests(uri, algos)
            if got is None or got[1].get(algos[0]) != want[algos[0]]:
                return False
        if retime and algos:  # a time is given back only to a copy checked
            mirror.keep_time(path, res.lastmod, st)
        return True

    def extras(self, key: str, plan: Plan) -> None:
        """Resources we hold that the Source no longer lists: deleted with --delete, else kept
        as pending deletions."""
        plan.flush()
        for uri in self.run.state.unseen(key):
            if self.taken(uri):
                plan.add(uri, "delete")

    def find_strays(self, plan: Plan) -> None:
        """The files of DEST (`--include`/`--exclude` applied) that no URI the Source lists
        maps to and the copy does not hold: put there by hand or by another tool. `audit`
        calls them extra; `sync --repair --delete` removes them."""
        mirror, state = self.run.mirror, self.run.state
        flt = self._filter
        for path in mirror.files():
            stored = mirror.stored(path)
            key = path_key(stored)
            if plan.claimed(key) or state.owner(key) is not None:
                continue
            if flt and flt.excluded(os.path.relpath(path, mirror.dest).replace(os.sep, "/")):
                continue
            plan.stray(path)

    # -- incremental ---------------------------------------------------------------------------

    def incremental(
        self, s: SetInfo, key: str, plan: Plan, report: SetReport, cursor: Cursor
    ) -> Cursor:
        url = s.url("changelist")
        if url is None:
            raise ReadError(
                "the Source offers no Change List to follow (use --baseline)",
                source=s.capabilitylist,
            )
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
        first = state.get(BEHIND + key)
        if not behind or notified:
            if first is not None and write:
                state.drop(BEHIND + key)
            return None
        if first is None:
            if write:
                state.put(BEHIND + key, repr(time.time()))
            return time.time()
        return float(first)

    def entries(self, lists: list[str], report: SetReport) -> Iterator[Resource]:
        def warn(reader: DocumentReader) -> None:
            tell_warnings(reader, report)

        return change_entries(self.run.client, lists, report.problem, warn)

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
        the copy does not hold as listed there is planned (see `_late`)."""
        last = cursor
        passed_cursor = cursor.uri == ""
        behind = seconds_before(cursor.datetime, lookback) if lookback > 0 else None
        any_late = False
        # What earlier runs left to do, planned before the changes (few rows).
        earlier = plan.uris() if behind is not None else set()
        mirror = self.run.mirror
        for res in entries:
            t = res.datetime
            late = False
            if t is not None and (
                t < cursor.datetime or (t == cursor.datetime and not passed_cursor)
            ):
                if t == cursor.datetime and res.loc == cursor.uri:
                    passed_cursor = True
                if behind is None or t < behind or res.change is None:
                    continue
                # Behind the cursor: what earlier runs left to do (planned before the
                # changes) stands; the rest is checked against the copy once planned.
                if res.loc in earlier:
                    continue
                late = True
                any_late = True
            if not self.taken(res.loc):
                if late:
                    continue
                report.excluded += 1
                if t is not None and t >= last.datetime:
                    last = Cursor(t, res.loc)  # left out by choice: the cursor moves on
                continue
            if res.change is None:
                report.refused += 1
                report.problem(
                    res.loc, "a Change List entry with neither change nor capability: not fetched"
                )
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
                and not self.claim(res.loc, plan, report, path, res=res)
            ):
                continue
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
                    if self.intact(uri, mirror.location(uri), known, res):
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
            "SELECT uri, action, length, hashes, lastmod, datetime, links, type, encoding "
            "FROM plan WHERE late = 1"
        ).fetchall()
        missed: list[str] = []
        dropped: list[tuple[str]] = []
        for uri, action, *described in rows:
            known = state.known(uri)
            res = _resource(uri, *described)
            if action == "delete":
                held = known is None
            elif known is None:
                held = self._in_place(uri, res)
            elif not any(a in known.hashes for a in res.hashes) and (
                res.lastmod is None or known.lastmod is None
            ):
                held = True
            else:
                held = same(known.hashes, known.length, res, known.lastmod)
            if held or (action != "delete" and not self.claim(uri, plan, report, quiet=True)):
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
        lists, gap, earliest = lists_covering(self.run.client, url, s, cursor.datetime)
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


def change_entries(
    client: Any,
    lists: list[str],
    problem: Callable[[str, str], None],
    warn: Callable[[DocumentReader], None] | None = None,
) -> Iterator[Resource]:
    """The entries of the Change Lists in order, each dated no earlier than what precedes it
    (see `InOrder`). An entry that is itself a document (it carries `capability`: WEKO3
    lists its daily Change Lists so) is followed as one, never fetched as content (issue
    10.4)."""
    todo = list(lists)
    done: set[str] = set()
    order = InOrder()
    while todo:
        list_url = todo.pop(0)
        if list_url in done:
            continue
        done.add(list_url)
        nested: list[str] = []
        with open_document(list_url, client=client) as reader:
            expect(reader.document.capability, "changelist", list_url)
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
    client: Any, url: str, s: SetInfo, after: datetime
) -> tuple[list[str] | None, str | None, datetime | None]:
    """The Change Lists (in order) that together cover every change after `after`, the
    Change List Archive included; or (None, why) when the Source no longer lists some of that
    time (a gap). Third: the earliest `from` of the lists (None when they give none)."""
    candidates: dict[str, tuple[datetime | None, datetime | None]] = {}
    archive = None
    todo = [url]
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
        if archive_url:
            for visit in walk(archive_url, mode=FOLLOW_INDEX, client=client):
                for _, res in visit.entries():
                    if not visit.reader.document.index:
                        candidates.setdefault(res.loc, (res.from_, res.until))
        earliest = min((f for f, _ in candidates.values() if f is not None), default=None)
    if earliest is not None and earliest > after:
        return (
            None,
            f"the Source lists changes from {format_w3c(earliest)} on; this copy is at "
            f"{format_w3c(after)}: the changes between are no longer listed "
            "(run with --baseline)",
            earliest,
        )
    chosen = [(f, u, loc) for loc, (f, u) in candidates.items() if u is None or u >= after]
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
