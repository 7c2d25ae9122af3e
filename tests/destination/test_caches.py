"""A Source behind a shared cache (a CDN, Varnish, Squid): the cache answers a resource's old
bytes after the Source changed it, until its copy expires. Without a digest in the list (or
when the edit keeps the length) those bytes were written, recorded as the listed version and
never asked for again: the run said ok over a stale copy, and so did every run after it.

The cache here is a real reverse proxy on another loopback address: it keeps each resource's
answer (not the documents, as a CDN set up for static files), answers from its copy with `Age`
and the Source's own `Date` (RFC 9111 §4, §5.1), answers a conditional request from its copy
(304), and either checks with the Source on `Cache-Control: no-cache` (as Squid does) or not
(as many CDNs and Varnish's default rules do).
"""

from __future__ import annotations

import contextlib
import io
import time
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime
from email.utils import formatdate
from pathlib import Path
from typing import Any

import httpx
import pytest

from resourcesync.destination.answer import cached_before
from resourcesync.w3cdt import format_w3c, parse_http_date
from tests.destination.helpers import cli, cli_json, hand_source, md5, set_report, tree, urlset
from tests.servers import serve


class Cache:
    """A shared cache in front of `origin`: resources are kept (every answer of 200), the
    documents (`.xml`, `/.well-known/`) always come from the Source."""

    def __init__(self, origin: str, *, honours_no_cache: bool) -> None:
        self.origin = origin
        self.honours_no_cache = honours_no_cache
        #: path → (headers, body, when the copy was taken)
        self.store: dict[str, tuple[dict[str, str], bytes, float]] = {}
        #: The resources asked of the Source, in order.
        self.to_origin: list[str] = []

    def age(self, seconds: float) -> None:
        """Every copy kept as if taken `seconds` earlier (its `Date` with it)."""
        for path, (headers, body, taken) in list(self.store.items()):
            taken -= seconds
            headers = {**headers, "date": formatdate(taken, usegmt=True)}
            self.store[path] = (headers, body, taken)

    def app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.responses import Response
        from starlette.routing import Route

        async def endpoint(request: Any) -> Any:
            path = request.url.path
            document = path.endswith(".xml") or path.startswith("/.well-known/")
            kept = None if document else self.store.get(path)
            asked = request.headers.get("cache-control", "") + request.headers.get("pragma", "")
            if kept is None or (self.honours_no_cache and "no-cache" in asked):
                if not document:
                    self.to_origin.append(path)
                async with httpx.AsyncClient(trust_env=False) as client:
                    got = await client.get(self.origin + path)
                headers = {
                    k: v
                    for k, v in got.headers.items()
                    if k in ("content-type", "last-modified", "etag", "date")
                }
                if document or got.status_code != 200:
                    return Response(got.content, status_code=got.status_code, headers=headers)
                kept = (headers, got.content, time.time())
                self.store[path] = kept
                fresh = True
            else:
                fresh = False
            headers, body, taken = kept
            age = {"age": "0" if fresh else str(int(time.time() - taken))}
            since = request.headers.get("if-modified-since")
            if since is not None and since == headers.get("last-modified"):
                return Response(status_code=304, headers={**headers, **age})
            return Response(body, headers={**headers, **age})

        return Starlette(routes=[Route("/{path:path}", endpoint)])


@contextlib.contextmanager
def behind_a_cache(*, honours_no_cache: bool) -> Iterator[tuple[Any, Cache]]:
    """A hand-made Source whose every URI is the cache's (on 127.0.0.2)."""
    with hand_source() as src:
        cache = Cache(src.base, honours_no_cache=honours_no_cache)
        with serve(cache.app(), host="127.0.0.2") as front:
            src.base = front
            yield src, cache


def _w3c(t: float) -> str:
    return format_w3c(datetime.fromtimestamp(int(t), UTC))


#: The Source's resources: path → (bytes, when last changed). Those ending in `.lm` are served
#: with a `Last-Modified` (the copy then asks with `If-Modified-Since`), the others without.
Files = dict[str, tuple[bytes, float]]


def _serve(src: Any, files: Files, *, digests: bool = False) -> None:
    """`files` served and listed in a Resource List without digests, as the spec allows
    (with `digests`, with their MD5s)."""
    for rel, (body, changed) in files.items():
        if rel.endswith(".lm"):

            async def dated(request: Any, body: bytes = body, changed: float = changed) -> Any:
                from starlette.responses import Response

                return Response(body, headers={"Last-Modified": formatdate(changed, usegmt=True)})

            src.handlers[rel] = dated
        else:
            src.files[rel] = body
    listed = [
        {
            "loc": src.base + rel,
            "length": len(body),
            "lastmod": _w3c(changed),
            **({"md5": md5(body)} if digests else {}),
        }
        for rel, (body, changed) in files.items()
    ]
    src.publish(listed, at=_w3c(max(changed for _, changed in files.values())))


def _change(
    src: Any,
    files: Files,
    new: dict[str, bytes],
    since: float,
    now: float,
    *,
    digests: bool = False,
) -> None:
    """The Source changes `new` (lengths kept) at `now`; its Change List says so."""
    files.update({rel: (body, now) for rel, body in new.items()})
    _serve(src, files, digests=digests)
    changes = [
        {
            "loc": src.base + rel,
            "length": len(body),
            "lastmod": _w3c(now),
            "change": "updated",
            "datetime": _w3c(now),
            **({"md5": md5(body)} if digests else {}),
        }
        for rel, body in new.items()
    ]
    src.docs["/changelist.xml"] = urlset("changelist", changes, **{"from": _w3c(since)})


def _old(now: float) -> Files:
    names = ("/a.lm", "/b.txt", "/c.txt")
    return {rel: (rel[1:2].encode() + b"-v1", now - 7200) for rel in names}


NEW = {"/a.lm": b"a-v2", "/b.txt": b"b-v2"}


@contextlib.contextmanager
def changed_behind_a_cache(
    dest: Path,
    *,
    honours_no_cache: bool,
    new: dict[str, bytes] = NEW,
    digests: bool = False,
) -> Iterator[tuple[Any, Cache]]:
    """a, b and c copied to `dest` through the cache; the cache's copies then an hour old,
    and a and b (`new`) changed at the Source ten minutes ago."""
    with behind_a_cache(honours_no_cache=honours_no_cache) as (src, cache):
        now = time.time()
        files = _old(now)
        _serve(src, files, digests=digests)
        assert cli("sync", src.base, dest).exit_code == 0
        assert tree(dest) == {"a.lm": b"a-v1", "b.txt": b"b-v1", "c.txt": b"c-v1"}
        cache.age(3600)
        _change(src, files, new, now - 7200, now - 600, digests=digests)
        cache.to_origin.clear()
        yield src, cache


def _problems(summary: dict[str, Any]) -> str:
    return " ".join(p["message"] for p in set_report(summary, "capabilitylist.xml")["problems"])


def test_a_cache_that_checks_with_the_source_on_no_cache_gives_the_new_bytes(
    tmp_path: Path,
) -> None:
    """The cache kept a and b an hour ago; the Source changed them ten minutes ago. a is asked
    for with the copy's `If-Modified-Since` (the cache answers 304 from its old copy), b
    unconditionally (200, its old bytes): both are asked again with `no-cache`, and the cache
    brings the Source's new bytes. c, unchanged, is not asked for."""
    dest = tmp_path / "dest"
    with changed_behind_a_cache(dest, honours_no_cache=True) as (src, cache):
        code, summary = cli_json("sync", src.base, dest)
        assert code == 0, summary
        assert tree(dest) == {"a.lm": b"a-v2", "b.txt": b"b-v2", "c.txt": b"c-v1"}
        assert sorted(cache.to_origin) == ["/a.lm", "/b.txt"]
        assert set_report(summary, "capabilitylist.xml")["fetched"] == 2
        assert cli("audit", src.base, dest).exit_code == 0
        # The cache's copies are new now: nothing more asked of the Source.
        cache.to_origin.clear()
        code, summary = cli_json("sync", src.base, dest, "--baseline")
        assert code == 0 and cache.to_origin == []
        assert tree(dest) == {"a.lm": b"a-v2", "b.txt": b"b-v2", "c.txt": b"c-v1"}


def test_a_cache_that_ignores_no_cache_fails_the_transfer_until_it_lets_go(
    tmp_path: Path,
) -> None:
    """A cache that answers its old copy even to `no-cache` (a CDN): a failed transfer, exit 1,
    the previous copy kept; every run says so until the cache lets its copy go, and then the
    new bytes come."""
    dest = tmp_path / "dest"
    with changed_behind_a_cache(dest, honours_no_cache=False) as (src, cache):
        for _ in range(2):
            code, summary = cli_json("sync", src.base, dest)
            assert code == 1, summary
            problems = _problems(summary)
            assert problems.count("a cache answered with a copy it has held for") == 2, problems
            assert "from before the change the list gives" in problems
            assert tree(dest) == {"a.lm": b"a-v1", "b.txt": b"b-v1", "c.txt": b"c-v1"}
            assert cli("audit", src.base, dest).exit_code == 1
        cache.store.clear()  # its copies expire
        code, summary = cli_json("sync", src.base, dest)
        assert code == 0, summary
        assert tree(dest) == {"a.lm": b"a-v2", "b.txt": b"b-v2", "c.txt": b"c-v1"}
        assert cli("audit", src.base, dest).exit_code == 0


def test_with_a_digest_in_the_list_the_bytes_decide_not_the_age(tmp_path: Path) -> None:
    """A Source that lists digests, behind a cache that ignores `no-cache`, whose `<lastmod>`s
    moved while the bytes stayed (a repository dating its files by their records): a second
    Destination's baseline refused the cache's copies as from before the change on every run
    until the cache let them go, though their bytes are the ones the list gives. The digest
    decides: taken, nothing asked of the Source."""
    same_bytes = {"/a.lm": b"a-v1", "/b.txt": b"b-v1"}
    with changed_behind_a_cache(
        tmp_path / "first", honours_no_cache=False, new=same_bytes, digests=True
    ) as (src, cache):
        dest = tmp_path / "second"
        code, summary = cli_json("sync", src.base, dest)
        assert code == 0, summary
        assert tree(dest) == {"a.lm": b"a-v1", "b.txt": b"b-v1", "c.txt": b"c-v1"}
        assert cache.to_origin == []
        assert cli("audit", src.base, dest).exit_code == 0


@pytest.mark.parametrize("honours_no_cache", [True, False])
def test_with_a_digest_a_cache_old_copy_is_asked_again_and_named(
    tmp_path: Path, honours_no_cache: bool
) -> None:
    """The bytes changed and the list's digest says so: the cache's old copy fails the digest
    and is asked for again past the cache. A cache that checks with the Source brings the new
    bytes; one that answers its old copy again fails the transfer, and the failure names the
    cache's copy beside the digest."""
    dest = tmp_path / "dest"
    with changed_behind_a_cache(dest, honours_no_cache=honours_no_cache, digests=True) as (
        src,
        cache,
    ):
        code, summary = cli_json("sync", src.base, dest)
        if honours_no_cache:
            assert code == 0, summary
            assert tree(dest) == {"a.lm": b"a-v2", "b.txt": b"b-v2", "c.txt": b"c-v1"}
            assert sorted(cache.to_origin) == ["/a.lm", "/b.txt"]
            assert cli("audit", src.base, dest).exit_code == 0
            return
        assert code == 1, summary
        problems = _problems(summary)
        assert problems.count("mismatch: md5") == 2, problems
        assert problems.count("; a cache answered with a copy it has held for") == 2, problems
        assert tree(dest) == {"a.lm": b"a-v1", "b.txt": b"b-v1", "c.txt": b"c-v1"}
        assert cli("audit", src.base, dest).exit_code == 1


def test_a_cache_copy_taken_after_the_change_is_taken(tmp_path: Path) -> None:
    """The cache took its copies after the change: taken from the cache, the Source never
    asked (no request too many for the caches that spare a Source its load)."""
    dest = tmp_path / "dest"
    with behind_a_cache(honours_no_cache=True) as (src, cache):
        now = time.time()
        _serve(src, _old(now))
        with httpx.Client(trust_env=False) as client:  # the cache takes its copies
            for rel in ("/a.lm", "/b.txt", "/c.txt"):
                assert client.get(src.base + rel).status_code == 200
        cache.age(60)
        cache.to_origin.clear()
        assert cli("sync", src.base, dest).exit_code == 0
        assert tree(dest) == {"a.lm": b"a-v1", "b.txt": b"b-v1", "c.txt": b"c-v1"}
        assert cache.to_origin == []


HOUR = 3600.0


@pytest.mark.parametrize(
    ("headers", "changed", "stale"),
    [
        # Kept an hour, changed ten minutes ago: stale, by our clock and by its Date.
        ({"Age": "3600"}, -600, True),
        ({"Age": "3600", "Date": -HOUR}, -600, True),
        # The Date of a cache that writes its own (now), the Age tells.
        ({"Age": "3600", "Date": 0}, -600, True),
        # A Date of the Source's, older than our clock says (a clock behind ours): the Date.
        ({"Age": "60", "Date": -HOUR}, -600, True),
        # Taken after the change, or within the clocks' margin of it.
        ({"Age": "60"}, -600, False),
        ({"Age": "601"}, -600, False),
        # Not a cache's copy, or fetched from the Source for this answer.
        ({}, -600, False),
        ({"Age": "0"}, -600, False),
        ({"Age": "soon"}, -600, False),
        ({"Age": "²"}, -600, False),
        # A change dated ahead of every clock: a Source whose clock runs fast, not judged.
        ({"Age": "3600"}, HOUR, False),
        # No time given for the change: nothing to judge by.
        ({"Age": "3600"}, None, False),
        # A Date that cannot be read is left out; an Age of centuries is still an answer.
        ({"Age": "3600", "Date": "yesterday"}, -600, True),
        ({"Age": "9" * 40}, -600, True),
    ],
)
def test_cached_before(headers: dict[str, Any], changed: float | None, stale: bool) -> None:
    now = 1_800_000_000.0
    given = {
        k: formatdate(now + v, usegmt=True) if k == "Date" and not isinstance(v, str) else v
        for k, v in headers.items()
    }
    when = None if changed is None else datetime.fromtimestamp(now + changed, UTC)
    why = cached_before(given, when, now)
    assert (why is not None) == stale, why
    if why is not None:
        assert why.startswith("a cache answered with a copy it has held for ")


def test_http_dates() -> None:
    want = datetime(1994, 11, 6, 8, 49, 37, tzinfo=UTC)
    assert parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT") == want
    assert parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT") == want  # RFC 850
    assert parse_http_date("Sun Nov  6 08:49:37 1994") == want  # asctime, no zone: UTC
    assert parse_http_date("Sun, 06 Nov 1994 08:49:37 -0000") == want
    assert parse_http_date("Sun, 06 Nov 1994 17:49:37 +0900") == want
    for bad in (None, "", "yesterday", "Sun, 99 Nov 1994 08:49:37 GMT", "0"):
        assert parse_http_date(bad) is None, bad


def _package(base: str, files: dict[str, bytes], at: float) -> bytes:
    """A Resource Dump package: its manifest and `files`."""
    manifest = urlset(
        "resourcedump-manifest",
        [
            {"loc": f"{base}/{rel}", "length": len(body), "md5": md5(body), "path": f"/{rel}"}
            for rel, body in files.items()
        ],
        at=_w3c(at),
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        # Members dated once for all (writestr dates them now): the same files make the same
        # bytes, whenever the package is built.
        for name, data in [("manifest.xml", manifest), *files.items()]:
            z.writestr(zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0)), data)
    return out.getvalue()


def _dump(
    src: Any,
    files: dict[str, bytes],
    at: float,
    *,
    digest: bool = False,
    package_at: float | None = None,
) -> None:
    """A Source with a Resource Dump only, whose one package keeps its URL from dump to dump
    (and the dump gives neither its length nor its digest, unless `digest`: its MD5). The
    package's manifest is dated `package_at` (else `at`)."""
    b = src.base
    package = _package(b, files, at if package_at is None else package_at)
    listed = {"loc": f"{b}/dump/part1.zip", "type": "application/zip"}
    if digest:
        listed["md5"] = md5(package)
    src.capabilities([{"loc": f"{b}/resourcedump.xml", "capability": "resourcedump"}])
    src.docs["/resourcedump.xml"] = urlset("resourcedump", [listed], at=_w3c(at))
    src.files["/dump/part1.zip"] = package


@pytest.mark.parametrize("honours_no_cache", [True, False])
def test_a_cached_dump_package_from_before_the_dump_is_not_applied(
    tmp_path: Path, honours_no_cache: bool
) -> None:
    """A Source followed through its Resource Dump, whose package keeps its URL: a cache's copy
    of the package taken before the dump's `at` is the previous dump's (it was applied, and the
    run said ok over the old bytes). Asked again with `no-cache`; a cache that answers its old
    copy again makes the run fail, the copy as it was."""
    dest = tmp_path / "dest"
    with behind_a_cache(honours_no_cache=honours_no_cache) as (src, cache):
        now = time.time()
        _dump(src, {"a.txt": b"a-v1", "b.txt": b"b-v1"}, now - 7200)
        assert cli("sync", src.base, dest).exit_code == 0
        assert tree(dest) == {"a.txt": b"a-v1", "b.txt": b"b-v1"}
        cache.age(3600)
        _dump(src, {"a.txt": b"a-v2", "b.txt": b"b-v1"}, now - 600)
        result = cli("sync", src.base, dest)
        if honours_no_cache:
            assert result.exit_code == 0, result.stderr
            assert tree(dest) == {"a.txt": b"a-v2", "b.txt": b"b-v1"}
        else:
            # As a package that does not match the dump: the run stops, nothing applied.
            assert result.exit_code == 2, result.stderr
            said = result.stderr
            assert "part1.zip: a cache answered with a copy it has held for 3,600 s" in said
            assert "from before the time the dump gives for the package" in said
            assert tree(dest) == {"a.txt": b"a-v1", "b.txt": b"b-v1"}
            cache.store.clear()
            assert cli("sync", src.base, dest).exit_code == 0
            assert tree(dest) == {"a.txt": b"a-v2", "b.txt": b"b-v1"}


@pytest.mark.parametrize("honours_no_cache", [True, False])
def test_a_dump_package_with_a_digest_is_judged_by_its_bytes(
    tmp_path: Path, honours_no_cache: bool
) -> None:
    """A dump that gives its package's digest: a cache's copy from before the dump's `at` is
    the package when its bytes are (a Source that dates its dump anew and keeps the package),
    and is asked for again past the cache when they are not; a cache that answers its old
    copy again stops the run, naming the digest and the cache's copy."""
    dest = tmp_path / "dest"
    with behind_a_cache(honours_no_cache=honours_no_cache) as (src, cache):
        now = time.time()
        old = {"a.txt": b"a-v1", "b.txt": b"b-v1"}
        _dump(src, old, now - 7200, digest=True)
        assert cli("sync", src.base, dest).exit_code == 0
        cache.age(3600)
        # Dated anew, the same package: taken from the cache, the Source not asked.
        _dump(src, old, now - 600, digest=True, package_at=now - 7200)
        cache.to_origin.clear()
        result = cli("sync", src.base, tmp_path / "second")
        assert result.exit_code == 0, result.stderr
        assert tree(tmp_path / "second") == old and cache.to_origin == []
        # A new package: the cache's old one fails its digest.
        _dump(src, {"a.txt": b"a-v2", "b.txt": b"b-v1"}, now - 300, digest=True)
        result = cli("sync", src.base, dest)
        if honours_no_cache:
            assert result.exit_code == 0, result.stderr
            assert tree(dest) == {"a.txt": b"a-v2", "b.txt": b"b-v1"}
            return
        assert result.exit_code == 2, result.stderr
        assert "part1.zip: package md5 is " in result.stderr
        assert "; a cache answered with a copy it has held for" in result.stderr
        assert tree(dest) == old
