"""Fleet throughput: Sources synced per minute and resources per second, embedded against 1, 2
and 4 Celery workers, on the same loopback Sources; and the scheduler's cost per Source at
10,000 registered Sources (one scheduling pass: time and memory).

    python bench/bench_fleet.py [--sources 200] [--resources 20] [--workers 1,2,4]
                                [--registered 10000]

The Sources (the real `publish` and server, on 127.0.0.2… as distinct hosts, ten Sources per
host) are served by a process of their own, so the fleet under test does not share its CPU
with them in one interpreter. Each mode starts from empty copies (a baseline of every Source).
Needs redis-server and PostgreSQL 15 for the worker modes (skipped with a note without them).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the test helpers serve the Sources and start the servers


def serve(work: Path, sources: int, resources: int) -> None:
    """The Sources' process: publish, write sources.csv, say 'ready', serve until stdin ends."""
    from tests.fleet.helpers import csv_of, many_sources

    hosts = [f"127.0.0.{2 + i // 10}" for i in range(sources)]

    def files(i: int) -> dict[str, bytes]:
        return {f"r/{k:04d}.txt": (f"{i}:{k}:" * 200).encode()[:1024] for k in range(resources)}

    with many_sources(work, hosts, files=files) as (sites, _):
        (work / "sources.csv").write_text(csv_of(sites))
        print("ready", flush=True)
        for line in sys.stdin:  # "change N": every Source changes one, adds one, deletes one
            n = int(line.split()[1])
            for site in sites:
                (site.data / "r" / "0000.txt").write_bytes(f"changed {n}".encode())
                (site.data / "r" / f"new-{n}.txt").write_bytes(f"new {n}".encode())
                (site.data / "r" / f"new-{n - 1}.txt").unlink(missing_ok=True)
                site.publish()
            print("changed", flush=True)


def same(work: Path, root: Path, sources: int) -> bool:
    """Every copy equals its Source's files, byte for byte."""
    from tests.destination.helpers import tree

    return all(tree(root / f"s{i:03d}") == tree(work / f"src{i}" / "data") for i in range(sources))


def fleet(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "resourcesync", "fleet", *map(str, args)]


def fetched(root: Path, db: str | None) -> tuple[int, int]:
    argv = fleet("status", "--json", "--root", root) + (["--db", db] if db else [])
    doc = json.loads(subprocess.run(argv, capture_output=True, text=True).stdout)
    return int(doc["fetched"]), int(doc["ok"])


def timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{done.stderr[-2000:]}")
    return seconds


def row(mode: str, seconds: float, sources: int, resources: int) -> dict[str, object]:
    return {
        "mode": mode,
        "seconds": round(seconds, 2),
        "sources_per_min": round(sources / seconds * 60, 1),
        "resources_per_s": round(resources / seconds, 1),
        "sources_ok": sources,
    }


def scheduler_cost(registered: int, pg: object | None, redis: object | None) -> dict[str, object]:
    """Register `registered` Sources, all due; time one embedded pass (what the runner asks
    the store for) and one cluster pass (every due Source queued as a task)."""
    from resourcesync.fleet import Entry, open_store
    from resourcesync.fleet.cluster import Producer, TaskOptions, make_app

    out: dict[str, object] = {"registered": registered}
    entries = [
        Entry(f"s{i:05d}", f"http://127.0.{2 + i // 250 % 250}.{2 + i % 250}:8080/")
        for i in range(registered)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp))
        t0 = time.perf_counter()
        store.add(entries, now=0.0)
        out["sqlite_register_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        for _ in range(100):
            store.due(time.time(), 40)  # what an 8-job runner asks for, pass after pass
        out["sqlite_pass_ms"] = round((time.perf_counter() - t0) * 10, 3)
        tracemalloc.start()  # (slows Python down: memory is measured apart from time)
        store.due(time.time(), 40)
        out["sqlite_pass_peak_kb"] = round(tracemalloc.get_traced_memory()[1] / 1024, 1)
        tracemalloc.stop()
        store.close()
    if pg is None or redis is None:
        return out
    db = pg.database()  # type: ignore[attr-defined]
    store = open_store(Path("."), db)
    t0 = time.perf_counter()
    store.add(entries, now=0.0)
    out["pg_register_s"] = round(time.perf_counter() - t0, 2)
    producer = Producer(store, make_app(redis.url), TaskOptions())  # type: ignore[attr-defined]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    queued = 0
    while True:
        due = store.due(time.time(), producer.batch, requeue_after=3600)
        if not due:
            break
        queued += len(producer.send(due))
    seconds = time.perf_counter() - t0
    out["cluster_pass_s"] = round(seconds, 2)
    out["cluster_us_per_source"] = round(seconds / max(queued, 1) * 1e6, 1)
    out["cluster_rss_growth_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0
    store.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sources", type=int, default=200)
    ap.add_argument("--resources", type=int, default=20)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--registered", type=int, default=10000)
    ap.add_argument("--concurrency", default="2", help="Worker processes in each worker.")
    ap.add_argument("--scheduler-only", action="store_true", help="Only the scheduler's cost.")
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve(a.serve, a.sources, a.resources)
        return
    from tests.fleet.cluster import Postgres, Redis, workers

    if a.scheduler_only:
        pg, redis = Postgres(), Redis()
        try:
            print(json.dumps(scheduler_cost(a.registered, pg, redis)), flush=True)
        finally:
            pg.stop()
            redis.close()
        return

    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; {a.sources} Sources × {a.resources} resources"
    )
    results: list[dict[str, object]] = []
    total = a.sources * a.resources
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--serve",
                str(work),
                "--sources",
                str(a.sources),
                "--resources",
                str(a.resources),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert server.stdout and server.stdout.readline().strip() == "ready"
        csv = work / "sources.csv"
        pg: Postgres | None = None
        redis: Redis | None = None
        try:
            root = work / "embedded"
            subprocess.run(fleet("import", csv, "--root", root), check=True, capture_output=True)
            s = timed(fleet("run", "--once", "--all", "--root", root, "--jobs", "8"))
            got, ok = fetched(root, None)
            assert (got, ok) == (total, a.sources), (got, ok)
            results.append(row("embedded (8 jobs)", s, ok, got))
            print(json.dumps(results[-1]), flush=True)
            rounds = 0

            def changed_round(root: Path, extra: list[str]) -> float:
                nonlocal rounds
                rounds += 1
                assert server.stdin and server.stdout
                server.stdin.write(f"change {rounds}\n")
                server.stdin.flush()
                assert server.stdout.readline().strip() == "changed"
                seconds = timed(fleet("run", "--once", "--all", "--root", root, *extra))
                if not same(work, root, a.sources):
                    raise SystemExit(f"a copy differs from its Source after change {rounds}")
                return seconds

            s = changed_round(root, ["--jobs", "8"])
            print(
                json.dumps(
                    {
                        "mode": "embedded, a change of every Source",
                        "seconds": round(s, 2),
                        "every_copy_equals_its_source": True,
                    }
                ),
                flush=True,
            )
            try:
                pg, redis = Postgres(), Redis()
            except BaseException as exc:  # pytest's skip: the servers are not installed
                print(f"# worker modes skipped: {exc}")
            for n in [int(x) for x in a.workers.split(",") if x] if pg and redis else []:
                assert pg and redis
                redis.flush()
                db, root = pg.database(), work / f"workers-{n}"
                root.mkdir()
                subprocess.run(
                    fleet("import", csv, "--root", root, "--db", db),
                    check=True,
                    capture_output=True,
                )
                with workers(n, redis.url, db, root, work, concurrency=a.concurrency) as ws:
                    deadline = time.monotonic() + 60
                    while not all("ready." in w.text() for w in ws):
                        if time.monotonic() > deadline:
                            raise SystemExit("workers did not start")
                        time.sleep(0.1)
                    s = timed(
                        fleet(
                            "run",
                            "--once",
                            "--all",
                            "--root",
                            root,
                            "--broker",
                            redis.url,
                            "--db",
                            db,
                        )
                    )
                    got, ok = fetched(root, db)
                    # After the first change every Source has one resource more (new-N).
                    expected = a.sources * (a.resources + (1 if rounds else 0))
                    assert (got, ok) == (expected, a.sources), (got, ok)
                    name = f"{n} worker{'s' if n > 1 else ''} × {a.concurrency} processes"
                    results.append(row(name, s, ok, got))
                    print(json.dumps(results[-1]), flush=True)
                    s = changed_round(root, ["--broker", redis.url, "--db", db])
                    print(
                        json.dumps(
                            {
                                "mode": f"{name}, a change of every Source",
                                "seconds": round(s, 2),
                                "every_copy_equals_its_source": True,
                            }
                        ),
                        flush=True,
                    )
            cost = scheduler_cost(a.registered, pg, redis)
            print(json.dumps(cost), flush=True)
        finally:
            # Whatever happened, no server is left running and no folder behind.
            if pg:
                pg.stop()
            if redis:
                redis.close()
            assert server.stdin
            server.stdin.close()
            server.wait(timeout=30)
    print()
    print("| mode | seconds | Sources/min | resources/s |")
    print("|---|---:|---:|---:|")
    for r in results:
        print(f"| {r['mode']} | {r['seconds']} | {r['sources_per_min']} | {r['resources_per_s']} |")


if __name__ == "__main__":
    threading.stack_size(0)
    main()
