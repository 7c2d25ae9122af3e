"""Start `resync-simulator` 1.1.0 on Python >= 3.11.

Its simulation thread calls `random.sample(dict.keys(), 1)`, which Python 3.11 refuses
(a population must be a sequence): the first update or delete kills the thread. This wrapper
lets `random.sample` take sets and dict views (sorted into a list, as 3.10 would have done with a
deprecation warning), then runs the simulator's own entry point with the arguments it was given.
"""

from __future__ import annotations

import random
import runpy
import sys
from collections.abc import KeysView, Set
from pathlib import Path
from typing import Any

_sample = random.sample


def _lenient_sample(population: Any, k: int, **kw: Any) -> list[Any]:
    if isinstance(population, Set | KeysView):
        population = sorted(population)
    return _sample(population, k, **kw)


random.sample = _lenient_sample  # type: ignore[assignment]

if __name__ == "__main__":
    # The console script installed beside this interpreter (its `main()` is in the script).
    script = str(Path(sys.executable).parent / "resync-simulator")
    sys.argv = ["resync-simulator", *sys.argv[1:]]
    runpy.run_path(script, run_name="__main__")
