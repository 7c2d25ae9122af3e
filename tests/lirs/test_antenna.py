"""The antenna against real loopback servers (uvicorn on 127.0.0.1, ephemeral port) whose pages
change, answer 304, omit Last-Modified, refuse HEAD, fail and hang."""

from __future__ import annotations

import asyncio
import email.utils
import gzip
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from resourcesync.errors import ReadError
from resourcesync.lirs.antenna import (
    Antenna,
    AntennaConfig,
    Site,
    read_site_list,
    strip_markup,
)
from resourcesync.lirs.codec import Record, format_record, read_records
from resourcesync.sitemap import Mapping, Resolver, open_document, validate
from tests.servers import serve

T0 = 1_700_000_000


@dataclass
class Pages:
    """What the test server serves; tests change it between rounds."""

    lm: int = T0 - 3600
    etag_body: str = "<html><title>Etag page</title><body>v1</body></html>"
    plain_body: str = "<html><head><title>日記</title></head><body>first entry</body></html>"
    feed: bytes = b""
    #: The status the feed is served with (a 206 with `feed_range`).
    feed_status: int = 200
    feed_range: str = ""
    hits: dict[str, int] = field(default_factory=dict)
    methods: list[tuple[str, str, bool]] = field(default_factory=list)


def make_app(pages: Pages) -> Starlette:
    def count(request: Request) -> None:
        path = request.url.path
        pages.hits[path] = pages.hits.get(path, 0) + 1
        conditional = "if-none-match" in request.headers or "if-modified-since" in request.headers
        pages.methods.append((request.method, path, conditional))

    async def with_lm(request: Request) -> Response:
        count(request)
        stamp = email.utils.formatdate(pages.lm, usegmt=True)
        since = request.headers.get("if-modified-since")
        if since and email.utils.parsedate_to_datetime(since).timestamp() >= pages.lm:
            return Response(status_code=304)
        body = b"<html><title>LM</title></html>" if request.method == "GET" else b""
        return Response(
            body, media_type="text/html", headers={"Last-Modified": stamp, "Content-Length": "30"}
        )

    async def with_etag(request: Request) -> Response:
        count(request)
        tag = f'"{hash(pages.etag_body) & 0xFFFFFF:x}"'
        if request.headers.get("if-none-match") == tag:
            return Response(status_code=304, headers={"ETag": tag})
        return Response(pages.etag_body, media_type="text/html", headers={"ETag": tag})

    async def plain(request: Request) -> Response:
        count(request)
        # No Last-Modified, no ETag: only the body tells.
        return Response(pages.plain_body.encode("euc_jp"), media_type="text/html; charset=EUC-JP")

    async def no_head(request: Request) -> Response:
        count(request)
        if request.method == "HEAD":
            return Response(status_code=405)
        return Response("<p>GET only</p>", media_type="text/html")

    async def gone(request: Request) -> Response:
        count(request)
        return Response("gone", status_code=404)

    async def slow(request: Request) -> Response:
        count(request)
        await asyncio.sleep(1.2)  # longer than the 0.5 s timeout
        return Response("too late")

    async def feed(request: Request) -> Response:
        count(request)
        tag = f'"{len(pages.feed)}"'
        if request.headers.get("if-none-match") == tag:
            return Response(status_code=304)
        headers = {"ETag": tag}
        if pages.feed_range:
            headers["Content-Range"] = pages.feed_range
        return Response(
            pages.feed,
            status_code=pages.feed_status,
            media_type="application/x-lirs",
            headers=headers,
        )

    return Starlette(
        routes=[
            Route("/lm", with_lm, methods=["GET", "HEAD"]),
            Route("/etag", with_etag, methods=["GET", "HEAD"]),
            Route("/plain", plain, methods=["GET", "HEAD"]),
            Route("/nohead", no_head, methods=["GET", "HEAD"]),
            Route("/gone", gone, methods=["GET", "HEAD"]),
            Route("/slow", slow, methods=["GET", "HEAD"]),
            Route("/feed.lirs.gz", feed, methods=["GET"]),
        ]
    )


@pytest.fixture
def site() -> Iterator[tuple[str, Pages]]:
    pages = Pages()
    with serve(make_app(pages)) as base:
        yield base, pages


class Clock:
    def __init__(self) -> None:
        self.now = float(T0)

    def __call__(self) -> float:
        return self.now


def config(tmp_path: Path, **kw: object) -> AntennaConfig:
    defaults: dict[str, object] = {
        "out_dir": tmp_path / "out",
        "timeout": 0.5,
        "delay": 0,
        "per_host": 4,
        "min_interval": 0,
        "base_url": "http://antenna.example.jp/",
    }
    defaults.update(kw)
    return AntennaConfig(**defaults)  # type: ignore[arg-type]


def records_by_path(out: Path) -> dict[str, Record]:
    return {r.url.rsplit("/", 1)[1]: r for r in read_records(out / "antenna.lirs.gz")}


def test_rounds_detect_changes_304_missing_last_modified_and_failures(
    tmp_path: Path, site: tuple[str, Pages]
) -> None:
    base, pages = site
    sites = [Site(f"{base}/{p}") for p in ("lm", "etag", "plain", "nohead", "gone", "slow")]
    clock = Clock()
    warnings: list[object] = []
    cfg = config(tmp_path)
    out = Path(cfg.out_dir)
    with Antenna(cfg, clock=clock, on_warning=warnings.append) as ant:
        first = ant.run_round(sites)
        assert (first.checked, first.new, first.failed) == (6, 4, 2)
        errors = {f["url"].rsplit("/", 1)[1]: f["error"] for f in first.failures}
        assert errors == {"gone": "HTTP 404 Not Found", "slow": "timed out after 0.5s"}
        recs = records_by_path(out)
        assert recs["lm"].last_modified == pages.lm and recs["lm"].last_detected == T0
        assert recs["lm"].content_length == 30
        assert recs["lm"].source_url == "http://antenna.example.jp/antenna.lirs.gz"
        # No Last-Modified: the first look cannot date the page.
        assert recs["plain"].last_modified == 0 and recs["plain"].last_detected == T0
        assert recs["plain"].title == "日記"
        assert recs["etag"].title == "Etag page"
        assert recs["gone"].is_error and recs["slow"].is_error
        assert pages.methods.count(("HEAD", "/lm", False)) == 1
        assert ("GET", "/lm", False) not in pages.methods  # HEAD was enough
        assert ("GET", "/nohead", False) in pages.methods

        # Second round: nothing changed; conditional requests answer 304.
        clock.now += 600
        pages.methods.clear()
        second = ant.run_round(sites)
        assert (second.unchanged, second.changed, second.failed) == (4, 0, 2)
        assert ("HEAD", "/lm", True) in pages.methods
        assert ("HEAD", "/etag", True) in pages.methods  # If-None-Match on HEAD: 304
        assert not any(m[:2] == ("GET", "/etag") for m in pages.methods)
        recs = records_by_path(out)
        assert recs["lm"].last_modified == pages.lm
        assert recs["lm"].last_detected == T0 + 600  # detected again, by us

        # Third round: pages change; the plain page only in its text, dated by our check.
        clock.now += 600
        pages.lm = T0 + 900
        pages.etag_body = pages.etag_body.replace("v1", "v2")
        pages.plain_body = pages.plain_body.replace("first entry", "second entry")
        third = ant.run_round(sites)
        assert (third.changed, third.unchanged) == (3, 1)
        recs = records_by_path(out)
        assert recs["lm"].last_modified == T0 + 900
        assert recs["plain"].last_modified == T0 + 1200
        assert recs["etag"].last_modified == T0 + 1200

    # Newest first in the LIRS file, error rows last.
    order = [r.url.rsplit("/", 1)[1] for r in read_records(out / "antenna.lirs.gz")]
    assert order[:3] == ["etag", "plain", "lm"]
    assert set(order[3:]) == {"nohead", "gone", "slow"}  # no time known: last
    assert any("timed out" in str(w) for w in warnings)


def test_outputs_are_valid_resourcesync_and_html(tmp_path: Path, site: tuple[str, Pages]) -> None:
    base, pages = site
    sites = [Site(f"{base}/lm", "Last-Modified <site> & co"), Site(f"{base}/gone")]
    clock = Clock()
    cfg = config(tmp_path)
    out = Path(cfg.out_dir)
    with Antenna(cfg, clock=clock) as ant:
        ant.run_round(sites)
        clock.now += 60
        pages.lm = T0 + 30
        ant.run_round(sites)
        clock.now += 60
        ant.run_round(sites[:1])  # the second site leaves the list
    for name in ("resourcelist.xml", "changelist.xml"):
        report = validate([out / name])
        assert report.ok, [str(f) for f in report.findings]
    with open_document(out / "changelist.xml") as doc:
        changes = [(e.loc.rsplit("/", 1)[1], e.change) for e in doc]
    assert changes == [("lm", "created"), ("lm", "updated"), ("gone", "deleted")]
    with open_document(out / "resourcelist.xml") as doc:
        [entry] = list(doc)
    assert entry.lastmod is not None and int(entry.lastmod.timestamp()) == T0 + 30
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "Last-Modified &lt;site&gt; &amp; co" in page
    assert "<site>" not in page
    assert "2023-11-15 07:13 +09:00" in page  # T0 + 30 in the site's time zone
    leftovers = [p.name for p in out.iterdir() if p.name.startswith(".")]
    assert leftovers in ([], [".well-known"])  # no temporary file left behind


def test_with_a_base_url_the_antenna_is_a_complete_source(
    tmp_path: Path, site: tuple[str, Pages]
) -> None:
    base, _ = site
    cfg = config(tmp_path, base_url="http://antenna.example.org/")
    out = Path(cfg.out_dir)
    with Antenna(cfg, clock=Clock()) as ant:
        ant.run_round([Site(f"{base}/lm")])
    report = validate(
        [out / ".well-known" / "resourcesync"],
        follow=True,
        resolver=Resolver([Mapping("http://antenna.example.org/", out)]),
    )
    assert report.ok and not report.warnings, [str(f) for f in report.findings]
    assert sorted(d.capability or "" for d in report.documents) == [
        "capabilitylist",
        "changelist",
        "description",
        "resourcelist",
    ]


def test_backoff_skips_sites_that_rarely_change(tmp_path: Path, site: tuple[str, Pages]) -> None:
    base, pages = site
    sites = [Site(f"{base}/lm")]
    clock = Clock()
    with Antenna(config(tmp_path, min_interval=100, max_interval=350), clock=clock) as ant:
        assert ant.run_round(sites).checked == 1  # new: next in 100 s
        clock.now += 50
        assert ant.run_round(sites).not_due == 1
        clock.now += 50
        assert ant.run_round(sites).unchanged == 1  # quiet once: next in 200 s
        clock.now += 150
        assert ant.run_round(sites).checked == 0
        clock.now += 50
        assert ant.run_round(sites).unchanged == 1  # quiet twice: 400 s, capped at 350
        clock.now += 349
        assert ant.run_round(sites).checked == 0
        clock.now += 1
        assert ant.run_round(sites).checked == 1
    assert pages.hits["/lm"] == 4


def test_per_host_delay_spaces_requests(tmp_path: Path, site: tuple[str, Pages]) -> None:
    import time

    base, _ = site
    sites = [Site(f"{base}/lm?{i}") for i in range(4)]
    started = time.monotonic()
    with Antenna(config(tmp_path, delay=0.15, per_host=1)) as ant:
        summary = ant.run_round(sites)
    assert summary.new == 4
    assert time.monotonic() - started >= 0.45  # four requests to one host, 0.15 s apart


def test_relayed_feeds_are_merged_conditionally_and_expire(
    tmp_path: Path, site: tuple[str, Pages]
) -> None:
    base, pages = site
    relayed = [
        Record(T0 - 100, T0 - 50, 32400, 0, "http://friend.example.jp/", "友達", "", "http://b/"),
        Record(T0 - 100, T0 - 90000, 32400, 0, "http://stale.example.jp/", "古い"),
        # A relayed view of our own site, older than our own check: ours wins.
        Record(T0 - 10, T0 - 10, 32400, 0, f"{base}/lm", "relayed"),
    ]
    pages.feed = gzip.compress(
        ("\n".join(format_record(r) for r in relayed) + "\n").encode("euc_jp")
    )
    local = tmp_path / "local.lirs"
    local.write_text(format_record(Record(1, T0, 0, 0, "http://local.example/", "L")) + "\n")
    clock = Clock()
    cfg = config(tmp_path, relays=[f"{base}/feed.lirs.gz", str(local)], expires=86400)
    with Antenna(cfg, clock=clock) as ant:
        summary = ant.run_round([Site(f"{base}/lm", "mine")])
        assert summary.relayed == 3  # the stale record expired
        by_url = {r.url: r for r in read_records(Path(cfg.out_dir) / "antenna.lirs.gz")}
        assert set(by_url) == {
            f"{base}/lm",
            "http://friend.example.jp/",
            "http://local.example/",
        }
        assert by_url["http://friend.example.jp/"].last_detected == T0 - 50  # inherited
        assert by_url[f"{base}/lm"].title == "mine"
        clock.now += 10
        ant.run_round([Site(f"{base}/lm")])
        # The second fetch was conditional and answered 304; the cached records stay.
        assert pages.methods.count(("GET", "/feed.lirs.gz", True)) == 1
        by_url = {r.url: r for r in read_records(Path(cfg.out_dir) / "antenna.lirs.gz")}
        assert "http://friend.example.jp/" in by_url


def test_a_relayed_feed_answered_in_part_keeps_what_was_relayed(
    tmp_path: Path, site: tuple[str, Pages]
) -> None:
    """A relay that answers 206 Partial Content (a part, which nobody asked for) has failed:
    said, and its last whole feed stays. Before, the part replaced it: the records after the
    cut were gone from the antenna."""
    base, pages = site
    relayed = [
        Record(T0 - 100, T0 - 50, 32400, 0, f"http://site{i}.example.jp/", f"日記{i}")
        for i in range(3)
    ]
    text = ("\n".join(format_record(r) for r in relayed) + "\n").encode("euc_jp")
    pages.feed = text
    warnings: list[object] = []
    cfg = config(tmp_path, relays=[f"{base}/feed.lirs.gz"], expires=86400)
    with Antenna(cfg, clock=Clock(), on_warning=warnings.append) as ant:
        assert ant.run_round([]).relayed == 3
        cut = text.index(b"\n") + 1
        pages.feed, pages.feed_status = text[:cut], 206
        pages.feed_range = f"bytes 0-{cut - 1}/{len(text)}"
        assert ant.run_round([]).relayed == 3
    assert any("206 Partial Content" in str(w) for w in warnings), warnings


def test_site_list_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "urls.txt"
    path.write_text("# sites\nhttp://a.example/ A diary\n\nHTTP://A.example/\nftp://x/\n")
    with pytest.raises(ReadError) as info:
        read_site_list(path)
    assert str(info.value) == f"{path}:5: not an http(s) URL: 'ftp://x/'"
    path.write_text("http://a.example/ A diary\nhttp://A.EXAMPLE/\n")
    assert read_site_list(path) == [Site("http://a.example/", "A diary")]


def test_strip_markup_ignores_tags_scripts_and_whitespace() -> None:
    a = b"<html><script>var t=1;</script><p class='x'>Hello\n  world</p><!-- 1 --></html>"
    b = b"<html><script>var t=2;</script><p class='y'>Hello world</p><!-- 2 --></html>"
    assert strip_markup(a) == strip_markup(b) == b"Helloworld"


def test_a_site_cannot_redirect_the_antenna_to_the_machines_own_services(
    tmp_path: Path, site: tuple[str, Pages]
) -> None:
    """A listed site that redirects to an address the list does not name on the machine
    (127.0.0.3 standing for its own services, or the cloud's metadata service): the antenna
    checks thousands of sites, and such a site would have it ask there. Refused, the check
    failed with the reason; listed hosts and public addresses stay reachable, and
    `any_address` opens the rest."""
    from starlette.responses import RedirectResponse

    asked: list[str] = []

    async def inside(request: Request) -> Response:
        asked.append(request.url.path)
        return Response("SECRET", headers={"Last-Modified": "Tue, 14 Nov 2023 00:00:00 GMT"})

    with serve(Starlette(routes=[Route("/{p:path}", inside)]), host="127.0.0.3") as there:

        async def away(request: Request) -> Response:
            return RedirectResponse(f"{there}/latest/meta-data", status_code=302)

        base, _ = site
        away_app = Starlette(routes=[Route("/away", away, methods=["GET", "HEAD"])])
        with serve(away_app, host="127.0.0.2") as elsewhere:
            sites = [Site(f"{base}/lm"), Site(f"{elsewhere}/away")]
            with Antenna(config(tmp_path), clock=Clock()) as ant:
                summary = ant.run_round(sites)
            assert (summary.new, summary.failed) == (1, 1), summary
            errors = [f["error"] for f in summary.failures]
            assert "127.0.0.3 is a loopback address, which a listed site on" in errors[0], errors
            assert asked == []
            with Antenna(config(tmp_path / "open", any_address=True), clock=Clock()) as ant:
                summary = ant.run_round(sites)
            assert (summary.new, summary.failed) == (2, 0), summary
            assert asked


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("UPDATE sites SET last_modified = 'x' WHERE url LIKE '%/lm'", "/lm: its stored last"),
        ("UPDATE sites SET quiet = 'x' WHERE url LIKE '%/lm'", "/lm: its stored quiet"),
        ("UPDATE sites SET next_check = 'x' WHERE url LIKE '%/lm'", "/lm: its stored next"),
        ("UPDATE changes SET at = 'x'", "3 changes of the state that cannot be read"),
    ],
    ids=["a site's time", "a site's count", "a site's next check", "a change"],
)
def test_a_state_value_of_another_type_is_said_and_taken_afresh(
    tmp_path: Path, site: tuple[str, Pages], damage: str, said: str
) -> None:
    """SQLite keeps what a column is given: a value of another type in the antenna's state
    (a hand, a tool, a disk) stopped every round with a `TypeError` traceback, or left a site
    never due again. The site is checked afresh, a record that cannot be read is let go, each
    said once; the round completes and its outputs are whole."""
    base, pages = site
    sites = [Site(f"{base}/{p}") for p in ("lm", "etag", "plain")]
    clock = Clock()
    warnings: list[object] = []
    cfg = config(tmp_path)
    with Antenna(cfg, clock=clock, on_warning=warnings.append) as ant:
        ant.run_round(sites)
        ant.db.execute(damage)
        clock.now += 600
        second = ant.run_round(sites)
        assert second.checked == 3 and second.failed == 0
        assert [w for w in map(str, warnings) if said in w], warnings
        recs = records_by_path(Path(cfg.out_dir))
        assert recs["lm"].last_modified == pages.lm  # dated again by its check
        warnings.clear()
        clock.now += 600
        assert ant.run_round(sites).checked == 3
        assert not warnings
