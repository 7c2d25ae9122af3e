"""The bytes of one document as the reader (`read.DocumentReader`) feeds them to its parser:
opened from bytes, a file, a binary stream or an http(s) URL (through `resourcesync.http`),
gzip decompressed and capped at a size counted after decompression (a gzip bomb stops at the
cap), its prolog looked at before the parser sees it (a DOCTYPE or an HTML page refused, an
XML declaration after blank lines moved first), and what follows the root element's end
handed over when the parser stops there.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from ..errors import ReadError
from ..inflate import Inflate, InflateError
from ..sniff import looks_like_html
from .decode import SCHEME

__all__ = ["CHUNK", "HTML_PAGE", "DocumentInput", "Source", "is_url"]

#: Bytes fed to the parser at a time: the entries of one chunk are decoded while they are
#: still in the processor's cache (64 KiB, about 250 entries: `validate` 4 % under 256 KiB).
CHUNK = 1 << 16
Source = str | os.PathLike[str] | bytes | bytearray | IO[bytes]
#: Says a rule the document bends and that is read through (`EntryDecoder.warn`).
Warn = Callable[[str, str, int | None], None]

#: What a document that is an HTML page is refused as (a site's page, or its sign-in or error
#: page answered 200: discovery takes it for no document there).
HTML_PAGE = "an HTML page, not a ResourceSync document"
# What may stand before the root element: the XML declaration, PIs, comments, white space.
_PROLOG = re.compile(rb"(?:\xef\xbb\xbf)?(?:\s+|<\?.*?\?>|<!--.*?-->)*", re.DOTALL)
#: The root element's end tag.
_ROOT_END = re.compile(rb"</(?:[\w.-]+:)?(?:urlset|sitemapindex)\s*>")


def is_url(text: str) -> bool:
    """Whether `text` names an http(s) URL (rather than a file), from its scheme alone: a
    malformed one (`http://[::1/`) is a URL that cannot be read, not a file's name."""
    scheme = SCHEME.match(text)
    return scheme is not None and scheme.group().lower() in ("http:", "https:")


class _Chunks:
    """Chunks of raw bytes from any source, decompressing gzip and enforcing the size cap."""

    def __init__(self, raw: Iterator[bytes], name: str, max_bytes: int) -> None:
        self._raw = raw
        self._name = name
        self._max = max_bytes
        self.total = 0

    def __iter__(self) -> Iterator[bytes]:
        first = b""
        for chunk in self._raw:
            first += chunk
            if len(first) >= 2:
                break
        if first[:2] == b"\x1f\x8b":
            yield from self._capped(self._gunzip(first))
        else:
            yield from self._capped(self._chain(first))

    def _chain(self, first: bytes) -> Iterator[bytes]:
        if first:
            yield first
        yield from self._raw

    def _gunzip(self, first: bytes) -> Iterator[bytes]:
        """The gzip file's content (`inflate.Inflate`: every member, NUL padding between
        skipped), in bounded pieces: a bomb cannot blow up in one step."""
        d = Inflate("gzip", CHUNK)
        try:
            for chunk in self._chain(first):
                yield from d.feed(chunk)
            yield from d.finish()
        except InflateError as exc:
            if exc.kind == "cut":
                raise ReadError("truncated gzip data", source=self._name) from None
            if exc.kind == "after":
                raise ReadError(
                    "corrupt gzip data: not a gzip member after the end of one", source=self._name
                ) from None
            raise ReadError(f"corrupt gzip data: {exc.detail}", source=self._name) from None

    def _capped(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            self.total += len(chunk)
            if self.total > self._max:
                raise ReadError(
                    f"larger than the limit of {self._max} bytes (raise it with --max-size)",
                    source=self._name,
                )
            if chunk:
                yield chunk


def _file_chunks(f: IO[bytes]) -> Iterator[bytes]:
    while chunk := f.read(CHUNK):
        yield chunk


class DocumentInput:
    """One document's bytes (see the module docstring); `close` releases what was opened."""

    def __init__(self, source: Source, name: str | None, client: Any, max_bytes: int) -> None:
        self._client = client
        self._closers: list[Callable[[], None]] = []
        self.url: str | None = None
        #: What relative references resolve against: the URL the document was retrieved
        #: from, after redirects (RFC 3986 §5.1.3).
        self.base_url: str | None = None
        self.path: Path | None = None
        self.name = ""
        raw = self._open(source, name)
        self.chunks = _Chunks(raw, self.name, max_bytes)
        self._iter: Iterator[bytes] | None = iter(self.chunks)
        self._prolog_checked = False
        #: The last two chunks handed over: where text after the root element begins.
        self._fed = (b"", b"")

    def next(self, warn: Warn | None) -> bytes | None:
        """The next chunk for the parser; None at the end. `warn`: how to say a declaration
        moved before the blank lines that preceded it (None: the validator's reading, which
        sees the document as written)."""
        if self._iter is None:
            return None
        try:
            chunk = next(self._iter)
        except StopIteration:
            self._iter = None
            return None
        if not self._prolog_checked:
            chunk = self._check_prolog(chunk, warn)
        self._fed = (self._fed[1], chunk)
        return chunk

    def after_root(self) -> bytes | None:
        """Everything after the root element's end tag, read to the end of the input (within
        the cap); None when where it starts cannot be told (the end tag not among the last
        bytes handed over)."""
        data = self._fed[0] + self._fed[1]
        end = _ROOT_END.search(data)
        if end is None:
            return None
        tail = [data[end.end() :]]
        if self._iter is not None:
            tail.extend(self._iter)
            self._iter = None
        return b"".join(tail)

    def close(self) -> None:
        while self._closers:
            closer = self._closers.pop()
            with contextlib.suppress(Exception):  # closing must not hide the real outcome
                closer()
        self._iter = None

    # -- opening ---------------------------------------------------------------------------

    def _open(self, source: Source, name: str | None) -> Iterator[bytes]:
        if isinstance(source, bytes | bytearray):
            self.name = name or "<bytes>"
            data = bytes(source)
            return iter([data[i : i + CHUNK] for i in range(0, len(data), CHUNK)] or [b""])
        if isinstance(source, str) and is_url(source):
            self.url = source
            self.name = name or source
            return self._open_url(source)
        if isinstance(source, str | os.PathLike):
            path = Path(source)
            self.path = path
            self.name = name or str(source)
            try:
                f = open(path, "rb")  # noqa: SIM115 - closed by close()
            except FileNotFoundError:
                scheme = urlsplit(str(source)).scheme
                if "://" in str(source) and scheme:
                    # `htp://…`, `ftp://…`: not a file that is missing, a URL we do not read.
                    raise ReadError(
                        f"unsupported URL scheme {scheme + ':'!r}: http:// and https:// URLs "
                        "are read, or give a file's path",
                        source=self.name,
                    ) from None
                raise ReadError("no such file", source=self.name) from None
            except IsADirectoryError:
                raise ReadError("is a directory, not a document", source=self.name) from None
            except OSError as exc:
                raise ReadError(f"cannot open: {exc.strerror}", source=self.name) from None
            self._closers.append(f.close)
            return _file_chunks(f)
        if hasattr(source, "read"):
            self.name = name or getattr(source, "name", None) or "<stream>"
            return _file_chunks(source)
        raise TypeError(f"cannot read a document from {type(source).__name__}")

    def _open_url(self, url: str) -> Iterator[bytes]:
        from .. import http

        stream = http.open_stream(url, client=self._client)
        response = stream.__enter__()
        self.base_url = str(response.url)

        def close_stream() -> None:
            stream.__exit__(None, None, None)

        self._closers.append(close_stream)
        # Sitemaps served with Content-Encoding: gzip are decoded by httpx; `.xml.gz` bodies
        # served as application/gzip stay compressed and are detected by their magic bytes.
        return http.iter_body(response, url, CHUNK)

    def _check_prolog(self, chunk: bytes, warn: Warn | None) -> bytes:
        """Refuse a DOCTYPE before the parser sees it: libxml2 would otherwise meet an entity
        bomb (and say so in its own words) before we meet the root element. The prolog is read
        until the root element starts (at most 1 MiB of it). `warn`: see `next`."""
        head = chunk
        while True:
            text = head
            if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
                text = head.decode("utf-16", errors="replace").encode("utf-8")
            if looks_like_html(text):
                # A sign-in or error page answered 200 for the document, most often.
                raise ReadError(
                    f"{HTML_PAGE} (a sign-in or error page?)",
                    source=self.name,
                    line=1,
                )
            m = _PROLOG.match(text)
            end = m.end() if m else 0
            rest = text[end : end + 9]
            if rest == b"<!DOCTYPE":
                raise ReadError(
                    "DOCTYPE declarations are not allowed in ResourceSync documents "
                    "(refused: entities and DTDs are never loaded)",
                    source=self.name,
                    line=text.count(b"\n", 0, end) + 1,
                )
            # More is needed while the prolog might still be going on: an unclosed comment or
            # PI, or too few bytes to tell what comes next.
            complete = not (
                (len(rest) < 9 and b"<!DOCTYPE".startswith(rest))
                or rest.startswith((b"<!--", b"<?"))
            )
            if complete or len(head) > (1 << 20) or self._iter is None:
                break
            try:
                head += next(self._iter)
            except StopIteration:
                self._iter = None
                break
        self._prolog_checked = True
        return head if warn is None else self._declaration_first(head, warn)

    def _declaration_first(self, head: bytes, warn: Warn) -> bytes:
        """A document with blank lines or spaces before its XML declaration (a generator's
        stray newline: PHP includes, templates) is not well-formed XML, and was not read at
        all. For a Destination the declaration is moved before them, said once; the lines
        after it keep their numbers. The validator still calls it unreadable."""
        bom = b"\xef\xbb\xbf" if head.startswith(b"\xef\xbb\xbf") else b""
        body = head[len(bom) :]
        stripped = body.lstrip(b" \t\r\n")
        if len(stripped) == len(body) or not stripped.startswith(b"<?xml"):
            return head
        end = stripped.find(b"?>")
        if end < 0 or not stripped[5:6].isspace():
            return head
        warn(
            "declaration",
            "whitespace before the XML declaration (not well-formed XML): read without it",
            1,
        )
        gap = body[: len(body) - len(stripped)]
        return bom + stripped[: end + 2] + gap + stripped[end + 2 :]
