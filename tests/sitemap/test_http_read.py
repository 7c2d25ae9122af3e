"""Reading documents over HTTP from a real server on 127.0.0.1: plain and gzip bodies,
Content-Encoding, errors, retries, indexes whose parts are fetched, and DTDs never fetched."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from resourcesync.cli import main
from resourcesync.errors import FetchError, ReadError, ResourceSyncError
from resourcesync.http import HttpOptions, RetryPolicy, make_client
from resourcesync.sitemap import iter_entries, open_document, read_document, validate
from tests.servers import serve

SM = "http://www.sitemaps.org/schemas/sitemap/0.9"
RS = "http://www.openarchives.org/rs/terms/"


def urlset(md: str, *body: str, index: bool = False, prolog: str = "") -> bytes:
    root = "sitemapindex" if index else "urlset"
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        *([prolog] if prolog else []),
        f'<{root} xmlns="{SM}" xmlns:rs="{RS}">',
        f"<rs:md {md}/>",
        *body,
        f"</{root}>",
    ]
    return ("\n".join(lines) + "\n").encode("utf-8")


def entries(*locs: str) -> list[str]:
    return [f"<url><loc>{loc}</loc></url>" for loc in locs]


RL_MD = 'capability="resourcelist" at="2013-01-03T09:00:00Z"'


class Site:
    """A Starlette app serving documents by path; documents may use {base} for the server URL.
    Counts every request by path."""

    def __init__(self) -> None:
        self.base = ""
        self.hits: Counter[str] = Counter()
        self.docs: dict[str, Callable[[Request, int], Response]] = {}
        self.app = Starlette(routes=[Route("/{path:path}", self._handle)])

    async def _handle(self, request: Request) -> Response:
        path = "/" + request.path_params["path"]
        self.hits[path] += 1
        handler = self.docs.get(path)
        if handler is None:
            return Response("not here", status_code=404)
        return handler(request, self.hits[path])

    def xml(self, path: str, body: bytes, **headers: str) -> None:
        media = headers.pop("media_type", "application/xml")
        self.docs[path] = lambda request, n: Response(
            body.replace(b"{base}", self.base.encode()), media_type=media, headers=headers
        )

    def url(self, path: str) -> str:
        return self.base + path


@pytest.fixture
def site() -> Iterator[Site]:
    s = Site()
    with serve(s.app) as base:
        s.base = base
        yield s


# -- reading -------------------------------------------------------------------------------------


def test_open_document_over_http(site: Site) -> None:
    site.xml("/rl.xml", urlset(RL_MD, *entries("http://example.com/a", "http://example.com/b")))
    with open_document(site.url("/rl.xml")) as doc:
        assert doc.url == site.url("/rl.xml")
        assert doc.name == site.url("/rl.xml")
        assert doc.document.capability == "resourcelist"
        assert [r.loc for r in doc] == ["http://example.com/a", "http://example.com/b"]
    assert site.hits["/rl.xml"] == 1


def test_gzip_body_detected_by_magic_bytes(site: Site) -> None:
    body = gzip.compress(urlset(RL_MD, *entries("http://example.com/a")))
    site.docs["/rl.xml.gz"] = lambda request, n: Response(body, media_type="application/gzip")
    doc, resources = read_document(site.url("/rl.xml.gz"))
    assert doc.capability == "resourcelist"
    assert [r.loc for r in resources] == ["http://example.com/a"]


def test_a_gzip_document_of_several_members_is_read_whole(site: Site) -> None:
    """Members one after the other (RFC 1952 §2.2, `cat a.gz b.gz`), NUL padding between:
    the whole document, as `gzip -d` reads it (before: the first member alone, not XML)."""
    doc = urlset(RL_MD, *entries(*(f"http://example.com/r{i}" for i in range(500))))
    half = len(doc) // 2
    body = gzip.compress(doc[:half]) + b"\0" * 8 + gzip.compress(doc[half:])
    site.docs["/rl.xml.gz"] = lambda request, n: Response(body, media_type="application/gzip")
    _, resources = read_document(site.url("/rl.xml.gz"))
    assert len(resources) == 500


def test_a_gzip_document_with_bytes_after_its_end_is_refused(site: Site) -> None:
    """After a member, only padding or another member (before: ignored, the document read as
    if whole)."""
    body = gzip.compress(urlset(RL_MD, *entries("http://example.com/a"))) + b"<url>"
    site.docs["/rl.xml.gz"] = lambda request, n: Response(body, media_type="application/gzip")
    with pytest.raises(ReadError, match="corrupt gzip data: not a gzip member"):
        read_document(site.url("/rl.xml.gz"))


def test_a_content_encoded_document_cut_short_is_refused(site: Site) -> None:
    """The whole XML arrived but the gzip stream's trailer (its CRC) did not: the bytes are
    unchecked, the document is not read (before: read as if whole)."""
    body = gzip.compress(urlset(RL_MD, *entries("http://example.com/a")))[:-8]
    site.docs["/rl.xml"] = lambda request, n: Response(
        body, media_type="application/xml", headers={"Content-Encoding": "gzip"}
    )
    with pytest.raises(ResourceSyncError, match="cut short"):
        read_document(site.url("/rl.xml"))


def test_a_document_answered_in_part_is_refused(site: Site) -> None:
    """206 Partial Content to a GET that asked for the whole document (before: the part was
    read as the document)."""
    body = urlset(RL_MD, *entries("http://example.com/a"))
    site.docs["/rl.xml"] = lambda request, n: Response(
        body,
        status_code=206,
        media_type="application/xml",
        headers={"Content-Range": f"bytes 0-{len(body) - 1}/{len(body) + 5000}"},
    )
    with pytest.raises(FetchError, match="HTTP 206 Partial Content: only a part"):
        read_document(site.url("/rl.xml"))


def test_content_encoding_gzip_is_decoded(site: Site) -> None:
    body = gzip.compress(urlset(RL_MD, *entries("http://example.com/a")))
    site.docs["/rl.xml"] = lambda request, n: Response(
        body, media_type="application/xml", headers={"Content-Encoding": "gzip"}
    )
    doc, resources = read_document(site.url("/rl.xml"))
    assert doc.at is not None
    assert [r.loc for r in resources] == ["http://example.com/a"]


def test_max_bytes_counts_the_decoded_body(site: Site) -> None:
    big = urlset(RL_MD, *entries(*(f"http://example.com/r{i}" for i in range(20_000))))
    body = gzip.compress(big)
    site.docs["/rl.xml"] = lambda request, n: Response(
        body, media_type="application/xml", headers={"Content-Encoding": "gzip"}
    )
    assert len(body) < 100_000 < len(big)
    with pytest.raises(ReadError, match="larger than the limit of 100000 bytes") as info:
        read_document(site.url("/rl.xml"), max_bytes=100_000)
    assert info.value.source == site.url("/rl.xml")


def test_endless_body_is_cut_at_the_size_cap(site: Site) -> None:
    async def endless() -> AsyncIterator[bytes]:
        yield f'<urlset xmlns="{SM}">'.encode()
        for _ in range(2000):  # 64 MB at most, so the server always finishes
            yield b"<!-- " + b"x" * 32_000 + b" -->"

    site.docs["/rl.xml"] = lambda request, n: StreamingResponse(endless())
    with pytest.raises(ReadError, match="larger than the limit"):
        read_document(site.url("/rl.xml"), max_bytes=1_000_000)


# -- HTTP errors and retries ---------------------------------------------------------------------


def test_404_raises_fetch_error_naming_the_url(site: Site) -> None:
    with pytest.raises(FetchError) as info:
        open_document(site.url("/missing.xml"))
    assert info.value.source == site.url("/missing.xml")
    assert "HTTP 404" in str(info.value)
    assert str(info.value).startswith(site.url("/missing.xml"))
    assert isinstance(info.value, ResourceSyncError)
    assert site.hits["/missing.xml"] == 1  # a 404 is not retried


def test_404_in_the_cli_is_one_line_exit_2(site: Site) -> None:
    for command in ("cat", "validate"):
        result = CliRunner().invoke(main, [command, site.url("/missing.xml")])
        assert result.exit_code == 2
        assert site.url("/missing.xml") in result.stderr
        assert "HTTP 404 Not Found" in result.stderr
        assert "Traceback" not in result.output


def test_validate_records_a_404_target_as_unreadable_and_checks_the_others(site: Site) -> None:
    site.xml("/rl.xml", urlset(RL_MD, *entries("http://example.com/a")))
    report = validate([site.url("/missing.xml"), site.url("/rl.xml")])
    assert [f.source for f in report.unreadable] == [site.url("/missing.xml")]
    assert [d.source for d in report.documents] == [site.url("/rl.xml")]


def test_validate_follow_reports_a_404_part_and_checks_the_rest(site: Site) -> None:
    site.xml(
        "/index.xml",
        urlset(
            RL_MD,
            "<sitemap><loc>{base}/gone.xml</loc></sitemap>",
            "<sitemap><loc>{base}/part.xml</loc></sitemap>",
            index=True,
        ),
    )
    site.xml("/part.xml", urlset(RL_MD, *entries("http://example.com/a")))
    report = validate([site.url("/index.xml")], follow=True)
    assert [f.source for f in report.unreadable] == [site.url("/gone.xml")]
    assert site.url("/part.xml") in [d.source for d in report.documents]


def flaky(
    body: bytes, failures: int, retry_after: str | None
) -> Callable[[Request, int], Response]:
    def handle(request: Request, n: int) -> Response:
        if n <= failures:
            headers = {"Retry-After": retry_after} if retry_after is not None else {}
            return Response("busy", status_code=503, headers=headers)
        return Response(body, media_type="application/xml")

    return handle


def test_503_then_200_is_retried(site: Site) -> None:
    site.docs["/rl.xml"] = flaky(urlset(RL_MD, *entries("http://example.com/a")), 2, "0")
    _, resources = read_document(site.url("/rl.xml"))
    assert [r.loc for r in resources] == ["http://example.com/a"]
    assert site.hits["/rl.xml"] == 3


def test_503_without_retry_after_is_retried_with_backoff(site: Site) -> None:
    # Through open_document only the default policy applies (backoff 0.5 s: one wait ≤ 0.5 s).
    site.docs["/rl.xml"] = flaky(urlset(RL_MD, *entries("http://example.com/a")), 1, None)
    with open_document(site.url("/rl.xml"), client=make_client(HttpOptions())) as doc:
        assert [r.loc for r in doc] == ["http://example.com/a"]
    assert site.hits["/rl.xml"] == 2


def test_503_forever_gives_up_after_the_retries(site: Site) -> None:
    site.docs["/rl.xml"] = flaky(b"", 100, "0")
    with pytest.raises(FetchError, match="HTTP 503") as info:
        open_document(site.url("/rl.xml"))
    assert info.value.source == site.url("/rl.xml")
    assert site.hits["/rl.xml"] == 1 + RetryPolicy().retries


def test_the_retry_policy_of_the_client_given_to_open_document_is_used(site: Site) -> None:
    site.docs["/rl.xml"] = flaky(b"", 100, "0")
    client = make_client(HttpOptions(retry=RetryPolicy(retries=0, backoff=0.01)))
    with client, pytest.raises(FetchError):
        open_document(site.url("/rl.xml"), client=client)
    assert site.hits["/rl.xml"] == 1


# -- indexes over HTTP ---------------------------------------------------------------------------


def index_site(site: Site) -> None:
    up = '<rs:ln rel="up" href="{base}/capabilitylist.xml"/>'
    site.xml(
        "/capabilitylist.xml",
        urlset(
            'capability="capabilitylist"',
            '<rs:ln rel="up" href="{base}/.well-known/resourcesync"/>',
            '<url><loc>{base}/resourcelist.xml</loc><rs:md capability="resourcelist"/></url>',
        ),
    )
    site.xml(
        "/resourcelist.xml",
        urlset(
            RL_MD,
            up,
            "<sitemap><loc>{base}/resourcelist-1.xml</loc></sitemap>",
            "<sitemap><loc>{base}/resourcelist-2.xml.gz</loc></sitemap>",
            index=True,
        ),
    )
    site.xml("/resourcelist-1.xml", urlset(RL_MD, up, *entries("http://e.com/1", "http://e.com/2")))
    part2 = urlset(RL_MD, up, *entries("http://e.com/3")).replace(b"{base}", site.base.encode())
    site.xml("/resourcelist-2.xml.gz", gzip.compress(part2), media_type="application/gzip")


def test_iter_entries_fetches_the_parts_of_an_index(site: Site) -> None:
    index_site(site)
    locs = [r.loc for r in iter_entries(site.url("/resourcelist.xml"))]
    assert locs == ["http://e.com/1", "http://e.com/2", "http://e.com/3"]
    assert site.hits["/resourcelist-1.xml"] == 1
    assert site.hits["/resourcelist-2.xml.gz"] == 1


def test_iter_entries_raises_on_a_missing_part(site: Site) -> None:
    index_site(site)
    del site.docs["/resourcelist-1.xml"]
    with pytest.raises(ResourceSyncError) as info:
        list(iter_entries(site.url("/resourcelist.xml")))
    assert site.url("/resourcelist-1.xml") in str(info.value)


def test_validate_follow_over_http(site: Site) -> None:
    index_site(site)
    result = CliRunner().invoke(
        main, ["validate", site.url("/capabilitylist.xml"), "--follow", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["findings"] == []
    assert [(d["source"], d["entries"]) for d in report["documents"]] == [
        (site.url("/capabilitylist.xml"), 1),
        (site.url("/resourcelist.xml"), 2),
        (site.url("/resourcelist-1.xml"), 2),
        (site.url("/resourcelist-2.xml.gz"), 1),
    ]


def test_cat_follow_over_http(site: Site) -> None:
    index_site(site)
    result = CliRunner().invoke(main, ["cat", site.url("/resourcelist.xml"), "--follow"])
    assert result.exit_code == 0, result.output
    assert [line.split("\t")[-1] for line in result.stdout.splitlines()] == [
        "http://e.com/1",
        "http://e.com/2",
        "http://e.com/3",
    ]


# -- DTDs and entities are never fetched ---------------------------------------------------------

DTD = b'<!ENTITY leak "LEAKED-FROM-DTD">'


@pytest.mark.parametrize(
    ("prolog", "body"),
    [
        ('<!DOCTYPE urlset SYSTEM "{base}/evil.dtd">', "<url><loc>http://e.com/a</loc></url>"),
        (
            '<!DOCTYPE urlset PUBLIC "-//X//DTD X//EN" "{base}/evil.dtd">',
            "<url><loc>http://e.com/&leak;</loc></url>",
        ),
        (
            '<!DOCTYPE urlset [<!ENTITY % p SYSTEM "{base}/evil.dtd"> %p;]>',
            "<url><loc>http://e.com/&leak;</loc></url>",
        ),
        (
            '<!DOCTYPE urlset [<!ENTITY leak SYSTEM "{base}/evil.dtd">]>',
            "<url><loc>http://e.com/&leak;</loc></url>",
        ),
    ],
    ids=["system-dtd", "public-dtd", "parameter-entity", "external-entity"],
)
def test_external_dtd_is_never_fetched(site: Site, prolog: str, body: str) -> None:
    site.docs["/evil.dtd"] = lambda request, n: Response(DTD, media_type="application/xml-dtd")
    site.xml("/rl.xml", urlset(RL_MD, body, prolog=prolog))
    with pytest.raises(ReadError) as info:
        read_document(site.url("/rl.xml"))
    assert "DOCTYPE declarations are not allowed" in info.value.message
    assert info.value.source == site.url("/rl.xml")
    assert site.hits["/rl.xml"] == 1
    assert site.hits["/evil.dtd"] == 0

    result = CliRunner().invoke(main, ["cat", site.url("/rl.xml")])
    assert result.exit_code == 2
    assert "LEAKED" not in result.output
    assert site.hits["/evil.dtd"] == 0


def test_a_connection_lost_half_way_is_a_read_error_naming_the_url() -> None:
    body = urlset(RL_MD, *entries(*(f"http://example.com/{i}" for i in range(2000))))

    async def half(request: Request) -> Response:
        async def stream() -> AsyncIterator[bytes]:
            yield body[: len(body) // 2]
            raise RuntimeError("the server fell over")

        # A declared length that is never delivered: the client sees the connection drop.
        return StreamingResponse(stream(), headers={"Content-Length": str(len(body))})

    app = Starlette(routes=[Route("/rl.xml", half)])
    with serve(app) as base:
        with pytest.raises(ReadError) as info:
            read_document(f"{base}/rl.xml")
        assert f"{base}/rl.xml" in str(info.value)
        result = CliRunner().invoke(main, ["cat", f"{base}/rl.xml"])
        assert result.exit_code == 2
        assert "Traceback" not in result.output
