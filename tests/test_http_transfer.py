"""The transfer pipeline's client (`resourcesync.http.transfer`, aiohttp) keeps the guarantees
of the httpx clients (issue 15.1): credentials only to their origins on every redirect hop,
redirects bounded, Retry-After, connection failures as Unreachable, bodies guarded. Real
servers on loopback; 127.0.0.2 stands for another host."""

from __future__ import annotations

import asyncio
import gzip
import socket
import socketserver
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.responses import Response

from resourcesync.errors import FetchError
from resourcesync.http import (
    USER_AGENT,
    HttpOptions,
    RetryPolicy,
    Unreachable,
    make_client,
    origin,
    tls,
)
from resourcesync.http.transfer import TransferSession, run_loop
from tests.servers import read_head, serve, tls_files

NO_RETRY = RetryPolicy(retries=0)


def fetch(url: str, options: HttpOptions, **kw: Any) -> tuple[int, bytes, dict[str, str]]:
    """GET through a TransferSession: (status, body, headers)."""

    async def go() -> tuple[int, bytes, dict[str, str]]:
        async with TransferSession(options) as session, session.open(url, **kw) as response:
            body = b"".join([c async for c in response.body()])
            return response.status_code, body, dict(response.headers)

    return asyncio.run(go())


class Recorder:
    """An app that records each request's path and headers and answers from `routes`."""

    def __init__(self, routes: dict[str, Any]) -> None:
        self.routes = routes
        self.seen: list[tuple[str, dict[str, str]]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.seen.append((scope["path"], headers))
        route = self.routes.get(scope["path"])
        response = route if isinstance(route, Response) or route is None else route()
        await (response or Response(b"missing", status_code=404))(scope, receive, send)


def redirect(to: str, status: int = 302, body: bytes = b"") -> Response:
    return Response(body, status_code=status, headers={"Location": to})


def test_credentials_follow_their_origin_on_every_redirect_hop() -> None:
    """A resource on the Source (credentials scoped to it) redirects to another host, which
    redirects back: the other host never sees them, the Source sees them on both requests,
    and the User-Agent and the user's other headers go everywhere."""
    a = Recorder({})
    b = Recorder({})
    with serve(a) as source, serve(b, host="127.0.0.2") as other:
        a.routes["/r"] = redirect(f"{other}/x")
        b.routes["/x"] = redirect(f"{source}/final", status=307)
        a.routes["/final"] = Response(b"the bytes")
        port = int(source.rsplit(":", 1)[1])
        options = HttpOptions(
            headers={"X-Project": "p1"},
            scoped_headers={"Authorization": "Bearer s3cret"},
            scoped_hosts=frozenset({origin("http", "127.0.0.1", port)}),
        )
        status, body, _ = fetch(source + "/r", options, headers={"If-None-Match": '"e1"'})
    assert (status, body) == (200, b"the bytes")
    assert [(p, h.get("authorization")) for p, h in a.seen] == [
        ("/r", "Bearer s3cret"),
        ("/final", "Bearer s3cret"),
    ]
    assert [(p, h.get("authorization")) for p, h in b.seen] == [("/x", None)]
    for _, headers in a.seen + b.seen:
        assert headers["user-agent"] == USER_AGENT
        assert headers["x-project"] == "p1"
        assert headers["if-none-match"] == '"e1"'
        assert headers["accept-encoding"] == "gzip, deflate"


def test_credentials_for_https_are_not_sent_over_plain_http(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = Recorder({"/a": Response(b"1"), "/b": Response(b"2")})
    with serve(app) as base, caplog.at_level("WARNING"):
        port = int(base.rsplit(":", 1)[1])
        options = HttpOptions(
            scoped_headers={"Authorization": "Bearer s3cret"},
            scoped_hosts=frozenset({origin("https", "127.0.0.1", port)}),
        )

        async def both() -> None:
            async with TransferSession(options) as session:
                for path in ("/a", "/b"):
                    async with session.open(base + path) as response:
                        assert b"".join([c async for c in response.body()])

        asyncio.run(both())
    assert [h.get("authorization") for _, h in app.seen] == [None, None]
    assert len([r for r in caplog.records if "plain http" in r.getMessage()]) == 1


def test_redirects_are_bounded() -> None:
    app = Recorder({})
    app.routes["/loop"] = redirect("/loop")
    app.routes["/big"] = redirect("/loop", body=b"x" * (1 << 20))
    app.routes["/file"] = redirect("file:///etc/passwd")
    with serve(app) as base:
        options = HttpOptions(retry=NO_RETRY)
        with pytest.raises(FetchError, match="too many redirects"):
            fetch(base + "/loop", options)
        assert len(app.seen) == 21  # the first request and 20 redirects followed
        with pytest.raises(FetchError, match="a redirect's body: larger than 64 KiB"):
            fetch(base + "/big", options)
        with pytest.raises(FetchError, match="not an http"):
            fetch(base + "/file", options)


def test_retry_after_is_honoured_then_the_status_is_reported() -> None:
    answers = iter([Response(b"", status_code=503, headers={"Retry-After": "1"})])

    def flaky() -> Response:
        return next(answers, Response(b"at last"))

    app = Recorder({"/r": flaky, "/gone": Response(b"", status_code=410)})
    with serve(app) as base:
        options = HttpOptions(retry=RetryPolicy(retries=2, backoff=0.01))
        start = time.monotonic()
        assert fetch(base + "/r", options)[:2] == (200, b"at last")
        assert time.monotonic() - start >= 0.95
        with pytest.raises(FetchError, match="HTTP 410 Gone"):
            fetch(base + "/gone", options)
        # 304 only when asked for.
        app.routes["/same"] = Response(b"", status_code=304)
        assert fetch(base + "/same", options, accept=(304,))[0] == 304
        with pytest.raises(FetchError, match="HTTP 304"):
            fetch(base + "/same", options)


def test_a_refused_connection_is_unreachable_after_the_retries() -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    options = HttpOptions(retry=RetryPolicy(retries=1, backoff=0.01))
    with pytest.raises(
        Unreachable, match=r"cannot connect to 127\.0\.0\.1:[0-9]+: connection refused"
    ) as caught:
        fetch(f"http://127.0.0.1:{port}/r", options)
    assert caught.value.source == f"http://127.0.0.1:{port}/r"


def test_bodies_are_decoded_and_guarded() -> None:
    packed = gzip.compress(b"abc" * 1000)
    app = Recorder(
        {
            "/gz": Response(packed, headers={"Content-Encoding": "gzip"}),
            "/br": Response(b"\x00", headers={"Content-Encoding": "br"}),
            "/long": Response(b"y" * 5000),
        }
    )
    with serve(app) as base:
        options = HttpOptions(retry=NO_RETRY)
        assert fetch(base + "/gz", options)[1] == b"abc" * 1000
        with pytest.raises(FetchError, match="Content-Encoding br was not asked for"):
            fetch(base + "/br", options)
        with pytest.raises(FetchError, match="more than the 100 bytes declared"):
            fetch(base + "/long", options, declared=100)
        small = HttpOptions(retry=NO_RETRY, max_size=1000)
        with pytest.raises(FetchError, match="larger than the 1000 bytes limit"):
            fetch(base + "/long", small)
        with pytest.raises(FetchError, match="larger than the 1000 bytes limit"):
            fetch(base + "/gz", small)  # the limit is on the decoded size


def test_uris_are_sent_as_written_and_iris_encoded() -> None:
    app = Recorder({})

    async def echo(scope: Any, receive: Any, send: Any) -> None:
        raw = scope.get("raw_path", b"").decode()
        await Response(raw.encode())(scope, receive, send)

    with serve(echo) as base:
        options = HttpOptions(retry=NO_RETRY)
        assert fetch(base + "/a%7Eb/%41?q=%2F", options)[1] == b"/a%7Eb/%41"
        assert fetch(base + "/caf\u00e9 x", options)[1] == b"/caf%C3%A9%20x"
    assert app.seen == []


class _Proxy(socketserver.BaseRequestHandler):
    """A forward proxy that answers every request itself, recording its head."""

    heads: list[str]

    def handle(self) -> None:
        head = read_head(self.request)
        if head is None:
            return
        self.heads.append(head.decode())
        self.request.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nvia proxy"
        )


def test_proxies_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY (with its credentials) is used and NO_PROXY honoured, as the httpx clients
    do; ~/.netrc is not read."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    heads: list[str] = []
    handler = type("Recording", (_Proxy,), {"heads": heads})
    with socketserver.ThreadingTCPServer(("127.0.0.2", 0), handler) as proxy:
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        try:
            app = Recorder({"/r": Response(b"direct")})
            with serve(app) as base:
                monkeypatch.setenv("HTTP_PROXY", f"http://u:pw@127.0.0.2:{proxy.server_address[1]}")
                options = HttpOptions(retry=NO_RETRY)
                assert fetch(base + "/r", options)[1] == b"via proxy"
                monkeypatch.setenv("NO_PROXY", "127.0.0.1")
                assert fetch(base + "/r", options)[1] == b"direct"
        finally:
            proxy.shutdown()
    assert len(heads) == 1
    request_line, *fields = heads[0].split("\r\n")
    assert request_line == f"GET {base}/r HTTP/1.1"
    assert "Proxy-Authorization: Basic dTpwdw==" in fields
    assert len(app.seen) == 1


def test_tls_is_verified_with_the_one_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transfer client and the document client trust the same certificates (the one TLS
    context: certifi, or SSL_CERT_FILE): a server whose CA is not trusted is refused by both,
    and trusted by both once SSL_CERT_FILE names its CA."""
    chain, key, ca_file = tls_files(tmp_path)
    app = Recorder({"/r": Response(b"secret bytes")})
    options = HttpOptions(retry=NO_RETRY)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with serve(app, tls=(chain, key)) as base:
        assert base.startswith("https://")
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        tls.forget()
        try:
            with pytest.raises(
                Unreachable, match=r"certificate of 127\.0\.0\.1:[0-9]+ is not trusted"
            ):
                fetch(base + "/r", options)
            with make_client(options) as client, pytest.raises(httpx.ConnectError):
                client.get(base + "/r")
            monkeypatch.setenv("SSL_CERT_FILE", ca_file)
            tls.forget()
            assert fetch(base + "/r", options)[:2] == (200, b"secret bytes")
            with make_client(options) as client:
                assert client.get(base + "/r").content == b"secret bytes"
        finally:
            tls.forget()
    assert len(app.seen) == 2  # the refused handshakes never reached the application


def test_connections_are_kept_across_bodies_304s_and_redirects() -> None:
    """A body read to its end, a 304 and a redirect's body leave their connection to the next
    request (one connection for all); a body left unread closes it."""
    clients: list[Any] = []
    app = Recorder(
        {
            "/a": Response(b"abc"),
            "/same": Response(b"", status_code=304),
            "/moved": redirect("/a", body=b"see /a"),
            # Larger than what can come with the headers: unread when the response is let go.
            "/big": Response(b"x" * (1 << 20)),
        }
    )

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        clients.append(tuple(scope["client"]))
        await app(scope, receive, send)

    async def go(base: str) -> None:
        async with TransferSession(HttpOptions(retry=NO_RETRY), limit=1) as session:
            for path in ("/a", "/same", "/moved", "/a"):
                async with session.open(base + path, accept=(304,)) as response:
                    assert b"".join([c async for c in response.body()]) in (b"abc", b"")
            async with session.open(base + "/big"):
                pass  # not read: this connection is not reused
            async with session.open(base + "/a") as response:
                assert b"".join([c async for c in response.body()]) == b"abc"

    with serve(counting) as base:
        asyncio.run(go(base))
    assert len(clients) == 7
    assert len(set(clients[:6])) == 1, clients
    assert clients[6] != clients[5]


# -- the event loop ------------------------------------------------------------------------


class _Stop(BaseException):
    pass


def test_the_transfers_run_on_uvloop_and_a_raising_sigterm_handler_stops_them() -> None:
    """uvloop runs a Python signal handler inside a callback of its own and only logs what it
    raises: the command line's SIGTERM (which raises to end the run) was printed and ignored,
    and a sync went on to an ok. `run_loop` hands it to the transfers' task, as asyncio's loop
    did; the handler is in place again afterwards."""
    import os
    import signal

    def stop(signum: int, frame: Any) -> None:
        raise _Stop

    async def transfers() -> str:
        loop = asyncio.get_running_loop()
        assert type(loop).__module__.startswith("uvloop")
        loop.call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)
        await asyncio.sleep(10)
        return "finished"

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        started = time.monotonic()
        with pytest.raises(_Stop):
            run_loop(transfers())
        assert time.monotonic() - started < 5
        assert signal.getsignal(signal.SIGTERM) is stop
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_time_limit_raised_from_sigalrm_stops_the_transfers_too() -> None:
    # The same for the other signals a program handles by raising (SIGALRM: `signal.alarm`).
    import signal

    def late(signum: int, frame: Any) -> None:
        raise TimeoutError("time limit")

    async def transfers() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        await asyncio.sleep(10)

    previous = signal.signal(signal.SIGALRM, late)
    try:
        with pytest.raises(TimeoutError, match="time limit"):
            run_loop(transfers())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_sigterm_handler_that_does_not_raise_leaves_the_transfers_running() -> None:
    # A program embedding the library (a scheduler letting the syncs in flight finish) keeps
    # its handler's meaning: it runs, and the transfers go on to their end.
    import os
    import signal

    heard: list[int] = []

    async def transfers() -> str:
        asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)
        await asyncio.sleep(0.3)
        return "finished"

    previous = signal.signal(signal.SIGTERM, lambda signum, frame: heard.append(signum))
    try:
        assert run_loop(transfers()) == "finished"
        assert heard == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_outside_the_main_thread_the_loop_leaves_signals_alone() -> None:
    # A worker thread (a fleet's) cannot take signals: its transfers run all the same.
    out: list[str] = []

    async def transfers() -> str:
        await asyncio.sleep(0.01)
        return "finished"

    thread = threading.Thread(target=lambda: out.append(run_loop(transfers())))
    thread.start()
    thread.join(10)
    assert out == ["finished"]


def test_a_signal_while_the_loop_gives_its_handlers_back_reaches_the_program() -> None:
    # Between the loop's handler going and the program's coming back, a SIGTERM would meet the
    # default action (the process killed, nothing cleaned up): it is held back until the
    # program's handler is in place, and that handler then runs. Played by a loop that sends
    # the signal to itself right after it removed its own handler.
    import subprocess
    import sys

    program = (
        "import asyncio, os, signal, uvloop\n"
        "from resourcesync.http import transfer\n"
        "class Stop(BaseException): pass\n"
        "def stop(signum, frame): raise Stop\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "class Loop(uvloop.Loop):\n"
        "    def remove_signal_handler(self, sig):\n"
        "        removed = super().remove_signal_handler(sig)\n"
        "        if sig == signal.SIGTERM: os.kill(os.getpid(), sig)\n"
        "        return removed\n"
        "uvloop.new_event_loop = Loop\n"
        "try:\n"
        "    transfer.run_loop(asyncio.sleep(0))\n"
        "except Stop:\n"
        "    print('stopped by the program')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert done.stdout.strip() == "stopped by the program"


def test_without_uvloop_the_transfers_run_on_asyncios_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # Where uvloop has no wheel (Windows, PyPy) it is not installed: asyncio's loop then.
    import sys

    monkeypatch.setitem(sys.modules, "uvloop", None)  # an import of it raises ImportError

    async def transfers() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert run_loop(transfers()).startswith("asyncio")
