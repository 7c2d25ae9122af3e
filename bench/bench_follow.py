"""Change Notification latency: a file changes under `resourcesync source --hub`, and a
Destination following it (`resourcesync sync --follow`) has the new bytes on disk.

Everything runs as real processes on 127.0.0.1: the hub, the Source (publishing, serving and
watching its directory, debounce included), the follower. Each round writes a file and waits
(polling every 2 ms) until the copy has it; the figures are the median and the 90th percentile
of those times (target: median under 300 ms).

Usage: python bench/bench_follow.py [--rounds 20] [--quiet-time 0.1]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

BIN = Path(sys.executable).parent / "resourcesync"
OUT = Path(__file__).resolve().parent / "out"


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


def wait_file(path: Path, text: str, timeout: float = 30) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if path.read_text() == text:
                return time.monotonic()
        except OSError:
            pass
        time.sleep(0.002)
    raise RuntimeError(f"{path} never had {text!r}")


def main() -> dict[str, float]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--quiet-time", type=float, default=0.1)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-follow-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        data = work / "data"
        data.mkdir()
        for i in range(50):
            (data / f"f{i:03d}.txt").write_text(f"file {i}")
        hub_port, site_port, cb_port = free_port(), free_port(), free_port()
        hub = f"http://127.0.0.1:{hub_port}/"
        site = f"http://127.0.0.1:{site_port}/"
        quiet = subprocess.DEVNULL
        procs.append(
            subprocess.Popen(
                [
                    str(BIN),
                    "hub",
                    "--port",
                    str(hub_port),
                    "--db",
                    str(work / "hub.sqlite"),
                    "--allow-loopback",
                    "--log-level",
                    "warning",
                ],
                stdout=quiet,
                stderr=quiet,
            )
        )
        wait_http(hub)
        procs.append(
            subprocess.Popen(
                [
                    str(BIN),
                    "source",
                    str(data),
                    "--base-url",
                    site + "files/",
                    "--port",
                    str(site_port),
                    "--out",
                    str(work / "public"),
                    "--hub",
                    hub,
                    "--quiet-time",
                    str(args.quiet_time),
                    "--log-level",
                    "warning",
                ],
                stdout=quiet,
                stderr=quiet,
            )
        )
        wait_http(site + ".well-known/resourcesync")
        dest = work / "copy"
        procs.append(
            subprocess.Popen(
                [
                    str(BIN),
                    "sync",
                    site,
                    str(dest),
                    "--follow",
                    "--listen",
                    f"127.0.0.1:{cb_port}",
                    "--json",
                ],
                stdout=subprocess.PIPE,
                stderr=quiet,
            )
        )
        follower = procs[-1]
        assert follower.stdout is not None
        while True:  # until subscribed
            line = follower.stdout.readline()
            if not line:
                raise RuntimeError("the follower stopped")
            if json.loads(line).get("event") == "subscribed":
                break
        latencies = []
        target = data / "f007.txt"
        for n in range(args.rounds):
            text = f"round {n}"
            start = time.monotonic()
            target.write_text(text)
            latencies.append(wait_file(dest / "files" / "f007.txt", text) - start)
            time.sleep(0.2)
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)
    latencies.sort()
    return {
        "rounds": args.rounds,
        "quiet_time_s": args.quiet_time,
        "median_ms": statistics.median(latencies) * 1000,
        "p90_ms": latencies[int(len(latencies) * 0.9) - 1] * 1000,
        "min_ms": latencies[0] * 1000,
        "max_ms": latencies[-1] * 1000,
    }


if __name__ == "__main__":
    r = main()
    print(
        f"File change → followed copy updated, {r['rounds']} rounds, watcher quiet time "
        f"{r['quiet_time_s'] * 1000:.0f} ms:"
    )
    print(
        f"  median {r['median_ms']:.0f} ms (target < 300 ms), 90th percentile "
        f"{r['p90_ms']:.0f} ms, min {r['min_ms']:.0f} ms, max {r['max_ms']:.0f} ms"
    )
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_follow.json").write_text(json.dumps(r, indent=2))
