"""Values as a document writes them, read: the datetimes, digests, lengths, link relations,
capabilities and change values of `rs:md` and `rs:ln`, and relative references — with the
bends a Destination reads through said once a document (`warn`) and everything the validator
must hear told to its handler (`problem`). The base of `decode.EntryDecoder`, which hands
each element's values here.

Tolerant in what a Destination reads, strict in what the validator is told: with a problem
handler (`on_problem`) every bent rule is reported to it; without one, a value that cannot be
read raises `FormatError` when it is the document's own and is read as not given (one warning a
document) when it is an entry's.
"""

from __future__ import annotations

import re
from typing import Any, Protocol
from urllib.parse import urljoin

from ..errors import FormatError
from ..hashing import ALGORITHMS, normalise_digest, parse_hashes
from ..model import CAPABILITIES, CHANGES
from ..units import ascii_int
from ..w3cdt import (
    ZONE_SPAN,
    W3CDatetimeError,
    coarseness,
    format_w3c,
    named_span,
    parse_bent,
    parse_w3c,
)

__all__ = ["SCHEME", "ProblemHandler", "ValueReader"]

#: A URI scheme (RFC 3986 §3.1): a reference that has one is not relative.
SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


class ProblemHandler(Protocol):
    """Where the validator hears of a problem (the message, its line and entry)."""

    def __call__(self, message: str, line: int | None, entry: str | None) -> None: ...


class ValueReader:
    """The values of one document (`name`), read as its decoder hands them over."""

    def __init__(self, name: str, on_problem: ProblemHandler | None, base_url: str | None) -> None:
        self.name = name
        self.on_problem = on_problem
        #: What relative references resolve against (the URL the document came from).
        self.base_url = base_url
        #: Rules this document bends that were read through: one line per kind.
        self.warnings: list[str] = []
        self._warned: set[str] = set()
        #: Reading an entry (not the document's own header).
        self.in_entry = False
        #: How far (seconds) the times read so far that place changes may be from the times
        #: meant: written without a zone (`ZONE_SPAN`), or naming a day (`coarseness`).
        self.slack = 0.0

    def problem(self, message: str, line: int | None, entry: str | None) -> None:
        if self.on_problem is None:
            raise FormatError(message, source=self.name, line=line, entry=entry)
        self.on_problem(message, line, entry)

    def _unread(self, message: str, line: int | None, entry: str | None) -> None:
        """A value of an entry that cannot be read (empty, as templates write what they lack;
        `12.0` for a length; a word for a priority). The validator's error. A Destination reads
        it as not given, said once a document: what it would have checked is checked by what
        else the entry gives, never taken for verified (one such value stopped the whole sync,
        on every run). In the document's own `rs:md` (its times, which the copy's cursor
        follows) it stays an error."""
        if self.on_problem is not None or not self.in_entry:
            self.problem(message, line, entry)
        else:
            self.warn(
                "unread",
                f"{message}: read as not given, and so may other values in this document",
                line,
            )

    def _datetime(self, text: str | None, what: str, line: int, loc: str | None) -> Any:
        if text is None:
            return None
        try:
            return parse_w3c(text.strip())
        except W3CDatetimeError as exc:
            bent = parse_bent(text)
            if bent is None:
                self._unread(f"{what}: {exc}", line, loc)
                return None
            # A form near W3C Datetime that leaves no doubt (CORE and RSEngine write times
            # without a zone, Python's str() a space for the T, Java and PHP `+0900`): read as
            # it means (tolerant in what we sync); an error for the validator, one warning per
            # document and kind otherwise.
            value, how = bent
            shown = text.strip()
            if how.startswith("no zone"):
                kind = "zoneless"
                self.slack = max(self.slack, ZONE_SPAN)
                message = (
                    f"{what}: {shown!r} has no time zone (W3C Datetime requires one; "
                    "Destinations read it as UTC)"
                )
            else:
                kind = "bent-datetime"
                message = (
                    f"{what}: {shown!r} is not W3C Datetime but reads unambiguously ({how}): "
                    f"Destinations read it as {format_w3c(value)}"
                )
            if self.on_problem is not None:
                self.problem(message, line, loc)
            else:
                self.warn(kind, f"{message}, and so may others in this document", line)
            return value

    def _when(self, text: str | None, what: str, line: int, loc: str | None) -> Any:
        """`_datetime` for a time that places changes (`at`, `completed`, `from`, `until`,
        `datetime`): one that names a day, a month or a year is read as its start in UTC
        (W3C Datetime allows it), and `slack` widened by what it leaves open (`coarse`)."""
        value = self._datetime(text, what, line, loc)
        if value is not None and text is not None and len(text) <= 12:
            self._coarse(text, what, line)
        return value

    def _coarse(self, text: str, what: str, line: int) -> None:
        """A time that places changes, written as a day, a month or a year
        (`2024-01-02`): `slack` takes what it leaves open, said once a document. Valid W3C
        Datetime: nothing for the validator."""
        open_ = coarseness(text)
        if not open_:
            return
        self.slack = max(self.slack, open_)
        if self.on_problem is None:
            shown = text.strip()
            self.warn(
                "coarse",
                f"{what}: {shown!r} names a {named_span(shown)}, not a time: read as its "
                "start in UTC, while what it dates may be at any time of it, in any zone; "
                "and so may others in this document",
                line,
            )

    def _rel(self, rel: str, line: int) -> str:
        """A relation type in another case or with spaces (`Duplicate`, `Contents`): RFC 8288
        §2.1.1 compares registered types without regard to case, so it is read in lower
        case, said once a document (the validator, which sees it as written, calls it an
        error). An extension type is a URI: kept as written."""
        read = rel.strip()
        if ":" not in read:
            read = read.lower()
        if read != rel:
            self.warn("rel-form", f"rs:ln rel {rel!r} read as {read!r}, and so may others", line)
        return read

    def _capability(self, value: str, line: int) -> str:
        """A `capability` value (`_one_of`): read as written, `ResourceList` named no Resource
        List, and a list saying so of itself was refused as another kind of document."""
        return self._one_of(value, CAPABILITIES, "capability", line)

    def _change(self, value: str, line: int) -> str:
        """A `change` value (`_one_of`): read as written, `Deleted` was fetched (a 404 on
        every run). Another word stays as written: the Destination applies none such and says
        so on every run."""
        return self._one_of(value, CHANGES, "change", line)

    def _one_of(self, value: str, known: frozenset[str], what: str, line: int) -> str:
        """An `rs:md` value of a closed set, in another case or with spaces (as templates write
        them): read as the value it means, said once a document (kind `{what}-form`); anything
        else stays as written. The validator sees it as written."""
        read = value.strip().lower()
        if self.on_problem is None and read != value and read in known:
            self.warn(
                f"{what}-form", f"rs:md {what} {value!r} read as {read!r}, and so may others", line
            )
            return read
        return value

    def bent(self, kind: str) -> bool:
        """Whether the document has bent the rule of `kind` so far (`warn`)."""
        return kind in self._warned

    def warn(self, kind: str, message: str, line: int | None) -> None:
        """A rule the document bends that we read through: said once per document and kind."""
        if kind not in self._warned:
            self._warned.add(kind)
            self.warnings.append(f"line {line}: {message}" if line else message)

    def _hashes(self, value: str, what: str, line: int, loc: str | None) -> dict[str, str]:
        try:
            hashes = parse_hashes(value)
        except ValueError as exc:
            self._unread(f"{what}: {exc}", line, loc)
            return {}
        if self.on_problem is None:
            # Digests in base64 (the 2014 Cornell simulator) compared as hex, and algorithm
            # tokens in upper case read in lower case, said once. A digest of an algorithm we
            # cannot compute is kept as read (`cat`, a republisher) and said once: a
            # Destination checks a resource it alone describes as one the list gives no digest
            # for (`hashing.checkable`). The validator sees them as written.
            read: dict[str, str] = {}
            for token, digest in hashes.items():
                algo = token if token in ALGORITHMS else token.lower()
                if algo not in ALGORITHMS:
                    self.warn(
                        "hash-unknown",
                        f"{what}: {token} digests (and any other algorithm's but "
                        f"{', '.join(ALGORITHMS)}) are not checked: the resources listed with "
                        "no other are checked by length, type and time",
                        line,
                    )
                    read.setdefault(token, digest)
                    continue
                if algo != token:
                    self.warn(
                        "hash-case", f"{what}: {token} read as {algo}, and so may others", line
                    )
                hexed = normalise_digest(algo, digest)
                if hexed is not None and hexed != digest:
                    if hexed.lower() != digest.lower():
                        self.warn(
                            "base64",
                            f"{what}: {algo} digests in base64, not hex; read as hex",
                            line,
                        )
                    digest = hexed
                read.setdefault(algo, digest)
            return read
        return hashes

    def _int(self, text: str, what: str, line: int, loc: str | None) -> int | None:
        value = ascii_int(text.strip())
        if value is None:
            shown = text if len(text) <= 40 else f"{text[:40]}…"
            self._unread(f"{what}: {shown!r} is not a non-negative integer", line, loc)
        return value

    def _resolved(self, ref: str, what: str, line: int | None) -> str:
        """A relative reference resolved against the document's URL (RFC 3986 §5), as a
        Destination needs it; the validator sees it as written and calls it an error."""
        if self.on_problem is not None or self.base_url is None or SCHEME.match(ref):
            return ref
        self.warn(f"relative-{what}", f"relative {what} values read against {self.base_url}", line)
        return urljoin(self.base_url, ref)
