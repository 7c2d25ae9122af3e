"""One unit of a fleet's work: an incremental sync of one Source into its copy, through the
Destination's public door (`destination.sync.sync`). The same function runs in a thread of the
embedded runner and in a Celery task; it is idempotent and resumes from the copy's own state,
so running it again after a crash is always safe.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..destination.state import CopyState
from ..destination.sync import SyncOptions, SyncReport, sync
from ..errors import ResourceSyncError, storage_failure
from ..http import HttpOptions, RetryPolicy
from ..sqlite import damage
from .registry import Entry
from .store import FleetStore, Outcome

__all__ = ["COUNTS", "sync_source"]

log = logging.getLogger(__name__)

COUNTS = (
    "fetched",
    "not_modified",
    "unchanged",
    "deleted",
    "pending_deletes",
    "failed",
    "refused",
    "changes",
    "bytes",
)


def _options(
    entry: Entry,
    requests: int,
    timeout: float,
    retries: int,
    baseline: bool,
    state: Callable[[Path], CopyState] | None = None,
) -> SyncOptions:
    return SyncOptions(
        state=state,
        delete=entry.delete,
        max_delete=entry.max_delete,
        allow_empty=entry.allow_empty,
        lookback=entry.lookback,
        history_grace=entry.history_grace,
        reconcile=entry.reconcile_every,
        any_address=entry.any_address,
        via=entry.via,
        baseline=baseline,
        per_host=requests,
        transfers=max(requests, 4),
        headers=dict(entry.headers),
        http=HttpOptions(
            timeout=timeout,
            retry=RetryPolicy(retries=retries),
            max_connections=max(requests * 2, 10),
        ),
    )


def _error(report: SyncReport) -> str | None:
    for s in report.sets:
        if s.gap:
            return f"{s.name}: gap: {s.gap}"
        if s.incomplete:
            return f"{s.name}: {s.incomplete}"
        if s.failed or s.refused:
            first = f": {s.problems[0].uri}: {s.problems[0].message}" if s.problems else ""
            return f"{s.name}: {s.failed} failed, {s.refused} refused{first}"
    return None


def sync_source(
    entry: Entry,
    root: Path,
    *,
    requests: int = 2,
    timeout: float = 30.0,
    retries: int = 3,
    store: FleetStore | None = None,
) -> Outcome:
    """Bring the copy of `entry` in step with its Source. A first run is a baseline; a gap in
    the Source's change history (changes no longer listed anywhere) is recovered by a baseline
    at once rather than left for an operator. Never raises for the Source's faults: they are
    the outcome's error.

    With `store` (a cluster), the copy's state is kept in the fleet's store, not under the
    copy: any worker carries on where another left off."""
    started = time.time()
    t0 = time.monotonic()
    dest = entry.copy_dir(root)
    state = None
    if store is not None:
        held = store

        def state(local: Path) -> CopyState:
            copy = held.copy_state(entry.name)
            if local.exists() and copy.empty():
                n = copy.import_local(local)
                log.info("%s: imported the copy's local state (%d resources)", entry.name, n)
            return copy

    try:
        report = sync(entry.source, dest, _options(entry, requests, timeout, retries, False, state))
        mode = "+".join(sorted({s.mode for s in report.sets})) or "empty"
        if any(s.gap for s in report.sets):
            report = sync(
                entry.source, dest, _options(entry, requests, timeout, retries, True, state)
            )
            mode = "baseline after a gap"
    except ResourceSyncError as exc:
        return Outcome(started, time.monotonic() - t0, False, "", str(exc))
    except Exception as exc:
        # The copy's disk or its state database, not the Source: still one Source's failure,
        # not the fleet's, said as `sync` says it (the file, and why; or that it is damaged).
        damaged = damage(exc)
        if damaged is not None:
            return Outcome(started, time.monotonic() - t0, False, "", str(damaged))
        said = storage_failure(exc, dest)
        if said is None:
            raise
        return Outcome(started, time.monotonic() - t0, False, "", said[0])
    counts: dict[str, Any] = {k: sum(getattr(s, k) for s in report.sets) for k in COUNTS}
    cursors = [s.cursor for s in report.sets if s.cursor]
    return Outcome(
        started=started,
        seconds=time.monotonic() - t0,
        ok=report.ok,
        mode=mode,
        error=_error(report),
        cursor=max(cursors) if cursors else None,
        counts=counts,
    )
