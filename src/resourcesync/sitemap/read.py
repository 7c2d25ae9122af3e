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
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Protocol
from urllib.parse import urljoin, urlsplit

from lxml import etree

from ..errors import FormatError, ReadError
from ..hashing import ALGORITHMS, normalise_digest, parse_hashes
from ..inflate import Inflate, InflateError
from ..model import RS_NS, SITEMAP_NS, Document, Link, Resource
from ..sniff import looks_like_html
from ..units import ascii_int
from ..w3cdt import W3CDatetimeError, format_w3c, parse_bent, parse_w3c

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
CHUNK = 1 << 18
#: The common case, checked first: a reference that is surely absolute.
_ABSOLUTE = ("http://", "https://")
#: A URI scheme (RFC 3986 §3.1): a reference that has one is not relative.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
#: Attributes read from one element. An `<rs:md>` has a dozen at most; lxml hands attribute
#: values over in time quadratic in their number, so an element with 200,000 would stall the
#: reader for minutes: such a document is refused, in linear time (issue 17.14).
MAX_ATTRIBUTES = 256

URLSET = f"{{{SITEMAP_NS}}}urlset"
SITEMAPINDEX = f"{{{SITEMAP_NS}}}sitemapindex"
URL = f"{{{SITEMAP_NS}}}url"
SITEMAP = f"{{{SITEMAP_NS}}}sitemap"
LOC = f"{{{SITEMAP_NS}}}loc"
LASTMOD = f"{{{SITEMAP_NS}}}lastmod"
CHANGEFREQ = f"{{{SITEMAP_NS}}}changefreq"
PRIORITY = f"{{{SITEMAP_NS}}}priority"
RS_MD = f"{{{RS_NS}}}md"
RS_LN = f"{{{RS_NS}}}ln"

Source = str | os.PathLike[str] | bytes | bytearray | IO[bytes]

#: What a document that is an HTML page is refused as (a site's page, or its sign-in or error
#: page answered 200: discovery takes it for no document there).
HTML_PAGE = "an HTML page, not a ResourceSync document"
# What may stand before the root element: the XML declaration, PIs, comments, white space.
_PROLOG = re.compile(rb"(?:\xef\xbb\xbf)?(?:\s+|<\?.*?\?>|<!--.*?-->)*", re.DOTALL)
#: The root element's end tag, and what in text after it would be entries of a sitemap.
_ROOT_END = re.compile(rb"</(?:[\w.-]+:)?(?:urlset|sitemapindex)\s*>")
_ENTRY_LIKE = re.compile(rb"<(?:[\w.-]+:)?(?:urlset|sitemapindex|url|sitemap|loc)[\s/>]")


class ProblemHandler(Protocol):
    """Receives a value problem (bad datetime, bad number, missing <loc>) instead of an error."""

    def __call__(self, message: str, line: int | None, entry: str | None) -> None: ...


def is_url(text: str) -> bool:
    """Whether `text` names an http(s) URL (rather than a file), from its scheme alone: a
    malformed one (`http://[::1/`) is a URL that cannot be read, not a file's name."""
    scheme = _SCHEME.match(text)
    return scheme is not None and scheme.group().lower() in ("http:", "https:")


def _c14n(el: Any) -> str:
    """A foreign element as exclusive C14N text: stable, self-contained namespace declarations."""
    data: bytes = etree.tostring(el, method="c14n", exclusive=True, with_comments=False)
    # C14N keeps the tail only with with_tail, which tostring(c14n) does not expose: strip it.
    return data.decode("utf-8")


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
        self.on_problem = on_problem
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
        self._pending: deque[tuple[int, Resource]] = deque()
        self._document: Document | None = None
        self._root: Any = None
        self._root_checked = False
        #: The root element, once it has ended.
        self._ended: Any = None
        self._fed = (b"", b"")
        self._entry_tag: str | None = None
        self._header_count = 0
        self._done = False
        self.entry_count = 0
        #: Lines of document-level `rs:md`/`rs:ln` that came after the first entry.
        self.late_header_lines: list[int] = []
        #: Line of each document-level element, for the validator's messages.
        self.header_lines: dict[str, int] = {}
        #: Rules this document bends that the reader read through (zone-less datetimes,
        #: base64 digests): one line per kind, for the caller to show. With `on_problem` set
        #: they are reported to it as problems instead.
        self.warnings: list[str] = []
        self._warned: set[str] = set()
        #: Reading an entry (not the document's own header).
        self._in_entry = False

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
        self.document  # noqa: B018 - the header comes first
        pending = self._pending
        while True:
            while pending:
                self.entry_count += 1
                yield pending.popleft()
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
                self._warn(
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
        self._warn(
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
                f"not a sitemap document: the root element is {_name(root.tag)}, "
                "expected urlset or sitemapindex in the sitemap namespace",
                source=self.name,
                line=root.sourceline,
            )

    def _handle_events(self, events: Iterable[tuple[str, Any]]) -> None:
        root = self._root
        entry_tag = self._entry_tag
        pending = self._pending
        entry = self._entry
        last = None
        count = 0
        for _, el in events:
            parent = el.getparent()
            if parent is None:
                self._ended = el  # the root element ended: the document is complete
                continue
            if parent is not root:
                if root is not None or el.tag in (URLSET, SITEMAPINDEX):
                    # A url (or an element named as a root) nested inside an extension
                    # element: part of that element.
                    continue
                self._check_root(parent)
                root = self._root
                entry_tag = self._entry_tag = SITEMAP if root.tag == SITEMAPINDEX else URL
            if el.tag != entry_tag:
                if el.tag in (URLSET, SITEMAPINDEX):
                    continue  # an element named as a root, inside the root: not an entry
                self._problem(f"<{_name(el.tag)}> in a <{_name(root.tag)}>", el.sourceline, None)
                continue
            if self._document is None:
                self._document = self._header(parent, el)
                self._header_count = parent.index(el)
                self._in_entry = True
            line = el.sourceline
            pending.append((line, entry(el, line)))
            last = el
            count += 1
        if last is not None:
            self._release(root, last, count, entry_tag)

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
        self._check_root(root)
        if self._document is None:
            self._document = self._header(root, None)
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
        self._in_entry = False
        self._apply_header_element(self._document, el)
        self._in_entry = True

    # -- decoding --------------------------------------------------------------------------

    def _attrib(self, el: Any) -> Any:
        """`el`'s attributes, once their number is known to be sane."""
        attrib = el.attrib
        n = len(attrib)  # counted without reading the values: linear
        if n > MAX_ATTRIBUTES:
            raise ReadError(
                f"an element with {n} attributes (at most {MAX_ATTRIBUTES} are read): "
                "not a ResourceSync document",
                source=self.name,
                line=el.sourceline,
            )
        return attrib

    def _subtree(self, el: Any) -> Any:
        """`el`, once every element in it is known to have a sane number of attributes."""
        for e in el.iter():
            self._attrib(e)
        return el

    def _problem(self, message: str, line: int | None, entry: str | None) -> None:
        if self.on_problem is None:
            raise FormatError(message, source=self.name, line=line, entry=entry)
        self.on_problem(message, line, entry)

    def _unread(self, message: str, line: int | None, entry: str | None) -> None:
        """A value of an entry that cannot be read (empty, as templates write what they lack;
        `12.0` for a length; a word for a priority). The validator's error. A Destination reads
        it as not given, said once a document: what it would have checked is checked by what
        else the entry gives, never taken for verified (one such value stopped the whole sync,
        on every run). In the document's own `rs:md` (its times, which the copy's cursor
        follows) it stays an error."""
        if self.on_problem is not None or not self._in_entry:
            self._problem(message, line, entry)
        else:
            self._warn(
                "unread",
                f"{message}: read as not given, and so may other values in this document",
                line,
            )

    def _header(self, root: Any, first_entry: Any) -> Document:
        doc = Document(index=root.tag == SITEMAPINDEX)
        for prefix, uri in root.nsmap.items():
            if prefix and uri not in (SITEMAP_NS, RS_NS):
                doc.namespaces[prefix] = uri
        if root.attrib:
            doc.attrs.update(self._attrib(root))
        for el in root:
            if el is first_entry:
                break
            self._apply_header_element(doc, el)
        return doc

    def _apply_header_element(self, doc: Document, el: Any) -> None:
        tag = el.tag
        if not isinstance(tag, str):
            return
        line = el.sourceline
        if tag == RS_MD:
            if "md" in self.header_lines:
                self._problem("more than one document-level <rs:md>", line, None)
            self.header_lines.setdefault("md", line)
            self._md(self._attrib(el), doc, line, None)
        elif tag == RS_LN:
            self.header_lines.setdefault(f"ln:{el.get('rel')}", line)
            link = self._link(self._attrib(el), line, None)
            if link is not None:
                doc.links.append(link)
        elif tag in (URL, SITEMAP):
            return
        else:
            doc.extensions.append(_c14n(self._subtree(el)))

    def _datetime(self, text: str | None, what: str, line: int, loc: str | None) -> Any:
        if text is None:
            return None
        try:
            return parse_w3c(text.strip())
        except W3CDatetimeError as exc:
            bent = parse_bent(text)
            if bent is None:
                self._unread(f"{what}: {exc}", line, loc)
                return None
            # A form near W3C Datetime that leaves no doubt (CORE and RSEngine write times
            # without a zone, Python's str() a space for the T, Java and PHP `+0900`): read as
            # it means (tolerant in what we sync); an error for the validator, one warning per
            # document and kind otherwise.
            value, how = bent
            shown = text.strip()
            if how.startswith("no zone"):
                kind = "zoneless"
                message = (
                    f"{what}: {shown!r} has no time zone (W3C Datetime requires one; "
                    "Destinations read it as UTC)"
                )
            else:
                kind = "bent-datetime"
                message = (
                    f"{what}: {shown!r} is not W3C Datetime but reads unambiguously ({how}): "
                    f"Destinations read it as {format_w3c(value)}"
                )
            if self.on_problem is not None:
                self._problem(message, line, loc)
            else:
                self._warn(kind, f"{message}, and so may others in this document", line)
            return value

    def _warn(self, kind: str, message: str, line: int | None) -> None:
        """A rule the document bends that we read through: said once per document and kind."""
        if kind not in self._warned:
            self._warned.add(kind)
            self.warnings.append(f"line {line}: {message}" if line else message)

    def _hashes(self, value: str, what: str, line: int, loc: str | None) -> dict[str, str]:
        try:
            hashes = parse_hashes(value)
        except ValueError as exc:
            self._unread(f"{what}: {exc}", line, loc)
            return {}
        if self.on_problem is None:
            # Digests in base64 (the 2014 Cornell simulator) compared as hex, and algorithm
            # tokens in upper case read in lower case, said once. A digest of an algorithm we
            # cannot compute is kept as read (`cat`, a republisher) and said once: a
            # Destination checks a resource it alone describes as one the list gives no digest
            # for (`hashing.checkable`). The validator sees them as written.
            read: dict[str, str] = {}
            for token, digest in hashes.items():
                algo = token if token in ALGORITHMS else token.lower()
                if algo not in ALGORITHMS:
                    self._warn(
                        "hash-unknown",
                        f"{what}: {token} digests (and any other algorithm's but "
                        f"{', '.join(ALGORITHMS)}) are not checked: the resources listed with "
                        "no other are checked by length, type and time",
                        line,
                    )
                    read.setdefault(token, digest)
                    continue
                if algo != token:
                    self._warn(
                        "hash-case", f"{what}: {token} read as {algo}, and so may others", line
                    )
                hexed = normalise_digest(algo, digest)
                if hexed is not None and hexed != digest:
                    if hexed.lower() != digest.lower():
                        self._warn(
                            "base64",
                            f"{what}: {algo} digests in base64, not hex; read as hex",
                            line,
                        )
                    digest = hexed
                read.setdefault(algo, digest)
            return read
        return hashes

    def _int(self, text: str, what: str, line: int, loc: str | None) -> int | None:
        value = ascii_int(text.strip())
        if value is None:
            shown = text if len(text) <= 40 else f"{text[:40]}…"
            self._unread(f"{what}: {shown!r} is not a non-negative integer", line, loc)
        return value

    def _md(self, attrib: Any, target: Any, line: int, loc: str | None) -> None:
        for key, value in attrib.items():
            if key == "capability":
                target.capability = value
            elif key == "at":
                target.at = self._datetime(value, "rs:md at", line, loc)
            elif key == "completed":
                target.completed = self._datetime(value, "rs:md completed", line, loc)
            elif key == "from":
                target.from_ = self._datetime(value, "rs:md from", line, loc)
            elif key == "until":
                target.until = self._datetime(value, "rs:md until", line, loc)
            elif isinstance(target, Resource):
                self._md_entry(target, key, value, line, loc)
            else:
                target.md_extra[key] = value

    def _md_entry(self, res: Resource, key: str, value: str, line: int, loc: str | None) -> None:
        if key == "hash":
            res.hashes = self._hashes(value, "rs:md hash", line, loc)
        elif key == "length":
            res.length = self._int(value, "rs:md length", line, loc)
        elif key == "type":
            res.type = value
        elif key == "change":
            res.change = value
        elif key == "datetime":
            res.datetime = self._datetime(value, "rs:md datetime", line, loc)
        elif key == "encoding":
            res.encoding = value
        elif key == "path":
            res.path = value
        else:
            res.md_extra[key] = value

    def _link(self, attrib: Any, line: int, loc: str | None) -> Link | None:
        rel = attrib.get("rel")
        href = attrib.get("href")
        if not rel or href is None:
            self._unread("<rs:ln> needs both rel and href", line, loc)
            return None
        href = href.strip()
        if not href.startswith(_ABSOLUTE) and self.base_url is not None:
            href = self._resolved(href, "rs:ln href", line)
        link = Link(rel=rel, href=href)
        for key, value in attrib.items():
            if key in ("rel", "href"):
                continue
            if key == "type":
                link.type = value
            elif key == "length":
                link.length = self._int(value, "rs:ln length", line, loc)
            elif key == "hash":
                link.hashes = self._hashes(value, "rs:ln hash", line, loc)
            elif key == "modified":
                link.modified = self._datetime(value, "rs:ln modified", line, loc)
            elif key == "path":
                link.path = value
            elif key == "pri":
                link.pri = self._int(value, "rs:ln pri", line, loc)
            elif key == "encoding":
                link.encoding = value
            else:
                link.extra[key] = value
        return link

    def _repeated_md(self, line: int, loc: str | None) -> None:
        """A second `<rs:md>` in one entry: its attributes are merged over the first (a
        `created` may become `deleted`). A problem for the validator, a warning otherwise."""
        message = "more than one <rs:md> in an entry (the later one's values win)"
        if self.on_problem is not None:
            self._problem(message, line, loc)
        else:
            self._warn("md-repeated", message, line)

    def _entry(self, el: Any, line: int) -> Resource:
        # The hot path: one call per entry, the common fields inline.
        res = Resource(loc="")
        seen_loc = False
        seen_md = False
        if el.attrib:
            res.attrs.update(self._attrib(el))
        # el[:] hands over the children as one list: several times cheaper than iterating.
        for child in el[:]:
            tag = child.tag
            if tag == LOC:
                text = child.text
                res.loc = text.strip() if text else ""
                seen_loc = True
            elif tag == RS_MD:
                if seen_md:
                    self._repeated_md(child.sourceline, res.loc or None)
                seen_md = True
                for key, value in self._attrib(child).items():
                    if key == "hash":
                        res.hashes = self._hashes(
                            value, "rs:md hash", child.sourceline, res.loc or None
                        )
                    elif key == "length":
                        length = ascii_int(value)
                        if length is None:
                            length = self._int(value, "rs:md length", child.sourceline, res.loc)
                        res.length = length
                    elif key == "type":
                        res.type = value
                    elif key == "change":
                        res.change = value
                    elif key == "datetime":
                        try:
                            res.datetime = parse_w3c(value)
                        except W3CDatetimeError:
                            res.datetime = self._datetime(
                                value, "rs:md datetime", child.sourceline, res.loc
                            )
                    else:
                        self._md({key: value}, res, child.sourceline, res.loc or None)
            elif tag == LASTMOD:
                text = child.text or ""
                try:
                    res.lastmod = parse_w3c(text)
                except W3CDatetimeError:
                    res.lastmod = self._datetime(text, "lastmod", child.sourceline, res.loc)
            elif tag == RS_LN:
                link = self._link(self._attrib(child), child.sourceline, res.loc or None)
                if link is not None:
                    res.links.append(link)
            elif tag == CHANGEFREQ:
                res.changefreq = (child.text or "").strip()
            elif tag == PRIORITY:
                try:
                    res.priority = float((child.text or "").strip())
                except ValueError:
                    self._unread(f"priority: {child.text!r} is not a number", line, res.loc)
            elif isinstance(tag, str):
                res.extensions.append(_c14n(self._subtree(child)))
        if not seen_loc or not res.loc:
            self._problem(f"<{_name(el.tag)}> without <loc>", line, None)
        elif not res.loc.startswith(_ABSOLUTE) and self.base_url is not None:
            res.loc = self._resolved(res.loc, "<loc>", line)
        return res

    def _resolved(self, ref: str, what: str, line: int | None) -> str:
        """A relative reference resolved against the document's URL (RFC 3986 §5), as a
        Destination needs it; the validator sees it as written and calls it an error."""
        if self.on_problem is not None or self.base_url is None or _SCHEME.match(ref):
            return ref
        self._warn(f"relative-{what}", f"relative {what} values read against {self.base_url}", line)
        return urljoin(self.base_url, ref)


def _name(tag: str) -> str:
    return tag.rpartition("}")[2] if isinstance(tag, str) else str(tag)


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
