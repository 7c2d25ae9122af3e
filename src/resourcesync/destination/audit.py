"""Audit: compare a copy with the Source's current state — its Resource List plus the changes
listed after the Resource List's `at` (and `lookback` behind it) — without changing anything."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import tempfile
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import ReadError
from ..filters import PathFilter
from ..hashing import ALGORITHMS
from ..http import make_client
from ..iri import normal_uri
from ..model import CHANGES, Resource
from ..sitemap import walk
from ..sitemap.follow import FOLLOW_INDEX, earliest_at
from ..sniff import WINDOW, binary_type, looks_like_html, not_a_page_for
from ..w3cdt import parse_w3c, seconds_before
from .changeplan import change_entries, lists_covering
from .discover import SetInfo, discover
from .dumps import dumped_changes, dumped_resources
from .mirror import Mapping, Mirror, UnsafePath
from .options import SyncOptions, scoped
from .plan import expect
from .remap import Elsewhere
from .report import AuditReport
from .state import CopyState, DestinationState

__all__ = ["STATE_FILE", "audit"]

STATE_FILE = "state.sqlite"


def audit(
    source: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    options: SyncOptions | None = None,
    *,
    examples: int | None = 10,
) -> AuditReport:
    """Compare DEST with the Source's current state: its Resource List (without one, its
    Resource Dump's manifests) plus the changes listed after the Resource List's `at` (and
    `options.lookback` behind it, as `sync` reads them).
    Missing, extra and different resources (by digest when both sides have one; else by
    length, and by `<lastmod>` against the one the copy's state recorded with what it holds)."""
    source, dest = os.fspath(source), Path(dest)
    opts = scoped(options or SyncOptions(), source)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        client = stack.enter_context(make_client(opts.http))
        info = discover(source, client=client, choose=opts.set)
        maps = [Mapping(info.base, dest.resolve())] if info.base else []
        maps += [Mapping(p, d.resolve()) for p, d in opts.mappings]
        mirror = Mirror(dest, maps, dry_run=True)
        report = AuditReport(source=source, dest=str(dest), limit=examples)
        work = stack.enter_context(scratch(mirror))
        # On disk, not in memory: it holds a row per resource (and per file of the copy), and
        # memory must not grow with the number of resources. Throw-away: no journal, no sync.
        db = stack.enter_context(contextlib.closing(sqlite3.connect(work / "audit.sqlite")))
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        db.execute(
            # By the URI's normal form (`iri.normal_uri`): a Source that spells a resource
            # two ways (its Change List otherwise than its Resource List) lists one resource.
            "CREATE TABLE expected (key TEXT PRIMARY KEY, uri TEXT, length INTEGER, "
            "hashes TEXT, gone INTEGER, lastmod TEXT, type TEXT)"
        )
        for s in info.sets:
            report.warnings += (f"{s.capabilitylist or s.name}: {w}" for w in s.warnings())
            _expected_state(s, db, client, opts, work)
        # Every local path accounted for (expected, or already reported as extra).
        db.execute("CREATE TABLE accounted (path TEXT PRIMARY KEY)")
        # The `<lastmod>` the copy recorded with each resource it holds, and the MD5 of the
        # bytes it wrote.
        db.execute("CREATE TABLE recorded (key TEXT PRIMARY KEY, lastmod TEXT, md5 TEXT)")
        mirror.check_state_dir(create=False)
        state_path = mirror.state_dir / STATE_FILE
        comparison = _Comparison(mirror, db, report, opts.filter)
        # The copy's state, where it is kept (a fleet keeps it in its store): the URIs it
        # holds that the Source no longer lists are named as extra by their URI.
        opened = opts.state or (DestinationState.reading if state_path.exists() else None)
        if opened is not None:
            with contextlib.closing(opened(state_path)) as state:
                comparison.held(state)
        comparison.expected()
        comparison.unknown()
        comparison.strays()
    report.seconds = time.monotonic() - started
    return report


class _Comparison:
    """The copy against what the audit expects (the `expected` table), in its steps: what
    the copy's state holds, each resource expected, those whose change is unknown, the files
    no URI accounts for. Every local path looked at is `accounted`."""

    def __init__(
        self, mirror: Mirror, db: sqlite3.Connection, report: AuditReport, flt: PathFilter
    ) -> None:
        self.mirror = mirror
        self.db = db
        self.report = report
        self.flt = flt

    def excluded(self, uri: str) -> bool:
        """Left out by --include/--exclude: neither expected nor extra."""
        if not self.flt:
            return False
        try:
            return self.flt.excluded(self.mirror.relpath(uri))
        except UnsafePath:
            return False

    def held(self, state: CopyState) -> None:
        """What the copy's state holds: the URIs the Source no longer lists are extra (named
        by URI), and what it recorded of each is kept for the comparison."""
        # Audited under other mappings than the copy was made with (a --map forgotten), every
        # file held would be missing and extra, and the advice to repair would move the copy
        # to the wrong mappings: said as `sync` says it.
        elsewhere = Elsewhere(self.mirror)
        for known in state.all_known():
            elsewhere.where(known.uri, known.path)
            if self.excluded(known.uri):
                continue
            key = normal_uri(known.uri)
            self.db.execute(
                "INSERT OR REPLACE INTO recorded VALUES (?, ?, ?)",
                (
                    key,
                    _recorded_stamp(known.lastmod) if known.lastmod else None,
                    known.hashes.get("md5"),
                ),
            )
            row = self.db.execute("SELECT gone FROM expected WHERE key = ?", (key,)).fetchone()
            if row is None or row[0] == _GONE:
                try:
                    extra_path = self.mirror.path_for(known.uri)
                except UnsafePath:
                    # Held under a URI this Source's mapping does not cover: another
                    # Source's, sharing DEST. Neither this Source's nor extra (`sync
                    # --repair --delete` leaves it, as the copy holds it).
                    if known.path and (self.mirror.dest / known.path).is_file():
                        self.report.others += 1
                        self.db.execute(
                            "INSERT OR IGNORE INTO accounted VALUES (?)",
                            (str(self.mirror.dest / known.path),),
                        )
                    continue
                if extra_path.is_file():
                    self.report.extra += 1
                    self.report.note("extra", known.uri)
                    self.db.execute(
                        "INSERT OR IGNORE INTO accounted VALUES (?)", (str(extra_path),)
                    )
        if elsewhere.count:
            raise elsewhere.error()

    def expected(self) -> None:
        """Each resource expected, against the file the copy holds for it."""
        for uri, length, hashes, lastmod, kind, recorded, wrote in self.db.execute(
            "SELECT e.uri, e.length, e.hashes, e.lastmod, e.type, r.lastmod, r.md5 FROM expected e "
            "LEFT JOIN recorded r ON r.key = e.key WHERE e.gone = 0 ORDER BY e.uri"
        ):
            if self.excluded(uri):
                continue
            self.report.expected += 1
            try:
                path = self.mirror.path_for(uri)
            except UnsafePath:
                self.report.missing += 1
                self.report.note("missing", uri)
                continue
            self.db.execute("INSERT OR IGNORE INTO accounted VALUES (?)", (str(path),))
            if not path.is_file():
                self.report.missing += 1
                self.report.note("missing", uri)
                continue
            want = json.loads(hashes) if hashes else {}
            algos = [a for a in want if a in ALGORITHMS]
            got = self.mirror.local_digests(uri, algos[:1] or ["md5"])
            if got is None:
                self.report.missing += 1
                self.report.note("missing", uri)
                continue
            size, digests = got
            same = (length is None or size == length) and all(
                digests.get(a) == want[a] for a in algos[:1]
            )
            if same and not algos and lastmod is not None and recorded is not None:
                # No digest to compare: the length says little (an edit often keeps it); the
                # Source's <lastmod> against the one recorded with what the copy holds does.
                same = lastmod == recorded
            if same and not algos and wrote is not None and digests.get("md5") != wrote:
                # Not the bytes the sync verified and wrote (edited or cut short here since):
                # without a digest in the list, only the copy's own record tells.
                same = False
            if same and not algos and _page_in_place(path, kind, uri, length):
                # A sign-in or error page written as the resource (by another tool, or before
                # this one checked): nothing else would tell without a digest.
                same = False
            if same:
                self.report.in_sync += 1
            else:
                self.report.different += 1
                self.report.note("different", uri)

    def unknown(self) -> None:
        """Listed last with no change: what the copy should hold cannot be told (as `sync`
        says it on every run). Its file, if any, is not extra."""
        for (uri,) in self.db.execute(
            "SELECT uri FROM expected WHERE gone = ? ORDER BY uri", (_UNKNOWN,)
        ).fetchall():
            if self.excluded(uri):
                continue
            self.report.unknown += 1
            self.report.note("unknown", uri)
            with contextlib.suppress(UnsafePath):
                path = self.mirror.path_for(uri)
                self.db.execute("INSERT OR IGNORE INTO accounted VALUES (?)", (str(path),))

    def strays(self) -> None:
        """Files in DEST that no URI of the Source accounts for (put there by hand, or left by
        another tool): extra too, named by their local path."""
        for text in self.mirror.files():
            path = Path(text)
            if self.db.execute("SELECT 1 FROM accounted WHERE path = ?", (str(path),)).fetchone():
                continue
            if self.flt and self.flt.excluded(path.relative_to(self.mirror.dest).as_posix()):
                continue
            self.report.extra += 1
            self.report.note("extra", f"file {path}")


@contextlib.contextmanager
def scratch(mirror: Mirror) -> Iterator[Path]:
    """A throw-away directory for what an audit holds beside the copy (its tables, a dump's
    package while its manifest is read): in the copy's state directory when it can be written
    (on the copy's file system, sized for it), else in the system's temporary directory (a
    copy audited read-only). Removed afterwards."""
    state = mirror.state_dir
    parent = state if state.is_dir() and os.access(state, os.W_OK | os.X_OK) else None
    with tempfile.TemporaryDirectory(prefix="audit-", dir=parent) as work:
        yield Path(work)


def _expected_state(
    s: SetInfo, db: sqlite3.Connection, client: Any, opts: SyncOptions, work: Path
) -> None:
    """Fill `expected` with the Source's current state: the Resource List at `at` (from a Source
    without one, its Resource Dump's manifests), then every change after `at` in the Change
    Lists that cover that time — the Change List Archive included (issue 10.10) — or, from a
    Source that lists its changes only in a Change Dump, in the packages' manifests (as `sync`
    takes them).

    The changes listed `opts.lookback` behind `at` are applied too, in order, as `sync
    --lookback` reads them behind its cursor: one whose transaction committed after the
    Resource List was made is listed there and missing from it. One the Resource List already
    shows is applied again to the same end (the lists are in order: a later change of the
    same resource comes after it)."""
    url, dump = s.url("resourcelist"), s.url("resourcedump")
    if url is None and dump is None:
        raise ReadError(
            "the Source offers no Resource List (nor Resource Dump) to audit against",
            source=s.capabilitylist,
        )
    at: datetime | None = None
    batch: list[tuple[Any, ...]] = []
    insert = "INSERT OR REPLACE INTO expected VALUES (?, ?, ?, ?, ?, ?, ?)"

    def expected(res: Resource) -> None:
        batch.append(
            (
                normal_uri(res.loc),
                res.loc,
                res.length,
                json.dumps(res.hashes),
                0,
                _stamp(res.lastmod),
                res.type,
            )
        )
        if len(batch) >= 2000:
            db.executemany(insert, batch)
            batch.clear()

    # A time without a zone (or naming a day) read in the lists: the window behind `at` widens
    # by how far such times may be from those meant, as `sync`'s does.
    slack = [0.0]

    def loose(name: str, seconds: float) -> None:
        slack[0] = max(slack[0], seconds)

    if url is None:
        # A Source that publishes its state as a Resource Dump only (as `sync` follows it):
        # what its packages' manifests list, as of the dump's `at`.
        assert dump is not None
        at, dumped = dumped_resources(client, opts.http, s, work, loose)
        for res in dumped:
            if res.change != "deleted":  # a tombstone (as `sync` reads it: `_apply_package`)
                expected(res)
    also = s.more("resourcelist")
    for visit in walk(url, mode=FOLLOW_INDEX, client=client, also=also) if url is not None else ():
        doc = visit.reader.document
        expect(doc.capability, "resourcelist", visit.name)
        at = earliest_at(at, visit)
        for _, res in visit.entries():
            # A document listed there is no resource, nor is a tombstone (as `sync` reads
            # them: `Planner._baseline`); an index's entries are its parts.
            if not doc.index and res.capability is None and res.change != "deleted":
                expected(res)
        slack[0] = max(slack[0], visit.reader.slack)
    db.executemany(insert, batch)
    if at is None:
        return
    cl, cd = s.url("changelist"), s.url("changedump")
    changes: Iterable[Resource]
    if cl is not None:
        lists, gap, _ = lists_covering(client, cl, s, at, slack=slack[0])
        if lists is None:
            raise ReadError(f"cannot tell what the copy should hold: {gap}", source=cl)

        def ignore(uri: str, message: str) -> None:
            pass

        changes = change_entries(client, lists, ignore, loose=loose)
    elif cd is not None:
        changes = dumped_changes(client, opts.http, cd, s, at, work, slack[0], loose)
    else:
        return
    # The changes after the Resource List's `at` (and the window behind it), applied in
    # order. Only `rs:md@datetime` dates a change (core 1.1 §7): an entry with a `<lastmod>`
    # alone is the resource's Last-Modified, so it is applied unless what is expected already
    # is newer.
    behind = seconds_before(at, opts.lookback) if opts.lookback > 0 else None
    widened = opts.lookback if opts.lookback > 0 else float("inf")
    for res in changes:
        if slack[0] > widened:
            widened = slack[0]
            behind = seconds_before(at, widened)
        if res.datetime is not None:
            if res.datetime <= at if behind is None else res.datetime < behind:
                continue
        elif res.lastmod is not None:
            row = db.execute(
                "SELECT lastmod FROM expected WHERE key = ?", (normal_uri(res.loc),)
            ).fetchone()
            if row is not None and row[0] is not None and row[0] > _stamp(res.lastmod):
                continue
        db.execute(
            insert,
            (
                normal_uri(res.loc),
                res.loc,
                res.length,
                json.dumps(res.hashes),
                _GONE if res.change == "deleted" else 0 if res.change in CHANGES else _UNKNOWN,
                _stamp(res.lastmod),
                res.type,
            ),
        )


#: `expected.gone`: listed as deleted; listed last in a Change List with no `change`, or
#: another word than created, updated, deleted (what it became is unknown).
_GONE = 1
_UNKNOWN = 2


def _page_in_place(path: Path, listed: str | None, uri: str, length: int | None) -> bool:
    """Whether the file at `path` is an HTML page (or empty, when the list gives no length)
    while the list gives it a binary format (or, giving none, its name says one:
    `…/paper.pdf`). Not for a text type: a text file may hold HTML source, and only the
    answer's label told the transfer which it was."""
    if not binary_type(not_a_page_for(listed, uri)[0]):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(WINDOW)
            return looks_like_html(head) or (not head and length is None)
    except OSError:
        return False


def _recorded_stamp(text: str) -> str | None:
    try:
        return _stamp(parse_w3c(text))
    except ValueError:
        return None


def _stamp(t: datetime | None) -> str | None:
    """A datetime as text that sorts as time does (UTC, fixed width)."""
    if t is None:
        return None
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
