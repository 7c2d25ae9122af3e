"""Delivery (Change Notification §4.3, WebSub §7–8): the same body, the Link headers, the
signature; order per subscriber; retries with backoff; 410 Gone; a slow subscriber holding back
only itself; leases ending pending deliveries."""

from __future__ import annotations

import hashlib
import hmac
import time
from pathlib import Path

from resourcesync.hub import parse_links

from .conftest import (
    TOPIC,
    Subscriber,
    fast_config,
    payload,
    publish,
    run_hub,
    run_subscriber,
    stats,
    subscribed,
    wait_for,
)


def test_delivery_carries_body_links_and_signature(db: Path) -> None:
    secret = "a-subscriber-secret"
    with run_hub(fast_config(), db) as hub, run_subscriber(Subscriber()) as sub:
        subscribed(hub, sub, **{"hub.secret": secret})
        extra = {"Link": f'<{TOPIC}>; rel="self", <http://127.0.0.1:9/cl.xml>; rel="resourcesync"'}
        r = publish(hub, payload(3), None, headers=extra)
        assert r.status_code == 200, r.text
        wait_for(lambda: len(sub.received) == 1, what="delivery")
        got = sub.received[0]
        assert got.body == payload(3)
        assert got.headers["content-type"] == "application/xml"
        links = {p["rel"]: t for t, p in parse_links(got.headers["link"])}
        assert links == {"self": TOPIC, "hub": hub, "resourcesync": "http://127.0.0.1:9/cl.xml"}
        expected = hmac.new(secret.encode(), payload(3), hashlib.sha256).hexdigest()
        assert got.headers["x-hub-signature"] == f"sha256={expected}"


def test_public_url_names_the_hub_in_deliveries(db: Path) -> None:
    config = fast_config(public_url="https://hub.example.org/websub/")
    with run_hub(config, db) as hub, run_subscriber(Subscriber()) as sub:
        subscribed(hub, sub)
        publish(hub, payload(0))
        wait_for(lambda: len(sub.received) == 1, what="delivery")
        links = {p["rel"]: t for t, p in parse_links(sub.received[0].headers["link"])}
        assert links["hub"] == "https://hub.example.org/websub/"


def test_only_subscribers_of_the_topic_receive_it(db: Path) -> None:
    with (
        run_hub(fast_config(), db) as hub,
        run_subscriber(Subscriber()) as a,
        run_subscriber(Subscriber()) as b,
    ):
        subscribed(hub, a)
        subscribed(hub, b, topic="http://127.0.0.1:9/dataset2/change/")
        assert "queued for 1" in publish(hub, payload(0)).text
        wait_for(lambda: len(a.received) == 1, what="delivery")
        time.sleep(0.1)
        assert b.received == []


def test_order_is_kept_through_failures(db: Path) -> None:
    # Every third attempt fails: the failed notification is retried before any later one.
    sub = Subscriber(answer=lambda n: 503 if n % 3 == 1 else 200)
    with run_hub(fast_config(), db) as hub, run_subscriber(sub):
        subscribed(hub, sub)
        for i in range(20):
            assert publish(hub, payload(i)).status_code == 200
        wait_for(lambda: len(sub.received) == 20, timeout=15, what="20 deliveries")
        assert sub.bodies() == [payload(i) for i in range(20)]
        wait_for(lambda: stats(hub)["pending_deliveries"] == 0, what="queue to empty")
        s = stats(hub)
        assert s["stored_notifications"] == 0  # delivered notifications are forgotten
        assert s["failed_attempts"] >= 6


def test_retries_with_backoff_then_success(db: Path) -> None:
    sub = Subscriber(answer=lambda n: 500 if n < 4 else 200)
    with run_hub(fast_config(), db) as hub, run_subscriber(sub):
        subscribed(hub, sub)
        start = time.monotonic()
        publish(hub, payload(0))
        wait_for(lambda: len(sub.received) == 1, timeout=10, what="delivery")
        elapsed = time.monotonic() - start
        assert sub.attempts == 5
        # backoff 0.05 doubling, jittered to half, capped at 0.2: at least ~0.2 s in all
        assert elapsed >= 0.2
        assert sub.bodies() == [payload(0)]


def test_subscriber_down_then_back_gets_everything(db: Path) -> None:
    down = {"on": True}
    sub = Subscriber(answer=lambda n: 503 if down["on"] else 200)
    with run_hub(fast_config(), db) as hub, run_subscriber(sub):
        subscribed(hub, sub)
        for i in range(5):
            publish(hub, payload(i))
        wait_for(lambda: sub.attempts >= 4, what="failed attempts")
        assert sub.received == []
        down["on"] = False
        wait_for(lambda: len(sub.received) == 5, what="deliveries")
        assert sub.bodies() == [payload(i) for i in range(5)]


def test_410_gone_ends_the_subscription(db: Path) -> None:
    sub = Subscriber(answer=lambda n: 410)
    with run_hub(fast_config(), db) as hub, run_subscriber(sub):
        subscribed(hub, sub)
        publish(hub, payload(0))
        publish(hub, payload(1))
        wait_for(lambda: stats(hub)["subscriptions"] == 0, what="subscription to end")
        assert sub.attempts == 1
        assert stats(hub)["pending_deliveries"] == 0
        assert "queued for 0" in publish(hub, payload(2)).text


def test_redirects_are_not_followed(db: Path) -> None:
    sub = Subscriber(answer=lambda n: 307 if n == 0 else 200)
    with run_hub(fast_config(), db) as hub, run_subscriber(sub):
        subscribed(hub, sub)
        publish(hub, payload(0))
        wait_for(lambda: len(sub.received) == 1, what="delivery")
        assert sub.attempts == 2  # the 307 was a failure, retried at the callback itself


def test_retries_stop_when_the_lease_ends(db: Path) -> None:
    sub = Subscriber(answer=lambda n: 500)
    with run_hub(fast_config(), db) as hub, run_subscriber(sub):
        subscribed(hub, sub, **{"hub.lease_seconds": "1"})
        publish(hub, payload(0))
        wait_for(lambda: sub.attempts >= 2, what="attempts")
        wait_for(lambda: stats(hub)["subscriptions"] == 0, what="lease end")
        assert stats(hub)["pending_deliveries"] == 0
        assert stats(hub)["stored_notifications"] == 0
        attempts = sub.attempts
        time.sleep(0.4)
        assert sub.attempts == attempts


def test_slow_subscriber_does_not_delay_a_fast_one(db: Path) -> None:
    slow = Subscriber(delay=2.0)
    fast = Subscriber()
    with (
        run_hub(fast_config(timeout=5.0), db) as hub,
        run_subscriber(slow),
        run_subscriber(fast),
    ):
        subscribed(hub, slow)
        subscribed(hub, fast)
        start = time.monotonic()
        for i in range(5):
            publish(hub, payload(i))
        wait_for(lambda: len(fast.received) == 5, timeout=10, what="fast deliveries")
        assert fast.received[-1].at - start < 1.0
        assert fast.bodies() == [payload(i) for i in range(5)]
        assert len(slow.received) == 0  # still on its first


def test_timeout_counts_as_a_failure(db: Path) -> None:
    sub = Subscriber(delay=1.0)
    with run_hub(fast_config(timeout=0.3), db) as hub, run_subscriber(sub):
        subscribed(hub, sub)
        publish(hub, payload(0))
        wait_for(lambda: stats(hub)["failed_attempts"] >= 1, what="a timed-out attempt")
        s = stats(hub)
        assert s["pending_deliveries"] == 1
        assert s["subscriptions"] == 1
