import os
import stat
from pathlib import Path

import pytest

from resourcesync.atomic import AtomicFile, replace_unless_same
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


def test_keep_same_leaves_a_file_of_the_same_bytes_as_it_was(tmp_path: Path) -> None:
    target = tmp_path / "doc.xml"
    target.write_bytes(b"x" * 300_000 + b"end")
    os.utime(target, (1_000_000_000, 1_000_000_000))
    before = target.stat()
    with AtomicFile(target, keep_same=True) as f:
        f.write(b"x" * 300_000 + b"end")
    after = target.stat()
    assert not f.committed
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert os.listdir(tmp_path) == ["doc.xml"]
    # Other bytes of the same size (past the first block compared), other sizes, no file yet:
    # written as always.
    for data in (b"x" * 300_000 + b"END", b"shorter", b"x" * 300_000 + b"end"):
        with AtomicFile(target, keep_same=True) as f:
            f.write(data)
        assert f.committed and target.read_bytes() == data
        assert target.stat().st_mtime_ns != before.st_mtime_ns
        os.utime(target, (1_000_000_000, 1_000_000_000))
    target.unlink()
    with AtomicFile(target, keep_same=True) as f:
        f.write(b"new")
    assert f.committed and target.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["doc.xml"]


def test_replace_unless_same(tmp_path: Path) -> None:
    target, new = tmp_path / "doc.xml", tmp_path / ".doc.xml.staged"
    target.write_bytes(b"same")
    new.write_bytes(b"same")
    inode = target.stat().st_ino
    assert not replace_unless_same(new, target)
    assert not new.exists() and target.stat().st_ino == inode
    new.write_bytes(b"diff")
    assert replace_unless_same(new, target)
    assert not new.exists() and target.read_bytes() == b"diff"


def test_keep_same_replaces_a_symbolic_link_whatever_it_points_to(tmp_path: Path) -> None:
    elsewhere, target = tmp_path / "elsewhere.xml", tmp_path / "doc.xml"
    elsewhere.write_bytes(b"same")
    target.symlink_to(elsewhere)
    with AtomicFile(target, keep_same=True) as f:
        f.write(b"same")
    assert f.committed and not target.is_symlink() and target.read_bytes() == b"same"
