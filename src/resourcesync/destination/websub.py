"""The subscriber's side of WebSub (W3C Recommendation §5, Change Notification 1.0.1 §4.2–4.4):
the callback endpoint and the life of each subscription, outages included.

A `Channel` is one topic at one hub that the follower wants to hear from (a set's change
notification channel, or its framework notification channel). It goes through the states

    idle ──request accepted (202)──▶ verifying ──hub's GET answered──▶ active
      ▲                                  │                               │
      └──── refused, unreachable, ───────┘◀──────── lease at 80 % ───────┘
            not verified in time (backoff with jitter, capped)

and `denied` when the hub says so (§5.2: `hub.mode=denied`), which ends the waiting for good.
Every subscription request uses a new callback path and a new secret (§5.1 recommends it for
renewals); the previous callback is still accepted until the new one is verified, then it is
unsubscribed. Any callback path this process does not know (replaced, or left by an earlier
run that was killed) answers 410 Gone, which makes a hub drop that subscription.

Nothing here exits on an outage: a failure is a state with a time for the next try.
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
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ..errors import ResourceSyncError
from ..http import RetryPolicy
from ..units import ascii_int
from .discover import SetInfo

__all__ = ["Callbacks", "Channel", "Endpoint", "Inbox", "serve_callbacks"]

MAX_PAYLOAD = 8 * 1024 * 1024

Event = Callable[[str, Any], None]

_DIGESTS: dict[str, Callable[..., Any]] = {
    "sha1": hashlib.sha1,
    "sha256": hashlib.sha256,
    "sha384": hashlib.sha384,
    "sha512": hashlib.sha512,
}


@dataclass
class Endpoint:
    """One callback path with its own secret (one per subscription request)."""

    channel: Channel
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    secret: str = field(default_factory=lambda: secrets.token_hex(24))
    verified: threading.Event = field(default_factory=threading.Event)
    unsubscribed: threading.Event = field(default_factory=threading.Event)
    #: The hub's reason when it denied the subscription (§5.2), "" when it gave none.
    denied: str | None = None
    lease: int = 0
    #: When the hub's lease on it ends (monotonic seconds); 0 until verified.
    expires: float = 0.0
    #: Unsubscribing: the hub's GET with hub.mode=unsubscribe is answered.
    leaving: bool = False
    leave_by: float = 0.0


@dataclass
class Channel:
    """A topic at a hub, and where its subscription stands (see the module docstring)."""

    set: SetInfo
    topic: str
    hub: str
    #: "change" (Change Notification) or "framework" (Framework Notification)
    kind: str = "change"
    state: str = "idle"
    current: Endpoint | None = None
    pending: Endpoint | None = None
    retiring: list[Endpoint] = field(default_factory=list)
    next_try: float = 0.0
    failures: int = 0
    renew_at: float = 0.0
    verify_by: float = 0.0
    #: `until` of the last notification applied in sequence (None: none yet since the start or
    #: since a gap) — the next one's `from` must not be after it.
    covered: datetime | None = None

    def active(self, now: float) -> bool:
        return self.current is not None and now < self.current.expires

    def describe(self) -> dict[str, str]:
        return {"topic": self.topic, "hub": self.hub, "channel": self.kind}


Inbox = queue.Queue[tuple[Endpoint, bytes]]


class Callbacks:
    """The callback endpoint: verification of intent (GET) and notifications (POST).

    Runs in the callback server's thread; the follower's loop reads `inbox` and the endpoints'
    events. A notification that is unsigned, or signed with another secret, to a subscription
    made with a secret is refused with 403 and dropped (websub.rocks subscriber tests 300–302
    expect a refusal; the Recommendation allows either answer).
    """

    def __init__(self, inbox: Inbox, on_event: Event) -> None:
        self.endpoints: dict[str, Endpoint] = {}
        self.inbox = inbox
        self.on_event = on_event
        self.app = Starlette(
            routes=[Route("/callback/{token}", self.handle, methods=["GET", "POST"])]
        )

    def add(self, endpoint: Endpoint) -> None:
        self.endpoints[endpoint.token] = endpoint

    def retire(self, endpoint: Endpoint) -> None:
        self.endpoints.pop(endpoint.token, None)

    async def handle(self, request: Request) -> Response:
        token = request.path_params["token"]
        endpoint = self.endpoints.get(token)
        if endpoint is None:
            # A callback replaced by a renewal, or one of an earlier run of this follower (a
            # killed one could not unsubscribe): 410 Gone makes a hub drop it (WebSub §7).
            return PlainTextResponse("no such subscription (any more)", 410)
        if request.method == "GET":
            return self._verification(endpoint, request)
        return await self._notification(endpoint, request)

    def _verification(self, endpoint: Endpoint, request: Request) -> Response:
        q = request.query_params
        mode, topic, challenge = q.get("hub.mode"), q.get("hub.topic"), q.get("hub.challenge")
        if topic != endpoint.channel.topic:
            return PlainTextResponse("not ours", 404)
        if mode == "denied":
            # §5.2: no challenge; the reason is optional.
            endpoint.denied = q.get("hub.reason", "")
            return PlainTextResponse("")
        if not challenge:
            return PlainTextResponse("no challenge", 404)
        if mode == "subscribe" and not endpoint.leaving:
            endpoint.lease = ascii_int(q.get("hub.lease_seconds", "")) or 0
            endpoint.verified.set()
            return PlainTextResponse(challenge)
        if mode == "unsubscribe" and endpoint.leaving:
            endpoint.unsubscribed.set()
            return PlainTextResponse(challenge)
        return PlainTextResponse("not expected", 404)

    async def _notification(self, endpoint: Endpoint, request: Request) -> Response:
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_PAYLOAD:
                self.on_event("dropped", "payload too large")
                return PlainTextResponse("payload too large", 413)
        signature = request.headers.get("x-hub-signature", "")
        algo, _, given = signature.partition("=")
        digest = _DIGESTS.get(algo.strip().lower())
        if digest is None or not given:
            self.on_event("dropped", "unsigned notification")
            return PlainTextResponse("a signature (X-Hub-Signature) is required", 403)
        expected = hmac.new(endpoint.secret.encode(), bytes(body), digest).hexdigest()
        if not hmac.compare_digest(expected, given.strip().lower()):
            self.on_event("dropped", "wrongly signed notification")
            return PlainTextResponse("the signature does not match", 403)
        self.inbox.put((endpoint, bytes(body)))
        return PlainTextResponse("")


@contextlib.contextmanager
def serve_callbacks(app: Any, listen: str) -> Iterator[tuple[str, int]]:
    """Run `app` on `listen` (HOST:PORT, port 0 for any) in a thread; yields (host, port)."""
    host, _, port_text = listen.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, int(port_text or 0)))
    except (OSError, ValueError) as exc:
        sock.close()
        raise ResourceSyncError(f"cannot listen on {listen}: {exc}") from None
    port = sock.getsockname()[1]
    # On asyncio's loop, as every server of ours (uvicorn would pick uvloop, installed for
    # the transfers).
    config = uvicorn.Config(app, log_level="warning", lifespan="off", loop="asyncio")
    server = uvicorn.Server(config)
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


def hub_request(client: Any, channel: Channel, mode: str, callback: str, **extra: str) -> None:
    """POST a (un)subscription request to the channel's hub; raises ResourceSyncError unless
    the hub accepted it."""
    form = {"hub.mode": mode, "hub.topic": channel.topic, "hub.callback": callback, **extra}
    try:
        response = client.post(channel.hub, data=form)
    except Exception as exc:  # any transport failure is an outage, retried
        raise ResourceSyncError(
            f"hub unreachable: {exc or type(exc).__name__}", source=channel.hub
        ) from None
    if response.status_code not in (200, 202, 204):
        raise ResourceSyncError(
            f"hub refused to {mode}: HTTP {response.status_code} {response.text[:200].strip()}",
            source=channel.hub,
        )


@dataclass
class Subscriber:
    """Keeps every channel subscribed: call `tick()` often from one thread."""

    client: Any
    callbacks: Callbacks
    base: str
    lease_seconds: int
    verify_timeout: float
    backoff: RetryPolicy
    report: Event
    channels: list[Channel] = field(default_factory=list)
    clock: Callable[[], float] = time.monotonic
    #: Set when a channel became active after having had no subscription (the follower then
    #: catches up from the Change List).
    recovered: bool = False

    def tick(self) -> None:
        now = self.clock()
        for ch in self.channels:
            if ch.state == "denied":
                continue
            self._retire(ch, now)
            if ch.state == "verifying":
                self._check_verification(ch, now)
            elif now >= (ch.next_try if ch.state == "idle" else ch.renew_at):
                self._request(ch, now)
            if ch.state != "denied" and ch.current is not None and ch.current.denied is not None:
                self._denied(ch, ch.current.denied)

    def update(self, found: list[Channel]) -> None:
        """Follow the channels `found` from now on: new ones are subscribed to, those no
        longer offered are unsubscribed from."""

        def key(ch: Channel) -> tuple[str, str, str]:
            return (ch.kind, ch.topic, ch.hub)

        wanted = {key(ch): ch for ch in found}
        for ch in list(self.channels):
            if key(ch) in wanted:
                continue
            self.channels.remove(ch)
            if ch.pending is not None:
                self.callbacks.retire(ch.pending)
            if ch.current is not None:
                ch.current.leaving = True
                with contextlib.suppress(ResourceSyncError):
                    hub_request(self.client, ch, "unsubscribe", self.base + ch.current.token)
                # Retired at once: a late delivery gets 410 Gone, which ends it too.
                self.callbacks.retire(ch.current)
            self.report("channel-removed", ch.describe())
        have = {key(ch) for ch in self.channels}
        for k, ch in wanted.items():
            if k not in have:
                self.channels.append(ch)
                self.report("channel-added", ch.describe())

    def resubscribe_now(self, reason: str) -> None:
        """Renew every active subscription at once (the hub may have forgotten them)."""
        now = self.clock()
        for ch in self.channels:
            if ch.state == "active" and ch.active(now):
                ch.renew_at = now
                self.report("resubscribing", {**ch.describe(), "reason": reason})

    def degraded(self) -> bool:
        """Whether some channel that may come back is not active now."""
        now = self.clock()
        return any(ch.state != "denied" and not ch.active(now) for ch in self.channels)

    def _request(self, ch: Channel, now: float) -> None:
        endpoint = Endpoint(ch)
        self.callbacks.add(endpoint)
        try:
            hub_request(
                self.client,
                ch,
                "subscribe",
                self.base + endpoint.token,
                **{"hub.secret": endpoint.secret, "hub.lease_seconds": str(self.lease_seconds)},
            )
        except ResourceSyncError as exc:
            self.callbacks.retire(endpoint)
            self._failed(ch, now, exc.message)
            return
        ch.pending = endpoint
        ch.state = "verifying"
        ch.verify_by = now + self.verify_timeout

    def _check_verification(self, ch: Channel, now: float) -> None:
        endpoint = ch.pending
        assert endpoint is not None
        if endpoint.denied is not None:
            self._denied(ch, endpoint.denied)
            return
        if endpoint.verified.is_set():
            lease = endpoint.lease or self.lease_seconds
            endpoint.expires = now + lease
            # A renewal replaces a subscription still running; after an outage it had ended.
            renewal = ch.active(now)
            previous, ch.current, ch.pending = ch.current, endpoint, None
            ch.state = "active"
            ch.renew_at = now + max(lease * 0.8, 1.0)
            detail: dict[str, Any] = {
                **ch.describe(),
                "lease": lease,
                "callback": self.base + endpoint.token,
            }
            if ch.failures:
                detail["after_failures"] = ch.failures
            if ch.failures or previous is None:
                # Changes published while no subscription was active are in the Change List.
                self.recovered = True
            ch.failures = 0
            self.report("renewed" if renewal else "subscribed", detail)
            if previous is not None:
                self._leave(ch, previous, now)
            return
        if now >= ch.verify_by:
            ch.pending = None
            self.callbacks.retire(endpoint)
            self._failed(
                ch,
                now,
                f"the hub did not verify the subscription within {self.verify_timeout:g}s "
                "(is the callback reachable from it? see --callback-url)",
            )

    def _failed(self, ch: Channel, now: float, reason: str) -> None:
        ch.failures += 1
        delay = self.backoff.delay(ch.failures)
        ch.next_try = now + delay
        # A renewal that failed leaves the current subscription in place until its lease ends.
        ch.state = "active" if ch.active(now) else "idle"
        if ch.state == "active":
            ch.renew_at = ch.next_try
        self.report(
            "hub-unavailable",
            {**ch.describe(), "reason": reason, "attempt": ch.failures, "retry_in": delay},
        )

    def _denied(self, ch: Channel, reason: str) -> None:
        ch.state = "denied"
        if ch.pending is not None:
            self.callbacks.retire(ch.pending)
            ch.pending = None
        self.report("denied", {**ch.describe(), "reason": reason})

    def _leave(self, ch: Channel, endpoint: Endpoint, now: float) -> None:
        """Unsubscribe a callback that a renewal replaced (kept until the hub confirms)."""
        endpoint.leaving = True
        endpoint.leave_by = now + self.verify_timeout
        ch.retiring.append(endpoint)
        try:
            hub_request(self.client, ch, "unsubscribe", self.base + endpoint.token)
        except ResourceSyncError:
            endpoint.leave_by = now  # 410 Gone will tell the hub instead

    def _retire(self, ch: Channel, now: float) -> None:
        for endpoint in list(ch.retiring):
            if endpoint.unsubscribed.is_set() or now >= endpoint.leave_by:
                ch.retiring.remove(endpoint)
                self.callbacks.retire(endpoint)

    def unsubscribe_all(self) -> None:
        """On a clean exit: unsubscribe every active callback (best effort, a few seconds)."""
        waiting = []
        for ch in self.channels:
            endpoint = ch.current
            if endpoint is None:
                continue
            endpoint.leaving = True
            try:
                hub_request(self.client, ch, "unsubscribe", self.base + endpoint.token)
            except ResourceSyncError:
                continue
            waiting.append((ch, endpoint))
        deadline = self.clock() + 5
        for ch, endpoint in waiting:
            if endpoint.unsubscribed.wait(timeout=max(deadline - self.clock(), 0.0)):
                self.report("unsubscribed", ch.topic)
