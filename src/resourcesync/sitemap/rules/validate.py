"""`validate`: read targets (and, following, what they link down to), apply the rules."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ...errors import ReadError
from ..follow import FOLLOW_ALL, FOLLOW_NONE, Resolver, children, walk
from ..read import DEFAULT_MAX_BYTES, DocumentReader, ProblemHandler, Source
from .document import DocumentChecker
from .findings import ERROR, WARNING, DocumentSummary, Finding, Report

if TYPE_CHECKING:
    # Imported where documents are followed (start-up counts: issue 15.5).
    from .across import DocInfo, Listed

__all__ = ["FOLLOWED_BY_DEFAULT", "validate"]

#: Whether a Resource List's plain entries are checked without being decoded (off: every
#: entry decoded; for the tests that compare the two).
PLAIN = True
#: How many more entries not plain than plain before a document is decoded whole.
PLAIN_GIVE_UP = 100
#: Given one of these, `validate(follow=None)` follows the documents it lists.
FOLLOWED_BY_DEFAULT = frozenset({"description", "capabilitylist"})


def validate(
    targets: Source | Sequence[Source],
    *,
    follow: bool | None = False,
    packages: bool = False,
    resolver: Resolver | None = None,
    client: Any = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    on_finding: Callable[[Finding], None] | None = None,
    on_unreadable: Callable[[Finding], None] | None = None,
) -> Report:
    """Validate documents (and, with `follow`, what they link down to, each against the entry
    that listed it). `follow=None` follows from a Source Description or a Capability List and
    not from other documents. `packages` also fetches the packages of dumps and checks them
    against the dump (length, hash, manifest).

    Unreadable documents (missing, not XML, hostile) are recorded in `report.unreadable` and
    the others are still checked. `on_finding` hears each finding as it is made,
    `on_unreadable` each document that could not be read.
    """
    report = Report()
    resolver = resolver or Resolver()
    # One document, not the characters of its name (issue 14.15).
    one = isinstance(targets, str | bytes | bytearray | os.PathLike) or hasattr(targets, "read")
    listed: Sequence[Source] = [cast(Source, targets)] if one else cast(Sequence[Source], targets)
    for target in listed:
        _validate_one(
            target, report, on_finding, on_unreadable, follow, packages, resolver, client, max_bytes
        )
    return report


def _identity(reader: DocumentReader, resolver: Resolver, named: str | None) -> str | None:
    """The URL of a document: where it was fetched from, the URL it was listed under, or the
    URL a `--map URL=DIR` mapping gives its file."""
    if reader.url is not None:
        return reader.url
    if named is not None:
        return named
    if reader.path is not None:
        path = reader.path.resolve()
        for m in resolver.mappings:
            base = m.directory.resolve()
            if base in path.parents:
                return m.prefix.rstrip("/") + "/" + path.relative_to(base).as_posix()
    return None


def _validate_one(
    target: Source,
    report: Report,
    on_finding: Callable[[Finding], None] | None,
    on_unreadable: Callable[[Finding], None] | None,
    follow: bool | None,
    packages: bool,
    resolver: Resolver,
    client: Any,
    max_bytes: int,
) -> None:
    pending: list[DocumentChecker] = []
    docs: dict[str, DocInfo] = {}
    listed: list[Listed] = []
    named: dict[str, str] = {}  # the walk's name of a child → the URL it was listed under

    def emit(f: Finding) -> None:
        report.findings.append(f)
        if on_finding is not None:
            on_finding(f)

    def problem_for(name: str) -> ProblemHandler:
        checker = DocumentChecker(name, emit)
        pending[:] = [checker]
        return checker.problem_handler()

    def skipped(url: str, reason: str, referrer: str | None) -> None:
        emit(Finding(WARNING, f"not followed: {url}: {reason}", referrer or url, rule="follow"))

    def unreadable(exc: ReadError, referrer: str | None) -> None:
        f = Finding(ERROR, exc.message, exc.source or str(target), exc.line, rule="unreadable")
        report.unreadable.append(f)
        if on_unreadable is not None:
            on_unreadable(f)

    first = True
    for visit in walk(
        target,
        mode=FOLLOW_NONE if follow is False else FOLLOW_ALL,
        resolver=resolver,
        client=client,
        max_bytes=max_bytes,
        on_problem=problem_for,
        on_skip=skipped,
        on_error=unreadable,
    ):
        reader = visit.reader
        checker = pending[0]
        checker.name = reader.name
        if first and follow is None and reader.document.capability not in FOLLOWED_BY_DEFAULT:
            visit._mode = FOLLOW_NONE
        first = False
        following = visit._mode != FOLLOW_NONE
        doc = reader.document
        dump = packages and not doc.index and doc.capability in ("resourcedump", "changedump")
        if dump:
            # Only for a dump's packages (ZIP, temporary files): not paid by every validation.
            from .packages import check_package
        try:
            checker.start(reader)
            if PLAIN and checker.entries.plain_ok and not following and not dump:
                _plain_entries(reader, checker)
            position = 0
            for line, res in visit.entries():
                checker.entry(line, res)
                if dump:
                    check_package(reader, res, line, resolver, client, max_bytes, emit)
                if following:
                    for url in children(reader, res, visit._mode):
                        position += 1
                        _listed(listed, named, reader, resolver, url, line, position, res)
            checker.finish(reader)
        except ReadError as exc:
            unreadable(exc, visit.parent)
        up = doc.link("up")
        if following or visit.parent is not None:
            from .across import DocInfo

            docs[reader.name] = DocInfo(
                name=reader.name,
                url=_identity(reader, resolver, named.get(reader.name)),
                capability=doc.capability,
                index=doc.index,
                at=doc.at,
                completed=doc.completed,
                from_=doc.from_,
                until=doc.until,
                up=up.href if up is not None else None,
            )
        report.documents.append(
            DocumentSummary(
                source=reader.name,
                capability=doc.capability,
                index=doc.index,
                entries=checker.count,
                errors=checker.errors,
                warnings=checker.warnings,
            )
        )
    if listed:
        from .across import check_across

        check_across(docs, listed, emit)


def _plain_entries(reader: DocumentReader, checker: DocumentChecker) -> None:
    """The entries of a document whose plain entries need no `Resource` (a Resource List
    not followed): each plain one's `<loc>` checked as it stands, the others decoded and
    checked whole, in document order. The same findings as `checker.entry` on every entry
    (tests/sitemap/test_validate_plain.py compares them)."""
    plain, decode = reader.plain, reader.decode
    told, entry = checker.entries.plain, checker.entry
    # An entry looked at and then decoded costs both: a document whose entries are seldom
    # plain (every one with a <changefreq>, say) is decoded whole once the entries that were
    # not plain outnumber those that were by `PLAIN_GIVE_UP`.
    balance = 0
    for batch in reader.element_batches():
        for line, el in batch:
            if balance < PLAIN_GIVE_UP:
                loc = plain(el)
                if loc is not None and told(line, loc):
                    balance -= 1
                    continue
                balance += 1
            entry(line, decode(el, line))


def _listed(
    listed: list[Listed],
    named: dict[str, str],
    reader: DocumentReader,
    resolver: Resolver,
    url: str,
    line: int,
    position: int,
    res: Any,
) -> None:
    try:
        child = resolver.resolve(url, reader)
    except ReadError:
        return  # the walk reports it as not followed
    from .across import Listed

    key = str(child) if isinstance(child, str | Path) else url
    named.setdefault(key, url)
    via_contents = url != res.loc
    listed.append(
        Listed(
            parent=reader.name,
            child=key,
            loc=url,
            line=line,
            position=position,
            via_contents=via_contents,
            capability=res.capability,
            at=res.at,
            completed=res.completed,
            from_=res.from_,
            until=res.until,
        )
    )
