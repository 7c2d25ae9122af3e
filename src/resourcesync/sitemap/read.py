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

The bytes come through `stream.DocumentInput` (opening, gzip, the cap, the prolog); the
elements become values in `decode.EntryDecoder`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any

from lxml import etree

from ..errors import ReadError
from ..model import Document, Resource
from .decode import (
    RS_LN,
    RS_MD,
    SITEMAP,
    SITEMAPINDEX,
    URL,
    URLSET,
    EntryDecoder,
    ProblemHandler,
    local_name,
)
from .stream import HTML_PAGE, DocumentInput, Source, is_url

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
#: What in text after the root element would be entries of a sitemap.
_ENTRY_LIKE = re.compile(rb"<(?:[\w.-]+:)?(?:urlset|sitemapindex|url|sitemap|loc)[\s/>]")


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
        #: The bytes (`stream.DocumentInput`).
        self._input = DocumentInput(source, name, client, max_bytes)
        self.name = self._input.name
        self.url = self._input.url
        #: What relative references resolve against: the URL the document was retrieved
        #: from, after redirects (RFC 3986 §5.1.3).
        self.base_url = self._input.base_url
        self.path = self._input.path
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
        self._input.close()

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

    def warn(self, kind: str, message: str, line: int | None) -> None:
        """A rule the document bends that its reader reads through (`warnings`): said once
        per document and kind."""
        self._decoder.warn(kind, message, line)

    @property
    def slack(self) -> float:
        """How far (seconds) the times read so far may be from the times meant: 0 when every
        one gave its zone and its time of day; `ZONE_SPAN` (14 h) once one came without its
        zone (read as UTC: it may be any zone's); a day and more once a time that places
        changes named a day, a month or a year (`w3cdt.coarseness`)."""
        return self._decoder.slack

    @property
    def size(self) -> int:
        """The bytes read so far (after decompression): the whole document's once read."""
        return self._input.chunks.total

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
        if "Document is empty" in msg or self.size == 0:
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
        chunk = self._input.next(self._decoder.warn if self.on_problem is None else None)
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
        tail = self._input.after_root()
        if tail is None:
            return False
        found = _ENTRY_LIKE.search(tail)
        if found is None:
            return True
        raise ReadError(
            "text after the root element (not well-formed XML) holds more of a sitemap "
            f"({found.group().decode('ascii', 'replace').strip()}...): the list cannot be "
            "read whole",
            source=self.name,
            line=exc.lineno or None,
        )

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
