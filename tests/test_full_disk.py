"""A disk that fills up during `publish` or `sync` (issue 17.17): one line naming what could not
be written, exit 1, nothing half-written, and the next run — with room again — completes.

A full disk is played by RLIMIT_FSIZE in the child process (SIGXFSZ ignored, so a write past
the limit fails with EFBIG and SQLite reports an I/O error): no root, no tmpfs needed, and the
same code paths as ENOSPC — the OSError of a file write, the OperationalError of SQLite."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

from resourcesync.sitemap import read_document
from tests.destination.helpers import cli, entry, hand_source, tree


def limited(limit: int, *args: str) -> subprocess.CompletedProcess[str]:
    def cap() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "resourcesync", *args],
        preexec_fn=cap,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_publish_on_a_full_disk_says_so_and_the_next_run_completes(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    for i in range(3000):
        (data / f"f{i:05}.txt").write_text("x" * 50)
    args = ("publish", str(data), "--out", str(out), "--base-url", "http://example.org/")
    result = limited(300_000, *args)
    assert result.returncode == 1, result.stderr
    line = _one_line(result.stderr)
    assert "free some space and run again" in line
    # The state database is the file that grows first here, and is named (SQLite's error
    # names none).
    state = out / ".resourcesync" / "resourcesync.sqlite"
    assert line.startswith(f"resourcesync: cannot write the state database {state} ("), line
    # Nothing was published half-way: no Resource List, or none naming a file it lacks.
    rl = out / "resourcesync" / "resourcelist.xml"
    assert not rl.exists()
    assert cli(*args).exit_code == 0
    _, entries = read_document(rl)
    assert len(entries) == 3000


def test_publish_of_several_sets_on_a_full_disk_names_the_state_it_was_writing(
    tmp_path: Path,
) -> None:
    """A process that opened several state databases (a publish of several sets) said "a
    state database": the one open when the disk refused is named."""
    out = tmp_path / "out"
    for name, count in (("small", 3), ("large", 3000)):
        (tmp_path / name).mkdir()
        for i in range(count):
            (tmp_path / name / f"f{i:05}.txt").write_text("x" * 50)
    config = tmp_path / "resourcesync.toml"
    config.write_text(
        'out = "out"\n'
        + "".join(
            f'[[set]]\nname = "{n}"\ndir = "{n}"\nbase_url = "http://example.org/data/{n}/"\n'
            for n in ("small", "large")
        )
    )
    result = limited(300_000, "publish", "--config", str(config))
    assert result.returncode == 1, result.stderr
    line = _one_line(result.stderr)
    state = out / ".resourcesync" / "large.sqlite"
    assert line.startswith(f"resourcesync: cannot write the state database {state} ("), line
    assert cli("publish", "--config", config).exit_code == 0


def test_sync_on_a_full_disk_reports_and_the_next_run_completes(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    big = os.urandom(400_000)
    with hand_source() as src:
        b = src.base
        src.files["/small.txt"] = b"small"
        src.files["/big.bin"] = big
        src.publish([entry(b, "/small.txt", b"small"), entry(b, "/big.bin", big)])
        result = limited(300_000, "sync", b, str(dest))
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr
        problems = [line for line in result.stderr.splitlines() if "big.bin" in line]
        assert problems and "File too large" in problems[0], result.stderr
        assert not [p for p in dest.rglob("*.part")]
        assert tree(dest) == {"small.txt": b"small"}
        assert cli("sync", b, dest).exit_code == 0
        assert tree(dest) == {"small.txt": b"small", "big.bin": big}

        # The state database itself cannot grow: one line, exit 1.
        many = {f"/m{i:05}.txt": b"m" for i in range(1200)}
        src.files.update(many)
        src.publish([entry(b, path, body) for path, body in many.items()])
        result = limited(100_000, "sync", b, str(tmp_path / "other"))
        assert result.returncode == 1, result.stderr
        line = _one_line(result.stderr)
        assert "free some space and run again" in line
        assert line.startswith(f"resourcesync: cannot write the state database {tmp_path}/"), line
        assert cli("sync", b, tmp_path / "other").exit_code == 0
        assert len(tree(tmp_path / "other")) == 1200


def test_a_state_that_a_full_disk_will_not_let_open_is_a_full_disk_too(tmp_path: Path) -> None:
    """The disk full before the run begins: the state database cannot even be opened (its
    shared-memory file is the first thing written). Said as any full disk — one line, the
    state named, exit 1 as the README says — not as an input that could not be read (exit 2);
    for `publish` and `sync` alike, and the next run with room completes."""
    data, out, dest = tmp_path / "data", tmp_path / "out", tmp_path / "dest"
    data.mkdir()
    for i in range(20):
        (data / f"f{i:02}.txt").write_text(f"file {i}")
    publish = ("publish", str(data), "--out", str(out), "--base-url", "http://example.org/")
    assert cli(*publish).exit_code == 0
    with hand_source() as src:
        b = src.base
        src.files["/one.txt"] = b"one"
        src.publish([entry(b, "/one.txt", b"one")])
        assert cli("sync", b, dest).exit_code == 0
        for args, state in (
            (publish, out / ".resourcesync" / "resourcesync.sqlite"),
            (("sync", b, str(dest)), dest / ".resourcesync" / "state.sqlite"),
        ):
            result = limited(4096, *args)
            assert result.returncode == 1, result.stderr
            line = _one_line(result.stderr)
            # The database named in the sentence, once (not as the line's source).
            assert line.count(str(state)) == 1, line
            assert f"cannot write the state database {state} (" in line, line
            assert "free some space and run again" in line, line
            assert cli(*args).exit_code == 0


def test_a_fleet_copy_on_a_full_disk_is_that_sources_failure_said_plainly(
    tmp_path: Path,
) -> None:
    """In a fleet, the copy's state database refusing a write was "internal error:
    OperationalError('database or disk is full')"; it is said as `sync` says it, and the next
    run with room completes the copy."""
    from tests.fleet.helpers import csv_of, many_sources

    def files(i: int) -> dict[str, bytes]:
        return {f"d{k // 200}/r{k}.txt": f"resource {k} of source {i}".encode() for k in range(600)}

    root = tmp_path / "fleet"
    with many_sources(tmp_path, ["127.0.0.2"], files=files) as (sites, _):
        listing = tmp_path / "sources.csv"
        listing.write_text(csv_of(sites))
        assert cli("fleet", "import", listing, "--root", str(root)).exit_code == 0
        # Room for the fleet's own store (70 KB), not for the copy's state of 600 resources.
        once = ("fleet", "run", "--once", "--root", str(root), "--requests", "8")
        run = limited(120_000, *once)
        assert run.returncode == 1, run.stderr
        assert "Traceback" not in run.stderr and "internal error" not in run.stderr
        assert f"{sites[0].name}: FAILED: cannot write" in run.stderr
        assert "free some space and run again" in run.stderr
        again = cli(*once, "--all")
        assert again.exit_code == 0, again.stderr
        assert tree(root / sites[0].name) == sites[0].files()


WRITE_A_DOCUMENT = """
import sys
from resourcesync.errors import storage_failure
from resourcesync.model import Document, Resource
from resourcesync.sitemap.write import DocumentWriter
target, n = sys.argv[1], int(sys.argv[2])
try:
    with DocumentWriter(target, Document(capability="resourcelist")) as w:
        for i in range(n):
            w.write(Resource(loc=f"http://example.org/r/{i:08d}"))
except OSError as exc:
    print(storage_failure(exc)[0])
"""


def test_a_document_a_full_disk_refuses_is_named_in_what_is_said(tmp_path: Path) -> None:
    """A full disk refuses a `write` or a `flush`, which know only a descriptor: the document
    it was to be is named all the same (it was "cannot write: File too large"), whether the
    refusal comes as the entries are written (past the writer's buffer) or as it commits."""
    for entries in (3_000, 30_000):  # within the 1 MiB buffer: at the commit; past it: before
        target = tmp_path / f"docs-{entries}" / "resourcelist.xml"

        def cap() -> None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, 50_000))

        said = subprocess.run(
            [sys.executable, "-c", WRITE_A_DOCUMENT, str(target), str(entries)],
            preexec_fn=cap,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.strip()
        assert said == f"cannot write {target}: File too large: free some space and run again"
        assert list(target.parent.iterdir()) == []  # nothing half-written, no temporary file


def test_a_dump_package_a_full_disk_refuses_stops_the_run_naming_it(tmp_path: Path) -> None:
    """A package the disk will not take is the run's failure, said with the package's name —
    not its items said unreadable and left out of a package that goes on."""
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    for i in range(3):
        (data / f"big{i}.bin").write_bytes(os.urandom(400_000))  # (incompressible)
    args = (
        *("publish", str(data), "--out", str(out), "--base-url", "http://example.org/"),
        *("--capabilities", "resourcelist,resourcedump,changelist"),
    )
    result = limited(600_000, *args)
    assert result.returncode == 1, result.stderr
    line = _one_line(result.stderr)
    assert line.startswith(f"resourcesync: cannot write {out}/resourcesync/resourcedumps/"), line
    assert line.endswith("package-00001.zip: File too large: free some space and run again")
    assert not list(out.rglob("*.zip")) and not list(out.rglob(".*.tmp"))
    assert cli(*args).exit_code == 0
    _, packages = read_document(out / "resourcesync" / "resourcedump.xml")
    assert len(packages) == 1 and packages[0].length is not None
    assert packages[0].length > 1_200_000
