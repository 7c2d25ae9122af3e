"""What an operator decides about a hub: leases, caps, publishers, topics, and which callback
addresses the hub may contact (the SSRF wall)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..http import RetryPolicy
from ..http.reach import NAT64_LOCAL, address_kind, embedded_ipv4
from .topics import normalise_topic

__all__ = ["AddressPolicy", "HubConfig", "IPNetwork", "embedded_ipv4", "parse_network"]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Lease bounds the Change Notification spec recommends (§4.2): 5 minutes to 1 month.
LEASE_MIN = 300
LEASE_MAX = 2_678_400
LEASE_DEFAULT = 864_000  # 10 days


def parse_network(text: str) -> IPNetwork | None:
    """`10.0.0.0/8`, `192.0.2.7`, `::1` as a network; None for anything else (a host name)."""
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """Which hosts the hub may send requests to (verification, delivery, topic checks).

    Without an allow-list, public (globally routable) addresses are allowed and everything else
    (loopback, private, link-local — which includes cloud metadata services —, reserved,
    multicast, unspecified) is refused; `allow_loopback` and `allow_private` open those. With an
    allow-list (`networks`, `hosts`), only what it names is allowed (plus loopback or private
    addresses when those flags say so). Every address a name resolves to must be allowed, so a
    name that resolves to one public and one private address is refused. Host names in `hosts`
    are trusted as they are, whatever they resolve to.

    The check runs when a subscription is requested and again (cached for `cache_seconds`)
    before each delivery; and every connection the hub makes goes to addresses judged as the
    name was resolved for it (`judge_resolved`, in the hub's HTTP client), so a name whose DNS
    answer changes after the check (DNS rebinding) does not get through.
    """

    allow_loopback: bool = False
    allow_private: bool = False
    networks: tuple[IPNetwork, ...] = ()
    hosts: frozenset[str] = frozenset()
    cache_seconds: float = 60.0
    _cache: dict[str, tuple[float, str | None]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def restricted(self) -> bool:
        return bool(self.networks or self.hosts)

    def address_allowed(self, ip: IPAddress) -> bool:
        if self._listed(ip):
            return True
        if isinstance(ip, ipaddress.IPv6Address) and ip not in NAT64_LOCAL:
            # Judged as the IPv4 address it reaches (loopback behind ::7f00:1, …).
            embedded = embedded_ipv4(ip)
            if embedded is not None and self._listed(embedded):
                return True
        kind = address_kind(ip)
        if kind == "loopback":
            return self.allow_loopback
        if kind in ("unspecified", "multicast"):
            return False
        if kind != "public":
            return self.allow_private
        return not self.restricted

    def _listed(self, ip: IPAddress) -> bool:
        return any(ip.version == net.version and ip in net for net in self.networks)

    async def check(self, url: str) -> str | None:
        """Why the hub must not send a request to `url`, or None when it may."""
        try:
            parts = urlsplit(url)
            host = parts.hostname
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return "not a valid URL"
        if parts.scheme not in ("http", "https") or not host:
            return "not an http(s) URL"
        host = host.lower()
        if host in self.hosts:
            return None
        now = time.monotonic()
        cached = self._cache.get(host)
        if cached is not None and cached[0] > now:
            return cached[1]
        reason = await self._resolve_and_judge(host, port)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[host] = (now + self.cache_seconds, reason)
        return reason

    async def _resolve_and_judge(self, host: str, port: int) -> str | None:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except (OSError, UnicodeError):
            return f"{host} cannot be resolved"
        addresses = {str(info[4][0]).partition("%")[0] for info in infos}
        if not addresses:
            return f"{host} cannot be resolved"
        return self.judge_resolved(host, addresses)

    def judged_at_connection(self, host: str) -> bool:
        """Whether the hub's connections to `host` go to addresses judged as they are
        resolved: every name but those the operator trusts (`hosts`)."""
        return host.lower() not in self.hosts

    def judge_resolved(self, host: str, addresses: Iterable[str]) -> str | None:
        """Why the hub must not connect to `host` at these of its addresses, or None."""
        if host.lower() in self.hosts:
            return None
        for text in sorted({a.partition("%")[0] for a in addresses}):
            ip = ipaddress.ip_address(text)
            if not self.address_allowed(ip):
                judged = ip
                if isinstance(ip, ipaddress.IPv6Address):
                    judged = embedded_ipv4(ip) or ip
                found = address_kind(ip)
                kind = (
                    "loopback"
                    if found == "loopback"
                    else "not public"
                    if found != "public"
                    else "not in the allow-list"
                )
                if judged is not ip:
                    kind = f"{kind} (it embeds {judged})"
                shown = host if host == text else f"{host} ({text})"
                return f"{shown} is {kind} and not allowed by the hub's configuration"
        return None


@dataclass(frozen=True, slots=True)
class HubConfig:
    """Settings of one hub. Times in seconds, sizes in bytes."""

    #: The hub URI as subscribers and publishers know it (for `Link: <…>; rel="hub"`); by
    #: default the publisher's own `rel="hub"` link, else the URL the request came to.
    public_url: str | None = None
    #: When set, publishing needs `Authorization: Bearer <token>`.
    token: str | None = None
    #: When not empty, the only topics that may be published to or subscribed to: exact URIs,
    #: or prefixes written with a trailing `*`.
    topics: tuple[str, ...] = ()
    #: HEAD (or GET) the topic URI before accepting a notification and check its Link headers.
    check_topic: bool = False
    check_topic_cache: float = 300.0
    policy: AddressPolicy = field(default_factory=AddressPolicy)
    lease_min: int = LEASE_MIN
    lease_max: int = LEASE_MAX
    lease_default: int = LEASE_DEFAULT
    max_notification_bytes: int = 1 << 20
    max_form_bytes: int = 16 << 10
    #: A verification or a delivery that takes longer fails (and a delivery is retried).
    timeout: float = 10.0
    #: Backoff between delivery attempts: `backoff` × 2^n with jitter, capped at `max_backoff`.
    retry: RetryPolicy = field(
        default_factory=lambda: RetryPolicy(retries=0, backoff=1.0, max_backoff=300.0)
    )
    #: Deliveries and verifications in flight at once (across all subscribers).
    concurrency: int = 256
    max_pending_verifications: int = 1000
    #: How often leases that ran out are swept (they are enforced at every delivery anyway).
    sweep_interval: float = 30.0
    #: What is kept for a subscriber that does not take its deliveries, and per topic; past
    #: these the oldest are dropped and counted as a gap (0: no cap).
    max_pending_per_subscription: int = 1000
    max_topic_notifications: int = 1000
    max_topic_bytes: int = 64 << 20
    #: Payloads held in memory for deliveries in flight (shared by all their subscribers).
    memory_budget: int = 64 << 20
    #: Notifications accepted per topic: `publish_rate` a second on average, bursts of
    #: `publish_burst` (0: no limit); more gets 429 with Retry-After.
    publish_rate: float = 10.0
    publish_burst: int = 100

    def topic_allowed(self, topic: str) -> bool:
        """Whether `topic` is relayed (compared in normal form, see `topics`)."""
        if not self.topics:
            return True
        topic = normalise_topic(topic)
        for allowed in self.topics:
            if allowed.endswith("*"):
                prefix = allowed[:-1]
                if topic.startswith(prefix) or topic.startswith(normalise_topic(prefix)):
                    return True
            elif topic == normalise_topic(allowed):
                return True
        return False

    def grant_lease(self, requested: int | None) -> int:
        """The lease the hub grants for a requested one (None: the default), within bounds."""
        wanted = self.lease_default if requested is None else requested
        return max(self.lease_min, min(self.lease_max, wanted))
