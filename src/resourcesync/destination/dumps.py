"""Dumps: baselines from Resource Dumps, increments from Change Dumps. Each package is
downloaded, checked against the dump's length and digest, and what its manifest lists is
extracted through the mirror. A member that cannot be used is fetched on its own instead.

An increment from Change Dumps (`changes_from_dumps`) plans exactly as one from Change Lists —
the manifests' entries are changes, the final state per URI wins — and takes the bytes of each
URI whose final state a package holds from that package; the changes after the last package
come from the Change Lists. The packages must reach back to the copy's cursor without a gap;
when they do not, the Change Lists are used instead.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import ReadError, ResourceSyncError
from ..hashing import ALGORITHMS, MultiHasher
from ..http import aiter_body, make_async_client, open_stream_async
from ..model import Resource
from ..sitemap import open_document, walk
from ..sitemap.follow import FOLLOW_INDEX
from ..w3cdt import format_w3c
from .discover import SetInfo
from .mirror import UnsafePath, Written
from .options import Run
from .plan import MAX_PARTS, Plan, Planner, expect, tell_warnings
from .report import SetReport
from .state import Cursor

#: The largest manifest read from a package (after decompression): about 1,000,000 entries.
MAX_MANIFEST = 512 * 1024**2

__all__ = ["baseline_from_dumps", "changes_from_dumps"]


def baseline_from_dumps(
    run: Run, planner: Planner, s: SetInfo, key: str, plan: Plan, report: SetReport
) -> datetime | None:
    """Apply the Resource Dump's packages; returns the dump's `at`."""
    url = s.url("resourcedump")
    assert url is not None
    report.via = "dumps"
    # A Resource Dump Index names Resource Dumps, whose entries are the packages (issue
    # 10.8): the index is followed, never its parts downloaded as if they were packages.
    packages: list[Resource] = []
    at: datetime | None = None
    for visit in walk(url, mode=FOLLOW_INDEX, client=run.client, max_documents=MAX_PARTS):
        doc = visit.reader.document
        expect(doc.capability, "resourcedump", visit.name)
        if at is None:
            at = doc.at or doc.completed
        for _, entry in visit.entries():
            if not doc.index:
                packages.append(entry)
    work = Path(tempfile.mkdtemp(prefix="dump-", dir=run.mirror.state_dir))
    try:
        for package in packages:
            _apply_package(run, package, key, plan, report, work)
    finally:
        for p in work.glob("*"):
            p.unlink(missing_ok=True)
        work.rmdir()
    planner.extras(key, plan)
    return at


def _apply_package(
    run: Run, package: Resource, key: str, plan: Plan, report: SetReport, work: Path
) -> None:
    """Download a package, check it, extract what its manifest lists to safe paths."""
    zpath = work / "package.zip"
    asyncio.run(_download(run, package, zpath))
    entries = _manifest(zpath, package, report)
    plan.seen([e.loc for e in entries])
    mirror = run.mirror
    for res, outcome in mirror.extract(zpath, entries):
        if isinstance(outcome, ResourceSyncError):
            # A member that cannot be used is fetched on its own instead (if its URI is
            # safe); the package's problem is reported, not counted as a failure twice.
            report.problem(res.loc, f"not taken from the package: {outcome.message}")
            try:
                mirror.path_for(res.loc)
            except UnsafePath as exc:
                report.refused += 1
                report.problem(res.loc, f"refused: {exc.message}")
                continue
            plan.add(res.loc, "fetch", res)
            continue
        _taken(run, res, outcome, key, report)


def _taken(run: Run, res: Resource, outcome: Written, key: str, report: SetReport) -> None:
    """A member extracted and verified: counted, and recorded in the copy's state."""
    report.fetched += 1
    report.bytes += outcome.length
    run.state.record(
        res.loc,
        run.mirror.relpath(res.loc),
        outcome.length,
        outcome.hashes,
        res.lastmod,
        None,
        None,
        key,
        res.links,
    )
    report.link(res.loc, res.links)


def _manifest(zpath: Path, package: Resource, report: SetReport | None) -> list[Resource]:
    """The entries of a downloaded package's manifest."""
    try:
        with zipfile.ZipFile(zpath) as zf:
            try:
                info = zf.getinfo("manifest.xml")
            except KeyError:
                raise ReadError("a dump package without manifest.xml", source=package.loc) from None
            # Read as a stream, capped after decompression: a deflate bomb stops at the cap
            # instead of inflating in memory (issue 17.4).
            with (
                zf.open(info) as member,
                open_document(
                    member, name=package.loc + "#manifest.xml", max_bytes=MAX_MANIFEST
                ) as reader,
            ):
                entries = list(reader)
                if report is not None:
                    tell_warnings(reader, report)
                return entries
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
        raise ReadError(f"not a readable ZIP package: {exc}", source=package.loc) from None


def packages_covering(
    client: Any, url: str, s: SetInfo, after: datetime
) -> tuple[list[Resource], str | None]:
    """The Change Dump packages (in order) holding every change after `after`, the Change
    Dump Archive included; ([], why) when they do not reach back to `after` or leave a gap
    between two packages (the Change Lists are used then)."""
    packages: dict[str, Resource] = {}
    archive: Any = None

    def collect(dump: str) -> None:
        nonlocal archive
        for visit in walk(dump, mode=FOLLOW_INDEX, client=client, max_documents=MAX_PARTS):
            doc = visit.reader.document
            expect(doc.capability, "changedump", visit.name)
            archive = archive or doc.link("archives")
            for _, entry in visit.entries():
                if not doc.index:
                    packages.setdefault(entry.loc, entry)

    collect(url)
    earliest = min((p.from_ for p in packages.values() if p.from_ is not None), default=None)
    if earliest is None or earliest > after:
        archive_url = archive.href if archive else s.url("changedump-archive")
        if archive_url:
            for visit in walk(archive_url, mode=FOLLOW_INDEX, client=client):
                expect(visit.reader.document.capability, "changedump-archive", visit.name)
                for _, dump in visit.entries():
                    if not visit.reader.document.index and (
                        dump.until is None or dump.until >= after
                    ):
                        collect(dump.loc)
    chosen = [p for p in packages.values() if p.until is None or p.until >= after]
    if not chosen:
        return [], None
    chosen.sort(key=lambda p: (p.from_ is None, p.from_ or after))
    first = chosen[0].from_
    if first is None or first > after:
        start = format_w3c(first) if first else "an unknown time"
        return [], f"its packages start at {start}, after this copy's {format_w3c(after)}"
    for one, two in itertools.pairwise(chosen):
        if one.until is not None and two.from_ is not None and one.until < two.from_:
            return [], f"{one.loc} ends at {format_w3c(one.until)}, the next package starts later"
    return chosen, None


def changes_from_dumps(
    run: Run, planner: Planner, s: SetInfo, key: str, plan: Plan, report: SetReport, cursor: Cursor
) -> Cursor | None:
    """Plan the changes after `cursor` from the Change Dump's packages (then the Change Lists
    after them) and extract from the packages the URIs whose final state they hold; returns
    the new cursor, or None when the packages do not cover the time since `cursor` (nothing
    done: the caller plans from the Change Lists)."""
    url = s.url("changedump")
    assert url is not None
    packages, why = packages_covering(run.client, url, s, cursor.datetime)
    if not packages:
        if why is not None:
            report.problem(url, f"Change Dump not used ({why}); Change Lists used")
        return None
    ends = [p.until for p in packages]
    end = None if None in ends else max(e for e in ends if e is not None)
    tail: list[str] = []
    cl = s.url("changelist")
    if end is not None and cl is not None:
        lists = planner.covering_lists(cl, s, Cursor(end), report)
        if lists is None:
            return cursor
        tail = lists
    report.via = "dumps"
    db = plan.db
    db.execute(
        "CREATE TEMP TABLE IF NOT EXISTS dumped (uri TEXT PRIMARY KEY, package TEXT, datetime TEXT)"
    )
    db.execute("DELETE FROM dumped")
    work = Path(tempfile.mkdtemp(prefix="dump-", dir=run.mirror.state_dir))
    try:

        def dumped() -> Iterator[Resource]:
            for n, package in enumerate(packages):
                zpath = work / f"package-{n:06d}.zip"
                asyncio.run(_download(run, package, zpath))
                for entry in _manifest(zpath, package, report):
                    when = entry.change_time
                    db.execute(
                        "INSERT OR REPLACE INTO dumped (uri, package, datetime) VALUES (?, ?, ?)",
                        (entry.loc, zpath.name, format_w3c(when) if when else None),
                    )
                    yield entry

        def later() -> Iterator[Resource]:
            # The Change Lists after the last package: what they list before it is in the
            # packages already.
            for entry in planner.entries(tail, report):
                if entry.datetime is None or end is None or entry.datetime >= end:
                    yield entry

        new_cursor = planner.changes(itertools.chain(dumped(), later()), plan, report, cursor)
        _extract_planned(run, plan, key, report, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return new_cursor


def _extract_planned(run: Run, plan: Plan, key: str, report: SetReport, work: Path) -> None:
    """Take from the packages the URIs whose final planned state is a package's member."""
    plan.flush()
    rows = plan.db.execute(
        "SELECT d.package, p.uri FROM plan p JOIN dumped d ON d.uri = p.uri "
        "WHERE p.action = 'fetch' AND p.datetime IS d.datetime ORDER BY d.package"
    ).fetchall()
    by_package: dict[str, set[str]] = {}
    for package, uri in rows:
        by_package.setdefault(package, set()).add(uri)
    mirror = run.mirror
    for package, uris in by_package.items():
        zpath = work / package
        last: dict[str, Resource] = {}
        for entry in _manifest(zpath, Resource(loc=str(zpath)), None):
            if entry.loc in uris:
                last[entry.loc] = entry  # a URI changed twice in one package: its last change
        for res, outcome in mirror.extract(zpath, last.values()):
            if isinstance(outcome, ResourceSyncError):
                # Fetched on its own instead: the plan still says fetch.
                report.problem(res.loc, f"not taken from the package: {outcome.message}")
                continue
            _taken(run, res, outcome, key, report)
            plan.keep(res.loc)


async def _download(run: Run, package: Resource, target: Path) -> None:
    async with (
        make_async_client(run.options.http) as client,
        open_stream_async(package.loc, client=client, declared=package.length) as response,
    ):
        size = 0
        algos = [a for a in package.hashes if a in ALGORITHMS]
        hasher = MultiHasher(algos[:1])
        with open(target, "wb") as f:
            async for chunk in aiter_body(response, package.loc):
                size += len(chunk)
                hasher.update(chunk)
                f.write(chunk)
    if package.length is not None and size != package.length:
        raise ReadError(
            f"package is {size} bytes, the dump says {package.length}",
            source=package.loc,
        )
    # The package's own digest, when the dump gives one (issue 10.15): a package altered on
    # the way is not unpacked.
    for algo, got in hasher.hexdigests().items():
        if got != package.hashes[algo]:
            raise ReadError(
                f"package {algo} is {got}, the dump says {package.hashes[algo]}",
                source=package.loc,
            )
