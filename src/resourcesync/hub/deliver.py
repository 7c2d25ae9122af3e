"""Fan-out: one worker per subscription with deliveries queued, each sending its queue in order.

Change Notification §4.3: the hub POSTs the Source's payload unchanged to the callback, with
`Content-Type: application/xml` and `Link: <topic>; rel="self", <hub>; rel="hub"`; a 2xx answer
is success, anything else a failure. WebSub §7/§8 add `X-Hub-Signature: sha256=<hex HMAC of the
body>` when the subscriber gave a secret, and let a subscriber end its subscription with
410 Gone.

Ordering: a worker only ever sends the oldest pending notification of its subscription, and
tries the next one only once that one succeeded (or the subscription ended). A failed attempt
is retried with exponential backoff (capped) until the lease ends; then the subscription and
its queue are dropped. Workers are independent tasks, so a slow or dead subscriber holds back
only its own queue (and at most one of the `concurrency` slots while an attempt is in flight,
for at most `timeout` seconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

import httpx

from ..http import retry_after_seconds
from .config import HubConfig
from .store import Delivery, Store

__all__ = ["Deliverer", "Outcome", "sign"]

log = logging.getLogger("resourcesync.hub")


def sign(secret: bytes, body: bytes) -> str:
    """The `X-Hub-Signature` value for `body`: `sha256=` and the hex HMAC-SHA256."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


async def _chunks(body: bytes, size: int = 64 << 10) -> AsyncIterator[bytes]:
    """The shared payload in small pieces: a delivery in flight holds one piece of its own,
    not a copy of the whole body."""
    view = memoryview(body)
    for start in range(0, len(view), size):
        yield bytes(view[start : start + size])


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt came to: "ok", "gone" (410), "refused" (callback not allowed) or
    "retry" (with the reason and the subscriber's Retry-After, if any)."""

    kind: str
    reason: str = ""
    retry_after: float | None = None


class Deliverer:
    """Runs the workers. Call `kick` with subscription ids whenever their queues may have grown
    (after a publish, after a renewal); `resume` after a restart; `close` to stop."""

    def __init__(
        self,
        store: Store,
        client: httpx.AsyncClient,
        config: HubConfig,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.store = store
        self.client = client
        self.config = config
        self.clock = clock or store.clock
        self._workers: dict[int, asyncio.Task[None]] = {}
        self._wake: dict[int, asyncio.Event] = {}
        self._slots = asyncio.Semaphore(config.concurrency)
        self._sweeper: asyncio.Task[None] | None = None
        self._closing = False
        #: Counters for the status page and the benchmark.
        self.counts = {"delivered": 0, "failed_attempts": 0, "ended": 0}

    @property
    def active(self) -> int:
        """Workers running now."""
        return len(self._workers)

    def resume(self) -> None:
        """Start workers for every queue left in the store, and the lease sweeper."""
        self.kick(self.store.pending_subscriptions())
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep(), name="hub-sweeper")

    def kick(self, subscription_ids: Iterable[int]) -> None:
        if self._closing:
            return
        for sub_id in subscription_ids:
            event = self._wake.get(sub_id)
            if event is not None:
                event.set()
                continue
            self._wake[sub_id] = asyncio.Event()
            self._workers[sub_id] = asyncio.create_task(
                self._work(sub_id), name=f"hub-deliver-{sub_id}"
            )

    async def close(self) -> None:
        """Stop every worker. An attempt cut short stays queued and is sent again next time."""
        self._closing = True
        tasks = list(self._workers.values())
        if self._sweeper is not None:
            tasks.append(self._sweeper)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._workers.clear()
        self._wake.clear()

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(self.config.sweep_interval)
            try:
                ended = self.store.expire()
            except Exception as exc:  # keep sweeping; the next round may succeed
                if not self.store.damaged(exc):
                    log.exception("hub: sweeping expired leases failed")
                continue
            for sub_id in ended:
                log.info("hub: subscription %d ended: lease expired", sub_id)

    async def _work(self, sub_id: int) -> None:
        me = asyncio.current_task()
        try:
            while True:
                d = self.store.next_delivery(sub_id)
                if d is None:
                    return  # no await since the check: a publish now starts a new worker
                now = self.clock()
                if d.expires <= now:
                    self.store.end(sub_id)
                    self.counts["ended"] += 1
                    log.info("hub: subscription %d ended: lease expired (%s)", sub_id, d.callback)
                    return
                if d.next_try > now:
                    await self._sleep(sub_id, min(d.next_try, d.expires) - now)
                    continue
                outcome = await self._attempt(d)
                if outcome.kind == "ok":
                    self.store.delivered(sub_id, d.notification_id)
                    self.counts["delivered"] += 1
                elif outcome.kind in ("gone", "refused"):
                    self.store.end(sub_id)
                    self.counts["ended"] += 1
                    log.info("hub: subscription %d ended: %s", sub_id, outcome.reason)
                    return
                else:
                    attempt = d.attempts + 1
                    delay = self.config.retry.delay(attempt, outcome.retry_after)
                    retry_at = self.clock() + delay
                    self.store.failed(sub_id, d.notification_id, retry_at, outcome.reason)
                    self.counts["failed_attempts"] += 1
                    log.info(
                        "hub: delivery %d to %s failed (%s); attempt %d, next in %.1fs",
                        d.notification_id,
                        d.callback,
                        outcome.reason,
                        attempt,
                        delay,
                    )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A store error: leave the queue as it is; the next kick or restart picks it up.
            if not self.store.damaged(exc):
                log.exception("hub: worker for subscription %d stopped", sub_id)
        finally:
            if self._workers.get(sub_id) is me:
                del self._workers[sub_id]
                self._wake.pop(sub_id, None)

    async def _sleep(self, sub_id: int, seconds: float) -> None:
        """Wait `seconds`, or less when kicked (a renewal resets the backoff)."""
        event = self._wake[sub_id]
        event.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(seconds, 0.0)):
                await event.wait()

    async def _attempt(self, d: Delivery) -> Outcome:
        refusal = await self.config.policy.check(d.callback)
        if refusal is not None:
            return Outcome("refused", f"callback not allowed: {refusal}")
        headers = {
            "Content-Type": "application/xml",
            "Link": d.link,
            "Content-Length": str(len(d.body)),
        }
        if d.secret is not None:
            headers["X-Hub-Signature"] = sign(d.secret, d.body)
        async with self._slots:
            try:
                async with (
                    asyncio.timeout(self.config.timeout),
                    self.client.stream(
                        "POST", d.callback, content=_chunks(d.body), headers=headers
                    ) as r,
                ):
                    # The answer's body is not read: only the status matters.
                    status = r.status_code
                    retry_after = retry_after_seconds(r.headers.get("Retry-After"))
            except TimeoutError:
                return Outcome("retry", f"no answer within {self.config.timeout:g}s")
            except httpx.HTTPError as exc:
                return Outcome("retry", str(exc) or type(exc).__name__)
        if 200 <= status < 300:
            return Outcome("ok")
        if status == 410:
            return Outcome("gone", f"{d.callback} answered 410 Gone")
        return Outcome("retry", f"HTTP {status}", retry_after)
