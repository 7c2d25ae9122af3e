"""Following a Source through a WebSub hub: a changed file arrives on the Destination's disk."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from resourcesync.destination.subscribe import FollowOptions
from resourcesync.destination.subscribe import follow as run_follow
from resourcesync.destination.sync import SyncOptions
from resourcesync.http import HttpOptions, RetryPolicy
from resourcesync.model import Resource
from resourcesync.source.config import PublishConfig, SetConfig
from resourcesync.source.publish import publish
from resourcesync.source.server import create_app
from tests.destination.helpers import behind_a_token
from tests.hub.conftest import fast_config, run_hub
from tests.servers import serve


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


class Follower:
    """`follow` in a thread, its events recorded; `finish()` stops it (and unsubscribes)."""

    def __init__(
        self,
        site: str,
        dest: Path,
        options: SyncOptions | None = None,
        listen: int | None = None,
        lease: int = 86400,
        **more: Any,
    ) -> None:
        self.events: list[tuple[str, Any]] = []
        self.stop = threading.Event()
        follow_options = FollowOptions(
            listen=f"127.0.0.1:{listen or free_port()}", lease_seconds=lease, **more
        )
        self.thread = threading.Thread(
            target=run_follow,
            args=(site, dest, options or SyncOptions(), follow_options),
            kwargs={"on_event": lambda k, d: self.events.append((k, d)), "stop": self.stop},
            daemon=True,
        )
        self.thread.start()

    def kinds(self) -> list[str]:
        return [k for k, _ in self.events]

    def subscribed(self, timeout: float = 10.0) -> dict[str, Any]:
        wait_for(lambda: "subscribed" in self.kinds(), timeout=timeout)
        return next(d for k, d in self.events if k == "subscribed")

    def details(self, kind: str) -> list[Any]:
        return [d for k, d in list(self.events) if k == kind]

    def wait_event(self, kind: str, match: Any = None, timeout: float = 10.0) -> Any:
        """The first `kind` event (after those already matched by `match`, a predicate)."""
        found: list[Any] = []

        def seen() -> bool:
            found[:] = [d for d in self.details(kind) if match is None or match(d)]
            return bool(found)

        wait_for(seen, timeout=timeout)
        return found[0]

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=15)
        assert not self.thread.is_alive()


@contextlib.contextmanager
def published_site(
    tmp_path: Path, files: dict[str, str], *, token: str | None = None
) -> Iterator[tuple[Path, Any, str]]:
    """FILES published (set1, notifying a hub of ours) and served: (data, config, site); with
    `token`, only to requests that give it."""
    data = tmp_path / "data"
    data.mkdir()
    for name, text in files.items():
        (data / name).write_text(text)
    site_port = free_port()
    site = f"http://127.0.0.1:{site_port}/"
    with run_hub(fast_config(), tmp_path / "hub.sqlite") as hub:
        config = PublishConfig(
            out=tmp_path / "out",
            sets=[SetConfig("set1", data, site + "files/", hub=hub)],
            docs_url=site,
        )
        publish(config)
        app = create_app(tmp_path / "out")
        with serve_on(app if token is None else behind_a_token(app, token), site_port):
            yield data, config, site


def _options() -> SyncOptions:
    return SyncOptions(
        delete=True, http=HttpOptions(timeout=5, retry=RetryPolicy(retries=1, backoff=0.05))
    )


def test_a_followed_change_arrives(tmp_path: Path) -> None:
    files = {"a.txt": "first", "gone.txt": "to be deleted"}
    with published_site(tmp_path, files) as (data, config, site):
        dest = tmp_path / "copy"
        follower = Follower(site, dest, _options(), lease=60)
        follower.subscribed()
        assert (dest / "files" / "a.txt").read_text() == "first"
        latencies = []
        for round_ in range(3):
            (data / "a.txt").write_text(f"changed {round_}")
            started = time.monotonic()
            publish(config)
            wait_for(lambda r=round_: (dest / "files" / "a.txt").read_text() == f"changed {r}")
            latencies.append(time.monotonic() - started)
        (data / "gone.txt").unlink()
        publish(config)
        wait_for(lambda: not (dest / "files" / "gone.txt").exists())
        follower.finish()
    kinds = follower.kinds()
    assert kinds[0] == "synced" and "subscribed" in kinds and "applied" in kinds
    assert kinds[-1] == "unsubscribed"
    assert statistics.median(latencies) < 2.0, latencies


def test_a_source_behind_a_token_is_followed(tmp_path: Path) -> None:
    """`sync --follow --token`: the first sync had the token, and nothing after it did (the
    discovery of the hubs, the notifications' syncs): following a Source that asks for one
    stopped at once with HTTP 401."""
    with published_site(tmp_path, {"a.txt": "first"}, token="T") as (data, config, site):
        dest = tmp_path / "copy"
        options = dataclasses.replace(_options(), headers={"Authorization": "Bearer T"})
        follower = Follower(site, dest, options, lease=60)
        follower.subscribed()
        (data / "a.txt").write_text("changed")
        publish(config)
        wait_for(lambda: (dest / "files" / "a.txt").read_text() == "changed")
        follower.finish()


def test_unsigned_and_forged_notifications_are_dropped(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("first")
    site_port = free_port()
    site = f"http://127.0.0.1:{site_port}/"
    with run_hub(fast_config(), tmp_path / "hub.sqlite") as hub:
        config = PublishConfig(
            out=tmp_path / "out",
            sets=[SetConfig("set1", data, site + "files/", hub=hub)],
            docs_url=site,
        )
        publish(config)
        listen = free_port()
        dest = tmp_path / "copy"
        with serve_on(create_app(tmp_path / "out"), site_port):
            follower = Follower(site, dest, listen=listen)
            callback = follower.subscribed()["callback"]
            # A callback this follower does not know (an earlier run's): 410 Gone, so that a
            # hub drops the subscription.
            unknown = httpx.post(f"http://127.0.0.1:{listen}/callback/nope", content=b"x")
            assert unknown.status_code == 410
            # A notification that looks right but is unsigned, or signed with another secret,
            # is refused (403, as websub.rocks subscriber tests 300-302 expect) and dropped: the
            # file is not touched.
            forged = _payload(
                [Resource(loc=site + "files/a.txt", change="deleted", datetime=FAR)], FAR, FAR
            )
            assert httpx.post(callback, content=forged).status_code == 403
            bad = {"X-Hub-Signature": "sha256=" + "0" * 64}
            assert httpx.post(callback, content=forged, headers=bad).status_code == 403
            wait_for(lambda: follower.kinds().count("dropped") == 2)
            assert (dest / "files" / "a.txt").read_text() == "first"
            follower.finish()
    dropped = [d for k, d in follower.events if k == "dropped"]
    assert dropped == ["unsigned notification", "wrongly signed notification"]


FAR = datetime(2030, 1, 1, tzinfo=UTC)


class serve_on:
    """`tests.servers.serve`, on a chosen port (the Source's URLs are fixed at publication)."""

    def __init__(self, app: Any, port: int, lifespan: str = "off") -> None:
        self.app, self.port, self.lifespan = app, port, lifespan

    def __enter__(self) -> str:
        import uvicorn

        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.sock = sock
        config = uvicorn.Config(
            self.app, log_level="warning", lifespan=self.lifespan, loop="asyncio"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self.thread.start()
        wait_for(lambda: self.server.started)
        return f"http://127.0.0.1:{self.port}/"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


_ = serve  # the ephemeral-port twin


def test_a_file_changed_under_resourcesync_source_arrives_at_a_follower(tmp_path: Path) -> None:
    """End to end with the real commands: `resourcesync source --hub` watches and republishes,
    the hub relays, `follow` applies."""
    import subprocess
    import sys

    data = tmp_path / "data"
    data.mkdir()
    (data / "page.html").write_text("v1")
    site_port = free_port()
    site = f"http://127.0.0.1:{site_port}/"
    with run_hub(fast_config(), tmp_path / "hub.sqlite") as hub:
        command = [
            str(Path(sys.executable).parent / "resourcesync"),
            "source",
            str(data),
            "--base-url",
            site + "files/",
            "--port",
            str(site_port),
            "--out",
            str(tmp_path / "public"),
            "--hub",
            hub,
            "--quiet-time",
            "0.05",
            "--log-level",
            "warning",
        ]
        source = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_for(lambda: _answers(site + ".well-known/resourcesync"), timeout=20)
            dest = tmp_path / "copy"
            follower = Follower(site, dest)
            follower.subscribed(timeout=20)
            (data / "page.html").write_text("v2")
            (data / "new.html").write_text("brand new")
            wait_for(lambda: _read(dest / "files" / "page.html") == "v2", timeout=20)
            wait_for(lambda: _read(dest / "files" / "new.html") == "brand new", timeout=20)
            follower.finish()
        finally:
            source.terminate()
            source.wait(timeout=10)
    assert follower.kinds().count("applied") >= 1


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


class FakeHub:
    """A hub under the test's control: it verifies subscriptions with a short lease and lets
    the test push notifications signed with the subscriber's own secret. `deny` (a reason)
    makes it deny every subscription; `hold` (cleared) holds verifications back; `on_subscribe`
    runs before a subscription is verified."""

    def __init__(self, lease: int) -> None:
        self.deny: str | None = None
        self.hold = threading.Event()
        self.hold.set()
        self.on_subscribe: Any = None
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import Response
        from starlette.routing import Route

        self.lease = lease
        self.subscriptions: list[dict[str, str]] = []

        async def endpoint(request: Request) -> Response:
            from urllib.parse import parse_qsl

            body = await request.body()
            if request.headers.get("content-type", "").startswith("application/xml"):
                return Response(status_code=200)  # the Source's own notification: not relayed
            form = dict(parse_qsl(body.decode()))
            self.subscriptions.append(form)
            threading.Thread(target=self._verify, args=(dict(form),), daemon=True).start()
            return Response(status_code=202)

        self.app = Starlette(routes=[Route("/", endpoint, methods=["POST"])])

    def _verify(self, form: dict[str, Any]) -> None:
        time.sleep(0.05)
        if self.deny is not None:
            denial = {"hub.mode": "denied", "hub.topic": form["hub.topic"], "hub.reason": self.deny}
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(form["hub.callback"], params=denial, timeout=5)
            return
        if form["hub.mode"] == "subscribe" and self.on_subscribe is not None:
            self.on_subscribe()
        self.hold.wait(timeout=30)
        params = {
            "hub.mode": form["hub.mode"],
            "hub.topic": form["hub.topic"],
            "hub.challenge": "c-" + str(len(self.subscriptions)),
            "hub.lease_seconds": str(self.lease),
        }
        with contextlib.suppress(httpx.HTTPError):  # the follower may have stopped
            httpx.get(form["hub.callback"], params=params, timeout=5)

    def push(self, body: bytes, sub: dict[str, str] | None = None) -> int:
        import hashlib
        import hmac

        if sub is None:
            sub = next(s for s in reversed(self.subscriptions) if s["hub.mode"] == "subscribe")
        signature = hmac.new(sub["hub.secret"].encode(), body, hashlib.sha256).hexdigest()
        response = httpx.post(
            sub["hub.callback"], content=body, headers={"X-Hub-Signature": f"sha256={signature}"}
        )
        return response.status_code


@contextlib.contextmanager
def fake_hub_site(
    tmp_path: Path, files: dict[str, str], lease: int
) -> Iterator[tuple[Path, Any, str, FakeHub]]:
    """FILES published (set1, naming a `FakeHub`) and served: (data, config, site, hub)."""
    data = tmp_path / "data"
    data.mkdir()
    for name, text in files.items():
        (data / name).write_text(text)
    site_port = free_port()
    site = f"http://127.0.0.1:{site_port}/"
    hub = FakeHub(lease=lease)
    with serve(hub.app) as hub_base:
        config = PublishConfig(
            out=tmp_path / "out",
            sets=[SetConfig("set1", data, site + "files/", hub=hub_base + "/")],
            docs_url=site,
        )
        publish(config)
        with serve_on(create_app(tmp_path / "out"), site_port):
            yield data, config, site, hub


def test_a_lost_notification_is_caught_up_and_the_lease_is_renewed(tmp_path: Path) -> None:
    with fake_hub_site(tmp_path, {"a.txt": "a1", "b.txt": "b1"}, lease=2) as site_parts:
        data, config, site, hub = site_parts
        dest = tmp_path / "copy"
        follower = Follower(site, dest)
        follower.subscribed()
        # Two changes are published, but the hub "loses" the first notification: the
        # second one's `from` is after anything applied, so the follower catches up from
        # the Change List (and so gets a.txt too).
        (data / "a.txt").write_text("a2")
        publish(config)
        (data / "b.txt").write_text("b2")
        publish(config)
        from resourcesync.sitemap import read_document

        _, changes = read_document(tmp_path / "out" / "set1" / "changelist.xml")
        first_payload = _payload(changes[:1], changes[0].datetime, changes[0].datetime)
        assert hub.push(first_payload) == 200
        wait_for(lambda: "applied" in follower.kinds())
        later = changes[-1].datetime
        gap_payload = _payload(changes[-1:], later, later)
        assert hub.push(gap_payload) == 200
        wait_for(lambda: (dest / "files" / "b.txt").read_text() == "b2")
        assert (dest / "files" / "a.txt").read_text() == "a2"
        # (the files are in place a moment before the catch-up reports itself)
        wait_for(lambda: "caught-up" in follower.kinds())
        # The 2 s lease is renewed before it ends (at 80 %).
        wait_for(
            lambda: sum(1 for s in hub.subscriptions if s["hub.mode"] == "subscribe") >= 2,
            timeout=5,
        )
        follower.finish()
    assert hub.subscriptions[-1]["hub.mode"] == "unsubscribe"


def test_a_notified_change_dated_before_its_notification_is_applied(tmp_path: Path) -> None:
    """A change notification's changes are in the order listed from its `from` (core §12.1,
    as a Change List's): one dated long before (a file's kept mtime) is applied, with a
    warning, not skipped for its date behind the copy's cursor."""
    from resourcesync.sitemap import read_document

    with fake_hub_site(tmp_path, {"a.txt": "a"}, lease=60) as (data, config, site, hub):
        at = read_document(tmp_path / "out" / "set1" / "resourcelist.xml")[0].at
        dest = tmp_path / "copy"
        follower = Follower(site, dest, _options())
        follower.subscribed()
        (data / "old.txt").write_text("kept its mtime")
        publish(config)
        _, changes = read_document(tmp_path / "out" / "set1" / "changelist.xml")
        (change,) = changes
        change.datetime = datetime(2001, 1, 1, tzinfo=UTC)
        assert hub.push(_payload([change], at, FAR)) == 200
        wait_for(lambda: (dest / "files" / "old.txt").is_file())
        applied = follower.wait_event("applied")
        follower.finish()
    problems = applied.sets[0].problems
    assert any("out of chronological order" in p.message for p in problems), problems


def _payload(entries: list[Any], from_: Any, until: Any) -> bytes:
    import io

    from resourcesync.model import Document
    from resourcesync.sitemap import write_document

    out = io.BytesIO()
    write_document(
        out, Document(capability="change-notification", from_=from_, until=until), entries
    )
    return out.getvalue()


def hub_on(db: Path, port: int) -> serve_on:
    """The real hub (lifespan on: its delivery workers) on a chosen port, to restart it there."""
    from resourcesync.hub import create_app as create_hub

    return serve_on(create_hub(fast_config(), db), port, lifespan="on")


def test_following_survives_a_hub_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a1")
    site_port, hub_port = free_port(), free_port()
    site = f"http://127.0.0.1:{site_port}/"
    hub_url = f"http://127.0.0.1:{hub_port}/"
    config = PublishConfig(
        out=tmp_path / "out",
        sets=[SetConfig("set1", data, site + "files/", hub=hub_url)],
        docs_url=site,
    )
    dest = tmp_path / "copy"
    with serve_on(create_app(tmp_path / "out"), site_port):
        with hub_on(tmp_path / "hub.sqlite", hub_port):
            publish(config)
            follower = Follower(site, dest)
            follower.subscribed()
        # The hub is down: the change is published, its notification kept for later.
        (data / "a.txt").write_text("a2")
        result = publish(config)
        assert any("not accepted" in p for p in result.sets[0].problems)
        with hub_on(tmp_path / "hub.sqlite", hub_port):
            publish(config)  # nothing new: the kept notification goes out now
            wait_for(lambda: _read(dest / "files" / "a.txt") == "a2", timeout=15)
            follower.finish()


def test_a_follower_hearing_notifications_still_looks_at_its_copy(tmp_path: Path) -> None:
    """Notifications tell only what changed at the Source: a file deleted from the copy while
    they keep coming used to stay missing until the follower was restarted (every
    notification put the catch-up off). A sync runs every `check_interval` whatever."""
    files = {"a.txt": "first", "b.txt": "kept"}
    with published_site(tmp_path, files) as (data, config, site):
        dest = tmp_path / "copy"
        follower = Follower(site, dest, _options(), lease=60, check_interval=3.0)
        follower.subscribed()
        # A first notification applied: the next ones follow it (no catch-up needed).
        (data / "a.txt").write_text("changed 0")
        publish(config)
        wait_for(lambda: (dest / "files" / "a.txt").read_text() == "changed 0")
        follower.wait_event("applied")
        caught_up = len(follower.details("caught-up"))
        (dest / "files" / "b.txt").unlink()  # changed here, not at the Source
        deadline = time.monotonic() + 15
        round_ = 0
        while not (dest / "files" / "b.txt").exists():
            assert time.monotonic() < deadline, follower.kinds()
            round_ += 1
            (data / "a.txt").write_text(f"changed {round_}")
            publish(config)
            wait_for(lambda r=round_: (dest / "files" / "a.txt").read_text() == f"changed {r}")
            time.sleep(0.3)
        assert (dest / "files" / "b.txt").read_text() == "kept"
        follower.finish()
    later = follower.details("caught-up")[caught_up:]
    assert any(s.changed_here for r in later for s in r.sets), follower.kinds()
