"""Where a run's requests may go: the wall between what a Source's documents point to and the
network the Destination runs in.

A Source is chosen by whoever runs the Destination; what its documents and answers point to is
not: a redirect, a mirror (`rel="duplicate"`), a dump's package or a list on another host. A
hostile or compromised Source could send an aggregator's requests to the machine's own
services (`127.0.0.1`, `0.0.0.0`), to the cloud's metadata service (`169.254.169.254`, link
local) or into the aggregator's private network, and have the answers written into its copy.

`Reach.around(source)` lets a run's requests go to the public Internet, to the Source's own
host (and those the run maps, `--map`), and to the kinds of address the Source itself is on (a
Source on `127.0.0.1` may lead to other loopback addresses, one in a private network to that
network): a host that is, or resolves to, another kind of address is refused before any
request is sent to it. A request
that goes through a proxy (HTTP_PROXY, …) is judged by its host when that is an address, and
left to the proxy when it is a name (the proxy resolves it, not this machine). The transfers
judge again the addresses their connections are made to (`judge_resolved`, in the resolver):
a name whose DNS answer changes after the first check (DNS rebinding) does not get through
there; the documents' requests are judged once a minute by name, the hub's gap.

Ground floor beside `http`: imports nothing of ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

__all__ = ["NAT64_LOCAL", "Reach", "address_kind", "embedded_ipv4"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_COMPATIBLE = ipaddress.IPv6Network("::/96")  # IPv4-compatible (deprecated, RFC 4291)
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")  # IPv4-translated (RFC 2765)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # well-known NAT64 prefix (RFC 6052)
NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")  # local-use NAT64 (RFC 8215)
#: Seconds a host's judgement is kept, and how many are kept.
_CACHE_SECONDS = 60.0
_CACHE_MAX = 4096


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for or leads to, if any: IPv4-mapped,
    IPv4-compatible, IPv4-translated, NAT64 (64:ff9b::/96), 6to4 (2002::/16), Teredo (the
    client)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    low = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _NAT64 or ip in _TRANSLATED:
        return low
    if ip in _COMPATIBLE and int(ip) > 1:  # not :: nor ::1
        return low
    return None


def address_kind(ip: IPAddress) -> str:
    """`public`, `loopback`, `link-local` (cloud metadata services are), `private` (RFC 1918,
    unique local, shared, …), `unspecified` (`0.0.0.0` reaches this machine), `multicast` or
    `reserved`. An IPv6 address that embeds an IPv4 one is the kind of that one."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in NAT64_LOCAL:
            return "private"  # a site's own translator: a way into its network
        embedded = embedded_ipv4(ip)
        if embedded is not None:
            ip = embedded
    if ip.is_loopback:
        return "loopback"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        return "private"
    return "public"


#: The scheme and authority of a URL, as written: the key a judgement is kept under.
_ORIGIN = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*")


def _origin(url: str) -> str:
    m = _ORIGIN.match(url)
    return m.group(0).lower() if m else url


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").partition("%")[0])
    except ValueError:
        return None


def addresses_of(infos: Iterable[tuple[Any, ...]]) -> list[str]:
    """The addresses of `getaddrinfo` results, in its order (the order to try), once each."""
    return list(dict.fromkeys(str(info[4][0]).partition("%")[0] for info in infos))


def _resolve(host: str, port: int) -> set[str] | None:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    return {str(info[4][0]).partition("%")[0] for info in infos}


@dataclass(frozen=True, slots=True)
class Reach:
    """The kinds of address (`address_kind`) a run's requests may go to beside public ones,
    and the hosts always reachable: the Source's own, and those the run maps (`--map`)."""

    allowed: frozenset[str] = frozenset()
    hosts: frozenset[str] = frozenset()
    #: Who leads the requests, as a refusal names it ("a Source", "a listed site").
    leader: str = "a Source"
    _cache: dict[str, tuple[float, str | None]] = field(
        default_factory=dict, compare=False, repr=False
    )
    _proxies: dict[str, str] = field(
        default_factory=urllib.request.getproxies_environment, compare=False, repr=False
    )

    @classmethod
    def around(cls, url: str, also: Iterable[str] = ()) -> Reach | None:
        """The reach of a run whose Source is `url`: the kinds of address its host is on, and
        the hosts of the URLs `also` (the run's mappings: hosts its user chose). None (no
        wall) for a local file, or a host that cannot be resolved (the run fails on it before
        anything else is asked)."""
        try:
            parts = urlsplit(url)
            host, port = parts.hostname, parts.port
        except ValueError:
            return None
        if parts.scheme.lower() not in ("http", "https") or not host:
            return None
        literal = _literal(host)
        if literal is not None:
            kinds = {address_kind(literal)}
        else:
            found = _resolve(host, port or (443 if parts.scheme.lower() == "https" else 80))
            if not found:
                return None
            kinds = {address_kind(ipaddress.ip_address(a)) for a in found}
        hosts = {host.lower()}
        for other in also:
            try:
                named = urlsplit(other).hostname
            except ValueError:
                continue
            if named:
                hosts.add(named.lower())
        return cls(allowed=frozenset(kinds - {"public"}), hosts=frozenset(hosts))

    @classmethod
    def around_all(cls, urls: Iterable[str]) -> Reach | None:
        """The reach of a command given several targets (`validate`): where any of them may
        lead (None when none can be judged: local files, hosts that do not resolve)."""
        found = [r for r in map(cls.around, urls) if r is not None]
        if not found:
            return None
        return cls(
            allowed=frozenset().union(*(r.allowed for r in found)),
            hosts=frozenset().union(*(r.hosts for r in found)),
        )

    def why_not(self, url: str) -> str | None:
        """Why a request must not go to `url` (resolving its host here), or None."""
        key, todo, why = self._start(url)
        if todo is None:
            return why
        host, port = todo
        return self._keep(key, self._judge(host, _resolve(host, port)))

    async def why_not_async(self, url: str) -> str | None:
        """`why_not`, resolving without holding the event loop (every request of a run asks:
        a host judged lately costs one lookup)."""
        key, todo, why = self._start(url)
        if todo is None:
            return why
        host, port = todo
        found: set[str] | None = None
        with contextlib.suppress(OSError, UnicodeError):
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
            found = {str(info[4][0]).partition("%")[0] for info in infos}
        return self._keep(key, self._judge(host, found))

    def _start(self, url: str) -> tuple[str, tuple[str, int] | None, str | None]:
        """The cache key of `url`; the host and port left to resolve (None: judged, lately or
        now, without resolving); the judgement when it is made."""
        key = _origin(url)
        hit, why = self._cached(key)
        if hit:
            return key, None, why
        host, port, proxied = self._target(url)
        if host is None:
            return key, None, self._keep(key, None)
        if proxied or _literal(host) is not None:
            return key, None, self._keep(key, self._judge(host, None))
        return key, (host, port), None

    def judged_at_connection(self, host: str) -> bool:
        """Whether a connection to `host` is to go to addresses judged as they are resolved
        (`judge_resolved`): a name, not one of the run's own hosts (an address was judged as
        it is, by the request's check)."""
        return _literal(host) is None and host.lower() not in self.hosts

    def judge_resolved(self, host: str, addresses: Iterable[str]) -> str | None:
        """Why a connection to `host` must not go to these of its addresses (what a resolver
        gave the connection itself: no second lookup for DNS to answer otherwise), or None."""
        if host.lower() in self.hosts:
            return None
        return self._judge(host, {a.partition("%")[0] for a in addresses})

    def _target(self, url: str) -> tuple[str | None, int, bool]:
        """The host of `url` to judge (None: nothing to judge), its port, and whether a proxy
        takes the request."""
        try:
            parts = urlsplit(url)
            host, port = parts.hostname, parts.port
        except ValueError:
            return None, 0, False
        if not host or host.lower() in self.hosts:
            return None, 0, False
        scheme = parts.scheme.lower()
        proxy = self._proxies.get(scheme) or self._proxies.get("all")
        bypass: Any = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
        proxied = bool(proxy) and not bypass(host, self._proxies)
        return host.lower(), port or (443 if scheme == "https" else 80), proxied

    def _cached(self, key: str) -> tuple[bool, str | None]:
        """(whether the origin `key` was judged lately, and how)."""
        found = self._cache.get(key)
        if found is not None and found[0] > time.monotonic():
            return True, found[1]
        return False, None

    def _keep(self, key: str, why: str | None) -> str | None:
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        self._cache[key] = (time.monotonic() + _CACHE_SECONDS, why)
        return why

    def _judge(self, host: str, resolved: set[str] | None) -> str | None:
        literal = _literal(host)
        addresses = {str(literal)} if literal is not None else (resolved or set())
        for text in sorted(addresses):
            kind = address_kind(ipaddress.ip_address(text))
            if kind != "public" and kind not in self.allowed:
                shown = host if literal is not None else f"{host} ({text})"
                return (
                    f"{shown} is a {kind} address, which {self.leader} on "
                    f"{_kinds(self.allowed)} may not lead to (--any-address to allow)"
                )
        return None


def _kinds(allowed: frozenset[str]) -> str:
    return "public addresses" if not allowed else " and ".join(sorted(allowed)) + " addresses"
