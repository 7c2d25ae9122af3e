"""Baseline synchronization against a server that adds 20 ms of latency per request.

Measured in one run:

- 10,000 small resources published by `resourcesync publish` and served by our server behind
  a 20 ms-per-request delay (a separate process on 127.0.0.1); `resourcesync sync` (baseline
  from the Resource List) against `resync-sync --baseline` (resync 2.0.1) on the same server:
  seconds, resources per second, and the ratio (targets: ≥ 30× faster, ≥ 500 resources/s);
- peak memory of `resourcesync sync --dry-run` reading and planning a 1,000,000-entry Resource
  List served the same way (target < 200 MB).

Usage: python bench/bench_sync.py [--files 10000] [--big 1000000] [--skip-resync]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out" / "sync"
BIN = Path(sys.executable).parent
SERVER = """
import asyncio, sys
import uvicorn
from resourcesync.source.server import create_app

app = create_app(sys.argv[1])
delay = float(sys.argv[3])

async def slow(scope, receive, send):
    if scope["type"] == "http":
        await asyncio.sleep(delay)
    await app(scope, receive, send)

uvicorn.run(slow, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", access_log=False)
"""
MAXRSS = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server did not start")


def serve(outdir: Path, delay: float) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(outdir), str(port), str(delay)])
    wait_for(port)
    return proc, port


def publish_tree(n: int, port_base: str) -> Path:
    tree = OUT / f"tree-{n}"
    if not tree.exists():
        for i in range(n):
            d = tree / f"d{i // 500:03d}"
            if i % 500 == 0:
                d.mkdir(parents=True)
            (d / f"r{i:06d}.txt").write_bytes((f"resource {i} " * (1 + i % 30)).encode())
    out = OUT / f"public-{n}"
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(
        [
            str(BIN / "resourcesync"),
            "publish",
            str(tree),
            "--base-url",
            port_base + "files/",
            "--out",
            str(out),
            "--capabilities",
            "resourcelist,changelist",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return out


def big_list(n: int, base: str) -> Path:
    """A published tree whose Resource List has n entries (the resources need not exist:
    the dry run reads and plans, it fetches nothing)."""
    from resourcesync.model import Document, Link, Resource
    from resourcesync.sitemap import write_split

    out = OUT / f"big-{n}"
    shutil.rmtree(out, ignore_errors=True)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    doc = Document(
        capability="resourcelist",
        at=t0,
        links=[Link(rel="up", href=base + "big/capabilitylist.xml")],
    )
    entries = (
        Resource(
            loc=f"{base}files/d{i // 1000:04d}/r{i:07d}.txt",
            lastmod=t0 + timedelta(seconds=i),
            hashes={"md5": f"{i:032x}"},
            length=100 + i % 1000,
            type="text/plain",
        )
        for i in range(n)
    )
    write_split(out / "big" / "resourcelist.xml", base + "big/resourcelist.xml", doc, entries)
    from resourcesync.sitemap import write_document

    write_document(
        out / "big" / "capabilitylist.xml",
        Document(
            capability="capabilitylist",
            links=[Link(rel="up", href=base + ".well-known/resourcesync")],
        ),
        [Resource(loc=base + "big/resourcelist.xml", capability="resourcelist")],
    )
    write_document(
        out / ".well-known" / "resourcesync",
        Document(capability="description"),
        [Resource(loc=base + "big/capabilitylist.xml", capability="capabilitylist")],
    )
    state = out / ".resourcesync"
    state.mkdir(parents=True)
    (state / "published.json").write_text(
        json.dumps(
            {
                "format": 1,
                "published_at": "2026-01-01T00:00:00Z",
                "docs_url": base,
                "description": {
                    "path": ".well-known/resourcesync",
                    "url": base + ".well-known/resourcesync",
                },
                "sets": [
                    {
                        "name": "big",
                        "dir": str(out / "files"),
                        "base_url": base + "files/",
                        "capabilitylist": {
                            "path": "big/capabilitylist.xml",
                            "url": base + "big/capabilitylist.xml",
                        },
                        "documents": [],
                        "resources": n,
                        "recent_changes": [],
                    }
                ],
            }
        )
    )
    (out / "files").mkdir()
    return out


def main() -> dict[str, float]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--big", type=int, default=1_000_000)
    ap.add_argument("--delay", type=float, default=0.020)
    ap.add_argument("--skip-resync", action="store_true")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    r: dict[str, float] = {"files": args.files, "delay_ms": args.delay * 1000}

    port = free_port()  # the URLs are fixed at publication: publish for the port we will use
    base = f"http://127.0.0.1:{port}/"
    out = publish_tree(args.files, base)
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(out), str(port), str(args.delay)])
    try:
        wait_for(port)
        dest = OUT / "dest-ours"
        shutil.rmtree(dest, ignore_errors=True)
        start = time.perf_counter()
        subprocess.run(
            [
                str(BIN / "resourcesync"),
                "sync",
                base,
                str(dest),
                "--via",
                "lists",
                "--transfers",
                "64",
                "--per-host",
                "64",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        r["ours_s"] = time.perf_counter() - start
        got = sum(1 for p in dest.rglob("*.txt"))
        assert got == args.files, got
        r["ours_per_s"] = args.files / r["ours_s"]
        if not args.skip_resync:
            dest2 = OUT / "dest-resync"
            shutil.rmtree(dest2, ignore_errors=True)
            dest2.mkdir()
            start = time.perf_counter()
            subprocess.run(
                [
                    str(BIN / "resync-sync"),
                    "--baseline",
                    "--sitemap",
                    base + "resourcesync/resourcelist.xml",
                    f"{base}files/={dest2}",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            r["resync_s"] = time.perf_counter() - start
            r["resync_per_s"] = args.files / r["resync_s"]
            r["speedup"] = r["resync_s"] / r["ours_s"]
    finally:
        proc.terminate()
        proc.wait()

    port = free_port()
    base = f"http://127.0.0.1:{port}/"
    big = big_list(args.big, base)
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(big), str(port), "0"])
    try:
        wait_for(port)
        dest = OUT / "dest-big"
        shutil.rmtree(dest, ignore_errors=True)
        out_rss = subprocess.run(
            [
                sys.executable,
                "-c",
                MAXRSS,
                str(BIN / "resourcesync"),
                "sync",
                base,
                str(dest),
                "--dry-run",
                "--via",
                "lists",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        r["big_entries"] = args.big
        r["peak_mb_big_dry_run"] = int(out_rss.stdout.strip()) / 1024
    finally:
        proc.terminate()
        proc.wait()
    return r


if __name__ == "__main__":
    res = main()
    print(
        f"Baseline of {int(res['files']):,} small resources, {res['delay_ms']:.0f} ms per request:"
    )
    print(
        f"  resourcesync sync        {res['ours_s']:.2f} s  {res['ours_per_s']:,.0f} resources/s"
        " (target >= 500/s)"
    )
    if "resync_s" in res:
        print(
            f"  resync-sync --baseline   {res['resync_s']:.2f} s  {res['resync_per_s']:,.1f} "
            "resources/s"
        )
        print(f"  speed-up                 {res['speedup']:.1f}x (target >= 30x)")
    print(
        f"Peak RSS reading and planning a {int(res['big_entries']):,}-entry Resource List: "
        f"{res['peak_mb_big_dry_run']:.0f} MB (target < 200 MB)"
    )
    (OUT.parent / "bench_sync.json").write_text(json.dumps(res, indent=2))
