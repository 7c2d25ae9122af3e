"""The hub as an ASGI app: one URL that takes subscriptions and notifications.

`POST <hub>` with `Content-Type: application/x-www-form-urlencoded` is a WebSub subscription
request (Change Notification §4.2, §4.4): `hub.mode` (subscribe | unsubscribe), `hub.topic`,
`hub.callback`, optional `hub.lease_seconds` and `hub.secret` (under 200 bytes); other
parameters are ignored. The answer is 202 and the hub then verifies the intent: a GET to the
callback with `hub.mode`, `hub.topic`, `hub.challenge` (and `hub.lease_seconds` for subscribe)
added to its query; only a 2xx answer whose body is the challenge makes the (un)subscription
happen. A request the hub can refuse at once gets 4xx and a one-line reason.

`POST <hub>` with `Content-Type: application/xml` is a Source submitting a notification
(Change Notification §4.1): the body is the payload, `Link: <topic>; rel="self"` names the
topic. It is checked (well-formed, `<urlset>`, `capability="change-notification"` with `from`
and `until`), stored with a delivery queued for each subscriber, and answered 200; or refused
with 4xx and a reason. Nothing is delivered that was not stored first.

`GET <hub>` answers a small JSON status (counts only; no callbacks, no secrets).

The delivery workers (`deliver.Deliverer`) run in the same process, started and stopped by the
app's lifespan: run it under a server with lifespan on (uvicorn's default, `lifespan="on"`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import re
import secrets
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from ..errors import ResourceSyncError
from ..http import HttpOptions, RetryPolicy, make_async_client
from ..model import Capability
from ..sitemap import open_document
from ..units import ascii_int
from .config import HubConfig
from .deliver import Deliverer
from .store import Store
from .topics import normalise_topic

__all__ = ["Hub", "create_app", "format_links", "parse_links"]

log = logging.getLogger("resourcesync.hub")

MAX_SECRET_BYTES = 200  # WebSub §5.1: hub.secret MUST be less than 200 bytes
MAX_URL_CHARS = 2048
_XML_TYPES = frozenset({"application/xml", "text/xml"})
_FORM_TYPE = "application/x-www-form-urlencoded"

# RFC 8288 link-param: `; name` or `; name=token` or `; name="quoted"`.
_PARAM = re.compile(
    r"""\s*;\s*([!#$%&'*+.^_`|~0-9A-Za-z-]+)\s*(?:=\s*("(?:[^"\\]|\\.)*"|[^\s;,]*))?\s*"""
)


def parse_links(value: str) -> list[tuple[str, dict[str, str]]]:
    """The links of a Link header value (RFC 8288): (target, params) with lower-case names.

    Lenient: an element that cannot be parsed is skipped up to the next comma.
    """
    out: list[tuple[str, dict[str, str]]] = []
    pos, n = 0, len(value)
    while pos < n:
        lt = value.find("<", pos)
        if lt < 0:
            break
        gt = value.find(">", lt)
        if gt < 0:
            break
        target = value[lt + 1 : gt].strip()
        pos = gt + 1
        params: dict[str, str] = {}
        while (m := _PARAM.match(value, pos)) is not None:
            name, raw = m.group(1).lower(), m.group(2) or ""
            if raw.startswith('"'):
                raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
            params.setdefault(name, raw)
            pos = m.end()
        comma = value.find(",", pos)
        if value[pos : comma if comma >= 0 else n].strip():
            # Garbage after the params: skip this element (a quoted comma can't hide here).
            pos = n if comma < 0 else comma + 1
            continue
        out.append((target, params))
        pos = n if comma < 0 else comma + 1
    return out


def rels(params: dict[str, str]) -> set[str]:
    return set(params.get("rel", "").lower().split())


def format_links(links: list[tuple[str, str]]) -> str:
    """`<a>; rel="x", <b>; rel="y"` from (target, rel) pairs."""
    return ", ".join(f'<{target}>; rel="{rel}"' for target, rel in links)


def _is_http_url(text: str) -> bool:
    try:
        parts = urlsplit(text)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _bad(reason: str, status: int = 400, headers: dict[str, str] | None = None) -> Response:
    return PlainTextResponse(reason + "\n", status_code=status, headers=headers)


class _TooLarge(Exception):
    pass


async def _read_capped(request: Request, cap: int) -> bytes:
    length = ascii_int(request.headers.get("content-length", ""))
    if length is not None and length > cap:
        raise _TooLarge
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:
            raise _TooLarge
    return bytes(body)


def _check_payload(body: bytes, cap: int) -> str | None:
    """Why `body` is not a notification we relay, or None: a change notification (Change
    Notification §3: `from` and `until` required) or a framework notification (Framework
    Notification §3: each entry names the `capability` of the document that changed). Reads
    every entry, so a payload that breaks half way is refused, not relayed."""
    try:
        with open_document(body, name="payload", max_bytes=cap) as reader:
            doc = reader.document
            if doc.index:
                return "a notification is a <urlset>, not a <sitemapindex> (§3)"
            if doc.capability == Capability.FRAMEWORK_NOTIFICATION:
                for entry in reader:
                    if not entry.capability or not entry.change:
                        return (
                            f"entry {entry.loc} of a framework notification needs change and "
                            "capability (Framework Notification §3)"
                        )
                return None
            if doc.capability != Capability.CHANGE_NOTIFICATION:
                found = f'"{doc.capability}"' if doc.capability else "missing"
                return (
                    f'capability is {found}; a notification has "change-notification" or '
                    '"framework-notification" (§3)'
                )
            if doc.from_ is None or doc.until is None:
                return "<rs:md> of a change notification needs both from and until (§3)"
            for _ in reader:
                pass
    except ResourceSyncError as exc:
        return f"not a valid document: {exc}"
    return None


class Hub:
    """The state of a running hub: config, store, HTTP client, delivery workers."""

    def __init__(
        self,
        config: HubConfig,
        db: str | Path,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.db = db
        self.clock = clock
        self.store: Store | None = None
        self.client: httpx.AsyncClient | None = None
        self.deliverer: Deliverer | None = None
        self._verifications: set[asyncio.Task[None]] = set()
        self._verify_slots = asyncio.Semaphore(max(1, config.concurrency // 4))
        self._topic_ok: dict[str, float] = {}
        #: Per topic: (tokens left, when counted) — the publishers' rate limit.
        self._buckets: dict[str, tuple[float, float]] = {}

    # -- lifespan --------------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.config
        self.store = Store(
            self.db,
            clock=self.clock,
            max_pending=cfg.max_pending_per_subscription,
            max_topic_notifications=cfg.max_topic_notifications,
            max_topic_bytes=cfg.max_topic_bytes,
            memory_budget=cfg.memory_budget,
        )
        self.client = make_async_client(
            HttpOptions(
                timeout=cfg.timeout,
                connect_timeout=min(cfg.timeout, 10.0),
                max_connections=cfg.concurrency,
                max_keepalive=cfg.concurrency,
                retry=RetryPolicy(retries=0),
                # A redirect could lead anywhere, past the address policy: never follow.
                follow_redirects=False,
            ),
            # The policy judges the addresses each connection goes to as well (DNS rebinding).
            judge=cfg.policy,
        )
        self.deliverer = Deliverer(self.store, self.client, cfg, clock=self.clock)
        self.deliverer.resume()
        pending = self.store.stats()["pending_deliveries"]
        log.info("hub: started with %s (%d deliveries pending)", self.db, pending)

    async def close(self) -> None:
        for task in list(self._verifications):
            task.cancel()
        await asyncio.gather(*self._verifications, return_exceptions=True)
        if self.deliverer is not None:
            await self.deliverer.close()
        if self.client is not None:
            await self.client.aclose()
        if self.store is not None:
            self.store.close()
        self.store = self.client = self.deliverer = None

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.start()
        try:
            yield
        finally:
            await self.close()

    def _parts(self) -> tuple[Store, httpx.AsyncClient, Deliverer]:
        if self.store is None or self.client is None or self.deliverer is None:
            raise RuntimeError("the hub is not running (is the server's lifespan on?)")
        return self.store, self.client, self.deliverer

    # -- the endpoint ----------------------------------------------------------------------

    async def endpoint(self, request: Request) -> Response:
        store, _, deliverer = self._parts()
        if request.method in ("GET", "HEAD"):
            stats: dict[str, Any] = dict(store.stats())
            stats["workers"] = deliverer.active
            stats["verifications"] = len(self._verifications)
            stats.update(deliverer.counts)
            return JSONResponse(stats)
        ctype = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if ctype == _FORM_TYPE:
            return await self._subscription(request)
        if ctype in _XML_TYPES:
            return await self._publish(request)
        return _bad(
            f"Content-Type {ctype or '(none)'} is not accepted: subscription requests are "
            f"{_FORM_TYPE}, notifications application/xml",
            415,
        )

    # -- subscriptions ---------------------------------------------------------------------

    async def _subscription(self, request: Request) -> Response:
        cfg = self.config
        try:
            body = await _read_capped(request, cfg.max_form_bytes)
        except _TooLarge:
            return _bad(f"subscription request larger than {cfg.max_form_bytes} bytes", 413)
        try:
            pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=100)
        except (UnicodeDecodeError, ValueError) as exc:
            return _bad(f"the form cannot be read: {exc}")
        form: dict[str, str] = {}
        for key, value in pairs:
            form.setdefault(key, value)  # the first of repeated parameters counts

        mode = form.get("hub.mode", "")
        if mode == "publish":
            return _bad(
                "hub.mode=publish is not how this hub takes notifications: POST the payload "
                'as application/xml with Link: <topic>; rel="self"'
            )
        if mode not in ("subscribe", "unsubscribe"):
            return _bad(
                "hub.mode is missing" if not mode else f"hub.mode={mode!r} is not supported"
            )
        callback, topic = form.get("hub.callback", ""), form.get("hub.topic", "")
        for name, value in (("hub.callback", callback), ("hub.topic", topic)):
            if not value:
                return _bad(f"{name} is missing")
            if len(value) > MAX_URL_CHARS or not _is_http_url(value):
                return _bad(f"{name} is not an absolute http(s) URL")
        lease: int | None = None
        if mode == "subscribe" and form.get("hub.lease_seconds", "") != "":
            lease = ascii_int(form["hub.lease_seconds"].strip())
            if not lease:
                return _bad("hub.lease_seconds must be a positive integer")
        secret: bytes | None = None
        if form.get("hub.secret"):
            secret = form["hub.secret"].encode("utf-8")
            if len(secret) >= MAX_SECRET_BYTES:
                return _bad(f"hub.secret must be less than {MAX_SECRET_BYTES} bytes")
        if not cfg.topic_allowed(topic):
            return _bad(f"topic {topic} is not relayed by this hub", 403)
        refusal = await cfg.policy.check(callback)
        if refusal is not None:
            return _bad(f"hub.callback not allowed: {refusal}", 403)
        if len(self._verifications) >= cfg.max_pending_verifications:
            return _bad("too many subscription requests being verified", 503, {"Retry-After": "5"})

        granted = cfg.grant_lease(lease)
        task = asyncio.create_task(self._verify(mode, topic, callback, secret, granted))
        self._verifications.add(task)
        task.add_done_callback(self._verifications.discard)
        return PlainTextResponse(
            f"accepted: the hub will verify the {mode} request at the callback\n", 202
        )

    async def _verify(
        self, mode: str, topic: str, callback: str, secret: bytes | None, lease: int
    ) -> None:
        """Verification of intent (WebSub §5.3): GET the callback with a challenge (and the
        topic as the subscriber wrote it); the subscription is kept under the normal form."""
        store, client, deliverer = self._parts()
        challenge = secrets.token_urlsafe(24)
        query = {"hub.mode": mode, "hub.topic": topic, "hub.challenge": challenge}
        if mode == "subscribe":
            query["hub.lease_seconds"] = str(lease)
        base, _, _fragment = callback.partition("#")
        url = base + ("&" if "?" in base else "?") + urlencode(query)
        expected = challenge.encode("ascii")
        try:
            async with (
                self._verify_slots,
                asyncio.timeout(self.config.timeout),
                client.stream("GET", url) as r,
            ):
                answer = bytearray()
                async for chunk in r.aiter_bytes():
                    answer += chunk
                    if len(answer) > len(expected) + 1024:
                        break
                status = r.status_code
        except (TimeoutError, httpx.HTTPError) as exc:
            log.info(
                "hub: %s of %s to %s not verified: %s",
                mode,
                callback,
                topic,
                str(exc) or type(exc).__name__,
            )
            return
        if not 200 <= status < 300:
            log.info("hub: %s of %s to %s refused: HTTP %d", mode, callback, topic, status)
            return
        if not hmac.compare_digest(bytes(answer).strip(), expected):
            log.info("hub: %s of %s to %s refused: wrong challenge", mode, callback, topic)
            return
        if mode == "subscribe":
            sub = store.subscribe(normalise_topic(topic), callback, secret, lease)
            deliverer.kick([sub.id])
            log.info("hub: %s subscribed to %s for %ds", callback, topic, lease)
        else:
            store.unsubscribe(normalise_topic(topic), callback)
            log.info("hub: %s unsubscribed from %s", callback, topic)

    # -- notifications ---------------------------------------------------------------------

    async def _publish(self, request: Request) -> Response:
        store, _, deliverer = self._parts()
        cfg = self.config
        if cfg.token is not None:
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                given.strip().encode(), cfg.token.encode()
            ):
                return _bad(
                    "publishing to this hub needs Authorization: Bearer <token>",
                    401,
                    {"WWW-Authenticate": 'Bearer realm="resourcesync hub"'},
                )
        try:
            body = await _read_capped(request, cfg.max_notification_bytes)
        except _TooLarge:
            return _bad(f"notification larger than {cfg.max_notification_bytes} bytes", 413)

        links = parse_links(", ".join(request.headers.getlist("link")))
        topic = next((t for t, p in links if "self" in rels(p)), None)
        if topic is None:
            return _bad('Link header with rel="self" (the topic URI) is missing (§4.1)')
        if len(topic) > MAX_URL_CHARS or not _is_http_url(topic):
            return _bad(f'Link rel="self" {topic!r} is not an absolute http(s) URL')
        if not cfg.topic_allowed(topic):
            return _bad(f"topic {topic} is not relayed by this hub", 403)
        wait = self._rate_limited(normalise_topic(topic))
        if wait is not None:
            return _bad(
                f"too many notifications for {topic}: at most {cfg.publish_rate:g}/s "
                f"(bursts of {cfg.publish_burst}); try again later",
                429,
                {"Retry-After": str(max(1, round(wait)))},
            )

        if len(body) > 64 << 10:  # parsing a large payload must not stall the event loop
            problem = await anyio.to_thread.run_sync(
                _check_payload, body, cfg.max_notification_bytes
            )
        else:
            problem = _check_payload(body, cfg.max_notification_bytes)
        if problem is not None:
            return _bad(problem)
        if cfg.check_topic:
            problem = await self._check_topic(topic)
            if problem is not None:
                return _bad(f"topic check failed: {problem}")

        hub_url = (
            cfg.public_url
            or next((t for t, p in links if "hub" in rels(p)), None)
            or str(request.url.replace(query="", fragment=""))
        )
        forward = [(topic, "self"), (hub_url, "hub")]
        for target, params in links:
            for rel in sorted(rels(params) - {"self", "hub"}):
                forward.append((target, rel))
        subscribers = store.publish(normalise_topic(topic), format_links(forward), body)
        deliverer.kick(subscribers)
        return PlainTextResponse(f"accepted: queued for {len(subscribers)} subscriber(s)\n", 200)

    def _rate_limited(self, key: str) -> float | None:
        """Take a token from the topic's bucket; None when there was one, else the seconds
        until there is."""
        cfg = self.config
        if cfg.publish_rate <= 0 or cfg.publish_burst <= 0:
            return None
        now = time.monotonic()
        tokens, then = self._buckets.get(key, (float(cfg.publish_burst), now))
        tokens = min(float(cfg.publish_burst), tokens + (now - then) * cfg.publish_rate)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / cfg.publish_rate
        if len(self._buckets) > 10_000:
            # Full buckets carry nothing worth keeping.
            self._buckets = {k: v for k, v in self._buckets.items() if v[0] < cfg.publish_burst - 1}
        self._buckets[key] = (tokens - 1.0, now)
        return None

    async def _check_topic(self, topic: str) -> str | None:
        """Change Notification §4.1: HEAD/GET on the topic URI answers 200, application/xml,
        and Link headers with rel="self" (the topic) and rel="hub". Successes are cached."""
        now = time.monotonic()
        if self._topic_ok.get(topic, 0.0) > now:
            return None
        _, client, _ = self._parts()
        refusal = await self.config.policy.check(topic)
        if refusal is not None:
            return f"the hub may not contact {topic}: {refusal}"
        try:
            async with asyncio.timeout(self.config.timeout):
                r = await client.head(topic)
                method = "HEAD"
                if r.status_code in (405, 501):
                    method = "GET"
                    async with client.stream("GET", topic) as r:
                        pass  # the headers are all we need
        except (TimeoutError, httpx.HTTPError) as exc:
            return f"{topic} cannot be reached: {str(exc) or type(exc).__name__}"
        if r.status_code != 200:
            return f"{method} {topic} answered {r.status_code}, not 200"
        ctype = r.headers.get("content-type", "").partition(";")[0].strip().lower()
        if ctype != "application/xml":
            return f"{topic} has Content-Type {ctype or '(none)'}, not application/xml"
        links = parse_links(", ".join(r.headers.get_list("link")))
        key = normalise_topic(topic)
        if not any(normalise_topic(t) == key and "self" in rels(p) for t, p in links):
            return f'{topic} has no Link header with rel="self" naming it'
        if not any("hub" in rels(p) for _, p in links):
            return f'{topic} has no Link header with rel="hub"'
        if len(self._topic_ok) > 10_000:
            self._topic_ok.clear()
        self._topic_ok[topic] = now + self.config.check_topic_cache
        return None


def create_app(
    config: HubConfig | None = None,
    db: str | Path = "hub.sqlite",
    *,
    path: str = "/",
    clock: Callable[[], float] = time.time,
) -> Starlette:
    """The hub's ASGI app at `path`, keeping its state in the SQLite file `db`."""
    hub = Hub(config or HubConfig(), db, clock=clock)

    async def store_error(request: Request, exc: Exception) -> Response:
        """The hub's database found damaged while it runs: 503 to each request (not a 500
        with a traceback in the log each time), and one line in the log (`Store.damaged`)."""
        if hub.store is None or not hub.store.damaged(exc):
            raise exc
        return PlainTextResponse("the hub's database is damaged\n", status_code=503)

    app = Starlette(
        routes=[Route(path, hub.endpoint, methods=["GET", "POST"])],
        lifespan=hub.lifespan,
        exception_handlers={sqlite3.DatabaseError: store_error},
    )
    app.state.hub = hub
    return app
