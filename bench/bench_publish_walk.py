"""The long run of issue 16's property test: thousands of steps of a Source's life (files
created, updated, deleted, renamed, touched; publish runs under random rotation policies, runs
with files changing meanwhile, runs killed with SIGKILL; a hub refusing; a Destination synced),
the published history checked after every run (see tests/source/walk.py).

    python bench/bench_publish_walk.py --steps 3000 --seed 1 [--unsettled] [--retention]

`--unsettled` also syncs the Destination while files and documents disagree (see the walk's
`unsettled_syncs`). `--retention` lets the Source drop its old Change Lists and Change Dumps
(random `--keep-changelists`, `--keep-changedumps`): the history checked is what is left.
Prints the counts of each step and the wall time; exits 1 at the first broken invariant,
naming the step.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.source.walk import walk


def run(walk_context: Any, steps: int, seed: int) -> int:
    """Step a walk `steps` times, then settle it; print the counts and the time. 1 at the first
    broken invariant (named with its step), else 0. Shared with bench_destination_walk.py."""
    started = time.monotonic()
    with walk_context as w:
        step = 0
        try:
            for step in range(1, steps + 1):
                op = w.step()
                w.counts[op] += 1
                if step % 250 == 0:
                    print(f"{step} steps, {time.monotonic() - started:.0f} s", flush=True)
            w.settle()
        except AssertionError as exc:
            print(f"step {step}: invariant broken: {exc}", flush=True)
            print(dict(sorted(w.counts.items())))
            return 1
    seconds = time.monotonic() - started
    print(
        f"machine: {platform.machine()}, {platform.system()} {platform.release()}, Python "
        f"{platform.python_version()}"
    )
    print(f"{steps} steps (seed {seed}) in {seconds:.0f} s; every invariant held")
    for op, n in sorted(w.counts.items()):
        print(f"  {op}: {n}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--initial", type=int, default=60)
    parser.add_argument("--unsettled", action="store_true")
    parser.add_argument(
        "--retention",
        action="store_true",
        help="policies that let old Change Lists and Change Dumps go",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        context = walk(
            Path(tmp),
            args.seed,
            initial=args.initial,
            unsettled_syncs=args.unsettled,
            retention=args.retention,
        )
        return run(context, args.steps, args.seed)


if __name__ == "__main__":
    raise SystemExit(main())
