"""Progress and summaries (issue 14.7): on a terminal `sync` shows resources and bytes with
their rates and the time left (never `0/None`), and ends with one summary line; in a pipe it
shows no progress at all; `publish` says which step it is in, not "scanning" throughout."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

from resourcesync.source.config import PublishConfig, SetConfig
from resourcesync.source.publish import publish
from tests.destination.helpers import published_source

FILES = {f"d/f{i:03d}.txt": b"x" * (100 + i) for i in range(60)}


def _in_a_terminal(argv: list[str], **extra: str) -> tuple[int, str]:
    """Run `argv` with its stdin, stdout and stderr on a pseudo-terminal; all it printed."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    env.update(extra)
    proc = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    out = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    return proc.wait(timeout=60), out.decode("utf-8", "replace")


def test_sync_on_a_terminal_shows_resources_bytes_rates_and_time_left(tmp_path: Path) -> None:
    with published_source(tmp_path, FILES, delay=0.03) as src:
        argv = [sys.executable, "-m", "resourcesync", "sync", src.root, str(tmp_path / "dest")]
        code, out = _in_a_terminal([*argv, "--transfers", "2", "--per-host", "2"])
    assert code == 0, out
    assert "fetching" in out and "resources •" in out, out
    assert re.search(r"\d+/60", out), out  # counted against the planned total
    assert re.search(r"[0-9.]+ (B|KiB)/s", out), out
    assert "None" not in out and "Traceback" not in out
    assert "resourcesync: sync ok: 60 fetched" in out


def test_sync_in_a_pipe_shows_no_progress(tmp_path: Path) -> None:
    with published_source(tmp_path, FILES) as src:
        argv = [sys.executable, "-m", "resourcesync", "sync", src.root, str(tmp_path / "dest")]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0
    assert "\x1b[" not in result.stderr + result.stdout and "fetching" not in result.stderr
    (line,) = result.stdout.splitlines()
    assert line.startswith("resourcesync: sync ok: 60 fetched")


def test_publish_says_which_step_it_is_in(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for name, body in FILES.items():
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_bytes(body)
    told: list[tuple[str, int]] = []
    caps = ("resourcelist", "changelist", "resourcedump", "changedump")
    config = PublishConfig(
        out=tmp_path / "out", sets=[SetConfig("set1", data, "http://127.0.0.1:9/", caps)]
    )
    publish(config, progress=lambda name, n: told.append((name, n)))
    steps = [name for name, n in told if n < 0]
    # The changes before the Resource List that shows them (see test_publish_order.py).
    assert steps == [
        "set1: writing the Change Lists",
        "set1: packaging the Change Dump",
        "set1: writing the Resource List",
        "set1: packaging the Resource Dump",
    ]


def test_publish_and_audit_take_verbose_and_quiet(tmp_path: Path) -> None:
    from tests.destination.helpers import cli

    with published_source(tmp_path, FILES) as src:
        (src.data / "d" / "f000.txt").write_bytes(b"changed")
        (src.data / "d" / "f001.txt").unlink()
        (src.data / "new.txt").write_bytes(b"new")
        argv = ["publish", src.data, "--base-url", src.root, "--out", src.out, "--name", "set1"]
        result = cli(*argv, "-v")
        assert result.exit_code == 0
        *changes, summary = result.stdout.splitlines()
        assert sorted(changes) == sorted(
            [
                f"* updated {src.root}d/f000.txt",
                f"- deleted {src.root}d/f001.txt",
                f"+ created {src.root}new.txt",
            ]
        )
        assert summary.startswith("resourcesync: publish ok: 60 resources, 1 created, 1 updated")
        result = cli(*argv, "-q")
        assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")

        dest = tmp_path / "dest"
        assert cli("sync", src.root, dest, "-q").exit_code == 0
        for i in range(12):
            (dest / "d" / f"f{i + 10:03d}.txt").write_bytes(b"?")
        result = cli("audit", src.root, dest, "-q")
        assert (result.exit_code, result.stdout, result.stderr) == (1, "", "")
        short = cli("audit", src.root, dest).stdout.splitlines()
        every = cli("audit", src.root, dest, "-v").stdout.splitlines()
        assert sum(line.startswith("  different:") for line in short) == 10
        assert sum(line.startswith("  different:") for line in every) == 12
        assert every[-1].startswith("resourcesync: audit NOT in sync: 60 expected, 48 in sync")
