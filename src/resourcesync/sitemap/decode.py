"""Elements to values: what the one XML reader (`read.py`) makes of each element it hands over —
the document's header, each entry's `Resource`, its `rs:md` and `rs:ln` — and the problems and
warnings on the way. The reader owns the stream (the bytes, the parser, the tree it prunes); an
`EntryDecoder` is the per-document state of the decoding (the warnings said once, the header's
lines) and its hot path, `entry`, runs once for every entry. The values in the elements — and
what a Destination reads through where the validator is told — are read by its base,
`values.ValueReader`.
"""

from __future__ import annotations

from typing import Any

from lxml import etree

from ..errors import ReadError
from ..hashing import PLAIN_DIGEST
from ..model import CAPABILITIES, CHANGES, RS_NS, SITEMAP_NS, Document, Link, Resource
from ..units import MAX_DIGITS, ascii_int
from ..w3cdt import W3CDatetimeError, parse_w3c
from .values import SCHEME, ProblemHandler, ValueReader

__all__ = ["MAX_ATTRIBUTES", "SCHEME", "EntryDecoder", "ProblemHandler", "local_name"]

#: The common case, checked first: a reference that is surely absolute.
_ABSOLUTE = ("http://", "https://")
#: The times of an index's or an archive's entries (`rs:md` attribute → `Resource` field).
_BOUNDS = {"from": "from_", "until": "until", "at": "at", "completed": "completed"}
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


def _c14n(el: Any) -> str:
    """A foreign element as exclusive C14N text: stable, self-contained namespace declarations."""
    data: bytes = etree.tostring(el, method="c14n", exclusive=True, with_comments=False)
    # C14N keeps the tail only with with_tail, which tostring(c14n) does not expose: strip it.
    return data.decode("utf-8")


def local_name(tag: str) -> str:
    return tag.rpartition("}")[2] if isinstance(tag, str) else str(tag)


class EntryDecoder(ValueReader):
    """The decoding of one document's elements (`DocumentReader` makes one per document); the
    values in them are read by its base, `values.ValueReader`."""

    def __init__(self, name: str, on_problem: ProblemHandler | None, base_url: str | None) -> None:
        super().__init__(name, on_problem, base_url)
        #: Line of each document-level element, for the validator's messages.
        self.header_lines: dict[str, int] = {}

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

    def _md(self, attrib: Any, target: Any, line: int, loc: str | None) -> None:
        for key, value in attrib.items():
            if key == "capability":
                target.capability = (
                    value if value in CAPABILITIES else self._capability(value, line)
                )
            elif key == "at":
                target.at = self._when(value, "rs:md at", line, loc)
            elif key == "completed":
                target.completed = self._when(value, "rs:md completed", line, loc)
            elif key == "from":
                target.from_ = self._when(value, "rs:md from", line, loc)
            elif key == "until":
                target.until = self._when(value, "rs:md until", line, loc)
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
            res.datetime = self._when(value, "rs:md datetime", line, loc)
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
                        if len(value) <= 12:  # a day, a month, a year (W3C Datetime)
                            self._coarse(value, "rs:md datetime", child.sourceline)
                    elif key in _BOUNDS:
                        # An index's or an archive's entry: its times, as `_md` reads them.
                        try:
                            when = parse_w3c(value)
                        except W3CDatetimeError:
                            when = self._when(value, f"rs:md {key}", child.sourceline, res.loc)
                        else:
                            if len(value) <= 12:
                                self._coarse(value, f"rs:md {key}", child.sourceline)
                        setattr(res, _BOUNDS[key], when)
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
