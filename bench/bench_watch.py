"""The watcher (`resourcesync source`): one changed file in a 200,000-file tree (issue 15.4).

Starts `resourcesync source` on a published tree, appends to one file at a time, and measures
how long until the change is in the served open Change List (polled over HTTP every 10 ms), and
the watcher's CPU time per change. Anchors: the target (0.5 s) and the same measurement on a
1,000-file tree (the floor of the debounce and the serving).

Usage: python bench/bench_watch.py [--files 1000,200000] [--changes 5] [--src OTHER/src]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import time
import urllib.request
from pathlib import Path

from _common import OUT, command, environment, machine, tree

TARGET = 0.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return bytes(r.read())
    except OSError:
        return None


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(n: int, changes: int, env: dict[str, str]) -> tuple[list[float], list[float]]:
    root = tree(n)
    out = OUT / "watch" / f"docs-{n}"
    shutil.rmtree(out, ignore_errors=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}/data/"
    # Published once beforehand: the watcher's own first publication is then a re-run.
    subprocess.run(
        command("publish", str(root), "--base-url", base, "--out", str(out)),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    proc = subprocess.Popen(
        command(
            "source",
            str(root),
            "--base-url",
            base,
            "--out",
            str(out),
            "--port",
            str(port),
            "--quiet-time",
            "0.1",
            "--log-level",
            "warning",
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    latencies: list[float] = []
    cpu: list[float] = []
    try:
        cl = f"http://127.0.0.1:{port}/resourcesync/changelist.xml"
        deadline = time.monotonic() + 600
        while get(cl) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the watcher did not start ({n} files)")
            time.sleep(0.1)
        time.sleep(1.5)  # the watch is set up
        for k in range(changes):
            i = (k * 7919) % n
            rel = f"d{i // 1000:03d}/f{i:06d}.txt"
            entry = f"<loc>{base}{rel}</loc>".encode()
            before = (get(cl) or b"").count(entry)
            cpu_before = cpu_seconds(proc.pid)
            with open(root / rel, "ab") as f:
                f.write(f" watched {time.time()}".encode())
            start = time.perf_counter()
            while (get(cl) or b"").count(entry) <= before:
                if time.perf_counter() - start > 60:
                    raise SystemExit(f"the change to {rel} was not published within 60 s")
                time.sleep(0.01)
            latencies.append(time.perf_counter() - start)
            time.sleep(0.5)  # the publication is over
            cpu.append(cpu_seconds(proc.pid) - cpu_before)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return latencies, cpu


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", default="1000,200000")
    ap.add_argument("--changes", type=int, default=5)
    ap.add_argument("--src", help="run another checkout's src (for before figures)")
    args = ap.parse_args()
    env = environment(args.src)
    print(f"The watcher: one changed file until it is in the served Change List ({machine()}):")
    floor = None
    ok = True
    for n in (int(x) for x in args.files.split(",")):
        latencies, cpu = measure(n, args.changes, env)
        median = statistics.median(latencies)
        floor = floor or median
        print(
            f"  {n:>9,} files: median {median:.2f} s (min {min(latencies):.2f}, max "
            f"{max(latencies):.2f}), watcher CPU per change {statistics.median(cpu):.2f} s; "
            f"{median / TARGET:.2f}x the {TARGET} s target, {median / floor:.2f}x the "
            "smallest tree"
        )
        ok &= n < 200_000 or median < TARGET
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
