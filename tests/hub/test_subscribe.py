"""Subscribing and unsubscribing (WebSub §5, Change Notification §4.2 and §4.4), modelled on
websub.rocks hub tests 100–106: basic subscribe, secret, extra parameters, resubscribe,
unsubscribe; plus the refusals a hub can answer at once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from resourcesync.hub import AddressPolicy, parse_network

from .conftest import (
    TOPIC,
    Subscriber,
    fast_config,
    payload,
    publish,
    run_hub,
    run_subscriber,
    stats,
    subscribe,
    subscribed,
    unsubscribe,
    wait_for,
)


def test_subscribe_is_verified_with_a_challenge_then_delivered(db: Path) -> None:
    with run_hub(fast_config(), db) as hub, run_subscriber(Subscriber()) as sub:
        r = subscribe(hub, sub.url, **{"hub.lease_seconds": "3600"})
        assert r.status_code == 202
        wait_for(lambda: stats(hub)["subscriptions"] == 1, what="subscription")
        (v,) = sub.verifications
        assert v["hub.mode"] == "subscribe"
        assert v["hub.topic"] == TOPIC
        assert v["hub.lease_seconds"] == "3600"
        assert len(v["hub.challenge"]) >= 16
        assert publish(hub, payload(0)).status_code == 200
        wait_for(lambda: len(sub.received) == 1, what="delivery")
        assert sub.received[0].body == payload(0)
        assert "x-hub-signature" not in sub.received[0].headers


def test_challenges_differ_between_requests(db: Path) -> None:
    with run_hub(fast_config(), db) as hub, run_subscriber(Subscriber()) as sub:
        subscribed(hub, sub)
        subscribed(hub, sub)
        challenges = {v["hub.challenge"] for v in sub.verifications}
        assert len(challenges) == 2


@pytest.mark.parametrize("verify", ["404", "wrong"])
def test_subscription_not_verified_is_not_created(db: Path, verify: str) -> None:
    with run_hub(fast_config(), db) as hub, run_subscriber(Subscriber(verify=verify)) as sub:
        subscribed(hub, sub)
        assert stats(hub)["subscriptions"] == 0
        r = publish(hub, payload(0))
        assert r.status_code == 200
        assert "0 subscriber" in r.text
        time.sleep(0.2)
        assert sub.attempts == 0


def test_callback_query_is_kept_and_extra_parameters_ignored(db: Path) -> None:
    with run_hub(fast_config(), db) as hub, run_subscriber(Subscriber()) as sub:
        callback = sub.url + "?id=42"
        r = subscribe(hub, callback, **{"hub.foo": "bar", "other": "x"})
        assert r.status_code == 202
        wait_for(lambda: stats(hub)["subscriptions"] == 1, what="subscription")
        (v,) = sub.verifications
        assert v["id"] == "42"
        assert "hub.foo" not in v


def test_unsubscribe_verified_stops_deliveries(db: Path) -> None:
    with run_hub(fast_config(), db) as hub, run_subscriber(Subscriber()) as sub:
        subscribed(hub, sub)
        assert stats(hub)["subscriptions"] == 1
        assert unsubscribe(hub, sub.url).status_code == 202
        wait_for(lambda: stats(hub)["subscriptions"] == 0, what="unsubscription")
        v = sub.verifications[-1]
        assert v["hub.mode"] == "unsubscribe"
        assert v["hub.topic"] == TOPIC
        assert "hub.challenge" in v
        assert "queued for 0" in publish(hub, payload(0)).text


def test_unsubscribe_not_confirmed_keeps_the_subscription(db: Path) -> None:
    with run_hub(fast_config(), db) as hub, run_subscriber(Subscriber()) as sub:
        subscribed(hub, sub)
        sub.verify = "404"
        assert unsubscribe(hub, sub.url).status_code == 202
        wait_for(lambda: len(sub.verifications) == 2, what="verification")
        wait_for(lambda: stats(hub)["verifications"] == 0, what="verification to finish")
        assert stats(hub)["subscriptions"] == 1
        assert "queued for 1" in publish(hub, payload(0)).text


@pytest.mark.parametrize(
    ("requested", "granted"),
    [(None, 864000), ("3600", 3600), ("999999999", 2678400)],
)
def test_lease_granted_within_bounds(
    shared_hub: str, shared_subscriber: Subscriber, requested: str | None, granted: int
) -> None:
    extra = {} if requested is None else {"hub.lease_seconds": requested}
    subscribed(shared_hub, shared_subscriber, topic="http://127.0.0.1:9/leases/", **extra)
    assert shared_subscriber.verifications[-1]["hub.lease_seconds"] == str(granted)


def test_lease_below_the_minimum_is_raised(db: Path) -> None:
    with run_hub(fast_config(lease_min=300), db) as hub, run_subscriber(Subscriber()) as sub:
        subscribed(hub, sub, **{"hub.lease_seconds": "10"})
        assert sub.verifications[0]["hub.lease_seconds"] == "300"


def test_expired_lease_gets_nothing(db: Path) -> None:
    with run_hub(fast_config(), db) as hub, run_subscriber(Subscriber()) as sub:
        subscribed(hub, sub, **{"hub.lease_seconds": "1"})
        assert stats(hub)["subscriptions"] == 1
        time.sleep(1.1)
        r = publish(hub, payload(0))
        assert "queued for 0" in r.text
        time.sleep(0.2)
        assert sub.attempts == 0
        assert stats(hub)["subscriptions"] == 0


def test_resubscription_renews_the_lease_and_replaces_the_secret(db: Path) -> None:
    with run_hub(fast_config(), db) as hub, run_subscriber(Subscriber()) as sub:
        subscribed(hub, sub, **{"hub.lease_seconds": "1", "hub.secret": "old"})
        subscribed(hub, sub, **{"hub.lease_seconds": "30", "hub.secret": "new"})
        time.sleep(1.2)  # past the first lease
        assert stats(hub)["subscriptions"] == 1
        assert "queued for 1" in publish(hub, payload(0)).text
        wait_for(lambda: len(sub.received) == 1, what="delivery")
        import hashlib
        import hmac

        expected = hmac.new(b"new", payload(0), hashlib.sha256).hexdigest()
        assert sub.received[0].headers["x-hub-signature"] == f"sha256={expected}"


_SUB = {"hub.mode": "subscribe", "hub.callback": "CB", "hub.topic": TOPIC}


@pytest.mark.parametrize(
    ("form", "reason"),
    [
        ({"hub.callback": "CB", "hub.topic": TOPIC}, "hub.mode is missing"),
        ({"hub.mode": "list", "hub.callback": "CB", "hub.topic": TOPIC}, "not supported"),
        ({"hub.mode": "publish", "hub.url": TOPIC}, "application/xml"),
        ({"hub.mode": "subscribe", "hub.topic": TOPIC}, "hub.callback is missing"),
        ({"hub.mode": "subscribe", "hub.callback": "CB"}, "hub.topic is missing"),
        ({"hub.mode": "subscribe", "hub.callback": "ftp://x/", "hub.topic": TOPIC}, "http(s)"),
        ({"hub.mode": "subscribe", "hub.callback": "CB", "hub.topic": "/rel"}, "hub.topic is not"),
        ({**_SUB, "hub.lease_seconds": "x"}, "positive integer"),
        ({**_SUB, "hub.lease_seconds": "0"}, "positive integer"),
        ({**_SUB, "hub.lease_seconds": "²"}, "positive integer"),
        ({**_SUB, "hub.secret": "s" * 200}, "less than 200 bytes"),
    ],
)
def test_bad_subscription_requests_get_400_with_a_reason(
    shared_hub: str, shared_subscriber: Subscriber, form: dict[str, str], reason: str
) -> None:
    sub = shared_subscriber
    before = len(sub.verifications)
    data = {k: (sub.url if v == "CB" else v) for k, v in form.items()}
    r = httpx.post(shared_hub, data=data)
    assert r.status_code == 400
    assert reason in r.text
    time.sleep(0.05)
    assert len(sub.verifications) == before


def test_secret_of_199_bytes_is_accepted(db: Path) -> None:
    with run_hub(fast_config(), db) as hub, run_subscriber(Subscriber()) as sub:
        subscribed(hub, sub, **{"hub.secret": "s" * 199})
        assert stats(hub)["subscriptions"] == 1


_TEN = parse_network("10.0.0.0/8")
assert _TEN is not None


@pytest.mark.parametrize(
    ("policy", "url", "refused"),
    [
        (AddressPolicy(), "http://127.0.0.1:8/cb", "loopback"),
        (AddressPolicy(), "http://localhost:8/cb", "loopback"),
        (AddressPolicy(), "http://[::1]:8/cb", "loopback"),
        (AddressPolicy(allow_loopback=True), "http://127.0.0.1:8/cb", None),
        (AddressPolicy(allow_loopback=True), "http://10.1.2.3/cb", "not public"),
        (AddressPolicy(allow_loopback=True), "http://192.168.0.1/cb", "not public"),
        (AddressPolicy(allow_loopback=True), "http://169.254.169.254/latest/", "not public"),
        (AddressPolicy(allow_loopback=True), "http://[::ffff:10.0.0.1]/cb", "not public"),
        (AddressPolicy(allow_loopback=True), "http://[fd00::1]/cb", "not public"),
        (AddressPolicy(allow_loopback=True), "http://0.0.0.0/cb", "not allowed"),
        (AddressPolicy(allow_private=True), "http://10.1.2.3/cb", None),
        (AddressPolicy(), "http://192.0.2.1/", "not public"),  # TEST-NET: reserved
        (AddressPolicy(), "http://8.8.8.8/", None),
        # An allow-list admits only what it names.
        (AddressPolicy(networks=(_TEN,)), "http://10.9.9.9/", None),
        (AddressPolicy(networks=(_TEN,)), "http://8.8.8.8/", "not in the allow-list"),
        (AddressPolicy(hosts=frozenset({"localhost"})), "http://localhost:8/", None),
        (AddressPolicy(), "ftp://8.8.8.8/", "http(s)"),
        # Issue 17.15: IPv6 forms that embed a refused IPv4 address are refused as it is.
        (AddressPolicy(), "http://[::127.0.0.1]/cb", "loopback (it embeds 127.0.0.1)"),
        (AddressPolicy(), "http://[64:ff9b::7f00:1]/cb", "loopback"),
        (AddressPolicy(), "http://[64:ff9b::a9fe:a9fe]/cb", "not public"),  # 169.254.169.254
        (AddressPolicy(), "http://[::ffff:127.0.0.1]/cb", "loopback"),
        (AddressPolicy(), "http://[::ffff:0:7f00:1]/cb", "loopback"),  # IPv4-translated
        (AddressPolicy(), "http://[2002:7f00:1::1]/cb", "loopback"),  # 6to4
        (AddressPolicy(), "http://[64:ff9b:1::808:808]/cb", "not public"),  # local-use NAT64
        (AddressPolicy(allow_private=True), "http://[::10.1.2.3]/cb", None),
        (AddressPolicy(), "http://[64:ff9b::808:808]/cb", None),  # NAT64 of a public address
    ],
)
def test_address_policy(policy: AddressPolicy, url: str, refused: str | None) -> None:
    # Literal addresses and localhost only: nothing is contacted, not even a DNS server.
    reason = asyncio.run(policy.check(url))
    if refused is None:
        assert reason is None
    else:
        assert reason is not None
        assert refused in reason


@pytest.mark.parametrize(
    ("policy", "callback", "status"),
    [
        (AddressPolicy(), "LOOPBACK", 403),  # loopback refused by default
        (AddressPolicy(allow_loopback=True), "http://10.1.2.3/cb", 403),
        (AddressPolicy(allow_loopback=True), "LOOPBACK", 202),
    ],
)
def test_callbacks_to_disallowed_addresses_are_refused(
    db: Path, policy: AddressPolicy, callback: str, status: int
) -> None:
    with run_hub(fast_config(policy=policy), db) as hub, run_subscriber(Subscriber()) as sub:
        url = sub.url if callback == "LOOPBACK" else callback
        r = subscribe(hub, url)
        assert r.status_code == status, r.text
        if status == 403:
            assert "not allowed" in r.text
            time.sleep(0.05)
            assert sub.verifications == []


def test_a_callback_whose_name_resolves_anew_is_judged_where_the_connection_goes(
    db: Path,
) -> None:
    """DNS rebinding: a callback's name judged public a moment ago (the verdict is kept a
    minute) resolves to the machine's own address when the hub verifies the subscription.
    The hub's connections go to addresses its policy judged as the name was resolved for
    them: the verification is never sent, and no subscription is made."""
    policy = AddressPolicy()
    policy._cache["localhost"] = (time.monotonic() + 600, None)
    with run_hub(fast_config(policy=policy), db) as hub, run_subscriber(Subscriber()) as sub:
        callback = sub.url.replace("127.0.0.1", "localhost")
        assert "localhost" in callback
        r = subscribe(hub, callback)
        assert r.status_code == 202, r.text
        time.sleep(0.5)
        assert sub.verifications == []
        assert stats(hub)["subscriptions"] == 0


def test_subscription_form_is_capped(db: Path) -> None:
    with run_hub(fast_config(max_form_bytes=1024), db) as hub, run_subscriber(Subscriber()) as sub:
        r = subscribe(hub, sub.url, padding="x" * 2000)
        assert r.status_code == 413
        assert sub.verifications == []


def test_topic_restriction_applies_to_subscriptions(db: Path) -> None:
    config = fast_config(topics=("http://127.0.0.1:9/other/*",))
    with run_hub(config, db) as hub, run_subscriber(Subscriber()) as sub:
        r = subscribe(hub, sub.url)
        assert r.status_code == 403
        assert "not relayed" in r.text
        r = subscribe(hub, sub.url, topic="http://127.0.0.1:9/other/change")
        assert r.status_code == 202


@pytest.mark.parametrize(
    ("published", "subscribed_as"),
    [
        ("http://127.0.0.1:9/%7Ea/change/", "http://127.0.0.1:9/~a/change/"),
        ("HTTP://LOCALHOST:80/a/change/", "http://localhost/a/change/"),
        ("http://127.0.0.1:9/a/%c3%a9/x/../change/", "http://127.0.0.1:9/a/%C3%A9/change/"),
        ("http://127.0.0.1", "http://127.0.0.1/"),
    ],
)
def test_topics_are_compared_in_normal_form(
    shared_hub: str, shared_subscriber: Subscriber, published: str, subscribed_as: str
) -> None:
    """Issue 11.5: case of scheme and host, default port, percent-encoding of unreserved
    characters (RFC 3986 §6.2.2): one topic however each side spells it."""
    sub = shared_subscriber
    count = stats(shared_hub)["subscriptions"]
    subscribed(shared_hub, sub, topic=subscribed_as)
    assert sub.verifications[-1]["hub.topic"] == subscribed_as  # as the subscriber wrote it
    before = len(sub.received)
    r = publish(shared_hub, payload(0), topic=published)
    assert r.status_code == 200 and "queued for 1 subscriber" in r.text, r.text
    wait_for(lambda: len(sub.received) == before + 1, what="delivery")
    assert unsubscribe(shared_hub, sub.url, topic=published).status_code == 202
    wait_for(lambda: stats(shared_hub)["subscriptions"] == count, what="unsubscription")


def test_normalise_topic() -> None:
    from resourcesync.hub.topics import normalise_topic

    assert normalise_topic("https://Example.ORG:443/a%2fb%7e?q=%7e#%41") == (
        "https://example.org/a%2Fb~?q=~#A"
    )
    assert normalise_topic("http://[::1]:8080/") == "http://[::1]:8080/"
    assert normalise_topic("http://h/a/./b/../c") == "http://h/a/c"
