"""Publishing a tree of 100,000 small files, against resync 2.0.1's `resync-build`.

Measured in one run, as ratios:

- first run: `resourcesync publish` (Resource List + Change List, md5) against
  `resync-build --write-resourcelist --hash md5` over the same tree (target: at least as fast);
- after changing 1% of the files: our re-run against our first run (target: ≥ 20× faster) and
  against `resync-build --write-changelist --reference` (which re-reads every file);
- peak memory of our first run at 20,000 and at 100,000 files (target: flat).

Usage: python bench/bench_publish.py [--files 100000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out" / "publish"
BIN = Path(sys.executable).parent
MAXRSS = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""
BASE = "http://example.org/data/"


def make_tree(root: Path, n: int) -> None:
    if root.exists() and sum(1 for _ in root.rglob("*.txt")) == n:
        return
    shutil.rmtree(root, ignore_errors=True)
    for i in range(n):
        d = root / f"d{i // 1000:03d}"
        if i % 1000 == 0:
            d.mkdir(parents=True)
        (d / f"f{i:06d}.txt").write_bytes((f"resource {i} " * (1 + i % 40)).encode())


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def peak_mb(argv: list[str]) -> float:
    out = subprocess.run(
        [sys.executable, "-c", MAXRSS, *argv], check=True, capture_output=True, text=True
    )
    return int(out.stdout.strip()) / 1024


def ours(tree: Path, out: Path) -> list[str]:
    return [
        str(BIN / "resourcesync"),
        "publish",
        str(tree),
        "--base-url",
        BASE,
        "--out",
        str(out),
        "--hash",
        "md5",
    ]


def main() -> dict[str, float]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--small", type=int, default=20_000)
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    tree = OUT / f"tree-{args.files}"
    make_tree(tree, args.files)
    r: dict[str, float] = {"files": args.files}
    # Page cache warm for both: one read of the whole tree first.
    for p in tree.rglob("*.txt"):
        p.read_bytes()

    out = OUT / "docs"
    shutil.rmtree(out, ignore_errors=True)
    r["ours_first_s"] = timed(ours(tree, out))
    # resync writes an index past 50,000 entries and must know the output's URL: a second
    # mapping for its output folder, and --paths so that only the tree is scanned.
    resync_out = OUT / "resync"
    shutil.rmtree(resync_out, ignore_errors=True)
    resync_out.mkdir()
    mappings = [f"{BASE}={tree}", f"http://example.org/resync/={resync_out}"]
    rl = resync_out / "resourcelist.xml"
    r["resync_first_s"] = timed(
        [
            str(BIN / "resync-build"),
            "--write-resourcelist",
            "--hash",
            "md5",
            "--paths",
            str(tree),
            "--outfile",
            str(rl),
            *mappings,
        ]
    )
    # Change 1% of the files.
    changed = 0
    for i in range(0, args.files, 100):
        p = tree / f"d{i // 1000:03d}" / f"f{i:06d}.txt"
        p.write_bytes(p.read_bytes() + b" changed")
        changed += 1
    r["changed_files"] = changed
    r["ours_rerun_s"] = timed(ours(tree, out))
    r["resync_changelist_s"] = timed(
        [
            str(BIN / "resync-build"),
            "--write-changelist",
            "--hash",
            "md5",
            "--reference",
            str(rl),
            "--paths",
            str(tree),
            "--outfile",
            str(resync_out / "changelist.xml"),
            *mappings,
        ]
    )
    # Undo the change so the next run of this benchmark starts from the same tree.
    for i in range(0, args.files, 100):
        p = tree / f"d{i // 1000:03d}" / f"f{i:06d}.txt"
        p.write_bytes(p.read_bytes().removesuffix(b" changed"))
    small = OUT / f"tree-{args.small}"
    make_tree(small, args.small)
    small_out = OUT / "docs-small"
    shutil.rmtree(small_out, ignore_errors=True)
    big_out = OUT / "docs-big"
    shutil.rmtree(big_out, ignore_errors=True)
    r["peak_mb_small"] = peak_mb(ours(small, small_out))
    r["peak_mb_big"] = peak_mb(ours(tree, big_out))
    r["first_vs_resync"] = r["resync_first_s"] / r["ours_first_s"]
    r["rerun_speedup"] = r["ours_first_s"] / r["ours_rerun_s"]
    r["rerun_vs_resync_changelist"] = r["resync_changelist_s"] / r["ours_rerun_s"]
    return r


if __name__ == "__main__":
    res = main()
    n = int(res["files"])
    print(f"Publish {n:,} small files (md5), cold state, warm page cache:")
    print(f"  resourcesync publish (first run)     {res['ours_first_s']:.2f} s")
    print(f"  resync-build --write-resourcelist    {res['resync_first_s']:.2f} s")
    print(f"  first run vs resync                  {res['first_vs_resync']:.2f}x  (target >= 1x)")
    print(f"After changing {int(res['changed_files']):,} files (1%):")
    print(f"  resourcesync publish (re-run)        {res['ours_rerun_s']:.2f} s")
    print(f"  resync-build --write-changelist      {res['resync_changelist_s']:.2f} s")
    print(f"  re-run speed-up over our first run   {res['rerun_speedup']:.1f}x (target >= 20x)")
    print(f"  re-run vs resync change list         {res['rerun_vs_resync_changelist']:.1f}x")
    print(
        f"Peak RSS: {res['peak_mb_small']:.0f} MB at 20,000 files, "
        f"{res['peak_mb_big']:.0f} MB at {n:,} files"
    )
    (OUT.parent / "bench_publish.json").write_text(json.dumps(res, indent=2))
