"""Serving: requests per second of `resourcesync serve` against plain static file servers.

A published tree (N resources, its Resource List) is served by

- `resourcesync serve OUTDIR` (uvicorn, one process),
- `python -m http.server` (the standard library's threading server),
- nginx (one worker), when /usr/sbin/nginx is installed,

each on 127.0.0.1, and asked for a small resource and for the Resource List by a loop of
`httpx.AsyncClient` requests at a fixed concurrency, for a bounded time and count. The client
is one Python process on the same machine, so against a fast server it measures itself too:
read the nginx figures as a ceiling of this client, not of nginx.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from resourcesync.source.config import PublishConfig, SetConfig  # noqa: E402
from resourcesync.source.publish import publish  # noqa: E402

N_RESOURCES = int(os.environ.get("BENCH_SERVER_RESOURCES", "2000"))
CONCURRENCY = (1, 16, 64)
SECONDS = float(os.environ.get("BENCH_SERVER_SECONDS", "3"))
MAX_REQUESTS = 50_000
NGINX = "/usr/sbin/nginx"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_up(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.args}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError(f"no answer from {url}")


async def hammer(url: str, concurrency: int, expect: int, seconds: float) -> tuple[float, int]:
    """Requests/s for GET `url` from `concurrency` clients; every answer checked (200, length)."""
    done = 0
    # A client (one connection) per worker: httpx's shared pool costs more per request the more
    # connections it holds, and would measure itself rather than the server. The clients are
    # made before the clock starts (each builds an SSL context, some milliseconds).
    clients = [httpx.AsyncClient(timeout=60) for _ in range(concurrency)]
    stop_at = time.monotonic() + seconds

    async def one(client: httpx.AsyncClient) -> None:
        nonlocal done
        while time.monotonic() < stop_at and done < MAX_REQUESTS:
            r = await client.get(url)
            if r.status_code != 200 or len(r.content) != expect:
                raise RuntimeError(f"{url}: {r.status_code}, {len(r.content)} bytes")
            done += 1

    started = time.monotonic()
    try:
        await asyncio.gather(*(one(c) for c in clients))
    finally:
        elapsed = time.monotonic() - started
        for c in clients:
            await c.aclose()
    return done / elapsed, done


def build(tmp: Path) -> tuple[Path, Path, Path]:
    data, out, www = tmp / "data", tmp / "out", tmp / "www"
    for i in range(N_RESOURCES):
        sub = data / f"d{i % 20:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"r{i:06d}.txt").write_bytes(b"x" * (200 + i % 1000))
    (data / "small.txt").write_bytes(b"s" * 1024)
    out.mkdir()
    # The static servers get the same URL space: /data/ → DIR, /rs/ → the documents.
    www.mkdir()
    (www / "data").symlink_to(data)
    (www / "rs").symlink_to(out / "rs")
    return data, out, www


def start_ours(out: Path, port: int) -> subprocess.Popen[bytes]:
    code = "from resourcesync.cli.serve import serve; serve()"
    args = [str(out), "--port", str(port), "--log-level", "warning"]
    return subprocess.Popen([sys.executable, "-c", code, *args])


def start_http_server(www: Path, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "-d", str(www)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def start_nginx(www: Path, port: int, tmp: Path) -> subprocess.Popen[bytes]:
    prefix = tmp / "nginx"
    prefix.mkdir()
    conf = prefix / "nginx.conf"
    user = "user root;" if os.geteuid() == 0 else ""
    conf.write_text(
        f"""{user}
worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  types {{ text/plain txt; application/xml xml; }}
  client_body_temp_path {prefix}; proxy_temp_path {prefix}; fastcgi_temp_path {prefix};
  uwsgi_temp_path {prefix}; scgi_temp_path {prefix};
  server {{ listen 127.0.0.1:{port}; root {www}; }}
}}
"""
    )
    return subprocess.Popen([NGINX, "-p", str(prefix), "-c", str(conf)])


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-server-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        data, out, www = build(tmp)
        ports = {name: free_port() for name in ("ours", "http.server", "nginx")}
        base = f"http://127.0.0.1:{ports['ours']}"
        started = time.monotonic()
        publish(PublishConfig(out=out, sets=[SetConfig("rs", data, base + "/data/")]))
        rl = out / "rs" / "resourcelist.xml"
        print(
            f"published {N_RESOURCES + 1} resources in {time.monotonic() - started:.2f} s; "
            f"Resource List {rl.stat().st_size / 1024:.0f} KiB",
            flush=True,
        )
        servers = {
            "ours": start_ours(out, ports["ours"]),
            "http.server": start_http_server(www, ports["http.server"]),
        }
        if os.path.exists(NGINX):
            servers["nginx"] = start_nginx(www, ports["nginx"], tmp)
        procs = list(servers.values())
        targets = {
            "small resource (1 KiB)": ("/data/small.txt", 1024),
            f"Resource List ({rl.stat().st_size // 1024} KiB)": (
                "/rs/resourcelist.xml",
                rl.stat().st_size,
            ),
        }
        for name, proc in servers.items():
            wait_up(f"http://127.0.0.1:{ports[name]}/data/small.txt", proc)
        print(f"{SECONDS:.0f} s per cell, one httpx.AsyncClient process; requests/s (ratio ours/x)")
        for what, (path, size) in targets.items():
            for c in CONCURRENCY:
                row = {}
                for name in servers:
                    url = f"http://127.0.0.1:{ports[name]}{path}"
                    asyncio.run(hammer(url, c, size, 0.5))  # warm up: page cache, imports
                    row[name] = asyncio.run(hammer(url, c, size, SECONDS))[0]
                ratios = ", ".join(
                    f"{name} {rps:,.0f} ({row['ours'] / rps:.2f}×)" for name, rps in row.items()
                )
                print(f"{what}, {c:>2} clients: {ratios}", flush=True)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
