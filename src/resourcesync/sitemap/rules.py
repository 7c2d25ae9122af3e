"""The specification's conformance rules, turned into findings with locations.

Checked as the entries stream past (nothing is held per entry beyond the current one, except
the capability names of a Capability List, which are few). Section numbers refer to ResourceSync
core 1.1 (Z39.99-2017), the Archives spec 0.9.1 and Change Notification 1.0.1.

Errors are breaches of a "must"; warnings are missing "should"/recommended parts and values the
spec does not define but a reader can live with.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from ..errors import ReadError
from ..hashing import check_hash_value
from ..model import (
    CHANGE_CAPABILITIES,
    Capability,
    Change,
    Document,
    Link,
    Resource,
)
from ..w3cdt import format_w3c
from .follow import FOLLOW_ALL, FOLLOW_NONE, Resolver, walk
from .read import DEFAULT_MAX_BYTES, DocumentReader, ProblemHandler, Source

__all__ = ["ERROR", "WARNING", "DocumentChecker", "Finding", "Report", "validate"]

ERROR = "error"
WARNING = "warning"

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
# Documents whose entries are ordered by their change time (or their `from` for archives).
_ORDERED_BY_FROM = frozenset({"changelist-archive", "changedump-archive"})
_UP_TO_CAPABILITYLIST = CAPABILITIES - {"description", "capabilitylist"}


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the validator has to say, with where it was found."""

    level: str
    message: str
    source: str
    line: int | None = None
    entry: str | None = None

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        text = f"{where}: {self.level}: {self.message}"
        return f"{text} (entry {self.entry})" if self.entry else text

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class DocumentSummary:
    """What was read of one document."""

    source: str
    capability: str | None
    index: bool
    entries: int
    errors: int = 0
    warnings: int = 0


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    documents: list[DocumentSummary] = field(default_factory=list)
    unreadable: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == WARNING]

    @property
    def ok(self) -> bool:
        return not self.errors and not self.unreadable

    def to_json(self) -> str:
        return json.dumps(
            {
                "ok": self.ok,
                "documents": [asdict(d) for d in self.documents],
                "findings": [f.to_json() for f in self.findings],
                "unreadable": [f.to_json() for f in self.unreadable],
            }
        )


def _fmt(t: datetime | None) -> str:
    return format_w3c(t) if t is not None else "-"


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

    # -- reporting -------------------------------------------------------------------------

    def error(self, message: str, line: int | None = None, entry: str | None = None) -> None:
        self.errors += 1
        self._emit(Finding(ERROR, message, self.name, line, entry))

    def warning(self, message: str, line: int | None = None, entry: str | None = None) -> None:
        self.warnings += 1
        self._emit(Finding(WARNING, message, self.name, line, entry))

    def problem_handler(self) -> ProblemHandler:
        """For the reader: a value it could not decode is an error here."""

        def handle(message: str, line: int | None, entry: str | None) -> None:
            self.error(message, line, entry)

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
            self.error(f"the <{kind}> has no <rs:md> child (§7: it is mandatory)", 1)
            return
        if cap is None:
            self.error("the document-level <rs:md> has no capability attribute (§7)", line)
            return
        if cap not in CAPABILITIES:
            self.error(f"unknown capability {cap!r}", line)
            return
        if doc.index and cap in (
            "capabilitylist",
            "change-notification",
            "resourcedump-manifest",
            "changedump-manifest",
        ):
            self.error(f"a {cap} is never a <sitemapindex>", line)
        times = _TIMES.get((cap, doc.index), (_O, _O, _O, _O))
        self._times = times
        self._check_times(
            doc.at, doc.completed, doc.from_, doc.until, times[0], times[1], line, None, "document"
        )
        self._check_links(doc.links, line, None)
        up = doc.link("up")
        if cap in _UP_TO_CAPABILITYLIST and up is None and cap != "change-notification":
            self.warning('no <rs:ln rel="up"> to the Capability List (recommended, §7)', line)
        if cap == "capabilitylist" and up is None:
            self.warning('no <rs:ln rel="up"> to the Source Description (recommended, §9.2)', line)

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
                        f"{where} <rs:md> needs {name} in a {what} (Appendix A)", line, entry
                    )
                elif rule == _R:
                    self.warning(
                        f"{where} <rs:md> should have {name} in a {what} (Appendix A)",
                        line,
                        entry,
                    )
                if cvalue is not None and rule != _X:
                    self.error(f"{companion} without {name}", line, entry)
            elif rule == _X:
                self.warning(
                    f"{name} is not used on the {where} of a {what} (Appendix A)", line, entry
                )
            if value is None and cvalue is not None and rule == _X:
                self.warning(
                    f"{companion} is not used on the {where} of a {what} (Appendix A)",
                    line,
                    entry,
                )
            if value is not None and cvalue is not None and cvalue < value:
                self.error(
                    f"{companion} {_fmt(cvalue)} is before {name} {_fmt(value)}", line, entry
                )

    def _check_links(self, links: Sequence[Link], line: int | None, entry: str | None) -> None:
        for ln in links:
            if ln.pri is not None and not 1 <= ln.pri <= 999999:
                self.error(f"rs:ln pri {ln.pri} is outside 1..999999 (§14)", line, entry)
            if not urlsplit(ln.href).scheme:
                self.warning(f"rs:ln href {ln.href!r} is not an absolute URI", line, entry)
            self._check_hashes(ln.hashes, line, entry)

    def _check_hashes(self, hashes: dict[str, str], line: int | None, entry: str | None) -> None:
        for algo, value in hashes.items():
            problem = check_hash_value(algo, value)
            if problem is not None:
                self.warning(f"hash {problem}", line, entry)

    # -- the entries -----------------------------------------------------------------------

    def entry(self, line: int, res: Resource) -> None:
        # Called once per entry: the common case (nothing to say) takes few steps.
        self.count += 1
        cap = self.doc.capability
        loc = res.loc or None
        if res.loc and _ABSOLUTE_HTTP.fullmatch(res.loc) is None:
            if urlsplit(res.loc).scheme:
                self.warning(f"<loc> {res.loc!r} is not an http(s) URI", line, loc)
            else:
                self.error(f"<loc> {res.loc!r} is not an absolute URI (§7)", line, loc)
        if res.changefreq is not None and res.changefreq not in CHANGEFREQS:
            self.warning(f"changefreq {res.changefreq!r} is not a Sitemap value", line, loc)
        if res.priority is not None and not 0.0 <= res.priority <= 1.0:
            self.warning(f"priority {res.priority} is outside 0.0..1.0", line, loc)
        if res.hashes:
            self._check_hashes(res.hashes, line, loc)
        if res.links:
            self._check_links(res.links, line, loc)
        if cap is None or cap not in CAPABILITIES:
            return
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
            self._ordered(res.from_, line, loc, "parts of a change index", warn=True)
            if res.capability is not None and res.capability != cap:
                self.error(
                    f"an index of a {cap} lists a part with capability {res.capability!r}",
                    line,
                    loc,
                )
            return
        if cap == "capabilitylist":
            self._capability_entry(line, res, loc)
        elif cap == "description":
            if res.capability != "capabilitylist":
                self.error(
                    'a Source Description entry needs rs:md capability="capabilitylist" '
                    f"(§8), found {res.capability!r}",
                    line,
                    loc,
                )
        elif cap in CHANGE_CAPABILITIES:
            self._change_entry(line, res, loc)
        elif cap == "framework-notification":
            # Framework Notification 1.0.1 §4: each entry's rs:md has change and capability
            # (the document that changed and what it is).
            if res.change is None:
                self.error("a framework-notification entry needs rs:md change (§4)", line, loc)
            elif res.change not in CHANGES:
                self.error(f"change {res.change!r} is not created, updated or deleted", line, loc)
            if res.capability is None:
                self.error("a framework-notification entry needs rs:md capability (§4)", line, loc)
        elif cap in _ORDERED_BY_FROM:
            self._ordered(res.from_, line, loc, "Change Lists in an archive")
        elif res.change is not None:
            self.warning(f"change is not used in a {cap}", line, loc)
        if cap == "resourcedump-manifest" and res.path is None:
            self.error("a Resource Dump Manifest entry needs rs:md path (§11.2)", line, loc)
        if cap in ("resourcedump", "changedump"):
            if res.type is None:
                self.warning(f"a {cap} package should give its type (application/zip)", line, loc)
            if res.length is None:
                self.warning(f"a {cap} package should give its length", line, loc)
            if res.link("contents") is None:
                self.warning(
                    f'a {cap} package should link its manifest with rel="contents"', line, loc
                )
        if res.path is not None and not res.path.startswith("/"):
            self.error(f"rs:md path {res.path!r} must begin with / (§11.2)", line, loc)
        if cap in ("resourcelist", "resourcedump-manifest") and res.capability is not None:
            self.warning(f"capability on an entry of a {cap}", line, loc)

    def _capability_entry(self, line: int, res: Resource, loc: str | None) -> None:
        c = res.capability
        if c is None:
            self.error("a Capability List entry needs rs:md capability (§9.2)", line, loc)
            return
        if c not in CAPABILITIES:
            self.error(f"unknown capability {c!r} in a Capability List", line, loc)
            return
        if c in ("description", "capabilitylist"):
            self.error(f"a Capability List does not list a {c} (§9.2)", line, loc)
        if c in self._capabilities:
            self.error(
                f"capability {c!r} is listed twice (first on line {self._capabilities[c]}); "
                "a Capability List has one entry per capability (§9.2)",
                line,
                loc,
            )
        else:
            self._capabilities[c] = line
        if c == "change-notification" and res.link("hub") is None:
            self.error(
                'a change-notification channel needs <rs:ln rel="hub"> (Change Notification §5)',
                line,
                loc,
            )

    def _change_entry(self, line: int, res: Resource, loc: str | None) -> None:
        cap = self.doc.capability
        if res.change is None:
            self.error(f"a {cap} entry needs rs:md change (§12.1)", line, loc)
        elif res.change not in CHANGES:
            self.error(f"change {res.change!r} is not created, updated or deleted", line, loc)
        if cap == "changedump-manifest" and res.path is None and res.change != "deleted":
            self.error("a Change Dump Manifest entry needs rs:md path (§13.2)", line, loc)
        t = res.change_time
        self._ordered(t, line, loc, "changes")
        if t is None:
            return
        doc = self.doc
        if res.datetime is not None:
            # §7: datetime is within [from, until] of the document.
            if doc.from_ is not None and t < doc.from_:
                self.error(
                    f"change datetime {_fmt(t)} is before the document's from {_fmt(doc.from_)}",
                    line,
                    loc,
                )
            if doc.until is not None and t > doc.until:
                self.error(
                    f"change datetime {_fmt(t)} is after the document's until {_fmt(doc.until)}",
                    line,
                    loc,
                )

    def _ordered(
        self, t: datetime | None, line: int, loc: str | None, what: str, warn: bool = False
    ) -> None:
        if t is None:
            return
        prev = self._prev_time
        if prev is not None and t < prev:
            message = (
                f"{what} out of chronological order: {_fmt(t)} after {_fmt(prev)} "
                f"(line {self._prev_line})"
            )
            (self.warning if warn else self.error)(message, line, loc)
        self._prev_time = t
        self._prev_line = line

    def finish(self, reader: DocumentReader) -> None:
        for late in reader.late_header_lines:
            self.warning("document-level <rs:md>/<rs:ln> after the entries (put it first)", late)
        if self.count > SITEMAP_MAX_ENTRIES:
            self.warning(
                f"{self.count} entries: over the Sitemap limit of {SITEMAP_MAX_ENTRIES} "
                "(split it into an index, §7)"
            )
        size = reader._chunks.total
        if size > SITEMAP_MAX_BYTES:
            self.warning(f"{size} bytes: over the Sitemap limit of 50 MB (split it, §7)")


_ABSOLUTE_HTTP = re.compile(r"(?i)https?://[^/?#\s]+(?:[/?#]\S*)?")


def _absolute(uri: str) -> bool:
    """An absolute http(s) URI with a host, without white space (checked per entry: fast)."""
    return _ABSOLUTE_HTTP.fullmatch(uri) is not None


def validate(
    targets: Sequence[Source],
    *,
    follow: bool = False,
    resolver: Resolver | None = None,
    client: Any = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    on_finding: Callable[[Finding], None] | None = None,
    on_unreadable: Callable[[Finding], None] | None = None,
) -> Report:
    """Validate documents (and, with `follow`, what they link down to).

    Unreadable documents (missing, not XML, hostile) are recorded in `report.unreadable` and
    the others are still checked. `on_finding` hears each finding as it is made,
    `on_unreadable` each document that could not be read.
    """
    report = Report()

    for target in targets:
        _validate_one(
            target, report, on_finding, on_unreadable, follow, resolver, client, max_bytes
        )
    return report


def _validate_one(
    target: Source,
    report: Report,
    on_finding: Callable[[Finding], None] | None,
    on_unreadable: Callable[[Finding], None] | None,
    follow: bool,
    resolver: Resolver | None,
    client: Any,
    max_bytes: int,
) -> None:
    pending: list[DocumentChecker] = []

    def emit(f: Finding) -> None:
        report.findings.append(f)
        if on_finding is not None:
            on_finding(f)

    def problem_for(name: str) -> ProblemHandler:
        checker = DocumentChecker(name, emit)
        pending[:] = [checker]
        return checker.problem_handler()

    def skipped(url: str, reason: str, referrer: str | None) -> None:
        emit(Finding(WARNING, f"not followed: {url}: {reason}", referrer or url))

    def unreadable(exc: ReadError, referrer: str | None) -> None:
        f = Finding(ERROR, exc.message, exc.source or str(target), exc.line)
        report.unreadable.append(f)
        if on_unreadable is not None:
            on_unreadable(f)

    for visit in walk(
        target,
        mode=FOLLOW_ALL if follow else FOLLOW_NONE,
        resolver=resolver,
        client=client,
        max_bytes=max_bytes,
        on_problem=problem_for,
        on_skip=skipped,
        on_error=unreadable,
    ):
        checker = pending[0]
        checker.name = visit.reader.name
        try:
            checker.start(visit.reader)
            for line, res in visit.entries():
                checker.entry(line, res)
            checker.finish(visit.reader)
        except ReadError as exc:
            unreadable(exc, visit.parent)
        report.documents.append(
            DocumentSummary(
                source=visit.reader.name,
                capability=visit.reader.document.capability,
                index=visit.reader.document.index,
                entries=checker.count,
                errors=checker.errors,
                warnings=checker.warnings,
            )
        )
