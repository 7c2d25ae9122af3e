"""Crash tests: kill -9 a publish at different moments; the tree stays whole, and the next run
publishes every change exactly once."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from resourcesync.sitemap import Mapping, Resolver, iter_entries, validate
from resourcesync.source.config import PublishConfig, SetConfig
from resourcesync.source.publish import publish

BASE = "http://example.org/data/"
DOCS = "http://example.org/"
N = 1500


def args(tmp_path: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "resourcesync",
        "publish",
        str(tmp_path / "data"),
        "--base-url",
        BASE,
        "--out",
        str(tmp_path / "out"),
        "--name",
        "set1",
        "--capabilities",
        "resourcelist,changelist,resourcedump,changedump",
        "--changelist-max-entries",
        "300",
        "--max-entries",
        "400",
        "--hash",
        "md5,sha-256",
    ]


def config(tmp_path: Path) -> PublishConfig:
    return PublishConfig(
        out=tmp_path / "out",
        sets=[
            SetConfig(
                "set1",
                tmp_path / "data",
                BASE,
                capabilities=("resourcelist", "changelist", "resourcedump", "changedump"),
                changelist_max_entries=300,
                max_entries=400,
                hashes=("md5", "sha-256"),
            )
        ],
    )


def prepare(tmp_path: Path) -> collections.Counter[tuple[str, str]]:
    """A published tree of N files, then changes to publish; returns the expected changes."""
    data = tmp_path / "data"
    data.mkdir()
    for i in range(N):
        (data / f"f{i:05d}.txt").write_bytes(b"x" * (i % 97) + str(i).encode())
    subprocess.run(args(tmp_path), check=True, capture_output=True)
    expected: collections.Counter[tuple[str, str]] = collections.Counter()
    for i in range(0, N, 3):
        (data / f"f{i:05d}.txt").write_bytes(b"changed " + str(i).encode())
        expected["updated", f"f{i:05d}.txt"] += 1
    for i in range(1, N, 7):
        (data / f"f{i:05d}.txt").unlink()
        expected["deleted", f"f{i:05d}.txt"] += 1
        expected.pop(("updated", f"f{i:05d}.txt"), None)  # edited, then gone: one deletion
    for i in range(200):
        (data / f"new{i:04d}.txt").write_bytes(b"new " + str(i).encode())
        expected["created", f"new{i:04d}.txt"] += 1
    return expected


def published_changes(tmp_path: Path) -> collections.Counter[tuple[str, str]]:
    resolver = Resolver([Mapping(DOCS, tmp_path / "out")])
    entries = iter_entries(tmp_path / "out" / "set1" / "changelist.xml", resolver=resolver)
    return collections.Counter((e.change or "", e.loc.removeprefix(BASE)) for e in entries)


def tree_is_whole(tmp_path: Path) -> None:
    report = validate(
        [tmp_path / "out" / ".well-known" / "resourcesync"],
        follow=True,
        resolver=Resolver([Mapping(DOCS, tmp_path / "out")]),
    )
    assert report.ok, [str(f) for f in report.errors + report.unreadable][:5]


def timed_run(tmp_path: Path) -> float:
    """How long an uninterrupted publish of these changes takes (on a copy of the tree)."""
    start = time.monotonic()
    subprocess.run(args(tmp_path), check=True, capture_output=True)
    return time.monotonic() - start


@pytest.mark.parametrize("fraction", [0.15, 0.4, 0.65, 0.9])
def test_kill_9_mid_publish_loses_and_duplicates_nothing(tmp_path: Path, fraction: float) -> None:
    reference = tmp_path / "reference"
    reference.mkdir()
    prepare(reference)
    duration = timed_run(reference)

    work = tmp_path / "work"
    work.mkdir()
    expected = prepare(work)
    proc = subprocess.Popen(args(work), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(duration * fraction)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    # Whatever moment it died at, what is published is a whole, valid tree.
    tree_is_whole(work)
    before = published_changes(work)
    assert before in (collections.Counter(), expected) or not (before - expected), before - expected

    # The next run completes the publication: every change once, nothing else, nothing left over.
    publish(config(work))
    tree_is_whole(work)
    assert published_changes(work) == expected
    leftovers = [p for p in (work / "out").rglob(".*") if p.is_file()]
    assert leftovers == []
