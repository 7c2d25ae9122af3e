"""The long run of issue 10's property test: thousands of steps of a Source's life (see
tests/source/walk.py) with a Destination syncing at random moments — while files change under
the documents, after publishes killed mid-run, itself SIGKILLed mid-sync — every sync checked:
never ok over a copy that differs from what the Source's documents say, `audit` agreeing with
the truth, convergence once the Source settles (see tests/destination/walk.py).

    python bench/bench_destination_walk.py --steps 2000 --seed 1 [--fsync] [--retention]

Prints the counts of each step and the wall time; exits 1 at the first broken invariant,
naming the step.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.destination.walk import destination_walk

from bench_publish_walk import run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--initial", type=int, default=40)
    parser.add_argument("--fsync", action="store_true", help="every sync with --fsync")
    parser.add_argument(
        "--retention",
        action="store_true",
        help="policies that let old Change Lists and Change Dumps go (--keep-changelists, "
        "--keep-changedumps)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        context = destination_walk(
            Path(tmp), args.seed, initial=args.initial, fsync=args.fsync, retention=args.retention
        )
        return run(context, args.steps, args.seed)


if __name__ == "__main__":
    sys.exit(main())
