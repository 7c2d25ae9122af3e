"""Topic URLs compared as the same resource (RFC 3986 §6.2.2, syntax-based normalisation).

A publisher may write `http://Example.org:80/%7Ea/` where a subscriber wrote
`http://example.org/~a/`: one topic. The hub keys subscriptions and notifications by the
normalised form; what it sends back (the verification's `hub.topic`, the delivery's `Link`)
stays as each party wrote it.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

__all__ = ["normalise_topic"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")


def _percent(text: str) -> str:
    """Decode percent-encoded unreserved characters; upper-case the hex of the others."""

    def one(m: re.Match[str]) -> str:
        char = chr(int(m.group(1), 16))
        return char if char in _UNRESERVED else "%" + m.group(1).upper()

    return _PERCENT.sub(one, text)


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4."""
    out: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if len(out) > 1:
                out.pop()
        elif segment != ".":
            out.append(segment)
    if path.endswith(("/.", "/..")):
        out.append("")
    return "/".join(out)


def normalise_topic(url: str) -> str:
    """`url` in normal form: lower-case scheme and host, no default port, unreserved
    characters decoded and other percent-encodings in upper case, dot segments removed, an
    empty path as `/`. A URL that cannot be split is returned as it is."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return url
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        host = f"{host}:{port}"
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{_percent(userinfo)}@{host}" if userinfo else host
    path = _remove_dot_segments(_percent(parts.path)) or "/"
    return urlunsplit((scheme, netloc, path, _percent(parts.query), _percent(parts.fragment)))
