"""A run's transfers as the hosts they go to see them: a place among the run's transfers and
the host's (`--transfers`, `--per-host`), a delay between a host's requests (`--delay`), and the
circuit breaker that gives up a host that cannot be reached (`--host-failures`, issue 14.3).
`Transfer.fetch_all` asks before each request and tells after it; what happens to a resource
is the transfer's."""

from __future__ import annotations

import asyncio
import re
import time
from collections import defaultdict
from urllib.parse import urlsplit

from .report import SetReport

__all__ = ["Hosts", "Slot", "host_key"]

#: The authority of an absolute URI, as `urlsplit` takes it (up to the first "/", "?" or "#").
_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)")


def host_key(uri: str) -> str:
    """The host a URI's request goes to, as the per-host limits count it: `urlsplit`'s netloc,
    lower-cased (a match instead of a split: once a resource, it was 1.4 % of a sync's CPU)."""
    m = _AUTHORITY.match(uri)
    return (m.group(1) if m else urlsplit(uri).netloc).lower()


class Slot:
    """A transfer's place among the run's transfers and its host's (`--transfers`,
    `--per-host`): held while a request is out. With --fsync it is handed over once the
    Source has answered in full (the connection is back in the pool), so that the host's next
    request goes out before this copy waits for the disk: the host's limit counts requests,
    not our disk's work. Taken again for a second request."""

    __slots__ = ("_semaphores", "held")

    def __init__(self, *semaphores: asyncio.Semaphore) -> None:
        self._semaphores = semaphores
        self.held = False

    async def hold(self) -> None:
        if self.held:
            return
        taken: list[asyncio.Semaphore] = []
        try:
            for semaphore in self._semaphores:
                await semaphore.acquire()
                taken.append(semaphore)
        except BaseException:
            for semaphore in taken:
                semaphore.release()
            raise
        self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            for semaphore in self._semaphores:
                semaphore.release()

    async def hand_over(self) -> None:
        """Release, and let a transfer waiting for the place send its request first: one turn
        of the event loop for it to run, another for the loop to write what it queued (uvloop
        writes a turn's output once the turn is over)."""
        if self.held:
            self.release()
            await asyncio.sleep(0)
            await asyncio.sleep(0)

    async def __aenter__(self) -> Slot:
        await self.hold()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


class Hosts:
    """The hosts of one run's transfers: their places, their turns, their failures."""

    def __init__(self, transfers: int, per_host: int, delay: float, host_failures: int) -> None:
        self._transfers = asyncio.Semaphore(transfers)
        self._per_host: dict[str, asyncio.Semaphore] = defaultdict(
            lambda: asyncio.Semaphore(per_host)
        )
        self._delay = delay
        self._next: dict[str, float] = defaultdict(float)
        self.host_failures = host_failures
        #: Connection failures in a row, per host.
        self._failures: dict[str, int] = defaultdict(int)
        #: The hosts given up, and the resources left undone on each since.
        self._given_up: dict[str, int] = {}

    def slot(self, host: str) -> Slot:
        """A place for one request to `host` (`async with`)."""
        return Slot(self._transfers, self._per_host[host])

    def turn(self, host: str) -> float | None:
        """The seconds to wait for `host`'s turn (`--delay` after its last request: 0 without
        one); None (counted) when the host has been given up. Not a coroutine: once a
        resource, an await was 1 % of a sync's CPU (issue 15.1)."""
        if host in self._given_up:
            self._given_up[host] += 1
            return None
        if not self._delay:
            return 0.0
        now = time.monotonic()
        wait = self._next[host] - now
        self._next[host] = max(now, self._next[host]) + self._delay
        return max(wait, 0.0)

    def given_up(self, host: str) -> bool:
        """Whether `host` was given up while a request to it waited for its turn (counted)."""
        if host in self._given_up:
            self._given_up[host] += 1
            return True
        return False

    def retries(self, host: str) -> bool:
        """Whether a request to `host` is retried: not while its last one could not connect
        after every retry (a host that is down is given up in seconds)."""
        return self._failures[host] == 0

    def answered(self, host: str, unreachable: bool) -> None:
        """How a request to `host` ended: it could not connect (after its retries), or not."""
        if not unreachable:
            self._failures[host] = 0
            return
        self._failures[host] += 1
        if self._failures[host] >= self.host_failures > 0:
            self._given_up.setdefault(host, 0)

    def tell(self, report: SetReport) -> None:
        """The hosts given up, and what they left undone, into the report."""
        for host, skipped in self._given_up.items():
            report.problem(
                host,
                f"could not connect {self.host_failures} times in a row: host given up, "
                f"{skipped} more resources not fetched (retried by the next run)",
            )
