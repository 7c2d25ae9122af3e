"""The rules within one document, checked as the entries stream past.

Nothing is held per entry beyond the current one, except the `<loc>` values of the first
50,000 entries (the Sitemap limit) to find duplicates, and the capability names of a Capability
List. Section numbers refer to ResourceSync core 1.1 (Z39.99-2017), the Archives spec 0.9.1,
Change Notification 1.0.1 and Framework Notification 1.0.1.

Errors are breaches of a "must" (or of the XML Schema where the prose agrees); warnings are
missing "should"/recommended parts and values the spec does not define but a reader can live
with. Every finding carries a stable rule id.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime
from urllib.parse import urlsplit

from ...hashing import ALGORITHMS, HEX_LENGTH, check_hash_value
from ...model import (
    CHANGE_CAPABILITIES,
    RS_NS,
    Capability,
    Change,
    Document,
    Link,
    Resource,
)
from ...w3cdt import format_w3c
from ..read import DocumentReader, ProblemHandler
from .findings import ERROR, WARNING, Finding

__all__ = ["DocumentChecker", "Series", "problem_rule"]

CAPABILITIES = frozenset(c.value for c in Capability)
CHANGES = frozenset(c.value for c in Change)
CHANGEFREQS = frozenset({"always", "hourly", "daily", "weekly", "monthly", "yearly", "never"})
SITEMAP_MAX_ENTRIES = 50_000
SITEMAP_MAX_BYTES = 50 * 1024 * 1024

# Appendix A (Table 4): use of `at` / `from` on the root (top) and on the entries (child).
# M mandatory, R recommended, O optional, X not used. Archives 0.9.1 §3–6 and Change
# Notification §3 complete the table for the document types it does not list.
_M, _R, _O, _X = "mandatory", "recommended", "optional", "not used"
_TIMES: dict[tuple[str, bool], tuple[str, str, str, str]] = {
    # (capability, index): (top at, top from, child at, child from)
    ("resourcelist", False): (_M, _X, _X, _X),
    ("resourcelist", True): (_M, _X, _O, _X),
    ("resourcedump", False): (_M, _X, _O, _X),
    ("resourcedump", True): (_M, _X, _O, _X),
    ("resourcedump-manifest", False): (_M, _X, _X, _X),
    ("changelist", False): (_X, _M, _X, _X),
    ("changelist", True): (_X, _M, _X, _R),
    ("changedump", False): (_X, _M, _X, _R),
    ("changedump", True): (_X, _M, _X, _R),
    ("changedump-manifest", False): (_X, _M, _X, _X),
    ("change-notification", False): (_X, _M, _X, _X),
    ("resourcelist-archive", False): (_O, _X, _R, _X),
    ("resourcelist-archive", True): (_O, _X, _O, _X),
    ("resourcedump-archive", False): (_O, _X, _R, _X),
    ("resourcedump-archive", True): (_O, _X, _O, _X),
    ("changelist-archive", False): (_X, _O, _X, _R),
    ("changelist-archive", True): (_X, _O, _X, _O),
    ("changedump-archive", False): (_X, _O, _X, _R),
    ("changedump-archive", True): (_X, _O, _X, _O),
}
# Documents whose entries are ordered by their `from` (archives of change documents).
_ORDERED_BY_FROM = frozenset({"changelist-archive", "changedump-archive"})
# Core 1.1 §9–13: these documents must link up to their Capability List (the Capability List
# up to the Source Description).
_UP_MANDATORY = frozenset(
    {
        "capabilitylist",
        "resourcelist",
        "changelist",
        "resourcedump",
        "changedump",
        "resourcedump-manifest",
        "changedump-manifest",
    }
)
# Archives 0.9.1: an up link to the Capability List is expected, not mandated.
_UP_RECOMMENDED = frozenset(
    {"resourcelist-archive", "resourcedump-archive", "changelist-archive", "changedump-archive"}
)
# Documents where each entry's `<loc>` is one resource: the same `<loc>` twice is an error.
_UNIQUE_LOC = frozenset({"resourcelist", "resourcedump-manifest"})
# Documents of changes: the same (`<loc>`, change time) twice is an error.
_UNIQUE_CHANGE = frozenset({"changelist", "changedump-manifest", "change-notification"})
_DUPLICATE_WINDOW = SITEMAP_MAX_ENTRIES

# The attributes the XML Schema defines on rs:md and rs:ln (unqualified).
_MD_ATTRIBUTES = frozenset(
    {
        "at",
        "capability",
        "change",
        "completed",
        "datetime",
        "encoding",
        "from",
        "hash",
        "length",
        "modified",
        "path",
        "type",
        "until",
    }
)
_LN_ATTRIBUTES = frozenset(
    {"encoding", "hash", "href", "length", "modified", "path", "pri", "profile", "rel", "type"}
)
_RS_PREFIX = "{" + RS_NS + "}"
PATCH_REL = "http://www.openarchives.org/rs/terms/patch"

#: The IANA Link Relations registry (https://www.iana.org/assignments/link-relations/).
_IANA = """
    about acl alternate amphtml api-catalog appendix apple-touch-icon apple-touch-startup-image
    archives author blocked-by bookmark c2pa-manifest canonical chapter cite-as collection
    compression-dictionary contents convertedfrom copyright create-form current deprecation
    describedby describes disclosure dns-prefetch duplicate edit edit-form edit-media enclosure
    external first geofeed glossary help hosts hub ice-server icon index intervalafter
    intervalbefore intervalcontains intervaldisjoint intervalduring intervalequals
    intervalfinishedby intervalfinishes intervalin intervalmeets intervalmetby
    intervaloverlappedby intervaloverlaps intervalstartedby intervalstarts item last
    latest-version license linkset lrdd manifest mask-icon me media-feed memento micropub
    modulepreload monitor monitor-group next next-archive nofollow noopener noreferrer opener
    openid2.local_id openid2.provider original p3pv1 payment pingback preconnect
    predecessor-version prefetch preload prerender prev prev-archive preview previous
    privacy-policy profile publication related replies restconf ruleinput search section self
    service service-desc service-doc service-meta sip-trunking-rate sponsored start status
    stylesheet subsection successor-version sunset tag terms-of-service timegate timemap type
    ugc up version-history via webmention working-copy working-copy-of resourcesync shortcut
"""
IANA_RELATIONS = frozenset(_IANA.split())

# A well-formed hex digest of each known algorithm (anything else goes to check_hash_value).
_GOOD_DIGEST = {algo: re.compile(f"[0-9a-fA-F]{{{n}}}") for algo, n in HEX_LENGTH.items()}
_ABSOLUTE_HTTP = re.compile(r"(?i)https?://[^/?#\s]+(?:[/?#]\S*)?")
_URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S+")


def _fmt(t: datetime | None) -> str:
    return format_w3c(t) if t is not None else "-"


def problem_rule(message: str) -> str:
    """The rule id of a value problem the reader reported (by its wording, which it owns)."""
    if "has no time zone" in message:
        return "w3c-datetime-zone"
    if "is not W3C Datetime but reads unambiguously" in message:
        return "w3c-datetime-form"
    if message.startswith("more than one"):
        return "core-7-md-repeated"
    if "without <loc>" in message:
        return "sitemap-loc-missing"
    if "needs both rel and href" in message:
        return "core-7-ln-rel-href"
    if "> in a <" in message:
        return "sitemap-element"
    return "value-syntax"


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
                f"{self.what}: a gap from {_fmt(p_until)} (until of {p_name}) to "
                f"{_fmt(from_)} (from of {name}): changes in between are in no list",
                line,
                name,
            )
        elif from_ < p_until:
            self._report(
                "core-12.2-overlap",
                f"{self.what}: {name} starts at {_fmt(from_)}, before {p_name} ends at "
                f"{_fmt(p_until)} (consecutive lists must not overlap)",
                line,
                name,
            )


class DocumentChecker:
    """Checks one document as it streams: `start` with the header, `entry` per entry, `finish`."""

    def __init__(self, name: str, emit: Callable[[Finding], None]) -> None:
        self.name = name
        self._emit = emit
        self.errors = 0
        self.warnings = 0
        self.count = 0
        self._prev_time: datetime | None = None
        self._prev_line: int | None = None
        self._capabilities: dict[str, int] = {}
        self.doc = Document()
        self._times = (_O, _O, _O, _O)
        self._kind = ""
        self._seen: dict[object, int] | None = None
        self._by_change = False
        self._series: Series | None = None
        self._cap = ""
        #: Hash algorithms already said to be unchecked (once a document each).
        self._algorithms_said: set[str] = set()

    # -- reporting -------------------------------------------------------------------------

    def error(
        self, rule: str, message: str, line: int | None = None, entry: str | None = None
    ) -> None:
        self.errors += 1
        self._emit(Finding(ERROR, message, self.name, line, entry, rule))

    def warning(
        self, rule: str, message: str, line: int | None = None, entry: str | None = None
    ) -> None:
        self.warnings += 1
        self._emit(Finding(WARNING, message, self.name, line, entry, rule))

    def problem_handler(self) -> ProblemHandler:
        """For the reader: a value it could not decode is an error here."""

        def handle(message: str, line: int | None, entry: str | None) -> None:
            self.error(problem_rule(message), message, line, entry)

        return handle

    # -- the document ----------------------------------------------------------------------

    def start(self, reader: DocumentReader) -> None:
        doc = self.doc = reader.document
        md_line = reader.header_lines.get("md")
        line = md_line or 1
        cap = doc.capability
        kind = "sitemapindex" if doc.index else "urlset"
        self._kind = kind
        if md_line is None:
            self.error("core-7-md", f"the <{kind}> has no <rs:md> child (§7: it is mandatory)", 1)
            return
        if cap is None:
            self.error(
                "core-7-capability",
                "the document-level <rs:md> has no capability attribute (§7)",
                line,
            )
            return
        if cap not in CAPABILITIES:
            self.error("core-capability-unknown", f"unknown capability {cap!r}", line)
            return
        self._cap = cap
        if doc.index and cap in (
            "capabilitylist",
            "change-notification",
            "framework-notification",
            "resourcedump-manifest",
            "changedump-manifest",
        ):
            self.error("core-index-not-allowed", f"a {cap} is never a <sitemapindex>", line)
        times = _TIMES.get((cap, doc.index), (_O, _O, _O, _O))
        self._times = times
        self._check_times(
            doc.at, doc.completed, doc.from_, doc.until, times[0], times[1], line, None, "document"
        )
        if cap == "change-notification" and doc.until is None:
            self.error(
                "cn-3-until",
                "a change notification needs until on its <rs:md> (Change Notification §3)",
                line,
            )
        self._check_attributes(doc.md_extra, "rs:md", _MD_ATTRIBUTES, line, None)
        for ln in doc.links:
            self._check_links([ln], reader.header_lines.get(f"ln:{ln.rel}", line), None)
        ups = [ln for ln in doc.links if ln.rel == "up"]
        up_line = reader.header_lines.get("ln:up", line)
        if len(ups) > 1:
            self.error(
                "core-7-up-repeated",
                f'{len(ups)} document-level <rs:ln rel="up">: a document has one parent',
                up_line,
            )
        if not ups:
            parent = "Source Description" if cap == "capabilitylist" else "Capability List"
            section = {
                "capabilitylist": "§9.2",
                "resourcelist": "§10.1",
                "resourcedump": "§11.1",
                "resourcedump-manifest": "§11.2",
                "changelist": "§12.1",
                "changedump": "§13.1",
                "changedump-manifest": "§13.2",
            }.get(cap, "§7")
            if cap in _UP_MANDATORY:
                self.error(
                    "core-up-missing",
                    f'no <rs:ln rel="up"> to the {parent} (mandatory, {section})',
                    line,
                )
            elif cap in _UP_RECOMMENDED:
                self.warning(
                    "archives-up-missing",
                    f'no <rs:ln rel="up"> to the {parent} (Archives spec)',
                    line,
                )
        if (not doc.index and cap in _UNIQUE_LOC) or cap in _UNIQUE_CHANGE:
            self._seen = {}
            self._by_change = cap in _UNIQUE_CHANGE
        if doc.index and cap in ("changelist", "changedump"):
            self._series = Series(f"{cap} index", self._series_problem, False)
        elif cap in _ORDERED_BY_FROM:
            self._series = Series(cap, self._series_problem, False)

    def _series_problem(self, rule: str, message: str, line: int | None, loc: str | None) -> None:
        self.error(rule, message, line, loc)

    def _check_times(
        self,
        at: datetime | None,
        completed: datetime | None,
        from_: datetime | None,
        until: datetime | None,
        at_rule: str,
        from_rule: str,
        line: int | None,
        entry: str | None,
        where: str,
    ) -> None:
        cap = self.doc.capability
        what = f"{cap} index" if self.doc.index and where == "document" else cap
        for name, value, rule, companion, cvalue in (
            ("at", at, at_rule, "completed", completed),
            ("from", from_, from_rule, "until", until),
        ):
            if value is None:
                if rule == _M:
                    self.error(
                        "appendix-a-mandatory",
                        f"{where} <rs:md> needs {name} in a {what} (Appendix A)",
                        line,
                        entry,
                    )
                elif rule == _R:
                    self.warning(
                        "appendix-a-recommended",
                        f"{where} <rs:md> should have {name} in a {what} (Appendix A)",
                        line,
                        entry,
                    )
                if cvalue is not None and rule != _X:
                    self.error("core-7-time-companion", f"{companion} without {name}", line, entry)
            elif rule == _X:
                self.warning(
                    "appendix-a-not-used",
                    f"{name} is not used on the {where} of a {what} (Appendix A)",
                    line,
                    entry,
                )
            if value is None and cvalue is not None and rule == _X:
                self.warning(
                    "appendix-a-not-used",
                    f"{companion} is not used on the {where} of a {what} (Appendix A)",
                    line,
                    entry,
                )
            if value is not None and cvalue is not None and cvalue < value:
                self.error(
                    "core-7-time-order",
                    f"{companion} {_fmt(cvalue)} is before {name} {_fmt(value)}",
                    line,
                    entry,
                )

    def _check_attributes(
        self,
        extra: dict[str, str],
        element: str,
        defined: frozenset[str],
        line: int | None,
        entry: str | None,
    ) -> None:
        for key in extra:
            if key.startswith(_RS_PREFIX):
                name = key[len(_RS_PREFIX) :]
                self.error(
                    "core-7-attribute-prefixed",
                    f"attribute rs:{name} on {element}: the spec's attributes are unprefixed "
                    f"({name}=, not rs:{name}=)",
                    line,
                    entry,
                )
            elif not key.startswith("{") and key not in defined:
                self.error(
                    "core-7-attribute-unknown",
                    f"attribute {key!r} on {element} is not defined by the spec "
                    "(other attributes need their own namespace)",
                    line,
                    entry,
                )

    def _check_links(self, links: Sequence[Link], line: int | None, entry: str | None) -> None:
        for ln in links:
            if ln.pri is not None and not 1 <= ln.pri <= 999999:
                self.error(
                    "core-7-ln-pri", f"rs:ln pri {ln.pri} is outside 1..999999 (§14)", line, entry
                )
            if not urlsplit(ln.href).scheme:
                self.warning(
                    "core-7-ln-href", f"rs:ln href {ln.href!r} is not an absolute URI", line, entry
                )
            for rel in ln.rel.split():
                if rel not in IANA_RELATIONS and _URI_SCHEME.fullmatch(rel) is None:
                    self.error(
                        "core-7-ln-rel",
                        f"rs:ln rel {rel!r} is neither a registered link relation (IANA) nor a "
                        "URI (RFC 8288)",
                        line,
                        entry,
                    )
            if ln.rel == PATCH_REL and ln.type is None:
                self.error(
                    "core-patch-type",
                    "a patch link needs type: the media type of the change description",
                    line,
                    entry,
                )
            if ln.path is not None:
                self._check_path(ln.path, "rs:ln", line, entry)
            if ln.extra:
                self._check_attributes(ln.extra, "rs:ln", _LN_ATTRIBUTES, line, entry)
            if ln.hashes:
                self._check_hashes(ln.hashes, line, entry)

    def _check_path(self, path: str, element: str, line: int | None, entry: str | None) -> None:
        if not path.startswith("/"):
            self.error(
                "core-11.2-path", f"{element} path {path!r} must begin with / (§11.2)", line, entry
            )
        elif path.endswith("/"):
            self.error(
                "core-11.2-path",
                f"{element} path {path!r} must not end with / (a file, not a folder: XSD)",
                line,
                entry,
            )

    def _check_hashes(self, hashes: dict[str, str], line: int | None, entry: str | None) -> None:
        for algo, value in hashes.items():
            good = _GOOD_DIGEST.get(algo)
            if good is not None and good.fullmatch(value) is not None:
                continue  # the common case, in one step
            if algo not in ALGORITHMS:
                self._unknown_algorithm(algo, line, entry)
                continue
            problem = check_hash_value(algo, value)
            if problem is not None:
                self.warning("core-7-hash", f"hash {problem}", line, entry)

    def _unknown_algorithm(self, algo: str, line: int | None, entry: str | None) -> None:
        """A digest our Destination cannot check: the resources listed with it alone are
        synced by length, type and time, as if the list gave no digest. Said once a
        document for each algorithm (the Source's choice, not an entry's)."""
        if algo in self._algorithms_said:
            return
        self._algorithms_said.add(algo)
        if algo.lower() in ALGORITHMS:
            why = f"hash algorithm {algo!r} in upper case (the token is {algo.lower()!r})"
        else:
            why = (
                f"hash algorithm {algo!r} is not one Destinations check "
                f"({', '.join(ALGORITHMS)}): a resource listed with it alone is not verified"
            )
        self.warning("core-7-hash-algorithm", why, line, entry)

    # -- the entries -----------------------------------------------------------------------

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
            self._check_hashes(res.hashes, line, loc)
        if res.links:
            self._check_links(res.links, line, loc)
            ups = sum(1 for ln in res.links if ln.rel == "up")
            if ups > 1:
                self.error("core-7-up-repeated", f'{ups} <rs:ln rel="up"> on one entry', line, loc)
        if res.md_extra:
            self._check_attributes(res.md_extra, "rs:md", _MD_ATTRIBUTES, line, loc)
        if res.path is not None:
            self._check_path(res.path, "rs:md", line, loc)
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
                elif len(seen) < _DUPLICATE_WINDOW:
                    seen[loc] = line
        times = self._times
        if (
            times[2] == _R
            or times[3] == _R
            or res.at is not None
            or res.completed is not None
            or res.from_ is not None
            or res.until is not None
        ):
            self._check_times(
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
            self._duplicate(f"the same change of {loc} at {_fmt(when)}", first, line, loc)
        elif len(seen) < _DUPLICATE_WINDOW:
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
                f"change datetime {_fmt(t)} is before the document's from {_fmt(doc.from_)}",
                line,
                loc,
            )
        if doc.until is not None and t > doc.until:
            self.error(
                "core-7-datetime-range",
                f"change datetime {_fmt(t)} is after the document's until {_fmt(doc.until)}",
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
                f"{what} out of chronological order: {_fmt(t)} after {_fmt(prev)} "
                f"(line {self._prev_line})",
                line,
                loc,
            )
        self._prev_time = t
        self._prev_line = line

    def finish(self, reader: DocumentReader) -> None:
        for late in reader.late_header_lines:
            self.warning(
                "core-7-header-first",
                "document-level <rs:md>/<rs:ln> after the entries (put it first)",
                late,
            )
        if self.count > SITEMAP_MAX_ENTRIES:
            self.warning(
                "sitemap-max-entries",
                f"{self.count} entries: over the Sitemap limit of {SITEMAP_MAX_ENTRIES} "
                "(split it into an index, §7; duplicates were looked for among the first "
                f"{_DUPLICATE_WINDOW})",
            )
        size = reader._chunks.total
        if size > SITEMAP_MAX_BYTES:
            self.warning(
                "sitemap-max-bytes", f"{size} bytes: over the Sitemap limit of 50 MB (split it, §7)"
            )
