"""Carrying a plan out: bounded concurrent fetches (per run and per host, with an optional
delay between requests to a host and a circuit breaker: `hosts.py`), conditional requests for
what we hold, verification and atomic writes through the mirror (the deletions, after them,
are `deletions.py`'s). Every
outcome is recorded in the state: a verified resource as soon as its batch is written, a
failure to be retried by the next run."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..errors import Gone, ReadError, ResourceSyncError
from ..hashing import ALGORITHMS, checkable
from ..http import HttpOptions, Unreachable, accept_encoding
from ..http.transfer import Fetched, TransferSession
from ..model import Resource
from .answer import NO_CACHE, cached_before, listed_codings, page_check
from .hosts import Hosts, Slot, host_key
from .mirror import IntegrityError, Located, UnsafePath
from .options import Run
from .plan import UNKNOWN_CHANGE, Plan, same
from .report import Action, SetReport
from .state import Known, change_of, expected_of, keep_links

__all__ = ["Transfer"]

#: Verified resources recorded per state transaction.
RECORD_BATCH = 256
T = TypeVar("T")


async def _in_thread(fn: Callable[[], T]) -> T:
    """`fn()` in a worker thread. Cancelled, it waits for the thread before it says so: a
    commit is never left half done behind the transfer's clean-up."""
    task = asyncio.ensure_future(asyncio.to_thread(fn))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await task
        raise


#: The answers to a resource's GET taken besides 2xx with its content: 304 to a conditional
#: request; and 204 for a resource the list gives as empty (`length="0"`).
_ACCEPT = (304,)
_ACCEPT_EMPTY = (304, 204)


def tell(run: Run, kind: str, uri: str) -> None:
    """What was done to `uri` (created, updated, deleted, pending), to `--verbose`'s listing
    and the library's `on_action`."""
    on_action = run.options.on_action
    if on_action is not None:
        try:
            path = str(run.mirror.relpath(uri))
        except UnsafePath:
            path = None
        on_action(Action(kind, uri, path))


def verified_copy(
    run: Run, uri: str, path: Path, length: int | None, hashes: dict[str, str]
) -> bool:
    """The local file has the length and (first known) digest we recorded for it."""
    algos = [a for a in hashes if a in ALGORITHMS][:1]
    got = run.mirror.local_digests(uri, algos or ["md5"])
    if got is None or (length is not None and got[0] != length):
        return False
    return not algos or got[1].get(algos[0]) == hashes[algos[0]]


class Transfer:
    def __init__(self, run: Run) -> None:
        self.run = run
        self._records: list[tuple[Any, ...]] = []
        #: Commits in worker threads (`--fsync`) not yet recorded.
        self._committing = 0

    async def fetch_all(self, plan: Plan, key: str, report: SetReport) -> None:
        opts = self.run.options
        if opts.dry_run:
            report.planned = plan.count("fetch")
            for uri, _ in plan.rows("fetch"):
                kind = "created" if self.run.state.known(uri) is None else "updated"
                report.list_would(kind, uri)
                tell(self.run, kind, uri)
            return
        total = plan.count("fetch")
        if total == 0:
            return
        if self.run.progress:
            self.run.progress("plan", 0, total, plan.planned_bytes())
        hosts = Hosts(opts.transfers, opts.per_host, opts.delay, opts.host_failures)
        done = 0
        pending: set[asyncio.Task[None]] = set()
        progress = self.run.progress

        async def one(
            client: TransferSession, uri: str, res: Resource, held: bool | None, late: bool
        ) -> None:
            nonlocal done
            host = host_key(uri)
            async with hosts.slot(host) as slot:
                wait = hosts.turn(host)
                if wait:
                    await asyncio.sleep(wait)
                    if hosts.given_up(host):
                        wait = None
                if wait is None:
                    self._give_up(uri, res, key, report, host)
                else:
                    unreachable = await self._fetch_one(
                        client,
                        uri,
                        res,
                        key,
                        report,
                        retry=hosts.retries(host),
                        held=held,
                        slot=slot,
                        late=late,
                    )
                    hosts.answered(host, unreachable)
            done += 1
            if progress:
                progress("fetch", done, total, report.bytes)

        # One pool for the run: the hosts' places bound what it opens. Closed however
        # the run ends (a last batch of records that cannot be written included).
        async with TransferSession(
            opts.http, limit=opts.transfers, per_host=opts.per_host
        ) as client:
            # An error no transfer can report (the state database cannot be written: a full
            # disk) stops the run: every task's outcome is collected here, so none is left
            # "never retrieved", and the others are cancelled.
            errors: list[BaseException] = []
            # A window of tasks twice the transfers wide, so the next request is ready when a
            # connection frees; waited for with a semaphore (asyncio.wait on the whole window
            # would cost a callback per task per completion).
            room = opts.transfers * 2
            window = asyncio.Semaphore(room)

            def finished(task: asyncio.Task[None]) -> None:
                pending.discard(task)
                window.release()
                if not task.cancelled() and (exc := task.exception()) is not None:
                    errors.append(exc)

            try:
                for uri, res, held, late in plan.rows_held("fetch"):
                    await window.acquire()
                    if errors:
                        raise errors[0]
                    task = asyncio.create_task(one(client, uri, res, held, late))
                    pending.add(task)
                    task.add_done_callback(finished)
                for _ in range(room):
                    await window.acquire()
                    if errors:
                        raise errors[0]
            finally:
                for task in list(pending):
                    task.cancel()
                if pending:
                    await asyncio.gather(*pending, return_exceptions=True)
                self.flush_records()
                hosts.tell(report)

    def _give_up(self, uri: str, res: Resource, key: str, report: SetReport, host: str) -> None:
        """A resource of a host given up: failed, to be retried by the next run."""
        report.failed += 1
        self.run.state.fail(uri, expected_of(res), f"not fetched: {host} could not be reached", key)

    async def _fetch_one(
        self,
        client: TransferSession,
        uri: str,
        res: Resource,
        key: str,
        report: SetReport,
        *,
        retry: bool = True,
        held: bool | None = None,
        slot: Slot | None = None,
        late: bool = False,
    ) -> bool:
        """Fetch one resource and record the outcome; True when its host could not be
        reached (a connection failure, after the retries). Without `retry` (its host has just
        failed to connect after every retry) one attempt is made: a host that is down is
        given up in seconds, not after every resource's backoff. `held` False: the state did
        not hold `uri` when it was planned (in this run, under its lock), so it is not looked
        up again. `slot`: this transfer's place, handed over once the Source has answered (and
        taken again for a second request). `late`: a change listed behind the cursor, whose
        resource the Source may have deleted since (a 404 or 410 is then no failure when the
        copy holds nothing of it)."""
        mirror, state = self.run.mirror, self.run.state
        http = self.run.options.http
        if not retry:
            http = dataclasses.replace(http, retry=dataclasses.replace(http.retry, retries=0))
        unreachable = False
        # "No Content" is the whole of a resource the list says is empty (and only of one).
        empty = res.length == 0
        coded = listed_codings(res)
        # A digest to verify the answer by decides whether a cache's copy is the resource:
        # by its bytes, not its age (its `<lastmod>` may move while the bytes stay).
        verified = self.run.options.checksum and bool(checkable(res.hashes))
        last_error = ""
        stale: str | None
        try:
            # Before any request: what cannot be written is not asked for.
            at = mirror.locate(uri)
        except UnsafePath as exc:
            self._refused(uri, exc, res, key, report)
            return False
        for attempt in (1, 2):
            stale = None
            if slot is not None:
                await slot.hold()
            # A second request asks the caches on the way to check with the Source: the first
            # answer may have been a cache's old copy (a digest or length that did not match).
            headers: dict[str, str] = {} if attempt == 1 else dict(NO_CACHE)
            if coded:
                headers["Accept-Encoding"] = accept_encoding(coded)
            known = state.known(uri) if held is not False else None
            if known is not None and attempt == 1 and (mirror.dest / known.path).is_file():
                if known.etag:
                    headers["If-None-Match"] = known.etag
                if known.last_modified:
                    headers["If-Modified-Since"] = known.last_modified
            try:
                async with client.open(
                    uri,
                    headers=headers,
                    accept=_ACCEPT_EMPTY if empty else _ACCEPT,
                    options=http,
                    coded=coded,
                ) as response:
                    stale = cached_before(response.headers, res.change_time)
                    if stale is not None and not verified:
                        # A cache's copy (or its "not modified") from before the change the
                        # list gives, with no digest to tell whether it is the resource: asked
                        # again past the cache; a cache that answers so again fails the
                        # transfer (the next run asks again).
                        last_error = f"{stale}: not taken (retried by the next run)"
                        continue
                    if response.status_code == 304:
                        if self._not_modified(uri, res, known, response.headers, key, report):
                            return False
                        continue  # the Source says otherwise: fetch it unconditionally
                    await self._receive(
                        response, uri, uri, res, key, report, known is None, at, slot
                    )
                    return False
            except UnsafePath as exc:
                self._refused(uri, exc, res, key, report)
                return False
            except IntegrityError as exc:
                last_error = exc.message if stale is None else f"{exc.message}; {stale}"
                continue  # retried once, then reported; the previous copy stays
            except Gone as exc:
                if late and known is None and state.known(uri) is None:
                    # Listed behind the cursor (a notification delivered late, a change
                    # listed late), and gone from the Source since: its deletion, dated
                    # after, was applied or is to come. The copy holds nothing of it.
                    report.problem(
                        uri,
                        f"warning: listed late as {res.change or 'changed'}, and gone from the "
                        f"Source since ({exc.message}): nothing to fetch",
                    )
                    return False
                last_error = exc.message
                break
            except (ReadError, ResourceSyncError) as exc:
                last_error = exc.message if isinstance(exc, ResourceSyncError) else str(exc)
                unreachable = isinstance(exc, Unreachable)
                break
            except OSError as exc:
                last_error = f"cannot write: {exc.strerror or exc}"
                break
        if await self._from_mirrors(client, uri, res, key, report, http, last_error, slot):
            return False
        report.failed += 1
        report.problem(uri, last_error)
        state.fail(uri, expected_of(res), last_error, key)
        return unreachable

    def _not_modified(
        self,
        uri: str,
        res: Resource,
        known: Known | None,
        headers: Any,
        key: str,
        report: SetReport,
    ) -> bool:
        """A 304 ("not modified at the Source"): trusted only if our copy is still what we
        wrote (and, when the list gives digests, what it describes); True when it is kept.
        False: the Source is asked for it unconditionally."""
        mirror, state = self.run.mirror, self.run.state
        local = mirror.dest / known.path if known is not None else None
        if not (
            known is not None
            and local is not None
            and (
                same(known.hashes, known.length, res, known.lastmod)
                if checkable(res.hashes)
                # A 304 against a list that gives another length: the list is the Source's
                # word (a weak or stale validator is not).
                else res.length is None or res.length == known.length
            )
            and verified_copy(self.run, uri, local, known.length, known.hashes)
        ):
            return False
        report.not_modified += 1
        state.clear_failure(uri)
        mirror.keep_time(str(local), res.lastmod)
        if res.lastmod is not None and not same(known.hashes, known.length, res, known.lastmod):
            # Recorded with the Source's new <lastmod> (and the links it gives now): the next
            # run's quick check holds again.
            self._record(
                (
                    uri,
                    known.path,
                    known.length,
                    known.hashes,
                    res.lastmod,
                    headers.get("ETag") or known.etag,
                    headers.get("Last-Modified") or known.last_modified,
                    key,
                    res.links,
                    change_of(res),
                )
            )
        else:
            keep_links(state, known, res)
            if (changed := change_of(res)) is not None:
                state.mark_changed([(uri, changed)])
        return True

    def _refused(
        self, uri: str, exc: UnsafePath, res: Resource, key: str, report: SetReport
    ) -> None:
        report.refuse(uri, exc)
        # Kept as a failure: every run says so until it can be taken (a --map).
        self.run.state.fail(uri, expected_of(res), f"refused: {exc.message}", key)

    async def _receive(
        self,
        response: Fetched,
        uri: str,
        source: str,
        res: Resource,
        key: str,
        report: SetReport,
        new: bool,
        at: Located | None = None,
        slot: Slot | None = None,
    ) -> None:
        """Write `response` (from `source`: `uri` itself or one of its mirrors) as the copy
        of `uri` through the mirror — verified against the list's length and digests — and
        record it."""
        mirror = self.run.mirror
        hashes = checkable(res.hashes) if self.run.options.checksum else {}
        # Written from the event loop: handing small files to worker threads was measured
        # to cost more (GIL hand-offs) than the file system calls it hid (but the fsyncs of
        # --fsync, below).
        with mirror.incoming(
            uri, length=res.length, hashes=hashes, at=at, mtime=res.lastmod
        ) as inc:
            # Without a digest to tell, an HTML page is not taken for a resource the list
            # gives another type (a sign-in or error page answered 200).
            check = (
                None
                if hashes
                else page_check(
                    uri, res.type, response.headers.get("Content-Type"), inc.write, res.length
                )
            )
            await response.pour(inc.write if check is None else check.write, self.run.bandwidth)
            if check is not None:
                check.end()
            if mirror.fsync:
                # The commit waits for the disk (milliseconds): the host's next request goes
                # out first, and the fsyncs run in a worker thread while the event loop
                # goes on with the other transfers. Until the commit is recorded in the
                # state the journal is not emptied (`flush_records`): it names the file.
                if slot is not None:
                    await slot.hand_over()
                self._committing += 1
                try:
                    written = await _in_thread(inc.commit)
                except asyncio.CancelledError:
                    raise  # the journal stays whole for the rest of the run: it names the file
                except BaseException:
                    self._committing -= 1
                    raise
                # In the batch below before anything else runs (nothing is awaited between).
                self._committing -= 1
            else:
                written = inc.commit()
        primary = source == uri
        # Recorded in batches: a run killed before a batch is written fetches those few
        # again (the files themselves are in place and verified). A mirror's validators are
        # not the Source's: conditional requests go to `<loc>` only.
        self._record(
            (
                uri,
                mirror.stored(written.location),
                written.length,
                written.hashes,
                res.lastmod,
                response.headers.get("ETag") if primary else None,
                response.headers.get("Last-Modified") if primary else None,
                key,
                res.links,
                change_of(res),
            )
        )
        report.link(uri, res.links)
        report.fetched += 1
        report.bytes += written.length
        tell(self.run, "created" if new else "updated", uri)

    async def _from_mirrors(
        self,
        client: TransferSession,
        uri: str,
        res: Resource,
        key: str,
        report: SetReport,
        http: HttpOptions,
        why: str,
        slot: Slot | None = None,
    ) -> bool:
        """When `<loc>` failed: the entry's `rel="duplicate"` mirrors in `pri` order (core
        §14.2), each verified against the same length and digest (issue 10.14). Without either
        to verify against, no mirror is trusted."""
        # In `pri` order: lowest first, those without `pri` last (core §14.2).
        found = [ln for ln in res.links if ln.rel == "duplicate" and ln.href]
        found.sort(key=lambda ln: (ln.pri is None, ln.pri or 0))
        mirrors = [ln.href for ln in found]
        if not mirrors or not (checkable(res.hashes) and self.run.options.checksum):
            return False
        if slot is not None:
            await slot.hold()  # a request again (the Source's answer may have handed it over)
        new = self.run.state.known(uri) is None
        coded = listed_codings(res)
        headers = {"Accept-Encoding": accept_encoding(coded)} if coded else None
        for href in mirrors:
            try:
                async with client.open(
                    href, headers=headers, options=http, coded=coded
                ) as response:
                    await self._receive(response, uri, href, res, key, report, new)
            except UnsafePath:
                return False
            except (ResourceSyncError, OSError):
                continue
            report.problem(uri, f"warning: fetched from its mirror {href} ({why})")
            self.run.state.clear_failure(uri)
            return True
        return False

    def _record(self, row: tuple[Any, ...]) -> None:
        """A verified resource to record (`CopyState.record`'s arguments), with the next batch."""
        self._records.append(row)
        if len(self._records) >= RECORD_BATCH:
            self.flush_records()

    def flush_records(self) -> None:
        records, self._records = self._records, []
        self.run.state.record_many(records)
        if not self._committing:
            # Every file the journal names is recorded now (a commit in a worker thread has
            # named its file there and is not recorded yet: the journal waits for it).
            self.run.mirror.recorded()

    def remember_refused(self, plan: Plan, key: str) -> None:
        """URIs refused while planning are kept as failures: the next run tries them again
        (and says they are refused again), so no later run says ok over a copy that lacks
        them (issue 14.10). So are the Change List entries whose change is unknown (said
        again, never fetched: `plan.say_unknown_change`)."""
        if self.run.options.dry_run:
            return
        for uri, res in plan.rows("refused"):
            self.run.state.fail(uri, expected_of(res), "refused", key)
        for uri, res in plan.rows("unknown"):
            # With the value listed (None: none), for the runs that say it again.
            expected = expected_of(res) | {"change": res.change}
            self.run.state.fail(uri, expected, UNKNOWN_CHANGE, key)
        for uri, _ in plan.rows("gone"):
            self.run.state.forget(uri)  # a refused URI the Source has deleted since

    def keep_all(self, plan: Plan, *, changes: bool = True) -> None:
        """URIs whose final state we hold: their remembered failure or pending deletion is
        superseded, and (`changes`: planned from changes, not a Resource List) the copy holds
        them as of the change planned."""
        if self.run.options.dry_run:
            return
        self.run.state.supersede_kept()
        if changes:
            self.run.state.mark_changed(plan.kept_changes())

    def remember_undated(self, key: str) -> None:
        """Undated changes applied (not failed) are remembered, not applied again."""
        if self.run.options.dry_run:
            return
        self.run.state.remember_undated(key)
