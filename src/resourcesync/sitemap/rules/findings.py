"""What the validator says: findings (level, stable rule id, message, where) and the report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ERROR", "RULES", "WARNING", "DocumentSummary", "Finding", "Report"]

ERROR = "error"
WARNING = "warning"

#: Every rule id a finding may carry, with what it checks. Ids are stable: scripts and CI filter
#: on them (`--json`). Sections: core 1.1 (core-), Appendix A, Archives 0.9.1, Change
#: Notification 1.0.1 (cn-), Framework Notification 1.0.1 (fn-), the Sitemap protocol, W3C
#: Datetime.
RULES: dict[str, str] = {
    "appendix-a-mandatory": "a time attribute Appendix A makes mandatory is missing",
    "appendix-a-recommended": "a time attribute Appendix A recommends is missing",
    "appendix-a-not-used": "a time attribute Appendix A does not use here",
    "archives-capability": "an archive lists a document of another capability",
    "archives-order": "an archive's entries are not in order of from",
    "archives-up-missing": "an archive has no up link to its Capability List",
    "cn-3-until": "a change notification has no until",
    "cn-5-hub": "a change-notification channel in a Capability List has no hub link",
    "core-7-attribute-prefixed": "an rs:-prefixed attribute on rs:md or rs:ln",
    "core-7-attribute-unknown": "an attribute the spec does not define, without a namespace",
    "core-7-capability": "the document-level rs:md has no capability",
    "core-7-datetime-range": "a change datetime outside the document's from..until",
    "core-7-hash": "a hash value that is not a digest of its algorithm",
    "core-7-hash-algorithm": "a hash algorithm Destinations cannot check (or not in lower case)",
    "core-7-header-first": "a document-level rs:md or rs:ln after the entries",
    "core-7-ln-href": "an rs:ln href that is not an absolute URI",
    "core-7-ln-pri": "an rs:ln pri outside 1..999999",
    "core-7-ln-rel": "an rs:ln rel neither registered (IANA) nor a URI",
    "core-7-ln-rel-href": "an rs:ln without rel or href",
    "core-7-loc-absolute": "a <loc> that is not an absolute URI",
    "core-7-md": "the root has no rs:md",
    "core-7-md-repeated": "more than one rs:md (document or entry)",
    "core-7-time-companion": "completed without at, or until without from",
    "core-7-time-order": "completed before at, or until before from",
    "core-7-up-repeated": 'more than one rel="up" link',
    "core-8-description-entry": "a Source Description lists something else than a Capability List",
    "core-9.2-capability": "a Capability List entry without a usable capability",
    "core-9.2-capability-claimed": "a document is not of the capability its listing claims",
    "core-9.2-capability-repeated": "a capability listed twice in a Capability List",
    "core-11.2-manifest-path": "a Resource Dump Manifest entry without path",
    "core-11.2-path": "a path that does not begin with / or ends with /",
    "core-12.1-change": "a change document entry without change",
    "core-12.1-change-order": "changes out of chronological order (by rs:md datetime)",
    "core-12.1-change-value": "a change value other than created, updated, deleted",
    "core-12.1-document-entry": "a document (capability set) listed as a change in a Change List",
    "core-12.2-gap": "a gap between consecutive Change Lists",
    "core-12.2-index-order": "Change List Index parts out of chronological order",
    "core-12.2-open-last": "an open Change List (no until) that is not the last",
    "core-12.2-overlap": "consecutive Change Lists overlap",
    "core-13.2-manifest-path": "a Change Dump Manifest entry (not deleted) without path",
    "core-capability-on-entry": "capability on an entry of a Resource List or manifest",
    "core-capability-unknown": "a capability value the specs do not define",
    "core-change-not-used": "change on an entry of a document that is not about changes",
    "core-dump-manifest-capability": 'a dump\'s rel="contents" is not its kind of manifest',
    "core-dump-manifest-copy": 'the manifest at rel="contents" differs from the package\'s',
    "core-dump-package-contents": 'a dump package without rel="contents" to its manifest',
    "core-dump-package-hash-mismatch": "a package's digest differs from the dump's",
    "core-dump-package-length": "a dump package without length",
    "core-dump-package-length-mismatch": "a package's length differs from the dump's",
    "core-dump-package-manifest": "a package without a (readable-size) manifest.xml",
    "core-dump-package-path": "a manifest lists a path the package does not hold",
    "core-dump-package-type": "a dump package without type",
    "core-dump-package-unreadable": "a package that could not be fetched or read",
    "core-duplicate-entry": "the same <loc> (or change) listed twice",
    "core-index-not-allowed": "a sitemapindex of a document that is never an index",
    "core-index-part-capability": "an index part of another capability than the index",
    "core-index-part-times": "at/completed/from/until on an index entry differ from the part's",
    "core-lastmod-omitted": "<lastmod> in a Source Description or Capability List",
    "core-patch-type": "a patch link without type",
    "core-up-missing": 'no rel="up" link where core 1.1 makes it mandatory',
    "core-up-target": "an up link that does not point at the document that lists it",
    "fn-4-capability": "a framework-notification entry without capability",
    "fn-4-capability-unknown": "a framework-notification entry with a capability of another spec",
    "fn-4-change": "a framework-notification entry without change",
    "follow": "a linked document that was not followed (loop, depth, not found locally)",
    "sitemap-changefreq": "a changefreq outside the Sitemap vocabulary",
    "sitemap-child-repeated": "a second <loc>, <lastmod>, <changefreq> or <priority> in an entry",
    "sitemap-element": "an element other than url/sitemap among the entries",
    "sitemap-loc-http": "a <loc> that is not http(s)",
    "sitemap-loc-missing": "an entry without <loc>",
    "sitemap-max-bytes": "a document over 50 MB",
    "sitemap-max-entries": "a document over 50,000 entries",
    "sitemap-priority": "a priority outside 0.0..1.0",
    "unreadable": "a document that cannot be read (missing, not XML, hostile, too big)",
    "value-syntax": "a value that cannot be decoded (datetime, integer, hash)",
    "w3c-datetime-form": "a datetime in a form near W3C Datetime (Destinations read it as meant)",
    "w3c-datetime-zone": "a datetime without a time zone (Destinations read it as UTC)",
}


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the validator has to say, with where it was found.

    `rule` is a stable identifier (e.g. `core-12.2-index-order`) for scripts and CI to filter
    on; the message may be reworded, the rule id is not.
    """

    level: str
    message: str
    source: str
    line: int | None = None
    entry: str | None = None
    rule: str = ""

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        text = f"{where}: {self.level}: {self.message}"
        return f"{text} (entry {self.entry})" if self.entry else text

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v != ""}


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
        import json  # (only for --json: not paid by every validation)

        return json.dumps(
            {
                "ok": self.ok,
                "documents": [asdict(d) for d in self.documents],
                "findings": [f.to_json() for f in self.findings],
                "unreadable": [f.to_json() for f in self.unreadable],
            }
        )
