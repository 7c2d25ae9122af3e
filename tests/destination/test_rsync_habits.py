"""The rclone/rsync habits users look for (issue 14.14): `--include/--exclude`, `--backup-dir`,
`--bwlimit`, `--from DATETIME` (resync's incremental start) and `--log-file`."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

import resourcesync.http as http
from resourcesync.http import Bandwidth
from tests.destination.helpers import cli, cli_json, published_source, set_report, tree

FILES = {"a.txt": b"alpha", "k/b.txt": b"beta", "k/c.log": b"log 1", "d/e.log": b"log 2"}


def test_include_and_exclude_leave_resources_alone_in_sync_and_audit(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES) as src:
        code, summary = cli_json("sync", src.root, dest, "--exclude", "*.log")
        s = set_report(summary)
        assert code == 0 and s["excluded"] == 2, summary
        assert tree(dest) == {"a.txt": b"alpha", "k/b.txt": b"beta"}
        assert "/k/c.log" not in src.resource_gets()
        assert cli("audit", src.root, dest, "--exclude", "*.log").exit_code == 0
        code, report = cli_json("audit", src.root, dest)
        assert code == 1 and report["missing"] == 2

        # A local file the filters leave out is never deleted, even with --delete; changes
        # to excluded resources are skipped, the cursor moves on past them.
        (dest / "d").mkdir()
        (dest / "d" / "mine.log").write_bytes(b"my own")
        (src.data / "k" / "c.log").write_bytes(b"log 1, edited")
        (src.data / "k" / "b.txt").unlink()
        src.publish()
        src.recorder.reset()
        code, summary = cli_json("sync", src.root, dest, "--exclude", "*.log", "--delete")
        s = set_report(summary)
        assert code == 0 and (s["mode"], s["deleted"], s["excluded"]) == ("incremental", 1, 1)
        assert src.resource_gets() == {}
        assert tree(dest) == {"a.txt": b"alpha", "d/mine.log": b"my own"}
        # A baseline with --delete leaves it too.
        code, summary = cli_json(
            "sync", src.root, dest, "--exclude", "*.log", "--delete", "--baseline"
        )
        assert code == 0 and tree(dest) == {"a.txt": b"alpha", "d/mine.log": b"my own"}

    only = tmp_path / "only"
    with published_source(tmp_path / "two", FILES) as src:
        code, summary = cli_json("sync", src.root, only, "--include", "k/*")
        assert code == 0 and set_report(summary)["excluded"] == 2
        assert tree(only) == {"k/b.txt": b"beta", "k/c.log": b"log 1"}


def test_a_copy_synced_with_other_filters_than_it_was_made_with_is_compared_again(
    tmp_path: Path,
) -> None:
    """A copy made with `--exclude '*.log'`, synced without it: the logs it left out were never
    fetched, and no Change List lists them — the incremental run said ok over a copy missing
    them (only `audit` told). The filters a copy's baseline was made with are remembered; a
    run with others that may take more compares the copy with the Resource List, as a
    baseline (what it holds is not fetched again), and says why."""
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES) as src:
        assert cli("sync", src.root, dest, "--exclude", "*.log").exit_code == 0
        code, summary = cli_json("sync", src.root, dest, "--exclude", "*.log")
        assert code == 0 and set_report(summary)["mode"] == "incremental", summary
        src.recorder.reset()
        code, summary = cli_json("sync", src.root, dest)
        s = set_report(summary)
        assert code == 0 and (s["mode"], s["fetched"]) == ("baseline", 2), summary
        assert src.resource_gets() == {"/k/c.log": 1, "/d/e.log": 1}
        warned = [p["message"] for p in s["problems"]]
        assert any("made with --exclude '*.log', this run has none" in m for m in warned)
        assert tree(dest) == FILES
        assert cli("audit", src.root, dest).exit_code == 0
        code, summary = cli_json("sync", src.root, dest)  # remembered: incremental again
        assert code == 0 and set_report(summary)["mode"] == "incremental", summary
        # Narrowed (more left out): incremental, what they leave out passed by — so a run
        # that takes it again compares the copy again.
        (src.data / "d" / "e.log").write_bytes(b"log 2, edited")
        src.publish()
        code, summary = cli_json("sync", src.root, dest, "--include", "k/*", "--delete")
        s = set_report(summary)
        assert code == 0 and (s["mode"], s["fetched"], s["deleted"]) == ("incremental", 0, 0)
        assert tree(dest) == FILES
        code, summary = cli_json("sync", src.root, dest, "--exclude", "*.txt")
        s = set_report(summary)
        assert code == 0 and (s["mode"], s["fetched"]) == ("baseline", 1), summary
        assert tree(dest)["d/e.log"] == b"log 2, edited"


def test_backup_dir_keeps_what_is_replaced_or_deleted(tmp_path: Path) -> None:
    dest, backup = tmp_path / "dest", tmp_path / "backup"
    with published_source(tmp_path, FILES) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        (src.data / "a.txt").write_bytes(b"alpha 2")
        (src.data / "k" / "b.txt").unlink()
        src.publish()
        code, summary = cli_json("sync", src.root, dest, "--delete", "--backup-dir", backup)
        assert code == 0, summary
        assert tree(dest) == {"a.txt": b"alpha 2", "k/c.log": b"log 1", "d/e.log": b"log 2"}
        assert tree(backup) == {"a.txt": b"alpha", "k/b.txt": b"beta"}
        # Again: an older backup of the same file is replaced by the newer one.
        (src.data / "a.txt").write_bytes(b"alpha 3")
        src.publish()
        assert cli("sync", src.root, dest, "--backup-dir", backup).exit_code == 0
        assert tree(backup)["a.txt"] == b"alpha 2" and tree(dest)["a.txt"] == b"alpha 3"
        # Inside the copy it would be synced and audited as part of it: refused, one line.
        result = cli("sync", src.root, dest, "--backup-dir", dest / "old")
        assert result.exit_code == 2
        assert result.stderr.count("\n") == 1 and "must not overlap the copy" in result.stderr


def test_from_starts_an_incremental_run_at_the_given_time(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES) as src:
        time.sleep(0.01)
        between = datetime.now(UTC)
        time.sleep(0.01)
        (src.data / "a.txt").write_bytes(b"alpha 2")
        (src.data / "n.txt").write_bytes(b"new")
        src.publish()
        # A copy made by other means as of `between`: only what changed after it is fetched.
        code, summary = cli_json("sync", src.root, dest, "--from", between.isoformat())
        s = set_report(summary)
        assert code == 0 and (s["mode"], s["fetched"]) == ("incremental", 2), summary
        assert tree(dest) == {"a.txt": b"alpha 2", "n.txt": b"new"}
        assert src.resource_gets() == {"/a.txt": 1, "/n.txt": 1}
        # The cursor is kept: the next run goes on from there.
        code, summary = cli_json("sync", src.root, dest)
        assert code == 0 and set_report(summary)["fetched"] == 0
        result = cli("sync", src.root, dest, "--from", "yesterday")
        assert result.exit_code == 2 and "not a W3C datetime" in result.stderr
        result = cli("sync", src.root, dest, "--from", between.isoformat(), "--baseline")
        assert result.exit_code == 2 and "--from starts an incremental run" in result.stderr


def test_log_file_records_every_change_problem_and_summary(tmp_path: Path) -> None:
    dest, log = tmp_path / "dest", tmp_path / "logs" / "sync.log"
    log.parent.mkdir()
    with published_source(tmp_path, FILES) as src:
        assert cli("sync", src.root, dest, "-q", "--log-file", log).exit_code == 0
        (src.data / "a.txt").write_bytes(b"alpha 2")
        src.publish()
        assert cli("sync", src.root, dest, "--json", "--log-file", log).exit_code == 0
    lines = log.read_text().splitlines()
    assert all(line[:4].isdigit() and "T" in line.split(" ")[0] for line in lines)
    text = "\n".join(lines)
    assert text.count("+ created") == 4 and text.count("* updated") == 1
    assert "baseline via lists: fetched 4" in text and "incremental via lists: fetched 1" in text
    assert text.count(" ok in ") == 2
    result = cli("sync", "http://127.0.0.1:9/", dest, "--log-file", tmp_path / "no" / "x.log")
    assert result.exit_code == 2 and "cannot open the log file" in result.stderr


def test_bwlimit_spaces_the_bytes_of_all_transfers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget is shared: 4 transfers of 10 chunks of 25 KB at 100 KB/s ask to wait, in
    all, what 1 MB takes at that rate (less the first chunk), whatever their interleaving."""
    clock = [1000.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr(http.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(http.asyncio, "sleep", sleep)
    budget = Bandwidth(100_000)

    async def transfer() -> None:
        for _ in range(10):
            await budget.take(25_000)

    async def all_of_them() -> None:
        await asyncio.gather(*(transfer() for _ in range(4)))

    asyncio.run(all_of_them())
    # The last chunk may start at 9.75 s: 39 chunks of 0.25 s before it.
    assert clock[0] - 1000.0 == pytest.approx(9.75)
    with pytest.raises(ValueError):
        Bandwidth(0)


def test_bwlimit_on_the_command_line(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES) as src:
        code, summary = cli_json("sync", src.root, dest, "--bwlimit", "1M")
        assert code == 0 and tree(dest) == FILES, summary
        result = cli("sync", src.root, dest, "--bwlimit", "fast")
        assert result.exit_code == 2 and "--bwlimit" in result.stderr
