"""The embedded runner: the scheduler and the syncs in one process, on a pool of threads.

The store is touched by the scheduler's thread alone (SQLite connections stay in their
thread); the pool's threads only sync. A Source is handed to the pool when it is due, when the
global limit has room and when its host has room (`Limits.per_host`, shared by every Source on
the host); otherwise it waits for the next pass, and others go ahead of it.

A store that cannot be reached (PostgreSQL restarting) is waited out: a sync whose lock could
not be taken is not run (it stays due); an outcome that could not be recorded is recorded once
the store is back, and its Source is not started again before.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

from .job import sync_source
from .registry import StoreUnavailable
from .schedule import Backoff, Limits, Outage, next_run
from .store import FleetStore, Outcome, Row

__all__ = ["Embedded"]

Report = Callable[[Row, Outcome], None]
#: How long a pass may sleep when nothing finishes (a stop, or a Source added, is seen by then).
TICK = 1.0


class Embedded:
    def __init__(
        self,
        store: FleetStore,
        root: Path,
        limits: Limits | None = None,
        backoff: Backoff | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        on_outcome: Report | None = None,
    ) -> None:
        self.store = store
        self.root = root
        self.limits = limits or Limits()
        self.backoff = backoff or Backoff()
        self.timeout = timeout
        self.retries = retries
        self.on_outcome = on_outcome
        self.pool = ThreadPoolExecutor(self.limits.jobs, thread_name_prefix="fleet")
        self.running: dict[Future[Outcome | None], Row] = {}
        self.hosts: collections.Counter[str] = collections.Counter()
        #: Most syncs seen at once against each host (for status and tests).
        self.peak: collections.Counter[str] = collections.Counter()
        #: Outcomes the store could not take yet (it was away): {name: (outcome, next run)}.
        self.unrecorded: dict[str, tuple[Outcome, float]] = {}

    def _job(self, row: Row) -> Outcome | None:
        if row.damaged is not None:
            # Its registration cannot be read whole: never synced as something else.
            return Outcome(time.time(), 0.0, False, "", row.damaged)
        with self.store.lock(row.name) as mine:
            if not mine:
                return None  # another run is syncing it: its outcome will be recorded there
            return sync_source(
                row.entry,
                self.root,
                requests=self.limits.requests,
                timeout=self.timeout,
                retries=self.retries,
            )

    def _start(self, row: Row) -> None:
        host = row.entry.host
        self.hosts[host] += 1
        self.peak[host] = max(self.peak[host], self.hosts[host])
        self.running[self.pool.submit(self._job, row)] = row

    def _room(self, row: Row) -> bool:
        return self.hosts[row.entry.host] < self.limits.per_host

    def _finish(self, timeout: float | None) -> list[tuple[Row, Outcome | None]]:
        if not self.running:
            return []
        done, _ = wait(self.running, timeout=timeout, return_when=FIRST_COMPLETED)
        out: list[tuple[Row, Outcome | None]] = []
        for f in done:
            row = self.running.pop(f)
            self.hosts[row.entry.host] -= 1
            try:
                outcome = f.result()
            except StoreUnavailable as exc:
                # Its lock could not be taken: not run, nothing to record (it stays due).
                outcome = Outcome(time.time(), 0.0, False, "", f"not run: {exc}")
                if self.on_outcome:
                    self.on_outcome(row, outcome)
                out.append((row, outcome))
                continue
            except Exception as exc:  # a bug of ours in one sync must not stop the fleet
                outcome = Outcome(time.time(), 0.0, False, "", f"internal error: {exc!r}")
            if outcome is not None:
                now = time.time()
                self.unrecorded[row.name] = (outcome, next_run(row, outcome, self.backoff, now))
                if self.on_outcome:
                    self.on_outcome(row, outcome)
            out.append((row, outcome))
        with contextlib.suppress(StoreUnavailable):  # kept, and recorded once it is back
            self.record()
        return out

    def record(self) -> None:
        """Record the outcomes not recorded yet; raises `StoreUnavailable` (keeping those left)
        while the store is away."""
        for name, (outcome, when) in list(self.unrecorded.items()):
            self.store.record(name, outcome, when)
            del self.unrecorded[name]

    def run_once(
        self, rows: Iterable[Row], stop: threading.Event | None = None
    ) -> list[tuple[str, Outcome | None]]:
        """Sync each of `rows` once, within the limits; return (name, outcome) for each (None:
        another process was syncing it). Once `stop` is set, no sync starts: those in flight
        finish and are recorded, and the rows not started are left out of the result."""
        waiting: collections.deque[Row] = collections.deque()
        source: Iterator[Row] = iter(rows)
        results: list[tuple[str, Outcome | None]] = []
        exhausted = False
        while True:
            if stop is not None and stop.is_set():
                while self.running:
                    results.extend((r.name, o) for r, o in self._finish(None))
                self.record()
                return results
            # Rows held back by their host's limit go first when there is room again.
            held = len(waiting)
            for _ in range(held):
                if len(self.running) >= self.limits.jobs:
                    break
                row = waiting.popleft()
                if self._room(row):
                    self._start(row)
                else:
                    waiting.append(row)
            while not exhausted and len(self.running) < self.limits.jobs:
                nxt = next(source, None)
                if nxt is None:
                    exhausted = True
                elif self._room(nxt):
                    self._start(nxt)
                else:
                    waiting.append(nxt)
                    if len(waiting) > 10 * self.limits.jobs:
                        break  # enough held back: let some finish first
            if not self.running and exhausted and not waiting:
                self.record()  # what the store could not take is said (and exits the command)
                return results
            # With a stop to watch, woken now and then to look at it.
            results.extend((r.name, o) for r, o in self._finish(None if stop is None else TICK))

    def run(self, stop: threading.Event) -> None:
        """Run what is due, pass after pass, until `stop` is set; then wait for the syncs in
        flight to finish (each is recorded). A store that cannot be reached is waited out."""
        away = Outage(stop)
        while not stop.is_set():
            now = time.time()
            # Not started again before its last outcome is recorded.
            busy = {r.name for r in self.running.values()} | self.unrecorded.keys()
            room = self.limits.jobs - len(self.running)
            try:
                self.record()
                due = self.store.due(now, room + len(busy) + 4 * self.limits.jobs) if room else []
            except StoreUnavailable as exc:
                if self.running:
                    self._finish(TICK)  # the syncs in flight go on meanwhile
                else:
                    away.wait(exc)
                continue
            away.over()
            # Asked for more than there is room for: some may be held back by their host.
            for row in due:
                if room <= 0:
                    break
                if row.name in busy or not self._room(row):
                    continue
                self._start(row)
                room -= 1
            self._finish(TICK) if self.running else stop.wait(TICK)
        while self.running:
            self._finish(None)
        self.record()

    def close(self) -> None:
        self.pool.shutdown(wait=True)
