"""The rules of values, wherever a document gives them — on its own `<rs:md>` and `<rs:ln>`
and on each entry's: times (Appendix A), attributes, links, paths and digests. Section numbers
as in `document`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime
from urllib.parse import urlsplit

from ...hashing import ALGORITHMS, HEX_DIGEST, check_hash_value
from ...model import RS_NS, Document, Link
from ...w3cdt import format_w3c
from .findings import ERROR, WARNING, Finding

__all__ = [
    "IANA_RELATIONS",
    "MD_ATTRIBUTES",
    "OPTIONAL",
    "RECOMMENDED",
    "TIMES",
    "Tally",
    "ValueRules",
    "fmt",
]

# Appendix A (Table 4): use of `at` / `from` on the root (top) and on the entries (child).
# M mandatory, R recommended, O optional, X not used. Archives 0.9.1 §3–6 and Change
# Notification §3 complete the table for the document types it does not list.
_M, _R, _O, _X = "mandatory", "recommended", "optional", "not used"
OPTIONAL, RECOMMENDED = _O, _R
TIMES: dict[tuple[str, bool], tuple[str, str, str, str]] = {
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
# The attributes the XML Schema defines on rs:md and rs:ln (unqualified).
MD_ATTRIBUTES = frozenset(
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
LN_ATTRIBUTES = frozenset(
    {"encoding", "hash", "href", "length", "modified", "path", "pri", "profile", "rel", "type"}
)
RS_PREFIX = "{" + RS_NS + "}"
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
_GOOD_DIGEST = HEX_DIGEST
_URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S+")


def fmt(t: datetime | None) -> str:
    return format_w3c(t) if t is not None else "-"


class Tally:
    """Where one document's findings go (`emit`), counted."""

    def __init__(self, name: str, emit: Callable[[Finding], None]) -> None:
        self.name = name
        self._emit = emit
        self.errors = 0
        self.warnings = 0

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


class ValueRules:
    """The rules of values, for the document's header and for each entry alike."""

    def __init__(self, tally: Tally) -> None:
        self.error = tally.error
        self.warning = tally.warning
        #: The document (its capability and whether an index: the words of the findings).
        self.doc = Document()
        #: Hash algorithms already said to be unchecked (once a document each).
        self._algorithms_said: set[str] = set()

    def times(
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
                    f"{companion} {fmt(cvalue)} is before {name} {fmt(value)}",
                    line,
                    entry,
                )

    def attributes(
        self,
        extra: dict[str, str],
        element: str,
        defined: frozenset[str],
        line: int | None,
        entry: str | None,
    ) -> None:
        for key in extra:
            if key.startswith(RS_PREFIX):
                name = key[len(RS_PREFIX) :]
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

    def links(self, links: Sequence[Link], line: int | None, entry: str | None) -> None:
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
                self.path(ln.path, "rs:ln", line, entry)
            if ln.extra:
                self.attributes(ln.extra, "rs:ln", LN_ATTRIBUTES, line, entry)
            if ln.hashes:
                self.hashes(ln.hashes, line, entry)

    def path(self, path: str, element: str, line: int | None, entry: str | None) -> None:
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

    def hashes(self, hashes: dict[str, str], line: int | None, entry: str | None) -> None:
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
