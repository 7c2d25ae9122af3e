"""The watcher republishes what changed without walking the tree (issue 15.4)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from resourcesync.source.config import PublishConfig, SetConfig
from resourcesync.source.publish import PublishResult, publish
from resourcesync.source.server import republish_on_change
from tests.source.history import check_history

BASE = "http://example.org/data/"
DOCS = "http://example.org/"


def config(tmp_path: Path) -> PublishConfig:
    return PublishConfig(
        out=tmp_path / "out",
        sets=[SetConfig("set1", tmp_path / "data", BASE)],
        docs_url=DOCS,
    )


def files(data: Path) -> set[str]:
    return {
        BASE + p.relative_to(data).as_posix()
        for p in data.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(data).parts)
    }


@pytest.fixture(autouse=True)
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("resourcesync.source.scan.RACY_NS", 0)


def test_publishing_changed_paths_scans_only_their_directories(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for d in ("x", "y", "x/deep"):
        (data / d).mkdir(parents=True)
        (data / d / "f.txt").write_text(d)
    publish(config(tmp_path))
    (data / "x" / "f.txt").write_text("x changed")
    (data / "y" / "f.txt").write_text("y changed, not told")
    (data / "x" / "new").mkdir()
    (data / "x" / "new" / "g.txt").write_text("g")
    shutil.rmtree(data / "x" / "deep")
    (data / ".hidden").mkdir()
    (data / ".hidden" / "h.txt").write_text("never published")
    told = ["x/f.txt", "x/new", "x/new/g.txt", "x/deep", "x/deep/f.txt", ".hidden/h.txt"]
    result = publish(config(tmp_path), changed={"set1": told})
    scan = result.sets[0].scan
    assert (scan.created, scan.updated, scan.deleted) == (1, 1, 1)
    h = check_history(tmp_path / "out", DOCS, "set1")
    assert sorted((c.loc.removeprefix(BASE), c.change) for c in h.changes) == [
        ("x/deep/f.txt", "deleted"),
        ("x/f.txt", "updated"),
        ("x/new/g.txt", "created"),
    ]
    # What nobody told of waits for a whole scan.
    result = publish(config(tmp_path))
    assert result.sets[0].scan.updated == 1
    assert set(check_history(tmp_path / "out", DOCS, "set1").current) == files(data)


@contextlib.contextmanager
def watching(cfg: PublishConfig, **kw: float) -> Iterator[list[PublishResult | Exception]]:
    """The watcher running in a thread, its reports in the list."""
    results: list[PublishResult | Exception] = []
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def run() -> None:
        # What the watcher hears of (the whole scan it makes first is looked at elsewhere).
        options: dict[str, Any] = {"scan_first": False, **kw}
        watcher = republish_on_change(cfg, results.append, quiet=0.05, stop_event=stop, **options)
        loop.run_until_complete(watcher)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        time.sleep(0.5)  # the watch is set up
        yield results
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=20)
        loop.close()


def wait_for_changes(tmp_path: Path, n: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if len(check_history(tmp_path / "out", DOCS, "set1").changes) >= n:
            return
        time.sleep(0.1)


def test_the_watcher_publishes_changes_it_hears_of(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "a" / "b").mkdir(parents=True)
    (data / "z").mkdir()
    for i in range(20):
        (data / "a" / "b" / f"f{i}.txt").write_text(str(i))
    for i in range(200):
        (data / "z" / f"f{i}.txt").write_text(str(i))
    cfg = config(tmp_path)
    publish(cfg)
    with watching(cfg) as results:
        (data / "a" / "b" / "f3.txt").write_text("changed")
        (data / "a" / "c").mkdir()
        (data / "a" / "c" / "new.txt").write_text("new")
        (data / "a" / "b" / "f4.txt").unlink()
        wait_for_changes(tmp_path, 3)
    assert not [r for r in results if isinstance(r, Exception)], results
    h = check_history(tmp_path / "out", DOCS, "set1")
    assert sorted((c.loc.removeprefix(BASE), c.change) for c in h.changes) == [
        ("a/b/f3.txt", "updated"),
        ("a/b/f4.txt", "deleted"),
        ("a/c/new.txt", "created"),
    ]
    assert set(h.current) == files(data)
    # Nothing was looked at but the directories that changed (not the 200 files of z/).
    scans = [r.sets[0].scan for r in results if isinstance(r, PublishResult)]
    assert scans and all(s.unchanged < 20 for s in scans), [s.unchanged for s in scans]
    assert scans[-1].resources == len(files(data))


def test_the_watcher_scans_the_whole_tree_now_and_then(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for d in ("x", "y"):
        (data / d).mkdir(parents=True)
        (data / d / "f.txt").write_text(d)
    cfg = config(tmp_path)
    publish(cfg)
    # Changed while no watcher was running: only a whole scan finds it.
    (data / "y" / "f.txt").write_text("y changed unheard")
    with watching(cfg, full_every=0) as results:
        (data / "x" / "f.txt").write_text("x changed")
        wait_for_changes(tmp_path, 2)
    assert not [r for r in results if isinstance(r, Exception)], results
    h = check_history(tmp_path / "out", DOCS, "set1")
    assert sorted(c.loc.removeprefix(BASE) for c in h.changes) == ["x/f.txt", "y/f.txt"]


def test_a_publication_that_failed_is_tried_again_without_another_change(tmp_path: Path) -> None:
    """`source` while OUTDIR's disk is full (RLIMIT_FSIZE, as tests/test_full_disk.py): the
    state database's write error (not a ResourceSyncError) ended the watcher silently while the
    server went on serving the old lists, and a failure of another kind waited for the next
    change in the tree, however long. It says the failure in one line, goes on, and publishes
    the change once there is room, with no other change."""
    import resource
    import signal
    import subprocess
    import sys

    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    for i in range(30):
        (data / f"f{i}.txt").write_text(f"file {i}\n")
    argv = [sys.executable, "-m", "resourcesync", "source", data, "--out", out]
    argv += ["--base-url", "http://127.0.0.1:9/data/", "--port", "0", "--quiet-time", "0.1"]
    proc = subprocess.Popen(
        argv,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGXFSZ, signal.SIG_IGN),
    )
    said: list[str] = []
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: said.extend(proc.stderr or []), daemon=True)
    reader.start()

    def wait(what: Callable[[], bool], why: str) -> None:
        deadline = time.monotonic() + 30
        while not what():
            assert proc.poll() is None, "".join(said)
            assert time.monotonic() < deadline, f"gave up waiting: {why}: {''.join(said)}"
            time.sleep(0.05)

    def listed() -> set[str]:
        h = check_history(out, "http://127.0.0.1:9/", "resourcesync")
        return {c.loc.rsplit("/", 1)[-1] for c in h.changes}

    try:
        wait(lambda: any("serving" in line for line in said), "the server")
        # The watch is set up once it has published a change it heard of.
        (data / "new.txt").write_text("new\n")
        wait(lambda: any("1 created" in line for line in said), "the watcher")
        limit = resource.RLIM_INFINITY
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (1000, limit))  # the disk full
        (data / "f1.txt").write_text("changed\n")
        wait(lambda: any("publishing failed" in line for line in said), "the failure")
        failed = next(line for line in said if "publishing failed" in line)
        assert "free some space and run again" in failed, failed
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (limit, limit))  # room again
        wait(lambda: "f1.txt" in listed(), "the change published with no other change")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        reader.join(timeout=5)
    assert "Traceback" not in "".join(said), "".join(said)
    assert listed() == {"new.txt", "f1.txt"}


def test_a_watcher_that_fails_stops_the_server_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault of ours in a publication (an error none of the expected kinds) ended the watcher
    while the server went on serving lists that no longer followed DIR, until it was stopped.
    The server stops with it, and the command ends with the error."""
    from click.testing import CliRunner

    import resourcesync.source.publish as publishing
    from resourcesync.cli import main

    real = publishing.publish
    calls = []

    def faulty(*args: object, **kwargs: object) -> PublishResult:
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("a fault of ours")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(publishing, "publish", faulty)
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    argv = ["source", str(data), "--out", str(tmp_path / "out"), "--port", "0"]
    argv += ["--base-url", "http://127.0.0.1:9/data/", "--quiet-time", "0.05"]
    outcome: list[object] = []
    runner = threading.Thread(target=lambda: outcome.append(CliRunner().invoke(main, argv)))
    runner.start()
    deadline = time.monotonic() + 20
    while not calls and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the watch is set up
    (data / "b.txt").write_text("b")
    runner.join(timeout=30)
    assert not runner.is_alive(), "the server went on serving"
    (result,) = outcome
    assert isinstance(result.exception, RuntimeError), result.output  # type: ignore[attr-defined]


def test_what_changed_before_the_watch_was_set_up_is_published_by_its_first_scan(
    tmp_path: Path,
) -> None:
    """`source` publishes, then sets up its watch: a change between the two was heard by
    nobody, and waited for the ten-minute whole scan (or for ever, for a Source that stops
    changing). The watcher's first wake scans the whole tree, with no change to wake it."""
    data = tmp_path / "data"
    (data / "y").mkdir(parents=True)
    (data / "y" / "f.txt").write_text("y")
    cfg = config(tmp_path)
    publish(cfg)
    (data / "y" / "f.txt").write_text("y changed before the watch")
    with watching(cfg, scan_first=True) as results:
        wait_for_changes(tmp_path, 1)
    assert not [r for r in results if isinstance(r, Exception)], results
    h = check_history(tmp_path / "out", DOCS, "set1")
    assert [(c.loc.removeprefix(BASE), c.change) for c in h.changes] == [("y/f.txt", "updated")]
