"""A re-run after a long history (issue 15.3: a re-run costs what changed, not how long the
Source has run).

A Source that keeps its history (the default) closes a Change List every 10,000 changes and
keeps them all: after a year of 500 changes every 5 minutes, some 5,000. One that publishes a
Change Dump too adds a package every run that found changes and keeps them all: after a year
of runs every 5 minutes, some 100,000 (in 1,000 closed Change Dumps of 100). This publishes a
set, gives its state such a history (written into the state directly: `--lists` closed,
empty Change Lists one hour apart before the open one; `--packages` packages five minutes
apart before the live Change Dump's, closed into dumps of 100; running a year through it would
take hours; what files the next run writes from it is written once, untimed), and times a
re-run after one file changed against the same re-run of the same set with no history, the
two in turns, each from a copy of its state. Printed for each history: both medians and their
ratio (1× is a re-run that does not see the history).

Usage: python bench/bench_longrun.py [--files 2000] [--lists 5000] [--packages 100000]
       [--rounds 9] [--only lists|packages] [--src OTHER/src]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import time
from datetime import datetime, timedelta
from pathlib import Path

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


def give_packages(out_dir: str, packages: int, per_dump: int = 100) -> None:
    """`packages` Change Dump packages five minutes apart, ending where the live Change Dump's
    first begins, closed into Change Dumps of `per_dump` (the default of
    `changedump_max_packages`)."""
    db = sqlite3.connect(os.path.join(out_dir, ".resourcesync", "resourcesync.sqlite"))
    with db:
        live = db.execute(
            "SELECT kind, path, url, at, completed, from_, until, extra FROM archive "
            "WHERE kind = 'changedump-package' ORDER BY id"
        ).fetchall()
        db.execute("DELETE FROM archive WHERE kind = 'changedump-package'")
        start = datetime.fromisoformat(live[0][5].replace("Z", "+00:00"))
        at = start - timedelta(minutes=5 * packages)
        dump_from = at
        for n in range(1, packages + 1):
            until = at + timedelta(minutes=5)
            folder = f"changedumps/{at.strftime('%Y%m%dT%H%M%S.%fZ')}"
            url = f"http://example.org/resourcesync/{folder}/package-00001"
            db.execute(
                "INSERT INTO archive (kind, path, url, from_, until, extra) "
                "VALUES ('changedump-package', ?, ?, ?, ?, ?)",
                (
                    folder,
                    url + ".zip",
                    _w3c(at),
                    _w3c(until),
                    json.dumps({"length": 610, "md5": "0" * 32, "manifest": url + "-manifest.xml"}),
                ),
            )
            if n % per_dump == 0:
                name = f"changedumps/changedump-{dump_from.strftime('%Y%m%dT%H%M%S.%fZ')}.xml"
                db.execute(
                    "INSERT INTO archive (kind, path, url, from_, until) "
                    "VALUES ('changedump', ?, ?, ?, ?)",
                    (name, "http://example.org/resourcesync/" + name, _w3c(dump_from), _w3c(until)),
                )
                dump_from = until
            at = until
        db.executemany(
            "INSERT INTO archive (kind, path, url, at, completed, from_, until, extra) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            live,
        )
        db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('cd_from', ?)", (_w3c(at),))
    db.close()


def _w3c(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def compare(
    root: Path, work: Path, env: dict[str, str], what: str, count: int, rounds: int
) -> tuple[float, float]:
    """The median re-run after one change with no history and with `count` of `what`."""
    extra = ["--capabilities", "resourcelist,changelist,changedump"] if what == "packages" else []
    kept = {}
    for name in ("none", "long"):
        out = work / f"{what}-{name}-kept"
        publish = command("publish", str(root), "--base-url", BASE, "--out", str(out), *extra)
        timed(publish, env)
        if name == "long":
            if what == "lists":
                give_history(str(out), count)
            else:
                # (A package to begin from: the first run packages nothing.)
                touch(root, f"{what} history")
                timed(publish, env)
                give_packages(str(out), count)
            # What files the history names, written once, as the history had written them.
            timed(publish, env)
        kept[name] = out
    times: dict[str, list[float]] = {"none": [], "long": []}
    for r in range(rounds):
        for name in ("none", "long") if r % 2 == 0 else ("long", "none"):
            out = work / f"{what}-{name}"
            shutil.rmtree(out, ignore_errors=True)
            shutil.copytree(kept[name], out, symlinks=True)
            touch(root, f"{what} {r} {name}")
            times[name].append(
                timed(
                    command("publish", str(root), "--base-url", BASE, "--out", str(out), *extra),
                    env,
                )
            )
    none, long = (statistics.median(times[k]) for k in ("none", "long"))
    return none, long


def touch(root: Path, mark: str) -> None:
    """One file changed, old enough not to count as racily clean (2 s)."""
    with open(root / "d000" / "f000000.txt", "ab") as f:
        f.write(f" longrun {mark}".encode())
    os.sync()
    time.sleep(2.1)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--lists", type=int, default=5000)
    ap.add_argument("--packages", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--only", choices=("lists", "packages"), help="one of the two histories")
    ap.add_argument("--src", help="run another checkout's src (for before figures)")
    args = ap.parse_args()
    env = environment(args.src)
    root = tree(args.files)
    work = OUT / "longrun"
    shutil.rmtree(work, ignore_errors=True)
    print(f"A re-run after a long history ({machine()}):")
    print(f"  {args.files:,} files, one changed a run, {args.rounds} rounds:")
    histories = {
        "lists": (args.lists, "closed Change Lists"),
        "packages": (args.packages, "Change Dump packages"),
    }
    for what, (count, label) in histories.items():
        if args.only not in (None, what):
            continue
        none, long = compare(root, work, env, what, count, args.rounds)
        title = "Change Lists only" if what == "lists" else "with a Change Dump"
        print(f"  {title}:")
        print(f"    no history                         {none:.3f} s (median)")
        print(f"    {f'{count:,} {label}':<35}{long:.3f} s (median)")
        print(f"    long history / none                {long / none:.2f}x (1x: not seen)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
