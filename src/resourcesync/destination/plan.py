"""Planning: documents → the final state of each URI (what to fetch, what to delete). A
baseline's plan from the Resource List, and what every plan asks before a URI may have its
local file (`Planner.claim`), are here; the changes the Change Lists list, in
`changeplan.ChangePlanner`.

The plan lives in a temporary SQLite table, so a 1,000,000-entry Resource List costs megabytes,
not gigabytes. A URI planned twice keeps only its last action, moved to the end: changes apply
in the order of their last occurrence, each URI once, in its final state (`Plan.add`, the one
place that rule is kept).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from ..errors import ReadError
from ..hashing import ALGORITHMS, checkable
from ..iri import same_uri
from ..jsonable import link_from_json
from ..model import Resource
from ..sitemap import walk
from ..sitemap.follow import FOLLOW_INDEX, earliest_at
from ..sitemap.read import DocumentReader
from ..w3cdt import format_w3c, parse_w3c
from .discover import SetInfo
from .mirror import UnsafePath
from .options import Run
from .report import SetReport
from .state import Known, hashes_column, hashes_of, keep_links, links_column, path_key
from .takeover import Takeover

__all__ = [
    "UNKNOWN_CHANGE",
    "Plan",
    "Planner",
    "expect",
    "resource_of",
    "same",
    "say_unknown_change",
    "tell_warnings",
    "undated_sig",
    "unknown_change",
]

_BATCH = 2000
#: Documents one walk of an index may read (10,000 parts of 50,000 entries is legitimate).
MAX_PARTS = 100_000
#: How deep indexes may nest.
MAX_DEPTH = 6
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
            "links TEXT, held INTEGER, late INTEGER, type TEXT, encoding TEXT, change TEXT)"
        )
        db.execute("CREATE TEMP TABLE IF NOT EXISTS seen (uri TEXT PRIMARY KEY)")
        db.execute("CREATE TEMP TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, uri TEXT)")
        db.execute("CREATE TEMP TABLE IF NOT EXISTS strays (path TEXT PRIMARY KEY)")
        db.execute("CREATE TEMP TABLE IF NOT EXISTS deletions (key TEXT PRIMARY KEY, uri TEXT)")
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
        self.deletions = 0
        for table in ("plan", "seen", "claims", "strays", "deletions"):
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
                (uri, action, None, None, None, None, sig, None, held, late, None, None, None)
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
                    res.change,
                )
            )
        if len(self.batch) >= _BATCH:
            self.flush()

    def keep(self, uri: str) -> None:
        """What we hold is the final state of this URI: nothing to transfer."""
        self.flush()
        self.db.execute("UPDATE plan SET action = 'keep' WHERE uri = ?", (uri,))

    def kept_changes(self) -> list[tuple[str, datetime]]:
        """The URIs kept (held as planned) by a change, with its time."""
        self.flush()
        rows = self.db.execute(
            "SELECT uri, datetime FROM plan WHERE action = 'keep' AND change IS NOT NULL "
            "AND datetime IS NOT NULL"
        ).fetchall()
        return [(uri, parse_w3c(when)) for uri, when in rows]

    def drop(self, uri: str) -> None:
        self.flush()
        self.db.execute("DELETE FROM plan WHERE uri = ?", (uri,))

    def flush(self) -> None:
        if self.batch:
            # A URI planned again replaces its row, and the new row takes the next `seq`: it
            # moves to the end, so changes apply in order of their last occurrence.
            self.db.executemany(
                "INSERT OR REPLACE INTO plan (uri, action, length, hashes, lastmod, datetime, "
                "sig, links, held, late, type, encoding, change) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                self.batch,
            )
            self.batch.clear()

    def claim(self, key: str, uri: str) -> str | None:
        """Claim a local path (by `path_key`) for `uri` in this run; the URI that claimed it
        before (`uri` itself when it did), None when none did."""
        claims = self._claims
        if claims is not None:
            other = claims.get(key)
            if other is not None:
                return other
            claims[key] = uri
            if len(claims) > CLAIMS_IN_MEMORY:
                self.db.executemany("INSERT INTO claims (key, uri) VALUES (?, ?)", claims.items())
                self._claims = None
            return None
        added = self.db.execute(
            "INSERT OR IGNORE INTO claims (key, uri) VALUES (?, ?)", (key, uri)
        ).rowcount
        if added:
            return None
        row = self.db.execute("SELECT uri FROM claims WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def deleting(self, key: str, uri: str) -> None:
        """A deletion of `uri`, whose local path is `path_key` `key`, is listed in this run (a
        deletion claims no file: another URI may take it after)."""
        self.db.execute("INSERT OR REPLACE INTO deletions (key, uri) VALUES (?, ?)", (key, uri))
        self.deletions += 1

    def deleted_at(self, key: str) -> str | None:
        """The URI of this run's last deletion listed at the local path `key`, if any."""
        if not self.deletions:
            return None
        row = self.db.execute("SELECT uri FROM deletions WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def give(self, key: str, uri: str) -> None:
        """The local path of `path_key` `key` is `uri`'s in this run (claimed by another
        spelling of it before: `Planner.claim`)."""
        if self._claims is not None:
            self._claims[key] = uri
        else:
            self.db.execute("UPDATE claims SET uri = ? WHERE key = ?", (uri, key))

    def claimed(self, key: str) -> bool:
        """Whether a URI of this run has claimed the local path of `path_key` `key`."""
        return self.claimant(key) is not None

    def claimant(self, key: str) -> str | None:
        """The URI of this run that claimed the local path of `path_key` `key`, if any."""
        if self._claims is not None:
            return self._claims.get(key)
        row = self.db.execute("SELECT uri FROM claims WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

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

    def seen_again(self, uris: list[str]) -> list[str]:
        """`seen`, answering with those of `uris` that were seen before in this plan."""
        insert = "INSERT OR IGNORE INTO seen (uri) VALUES (?)"
        return [u for u in uris if not self.db.execute(insert, (u,)).rowcount]

    def count(self, action: str | None = None) -> int:
        self.flush()
        if action is None:
            return int(self.db.execute("SELECT COUNT(*) FROM plan").fetchone()[0])
        q = "SELECT COUNT(*) FROM plan WHERE action = ?"
        return int(self.db.execute(q, (action,)).fetchone()[0])

    def holds(self, uri: str) -> bool:
        """Whether anything is planned for `uri` (a lookup: the plan may be a baseline's)."""
        self.flush()
        return self.db.execute("SELECT 1 FROM plan WHERE uri = ?", (uri,)).fetchone() is not None

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
        return None if row is None else resource_of(*row)

    def rows(self, action: str) -> Iterator[tuple[str, Resource]]:
        for uri, res, _, _ in self.rows_held(action):
            yield uri, res

    def rows_held(self, action: str) -> Iterator[tuple[str, Resource, bool | None, bool]]:
        """The planned URIs of `action`, in order, with whether the state held each when it
        was planned (None: not looked up) and whether it was listed late (behind the
        cursor)."""
        self.flush()
        last = 0
        while True:
            batch = self.db.execute(
                "SELECT seq, uri, length, hashes, lastmod, datetime, links, type, encoding, "
                "change, held, late FROM plan WHERE action = ? AND seq > ? ORDER BY seq "
                "LIMIT 1000",
                (action, last),
            ).fetchall()
            if not batch:
                return
            for seq, uri, *described, held, late in batch:
                last = seq
                yield (
                    uri,
                    resource_of(uri, *described),
                    None if held is None else bool(held),
                    bool(late),
                )


def resource_of(
    uri: str,
    length: int | None,
    hashes: str | None,
    lastmod: str | None,
    when: str | None,
    links: str | None,
    type_: str | None = None,
    encoding: str | None = None,
    change: str | None = None,
) -> Resource:
    """A plan row as the entry it was planned from (its `change` as listed, for a change)."""
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
        change=change,
    )


#: The reason a Change List entry whose change is unknown is remembered with.
UNKNOWN_CHANGE = "a Change List entry whose change is unknown"


def unknown_change(change: str | None) -> str:
    """What is said of a Change List entry whose `change` is none of created, updated,
    deleted (`model.CHANGES`)."""
    if change is None:
        return "a Change List entry with neither change nor capability"
    return f"a Change List entry with change {change!r}, none of created, updated, deleted"


def say_unknown_change(uri: str, what: str, plan: Plan, report: SetReport) -> None:
    """A Change List entry whose change is unknown (`what`, from `unknown_change`): never
    fetched (issue 10.4), and what it means for the copy — a creation, an update, a
    deletion — cannot be told. Planned as `unknown`, which the run remembers: every run says
    it again (once a plan) until the Source lists a change for the URI, which replaces it, or
    a baseline takes the resource from the Resource List. Forgotten, a run after the cursor
    has passed it would say ok over a copy that may lack the change."""
    if uri in plan.refused_said:
        return
    plan.refused_said.add(uri)
    report.refused += 1
    report.problem(
        uri,
        f"{what}: not fetched; said by every run until the Source lists a change for it "
        "(or `sync --baseline` takes it from the Resource List)",
    )


def expect(capability: str | None, wanted: str, url: str) -> None:
    """A document read as a `wanted` must say it is one: a Resource List that turns out to be
    something else is not an empty list (synced as such, it would delete the whole copy).
    One that says nothing (no `rs:md capability`, which the spec requires) is taken for what
    it was linked as; the validator reports it."""
    if capability is not None and capability != wanted:
        raise ReadError(f"expected a {wanted}, found a {capability}", source=url)


def tombstones(n: int) -> str:
    """What a run says of a Resource List that lists `n` resources as deleted."""
    return (
        f'warning: {n:,} {"entry says" if n == 1 else "entries say"} change="deleted" (a '
        "Resource List lists what the Source has, core §10.1): taken as not listed, not "
        "fetched (with --delete, deleted here)"
    )


class Relisted:
    """The entries of a Resource List that list again a URI it listed before (in the same
    document or in another part of its index): the last entry of each URI is taken, as `audit`
    takes it, and the list is said to be bent once a document (the validator calls it an
    error: core-duplicate-entry)."""

    #: URIs named in the warning.
    EXAMPLES = 3

    def __init__(self, what: str = "Resource List") -> None:
        #: What lists them ("Resource List", "Resource Dump"), as the warning names it.
        self.what = what
        self.count = 0
        self.examples: list[str] = []

    def add(self, uri: str) -> None:
        self.count += 1
        if len(self.examples) < self.EXAMPLES and uri not in self.examples:
            self.examples.append(uri)

    def tell(self, name: str, report: SetReport) -> None:
        """Said of the document `name` when it listed a URI again; counted from then on."""
        if not self.count:
            return
        n = self.count
        more = ", …" if n > len(self.examples) else ""
        report.problem(
            name,
            f"warning: {n:,} entr{'y lists' if n == 1 else 'ies list'} again a URI the "
            f"{self.what} listed before (the last entry of each URI taken): "
            f"{', '.join(self.examples)}{more}",
        )
        self.count = 0
        self.examples.clear()


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
        #: The list read in this run whose times may be furthest from the times meant (given
        #: without a zone, read as UTC; or naming a day), and how far (`slack`, seconds): its
        #: times and the cursor's may be hours apart (`ChangePlanner.changes` looks further
        #: back).
        self.imprecise: str | None = None
        self.slack = 0.0

    def loose(self, name: str, slack: float) -> None:
        """The list `name` gives times that may be `slack` seconds from the times meant."""
        if slack > self.slack:
            self.imprecise, self.slack = name, slack

    def precise(self) -> None:
        """No list of the set is read yet (a set's run begins)."""
        self.imprecise, self.slack = None, 0.0

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
            return self._baseline(url, s.more("resourcelist"), key, plan, report)
        finally:
            self._empty = False

    def _baseline(
        self, url: str, also: list[str], key: str, plan: Plan, report: SetReport
    ) -> datetime | None:
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
            also=also,
        ):
            doc = visit.reader.document
            expect(doc.capability, "resourcelist", visit.name)
            at = earliest_at(at, visit)
            if doc.index:
                for _ in visit.entries():
                    pass
                self.loose(visit.name, visit.reader.slack)
                tell_warnings(visit.reader, report)
                continue
            # What the Source lists is remembered to find what it no longer lists (`extras`);
            # a first baseline holds nothing it could have stopped listing — but for what a
            # repair takes into the state as it plans (`_adopt`).
            track = not self._empty or self.run.options.repair
            gone = 0
            relisted = Relisted()
            for _, res in visit.entries():
                if res.change == "deleted":
                    # A tombstone (a Source that keeps its deleted resources in its Resource
                    # List, as OAI-PMH keeps deleted records): not the Source's, so not listed.
                    gone += 1
                    continue
                if res.capability is not None:
                    # A document (a dump, a Capability List), not a resource: never stored
                    # as content, as in a Change List (issue 10.4). A Resource List listed
                    # so is followed as a part (`Visit.entries`).
                    report.problem(
                        res.loc,
                        f"a {res.capability} document listed in the Resource List "
                        f"{visit.name}: not a resource, not fetched",
                    )
                    continue
                if track:
                    seen.append(res.loc)
                    if len(seen) >= _BATCH:
                        plan.seen(seen)
                        seen.clear()
                read += 1
                if read % _BATCH == 0 and self.run.progress:
                    self.run.progress("read", read, 0, 0)
                self.fetch_unless_held(res, plan, report, key, relisted)
            self.loose(visit.name, visit.reader.slack)
            if gone:
                report.problem(visit.name, tombstones(gone))
            relisted.tell(visit.name, report)
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

    def fetch_unless_held(
        self, res: Resource, plan: Plan, report: SetReport, key: str, relisted: Relisted
    ) -> None:
        """Plan to fetch a Resource List's entry unless the copy holds it as listed. A URI
        listed again in the same list takes its last entry (as `audit` does): what an earlier
        entry planned is replaced, and it is counted once."""
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
        before = relisted.count
        if not self.claim(uri, plan, report, path, res=res, set_key=key, relisted=relisted):
            return
        # Listed before in this list: an earlier entry planned something, or was held as listed
        # (and counted unchanged).
        planned = relisted.count != before and plan.holds(uri)
        if relisted.count != before and not planned:
            report.unchanged -= 1
        known = None if self._empty else self.run.state.known(uri)
        if (
            known is not None
            and same(known.hashes, known.length, res, known.lastmod)
            and self.intact(uri, path, known, res)
        ):
            report.unchanged += 1
            if planned:
                plan.drop(uri)
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
        relisted: Relisted | None = None,
    ) -> bool:
        """Whether `uri` may have its local file: no other URI holds it, or claimed it first in
        this run, under any spelling a file system may take for the same name (`dir/` and
        `dir/index.html`, `q%3Fx` and `q?x`, NFC and NFD, case). The first owner keeps it; the
        other is refused and reported (issue 17.6, 17.7) and, given its entry (`res`),
        remembered as refused: the next run tries it again and says it again, so that none
        says ok over a copy that lacks it. `quiet`: refused, not reported (a change behind the
        cursor: reported when it was listed after it). `relisted`: the URIs of the Resource List
        being read that claimed their file before in it (listed more than once)."""
        mirror = self.run.mirror
        key = path_key(mirror.stored(path) if path is not None else mirror.relpath(uri))
        other = None if self._empty else self.run.state.owner(key)
        if other is not None and other != uri and self.respelled(other, uri, key, plan, set_key):
            other = None
        if other is not None and other != uri and res is not None and set_key and path:
            # Held for another URI: the Source's former address? (`takeover.py`)
            taken = self.takeover.former_address(uri, path, res, set_key, other)
            if taken is None:
                return False  # decided once the whole list is read
            if taken:
                other = None
        if other is None or other == uri:
            other = plan.claim(key, uri)
            gone = plan.deleted_at(key) if other is None else None
            if gone is not None and gone != uri and same_uri(gone, uri):
                # Deleted before in this run under another spelling: the later entry wins.
                plan.drop(gone)
            if other == uri and relisted is not None:
                relisted.add(uri)
            elif other is not None and self._listed_again(other, uri, key, plan, set_key):
                other = None
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

    def respell(self, uri: str, path: str, plan: Plan) -> None:
        """A deletion listed for `uri` (at `path`), which the copy may hold, or this run have
        planned, under another spelling (see `respelled`; the later entry wins, as in `claim`)."""
        key = path_key(self.run.mirror.stored(path))
        plan.deleting(key, uri)
        claimant = plan.claimant(key)
        if claimant is not None:
            self._listed_again(claimant, uri, key, plan)
            return
        if self._empty or self.run.state.known(uri) is not None:
            return
        held = self.run.state.owner(key)
        if held is not None and held != uri:
            self.respelled(held, uri, key, plan)

    def _listed_again(
        self, first: str, uri: str, key: str, plan: Plan, set_key: str | None = None
    ) -> bool:
        """Whether `uri` is another spelling of `first`, which claimed its file in this run: the
        resource listed again (a Change List after the Resource List, two entries of one
        list), and the later entry wins, as when one spelling is listed twice — `first`'s
        plan dropped, the file and the copy's record `uri`'s."""
        if first == uri or not same_uri(first, uri):
            return False
        plan.drop(first)
        plan.give(key, uri)
        self.respelled(first, uri, key, plan, set_key)
        return True

    def respelled(
        self, held: str, uri: str, key: str, plan: Plan, set_key: str | None = None
    ) -> bool:
        """Whether `uri`, which the copy does not hold, is another spelling of `held`, which
        holds its file (RFC 3986 §6.2.2: `%7E` for `~`, the host's case, a default port, dot
        segments): one resource. Its record goes over to the spelling the Source lists now
        (not in a dry run), so that what happens to it next — an update, a deletion — is
        applied to the file, not refused (or "never held") over a copy left as it was. What
        this run planned for `held` (a deletion listed before, which claims no file) is
        superseded: the later entry wins, as for one spelling."""
        state = self.run.state
        if not same_uri(held, uri) or state.known(uri) is not None:
            return False
        if state.known(held) is not None and not self.run.options.dry_run:
            state.rekey(held, uri, set_key)
        plan.drop(held)
        return True

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
