"""The package draws its random numbers (backoff jitter, temporary names, slot order) from a
generator of its own: a program embedding it keeps its `random` sequence, and a forked child
draws its own numbers."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from resourcesync import rng
from resourcesync.destination.mirror import Mapping, Mirror
from resourcesync.http import RetryPolicy


def test_jitter_and_temporary_names_leave_the_random_module_alone(tmp_path: Path) -> None:
    random.seed(12345)
    state = random.getstate()
    policy = RetryPolicy()
    delays = [policy.delay(attempt) for attempt in (1, 2, 3)]
    assert all(0 < d <= policy.max_backoff for d in delays)
    mirror = Mirror(tmp_path / "dest", [Mapping("http://example.org/", tmp_path / "dest")])
    with mirror.incoming("http://example.org/a.txt") as inc:
        inc.write(b"a")
    rng.sample(range(10), 10)
    assert random.getstate() == state


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_draws_its_own_numbers() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, rng.getrandbits(64).to_bytes(8, "big"))
        os._exit(0)
    os.close(write)
    child = int.from_bytes(os.read(read, 8), "big")
    os.close(read)
    os.waitpid(pid, 0)
    # Without the generator seeded again in the child, both would draw the same next number.
    assert child != rng.getrandbits(64)
