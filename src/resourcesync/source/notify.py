"""Sending change notifications to a hub (Change Notification 1.0.1 §4.1), now and later.

A publication turns the changes it journaled into notification payloads kept in the set's state
(consecutive `from`/`until`), and sends the unsent ones in order. What the hub does not accept
(down, restarting, refusing) stays in the state: the next publication sends it first, and in a
process that keeps running (`source`) a background thread retries it with backoff and jitter
(capped) until the hub takes it, without waiting for another change. Only one sender at a time
touches a set's notifications: the background thread takes the publication lock, and skips a
round while a publication runs (which sends them itself).
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from datetime import datetime
from pathlib import Path

from .. import rng
from ..atomic import AtomicFile
from ..errors import ResourceSyncError
from ..model import Capability, Document, Link, Resource
from ..sitemap import write_document
from ..w3cdt import format_w3c, parse_w3c
from .config import PublishConfig, SetConfig
from .setrun import SetRun
from .state import SetState

__all__ = [
    "announce_framework",
    "description_key",
    "payload",
    "publish_notifications",
    "retry_in_background",
    "send_framework_unsent",
    "send_unsent",
    "stop_background",
]

log = logging.getLogger("resourcesync.source")

#: The background retries: first after this many seconds, doubling up to the cap, with jitter.
RETRY_FIRST = 1.0
RETRY_CAP = 300.0


def payload(config: PublishConfig, s: SetConfig, from_: datetime, until: datetime) -> Document:
    """The header of a notification payload (its entries are the journaled changes)."""
    up = Link(rel="up", href=config.set_url(s) + "capabilitylist.xml")
    return Document(capability=Capability.CHANGE_NOTIFICATION, from_=from_, until=until, links=[up])


def _post(s: SetConfig, topic: str, body: bytes) -> None:
    """POST one payload to the hub, retrying what a restarting hub answers (5xx, 429,
    connection refused); raise `ResourceSyncError` saying why it was not accepted."""
    from ..http import HttpOptions, RetryPolicy, make_client

    assert s.hub is not None
    headers = {
        "Content-Type": "application/xml",
        "Link": f'<{topic}>; rel="self", <{s.hub}>; rel="hub"',
    }
    if s.hub_token:
        headers["Authorization"] = f"Bearer {s.hub_token}"
    options = HttpOptions(timeout=10, retry=RetryPolicy(retries=3, backoff=0.2))
    with make_client(options) as client:
        attempt = 0
        while True:
            attempt += 1
            try:
                response = client.post(s.hub, content=body, headers=headers)
            except Exception as exc:  # connection refused, timeout: retried
                reason = str(exc) or type(exc).__name__
                if attempt > options.retry.retries:
                    raise ResourceSyncError(reason, source=s.hub) from None
            else:
                if 200 <= response.status_code < 300:
                    return
                reason = f"HTTP {response.status_code} {response.text[:200]}".strip()
                if response.status_code == 401:
                    reason += (
                        " (the hub wants a token: --hub-token or RESOURCESYNC_HUB_TOKEN)"
                        if not s.hub_token
                        else " (the hub refused the token)"
                    )
                if response.status_code < 500 and response.status_code != 429:
                    raise ResourceSyncError(reason, source=s.hub)
                if attempt > options.retry.retries:
                    raise ResourceSyncError(reason, source=s.hub)
            time.sleep(options.retry.delay(attempt))


def send_unsent(config: PublishConfig, s: SetConfig, state: SetState) -> int:
    """Send the set's unsent notifications in order, each marked sent once the hub took it;
    returns how many were sent. Raises `ResourceSyncError` at the first one not accepted (it and
    those after it stay unsent)."""
    sent = 0
    topic = config.topic_url(s)
    for nid, first, last, from_, until in state.notifications(unsent_only=True):
        body = io.BytesIO()
        write_document(
            body,
            payload(config, s, from_, until),
            state.changes(first, last),
            spec_version=config.spec_version,
        )
        _post(s, topic, body.getvalue())
        state.mark_sent(nid)
        sent += 1
    return sent


def send_framework_unsent(config: PublishConfig, s: SetConfig, state: SetState) -> int:
    """Send the set's unsent framework notifications in order (as `send_unsent`)."""
    sent = 0
    topic = config.framework_topic_url(s)
    for row_id, body in state.framework_unsent():
        _post(s, topic, body)
        state.mark_framework_sent(row_id)
        sent += 1
    return sent


def description_key(config: PublishConfig) -> str:
    """What the Source Description says (a change of it is announced on every channel)."""
    return json.dumps(
        [config.describedby, [(config.set_url(s), s.describedby) for s in config.sets]]
    )


def announce_framework(
    config: PublishConfig,
    s: SetConfig,
    state: SetState,
    events: list[Resource],
    marks: dict[str, str],
    now: datetime,
) -> str | None:
    """Framework Notification 1.0.1 §3, §4.1: keep one payload with this run's changes to the
    set's documents (and to the Source Description, announced on every set's channel), publish
    it at the channel's topic URI (`framework/latest.xml`), and send what is unsent to the hub
    in order. Returns the reason when the hub did not take it (it is retried later)."""
    events = list(events)
    key = description_key(config)
    before = state.get("fw_description")
    if before != key:
        events.append(
            Resource(
                loc=config.description_url,
                change="created" if before is None else "updated",
                capability=Capability.DESCRIPTION,
                datetime=now,
            )
        )
        marks = {**marks, "fw_description": key}
    if events:
        up = Link(rel="up", href=config.set_url(s) + "capabilitylist.xml")
        doc = Document(capability=Capability.FRAMEWORK_NOTIFICATION, links=[up])
        body = io.BytesIO()
        write_document(body, doc, events, spec_version=config.spec_version)
        with state.transaction():
            state.add_framework(body.getvalue())
            for k, v in marks.items():
                state.put(k, v)
        with AtomicFile(config.out / s.name / "framework" / "latest.xml", make_parents=True) as f:
            f.write(body.getvalue())
    try:
        send_framework_unsent(config, s, state)
    except ResourceSyncError as exc:
        return f"framework notification not accepted by the hub yet: {exc}"
    return None


class _Retrier(threading.Thread):
    """Retries one OUTDIR's unsent notifications until none is left, then waits to be woken."""

    def __init__(self, config: PublishConfig) -> None:
        super().__init__(name=f"resourcesync-notify-{config.out}", daemon=True)
        self.config = config
        self.wake = threading.Event()
        self.stopping = False

    #: Something is (or may be) unsent: retry on the backoff schedule.
    pending = True

    def run(self) -> None:
        delay = RETRY_FIRST
        while not self.stopping:
            if self.pending:
                # Jitter: many Sources behind one hub do not come back in step.
                self.wake.wait(delay * rng.uniform(0.5, 1.0))
            else:
                self.wake.wait()
            self.wake.clear()
            if self.stopping:
                return
            try:
                self.pending = self._attempt()
            except Exception as exc:  # keep the thread alive whatever one round met
                log.warning("resourcesync: retrying notifications: %s", exc)
                self.pending = True
            delay = min(RETRY_CAP, delay * 2) if self.pending else RETRY_FIRST

    def _attempt(self) -> bool:
        """One round over the sets; True when something is still unsent."""
        from .publish import run_lock

        config = self.config
        try:
            with run_lock(config.state, wait=False):
                left = False
                for s in config.sets:
                    path = config.state_file(s)
                    if not s.hub or not path.exists():
                        continue
                    with SetState(path) as state:
                        try:
                            n = send_unsent(config, s, state)
                            n += send_framework_unsent(config, s, state)
                        except ResourceSyncError as exc:
                            log.warning(
                                "resourcesync: %s: notification not accepted by the hub yet "
                                "(%s); retrying",
                                s.name,
                                exc,
                            )
                            left = True
                            continue
                        if n:
                            log.warning(
                                "resourcesync: %s: %d notification(s) held back are sent", s.name, n
                            )
                return left
        except ResourceSyncError:
            return True  # a publication is running: it sends them, or we try again


_retriers: dict[Path, _Retrier] = {}
_guard = threading.Lock()


def retry_in_background(config: PublishConfig) -> None:
    """Make sure a background thread of this process retries the unsent notifications of
    `config` (one thread per OUTDIR; woken, not duplicated, by later calls)."""
    key = config.state.resolve()
    with _guard:
        retrier = _retriers.get(key)
        if retrier is None or not retrier.is_alive():
            retrier = _Retrier(config)
            _retriers[key] = retrier
            retrier.start()
        else:
            retrier.config = config
            if retrier.pending:
                return  # already retrying, on its schedule
            retrier.pending = True
    retrier.wake.set()


def stop_background() -> None:
    """Stop every background retrier of this process (tests, an orderly shutdown)."""
    with _guard:
        retriers = list(_retriers.values())
        _retriers.clear()
    for r in retriers:
        r.stopping = True
        r.wake.set()
    for r in retriers:
        r.join(timeout=30)


# -- the stage of `publish` ------------------------------------------------------------------


def publish_notifications(run: SetRun) -> None:
    """Turn the changes not yet announced into notification payloads (consecutive,
    non-overlapping `from`/`until`, at most `notification_max_entries` each), keep them in
    the state, and send the unsent ones to the hub in order, retrying; what the hub does not
    accept now is sent by the next run. The latest payload is also published at the topic
    URI (`change/latest.xml`, served there with its `self` and `hub` links)."""
    state = run.state
    s = run.s
    done = state.notifications()
    last_seq = done[-1][2] if done else int(state.get("cn_start_seq") or state.max_seq())
    if not done and state.get("cn_start_seq") is None:
        # Announcing starts now: what was journaled before is in the Change Lists.
        state.put("cn_start_seq", str(last_seq))
        state.put("cn_from", format_w3c(run.scan.started))
    start = done[-1][4] if done else parse_w3c(state.get("cn_from") or "")
    top = state.max_seq()
    if top > last_seq:
        first = last_seq + 1
        while first <= top:
            count = min(s.notification_max_entries, state.count_changes(first, top))
            last = state.nth_seq(first, count)
            final = last == top
            until = run.scan.completed if final else state.seq_time(last)
            assert until is not None
            until = max(until, start)
            state.add_notification(first, last, start, until)
            start, first = until, last + 1
    rows = state.notifications()
    if rows:
        _, first, last, from_, until = rows[-1]
        run.write(
            "change/latest.xml",
            _payload(run, first, last, from_, until),
            state.changes(first, last),
        )
    elif not run.path("change/latest.xml").exists():
        # Nothing announced yet: the topic still answers, with an empty notification.
        run.write("change/latest.xml", _payload(run, 0, 0, start, start), [])
    try:
        run.notified += send_unsent(run.config, s, state)
    except ResourceSyncError as exc:
        run.problems.append(f"notification not accepted by the hub yet: {exc}")
        # Sent by the next run, and meanwhile by this process if it keeps running.
        retry_in_background(run.config)
    state.forget_sent_notifications()


def _payload(run: SetRun, first: int, last: int, from_: datetime, until: datetime) -> Document:
    return payload(run.config, run.s, from_, until)
