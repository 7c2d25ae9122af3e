"""What a Source's answer is checked for before it is taken for a resource, beyond the length and
digests its list gives: an HTML page where the list gives another type, and a cache's copy
taken before the change the list gives.

A repository behind a login (Shibboleth, EZproxy, an embargo) answers a request for a PDF with
`200 OK` and its sign-in page, often after a redirect; a broken one answers with its error page
and `200`. When the list gives a digest, the digest tells; without one, the page would be
written as the PDF and the run would say ok. So an answer labelled HTML (or not labelled) whose
first bytes are an HTML page (as the WHATWG MIME sniffing standard recognises one, §7.1) is
refused for a resource listed with another type (`resourcesync.sniff`): a failed transfer,
retried, the previous copy kept. A server that labels every answer `text/html` (a script that
never sets its type) still has its PDF taken: its bytes are not an HTML page.

A Source behind a cache (a CDN, Varnish, Squid) changes a file; its Change List says so, and the
cache still answers the old bytes until its copy expires. Without a digest (or when an edit keeps
the length) the old bytes would be written, recorded as the listed version and never asked for
again. An answer that says it comes from a cache (`Age`, RFC 9111 §5.1) taken before the change
the list gives is asked for once more with `Cache-Control: no-cache` (the cache checks with the
Source first, §5.2.1.4); a cache that ignores that (many CDNs do) makes it a failed transfer,
retried by the next run, the previous copy kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from ..http import content_codings
from ..model import Resource
from ..sniff import (
    HTML_TYPES,
    WINDOW,
    binary_type,
    looks_like_html,
    media_type,
    not_a_page_for,
)
from ..units import ascii_int
from ..w3cdt import format_w3c, parse_http_date
from .mirror import IntegrityError

__all__ = [
    "NO_CACHE",
    "PageCheck",
    "cached_before",
    "listed_codings",
    "page_check",
]

#: Headers that ask every cache on the way to check with the Source before it answers (HTTP/1.0
#: caches read `Pragma`).
NO_CACHE = {"Cache-Control": "no-cache", "Pragma": "no-cache"}

#: Seconds of disagreement allowed between the clocks (ours, the cache's, the Source's) and
#: the granularity of HTTP dates: a copy taken this close to the change is not called stale.
CLOCKS = 2.0


class PageCheck:
    """A writer in front of another that holds back the first `WINDOW` bytes until it can
    tell whether they are an HTML page; IntegrityError when they are, before anything is
    written. `end()` decides for a body shorter than the window (and refuses an empty one when
    `empty` is refused: no file of a binary format is empty)."""

    __slots__ = ("_empty", "_expected", "_head", "_uri", "_write")

    def __init__(
        self, uri: str, expected: str, write: Callable[[bytes], None], empty: bool = True
    ) -> None:
        """`expected`: what the resource is said to be (`the list gives application/pdf`)."""
        self._uri, self._expected, self._write, self._empty = uri, expected, write, empty
        self._head: bytes | None = b""

    def write(self, data: bytes) -> None:
        if self._head is None:
            self._write(data)
            return
        self._head += data
        if len(self._head) >= WINDOW:
            self.end()

    def end(self) -> None:
        head, self._head = self._head, None
        if head is None:
            return
        if not head:
            if not self._empty:
                raise IntegrityError(
                    f"an empty answer where {self._expected}: no such file is empty (an error "
                    "answered 200?)",
                    source=self._uri,
                )
            return
        if looks_like_html(head):
            raise IntegrityError(
                f"an HTML page came where {self._expected}: a sign-in or "
                "error page, not the resource",
                source=self._uri,
            )
        self._write(head)


def page_check(
    uri: str,
    listed: str | None,
    answered: str | None,
    write: Callable[[bytes], None],
    length: int | None = None,
) -> PageCheck | None:
    """The check for an answer labelled `answered` (its Content-Type) to a resource the list
    gives as `listed` (or, when it gives no type, that its name says: `…/paper.pdf`); None when
    there is nothing to check: the list gives an HTML or an XML type (`sniff.not_a_page_for`),
    no type and a name that says none an HTML page cannot be, or the answer is labelled as
    something else than HTML while the resource is text (a text file that holds HTML source,
    served as `text/plain`, is what it says). An answer with no label is looked at, as a
    browser would; so is any answer for a binary format (a page labelled `application/pdf` by
    a server that labels by the name asked for is no PDF), and an empty one is refused for it
    when the list gives no `length` (a script that failed after its headers answers `200` and
    nothing; with a length, the length tells)."""
    essence, said = not_a_page_for(listed, uri)
    label = media_type(answered)
    binary = binary_type(essence)
    if not essence or (label and label not in HTML_TYPES and not binary):
        return None
    return PageCheck(uri, f"{said} {essence}", write, empty=not binary or length is not None)


def cached_before(
    headers: Mapping[str, str],
    changed: datetime | None,
    now: float | None = None,
    what: str = "the change the list gives",
) -> str | None:
    """Why an answer is a cache's copy taken before `changed` (the time of the change the list
    gives for the resource, or `what` else), or None. A cache says how long it has held its
    copy (`Age`); the copy was taken then, by our clock, and no later than its `Date` (the
    Source's own clock when the cache kept it, as RFC 9111 has it; the cache's when it writes
    its own). An `Age` of 0 is a copy fetched from the Source for this answer; a change dated
    after both clocks' "now" is a Source whose clock runs ahead: not judged."""
    if changed is None:
        return None
    age = ascii_int((headers.get("Age") or "").strip())
    if not age:
        return None
    now = time.time() if now is None else now
    taken = now - age
    dated = parse_http_date(headers.get("Date"))
    date = dated.timestamp() if dated is not None else now
    taken = min(taken, date)
    when = changed.timestamp()
    if taken + CLOCKS >= when or when > max(now, date) + CLOCKS:
        return None
    shown = datetime.fromtimestamp(max(int(taken), _FIRST), UTC)
    return (
        f"a cache answered with a copy it has held for {age:,} s (taken {format_w3c(shown)}), "
        f"from before {what} ({format_w3c(changed)})"
    )


#: 0001-01-01T00:00:00Z in seconds: an `Age` of centuries is shown from there.
_FIRST = -62135596800


def listed_codings(res: Resource) -> tuple[str, ...]:
    """The content codings the list gives a resource (`rs:md encoding`, as HTTP's
    `Content-Encoding` would say them): an answer coded so is kept as it came, since the list's
    length and digest are then the coded bytes' (core §7)."""
    return tuple(content_codings([res.encoding])) if res.encoding else ()
