"""The package's own random numbers (backoff jitter, temporary names).

Drawn from a generator of the package's own, never from the `random` module's: a program that
embeds the library keeps its `random` sequence as it seeded it (a simulation, a property-based
test), and a thread of ours that is still retrying does not move that sequence under it. Like
`random`'s, the generator is seeded again in a forked child, so workers forked from one process
(Celery's prefork pool) do not all wait the same jittered delays or draw the same names.

Ground floor: imports nothing of the package.
"""

from __future__ import annotations

import os
import random

__all__ = ["getrandbits", "sample", "uniform"]

_rng = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_rng.seed)

uniform = _rng.uniform
getrandbits = _rng.getrandbits
sample = _rng.sample
