"""The long run of issue 10's property test: thousands of steps of a Source's life (see
tests/source/walk.py) with a Destination syncing at random moments — while files change under
the documents, after publishes killed mid-run, itself SIGKILLed mid-sync — every sync checked:
never ok over a copy that differs from what the Source's documents say, `audit` agreeing with
the truth, convergence once the Source settles (see tests/destination/walk.py).

    python bench/bench_destination_walk.py --steps 2000 --seed 1

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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.destination.walk import destination_walk


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--initial", type=int, default=40)
    args = parser.parse_args()
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory() as tmp,
        destination_walk(Path(tmp), args.seed, initial=args.initial) as w,
    ):
        step = 0
        try:
            for step in range(1, args.steps + 1):
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
    print(f"{args.steps} steps (seed {args.seed}) in {seconds:.0f} s; every invariant held")
    for op, n in sorted(w.counts.items()):
        print(f"  {op}: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
