"""What a Source's answer is checked for before it is taken for a resource, beyond the length and
digests its list gives: an HTML page where the list gives another type.

A repository behind a login (Shibboleth, EZproxy, an embargo) answers a request for a PDF with
`200 OK` and its sign-in page, often after a redirect; a broken one answers with its error page
and `200`. When the list gives a digest, the digest tells; without one, the page would be
written as the PDF and the run would say ok. So an answer labelled HTML (or not labelled) whose
first bytes are an HTML page (as the WHATWG MIME sniffing standard recognises one, §7.1) is
refused for a resource listed with another type (`resourcesync.sniff`): a failed transfer,
retried, the previous copy kept. A server that labels every answer `text/html` (a script that
never sets its type) still has its PDF taken: its bytes are not an HTML page.
"""

from __future__ import annotations

from collections.abc import Callable

from ..sniff import HTML_TYPES, WINDOW, looks_like_html, media_type, not_a_page
from .mirror import IntegrityError

__all__ = ["PageCheck", "page_check"]


class PageCheck:
    """A writer in front of another that holds back the first `WINDOW` bytes until it can
    tell whether they are an HTML page; IntegrityError when they are, before anything is
    written. `end()` decides for a body shorter than the window."""

    __slots__ = ("_head", "_listed", "_uri", "_write")

    def __init__(self, uri: str, listed: str, write: Callable[[bytes], None]) -> None:
        self._uri, self._listed, self._write = uri, listed, write
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
        if not head:
            return
        if looks_like_html(head):
            raise IntegrityError(
                f"an HTML page came where the list gives {self._listed}: a sign-in or "
                "error page, not the resource",
                source=self._uri,
            )
        self._write(head)


def page_check(
    uri: str, listed: str | None, answered: str | None, write: Callable[[bytes], None]
) -> PageCheck | None:
    """The check for an answer labelled `answered` (its Content-Type) to a resource the list
    gives as `listed`; None when there is nothing to check: the list gives no type, an HTML or
    an XML one (`sniff.not_a_page`), or the answer is labelled as something else than HTML (a
    text file that holds HTML source, served as `text/plain`, is what it says). An answer with
    no label is looked at, as a browser would."""
    essence = not_a_page(listed)
    label = media_type(answered)
    if not essence or (label and label not in HTML_TYPES):
        return None
    return PageCheck(uri, essence, write)
