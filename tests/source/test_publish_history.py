"""The published history of a Source (issue 16): every change in exactly one Change List, closed
lists carrying their `until`, one open list, and the replay of the published changes after a
Resource List's `at` giving the latest Resource List."""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
from pathlib import Path

import pytest

from resourcesync.sitemap import read_document
from resourcesync.source.config import PublishConfig, SetConfig
from resourcesync.source.publish import publish
from tests.source.history import Clock, check_change_dumps, check_history

BASE = "http://example.org/data/"
DOCS = "http://example.org/"


def config(tmp_path: Path, **kw: object) -> PublishConfig:
    kw.setdefault("resourcelist_every", "always")
    return PublishConfig(
        out=tmp_path / "out",
        sets=[SetConfig("set1", tmp_path / "data", BASE, **kw)],  # type: ignore[arg-type]
        docs_url=DOCS,
    )


def test_every_closed_change_list_carries_until_and_all_of_its_entries(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "seed.txt").write_bytes(b"0")
    clock = Clock()
    cfg = config(tmp_path, changelist_max_entries=3)
    publish(cfg, clock=clock)
    # Two changes a run against lists of three: each list is closed by a later run than the
    # one that opened it, and the same file is updated in several lists.
    for round_ in range(8):
        (data / f"new{round_}.txt").write_bytes(b"n")
        (data / "seed.txt").write_bytes(f"seed {round_}".encode())
        publish(cfg, clock=clock)
    out = tmp_path / "out" / "set1"
    _, lists = read_document(out / "changelist.xml")
    assert len(lists) >= 5
    total = 0
    for entry in lists:
        doc, entries = read_document(out / entry.loc.removeprefix(DOCS + "set1/"))
        assert doc.from_ == entry.from_ and doc.until == entry.until
        if entry is not lists[-1]:
            assert doc.until is not None and len(entries) == 3
        total += len(entries)
    assert total == 16
    for before, after in itertools.pairwise(lists):
        assert before.until is not None and before.until == after.from_
    check_history(tmp_path / "out", DOCS, "set1")


def test_a_file_rewritten_within_its_timestamp_is_read_again(tmp_path: Path) -> None:
    """Same size, same mtime (a write within the granularity of the file system's clock): the
    run that read the file just after it was written recorded it as racy, so the next run reads
    it again and publishes the update."""
    data = tmp_path / "data"
    data.mkdir()
    f = data / "a.txt"
    f.write_bytes(b"one")
    clock = Clock()
    cfg = config(tmp_path)
    publish(cfg, clock=clock)
    f.write_bytes(b"two")
    publish(cfg, clock=clock)
    st = f.stat()
    f.write_bytes(b"six")  # the same size…
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # …and the same mtime as before
    scan = publish(cfg, clock=clock).sets[0].scan
    assert scan.updated == 1
    h = check_history(tmp_path / "out", DOCS, "set1")
    assert h.resourcelist[1][BASE + "a.txt"] == (3, hashlib.md5(b"six").hexdigest())


class _Rewriter(threading.Thread):
    """Rewrites one file over and over (other sizes, other bytes) until stopped."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            self.path.write_bytes(b"x" * (n % 5000) + str(n).encode())


def test_a_file_written_during_the_scan_is_published_with_the_bytes_that_were_hashed(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(300):
        (data / f"f{i:03d}.txt").write_bytes(b"y" * i)
    clock = Clock()
    cfg = config(tmp_path)
    publish(cfg, clock=clock)
    writer = _Rewriter(data / "f150.txt")
    writer.start()
    try:
        for _ in range(5):
            publish(cfg, clock=clock)
            check_history(tmp_path / "out", DOCS, "set1")
    finally:
        writer.stop.set()
        writer.join()
    publish(cfg, clock=clock)  # the writes have stopped: this run sees the last bytes
    publish(cfg, clock=clock)
    h = check_history(tmp_path / "out", DOCS, "set1")
    last = (data / "f150.txt").read_bytes()
    assert h.resourcelist[1][BASE + "f150.txt"] == (len(last), hashlib.md5(last).hexdigest())


def test_changes_of_a_run_that_died_before_packaging_are_in_the_next_change_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_bytes(b"a")
    clock = Clock()
    cfg = config(tmp_path, capabilities=("resourcelist", "changelist", "changedump"))
    publish(cfg, clock=clock)
    (data / "b.txt").write_bytes(b"b")
    (data / "a.txt").write_bytes(b"aa")

    def dies(*args: object, **kw: object) -> object:
        raise OSError("killed")

    with monkeypatch.context() as m:
        m.setattr("resourcesync.source.dumps.write_packages", dies)
        with pytest.raises(OSError):
            publish(cfg, clock=clock)  # the scan is committed, the packages are not written
    (data / "c.txt").write_bytes(b"c")
    publish(cfg, clock=clock)
    (data / "a.txt").unlink()
    publish(cfg, clock=clock)
    h = check_history(tmp_path / "out", DOCS, "set1")
    assert len(h.changes) == 4
    check_change_dumps(tmp_path / "out", DOCS, "set1", h)


def test_a_file_changed_while_it_is_packaged_is_listed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_bytes(b"a")
    clock = Clock()
    cfg = config(tmp_path, capabilities=("resourcelist", "changelist", "changedump"))
    publish(cfg, clock=clock)
    (data / "a.txt").write_bytes(b"before")
    from resourcesync.source import dumps as module

    real = module.write_packages

    def changes_first(*args: object, **kw: object) -> object:
        # The file is written after the scan hashed it and before it is packaged…
        (data / "a.txt").write_bytes(b"during")
        yield from real(*args, **kw)  # type: ignore[arg-type]
        (data / "a.txt").write_bytes(b"before")  # …and goes back to what the scan saw.

    with monkeypatch.context() as m:
        m.setattr(module, "write_packages", changes_first)
        result = publish(cfg, clock=clock)
    assert any("changed while they were packaged" in p for p in result.sets[0].problems)
    scan = publish(cfg, clock=clock).sets[0].scan
    assert scan.updated == 1  # listed again, with the bytes it has now
    h = check_history(tmp_path / "out", DOCS, "set1")
    check_change_dumps(tmp_path / "out", DOCS, "set1", h)
    assert h.resourcelist[1][BASE + "a.txt"] == (6, hashlib.md5(b"before").hexdigest())
