"""What a publisher or a dead subscriber can make the hub keep is bounded (issue 17.5): one
stored payload per notification, shared in memory by its deliveries; caps per subscription and
per topic that drop the oldest and count the gap; a rate limit per topic."""

from __future__ import annotations

from pathlib import Path

from resourcesync.hub import Store

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


def test_one_payload_is_shared_by_every_delivery(tmp_path: Path) -> None:
    store = Store(tmp_path / "h.sqlite")
    subs = [store.subscribe("http://t/", f"http://cb/{i}", None, 3600) for i in range(50)]
    store.publish("http://t/", "<x>", b"x" * (1 << 20))
    bodies = [store.next_delivery(s.id) for s in subs]
    first = bodies[0]
    assert first is not None
    assert all(d is not None and d.body is first.body for d in bodies)
    assert store.stats()["stored_bytes"] == 1 << 20  # stored once, too
    store.close()


def test_a_subscription_keeps_at_most_its_cap_and_counts_the_gap(tmp_path: Path) -> None:
    store = Store(tmp_path / "h.sqlite", max_pending=5)
    dead = store.subscribe("http://t/", "http://dead/", None, 3600)
    alive = store.subscribe("http://t/", "http://alive/", None, 3600)
    for i in range(20):
        store.publish("http://t/", "<x>", str(i).encode())
        d = store.next_delivery(alive.id)
        assert d is not None
        store.delivered(alive.id, d.notification_id)
    kept = []
    while (d := store.next_delivery(dead.id)) is not None:
        kept.append(d.body)
        store.delivered(dead.id, d.notification_id)
    assert kept == [str(i).encode() for i in range(15, 20)]  # the newest, in order
    assert store.stats()["dropped_deliveries"] == 15
    assert store.stats()["stored_notifications"] == 0
    store.close()


def test_a_topic_keeps_at_most_its_cap_in_count_and_bytes(tmp_path: Path) -> None:
    store = Store(tmp_path / "h.sqlite", max_topic_notifications=3, max_topic_bytes=2500)
    sub = store.subscribe("http://t/", "http://dead/", None, 3600)
    for _ in range(10):
        store.publish("http://t/", "<x>", b"x" * 100)
    assert store.stats()["stored_notifications"] == 3
    for _ in range(3):
        store.publish("http://t/", "<x>", b"y" * 1000)
    assert store.stats()["stored_bytes"] <= 2500
    assert store.stats()["dropped_deliveries"] == 13 - store.stats()["stored_notifications"]
    d = store.next_delivery(sub.id)
    assert d is not None and d.body == b"y" * 1000
    store.close()


def test_a_dead_subscriber_costs_the_cap_and_then_gets_the_newest(db: Path) -> None:
    alive = {"yes": False}
    sub = Subscriber(answer=lambda n: 200 if alive["yes"] else 503)
    config = fast_config(max_pending_per_subscription=3)
    with run_hub(config, db) as hub, run_subscriber(sub):
        subscribed(hub, sub)
        for i in range(12):
            assert publish(hub, payload(i)).status_code == 200
        assert stats(hub)["pending_deliveries"] <= 3
        assert stats(hub)["dropped_deliveries"] == 9
        alive["yes"] = True
        wait_for(lambda: len(sub.received) == 3, what="the kept deliveries")
    assert sub.bodies() == [payload(i) for i in (9, 10, 11)]


def test_publishers_are_rate_limited_per_topic(db: Path) -> None:
    config = fast_config(publish_rate=0.01, publish_burst=3)
    with run_hub(config, db) as hub:
        for i in range(3):
            assert publish(hub, payload(i)).status_code == 200
        r = publish(hub, payload(3))
        assert r.status_code == 429
        assert int(r.headers["Retry-After"]) >= 1
        assert "too many notifications" in r.text
        # Another topic has its own budget; the same topic spelt otherwise has not.
        assert publish(hub, payload(3), topic=TOPIC + "other/").status_code == 200
        assert publish(hub, payload(3), topic=TOPIC.replace("http", "HTTP")).status_code == 429
