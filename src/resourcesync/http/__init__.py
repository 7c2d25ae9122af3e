"""The one place that builds HTTP clients: timeouts, retries, limits, headers.

Everything that speaks HTTP gets its client here, so timeouts, the User-Agent, connection limits
and the retry policy (connection errors, timeouts, 429 and 5xx, honouring `Retry-After`, with
exponential backoff and jitter) are the same everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import importlib.util
import logging
import socket
import ssl
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpcore
import httpx

from .. import __version__, rng
from ..errors import FetchError, fetch_error
from ..inflate import Inflate, InflateError
from ..iri import url_problem
from ..sniff import media_type
from ..units import ascii_int
from ..w3cdt import parse_http_date
from . import tls
from .reach import Reach, addresses_of

__all__ = [
    "DEFAULT_DEADLINE",
    "DEFAULT_MAX_DOCUMENT_SIZE",
    "DEFAULT_MAX_SIZE",
    "DEFAULT_MIN_RATE",
    "USER_AGENT",
    "AsyncClient",
    "Bandwidth",
    "BodyRefused",
    "Client",
    "HttpOptions",
    "RetryPolicy",
    "Unreachable",
    "accept_encoding",
    "iter_body",
    "limit_body",
    "make_async_client",
    "make_client",
    "not_whole",
    "open_stream",
    "options_of",
    "origin",
    "retry_after_seconds",
    "scoped_to",
]

USER_AGENT = f"resourcesync/{__version__} (+https://pypi.org/project/resourcesync/)"
RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
#: Successes that do not carry the whole resource: none of it (204, 205), or a part (206,
#: which no request of ours asks for: it sends no Range).
_NOT_WHOLE = {
    204: "the answer carries no content",
    205: "the answer carries no content",
    206: "only a part of the resource, which was not asked for",
}


def not_whole(status: int, reason: str, content_range: str | None) -> FetchError | None:
    """The error for a 2xx answer to a GET of a whole resource (or document) that does not
    carry it whole; None for one that does. Not retried: a Source that answers so answers so
    again, and what it sent is never taken for the resource."""
    why = _NOT_WHOLE.get(status)
    if why is None:
        return None
    shown = f" (Content-Range: {content_range[:60]})" if content_range else ""
    return FetchError(f"{f'HTTP {status} {reason}'.rstrip()}: {why}{shown}")


#: The most a resource or a dump package may be when nothing declares its length (`--max-size`).
DEFAULT_MAX_SIZE = 1 << 30
#: The most a document (Resource List, Change List, index, LIRS file…) may be, decoded
#: (`--max-document-size`).
DEFAULT_MAX_DOCUMENT_SIZE = 256 << 20
#: Seconds one transfer may take, from the request to the body's last byte (`--deadline`).
DEFAULT_DEADLINE = 3600.0
#: Bytes per second a transfer must keep up over each `rate_window` (`--min-rate`).
DEFAULT_MIN_RATE = 1024.0
#: The most a redirect's own body may be (it is read and thrown away).
MAX_REDIRECT_BODY = 64 << 10
#: Decoded bytes handed on at once: what a compressed body can cost in memory per transfer.
PIECE = 1 << 18
#: Content codings we ask for and decode (streamed, capped); anything else we were not asked
#: to decode is refused rather than decoded whole.
_ASKED = ("gzip", "deflate")
_ACCEPT_ENCODING = ", ".join(_ASKED)
_DECODED = frozenset({"gzip", "x-gzip", "deflate"})
_REFUSED_CODINGS = frozenset({"br", "zstd", "compress", "x-compress"})

log = logging.getLogger("resourcesync.http")


class BodyRefused(httpx.RequestError):
    """A body abandoned while it was read: larger than its limit or its declared length,
    slower than the minimum rate, longer than the deadline, or badly encoded. Not retried."""


class Unreachable(FetchError):
    """A request that could not connect to its host, after the retries allowed."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently to retry a request that failed in a way that may pass."""

    retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 30.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before attempt number `attempt` (1 = first retry)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_backoff)
        base = min(self.backoff * 2.0 ** (attempt - 1), self.max_backoff)
        return base / 2 + rng.uniform(0, base / 2)


@dataclass(frozen=True, slots=True)
class HttpOptions:
    """Settings shared by every client we build."""

    timeout: float = 30.0
    connect_timeout: float = 10.0
    headers: Mapping[str, str] = field(default_factory=dict)
    max_connections: int = 100
    max_keepalive: int = 20
    http2: bool = False
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    follow_redirects: bool = True
    #: Headers (credentials) sent only to these origins (`origin()`: host, or host:port for a
    #: port that is not the default), on every request to them and to no other, redirects
    #: included.
    scoped_headers: Mapping[str, str] = field(default_factory=dict)
    scoped_hosts: frozenset[str] = frozenset()
    #: Limits on what one response may cost (issue 17.1–17.3): the decoded size of a
    #: resource or package with no declared length, of a document, the seconds from request
    #: to last byte, and the bytes per second required over every `rate_window` seconds.
    max_size: int = DEFAULT_MAX_SIZE
    max_document_size: int = DEFAULT_MAX_DOCUMENT_SIZE
    deadline: float = DEFAULT_DEADLINE
    min_rate: float = DEFAULT_MIN_RATE
    rate_window: float = 30.0
    #: Where requests may go beside the public Internet (`reach`: a Destination's wall
    #: against what a Source's documents point to); None: anywhere.
    reach: Reach | None = None


def _tls_context() -> ssl.SSLContext:
    """One TLS context for every client (loading the CA bundle costs tens of milliseconds;
    see `tls`). Certificates come from certifi, or from SSL_CERT_FILE / SSL_CERT_DIR."""
    return tls.context()


def origin(scheme: str, host: str, port: int | None) -> str:
    """`scheme://host` or `scheme://host:port` (a default port is left out), lower case: what
    scoped headers are matched against. The scheme is part of it: credentials given for
    https are never sent over plain http (issue 17.13)."""
    scheme = scheme.lower()
    default = {"http": 80, "https": 443}.get(scheme)
    host = host.lower()
    return f"{scheme}://{host}" if port is None or port == default else f"{scheme}://{host}:{port}"


def scoped_to(options: HttpOptions, headers: Mapping[str, str], urls: Iterable[str]) -> HttpOptions:
    """`options` sending `headers` (credentials) to the origins of `urls` and to no other; a
    text among `urls` that is not a URL scopes nothing (it is said where it is read)."""
    hosts = set()
    for url in urls:
        try:
            parts = urlsplit(url)
            host, port = parts.hostname, parts.port
        except ValueError:
            continue
        if host:
            hosts.add(origin(parts.scheme, host, port))
    if not headers or not hosts:
        return options
    return dataclasses.replace(options, scoped_headers=dict(headers), scoped_hosts=frozenset(hosts))


def scope_headers(
    options: HttpOptions,
    headers: Any,
    url: tuple[str, str, int | None],
    shown: str,
    told: set[str],
) -> None:
    """Put the scoped headers (credentials) in `headers` (case-insensitive, mutable) when
    `url` (scheme, host, port) is one of their origins, and take them out when it is not —
    on every request, redirects included. `shown` names the request in the warning given once
    per origin when credentials for https are withheld from plain http (issue 17.13)."""
    scheme, host, port = url
    allowed = origin(scheme, host, port) in options.scoped_hosts
    for name, value in options.scoped_headers.items():
        if allowed:
            headers[name] = value
        elif name in headers:
            del headers[name]
    if not allowed and scheme == "http" and options.scoped_headers:
        secure = origin("https", host, None if port in (None, 80) else port)
        if secure in options.scoped_hosts and secure not in told:
            told.add(secure)
            log.warning(
                "resourcesync: %s: credentials (--header/--token) given for %s are not sent "
                "over plain http",
                shown,
                secure,
            )


def _scope(options: HttpOptions, request: httpx.Request, told: set[str]) -> None:
    url = request.url
    shown = str(url.copy_with(query=None))
    scope_headers(options, request.headers, (url.scheme, url.host, url.port), shown, told)


def base_headers(options: HttpOptions) -> dict[str, str]:
    """The headers every request carries: ours, then the user's (`--header`)."""
    return {"User-Agent": USER_AGENT, "Accept-Encoding": _ACCEPT_ENCODING, **options.headers}


def accept_encoding(kept: Sequence[str] = ()) -> str:
    """`Accept-Encoding` for a request: the codings we decode, after those to be `kept` as they
    come (a list's `rs:md encoding`: `br` or `zstd` too, never decoded)."""
    return ", ".join(dict.fromkeys([*kept, *_ASKED])) if kept else _ACCEPT_ENCODING


def content_codings(values: Iterable[str]) -> list[str]:
    """The content codings of a response, in the order they were applied, from its
    `Content-Encoding` header values (`identity` left out)."""
    codings = (c.strip().lower() for value in values for c in value.split(","))
    return [c for c in codings if c and c != "identity"]


#: What a gzip file is served as, by its media type or its name: `.svgz`, `.emz` and `.wmz`
#: are compressed SVG, EMF and WMF drawings, which servers are configured to serve with
#: `Content-Encoding: gzip` (Apache's documentation for `.svgz`, IIS's static types for the
#: Office ones), as Apache's `AddEncoding x-gzip .gz .tgz` does for every gzip file.
_GZIP_TYPES = frozenset({"application/gzip", "application/x-gzip", "application/x-gunzip"})
_GZIP_NAMES = (".gz", ".tgz", ".svgz", ".emz", ".wmz")


def codings_to_undo(
    codings: list[str], url: str, content_type: str | None, listed: Sequence[str] = ()
) -> list[str]:
    """The content codings of a response to undo: none when they are the `listed` ones (`rs:md
    encoding`: the list's length and digest are then the coded bytes', core §7, and the copy
    keeps them as they came); else all of them, but for a gzip file that the server labels
    with its own compression (`Content-Encoding: gzip` on a `.gz`, `.tgz`,
    `.svgz`, `.emz` or `.wmz` name, or on a gzip media type: Apache's `AddEncoding x-gzip
    .gz`). That body is the file itself, as the Source lists it (its length and digest are
    the compressed bytes'): kept as it came, as wget's "broken server workaround" keeps it."""
    if listed and codings == list(listed):
        return []
    if len(codings) != 1 or codings[0] not in ("gzip", "x-gzip"):
        return codings
    if media_type(content_type) in _GZIP_TYPES or urlsplit(url).path.lower().endswith(_GZIP_NAMES):
        return []
    return codings


def _guard(options: HttpOptions, response: httpx.Response, asynchronous: bool) -> None:
    """Put the response body behind a `_Guard` (size, deadline, rate, capped decoding)."""
    started = response.request.extensions.get("resourcesync.started", time.monotonic())
    labelled = content_codings(response.headers.get_list("content-encoding"))
    url = str(response.request.url)
    codings = codings_to_undo(labelled, url, response.headers.get("content-type"))
    guard = _Guard(url, codings, options, started)
    if response.has_redirect_location:
        guard.cap(MAX_REDIRECT_BODY, "a redirect's body")
    if labelled:
        # Decoded here, in bounded pieces: httpx would inflate a whole network read at once.
        del response.headers["content-encoding"]
    if asynchronous and isinstance(response.stream, httpx.AsyncByteStream):
        response.stream = _AsyncGuarded(response.stream, guard)
    elif not asynchronous and isinstance(response.stream, httpx.SyncByteStream):
        response.stream = _SyncGuarded(response.stream, guard)


def _hooks(options: HttpOptions, asynchronous: bool) -> dict[str, list[Any]]:
    told: set[str] = set()

    def on_request(request: httpx.Request) -> None:
        request.extensions["resourcesync.started"] = time.monotonic()
        if options.scoped_headers:
            _scope(options, request, told)

    def refuse(url: str, why: str | None) -> None:
        if why is not None:
            raise FetchError(f"refused: {why}", source=url)

    if asynchronous:

        async def request_hook(request: httpx.Request) -> None:
            if options.reach is not None:
                url = str(request.url)
                refuse(url, await options.reach.why_not_async(url))
            on_request(request)

        async def response_hook(response: httpx.Response) -> None:
            _guard(options, response, asynchronous=True)

        return {"request": [request_hook], "response": [response_hook]}

    def on_response(response: httpx.Response) -> None:
        _guard(options, response, asynchronous=False)

    def sync_request_hook(request: httpx.Request) -> None:
        if options.reach is not None:
            url = str(request.url)
            refuse(url, options.reach.why_not(url))
        on_request(request)

    return {"request": [sync_request_hook], "response": [on_response]}


class _Inflate(Inflate):
    """A content coding's decoder (`inflate.Inflate`), its refusals said as the body's."""

    def __init__(self, coding: str) -> None:
        super().__init__(coding, PIECE)

    def feed(self, data: bytes) -> Iterator[bytes]:
        try:
            yield from super().feed(data)
        except InflateError as exc:
            raise self._refused(exc) from None

    def finish(self) -> Iterator[bytes]:
        try:
            yield from super().finish()
        except InflateError as exc:
            raise self._refused(exc) from None

    def _refused(self, exc: InflateError) -> BodyRefused:
        if exc.kind == "cut":
            return BodyRefused(f"the {self.coding} body is cut short: its coding does not end")
        if exc.kind == "after":
            return BodyRefused(f"data after the end of the {self.coding} body")
        return BodyRefused(f"cannot decode the {self.coding} body: {exc.detail}")


class _Guard:
    """What one response body may cost: its decoded size (the limit, or the declared length
    and one byte more), the deadline from the request, and the minimum rate. Checked on every
    piece that arrives, so a body is abandoned as soon as it goes past one of them."""

    def __init__(self, url: str, codings: list[str], options: HttpOptions, started: float) -> None:
        self.url = url
        self.refused = next(
            (f"Content-Encoding {c} was not asked for" for c in codings if c in _REFUSED_CODINGS),
            None,
        )
        # Content codings are listed in the order they were applied: undone in reverse.
        self.decoders = [_Inflate(c) for c in reversed(codings) if c in _DECODED]
        self.limit = options.max_size
        # What the limit is, said only when it is reached (formatted then, not per response).
        self._why: tuple[str, ...] = ("max-size",)
        self.deadline = started + options.deadline if options.deadline > 0 else None
        self.deadline_seconds = options.deadline
        self.min_rate = options.min_rate
        self.window = options.rate_window
        self.window_start = started
        self.window_bytes = 0
        self.size = 0

    @property
    def why(self) -> str:
        kind = self._why[0]
        if kind == "declared":
            return f"more than the {self.limit} bytes declared"
        if kind == "cap":
            _, what, option = self._why
            return f"{what}: larger than {_size(self.limit)}" + (f" ({option})" if option else "")
        return f"larger than the {_size(self.limit)} limit (--max-size)"

    def cap(self, limit: int, what: str, option: str = "") -> None:
        self.limit = limit
        self._why = ("cap", what, option)

    def declare(self, length: int) -> None:
        """The length the Source declared: one byte more and the body is abandoned."""
        if length < self.limit:
            self.limit = length
            self._why = ("declared",)

    def raw(self, data: bytes) -> Iterable[bytes]:
        """The decoded pieces of `data`, a piece of the body as it arrived (BodyRefused past
        a limit, the deadline or below the minimum rate)."""
        if self.refused is not None:
            raise BodyRefused(self.refused)
        now = time.monotonic()
        if self.deadline is not None and now > self.deadline:
            raise BodyRefused(
                f"abandoned after {self.deadline_seconds:g} s, the limit for one transfer "
                "(--deadline)"
            )
        self.window_bytes += len(data)
        elapsed = now - self.window_start
        if self.min_rate > 0 and elapsed >= self.window:
            rate = self.window_bytes / elapsed
            if rate < self.min_rate:
                raise BodyRefused(
                    f"abandoned: {rate:.0f} bytes/s over {elapsed:.0f} s, below the minimum "
                    f"of {self.min_rate:g} bytes/s (--min-rate)"
                )
            self.window_start, self.window_bytes = now, 0
        if not self.decoders:
            # Nothing to decode (most bodies): the piece itself, without a generator's frame.
            self._count(data)
            return (data,)
        return self._decode(data, 0)

    def _count(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise BodyRefused(f"abandoned: {self.why}")

    def _decode(self, data: bytes, level: int) -> Iterator[bytes]:
        if level == len(self.decoders):
            self._count(data)
            yield data
            return
        for piece in self.decoders[level].feed(data):
            yield from self._decode(piece, level + 1)

    def end(self) -> Iterable[bytes]:
        """What the decoders still hold once the network body has ended."""
        if not self.decoders:
            return ()
        return self._ends()

    def _ends(self) -> Iterator[bytes]:
        # Outermost first: what one decoder still held goes through the ones inside it
        # before they are finished in turn.
        for level, decoder in enumerate(self.decoders):
            for piece in decoder.finish():
                yield from self._decode(piece, level + 1)


class _SyncGuarded(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, guard: _Guard) -> None:
        self.inner, self.guard = inner, guard

    def __iter__(self) -> Iterator[bytes]:
        for data in self.inner:
            yield from self.guard.raw(data)
        yield from self.guard.end()

    def close(self) -> None:
        self.inner.close()


class _AsyncGuarded(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, guard: _Guard) -> None:
        self.inner, self.guard = inner, guard

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for data in self.inner:
            for piece in self.guard.raw(data):
                yield piece
        for piece in self.guard.end():
            yield piece

    async def aclose(self) -> None:
        await self.inner.aclose()


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << (shift - 4)) == 0:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} bytes"


def limit_body(
    response: httpx.Response, *, limit: int | None = None, declared: int | None = None
) -> None:
    """Cap what `response`'s body may be, decoded: `limit` (e.g. the document limit) and the
    length the Source declared. A response from a client not built here is left as it is."""
    guard = getattr(response.stream, "guard", None)
    if not isinstance(guard, _Guard):
        return
    if limit is not None:
        guard.cap(limit, "a document", "--max-document-size")
    if declared is not None:
        guard.declare(declared)


def _client_kwargs(options: HttpOptions) -> dict[str, object]:
    return {
        "verify": _tls_context(),
        "headers": base_headers(options),
        "timeout": httpx.Timeout(options.timeout, connect=options.connect_timeout),
        "limits": httpx.Limits(
            max_connections=options.max_connections,
            max_keepalive_connections=options.max_keepalive,
        ),
        "follow_redirects": options.follow_redirects,
        # Proxies come from the environment as httpx reads them.
        "trust_env": True,
    }


#: When the response headers being read must have arrived (a synchronous request: `open_stream`
#: sets it while it waits for them). The transfers (`http.transfer`) use `asyncio.timeout`.
_HEADERS_BY: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "resourcesync_headers_by", default=None
)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose reads never wait past `_HEADERS_BY`: a Source that trickles its
    headers a byte at a time is bounded by the deadline, not only by the read timeout."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        by = _HEADERS_BY.get()
        if by is not None:
            left = by - time.monotonic()
            if left <= 0:
                raise httpcore.ReadTimeout("no response within the deadline (--deadline)")
            timeout = left if timeout is None else min(timeout, left)
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class AddressJudge(Protocol):
    """What judges the addresses a connection is made to, as they are resolved for it: a
    Destination's `Reach`, the hub's `AddressPolicy`."""

    def judged_at_connection(self, host: str) -> bool:
        """Whether connections to `host` are judged by address (not a host trusted as named,
        nor an address judged as the request was)."""
        ...

    def judge_resolved(self, host: str, addresses: Iterable[str]) -> str | None:
        """Why a connection to `host` must not go to these of its addresses, or None."""
        ...


def _judged(reach: AddressJudge, host: str, infos: Iterable[tuple[Any, ...]]) -> list[str]:
    """The addresses `getaddrinfo` gave for a connection to `host`, in the order to try them,
    once the reach judged them all (`httpcore.ConnectError` when it refuses, or none came)."""
    found = addresses_of(infos)
    if (why := reach.judge_resolved(host, found)) is not None:
        raise httpcore.ConnectError(f"refused: {why}")
    if not found:
        raise httpcore.ConnectError(f"{host} has no address")
    return found


class _DeadlineBackend(httpcore.NetworkBackend):
    """Connections whose reads keep the deadline (`_DeadlineStream`), made — with a reach — to
    the addresses it judged as they were resolved: a name whose DNS answer changed since the
    request's check (DNS rebinding) does not get through, as in the transfers' resolver."""

    def __init__(self, inner: httpcore.NetworkBackend, reach: AddressJudge | None = None) -> None:
        self._inner = inner
        self._reach = reach

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        reach = self._reach
        if reach is None or not reach.judged_at_connection(host):
            stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
            return _DeadlineStream(stream)
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        *others, last = _judged(reach, host, infos)
        connect = self._inner.connect_tcp
        for address in others:
            with contextlib.suppress(httpcore.ConnectError, httpcore.ConnectTimeout):
                return _DeadlineStream(
                    connect(address, port, timeout, local_address, socket_options)
                )
        return _DeadlineStream(connect(last, port, timeout, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _WalledAsyncBackend(httpcore.AsyncNetworkBackend):
    """`_DeadlineBackend`'s judging of the addresses connected to, for the asynchronous
    clients (the hub's requests to subscribers and topics)."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend, reach: AddressJudge) -> None:
        self._inner = inner
        self._reach = reach

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        reach = self._reach
        if not reach.judged_at_connection(host):
            return await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        try:
            loop = asyncio.get_running_loop()
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        *others, last = _judged(reach, host, infos)
        connect = self._inner.connect_tcp
        for address in others:
            with contextlib.suppress(httpcore.ConnectError, httpcore.ConnectTimeout):
                return await connect(address, port, timeout, local_address, socket_options)
        return await connect(last, port, timeout, local_address, socket_options)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.AsyncNetworkStream:
        return await self._inner.connect_unix_socket(path, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def _pool_of(transport: object) -> Any:
    """The connection pool of an httpx transport (where httpx keeps it is its own business,
    hence the care: None when it is not where httpx 0.28 keeps it)."""
    pool = getattr(transport, "_pool", None)
    return pool if hasattr(pool, "_network_backend") else None


class Client(httpx.Client):
    """An httpx client that remembers the options it was built with (retry policy included)."""

    def __init__(self, options: HttpOptions) -> None:
        super().__init__(**_client_kwargs(options), event_hooks=_hooks(options, asynchronous=False))  # type: ignore[arg-type]
        self.rs_options = options
        # httpx has no total timeout: the connection pools read through `_DeadlineStream`.
        # The direct transport's connections go to addresses the reach judged; a proxy's
        # (mounted) resolves the names it is given.
        for transport in [self._transport, *self._mounts.values()]:
            pool = _pool_of(transport)
            if pool is not None and isinstance(pool._network_backend, httpcore.NetworkBackend):
                reach = options.reach if transport is self._transport else None
                pool._network_backend = _DeadlineBackend(pool._network_backend, reach)


class AsyncClient(httpx.AsyncClient):
    """The asynchronous twin of `Client`. `judge`: what judges the addresses its connections
    go to (the options' reach by default)."""

    def __init__(
        self, options: HttpOptions, judge: AddressJudge | None = None, **extra: object
    ) -> None:
        kwargs = {
            **_client_kwargs(options),
            "event_hooks": _hooks(options, asynchronous=True),
            **extra,
        }
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.rs_options = options
        judge = judge or options.reach
        pool = _pool_of(self._transport)
        if judge is not None and pool is not None:
            pool._network_backend = _WalledAsyncBackend(pool._network_backend, judge)


def make_client(options: HttpOptions | None = None) -> Client:
    """A synchronous client with our defaults."""
    return Client(options or HttpOptions())


def options_of(client: httpx.Client | httpx.AsyncClient | None) -> HttpOptions:
    """The options a client was built with (defaults for a client built elsewhere)."""
    opts = getattr(client, "rs_options", None)
    return opts if isinstance(opts, HttpOptions) else HttpOptions()


def make_async_client(
    options: HttpOptions | None = None, judge: AddressJudge | None = None
) -> AsyncClient:
    """An asynchronous client with our defaults (HTTP/2 when asked and available); `judge`
    judges the addresses its connections go to (`AsyncClient`)."""
    opts = options or HttpOptions()
    if opts.http2 and importlib.util.find_spec("h2") is not None:
        return AsyncClient(opts, judge, http2=True)
    return AsyncClient(opts, judge)


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds or HTTP-date), or None."""
    if not value:
        return None
    value = value.strip()
    seconds = ascii_int(value)
    if seconds is not None:
        return float(seconds)
    when = parse_http_date(value)
    if when is None:
        return None
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _refused(exc: BodyRefused, url: str) -> FetchError:
    return FetchError(str(exc), source=url)


def _late(opts: HttpOptions, url: str) -> FetchError:
    return FetchError(
        f"no response within {opts.deadline:g} s, the limit for one transfer (--deadline)",
        source=url,
    )


def _failed(exc: httpx.TransportError, url: str) -> FetchError:
    reason = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return Unreachable(f"request failed: {reason}", source=url)
    return FetchError(f"request failed: {reason}", source=url)


class Bandwidth:
    """A byte budget per second shared by the transfers of one run (rclone's `--bwlimit`):
    each chunk received reserves its share of time, and the next one waits for its turn —
    the server is held back by TCP's own flow control meanwhile."""

    def __init__(self, rate: int) -> None:
        if rate <= 0:
            raise ValueError("a bandwidth limit must be positive")
        self.rate = rate
        self._next = 0.0

    async def take(self, size: int) -> None:
        now = time.monotonic()
        start = max(now, self._next)
        self._next = start + size / self.rate
        if start > now:
            await asyncio.sleep(start - now)


def iter_body(response: httpx.Response, url: str, chunk_size: int = 1 << 18) -> Iterator[bytes]:
    """The body in chunks; a connection that fails half way is a FetchError naming the URL
    (a body past its limits too: see `limit_body`)."""
    try:
        yield from response.iter_bytes(chunk_size)
    except BodyRefused as exc:
        raise _refused(exc, url) from None
    except httpx.HTTPError as exc:
        reason = str(exc) or type(exc).__name__
        raise FetchError(f"transfer failed: {reason}", source=url) from None


@contextlib.contextmanager
def open_stream(
    url: str,
    *,
    client: httpx.Client | None = None,
    options: HttpOptions | None = None,
    headers: Mapping[str, str] | None = None,
    limit: int | None = None,
) -> Iterator[httpx.Response]:
    """GET `url` and yield the streaming response once its status is 2xx.

    Retries connection errors, timeouts, 429 and 5xx as the retry policy says (from `options`,
    else from the client's own options), honouring `Retry-After`. Raises FetchError naming the
    URL when it does not succeed. For documents: the body may be `limit` bytes decoded (by
    default the options' `max_document_size`); a failure while the caller reads it is not
    retried here.
    """
    if (bad := url_problem(url, use="fetched")) is not None:
        # Said as such (no host: httpx's "missing an 'http://' protocol"; a space in the
        # host: a DNS lookup of it).
        raise FetchError(f"not a valid URL: it {bad}", source=url)
    opts = options or options_of(client)
    own = client is None
    http = client if client is not None else make_client(opts)
    yielded = False
    headers_by: float | None = None
    try:
        attempt = 0
        while True:
            attempt += 1
            try:
                with contextlib.ExitStack() as stack:
                    headers_by = time.monotonic() + opts.deadline if opts.deadline > 0 else None
                    by = _HEADERS_BY.set(headers_by)
                    try:
                        response = stack.enter_context(http.stream("GET", url, headers=headers))
                    finally:
                        _HEADERS_BY.reset(by)
                    if 200 <= response.status_code < 300:
                        if (
                            partial := not_whole(
                                response.status_code,
                                response.reason_phrase,
                                response.headers.get("Content-Range"),
                            )
                        ) is not None:
                            raise FetchError(partial.message, source=url)
                        limit_body(response, limit=limit or opts.max_document_size)
                        yielded = True
                        yield response
                        return
                    status = response.status_code
                    retry_after = retry_after_seconds(response.headers.get("Retry-After"))
                    if status not in RETRY_STATUS or attempt > opts.retry.retries:
                        raise fetch_error(status, response.reason_phrase, url)
            except httpx.TooManyRedirects:
                raise FetchError("too many redirects (a redirect loop?)", source=url) from None
            except httpx.InvalidURL as exc:
                raise FetchError(f"not a valid URL: {exc}", source=url) from None
            except BodyRefused as exc:
                raise _refused(exc, url) from None
            except httpx.TransportError as exc:
                if yielded:
                    raise  # the caller's reading failed: it is the caller's, not ours to retry
                if headers_by is not None and time.monotonic() >= headers_by:
                    raise _late(opts, url) from None
                if attempt > opts.retry.retries:
                    raise _failed(exc, url) from None
                retry_after = None
            time.sleep(opts.retry.delay(attempt, retry_after))
    finally:
        if own:
            http.close()
