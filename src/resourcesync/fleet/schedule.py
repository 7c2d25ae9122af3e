"""When a Source runs next, and how much of the network a fleet may use at once.

A Source that succeeded runs again `every` after its run started; one that failed is retried
after an exponential backoff (`first`, doubled at each consecutive failure, capped), so a Source
that is down costs little and one that comes back is caught up soon.
"""

from __future__ import annotations

from dataclasses import dataclass

from .store import Outcome, Row

__all__ = ["Backoff", "Limits", "next_run"]


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
