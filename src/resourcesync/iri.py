"""URIs shown to people as IRIs (RFC 3987 §3.2): percent-encoded UTF-8 sequences of non-ASCII
characters decoded (`%E6%96%B0` → `新`), everything else — reserved characters, `%2F`, `%25`,
spaces, encoded ASCII, invalid UTF-8 — left as it is, so the text still names one URI. XML and
JSON keep the URI itself."""

from __future__ import annotations

import re

__all__ = ["display_iri"]

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
