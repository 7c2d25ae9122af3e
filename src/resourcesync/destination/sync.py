"""Keeping a local copy in step with a Source: baseline, incremental, audit.

Each set is synchronized in two phases. First the documents are read as streams and turned
into a plan in SQLite (what to fetch, what to delete): a 1,000,000-entry Resource List costs
megabytes, not gigabytes. Then the plan is carried out by an asyncio pipeline over one httpx
client: bounded transfers, bounded requests per host, an optional delay between requests to a
host, retries with backoff (`http.open_stream_async`), conditional requests for resources we
already have. Every resource goes through the mirror: a temporary file, checked against the
Source's length and digests, renamed into place — or reported, with the previous copy kept.

Incremental runs start from the cursor, the last change fully applied. When it lies before the
open Change List, the Change List Index and the Change List Archive are walked back to it; a time
range no longer listed anywhere is a gap, reported (`--baseline` recovers). Changes are applied
in order, each URI once, in its final state. A deletion not applied (no `--delete`) is kept as
pending, and a failed fetch is kept to be retried: nothing is silently lost.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import sqlite3
import tempfile
import time
import zipfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import ReadError, ResourceSyncError
from ..http import (
    HttpOptions,
    aiter_body,
    make_async_client,
    make_client,
    open_stream_async,
    origin,
)
from ..model import Resource
from ..sitemap import open_document, walk
from ..sitemap.follow import FOLLOW_INDEX
from ..w3cdt import format_w3c, parse_w3c
from .discover import SetInfo, SourceInfo, discover
from .mirror import IntegrityError, Mapping, Mirror, UnsafePath
from .state import Cursor, DestinationState

__all__ = ["AuditReport", "SetReport", "SyncOptions", "SyncReport", "audit", "sync"]

STATE_FILE = "state.sqlite"
#: Connections per HTTP client in the transfer pipeline (see `_fetch_all`).
POOL = 4
EXAMPLES = 10


@dataclass
class SyncOptions:
    delete: bool = False
    dry_run: bool = False
    baseline: bool = False
    via: str = "auto"
    transfers: int = 8
    per_host: int = 4
    delay: float = 0.0
    checksum: bool = True
    fsync: bool = False
    #: Extra request headers (e.g. Authorization), sent only to the Source's own hosts.
    headers: dict[str, str] = field(default_factory=dict)
    http: HttpOptions = field(default_factory=HttpOptions)
    mappings: list[tuple[str, Path]] = field(default_factory=list)
    set: str | None = None


@dataclass
class Problem:
    uri: str
    message: str


@dataclass
class SetReport:
    name: str
    mode: str = ""
    via: str = "lists"
    planned: int = 0
    fetched: int = 0
    not_modified: int = 0
    unchanged: int = 0
    deleted: int = 0
    pending_deletes: int = 0
    failed: int = 0
    refused: int = 0
    bytes: int = 0
    changes: int = 0
    gap: str | None = None
    cursor: str | None = None
    problems: list[Problem] = field(default_factory=list)

    def problem(self, uri: str, message: str) -> None:
        if len(self.problems) < 1000:
            self.problems.append(Problem(uri, message))


@dataclass
class SyncReport:
    source: str
    dest: str
    how: str
    sets: list[SetReport]
    seconds: float = 0.0
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return all(s.failed == 0 and s.refused == 0 and s.gap is None for s in self.sets)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        out["seconds"] = round(self.seconds, 3)
        return out


Progress = Callable[[str, int, int, int], None]  # (phase, done, total, bytes)


class _Plan:
    """The work for one set, in a temporary SQLite table (flat memory whatever the size)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        db.execute(
            "CREATE TEMP TABLE IF NOT EXISTS plan (seq INTEGER PRIMARY KEY, uri TEXT UNIQUE, "
            "action TEXT, length INTEGER, hashes TEXT, lastmod TEXT, datetime TEXT)"
        )
        db.execute("CREATE TEMP TABLE IF NOT EXISTS seen (uri TEXT PRIMARY KEY)")
        db.execute("DELETE FROM plan")
        db.execute("DELETE FROM seen")
        self.batch: list[tuple[Any, ...]] = []

    def add(self, uri: str, action: str, res: Resource | None = None) -> None:
        """Plan an action for a URI; a later one for the same URI replaces it (final state)."""
        self.batch.append(
            (
                uri,
                action,
                res.length if res else None,
                json.dumps(res.hashes) if res and res.hashes else None,
                format_w3c(res.lastmod) if res and res.lastmod else None,
                format_w3c(res.change_time) if res and res.change_time else None,
            )
        )
        if len(self.batch) >= 2000:
            self.flush()

    def flush(self) -> None:
        if self.batch:
            # Deleting first moves a URI planned again to the end: changes apply in order of
            # their last occurrence.
            self.db.executemany("DELETE FROM plan WHERE uri = ?", [(b[0],) for b in self.batch])
            self.db.executemany(
                "INSERT OR REPLACE INTO plan (uri, action, length, hashes, lastmod, datetime) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                self.batch,
            )
            self.batch.clear()

    def seen(self, uris: list[str]) -> None:
        self.db.executemany("INSERT OR IGNORE INTO seen (uri) VALUES (?)", [(u,) for u in uris])

    def count(self, action: str | None = None) -> int:
        self.flush()
        if action is None:
            return int(self.db.execute("SELECT COUNT(*) FROM plan").fetchone()[0])
        q = "SELECT COUNT(*) FROM plan WHERE action = ?"
        return int(self.db.execute(q, (action,)).fetchone()[0])

    def rows(self, action: str) -> Iterator[tuple[str, Resource]]:
        self.flush()
        last = 0
        while True:
            batch = self.db.execute(
                "SELECT seq, uri, length, hashes, lastmod, datetime FROM plan "
                "WHERE action = ? AND seq > ? ORDER BY seq LIMIT 1000",
                (action, last),
            ).fetchall()
            if not batch:
                return
            for seq, uri, length, hashes, lastmod, when in batch:
                last = seq
                res = Resource(
                    loc=uri,
                    length=length,
                    hashes=json.loads(hashes) if hashes else {},
                    lastmod=parse_w3c(lastmod) if lastmod else None,
                    datetime=parse_w3c(when) if when else None,
                )
                yield uri, res


def _same(known_hashes: dict[str, str], known_length: int | None, res: Resource) -> bool:
    """Whether what we hold is what the Source describes (by digest when both have one)."""
    common = [a for a in res.hashes if a in known_hashes]
    if common:
        return all(known_hashes[a] == res.hashes[a] for a in common) and (
            res.length is None or known_length is None or res.length == known_length
        )
    return res.length is not None and res.length == known_length and bool(known_hashes)


class _Syncer:
    def __init__(
        self,
        info: SourceInfo,
        dest: Path,
        options: SyncOptions,
        progress: Progress | None,
    ) -> None:
        self.info = info
        self.dest = dest
        self.options = options
        self.progress = progress
        # The default mapping first: a user's --map for the same prefix overrides it.
        maps = [Mapping(info.base, dest.resolve())] if info.base else []
        maps += [Mapping(p, d.resolve()) for p, d in options.mappings]
        self.mirror = Mirror(dest, maps, fsync=options.fsync, dry_run=options.dry_run)
        state_path = self.mirror.state_dir / STATE_FILE
        self._scratch: str | None = None
        if options.dry_run and not state_path.exists():
            # A dry run creates nothing in DEST: a first run is planned on a scratch state.
            self._scratch = tempfile.mkdtemp(prefix="resourcesync-dry-run-")
            state_path = Path(self._scratch) / STATE_FILE
        self.state = DestinationState(state_path)
        self._records: list[tuple[Any, ...]] = []
        self.client = make_client(options.http)

    def close(self) -> None:
        self.client.close()
        self.state.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    # -- per set ---------------------------------------------------------------------------

    def run_set(self, s: SetInfo) -> SetReport:
        report = SetReport(name=s.name)
        key = self.set_key(s)
        state = self.state
        if self.options.baseline and not self.options.dry_run:
            state.reset(key)
        cursor = state.cursor(key)
        plan = _Plan(state.db)
        if cursor is None:
            report.mode = "baseline"
            at = self._plan_baseline(s, key, plan, report)
            new_cursor = Cursor(at) if at is not None else None
        else:
            report.mode = "incremental"
            new_cursor = self._plan_incremental(s, key, plan, report, cursor)
            if report.gap is not None:
                return report
        self._carry_out(plan, key, report, new_cursor)
        return report

    def _carry_out(
        self, plan: _Plan, key: str, report: SetReport, new_cursor: Cursor | None
    ) -> None:
        """Fetch and delete as planned (and retry earlier failures, apply pending deletions
        when asked), then move the cursor."""
        state = self.state
        for uri, expected, _ in state.failures(key):
            plan.add(
                uri,
                "fetch",
                Resource(
                    loc=uri, length=expected.get("length"), hashes=expected.get("hashes") or {}
                ),
            )
        if self.options.delete:
            for uri in state.pending_deletes(key):
                plan.add(uri, "delete")
        report.planned = plan.count("fetch")
        if report.via != "dumps" or report.planned:
            asyncio.run(self._fetch_all(plan, key, report))
        self._apply_deletes(plan, key, report)
        report.pending_deletes = len(state.pending_deletes(key))
        if new_cursor is not None and not self.options.dry_run:
            state.set_cursor(
                key,
                new_cursor,
                baseline_at=new_cursor.datetime if report.mode == "baseline" else None,
            )
        if new_cursor is not None:
            report.cursor = format_w3c(new_cursor.datetime)

    # -- planning: baseline ------------------------------------------------------------------

    def _plan_baseline(
        self, s: SetInfo, key: str, plan: _Plan, report: SetReport
    ) -> datetime | None:
        via = self.options.via
        if via in ("dumps", "auto") and s.url("resourcedump") and not self.options.dry_run:
            try:
                return self._baseline_from_dumps(s, key, plan, report)
            except ResourceSyncError as exc:
                if via == "dumps":
                    raise
                report.problem(s.url("resourcedump") or "", f"dump not usable ({exc}); lists used")
                report.via = "lists"
        elif via == "dumps":
            raise ReadError("the Source offers no Resource Dump", source=s.capabilitylist)
        url = s.url("resourcelist")
        if url is None:
            raise ReadError("the Source offers no Resource List", source=s.capabilitylist)
        at: datetime | None = None
        seen: list[str] = []
        for visit in walk(url, mode=FOLLOW_INDEX, client=self.client):
            doc = visit.reader.document
            if at is None:
                at = doc.at or doc.completed
            if doc.index:
                for _ in visit.entries():
                    pass
                continue
            for _, res in visit.entries():
                seen.append(res.loc)
                if len(seen) >= 2000:
                    plan.seen(seen)
                    seen.clear()
                self._plan_fetch(res, plan, report)
        plan.seen(seen)
        self._plan_extras(key, plan, report)
        return at

    def _plan_fetch(self, res: Resource, plan: _Plan, report: SetReport) -> None:
        uri = res.loc
        try:
            path = self.mirror.path_for(uri)
        except UnsafePath as exc:
            report.refused += 1
            report.problem(uri, f"refused: {exc.message}")
            return
        known = self.state.known(uri)
        if (
            known is not None
            and _same(known.hashes, known.length, res)
            and self._intact(uri, path, known.length, res)
        ):
            report.unchanged += 1
            return
        plan.add(uri, "fetch", res)

    def _verified_copy(
        self, uri: str, path: Path, length: int | None, hashes: dict[str, str]
    ) -> bool:
        """The local file has the length and (first known) digest we recorded for it."""
        algos = [a for a in hashes if a in ("md5", "sha-1", "sha-256")][:1]
        got = self.mirror.local_digests(uri, algos or ["md5"])
        if got is None or (length is not None and got[0] != length):
            return False
        return not algos or got[1].get(algos[0]) == hashes[algos[0]]

    def _intact(self, uri: str, path: Path, length: int | None, res: Resource) -> bool:
        """Whether the local file is still what we wrote: its size always; its digest too
        when a baseline was asked for (a repair run) and the Source gives one."""
        try:
            size = path.stat().st_size
        except OSError:
            return False
        if length is not None and size != length:
            return False
        if self.options.baseline and self.options.checksum and res.hashes:
            algos = [a for a in res.hashes if a in ("md5", "sha-1", "sha-256")][:1]
            if algos:
                got = self.mirror.local_digests(uri, algos)
                return got is not None and got[1].get(algos[0]) == res.hashes[algos[0]]
        return True

    def _plan_extras(self, key: str, plan: _Plan, report: SetReport) -> None:
        """Resources we hold that the Source no longer lists: deleted with --delete, else kept
        as pending deletions."""
        plan.flush()
        rows = self.state.db.execute(
            "SELECT uri FROM resources WHERE set_key = ? AND uri NOT IN (SELECT uri FROM seen)",
            (key,),
        ).fetchall()
        for (uri,) in rows:
            plan.add(uri, "delete")

    def _baseline_from_dumps(
        self, s: SetInfo, key: str, plan: _Plan, report: SetReport
    ) -> datetime | None:
        url = s.url("resourcedump")
        assert url is not None
        report.via = "dumps"
        with open_document(url, client=self.client) as reader:
            doc = reader.document
            packages = list(reader)
        at = doc.at or doc.completed
        work = Path(tempfile.mkdtemp(prefix="dump-", dir=self.mirror.state_dir))
        try:
            for package in packages:
                self._apply_package(package, key, plan, report, work)
        finally:
            for p in work.glob("*"):
                p.unlink(missing_ok=True)
            work.rmdir()
        self._plan_extras(key, plan, report)
        return at

    def _apply_package(
        self, package: Resource, key: str, plan: _Plan, report: SetReport, work: Path
    ) -> None:
        """Download a package, check it, extract what its manifest lists to safe paths."""
        zpath = work / "package.zip"
        asyncio.run(self._download(package, zpath))
        with zipfile.ZipFile(zpath) as zf:
            try:
                manifest_bytes = zf.read("manifest.xml")
            except KeyError:
                raise ReadError("a dump package without manifest.xml", source=package.loc) from None
        with open_document(manifest_bytes, name=package.loc + "#manifest.xml") as reader:
            entries = list(reader)
        plan.seen([e.loc for e in entries])
        for res, outcome in self.mirror.extract(zpath, entries):
            if isinstance(outcome, ResourceSyncError):
                # A member that cannot be used is fetched on its own instead (if its URI is
                # safe); the package's problem is reported, not counted as a failure twice.
                report.problem(res.loc, f"not taken from the package: {outcome.message}")
                try:
                    self.mirror.path_for(res.loc)
                except UnsafePath as exc:
                    report.refused += 1
                    report.problem(res.loc, f"refused: {exc.message}")
                    continue
                plan.add(res.loc, "fetch", res)
                continue
            report.fetched += 1
            report.bytes += outcome.length
            self.state.record(
                res.loc,
                self.mirror.relpath(res.loc),
                outcome.length,
                outcome.hashes,
                res.lastmod,
                None,
                None,
                key,
            )

    async def _download(self, package: Resource, target: Path) -> None:
        async with (
            make_async_client(self.options.http) as client,
            open_stream_async(package.loc, client=client) as response,
        ):
            size = 0
            with open(target, "wb") as f:
                async for chunk in aiter_body(response, package.loc):
                    size += len(chunk)
                    f.write(chunk)
        if package.length is not None and size != package.length:
            raise ReadError(
                f"package is {size} bytes, the Resource Dump says {package.length}",
                source=package.loc,
            )

    # -- planning: incremental -----------------------------------------------------------------

    def _plan_incremental(
        self, s: SetInfo, key: str, plan: _Plan, report: SetReport, cursor: Cursor
    ) -> Cursor:
        url = s.url("changelist")
        if url is None:
            raise ReadError(
                "the Source offers no Change List to follow (use --baseline)",
                source=s.capabilitylist,
            )
        lists = self._lists_covering(url, s, cursor, report)
        if lists is None:
            return cursor

        def entries() -> Iterator[Resource]:
            for list_url in lists:
                with open_document(list_url, client=self.client) as reader:
                    reader.document  # noqa: B018
                    yield from reader

        return self._plan_changes(entries(), plan, report, cursor)

    def _plan_changes(
        self, entries: Iterable[Resource], plan: _Plan, report: SetReport, cursor: Cursor
    ) -> Cursor:
        """Plan the changes after the cursor (each URI once, its final state); returns the
        cursor the plan brings the copy to."""
        last = cursor
        passed_cursor = cursor.uri == ""
        for res in entries:
            t = res.change_time
            if t is not None:
                if t < cursor.datetime:
                    continue
                if t == cursor.datetime and not passed_cursor:
                    if res.loc == cursor.uri:
                        passed_cursor = True
                    continue
            report.changes += 1
            try:
                self.mirror.path_for(res.loc)
            except UnsafePath as exc:
                report.refused += 1
                report.problem(res.loc, f"refused: {exc.message}")
                continue
            plan.add(res.loc, "delete" if res.change == "deleted" else "fetch", res)
            if t is not None:
                last = Cursor(t, res.loc)
        # A fetch planned for something we already hold as described is not needed.
        for uri, res in plan.rows("fetch"):
            known = self.state.known(uri)
            if known is not None and _same(known.hashes, known.length, res):
                try:
                    if self.mirror.path_for(uri).is_file():
                        plan.db.execute("DELETE FROM plan WHERE uri = ?", (uri,))
                        report.unchanged += 1
                except UnsafePath:
                    pass
        return last

    def apply_changes(self, s: SetInfo, entries: Iterable[Resource]) -> SetReport:
        """Apply a batch of changes (a change notification's entries) with the same engine and
        guarantees as an incremental run: after the cursor only, in order, each URI once."""
        report = SetReport(name=s.name, mode="notification")
        key = self.set_key(s)
        cursor = self.state.cursor(key)
        if cursor is None:
            raise ResourceSyncError("no baseline yet for this set", source=s.capabilitylist)
        plan = _Plan(self.state.db)
        new_cursor = self._plan_changes(entries, plan, report, cursor)
        self._carry_out(plan, key, report, new_cursor)
        return report

    @staticmethod
    def set_key(s: SetInfo) -> str:
        return s.capabilitylist or next(iter(s.documents.values()), s.name)

    def _lists_covering(
        self, url: str, s: SetInfo, cursor: Cursor, report: SetReport
    ) -> list[str] | None:
        """The Change Lists (in order) that together cover everything after the cursor; None
        when the Source no longer lists some of that time (a gap, reported)."""
        candidates: dict[str, tuple[datetime | None, datetime | None]] = {}
        with open_document(url, client=self.client) as reader:
            doc = reader.document
            if doc.index:
                for res in reader:
                    candidates[res.loc] = (res.from_, res.until)
            else:
                candidates[url] = (doc.from_, doc.until)
            archive = doc.link("archives")
        earliest = min((f for f, _ in candidates.values() if f is not None), default=None)
        if earliest is None or earliest > cursor.datetime:
            # Walk back through the Change List Archive.
            archive_url = archive.href if archive else s.url("changelist-archive")
            if archive_url:
                for visit in walk(archive_url, mode=FOLLOW_INDEX, client=self.client):
                    for _, res in visit.entries():
                        if not visit.reader.document.index:
                            candidates.setdefault(res.loc, (res.from_, res.until))
            earliest = min((f for f, _ in candidates.values() if f is not None), default=None)
        if earliest is not None and earliest > cursor.datetime:
            report.gap = (
                f"the Source lists changes from {format_w3c(earliest)} on; this copy is at "
                f"{format_w3c(cursor.datetime)}: the changes between are no longer listed "
                "(run with --baseline)"
            )
            return None
        chosen = [
            (f, u, loc) for loc, (f, u) in candidates.items() if u is None or u >= cursor.datetime
        ]
        chosen.sort(key=lambda x: (x[0] is None, x[0] or cursor.datetime))
        return [loc for _, _, loc in chosen]

    # -- carrying the plan out -----------------------------------------------------------------

    async def _fetch_all(self, plan: _Plan, key: str, report: SetReport) -> None:
        if self.options.dry_run:
            report.planned = plan.count("fetch")
            return
        total = plan.count("fetch")
        if total == 0:
            return
        transfers = asyncio.Semaphore(self.options.transfers)
        hosts: dict[str, asyncio.Semaphore] = defaultdict(
            lambda: asyncio.Semaphore(self.options.per_host)
        )
        next_slot: dict[str, float] = defaultdict(float)
        done = 0
        pending: set[asyncio.Task[None]] = set()

        async def one(client: Any, uri: str, res: Resource) -> None:
            nonlocal done
            host = urlsplit(uri).netloc.lower()
            async with transfers, hosts[host]:
                if self.options.delay:
                    now = time.monotonic()
                    wait = next_slot[host] - now
                    next_slot[host] = max(now, next_slot[host]) + self.options.delay
                    if wait > 0:
                        await asyncio.sleep(wait)
                await self._fetch_one(client, uri, res, key, report)
            done += 1
            if self.progress:
                self.progress("fetch", done, total, report.bytes)

        # Several small connection pools rather than one large one: httpcore's pool scans
        # every connection for every request, which costs more than the transfers themselves
        # past a few dozen connections.
        shards = max(1, (self.options.transfers + POOL - 1) // POOL)
        clients = [make_async_client(self.options.http) for _ in range(shards)]
        try:
            for n, (uri, res) in enumerate(plan.rows("fetch")):
                task = asyncio.create_task(one(clients[n % shards], uri, res))
                pending.add(task)
                task.add_done_callback(pending.discard)
                if len(pending) >= self.options.transfers * 2:
                    await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if pending:
                await asyncio.gather(*pending)
        finally:
            self._flush_records()
            for c in clients:
                await c.aclose()

    async def _fetch_one(
        self, client: Any, uri: str, res: Resource, key: str, report: SetReport
    ) -> None:
        expected = {"length": res.length, "hashes": res.hashes}
        last_error = ""
        for attempt in (1, 2):
            headers: dict[str, str] = {}
            known = self.state.known(uri)
            if known is not None and attempt == 1 and (self.mirror.dest / known.path).is_file():
                if known.etag:
                    headers["If-None-Match"] = known.etag
                if known.last_modified:
                    headers["If-Modified-Since"] = known.last_modified
            try:
                async with open_stream_async(
                    uri, client=client, headers=headers, accept=(304,)
                ) as response:
                    if response.status_code == 304:
                        # Not modified at the Source; trusted only if our copy is still what
                        # we wrote (and, when the list gives digests, what it describes).
                        local = self.mirror.dest / known.path if known is not None else None
                        if (
                            known is not None
                            and local is not None
                            and (not res.hashes or _same(known.hashes, known.length, res))
                            and self._verified_copy(uri, local, known.length, known.hashes)
                        ):
                            report.not_modified += 1
                            self.state.db.execute("DELETE FROM failed WHERE uri = ?", (uri,))
                            return
                        continue  # the Source says otherwise: fetch it unconditionally
                    hashes = res.hashes if self.options.checksum else {}
                    # Written from the event loop: handing small files to worker threads was
                    # measured to cost more (GIL hand-offs) than the file system calls it hid.
                    with self.mirror.incoming(uri, length=res.length, hashes=hashes) as inc:
                        async for chunk in aiter_body(response, uri):
                            inc.write(chunk)
                        written = inc.commit()
                    # Recorded in batches: a run killed before a batch is written fetches those
                    # few again (the files themselves are in place and verified).
                    self._records.append(
                        (
                            uri,
                            written.path.relative_to(self.mirror.dest).as_posix(),
                            written.length,
                            written.hashes,
                            res.lastmod,
                            response.headers.get("ETag"),
                            response.headers.get("Last-Modified"),
                            key,
                        )
                    )
                    if len(self._records) >= 256:
                        self._flush_records()
                    report.fetched += 1
                    report.bytes += written.length
                    return
            except UnsafePath as exc:
                report.refused += 1
                report.problem(uri, f"refused: {exc.message}")
                return
            except IntegrityError as exc:
                last_error = exc.message
                continue  # retried once, then reported; the previous copy stays
            except (ReadError, ResourceSyncError) as exc:
                last_error = exc.message if isinstance(exc, ResourceSyncError) else str(exc)
                break
            except OSError as exc:
                last_error = f"cannot write: {exc.strerror or exc}"
                break
        report.failed += 1
        report.problem(uri, last_error)
        self.state.fail(uri, expected, last_error, key)

    def _flush_records(self) -> None:
        records, self._records = self._records, []
        self.state.record_many(records)

    def _apply_deletes(self, plan: _Plan, key: str, report: SetReport) -> None:
        for uri, res in plan.rows("delete"):
            if not self.options.delete:
                if not self.options.dry_run:
                    self.state.pend_delete(uri, res.change_time, key)
                continue
            try:
                removed = self.mirror.delete(uri)
            except UnsafePath as exc:
                report.refused += 1
                report.problem(uri, f"refused: {exc.message}")
                continue
            except OSError as exc:
                report.failed += 1
                report.problem(uri, f"cannot delete: {exc.strerror or exc}")
                continue
            if removed:
                report.deleted += 1
            if not self.options.dry_run:
                self.state.forget(uri)


def _scoped(options: SyncOptions, source: str) -> SyncOptions:
    """Credentials (`--header`, `--token`) go to the Source's own host on every request —
    documents and resources — and to no other host."""
    if not options.headers or options.http.scoped_headers:
        return options
    parts = urlsplit(source)
    if not parts.hostname:
        return options
    hosts = frozenset({origin(parts.scheme, parts.hostname, parts.port)})
    http = dataclasses.replace(
        options.http, scoped_headers=dict(options.headers), scoped_hosts=hosts
    )
    return dataclasses.replace(options, http=http)


def sync(
    source: str,
    dest: Path,
    options: SyncOptions | None = None,
    *,
    progress: Progress | None = None,
) -> SyncReport:
    """Bring DEST in step with SOURCE (a site, a Source Description, a Capability List, a
    Resource List or Change List; a URL or a local file)."""
    opts = _scoped(options or SyncOptions(), source)
    started = time.monotonic()
    with make_client(opts.http) as client:
        info = discover(source, client=client, choose=opts.set)
    if not opts.dry_run:
        dest.mkdir(parents=True, exist_ok=True)
    syncer = _Syncer(info, dest, opts, progress)
    try:
        if not opts.dry_run:
            # Temporary files are left only by a run that did not finish: look for them then
            # (the walk over the whole copy is not free on a large tree).
            if syncer.state.get("running") is not None:
                syncer.mirror.cleanup()
            syncer.state.put("running", str(time.time()))
        reports = [syncer.run_set(s) for s in info.sets]
        if not opts.dry_run:
            syncer.state.db.execute("DELETE FROM meta WHERE key = 'running'")
    finally:
        syncer.close()
    return SyncReport(
        source=source,
        dest=str(dest),
        how=info.how,
        sets=reports,
        seconds=time.monotonic() - started,
        dry_run=opts.dry_run,
    )


# -- audit -------------------------------------------------------------------------------------


@dataclass
class AuditReport:
    source: str
    dest: str
    expected: int = 0
    in_sync: int = 0
    missing: int = 0
    extra: int = 0
    different: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.extra == 0 and self.different == 0

    def note(self, kind: str, uri: str) -> None:
        ex = self.examples.setdefault(kind, [])
        if len(ex) < EXAMPLES:
            ex.append(uri)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["in_sync_ok"] = self.ok
        out["seconds"] = round(self.seconds, 3)
        return out


def audit(source: str, dest: Path, options: SyncOptions | None = None) -> AuditReport:
    """Compare DEST with the Source's current state: its Resource List plus the changes listed
    after the Resource List's `at`. Missing, extra and different resources (by digest when both
    sides have one, else by length)."""
    opts = _scoped(options or SyncOptions(), source)
    started = time.monotonic()
    with make_client(opts.http) as client:
        info = discover(source, client=client, choose=opts.set)
        maps = [Mapping(info.base, dest.resolve())] if info.base else []
        maps += [Mapping(p, d.resolve()) for p, d in opts.mappings]
        mirror = Mirror(dest, maps, dry_run=True)
        report = AuditReport(source=source, dest=str(dest))
        db = sqlite3.connect(":memory:")
        db.execute(
            "CREATE TABLE expected (uri TEXT PRIMARY KEY, length INTEGER, hashes TEXT, "
            "gone INTEGER)"
        )
        for s in info.sets:
            _expected_state(s, db, client)
        # Every local path accounted for (expected, or already reported as extra).
        db.execute("CREATE TABLE accounted (path TEXT PRIMARY KEY)")
        state_path = mirror.state_dir / STATE_FILE
        if state_path.exists():
            with DestinationState(state_path) as state:
                for known in state.all_known():
                    row = db.execute(
                        "SELECT gone FROM expected WHERE uri = ?", (known.uri,)
                    ).fetchone()
                    if row is None or row[0]:
                        try:
                            extra_path = mirror.path_for(known.uri)
                            if extra_path.is_file():
                                report.extra += 1
                                report.note("extra", known.uri)
                                db.execute(
                                    "INSERT OR IGNORE INTO accounted VALUES (?)",
                                    (str(extra_path),),
                                )
                        except UnsafePath:
                            pass
        for uri, length, hashes in db.execute(
            "SELECT uri, length, hashes FROM expected WHERE gone = 0 ORDER BY uri"
        ):
            report.expected += 1
            try:
                path = mirror.path_for(uri)
            except UnsafePath:
                report.missing += 1
                report.note("missing", uri)
                continue
            db.execute("INSERT OR IGNORE INTO accounted VALUES (?)", (str(path),))
            if not path.is_file():
                report.missing += 1
                report.note("missing", uri)
                continue
            want = json.loads(hashes) if hashes else {}
            algos = [a for a in want if a in ("md5", "sha-1", "sha-256")]
            got = mirror.local_digests(uri, algos[:1] or ["md5"])
            if got is None:
                report.missing += 1
                report.note("missing", uri)
                continue
            size, digests = got
            same = (length is None or size == length) and all(
                digests.get(a) == want[a] for a in algos[:1]
            )
            if same:
                report.in_sync += 1
            else:
                report.different += 1
                report.note("different", uri)
        # Files in DEST that no URI of the Source accounts for (put there by hand, or left by
        # another tool): extra too, named by their local path.
        for path in _local_files(mirror.dest, mirror.state_dir):
            if db.execute("SELECT 1 FROM accounted WHERE path = ?", (str(path),)).fetchone():
                continue
            report.extra += 1
            report.note("extra", f"file {path}")
    report.seconds = time.monotonic() - started
    return report


def _local_files(root: Path, state_dir: Path) -> Iterator[Path]:
    """Regular files under root, the state folder and our temporary files left out."""
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root:
            dirnames[:] = [d for d in dirnames if root / d != state_dir]
        for name in filenames:
            if name.startswith(".") and name.endswith(".part"):
                continue
            path = Path(dirpath) / name
            if path.is_file():
                yield path


def _expected_state(s: SetInfo, db: sqlite3.Connection, client: Any) -> None:
    url = s.url("resourcelist")
    if url is None:
        raise ReadError(
            "the Source offers no Resource List to audit against", source=s.capabilitylist
        )
    at: datetime | None = None
    batch: list[tuple[Any, ...]] = []
    for visit in walk(url, mode=FOLLOW_INDEX, client=client):
        doc = visit.reader.document
        if at is None:
            at = doc.at
        if doc.index:
            for _ in visit.entries():
                pass
            continue
        for _, res in visit.entries():
            batch.append((res.loc, res.length, json.dumps(res.hashes), 0))
            if len(batch) >= 2000:
                db.executemany("INSERT OR REPLACE INTO expected VALUES (?, ?, ?, ?)", batch)
                batch.clear()
    db.executemany("INSERT OR REPLACE INTO expected VALUES (?, ?, ?, ?)", batch)
    cl = s.url("changelist")
    if cl is None or at is None:
        return
    # The changes after the Resource List's `at`, applied in order.
    for visit in walk(cl, mode=FOLLOW_INDEX, client=client):
        if visit.reader.document.index:
            for _ in visit.entries():
                pass
            continue
        for _, res in visit.entries():
            t = res.change_time
            if t is not None and t <= at:
                continue
            db.execute(
                "INSERT OR REPLACE INTO expected VALUES (?, ?, ?, ?)",
                (res.loc, res.length, json.dumps(res.hashes), 1 if res.change == "deleted" else 0),
            )
