import os
import stat
from pathlib import Path

import pytest

from resourcesync.atomic import AtomicFile
from resourcesync.errors import ResourceSyncError


def test_commit_replaces_and_keeps_the_mode(tmp_path: Path) -> None:
    target = tmp_path / "doc.xml"
    target.write_bytes(b"old")
    os.chmod(target, 0o600)
    with AtomicFile(target) as f:
        f.write(b"new")
        assert target.read_bytes() == b"old"  # nothing visible before the commit
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["doc.xml"]


def test_an_exception_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "doc.xml"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), AtomicFile(target, fsync=True) as f:
        f.write(b"half")
        raise RuntimeError("boom")
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["doc.xml"]


def test_missing_directories_are_an_error_unless_asked_for(tmp_path: Path) -> None:
    with pytest.raises(ResourceSyncError, match="cannot write"):
        AtomicFile(tmp_path / "no" / "dir" / "f")
    with AtomicFile(tmp_path / "a" / "b" / "f", make_parents=True) as f:
        f.write(b"x")
    assert (tmp_path / "a" / "b" / "f").read_bytes() == b"x"
    assert stat.S_IMODE((tmp_path / "a" / "b" / "f").stat().st_mode) == 0o644
