"""The rules within one document, checked as the entries stream past: the header's here,
the values' (wherever they are) in `values`, the entries' in `entries`.

Nothing is held per entry beyond the current one, except the `<loc>` values of the first
50,000 entries (the Sitemap limit) to find duplicates, and the capability names of a Capability
List. Section numbers refer to ResourceSync core 1.1 (Z39.99-2017), the Archives spec 0.9.1,
Change Notification 1.0.1 and Framework Notification 1.0.1.

Errors are breaches of a "must" (or of the XML Schema where the prose agrees); warnings are
missing "should"/recommended parts and values the spec does not define but a reader can live
with. Every finding carries a stable rule id.
"""

from __future__ import annotations

from collections.abc import Callable

from ...model import Document
from ..read import DocumentReader, ProblemHandler
from .entries import CAPABILITIES, DUPLICATE_WINDOW, SITEMAP_MAX_ENTRIES, EntryRules, Series
from .findings import Finding
from .values import MD_ATTRIBUTES, OPTIONAL, TIMES, Tally, ValueRules

__all__ = ["DocumentChecker", "Series", "problem_rule"]

SITEMAP_MAX_BYTES = 50 * 1024 * 1024

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


def problem_rule(message: str) -> str:
    """The rule id of a value problem the reader reported (by its wording, which it owns)."""
    if "has no time zone" in message:
        return "w3c-datetime-zone"
    if "is not W3C Datetime but reads unambiguously" in message:
        return "w3c-datetime-form"
    if message.startswith("more than one <") and not message.startswith("more than one <rs:"):
        return "sitemap-child-repeated"
    if message.startswith("more than one"):
        return "core-7-md-repeated"
    if "without <loc>" in message:
        return "sitemap-loc-missing"
    if "needs both rel and href" in message:
        return "core-7-ln-rel-href"
    if "> in a <" in message:
        return "sitemap-element"
    return "value-syntax"


class DocumentChecker:
    """Checks one document as it streams: `start` with the header, `entry` per entry, `finish`.
    The header's rules are here; the values' in `values.ValueRules`, the entries' in
    `entries.EntryRules` (whose `entry` this one's is)."""

    def __init__(self, name: str, emit: Callable[[Finding], None]) -> None:
        self.tally = Tally(name, emit)
        self.values = ValueRules(self.tally)
        self.entries = EntryRules(self.tally, self.values)
        #: One call per entry, straight to the entries' rules (the hot path).
        self.entry = self.entries.entry
        self.error = self.tally.error
        self.warning = self.tally.warning
        self.doc = Document()

    @property
    def name(self) -> str:
        return self.tally.name

    @name.setter
    def name(self, name: str) -> None:
        self.tally.name = name

    @property
    def errors(self) -> int:
        return self.tally.errors

    @property
    def warnings(self) -> int:
        return self.tally.warnings

    @property
    def count(self) -> int:
        """Entries checked."""
        return self.entries.count

    def problem_handler(self) -> ProblemHandler:
        """For the reader: a value it could not decode is an error here."""

        def handle(message: str, line: int | None, entry: str | None) -> None:
            self.error(problem_rule(message), message, line, entry)

        return handle

    # -- the document ----------------------------------------------------------------------

    def start(self, reader: DocumentReader) -> None:
        doc = self.doc = self.values.doc = reader.document
        md_line = reader.header_lines.get("md")
        line = md_line or 1
        cap = doc.capability
        kind = "sitemapindex" if doc.index else "urlset"
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
        if doc.index and cap in (
            "capabilitylist",
            "change-notification",
            "framework-notification",
            "resourcedump-manifest",
            "changedump-manifest",
        ):
            self.error("core-index-not-allowed", f"a {cap} is never a <sitemapindex>", line)
        times = TIMES.get((cap, doc.index), (OPTIONAL, OPTIONAL, OPTIONAL, OPTIONAL))
        self.values.times(
            doc.at, doc.completed, doc.from_, doc.until, times[0], times[1], line, None, "document"
        )
        if cap == "change-notification" and doc.until is None:
            self.error(
                "cn-3-until",
                "a change notification needs until on its <rs:md> (Change Notification §3)",
                line,
            )
        self.values.attributes(doc.md_extra, "rs:md", MD_ATTRIBUTES, line, None)
        for ln in doc.links:
            self.values.links([ln], reader.header_lines.get(f"ln:{ln.rel}", line), None)
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
        self.entries.begin(doc, cap, times)

    def finish(self, reader: DocumentReader) -> None:
        for late in reader.late_header_lines:
            self.warning(
                "core-7-header-first",
                "document-level <rs:md>/<rs:ln> after the entries (put it first)",
                late,
            )
        if self.entries.count > SITEMAP_MAX_ENTRIES:
            self.warning(
                "sitemap-max-entries",
                f"{self.entries.count} entries: over the Sitemap limit of {SITEMAP_MAX_ENTRIES} "
                "(split it into an index, §7; duplicates were looked for among the first "
                f"{DUPLICATE_WINDOW})",
            )
        size = reader.size
        if size > SITEMAP_MAX_BYTES:
            self.warning(
                "sitemap-max-bytes", f"{size} bytes: over the Sitemap limit of 50 MB (split it, §7)"
            )
