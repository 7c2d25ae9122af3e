"""A follower left running: hub and Source outages, denials, renewals, gaps (issue 11.1, 11.4,
11.6, 11.7; issue 10.1). The follower never exits on an outage; it says so, keeps the copy in
step by polling, and resubscribes when the hub is back."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from resourcesync.destination.sync import SyncOptions
from resourcesync.http import HttpOptions, RetryPolicy
from resourcesync.sitemap import read_document
from resourcesync.source.config import PublishConfig, SetConfig
from resourcesync.source.publish import publish
from resourcesync.source.server import create_app
from tests.hub.conftest import fast_config, run_hub
from tests.servers import serve

from .test_follow import FakeHub, Follower, _payload, _read, free_port, serve_on, wait_for

QUICK = SyncOptions(
    delete=True, http=HttpOptions(timeout=3, retry=RetryPolicy(retries=0, backoff=0.05))
)
# Short waits so that outages show within a second or two.
PATIENT = {
    "verify_timeout": 0.5,
    "retry_backoff": 0.05,
    "max_backoff": 0.3,
    "poll_interval": 60.0,
    "outage_poll_interval": 0.3,
}


class FlakyFront:
    """In front of the real hub: passes requests through, or answers 503 (`mode="503"`), or
    accepts subscription requests but has the hub verify them only after the subscriber has
    stopped waiting (`mode="late"`). Stopping its server refuses connections."""

    def __init__(self, hub: str, late_by: float) -> None:
        self.hub, self.late_by, self.mode = hub, late_by, "ok"

        async def endpoint(request: Request) -> Response:
            body = await request.body()
            headers = {k: v for k, v in request.headers.items() if k in ("content-type", "link")}
            if self.mode == "503":
                return Response("maintenance", 503)
            if self.mode == "late" and b"hub.mode=subscribe" in body:
                asyncio.get_running_loop().call_later(self.late_by, self._forward, body, headers)
                return Response("accepted", 202)
            async with httpx.AsyncClient() as client:
                r = await client.post(self.hub, content=body, headers=headers)
            return Response(r.content, r.status_code)

        self.app = Starlette(routes=[Route("/", endpoint, methods=["POST"])])

    def _forward(self, body: bytes, headers: dict[str, str]) -> None:
        asyncio.get_running_loop().run_in_executor(
            None, lambda: httpx.post(self.hub, content=body, headers=headers)
        )


def _site(tmp_path: Path, hub: str) -> tuple[Path, PublishConfig, int]:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a0")
    site_port = free_port()
    site = f"http://127.0.0.1:{site_port}/"
    config = PublishConfig(
        out=tmp_path / "out",
        sets=[SetConfig("set1", data, site + "files/", hub=hub)],
        docs_url=site,
    )
    publish(config)
    return data, config, site_port


def test_a_follower_rides_out_a_hub_that_fails_refuses_and_verifies_late(tmp_path: Path) -> None:
    front_port = free_port()
    front_url = f"http://127.0.0.1:{front_port}/"
    data, config, site_port = _site(tmp_path, front_url)
    site = f"http://127.0.0.1:{site_port}/"
    dest = tmp_path / "copy"
    copy = dest / "files" / "a.txt"
    with (
        run_hub(fast_config(), tmp_path / "hub.sqlite") as hub,
        serve_on(create_app(tmp_path / "out"), site_port),
    ):
        front = FlakyFront(hub, late_by=1.0)
        with serve_on(front.app, front_port):
            # A 2 s lease: renewed every 1.6 s, so each outage meets a renewal.
            follower = Follower(site, dest, QUICK, lease=2, **PATIENT)
            follower.subscribed()
            (data / "a.txt").write_text("a1")
            publish(config)
            wait_for(lambda: _read(copy) == "a1")

            front.mode = "503"
            follower.wait_event("hub-unavailable", lambda d: "503" in d["reason"])
            # The hub is out: the Source cannot notify either, but polling brings the change.
            (data / "a.txt").write_text("a2")
            publish(config)
            wait_for(lambda: _read(copy) == "a2")

            front.mode = "late"
            follower.wait_event("hub-unavailable", lambda d: "did not verify" in d["reason"])
        # The front is gone: connections are refused.
        follower.wait_event("hub-unavailable", lambda d: "unreachable" in d["reason"])
        (data / "a.txt").write_text("a3")
        publish(config)
        wait_for(lambda: _read(copy) == "a3")
        assert follower.thread.is_alive()

        front.mode = "ok"
        with serve_on(front.app, front_port):
            back = follower.wait_event(
                "subscribed", lambda d: d.get("after_failures", 0) > 0, timeout=15
            )
            assert back["topic"].startswith(site)
            (data / "a.txt").write_text("a4")
            publish(config)
            wait_for(lambda: _read(copy) == "a4")
            follower.finish()
    attempts = follower.details("hub-unavailable")
    # Backoff with jitter, capped: never longer than max_backoff between tries.
    assert all(0 < d["retry_in"] <= PATIENT["max_backoff"] for d in attempts)
    assert "caught-up" in follower.kinds()


def test_a_source_outage_is_retried_and_nothing_is_applied_past_a_gap(tmp_path: Path) -> None:
    hub = FakeHub(lease=3600)
    with serve(hub.app) as hub_base:
        data, config, site_port = _site(tmp_path, hub_base + "/")
        site = f"http://127.0.0.1:{site_port}/"
        dest = tmp_path / "copy"
        (data / "b.txt").write_text("b0")
        publish(config)
        with serve_on(create_app(tmp_path / "out"), site_port):
            follower = Follower(site, dest, QUICK, **PATIENT)
            follower.subscribed()
            follower.wait_event("caught-up")
        # The Source is down. Two changes; only the second one's notification arrives: its
        # `from` is after the copy's cursor, and the Change List cannot be read now.
        (data / "a.txt").write_text("a1")
        publish(config)
        (data / "b.txt").write_text("b1")
        publish(config)
        _, changes = read_document(tmp_path / "out" / "set1" / "changelist.xml")
        last = changes[-1].datetime
        assert hub.push(_payload(changes[-1:], last, last)) == 200
        failed = follower.wait_event("source-unavailable")
        assert failed["source"] == site and failed["retry_in"] <= PATIENT["max_backoff"]
        assert "applied" not in follower.kinds()  # not past the gap
        assert follower.thread.is_alive()
        with serve_on(create_app(tmp_path / "out"), site_port):
            wait_for(lambda: _read(dest / "files" / "a.txt") == "a1")
            wait_for(lambda: _read(dest / "files" / "b.txt") == "b1")
            follower.finish()


def test_changes_before_the_subscription_is_active_are_caught_up(tmp_path: Path) -> None:
    """Issue 10.1: a change published between the initial sync and the moment the hub verifies
    the subscription (its notification never reaches the follower) is not lost."""
    hub = FakeHub(lease=3600)
    with serve(hub.app) as hub_base:
        data, config, site_port = _site(tmp_path, hub_base + "/")
        site = f"http://127.0.0.1:{site_port}/"

        def change_before_verification() -> None:
            (data / "a.txt").write_text("a1")
            publish(config)  # the FakeHub relays nothing

        hub.on_subscribe = change_before_verification
        dest = tmp_path / "copy"
        with serve_on(create_app(tmp_path / "out"), site_port):
            follower = Follower(site, dest, QUICK, poll_interval=3600)
            follower.subscribed()
            wait_for(lambda: _read(dest / "files" / "a.txt") == "a1")
            follower.finish()


def test_the_first_notification_is_compared_with_the_copys_cursor(tmp_path: Path) -> None:
    """Issue 10.1: the first notification a follower gets has nothing before it to compare
    with; its `from` is compared with the copy's cursor, and a gap is caught up first."""
    hub = FakeHub(lease=3600)
    with serve(hub.app) as hub_base:
        data, config, site_port = _site(tmp_path, hub_base + "/")
        (data / "b.txt").write_text("b0")
        publish(config)
        site = f"http://127.0.0.1:{site_port}/"
        dest = tmp_path / "copy"
        with serve_on(create_app(tmp_path / "out"), site_port):
            follower = Follower(site, dest, QUICK, poll_interval=3600)
            follower.subscribed()
            follower.wait_event("caught-up")
            (data / "a.txt").write_text("a1")
            publish(config)  # lost
            (data / "b.txt").write_text("b1")
            publish(config)
            _, changes = read_document(tmp_path / "out" / "set1" / "changelist.xml")
            last = changes[-1].datetime
            assert hub.push(_payload(changes[-1:], last, last)) == 200
            wait_for(lambda: _read(dest / "files" / "b.txt") == "b1")
            wait_for(lambda: _read(dest / "files" / "a.txt") == "a1")
            follower.finish()


def test_a_denial_is_reported_and_not_waited_for(tmp_path: Path) -> None:
    """Issue 11.4: hub.mode=denied (WebSub §5.2, no challenge) is reported at once, the
    subscription is not asked for again, and the copy is kept in step by polling."""
    hub = FakeHub(lease=3600)
    hub.deny = "this topic is not relayed here"
    with serve(hub.app) as hub_base:
        data, config, site_port = _site(tmp_path, hub_base + "/")
        site = f"http://127.0.0.1:{site_port}/"
        dest = tmp_path / "copy"
        with serve_on(create_app(tmp_path / "out"), site_port):
            follower = Follower(
                site, dest, QUICK, verify_timeout=60, retry_backoff=0.01, poll_interval=0.5
            )
            denied = follower.wait_event("denied")
            assert denied["reason"] == "this topic is not relayed here"
            (data / "a.txt").write_text("a1")
            publish(config)
            wait_for(lambda: _read(dest / "files" / "a.txt") == "a1")
            follower.finish()
    assert [s["hub.mode"] for s in hub.subscriptions] == ["subscribe"]
    assert "hub-unavailable" not in follower.kinds()


def test_a_renewal_uses_a_new_callback_and_secret(tmp_path: Path) -> None:
    """Issue 11.6: each renewal asks with a new callback path and secret; the old callback is
    accepted until the new one is verified, then unsubscribed and answers 410 Gone."""
    hub = FakeHub(lease=1)
    with serve(hub.app) as hub_base:
        data, config, site_port = _site(tmp_path, hub_base + "/")
        site = f"http://127.0.0.1:{site_port}/"
        dest = tmp_path / "copy"
        with serve_on(create_app(tmp_path / "out"), site_port):
            follower = Follower(site, dest, QUICK, lease=1)
            follower.subscribed()
            first = hub.subscriptions[0]
            hub.hold.clear()  # the renewal's verification waits
            wait_for(lambda: len(hub.subscriptions) >= 2)
            second = hub.subscriptions[1]
            assert second["hub.mode"] == "subscribe"
            assert second["hub.callback"] != first["hub.callback"]
            assert second["hub.secret"] != first["hub.secret"]
            # Not verified yet: the old callback still takes notifications.
            (data / "a.txt").write_text("a1")
            publish(config)
            _, changes = read_document(tmp_path / "out" / "set1" / "changelist.xml")
            last = changes[-1].datetime
            assert hub.push(_payload(changes[-1:], last, last), sub=first) == 200
            wait_for(lambda: _read(dest / "files" / "a.txt") == "a1")
            hub.hold.set()
            # ("renewed", or "subscribed" when the old lease ran out while the test held it)
            wait_for(
                lambda: any(
                    k in ("renewed", "subscribed") and d["callback"] == second["hub.callback"]
                    for k, d in list(follower.events)
                )
            )
            wait_for(
                lambda: any(
                    s["hub.mode"] == "unsubscribe" and s["hub.callback"] == first["hub.callback"]
                    for s in hub.subscriptions
                )
            )
            wait_for(lambda: httpx.post(first["hub.callback"], content=b"x").status_code == 410)
            follower.finish()


def test_the_verification_wait_is_an_option(tmp_path: Path) -> None:
    """Issue 11.7: `sync --follow --verify-timeout`: a hub that never verifies is reported
    after that long (and asked again), not after a fixed 15 s."""
    hub = FakeHub(lease=3600)
    hub.hold.clear()  # never verifies
    with serve(hub.app) as hub_base:
        _, _, site_port = _site(tmp_path, hub_base + "/")
        site = f"http://127.0.0.1:{site_port}/"
        with serve_on(create_app(tmp_path / "out"), site_port):
            command = [
                str(Path(sys.executable).parent / "resourcesync"),
                "sync",
                site,
                str(tmp_path / "copy"),
                "--follow",
                "--json",
                "--verify-timeout",
                "0.3",
                "--duration",
                "3",
            ]
            result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        hub.hold.set()
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    waits = [e["detail"] for e in events if e.get("event") == "hub-unavailable"]
    assert waits and "within 0.3s" in waits[0]["reason"]
    assert len(hub.subscriptions) >= 2


_ = Any


def test_a_framework_notification_is_acted_on_at_once(tmp_path: Path) -> None:
    """Framework Notification 1.0.1: `follow` subscribes to the framework channel its
    Capability List advertises (Example 8) and reads the Source again when told that a
    capability document changed (here an updated Change List whose change notification was
    never sent), not at the next poll."""
    dead_hub = f"http://127.0.0.1:{free_port()}/"
    data, config, site_port = _site(tmp_path, dead_hub)
    site = f"http://127.0.0.1:{site_port}/"
    framework_topic = site + "set1/framework/"
    capabilitylist = tmp_path / "out" / "set1" / "capabilitylist.xml"

    def advertise(hub: str) -> None:
        text = capabilitylist.read_text().replace(dead_hub, hub)
        channel = (
            f"  <url>\n    <loc>{framework_topic}</loc>\n"
            '    <rs:md capability="framework-notification"/>\n'
            f'    <rs:ln rel="hub" href="{hub}"/>\n  </url>\n</urlset>'
        )
        capabilitylist.write_text(text.replace("</urlset>", channel))

    dest = tmp_path / "copy"
    with (
        run_hub(fast_config(), tmp_path / "hub.sqlite") as hub,
        serve_on(create_app(tmp_path / "out"), site_port),
    ):
        advertise(hub)
        follower = Follower(site, dest, QUICK, poll_interval=3600)
        wait_for(lambda: len(follower.details("subscribed")) == 2)
        channels = {d["channel"]: d["topic"] for d in follower.details("subscribed")}
        assert channels["framework"] == framework_topic
        follower.wait_event("caught-up")
        (data / "a.txt").write_text("a1")
        publish(config)  # its change notification goes nowhere
        advertise(hub)
        notice = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
            ' xmlns:rs="http://www.openarchives.org/rs/terms/">\n'
            f'  <rs:ln rel="up" href="{site}set1/capabilitylist.xml"/>\n'
            '  <rs:md capability="framework-notification"/>\n'
            f"  <url><loc>{site}set1/changelist.xml</loc>"
            '<rs:md change="updated" capability="changelist"/></url>\n'
            "</urlset>\n"
        )
        r = httpx.post(
            hub,
            content=notice,
            headers={
                "Content-Type": "application/xml",
                "Link": f'<{framework_topic}>; rel="self", <{hub}>; rel="hub"',
            },
        )
        assert r.status_code == 200, r.text
        wait_for(lambda: _read(dest / "files" / "a.txt") == "a1")
        follower.finish()
    (told,) = follower.details("framework")
    assert told == [
        {"loc": f"{site}set1/changelist.xml", "change": "updated", "capability": "changelist"}
    ]


def test_a_hub_that_forgot_the_subscription_is_asked_again(tmp_path: Path) -> None:
    """A hub restarted without its database knows no subscriber: the follower's poll finds
    changes no notification announced, and it subscribes again at once (not hours later, at
    the next renewal), so the next change comes by notification again."""
    from .test_follow import hub_on

    hub_port = free_port()
    data, config, site_port = _site(tmp_path, f"http://127.0.0.1:{hub_port}/")
    site = f"http://127.0.0.1:{site_port}/"
    dest = tmp_path / "copy"
    with serve_on(create_app(tmp_path / "out"), site_port):
        with hub_on(tmp_path / "hub.sqlite", hub_port):
            follower = Follower(site, dest, QUICK, poll_interval=1.0)
            follower.subscribed()
            follower.wait_event("caught-up")
        with hub_on(tmp_path / "new-hub.sqlite", hub_port):
            (data / "a.txt").write_text("a1")
            publish(config)  # the new hub has no subscriber for it
            wait_for(lambda: _read(dest / "files" / "a.txt") == "a1")
            follower.wait_event("resubscribing")
            follower.wait_event("renewed")
            assert "applied" not in follower.kinds()
            (data / "a.txt").write_text("a2")
            publish(config)
            follower.wait_event("applied")
            wait_for(lambda: _read(dest / "files" / "a.txt") == "a2")
            follower.finish()


def test_a_channel_moved_to_another_hub_is_followed_there(tmp_path: Path) -> None:
    """A framework notification that the Capability List changed makes the follower read the
    channels again: the change notification channel moved to another hub is unsubscribed at
    the old one and subscribed at the new one."""
    with (
        run_hub(fast_config(), tmp_path / "old.sqlite") as old_hub,
        run_hub(fast_config(), tmp_path / "new.sqlite") as new_hub,
    ):
        data, config, site_port = _site(tmp_path, new_hub)
        site = f"http://127.0.0.1:{site_port}/"
        framework_topic = site + "resourcesync/framework/"
        capabilitylist = tmp_path / "out" / "set1" / "capabilitylist.xml"

        def advertise(change_hub: str) -> None:
            text = capabilitylist.read_text().replace(new_hub, change_hub)
            channel = (
                f"  <url>\n    <loc>{framework_topic}</loc>\n"
                '    <rs:md capability="framework-notification"/>\n'
                f'    <rs:ln rel="hub" href="{old_hub}"/>\n  </url>\n</urlset>'
            )
            capabilitylist.write_text(text.replace("</urlset>", channel))

        dest = tmp_path / "copy"
        with serve_on(create_app(tmp_path / "out"), site_port):
            advertise(old_hub)
            follower = Follower(site, dest, QUICK, poll_interval=3600)
            wait_for(lambda: len(follower.details("subscribed")) == 2)
            publish(config)
            advertise(new_hub)
            notice = (
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
                ' xmlns:rs="http://www.openarchives.org/rs/terms/">\n'
                '  <rs:md capability="framework-notification"/>\n'
                f"  <url><loc>{site}set1/capabilitylist.xml</loc>"
                '<rs:md change="updated" capability="capabilitylist"/></url>\n'
                "</urlset>\n"
            )
            links = f'<{framework_topic}>; rel="self", <{old_hub}>; rel="hub"'
            headers = {"Content-Type": "application/xml", "Link": links}
            assert httpx.post(old_hub, content=notice, headers=headers).status_code == 200
            moved = follower.wait_event("subscribed", lambda d: d["hub"] == new_hub)
            assert moved["channel"] == "change"
            (removed,) = follower.details("channel-removed")
            assert removed["hub"] == old_hub
            (data / "a.txt").write_text("a1")
            publish(config)  # notifies the new hub
            follower.wait_event("applied")
            wait_for(lambda: _read(dest / "files" / "a.txt") == "a1")
            follower.finish()


def test_a_notification_that_cannot_be_applied_does_not_stop_the_follower(
    tmp_path: Path,
) -> None:
    """The copy's state lost its cursor under the follower (say, restored from an old backup):
    a notification cannot be applied incrementally; it is reported, and the catch-up (a
    baseline now) brings the copy in step."""
    import sqlite3

    hub = FakeHub(lease=3600)
    with serve(hub.app) as hub_base:
        data, config, site_port = _site(tmp_path, hub_base + "/")
        site = f"http://127.0.0.1:{site_port}/"
        dest = tmp_path / "copy"
        with serve_on(create_app(tmp_path / "out"), site_port):
            follower = Follower(site, dest, QUICK, **PATIENT)
            follower.subscribed()
            follower.wait_event("caught-up")
            (data / "a.txt").write_text("a1")
            publish(config)
            _, changes = read_document(tmp_path / "out" / "set1" / "changelist.xml")
            first = changes[-1].datetime
            assert hub.push(_payload(changes[-1:], first, first)) == 200
            wait_for(lambda: _read(dest / "files" / "a.txt") == "a1")
            follower.wait_event("applied")  # (it writes the cursor)
            with sqlite3.connect(dest / ".resourcesync" / "state.sqlite") as db:
                db.execute("DELETE FROM cursors")
            (data / "a.txt").write_text("a2")
            publish(config)
            _, changes = read_document(tmp_path / "out" / "set1" / "changelist.xml")
            # In sequence (`from` is the last `until`): no catch-up first, straight to applying.
            assert hub.push(_payload(changes[-1:], first, changes[-1].datetime)) == 200
            follower.wait_event("source-unavailable")
            wait_for(lambda: _read(dest / "files" / "a.txt") == "a2")
            assert follower.thread.is_alive()
            follower.finish()
