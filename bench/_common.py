"""What the issue-15 benchmarks share: trees of small files, timing commands, and running the
command line of this checkout or of another one (`--src`, for figures before a change)."""

from __future__ import annotations

import compileall
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench_publish import make_tree  # the same layout as the publish benchmark's

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
BIN = Path(sys.executable).parent
#: The bare walk: os.scandir recursion and DirEntry.stat(), the least a re-run must do.
WALK = """
import os, sys
def walk(d):
    n = 0
    with os.scandir(d) as it:
        for e in it:
            if e.is_dir(follow_symlinks=False):
                n += walk(e.path)
            else:
                e.stat(follow_symlinks=False)
                n += 1
    return n
print(walk(sys.argv[1]))
"""


def tree(n: int) -> Path:
    """OUTDIR/trees/tree-N: N small files, 1,000 a folder (made once, kept between runs)."""
    root = OUT / "trees" / f"tree-{n}"
    marker = root / ".complete"
    if marker.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    make_tree(root, n)
    marker.write_text("")
    return root


def one_percent(root: Path, n: int, mark: str, round_: int = 0) -> int:
    """Append to every hundredth file, other files each round (as a Source's changes come:
    the same files again each round would keep a directory's delta the size it was, which
    SQLite writes over in place, and hide what a growing one costs); returns how many."""
    count = 0
    for i in range(round_ % 100, n, 100):
        p = root / f"d{i // 1000:03d}" / f"f{i:06d}.txt"
        with open(p, "ab") as f:
            f.write(mark.encode())
        count += 1
    return count


def environment(src: str | None) -> dict[str, str]:
    """The environment to run the command line of `src` (this checkout when None), with its
    modules compiled once as an installed package's are (the sandbox sets
    PYTHONDONTWRITEBYTECODE, which would make every run compile them again)."""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
        compileall.compile_dir(src, quiet=1)
    else:
        import resourcesync

        compileall.compile_dir(str(Path(resourcesync.__file__).parent), quiet=1)
    return env


def command(*args: str) -> list[str]:
    return [str(BIN / "resourcesync"), *args]


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def timed_io(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int, int]:
    """Seconds, and the bytes the command wrote and read through system calls (`wchar` and
    `rchar` of /proc/PID/io, read before the exited command is reaped; 0 where there is no
    /proc): what it asked of the disk, which the machine's noise does not move."""
    start = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    written = read = 0
    try:
        os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
        elapsed = time.perf_counter() - start
        with open(f"/proc/{p.pid}/io") as f:
            io = dict(line.split(": ") for line in f.read().splitlines())
        written, read = int(io["wchar"]), int(io["rchar"])
    except (AttributeError, OSError):
        elapsed = time.perf_counter() - start
    if p.wait() != 0:
        raise subprocess.CalledProcessError(p.returncode, argv)
    return elapsed, written, read


def best(argv: list[str], rounds: int, env: dict[str, str] | None = None) -> float:
    """The fastest of `rounds` runs (the machine is shared: the least disturbed one)."""
    return min(timed(argv, env) for _ in range(rounds))


def best_alternating(
    commands: list[tuple[list[str], dict[str, str] | None]], rounds: int
) -> list[float]:
    """The fastest of `rounds` runs of each command, the commands taking turns within each
    round: on a shared machine whose speed drifts over seconds, a ratio of two bests taken
    one after the other measures the drift as much as the commands."""
    times: list[list[float]] = [[] for _ in commands]
    for _ in range(rounds):
        for i, (argv, env) in enumerate(commands):
            times[i].append(timed(argv, env))
    return [min(t) for t in times]


def bare_walk(root: Path, rounds: int = 5) -> float:
    return best([sys.executable, "-c", WALK, str(root)], rounds)


def machine() -> str:
    cpus = os.cpu_count()
    load = os.getloadavg()[0]
    return f"{cpus} CPUs, load {load:.1f}, Python {sys.version.split()[0]}"
