"""The sync client's cost per resource against the bare loops (issue 15.1 and 15.2).

Servers that are not ours: Debian's nginx (started here, one worker) serving a published tree,
and `latency_server.py` (stdlib, a thread per connection, every answer 20 ms late, headers and
body in one write). Clients, each a whole process, measured in CPU seconds (user + system, from
wait4) and wall time, at the same concurrency:

- `resourcesync sync --via lists --transfers C --per-host C` (every guarantee on: digests
  verified, atomic writes, state recorded, the hostile-Source limits);
- the bare aiohttp loop and the bare httpx loop of `bare_clients.py` (GET, md5, temporary file
  renamed into place); the aiohttp loop twice: on asyncio's event loop (the issue's anchor)
  and on uvloop's (on which `sync`'s transfers run), so the ratio is shown against both.

Printed: CPU per resource and its ratio to the bare aiohttp loop (target ≤ 1.5×), against
nginx and against the latency server; throughput at the default per-host limit against the
latency server as a share of the limit (per-host ÷ latency; target ≥ 90 %); throughput from
nginx at `--transfers 64 --per-host 64` (target ≥ 2,000 resources/s).

Usage: python bench/bench_client.py [--files 20000] [--slow-files 3000] [--conc 4,16,64]
       [--rounds 2] [--profile] [--only nginx|latency] [--src OTHER/src]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lxml import etree

from _common import OUT, command, environment, machine, tree
from bench_sync import free_port, wait_for

HERE = Path(__file__).resolve().parent
WORK = OUT / "client"
#: Where the clients write: tmpfs when there is one, so that what is measured is the client,
#: not the noise of a shared disk (file creation here varies tenfold from run to run). Both
#: the bare loops and `sync` write there; `--dest-dir` to choose.
DEST = Path("/dev/shm/resourcesync-bench") if os.path.isdir("/dev/shm") else WORK
NGINX = "/usr/sbin/nginx"
NGINX_CONF = """
worker_processes 1;
daemon off;
master_process off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log error;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    client_body_temp_path {prefix}/tmp;
    proxy_temp_path {prefix}/tmp;
    fastcgi_temp_path {prefix}/tmp;
    uwsgi_temp_path {prefix}/tmp;
    scgi_temp_path {prefix}/tmp;
    default_type application/xml;
    types {{ text/plain txt; application/xml xml; }}
    server {{
        listen 127.0.0.1:{port};
        root {docs};
        location /files/ {{ alias {tree}/; }}
    }}
}}
"""
SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
RS = "{http://www.openarchives.org/rs/terms/}"


def publish(files: Path, port: int, name: str, env: dict[str, str]) -> tuple[Path, Path]:
    """Publish `files` for http://127.0.0.1:PORT/files/; returns (documents, urls.tsv)."""
    docs = WORK / f"docs-{name}"
    shutil.rmtree(docs, ignore_errors=True)
    base = f"http://127.0.0.1:{port}/"
    subprocess.run(
        command(
            "publish",
            str(files),
            "--base-url",
            base + "files/",
            "--out",
            str(docs),
            "--capabilities",
            "resourcelist",
        ),
        check=True,
        stdout=subprocess.DEVNULL,
        env=env,
    )
    tsv = WORK / f"urls-{name}.tsv"
    seen: set[str] = set()  # the Resource List may also be kept in the archive: once each
    with open(tsv, "w") as out:
        for path in sorted(docs.rglob("resourcelist*.xml")):
            for url in etree.parse(str(path)).getroot().iter(SM + "url"):
                loc = url.findtext(SM + "loc") or ""
                if loc in seen:
                    continue
                seen.add(loc)
                md = url.find(RS + "md")
                md5 = (
                    next(h[4:] for h in (md.get("hash") or "").split() if h.startswith("md5:"))
                    if md is not None
                    else ""
                )
                out.write(f"{loc}\t{md5}\t{loc[len(base + 'files/') :]}\n")
    return docs, tsv


def start_nginx(port: int, docs: Path, files: Path) -> subprocess.Popen[bytes]:
    prefix = Path(tempfile.mkdtemp(prefix="nginx-", dir=WORK))
    (prefix / "tmp").mkdir()
    conf = prefix / "nginx.conf"
    conf.write_text(NGINX_CONF.format(prefix=prefix, port=port, docs=docs, tree=files))
    proc = subprocess.Popen([NGINX, "-p", str(prefix), "-c", str(conf), "-e", "stderr"])
    wait_for(port)
    return proc


def start_latency(
    port: int, delay: float, docs: Path, files: Path, log: Path
) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "latency_server.py"),
            "--log",
            str(log),
            str(port),
            str(delay),
            str(docs),
            f"files={files}",
        ]
    )
    wait_for(port)
    return proc


def phases(log: Path, start: float, end: float) -> tuple[float, float, float]:
    """From the latency server's request log, one run's (seconds before the first resource
    was asked for, seconds from then to the last answer, seconds after it), the run having
    been started at `start` and ended at `end` (CLOCK_MONOTONIC, shared by every process)."""
    first = last = None
    for line in log.read_text().splitlines():
        arrived, sent, target = line.split(" ", 2)
        a, b = float(arrived), float(sent)
        if start <= a <= end and target.startswith("/files/"):
            first = a if first is None else min(first, a)
            last = b if last is None else max(last, b)
    if first is None or last is None:
        raise RuntimeError("the latency server saw no request for a resource")
    return first - start, last - first, end - last


def measured(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one process and its children."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed ({proc.returncode}): {err.decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def sync_args(base: str, dest: Path, conc: int, extra: tuple[str, ...] = ()) -> list[str]:
    """`sync`'s arguments as measured: the lists, quiet, `--transfers C --per-host C` (or
    `extra` instead)."""
    limits = extra or ("--transfers", str(conc), "--per-host", str(conc))
    return ["sync", base, str(dest), "--via", "lists", "--quiet", *limits]


def run_client(
    kind: str,
    conc: int,
    base: str,
    tsv: Path,
    n: int,
    env: dict[str, str],
    extra: tuple[str, ...] = (),
) -> tuple[float, float]:
    dest = DEST / f"dest-{kind}"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    if kind == "sync":
        argv = command(*sync_args(base, dest, conc, extra))
    else:
        argv = [sys.executable, str(HERE / "bare_clients.py"), kind, str(tsv), str(dest), str(conc)]
    wall, cpu = measured(argv, env)
    got = sum(1 for p in dest.rglob("*.txt"))
    if got != n:
        raise RuntimeError(f"{kind}: {got} files of {n}")
    return wall, cpu


#: The clients measured: the anchors (the bare loops of `bare_clients.py`; aiohttp on
#: asyncio's event loop, as the issue measured it, and on uvloop's, as `sync` runs) and `sync`.
KINDS = ("aiohttp", "aiohttp-uvloop", "httpx", "sync")


def compare(
    label: str,
    base: str,
    tsv: Path,
    n: int,
    concs: list[int],
    rounds: int,
    env: dict[str, str],
    results: dict[str, object],
) -> None:
    print(f"\n{label}: {n:,} resources")
    print(
        f"  {'conc':>4}  {'client':<14} {'res/s':>8} {'CPU ms/res':>11} {'÷ aiohttp':>10} "
        f"{'÷ aiohttp on uvloop':>20}"
    )
    rows = results.setdefault(label, {})
    assert isinstance(rows, dict)
    for conc in concs:
        best: dict[str, tuple[float, float]] = {}
        for _ in range(rounds):
            for kind in KINDS:
                wall, cpu = run_client(kind, conc, base, tsv, n, env)
                old = best.get(kind)
                best[kind] = (min(wall, old[0]), min(cpu, old[1])) if old else (wall, cpu)
        anchor = best["aiohttp"][1] / n
        on_uvloop = best["aiohttp-uvloop"][1] / n
        for kind in KINDS:
            wall, cpu = best[kind]
            per = cpu / n
            print(
                f"  {conc:>4}  {kind:<14} {n / wall:>8,.0f} {per * 1000:>11.3f} "
                f"{per / anchor:>9.2f}× {per / on_uvloop:>19.2f}×"
            )
            rows[f"{kind}@{conc}"] = {
                "per_s": n / wall,
                "cpu_ms": per * 1000,
                "ratio": per / anchor,
                "ratio_uvloop": per / on_uvloop,
            }


#: The command under cProfile: the program ends by `os._exit` after its exit functions (so
#: that no thread or finalizer holds a finished command up), which `python -m cProfile` never
#: gets past to write its figures; an exit function of its own writes them.
PROFILED = """
import atexit, cProfile, sys
out = sys.argv.pop(1)
profiler = cProfile.Profile()
atexit.register(lambda: (profiler.disable(), profiler.dump_stats(out)))
profiler.enable()
from resourcesync._program import main
sys.argv[0] = "resourcesync"
sys.exit(main())
"""


def profile(base: str, env: dict[str, str], conc: int) -> None:
    dest = DEST / "dest-profile"
    shutil.rmtree(dest, ignore_errors=True)
    out = WORK / "sync.prof"
    out.unlink(missing_ok=True)
    argv = [sys.executable, "-c", PROFILED, str(out), *sync_args(base, dest, conc)]
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    import pstats

    print(f"\nProfile of sync (nginx, {conc} connections), top functions by own time:")
    stats = pstats.Stats(str(out))
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    top = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:25]  # type: ignore[attr-defined]
    for (file, line, func), (_, calls, tottime, _, _) in top:
        where = file.split("site-packages/")[-1].split("/src/")[-1]
        print(f"  {tottime / total:6.1%}  {calls:>8}  {where}:{line} {func}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument("--slow-files", type=int, default=3_000)
    ap.add_argument("--conc", default="4,16,64")
    ap.add_argument("--delay", type=float, default=0.020)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--src", help="run another checkout's src (for before figures)")
    ap.add_argument("--only", choices=("nginx", "latency"), help="one of the two servers")
    ap.add_argument("--dest-dir", type=Path, help="where the clients write (default: tmpfs)")
    args = ap.parse_args()
    global DEST
    DEST = args.dest_dir or DEST
    if not os.path.exists(NGINX):
        print("bench_client: needs Debian's nginx (apt-get install nginx)", file=sys.stderr)
        return 2
    WORK.mkdir(parents=True, exist_ok=True)
    env = environment(args.src)
    concs = [int(c) for c in args.conc.split(",")]
    results: dict[str, object] = {"machine": machine(), "files": args.files}
    print(f"bench_client: {machine()}")

    if args.only != "latency":
        port = free_port()
        files = tree(args.files)
        docs, tsv = publish(files, port, "fast", env)
        base = f"http://127.0.0.1:{port}/"
        server = start_nginx(port, docs, files)
        try:
            compare("nginx", base, tsv, args.files, concs, args.rounds, env, results)
            # The best of `--rounds` more runs and the table's runs of the same command (`sync
            # --transfers 64 --per-host 64`), as every figure of the table is a best: a
            # shared machine's single run measures its neighbours as much as the client.
            wall = min(
                run_client("sync", 64, base, tsv, args.files, env)[0] for _ in range(args.rounds)
            )
            table = results["nginx"]
            assert isinstance(table, dict)
            if "sync@64" in table:
                wall = min(wall, args.files / table["sync@64"]["per_s"])
            fast = args.files / wall
            results["fast_host_per_s"] = fast
            print(
                f"\nOne fast host (nginx), --transfers 64 --per-host 64: {fast:,.0f} resources/s "
                "(target ≥ 2,000)"
            )
            if args.profile:
                profile(base, env, 16)
        finally:
            server.send_signal(signal.SIGQUIT)
            server.wait()

    if args.only != "nginx":
        port = free_port()
        slow = tree(args.slow_files)
        docs, tsv = publish(slow, port, "slow", env)
        base = f"http://127.0.0.1:{port}/"
        log = WORK / "latency-requests.log"
        server = start_latency(port, args.delay, docs, slow, log)
        windows = {}
        try:
            compare(
                f"latency {args.delay * 1000:.0f} ms",
                base,
                tsv,
                args.slow_files,
                concs,
                1,
                env,
                results,
            )
            for kind in ("sync", "aiohttp"):
                start = time.monotonic()
                # `sync` at its default limits: --per-host 4 is the politeness limit.
                limits = ("--per-host", "4") if kind == "sync" else ()
                wall, _ = run_client(kind, 4, base, tsv, args.slow_files, env, limits)
                windows[kind] = (start, time.monotonic(), wall)
        finally:
            server.terminate()
            server.wait()
        limit = 4 / args.delay
        delay_ms = args.delay * 1000
        print(f"\nDefault per-host limit (4) against {delay_ms:.0f} ms (limit {limit:,.0f}/s):")
        for kind, (start, end, wall) in windows.items():
            before, during, after = phases(log, start, end)
            rate = args.slow_files / wall
            over = args.slow_files / during
            results[f"polite_{kind}_per_s"] = rate
            results[f"polite_{kind}_share"] = rate / limit
            results[f"polite_{kind}_transfers_share"] = over / limit
            name = "sync" if kind == "sync" else "bare aiohttp loop"
            print(
                f"  {name:<18} {rate:,.0f}/s whole command: {rate / limit:.1%} of the limit"
                f"{' (target ≥ 90 %)' if kind == 'sync' else ''}; over its transfers "
                f"{over / limit:.1%} ({before:.2f} s before the first request for a resource, "
                f"{after:.2f} s after the last answer)"
            )
    (OUT / "bench_client.json").write_text(json.dumps(results, indent=2))
    shutil.rmtree(DEST, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
