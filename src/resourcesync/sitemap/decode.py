"""Elements to values: what the one XML reader (`read.py`) makes of each element it hands over —
the document's header, each entry's `Resource`, its `rs:md` and `rs:ln` — and the problems and
warnings on the way. The reader owns the stream (the bytes, the parser, the tree it prunes); an
`EntryDecoder` is the per-document state of the decoding (the warnings said once, the header's
lines) and its hot path, `entry`, runs once for every entry.

Tolerant in what a Destination reads, strict in what the validator is told: with a problem
handler (`on_problem`) every bent rule is reported to it; without one, a value that cannot be
read raises `FormatError` when it is the document's own and is read as not given (one warning a
document) when it is an entry's.
"""

from __future__ import annotations

import re
from typing import Any, Protocol
from urllib.parse import urljoin

from lxml import etree

from ..errors import FormatError, ReadError
from ..hashing import ALGORITHMS, PLAIN_DIGEST, normalise_digest, parse_hashes
from ..model import CAPABILITIES, CHANGES, RS_NS, SITEMAP_NS, Document, Link, Resource
from ..units import MAX_DIGITS, ascii_int
from ..w3cdt import W3CDatetimeError, format_w3c, parse_bent, parse_w3c

__all__ = ["MAX_ATTRIBUTES", "SCHEME", "EntryDecoder", "ProblemHandler", "local_name"]

#: The common case, checked first: a reference that is surely absolute.
_ABSOLUTE = ("http://", "https://")
#: Link relation types as ResourceSync documents write them (the common case: nothing to do).
_RELS = frozenset(
    {
        "alternate",
        "canonical",
        "collection",
        "contents",
        "describedby",
        "describes",
        "duplicate",
        "hub",
        "index",
        "memento",
        "original",
        "patch",
        "self",
        "timegate",
        "timemap",
        "up",
        "via",
    }
)
#: A URI scheme (RFC 3986 §3.1): a reference that has one is not relative.
SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
#: Attributes read from one element. An `<rs:md>` has a dozen at most; lxml hands attribute
#: values over in time quadratic in their number, so an element with 200,000 would stall the
#: reader for minutes: such a document is refused, in linear time (issue 17.14).
MAX_ATTRIBUTES = 256
_plain_digest = PLAIN_DIGEST.fullmatch

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


class ProblemHandler(Protocol):
    """Receives a value problem (bad datetime, bad number, missing <loc>) instead of an error."""

    def __call__(self, message: str, line: int | None, entry: str | None) -> None: ...


def _c14n(el: Any) -> str:
    """A foreign element as exclusive C14N text: stable, self-contained namespace declarations."""
    data: bytes = etree.tostring(el, method="c14n", exclusive=True, with_comments=False)
    # C14N keeps the tail only with with_tail, which tostring(c14n) does not expose: strip it.
    return data.decode("utf-8")


def local_name(tag: str) -> str:
    return tag.rpartition("}")[2] if isinstance(tag, str) else str(tag)


class EntryDecoder:
    """The decoding of one document's elements (`DocumentReader` makes one per document)."""

    def __init__(self, name: str, on_problem: ProblemHandler | None, base_url: str | None) -> None:
        self.name = name
        self.on_problem = on_problem
        #: What relative references resolve against (the URL the document came from).
        self.base_url = base_url
        #: Line of each document-level element, for the validator's messages.
        self.header_lines: dict[str, int] = {}
        #: Rules this document bends that were read through: one line per kind.
        self.warnings: list[str] = []
        self._warned: set[str] = set()
        #: Reading an entry (not the document's own header).
        self.in_entry = False

    def attrib(self, el: Any) -> Any:
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
            self.attrib(e)
        return el

    def problem(self, message: str, line: int | None, entry: str | None) -> None:
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
        if self.on_problem is not None or not self.in_entry:
            self.problem(message, line, entry)
        else:
            self.warn(
                "unread",
                f"{message}: read as not given, and so may other values in this document",
                line,
            )

    def header(self, root: Any, first_entry: Any) -> Document:
        doc = Document(index=root.tag == SITEMAPINDEX)
        for prefix, uri in root.nsmap.items():
            if prefix and uri not in (SITEMAP_NS, RS_NS):
                doc.namespaces[prefix] = uri
        if root.attrib:
            doc.attrs.update(self.attrib(root))
        for el in root:
            if el is first_entry:
                break
            self.apply_header_element(doc, el)
        return doc

    def apply_header_element(self, doc: Document, el: Any) -> None:
        tag = el.tag
        if not isinstance(tag, str):
            return
        line = el.sourceline
        if tag == RS_MD:
            if "md" in self.header_lines:
                self.problem("more than one document-level <rs:md>", line, None)
            self.header_lines.setdefault("md", line)
            self._md(self.attrib(el), doc, line, None)
        elif tag == RS_LN:
            self.header_lines.setdefault(f"ln:{el.get('rel')}", line)
            link = self._link(self.attrib(el), line, None)
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
                self.problem(message, line, loc)
            else:
                self.warn(kind, f"{message}, and so may others in this document", line)
            return value

    def _rel(self, rel: str, line: int) -> str:
        """A relation type in another case or with spaces (`Duplicate`, `Contents`): RFC 8288
        §2.1.1 compares registered types without regard to case, so it is read in lower
        case, said once a document (the validator, which sees it as written, calls it an
        error). An extension type is a URI: kept as written."""
        read = rel.strip()
        if ":" not in read:
            read = read.lower()
        if read != rel:
            self.warn("rel-form", f"rs:ln rel {rel!r} read as {read!r}, and so may others", line)
        return read

    def _capability(self, value: str, line: int) -> str:
        """A `capability` value in another case or with spaces (`ResourceList`) is read as the
        value it means, said once a document: read as written, a Source's lists were not
        found, or refused as another kind of document. Anything else stays as written. The
        validator sees it as written."""
        read = value.strip().lower()
        if self.on_problem is None and read != value and read in CAPABILITIES:
            self.warn(
                "capability-form",
                f"rs:md capability {value!r} read as {read!r}, and so may others",
                line,
            )
            return read
        return value

    def _change(self, value: str, line: int) -> str:
        """A `change` value. `Deleted` or ` updated` (the case or spaces of a value, as
        templates write them) is read as the value it means, said once a document: read as
        written, a deletion was fetched (404) on every run. Another word stays as written: the
        Destination applies none such and says so on every run. The validator sees it as
        written."""
        read = value.strip().lower()
        if self.on_problem is None and read != value and read in CHANGES:
            self.warn(
                "change-form", f"rs:md change {value!r} read as {read!r}, and so may others", line
            )
            return read
        return value

    def warn(self, kind: str, message: str, line: int | None) -> None:
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
                    self.warn(
                        "hash-unknown",
                        f"{what}: {token} digests (and any other algorithm's but "
                        f"{', '.join(ALGORITHMS)}) are not checked: the resources listed with "
                        "no other are checked by length, type and time",
                        line,
                    )
                    read.setdefault(token, digest)
                    continue
                if algo != token:
                    self.warn(
                        "hash-case", f"{what}: {token} read as {algo}, and so may others", line
                    )
                hexed = normalise_digest(algo, digest)
                if hexed is not None and hexed != digest:
                    if hexed.lower() != digest.lower():
                        self.warn(
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
                target.capability = (
                    value if value in CAPABILITIES else self._capability(value, line)
                )
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
            res.change = self._change(value, line)
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
        if rel not in _RELS and self.on_problem is None:
            rel = self._rel(rel, line)
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

    def _repeated(self, what: str, line: int, loc: str | None) -> None:
        """A second `<rs:md>` in one entry (its attributes are merged over the first: a
        `created` may become `deleted`), or a second `<loc>`, `<lastmod>`, `<changefreq>` or
        `<priority>` (the Sitemap schema allows one; the later is read). A problem for the
        validator, a warning otherwise."""
        if what == "rs:md":
            message = "more than one <rs:md> in an entry (the later one's values win)"
        else:
            message = f"more than one <{what}> in an entry (the later one is read)"
        if self.on_problem is not None:
            self.problem(message, line, loc)
        else:
            self.warn(f"{what}-repeated", message, line)

    def entry(self, el: Any, line: int) -> Resource:
        # The hot path: one call per entry, the common fields inline.
        res = Resource(loc="")
        seen_loc = seen_md = seen_lastmod = False
        if el.attrib:
            res.attrs.update(self.attrib(el))
        # el[:] hands over the children as one list: several times cheaper than iterating.
        for child in el[:]:
            tag = child.tag
            if tag == LOC:
                if seen_loc:
                    self._repeated("loc", child.sourceline, res.loc or None)
                text = child.text
                res.loc = text.strip() if text else ""
                seen_loc = True
            elif tag == RS_MD:
                if seen_md:
                    self._repeated("rs:md", child.sourceline, res.loc or None)
                seen_md = True
                for key, value in self.attrib(child).items():
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
                        res.change = (
                            value if value in CHANGES else self._change(value, child.sourceline)
                        )
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
                if seen_lastmod:
                    self._repeated("lastmod", child.sourceline, res.loc or None)
                seen_lastmod = True
                text = child.text or ""
                try:
                    res.lastmod = parse_w3c(text)
                except W3CDatetimeError:
                    res.lastmod = self._datetime(text, "lastmod", child.sourceline, res.loc)
            elif tag == RS_LN:
                link = self._link(self.attrib(child), child.sourceline, res.loc or None)
                if link is not None:
                    res.links.append(link)
            elif tag == CHANGEFREQ:
                if res.changefreq is not None:
                    self._repeated("changefreq", child.sourceline, res.loc or None)
                res.changefreq = (child.text or "").strip()
            elif tag == PRIORITY:
                if res.priority is not None:
                    self._repeated("priority", child.sourceline, res.loc or None)
                try:
                    res.priority = float((child.text or "").strip())
                except ValueError:
                    self._unread(f"priority: {child.text!r} is not a number", line, res.loc)
            elif isinstance(tag, str):
                res.extensions.append(_c14n(self._subtree(child)))
        if not seen_loc or not res.loc:
            self.problem(f"<{local_name(el.tag)}> without <loc>", line, None)
        elif not res.loc.startswith(_ABSOLUTE) and self.base_url is not None:
            res.loc = self._resolved(res.loc, "<loc>", line)
        return res

    def plain(self, el: Any) -> str | None:
        """The `<loc>` of a plain entry, else None. Plain: no attributes; one `<loc>`; at most
        one `<lastmod>`, in W3C Datetime; at most one `<rs:md>`, of a `hash` that is one
        digest as hex (`plain_digest`), a `length` in ASCII digits and a `type`; nothing else.
        `entry` decodes such an entry with nothing to report (a Resource List's common case),
        so a validator may check its `<loc>` without making its `Resource`
        (`EntryRules.plain`). Nothing is said and nothing kept."""
        if el.keys():
            return None
        loc = None
        lastmod = md = False
        for child in el[:]:
            tag = child.tag
            if tag == LOC and loc is None:
                text = child.text
                loc = text.strip() if text else ""
                if not loc:
                    return None
            elif tag == LASTMOD and not lastmod:
                lastmod = True
                try:
                    parse_w3c(child.text or "")
                except W3CDatetimeError:
                    return None
            elif tag == RS_MD and not md:
                md = True
                if len(child.attrib) > 3:  # counted without the values: linear (`attrib`)
                    return None
                for key, value in child.items():
                    if key == "hash":
                        if _plain_digest(value) is None:
                            return None
                    elif key == "length":
                        # As `ascii_int` reads it (inline: once an entry).
                        if not (value.isascii() and value.isdigit()) or len(value) > MAX_DIGITS:
                            return None
                    elif key != "type":
                        return None
            else:
                return None
        return loc

    def _resolved(self, ref: str, what: str, line: int | None) -> str:
        """A relative reference resolved against the document's URL (RFC 3986 §5), as a
        Destination needs it; the validator sees it as written and calls it an error."""
        if self.on_problem is not None or self.base_url is None or SCHEME.match(ref):
            return ref
        self.warn(f"relative-{what}", f"relative {what} values read against {self.base_url}", line)
        return urljoin(self.base_url, ref)
