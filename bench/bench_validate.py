"""`validate` as a whole command against a bare lxml loop, on a 50,000-entry Resource List
(issue 15.5): the command's start-up counts, so this measures both as commands, and lists what
the command imports (`python -X importtime`).

Usage: python bench/bench_validate.py [--entries 50000] [--rounds 5] [--src OTHER/src]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from datetime import UTC, datetime

from _common import OUT, best, best_alternating, command, environment, machine

#: The bare loop: parse every entry, streaming, and let it go (what any validator must at least
#: do; its rules come on top). `{each}`: what is done with each entry.
LOOP = """
import sys
from lxml import etree
n = 0
for _, el in etree.iterparse(sys.argv[1], events=("end",),
                             tag="{{http://www.sitemaps.org/schemas/sitemap/0.9}}url",
                             resolve_entities=False, no_network=True):
    n += 1
{each}
    el.clear()
    while el.getprevious() is not None:
        del el.getparent()[0]
print(n)
"""
BARE = LOOP.format(each="")
#: The bare loop that also takes every value out of each entry (each child's tag, text,
#: attributes and line), as any validator built on lxml must before it checks anything: the
#: floor of a Python validator, shown beside the bare loop.
EXTRACT = LOOP.format(
    each="    for child in el[:]:\n"
    "        child.tag, child.text, dict(child.attrib), child.sourceline"
)


def make_list(n: int) -> str:
    from resourcesync.model import Capability, Document, Link, Resource
    from resourcesync.sitemap import write_document

    path = OUT / "validate" / f"resourcelist-{n}-v1.xml"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        at = datetime(2026, 1, 2, tzinfo=UTC)
        lastmod = datetime(2026, 1, 1, tzinfo=UTC)
        entries = (
            Resource(
                loc=f"http://example.org/data/d{i // 1000:03d}/f{i:06d}.txt",
                lastmod=lastmod,
                length=100 + i % 50,
                type="text/plain",
                hashes={"md5": f"{i:032x}"},
            )
            for i in range(n)
        )
        up = Link(rel="up", href="http://example.org/capabilitylist.xml")
        doc = Document(capability=Capability.RESOURCELIST, at=at, links=[up])
        write_document(path, doc, entries)
    return str(path)


def imports(argv: list[str], env: dict[str, str]) -> list[tuple[int, str]]:
    """(microseconds, module) of the top-level imports a command makes, largest first."""
    run = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-c",
            "import sys; from resourcesync.cli import main; main(sys.argv[1:])",
            *argv,
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    out = []
    for line in run.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|")
        if not name.startswith("  "):
            out.append((int(cumulative), name.strip()))
    return sorted(out, reverse=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--src", help="run another checkout's src (for before figures)")
    args = ap.parse_args()
    env = environment(args.src)
    path = make_list(args.entries)
    bare, extract, ours = best_alternating(
        [
            ([sys.executable, "-c", BARE, path], None),
            ([sys.executable, "-c", EXTRACT, path], None),
            (command("validate", path), env),
        ],
        args.rounds,
    )
    startup = best([sys.executable, "-c", "pass"], args.rounds)
    help_ = best(command("validate", "--help"), args.rounds, env)
    top = imports(["validate", path], env)
    total = sum(t for t, _ in top) / 1e6
    print(f"validate, {args.entries:,} entries, as whole commands ({machine()}):")
    print(f"  bare lxml loop                   {bare:.3f} s")
    print(f"  the loop taking every value out  {extract:.3f} s ({extract / bare:.2f}x the loop)")
    print(f"  resourcesync validate            {ours:.3f} s")
    print(f"  validate / bare loop             {ours / bare:.2f}x (target <= 2x)")
    print(f"  validate / the loop taking values out {ours / extract:.2f}x")
    print(f"  start-up: `validate --help` {help_:.3f} s, `python -c pass` {startup:.3f} s")
    print(
        f"  imports {total:.3f} s, largest: "
        + ", ".join(f"{m} {t / 1e3:.0f} ms" for t, m in top[:6])
    )
    return 0 if ours / bare <= 2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
