"""Keeping a local copy in step with a Source: baseline, incremental — the small public doors.

Each set is synchronized in two phases, each its own module. Planning (`plan.py`, and
`dumps.py` for baselines from Resource Dumps) reads the documents as streams and turns them into
the final state of each URI in SQLite: a 1,000,000-entry Resource List costs megabytes, not
gigabytes. The transfer (`transfer.py`) carries the plan out with an asyncio pipeline: bounded
transfers, bounded requests per host, an optional delay between requests to a host, retries with
backoff (`http.transfer`), conditional requests for resources we already have. Every
resource goes through the mirror: a temporary file, checked against the Source's length and
digests, renamed into place — or reported, with the previous copy kept.

Incremental runs start from the cursor, the last change fully applied. When it lies before the
open Change List, the Change List Index and the Change List Archive are walked back to it; a time
range no longer listed anywhere is a gap, reported (`--baseline` recovers). Changes are applied
in order, each URI once, in its final state. A deletion not applied (no `--delete`) is kept as
pending, and a failed fetch is kept to be retried: nothing is silently lost.
"""

from __future__ import annotations

import functools
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path

from ..errors import ReadError, ResourceSyncError
from ..filters import PathFilter
from ..http import Bandwidth, make_client
from ..http.transfer import run_loop
from ..model import Resource
from ..sitemap import open_document
from ..sqlite import connect_read_only, healthy, set_aside
from ..w3cdt import format_w3c
from .audit import STATE_FILE, audit
from .changeplan import NOTIFIED, ZONELESS, ChangePlanner
from .deletions import Deletions
from .discover import SetInfo, SourceInfo, discover
from .dumps import (
    baseline_from_dumps,
    change_packages,
    changes_from_dumps,
    fill_from_dumps,
    resource_packages,
)
from .held import check_held
from .lock import CopyLock
from .mirror import Mapping, Mirror, UnsafePath
from .options import Progress, Run, SyncOptions, scoped
from .plan import UNKNOWN_CHANGE, Plan, Planner, say_unknown_change, unknown_change
from .remap import follow_mappings
from .report import AuditReport, Problem, SetReport, SyncReport
from .state import (
    CopyState,
    Cursor,
    DestinationState,
    StateError,
    expected_resource,
    path_key,
    seconds_kept,
    unreadable_values,
)
from .transfer import Transfer

__all__ = [
    "AuditReport",
    "Problem",
    "Progress",
    "SetReport",
    "SyncOptions",
    "SyncReport",
    "audit",
    "sync",
]

#: State key (with a set's key): the `--include`/`--exclude` options its copy was made with.
FILTERS = "filters:"
#: State key (with a set's key): when (POSIX time, this machine's clock) the copy was last
#: compared with a Resource List, or a run last looked for a newer one (`--reconcile-every`).
RECONCILED = "reconciled:"


def _days(seconds: float) -> str:
    """A duration as `--reconcile-every` would be given it (`7d`, `36h`, `90m`, `30s`)."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


class _Syncer:
    """One run over one Source: the stages of each set, sharing one `Run`."""

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
        # The default mapping first: a user's --map for the same prefix overrides it.
        maps = [Mapping(info.base, dest.resolve())] if info.base else []
        maps += [Mapping(p, d.resolve()) for p, d in options.mappings]
        mirror = Mirror(
            dest,
            maps,
            fsync=options.fsync,
            dry_run=options.dry_run,
            backup_dir=options.backup_dir,
            times=options.preserve_times,
        )
        mirror.check_state_dir(create=True)
        state_path = mirror.state_dir / STATE_FILE
        self._lock = CopyLock(mirror.state_dir, dest)
        read_only = options.dry_run and not os.access(mirror.state_dir, os.W_OK)
        if mirror.state_dir.is_dir() and not read_only:
            # A dry run on a copy never synced has no state folder, and creates none; nor
            # can it lock a copy it cannot write (a read-only mount: no sync can run there).
            self._lock.acquire()
        self._scratch: str | None = None
        if options.dry_run and options.state is None and not state_path.exists():
            # A dry run creates nothing in DEST: a first run is planned on a scratch state
            # (a state kept elsewhere is only read by a dry run, never written).
            self._scratch = tempfile.mkdtemp(prefix="resourcesync-dry-run-")
            state_path = Path(self._scratch) / STATE_FILE
        #: Said by the first set's report (what this run found and did before the sets).
        self._notes: list[str] = []
        try:
            self.state: CopyState = self._open_state(state_path)
            # The copy is kept under the mappings it was made with (remap.py).
            moved = follow_mappings(
                self.state, mirror, info.base, repair=options.repair, dry_run=options.dry_run
            )
            if moved is not None:
                self._notes.append(moved)
            if not options.dry_run:
                # Files a run that died put in place and never recorded (see Mirror.open_journal),
                # then the journal of this one's.
                mirror.remove_unrecorded(self._recorded_md5)
                mirror.open_journal()
        except BaseException:
            mirror.close_journal()
            if hasattr(self, "state"):
                self.state.close()
            if self._scratch is not None:
                shutil.rmtree(self._scratch, ignore_errors=True)
            self._lock.release()
            raise
        self.mirror = mirror
        bandwidth = Bandwidth(options.bwlimit) if options.bwlimit else None
        self.run = Run(options, mirror, self.state, make_client(options.http), progress, bandwidth)
        self.planner = Planner(self.run)
        #: What the Source's Change Lists say, planned with the planner's claims.
        self.changes = ChangePlanner(self.planner)
        #: Remembered URIs refused their file again by this run's seeding (`_seed`).
        self._refused_seeds: list[tuple[str, str, Resource]] = []

    def _open_state(self, state_path: Path) -> CopyState:
        options = self.options
        if options.state is not None:
            return options.state(state_path)
        if options.repair and not options.dry_run:
            # What `sync` says to do when SQLite finds the copy's state damaged, or a value
            # in it that cannot be read: a repair checks every file against the Source and
            # finds the ones it does not list, which is what makes a state again. The damaged
            # one is kept beside it, never read.
            why = None if healthy(state_path) else ""
            if why is None:
                why = unreadable_values(state_path)
            if why is not None:
                aside = set_aside(state_path)
                self._notes.append(
                    f"warning: the state database was damaged{f' ({why})' if why else ''}: "
                    f"set aside as {aside.name}, and made again from the files and the Source"
                )
        if options.dry_run and self._scratch is None:
            # A dry run writes nothing in DEST: the copy's state is read, and planned on
            # temporary tables (it was opened to write, and one of an older format migrated).
            return self._dry_opening(state_path)(state_path)
        return DestinationState(state_path)

    def _dry_opening(self, state_path: Path) -> Callable[[Path], CopyState]:
        """How a dry run opens the copy's state: read only; one of an older format is
        converted in a copy, planned on there (the next sync converts the copy's own)."""
        reading = functools.partial(DestinationState.reading, planning=True)
        try:
            reading(state_path).close()
            return reading
        except StateError as exc:
            if "older version" not in exc.message:
                raise
        self._scratch = tempfile.mkdtemp(prefix="resourcesync-dry-run-")
        converted = Path(self._scratch) / STATE_FILE
        # (Opened as every reading opens it: read-only on media that cannot be written, else
        # refusing writes, so that its WAL files go at close as after any run.)
        source = connect_read_only(state_path, error=StateError)
        try:
            target = sqlite3.connect(converted)
            try:
                source.backup(target)
            finally:
                target.close()
        finally:
            source.close()
        return lambda _path: DestinationState(converted)

    def _recorded_md5(self, stored: str) -> str | None:
        """The md5 the state records for the file at a (stored) local path, if any."""
        owner = self.state.owner(path_key(stored))
        known = self.state.known(owner) if owner is not None else None
        return None if known is None else known.hashes.get("md5")

    def close(self) -> None:
        try:
            self.mirror.close_journal()
            self.run.client.close()
            self.state.close()
            if self._scratch is not None:
                shutil.rmtree(self._scratch, ignore_errors=True)
        finally:
            self._lock.release()

    def run_set(self, s: SetInfo) -> SetReport:
        report = SetReport(name=s.name)
        for note in self._notes:
            report.problem(str(self.mirror.state_dir / STATE_FILE), note)
        self._notes.clear()
        for warning in s.warnings():
            report.problem(s.capabilitylist or s.name, warning)
        key = self.set_key(s)
        state = self.state
        self.planner.precise()  # this set's lists' times are yet to be read
        if self.options.baseline and not self.options.dry_run:
            state.reset(key)
        # A dry run of a baseline leaves the cursor where it is, and plans the baseline.
        cursor = None if self.options.baseline else state.cursor(key)
        if self.options.since is not None:
            # An incremental run from the time the user gives, whatever the copy's own
            # cursor says (resync's --from): the copy is taken to be the Source as of then.
            cursor = Cursor(self.options.since)
        elif cursor is not None and not self._follows_changes(s):
            # A Source without Change Lists (they are optional) is followed through its
            # Resource List: each run compares the copy with it, as a baseline does (what the
            # copy holds as listed is not fetched again).
            cursor = None
        elif cursor is not None and (newer := self._reconcile_due(s, key)) is not None:
            # What the Change Lists never listed is not in the copy: compared with the newer
            # Resource List, as a baseline (what the copy holds as listed is not fetched).
            cursor = None
            report.problem(
                s.url("resourcelist") or s.name,
                f"warning: compared with the Resource List of {format_w3c(newer)} as a baseline "
                f"would (every {_days(self.options.reconcile)} at most, --reconcile-every): a "
                "change its Change Lists did not list is applied",
            )
        elif cursor is not None and (made := self._filtered_otherwise(key)) is not None:
            # What the filters the copy was made with left out and these take is not in the
            # copy, and no Change List will ever say so: compared with the Resource List.
            cursor = None
            report.problem(
                s.url("resourcelist") or s.name,
                f"warning: this copy was made with {made or 'no --include/--exclude'}, this run "
                f"has {self.options.filter.options() or 'none'}: what these take that those "
                "left out is not in the copy, so it is compared with the Resource List, as a "
                "baseline (what the copy holds as listed is not fetched again)",
            )
        plan = Plan(state.scratch())
        if cursor is None:
            report.mode = "baseline"
            if not self.options.dry_run:
                # The baseline derives failures and pending deletions again from the Source's
                # current state: what a remembered one expected may be out of date.
                state.clear_outstanding(key)
            at = self._plan_baseline(s, key, plan, report)
            new_cursor = Cursor(at) if at is not None else None
            baseline_at = at
            cl = s.url("changelist")
            if at is None and (cl or s.url("changedump")) and report.incomplete is None:
                # Not silently: the copy is the Resource List's, whatever its Change Lists say.
                report.problem(
                    s.url("resourcelist") or s.url("resourcedump") or s.name,
                    "warning: the Resource List gives no time (`at`, which Appendix A makes "
                    "mandatory): which of the listed changes come after it cannot be told, so "
                    "none is applied; each run is a baseline from the Resource List",
                )
            if new_cursor is not None and cl is not None and report.incomplete is None:
                # The Resource List is the Source at its `at`; the changes listed after it
                # bring the copy to the Source's present, in the same run — a baseline that
                # stopped at `at` would say ok over a copy that is already behind.
                try:
                    lists = self.changes.covering_lists(cl, s, new_cursor, report)
                    if lists is not None:
                        new_cursor = self.changes.changes(
                            self.changes.entries(lists, report), plan, report, new_cursor
                        )
                except ReadError as exc:
                    # The copy is brought to the Resource List's time, the cursor stays there
                    # and the run says it could not go further.
                    report.gap = f"the changes after the Resource List could not be read: {exc}"
            self._remember_zones(key, baseline=True)
        else:
            report.mode = "incremental"
            baseline_at = None
            # What earlier runs left to do, then what changed here, then what the Source
            # lists: a later plan for the same URI replaces an earlier one.
            check_held(self.planner, plan, key, report, self._seed(plan, key, report))
            new_cursor = self._plan_increment(s, key, plan, report, cursor)
            self._remember_zones(key, baseline=False)
            self._refused_again(plan, report)
            if report.gap is not None:
                return report
        since = baseline_at if cursor is None else cursor.datetime
        self._fill_from_dumps(s, plan, key, report, since)
        self._carry_out(plan, key, report, new_cursor, baseline_at)
        if report.mode == "baseline" and report.incomplete is None:
            self._remember_filters(key)
            self._remember_compared(key, time.time())
        return report

    def _reconcile_due(self, s: SetInfo, key: str) -> datetime | None:
        """The `at` of the Source's Resource List when it is newer than the one the copy was
        last compared with and `--reconcile-every` has passed since that comparison (or the
        last look), by this machine's clock: the run is then a baseline. None otherwise, and
        when the list cannot be read (the next run looks again) or the copy was never compared
        with one (`--from`). A copy from before the comparisons were remembered starts the
        clock."""
        every, url = self.options.reconcile, s.url("resourcelist")
        compared = self.state.baseline_at(key)
        if every <= 0 or url is None or compared is None or self.options.since is not None:
            return None
        looked = seconds_kept(self.state.get(RECONCILED + key))
        now = time.time()
        if looked is None:
            # Never remembered, or a value that cannot be read: the clock starts now.
            self._remember_compared(key, now)
            return None
        if now - looked < every:
            return None
        try:
            with open_document(url, client=self.run.client) as reader:
                at = reader.document.at
        except ResourceSyncError:
            return None
        if at is not None and at > compared:
            return at  # remembered once the baseline is whole: a run cut short looks again
        self._remember_compared(key, now)
        return None

    def _remember_compared(self, key: str, when: float) -> None:
        if not self.options.dry_run:
            self.state.put(RECONCILED + key, repr(when))

    def _filtered_otherwise(self, key: str) -> str | None:
        """The `--include`/`--exclude` options ("" for none) the copy of the set was made with,
        when this run's may take what they left out; None otherwise (the same, fewer — then
        remembered: the changes they leave out are passed by, and a run that takes them
        again must look — or not known: a copy from before they were remembered)."""
        made = self.state.get(FILTERS + key)
        now = self.options.filter
        if made is None or made == now.options():
            return None
        try:
            narrower = now.within(PathFilter.from_options(made))
        except ValueError:  # not written by `options()`: taken as other filters
            narrower = False
        if not narrower:
            return made
        self._remember_filters(key)
        return None

    def _remember_filters(self, key: str) -> None:
        """The filters the copy of the set is now made with (`_filtered_otherwise`): after a
        whole baseline, or as soon as a run leaves more out."""
        if not self.options.dry_run:
            self.state.put(FILTERS + key, self.options.filter.options())

    def _remember_zones(self, key: str, *, baseline: bool) -> None:
        """How far the set's lists' times may be from the times meant (without a zone, or a
        day), for the runs after this one (`ChangePlanner.remembered_zones`): the most any
        list said, kept until a baseline reads lists that all give their zones and times."""
        if self.options.dry_run:
            return
        if self.planner.slack:
            self.state.put(ZONELESS + key, repr(self.planner.slack))
        elif baseline:
            self.state.drop(ZONELESS + key)

    def _plan_baseline(
        self, s: SetInfo, key: str, plan: Plan, report: SetReport
    ) -> datetime | None:
        via = self.options.via
        if via == "dumps" and not s.url("resourcedump"):
            raise ReadError("the Source offers no Resource Dump", source=s.capabilitylist)
        if s.url("resourcelist") is None and self._dumps_allowed() and s.url("resourcedump"):
            # No Resource List: the dump's manifests are all the Source says.
            return baseline_from_dumps(self.run, self.planner, s, key, plan, report)
        return self.planner.baseline(s, key, plan, report)

    def _plan_increment(
        self, s: SetInfo, key: str, plan: Plan, report: SetReport, cursor: Cursor
    ) -> Cursor:
        if s.url("changelist") is None and self._dumps_allowed() and s.url("changedump"):
            # No Change List: the Change Dump's manifests are all the Source says.
            return changes_from_dumps(self.run, self.changes, s, key, plan, report, cursor)
        return self.changes.incremental(s, key, plan, report, cursor)

    def _follows_changes(self, s: SetInfo) -> bool:
        """Whether an incremental run has changes to follow: a Change List, or (dumps allowed)
        a Change Dump's manifests."""
        return s.url("changelist") is not None or bool(
            self._dumps_allowed() and s.url("changedump")
        )

    def _dumps_allowed(self) -> bool:
        return self.options.via in ("dumps", "auto") and not self.options.dry_run

    def _fill_from_dumps(
        self, s: SetInfo, plan: Plan, key: str, report: SetReport, since: datetime | None
    ) -> None:
        """Take the planned fetches that the Source's dump packages hold — as the lists
        describe them — from the packages (see `dumps.py`); the rest are fetched on their own."""
        if not self._dumps_allowed() or report.via == "dumps":
            return  # (planned from the dumps themselves: already extracted)
        strict = self.options.via == "dumps"
        packages: list[Resource] = []
        try:
            if report.mode == "baseline" and s.url("resourcedump"):
                packages += resource_packages(self.run, s)[0]
            if s.url("changedump") and since is not None:
                packages += change_packages(self.run, s, since)
        except ResourceSyncError as exc:
            if strict:
                raise
            where = s.url("changedump") or s.url("resourcedump") or ""
            report.problem(where, f"dump not usable ({exc}); resources fetched on their own")
            return
        if packages:
            fill_from_dumps(self.run, plan, key, report, packages, strict=strict)

    def _carry_out(
        self,
        plan: Plan,
        key: str,
        report: SetReport,
        new_cursor: Cursor | None,
        baseline_at: datetime | None = None,
    ) -> None:
        """Fetch and delete as planned (and retry earlier failures, apply pending deletions
        when asked), then move the cursor."""
        state = self.state
        report.planned = plan.count("fetch")
        transfer = Transfer(self.run)
        if report.via != "dumps" or report.planned:
            run_loop(transfer.fetch_all(plan, key, report))
        Deletions(self.run).apply(plan, key, report)
        transfer.remember_refused(plan, key)
        transfer.keep_all(plan, changes=report.mode != "baseline")
        transfer.remember_undated(key)
        if not self.options.dry_run:
            report.pending_deletes = len(state.pending_deletes(key))
        if new_cursor is not None and not self.options.dry_run:
            state.set_cursor(key, new_cursor, baseline_at=baseline_at)
        if new_cursor is not None:
            report.cursor = format_w3c(new_cursor.datetime)

    def _seed(self, plan: Plan, key: str, report: SetReport) -> set[str]:
        """Start an incremental plan with what earlier runs left to do — failed fetches and
        pending deletions — so that any later change to the same URI, planned after, replaces
        it: the final state per URI wins over a remembered failure (issue 10.7). A fetch
        claims its local file as a listed one does: a URI refused because another holds it is
        refused (and said) again, never written over the other's file. Returns the URIs
        planned."""
        taken = self.planner.taken
        seeded: set[str] = set()
        self._refused_seeds.clear()
        for uri, expected, reason in self.state.failures(key):
            seeded.add(uri)
            if not taken(uri):
                continue
            res = expected_resource(uri, expected)
            if reason == UNKNOWN_CHANGE:
                plan.add(uri, "unknown", res)  # never fetched; said once the plan is made
                continue
            try:
                path = self.run.mirror.location(uri)
            except UnsafePath:
                path = None  # refused again where it is written (`Mirror.incoming`)
            if path is not None and not self.planner.claim(uri, plan, report, path, quiet=True):
                # Said once the plan is made, unless a change listed since replaces it (the
                # Source deleted it: nothing to say).
                plan.add(uri, "refused", res)
                self._refused_seeds.append((uri, path, res))
                continue
            plan.add(uri, "fetch", res)
        for uri in self.state.pending_deletes(key):
            seeded.add(uri)
            if taken(uri):
                plan.add(uri, "delete")
        return seeded

    def _refused_again(self, plan: Plan, report: SetReport) -> None:
        """The URIs `_seed` found still refused their file, or remembered as listed with no
        change, said as a listed one is (and remembered again) where no change listed since
        replaced their plan."""
        for uri, path, res in self._refused_seeds:
            if plan.planned(uri, "refused") is not None:
                self.planner.claim(uri, plan, report, path, res=res)
        self._refused_seeds.clear()
        # The Change List entries whose change is unknown, as remembered or listed again.
        for uri, res in plan.rows("unknown"):
            say_unknown_change(uri, unknown_change(res.change), plan, report)

    def apply_changes(self, s: SetInfo, entries: Iterable[Resource]) -> SetReport:
        """Apply a batch of changes (a change notification's entries) with the same engine and
        guarantees as an incremental run: after the cursor only, in order, each URI once."""
        report = SetReport(name=s.name, mode="notification")
        key = self.set_key(s)
        cursor = self.state.cursor(key)
        if cursor is None:
            raise ResourceSyncError("no baseline yet for this set", source=s.capabilitylist)
        plan = Plan(self.state.scratch())
        self._seed(plan, key, report)
        self.changes.remembered_zones(s, key)
        new_cursor = self.changes.changes(entries, plan, report, cursor, self.options.lookback)
        self._refused_again(plan, report)
        self._carry_out(plan, key, report, new_cursor)
        if new_cursor != cursor and not self.options.dry_run:
            # A cursor the Source's lists may not hold yet: they are not held to it until
            # they do (`ChangePlanner._lists_behind`).
            self.state.put(NOTIFIED + key, "1")
        return report

    @staticmethod
    def set_key(s: SetInfo) -> str:
        return s.capabilitylist or next(iter(s.documents.values()), s.name)


def sync(
    source: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    options: SyncOptions | None = None,
    *,
    progress: Progress | None = None,
) -> SyncReport:
    """Bring DEST in step with SOURCE (a site, a Source Description, a Capability List, a
    Resource List or Change List; a URL or a local file)."""
    source, dest = os.fspath(source), Path(dest)
    opts = scoped(options or SyncOptions(), source)
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
            syncer.state.drop("running")
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
