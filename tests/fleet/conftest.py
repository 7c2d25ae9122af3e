"""Module-wide servers for the cluster tests (started once; each test gets its own database
and an empty Redis)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fleet.cluster import Postgres, Redis


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    pg = Postgres()
    try:
        yield pg
    finally:
        pg.stop()


@pytest.fixture(scope="module")
def redis_server() -> Iterator[Redis]:
    r = Redis()
    try:
        yield r
    finally:
        r.close()


@pytest.fixture
def broker(redis_server: Redis) -> Redis:
    if redis_server.proc is None or redis_server.proc.poll() is not None:
        redis_server.start()
    redis_server.flush()
    return redis_server
