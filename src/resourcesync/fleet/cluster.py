"""The distributed runner: the scheduler produces Celery tasks, workers on any number of
machines consume them, and every piece of coordination is somebody else's well-kept code.

- One task = one incremental sync of one Source (`job.sync_source`), idempotent and resumed
  from the copy's own state. Tasks are acknowledged late and rejected when their worker is lost
  (`acks_late`, `reject_on_worker_lost`): a worker killed mid-task has its task redelivered
  (on Redis, after the broker's visibility timeout) and another worker does it again.
- Exactly one sync per Source at a time across the cluster: a PostgreSQL advisory lock
  (`PostgresStore.lock`), released by PostgreSQL when the holder's connection dies.
- Per-host politeness across the cluster: `per_host` slots per host in Redis, each a redis-py
  `Lock` with a lease renewed while the sync runs (a dead worker's slot expires with its lease).
- A task that finds its Source or its host busy is retried by Celery (`Task.retry`).
- Each task carries a ticket; a redelivered or duplicated task whose ticket is already recorded
  is acknowledged without syncing again. A task lost with its message (a broker that lost its
  data) is produced again after `requeue_after`.

Copies are written under the workers' `--root`, which must be one filesystem shared by every
worker (NFS, CephFS, …) mounted at the same path.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from celery import Celery

from .. import rng
from .registry import FleetError, StoreUnavailable
from .schedule import Backoff, Outage, next_run
from .store import FleetStore, Outcome, Row, check_root, open_store

__all__ = ["TASK", "Producer", "TaskOptions", "make_app"]

TASK = "resourcesync.fleet.sync"
QUEUE = "resourcesync.fleet"
log = logging.getLogger("resourcesync.fleet")


@dataclass(frozen=True)
class TaskOptions:
    """The fleet's policy, set by the scheduler and carried by every task, so that all workers
    apply the same limits."""

    per_host: int = 2
    requests: int = 2
    timeout: float = 30.0
    retries: int = 3
    retry_after: float = 60.0
    max_backoff: float = 6 * 3600.0
    #: Seconds a host slot is held without renewal (a dead worker's slot frees after this).
    slot_lease: float = 30.0


@contextlib.contextmanager
def host_slot(client: Any, host: str, slots: int, lease: float) -> Iterator[bool]:
    """Hold one of the `slots` slots of `host`, cluster-wide, for the block (yields False when
    all are taken). The lease is renewed in the background while the block runs."""
    lock = None
    for i in rng.sample(range(slots), slots):
        candidate = client.lock(
            f"resourcesync:fleet:host:{host}:{i}", timeout=lease, thread_local=False
        )
        if candidate.acquire(blocking=False):
            lock = candidate
            break
    if lock is None:
        yield False
        return
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(lease / 3):
            with contextlib.suppress(Exception):  # Redis away for a moment: try again
                lock.reacquire()

    keeper = threading.Thread(target=renew, daemon=True, name=f"slot {host}")
    keeper.start()
    try:
        yield True
    finally:
        stop.set()
        keeper.join()
        with contextlib.suppress(Exception):  # expired or Redis gone: the lease frees it
            lock.release()


class _Worker:
    """What a worker process holds: its store connection and its Redis client, opened on first
    use in each (forked) pool process."""

    def __init__(self, broker: str, db: str, root: Path) -> None:
        self.broker, self.db, self.root = broker, db, root
        self.pid = 0
        self._store: FleetStore | None = None
        self._redis: Any = None

    def store(self) -> FleetStore:
        if self.pid != os.getpid() or self._store is None:
            self.pid = os.getpid()
            self._store = open_store(self.root, self.db)
            import redis

            self._redis = redis.Redis.from_url(self.broker)
        return self._store

    def redis(self) -> Any:
        self.store()
        return self._redis


def make_app(
    broker: str,
    db: str | None = None,
    root: Path | None = None,
    *,
    visibility_timeout: float = 3600.0,
) -> Celery:
    """The fleet's Celery app on `broker` (redis://…). Workers give `db` and `root`."""
    if not broker.startswith(("redis://", "rediss://", "unix://")):
        raise FleetError(f"--broker must be a redis:// URL, not {broker!r}")
    app = Celery("resourcesync", broker=broker, set_as_current=False)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # A worker takes one task at a time, so a long sync never holds others back.
        worker_prefetch_multiplier=1,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_default_queue=QUEUE,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        # A task cut off by a lost broker connection is redelivered; syncs are idempotent.
        worker_cancel_long_running_tasks_on_connection_loss=True,
        broker_transport_options={
            "visibility_timeout": visibility_timeout,
            # Look for the tasks of dead workers often enough for a short visibility timeout.
            "unacked_restore_interval": max(1, min(10, int(visibility_timeout / 3))),
            "unacked_restore_throttle": 1,
        },
    )
    worker = _Worker(broker, db or "", root or Path("."))

    @app.task(  # type: ignore[untyped-decorator]  # celery has no type hints
        name=TASK, bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None
    )
    def sync_task(self: Any, name: str, ticket: int, options: dict[str, Any]) -> str:
        try:
            return _sync(self, name, ticket, TaskOptions(**options))
        except StoreUnavailable as exc:
            # The store away (a restart, a failover): the task is tried again once it may be
            # back, by this worker or another; whatever the sync did is resumed from its state.
            wait = min(60.0, 2.0 ** min(self.request.retries, 6))
            log.warning("%s: %s; the task is tried again in %.0f s", name, exc, wait)
            raise self.retry(countdown=wait * rng.uniform(0.8, 1.2)) from None

    def _sync(self: Any, name: str, ticket: int, opts: TaskOptions) -> str:
        from .job import sync_source

        store = worker.store()
        log.info("%s: task for ticket %d in process %d", name, ticket, os.getpid())
        if store.done(name, ticket):
            return "already done"
        with store.lock(name) as mine:
            if not mine:
                raise self.retry(countdown=rng.uniform(1, 3))
            row = store.get(name)  # read under the lock: the run before may just have ended
            if row is None or store.done(name, ticket):
                return "already done"
            try:
                # The copies' filesystem is still this one (a mount can go while a worker runs).
                check_root(store, worker.root)
                if row.damaged is not None:
                    # Its registration cannot be read whole: never synced as something else.
                    raise FleetError(row.damaged)
            except FleetError as exc:
                outcome = Outcome(time.time(), 0.0, False, "", str(exc))
            else:
                with host_slot(
                    worker.redis(), row.entry.host, opts.per_host, opts.slot_lease
                ) as ok:
                    if not ok:
                        raise self.retry(countdown=rng.uniform(0.5, 2))
                    log.info("%s: syncing (ticket %d)", name, ticket)
                    outcome = sync_source(
                        row.entry,
                        worker.root,
                        requests=opts.requests,
                        timeout=opts.timeout,
                        retries=opts.retries,
                        store=store,
                    )
            backoff = Backoff(opts.retry_after, opts.max_backoff)
            store.record(name, outcome, next_run(row, outcome, backoff, time.time()), ticket)
        log.info("%s: %s", name, "ok" if outcome.ok else f"FAILED: {outcome.error}")
        return "ok" if outcome.ok else "failed"

    return app


class Producer:
    """The scheduler of a cluster: hands what is due to the queue, as Celery tasks."""

    def __init__(
        self,
        store: FleetStore,
        app: Celery,
        options: TaskOptions,
        *,
        requeue_after: float = 3600.0,
        batch: int = 1000,
    ) -> None:
        self.store = store
        self.app = app
        self.options = asdict(options)
        self.requeue_after = requeue_after
        self.batch = batch

    def send(self, rows: Iterable[Row]) -> dict[str, int]:
        """Queue a task for each row; return {name: ticket}. Stops at the first send the
        broker refuses (those rows and the rest stay due)."""
        sent: dict[str, int] = {}
        batch: list[str] = []
        for row in rows:
            batch.append(row.name)
            if len(batch) >= self.batch:
                if not self._send(batch, sent):
                    return sent
                batch = []
        if batch:
            self._send(batch, sent)
        return sent

    def _send(self, names: list[str], sent: dict[str, int]) -> bool:
        tickets = self.store.enqueue(names, time.time())
        names = [n for n in names if n in tickets]  # one removed meanwhile is not sent
        # One producer (one broker connection) for the batch: a message costs ~1 ms, not ~5.
        with self.app.producer_or_acquire() as producer:
            for i, name in enumerate(names):
                try:
                    self.app.send_task(
                        TASK,
                        args=(name, tickets[name], self.options),
                        queue=QUEUE,
                        producer=producer,
                    )
                except Exception as exc:  # the broker is away: its client says why
                    for rest in names[i:]:
                        self.store.enqueue_failed(rest, tickets[rest])
                    log.warning("the broker refused a task (%s); trying again later", exc)
                    return False
                sent[name] = tickets[name]
        return True

    def run(self, stop: threading.Event, tick: float = 1.0) -> None:
        """Queue what is due, pass after pass, until `stop` is set (waiting out a store that
        cannot be reached)."""
        away = Outage(stop)
        while not stop.is_set():
            try:
                due = self.store.due(time.time(), self.batch, requeue_after=self.requeue_after)
                self.send(due)
            except StoreUnavailable as exc:
                away.wait(exc)
                continue
            away.over()
            if len(due) < self.batch:
                stop.wait(tick)

    def wait(self, tickets: dict[str, int], stop: threading.Event, tick: float = 0.5) -> None:
        """Until every ticket is recorded by a worker (or `stop`)."""
        left = dict(tickets)
        away = Outage(stop)
        while left and not stop.is_set():
            try:
                for name in list(left):
                    if self.store.done(name, left[name]):
                        del left[name]
            except StoreUnavailable as exc:
                away.wait(exc)
                continue
            away.over()
            if left:
                stop.wait(tick)
