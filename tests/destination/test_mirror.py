"""mirror.py: the one place a URI becomes a local path and bytes become a file.

Real files in tmp_path, real ZIP packages, real child processes killed with SIGKILL.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from resourcesync.destination.mirror import (
    IntegrityError,
    Mapping,
    Mirror,
    UnsafePath,
    Written,
)
from resourcesync.destination.paths import MAX_PATH_BYTES
from resourcesync.destination.unpack import extract
from resourcesync.errors import ResourceSyncError
from resourcesync.model import Resource

HOST = "http://host.example"


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    d = tmp_path / "dest"
    d.mkdir()
    return d


@pytest.fixture
def mirror(dest: Path) -> Mirror:
    return Mirror(dest, [Mapping(f"{HOST}/", dest)])


def put(mirror: Mirror, uri: str, data: bytes, **kw: object) -> Written:
    with mirror.incoming(uri, **kw) as inc:  # type: ignore[arg-type]
        inc.write(data)
    assert inc.written is not None
    return inc.written


def tree(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


# -- mapping: hosts, schemes, ports, prefixes ------------------------------------------------


def test_mapping_prefix_is_normalized() -> None:
    assert Mapping("HTTP://Host.Example:80/k1", Path("x")).prefix == "http://host.example/k1/"
    assert Mapping("https://h:443", Path("x")).prefix == "https://h/"
    assert Mapping("https://h:8443/a/", Path("x")).prefix == "https://h:8443/a/"
    assert Mapping("http://[::1]:8080/", Path("x")).prefix == "http://[::1]:8080/"
    for bad in ["ftp://h/", "/k1/", "http://u:p@h/", "http://h/?q", "http://h/a/../b/", "h/"]:
        with pytest.raises(ResourceSyncError):
            Mapping(bad, Path("x"))


def test_percent_decoded_file_names(mirror: Mirror, dest: Path) -> None:
    assert mirror.path_for(f"{HOST}/k1/item%201.txt") == dest / "k1" / "item 1.txt"
    assert mirror.relpath(f"{HOST}/k1/item%201.txt") == "k1/item 1.txt"
    assert mirror.path_for(f"{HOST}/caf%C3%A9/%E6%97%A5.txt") == dest / "café" / "日.txt"
    assert mirror.path_for(f"{HOST}/raw/café") == dest / "raw" / "café"


@pytest.mark.parametrize(
    "uri",
    [
        "HTTP://HOST.EXAMPLE/a",
        "http://Host.Example:80/a",
        "http://host.example:80/a",
    ],
)
def test_scheme_host_and_default_port_compare_equal(mirror: Mirror, dest: Path, uri: str) -> None:
    assert mirror.path_for(uri) == dest / "a"


@pytest.mark.parametrize(
    "uri",
    [
        "https://host.example/a",  # other scheme
        "http://host.example:8080/a",  # other port
        "http://host.example:443/a",  # https's default port is not http's
        "http://other.example/a",  # other host
        "http://host.example.evil/a",
        "ftp://host.example/a",
        "file:///etc/passwd",
        "/a",
        "a/b",
        "",
        "http://host.example:notaport/a",
    ],
)
def test_uris_no_mapping_covers_are_refused(mirror: Mirror, uri: str) -> None:
    with pytest.raises(UnsafePath) as e:
        mirror.path_for(uri)
    assert e.value.source == uri


def test_https_default_port(dest: Path) -> None:
    m = Mirror(dest, [Mapping("https://h/", dest)])
    assert m.path_for("https://h:443/x") == dest / "x"
    with pytest.raises(UnsafePath, match="no mapping"):
        m.path_for("https://h:80/x")


def test_userinfo_is_refused(mirror: Mirror) -> None:
    with pytest.raises(UnsafePath, match="userinfo"):
        mirror.path_for("http://user@host.example/a")
    with pytest.raises(UnsafePath, match="userinfo"):
        mirror.path_for("http://user:pw@host.example/a")


def test_longest_prefix_wins_and_last_duplicate_overrides(tmp_path: Path, dest: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    m = Mirror(
        dest,
        [
            Mapping(f"{HOST}/", dest),
            Mapping(f"{HOST}/k1/", Path("one")),  # relative: under DEST
            Mapping(f"{HOST}/k1/deep/", elsewhere),
            Mapping(f"{HOST}/k2/", Path("first")),
            Mapping(f"{HOST}/k2/", Path("second")),
        ],
    )
    assert m.path_for(f"{HOST}/k1/a") == dest / "one" / "a"
    assert m.path_for(f"{HOST}/k1/deep/a") == elsewhere / "a"
    assert m.path_for(f"{HOST}/k1deep/a") == dest / "k1deep" / "a"
    assert m.path_for(f"{HOST}/k2/a") == dest / "second" / "a"
    assert m.path_for(f"{HOST}/x") == dest / "x"
    assert m.relpath(f"{HOST}/k1/deep/a") == (elsewhere / "a").as_posix()
    # The prefix is matched segment by segment after decoding.
    assert m.path_for(f"{HOST}/k%31/a") == dest / "one" / "a"


def test_a_mapping_covers_only_below_its_prefix(dest: Path) -> None:
    m = Mirror(dest, [Mapping(f"{HOST}/k1/", dest / "k1")])
    assert m.path_for(f"{HOST}/k1/") == dest / "k1" / "index.html"
    for uri in [f"{HOST}/k1", f"{HOST}/k10/a", f"{HOST}/", f"{HOST}/k2/a"]:
        with pytest.raises(UnsafePath, match="no mapping covers"):
            m.path_for(uri)


def test_mapping_into_the_state_directory_is_refused(dest: Path) -> None:
    with pytest.raises(ResourceSyncError, match="state directory"):
        Mirror(dest, [Mapping(f"{HOST}/", dest / ".resourcesync" / "x")])


# -- traversal and hostile names -------------------------------------------------------------

TRAVERSALS = [
    "../etc/passwd",
    "a/../../etc/passwd",
    "..",
    ".",
    "a/./b",
    "a/..",
    "%2e%2e/etc/passwd",
    "%2E%2E/etc/passwd",
    ".%2e/etc/passwd",
    "%2e./etc/passwd",
    ".%2E/x",
    "a/%2e/b",
    "a/%2e",
    "..%2fetc%2fpasswd",
    "..%2Fetc",
    "a%2f..%2f..%2fb",
    "..%5cetc",
    "a%5Cb",
    "a\\b",
    "..\\..\\etc",
    "a%00b",
    "a/%00",
    "a%0ab",
    "a%0d",
    "a%1fb",
    "a%7fb",
    "a%c2%9bb",  # C1 control (CSI)
    "a//b",
    "/a",  # the URI path becomes //a: a leading empty segment
    "%",
    "a%zz",
    "a%2",
    "%ff",  # not UTF-8
    "%c3",  # truncated UTF-8
    "%ed%a0%80",  # an encoded surrogate
]


@pytest.mark.parametrize("rest", TRAVERSALS)
def test_traversal_and_hostile_segments_are_refused(mirror: Mirror, dest: Path, rest: str) -> None:
    uri = f"{HOST}/{rest}"
    with pytest.raises(UnsafePath) as e:
        mirror.path_for(uri)
    assert e.value.source == uri
    assert uri in str(e.value)
    with pytest.raises(UnsafePath):
        mirror.incoming(uri)
    assert tree(dest) == []


@pytest.mark.parametrize("raw", ["a\nb", "a\tb", "a\rb", "a\x00b", "\x01a", "a\x7f"])
def test_raw_control_characters_are_refused(mirror: Mirror, raw: str) -> None:
    # urlsplit would silently drop tabs and newlines: the URI is refused before it sees them.
    with pytest.raises(UnsafePath, match=r"control character|NUL"):
        mirror.path_for(f"{HOST}/{raw}")


def test_double_encoding_decodes_once(mirror: Mirror, dest: Path) -> None:
    assert mirror.path_for(f"{HOST}/%252e%252e/x") == dest / "%2e%2e" / "x"
    assert mirror.path_for(f"{HOST}/a%252fb") == dest / "a%2fb"
    put(mirror, f"{HOST}/%252e%252e/x", b"plain name")
    assert (dest / "%2e%2e" / "x").read_bytes() == b"plain name"


def test_harmless_dots_are_names(mirror: Mirror, dest: Path) -> None:
    assert mirror.path_for(f"{HOST}/...") == dest / "..."
    assert mirror.path_for(f"{HOST}/..a") == dest / "..a"
    assert mirror.path_for(f"{HOST}/.hidden") == dest / ".hidden"
    assert mirror.path_for(f"{HOST}/a.part") == dest / "a.part"


def test_names_like_our_temporary_files_are_refused(mirror: Mirror) -> None:
    with pytest.raises(UnsafePath, match="temporary"):
        mirror.path_for(f"{HOST}/d/.x.0123abcd.part")


def test_the_state_directory_is_never_mapped(mirror: Mirror, dest: Path) -> None:
    for rest in [
        ".resourcesync/state.sqlite",
        ".resourcesync/",
        "%2eresourcesync/x",
        ".resourcesync",
    ]:
        with pytest.raises(UnsafePath):
            mirror.path_for(f"{HOST}/{rest}")
    # A sibling name is not the state; elsewhere in the tree the name is an ordinary directory.
    assert mirror.path_for(f"{HOST}/.resourcesync?x") == dest / ".resourcesync?x"
    assert mirror.path_for(f"{HOST}/a/.resourcesync/x") == dest / "a" / ".resourcesync" / "x"


def test_state_directory_behind_a_symlink_is_refused(mirror: Mirror, dest: Path) -> None:
    (dest / ".resourcesync").mkdir()
    os.symlink(dest / ".resourcesync", dest / "link")
    with pytest.raises(UnsafePath, match="state"):
        mirror.path_for(f"{HOST}/link/state.sqlite")


def test_long_names_and_paths(mirror: Mirror, dest: Path) -> None:
    assert mirror.path_for(f"{HOST}/{'a' * 255}") == dest / ("a" * 255)
    with pytest.raises(UnsafePath, match="255 bytes"):
        mirror.path_for(f"{HOST}/{'a' * 256}")
    # 128 two-byte characters are 256 bytes.
    with pytest.raises(UnsafePath, match="255 bytes"):
        mirror.path_for(f"{HOST}/{'%C3%A9' * 128}")
    with pytest.raises(UnsafePath, match="255 bytes"):
        mirror.path_for(f"{HOST}/{'a' * 250}?{'q' * 10}")
    with pytest.raises(UnsafePath, match="4096 bytes"):
        mirror.path_for(f"{HOST}/" + "/".join(["b" * 200] * 21))
    # A relative path within the 4,096-byte limit whose absolute path (DEST + temporary name)
    # is not: built to the byte, so it does not depend on how long DEST's own path is.
    segments = ["b" * 200] * 20
    segments.append("c" * (MAX_PATH_BYTES - 4 - len("/".join(segments)) - 1))
    assert len("/".join(segments)) == MAX_PATH_BYTES - 4
    with pytest.raises(UnsafePath, match="too long"):
        mirror.path_for(f"{HOST}/" + "/".join(segments))


def test_a_long_name_gets_a_temporary_name_that_fits(mirror: Mirror, dest: Path) -> None:
    name = "é" * 127  # 254 bytes
    w = put(mirror, f"{HOST}/{name}", b"x")
    assert w.path.read_bytes() == b"x"
    assert os.listdir(dest) == [name]


def test_index_html_query_and_fragment(mirror: Mirror, dest: Path) -> None:
    assert mirror.path_for(f"{HOST}/") == dest / "index.html"
    assert mirror.path_for(HOST) == dest / "index.html"
    assert mirror.path_for(f"{HOST}/docs/") == dest / "docs" / "index.html"
    assert mirror.path_for(f"{HOST}/a?b=1&c=%20") == dest / "a?b=1&c=%20"
    assert mirror.path_for(f"{HOST}/a?p=x/y/../z") == dest / "a?p=x%2Fy%2F..%2Fz"
    assert mirror.path_for(f"{HOST}/docs/?page=2") == dest / "docs" / "index.html?page=2"
    assert mirror.path_for(f"{HOST}/a#frag") == dest / "a"
    assert mirror.path_for(f"{HOST}/a?q#frag") == dest / "a?q"
    with pytest.raises(UnsafePath, match="backslash"):
        mirror.path_for(f"{HOST}/a?x\\y")


def test_symlink_planted_in_dest_does_not_redirect_writes(
    tmp_path: Path, mirror: Mirror, dest: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, dest / "k1")
    with pytest.raises(UnsafePath, match="symlink"):
        mirror.path_for(f"{HOST}/k1/x")
    with pytest.raises(UnsafePath, match="symlink"):
        mirror.incoming(f"{HOST}/k1/sub/x")
    # A mapping whose own directory is the planted symlink is refused too.
    m = Mirror(dest, [Mapping(f"{HOST}/k1/", dest / "k1")])
    with pytest.raises(UnsafePath, match="symlink out of DEST"):
        m.path_for(f"{HOST}/k1/x")
    # The final component as a symlink to a file outside: not read, not written through.
    (outside / "secret").write_bytes(b"secret")
    os.symlink(outside / "secret", dest / "leak")
    with pytest.raises(UnsafePath, match="symlink"):
        mirror.local_digests(f"{HOST}/leak", ["md5"])
    assert list(outside.iterdir()) == [outside / "secret"]
    assert (outside / "secret").read_bytes() == b"secret"


def test_symlink_inside_the_mapping_is_followed(mirror: Mirror, dest: Path) -> None:
    (dest / "real").mkdir()
    os.symlink(dest / "real", dest / "alias")
    w = put(mirror, f"{HOST}/alias/x", b"data")
    assert w.path == dest / "alias" / "x"
    assert (dest / "real" / "x").read_bytes() == b"data"


def test_file_directory_conflicts(mirror: Mirror, dest: Path) -> None:
    put(mirror, f"{HOST}/a", b"file")
    with pytest.raises(UnsafePath, match="conflicts with an existing file"):
        mirror.path_for(f"{HOST}/a/b")
    with pytest.raises(UnsafePath, match="conflicts with an existing file"):
        mirror.path_for(f"{HOST}/a/")
    put(mirror, f"{HOST}/d/x", b"in d")
    with pytest.raises(UnsafePath, match="conflicts with an existing directory"):
        mirror.path_for(f"{HOST}/d")
    with pytest.raises(UnsafePath, match="conflicts with an existing directory"):
        mirror.delete(f"{HOST}/d")
    assert (dest / "a").read_bytes() == b"file"
    assert (dest / "d" / "x").read_bytes() == b"in d"


def test_conflicts_in_the_directories_a_run_made(mirror: Mirror, dest: Path) -> None:
    """In a directory the run created itself, a name is not looked at on the disk (only what
    the run put there can be there): a directory it made at a file's name is still refused
    before any request, and what someone else puts there is refused when it is written (a
    symlink replaced, never written through; a directory fails the rename)."""
    put(mirror, f"{HOST}/m/n/x", b"in n")
    with pytest.raises(UnsafePath, match="conflicts with an existing directory"):
        mirror.path_for(f"{HOST}/m/n")
    outside = dest.parent / "outside"
    outside.write_bytes(b"theirs")
    os.symlink(outside, dest / "m" / "n" / "link")
    put(mirror, f"{HOST}/m/n/link", b"ours")
    assert outside.read_bytes() == b"theirs"
    assert not (dest / "m" / "n" / "link").is_symlink()
    assert (dest / "m" / "n" / "link").read_bytes() == b"ours"
    (dest / "m" / "n" / "dir").mkdir()
    with pytest.raises(ResourceSyncError, match=r"cannot put .* in place"):
        put(mirror, f"{HOST}/m/n/dir", b"file")
    assert sorted(os.listdir(dest / "m" / "n")) == ["dir", "link", "x"]


# -- property: never outside ------------------------------------------------------------------

PIECES = st.sampled_from(
    [
        *["..", ".", "%2e", "%2E", "%2f", "%2F", "%5c", "\\", "/", "%00", "%", "?", "#", "a"],
        *["é", "%252e", "%c3", "%ff", ".resourcesync", "%2eresourcesync", "link", "file", ":", "@"],
    ]
)


def _check_inside(m: Mirror, uri: str, roots: list[Path]) -> None:
    try:
        path = m.path_for(uri)
    except UnsafePath:
        return
    real = os.path.realpath(path)
    assert os.path.normpath(path) == str(path)
    assert any(path.is_relative_to(r) and Path(real).is_relative_to(r) for r in roots), uri
    assert not Path(real).is_relative_to(m.state_dir), uri


SEGMENTS = st.lists(PIECES, min_size=1, max_size=4).map("".join)
PATHS = st.lists(SEGMENTS, max_size=6).map("/".join)


@settings(
    max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rest=st.text(max_size=60) | PATHS)
@example(rest="link/a")
@example(rest="%2e%2e/x")
@example(rest=".resourcesync/x")
def test_property_never_outside_the_mapping(tmp_path: Path, rest: str) -> None:
    dest = tmp_path / "prop"
    if not dest.exists():
        dest.mkdir()
        (dest / ".resourcesync").mkdir()
        (dest / "file").write_bytes(b"")
        (tmp_path / "out").mkdir()
        os.symlink(tmp_path / "out", dest / "link")
    m = Mirror(dest, [Mapping(f"{HOST}/", dest), Mapping(f"{HOST}/sub/", Path("sub"))])
    uri = f"{HOST}/{rest}"
    _check_inside(m, uri, [dest.resolve()])
    _check_inside(m, f"{HOST}/sub/{rest}", [dest.resolve() / "sub"])


def _mapping_of(m: Mirror, uri: str) -> tuple[str, str] | str:
    try:
        path, root = m._uris._map_unchecked(uri)
    except UnsafePath as exc:
        return exc.message
    return str(path), root.mapping.prefix


NAMES = st.lists(PIECES | st.sampled_from(["x.txt", "a b", "~", "f" * 250, ".f.0123abcd.part"]))


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(head=PATHS, names=st.lists(NAMES.map("".join), min_size=1, max_size=6))
@example(head="d", names=["a", "..", ".", "%41", "a?b", "a#b", "f" * 256, ".x.0123abcd.part"])
@example(head="sub", names=[".resourcesync", "x"])
@example(head="", names=[".resourcesync", "x"])
@example(head="a%2Fb", names=["x", "y"])
@example(head="very/" * 800 + "deep", names=["x", "y" * 200])
@example(head="/".join(["é" * 100] * 19 + ["a" * 81]), names=["x", "y" * 200])
def test_property_remembered_directories_map_as_the_full_mapping(
    tmp_path: Path, head: str, names: list[str]
) -> None:
    """The mapping remembers each directory of URIs it mapped, and maps another name in it
    from there: every URI maps (or is refused, with the same reason) as the whole mapping
    of the module docstring does it for a URI alone."""
    dest = tmp_path / "memo"
    roots = [Mapping(f"{HOST}/", dest), Mapping(f"{HOST}/sub/", Path("sub"))]
    warm = Mirror(dest, roots)
    for name in [*names, *names]:
        for uri in (f"{HOST}/{head}/{name}", f"{HOST}/sub/{head}/{name}"):
            assert _mapping_of(warm, uri) == _mapping_of(Mirror(dest, roots), uri), uri
    # A state directory mapped as a root of its own parent: refused by name as well.
    state_root = Mirror(dest, [Mapping(f"{HOST}/", dest)])
    for name in ("x", ".resourcesync", "y"):
        assert _mapping_of(state_root, f"{HOST}/{name}") == _mapping_of(
            Mirror(dest, [Mapping(f"{HOST}/", dest)]), f"{HOST}/{name}"
        )


# -- writing and integrity -------------------------------------------------------------------


def test_incoming_writes_and_reports_digests(mirror: Mirror, dest: Path) -> None:
    data = b"hello world\n" * 1000
    with mirror.incoming(
        f"{HOST}/k1/deep/item.txt",
        length=len(data),
        hashes={"sha-256": sha256(data), "x-unknown": "zz", "MD5": md5(data).upper()},
    ) as inc:
        for i in range(0, len(data), 777):
            inc.write(data[i : i + 777])
            assert not (dest / "k1" / "deep" / "item.txt").exists()
        parts = [p.name for p in (dest / "k1" / "deep").iterdir()]
        assert len(parts) == 1 and parts[0].startswith(".item.txt.") and parts[0].endswith(".part")
    w = inc.written
    assert w == Written(
        str(dest / "k1" / "deep" / "item.txt"),
        len(data),
        {"md5": md5(data), "sha-256": sha256(data)},
    )
    assert inc.commit() is w  # once
    assert w.path.read_bytes() == data
    assert os.listdir(dest / "k1" / "deep") == ["item.txt"]
    assert mirror.local_digests(f"{HOST}/k1/deep/item.txt", ["sha-1", "md5", "x-y"]) == (
        len(data),
        {"sha-1": hashlib.sha1(data).hexdigest(), "md5": md5(data)},
    )
    assert mirror.local_digests(f"{HOST}/absent", ["md5"]) is None


def test_local_digests_refuse_what_is_not_a_regular_file(mirror: Mirror, dest: Path) -> None:
    os.mkfifo(dest / "fifo")
    with pytest.raises(UnsafePath, match="not a regular file"):
        mirror.local_digests(f"{HOST}/fifo", ["md5"])


def test_an_empty_resource(mirror: Mirror, dest: Path) -> None:
    w = put(mirror, f"{HOST}/empty", b"", length=0, hashes={"md5": md5(b"")})
    assert w.length == 0 and (dest / "empty").read_bytes() == b""


GOOD = b"the good copy\n" * 100
NEW = b"a new version!\n" * 100


@pytest.mark.parametrize(
    "data, length, hashes, match",
    [
        (NEW[:-5], len(NEW), {}, "length: expected 1500 bytes, got 1495"),
        (NEW, len(NEW), {"md5": md5(b"other")}, f"md5: expected {md5(b'other')}, got {md5(NEW)}"),
        (
            NEW,
            None,
            {"sha-256": sha256(b"x"), "md5": md5(NEW)},
            f"sha-256: expected {sha256(b'x')}",
        ),
        (NEW, len(NEW), {"sha-1": "0" * 40}, "sha-1: expected 0000"),
    ],
)
def test_integrity_failures_keep_the_previous_file(
    mirror: Mirror,
    dest: Path,
    data: bytes,
    length: int | None,
    hashes: dict[str, str],
    match: str,
) -> None:
    put(mirror, f"{HOST}/k/r", GOOD)
    with pytest.raises(IntegrityError, match=match) as e:
        put(mirror, f"{HOST}/k/r", data, length=length, hashes=hashes)
    assert e.value.source == f"{HOST}/k/r"
    assert (dest / "k" / "r").read_bytes() == GOOD
    assert os.listdir(dest / "k") == ["r"]


def test_too_many_bytes_fail_at_once(mirror: Mirror, dest: Path) -> None:
    put(mirror, f"{HOST}/r", GOOD)
    inc = mirror.incoming(f"{HOST}/r", length=10)
    inc.write(b"0123456789")
    with pytest.raises(IntegrityError, match="more than the expected 10 bytes"):
        inc.write(b"x")
    assert os.listdir(dest) == ["r"]  # the temporary file is gone already
    assert (dest / "r").read_bytes() == GOOD
    with pytest.raises(ValueError):
        inc.write(b"y")


def test_a_short_write_is_written_to_its_end(
    mirror: Mirror, dest: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A piece the file system takes in parts (a signal, a pipe, a full quota's edge) is
    written whole: `os.write` may write fewer bytes than given."""
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real(fd, bytes(data)[:3]))
    body = b"a piece written three bytes at a time"
    put(mirror, f"{HOST}/r", body, length=len(body), hashes={"md5": md5(body)})
    assert (dest / "r").read_bytes() == body


def test_an_exception_in_the_block_aborts(mirror: Mirror, dest: Path) -> None:
    put(mirror, f"{HOST}/r", GOOD)
    with pytest.raises(RuntimeError), mirror.incoming(f"{HOST}/r") as inc:
        inc.write(b"half")
        raise RuntimeError("connection lost")
    assert os.listdir(dest) == ["r"]
    assert (dest / "r").read_bytes() == GOOD


def test_fsync_mode_writes_the_same(dest: Path) -> None:
    m = Mirror(dest, [Mapping(f"{HOST}/", dest)], fsync=True)
    put(m, f"{HOST}/a/b/c", b"durable", length=7)
    assert (dest / "a" / "b" / "c").read_bytes() == b"durable"
    assert m.delete(f"{HOST}/a/b/c") is True
    assert tree(dest) == []


def test_a_mapping_directory_is_created_when_needed(tmp_path: Path, dest: Path) -> None:
    m = Mirror(dest, [Mapping(f"{HOST}/k1/", Path("x/y/k1"))])
    put(m, f"{HOST}/k1/a", b"1")
    assert (dest / "x" / "y" / "k1" / "a").read_bytes() == b"1"


# -- dry run ---------------------------------------------------------------------------------


def test_dry_run_writes_nothing_but_reports(tmp_path: Path, dest: Path) -> None:
    (dest / "old").write_bytes(b"old")
    (dest / "d").mkdir()
    (dest / "d" / ".x.0123abcd.part").write_bytes(b"leftover")
    before = tree(dest)
    m = Mirror(dest, [Mapping(f"{HOST}/", dest)], dry_run=True)
    w = put(m, f"{HOST}/new/deep/file", b"data", length=4, hashes={"sha-256": sha256(b"data")})
    assert w == Written(
        str(dest / "new" / "deep" / "file"), 4, {"md5": md5(b"data"), "sha-256": sha256(b"data")}
    )
    with pytest.raises(IntegrityError):
        put(m, f"{HOST}/old", b"new", hashes={"md5": md5(b"other")})
    assert m.delete(f"{HOST}/old") is True
    assert m.delete(f"{HOST}/absent") is False
    assert m.cleanup() == 1
    assert tree(dest) == before
    assert (dest / "old").read_bytes() == b"old"


# -- delete ----------------------------------------------------------------------------------


def test_delete_prunes_empty_directories_up_to_the_mapping_root(dest: Path) -> None:
    m = Mirror(dest, [Mapping(f"{HOST}/", dest), Mapping(f"{HOST}/k/", Path("k"))])
    put(m, f"{HOST}/k/a/b/c/one", b"1")
    put(m, f"{HOST}/k/a/two", b"2")
    assert m.delete(f"{HOST}/k/a/b/c/one") is True
    assert tree(dest) == ["k", "k/a", "k/a/two"]
    assert m.delete(f"{HOST}/k/a/two") is True
    assert tree(dest) == ["k"]  # the mapping root stays
    assert m.delete(f"{HOST}/k/a/two") is False
    assert m.delete(f"{HOST}/k/never/was") is False
    with pytest.raises(UnsafePath):
        m.delete(f"{HOST}/k/../../etc/passwd")


def test_delete_removes_a_symlink_not_its_target(dest: Path, tmp_path: Path) -> None:
    (dest / "real").write_bytes(b"keep")
    os.symlink(dest / "real", dest / "alias")
    m = Mirror(dest, [Mapping(f"{HOST}/", dest)])
    assert m.delete(f"{HOST}/alias") is True
    assert (dest / "real").read_bytes() == b"keep"
    assert not (dest / "alias").exists()


# -- cleanup and kill -9 ---------------------------------------------------------------------


def test_cleanup_removes_only_our_leftovers(tmp_path: Path, dest: Path) -> None:
    other = tmp_path / "other"
    m = Mirror(dest, [Mapping(f"{HOST}/", dest), Mapping(f"{HOST}/o/", other)])
    put(m, f"{HOST}/a/keep.part", b"a real file")
    put(m, f"{HOST}/.hidden", b"a real dotfile")
    inc1 = m.incoming(f"{HOST}/a/b/x")
    inc1.write(b"partial")
    inc2 = m.incoming(f"{HOST}/o/y")
    inc2.write(b"partial")
    (dest / ".resourcesync").mkdir()
    (dest / ".resourcesync" / ".s.0123abcd.part").write_bytes(b"the state's business")
    assert m.cleanup() == 2
    assert tree(dest) == [
        ".hidden",
        ".resourcesync",
        ".resourcesync/.s.0123abcd.part",
        "a",
        "a/b",
        "a/keep.part",
    ]
    assert tree(other) == []
    assert m.cleanup() == 0


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from resourcesync.destination.mirror import Mapping, Mirror
    dest, mode = Path(sys.argv[1]), sys.argv[2]
    m = Mirror(dest, [Mapping("http://h/", dest)], fsync=mode == "fsync")
    uri = "http://h/k/res.bin"
    if mode == "stall":
        with m.incoming(uri) as inc:
            inc.write(b"N" * 100_000)
            print("writing", flush=True)
            time.sleep(60)
    else:
        i = 0
        while True:
            i += 1
            data = bytes([65 + i % 26]) * (i % 7 * 50_000 + 1)
            with m.incoming(uri, length=len(data)) as inc:
                for k in range(0, len(data), 10_000):
                    inc.write(data[k : k + 10_000])
            if i == 1:
                print("started", flush=True)
    """
)


def _child(dest: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(dest), mode], stdout=subprocess.PIPE, text=True
    )


def test_kill_9_mid_write_leaves_the_old_file(dest: Path) -> None:
    m = Mirror(dest, [Mapping("http://h/", dest)])
    put(m, "http://h/k/res.bin", GOOD)
    child = _child(dest, "stall")
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "writing"
    parts = [p for p in (dest / "k").iterdir() if p.name != "res.bin"]
    assert len(parts) == 1 and parts[0].stat().st_size == 100_000
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert (dest / "k" / "res.bin").read_bytes() == GOOD
    assert m.cleanup() == 1
    assert os.listdir(dest / "k") == ["res.bin"]


@pytest.mark.parametrize("mode", ["plain", "fsync"])
def test_kill_9_at_random_moments_never_leaves_a_partial_file(dest: Path, mode: str) -> None:
    m = Mirror(dest, [Mapping("http://h/", dest)])
    for delay in (0.0, 0.013, 0.029, 0.047):
        child = _child(dest, mode)
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "started"
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait()
        data = (dest / "k" / "res.bin").read_bytes()
        # Every version the child writes is one letter repeated, 50,000·n + 1 bytes long.
        assert len(data) % 50_000 == 1 and data == data[:1] * len(data)
        m.cleanup()
        assert os.listdir(dest / "k") == ["res.bin"]


# -- dump packages ---------------------------------------------------------------------------


def make_zip(path: Path, members: dict[str, bytes], *, compress: bool = True) -> Path:
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def entry(loc: str, path: str | None, data: bytes, **kw: object) -> Resource:
    return Resource(
        loc=loc,
        path=path,
        length=len(data),
        hashes={"md5": md5(data)},
        **kw,  # type: ignore[arg-type]
    )


def test_extract_puts_members_where_their_uris_map(
    tmp_path: Path, mirror: Mirror, dest: Path
) -> None:
    a, b = b"resource a\n" * 50, b"resource b"
    pkg = make_zip(tmp_path / "dump.zip", {"manifest.xml": b"<x/>", "res/a": a, "res/b": b})
    manifest = [
        entry(f"{HOST}/k1/a.txt", "/res/a", a),
        Resource(loc=f"{HOST}/k1/gone", change="deleted"),
        entry(f"{HOST}/k2/b.txt", "/res/b", b),
    ]
    results = list(extract(mirror, pkg, manifest))
    assert [(r.loc, type(v)) for r, v in results] == [
        (f"{HOST}/k1/a.txt", Written),
        (f"{HOST}/k2/b.txt", Written),
    ]
    assert (dest / "k1" / "a.txt").read_bytes() == a
    assert (dest / "k2" / "b.txt").read_bytes() == b
    assert tree(dest) == ["k1", "k1/a.txt", "k2", "k2/b.txt"]


def test_extract_refuses_hostile_members_and_goes_on(tmp_path: Path, dest: Path) -> None:
    good = b"good"
    big = b"\0" * (50 * 1024 * 1024)
    members = {
        "../x": b"evil",
        "/abs": b"evil",
        "a\\b": b"evil",
        "res/bomb": big,
        "res/liar": b"0123456789",
        "res/good": good,
        "res/badhash": b"content",
    }
    pkg = make_zip(tmp_path / "hostile.zip", members)
    m = Mirror(dest, [Mapping(f"{HOST}/", dest)])
    manifest = [
        entry(f"{HOST}/x1", "/../x", b"evil"),
        entry(f"{HOST}/x2", "//abs", b"evil"),
        entry(f"{HOST}/x3", "/a\\b", b"evil"),
        entry(f"{HOST}/x4", "/res/a\0b", b"evil"),
        entry(f"{HOST}/bomb", "/res/bomb", big),
        Resource(loc=f"{HOST}/liar", path="/res/liar", length=4),
        entry(f"{HOST}/missing", "/res/missing", b""),
        entry(f"{HOST}/../escape", "/res/good", good),
        Resource(loc=f"{HOST}/badhash", path="/res/badhash", hashes={"md5": md5(b"other")}),
        entry(f"{HOST}/good", "/res/good", good),
    ]
    results = list(extract(m, pkg, manifest))
    assert [r.loc for r, _ in results] == [e.loc for e in manifest]
    errors = {r.loc: v for r, v in results if isinstance(v, ResourceSyncError)}
    assert set(errors) == {e.loc for e in manifest} - {f"{HOST}/good"}
    for loc, err in errors.items():
        assert err.source == loc
    assert "'..' segment" in errors[f"{HOST}/x1"].message
    assert "absolute" in errors[f"{HOST}/x2"].message
    assert "backslash" in errors[f"{HOST}/x3"].message
    assert "NUL" in errors[f"{HOST}/x4"].message
    assert "compression ratio" in errors[f"{HOST}/bomb"].message
    assert isinstance(errors[f"{HOST}/liar"], IntegrityError)
    assert "declares 10 bytes, the manifest says 4" in errors[f"{HOST}/liar"].message
    assert "absent" in errors[f"{HOST}/missing"].message
    assert isinstance(errors[f"{HOST}/../escape"], UnsafePath)
    assert isinstance(errors[f"{HOST}/badhash"], IntegrityError)
    assert tree(dest) == ["good"]
    assert not (tmp_path / "x").exists()
    assert not Path("/abs").exists()


def test_extract_limits(tmp_path: Path, mirror: Mirror, dest: Path) -> None:
    data = os.urandom(6000)
    text = b" " * 4000  # a ratio above 200, but small: no bomb
    pkg = make_zip(tmp_path / "p.zip", {"r/data": data, "r/text": text})
    manifest = [entry(f"{HOST}/data", "/r/data", data), entry(f"{HOST}/text", "/r/text", text)]
    results = dict((r.loc, v) for r, v in extract(mirror, pkg, manifest, max_entry_bytes=5000))
    assert isinstance(results[f"{HOST}/data"], UnsafePath)
    assert "exceeds the limit of 5000" in str(results[f"{HOST}/data"])
    assert isinstance(results[f"{HOST}/text"], Written)
    results = dict(
        (r.loc, v) for r, v in extract(mirror, pkg, manifest, max_ratio=10, ratio_floor=0)
    )
    assert isinstance(results[f"{HOST}/text"], UnsafePath)
    assert isinstance(results[f"{HOST}/data"], Written)


def test_extract_a_member_that_inflates_past_its_declared_size(
    tmp_path: Path, mirror: Mirror, dest: Path
) -> None:
    # Forge a central directory that under-declares the size of a stored member.
    real = b"A" * 1000
    pkg = tmp_path / "forged.zip"
    make_zip(pkg, {"r/x": real}, compress=False)
    blob = bytearray(pkg.read_bytes())
    cd = blob.rfind(b"PK\x01\x02")
    local = blob.find(b"PK\x03\x04")
    for off in (cd + 24, local + 22):  # uncompressed size fields
        blob[off : off + 4] = (100).to_bytes(4, "little")
    pkg.write_bytes(bytes(blob))
    put(mirror, f"{HOST}/x", GOOD)
    manifest = [Resource(loc=f"{HOST}/x", path="/r/x", length=100)]
    [(_, result)] = list(extract(mirror, pkg, manifest))
    assert isinstance(result, IntegrityError)
    assert (dest / "x").read_bytes() == GOOD
    assert os.listdir(dest) == ["x"]


def test_extract_refuses_a_file_that_is_not_a_zip(tmp_path: Path, mirror: Mirror) -> None:
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ResourceSyncError, match="not a readable ZIP"):
        list(extract(mirror, bad, [entry(f"{HOST}/a", "/a", b"")]))


def test_a_file_takes_its_name_with_its_time(dest: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With `times`, the modification time is set before the rename: a run killed between the
    two cannot leave a file in place with the time of its write. Without, none is set."""
    renamed: list[float] = []
    real_replace = os.replace

    def replace(src: str, dst: str) -> None:
        renamed.append(os.stat(src).st_mtime)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    when = datetime(2001, 9, 9, 1, 46, 40, tzinfo=UTC)
    for times in (True, False):
        m = Mirror(dest, [Mapping(f"{HOST}/", dest)], times=times)
        with m.incoming(f"{HOST}/t-{times}.txt", mtime=when) as inc:
            inc.write(b"x")
        got = (dest / f"t-{times}.txt").stat().st_mtime
        assert (renamed[-1] == when.timestamp()) is times
        assert (got == when.timestamp()) is times
