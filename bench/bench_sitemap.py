"""Validating a Resource List: our `resourcesync validate` against resync 2.0.1 and bare lxml.

Measured in one run, as ratios (the machine's speed cancels out):

- a generated 50,000-entry Resource List (the Sitemap limit) validated by
  `resourcesync validate FILE`, parsed by `resync-sync --parse --sitemap FILE`, and read by a
  bare `lxml.etree.iterparse` loop (every element, `clear()` each) — all three as commands, so
  each pays its own interpreter start-up and imports, as a user does;
- the same three in-process (no start-up), for the codec alone;
- the peak resident memory of `resourcesync validate` on a 1,000,000-entry list.

Targets (issue 2): ≥ 5× faster than resync, within 2× of bare lxml, < 150 MB at 1,000,000.
Usage: python bench/bench_sitemap.py [--entries 50000] [--big 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lxml import etree

from resourcesync.model import Document, Link, Resource
from resourcesync.sitemap import validate, write_document

OUT = Path(__file__).resolve().parent / "out"
BIN = Path(sys.executable).parent
BARE = """
import sys
from lxml import etree
n = 0
for _, el in etree.iterparse(sys.argv[1], events=("end",)):
    n += 1
    el.clear()
print(n)
"""
MAXRSS = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=False)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def generate(path: Path, n: int) -> None:
    if path.exists():
        return
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    doc = Document(
        capability="resourcelist",
        at=t0 + timedelta(days=30),
        links=[Link(rel="up", href="http://example.com/dataset1/capabilitylist.xml")],
    )
    entries = (
        Resource(
            loc=f"http://example.com/dataset1/resources/{i:07d}.html",
            lastmod=t0 + timedelta(seconds=i),
            hashes={"md5": f"{i * 2654435761 % 2**128:032x}"},
            length=1000 + i % 50_000,
            type="text/html",
        )
        for i in range(n)
    )
    write_document(path, doc, entries)


def best_of(repeat: int, func) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def command(*argv: str) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def bare_in_process(path: Path) -> None:
    for _, el in etree.iterparse(str(path), events=("end",)):
        el.clear()


def main() -> dict[str, float]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=50_000)
    ap.add_argument("--big", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    small = OUT / f"resourcelist-{args.entries}.xml"
    big = OUT / f"resourcelist-{args.big}.xml"
    generate(small, args.entries)
    generate(big, args.big)
    ours_cmd = str(BIN / "resourcesync")
    resync_cmd = str(BIN / "resync-sync")

    # Each must succeed on the file before it is timed.
    report = validate([small])
    assert report.ok and report.documents[0].entries == args.entries, report.to_json()

    r: dict[str, float] = {}
    r["ours_cmd_s"] = best_of(args.repeat, lambda: command(ours_cmd, "validate", str(small)))
    r["resync_cmd_s"] = best_of(
        args.repeat, lambda: command(resync_cmd, "--parse", "--sitemap", str(small))
    )
    r["bare_cmd_s"] = best_of(args.repeat, lambda: command(sys.executable, "-c", BARE, str(small)))
    r["ours_inproc_s"] = best_of(args.repeat, lambda: validate([small]))
    r["bare_inproc_s"] = best_of(args.repeat, lambda: bare_in_process(small))
    r["speedup_vs_resync"] = r["resync_cmd_s"] / r["ours_cmd_s"]
    r["ratio_to_bare_cmd"] = r["ours_cmd_s"] / r["bare_cmd_s"]
    r["ratio_to_bare_inproc"] = r["ours_inproc_s"] / r["bare_inproc_s"]
    r["entries_per_s_inproc"] = args.entries / r["ours_inproc_s"]

    rss = subprocess.run(
        [sys.executable, "-c", MAXRSS, ours_cmd, "validate", str(big)],
        check=True,
        capture_output=True,
        text=True,
    )
    r["peak_rss_mb_1m"] = int(rss.stdout.strip()) / 1024
    r["big_entries"] = args.big
    r["big_file_mb"] = big.stat().st_size / 1e6
    r["entries"] = args.entries
    return r


if __name__ == "__main__":
    results = main()
    print(f"Validate a {results['entries']:,}-entry Resource List (best of runs):")
    print(f"  resourcesync validate      {results['ours_cmd_s']:.3f} s")
    print(f"  resync-sync --parse        {results['resync_cmd_s']:.3f} s")
    print(f"  bare lxml iterparse (cmd)  {results['bare_cmd_s']:.3f} s")
    print(f"  speed-up over resync       {results['speedup_vs_resync']:.1f}x   (target >= 5x)")
    print(f"  ratio to bare lxml, cmd    {results['ratio_to_bare_cmd']:.2f}x  (target <= 2x)")
    print(
        f"  in-process: ours {results['ours_inproc_s']:.3f} s, bare {results['bare_inproc_s']:.3f}"
        f" s, ratio {results['ratio_to_bare_inproc']:.2f}x,"
        f" {results['entries_per_s_inproc']:,.0f} entries/s"
    )
    print(
        f"Peak RSS validating {results['big_entries']:,} entries ({results['big_file_mb']:.0f} MB):"
        f" {results['peak_rss_mb_1m']:.0f} MB (target < 150 MB)"
    )
    (OUT / "bench_sitemap.json").write_text(json.dumps(results, indent=2))
