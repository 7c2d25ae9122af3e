"""The store on its own, with a fake clock: leases, renewals, queues, forgetting."""

from __future__ import annotations

from pathlib import Path

import pytest

from resourcesync.hub import HubConfig, Store, format_links, parse_links, sign


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_lease_expiry_and_renewal_with_a_fake_clock(tmp_path: Path) -> None:
    clock = Clock()
    store = Store(tmp_path / "h.sqlite", clock=clock)
    sub = store.subscribe("http://t/", "http://cb/", b"s", 300)
    assert store.publish("http://t/", "<x>", b"1") == [sub.id]
    clock.now += 299
    renewed = store.subscribe("http://t/", "http://cb/", None, 300)
    assert renewed.id == sub.id  # same subscription: its queue stays
    clock.now += 200  # past the first lease, within the renewed one
    assert store.expire() == []
    d = store.next_delivery(sub.id)
    assert d is not None
    assert d.body == b"1"
    assert d.secret is None
    clock.now += 101
    assert store.publish("http://t/", "<x>", b"2") == []  # lease over: nothing queued
    assert store.expire() == [sub.id]
    assert store.next_delivery(sub.id) is None
    assert store.stats()["stored_notifications"] == 0
    store.close()


def test_queue_is_in_order_and_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    store = Store(path)
    a = store.subscribe("http://t/", "http://a/", None, 3600)
    b = store.subscribe("http://t/", "http://b/", None, 3600)
    for i in range(3):
        assert sorted(store.publish("http://t/", "<x>", str(i).encode())) == [a.id, b.id]
    d = store.next_delivery(a.id)
    assert d is not None
    store.delivered(a.id, d.notification_id)
    store.close()

    store = Store(path)
    assert store.pending_subscriptions() == [a.id, b.id]
    got = []
    while (d := store.next_delivery(a.id)) is not None:
        got.append(d.body)
        store.delivered(a.id, d.notification_id)
    assert got == [b"1", b"2"]
    assert store.stats()["stored_notifications"] == 3  # b still waits for all three
    assert store.unsubscribe("http://t/", "http://b/")
    assert store.stats() == {
        "subscriptions": 1,
        "topics": 1,
        "pending_deliveries": 0,
        "stored_notifications": 0,
        "stored_bytes": 0,
        "dropped_deliveries": 0,
    }
    store.close()


def test_failed_attempt_is_counted_and_renewal_resets_backoff(tmp_path: Path) -> None:
    clock = Clock()
    store = Store(tmp_path / "h.sqlite", clock=clock)
    sub = store.subscribe("http://t/", "http://a/", None, 3600)
    store.publish("http://t/", "<x>", b"n")
    d = store.next_delivery(sub.id)
    assert d is not None
    store.failed(sub.id, d.notification_id, clock.now + 60, "HTTP 503")
    d = store.next_delivery(sub.id)
    assert d is not None
    assert (d.attempts, d.next_try) == (1, clock.now + 60)
    store.subscribe("http://t/", "http://a/", None, 3600)
    d = store.next_delivery(sub.id)
    assert d is not None
    assert d.next_try == clock.now
    store.close()


@pytest.mark.parametrize(
    ("requested", "granted"), [(None, 864000), (1, 300), (600, 600), (10**9, 2678400)]
)
def test_grant_lease(requested: int | None, granted: int) -> None:
    assert HubConfig().grant_lease(requested) == granted


def test_topic_allowed() -> None:
    config = HubConfig(topics=("http://a/change", "http://b/*"))
    assert config.topic_allowed("http://a/change")
    assert not config.topic_allowed("http://a/change2")
    assert config.topic_allowed("http://b/x/change")
    assert HubConfig().topic_allowed("http://anything/")


_SELF_HUB = [("http://t/", "self"), ("http://h/", "hub")]


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (
            '<http://t/>; rel="self", <http://h/>; rel="hub"',
            [("http://t/", "self"), ("http://h/", "hub")],
        ),
        (
            "<http://t/> ; rel=self ,<http://h/>;rel=hub",
            [("http://t/", "self"), ("http://h/", "hub")],
        ),
        ('<http://t/>; title="a, b; c"; rel="self"', [("http://t/", "self")]),
        ('<http://t/>; rel="self alternate"', [("http://t/", "self alternate")]),
        ("garbage, <http://t/>; rel=self", [("http://t/", "self")]),
        ("", []),
    ],
)
def test_parse_links(header: str, expected: list[tuple[str, str]]) -> None:
    assert [(t, p.get("rel", "")) for t, p in parse_links(header)] == expected


def test_format_links_round_trips() -> None:
    links = [("http://t/", "self"), ("http://h/", "hub")]
    assert [(t, p["rel"]) for t, p in parse_links(format_links(links))] == links


def test_signature_is_hmac_sha256() -> None:
    # RFC 4231 test case 2.
    got = sign(b"Jefe", b"what do ya want for nothing?")
    assert got == "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"


def test_a_database_found_damaged_while_the_hub_runs_is_a_503_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite finding the hub's database damaged after it opened (a page read that is not
    what was written): each request was a 500 and a traceback in the log. Now 503, and one
    line naming the file and what mends it."""
    import sqlite3

    import httpx

    from tests.hub.conftest import fast_config, run_hub

    db = tmp_path / "hub.sqlite"
    damaged = sqlite3.DatabaseError("database disk image is malformed")
    damaged.sqlite_errorcode = 11  # type: ignore[attr-defined]

    def stats(self: Store) -> None:
        raise damaged

    with caplog.at_level("ERROR", logger="resourcesync.hub"), run_hub(fast_config(), db) as hub:
        monkeypatch.setattr(Store, "stats", stats)  # once it runs
        answers = [httpx.get(hub) for _ in range(3)]
    assert [a.status_code for a in answers] == [503, 503, 503]
    assert "damaged" in answers[0].text and str(db) not in answers[0].text
    said = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(said) == 1 and str(db) in said[0] and "set it aside" in said[0], said


def test_a_database_found_damaged_while_the_hub_delivers_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub's delivery workers and its lease sweeper meeting a damaged database: each
    worker wrote a traceback as it stopped, and the sweeper one every round, for as long as
    the hub ran. One line now, naming the file and what mends it; what is queued stays
    queued (the next start, on a mended database, picks it up)."""
    import sqlite3
    import time

    from tests.hub.conftest import (
        Subscriber,
        fast_config,
        payload,
        publish,
        run_hub,
        run_subscriber,
        subscribed,
    )

    db = tmp_path / "hub.sqlite"
    damaged = sqlite3.DatabaseError("database disk image is malformed")
    damaged.sqlite_errorcode = 11  # type: ignore[attr-defined]

    def broken(self: Store, *args: object) -> None:
        raise damaged

    with (
        caplog.at_level("INFO", logger="resourcesync.hub"),
        run_hub(fast_config(), db) as hub,
        run_subscriber(Subscriber()) as s0,
        run_subscriber(Subscriber()) as s1,
        run_subscriber(Subscriber()) as s2,
    ):
        for s in (s0, s1, s2):
            subscribed(hub, s)
        monkeypatch.setattr(Store, "next_delivery", broken)
        monkeypatch.setattr(Store, "expire", broken)
        publish(hub, payload(1))
        time.sleep(1.0)  # three workers start and stop; five rounds of the sweeper
        assert all(s.received == [] for s in (s0, s1, s2))
    said = [r.getMessage() for r in caplog.records if "database is damaged" in r.getMessage()]
    assert len(said) == 1 and str(db) in said[0] and "set it aside" in said[0], said
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("UPDATE subscriptions SET expires = 'soon' WHERE callback = 'http://a/'", "lease end"),
        ("UPDATE deliveries SET next_try = 'now' WHERE subscription_id = 1", "next try"),
        ("UPDATE deliveries SET attempts = 'many' WHERE subscription_id = 1", "attempts"),
    ],
)
def test_a_delivery_whose_stored_values_cannot_be_read_ends_its_subscription(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str, said: str
) -> None:
    """SQLite keeps what a column is given: a value of another type stopped that
    subscription's deliveries for good (a `TypeError` in its worker, a traceback in the log at
    every restart). It ends, said once; the other subscriptions are delivered; its subscriber
    is told again once it renews."""
    import logging
    import sqlite3

    path = tmp_path / "h.sqlite"
    store = Store(path)
    a = store.subscribe("http://t/", "http://a/", None, 3600)
    b = store.subscribe("http://t/", "http://b/", None, 3600)
    assert a.id == 1 and sorted(store.publish("http://t/", "<x>", b"1")) == [a.id, b.id]
    store.close()
    with sqlite3.connect(path) as db:
        assert db.execute(damage).rowcount == 1
    store = Store(path)
    with caplog.at_level(logging.WARNING, logger="resourcesync.hub"):
        assert store.next_delivery(a.id) is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert f"subscription {a.id} (http://a/)" in line and said in line and "ended" in line
    assert store.subscription("http://t/", "http://a/") is None
    d = store.next_delivery(b.id)
    assert d is not None and d.body == b"1"
    renewed = store.subscribe("http://t/", "http://a/", None, 3600)
    assert store.publish("http://t/", "<x>", b"2") == sorted([renewed.id, b.id])
    assert (d := store.next_delivery(renewed.id)) is not None and d.body == b"2"
    store.close()
