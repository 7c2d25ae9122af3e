"""The Source side of Change Notification: payloads sent to a hub, the channel advertised."""

from __future__ import annotations

import itertools
import json
import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from resourcesync.cli import main
from resourcesync.sitemap import read_document, validate
from resourcesync.source.config import PublishConfig, SetConfig
from resourcesync.source.notify import stop_background
from resourcesync.source.publish import publish
from resourcesync.source.server import create_app
from tests.hub.conftest import fast_config, run_hub
from tests.servers import serve

BASE = "http://example.org/data/"


class Hub:
    """A stand-in hub that records what it is sent; `refuse` makes it answer 503."""

    def __init__(self) -> None:
        self.received: list[tuple[bytes, dict[str, str]]] = []
        self.framework: list[bytes] = []
        self.refuse = False
        self.app = Starlette(routes=[Route("/hub", self.post, methods=["POST"])])

    async def post(self, request: Request) -> Response:
        if self.refuse:
            return Response("busy", 503)
        body, headers = await request.body(), dict(request.headers)
        # Change notifications here; framework notifications (their own channel) aside.
        if "/framework/>" in headers.get("link", ""):
            self.framework.append(body)
        else:
            self.received.append((body, headers))
        return Response("", 200)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(microseconds=7)
        return self.now


def _framework_config(tmp_path: Path, hub: str, **kw: Any) -> PublishConfig:
    """Set `set1` of DIR `tmp_path/data`, announced on both channels through `hub`."""
    return PublishConfig(
        out=tmp_path / "out",
        sets=[
            SetConfig("set1", tmp_path / "data", BASE, hub=hub, framework_notification=True, **kw)
        ],
        docs_url="http://example.org/",
    )


def test_changes_are_announced_in_order_and_the_channel_is_advertised(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    hub = Hub()
    with serve(hub.app) as hub_base:
        cfg = PublishConfig(
            out=tmp_path / "out",
            sets=[SetConfig("set1", data, BASE, hub=f"{hub_base}/hub", notification_max_entries=2)],
        )
        clock = Clock()
        publish(cfg, clock=clock)
        assert hub.received == []  # the baseline announces nothing
        _, caps = read_document(tmp_path / "out" / "set1" / "capabilitylist.xml")
        channel = next(c for c in caps if c.capability == "change-notification")
        assert channel.loc == "http://example.org/set1/change/"
        assert channel.link("hub") is not None and channel.link("hub").href == f"{hub_base}/hub"

        for name in ("b", "c", "d"):
            (data / f"{name}.txt").write_text(name)
        publish(cfg, clock=clock)
        assert len(hub.received) == 2  # three changes, at most two a payload
        hub.refuse = True
        (data / "a.txt").write_text("changed")
        result = publish(cfg, clock=clock)
        assert any("not accepted" in p for p in result.sets[0].problems)
        hub.refuse = False
        (data / "b.txt").unlink()
        publish(cfg, clock=clock)  # the refused payload goes first, then the new one
    bodies = [body for body, _ in hub.received]
    assert len(bodies) == 4
    intervals = []
    changes = []
    for body, headers in hub.received:
        assert headers["content-type"] == "application/xml"
        assert '<http://example.org/set1/change/>; rel="self"' in headers["link"]
        assert 'rel="hub"' in headers["link"]
        report = validate([body])
        assert report.ok and not report.errors, [str(f) for f in report.findings]
        doc, entries = read_document(body)
        assert doc.capability == "change-notification"
        intervals.append((doc.from_, doc.until))
        changes += [(e.change, e.loc.removeprefix(BASE)) for e in entries]
    for (_, until), (from_, _) in itertools.pairwise(intervals):
        assert until == from_  # consecutive, non-overlapping
    assert changes == [
        ("created", "b.txt"),
        ("created", "c.txt"),
        ("created", "d.txt"),
        ("updated", "a.txt"),
        ("deleted", "b.txt"),
    ]


def test_the_topic_uri_answers_with_the_latest_notification(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    hub = Hub()
    with serve(hub.app) as hub_base:
        cfg = PublishConfig(
            out=tmp_path / "out",
            sets=[SetConfig("set1", data, "http://example.org/files/", hub=f"{hub_base}/hub")],
            docs_url="http://example.org/",
        )
        publish(cfg)
        (data / "a.txt").write_text("again")
        publish(cfg)
        with serve(create_app(tmp_path / "out")) as site:
            response = httpx.get(f"{site}/set1/change/")
            head = httpx.head(f"{site}/set1/change/")
    assert response.status_code == 200 and head.status_code == 200
    assert response.headers["content-type"].startswith("application/xml")
    assert 'rel="self"' in response.headers["link"] and f"<{hub_base}/hub>" in head.headers["link"]
    doc, (entry,) = read_document(response.content)
    assert doc.capability == "change-notification" and entry.change == "updated"


def test_publish_authenticates_to_a_hub_started_with_a_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 11.3: `--hub-token` (or RESOURCESYNC_HUB_TOKEN) is sent as a Bearer token; the
    token is never published."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    secret = "s3cret-token-for-the-hub"
    monkeypatch.delenv("RESOURCESYNC_HUB_TOKEN", raising=False)
    with run_hub(fast_config(token=secret), tmp_path / "hub.sqlite") as hub_url:
        args = [
            "publish",
            str(data),
            "--base-url",
            BASE,
            "--out",
            str(tmp_path / "out"),
            "--hub",
            hub_url,
        ]
        runner = CliRunner()
        assert runner.invoke(main, args).exit_code == 0  # the baseline announces nothing
        (data / "b.txt").write_text("b")
        refused = runner.invoke(main, args)
        assert refused.exit_code == 0
        assert "HTTP 401" in refused.stderr and "--hub-token" in refused.stderr
        (data / "c.txt").write_text("c")
        sent = runner.invoke(main, [*args, "--hub-token", secret])
        assert sent.exit_code == 0 and "not accepted" not in sent.stderr, sent.stderr
        (data / "d.txt").write_text("d")
        from_env = runner.invoke(main, args, env={"RESOURCESYNC_HUB_TOKEN": secret})
        assert from_env.exit_code == 0 and "not accepted" not in from_env.stderr
        (data / "e.txt").write_text("e")
        wrong = runner.invoke(main, args, env={"RESOURCESYNC_HUB_TOKEN": "wrong"})
        assert "HTTP 401" in wrong.stderr and "refused the token" in wrong.stderr
    for p in (tmp_path / "out").rglob("*"):
        if p.is_file():
            assert secret.encode() not in p.read_bytes(), p


def test_notifications_the_hub_refused_are_sent_in_the_background_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 11.2: a change made while the hub is down reaches it once the hub is back, without
    waiting for another change (in a process that keeps running, like `source`)."""
    monkeypatch.setattr("resourcesync.source.notify.RETRY_FIRST", 0.05)
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    hub = Hub()
    arrived = threading.Event()
    post = hub.post

    async def counting(request: Request) -> Response:
        response = await post(request)
        if len(hub.received) == 2:
            arrived.set()
        return response

    hub.app = Starlette(routes=[Route("/hub", counting, methods=["POST"])])
    try:
        with serve(hub.app) as hub_base:
            cfg = PublishConfig(
                out=tmp_path / "out",
                sets=[
                    SetConfig("set1", data, BASE, hub=f"{hub_base}/hub", notification_max_entries=1)
                ],
            )
            clock = Clock()
            publish(cfg, clock=clock)
            hub.refuse = True
            (data / "b.txt").write_text("b")
            (data / "c.txt").write_text("c")
            result = publish(cfg, clock=clock)
            assert any("not accepted" in p for p in result.sets[0].problems)
            assert hub.received == []
            hub.refuse = False  # the hub is back; nothing changes on the Source any more
            assert arrived.wait(60), "the held notifications never reached the hub"
    finally:
        stop_background()
    payloads = [read_document(body) for body, _ in hub.received]
    assert [e.loc.removeprefix(BASE) for _, (e,) in payloads] == ["b.txt", "c.txt"]
    assert payloads[0][0].until == payloads[1][0].from_


def test_framework_notifications_announce_new_and_updated_documents(tmp_path: Path) -> None:
    """Framework Notification 1.0.1: the channel advertised in the Capability List (Example 8),
    a payload per publication naming the documents created or updated (§3), a document under an
    index with rel="index" to it, the Source Description on the set's channel too."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    hub = Hub()
    with serve(hub.app) as hub_base:
        cfg = PublishConfig(
            out=tmp_path / "out",
            sets=[
                SetConfig(
                    "set1",
                    data,
                    BASE,
                    hub=f"{hub_base}/hub",
                    capabilities=("resourcelist", "changelist", "resourcedump"),
                    changelist_max_entries=2,
                    framework_notification=True,
                    resourcelist_every="always",
                )
            ],
            docs_url="http://example.org/",
        )
        clock = Clock()
        publish(cfg, clock=clock)
        _, caps = read_document(tmp_path / "out" / "set1" / "capabilitylist.xml")
        channel = next(c for c in caps if c.capability == "framework-notification")
        assert channel.loc == "http://example.org/set1/framework/"
        assert channel.link("hub") is not None and channel.link("hub").href == f"{hub_base}/hub"

        def announced(body: bytes) -> dict[str, tuple[str | None, str | None]]:
            doc, entries = read_document(body)
            assert doc.capability == "framework-notification" and not doc.index
            up = doc.link("up")
            assert up is not None and up.href == "http://example.org/set1/capabilitylist.xml"
            out = {}
            for e in entries:
                assert e.change in ("created", "updated") and e.datetime is not None
                index = e.link("index")
                out[e.loc.removeprefix("http://example.org/")] = (
                    f"{e.change} {e.capability}",
                    index.href.removeprefix("http://example.org/") if index else None,
                )
            return out

        (first,) = hub.framework
        got = announced(first)
        assert got["set1/capabilitylist.xml"] == ("created capabilitylist", None)
        assert got[".well-known/resourcesync"] == ("created description", None)
        assert got["set1/changelist.xml"] == ("created changelist", None)
        assert sum(v[0] == "created resourcelist" for v in got.values()) == 1
        assert sum(v[0] == "created resourcedump" for v in got.values()) == 1

        (data / "b.txt").write_text("b")
        publish(cfg, clock=clock)
        got = announced(hub.framework[-1])
        assert "set1/capabilitylist.xml" not in got and ".well-known/resourcesync" not in got
        assert got["set1/changelist.xml"] == ("updated changelist", None)
        assert sum(v[0] == "created resourcelist" for v in got.values()) == 1

        for name in ("c", "d"):
            (data / f"{name}.txt").write_text(name)
        publish(cfg, clock=clock)  # three changes against lists of two: one is closed
        got = announced(hub.framework[-1])
        rotated = {k: v for k, v in got.items() if v[0] == "created changelist"}
        assert len(rotated) == 2  # the closed list and the new open one
        assert all(index == "set1/changelist.xml" for _, index in rotated.values())

        publish(cfg, clock=clock)  # nothing changed: nothing announced
        assert len(hub.framework) == 3
    latest = tmp_path / "out" / "set1" / "framework" / "latest.xml"
    assert latest.read_bytes() == hub.framework[-1]
    published = json.loads((tmp_path / "out" / ".resourcesync" / "published.json").read_text())
    assert published["sets"][0]["framework_channel"]["topic"] == channel.loc


def test_the_framework_topic_uri_answers_as_the_spec_asks(tmp_path: Path) -> None:
    """Framework Notification 1.0.1 §5.1: GET and HEAD on the framework channel answer 200,
    application/xml, with `self` and `hub` links and the latest framework notification; a
    channel with nothing sent yet answers an empty body (Content-Length: 0) and the links."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    hub = Hub()
    with serve(hub.app) as hub_base:
        cfg = _framework_config(tmp_path, f"{hub_base}/hub")
        publish(cfg)
        with serve(create_app(tmp_path / "out")) as site:
            response = httpx.get(f"{site}/set1/framework/")
            head = httpx.head(f"{site}/set1/framework/")
            (tmp_path / "out" / "set1" / "change" / "latest.xml").unlink(missing_ok=True)
            empty = httpx.get(f"{site}/set1/change/")
    assert response.status_code == 200 and head.status_code == 200
    assert response.headers["content-type"].startswith("application/xml")
    links = response.headers["link"]
    assert '<http://example.org/set1/framework/>; rel="self"' in links
    assert f'<{hub_base}/hub>; rel="hub"' in head.headers["link"]
    doc, _ = read_document(response.content)
    assert doc.capability == "framework-notification"
    assert empty.status_code == 200 and empty.headers["content-length"] == "0"
    assert '<http://example.org/set1/change/>; rel="self"' in empty.headers["link"]


def test_what_the_hub_took_is_not_kept(tmp_path: Path) -> None:
    """A Source announcing for months: the payloads the hub took are not kept in the state
    (one a run, read at every run), but the latest notification, where the next one starts;
    what the hub refused stays until it is taken."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    hub = Hub()
    state = tmp_path / "out" / ".resourcesync" / "set1.sqlite"

    def rows(table: str, sent: int) -> int:
        with sqlite3.connect(state) as db:
            q = f"SELECT COUNT(*) FROM {table} WHERE sent = ?"
            return int(db.execute(q, (sent,)).fetchone()[0])

    try:
        with serve(hub.app) as hub_base:
            cfg = _framework_config(tmp_path, f"{hub_base}/hub", resourcelist_every="always")
            assert cfg.state / "set1.sqlite" == state
            clock = Clock()
            publish(cfg, clock=clock)
            for round_ in range(6):
                (data / f"n{round_}.txt").write_text("n")
                publish(cfg, clock=clock)
            assert len(hub.received) == 6 and len(hub.framework) >= 6
            assert rows("notifications", 1) == 1 and rows("framework", 1) == 0
            hub.refuse = True
            (data / "late.txt").write_text("late")
            publish(cfg, clock=clock)
            assert rows("notifications", 0) == 1 and rows("framework", 0) >= 1
            hub.refuse = False
            publish(cfg, clock=clock)
            assert rows("notifications", 0) == 0 and rows("framework", 0) == 0
            assert rows("notifications", 1) == 1 and rows("framework", 1) == 0
            assert len(hub.received) == 7
    finally:
        stop_background()
