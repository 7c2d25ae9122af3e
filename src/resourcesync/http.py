"""The one place that builds HTTP clients: timeouts, retries, limits, headers.

Everything that speaks HTTP gets its client here, so timeouts, the User-Agent, connection limits
and the retry policy (connection errors, timeouts, 429 and 5xx, honouring `Retry-After`, with
exponential backoff and jitter) are the same everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import functools
import importlib.util
import os
import random
import ssl
import time
from collections.abc import AsyncIterator, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from . import __version__
from .errors import FetchError

__all__ = [
    "USER_AGENT",
    "AsyncClient",
    "Client",
    "HttpOptions",
    "RetryPolicy",
    "aiter_body",
    "iter_body",
    "make_async_client",
    "make_client",
    "open_stream",
    "open_stream_async",
    "options_of",
    "origin",
    "retry_after_seconds",
]

USER_AGENT = f"resourcesync/{__version__} (+https://pypi.org/project/resourcesync/)"
RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


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
        return base / 2 + random.uniform(0, base / 2)


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


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context for every client (loading the CA bundle costs tens of milliseconds).
    Certificates come from certifi, or from SSL_CERT_FILE / SSL_CERT_DIR when set."""
    cafile = os.environ.get("SSL_CERT_FILE")
    capath = os.environ.get("SSL_CERT_DIR")
    if cafile or capath:
        return ssl.create_default_context(cafile=cafile, capath=capath)
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


def origin(scheme: str, host: str, port: int | None) -> str:
    """`host` or `host:port` (a default port is left out), lower case: what scoped headers
    are matched against."""
    default = {"http": 80, "https": 443}.get(scheme.lower())
    host = host.lower()
    return host if port is None or port == default else f"{host}:{port}"


def _scope(options: HttpOptions, request: httpx.Request) -> None:
    url = request.url
    allowed = origin(url.scheme, url.host, url.port) in options.scoped_hosts
    for name, value in options.scoped_headers.items():
        if allowed:
            request.headers[name] = value
        elif name in request.headers:
            del request.headers[name]


def _hooks(options: HttpOptions, asynchronous: bool) -> dict[str, list[Any]]:
    if not options.scoped_headers:
        return {}
    if asynchronous:

        async def hook(request: httpx.Request) -> None:
            _scope(options, request)

        return {"request": [hook]}
    return {"request": [lambda request: _scope(options, request)]}


def _client_kwargs(options: HttpOptions) -> dict[str, object]:
    headers = {"User-Agent": USER_AGENT, **options.headers}
    return {
        "verify": _tls_context(),
        "headers": headers,
        "timeout": httpx.Timeout(options.timeout, connect=options.connect_timeout),
        "limits": httpx.Limits(
            max_connections=options.max_connections,
            max_keepalive_connections=options.max_keepalive,
        ),
        "follow_redirects": options.follow_redirects,
        # Proxies come from the environment as httpx reads them.
        "trust_env": True,
    }


class Client(httpx.Client):
    """An httpx client that remembers the options it was built with (retry policy included)."""

    def __init__(self, options: HttpOptions) -> None:
        super().__init__(**_client_kwargs(options), event_hooks=_hooks(options, asynchronous=False))  # type: ignore[arg-type]
        self.rs_options = options


class AsyncClient(httpx.AsyncClient):
    """The asynchronous twin of `Client`."""

    def __init__(self, options: HttpOptions, **extra: object) -> None:
        kwargs = {
            **_client_kwargs(options),
            "event_hooks": _hooks(options, asynchronous=True),
            **extra,
        }
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.rs_options = options


def make_client(options: HttpOptions | None = None) -> Client:
    """A synchronous client with our defaults."""
    return Client(options or HttpOptions())


def options_of(client: httpx.Client | httpx.AsyncClient | None) -> HttpOptions:
    """The options a client was built with (defaults for a client built elsewhere)."""
    opts = getattr(client, "rs_options", None)
    return opts if isinstance(opts, HttpOptions) else HttpOptions()


def make_async_client(options: HttpOptions | None = None) -> AsyncClient:
    """An asynchronous client with our defaults (HTTP/2 when asked and available)."""
    opts = options or HttpOptions()
    if opts.http2 and importlib.util.find_spec("h2") is not None:
        return AsyncClient(opts, http2=True)
    return AsyncClient(opts)


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds or HTTP-date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


async def aiter_body(
    response: httpx.Response, url: str, chunk_size: int = 1 << 18
) -> AsyncIterator[bytes]:
    """The body in chunks, asynchronously; a failure half way is a FetchError naming the URL."""
    try:
        async for chunk in response.aiter_bytes(chunk_size):
            yield chunk
    except httpx.HTTPError as exc:
        reason = str(exc) or type(exc).__name__
        raise FetchError(f"transfer failed: {reason}", source=url) from None


@contextlib.asynccontextmanager
async def open_stream_async(
    url: str,
    *,
    client: httpx.AsyncClient,
    headers: Mapping[str, str] | None = None,
    options: HttpOptions | None = None,
    accept: Collection[int] = (),
) -> AsyncIterator[httpx.Response]:
    """The asynchronous `open_stream`: GET `url`, retrying as the policy says, and yield the
    streaming response once its status is 2xx (or one of `accept`, e.g. 304)."""
    opts = options or options_of(client)
    attempt = 0
    while True:
        attempt += 1
        retry_after: float | None = None
        try:
            async with client.stream("GET", url, headers=headers) as response:
                status = response.status_code
                if 200 <= status < 300 or status in accept:
                    yield response
                    return
                retry_after = retry_after_seconds(response.headers.get("Retry-After"))
                if status not in RETRY_STATUS or attempt > opts.retry.retries:
                    raise FetchError(f"HTTP {status} {response.reason_phrase}".rstrip(), source=url)
        except httpx.TooManyRedirects:
            raise FetchError("too many redirects (a redirect loop?)", source=url) from None
        except httpx.TransportError as exc:
            if attempt > opts.retry.retries:
                reason = str(exc) or type(exc).__name__
                raise FetchError(f"request failed: {reason}", source=url) from None
        await asyncio.sleep(opts.retry.delay(attempt, retry_after))


def iter_body(response: httpx.Response, url: str, chunk_size: int = 1 << 18) -> Iterator[bytes]:
    """The body in chunks; a connection that fails half way is a FetchError naming the URL."""
    try:
        yield from response.iter_bytes(chunk_size)
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
) -> Iterator[httpx.Response]:
    """GET `url` and yield the streaming response once its status is 2xx.

    Retries connection errors, timeouts, 429 and 5xx as the retry policy says (from `options`,
    else from the client's own options), honouring `Retry-After`. Raises FetchError naming the
    URL when it does not succeed.
    """
    opts = options or options_of(client)
    own = client is None
    http = client if client is not None else make_client(opts)
    try:
        attempt = 0
        while True:
            attempt += 1
            try:
                with http.stream("GET", url, headers=headers) as response:
                    if 200 <= response.status_code < 300:
                        yield response
                        return
                    status = response.status_code
                    retry_after = retry_after_seconds(response.headers.get("Retry-After"))
                    if status not in RETRY_STATUS or attempt > opts.retry.retries:
                        raise FetchError(
                            f"HTTP {status} {response.reason_phrase}".rstrip(), source=url
                        )
            except httpx.TooManyRedirects:
                raise FetchError("too many redirects (a redirect loop?)", source=url) from None
            except httpx.TransportError as exc:
                if attempt > opts.retry.retries:
                    reason = str(exc) or type(exc).__name__
                    raise FetchError(f"request failed: {reason}", source=url) from None
                retry_after = None
            time.sleep(opts.retry.delay(attempt, retry_after))
    finally:
        if own:
            http.close()
