"""The transfer pipeline's HTTP client: many small GETs, on aiohttp.

A Destination's run fetches thousands of resources (and dump packages) over a few connections
per host; what each GET costs in the client decides how many Sources one machine can follow.
aiohttp costs a fraction of httpx per request (bench/bench_client.py: 0.2–0.5 ms of CPU per
resource for a bare aiohttp loop, 1.3–2.7 ms for a bare httpx loop), so the transfers use it;
documents, the hub and the antenna keep the httpx clients of `resourcesync.http`.

Every guarantee of the httpx clients holds here too, with the same code where it can be shared:
the User-Agent and the options' headers; credentials (`scoped_headers`) sent to their origins
only, redirects included (redirects are followed here, hop by hop, not by aiohttp); the retry
policy with `Retry-After`; the connect and read timeouts; the deadline from the request to the
headers (`asyncio.timeout`) and to the body's last byte; the minimum rate; the size limits and
the declared length; gzip and deflate decoded in bounded pieces by `_Guard` (aiohttp's own
decoding is off); TLS with the one context; proxies from the environment.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Collection, Coroutine, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

from .._imports import importing_aiohttp
from ..errors import FetchError, fetch_error

with importing_aiohttp():  # in the program, without the default contexts' CA loads
    import aiohttp
    from aiohttp.abc import AbstractResolver, ResolveResult
    from aiohttp.resolver import DefaultResolver
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from . import (
    MAX_REDIRECT_BODY,
    RETRY_STATUS,
    Bandwidth,
    BodyRefused,
    HttpOptions,
    Unreachable,
    _Guard,
    _late,
    _refused,
    _tls_context,
    base_headers,
    codings_to_undo,
    content_codings,
    not_whole,
    retry_after_seconds,
    scope_headers,
)
from .reach import Reach

__all__ = ["MAX_REDIRECTS", "Fetched", "TransferSession", "run_loop"]

T = TypeVar("T")

#: Redirects followed for one request (httpx's default).
MAX_REDIRECTS = 20
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: A URI sent as it is written: ASCII, only characters a URI may hold. Anything else (an IRI,
#: a space) is encoded by yarl, as httpx would.
_AS_WRITTEN = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*\Z")


def _url(url: str) -> URL:
    return URL(url, encoded=True) if _AS_WRITTEN.match(url) else URL(url)


class Fetched:
    """A response whose status the caller accepted: its status, headers and guarded body."""

    __slots__ = ("_guard", "_response", "complete", "headers", "status_code", "url")

    def __init__(self, response: aiohttp.ClientResponse, guard: _Guard, url: str) -> None:
        self._response = response
        self._guard = guard
        self.url = url
        self.status_code: int = response.status
        self.headers: CIMultiDictProxy[str] = response.headers
        #: The whole body was read: the connection may serve the next request.
        self.complete = False

    async def body(self, bandwidth: Bandwidth | None = None) -> AsyncIterator[bytes]:
        """The body, decoded, in the pieces it arrives in (at most `PIECE` bytes once
        decoded); past a limit, a connection that fails or stalls: FetchError naming the URL.
        With `bandwidth`, pieces come no faster than its budget."""
        guard, content = self._guard, self._response.content
        step = max(1024, bandwidth.rate // 4) if bandwidth is not None else 0
        try:
            while data := await content.readany():
                for piece in guard.raw(data):
                    if bandwidth is None:
                        yield piece
                        continue
                    for at in range(0, len(piece), step):
                        await bandwidth.take(len(piece[at : at + step]))
                        yield piece[at : at + step]
            for piece in guard.end():
                yield piece
        except (BodyRefused, aiohttp.ClientError, TimeoutError) as exc:
            raise self._failed(exc) from None
        self.complete = True

    async def pour(self, write: Callable[[bytes], object], bandwidth: Bandwidth | None) -> None:
        """`body`, each piece handed to `write`: without an async generator between the
        connection and the file when no bandwidth budget paces it (a resource's body is
        mostly one piece, and the generator's machinery cost more than its write)."""
        if bandwidth is not None:
            async for piece in self.body(bandwidth):
                write(piece)
            return
        guard, content = self._guard, self._response.content
        try:
            while data := await content.readany():
                for piece in guard.raw(data):
                    write(piece)
            for piece in guard.end():
                write(piece)
        except (BodyRefused, aiohttp.ClientError, TimeoutError) as exc:
            raise self._failed(exc) from None
        self.complete = True

    def _failed(self, exc: BaseException) -> FetchError:
        if isinstance(exc, BodyRefused):
            return _refused(exc, self.url)
        return FetchError(f"transfer failed: {_reason(exc)}", source=self.url)

    def close(self) -> None:
        """Let the connection go: back to the pool when the body was read to its end,
        closed when it was not (the rest of a body is never read only to reuse a connection).
        A response without a body (304) keeps its connection."""
        if self.complete or self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


class TransferSession:
    """One connection pool for a run's transfers (`limit` connections in all, `per_host` to
    one host) and the options its requests follow. Use as an async context manager, inside
    the event loop that runs the transfers."""

    def __init__(self, options: HttpOptions, *, limit: int = 100, per_host: int = 0) -> None:
        self.options = options
        self._limit, self._per_host = limit, per_host
        self._session: aiohttp.ClientSession | None = None
        self._told: set[str] = set()
        #: Proxies from the environment (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY), read
        #: once: aiohttp's own `trust_env` looks them up, and reads ~/.netrc, in a worker thread
        #: on every request — more than the rest of a small transfer costs.
        self._proxies = urllib.request.getproxies_environment()
        self._proxy_for: dict[tuple[str, str], tuple[URL | None, dict[str, str] | None]] = {}
        self._base = CIMultiDict(base_headers(options))
        self._resolver: _WalledResolver | None = None

    async def __aenter__(self) -> TransferSession:
        opts = self.options
        if opts.reach is not None and not self._proxies:
            # The addresses each connection is made to are judged as they are resolved (a
            # proxy resolves the names it is given: then the hops' checks are the wall).
            self._resolver = _WalledResolver(opts.reach)
        connector = aiohttp.TCPConnector(
            limit=self._limit,
            limit_per_host=self._per_host,
            ssl=_tls_context(),
            ttl_dns_cache=300,
            resolver=self._resolver,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=opts.connect_timeout, sock_read=opts.timeout
            ),
            # Decoded by `_Guard`, in bounded pieces; aiohttp would inflate a read whole.
            auto_decompress=False,
            # Resources are files: no state between requests, as rclone's HTTP remote.
            cookie_jar=aiohttp.DummyCookieJar(),
            # Proxies: `_proxy`, from the environment as the httpx clients read them (and,
            # as they do, no credentials from ~/.netrc).
            trust_env=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
        if self._resolver is not None:
            resolver, self._resolver = self._resolver, None
            await resolver.close()

    def _proxy(self, scheme: str, host: str) -> tuple[URL | None, dict[str, str] | None]:
        """The proxy for requests to `host` over `scheme`, if any, and the headers for it
        (its credentials, given in its URL)."""
        key = (scheme, host)
        found = self._proxy_for.get(key)
        if found is None:
            proxy = self._proxies.get(scheme) or self._proxies.get("all")
            found = (None, None)
            if proxy and not _bypass(host, self._proxies):
                url = URL(proxy if "://" in proxy else f"http://{proxy}")
                auth = (
                    {"Proxy-Authorization": aiohttp.encode_basic_auth(url.user, url.password or "")}
                    if url.user
                    else None
                )
                found = (url.with_user(None), auth)
            if len(self._proxy_for) < 4096:
                self._proxy_for[key] = found
        return found

    def _headers(self, url: str, extra: Mapping[str, str] | None, opts: HttpOptions) -> Any:
        headers = self._base.copy() if opts is self.options else CIMultiDict(base_headers(opts))
        if extra:
            headers.update(extra)
        if opts.scoped_headers:
            parts = urlsplit(url)
            shown = parts._replace(query="", fragment="").geturl()
            host = parts.hostname or ""
            scope_headers(opts, headers, (parts.scheme, host, parts.port), shown, self._told)
        return headers

    async def _get(
        self,
        url: str,
        extra: Mapping[str, str] | None,
        opts: HttpOptions,
        started: float,
        coded: Sequence[str] = (),
    ) -> tuple[aiohttp.ClientResponse, _Guard]:
        """GET `url`, following redirects (each hop with its own scoped headers, each
        redirect's body capped and thrown away); the final response and its guard. `coded`:
        the content codings the list gives the resource, kept when the answer has them."""
        session = self._session
        if session is None:
            raise RuntimeError("TransferSession used outside its `async with`")
        current = url
        for _ in range(MAX_REDIRECTS + 1):
            if opts.reach is not None:
                # Every hop, before anything is sent: a redirect, a mirror, a package.
                why = await opts.reach.why_not_async(current)
                if why is not None:
                    raise FetchError(f"refused: {why}", source=url)
            target = _url(current)
            headers = self._headers(current, extra, opts)
            proxy, proxy_headers = (
                self._proxy(target.scheme, target.host or "") if self._proxies else (None, None)
            )
            if proxy_headers and target.scheme == "http":
                # A plain http request goes to the proxy itself (no CONNECT): its credentials
                # travel with it.
                headers.update(proxy_headers)
                proxy_headers = None
            response = await session.get(
                target,
                headers=headers,
                allow_redirects=False,
                proxy=proxy,
                proxy_headers=proxy_headers,
            )
            codings = content_codings(response.headers.getall("Content-Encoding", ()))
            if codings:
                codings = codings_to_undo(
                    codings, current, response.headers.get("Content-Type"), coded
                )
            guard = _Guard(current, codings, opts, started)
            location = response.headers.get("Location")
            if not (opts.follow_redirects and response.status in _REDIRECTS and location):
                return response, guard
            guard.cap(MAX_REDIRECT_BODY, "a redirect's body")
            try:
                while data := await response.content.readany():
                    for _piece in guard.raw(data):
                        pass
            finally:
                # Read to its end, the connection serves the next hop; else it is closed.
                if response.content.at_eof():
                    response.release()
                else:
                    response.close()
            following = urljoin(current, location.strip())
            if urlsplit(following).scheme.lower() not in ("http", "https"):
                raise FetchError(f"redirected to {following}, not an http(s) URL", source=url)
            current = following
        raise FetchError("too many redirects (a redirect loop?)", source=url)

    def open(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        options: HttpOptions | None = None,
        accept: Collection[int] = (),
        declared: int | None = None,
        coded: Sequence[str] = (),
    ) -> _Opened:
        """GET `url`, retrying as the policy says, and yield the response once its status is
        2xx (or one of `accept`, e.g. 304), as `open_stream` does for documents: the body may be
        `max_size` bytes decoded, or the `declared` length when given; the headers must
        arrive within the deadline. A failure to connect, after the retries, is Unreachable.
        `coded`: the content codings the list gives the resource (`rs:md encoding`), which an
        answer coded so keeps. An async context manager: its end lets the connection go
        (`Fetched.close`)."""
        return _Opened(self, url, headers, options or self.options, accept, declared, coded)


class _Opened:
    """`TransferSession.open`'s context (a class, not `asynccontextmanager`: the generator's
    machinery was 2 % of a sync's CPU per resource, issue 15.1)."""

    __slots__ = (
        "_accept",
        "_coded",
        "_declared",
        "_fetched",
        "_headers",
        "_opts",
        "_session",
        "_url",
    )

    def __init__(
        self,
        session: TransferSession,
        url: str,
        headers: Mapping[str, str] | None,
        opts: HttpOptions,
        accept: Collection[int],
        declared: int | None,
        coded: Sequence[str] = (),
    ) -> None:
        self._session, self._url, self._headers, self._opts = session, url, headers, opts
        self._accept, self._declared, self._coded = accept, declared, coded
        self._fetched: Fetched | None = None

    async def __aenter__(self) -> Fetched:
        url, opts = self._url, self._opts
        attempt = 0
        while True:
            attempt += 1
            retry_after: float | None = None
            started = time.monotonic()
            deadline = asyncio.timeout(opts.deadline if opts.deadline > 0 else None)
            try:
                try:
                    async with deadline:
                        response, guard = await self._session._get(
                            url, self._headers, opts, started, self._coded
                        )
                except TimeoutError:
                    if deadline.expired():
                        raise _late(opts, url) from None
                    raise
            except BodyRefused as exc:
                raise _refused(exc, url) from None
            except aiohttp.InvalidURL as exc:
                raise FetchError(f"not a valid URL: {exc}", source=url) from None
            except (aiohttp.ClientError, TimeoutError) as exc:
                if attempt > opts.retry.retries:
                    raise _failed(exc, url) from None
                await asyncio.sleep(opts.retry.delay(attempt, None))
                continue
            status = response.status
            if 200 <= status < 300 or status in self._accept:
                if 204 <= status <= 206 and status not in self._accept:
                    partial = not_whole(
                        status, response.reason or "", response.headers.get("Content-Range")
                    )
                    if partial is not None:
                        response.close()
                        raise FetchError(partial.message, source=url)
                if self._declared is not None:
                    guard.declare(self._declared)
                self._fetched = Fetched(response, guard, url)
                return self._fetched
            response.close()
            retry_after = retry_after_seconds(response.headers.get("Retry-After"))
            if status not in RETRY_STATUS or attempt > opts.retry.retries:
                raise fetch_error(status, response.reason or "", url)
            await asyncio.sleep(opts.retry.delay(attempt, retry_after))

    async def __aexit__(self, *exc_info: object) -> None:
        fetched, self._fetched = self._fetched, None
        if fetched is not None:
            fetched.close()


#: Signals whose Python handlers the transfers' loop runs itself (SIGINT is asyncio.Runner's):
#: those a program handles by raising (a service manager's SIGTERM, a reload's SIGHUP, a
#: time limit's SIGALRM or SIGUSR1).
_RELAYED = tuple(
    getattr(signal, name)
    for name in ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGALRM")
    if hasattr(signal, name)
)


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to its end on an event loop of its own, as `asyncio.run` does (Ctrl-C
    cancels it): uvloop's where it is installed (Linux, macOS), asyncio's otherwise. The
    transfers spend much of their CPU in the event loop: uvloop takes 8–18 % off a sync's CPU
    per resource (bench/bench_client.py, issue 15.1)."""
    try:
        import uvloop
    except ImportError:  # not installed where it has no wheel (Windows, PyPy)
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_relaying_signals(main))


async def _relaying_signals(main: Coroutine[Any, Any, T]) -> T:
    """`main`, with the Python handlers of `_RELAYED` run as they are on asyncio's loop: what
    a handler raises (the command line's SIGTERM ends a run) comes out of `main`'s task. uvloop
    runs a handler inside a callback of its own and only logs what it raises: a SIGTERM was
    printed and ignored, and the sync went on to an ok."""
    if threading.current_thread() is not threading.main_thread():
        return await main
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    raised: list[BaseException] = []
    installed: dict[int, Callable[[int, Any], Any]] = {}

    def relay(signum: int, handler: Callable[[int, Any], Any]) -> None:
        try:
            handler(signum, None)
        except BaseException as exc:  # handed to the task, as on asyncio's loop
            raised.append(exc)
            if task is not None:
                task.cancel()

    for signum in _RELAYED:
        handler = signal.getsignal(signum)
        if callable(handler):
            installed[signum] = handler
            loop.add_signal_handler(signum, relay, signum, handler)
    try:
        result = await main
    except asyncio.CancelledError:
        if not raised:
            raise
    finally:
        # Held back while the loop's handlers give way to the program's: one that came in
        # between would meet the default action (SIGTERM: the process killed, nothing cleaned).
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, installed)
        try:
            for sig, previous in installed.items():
                loop.remove_signal_handler(sig)
                signal.signal(sig, previous)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if raised:
        raise raised[0]
    return result


class _WalledResolver(AbstractResolver):
    """aiohttp's resolver, whose answers are judged by the run's reach before a connection is
    made to them (`Reach.judge_resolved`)."""

    def __init__(self, reach: Reach) -> None:
        self._reach = reach
        self._inner = DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        why = self._reach.judge_resolved(host, [r["host"] for r in found])
        if why is not None:
            raise OSError(f"refused: {why}")
        return found

    async def close(self) -> None:
        await self._inner.close()


def _bypass(host: str, proxies: dict[str, str]) -> bool:
    """Whether NO_PROXY (in `proxies`, as `getproxies_environment` gives it) exempts `host`."""
    bypass: Any = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    return bool(bypass(host, proxies))


def _reason(exc: BaseException) -> str:
    """What went wrong, in words (aiohttp's own messages name its internals)."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        cert = exc.certificate_error
        why = getattr(cert, "verify_message", None) or str(cert)
        return f"the certificate of {exc.host}:{exc.port} is not trusted: {why}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        err = exc.os_error
        why = os.strerror(err.errno) if err.errno and err.errno > 0 else err.strerror
        why = (why or str(err) or type(err).__name__).lower()
        return f"cannot connect to {exc.host}:{exc.port}: {why}"
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return "the connection timed out"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "the connection ended before the body did"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection"
    if isinstance(exc, TimeoutError):
        return "timed out waiting for data (--timeout)"
    return str(exc) or type(exc).__name__


def _failed(exc: BaseException, url: str) -> FetchError:
    """A request that failed before its response: Unreachable when it could not connect."""
    reason = _reason(exc)
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
        return Unreachable(f"request failed: {reason}", source=url)
    return FetchError(f"request failed: {reason}", source=url)
