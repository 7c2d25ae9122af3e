"""Following a Source's notifications (Change Notification and Framework Notification 1.0.1,
over WebSub) — unattended, for months, across hub and Source outages.

`follow` brings the copy up to date (baseline or incremental), subscribes to each set's change
notification channel, and to its framework notification channel when the Capability List
offers one, then applies every change notification with the same engine and guarantees as an
incremental run. The subscriptions themselves (callbacks, renewals, outages) are `websub`'s.

What keeps the copy whole:

- A notification whose `from` is after what the copy is known to hold — the copy's cursor for
  the first one, the last applied notification's `until` after that — means a lost
  notification (or changes made before the subscription was active): the Change List is read
  first, and only then is the notification applied.
- Once a subscription is active (again), the copy catches up from the Change List, for the
  changes published while there was none.
- Silence longer than `poll_interval` (a lost hub), or any channel down (a hub that refuses,
  does not answer or verifies late), means polling the Change List — every
  `outage_poll_interval` while a channel is down. A Source that offers no channel (most do
  not) is followed by polling alone, every `poll_interval`, and looked at again for a channel
  at every check.
- A framework notification (a new Resource Dump, a rotated Change List, a new Capability
  List) is acted on at once: the Source is read again and the copy caught up.
- A Source that cannot be reached is retried with backoff; nothing is applied past a gap that
  could not be caught up.
- Notifications tell what changed at the Source, not what changed in the copy: at least every
  `check_interval`, however many notifications arrive, the copy is caught up by a sync, which
  also looks at each file it holds (`held.py`).

Every outage and recovery is reported as an event (`hub-unavailable`, `subscribed`, `renewed`,
`denied`, `source-unavailable`, `caught-up`) to the log and to `--json`.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import queue
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ..errors import FULL_ERRNOS, ResourceSyncError, StateDamaged, storage_failure
from ..http import HttpOptions, RetryPolicy, make_client
from ..model import Capability, Resource
from ..sitemap import open_document
from ..sqlite import damage
from .changeplan import InOrder
from .discover import SetInfo, SourceInfo, discover
from .options import scoped
from .sync import SetReport, SyncOptions, SyncReport, _Syncer, sync
from .websub import Callbacks, Channel, Endpoint, Event, Inbox, Subscriber, serve_callbacks

__all__ = ["KEPT_REPORTS", "FollowOptions", "follow"]

#: The reports `follow` keeps (each goes to `on_event` as it comes): a follower runs for months,
#: a catch-up every few minutes, and must not hold every report it ever made.
KEPT_REPORTS = 100


@dataclass
class FollowOptions:
    listen: str = "127.0.0.1:0"
    callback_url: str | None = None
    lease_seconds: int = 86400
    #: Catch up from the Change List when no notification came for this long (a lost hub).
    poll_interval: float = 300.0
    #: Catch up this often while a subscription is down (a hub outage).
    outage_poll_interval: float = 60.0
    #: An incremental sync at least this often however many notifications arrive: they tell
    #: what changed at the Source, and only a sync looks at the copy's own files.
    check_interval: float = 3600.0
    #: Stop after this many seconds (None: until stopped).
    duration: float | None = None
    #: How long to wait for the hub to verify a subscription request before trying again.
    verify_timeout: float = 15.0
    #: Backoff between attempts to reach a hub or a Source that failed: doubling from
    #: `retry_backoff`, with jitter, capped at `max_backoff`.
    retry_backoff: float = 1.0
    max_backoff: float = 300.0


def _no_channel(source: str, fo: FollowOptions) -> str:
    return (
        f"{source} offers no change notification channel (no change-notification entry with "
        f"a hub in its Capability List): followed by reading its Change List every "
        f"{fo.poll_interval:g} s"
    )


def _channels(info: SourceInfo, client: Any) -> list[Channel]:
    """The change notification channels (from discovery) and framework notification channels
    (from each Capability List: `<loc>` the topic, `rs:ln rel="hub"` the hub, Framework
    Notification §5) of every set."""
    found = [Channel(s, topic, hub) for s in info.sets for topic, hub in s.channels.items()]
    for s in info.sets:
        if s.url(Capability.FRAMEWORK_NOTIFICATION) is None or s.capabilitylist is None:
            continue
        with open_document(s.capabilitylist, client=client) as reader:
            for entry in reader:
                hub = entry.link("hub")
                if entry.capability == Capability.FRAMEWORK_NOTIFICATION and hub is not None:
                    found.append(Channel(s, entry.loc, hub.href, kind="framework"))
    return found


class _Applier:
    """The one place that applies a notification's entries through the sync engine."""

    def __init__(self, info: SourceInfo, dest: Path, options: SyncOptions) -> None:
        self._syncer = _Syncer(info, dest, options, None)

    def cursor(self, s: SetInfo) -> Any:
        """The copy's cursor for the set (its `datetime` is the last change applied)."""
        return self._syncer.state.cursor(self._syncer.set_key(s))

    def apply(
        self, s: SetInfo, entries: list[Resource], loose: tuple[str, float] | None = None
    ) -> SetReport:
        """Apply `entries`; `loose`: the notification whose times may be far from those
        meant (without a zone, or naming a day), and how far in seconds, if so (its changes
        are looked for further behind the cursor: `ChangePlanner.changes`)."""
        if loose is not None:
            self._syncer.planner.loose(*loose)
        return self._syncer.apply_changes(s, entries)

    def close(self) -> None:
        self._syncer.close()


# Failures of a catch-up that are an outage (retried), not a bad Source.
_OUTAGE = (ResourceSyncError, OSError, httpx.HTTPError)
#: errnos of DEST's own storage refusing a write: full, read-only, not permitted, failing.
_STORAGE_ERRNOS = FULL_ERRNOS | {errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}


def _stop_if_damaged(exc: BaseException) -> None:
    """The copy's state found damaged: what mends it (`sync --repair`) needs the copy, which
    a follower holds while it runs (its lock), and no wait mends it: the follower stops with
    the one line `sync` says."""
    if isinstance(exc, StateDamaged):
        raise exc
    damaged = damage(exc)
    if damaged is not None:
        raise damaged from None


def _storage(exc: BaseException, dest: Path) -> str | None:
    """One line when `exc` is DEST's own storage refusing a write (its files or its state
    database); None otherwise."""
    if isinstance(exc, sqlite3.OperationalError) or (
        isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS
    ):
        said = storage_failure(exc, dest)
        return said[0] if said is not None else None
    return None


class _Follower:
    def __init__(
        self,
        source: str,
        dest: Path,
        options: SyncOptions,
        fo: FollowOptions,
        subscriber: Subscriber,
        inbox: Inbox,
        applier: _Applier,
        reports: collections.deque[SyncReport],
        report: Event,
    ) -> None:
        self.source, self.dest, self.options, self.fo = source, dest, options, fo
        self.subscriber = subscriber
        self.inbox = inbox
        self.applier = applier
        self.reports = reports
        self.report = report
        self.backoff = RetryPolicy(backoff=fo.retry_backoff, max_backoff=fo.max_backoff)
        self.last_synced = time.monotonic()
        #: When the last catch-up (a sync) ran: notifications do not move it.
        self.last_caught_up = self.last_synced
        #: When a catch-up is due (None: only when the poll interval says so).
        self.catch_up_at: float | None = None
        self.source_failures = 0
        #: When the Source's channels were last read (looked for again at every check while
        #: it offers none).
        self.channels_read = self.last_synced

    def run(self, stop: threading.Event) -> None:
        ends = time.monotonic() + self.fo.duration if self.fo.duration is not None else None
        while not stop.is_set():
            now = time.monotonic()
            if ends is not None and now >= ends:
                return
            self.subscriber.tick()
            if self.subscriber.recovered:
                # Back after an outage: what was published meanwhile is in the Change List.
                self.subscriber.recovered = False
                self.catch_up_at = now
            interval = self._interval()
            if now >= self._due(interval):
                # Polled after silence (not a retry, not the periodic look at the copy).
                polled = (self.catch_up_at is None or now < self.catch_up_at) and (
                    now >= self.last_synced + interval
                )
                if self.catch_up() and polled and self._found_changes():
                    # Silence, yet the Change List had news: the hub may have lost the
                    # subscription (a hub restarted without its database). Ask again now
                    # rather than at the next renewal, hours away.
                    self.subscriber.resubscribe_now(
                        "the Change List had changes no notification announced"
                    )
                self._look_for_channels()
            try:
                endpoint, body = self.inbox.get(timeout=0.1)
            except queue.Empty:
                continue
            self.notification(endpoint, body)

    def catch_up(self) -> bool:
        """An incremental sync from the Change List; False (and a retry scheduled) when the
        Source could not be read."""
        now = time.monotonic()
        self.last_caught_up = now
        try:
            result = sync(self.source, self.dest, self.options)
        except (*_OUTAGE, sqlite3.DatabaseError) as exc:
            _stop_if_damaged(exc)
            if (said := _storage(exc, self.dest)) is not None:
                self.last_synced = now
                self.unwritable(said)
                return False
            if isinstance(exc, sqlite3.DatabaseError):
                raise
            self.source_failures += 1
            delay = self.backoff.delay(self.source_failures)
            self.catch_up_at = now + delay
            self.last_synced = now
            self.report(
                "source-unavailable",
                {
                    "source": self.source,
                    "reason": str(exc) or type(exc).__name__,
                    "attempt": self.source_failures,
                    "retry_in": self._next_try(),
                },
            )
            return False
        self.reports.append(result)
        self.report("caught-up", result)
        self.last_synced = time.monotonic()
        if result.ok:
            self.source_failures = 0
            self.catch_up_at = None
        else:
            # Some resources could not be fetched (kept as failures): try again soon.
            self.source_failures += 1
            self.catch_up_at = self.last_synced + self.backoff.delay(self.source_failures)
        return True

    def _interval(self) -> float:
        """Seconds between polls of the Change List (shorter while the hub is away)."""
        interval = self.fo.poll_interval
        if self.subscriber.degraded():
            interval = min(interval, self.fo.outage_poll_interval)
        return interval

    def _due(self, interval: float) -> float:
        """When the next catch-up runs: the next poll, the periodic look at the copy, or a
        retry, whichever comes first."""
        due = min(self.last_synced + interval, self.last_caught_up + self.fo.check_interval)
        if self.catch_up_at is not None:
            due = min(due, self.catch_up_at)
        return due

    def _next_try(self) -> float:
        """Seconds until the next catch-up, as `run` will have it (said as `retry_in`, which
        said the backoff alone: with a poll every second and a backoff of minutes, the retry
        came at the next poll)."""
        return round(max(0.0, self._due(self._interval()) - time.monotonic()), 3)

    def unwritable(self, reason: str) -> None:
        """DEST (its files or its state) refused a write — full, read-only: nothing of the run
        was recorded; said, and tried again with backoff until it takes the writes."""
        self.source_failures += 1
        delay = self.backoff.delay(self.source_failures)
        self.catch_up_at = time.monotonic() + delay
        self.report(
            "dest-unwritable",
            {
                "dest": str(self.dest),
                "reason": reason,
                "attempt": self.source_failures,
                "retry_in": self._next_try(),
            },
        )

    def refresh_channels(self) -> None:
        """Read the Source's channels again (a Capability List changed: a channel added or
        moved to another hub) and subscribe or unsubscribe accordingly."""
        try:
            with make_client(self.options.http) as client:
                info = discover(self.source, client=client, choose=self.options.set)
                found = _channels(info, client)
        except _OUTAGE as exc:
            self.report("source-unavailable", {"source": self.source, "reason": str(exc)})
            return
        self.subscriber.update(found)

    def _look_for_channels(self) -> None:
        """While the Source offers no change channel, look for one at every check."""
        now = time.monotonic()
        if now < self.channels_read + self.fo.check_interval or any(
            ch.kind == "change" for ch in self.subscriber.channels
        ):
            return
        self.channels_read = now
        self.refresh_channels()

    def _found_changes(self) -> bool:
        return any(s.changes for s in self.reports[-1].sets)

    def notification(self, endpoint: Endpoint, body: bytes) -> None:
        ch = endpoint.channel
        try:
            with open_document(body, name=f"notification from {ch.hub}") as reader:
                doc = reader.document
                entries = list(reader)
                loose = (reader.name, reader.slack) if reader.slack else None
        except ResourceSyncError as exc:
            self.report("dropped", f"unreadable notification: {exc}")
            return
        if ch.kind == "framework" or doc.capability == Capability.FRAMEWORK_NOTIFICATION:
            if doc.capability != Capability.FRAMEWORK_NOTIFICATION:
                self.report("dropped", f"not a framework notification ({doc.capability})")
                return
            self.report(
                "framework",
                [{"loc": e.loc, "change": e.change, "capability": e.capability} for e in entries],
            )
            # A new dump, a rotated Change List, a new Capability List: read the Source now.
            self.catch_up()
            if any(
                e.capability in (Capability.CAPABILITYLIST, Capability.DESCRIPTION) for e in entries
            ):
                self.refresh_channels()
            return
        if doc.capability != Capability.CHANGE_NOTIFICATION:
            self.report("dropped", f"not a change notification ({doc.capability})")
            return
        if doc.from_ is not None and (ch.covered is None or doc.from_ > ch.covered):
            cursor = self.applier.cursor(ch.set)
            behind = cursor is None or doc.from_ > cursor.datetime
            if (ch.covered is not None or behind) and not self.catch_up():
                # A gap that could not be filled: applying this would move the cursor past
                # it. The Change List has these changes too; the retried catch-up gets them.
                ch.covered = None
                return
        # In the order listed, as a Change List's (core §12.1): a change dated before the
        # notification's `from`, or before one listed ahead of it, is not skipped for its date.
        order = InOrder()
        order.start(doc.from_, "the notification")
        for e in entries:
            order.see(e)
        try:
            set_report = self.applier.apply(ch.set, entries, loose)
        except (*_OUTAGE, sqlite3.DatabaseError) as exc:
            _stop_if_damaged(exc)
            if (said := _storage(exc, self.dest)) is not None:
                ch.covered = None  # the Change List has these changes: a catch-up gets them
                self.unwritable(said)
                return
            if isinstance(exc, sqlite3.DatabaseError):
                raise
            # Not applied (no baseline for the set yet, the Source gone mid-way): the Change
            # List has these changes; a catch-up gets them.
            ch.covered = None
            self.source_failures += 1
            delay = self.backoff.delay(self.source_failures)
            self.catch_up_at = time.monotonic() + delay
            self.report(
                "source-unavailable",
                {"source": self.source, "reason": str(exc), "retry_in": self._next_try()},
            )
            return
        ch.covered = doc.until
        late = order.warning()
        if late is not None:
            set_report.problem(f"notification from {ch.hub}", late)
        result = SyncReport(
            source=self.source, dest=str(self.dest), how="notification", sets=[set_report]
        )
        self.reports.append(result)
        self.report("applied", result)
        self.last_synced = time.monotonic()
        if set_report.problems:
            self.source_failures += 1
            self.catch_up_at = self.last_synced + self.backoff.delay(self.source_failures)


def follow(
    source: str,
    dest: Path,
    options: SyncOptions,
    follow_options: FollowOptions,
    *,
    on_event: Event | None = None,
    stop: threading.Event | None = None,
) -> list[SyncReport]:
    """Sync, then follow the Source's notifications until `stop` is set (or the duration ends).
    Returns the reports of the last `KEPT_REPORTS` syncs, catch-ups and notifications applied
    (every one is given to `on_event` as it comes)."""
    report = on_event or (lambda kind, detail: None)
    stop = stop or threading.Event()
    fo = follow_options
    # Credentials to the Source's host, and the run's reach, for every request here as in
    # the syncs: discovery, the notifications' syncs, the hubs.
    options = scoped(options, source)
    reports = collections.deque([sync(source, dest, options)], maxlen=KEPT_REPORTS)
    report("synced", reports[-1])
    with make_client(options.http) as client:
        info = discover(source, client=client, choose=options.set)
        channels = _channels(info, client)
    if not any(ch.kind == "change" for ch in channels):
        # Most Sources offer none: followed by reading their Change Lists (and looked at again
        # for a channel at every check).
        report("no-channel", _no_channel(source, fo))
    # Requests to a hub are tried once each: the subscriber has its own backoff.
    hub_http = HttpOptions(
        timeout=min(options.http.timeout, 10.0),
        connect_timeout=min(options.http.connect_timeout, 5.0),
        retry=RetryPolicy(retries=0),
        reach=options.http.reach,
    )
    inbox: Inbox = queue.Queue()
    callbacks = Callbacks(inbox, report)
    with (
        make_client(hub_http) as hub_client,
        serve_callbacks(callbacks.app, fo.listen) as (host, port),
    ):
        base = fo.callback_url or f"http://{host}:{port}/callback/"
        if not base.endswith("/"):
            base += "/"
        subscriber = Subscriber(
            hub_client,
            callbacks,
            base,
            fo.lease_seconds,
            fo.verify_timeout,
            RetryPolicy(backoff=fo.retry_backoff, max_backoff=fo.max_backoff),
            report,
            channels,
        )
        applier = _Applier(info, dest, options)
        follower = _Follower(source, dest, options, fo, subscriber, inbox, applier, reports, report)
        try:
            follower.run(stop)
        finally:
            applier.close()
            with contextlib.suppress(ResourceSyncError):
                subscriber.unsubscribe_all()
    return list(reports)
