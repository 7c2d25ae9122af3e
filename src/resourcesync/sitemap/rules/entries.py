"""The rules of each entry as the entries stream past: its values (`values`), then what its
document's capability asks of it — duplicates, order, the series of an index or archive, a
Capability List's entries, a change's. Section numbers as in `document`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from urllib.parse import urlsplit

from ...model import CHANGE_CAPABILITIES, Capability, Change, Document, Resource
from .values import MD_ATTRIBUTES, OPTIONAL, RECOMMENDED, Tally, ValueRules, fmt

__all__ = ["CAPABILITIES", "DUPLICATE_WINDOW", "SITEMAP_MAX_ENTRIES", "EntryRules", "Series"]

CAPABILITIES = frozenset(c.value for c in Capability)
CHANGES = frozenset(c.value for c in Change)
CHANGEFREQS = frozenset({"always", "hourly", "daily", "weekly", "monthly", "yearly", "never"})
SITEMAP_MAX_ENTRIES = 50_000

# Documents whose entries are ordered by their `from` (archives of change documents).
_ORDERED_BY_FROM = frozenset({"changelist-archive", "changedump-archive"})
# Documents where each entry's `<loc>` is one resource: the same `<loc>` twice is an error.
_UNIQUE_LOC = frozenset({"resourcelist", "resourcedump-manifest"})
# Documents of changes: the same (`<loc>`, change time) twice is an error.
_UNIQUE_CHANGE = frozenset({"changelist", "changedump-manifest", "change-notification"})
DUPLICATE_WINDOW = SITEMAP_MAX_ENTRIES

_ABSOLUTE_HTTP = re.compile(r"(?i)https?://[^/?#\s]+(?:[/?#]\S*)?")
_absolute_http = _ABSOLUTE_HTTP.fullmatch


class Series:
    """Consecutive documents of changes (the Change Lists of an index or an archive, in order):
    no gap and no overlap between one's `until` and the next's `from`, and only the last may
    be open (no `until`), core 1.1 §12.2, Archives §5."""

    def __init__(
        self,
        what: str,
        report: Callable[[str, str, int | None, str | None], None],
        open_known: bool = True,
    ) -> None:
        # open_known: a missing `until` means an open list (a document's own rs:md), not merely
        # an unwritten one (an index entry, where `until` is optional).
        self.open_known = open_known
        self.what = what
        self._report = report
        self._prev: tuple[datetime | None, datetime | None, int | None, str | None] | None = None
        self._open_reported = False

    def add(
        self, from_: datetime | None, until: datetime | None, line: int | None, name: str | None
    ) -> None:
        prev = self._prev
        self._prev = (from_, until, line, name)
        if prev is None:
            return
        _p_from, p_until, _p_line, p_name = prev
        if p_until is None and self.open_known and not self._open_reported:
            self._open_reported = True
            self._report(
                "core-12.2-open-last",
                f"{self.what}: {p_name or 'a Change List'} has no until (it is open) but is not "
                "the last: at most one Change List is open, and it is the last (§12.2)",
                line,
                name,
            )
            return
        if p_until is None or from_ is None:
            return
        if from_ > p_until:
            self._report(
                "core-12.2-gap",
                f"{self.what}: a gap from {fmt(p_until)} (until of {p_name}) to "
                f"{fmt(from_)} (from of {name}): changes in between are in no list",
                line,
                name,
            )
        elif from_ < p_until:
            self._report(
                "core-12.2-overlap",
                f"{self.what}: {name} starts at {fmt(from_)}, before {p_name} ends at "
                f"{fmt(p_until)} (consecutive lists must not overlap)",
                line,
                name,
            )


class EntryRules:
    """The rules of a document's entries, one call each (`entry`), with what they keep between
    entries: the `<loc>`s seen (duplicates), the last change time (order), the series of an
    index, a Capability List's capabilities. `begin` sets them up for the document's
    capability; before it (or without a capability) only the values are checked."""

    def __init__(self, tally: Tally, values: ValueRules) -> None:
        self.tally = tally
        self.error = tally.error
        self.warning = tally.warning
        self.values = values
        self._hashes = values.hashes  # on nearly every entry: bound once
        self.count = 0
        self.doc = Document()
        self._cap = ""
        self._times = (OPTIONAL, OPTIONAL, OPTIONAL, OPTIONAL)
        self._prev_time: datetime | None = None
        self._prev_line: int | None = None
        self._capabilities: dict[str, int] = {}
        self._seen: dict[object, int] | None = None
        self._by_change = False
        self._series: Series | None = None
        #: Whether this document's entries may be told plain (`plain`).
        self.plain_ok = False

    def begin(self, doc: Document, cap: str, times: tuple[str, str, str, str]) -> None:
        """The document's capability known (and valid): its entries' rules."""
        self.doc, self._cap, self._times = doc, cap, times
        if (not doc.index and cap in _UNIQUE_LOC) or cap in _UNIQUE_CHANGE:
            self._seen = {}
            self._by_change = cap in _UNIQUE_CHANGE
        # A Resource List's rules of an entry the decoder calls plain are its `<loc>`'s alone.
        self.plain_ok = cap == "resourcelist" and not doc.index
        if doc.index and cap in ("changelist", "changedump"):
            self._series = Series(f"{cap} index", self._series_problem, False)
        elif cap in _ORDERED_BY_FROM:
            self._series = Series(cap, self._series_problem, False)

    def plain(self, line: int, loc: str) -> bool:
        """The rules of a plain entry (`EntryDecoder.plain`: its `<loc>` is all there is to
        check) where the document allows (`plain_ok`), as `entry` would apply them: True when
        there is nothing to say (it is counted, its `<loc>` kept for duplicates); False, with
        nothing counted or kept, when `entry` is to check it whole."""
        seen = self._seen
        if not self.plain_ok or seen is None or loc in seen or _absolute_http(loc) is None:
            return False
        self.count += 1
        if len(seen) < DUPLICATE_WINDOW:
            seen[loc] = line
        return True

    def _series_problem(self, rule: str, message: str, line: int | None, loc: str | None) -> None:
        self.error(rule, message, line, loc)

    def entry(self, line: int, res: Resource) -> None:
        # Called once per entry: the common case (nothing to say) takes few steps.
        self.count += 1
        cap = self._cap
        loc = res.loc or None
        if res.loc and _ABSOLUTE_HTTP.fullmatch(res.loc) is None:
            if urlsplit(res.loc).scheme:
                self.warning(
                    "sitemap-loc-http", f"<loc> {res.loc!r} is not an http(s) URI", line, loc
                )
            else:
                self.error(
                    "core-7-loc-absolute",
                    f"<loc> {res.loc!r} is not an absolute URI (§7)",
                    line,
                    loc,
                )
        if res.changefreq is not None and res.changefreq not in CHANGEFREQS:
            self.warning(
                "sitemap-changefreq",
                f"changefreq {res.changefreq!r} is not a Sitemap value",
                line,
                loc,
            )
        if res.priority is not None and not 0.0 <= res.priority <= 1.0:
            self.warning(
                "sitemap-priority", f"priority {res.priority} is outside 0.0..1.0", line, loc
            )
        if res.hashes:
            self._hashes(res.hashes, line, loc)
        if res.links:
            self.values.links(res.links, line, loc)
            ups = sum(1 for ln in res.links if ln.rel == "up")
            if ups > 1:
                self.error("core-7-up-repeated", f'{ups} <rs:ln rel="up"> on one entry', line, loc)
        if res.md_extra:
            self.values.attributes(res.md_extra, "rs:md", MD_ATTRIBUTES, line, loc)
        if res.path is not None:
            self.values.path(res.path, "rs:md", line, loc)
        if not cap:
            return
        seen = self._seen
        if seen is not None and loc is not None:
            if self._by_change:
                self._duplicate_change(seen, res, line, loc)
            else:  # inline: one dict look-up per entry of a Resource List
                first = seen.get(loc)
                if first is not None:
                    self._duplicate(f"<loc> {loc}", first, line, loc)
                elif len(seen) < DUPLICATE_WINDOW:
                    seen[loc] = line
        times = self._times
        if (
            times[2] == RECOMMENDED
            or times[3] == RECOMMENDED
            or res.at is not None
            or res.completed is not None
            or res.from_ is not None
            or res.until is not None
        ):
            self.values.times(
                res.at, res.completed, res.from_, res.until, times[2], times[3], line, loc, "entry"
            )
        if self.doc.index:
            if cap in ("changelist", "changedump"):
                self._ordered(
                    res.from_, line, loc, "parts of a change index", "core-12.2-index-order"
                )
            if self._series is not None:
                self._series.add(res.from_, res.until, line, loc)
            if res.capability is not None and res.capability != cap:
                self.error(
                    "core-index-part-capability",
                    f"an index of a {cap} lists a part with capability {res.capability!r}",
                    line,
                    loc,
                )
            return
        if res.lastmod is not None and cap in ("description", "capabilitylist"):
            self.warning(
                "core-lastmod-omitted",
                f"<lastmod> in a {cap}: it should be omitted unless kept up to date with the "
                "documents listed (§8, §9)",
                line,
                loc,
            )
        if cap == "capabilitylist":
            self._capability_entry(line, res, loc)
        elif cap == "description":
            # §8: the entry's rs:md is optional; when it is there, it says capabilitylist.
            if res.capability is not None and res.capability != "capabilitylist":
                self.error(
                    "core-8-description-entry",
                    'a Source Description entry has rs:md capability="capabilitylist" '
                    f"(§8), found {res.capability!r}",
                    line,
                    loc,
                )
        elif cap in CHANGE_CAPABILITIES:
            self._change_entry(line, res, loc)
        elif cap == "framework-notification":
            # Framework Notification 1.0.1 §4: each entry's rs:md has change and capability
            # (the document that changed and what it is).
            self._change_value(res, line, loc, "fn-4-change", "§4")
            if res.capability is not None and res.capability not in CAPABILITIES:
                # §4: "additional values may be defined in other specifications".
                self.warning(
                    "fn-4-capability-unknown",
                    f"capability {res.capability!r} is not one this validator knows",
                    line,
                    loc,
                )
            if res.capability is None:
                self.error(
                    "fn-4-capability",
                    "a framework-notification entry needs rs:md capability (§4)",
                    line,
                    loc,
                )
        elif cap in _ORDERED_BY_FROM:
            self._ordered(res.from_, line, loc, "Change Lists in an archive", "archives-order")
            if self._series is not None:
                self._series.add(res.from_, res.until, line, loc)
        elif res.change is not None:
            self.warning("core-change-not-used", f"change is not used in a {cap}", line, loc)
            if res.change not in CHANGES:  # the XSD's changeType, wherever it is written
                self._change_value(res, line, loc, "core-12.1-change", "§12.1")
        if cap == "resourcedump-manifest" and res.path is None:
            self.error(
                "core-11.2-manifest-path",
                "a Resource Dump Manifest entry needs rs:md path (§11.2)",
                line,
                loc,
            )
        if cap in ("resourcedump", "changedump"):
            if res.type is None:
                self.warning(
                    "core-dump-package-type",
                    f"a {cap} package should give its type (application/zip)",
                    line,
                    loc,
                )
            if res.length is None:
                self.warning(
                    "core-dump-package-length", f"a {cap} package should give its length", line, loc
                )
            if res.link("contents") is None:
                self.warning(
                    "core-dump-package-contents",
                    f'a {cap} package should link its manifest with rel="contents"',
                    line,
                    loc,
                )
        if cap in ("resourcelist", "resourcedump-manifest") and res.capability is not None:
            self.warning(
                "core-capability-on-entry", f"capability on an entry of a {cap}", line, loc
            )

    def _duplicate_change(
        self, seen: dict[object, int], res: Resource, line: int, loc: str
    ) -> None:
        when = res.datetime if res.datetime is not None else res.lastmod
        if when is None:
            return
        key = (loc, when)
        first = seen.get(key)
        if first is not None:
            self._duplicate(f"the same change of {loc} at {fmt(when)}", first, line, loc)
        elif len(seen) < DUPLICATE_WINDOW:
            seen[key] = line

    def _duplicate(self, what: str, first: int, line: int, loc: str) -> None:
        self.error(
            "core-duplicate-entry",
            f"{what} is listed twice (first on line {first}) in a {self._cap}",
            line,
            loc,
        )

    def _capability_entry(self, line: int, res: Resource, loc: str | None) -> None:
        c = res.capability
        if c is None:
            self.error(
                "core-9.2-capability",
                "a Capability List entry needs rs:md capability (§9.2)",
                line,
                loc,
            )
            return
        if c not in CAPABILITIES:
            self.error(
                "core-capability-unknown",
                f"unknown capability {c!r} in a Capability List",
                line,
                loc,
            )
            return
        if c in ("description", "capabilitylist"):
            self.error(
                "core-9.2-capability", f"a Capability List does not list a {c} (§9.2)", line, loc
            )
        if c in self._capabilities:
            self.error(
                "core-9.2-capability-repeated",
                f"capability {c!r} is listed twice (first on line {self._capabilities[c]}); "
                "a Capability List has one entry per capability (§9.2)",
                line,
                loc,
            )
        else:
            self._capabilities[c] = line
        if c == "change-notification" and res.link("hub") is None:
            self.error(
                "cn-5-hub",
                'a change-notification channel needs <rs:ln rel="hub"> (Change Notification §5)',
                line,
                loc,
            )

    def _change_value(
        self, res: Resource, line: int, loc: str | None, rule: str, section: str
    ) -> None:
        if res.change is None:
            self.error(rule, f"a {self._cap} entry needs rs:md change ({section})", line, loc)
        elif res.change not in CHANGES:
            self.error(
                "core-12.1-change-value",
                f"change {res.change!r} is not created, updated or deleted",
                line,
                loc,
            )

    def _change_entry(self, line: int, res: Resource, loc: str | None) -> None:
        cap = self._cap
        if res.capability is not None and cap == "changelist":
            self.error(
                "core-12.1-document-entry",
                f"an entry with capability {res.capability!r} in a Change List is a document, "
                "not a change: list documents in a Change List Index or a Capability List",
                line,
                loc,
            )
        self._change_value(res, line, loc, "core-12.1-change", "§12.1")
        if cap == "changedump-manifest" and res.path is None and res.change != "deleted":
            self.error(
                "core-13.2-manifest-path",
                "a Change Dump Manifest entry needs rs:md path (§13.2)",
                line,
                loc,
            )
        # Core 1.1 §7: the time of a change is rs:md@datetime. A <lastmod> is the resource's
        # Last-Modified, not the change time: an entry with only <lastmod> has an unknown
        # change time and is ordered by its position (issue 10.3).
        t = res.datetime
        if t is None:
            return
        self._ordered(t, line, loc, "changes", "core-12.1-change-order")
        doc = self.doc
        # §7: datetime is within [from, until] of the document.
        if doc.from_ is not None and t < doc.from_:
            self.error(
                "core-7-datetime-range",
                f"change datetime {fmt(t)} is before the document's from {fmt(doc.from_)}",
                line,
                loc,
            )
        if doc.until is not None and t > doc.until:
            self.error(
                "core-7-datetime-range",
                f"change datetime {fmt(t)} is after the document's until {fmt(doc.until)}",
                line,
                loc,
            )

    def _ordered(
        self, t: datetime | None, line: int, loc: str | None, what: str, rule: str
    ) -> None:
        if t is None:
            return
        prev = self._prev_time
        if prev is not None and t < prev:
            self.error(
                rule,
                f"{what} out of chronological order: {fmt(t)} after {fmt(prev)} "
                f"(line {self._prev_line})",
                line,
                loc,
            )
        self._prev_time = t
        self._prev_line = line
