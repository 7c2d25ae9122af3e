"""A re-run's directories listed ahead by a forked child (`source/prefetch.py`, issue 15.3).

The child only saves time: whatever it hands over, or fails to, a re-run publishes what a
re-run that walks on its own publishes. Each run here is a command of its own (a process with
no other thread, as `publish` from cron is), with the threshold below which the scan walks on
its own taken down to nothing, so these small trees are prefetched; the command says on stderr
how many listings the child handed over, so a test knows the child was used.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lxml import etree

from resourcesync.source import prefetch
from resourcesync.source.config import PublishConfig, SetConfig
from resourcesync.source.inventory import DirectoryInventory
from resourcesync.source.publish import publish

NS = {
    "s": "http://www.sitemaps.org/schemas/sitemap/0.9",
    "rs": "http://www.openarchives.org/rs/terms/",
}

# `publish` as a command, the child's threshold at nothing (or the child never forked, with
# PREFETCH=off), the listings it handed over counted, each fork noted with whether the scan
# was loaded by then (the command forks before: `prefetch.head_start`); with DIE_AFTER=N, a
# child that dies after N listings; with INTERRUPT=1, a run interrupted (Ctrl-C) in the
# middle of its scan.
RUNNER = r"""
import os, sys
import resourcesync.source.prefetch as p
import resourcesync.source.inventory as inv
from resourcesync._program import main

handed = own = 0
if os.environ.get("PREFETCH") == "off":
    p.usable = lambda: False
p.MIN_BYTES = 0
parent = os.getpid()
forks = []
fork = os.fork
def noted():
    forks.append("resourcesync.source.scan" in sys.modules)
    return fork()
os.fork = noted
receive = p.ListingPrefetch._receive
def counted(self):
    global handed
    got = receive(self)
    handed += got is not None
    return got
p.ListingPrefetch._receive = counted
die_after = int(os.environ.get("DIE_AFTER", "0"))
list_dir = inv.DirectoryInventory.list_dir
listed = 0
def listing(self, directory, prefix):
    global listed, own
    if os.getpid() == parent:
        own += 1
    else:
        listed += 1
        if die_after and listed > die_after:
            os._exit(3)
    return list_dir(self, directory, prefix)
inv.DirectoryInventory.list_dir = listing
if os.environ.get("INTERRUPT"):
    import resourcesync.source.scan as scan
    compare = scan.Journal.compare
    def interrupted(self, *a, **k):
        raise KeyboardInterrupt
    scan.Journal.compare = interrupted
try:
    main()
finally:
    try:
        left = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        left = None
    print(
        f"prefetch: {handed} handed over, {own} listed; forks: {forks}; child left: {left}",
        file=sys.stderr,
    )
"""


def _publish(
    data: Path, out: Path, *extra: str, env: dict[str, str] | None = None, unprivileged=False
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", RUNNER, "publish", str(data), "--base-url"]
    argv += ["http://example.org/", "--out", str(out), "--resourcelist-every", "always", *extra]
    if unprivileged and os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("as root, needs setpriv (util-linux) to be refused a mode of 000")
        argv = [setpriv, "--bounding-set=-dac_override,-dac_read_search", *argv]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )


def _counts(run: subprocess.CompletedProcess[str]) -> tuple[int, int]:
    """How many listings the child handed over, how many the scan took itself."""
    line = [ln for ln in run.stderr.splitlines() if ln.startswith("prefetch: ")][-1]
    assert line.endswith("child left: None"), line  # reaped, whatever happened
    words = line.split()
    return int(words[1]), int(words[4])


def _handed(run: subprocess.CompletedProcess[str]) -> int:
    return _counts(run)[0]


def _forks(run: subprocess.CompletedProcess[str]) -> str:
    """The forks of a run, each as whether the scan was loaded by then."""
    line = [ln for ln in run.stderr.splitlines() if ln.startswith("prefetch: ")][-1]
    return line.split("; ")[1].removeprefix("forks: ")


def _published(out: Path) -> dict[str, tuple[str, str]]:
    """The Resource List: {URI: (length, md5)}."""
    ns = NS
    found: dict[str, tuple[str, str]] = {}
    root = etree.parse(str(out / "resourcesync" / "resourcelist.xml"))  # one document
    for url in root.iterfind("s:url", ns):
        md = url.find("rs:md", ns)
        assert md is not None
        loc = url.findtext("s:loc", namespaces=ns) or ""
        found[loc] = (md.get("length") or "", md.get("hash") or "")
    return found


def _changes(out: Path) -> list[tuple[str, str]]:
    ns = NS
    root = etree.parse(str(out / "resourcesync" / "changelist.xml"))
    return sorted(
        (url.findtext("s:loc", namespaces=ns) or "", url.find("rs:md", ns).get("change") or "")
        for url in root.iterfind("s:url", ns)
    )


def _truth(data: Path) -> dict[str, tuple[str, str]]:
    """What the Resource List must say: every regular, visible file under `data`."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(data):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            path = Path(dirpath, name)
            if name.startswith(".") or path.is_symlink():
                continue
            body = path.read_bytes()
            rel = path.relative_to(data).as_posix()
            found["http://example.org/" + rel] = (
                str(len(body)),
                "md5:" + hashlib.md5(body).hexdigest(),
            )
    return found


def _tree(data: Path, rng: random.Random) -> None:
    for top in ("a", "a-b", "b", "c"):
        for sub in ("", "x/", "x/deep/", "y/"):
            d = data / top / sub
            d.mkdir(parents=True, exist_ok=True)
            for i in range(rng.randint(0, 6)):
                (d / f"f{i}.txt").write_text(f"{top}/{sub}{i} {rng.random()}\n")
    (data / "top.txt").write_text("top\n")
    (data / ".hidden").mkdir()
    (data / ".hidden" / "h.txt").write_text("hidden\n")
    (data / "a" / "link.txt").symlink_to(data / "top.txt")


def _mutate(data: Path, rng: random.Random) -> None:
    files = sorted(
        p for p in data.rglob("*.txt") if not p.is_symlink() and ".hidden" not in p.parts
    )
    for path in rng.sample(files, len(files) // 4):
        path.write_text(path.read_text() + "more\n")
    for path in rng.sample(files, 3):
        if path.exists():
            path.unlink()
    shutil.rmtree(data / "b" / "x")  # a directory with one under it, gone
    (data / "c" / "y").rename(data / "c" / "z")  # moved
    (data / "new" / "deeper").mkdir(parents=True)  # new, with one under it
    (data / "new" / "deeper" / "n.txt").write_text("new\n")
    (data / "a-b" / "x" / "added.txt").write_text("added\n")


def test_a_prefetched_rerun_publishes_what_a_walk_of_its_own_publishes(tmp_path: Path) -> None:
    rng = random.Random(15)
    data = tmp_path / "data"
    _tree(data, rng)
    runs = {"prefetch": tmp_path / "out-prefetch", "alone": tmp_path / "out-alone"}
    env = {"prefetch": {}, "alone": {"PREFETCH": "off"}}
    for kind, out in runs.items():
        first = _publish(data, out, env=env[kind])
        assert first.returncode == 0, first.stderr
        assert _handed(first) == 0 and _forks(first) == "[]"  # no listings to go by yet
    # As many after `_mutate` (two gone, one moved, two new).
    dirs = 1 + sum(1 for p in data.rglob("*") if p.is_dir() and ".hidden" not in p.parts)
    for round_ in range(3):
        if round_ == 0:
            _mutate(data, rng)
        else:
            for path in sorted(data.rglob("f1.txt")):
                path.write_text(f"round {round_}\n")
        results = {kind: _publish(data, out, env=env[kind]) for kind, out in runs.items()}
        for run in results.values():
            assert run.returncode == 0, run.stderr
        handed, own = _counts(results["prefetch"])
        # The two processes shared the walk (how, the machine decides: see `ListingPrefetch`),
        # the child forked by the command before it loaded the scan, which took it over.
        assert handed > 0 and own < dirs
        assert _forks(results["prefetch"]) == "[False]" and _forks(results["alone"]) == "[]"
        assert _counts(results["alone"]) == (0, dirs)
        truth = _truth(data)
        assert _published(runs["prefetch"]) == _published(runs["alone"]) == truth
        assert _changes(runs["prefetch"]) == _changes(runs["alone"])
    # Nothing changed: nothing published.
    again = _publish(data, runs["prefetch"])
    assert (
        again.returncode == 0 and "0 created, 0 updated, 0 deleted" in again.stderr + again.stdout
    )


def test_a_child_that_dies_leaves_the_scan_to_list_the_rest(tmp_path: Path) -> None:
    rng = random.Random(16)
    data, out = tmp_path / "data", tmp_path / "out"
    _tree(data, rng)
    assert _publish(data, out).returncode == 0
    _mutate(data, rng)
    run = _publish(data, out, env={"DIE_AFTER": "3"})
    assert run.returncode == 0, run.stderr
    assert 0 < _handed(run) <= 3
    assert _published(out) == _truth(data)
    again = _publish(data, out)
    assert "0 created, 0 updated, 0 deleted" in again.stderr + again.stdout


def test_an_interrupted_run_leaves_no_child_and_records_nothing(tmp_path: Path) -> None:
    rng = random.Random(17)
    data, out = tmp_path / "data", tmp_path / "out"
    _tree(data, rng)
    assert _publish(data, out).returncode == 0
    before = _published(out)
    _mutate(data, rng)
    run = _publish(data, out, env={"INTERRUPT": "1"})
    assert run.returncode == 130, run.stderr
    _handed(run)  # the child was reaped
    assert _published(out) == before
    after = _publish(data, out)
    assert after.returncode == 0, after.stderr
    assert _published(out) == _truth(data)


def test_what_the_child_could_not_read_stays_as_it_was_published(tmp_path: Path) -> None:
    """The child's notes (a directory it could not list) are the scan's, as if it had listed
    the directory itself: kept as published, said, nothing deleted."""
    rng = random.Random(18)
    data, out = tmp_path / "data", tmp_path / "out"
    _tree(data, rng)
    assert _publish(data, out, unprivileged=True).returncode == 0
    before = _published(out)
    (data / "b").chmod(0)
    try:
        run = _publish(data, out, unprivileged=True)
    finally:
        (data / "b").chmod(0o755)
    assert run.returncode == 0, run.stderr
    assert _handed(run) > 0
    assert "b: Permission denied: kept as it was published" in run.stderr
    assert 'change="deleted"' not in (out / "resourcesync" / "changelist.xml").read_text()
    assert _published(out) == before


THREADS = r"""
import os, sys, threading
from rich.console import Console
import resourcesync.source.prefetch as p
os.sched_getaffinity = lambda pid: {0, 1}  # two CPUs, whatever this machine has
seen = [p.usable()]
with Console(stderr=True, force_terminal=True).status("scanning"):  # rich's refresh thread
    seen.append(p.usable())
stop = threading.Event()
thread = threading.Thread(target=stop.wait)
thread.start()
seen.append(p.usable())
stop.set()
thread.join()
os.sched_getaffinity = lambda pid: {0}
seen.append(p.usable())
os.sched_getaffinity = lambda pid: {0, 1}
sys.platform = "darwin"  # forking a process that may hold Apple's frameworks: never
seen.append(p.usable())
print(seen)
"""


def test_no_child_beside_another_thread_on_one_cpu_nor_for_a_small_tree(tmp_path: Path) -> None:
    # In a process of its own: this one may hold threads other tests left.
    run = subprocess.run(
        [sys.executable, "-c", THREADS], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    # Alone, beside a progress display, beside another thread, on one CPU, not on Linux.
    assert run.stdout.strip() == "[True, True, False, False, False]"
    (tmp_path / "d").mkdir()
    inventory = DirectoryInventory(tmp_path, "http://example.org/")
    assert prefetch.ListingPrefetch.start(inventory, [("", 100), ("d/", 100)]) is None


def test_the_child_lists_in_the_order_the_scan_asks(tmp_path: Path, monkeypatch) -> None:
    """Names that sort otherwise than their paths ("a-b" < "a/x" as strings), one directory
    empty, others deep: the order the child lists in is the order a scan asks in."""
    data = tmp_path / "data"
    for rel in ("a/x/deep", "a-b", "a.b/y", "ab", "b c/é", "é/z", "z/empty", "0"):
        (data / rel).mkdir(parents=True)
        if not rel.endswith("empty"):
            (data / rel / "f.txt").write_text(rel)
    out = tmp_path / "out"
    config = PublishConfig(
        out=out, sets=[SetConfig(name="set1", dir=data, base_url="http://example.org/")]
    )
    publish(config)
    asked: list[str] = []
    list_dir = DirectoryInventory.list_dir

    def spy(self: DirectoryInventory, directory: str, p: str):  # type: ignore[no-untyped-def]
        asked.append(p)
        return list_dir(self, directory, p)

    monkeypatch.setattr(DirectoryInventory, "list_dir", spy)
    monkeypatch.setattr(prefetch, "usable", lambda: False)
    (data / "a" / "x" / "f.txt").write_text("changed")
    publish(config)
    assert len(asked) == 15
    assert prefetch.scan_order(reversed(asked)) == asked


def test_a_run_stopped_before_its_scan_leaves_no_child(tmp_path: Path) -> None:
    """The head start's child is ended when the run stops before a scan took it over (here:
    another publication holds OUTDIR)."""
    import fcntl

    rng = random.Random(20)
    data, out = tmp_path / "data", tmp_path / "out"
    _tree(data, rng)
    assert _publish(data, out).returncode == 0
    _mutate(data, rng)
    with open(out / ".resourcesync" / "publish.lock", "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        run = _publish(data, out)
    assert run.returncode != 0
    assert "another publish is running for this output" in run.stderr
    assert _forks(run) == "[False]" and _handed(run) == 0  # and reaped (`_counts`)
    again = _publish(data, out)
    assert again.returncode == 0, again.stderr
    assert _published(out) == _truth(data)


TAKE_OVER = r"""
import os, sys
import resourcesync.source.prefetch as p
from resourcesync.source.inventory import DirectoryInventory
root, known = sys.argv[1], [("", 1), ("d/", 1)]
mine = p.ListingPrefetch(DirectoryInventory(root, "http://example.org/"), ["", "d/"])
same = DirectoryInventory(root, "http://example.org/")  # another object, the same inventory
taken = p.ListingPrefetch.start(same, known, mine)
print(taken is mine, taken.inventory is same)
taken.close()
other = p.ListingPrefetch(DirectoryInventory(root, "http://example.org/"), ["", "d/"])
pid = other._pid
hidden = DirectoryInventory(root, "http://example.org/", hidden=True)  # lists other files
p.MIN_BYTES = 0
fresh = p.ListingPrefetch.start(hidden, known, other)
try:
    os.waitpid(pid, os.WNOHANG)
    reaped = False
except ChildProcessError:
    reaped = True
print(fresh is not other and fresh.inventory is hidden, reaped)
fresh.close()
"""


def test_a_child_begun_for_another_inventory_is_ended_not_taken_over(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f.txt").write_text("f")
    run = subprocess.run(
        [sys.executable, "-c", TAKE_OVER, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:2] == ["True True", "True True"]


def test_peek_reads_the_listings_a_state_keeps_for_this_inventory_only(tmp_path: Path) -> None:
    from resourcesync.source.listings import peek

    data = tmp_path / "data"
    (data / "a").mkdir(parents=True)
    (data / "a" / "f.txt").write_text("f")
    (data / "g.txt").write_text("g")
    s = SetConfig(name="set1", dir=data, base_url="http://example.org/")
    config = PublishConfig(out=tmp_path / "out", sets=[s])
    path = config.state_file(s)
    signature = DirectoryInventory.of_set(config, s).signature(s.hashes)
    assert peek(path, signature) == []  # no state yet
    publish(config)
    found = peek(path, signature)
    assert sorted(prefix for prefix, _ in found) == ["", "a/"]
    assert all(size > 0 for _, size in found)
    other = DirectoryInventory(data, "http://example.org/", hidden=True).signature(s.hashes)
    assert peek(path, other) == []  # kept for another inventory: the scan would not use them
    path.write_bytes(b"not a database, " * 512)
    assert peek(path, signature) == []  # said by the run that opens it, not here
