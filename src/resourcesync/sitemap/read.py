"""The one XML reader: streaming, namespace-aware, hardened.

Every ResourceSync document we read goes through `open_document`. It takes a path, an http(s)
URL (fetched through `resourcesync.http`), bytes, or a binary file object, and gives the document
header (`Document`) before the entries, then the entries (`Resource`) as an iterator. Memory stays
flat whatever the number of entries: the input is fed to lxml's pull parser in chunks and every
processed `<url>` is cleared and dropped from the tree.

Hostile input is refused with a `ReadError` naming the input and line: any DOCTYPE (so no
entity expansion and no external DTD or entity is ever loaded — the parser runs with entity
resolution, DTD loading and network access off as a second wall), binary garbage, truncation,
inputs past a size cap (counted after gzip decompression, so a gzip bomb stops at the cap).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any
from urllib.parse import urlsplit

from lxml import etree

from ..errors import ReadError
from ..inflate import Inflate, InflateError
from ..model import Document, Resource
from ..sniff import looks_like_html
from .decode import (
    RS_LN,
    RS_MD,
    SCHEME,
    SITEMAP,
    SITEMAPINDEX,
    URL,
    URLSET,
    EntryDecoder,
    ProblemHandler,
    local_name,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "HTML_PAGE",
    "DocumentReader",
    "ProblemHandler",
    "Source",
    "is_url",
    "open_document",
]

#: Largest input accepted by default (after decompression). The spec caps a sitemap at 50 MB;
#: we read larger ones (our own benchmarks use 1,000,000 entries) but not without bound.
DEFAULT_MAX_BYTES = 2 * 1024**3
#: Bytes fed to the parser at a time: the entries of one chunk are decoded while they are
#: still in the processor's cache (64 KiB, about 250 entries: `validate` 4 % under 256 KiB).
CHUNK = 1 << 16
Source = str | os.PathLike[str] | bytes | bytearray | IO[bytes]

#: What a document that is an HTML page is refused as (a site's page, or its sign-in or error
#: page answered 200: discovery takes it for no document there).
HTML_PAGE = "an HTML page, not a ResourceSync document"
# What may stand before the root element: the XML declaration, PIs, comments, white space.
_PROLOG = re.compile(rb"(?:\xef\xbb\xbf)?(?:\s+|<\?.*?\?>|<!--.*?-->)*", re.DOTALL)
#: The root element's end tag, and what in text after it would be entries of a sitemap.
_ROOT_END = re.compile(rb"</(?:[\w.-]+:)?(?:urlset|sitemapindex)\s*>")
_ENTRY_LIKE = re.compile(rb"<(?:[\w.-]+:)?(?:urlset|sitemapindex|url|sitemap|loc)[\s/>]")


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


class DocumentReader:
    """A ResourceSync document being read. Use as a context manager; iterate for the entries.

    `problems`: when a handler is given, value problems (a bad datetime, a negative length, an
    entry without `<loc>`) are reported to it and the value left unset, so a validator can list
    every problem; without one, the first problem raises `FormatError`.
    """

    def __init__(
        self,
        source: Source,
        *,
        name: str | None = None,
        client: Any = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        on_problem: ProblemHandler | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        self._client = client
        self._closers: list[Callable[[], None]] = []
        self.url: str | None = None
        #: What relative references resolve against: the URL the document was retrieved
        #: from, after redirects (RFC 3986 §5.1.3).
        self.base_url: str | None = None
        self.path: Path | None = None
        raw = self._open(source, name)
        self._chunks = _Chunks(raw, self.name, max_bytes)
        self._prolog_checked = False
        self._chunk_iter: Iterator[bytes] | None = iter(self._chunks)
        self._parser = etree.XMLPullParser(
            events=("end",),
            # The root's end too (once a document): what follows it is outside the document.
            tag=(URL, SITEMAP, URLSET, SITEMAPINDEX),
            resolve_entities=False,
            load_dtd=False,
            dtd_validation=False,
            no_network=True,
            huge_tree=False,
            remove_comments=True,
            remove_pis=True,
            collect_ids=False,
        )
        self._pending: list[tuple[int, Any]] = []
        #: The entries of the last chunk, to take out of the tree once they are read.
        self._unreleased: tuple[Any, Any, int, str | None] | None = None
        self._document: Document | None = None
        self._root: Any = None
        self._root_checked = False
        #: The root element, once it has ended.
        self._ended: Any = None
        self._fed = (b"", b"")
        self._entry_tag: str | None = None
        self._header_count = 0
        self._done = False
        #: Lines of document-level `rs:md`/`rs:ln` that came after the first entry.
        self.late_header_lines: list[int] = []
        #: Elements to values (sitemap/decode.py).
        self._decoder = EntryDecoder(self.name, on_problem, self.base_url)
        #: Line of each document-level element, for the validator's messages.
        self.header_lines = self._decoder.header_lines
        #: Rules this document bends that the reader read through (zone-less datetimes,
        #: base64 digests): one line per kind, for the caller to show. With `on_problem` set
        #: they are reported to it as problems instead.
        self.warnings = self._decoder.warnings
        #: An element from `element_batches()` as an entry (what `entries()` gives): `(el, line)`.
        self.decode = self._decoder.entry
        #: An element's `<loc>` when the entry is plain (`EntryDecoder.plain`), else None.
        self.plain = self._decoder.plain

    @property
    def on_problem(self) -> ProblemHandler | None:
        """Where value problems go (None: the first raises `FormatError`); may be set before
        the first entry is read."""
        return self._decoder.on_problem

    @on_problem.setter
    def on_problem(self, handler: ProblemHandler | None) -> None:
        self._decoder.on_problem = handler

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

    # -- context manager -------------------------------------------------------------------

    def __enter__(self) -> DocumentReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        while self._closers:
            closer = self._closers.pop()
            with contextlib.suppress(Exception):  # closing must not hide the real outcome
                closer()
        self._chunk_iter = None

    # -- the stream ------------------------------------------------------------------------

    @property
    def document(self) -> Document:
        """The document header; reads just far enough to know it (up to the first entry)."""
        while self._document is None:
            if not self._pump():
                break
        if self._document is None:
            raise ReadError("no document was read", source=self.name)
        return self._document

    @property
    def is_index(self) -> bool:
        return self.document.index

    def __iter__(self) -> Iterator[Resource]:
        for _, resource in self.entries():
            yield resource

    def entries(self) -> Iterator[tuple[int, Resource]]:
        """(line, entry) pairs, in document order."""
        decode = self._decoder.entry
        for batch in self.element_batches():
            for line, el in batch:
                yield line, decode(el, line)

    def element_batches(self) -> Iterator[list[tuple[int, Any]]]:
        """The entries not yet decoded, as (line, `<url>` element) pairs, in document order, a
        chunk of the input at a time: for a reader that looks at an element first (the
        validator's plain entries, `plain`) and decodes the others (`decode`). A batch is
        emptied, and its elements taken out of the tree, when the next is asked for."""
        self.document  # noqa: B018 - the header comes first
        while True:
            if self._pending:
                batch, self._pending = self._pending, []
                yield batch
                # Held by no one (lxml would move each element held to a document of its own).
                batch.clear()
            if not self._pump():
                return

    def _feed_error(self, exc: etree.XMLSyntaxError) -> ReadError:
        line = exc.lineno if exc.lineno else None
        msg = exc.msg if hasattr(exc, "msg") and exc.msg else str(exc)
        # libxml2 messages end with ", line N, column M": the line is in our address already.
        msg = msg.split(", line ")[0].strip()
        if "Document is empty" in msg or (self._chunks.total == 0):
            return ReadError("empty document (no XML)", source=self.name, line=line)
        return ReadError(f"not well-formed XML: {msg}", source=self.name, line=line)

    def _pump(self) -> bool:
        """Feed one chunk and process its events. False when the input is exhausted."""
        if self._done:
            return False
        if self._unreleased is not None:
            self._release(*self._unreleased)
            self._unreleased = None
        parser = self._parser
        chunk = None
        if self._chunk_iter is not None:
            try:
                chunk = next(self._chunk_iter)
            except StopIteration:
                chunk = None
        if chunk is not None and not self._prolog_checked:
            chunk = self._check_prolog(chunk)
        if chunk is not None:
            # The last two chunks fed: where text after the root element begins (`_after_root`).
            self._fed = (self._fed[1], chunk)
        try:
            if chunk is not None:
                parser.feed(chunk)
                self._handle_events(parser.read_events())
                return True
            self._done = True
            root = parser.close()
            self._handle_events(parser.read_events())
        except etree.XMLSyntaxError as exc:
            self._done = True
            root = self._after_root(exc)
        self._finish(root)
        return False

    def _after_root(self, exc: etree.XMLSyntaxError) -> Any:
        """A document whose root element ended well but with text after it (a PHP notice or
        a page-generation footer appended, NUL padding) is not well-formed XML, and was not
        read at all. For a Destination what the root holds is the whole document: read, and
        the rest ignored, said once (the root element, which is returned) — unless the rest
        looks like more of a list. The validator still calls it unreadable."""
        if self.on_problem is None:
            self._handle_events(self._parser.read_events())
            if self._ended is not None and self._nothing_more_after_root(exc):
                msg = exc.msg.split(", line ")[0].strip() if exc.msg else "not XML"
                self._decoder.warn(
                    "after-root",
                    f"text after the root element (not well-formed XML: {msg}): ignored",
                    exc.lineno or None,
                )
                return self._ended
        raise self._feed_error(exc) from None

    def _nothing_more_after_root(self, exc: etree.XMLSyntaxError) -> bool:
        """True when the text after the root element (read to its end, within the size cap) is
        surely not more of the list; False when where it starts cannot be told (the root's end
        tag not among the last bytes read). When it looks like more of a list — a second
        document or stray entries after `</urlset>`, two lists written into one answer — it
        would be resources the copy lacks while the sync said ok: ReadError."""
        data = self._fed[0] + self._fed[1]
        end = _ROOT_END.search(data)
        if end is None:
            return False
        tail = [data[end.end() :]]
        if self._chunk_iter is not None:
            tail.extend(self._chunk_iter)
        found = _ENTRY_LIKE.search(b"".join(tail))
        if found is None:
            return True
        raise ReadError(
            "text after the root element (not well-formed XML) holds more of a sitemap "
            f"({found.group().decode('ascii', 'replace').strip()}...): the list cannot be "
            "read whole",
            source=self.name,
            line=exc.lineno or None,
        )

    def _check_prolog(self, chunk: bytes) -> bytes:
        """Refuse a DOCTYPE before the parser sees it: libxml2 would otherwise meet an entity
        bomb (and say so in its own words) before we meet the root element. The prolog is read
        until the root element starts (at most 1 MiB of it)."""
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
            if complete or len(head) > (1 << 20) or self._chunk_iter is None:
                break
            try:
                head += next(self._chunk_iter)
            except StopIteration:
                self._chunk_iter = None
                break
        self._prolog_checked = True
        return head if self.on_problem is not None else self._declaration_first(head)

    def _declaration_first(self, head: bytes) -> bytes:
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
        self._decoder.warn(
            "declaration",
            "whitespace before the XML declaration (not well-formed XML): read without it",
            1,
        )
        gap = body[: len(body) - len(stripped)]
        return bom + stripped[: end + 2] + gap + stripped[end + 2 :]

    def _check_root(self, root: Any) -> None:
        if self._root_checked:
            return
        self._root_checked = True
        self._root = root
        docinfo = root.getroottree().docinfo
        if docinfo.doctype or docinfo.internalDTD is not None or docinfo.externalDTD is not None:
            raise ReadError(
                "DOCTYPE declarations are not allowed in ResourceSync documents "
                "(refused: entities and DTDs are never loaded)",
                source=self.name,
                line=1,
            )
        if root.tag not in (URLSET, SITEMAPINDEX):
            raise ReadError(
                f"not a sitemap document: the root element is {local_name(root.tag)}, "
                "expected urlset or sitemapindex in the sitemap namespace",
                source=self.name,
                line=root.sourceline,
            )

    def _handle_events(self, events: Iterable[tuple[str, Any]]) -> None:
        root = self._root
        entry_tag = self._entry_tag
        pending = self._pending
        last = None
        count = 0
        for _, el in events:
            parent = el.getparent()
            if parent is None:
                self._ended = el  # the root element ended: the document is complete
                continue
            if parent is not root:
                if root is None:
                    # The first event: the root is the tree's, not this element's parent (a
                    # url nested in an extension element of the first entry ends first).
                    self._check_root(el.getroottree().getroot())
                    root = self._root
                    entry_tag = self._entry_tag = SITEMAP if root.tag == SITEMAPINDEX else URL
                if parent is not root:
                    # A url (or an element named as a root) nested inside an extension
                    # element: part of that element.
                    continue
            if el.tag != entry_tag:
                if el.tag in (URLSET, SITEMAPINDEX):
                    continue  # an element named as a root, inside the root: not an entry
                self._decoder.problem(
                    f"<{local_name(el.tag)}> in a <{local_name(root.tag)}>", el.sourceline, None
                )
                continue
            if self._document is None:
                self._document = self._decoder.header(parent, el)
                self._header_count = parent.index(el)
                self._decoder.in_entry = True
            pending.append((el.sourceline, el))
            last = el
            count += 1
        if last is not None:
            # Released when the next chunk is fed: the entries are decoded where they stand
            # in the tree (an element taken out of it while held is moved to a document of
            # its own, node by node: 15 % of a validation's time).
            self._unreleased = (root, last, count, entry_tag)

    def _release(self, root: Any, last: Any, count: int, entry_tag: str | None) -> None:
        """Drop everything up to the last processed entry from the tree in one slice: memory
        stays flat. Elements among the entries that are not entries (a header element after
        the first entry, foreign elements) are looked at first."""
        pos = root.index(last)
        skip = self._header_count
        if pos != skip + count - 1:
            for child in root[skip:pos]:
                if child.tag != entry_tag:
                    self._late(child)
        del root[: pos + 1]
        self._header_count = 0

    def _finish(self, root: Any) -> None:
        if root is None:
            raise ReadError("empty document (no XML)", source=self.name)
        if self._unreleased is not None:
            # The last chunk's: what stands between its entries is looked at now.
            self._release(*self._unreleased)
            self._unreleased = None
        self._check_root(root)
        if self._document is None:
            self._document = self._decoder.header(root, None)
        else:
            last = root[-1] if len(root) else None
            trailing = []
            while last is not None and last.tag not in (URL, SITEMAP):
                trailing.append(last)
                last = last.getprevious()
            for el in reversed(trailing):
                self._late(el)

    def _late(self, el: Any) -> None:
        """A document-level element found after entries: applied, and its line remembered."""
        assert self._document is not None
        if el.tag in (RS_MD, RS_LN):
            self.late_header_lines.append(el.sourceline)
        self._decoder.in_entry = False
        self._decoder.apply_header_element(self._document, el)
        self._decoder.in_entry = True


def open_document(
    source: Source,
    *,
    name: str | None = None,
    client: Any = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    on_problem: ProblemHandler | None = None,
) -> DocumentReader:
    """Open a document for streaming: `with open_document(x) as doc: doc.document; for r in doc`.

    Raises ReadError (cannot be read, not XML, hostile, too big) and, without `on_problem`,
    FormatError for values the spec does not allow.
    """
    return DocumentReader(
        source, name=name, client=client, max_bytes=max_bytes, on_problem=on_problem
    )


def read_document(source: Source, **kwargs: Any) -> tuple[Document, list[Resource]]:
    """Read a whole (small) document into memory. For large lists iterate `open_document`."""
    with open_document(source, **kwargs) as reader:
        doc = reader.document
        return doc, list(reader)
