"""Two checkouts' `publish` re-runs after 1 % changed, in alternating pairs (issue 15.3).

`bench_republish.py` gives the ratio to a first run, round by round; on a shared machine whose
speed drifts by half within minutes its rounds spread 6–17×, so it cannot tell apart two
checkouts whose re-runs differ by 20 ms. This can: each checkout publishes the tree once into
a state of its own, kept aside; then, pair after pair, the same 1 % of the files is changed
(appended to again), each checkout's state is put back as it was kept and re-run, the two in
turns (before then after, then after then before), the disk synced before each. The figure
is the median of the pairs' differences (after − before), with each side's median time and
CPU (user + system of the command and the child it forks).

Usage: python bench/pairs_republish.py --before REV|SRC [--after REV|SRC] [--files 50000]
[--pairs 20]. A REV (a commit of this repository) is checked out into bench/out/pairs/ (its
`src`); a SRC is a checkout's `src` folder; `--after` defaults to this checkout. Not run by
`make bench` (it needs a checkout to compare with).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from _common import HERE, OUT, command, environment, machine, one_percent, tree

BASE = "http://example.org/data/"
WORK = OUT / "pairs"


def source(spec: str | None) -> str | None:
    """The `src` folder of a checkout: `spec` itself when it is a folder, else the commit
    `spec` of this repository checked out under WORK; None: this checkout."""
    if spec is None:
        return None
    if Path(spec).is_dir():
        return str(Path(spec).resolve())
    rev = subprocess.run(
        ["git", "rev-parse", "--verify", f"{spec}^{{commit}}"],
        cwd=HERE,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    into = WORK / f"src-{rev[:12]}"
    if not (into / "src").is_dir():
        shutil.rmtree(into, ignore_errors=True)
        into.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", rev, "src"], cwd=HERE.parent, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return str(into / "src")


def run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Seconds and CPU seconds (the command's and its children's) of one command."""
    start = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(p.pid, 0)
    elapsed = time.perf_counter() - start
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise subprocess.CalledProcessError(p.returncode, argv)
    return elapsed, usage.ru_utime + usage.ru_stime


def restore(kept: Path, out: Path) -> None:
    """The state and documents as the first run left them, at the path they were made at (the
    inventory's signature names it), hard links kept; then the disk synced."""
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(["cp", "-a", str(kept), str(out)], check=True)
    os.sync()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="a commit of this repository, or a src")
    ap.add_argument("--after", help="the same (default: this checkout)")
    ap.add_argument("--files", type=int, default=50_000)
    ap.add_argument("--pairs", type=int, default=20)
    args = ap.parse_args()
    n = args.files
    root = tree(n)
    sides = {}
    for tag, spec in (("before", args.before), ("after", args.after)):
        env = environment(source(spec))
        out, kept = WORK / f"docs-{tag}-{n}", WORK / f"kept-{tag}-{n}"
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(kept, ignore_errors=True)
        argv = command("publish", str(root), "--base-url", BASE, "--out", str(out))
        run(argv, env)  # the first run, kept aside
        subprocess.run(["cp", "-a", str(out), str(kept)], check=True)
        sides[tag] = (argv, env, out, kept)
    times: dict[str, list[float]] = {"before": [], "after": []}
    cpus: dict[str, list[float]] = {"before": [], "after": []}
    changed = 0
    for i in range(args.pairs):
        order = ("before", "after") if i % 2 == 0 else ("after", "before")
        # The same files each pair (the kept states were made before any of it): appended to
        # again, so that each side finds the same 1 % changed.
        changed = one_percent(root, n, f" pair {i}", 0)
        for tag in order:
            argv, env, out, kept = sides[tag]
            restore(kept, out)
            time.sleep(2.1)  # the changed files older than the 2 s of a racy stat
            seconds, cpu = run(argv, env)
            times[tag].append(seconds)
            cpus[tag].append(cpu)
    diffs = [a - b for a, b in zip(times["after"], times["before"], strict=True)]
    faster = sum(1 for d in diffs if d < 0)
    before, after = (statistics.median(times[t]) for t in ("before", "after"))
    print(f"Re-runs after 1% changed, in alternating pairs ({machine()}):")
    print(f"  {n:,} files, {changed:,} changed, {args.pairs} pairs:")
    print(f"    before (median)                    {before:.3f} s")
    print(f"    after (median)                     {after:.3f} s")
    print(
        f"    after - before (median of pairs)   {statistics.median(diffs) * 1000:+.1f} ms "
        f"(mean {statistics.mean(diffs) * 1000:+.1f} ms; after faster in {faster}/{args.pairs})"
    )
    print(
        f"    CPU, before -> after (median)      {statistics.median(cpus['before']):.3f} -> "
        f"{statistics.median(cpus['after']):.3f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
