"""LIRS ↔ ResourceSync.

A LIRS record says "this URL last changed at Last-Modified, as seen at Last-Detected": an entry of
a Resource List (`<lastmod>`, `rs:md@length`) or an `updated` entry of a Change List
(`rs:md@datetime`). What ResourceSync has no attribute for is kept in `rs:md` attributes in our
namespace, so converting back gives the same records:

=====================  =============================================================
``lirs:detected``      Last-Detected, as a W3C datetime
``lirs:tz``            the site's offset from UTC in seconds
``lirs:title``         title (omitted when empty)
``lirs:author``        author (omitted when empty)
``lirs:source``        the URL of the antenna the record came from (omitted when empty)
``lirs:extensions``    extension fields, written as in LIRS (each escaped, each ended by ``,``)
=====================  =============================================================

with ``lirs`` bound to :data:`LIRS_NS`. A Content-Length of 0 means "unknown" in LIRS and is
written as no length at all. Error rows (``0,0``) and records without a Last-Modified carry no
time and are left out and counted.

Both directions go through a temporary SQLite table (`merge.RecordTable`): one entry per URL
(a later one wins, as LIRS readers do), and the sorting a Change List needs, without holding the
records in memory.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import IO, Any

from ..model import Capability, Change, Document, Link, Resource
from ..sitemap import iter_entries, open_document, write_document
from ..units import ascii_int
from ..w3cdt import W3CDatetimeError, format_w3c, parse_w3c
from .codec import MAX_TIME, MAX_TZ, LirsWriter, Record, is_lirs_url, join_fields, split_fields
from .merge import RecordTable

__all__ = [
    "LIRS_NS",
    "FromStats",
    "ToStats",
    "from_resourcesync",
    "record_to_resource",
    "resource_to_record",
    "to_resourcesync",
]

#: Our namespace for the LIRS fields ResourceSync has no attribute for.
LIRS_NS = "https://resourcesync.dev/ns/lirs#"

_DETECTED = f"{{{LIRS_NS}}}detected"
_TZ = f"{{{LIRS_NS}}}tz"
_TITLE = f"{{{LIRS_NS}}}title"
_AUTHOR = f"{{{LIRS_NS}}}author"
_SOURCE = f"{{{LIRS_NS}}}source"
_EXTENSIONS = f"{{{LIRS_NS}}}extensions"


def _utc(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def record_to_resource(record: Record, capability: str) -> Resource:
    """The entry for a record that has a Last-Modified, in a Change List or a Resource List."""
    md: dict[str, str] = {
        _DETECTED: format_w3c(_utc(record.last_detected)),
        _TZ: str(record.tz_offset),
    }
    if record.title:
        md[_TITLE] = record.title
    if record.author:
        md[_AUTHOR] = record.author
    if record.source_url:
        md[_SOURCE] = record.source_url
    if record.extensions:
        md[_EXTENSIONS] = join_fields(record.extensions)
    when = _utc(record.last_modified)
    length = record.content_length or None
    if capability == Capability.CHANGELIST:
        return Resource(
            loc=record.url, change=Change.UPDATED, datetime=when, length=length, md_extra=md
        )
    return Resource(loc=record.url, lastmod=when, length=length, md_extra=md)


def _seconds(value: datetime) -> int:
    return int(value.timestamp() // 1)


def resource_to_record(
    resource: Resource,
    *,
    detected: int,
    tz_offset: int = 0,
    source_url: str = "",
) -> Record | None:
    """The record for an entry, or None when LIRS cannot carry it (a URL LIRS readers refuse,
    a time before 1970). `detected` is the Last-Detected for entries without `lirs:detected`."""
    if not is_lirs_url(resource.loc):
        return None
    md = resource.md_extra
    when = resource.change_time
    last_modified = _seconds(when) if when is not None else 0
    last_detected = detected
    if _DETECTED in md:
        with contextlib.suppress(W3CDatetimeError):
            last_detected = _seconds(parse_w3c(md[_DETECTED]))
    tz = tz_offset
    text = md.get(_TZ, "")
    sign = -1 if text[:1] == "-" else 1
    offset = ascii_int(text[1:] if text[:1] in ("+", "-") else text)
    if offset is not None and offset <= MAX_TZ:
        tz = sign * offset
    if not (0 <= last_modified <= MAX_TIME and 0 <= last_detected <= MAX_TIME):
        return None
    ext = md.get(_EXTENSIONS, "")
    return Record(
        last_modified,
        last_detected,
        tz,
        resource.length if resource.length is not None and resource.length >= 0 else 0,
        resource.loc,
        md.get(_TITLE, ""),
        md.get(_AUTHOR, ""),
        md.get(_SOURCE, source_url),
        tuple(split_fields(ext)[:-1]) if ext else (),
    )


@dataclass(slots=True)
class ToStats:
    """What `to_resourcesync` did."""

    records: int = 0
    entries: int = 0
    #: Error rows (`0,0`): the last check failed.
    error_rows: int = 0
    #: Records with Last-Modified 0 but a Last-Detected: no update time.
    no_time: int = 0
    #: Records replaced by a later record for the same URL.
    duplicates: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def to_resourcesync(
    records: Iterable[Record],
    target: str | os.PathLike[str] | IO[bytes],
    capability: str,
    *,
    now: int | None = None,
    capability_list: str | None = None,
) -> ToStats:
    """Write records as a Change List (`updated` entries, oldest first, `from`/`until` spanning
    them) or a Resource List (`at` = the latest Last-Detected). Returns the counts.

    `capability_list`: the URL of the Capability List, linked as `rel="up"` (recommended).
    """
    if capability not in (Capability.CHANGELIST, Capability.RESOURCELIST):
        raise ValueError(f"capability must be changelist or resourcelist, not {capability!r}")
    stats = ToStats()
    with RecordTable() as table:
        stats.records = table.add(records)
        held = table.count()
        stats.duplicates = stats.records - held
        stats.error_rows = table.count_errors()
        with_time = table.count(with_time=True)
        stats.no_time = held - with_time - stats.error_rows
        clock = _utc(int(time.time()) if now is None else now)
        namespaces = {"lirs": LIRS_NS}
        links = [Link(rel="up", href=capability_list)] if capability_list else []
        if capability == Capability.CHANGELIST:
            span = table.span()
            start, end = (_utc(span[0]), _utc(span[1])) if span else (clock, clock)
            document = Document(
                capability=capability,
                from_=start,
                until=end,
                namespaces=namespaces,
                links=links,
            )
            order = "modified"
        else:
            latest = table.max_detected(with_time=True)
            at = _utc(latest) if latest else clock
            document = Document(capability=capability, at=at, namespaces=namespaces, links=links)
            order = "input"
        entries = (
            record_to_resource(r, capability)
            for r in table.records(order=order, with_time=True)  # type: ignore[arg-type]
        )
        stats.entries = write_document(target, document, entries)
    return stats


@dataclass(slots=True)
class FromStats:
    """What `from_resourcesync` did."""

    entries: int = 0
    records: int = 0
    #: `deleted` entries: LIRS cannot say a site is gone; the URL is left out.
    deleted: int = 0
    #: Entries LIRS cannot carry (a URL its readers refuse, a time before 1970).
    unrepresentable: int = 0
    #: Characters the output encoding could not hold (written as `?`).
    replaced: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _document_time(document: Document) -> datetime | None:
    return document.at or document.until or document.completed


def from_resourcesync(
    source: Any,
    target: str | os.PathLike[str] | IO[bytes],
    *,
    encoding: str = "utf-8",
    compress: bool | None = None,
    newline: str = "\n",
    now: int | None = None,
    tz_offset: int = 0,
    source_url: str = "",
    client: Any = None,
) -> FromStats:
    """Write the entries of a Resource List or Change List (or an index of them) as LIRS.

    Last-Modified is the entry's change time (`rs:md@datetime`, else `<lastmod>`); Last-Detected
    is `lirs:detected` when the entry has it, else the document's `at` (or `until`), else now.
    A later entry for a URL replaces an earlier one; a `deleted` entry removes the URL.
    """
    stats = FromStats()
    with RecordTable() as table, open_document(source, client=client) as reader:
        document = reader.document
        when = _document_time(document)
        detected = (
            _seconds(when) if when is not None else (int(time.time()) if now is None else now)
        )
        detected = min(max(detected, 0), MAX_TIME)
        entries: Iterator[Resource] = (
            iter_entries(source, client=client) if document.index else iter(reader)
        )
        batch: list[Record] = []
        for resource in entries:
            stats.entries += 1
            if resource.change == Change.DELETED:
                table.add(batch)
                batch = []
                table.delete(resource.loc)
                stats.deleted += 1
                continue
            record = resource_to_record(
                resource, detected=detected, tz_offset=tz_offset, source_url=source_url
            )
            if record is None:
                stats.unrepresentable += 1
                continue
            batch.append(record)
            if len(batch) >= 4096:
                table.add(batch)
                batch = []
        table.add(batch)
        with LirsWriter(target, encoding=encoding, compress=compress, newline=newline) as out:
            out.write_all(table.records(order="input"))
        stats.records = out.stats.records
        stats.replaced = out.stats.replaced
    return stats
