"""The Destination's random walk (issue 10): the Source's life of `tests.source.walk` (files
created, updated, deleted, renamed under random rotation policies, publishes killed and run
while files change, Change Lists archived, Change Dumps packaged) with a Destination that syncs
at random moments — also while the documents do not describe the files, and in a subprocess
SIGKILLed at a random moment — and whose every report is checked against the truth:

- a sync that says ok holds exactly what the Source's documents say now (the latest Resource
  List with every change after it replayed, read back independently by `tests.source.history`);
- `audit` says in sync exactly when the copy is that;
- once the Source settles (a complete publish, nothing changing), one sync converges to the
  Source's files.

Used by the property test (in CI) and by `bench/bench_destination_walk.py` (thousands of steps).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from resourcesync.destination.audit import audit
from resourcesync.destination.sync import SyncOptions
from resourcesync.http import HttpOptions, RetryPolicy
from tests.source.history import check_history
from tests.source.walk import NAME, Walk, _quote, walk

__all__ = ["DestinationWalk", "destination_walk"]

State = dict[str, tuple[int | None, str | None]]


@dataclass
class DestinationWalk(Walk):
    """A `Walk` whose syncs check the Destination's word against the truth after every run."""

    sync_seconds: float = 0.3
    #: Every sync with --fsync (its commits in worker threads: `bench_destination_walk.py`).
    fsync: bool = False

    def options(self) -> SyncOptions:
        return SyncOptions(
            fsync=self.fsync,
            delete=True,
            # The walk's Source deletes all its files at times, and means it.
            allow_empty=True,
            mappings=[(self.base, self.dest)],
            http=HttpOptions(timeout=10, retry=RetryPolicy(retries=1, backoff=0.01)),
        )

    def truth(self) -> State:
        """What the Source's documents say now."""
        return check_history(
            self.out, self.docs, NAME, archived=False, retention=self.retention
        ).current

    def copy(self) -> State:
        got: State = {}
        if not self.dest.is_dir():
            return got
        for p in self.dest.rglob("*"):
            rel = p.relative_to(self.dest).as_posix()
            if p.is_file() and not rel.startswith(".resourcesync") and not rel.endswith(".part"):
                data = p.read_bytes()
                got[self.base + _quote(rel)] = (len(data), hashlib.md5(data).hexdigest())
        return got

    def sync(self) -> None:
        if self.rng.random() < 0.3:
            self.tamper()
        if self.rng.random() < 0.25:
            self.sync_killed()
        truth = self.truth()
        started = time.monotonic()
        report = self.run_sync(self.options())
        self.sync_seconds = time.monotonic() - started
        copy = self.copy()
        same = copy == truth
        self.counts["sync-ok" if report.ok else "sync-not-ok"] += 1
        if report.ok:
            assert same, ("ok over a differing copy", _diff(copy, truth), report.to_json())
        # This Source dates its changes in the order it lists them: none is out of order, and a
        # change found behind the cursor is always one the copy holds (`--lookback` must not
        # take it for a late one).
        odd = ("listed late", "out of chronological order")
        late = [p for s in report.sets for p in s.problems if any(w in p.message for w in odd)]
        assert not late, ("in-order changes taken for late ones", late)
        checked = audit(self.docs, self.dest, self.options())
        assert checked.ok == same, ("audit disagrees with the truth", _diff(copy, truth))
        self.counts["audit-in-sync" if same else "audit-differs"] += 1
        if self.settled:
            files = self.files()
            assert report.ok and copy == files, (
                "the Destination did not converge",
                _diff(copy, files),
                report.to_json(),
            )
            self.counts["sync-converged"] += 1

    def tamper(self) -> None:
        """Change one file of the copy here, not at the Source: deleted, or touched (its time
        changed, not its bytes): what no Change List tells the next sync. (A file edited here
        is kept when the Source then deletes it, by design (issue 17.10), which convergence
        does not allow: edits are tested in test_changed_here.py.)"""
        held = sorted(
            p
            for p in self.dest.rglob("*")
            if p.is_file() and ".resourcesync" not in p.parts and not p.name.endswith(".part")
        )
        if not held:
            return
        path = self.rng.choice(held)
        if self.rng.random() < 0.5:
            path.unlink()
            self.counts["tampered-deleted"] += 1
        else:
            later = path.stat().st_mtime + 3600  # beyond the 2 s a time may differ by (FAT)
            os.utime(path, (later, later))
            self.counts["tampered-touched"] += 1

    def sync_killed(self, soon: bool = False) -> None:
        """`resourcesync sync` in a subprocess, SIGKILLed at a random moment of its run
        (`soon`: early in it, so that the kill lands inside the run)."""
        argv = [sys.executable, "-m", "resourcesync", "sync", self.docs, str(self.dest)]
        argv += ["--delete", "--map", f"{self.base}={self.dest}", "--retries", "1", "--json"]
        argv += ["--fsync"] if self.fsync else []
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # A subprocess pays its start-up before it syncs: the kill lands in the run or after.
        upper = 0.5 + self.sync_seconds if soon else 0.8 + 2 * self.sync_seconds
        time.sleep(self.rng.uniform(0.2, upper))
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        self.counts["sync-killed" if proc.returncode == -signal.SIGKILL else "sync-finished"] += 1


def _diff(got: State, want: State) -> list[str]:
    keys = sorted(set(got) | set(want))
    return [
        f"{k}: copy {got.get(k)} / source {want.get(k)}" for k in keys if got.get(k) != want.get(k)
    ][:10]


@contextlib.contextmanager
def destination_walk(
    root: Path, seed: int, *, initial: int = 40, fsync: bool = False, retention: bool = False
) -> Iterator[DestinationWalk]:
    """A DestinationWalk with its site served on 127.0.0.1 and its capturing hub."""
    with walk(
        root,
        seed,
        initial=initial,
        unsettled_syncs=True,
        retention=retention,
        kind=DestinationWalk,
    ) as w:
        w.fsync = fsync
        yield w
