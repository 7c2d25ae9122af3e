"""The Source's HTTP server, from a client's view: a real uvicorn on 127.0.0.1.

The published tree is written here by hand (documents with the codec's writer, and
`published.json` as `publish` writes it), so these tests check the server alone.
"""

from __future__ import annotations

import contextlib
import filecmp
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import formatdate
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, urlsplit

import httpx
import pytest

from resourcesync.model import Document, Link, Resource
from resourcesync.sitemap import read_document, write_document
from resourcesync.source.config import PublishConfig, SetConfig
from resourcesync.source.publish import publish
from resourcesync.source.server import create_app, parse_ranges
from resourcesync.w3cdt import format_w3c
from tests.servers import serve

T0 = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
SECRET = b"TOP-SECRET-do-not-serve"
BIG = bytes(range(256)) * 1200  # 300 KiB: streamed in chunks, not read in one go


# ---------------------------------------------------------------------------------------------
# A published tree, written by hand


@dataclass
class Tree:
    """OUTDIR and one resource set DIR, published at `base` (the test server's URL)."""

    out: Path
    data: Path
    base: str = ""
    name: str = "articles"
    changes: list[Resource] = field(default_factory=list)

    @property
    def set_url(self) -> str:
        return f"{self.base}/{self.name}/"

    @property
    def caplist_url(self) -> str:
        return self.set_url + "capabilitylist.xml"

    def url_of(self, rel: str) -> str:
        return self.set_url + quote(rel)

    def resources(self) -> Iterator[Resource]:
        for path in sorted(self.data.rglob("*")):
            rel = path.relative_to(self.data).as_posix()
            if path.is_symlink() or not path.is_file() or rel.startswith("."):
                continue
            body = path.read_bytes()
            yield Resource(
                loc=self.url_of(rel),
                lastmod=datetime.fromtimestamp(path.stat().st_mtime, UTC),
                length=len(body),
                hashes={"md5": hashlib.md5(body).hexdigest()},
            )

    def publish(self, when: datetime = T0) -> None:
        """Write the documents and, last, published.json (as `publish` does)."""
        up = Link(rel="up", href=self.caplist_url)
        setdir = self.out / self.name
        setdir.mkdir(parents=True, exist_ok=True)
        (self.out / ".well-known").mkdir(exist_ok=True)
        (self.out / ".resourcesync").mkdir(exist_ok=True)
        done = when + timedelta(seconds=1)
        entries = write_document(
            setdir / "resourcelist.xml",
            Document(capability="resourcelist", at=when, completed=done, links=[up]),
            self.resources(),
        )
        write_document(
            setdir / "changelist.xml",
            Document(capability="changelist", from_=T0, until=when, links=[up]),
            self.changes,
        )
        desc_url = f"{self.base}/.well-known/resourcesync"
        write_document(
            setdir / "capabilitylist.xml",
            Document(capability="capabilitylist", links=[Link(rel="up", href=desc_url)]),
            [
                Resource(loc=self.set_url + "resourcelist.xml", capability="resourcelist"),
                Resource(loc=self.set_url + "changelist.xml", capability="changelist"),
            ],
        )
        write_document(
            self.out / ".well-known" / "resourcesync",
            Document(capability="description"),
            [Resource(loc=self.caplist_url, capability="capabilitylist")],
        )

        def doc(cap: str, name: str, n: int, **times: str | None) -> dict[str, object]:
            path = f"{self.name}/{name}"
            return {
                "capability": cap,
                "path": path,
                "url": f"{self.base}/{path}",
                "index": False,
                "at": times.get("at"),
                "completed": times.get("completed"),
                "from": times.get("from"),
                "until": times.get("until"),
                "bytes": (self.out / path).stat().st_size,
                "entries": n,
            }

        published = {
            "format": 1,
            "published_at": format_w3c(when),
            "docs_url": self.base + "/",
            "description": {"path": ".well-known/resourcesync", "url": desc_url},
            "sets": [
                {
                    "name": self.name,
                    "dir": str(self.data.resolve()),
                    "base_url": self.set_url,
                    "capabilitylist": {
                        "path": f"{self.name}/capabilitylist.xml",
                        "url": self.caplist_url,
                    },
                    "documents": [
                        doc("resourcelist", "resourcelist.xml", entries, at=format_w3c(when)),
                        doc(
                            "changelist",
                            "changelist.xml",
                            len(self.changes),
                            **{"from": format_w3c(T0), "until": format_w3c(when)},
                        ),
                    ],
                    "resources": entries,
                    "recent_changes": [
                        {
                            "loc": c.loc,
                            "change": c.change,
                            "datetime": format_w3c(c.datetime) if c.datetime else None,
                        }
                        for c in reversed(self.changes[-50:])
                    ],
                }
            ],
        }
        tmp = self.out / ".resourcesync" / ".published.json.tmp"
        tmp.write_text(json.dumps(published))
        os.replace(tmp, self.out / ".resourcesync" / "published.json")


def _populate(tmp_path: Path) -> Tree:
    out, data = tmp_path / "out", tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a.txt").write_bytes(b"0123456789abcdefghij")
    (data / "sub" / "b.html").write_bytes(b"<p>b</p>")
    (data / "big.bin").write_bytes(BIG)
    (data / "space name.txt").write_bytes(b"spaced")
    (data / ".hidden").write_bytes(SECRET)
    (data / ".a.txt.x1y2.tmp").write_bytes(SECRET)
    for i, path in enumerate(sorted(p for p in data.rglob("*") if p.is_file())):
        t = (T0 + timedelta(minutes=i)).timestamp()
        os.utime(path, (t, t))
    # Outside every root: reachable only by escaping.
    (tmp_path / "secret.txt").write_bytes(SECRET)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "x.txt").write_bytes(SECRET)
    (data / "escape").symlink_to(tmp_path / "secret.txt")
    (data / "escdir").symlink_to(tmp_path / "outside", target_is_directory=True)
    (data / "inside").symlink_to(data / "a.txt")
    out.mkdir()
    # A temporary file of an atomic write beside the Source Description (issue 17.9).
    (out / ".well-known").mkdir()
    (out / ".well-known" / ".resourcesync.tmp").write_bytes(SECRET)
    (out / ".well-known" / "other").write_bytes(SECRET)
    return Tree(out=out, data=data)


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    t = _populate(tmp_path)
    with serve(create_app(t.out)) as base:
        t.base = base
        t.publish()
        yield t


def raw_get(base: str, target: str, method: str = "GET") -> tuple[int, bytes]:
    """Send the request target exactly as written (httpx would normalize `..`)."""
    u = urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=10)
    try:
        conn.putrequest(method, target, skip_accept_encoding=True)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


class _Head(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "link":
            self.links.append(dict(attrs))


# ---------------------------------------------------------------------------------------------
# The four discovery routes, each followed to the Resource List


def _resource_list_from_caplist(caplist_url: str) -> str:
    doc, entries = read_document(caplist_url)
    assert doc.capability == "capabilitylist"
    return next(e.loc for e in entries if e.capability == "resourcelist")


def test_discovery_well_known_uri(tree: Tree) -> None:
    r = httpx.get(tree.base + "/.well-known/resourcesync")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/xml")
    doc, entries = read_document(tree.base + "/.well-known/resourcesync")
    assert doc.capability == "description"
    assert [e.loc for e in entries] == [tree.caplist_url]
    rl = _resource_list_from_caplist(entries[0].loc)
    doc, listed = read_document(rl)
    assert doc.capability == "resourcelist"
    assert {e.loc for e in listed} == {r.loc for r in tree.resources()}


def test_discovery_robots_txt_keeps_operator_rules(tree: Tree) -> None:
    r = httpx.get(tree.base + "/robots.txt")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    sitemaps = re.findall(r"(?mi)^Sitemap:\s*(\S+)$", r.text)
    assert sitemaps == [tree.set_url + "resourcelist.xml"]
    doc, _ = read_document(sitemaps[0])
    assert doc.capability == "resourcelist"
    assert doc.link("up") is not None and doc.link("up").href == tree.caplist_url  # type: ignore[union-attr]

    rules = "User-agent: *\nDisallow: /private/\nSitemap: http://example.com/sitemap.xml\n"
    (tree.out / ".resourcesync" / "robots.txt").write_text(rules)
    text = httpx.get(tree.base + "/robots.txt").text
    assert text.startswith(rules)
    assert re.findall(r"(?mi)^Sitemap:\s*(\S+)$", text) == [
        "http://example.com/sitemap.xml",
        tree.set_url + "resourcelist.xml",
    ]


def test_robots_option_file(tmp_path: Path) -> None:
    t = _populate(tmp_path)
    rules = tmp_path / "robots.txt"
    rules.write_text("User-agent: BadBot\nDisallow: /")
    with serve(create_app(t.out, robots=rules)) as base:
        t.base = base
        t.publish()
        text = httpx.get(base + "/robots.txt").text
    assert text == (
        f"User-agent: BadBot\nDisallow: /\n\nSitemap: {base}/articles/resourcelist.xml\n"
    )


def test_discovery_link_header_on_resources(tree: Tree) -> None:
    for rel in ("a.txt", "sub/b.html", "big.bin", "space name.txt", "inside"):
        r = httpx.get(tree.url_of(rel))
        assert r.status_code == 200, rel
        assert r.headers["link"] == f'<{tree.caplist_url}>; rel="resourcesync"'
        assert r.content == (tree.data / rel).read_bytes()
    assert _resource_list_from_caplist(tree.caplist_url) == tree.set_url + "resourcelist.xml"


def test_discovery_html_link(tree: Tree) -> None:
    for path in ("/", "/articles/"):
        r = httpx.get(tree.base + path)
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/html")
        head = _Head()
        head.feed(r.text)
        found = [ln["href"] for ln in head.links if ln.get("rel") == "resourcesync"]
        assert found == [tree.caplist_url], path
    assert httpx.get(tree.base + "/articles").headers.get("location") == "/articles/"


# ---------------------------------------------------------------------------------------------
# Headers, conditional requests, ranges, HEAD


def test_resource_headers(tree: Tree) -> None:
    r = httpx.get(tree.url_of("a.txt"))
    st = (tree.data / "a.txt").stat()
    assert r.headers["content-length"] == "20"
    assert r.headers["content-type"].startswith("text/plain")
    assert r.headers["last-modified"] == formatdate(st.st_mtime, usegmt=True)
    assert r.headers["etag"].startswith('"') and r.headers["etag"].endswith('"')
    assert r.headers["accept-ranges"] == "bytes"
    assert httpx.get(tree.url_of("sub/b.html")).headers["content-type"].startswith("text/html")
    doc = httpx.get(tree.set_url + "resourcelist.xml")
    assert doc.headers["content-type"] == "application/xml"
    assert "link" not in doc.headers


def test_conditional_get(tree: Tree) -> None:
    url = tree.url_of("a.txt")
    first = httpx.get(url)
    etag, lm = first.headers["etag"], first.headers["last-modified"]
    r = httpx.get(url, headers={"If-None-Match": etag})
    assert r.status_code == 304 and r.content == b""
    assert r.headers["etag"] == etag and "link" in r.headers
    assert httpx.get(url, headers={"If-None-Match": f'"x", W/{etag}'}).status_code == 304
    assert httpx.get(url, headers={"If-None-Match": "*"}).status_code == 304
    assert httpx.get(url, headers={"If-None-Match": '"other"'}).status_code == 200
    assert httpx.get(url, headers={"If-Modified-Since": lm}).status_code == 304
    earlier = formatdate((T0 - timedelta(days=1)).timestamp(), usegmt=True)
    assert httpx.get(url, headers={"If-Modified-Since": earlier}).status_code == 200
    # If-None-Match wins over If-Modified-Since (RFC 9110 §13.2.2).
    both = {"If-None-Match": '"other"', "If-Modified-Since": lm}
    assert httpx.get(url, headers=both).status_code == 200
    assert httpx.get(url, headers={"If-Modified-Since": "garbage"}).status_code == 200
    assert httpx.get(url, headers={"If-Match": '"other"'}).status_code == 412
    assert httpx.get(url, headers={"If-Match": etag}).status_code == 200
    assert httpx.get(url, headers={"If-Unmodified-Since": earlier}).status_code == 412
    # A new version of the file gets new validators.
    os.replace(_write(tree.data / ".new", b"changed"), tree.data / "a.txt")
    r = httpx.get(url, headers={"If-None-Match": etag, "If-Modified-Since": lm})
    assert r.status_code == 200 and r.content == b"changed"
    assert r.headers["etag"] != etag
    # Documents revalidate too.
    rl = tree.set_url + "resourcelist.xml"
    tag = httpx.get(rl).headers["etag"]
    assert httpx.get(rl, headers={"If-None-Match": tag}).status_code == 304


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_range_requests(tree: Tree) -> None:
    url = tree.url_of("a.txt")
    body = (tree.data / "a.txt").read_bytes()

    def get(rng: str, **extra: str) -> httpx.Response:
        return httpx.get(url, headers={"Range": rng, **extra})

    r = get("bytes=0-9")
    assert r.status_code == 206 and r.content == body[:10]
    assert r.headers["content-range"] == "bytes 0-9/20"
    assert r.headers["content-length"] == "10"
    assert get("bytes=15-").content == body[15:]
    assert get("bytes=-5").content == body[-5:]
    assert get("bytes=-500").content == body  # a suffix longer than the file: all of it
    assert get("bytes=10-1000").headers["content-range"] == "bytes 10-19/20"
    r = get("bytes=20-")
    assert r.status_code == 416 and r.headers["content-range"] == "bytes */20"
    assert get("bytes=-0").status_code == 416
    # Invalid ranges are ignored (RFC 9110 §14.2), not refused.
    for bad in ("bytes=9-3", "bytes=a-b", "items=0-1", "bytes", "bytes=0-1," * 40):
        r = get(bad)
        assert r.status_code == 200 and r.content == body, bad
    # A byte that Latin-1 reads as `²` (a digit to `str.isdigit`, not to `int`): ignored too.
    r = httpx.get(url, headers={"Range": b"bytes=\xb2-"})
    assert r.status_code == 200 and r.content == body
    # If-Range: the range only for the version the client has.
    etag = httpx.get(url).headers["etag"]
    assert get("bytes=0-1", **{"If-Range": etag}).status_code == 206
    assert get("bytes=0-1", **{"If-Range": '"stale"'}).status_code == 200
    # HEAD ignores Range (only GET defines it).
    assert httpx.head(url, headers={"Range": "bytes=0-1"}).status_code == 200


def test_multiple_ranges(tree: Tree) -> None:
    r = httpx.get(tree.url_of("a.txt"), headers={"Range": "bytes=0-1, 5-6, 6-8, -2"})
    assert r.status_code == 206
    ctype = r.headers["content-type"]
    assert ctype.startswith("multipart/byteranges; boundary=")
    boundary = ctype.split("boundary=")[1]
    assert int(r.headers["content-length"]) == len(r.content)
    parts = r.content.split(f"--{boundary}".encode())
    assert parts[0] == b"" and parts[-1] == b"--\r\n"
    got = []
    for part in parts[1:-1]:
        head, _, data = part.partition(b"\r\n\r\n")
        assert b"Content-Type: text/plain" in head
        got.append((re.search(rb"bytes (\d+-\d+)/20", head).group(1), data[:-2]))  # type: ignore[union-attr]
    assert got == [(b"0-1", b"01"), (b"5-8", b"5678"), (b"18-19", b"ij")]


def test_large_file_whole_and_ranges(tree: Tree) -> None:
    url = tree.url_of("big.bin")
    assert httpx.get(url).content == BIG
    r = httpx.get(url, headers={"Range": "bytes=100000-299999"})
    assert r.status_code == 206 and r.content == BIG[100000:300000]
    r = httpx.get(url, headers={"Range": "bytes=0-0,100000-200000,-70000"})
    assert r.status_code == 206 and int(r.headers["content-length"]) == len(r.content)
    assert BIG[100000:200001] in r.content and BIG[-70000:] in r.content


def test_zip_dump_package_under_outdir(tree: Tree) -> None:
    package = tree.out / "articles" / "resourcedump" / "part-00001.zip"
    package.parent.mkdir()
    with zipfile.ZipFile(package, "w") as z:
        z.writestr("manifest.xml", "<urlset/>")
        z.writestr("resources/big.bin", BIG)
    data = package.read_bytes()
    url = tree.set_url + "resourcedump/part-00001.zip"
    r = httpx.get(url)
    assert r.headers["content-type"] == "application/zip" and r.content == data
    tail = httpx.get(url, headers={"Range": "bytes=-22"})  # the end-of-central-directory record
    assert tail.status_code == 206 and tail.content == data[-22:]
    assert tail.content.startswith(b"PK\x05\x06")


def test_head_everywhere_get_is(tree: Tree) -> None:
    for path in (
        "/",
        "/articles/",
        "/robots.txt",
        "/.well-known/resourcesync",
        "/articles/resourcelist.xml",
        "/articles/a.txt",
        "/articles/big.bin",
    ):
        g, h = httpx.get(tree.base + path), httpx.head(tree.base + path)
        assert h.status_code == g.status_code == 200, path
        assert h.content == b""
        for name in ("content-type", "content-length", "etag", "last-modified", "link"):
            assert h.headers.get(name) == g.headers.get(name), (path, name)
    assert httpx.head(tree.base + "/nope").status_code == 404
    assert httpx.post(tree.url_of("a.txt")).status_code == 405


# ---------------------------------------------------------------------------------------------
# What is never served


def test_not_found(tree: Tree) -> None:
    for path in (
        "/nope",
        "/articles/nope.txt",
        "/articles/sub",  # a directory: no listing unless configured
        "/articles/sub/",
        "/articles/a.txt/",
        "/articles/.hidden",
        "/articles/.a.txt.x1y2.tmp",  # a temporary file of an atomic write
        "/.resourcesync/published.json",
        "/.resourcesync/",
        "/articles/.well-known/resourcesync",
        "/.well-known/",
        # Hidden names under .well-known: only the Source Description is served there (17.9).
        "/.well-known/.resourcesync.tmp",
        "/.well-known/%2Eresourcesync.tmp",
        "/.well-known/.resourcesync.tmp/",
        "/.well-known/other",
    ):
        r = httpx.get(tree.base + path)
        assert r.status_code == 404, path
        assert SECRET not in r.content


TRAVERSALS = [
    "/../secret.txt",
    "/articles/../../secret.txt",
    "/articles/../../../../../../../../etc/passwd",
    "/articles/%2e%2e/%2e%2e/secret.txt",
    "/articles/%2E%2E/%2E%2E/secret.txt",
    "/articles/..%2f..%2fsecret.txt",
    "/articles/%2e%2e%2f%2e%2e%2fsecret.txt",
    "/articles/..%5c..%5csecret.txt",
    "/articles/..\\..\\secret.txt",
    "/articles/a.txt%00.png",
    "/articles/%00",
    "/articles/%c0%ae%c0%ae/%c0%ae%c0%ae/secret.txt",
    "/articles/./../../secret.txt",
    "//etc/passwd",
    "/%2fetc%2fpasswd",
    "/articles/%2f..%2f..%2fsecret.txt",
    "/articles/escape",  # a symlink out of the set's directory
    "/articles/escdir/x.txt",  # through a symlinked directory
    "/%2eresourcesync/published.json",
    "/articles/sub/%2e%2e/%2e%2e/%2e%2e/secret.txt",
]


@pytest.mark.parametrize("target", TRAVERSALS)
def test_traversal_refused(tree: Tree, target: str) -> None:
    for method in ("GET", "HEAD"):
        status, body = raw_get(tree.base, target, method)
        assert status in (400, 404), (target, status)
        assert SECRET not in body and b"root:" not in body


def test_listing_when_configured(tmp_path: Path) -> None:
    t = _populate(tmp_path)
    with serve(create_app(t.out, listing=True)) as base:
        t.base = base
        t.publish()
        r = httpx.get(base + "/articles/sub/")
        assert r.status_code == 200 and 'href="b.html"' in r.text
        assert httpx.get(base + "/articles/sub").headers["location"] == "/articles/sub/"
        assert httpx.get(base + "/articles/escdir/").status_code == 404
        assert httpx.get(base + "/.resourcesync/").status_code == 404
        # The set's own page is still its landing page.
        assert 'rel="resourcesync"' in httpx.get(base + "/articles/").text


# ---------------------------------------------------------------------------------------------
# Republishing: picked up at once, and never a mix of two versions


def test_publication_reloaded_and_overrides(tmp_path: Path) -> None:
    t = _populate(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_bytes(b"from the override")
    with serve(create_app(t.out)) as base:
        assert "Nothing has been published" in httpx.get(base + "/").text
        assert httpx.get(base + "/articles/a.txt").status_code == 404
        t.base = base
        t.publish()
        assert httpx.get(base + "/articles/a.txt").content == (t.data / "a.txt").read_bytes()
        # A set renamed in a new publication: the old URL goes, the new one comes.
        t.name = "news"
        t.publish()
        assert httpx.get(base + "/articles/a.txt").status_code == 404
        assert httpx.get(base + "/news/a.txt").status_code == 200
    with serve(create_app(t.out, resources={None: other})) as base:
        assert httpx.get(base + "/news/a.txt").content == b"from the override"


def test_unpublished_outdir_with_resources_at_root(tmp_path: Path) -> None:
    t = _populate(tmp_path)
    with serve(create_app(t.out, resources={None: t.data})) as base:
        assert httpx.get(base + "/a.txt").content == (t.data / "a.txt").read_bytes()
        assert "link" not in httpx.get(base + "/a.txt").headers
        assert httpx.get(base + "/escape").status_code == 404
        assert "Sitemap" not in httpx.get(base + "/robots.txt").text


def test_every_response_is_one_version_during_republish(tree: Tree) -> None:
    """Publish renames files into place; a request must get the old file or the new one, with
    the headers of the same one, even when the rename lands mid-response."""
    target = tree.data / "big.bin"
    versions = [bytes([i]) * (200_000 + 1000 * i) for i in range(3)]
    stop = threading.Event()

    def republish() -> None:
        i = 0
        while not stop.is_set():
            tmp = tree.data / f".big.bin.{i}.tmp"
            tmp.write_bytes(versions[i % 3])
            os.replace(tmp, target)
            i += 1

    worker = threading.Thread(target=republish)
    worker.start()
    seen = set()
    requests = 0
    # At least 60 requests, and on until the renames were seen to land between them (a busy
    # machine can starve the writer for a while: the CI rehearsal saw one version in 60).
    deadline = time.monotonic() + 30
    try:
        with httpx.Client() as client:
            while requests < 60 or (len(seen) < 2 and time.monotonic() < deadline):
                r = client.get(tree.url_of("big.bin"))
                assert r.content in versions
                assert int(r.headers["content-length"]) == len(r.content)
                seen.add(r.content[:1])
                requests += 1
    finally:
        stop.set()
        worker.join()
    assert len(seen) >= 2


# ---------------------------------------------------------------------------------------------
# The landing page, in a real browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.mark.skipif(
    not os.path.exists(CHROMIUM) and not os.environ.get("CI"),
    reason="Debian's chromium is not installed (.ci/run installs it)",
)
def test_landing_page_in_headless_chromium(tree: Tree) -> None:
    from playwright.sync_api import sync_playwright

    tree.changes = [
        Resource(loc=tree.url_of("a.txt"), change="updated", datetime=T0 + timedelta(hours=1)),
        Resource(
            loc=tree.set_url + "<b>x</b>.txt", change="deleted", datetime=T0 + timedelta(hours=2)
        ),
    ]
    tree.publish(T0 + timedelta(hours=3))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            response = page.goto(tree.base + "/")
            assert response is not None and response.status == 200
            assert page.title() == "ResourceSync Source"
            href = page.eval_on_selector('head link[rel="resourcesync"]', "e => e.href")
            assert href == tree.caplist_url
            # The link leads somewhere a browser can fetch: the Capability List.
            text = page.evaluate("url => fetch(url).then(r => r.text())", href)
            assert 'capability="capabilitylist"' in text
            rows = page.locator("table.documents tbody tr")
            assert rows.count() == 2
            first = rows.nth(0).inner_text()
            assert "resourcelist.xml" in first and "resourcelist" in first
            size = (tree.out / "articles" / "resourcelist.xml").stat().st_size
            assert f"{size / 1024:.1f} KB" in first or f"{size} B" in first
            changes = page.locator("ol.changes li").all_inner_texts()
            assert len(changes) == 2
            assert (
                "deleted" in changes[0] and "<b>x</b>.txt" in changes[0]
            )  # escaped, shown as text
            assert "updated" in changes[1]
            assert page.locator("ol.changes b").count() == 0
            # From the Source's page to the set's page, which links the same Capability List.
            page.click("h2 a")
            page.wait_for_url(tree.set_url)
            href = page.eval_on_selector('head link[rel="resourcesync"]', "e => e.href")
            assert href == tree.caplist_url
            assert page.locator("h1").inner_text() == "ResourceSync: articles"
        finally:
            browser.close()


# ---------------------------------------------------------------------------------------------
# Interoperability: resync 2.0.1 as the Destination

RESYNC = Path(sys.executable).parent / "resync-sync"


def _resync(cwd: Path, *args: str) -> str:
    proc = subprocess.run(
        [str(RESYNC), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def _same_tree(a: Path, b: Path) -> None:
    def files(root: Path) -> dict[str, bytes]:
        return {
            p.relative_to(root).as_posix(): p.read_bytes()
            for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and not p.name.startswith(".")
        }

    assert files(a) == files(b)


def test_resync_baseline_audit_incremental(tmp_path: Path) -> None:
    t = _populate(tmp_path)
    for name in ("escape", "escdir", "inside", "space name.txt", ".hidden", ".a.txt.x1y2.tmp"):
        p = t.data / name
        p.unlink()
    dest, work = tmp_path / "dest", tmp_path / "work"
    work.mkdir()
    with serve(create_app(t.out)) as base:
        t.base = base
        t.publish()
        mapping = f"{t.set_url.rstrip('/')}={dest}"
        out = _resync(work, "--baseline", mapping)
        _same_tree(t.data, dest)
        assert filecmp.cmp(t.data / "big.bin", dest / "big.bin", shallow=False)
        out = _resync(work, "--audit", mapping)
        assert "in sync" in out.lower() and "not in sync" not in out.lower(), out

        # A change and a new resource, then a republish with a Change List.
        when = T0 + timedelta(days=1)
        (t.data / "a.txt").write_bytes(b"a new version of a")
        (t.data / "sub" / "c.txt").write_bytes(b"created")
        for rel in ("a.txt", "sub/c.txt"):
            os.utime(t.data / rel, (when.timestamp(), when.timestamp()))
        # resync sets a fetched file's time from the entry's <lastmod>; without one, audit
        # would see the download time and call it out of sync.
        t.changes = [
            Resource(loc=t.url_of(rel), change=change, datetime=when, lastmod=when)
            for rel, change in (("a.txt", "updated"), ("sub/c.txt", "created"))
        ]
        t.publish(when + timedelta(seconds=5))
        out = _resync(work, "--audit", mapping)
        assert "not in sync" in out.lower(), out
        _resync(work, "--incremental", mapping)
        _same_tree(t.data, dest)
        out = _resync(work, "--audit", mapping)
        assert "not in sync" not in out.lower(), out


def test_parse_ranges_unit() -> None:
    assert parse_ranges("bytes=0-0", 1) == [(0, 1)]
    assert parse_ranges("bytes=0-", 0) == []
    assert parse_ranges("bytes=-1", 0) == []
    assert parse_ranges("bytes=4-5,0-0", 10) == [(0, 1), (4, 6)]
    assert parse_ranges("bytes=1-2,0-0", 10) == [(0, 3)]
    assert parse_ranges("bytes=0-3,2-5", 10) == [(0, 6)]
    assert parse_ranges("BYTES = 0-1", 10) is not None
    assert parse_ranges("bytes=0-1-2", 10) is None


# ---------------------------------------------------------------------------------------------
# With the real `publish`, and the commands


def _publish_config(data: Path, out: Path, base: str) -> PublishConfig:
    return PublishConfig(
        out=out,
        sets=[
            SetConfig(name="rs", dir=data, base_url=f"{base}/data/", resourcelist_every="always")
        ],
    )


def test_resync_against_a_real_publication(tmp_path: Path) -> None:
    data, out, dest, work = (tmp_path / n for n in ("data", "out", "dest", "work"))
    (data / "sub").mkdir(parents=True)
    work.mkdir()
    (data / "a.txt").write_bytes(b"first")
    (data / "sub" / "b.bin").write_bytes(BIG)
    out.mkdir()
    with serve(create_app(out)) as base:
        config = _publish_config(data, out, base)
        publish(config)
        mapping = f"{base}/data={dest}"
        _resync(work, "--baseline", mapping)
        _same_tree(data, dest)
        assert "not in sync" not in _resync(work, "--audit", mapping).lower()

        (data / "a.txt").write_bytes(b"second version")
        (data / "sub" / "c.txt").write_bytes(b"created")
        assert publish(config).changes == 2
        # The Change List is beside the Capability List, not under the resources' URL.
        changelist = f"{base}/rs/changelist.xml"
        _resync(work, "--incremental", f"--changelist-uri={changelist}", mapping)
        _same_tree(data, dest)
        assert "not in sync" not in _resync(work, "--audit", mapping).lower()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _command(*args: str) -> Iterator[subprocess.Popen[str]]:
    code = "import sys; from resourcesync.cli.serve import serve, source; " + (
        "{'serve': serve, 'source': source}[sys.argv[1]](sys.argv[2:])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args, "--log-level", "warning"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_for(url: str, proc: subprocess.Popen[str], timeout: float = 15) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return httpx.get(url, timeout=2)
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                out, err = proc.communicate(timeout=5)
                raise AssertionError(f"server did not answer: {out}{err}") from None
            time.sleep(0.05)


def test_serve_command(tmp_path: Path) -> None:
    t = _populate(tmp_path)
    port = _free_port()
    t.base = f"http://127.0.0.1:{port}"
    t.publish()
    with _command("serve", str(t.out), "--port", str(port)) as proc:
        r = _wait_for(t.base + "/.well-known/resourcesync", proc)
        assert r.status_code == 200 and b'capability="description"' in r.content
        assert httpx.get(t.url_of("a.txt")).headers["link"] == (
            f'<{t.caplist_url}>; rel="resourcesync"'
        )
        assert httpx.get(t.base + "/articles/.hidden").status_code == 404
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""


def test_serve_command_refuses_a_missing_outdir(tmp_path: Path) -> None:
    with _command("serve", str(tmp_path / "nope")) as proc:
        proc.wait(timeout=10)
    assert proc.returncode == 2
    assert "not a directory" in (proc.stderr.read() if proc.stderr else "")


def test_source_command_publishes_serves_and_republishes(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "a.txt").write_bytes(b"hello")
    (site / ".git").mkdir()
    (site / ".git" / "config").write_bytes(SECRET)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with _command("source", str(site), "--port", str(port), "--quiet-time", "0.1") as proc:
        r = _wait_for(base + "/robots.txt", proc)
        sitemap = re.findall(r"(?m)^Sitemap: (\S+)$", r.text)
        assert sitemap == [f"{base}/resourcesync/resourcelist.xml"]
        _, listed = read_document(sitemap[0])
        assert [e.loc for e in listed] == [f"{base}/site/a.txt"]
        assert httpx.get(f"{base}/site/a.txt").content == b"hello"
        assert httpx.get(f"{base}/site/.git/config").status_code == 404

        (site / "b.txt").write_bytes(b"new")
        deadline = time.monotonic() + 15
        while True:
            _, changes = read_document(f"{base}/resourcesync/changelist.xml")
            if changes or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert [(c.loc, c.change) for c in changes] == [(f"{base}/site/b.txt", "created")]
        assert httpx.get(f"{base}/site/b.txt").content == b"new"
    assert (tmp_path / "site-resourcesync" / ".well-known" / "resourcesync").is_file()
    assert proc.returncode == 0
