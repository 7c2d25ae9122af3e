"""Sooner after a notification: the fleet's Sources registered with `--follow` are subscribed
to their change notification channels (Change Notification 1.0.1, over WebSub) from one
callback server, and each notification makes its Source due at once — the scheduler runs its
incremental sync on its next pass, with the same engine, limits and store as any run. The
Source's interval stays as the safety net for notifications that never come.

The subscriptions (verification, renewals, outages, secrets) are the Destination's `websub`;
the fleet only maps a channel to the Source it belongs to. Works the same embedded and on a
cluster: the wake-up is written to the store the scheduler reads.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..destination.discover import discover
from ..destination.options import SyncOptions, scoped
from ..destination.websub import Callbacks, Channel, Inbox, Subscriber, serve_callbacks
from ..errors import ResourceSyncError
from ..http import HttpOptions, RetryPolicy, make_client, options_of
from .registry import StoreUnavailable
from .store import open_store

__all__ = ["Notifications"]

Event = Callable[[str, Any], None]
#: How often the registry is read again for Sources added with --follow.
REFRESH = 30.0
#: How soon it is read again when the store could not be reached.
AWAY = 5.0


class Notifications:
    """Run `run(stop)` in a thread of its own: it opens its own store connection."""

    def __init__(
        self,
        root: Path,
        db: str | None,
        *,
        listen: str = "127.0.0.1:0",
        callback_url: str | None = None,
        lease: int = 86400,
        on_event: Event | None = None,
    ) -> None:
        self.root, self.db = root, db
        self.listen = listen
        self.callback_url = callback_url
        self.lease = lease
        self.report = on_event or (lambda kind, detail: None)
        #: The callback server's address once it listens.
        self.address: tuple[str, int] | None = None
        self.ready = threading.Event()

    def run(self, stop: threading.Event) -> None:
        """Follow until `stop`. The store away is waited out (the subscriptions made again once
        it is back); any other failure is said (`notifications-stopped`) — the Sources still
        run at their times — never a thread that ends in silence."""
        while not stop.is_set():
            try:
                self._run(stop)
                return
            except StoreUnavailable as exc:
                self.report("store-unavailable", str(exc))
                stop.wait(AWAY)
            except Exception as exc:
                self.report("notifications-stopped", f"{type(exc).__name__}: {exc}")
                return
            finally:
                self.ready.set()

    def _run(self, stop: threading.Event) -> None:
        store = open_store(self.root, self.db)
        inbox: Inbox = queue.Queue()
        callbacks = Callbacks(inbox, self.report)
        # Each request to a hub is tried once: the subscriber has its own backoff.
        http = HttpOptions(timeout=10.0, connect_timeout=5.0, retry=RetryPolicy(retries=0))
        owners: dict[int, str] = {}  # id(channel) → the Source's name
        known: set[str] = set()
        try:
            with (
                make_client(http) as client,
                serve_callbacks(callbacks.app, self.listen) as address,
            ):
                self.address = address
                base = self.callback_url or f"http://{address[0]}:{address[1]}/callback/"
                subscriber = Subscriber(
                    client,
                    callbacks,
                    base if base.endswith("/") else base + "/",
                    self.lease,
                    15.0,
                    RetryPolicy(backoff=1.0, max_backoff=300.0),
                    self.report,
                )
                self.ready.set()
                refresh_at = 0.0
                try:
                    while not stop.is_set():
                        if time.monotonic() >= refresh_at:
                            try:
                                self._refresh(store, client, subscriber, owners, known)
                                refresh_at = time.monotonic() + REFRESH
                            except StoreUnavailable as exc:  # (PostgreSQL restarting)
                                self.report("store-unavailable", str(exc))
                                refresh_at = time.monotonic() + AWAY
                        subscriber.tick()
                        try:
                            endpoint, _ = inbox.get(timeout=0.2)
                        except queue.Empty:
                            continue
                        name = owners.get(id(endpoint.channel))
                        if name is None:
                            continue
                        try:
                            if store.wake(name, time.time()):
                                self.report("notified", name)
                        except StoreUnavailable as exc:
                            # Not made due now: it runs at its next time all the same.
                            self.report("store-unavailable", f"{name}: notified, not woken: {exc}")
                finally:
                    with contextlib.suppress(ResourceSyncError):
                        subscriber.unsubscribe_all()
        finally:
            self.ready.set()
            store.close()

    def _refresh(
        self,
        store: Any,
        client: Any,
        subscriber: Subscriber,
        owners: dict[int, str],
        known: set[str],
    ) -> None:
        """Subscribe the followed Sources not subscribed yet (one that cannot be read now is
        tried again at the next refresh)."""
        for row in store.rows():
            # One whose registration cannot be read is not subscribed (its runs say why).
            if not row.entry.follow or row.name in known or row.damaged is not None:
                continue
            # Read as its syncs read it: with its credentials, within its reach.
            options = scoped(
                SyncOptions(
                    headers=dict(row.entry.headers),
                    http=options_of(client),
                    any_address=row.entry.any_address,
                ),
                row.entry.source,
            )
            try:
                with make_client(options.http) as source_client:
                    info = discover(row.entry.source, client=source_client)
            except (ResourceSyncError, OSError) as exc:
                self.report("follow-unavailable", f"{row.name}: {exc}")
                continue
            known.add(row.name)
            channels = [
                Channel(s, topic, hub) for s in info.sets for topic, hub in s.channels.items()
            ]
            if not channels:
                self.report("no-channel", f"{row.name}: the Source offers no notification channel")
            reach = options.http.reach
            for ch in channels:
                why = reach.why_not(ch.hub) if reach is not None else None
                if why is not None:
                    self.report("follow-unavailable", f"{row.name}: hub {ch.hub}: refused: {why}")
                    continue
                owners[id(ch)] = row.name
                subscriber.channels.append(ch)
