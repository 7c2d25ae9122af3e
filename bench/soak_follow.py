"""Soak: a follower left running while everything around it fails (issue 11, "Done when").

Real processes on 127.0.0.1: `resourcesync source --hub` watching a directory that a writer
changes at random (creates, updates, deletes), `resourcesync hub`, and `resourcesync sync
--follow --delete` whose callback is reached through a proxy that drops notifications at random
(answering 200, so the hub believes them delivered) and delivers some twice (at once, or late
after the next one: out of order). Meanwhile the hub and the follower are
killed (SIGKILL) and restarted at random. At the end, with everything up again, the copy must
equal the Source's tree, and every change that was not superseded by a later one must have
been seen in the copy. Prints the figures: changes, outages, notifications dropped, the
follower's outage and recovery events, median and 99th percentile latency from the file write
to the copy having it.

Usage: python bench/soak_follow.py [--duration 120] [--seed N] [--drop 0.2] [--duplicate 0.1]
                                   [--json FILE]
Exit 0 when the copy converged and no change was lost, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent / "resourcesync"
NAMES = [f"f{i:02d}.txt" for i in range(30)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer")


def log(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)


class Proxy:
    """Between the hub and the follower's callback server: verifications pass; each
    notification is dropped with probability `drop` (answered 200, never forwarded), and one
    forwarded is delivered again with probability `duplicate` — at once, or after the next
    notification (late and out of order)."""

    def __init__(
        self, port: int, target_port: int, drop: float, rng: random.Random, duplicate: float = 0.0
    ) -> None:
        import httpx
        import uvicorn
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import Response
        from starlette.routing import Route

        self.dropped = self.forwarded = self.duplicated = 0
        target = f"http://127.0.0.1:{target_port}"
        #: A notification held back, to be delivered again after the next one.
        late: list[tuple[str, bytes, dict[str, str]]] = []

        async def send(method: str, path: str, params: Any, body: bytes, headers: Any) -> Any:
            async with httpx.AsyncClient(timeout=10) as client:
                return await client.request(
                    method, target + path, params=params, content=body, headers=headers
                )

        async def relay(request: Request) -> Response:
            body = await request.body()
            if request.method == "POST" and rng.random() < drop:
                self.dropped += 1
                return Response(status_code=200)
            headers = {
                k: v
                for k, v in request.headers.items()
                if k in ("content-type", "link", "x-hub-signature")
            }
            path, params = request.url.path, request.query_params
            try:
                r = await send(request.method, path, params, body, headers)
                if request.method == "POST":
                    self.forwarded += 1
                    for old in late:
                        await send("POST", old[0], {}, old[1], old[2])
                        self.duplicated += 1
                    late.clear()
                    if rng.random() < duplicate:
                        if rng.random() < 0.5:
                            await send("POST", path, params, body, headers)
                            self.duplicated += 1
                        else:
                            late.append((path, body, headers))
            except httpx.HTTPError:
                return Response("follower down", 502)
            return Response(r.content, r.status_code)

        app = Starlette(routes=[Route("/{path:path}", relay, methods=["GET", "POST"])])
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


class Process:
    """A command that can be killed and started again; its stdout lines go to `lines`."""

    def __init__(self, name: str, args: list[str], logfile: Path) -> None:
        self.name, self.args, self.logfile = name, args, logfile
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []

    def start(self) -> None:
        err = self.logfile.open("a")
        self.proc = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True
        )
        err.close()
        proc = self.proc
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Writer:
    """Changes the Source's files at random; `pending` maps a name to its latest change
    (expected content or None for deleted, time of the write) until the copy shows it."""

    def __init__(self, data: Path, dest: Path, rng: random.Random) -> None:
        self.data, self.dest, self.rng = data, dest, rng
        self.lock = threading.Lock()
        self.pending: dict[str, tuple[str | None, float]] = {}
        self.latencies: list[float] = []
        self.changes = self.superseded = 0
        self.counter = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.rng.uniform(0.05, 0.6)):
            name = self.rng.choice(NAMES)
            path = self.data / name
            with self.lock:
                if path.exists() and self.rng.random() < 0.2:
                    path.unlink()
                    content = None
                else:
                    self.counter += 1
                    content = f"{name} version {self.counter}\n"
                    path.write_text(content)
                if name in self.pending:
                    self.superseded += 1
                self.pending[name] = (content, time.monotonic())
                self.changes += 1

    def observe(self) -> None:
        """Mark what the copy now shows (called every few milliseconds)."""
        with self.lock:
            for name, (content, at) in list(self.pending.items()):
                try:
                    now = (self.dest / "files" / name).read_text()
                except FileNotFoundError:
                    now = None
                except OSError:
                    continue
                if now == content:
                    self.latencies.append(time.monotonic() - at)
                    del self.pending[name]


def tree(root: Path) -> dict[str, str]:
    out = {}
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if path.is_file() and not any(part.startswith(".") for part in rel.parts):
            with contextlib.suppress(OSError):
                out[str(rel)] = path.read_text()
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def soak(duration: float, seed: int, drop: float, duplicate: float = 0.1) -> dict[str, Any]:
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="soak-follow-"))
    data, dest = work / "data", work / "copy"
    data.mkdir()
    for name in NAMES[:10]:
        (data / name).write_text(f"{name} initial\n")
    hub_port, site_port, cb_port, proxy_port = (free_port() for _ in range(4))
    hub_url, site = f"http://127.0.0.1:{hub_port}/", f"http://127.0.0.1:{site_port}/"
    hub = Process(
        "hub",
        [
            str(BIN), "hub", "--port", str(hub_port), "--db", str(work / "hub.sqlite"),
            "--allow-loopback", "--lease-min", "1", "--retry-backoff", "0.05",
            "--retry-max", "1", "--log-level", "warning",
        ],
        work / "hub.log",
    )  # fmt: skip
    source = Process(
        "source",
        [
            str(BIN), "source", str(data), "--base-url", site + "files/", "--port",
            str(site_port), "--out", str(work / "public"), "--hub", hub_url,
            "--quiet-time", "0.05", "--log-level", "warning",
        ],
        work / "source.log",
    )  # fmt: skip
    follower = Process(
        "follower",
        [
            str(BIN), "sync", site, str(dest), "--follow", "--delete", "--json",
            "--listen", f"127.0.0.1:{cb_port}",
            "--callback-url", f"http://127.0.0.1:{proxy_port}/callback/",
            "--lease", "60", "--poll-interval", "3", "--verify-timeout", "2",
        ],
        work / "follower.log",
    )  # fmt: skip
    proxy = Proxy(proxy_port, cb_port, drop, rng, duplicate)
    writer = Writer(data, dest, rng)
    kills = {"hub": 0, "follower": 0}
    follower_runs: list[list[str]] = []
    result: dict[str, Any] = {}
    try:
        hub.start()
        wait_http(hub_url)
        source.start()
        wait_http(site + ".well-known/resourcesync")
        follower.start()
        threading.Thread(target=writer.run, daemon=True).start()
        log(
            f"soak: {duration:.0f}s of changes and outages (seed {seed}, drop {drop:.0%}, "
            f"duplicate {duplicate:.0%})"
        )
        started = time.monotonic()
        next_chaos = started + rng.uniform(1, 4)
        restart: dict[str, float] = {}
        while time.monotonic() - started < duration:
            now = time.monotonic()
            writer.observe()
            for name, at in list(restart.items()):
                if now >= at:
                    proc = hub if name == "hub" else follower
                    if name == "follower":
                        follower_runs.append(follower.lines)
                        follower.lines = []
                    proc.start()
                    log(f"soak: {name} restarted")
                    del restart[name]
            if now >= next_chaos:
                name = rng.choice(["hub", "follower"])
                if name not in restart:
                    (hub if name == "hub" else follower).kill()
                    kills[name] += 1
                    down = rng.uniform(0.5, 4.0)
                    restart[name] = now + down
                    log(f"soak: {name} killed (down for {down:.1f}s)")
                next_chaos = now + rng.uniform(2, 6)
            if not source.alive():
                raise RuntimeError("the Source stopped")
            time.sleep(0.005)
        writer.stop.set()
        for name in list(restart):
            proc = hub if name == "hub" else follower
            if name == "follower":
                follower_runs.append(follower.lines)
                follower.lines = []
            proc.start()
            log(f"soak: {name} restarted (end)")
        log("soak: changes stopped; waiting for the copy to converge")
        deadline = time.monotonic() + 90
        converged = False
        while time.monotonic() < deadline:
            writer.observe()
            if not writer.pending and tree(data) == tree(dest / "files"):
                converged = True
                break
            time.sleep(0.05)
        follower_runs.append(follower.lines)
        events: dict[str, int] = {}
        for run in follower_runs:
            for line in run:
                with contextlib.suppress(ValueError):
                    kind = json.loads(line).get("event", "?")
                    events[kind] = events.get(kind, 0) + 1
        lat = writer.latencies
        result = {
            "seconds": duration,
            "seed": seed,
            "changes": writer.changes,
            "changes_superseded": writer.superseded,
            "changes_seen": len(lat),
            "changes_lost": len(writer.pending),
            "converged": converged,
            "hub_kills": kills["hub"],
            "follower_kills": kills["follower"],
            "notifications_dropped": proxy.dropped,
            "notifications_duplicated": proxy.duplicated,
            "notifications_forwarded": proxy.forwarded,
            "follower_events": events,
            "median_ms": statistics.median(lat) * 1000 if lat else None,
            "p99_ms": percentile(lat, 0.99) * 1000 if lat else None,
            "max_ms": max(lat) * 1000 if lat else None,
        }
        if not converged:
            result["difference"] = sorted(
                set(tree(data).items()) ^ set(tree(dest / "files").items())
            )[:10]
    finally:
        writer.stop.set()
        for proc in (follower, source, hub):
            proc.stop()
        proxy.stop()
        if result.get("converged"):
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"soak: kept {work} for inspection")
    return result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(4), "big"))
    ap.add_argument("--drop", type=float, default=0.2, help="share of notifications dropped")
    ap.add_argument(
        "--duplicate",
        type=float,
        default=0.1,
        help="share of notifications delivered twice (at once, or late after the next one)",
    )
    ap.add_argument("--json", type=Path, help="write the figures here too")
    args = ap.parse_args()
    r = soak(args.duration, args.seed, args.drop, args.duplicate)
    print(json.dumps(r, indent=2))
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))
    return 0 if r.get("converged") and r.get("changes_lost") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
