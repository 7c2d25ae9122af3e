"""Files a run put in place and died before recording (its records are written in batches,
after the files). Fetched again by the next run while the Source lists them, they were
harmless; one the Source deleted meanwhile stayed for good: its deletion was refused (this
copy never recorded it, issue 17.10), forgotten, and every later run said ok over the extra
file — found by the Destination's random walk with a sync SIGKILLed at random. The run after
one that died now removes the files its journal names that the state does not hold."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from resourcesync.destination.state import DestinationState
from resourcesync.destination.sync import SyncOptions, sync
from tests.destination.helpers import cli, published_source


class Died(Exception):
    """Stands for SIGKILL: the records of the files just put in place are never written."""


class DiesBeforeRecording(DestinationState):
    def record_many(self, rows: list[tuple[Any, ...]]) -> None:
        if rows:
            raise Died


def _dies(src: Any, dest: Path) -> None:
    with pytest.raises(Died):
        sync(src.root, dest, SyncOptions(delete=True, state=DiesBeforeRecording))


def test_a_file_written_and_not_recorded_then_deleted_at_the_source_goes(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"a.txt": b"alpha"}) as src:
        assert cli("sync", src.root, dest, "--delete").exit_code == 0
        (src.data / "new.txt").write_bytes(b"new")
        src.publish()
        _dies(src, dest)
        assert (dest / "new.txt").read_bytes() == b"new"  # in place, never recorded
        (src.data / "new.txt").unlink()
        src.publish()
        result = cli("sync", src.root, dest, "--delete")
        assert result.exit_code == 0, result.output
        assert not (dest / "new.txt").exists()
        assert cli("audit", src.root, dest).exit_code == 0


def test_a_first_baseline_that_died_leaves_nothing_the_source_no_longer_lists(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"a.txt": b"alpha", "b.txt": b"bravo"}) as src:
        _dies(src, dest)
        (src.data / "b.txt").unlink()
        src.publish()
        result = cli("sync", src.root, dest, "--delete")
        assert result.exit_code == 0, result.output
        assert sorted(p.name for p in dest.iterdir() if p.name != ".resourcesync") == ["a.txt"]
        assert cli("audit", src.root, dest).exit_code == 0


def test_what_was_changed_since_or_recorded_is_kept(tmp_path: Path) -> None:
    """Only the bytes the run wrote, at a place the state does not hold, are removed: a file
    edited since is kept (and its deletion refused, as before); a recorded one is the plan's."""
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"a.txt": b"alpha"}) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        (src.data / "a.txt").write_bytes(b"alpha 2")
        (src.data / "mine.txt").write_bytes(b"theirs")
        src.publish()
        _dies(src, dest)
        (dest / "mine.txt").write_bytes(b"mine now")
        (src.data / "mine.txt").unlink()
        src.publish()
        result = cli("sync", src.root, dest, "--delete")
        assert result.exit_code == 1  # mine.txt: not deleted, said
        assert "never held" in result.output
        assert (dest / "mine.txt").read_bytes() == b"mine now"
        assert (dest / "a.txt").read_bytes() == b"alpha 2"
        assert (dest / ".resourcesync" / "written").read_bytes() == b""


def test_a_new_version_written_and_not_recorded_is_not_kept_for_the_old(tmp_path: Path) -> None:
    """The run that died had replaced a file the state records (alpha) with the Source's
    next version (ALPHA, the same size); the Source then went back to alpha. Without times a
    size is all a plan looks at: ALPHA passed for the alpha recorded, under an ok."""
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"a.txt": b"alpha"}) as src:
        assert cli("sync", src.root, dest, "--no-times").exit_code == 0
        (src.data / "a.txt").write_bytes(b"ALPHA")
        src.publish()
        with pytest.raises(Died):
            sync(src.root, dest, SyncOptions(preserve_times=False, state=DiesBeforeRecording))
        assert (dest / "a.txt").read_bytes() == b"ALPHA"
        (src.data / "a.txt").write_bytes(b"alpha")
        src.publish()
        result = cli("sync", src.root, dest, "--no-times")
        assert result.exit_code == 0, result.output
        assert (dest / "a.txt").read_bytes() == b"alpha"
        assert cli("audit", src.root, dest).exit_code == 0


def test_the_journal_never_leads_a_removal_out_of_the_copy(tmp_path: Path) -> None:
    """Whoever can write DEST can edit the journal: a line naming a file outside the copy
    (directly, through `..`, through a link in DEST, or in the state folder) removes
    nothing, even with the file's own md5."""
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"a.txt": b"alpha"}) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        outside = tmp_path / "outside"
        outside.mkdir()
        victim = outside / "precious.txt"
        victim.write_bytes(b"precious")
        (dest / "link").symlink_to(outside)
        state = dest.resolve() / ".resourcesync"
        (state / "keep.txt").write_bytes(b"precious")
        md5 = hashlib.md5(b"precious").hexdigest()
        lines = [
            f"{md5} {victim}",
            f"{md5} {dest.resolve()}/../outside/precious.txt",
            f"{md5} {dest.resolve()}/link/precious.txt",
            f"{md5} {state}/keep.txt",
        ]
        (state / "written").write_text("\n".join(lines) + "\n")
        assert cli("sync", src.root, dest).exit_code == 0
        assert victim.read_bytes() == b"precious"
        assert (state / "keep.txt").read_bytes() == b"precious"
        assert (state / "written").read_bytes() == b""
