"""Is this an HTML page? The check that keeps a sign-in or error page, answered `200` in place
of a resource or a document, from being taken for it: the WHATWG MIME sniffing standard's HTML
signatures (§7.1) after blanks and a byte order mark, or an XML declaration before an `<html`
element (XHTML). Ground floor: imports nothing of ours.
"""

from __future__ import annotations

__all__ = ["HTML_TYPES", "WINDOW", "looks_like_html", "media_type", "not_a_page"]

#: The media types of an HTML page.
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
#: How many of the first bytes are looked at.
WINDOW = 512
#: The WHATWG "HTML" signatures (MIME Sniffing §7.1), each followed by a tag-terminating
#: byte, plus `<meta` and `<form` that sign-in pages start with. (The standard's `<!--` is
#: not one here: an XML document may begin with a comment; comments are looked past.)
_SIGNATURES = tuple(
    s.encode()
    for s in (
        "<!doctype html",
        "<html",
        "<head",
        "<script",
        "<iframe",
        "<h1",
        "<div",
        "<font",
        "<table",
        "<a",
        "<style",
        "<title",
        "<b",
        "<body",
        "<br",
        "<p",
        "<meta",
        "<form",
    )
)
_TAG_END = b" >\t\n\r\x0c/"
_BLANK = b" \t\n\r\x0c"


def media_type(value: str | None) -> str:
    """The essence of a media type (`text/html; charset=utf-8` → `text/html`); "" for none."""
    if not value:
        return ""
    return value.split(";", 1)[0].strip().lower()


def not_a_page(listed: str | None) -> str:
    """The essence of the type a list gives when an HTML page cannot be that resource; "" when
    it can: no type given, an HTML type, or an XML one (an XHTML page is XML: a Source may list
    its pages as `application/xml`)."""
    essence = media_type(listed)
    if essence in HTML_TYPES or essence in ("application/xml", "text/xml"):
        return ""
    if essence.endswith("+xml"):
        return ""
    return essence


def looks_like_html(head: bytes) -> bool:
    """Whether bytes begin as an HTML page does: an HTML signature after blanks (and a byte
    order mark) and comments, or an XML declaration followed by an `<html` element (XHTML)."""
    text = head[:WINDOW].lstrip(_BLANK)
    if text.startswith(b"\xef\xbb\xbf"):
        text = text[3:].lstrip(_BLANK)
    lowered = text.lower()
    while lowered.startswith(b"<!--"):
        end = lowered.find(b"-->", 4)
        if end == -1:
            return False  # a comment longer than the window: nothing to tell by
        lowered = lowered[end + 3 :].lstrip(_BLANK)
    if lowered.startswith(b"<?xml"):
        at = lowered.find(b"<html")
        # (A byte after the name, or none: `in` finds b"" in any bytes.)
        return at != -1 and lowered[at + 5 : at + 6] in _TAG_END
    # (`<b` and `<body`, `<br`: each signature is tried.)
    return any(
        lowered.startswith(sig) and lowered[len(sig) : len(sig) + 1] in _TAG_END
        for sig in _SIGNATURES
    )
