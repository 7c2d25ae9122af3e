"""Publishing (Change Notification §4.1): what the hub accepts with 200 and what it refuses
with 4xx and a reason; `--check-topic` against a real topic server."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from resourcesync.sitemap import read_document

from ..servers import serve
from .conftest import (
    TOPIC,
    Subscriber,
    fast_config,
    payload,
    publish,
    run_hub,
    run_subscriber,
    subscribed,
    wait_for,
)

SITEMAPINDEX = (
    b'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
    b' xmlns:rs="http://www.openarchives.org/rs/terms/">'
    b'<rs:md capability="change-notification" from="2024-01-01T00:00:00Z"'
    b' until="2024-01-01T00:01:00Z"/></sitemapindex>'
)
NO_UNTIL = payload(0).replace(b' until="2024-01-01T00:01:00Z"', b"")
BOMB = (
    b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;">]>'
    b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">&lol2;</urlset>'
)
BROKEN_ENTRY = payload(0).replace(b"</url>", b"")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not xml at all", "not a valid document"),
        (payload(0)[:-20], "not a valid document"),
        (BROKEN_ENTRY, "not a valid document"),
        (BOMB, "not a valid document"),
        (payload(0, "changelist"), 'capability is "changelist"'),
        (payload(0).replace(b' capability="change-notification"', b""), "capability is missing"),
        (SITEMAPINDEX, "<sitemapindex>"),
        (NO_UNTIL, "from and until"),
        # An entry that names no resource, after the header: every entry is read. (A value
        # Destinations read as not given, `length="-5"`, is relayed: they read it so.)
        (payload(0).replace(b"<loc>http://127.0.0.1:9/res0</loc>", b""), "without <loc>"),
    ],
)
def test_bad_payloads_are_refused_with_a_reason(shared_hub: str, body: bytes, reason: str) -> None:
    r = publish(shared_hub, body)
    assert r.status_code == 400
    assert reason in r.text


def test_spec_example_payload_is_accepted(shared_hub: str) -> None:
    from ..conftest import notification_spec_examples

    examples = notification_spec_examples()
    if not examples:
        pytest.skip("the specifications are not beside the repository")
    hub = shared_hub
    notifications = [
        (n, b) for n, b in examples if read_document(b)[0].capability == "change-notification"
    ]
    assert notifications
    for name, body in notifications:
        r = publish(hub, body, "http://example.com/dataset1/change/")
        assert r.status_code == 200, (name, r.text)


def test_missing_self_link_is_refused(shared_hub: str) -> None:
    hub = shared_hub
    r = publish(hub, payload(0), topic=None)
    assert r.status_code == 400
    assert 'rel="self"' in r.text
    r = publish(hub, payload(0), None, headers={"Link": f'<{hub}>; rel="hub"'})
    assert r.status_code == 400
    r = publish(hub, payload(0), None, headers={"Link": '</relative>; rel="self"'})
    assert r.status_code == 400
    assert "absolute" in r.text


def test_wrong_content_type_is_refused(shared_hub: str) -> None:
    r = publish(shared_hub, payload(0), content_type="text/plain")
    assert r.status_code == 415
    assert "application/xml" in r.text


def test_text_xml_and_charset_are_accepted(shared_hub: str) -> None:
    assert publish(shared_hub, payload(0), content_type="text/xml").status_code == 200
    r = publish(shared_hub, payload(0), content_type="application/xml; charset=utf-8")
    assert r.status_code == 200


def test_unknown_topic_is_refused_when_topics_are_restricted(db: Path) -> None:
    config = fast_config(topics=(TOPIC, "http://127.0.0.1:9/sets/*"))
    with run_hub(config, db) as hub:
        assert publish(hub, payload(0)).status_code == 200
        assert publish(hub, payload(0), "http://127.0.0.1:9/sets/a/change").status_code == 200
        r = publish(hub, payload(0), "http://127.0.0.1:9/elsewhere/")
        assert r.status_code == 403
        assert "not relayed" in r.text


def test_notification_body_is_capped(db: Path) -> None:
    with run_hub(fast_config(max_notification_bytes=4096), db) as hub:
        big = payload(0).replace(b"</urlset>", b"<!--" + b"x" * 5000 + b"--></urlset>")
        r = publish(hub, big)
        assert r.status_code == 413
        assert publish(hub, payload(0)).status_code == 200


def test_publishers_need_the_token(db: Path) -> None:
    with run_hub(fast_config(token="s3cret"), db) as hub, run_subscriber(Subscriber()) as sub:
        subscribed(hub, sub)
        r = publish(hub, payload(0))
        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith("Bearer")
        r = publish(hub, payload(0), headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
        r = publish(hub, payload(1), headers={"Authorization": "Bearer s3cret"})
        assert r.status_code == 200
        wait_for(lambda: len(sub.received) == 1, what="delivery")
        assert sub.bodies() == [payload(1)]


@pytest.mark.parametrize(
    ("links", "status", "head", "problem"),
    [
        ('<SELF>; rel="self", <http://hub.example/>; rel="hub"', 200, True, None),
        ('<SELF>; rel="self", <http://hub.example/>; rel="hub"', 200, False, None),
        ('<http://hub.example/>; rel="hub"', 200, True, 'rel="self"'),
        ('<SELF>; rel="self"', 200, True, 'rel="hub"'),
        (None, 404, True, "answered 404"),
    ],
)
def test_check_topic_reads_the_topics_link_headers(
    db: Path, links: str | None, status: int, head: bool, problem: str | None
) -> None:
    topic_holder: dict[str, str] = {}

    async def topic(request: Request) -> Response:
        if request.method == "HEAD" and not head:
            return Response(status_code=405)
        headers = {"Link": links.replace("SELF", topic_holder["t"])} if links else {}
        return Response(b"", status, headers=headers, media_type="application/xml")

    app = Starlette(routes=[Route("/change/", topic, methods=["GET", "HEAD"])])
    with serve(app) as base, run_hub(fast_config(check_topic=True), db) as hub:
        topic_holder["t"] = f"{base}/change/"
        r = publish(hub, payload(0), topic_holder["t"])
        if problem is None:
            assert r.status_code == 200, r.text
        else:
            assert r.status_code == 400
            assert "topic check failed" in r.text
            assert problem in r.text


def _framework_examples() -> list[bytes]:
    """The framework notification payloads in the Framework Notification spec (Examples 1, 2)."""
    import re
    from html import unescape

    from ..conftest import SPECS

    path = SPECS / "resourcesync-framework-notification-1.0.1.html"
    if not path.is_file():
        return []
    out = []
    for block in re.findall(r"(?s)<pre[^>]*>(.*?)</pre>", path.read_text(encoding="utf-8")):
        text = unescape(re.sub(r"(?s)<[^>]+>", "", block))
        start = text.find("<?xml")
        # (Example 8, the Capability List that advertises the channel, is not a payload.)
        if start >= 0 and "</urlset>" in text and 'capability="framework-notification"/>' in text:
            out.append(text[start:].strip().encode("utf-8"))
    return out


def test_framework_notifications_are_relayed_like_any_topic(
    shared_hub: str, shared_subscriber: Subscriber
) -> None:
    """Framework Notification 1.0.1 §4: the hub takes and delivers the framework channel's
    payloads (no from/until needed; each entry says which capability document changed)."""
    examples = _framework_examples()
    if not examples:
        pytest.skip("the specifications are not beside the repository")
    topic = "http://example.com/dataset1/framework/"
    sub = shared_subscriber
    subscribed(shared_hub, sub, topic=topic)
    before = len(sub.received)
    for body in examples:
        r = publish(shared_hub, body, topic)
        assert r.status_code == 200, r.text
    wait_for(lambda: len(sub.received) == before + len(examples), what="deliveries")
    assert sub.bodies()[before:] == examples
    incomplete = examples[0].replace(b' capability="resourcelist"', b"")
    r = publish(shared_hub, incomplete, topic)
    assert r.status_code == 400 and "needs change and capability" in r.text
