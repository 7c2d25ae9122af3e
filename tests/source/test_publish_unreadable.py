"""What a Source cannot see is not what it deleted.

A directory that cannot be listed (permissions, an I/O error, a stale NFS handle), a file that
cannot be looked at, a data directory whose filesystem is not mounted: `publish` used to
publish the deletion of everything in them, and every Destination following the deletions
emptied its copy of them. Unreadable parts now stay as they were published (a warning; the
next run looks again); a run that would delete every resource is refused unless
`--allow-empty`, and `--max-delete N` caps what one run may delete.

Permissions are real: as root, the command runs without the capabilities that let root read
anything (`setpriv`), so a mode of 000 stops it as it stops any user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.destination.helpers import cli


def _publish(data: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return _command(
        "publish", str(data), "--base-url", "http://example.org/", "--out", str(out), *extra
    )


def _command(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "resourcesync", *args]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("as root, needs setpriv (util-linux) to be refused a mode of 000")
        argv = [setpriv, "--bounding-set=-dac_override,-dac_read_search", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def _deleted(out: Path) -> int:
    return (out / "resourcesync" / "changelist.xml").read_text().count('change="deleted"')


def _tree(data: Path) -> None:
    for d in ("a", "b", "b/deep"):
        (data / d).mkdir(parents=True)
    for rel in ("a/1.txt", "a/2.txt", "b/1.txt", "b/deep/1.txt", "top.txt"):
        (data / rel).write_text(f"content of {rel}\n")


@pytest.mark.parametrize("listings", [True, False], ids=["listings", "whole-walk"])
def test_a_directory_that_cannot_be_read_stays_as_it_was_published(
    tmp_path: Path, listings: bool
) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    _tree(data)
    first = _publish(data, out)
    assert first.returncode == 0, first.stderr
    # Without listings to compare with (another hash: the state's listings are for md5 only),
    # the scan walks the whole tree and merges it with the snapshot: the other path.
    extra = () if listings else ("--hash", "md5,sha-256")
    (data / "b").chmod(0)
    try:
        run = _publish(data, out, *extra)
    finally:
        (data / "b").chmod(0o755)
    assert run.returncode == 0, run.stderr
    assert "b: Permission denied: kept as it was published" in run.stderr
    assert _deleted(out) == 0  # before: b/1.txt and b/deep/1.txt were published as deleted
    assert "5 resources" in run.stdout + run.stderr

    # Readable again: nothing changed, nothing to publish.
    again = _publish(data, out, *extra)
    assert again.returncode == 0, again.stderr
    assert _deleted(out) == 0 and "warning" not in again.stderr


def test_files_that_cannot_be_looked_at_stay_as_they_were_published(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    _tree(data)
    assert _publish(data, out).returncode == 0
    # Listed, but no name in it can be looked at (read without search permission).
    (data / "a").chmod(0o444)
    try:
        run = _publish(data, out)
    finally:
        (data / "a").chmod(0o755)
    assert run.returncode == 0, run.stderr
    assert "a/1.txt: Permission denied: kept as it was published" in run.stderr
    assert _deleted(out) == 0


def test_a_run_that_would_delete_everything_is_refused(tmp_path: Path) -> None:
    """An empty data directory is what a filesystem that did not mount looks like."""
    data, out = tmp_path / "data", tmp_path / "out"
    _tree(data)
    assert cli("publish", data, "--base-url", "http://example.org/", "--out", out).exit_code == 0
    before = (out / "resourcesync" / "changelist.xml").read_bytes()
    shutil.rmtree(data)
    data.mkdir()
    for extra in ((), ("--dry-run",)):
        r = cli("publish", data, "--base-url", "http://example.org/", "--out", out, *extra)
        assert r.exit_code == 1, r.stderr
        assert "the 5 resources published before would all be deleted" in r.stderr
        assert "is its filesystem mounted?" in r.stderr and "--allow-empty" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        assert (out / "resourcesync" / "changelist.xml").read_bytes() == before

    ok = cli("publish", data, "--base-url", "http://example.org/", "--out", out, "--allow-empty")
    assert ok.exit_code == 0, ok.stderr
    assert _deleted(out) == 5


def test_max_delete_caps_the_deletions_of_one_run(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    _tree(data)
    base = ("publish", data, "--base-url", "http://example.org/", "--out", out)
    assert cli(*base).exit_code == 0
    shutil.rmtree(data / "b")
    capped = cli(*base, "--max-delete", "1")
    assert capped.exit_code == 1
    assert "would publish 2 deletions, more than --max-delete 1" in capped.stderr
    assert _deleted(out) == 0
    allowed = cli(*base, "--max-delete", "2")
    assert allowed.exit_code == 0, allowed.stderr
    assert _deleted(out) == 2


def test_a_directory_under_one_that_cannot_be_searched_is_said_as_such(tmp_path: Path) -> None:
    """DIR below a directory this process may not search cannot even be looked at: one line
    that says so (it was "cannot write DIR/resourcesync: Permission denied", from the first
    check that met it), exit 2, nothing recorded; searchable again, the run publishes."""
    parent, out = tmp_path / "p", tmp_path / "out"
    data = parent / "data"
    _tree(data)
    assert _publish(data, out).returncode == 0
    (data / "a" / "3.txt").write_text("new\n")
    parent.chmod(0)
    try:
        run = _publish(data, out)
    finally:
        parent.chmod(0o755)
    assert run.returncode == 2
    assert run.stderr.splitlines() == [
        f"resourcesync: {data}: cannot be looked at (Permission denied): a directory above it "
        "cannot be searched"
    ]
    again = _publish(data, out)
    assert again.returncode == 0, again.stderr
    assert "1 created" in again.stdout + again.stderr


@pytest.mark.parametrize("command", ["ls", "audit", "serve"])
def test_a_command_that_only_reads_says_what_it_could_not_read(
    tmp_path: Path, command: str
) -> None:
    """`ls` and `audit` only read DEST, `serve` OUTDIR: one below a directory they may not
    search is said as what they could not read (it was "cannot write DEST")."""
    parent = tmp_path / "p"
    dest = parent / "dest"
    (dest / ".resourcesync").mkdir(parents=True)
    args = {
        "ls": [str(dest)],
        "audit": ["http://127.0.0.1:9/", str(dest)],
        "serve": [str(dest), "--port", "0"],
    }[command]
    parent.chmod(0)
    try:
        run = _command(command, *args)
    finally:
        parent.chmod(0o755)
    assert run.returncode == 2
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"resourcesync: cannot read {dest}"), lines
    assert lines[0].endswith(": Permission denied")
