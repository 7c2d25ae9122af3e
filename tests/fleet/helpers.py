"""Many Sources on loopback for the fleet's tests and benchmark: each Source is published by the
real `publish` and served by the real server, on its own port of a 127.0.0.x address; Sources
on one address share a host (as many repositories share one platform's host). One uvicorn
server listens on every socket and hands each request to its Source's app; a middleware counts
the requests in flight per host, so the politeness limits are measured where they matter.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from resourcesync.source.config import PublishConfig, SetConfig
from resourcesync.source.publish import publish
from resourcesync.source.server import create_app
from tests.destination.helpers import tree, write_tree


@dataclass
class Site:
    name: str
    host: str
    port: int
    data: Path
    out: Path
    hub: str | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def publish(self, *, allow_empty: bool = False) -> None:
        s = SetConfig(
            name="set1", dir=self.data, base_url=self.url, hub=self.hub, allow_empty=allow_empty
        )
        publish(PublishConfig(out=self.out, sets=[s]))

    def write(self, files: dict[str, bytes]) -> None:
        write_tree(self.data, files)

    def files(self) -> dict[str, bytes]:
        return tree(self.data)


@dataclass
class Hosts:
    """Requests in flight per host address, and the most seen at once."""

    delay: float = 0.0
    #: Hosts whose resources are slow (all of them when empty).
    slow: set[str] = field(default_factory=set)
    inflight: collections.Counter[str] = field(default_factory=collections.Counter)
    peak: collections.Counter[str] = field(default_factory=collections.Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    apps: dict[tuple[str, int], Any] = field(default_factory=dict)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        host, port = scope["server"]
        app = self.apps[(host, port)]
        is_doc = scope["path"].startswith(("/.well-known", "/set1/")) or scope["path"] == "/"
        with self.lock:
            self.inflight[host] += 1
            self.peak[host] = max(self.peak[host], self.inflight[host])
        try:
            if self.delay and not is_doc and (not self.slow or host in self.slow):
                await asyncio.sleep(self.delay)
            await app(scope, receive, send)
        finally:
            with self.lock:
                self.inflight[host] -= 1


def files_for(i: int, version: int = 0) -> dict[str, bytes]:
    """A few resources for Source `i`, different at each `version`."""
    out = {f"r{k}.txt": f"source {i} resource {k}".encode() for k in range(4)}
    out[f"deep/{i}/page.html"] = f"<p>{i}</p>".encode()
    if version:
        out["r0.txt"] = f"source {i} changed at {version}".encode()
        out[f"new-{version}.txt"] = f"added at {version}".encode()
    return out


@contextlib.contextmanager
def many_sources(
    tmp_path: Path,
    hosts: list[str],
    *,
    delay: float = 0.0,
    slow: set[str] | None = None,
    files: Callable[[int], dict[str, bytes]] | None = None,
    hub: str | None = None,
) -> Iterator[tuple[list[Site], Hosts]]:
    """One Source per item of `hosts` (an address such as 127.0.0.2; repeat it for Sources
    sharing a host), each published with `files_for(i)`, all served by one server."""
    socks, sites = [], []
    counter = Hosts(delay=delay, slow=slow or set())
    for i, host in enumerate(hosts):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        port = sock.getsockname()[1]
        src = tmp_path / f"src{i}"
        site = Site(f"s{i:03d}", host, port, src / "data", src / "out", hub)
        site.write(files(i) if files else files_for(i))
        site.out.mkdir(parents=True)
        site.publish()
        counter.apps[(host, port)] = create_app(site.out)
        socks.append(sock)
        sites.append(site)
    config = uvicorn.Config(
        counter, log_level="warning", lifespan="off", access_log=False, loop="asyncio"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": socks}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test servers did not start")
        time.sleep(0.01)
    try:
        yield sites, counter
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        for s in socks:
            s.close()


def change(sites: list[Site], version: int) -> None:
    """Every Source changes: one resource updated, one added, one deleted; republished."""
    for i, site in enumerate(sites):
        site.write(files_for(i, version))
        (site.data / "r3.txt").unlink(missing_ok=True)
        for old in site.data.glob("new-*.txt"):
            if old.name != f"new-{version}.txt":
                old.unlink()
        site.publish()


def csv_of(sites: list[Site], every: str = "1h", delete: bool = True) -> str:
    lines = ["name,source,every,delete"]
    lines += [f"{s.name},{s.url},{every},{'true' if delete else 'false'}" for s in sites]
    return "\n".join(lines) + "\n"
