"""When a Source runs next, and how much of the network a fleet may use at once.

A Source that succeeded runs again `every` after its run started; one that failed is retried
after an exponential backoff (`first`, doubled at each consecutive failure, capped), so a Source
that is down costs little and one that comes back is caught up soon.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from .. import rng
from .registry import StoreUnavailable
from .store import Outcome, Row

__all__ = ["Backoff", "Limits", "Outage", "next_run"]

log = logging.getLogger("resourcesync.fleet")


@dataclass(frozen=True)
class Backoff:
    first: float = 60.0
    cap: float = 6 * 3600.0

    def delay(self, failures: int) -> float:
        """Seconds before retrying after `failures` consecutive failures (1 = the first)."""
        if failures <= 0:
            return 0.0
        return min(self.cap, self.first * 2.0 ** min(failures - 1, 60))


@dataclass(frozen=True)
class Limits:
    """How much a fleet asks of the network: `jobs` syncs at once in all; `per_host` syncs at
    once against one host, shared by all the Sources on it; `requests` requests in flight per
    sync to a host. A host never sees more than `per_host × requests` requests at once."""

    jobs: int = 8
    per_host: int = 2
    requests: int = 2


def next_run(row: Row, outcome: Outcome, backoff: Backoff, now: float) -> float:
    """When `row` is due again after `outcome`."""
    if outcome.ok:
        return outcome.started + row.entry.every
    return now + backoff.delay(row.failures + 1)


class Outage:
    """The fleet's database out of reach, waited out by a loop that must go on: said once when it
    goes and once when it is back, tried again after a wait that doubles up to a minute."""

    def __init__(self, stop: threading.Event, first: float = 1.0, cap: float = 60.0) -> None:
        self.stop, self.first, self.cap = stop, first, cap
        self.delay = 0.0

    def wait(self, exc: StoreUnavailable) -> None:
        if not self.delay:
            log.warning("%s; trying again until it is back", exc)
        self.delay = min(self.cap, self.delay * 2 if self.delay else self.first)
        self.stop.wait(self.delay * rng.uniform(0.8, 1.2))

    def over(self) -> None:
        if self.delay:
            log.warning("the fleet database is back")
        self.delay = 0.0
