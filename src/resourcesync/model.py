"""The vocabulary of ResourceSync: capabilities, changes, links, resource entries, documents.

No I/O. Values that come from documents are kept as read (strings), so the validator can report
an unknown capability or change instead of the reader refusing the document; the enums below are
the names the specification defines, and compare equal to those strings.

Ground floor: imports nothing of ours.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = [
    "CAPABILITIES",
    "CHANGES",
    "CHANGE_CAPABILITIES",
    "INDEXABLE",
    "Capability",
    "Change",
    "Document",
    "Link",
    "Resource",
]

SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
RS_NS = "http://www.openarchives.org/rs/terms/"


class Capability(StrEnum):
    """The `capability` values of core 1.1, the Archives spec, Change Notification and Framework
    Notification."""

    DESCRIPTION = "description"
    CAPABILITYLIST = "capabilitylist"
    RESOURCELIST = "resourcelist"
    CHANGELIST = "changelist"
    RESOURCEDUMP = "resourcedump"
    CHANGEDUMP = "changedump"
    RESOURCEDUMP_MANIFEST = "resourcedump-manifest"
    CHANGEDUMP_MANIFEST = "changedump-manifest"
    RESOURCELIST_ARCHIVE = "resourcelist-archive"
    RESOURCEDUMP_ARCHIVE = "resourcedump-archive"
    CHANGELIST_ARCHIVE = "changelist-archive"
    CHANGEDUMP_ARCHIVE = "changedump-archive"
    CHANGE_NOTIFICATION = "change-notification"
    FRAMEWORK_NOTIFICATION = "framework-notification"


class Change(StrEnum):
    """The `change` values of an entry in a change document."""

    CREATED = "created"
    UPDATED = "updated"
    DELETED = "deleted"


#: Every `capability` value (`Capability`).
CAPABILITIES: frozenset[str] = frozenset(Capability)

#: The `change` values a change can be applied by (core 1.1 §12.1).
CHANGES: frozenset[str] = frozenset(Change)


#: Documents whose entries are changes, in forward chronological order.
CHANGE_CAPABILITIES = frozenset(
    {
        Capability.CHANGELIST,
        Capability.CHANGEDUMP_MANIFEST,
        Capability.CHANGE_NOTIFICATION,
    }
)

#: Documents that may be published as a `sitemapindex` over parts.
INDEXABLE = frozenset(
    {
        Capability.RESOURCELIST,
        Capability.CHANGELIST,
        Capability.RESOURCEDUMP,
        Capability.CHANGEDUMP,
        Capability.RESOURCELIST_ARCHIVE,
        Capability.RESOURCEDUMP_ARCHIVE,
        Capability.CHANGELIST_ARCHIVE,
        Capability.CHANGEDUMP_ARCHIVE,
        Capability.DESCRIPTION,
        Capability.RESOURCEDUMP_MANIFEST,
        Capability.CHANGEDUMP_MANIFEST,
    }
)


@dataclass(slots=True)
class Link:
    """An `<rs:ln>` element: a link from a document or an entry to a related resource."""

    rel: str
    href: str
    type: str | None = None
    length: int | None = None
    hashes: dict[str, str] = field(default_factory=dict)
    modified: dt.datetime | None = None
    path: str | None = None
    pri: int | None = None
    encoding: str | None = None
    #: Attributes not defined by the spec (Clark notation `{ns}name` for namespaced ones).
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Resource:
    """One `<url>` (or `<sitemap>` in an index) entry with its `rs:md` metadata and `rs:ln` links.

    `from_` stands for the `from` attribute (a Python keyword).
    """

    loc: str
    lastmod: dt.datetime | None = None
    changefreq: str | None = None
    priority: float | None = None
    hashes: dict[str, str] = field(default_factory=dict)
    length: int | None = None
    type: str | None = None
    encoding: str | None = None
    change: str | None = None
    datetime: dt.datetime | None = None
    path: str | None = None
    capability: str | None = None
    at: dt.datetime | None = None
    completed: dt.datetime | None = None
    from_: dt.datetime | None = None
    until: dt.datetime | None = None
    links: list[Link] = field(default_factory=list)
    #: Attributes of `rs:md` not defined by the spec.
    md_extra: dict[str, str] = field(default_factory=dict)
    #: Attributes of `<url>` itself (Clark notation), kept to be written back.
    attrs: dict[str, str] = field(default_factory=dict)
    #: Child elements in other namespaces, as exclusive-C14N XML text, kept to be written back.
    extensions: list[str] = field(default_factory=list)

    @property
    def change_time(self) -> dt.datetime | None:
        """The time of the change: `rs:md@datetime` (v1.1), else `<lastmod>` (a v1.0 entry)."""
        return self.datetime if self.datetime is not None else self.lastmod

    def link(self, rel: str) -> Link | None:
        """The first link with this relation, if any."""
        for ln in self.links:
            if ln.rel == rel:
                return ln
        return None

    def replace(self, **changes: object) -> Resource:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


@dataclass(slots=True)
class Document:
    """The document level: root element kind, `<rs:md>` of the root, and the root's links."""

    capability: str | None = None
    index: bool = False
    at: dt.datetime | None = None
    completed: dt.datetime | None = None
    from_: dt.datetime | None = None
    until: dt.datetime | None = None
    links: list[Link] = field(default_factory=list)
    md_extra: dict[str, str] = field(default_factory=dict)
    attrs: dict[str, str] = field(default_factory=dict)
    extensions: list[str] = field(default_factory=list)
    #: Extra namespace prefixes declared on the root (prefix → URI), e.g. for `md_extra` keys.
    namespaces: dict[str, str] = field(default_factory=dict)

    def link(self, rel: str) -> Link | None:
        """The first link with this relation, if any."""
        for ln in self.links:
            if ln.rel == rel:
                return ln
        return None

    def replace(self, **changes: object) -> Document:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
