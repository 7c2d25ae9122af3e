"""URIs shown to people as IRIs (RFC 3987 §3.2): percent-encoded UTF-8 sequences of non-ASCII
characters decoded (`%E6%96%B0` → `新`), everything else — reserved characters, `%2F`, `%25`,
spaces, encoded ASCII, invalid UTF-8 — left as it is, so the text still names one URI. XML and
JSON keep the URI itself.

And whether two spellings name one resource (`same_uri`): RFC 3986 §6.2.2's syntax-based
normal form; and what keeps a URL given to publish under from naming anything (`url_problem`)."""

from __future__ import annotations

import re
import string
from typing import Literal
from urllib.parse import quote, urlsplit, urlunsplit

__all__ = ["display_iri", "normal_uri", "same_uri", "url_problem"]

#: What a URL is for (`url_problem`).
UrlUse = Literal["base", "published", "fetched"]

_RUN = re.compile(r"(?:%[89A-Fa-f][0-9A-Fa-f])+")


def _decode(match: re.Match[str]) -> str:
    raw = bytes.fromhex(match.group(0).replace("%", ""))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return match.group(0)
    # Characters that would confuse a reader (controls, bidirectional marks, spaces) stay
    # encoded, as RFC 3987 §4.1 and §3.2 advise.
    if any(not ch.isprintable() or ch.isspace() or "\u200e" <= ch <= "\u202e" for ch in text):
        return match.group(0)
    return text


def display_iri(uri: str) -> str:
    """`uri` as a person should read it."""
    if "%" not in uri:
        return uri
    return _RUN.sub(_decode, uri)


_PCT = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
_DEFAULT_PORTS = {"http": "80", "https": "443"}
#: A URI in normal form already, as nearly all are (`audit` asks of every one): http(s), a
#: host in lower case, a port that is not the default, no percent-encoding, no fragment, no
#: empty query (a dot segment is looked for apart).
_PLAIN = re.compile(
    r"https?://[a-z0-9.\-]+(?::(?!0*(?:80|443)/)[0-9]+)?/[A-Za-z0-9\-._~:/?\[\]@!$&'()*+,;=]*(?<!\?)\Z"
)
#: What a URI may hold as it is (RFC 3986 §2). Other characters — an IRI's (RFC 3987 §3.1),
#: and those a browser encodes (a space, `"`) — are percent-encoded as UTF-8 (`quote`).
_URI_CHARS = ":/?#[]@!$&'()*+,;=%-._~"
_NOT_URI_CHAR = re.compile(r"[^A-Za-z0-9:/?#\[\]@!$&'()*+,;=%\-._~]")


def _pct(match: re.Match[str]) -> str:
    """One percent-encoding in normal form: an unreserved character decoded (§6.2.2.2), the
    rest in upper-case hex (§6.2.2.1)."""
    char = chr(int(match.group(1), 16))
    return char if char in _UNRESERVED else "%" + match.group(1).upper()


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4 on an absolute path: `/a/./b/../c` → `/a/c`."""
    segments = path.split("/")
    out: list[str] = []
    for i, segment in enumerate(segments):
        if segment in (".", ".."):
            if segment == ".." and len(out) > 1:
                out.pop()
            if i == len(segments) - 1:
                out.append("")  # `/a/b/..` → `/a/`
            continue
        out.append(segment)
    return "/".join(out)


def normal_uri(uri: str) -> str:
    """`uri` in RFC 3986 §6.2.2's normal form: scheme and host in lower case, the scheme's
    default port dropped, percent-encodings in upper-case hex and unreserved characters
    decoded, dot segments removed, an empty path `/` (§6.2.3); an IRI as its URI (RFC 3987
    §3.1: `新` is `%E6%96%B0`, an international host name in its ASCII form); without its
    fragment, which is not sent (RFC 9110 §4.2.4: `a#x` is retrieved as `a`). Spellings that
    differ only so name one resource to retrieve; anything that is not an absolute URI is
    given back as it is."""
    if _PLAIN.match(uri) and "/." not in uri:
        return uri
    try:
        parts = urlsplit(uri)
        if _NOT_URI_CHAR.search(uri):
            host = parts.hostname or ""
            if not host.isascii():
                uri = uri.replace(host, host.encode("idna").decode("ascii"), 1)
            parts = urlsplit(quote(uri, safe=_URI_CHARS))
        port = parts.port
    except ValueError:
        return uri
    if not parts.scheme or not parts.netloc:
        return uri
    scheme = parts.scheme.lower()
    userinfo, at, hostport = parts.netloc.rpartition("@")
    host = hostport[: hostport.index("]") + 1] if hostport.startswith("[") else hostport
    host = host.rsplit(":", 1)[0] if not host.startswith("[") and ":" in host else host
    netloc = userinfo + at + _PCT.sub(_pct, host).lower()
    if port is not None and str(port) != _DEFAULT_PORTS.get(scheme):
        netloc += f":{port}"
    path = _remove_dot_segments(_PCT.sub(_pct, parts.path)) or "/"
    return urlunsplit((scheme, netloc, path, _PCT.sub(_pct, parts.query), ""))


def same_uri(a: str, b: str) -> bool:
    """Whether `a` and `b` are spellings of one URI (`normal_uri`)."""
    return a == b or normal_uri(a) == normal_uri(b)


def url_problem(url: str, *, use: UrlUse = "base") -> str | None:
    """Why `url` cannot be used (None: it can), for a `use`: "base", a URL the documents'
    URIs are made by appending paths to; "published", one written into the documents as it
    is (a hub); "fetched", one only requested (the client percent-encodes its path). Malformed,
    not http(s), without a host, a port out of range; white space or a control character (in
    a fetched URL's host only); a query or a fragment in a base (`http://h/#x` would give every
    resource the URI `http://h/`)."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # a malformed IPv6 host
        return f"is malformed ({exc})"
    if parts.scheme not in ("http", "https"):
        return "is not an http(s) URL"
    if any(c.isspace() or not c.isprintable() for c in (parts.netloc if use == "fetched" else url)):
        return "holds white space or a control character (percent-encode it)"
    if not parts.hostname:
        return "names no host"
    if use == "base" and ("?" in url or "#" in url):
        return "has a query or a fragment, which the paths appended to it would end up inside"
    try:
        _ = parts.port
    except ValueError as exc:
        return f"has a bad port ({exc})"
    return None
