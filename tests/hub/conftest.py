"""Real parts for the hub's tests: the hub under uvicorn (lifespan on, temporary SQLite file),
subscribers as small Starlette apps on 127.0.0.1 that record what they receive, and payloads."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from resourcesync.hub import AddressPolicy, HubConfig, create_app

from ..servers import serve

TOPIC = "http://127.0.0.1:9/dataset1/change/"


def fast_config(**changes: Any) -> HubConfig:
    """A hub for tests: loopback allowed, short timeouts and backoff, tiny leases allowed."""
    from resourcesync.http import RetryPolicy

    base: dict[str, Any] = {
        "policy": AddressPolicy(allow_loopback=True),
        "lease_min": 1,
        "timeout": 5.0,
        "retry": RetryPolicy(retries=0, backoff=0.05, max_backoff=0.2),
        "sweep_interval": 0.2,
    }
    base.update(changes)
    return HubConfig(**base)


@contextlib.contextmanager
def run_hub(config: HubConfig, db: Path) -> Iterator[str]:
    """The hub on 127.0.0.1 with its lifespan (the delivery workers) on; yields the hub URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = create_app(config, db)
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False, loop="asyncio")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("hub did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


@dataclass
class Received:
    body: bytes
    headers: dict[str, str]
    at: float


@dataclass
class Subscriber:
    """A callback endpoint. `verify`: "echo", "404" or "wrong". `answer(n)` gives the status
    for the n-th notification POST (0-based); `delay` seconds of sleep before answering."""

    verify: str = "echo"
    answer: Callable[[int], int] = lambda n: 200
    delay: float = 0.0
    verifications: list[dict[str, str]] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    attempts: int = 0
    url: str = ""

    def app(self) -> Starlette:
        import asyncio

        async def callback(request: Request) -> Response:
            if request.method == "GET":
                params = dict(request.query_params)
                self.verifications.append(params)
                if self.verify == "404":
                    return PlainTextResponse("no", 404)
                if self.verify == "wrong":
                    return PlainTextResponse("not-the-challenge")
                return PlainTextResponse(params.get("hub.challenge", ""))
            body = await request.body()
            n = self.attempts
            self.attempts += 1
            if self.delay:
                await asyncio.sleep(self.delay)
            status = self.answer(n)
            if 200 <= status < 300:
                self.received.append(Received(body, dict(request.headers), time.monotonic()))
            return Response(status_code=status)

        return Starlette(routes=[Route("/cb", callback, methods=["GET", "POST"])])

    def bodies(self) -> list[bytes]:
        return [r.body for r in self.received]


@contextlib.contextmanager
def run_subscriber(sub: Subscriber) -> Iterator[Subscriber]:
    with serve(sub.app()) as base:
        sub.url = f"{base}/cb"
        yield sub


def wait_for(check: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def stats(hub: str) -> dict[str, int]:
    result: dict[str, int] = httpx.get(hub).json()
    return result


def subscribe(hub: str, callback: str, topic: str = TOPIC, **extra: str) -> httpx.Response:
    form = {"hub.mode": "subscribe", "hub.callback": callback, "hub.topic": topic, **extra}
    return httpx.post(hub, data=form)


def unsubscribe(hub: str, callback: str, topic: str = TOPIC) -> httpx.Response:
    form = {"hub.mode": "unsubscribe", "hub.callback": callback, "hub.topic": topic}
    return httpx.post(hub, data=form)


def subscribed(hub: str, sub: Subscriber, topic: str = TOPIC, **extra: str) -> None:
    """Subscribe and wait until the hub has verified and recorded it."""
    before = len(sub.verifications)
    r = subscribe(hub, sub.url, topic, **extra)
    assert r.status_code == 202, r.text
    wait_for(lambda: len(sub.verifications) > before, what="verification")
    wait_for(lambda: stats(hub)["verifications"] == 0, what="verification to finish")


def payload(i: int, capability: str = "change-notification") -> bytes:
    """The i-th of consecutive change notifications (one minute each)."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        ' xmlns:rs="http://www.openarchives.org/rs/terms/">\n'
        '  <rs:ln rel="up" href="http://127.0.0.1:9/dataset1/capabilitylist.xml"/>\n'
        f'  <rs:md capability="{capability}" from="2024-01-01T00:{i:02d}:00Z"'
        f' until="2024-01-01T00:{i + 1:02d}:00Z"/>\n'
        f"  <url><loc>http://127.0.0.1:9/res{i}</loc>"
        f'<rs:md change="updated" datetime="2024-01-01T00:{i:02d}:30Z" length="{i}"/></url>\n'
        "</urlset>\n"
    ).encode()


def publish(
    hub: str,
    body: bytes,
    topic: str | None = TOPIC,
    *,
    content_type: str = "application/xml",
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    h = {"Content-Type": content_type, **(headers or {})}
    if topic is not None:
        h["Link"] = f'<{topic}>; rel="self", <{hub}>; rel="hub"'
    return httpx.post(hub, content=body, headers=h)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "hub.sqlite"


@pytest.fixture(scope="module")
def shared_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One hub with the test configuration for a module's tests that change nothing in it."""
    with run_hub(fast_config(), tmp_path_factory.mktemp("hub") / "hub.sqlite") as hub:
        yield hub


@pytest.fixture(scope="module")
def shared_subscriber() -> Iterator[Subscriber]:
    with run_subscriber(Subscriber()) as sub:
        yield sub
