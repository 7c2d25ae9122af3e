"""Following a Source's change notifications (Change Notification 1.0.1 over WebSub).

`follow` brings the copy up to date (baseline or incremental), subscribes to each set's channel
at its hub with a fresh secret, answers the hub's verification of intent, and applies every
notification with the same engine and guarantees as an incremental run. Payloads that are not
signed with our secret are acknowledged and dropped; payloads are read with the one hardened
reader. A payload whose `from` lies after the last `until` applied (a lost notification), or
silence longer than the poll interval (a lost hub), is caught up from the Change List first.
The lease is renewed before it ends; a clean exit unsubscribes.

The callback server is a small Starlette app on `--listen HOST:PORT`; `--callback-url` names
it as the hub must call it (behind a proxy).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import queue
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ..errors import ReadError, ResourceSyncError
from ..http import make_client
from ..model import Capability
from ..sitemap import open_document
from .discover import SetInfo, discover
from .sync import SyncOptions, SyncReport, _Syncer, sync

__all__ = ["FollowOptions", "follow"]

MAX_PAYLOAD = 8 * 1024 * 1024


@dataclass
class FollowOptions:
    listen: str = "127.0.0.1:0"
    callback_url: str | None = None
    lease_seconds: int = 86400
    #: Catch up from the Change List when no notification came for this long (a lost hub).
    poll_interval: float = 300.0
    #: Stop after this many seconds (None: until stopped).
    duration: float | None = None
    verify_timeout: float = 15.0


@dataclass
class _Subscription:
    set: SetInfo
    topic: str
    hub: str
    token: str
    secret: str
    verified: threading.Event = field(default_factory=threading.Event)
    unsubscribed: threading.Event = field(default_factory=threading.Event)
    lease: int = 0
    renew_at: float = 0.0


Event = Callable[[str, Any], None]


class _Callbacks:
    """The callback endpoint: verification of intent (GET) and notifications (POST)."""

    def __init__(self, inbox: queue.Queue[tuple[str, bytes]], on_event: Event) -> None:
        self.subs: dict[str, _Subscription] = {}
        self.expect_unsubscribe: set[str] = set()
        self.inbox = inbox
        self.on_event = on_event
        self.app = Starlette(
            routes=[Route("/callback/{token}", self.handle, methods=["GET", "POST"])]
        )

    async def handle(self, request: Request) -> Response:
        sub = self.subs.get(request.path_params["token"])
        if sub is None:
            return PlainTextResponse("unknown", 404)
        if request.method == "GET":
            q = request.query_params
            mode, topic, challenge = q.get("hub.mode"), q.get("hub.topic"), q.get("hub.challenge")
            if topic != sub.topic or not challenge:
                return PlainTextResponse("not ours", 404)
            if mode == "subscribe":
                lease = q.get("hub.lease_seconds", "")
                sub.lease = int(lease) if lease.isdigit() else 0
                sub.verified.set()
                return PlainTextResponse(challenge)
            if mode == "unsubscribe" and sub.token in self.expect_unsubscribe:
                sub.unsubscribed.set()
                return PlainTextResponse(challenge)
            if mode == "denied":
                self.on_event("denied", q.get("hub.reason", ""))
                return PlainTextResponse("")
            return PlainTextResponse("not expected", 404)
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_PAYLOAD:
                self.on_event("dropped", "payload too large")
                return PlainTextResponse("")
        signature = request.headers.get("x-hub-signature", "")
        algo, _, given = signature.partition("=")
        digest = {
            "sha1": hashlib.sha1,
            "sha256": hashlib.sha256,
            "sha384": hashlib.sha384,
            "sha512": hashlib.sha512,
        }.get(algo)
        if digest is None or not given:
            self.on_event("dropped", "unsigned notification")
            return PlainTextResponse("")  # acknowledged, not applied
        expected = hmac.new(sub.secret.encode(), body, digest).hexdigest()
        if not hmac.compare_digest(expected, given.strip().lower()):
            self.on_event("dropped", "wrongly signed notification")
            return PlainTextResponse("")
        self.inbox.put((sub.token, body))
        return PlainTextResponse("")


@contextlib.contextmanager
def _serve(app: Any, listen: str) -> Iterator[tuple[str, int]]:
    host, _, port_text = listen.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, int(port_text or 0)))
    except (OSError, ValueError) as exc:
        raise ResourceSyncError(f"cannot listen on {listen}: {exc}") from None
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield host, port
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def _hub_request(client: Any, sub: _Subscription, mode: str, callback: str, lease: int) -> None:
    form = {
        "hub.mode": mode,
        "hub.topic": sub.topic,
        "hub.callback": callback,
    }
    if mode == "subscribe":
        form["hub.secret"] = sub.secret
        form["hub.lease_seconds"] = str(lease)
    try:
        response = client.post(sub.hub, data=form)
    except Exception as exc:
        raise ResourceSyncError(f"hub unreachable: {exc}", source=sub.hub) from None
    if response.status_code not in (202, 204, 200):
        raise ResourceSyncError(
            f"hub refused to {mode}: HTTP {response.status_code} {response.text[:200]}",
            source=sub.hub,
        )


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
    Returns the report of every catch-up and notification applied."""
    report = on_event or (lambda kind, detail: None)
    stop = stop or threading.Event()
    reports = [sync(source, dest, options)]
    report("synced", reports[-1])
    with make_client(options.http) as client:
        info = discover(source, client=client, choose=options.set)
        channels = [(s, topic, hub) for s in info.sets for topic, hub in s.channels.items()]
        if not channels:
            raise ReadError(
                "the Source offers no change notification channel (no change-notification "
                "entry with a hub in its Capability List)",
                source=source,
            )
        inbox: queue.Queue[tuple[str, bytes]] = queue.Queue()
        callbacks = _Callbacks(inbox, report)
        with _serve(callbacks.app, follow_options.listen) as (host, port):
            base = follow_options.callback_url or f"http://{host}:{port}/callback/"
            if not base.endswith("/"):
                base += "/"
            subs = []
            for s, topic, hub in channels:
                sub = _Subscription(s, topic, hub, secrets.token_hex(16), secrets.token_hex(24))
                callbacks.subs[sub.token] = sub
                subs.append(sub)
            for sub in subs:
                _subscribe(client, sub, base, follow_options, report)
            syncer = _Syncer(info, dest, options, None)
            try:
                _loop(
                    source,
                    dest,
                    options,
                    follow_options,
                    subs,
                    inbox,
                    base,
                    client,
                    reports,
                    report,
                    stop,
                    syncer,
                )
            finally:
                syncer.close()
                for sub in subs:
                    callbacks.expect_unsubscribe.add(sub.token)
                    with contextlib.suppress(ResourceSyncError):
                        _hub_request(client, sub, "unsubscribe", base + sub.token, 0)
                        sub.unsubscribed.wait(timeout=5)
                        report("unsubscribed", sub.topic)
    return reports


def _subscribe(
    client: Any, sub: _Subscription, base: str, fo: FollowOptions, report: Event
) -> None:
    sub.verified.clear()
    _hub_request(client, sub, "subscribe", base + sub.token, fo.lease_seconds)
    if not sub.verified.wait(timeout=fo.verify_timeout):
        raise ResourceSyncError(
            "the hub did not verify the subscription (is the callback reachable from it? "
            "see --callback-url)",
            source=sub.hub,
        )
    lease = sub.lease or fo.lease_seconds
    sub.renew_at = time.monotonic() + max(lease * 0.8, 1.0)
    report(
        "subscribed",
        {"topic": sub.topic, "hub": sub.hub, "lease": lease, "callback": base + sub.token},
    )


def _loop(
    source: str,
    dest: Path,
    options: SyncOptions,
    fo: FollowOptions,
    subs: list[_Subscription],
    inbox: queue.Queue[tuple[str, bytes]],
    base: str,
    client: Any,
    reports: list[SyncReport],
    report: Event,
    stop: threading.Event,
    syncer: _Syncer,
) -> None:
    by_token = {s.token: s for s in subs}
    last_until: dict[str, datetime] = {}
    ends = time.monotonic() + fo.duration if fo.duration is not None else None
    last_heard = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        if ends is not None and now >= ends:
            return
        for sub in subs:
            if now >= sub.renew_at:
                _subscribe(client, sub, base, fo, report)
        if now - last_heard >= fo.poll_interval:
            # Silence: a lost hub or lost subscription must not mean lost changes.
            reports.append(sync(source, dest, options))
            report("caught-up", reports[-1])
            last_heard = now
        try:
            token, body = inbox.get(timeout=0.2)
        except queue.Empty:
            continue
        last_heard = time.monotonic()
        sub = by_token[token]
        try:
            with open_document(body, name=f"notification from {sub.hub}") as reader:
                doc = reader.document
                entries = list(reader)
        except ResourceSyncError as exc:
            report("dropped", f"unreadable notification: {exc}")
            continue
        if doc.capability != Capability.CHANGE_NOTIFICATION:
            report("dropped", f"not a change notification ({doc.capability})")
            continue
        previous = last_until.get(token)
        if previous is not None and doc.from_ is not None and doc.from_ > previous:
            # A notification was lost: the Change List has everything in between.
            reports.append(sync(source, dest, options))
            report("caught-up", reports[-1])
        set_report = syncer.apply_changes(sub.set, entries)
        if doc.until is not None:
            last_until[token] = doc.until
        result = SyncReport(source=source, dest=str(dest), how="notification", sets=[set_report])
        reports.append(result)
        report("applied", result)
