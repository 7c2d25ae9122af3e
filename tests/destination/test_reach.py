"""The Destination's wall against what a Source's documents and answers point to (`http.reach`):
a hostile or compromised Source redirected a resource to the machine's own services or the
cloud's metadata service (`169.254.169.254`), named a mirror or a list there, and the answer was
asked for — and, without a digest in the list, written into the copy as the resource (an
aggregator that serves its copies would have published it).

Requests go to the public Internet, to the Source's own host, and to the kinds of address the
Source is on. Here every server is on loopback: the Source's run is given the reach of a Source
on a public address, and 127.0.0.3 stands for the machine's own services.
"""

from __future__ import annotations

import ipaddress
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from resourcesync.destination.sync import SyncOptions, sync
from resourcesync.errors import ReadError
from resourcesync.http import HttpOptions, RetryPolicy
from resourcesync.http.reach import Reach, address_kind
from tests.destination.helpers import cli, entry, hand_source, tree, urlset
from tests.servers import serve


class Inside:
    """A service of the machine's own (on 127.0.0.3) that records what it is asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.routing import Route

        async def endpoint(request: Request) -> Response:
            self.asked.append(request.url.path)
            if request.url.path.endswith(".xml"):
                return Response(urlset("changelist", [], **{"from": "2024-01-01T00:00:00Z"}))
            return Response(b"SECRET-CREDENTIALS")

        return Starlette(routes=[Route("/{path:path}", endpoint)])


def _on_loopback() -> HttpOptions:
    """The options of a client whose Source is on loopback (a reach of its own each time)."""
    return HttpOptions(retry=RetryPolicy(retries=0), reach=Reach(allowed=frozenset({"loopback"})))


def _options(src: Any, **more: Any) -> SyncOptions:
    """The options of a run whose Source is on a public address (its own host reachable)."""
    host = src.base.split("//")[1].split(":")[0]
    http = HttpOptions(retry=RetryPolicy(retries=0), reach=Reach(hosts=frozenset({host})), **more)
    return SyncOptions(http=http)


def test_a_source_cannot_lead_requests_to_the_machines_own_services(tmp_path: Path) -> None:
    """A redirect, a mirror and a list on 127.0.0.3: none is asked; the resource fails with the
    reason, the one the list gives without a digest too (it was written as the resource)."""
    inside = Inside()
    with hand_source() as src, serve(inside.app(), host="127.0.0.3") as there:
        b = src.base

        async def away(request: Request) -> Response:
            return RedirectResponse(f"{there}/latest/meta-data", status_code=302)

        src.handlers["/a.txt"] = away
        src.files["/b.txt"] = b"beta"
        mirrored = entry(b, "/c.txt", b"gamma")
        src.publish(
            [
                {"loc": f"{b}/a.txt"},  # no length, no digest: anything would do
                entry(b, "/b.txt", b"beta"),
                mirrored,
            ]
        )
        # c.txt's <loc> is not served (404): its mirror, inside, would be asked next.
        doc = src.docs["/resourcelist.xml"].decode()
        doc = doc.replace(
            f"<loc>{b}/c.txt</loc>",
            f'<loc>{b}/c.txt</loc><rs:ln rel="duplicate" href="{there}/c.txt"/>',
        )
        src.docs["/resourcelist.xml"] = doc.encode()
        report = sync(b, tmp_path / "dest", _options(src))
        assert not report.ok
        assert tree(tmp_path / "dest") == {"b.txt": b"beta"}
        problems = {p.uri: p.message for s in report.sets for p in s.problems}
        why = "127.0.0.3 is a loopback address, which a Source on public addresses may not lead"
        assert why in problems[f"{b}/a.txt"], problems
        assert inside.asked == []
        # A list of the Source's on that address: refused before it is asked.
        src.docs["/capabilitylist.xml"] = urlset(
            "capabilitylist",
            [
                {"loc": f"{b}/resourcelist.xml", "capability": "resourcelist"},
                {"loc": f"{there}/changelist.xml", "capability": "changelist"},
            ],
        )
        with pytest.raises(ReadError, match=r"refused: 127\.0\.0\.3 is a loopback address"):
            sync(b, tmp_path / "dest", _options(src))
        assert inside.asked == []
        # Let through on purpose, or from a Source that is itself on loopback (the default).
        report = sync(b, tmp_path / "open", SyncOptions(any_address=True))
        assert tree(tmp_path / "open")["a.txt"] == b"SECRET-CREDENTIALS"
        assert inside.asked


def test_the_command_walls_a_run_in_by_default(tmp_path: Path) -> None:
    """`resourcesync sync` takes the reach of its Source: one on loopback may lead to other
    loopback addresses (these tests' servers); `--any-address` is accepted."""
    inside = Inside()
    with hand_source() as src, serve(inside.app(), host="127.0.0.3") as there:

        async def away(request: Request) -> Response:
            return RedirectResponse(f"{there}/a.txt", status_code=302)

        src.handlers["/a.txt"] = away
        src.publish([{"loc": f"{src.base}/a.txt"}])
        assert cli("sync", src.base, tmp_path / "dest").exit_code == 0
        assert cli("sync", src.base, tmp_path / "d2", "--any-address").exit_code == 0
        assert inside.asked == ["/a.txt", "/a.txt"]


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("93.184.216.34", "public"),
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("fd00:ec2::254", "private"),
        ("10.0.0.7", "private"),
        ("100.64.0.1", "private"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("64:ff9b::a9fe:a9fe", "link-local"),  # 169.254.169.254 through NAT64
    ],
)
def test_address_kinds(address: str, kind: str) -> None:
    assert address_kind(ipaddress.ip_address(address)) == kind


def test_the_reach_of_a_source_is_the_kinds_of_address_it_is_on() -> None:
    public = Reach.around("https://93.184.216.34/rs/")
    assert public is not None and public.allowed == frozenset()
    assert public.why_not("https://93.184.216.34:8443/x") is None  # its own host
    assert public.why_not("http://93.184.216.35/x") is None
    for url, kind in (
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[::ffff:169.254.169.254]/", "link-local"),
        ("http://127.0.0.1:6379/", "loopback"),
        ("http://0.0.0.0:8080/", "unspecified"),
        ("http://10.1.2.3/", "private"),
    ):
        why = public.why_not(url)
        assert why is not None and f"is a {kind} address" in why, (url, why)
        assert "a Source on public addresses may not lead to (--any-address to allow)" in why
    local = Reach.around("http://127.0.0.1:8000/")
    assert local is not None and local.allowed == frozenset({"loopback"})
    assert local.why_not("http://127.0.0.9/") is None
    assert local.why_not("http://169.254.169.254/") is not None
    inside = Reach.around("http://10.0.0.5/")
    assert inside is not None and inside.why_not("http://10.9.9.9/") is None
    assert Reach.around("/a/local/capabilitylist.xml") is None
    # A host the run maps (`--map http://10.0.0.5/=DIR`) was chosen by its user.
    mapped = Reach.around("https://93.184.216.34/rs/", ["http://10.0.0.5/files/"])
    assert mapped is not None and mapped.why_not("http://10.0.0.5/files/a.pdf") is None
    assert mapped.why_not("http://10.0.0.6/files/a.pdf") is not None


def test_behind_a_proxy_names_are_the_proxys_to_resolve() -> None:
    """Through a proxy a name is resolved by the proxy, not here: only addresses are judged."""
    public = frozenset({"93.184.216.34"})
    reach = Reach(hosts=public, _proxies={"http": "http://10.0.0.1:3128"})
    assert reach.why_not("http://inside.invalid/") is None
    assert reach.why_not("http://169.254.169.254/") is not None
    bypassed = Reach(hosts=public, _proxies={"http": "http://10.0.0.1:3128", "no": "localhost"})
    why = bypassed.why_not("http://localhost:6379/")
    assert why is not None and "is a loopback address" in why


def test_a_name_that_resolves_anew_is_judged_where_the_connection_goes(tmp_path: Path) -> None:
    """DNS rebinding: a name judged a moment ago (when its DNS answer was a public address:
    the judgement is kept a minute) resolves to the machine's own address when the transfer
    connects. The addresses the connection is made to are judged there: refused."""
    inside = Inside()
    with hand_source() as src, serve(inside.app()) as there:
        port = there.rsplit(":", 1)[1]

        async def away(request: Request) -> Response:
            return RedirectResponse(f"http://localhost:{port}/a.txt", status_code=302)

        src.handlers["/a.txt"] = away
        src.publish([{"loc": f"{src.base}/a.txt"}])
        options = _options(src)
        reach = options.http.reach
        assert reach is not None
        reach._cache[f"http://localhost:{port}"] = (time.monotonic() + 60, None)
        report = sync(src.base, tmp_path / "dest", options)
        assert not report.ok and tree(tmp_path / "dest") == {}
        said = " ".join(p.message for s in report.sets for p in s.problems)
        assert "refused: localhost (127.0.0.1) is a loopback address" in said, said
        assert inside.asked == []


def test_a_list_whose_name_resolves_anew_is_judged_where_the_connection_goes(
    tmp_path: Path,
) -> None:
    """DNS rebinding for the documents (read by the httpx clients): a Change List named on a
    host judged public a moment ago, which resolves to the machine's own address when the list
    is asked for. The addresses the connection is made to are judged there: refused, and
    nothing is asked of the service inside."""
    inside = Inside()
    with hand_source() as src, serve(inside.app()) as there:
        port = there.rsplit(":", 1)[1]
        src.publish([])
        src.docs["/capabilitylist.xml"] = urlset(
            "capabilitylist",
            [
                {"loc": f"{src.base}/resourcelist.xml", "capability": "resourcelist"},
                {"loc": f"http://localhost:{port}/changelist.xml", "capability": "changelist"},
            ],
        )
        options = _options(src)
        reach = options.http.reach
        assert reach is not None
        reach._cache[f"http://localhost:{port}"] = (time.monotonic() + 60, None)
        report = sync(src.base, tmp_path / "dest", options)
        assert not report.ok and report.sets[0].gap is not None
        assert "refused: localhost (127.0.0.1) is a loopback address" in report.sets[0].gap
        assert inside.asked == []


def test_the_clients_connect_to_the_addresses_they_judged() -> None:
    """Both httpx clients connect by the address judged, the request keeping its name (its
    Host header; TLS its server name); a name judged now to an address outside the reach is
    refused at the connection, by the asynchronous client too."""
    import asyncio

    from resourcesync.http import make_async_client, make_client

    seen: list[str] = []

    async def endpoint(request: Request) -> Response:
        seen.append(request.headers["host"])
        return Response(b"ok")

    from starlette.applications import Starlette
    from starlette.routing import Route

    app = Starlette(routes=[Route("/{path:path}", endpoint)])
    with serve(app) as there:
        port = there.rsplit(":", 1)[1]
        url = f"http://localhost:{port}/x"
        inside = _on_loopback()
        public = HttpOptions(retry=RetryPolicy(retries=0), reach=Reach())
        public.reach._cache[f"http://localhost:{port}"] = (time.monotonic() + 60, None)  # type: ignore[union-attr]
        with make_client(inside) as client:
            assert client.get(url).content == b"ok"
        with make_client(public) as client, pytest.raises(Exception, match="refused: localhost"):
            client.get(url)

        async def asynchronous() -> None:
            async with make_async_client(inside) as client:
                assert (await client.get(url)).content == b"ok"
            async with make_async_client(public) as client:
                with pytest.raises(Exception, match="refused: localhost"):
                    await client.get(url)

        asyncio.run(asynchronous())
    assert seen == [f"localhost:{port}", f"localhost:{port}"]


def test_over_tls_the_connection_by_address_verifies_the_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connected by the judged address, a TLS connection still verifies the certificate for
    the name the URL gives (httpcore's server name is the request's host)."""
    import ssl

    import trustme
    from starlette.applications import Starlette
    from starlette.routing import Route

    import resourcesync.http as rs_http

    ca = trustme.CA()
    issued = ca.issue_cert("localhost")
    chain, key = tmp_path / "chain.pem", tmp_path / "key.pem"
    for pem in issued.cert_chain_pems:
        pem.write_to_path(str(chain), append=True)
    issued.private_key_pem.write_to_path(str(key))
    trusted = ssl.create_default_context()
    ca.configure_trust(trusted)
    monkeypatch.setattr(rs_http, "_tls_context", lambda: trusted)

    async def endpoint(request: Request) -> Response:
        return Response(b"ok")

    app = Starlette(routes=[Route("/{path:path}", endpoint)])
    options = _on_loopback()
    with serve(app, tls=(str(chain), str(key))) as there:
        port = there.rsplit(":", 1)[1]
        with rs_http.make_client(options) as client:
            assert client.get(f"https://localhost:{port}/x").content == b"ok"
            # The certificate names localhost, not the address connected to.
            with pytest.raises(Exception, match="certificate"):
                client.get(f"https://127.0.0.1:{port}/x")


def test_validate_and_cat_read_within_their_targets_reach(tmp_path: Path) -> None:
    """`validate --follow` reads the documents a target links to: a hostile Source's
    Capability List naming a Change List on the machine's own services had it asked. The
    command reads within its targets' reach (`--any-address` opens it), as `sync` does."""
    from resourcesync.cli.document import http_client
    from resourcesync.http import make_client
    from resourcesync.sitemap import validate as validate_documents

    inside = Inside()
    with hand_source() as src, serve(inside.app(), host="127.0.0.3") as there:
        src.publish([])
        src.docs["/capabilitylist.xml"] = urlset(
            "capabilitylist",
            [
                {"loc": f"{src.base}/resourcelist.xml", "capability": "resourcelist"},
                {"loc": f"{there}/changelist.xml", "capability": "changelist"},
            ],
        )
        target = f"{src.base}/capabilitylist.xml"
        # The reach the commands take: their targets' (here on loopback), or none.
        with http_client([target, str(tmp_path / "local.xml")], 5.0) as client:
            assert client.rs_options.reach.allowed == {"loopback"}
            assert client.rs_options.reach.hosts == {"127.0.0.1"}
        with http_client([target], 5.0, any_address=True) as client:
            assert client.rs_options.reach is None
        # A target on a public address: its list on 127.0.0.3 is refused, never asked.
        with make_client(_options(src).http) as client:
            report = validate_documents([target], follow=True, client=client)
        said = " ".join(f.message for f in report.unreadable)
        assert "refused: 127.0.0.3 is a loopback address" in said, said
        assert inside.asked == []
        result = cli("validate", target, "--follow", "--any-address")
        assert result.exit_code in (0, 1), result.stderr
        assert inside.asked == ["/changelist.xml"]
