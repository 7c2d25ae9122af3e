"""What `sync` and `audit` say when discovery or a document fails (issue 17.16, 14.6): the
reason a document was refused stays in the one line; a host that cannot be reached is said
plainly, at once; a document that is not what it was linked as is refused rather than read as
an empty list."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.destination.helpers import cli, cli_json, entry, hand_source, tree, urlset

DOCTYPE = (
    b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]>'
    b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"/>'
)
REASON = "DOCTYPE declarations are not allowed"


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_the_reason_a_document_was_refused_is_kept(tmp_path: Path) -> None:
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.publish([entry(b, "/a.txt", b"a")])
        src.docs["/capabilitylist.xml"] = DOCTYPE
        for command in ("sync", "audit"):
            (tmp_path / command).mkdir()
            result = cli(command, b, tmp_path / command)
            assert result.exit_code == 2
            line = _one_line(result.stderr)
            assert f"the Capability List {b}/capabilitylist.xml cannot be read" in line
            assert REASON in line and "line 1" in line
        src.docs["/.well-known/resourcesync"] = DOCTYPE
        result = cli("sync", b, tmp_path / "x")
        assert result.exit_code == 2
        line = _one_line(result.stderr)
        assert "no ResourceSync here" not in line
        assert f"{b}/.well-known/resourcesync:1: {REASON}" in line


def test_a_list_that_is_not_what_it_was_linked_as_is_refused(tmp_path: Path) -> None:
    """A 'Resource List' that says it is something else would be an empty list: synced with
    --delete it would empty the copy. It is refused; the copy is kept."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.publish([entry(b, "/a.txt", b"a")])
        assert cli("sync", b, dest).exit_code == 0
        src.docs["/resourcelist.xml"] = urlset("changedump", [], at="2024-01-02T00:00:00Z")
        for args in (("sync", "--baseline", "--delete"), ("audit",)):
            result = cli(args[0], b, dest, *args[1:])
            assert result.exit_code == 2
            assert "expected a resourcelist, found a changedump" in _one_line(result.stderr)
        assert tree(dest) == {"a.txt": b"a"}
        src.publish([entry(b, "/a.txt", b"a")])
        assert cli("sync", b, dest).exit_code == 0
        src.docs["/changelist.xml"] = urlset("resourcedump", [], at="2024-01-02T00:00:00Z")
        result = cli("sync", b, dest)
        assert result.exit_code == 2
        assert "expected a changelist, found a resourcedump" in _one_line(result.stderr)


def test_a_closed_port_says_connection_refused(tmp_path: Path) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    for command in ("sync", "audit"):
        (tmp_path / command).mkdir()
        result = cli(command, f"http://127.0.0.1:{port}/", tmp_path / command)
        assert result.exit_code == 2
        line = _one_line(result.stderr)
        assert f"cannot connect to 127.0.0.1:{port}: connection refused" in line
        assert "no ResourceSync here" not in line


def test_an_address_that_answers_an_error_is_said_when_its_site_is_synced(tmp_path: Path) -> None:
    """A page of a site leads to its Source (core §8); an address that answers 404 is no page:
    a mistyped list's URL had the whole site synced without a word. It still is (the site's
    Source is what is there), with a warning naming the address and its answer; a real page
    of the site says nothing."""
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.publish([entry(b, "/a.txt", b"a")])
        src.docs["/page.html"] = "<!DOCTYPE html><html><head><title>p</title></head></html>"
        for command in ("sync", "audit"):
            result = cli(command, f"{b}/resourcelst.xml", tmp_path / "dest")
            assert result.exit_code == 0, result.output
            warned = [line for line in result.stderr.splitlines() if "warning:" in line]
            assert len(warned) == 1 and f"{b}/resourcelst.xml answered HTTP 404" in warned[0]
            assert "(well-known URI) is synced instead" in warned[0]
        assert tree(tmp_path / "dest") == {"a.txt": b"a"}
        code, report = cli_json("audit", f"{b}/resourcelst.xml", tmp_path / "dest")
        assert code == 0 and len(report["warnings"]) == 1, report
        assert "answered HTTP 404" in report["warnings"][0]
        result = cli("sync", f"{b}/page.html", tmp_path / "dest")
        assert result.exit_code == 0 and "warning" not in result.stderr, result.stderr
