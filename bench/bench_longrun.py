"""A re-run after a long history (issue 15.3: a re-run costs what changed, not how long the
Source has run).

A Source that keeps its history (the default) closes a Change List every 10,000 changes and
keeps them all: after a year of 500 changes every 5 minutes, some 5,000. This publishes a set,
gives its state a history of `--lists` closed Change Lists (written into the state directly,
as empty lists one hour apart before the open one: running 50 million changes through it
would take hours; the lists' files are written by the next run, untimed), and times a re-run
after one file changed against the same re-run of the same set with no history, the two in
turns, each from a copy of its state. Printed: both medians and their ratio (1× is a re-run
that does not see the history).

Usage: python bench/bench_longrun.py [--files 2000] [--lists 5000] [--rounds 9] [--src OTHER/src]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import time
from datetime import datetime, timedelta

from _common import OUT, command, environment, machine, timed, tree

BASE = "http://example.org/data/"


def give_history(out_dir: str, lists: int) -> None:
    """`lists` closed, empty Change Lists one hour apart, ending where the open one begins."""
    db = sqlite3.connect(os.path.join(out_dir, ".resourcesync", "resourcesync.sqlite"))
    with db:
        ((first, start),) = db.execute(
            "SELECT first_seq, from_ FROM changelists WHERE until IS NULL"
        ).fetchall()
        db.execute("DELETE FROM changelists")
        opened = datetime.fromisoformat(start.replace("Z", "+00:00"))
        at = opened - timedelta(hours=lists)
        for _ in range(lists):
            until = at + timedelta(hours=1)
            db.execute(
                "INSERT INTO changelists (first_seq, last_seq, from_, until) VALUES (?, ?, ?, ?)",
                (first, first - 1, _w3c(at), _w3c(until)),
            )
            at = until
        db.execute(
            "INSERT INTO changelists (first_seq, last_seq, from_, until) VALUES (?, NULL, ?, NULL)",
            (first, start),
        )
    db.close()


def _w3c(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--lists", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--src", help="run another checkout's src (for before figures)")
    args = ap.parse_args()
    env = environment(args.src)
    root = tree(args.files)
    work = OUT / "longrun"
    shutil.rmtree(work, ignore_errors=True)
    kept = {}
    for name in ("none", "long"):
        out = work / f"{name}-kept"
        timed(command("publish", str(root), "--base-url", BASE, "--out", str(out)), env)
        if name == "long":
            give_history(str(out), args.lists)
            # The lists' files, written once (and the index), as the history had written them.
            timed(command("publish", str(root), "--base-url", BASE, "--out", str(out)), env)
        kept[name] = out
    times: dict[str, list[float]] = {"none": [], "long": []}
    changed = root / "d000" / "f000000.txt"
    for r in range(args.rounds):
        for name in ("none", "long") if r % 2 == 0 else ("long", "none"):
            out = work / name
            shutil.rmtree(out, ignore_errors=True)
            shutil.copytree(kept[name], out, symlinks=True)
            with open(changed, "ab") as f:
                f.write(f" longrun {r} {name}".encode())
            os.sync()
            time.sleep(2.1)  # (older than the 2 s within which a file counts as racily clean)
            times[name].append(
                timed(command("publish", str(root), "--base-url", BASE, "--out", str(out)), env)
            )
    none, long = (statistics.median(times[k]) for k in ("none", "long"))
    print(f"A re-run after a long history ({machine()}):")
    print(f"  {args.files:,} files, one changed a run, {args.rounds} rounds:")
    print(f"    no history                         {none:.3f} s (median)")
    print(f"    {args.lists:,} closed Change Lists          {long:.3f} s (median)")
    print(f"    long history / none                {long / none:.2f}x (1x: not seen)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
