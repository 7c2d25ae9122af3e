"""The streaming writer: one entry at a time, in constant memory, atomically into place.

Entries are serialized directly rather than through `lxml.etree.xmlfile`: `xmlfile.write()` of a
detached element re-declares the namespaces on every `<url>` (or invents `ns0:` prefixes), and
nested `xmlfile.element()` contexts cost several times more per entry. The serializer below is
small, escapes every value, refuses characters XML 1.0 cannot carry, and is checked by reading
its output back with the hardened reader in the tests (round trip for every document type).

Namespace prefixes follow the spec: the sitemap namespace is the default one, ResourceSync is
`rs:`. Version 1.1 is written by default; `spec_version="1.0"` writes the change time of an
entry in `<lastmod>` (1.0 has no `rs:md@datetime`).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import IO
from urllib.parse import urljoin

from ..atomic import AtomicFile, replace_unless_same
from ..errors import FormatError
from ..hashing import format_hashes
from ..model import CHANGE_CAPABILITIES, RS_NS, SITEMAP_NS, Document, Link, Resource
from ..w3cdt import format_w3c

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ENTRIES",
    "DocumentWriter",
    "Part",
    "SplitResult",
    "entry_xml",
    "write_document",
    "write_split",
]

DEFAULT_MAX_ENTRIES = 50_000
DEFAULT_MAX_BYTES = 50 * 1024 * 1024

# What XML 1.0 cannot carry (outside #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] |
# [#x10000-#x10FFFF]), written as the few ranges it is: a negated class over all of Unicode
# took 7 ms to compile, at the start of every command that writes a document.
_SPECIAL = re.compile('[&<>"\x00-\x1f\ud800-\udfff\ufffe\uffff]')
_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_CLARK = re.compile(r"\{([^}]*)\}(.+)")


def _text(value: str, what: str) -> str:
    if _SPECIAL.search(value) is None:
        return value
    if _INVALID.search(value):
        raise FormatError(f"{what}: {value!r} has a character XML cannot carry")
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _attr(value: str, what: str) -> str:
    if _SPECIAL.search(value) is None:
        return value
    if _INVALID.search(value):
        raise FormatError(f"{what}: {value!r} has a character XML cannot carry")
    return (
        value.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("\t", "&#9;")
        .replace("\n", "&#10;")
        .replace("\r", "&#13;")
    )


class _Names:
    """Prefixes for namespaced attribute names: root declarations first, local ones otherwise."""

    def __init__(self, declared: Mapping[str, str]) -> None:
        self.by_uri = {uri: prefix for prefix, uri in declared.items()}

    def attrs(self, extra: Mapping[str, str], what: str) -> str:
        if not extra:
            return ""
        out = []
        local: dict[str, str] = {}
        for key, value in extra.items():
            m = _CLARK.fullmatch(key)
            if m is None:
                name = key
            else:
                uri, local_name = m.groups()
                if uri == RS_NS:
                    prefix = "rs"
                elif uri == "http://www.w3.org/XML/1998/namespace":
                    prefix = "xml"
                else:
                    prefix = self.by_uri.get(uri) or local.get(uri) or ""
                    if not prefix:
                        prefix = f"ns{len(local) + 1}"
                        local[uri] = prefix
                name = f"{prefix}:{local_name}"
            out.append(f' {name}="{_attr(value, what)}"')
        decls = "".join(f' xmlns:{p}="{_attr(u, what)}"' for u, p in local.items())
        return decls + "".join(out)


def _dt(value: datetime | None) -> str | None:
    return format_w3c(value) if value is not None else None


class _Serializer:
    def __init__(self, document: Document, spec_version: str) -> None:
        if spec_version not in ("1.0", "1.1"):
            raise ValueError(f"spec_version must be '1.0' or '1.1', not {spec_version!r}")
        self.v10 = spec_version == "1.0"
        self.names = _Names(
            {p: u for p, u in document.namespaces.items() if p not in ("rs", "xml", "xmlns")}
        )

    def md(self, pairs: Iterable[tuple[str, object]], extra: Mapping[str, str], what: str) -> str:
        parts = []
        for name, value in pairs:
            if value is None:
                continue
            if isinstance(value, datetime):
                text = format_w3c(value)
            elif isinstance(value, dict):
                if not value:
                    continue
                text = format_hashes(value)
            else:
                text = str(value)
            parts.append(f' {name}="{_attr(text, what)}"')
        return "".join(parts) + self.names.attrs(extra, what)

    def link(self, ln: Link, indent: str, what: str) -> str:
        attrs = self.md(
            (
                ("rel", ln.rel),
                ("href", ln.href),
                ("modified", ln.modified),
                ("hash", ln.hashes),
                ("length", ln.length),
                ("type", ln.type),
                ("encoding", ln.encoding),
                ("path", ln.path),
                ("pri", ln.pri),
            ),
            ln.extra,
            what,
        )
        return f"{indent}<rs:ln{attrs}/>\n"

    def header(self, doc: Document) -> str:
        root = "sitemapindex" if doc.index else "urlset"
        decls = "".join(
            f' xmlns:{p}="{_attr(u, "namespace")}"'
            for p, u in doc.namespaces.items()
            if p not in ("rs", "xml", "xmlns") and u not in (SITEMAP_NS, RS_NS)
        )
        attrs = self.names.attrs(doc.attrs, "document attribute")
        out = [
            '<?xml version="1.0" encoding="UTF-8"?>\n',
            f'<{root} xmlns="{SITEMAP_NS}"\n    xmlns:rs="{RS_NS}"{decls}{attrs}>\n',
        ]
        for ln in doc.links:
            out.append(self.link(ln, "  ", "document link"))
        md = self.md(
            (
                ("capability", doc.capability),
                ("at", doc.at),
                ("completed", doc.completed),
                ("from", doc.from_),
                ("until", doc.until),
            ),
            doc.md_extra,
            "document rs:md",
        )
        out.append(f"  <rs:md{md}/>\n")
        for ext in doc.extensions:
            out.append(f"  {ext}\n")
        return "".join(out)

    def footer(self, doc: Document) -> str:
        return "</sitemapindex>\n" if doc.index else "</urlset>\n"

    def entry(self, res: Resource, index: bool) -> str:
        tag = "sitemap" if index else "url"
        loc = res.loc
        what = f"entry {loc}"
        lastmod = res.lastmod
        changetime = res.datetime
        if self.v10 and changetime is not None:
            lastmod, changetime = changetime, None
        head = self.names.attrs(res.attrs, what) if res.attrs else ""
        out = [f"  <{tag}{head}>\n    <loc>{_text(loc, what)}</loc>\n"]
        if lastmod is not None:
            out.append(f"    <lastmod>{format_w3c(lastmod)}</lastmod>\n")
        if res.changefreq is not None:
            out.append(f"    <changefreq>{_text(res.changefreq, what)}</changefreq>\n")
        if res.priority is not None:
            out.append(f"    <priority>{res.priority!r}</priority>\n")
        # Attribute by attribute (this runs once per entry of every list we write).
        attrs: list[str] = []
        add = attrs.append
        if res.capability is not None:
            add(f' capability="{_attr(res.capability, what)}"')
        if res.change is not None:
            add(f' change="{_attr(res.change, what)}"')
        if changetime is not None:
            add(f' datetime="{format_w3c(changetime)}"')
        if res.hashes:
            add(f' hash="{_attr(format_hashes(res.hashes), what)}"')
        if res.length is not None:
            add(f' length="{res.length:d}"')
        if res.type is not None:
            add(f' type="{_attr(res.type, what)}"')
        if res.encoding is not None:
            add(f' encoding="{_attr(res.encoding, what)}"')
        if res.path is not None:
            add(f' path="{_attr(res.path, what)}"')
        if res.at is not None:
            add(f' at="{format_w3c(res.at)}"')
        if res.completed is not None:
            add(f' completed="{format_w3c(res.completed)}"')
        if res.from_ is not None:
            add(f' from="{format_w3c(res.from_)}"')
        if res.until is not None:
            add(f' until="{format_w3c(res.until)}"')
        if res.md_extra:
            add(self.names.attrs(res.md_extra, what))
        md = "".join(attrs)
        if md:
            out.append(f"    <rs:md{md}/>\n")
        for ln in res.links:
            out.append(self.link(ln, "    ", what))
        for ext in res.extensions:
            out.append(f"    {ext}\n")
        out.append(f"  </{tag}>\n")
        return "".join(out)


def entry_xml(resource: Resource, *, index: bool = False, spec_version: str = "1.1") -> bytes:
    """One entry serialized as the writer writes it (in a document without extra namespaces):
    kept by publishers that write the same entries again and again, and handed back to
    `write_split` as bytes."""
    serializer = _PLAIN_SERIALIZERS.get(spec_version)
    if serializer is None:
        serializer = _PLAIN_SERIALIZERS[spec_version] = _Serializer(_PLAIN, spec_version)
    return serializer.entry(resource, index).encode("utf-8")


_PLAIN = Document()
#: The serializer of `entry_xml`, made once per spec version: it holds nothing between
#: entries, and making it cost 40 % of serializing a small entry (once per resource a
#: first `publish` records).
_PLAIN_SERIALIZERS: dict[str, _Serializer] = {}


class DocumentWriter:
    """Writes one document, entry by entry. A path target is written to a temporary file in the
    same directory and renamed into place on success, so a reader never sees half a document
    and a failed write leaves the previous file untouched."""

    def __init__(
        self,
        target: str | os.PathLike[str] | IO[bytes],
        document: Document,
        *,
        spec_version: str = "1.1",
        fsync: bool = False,
    ) -> None:
        self.document = document
        self._ser = _Serializer(document, spec_version)
        self.count = 0
        self._closed = False
        self._atomic: AtomicFile | None = None
        if isinstance(target, str | os.PathLike):
            # The same document again is left as it was, its time of change with it (a
            # Destination's conditional GET of it is then answered "not modified").
            self._atomic = AtomicFile(target, fsync=fsync, make_parents=True, keep_same=True)
            self._out: IO[bytes] = self._atomic.file
        else:
            self._out = target
        head = self._ser.header(document).encode("utf-8")
        self._out.write(head)
        #: The document's header (everything before its first entry), as written.
        self.header = head
        self.header_bytes = len(head)
        self.bytes = len(head)
        self._footer = self._ser.footer(document).encode("utf-8")

    def entry_bytes(self, resource: Resource) -> bytes:
        """The serialized entry (for callers that decide on splitting before writing)."""
        return self._ser.entry(resource, self.document.index).encode("utf-8")

    def write(self, resource: Resource) -> None:
        self.write_bytes(self.entry_bytes(resource))

    def write_bytes(self, data: bytes) -> None:
        self._out.write(data)
        self.bytes += len(data)
        self.count += 1

    def copy_entries(self, source: IO[bytes], length: int, entries: int) -> None:
        """`entries` entries serialized before: the next `length` bytes of `source` (the same
        document as an earlier writer left it, read from after its header), copied as they
        are, a MiB at a time."""
        left = length
        while left:
            chunk = source.read(min(left, 1 << 20))
            if not chunk:
                raise OSError(f"{getattr(source, 'name', 'a document')}: shorter than its record")
            self._out.write(chunk)
            left -= len(chunk)
        self.bytes += length
        self.count += entries

    @property
    def footer(self) -> bytes:
        return self._footer

    @property
    def footer_bytes(self) -> int:
        return len(self._footer)

    def close(self) -> None:
        """Finish the document and, for a path, move it into place."""
        if self._closed:
            return
        self._closed = True
        try:
            self._out.write(self._footer)
        except BaseException as exc:
            self.abort(exc)
            raise
        self.bytes += len(self._footer)
        if self._atomic is None:
            self._out.flush()
        else:
            self._atomic.commit()

    def abort(self, exc: BaseException | None = None) -> None:
        """Give up: remove the temporary file, leave any previous document in place (`exc`,
        what made the writer give up, named with it: `AtomicFile.abort`)."""
        self._closed = True
        if self._atomic is not None:
            self._atomic.abort(exc)

    def __enter__(self) -> DocumentWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort(exc)


def write_document(
    target: str | os.PathLike[str] | IO[bytes],
    document: Document,
    resources: Iterable[Resource],
    *,
    spec_version: str = "1.1",
    fsync: bool = False,
) -> int:
    """Write a whole document (no splitting). Returns the number of entries written."""
    with DocumentWriter(target, document, spec_version=spec_version, fsync=fsync) as w:
        for res in resources:
            w.write(res)
        return w.count


@dataclass(slots=True)
class Part:
    """One written part of a split list."""

    path: Path
    url: str
    count: int
    bytes: int
    from_: datetime | None = None
    until: datetime | None = None


@dataclass(slots=True)
class SplitResult:
    """What `write_split` wrote: one document, or an index over parts."""

    path: Path
    url: str
    index: bool
    count: int
    parts: list[Part] = field(default_factory=list)


def part_name(name: str, number: int) -> str:
    """`resourcelist.xml`, 3 → `resourcelist-00003.xml`."""
    stem, dot, ext = name.rpartition(".")
    if not dot:
        stem, ext = name, "xml"
    return f"{stem}-{number:05d}.{ext}"


def write_split(
    path: str | os.PathLike[str],
    url: str,
    document: Document,
    resources: Iterable[Resource | bytes],
    *,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    max_bytes: int = DEFAULT_MAX_BYTES,
    spec_version: str = "1.1",
    fsync: bool = False,
) -> SplitResult:
    """Write a list at `path` (published at `url`), splitting it past the limits.

    Within the limits this is one document. Past them (§7 of the spec, the Sitemap limits of
    50,000 entries and 50 MB by default) the entries go into numbered parts next to it
    (`name-00001.xml`, …), each with `<rs:ln rel="index">` back to a `sitemapindex` written at
    `path`; the index lists the parts with their `at`/`completed` (resource documents) or
    `from`/`until` (change documents). Entries may be given already serialized (`entry_xml`),
    as bytes, for documents other than change documents. Parts are renamed into place before
    the index, and parts left over from a longer earlier version are removed after it.
    """
    if max_entries < 1 or max_bytes < 1024:
        raise ValueError("max_entries must be ≥ 1 and max_bytes ≥ 1024")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    document = document.replace(index=False)
    changes = document.capability in CHANGE_CAPABILITIES or document.capability == "changedump"
    index_link = Link(rel="index", href=url)
    # A part's own header: the document's, without its `until` until the part is closed.
    part_doc = document.replace(index=False, until=None if changes else document.until)

    parts: list[Part] = []
    staged: list[tuple[Path, Path]] = []  # (staged file, final place)
    writer: DocumentWriter | None = None
    last_time: datetime | None = None
    total = 0

    def staged_path(number: int) -> Path:
        return target.parent / f".{part_name(target.name, number)}.staged"

    def provisional(number: int) -> Document:
        if number == 1:
            return part_doc
        return part_doc.replace(links=[*part_doc.links, index_link], from_=parts[-1].until)

    def open_part(number: int) -> DocumentWriter:
        doc = provisional(number)
        return DocumentWriter(staged_path(number), doc, spec_version=spec_version, fsync=fsync)

    def close_part(w: DocumentWriter, number: int, final: bool) -> None:
        w.close()
        until = (document.until if final else last_time) if changes else None
        doc = w.document
        if number == 1:
            doc = doc.replace(links=[*doc.links, index_link])
        if changes:
            doc = doc.replace(until=until)
        if doc != w.document:
            _rewrite_header(staged_path(number), w.document, doc, spec_version)
        name = part_name(target.name, number)
        parts.append(
            Part(
                path=target.parent / name,
                url=urljoin(url, name),
                count=w.count,
                bytes=w.bytes,
                from_=doc.from_ if changes else None,
                until=until,
            )
        )
        staged.append((staged_path(number), target.parent / name))

    try:
        writer = open_part(1)
        for res in resources:
            if isinstance(res, bytes):
                if changes:
                    raise ValueError("change documents are split by their entries' times")
                data = res
            else:
                data = writer.entry_bytes(res)
            if writer.count and (
                writer.count >= max_entries
                or writer.bytes + len(data) + writer.footer_bytes > max_bytes
            ):
                close_part(writer, len(parts) + 1, final=False)
                writer = open_part(len(parts) + 1)
            writer.write_bytes(data)
            total += 1
            if changes and isinstance(res, Resource) and res.change_time is not None:
                last_time = res.change_time
        if not parts:
            # Everything fits: one plain document with the document's own header, no index.
            writer.close()
            writer = None
            if part_doc != document:
                _rewrite_header(staged_path(1), part_doc, document, spec_version)
            replace_unless_same(staged_path(1), target)
            _remove_parts_from(target, 1)
            return SplitResult(path=target, url=url, index=False, count=total)
        close_part(writer, len(parts) + 1, final=True)
        writer = None
        for tmp, final in staged:
            replace_unless_same(tmp, final)
        index_doc = document.replace(index=True)
        with DocumentWriter(target, index_doc, spec_version=spec_version, fsync=fsync) as iw:
            for part in parts:
                entry = Resource(loc=part.url)
                if changes:
                    entry.from_, entry.until = part.from_, part.until
                else:
                    entry.at, entry.completed = document.at, document.completed
                iw.write(entry)
        _remove_parts_from(target, len(parts) + 1)
        return SplitResult(path=target, url=url, index=True, count=total, parts=parts)
    except BaseException:
        if writer is not None:
            writer.abort()
        for tmp in [staged_path(1), *(t for t, _ in staged)]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        raise


def _rewrite_header(staged: Path, old: Document, new: Document, spec_version: str) -> None:
    """Give an already written part its final header (index link, `until`); copy the rest."""
    old_head = _Serializer(old, spec_version).header(old).encode("utf-8")
    new_head = _Serializer(new, spec_version).header(new).encode("utf-8")
    tmp = staged.with_name(staged.name + ".relink")
    with open(staged, "rb") as src, open(tmp, "wb") as dst:
        if src.read(len(old_head)) != old_head:  # pragma: no cover - we wrote this header
            raise RuntimeError(f"{staged}: part header changed while splitting")
        dst.write(new_head)
        while chunk := src.read(1 << 20):
            dst.write(chunk)
    os.replace(tmp, staged)


def _remove_parts_from(target: Path, first: int) -> None:
    number = first
    while True:
        p = target.parent / part_name(target.name, number)
        if not p.exists():
            return
        p.unlink()
        number += 1
