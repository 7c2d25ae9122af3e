"""Dumps: the bytes of a baseline from the Resource Dump's packages, of an increment from the
Change Dump's. Each package is downloaded and checked against the dump's length and digest.

The lists say what the copy must hold; the packages only carry bytes. With a Resource List (a
baseline) or a Change List (an increment), the run is planned from the lists as without dumps,
and each planned fetch that a package holds — the same URI, described alike by the package's
manifest and by the list — is extracted from the package and verified against what the LIST
says; everything else is fetched on its own. A Source whose dump and lists disagree (a package
made while files changed, a dump that lags) so never puts in the copy what its lists do not
describe. Only a set without lists is planned from the dumps' manifests (`baseline_from_dumps`,
`changes_from_dumps`).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import ReadError, ResourceSyncError
from ..hashing import MultiHasher, checkable
from ..http import Bandwidth, HttpOptions
from ..http.transfer import TransferSession, run_loop
from ..iri import normal_uri
from ..model import Change, Resource
from ..sitemap import open_document, walk
from ..sitemap.follow import FOLLOW_INDEX, earliest_at
from ..w3cdt import format_w3c, seconds_before
from .answer import NO_CACHE, cached_before
from .changeplan import ChangePlanner, InOrder
from .discover import SetInfo
from .mirror import UnsafePath, Written
from .options import Run
from .plan import (
    MAX_PARTS,
    Plan,
    Planner,
    Relisted,
    expect,
    same,
    tell_warnings,
    tombstones,
)
from .report import SetReport
from .state import Cursor, change_of, keep_links
from .unpack import extract

#: The largest manifest read from a package (after decompression): about 1,000,000 entries.
MAX_MANIFEST = 512 * 1024**2

__all__ = [
    "baseline_from_dumps",
    "change_packages",
    "changes_from_dumps",
    "fill_from_dumps",
    "resource_packages",
]


def resource_packages(
    run: Run, s: SetInfo, loose: Callable[[str, float], None] | None = None
) -> tuple[list[Resource], datetime | None]:
    """The Resource Dump's packages (through its index) and its `at`; `loose` is told when
    its times may be far from those meant (as `_manifest` tells it)."""
    return _resource_packages(run.client, s, loose)


def _resource_packages(
    client: Any, s: SetInfo, loose: Callable[[str, float], None] | None = None
) -> tuple[list[Resource], datetime | None]:
    # A Resource Dump Index names Resource Dumps, whose entries are the packages (issue
    # 10.8): the index is followed, never its parts downloaded as if they were packages.
    packages: list[Resource] = []
    at: datetime | None = None
    url = s.url("resourcedump")
    assert url is not None
    also = s.more("resourcedump")
    for visit in walk(url, mode=FOLLOW_INDEX, client=client, max_documents=MAX_PARTS, also=also):
        doc = visit.reader.document
        expect(doc.capability, "resourcedump", visit.name)
        at = earliest_at(at, visit)
        own = doc.at or doc.completed or at
        for _, entry in visit.entries():
            if not doc.index:
                if entry.at is None:
                    entry.at = own  # its contents as of the dump's `at`, unless it says
                packages.append(entry)
        if loose is not None and visit.reader.slack:
            loose(visit.name, visit.reader.slack)
    return packages, at


def fill_from_dumps(
    run: Run, plan: Plan, key: str, report: SetReport, packages: list[Resource], *, strict: bool
) -> None:
    """Take from `packages` the planned fetches they hold as the plan describes them (see the
    module's doc). A package that cannot be used stops the run when `strict` (`--via dumps`),
    else is reported and its resources fetched on their own."""
    plan.flush()
    work = Path(tempfile.mkdtemp(prefix="dump-", dir=run.mirror.state_dir))
    try:
        for n, package in enumerate(packages):
            if plan.count("fetch") == 0:
                return
            try:
                _fill_one(run, plan, key, report, package, work / f"package-{n:06d}.zip")
            except ResourceSyncError as exc:
                if strict:
                    raise
                report.problem(
                    package.loc, f"dump not usable ({exc}); its resources fetched on their own"
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _fill_one(
    run: Run, plan: Plan, key: str, report: SetReport, package: Resource, zpath: Path
) -> None:
    manifest = _contents(run, package)
    if manifest is not None and not _wanted(plan, manifest):
        return  # its manifest, read on its own, says it holds nothing planned
    run_loop(_download(run, package, zpath))
    try:
        wanted = _wanted(plan, _manifest(zpath, package, report))
        for res, outcome in extract(run.mirror, zpath, wanted):
            if isinstance(outcome, ResourceSyncError):
                # Fetched on its own instead: the plan still says fetch.
                report.problem(res.loc, f"not taken from the package: {outcome.message}")
                continue
            report.via = "dumps"
            _taken(run, res, outcome, key, report)
            plan.keep(res.loc)
    finally:
        zpath.unlink(missing_ok=True)


def _contents(run: Run, package: Resource) -> list[Resource] | None:
    """The package's manifest from its `rel="contents"` link, to decide whether the package is
    worth downloading; None when there is none or it cannot be read."""
    link = package.link("contents")
    if link is None:
        return None
    try:
        with open_document(link.href, client=run.client, max_bytes=MAX_MANIFEST) as reader:
            return list(reader)
    except ResourceSyncError:
        return None


def _wanted(plan: Plan, manifest: list[Resource]) -> list[Resource]:
    """The manifest's members that are planned fetches described alike by the plan, each as
    the PLAN describes it (what the extraction verifies), with the member's path."""
    last: dict[str, Resource] = {}
    for entry in manifest:
        if entry.path is None or entry.change == Change.DELETED:
            continue
        planned = plan.planned(entry.loc, "fetch")
        if planned is not None and _alike(planned, entry):
            planned.path = entry.path
            last[entry.loc] = planned
    return list(last.values())


def _alike(planned: Resource, member: Resource) -> bool:
    """Whether a manifest's member is the bytes the plan wants: the same digest (every
    algorithm both give) and length; without a digest in the plan, the same length and time."""
    if planned.length is not None and member.length is not None and planned.length != member.length:
        return False
    common = [a for a in planned.hashes if a in member.hashes]
    if planned.hashes:
        return bool(common) and all(planned.hashes[a] == member.hashes[a] for a in common)
    return (
        planned.length is not None
        and member.length == planned.length
        and planned.change_time is not None
        and planned.change_time == member.change_time
    )


def change_packages(run: Run, s: SetInfo, after: datetime) -> list[Resource]:
    """The Change Dump's packages that may hold changes after `after` (the Change Dump
    Archive's too when the live Change Dump does not reach back), earliest first."""
    url = s.url("changedump")
    assert url is not None
    return _change_dump_packages(run.client, url, s, after)[0]


def baseline_from_dumps(
    run: Run, planner: Planner, s: SetInfo, key: str, plan: Plan, report: SetReport
) -> datetime | None:
    """A set with a Resource Dump and no Resource List: apply the dump's packages as their
    manifests list; returns the dump's `at`."""
    report.via = "dumps"
    packages, at = resource_packages(run, s, planner.loose)
    work = Path(tempfile.mkdtemp(prefix="dump-", dir=run.mirror.state_dir))
    try:
        for package in packages:
            _apply_package(run, package, key, plan, report, work, planner)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    planner.extras(key, plan)
    return at


def _apply_package(
    run: Run,
    package: Resource,
    key: str,
    plan: Plan,
    report: SetReport,
    work: Path,
    planner: Planner,
) -> None:
    """Download a package, check it, extract what its manifest lists to safe paths — but
    what the copy holds as the manifest describes it (a dump-only Source is followed by taking
    its dump again on every run: what did not change is not written again)."""
    zpath = work / "package.zip"
    run_loop(_download(run, package, zpath))
    entries = _manifest(zpath, package, report)
    # A tombstone (a Source that keeps its deleted resources in its manifest, as in its
    # Resource List: `Planner._baseline`) is not the Source's: not listed, not extracted.
    gone = sum(1 for e in entries if e.change == "deleted")
    if gone:
        entries = [e for e in entries if e.change != "deleted"]
        report.problem(package.loc, tombstones(gone))
    # A URI listed again (under any spelling, RFC 3986 §6.2.2), in this manifest or an
    # earlier package's: its last entry is taken (as `audit` takes it), in the order of the
    # last entries.
    relisted = Relisted("Resource Dump")
    last: dict[str, Resource] = {}
    for e in entries:
        normal = normal_uri(e.loc)
        if last.pop(normal, None) is not None:
            relisted.add(e.loc)
        last[normal] = e
    entries = list(last.values())
    for uri in plan.seen_again([e.loc for e in entries]):
        relisted.add(uri)
    relisted.tell(package.loc, report)
    mirror = run.mirror
    wanted = []
    for res in entries:
        try:
            path = mirror.location(res.loc)
        except UnsafePath:
            path = None  # refused as the package is extracted
        # Its local file, as a Resource List's entry claims it: another spelling of a URI the
        # copy holds takes its record over (else it was "not listed": deleted after it was
        # written); a URI whose file another holds is refused and said.
        if path is not None and not planner.claim(res.loc, plan, report, path, res=res):
            continue
        if path is not None and _held(run, planner, res, path):
            report.unchanged += 1
        else:
            wanted.append(res)
    for res, outcome in extract(mirror, zpath, wanted):
        if isinstance(outcome, ResourceSyncError):
            # A member that cannot be used is fetched on its own instead (if its URI is
            # safe); the package's problem is reported, not counted as a failure twice.
            report.problem(res.loc, f"not taken from the package: {outcome.message}")
            try:
                mirror.path_for(res.loc)
            except UnsafePath as exc:
                report.refuse(res.loc, exc)
                continue
            plan.add(res.loc, "fetch", res)
            continue
        _taken(run, res, outcome, key, report)


def _held(run: Run, planner: Planner, res: Resource, path: str) -> bool:
    """Whether the copy holds `res` as a manifest entry describes it, its file (at `path`)
    intact (as a baseline from the lists tells an unchanged resource); its links taken as
    given now."""
    known = run.state.known(res.loc)
    if known is None or not same(known.hashes, known.length, res, known.lastmod):
        return False
    if not planner.intact(res.loc, path, known, res):
        return False
    keep_links(run.state, known, res)
    return True


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
        changed=change_of(res),
    )
    run.mirror.recorded()
    report.link(res.loc, res.links)


def _manifest(
    zpath: Path,
    package: Resource,
    report: SetReport | None,
    loose: Callable[[str, float], None] | None = None,
) -> list[Resource]:
    """The entries of a downloaded package's manifest; `loose` is told (its name, seconds)
    when its times may be far from those meant (`DocumentReader.slack`)."""
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
                if loose is not None and reader.slack:
                    loose(reader.name, reader.slack)
                return entries
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
        raise ReadError(f"not a readable ZIP package: {exc}", source=package.loc) from None


def _change_dump_packages(
    client: Any, url: str, s: SetInfo, after: datetime, slack: float = 0.0
) -> tuple[list[Resource], float]:
    """The Change Dump's packages that may hold changes after `after`, earliest first, and how
    far (seconds) the times read may be from those meant (`slack`: the cursor's, and the
    dumps' — without a zone, or a day: a package that ends within it may hold changes after
    `after`); the Change Dump Archive is read when the live Change Dump does not reach back."""
    packages: dict[str, Resource] = {}
    archive: Any = None

    def collect(dump: str) -> None:
        nonlocal archive, slack
        for visit in walk(dump, mode=FOLLOW_INDEX, client=client, max_documents=MAX_PARTS):
            doc = visit.reader.document
            expect(doc.capability, "changedump", visit.name)
            archive = archive or doc.link("archives")
            for _, entry in visit.entries():
                if not doc.index:
                    packages.setdefault(entry.loc, entry)
            slack = max(slack, visit.reader.slack)

    collect(url)
    for more in s.more("changedump"):
        collect(more)
    earliest = min((p.from_ for p in packages.values() if p.from_ is not None), default=None)
    if earliest is None or earliest > after:
        archive_url = archive.href if archive else s.url("changedump-archive")
        also = () if archive else s.more("changedump-archive")
        if archive_url:
            for visit in walk(archive_url, mode=FOLLOW_INDEX, client=client, also=also):
                expect(visit.reader.document.capability, "changedump-archive", visit.name)
                slack = max(slack, visit.reader.slack)
                back = seconds_before(after, slack)
                for _, dump in visit.entries():
                    if not visit.reader.document.index and (
                        dump.until is None or dump.until >= back
                    ):
                        collect(dump.loc)
    back = seconds_before(after, slack)
    chosen = [p for p in packages.values() if p.until is None or p.until >= back]
    chosen.sort(key=lambda p: (p.from_ is None, p.from_ or after))
    return chosen, slack


def _gap(packages: list[Resource], after: datetime, slack: float = 0.0) -> str | None:
    """Why `packages` do not hold every change after `after`, if they do not (`slack`: how far
    their times and `after` may be from those meant, as `lists_covering` gives lists)."""
    if not packages:
        return None
    first = packages[0].from_
    if first is None or seconds_before(first, slack) > after:
        start = format_w3c(first) if first else "an unknown time"
        return (
            f"the Change Dump's packages start at {start}; this copy is at {format_w3c(after)}: "
            "the changes between are not listed (run with --baseline)"
        )
    for one, two in itertools.pairwise(packages):
        if one.until is not None and two.from_ is not None and one.until < two.from_:
            return (
                f"the package {one.loc} ends at {format_w3c(one.until)} but the next one starts "
                f"at {format_w3c(two.from_)}: the changes between are not listed "
                "(run with --baseline)"
            )
    return None


def dumped_resources(
    client: Any,
    http: HttpOptions,
    s: SetInfo,
    work: Path,
    loose: Callable[[str, float], None] | None = None,
) -> tuple[datetime | None, Iterator[Resource]]:
    """The set's Resource Dump's `at` and the resources its packages' manifests list: what `audit`
    expects of a Source that publishes its state only so. A package's manifest is read from
    its `rel="contents"` link when it gives one (nothing downloaded); else, or when that
    cannot be read, the package is downloaded into `work`, verified against the dump, read and
    removed. `loose`: as for `resource_packages`."""
    packages, at = _resource_packages(client, s, loose)

    def entries() -> Iterator[Resource]:
        for package in packages:
            link = package.link("contents")
            if link is not None:
                try:
                    with open_document(link.href, client=client, max_bytes=MAX_MANIFEST) as reader:
                        expect(reader.document.capability, "resourcedump-manifest", link.href)
                        yield from reader
                    continue
                except ResourceSyncError:
                    pass  # the package itself says
            zpath = work / "package.zip"
            run_loop(_download_with(http, None, package, zpath))
            yield from _manifest(zpath, package, None)
            zpath.unlink()

    return at, entries()


def dumped_changes(
    client: Any,
    http: HttpOptions,
    url: str,
    s: SetInfo,
    after: datetime,
    work: Path,
    slack: float = 0.0,
    loose: Callable[[str, float], None] | None = None,
) -> Iterator[Resource]:
    """The changes the Change Dump's manifests list after `after`, in the order listed
    (`InOrder`): what `audit` expects of a Source that lists its changes only so. Each package
    is downloaded into `work`, verified against the dump, read and removed; ReadError when the
    packages do not reach back to `after`. `slack`, `loose`: how far the times read so far may
    be from those meant, and what is told when the dumps' are (as `change_entries`)."""
    packages, found = _change_dump_packages(client, url, s, after, slack)
    gap = _gap(packages, after, found)
    if gap is not None:
        raise ReadError(f"cannot tell what the copy should hold: {gap}", source=url)
    if loose is not None and found > slack:
        loose(url, found)
    order = InOrder()
    for package in packages:
        zpath = work / "package.zip"
        run_loop(_download_with(http, None, package, zpath))
        order.start(package.from_, "the package")
        for entry in _manifest(zpath, package, None, loose):
            order.see(entry)
            yield entry
        zpath.unlink()


def changes_from_dumps(
    run: Run,
    planner: ChangePlanner,
    s: SetInfo,
    key: str,
    plan: Plan,
    report: SetReport,
    cursor: Cursor,
) -> Cursor:
    """A set with a Change Dump and no Change List: plan the changes after `cursor` from the
    packages' manifests (the final state per URI wins) and extract from the packages the URIs
    whose final state they hold; returns the new cursor. Packages that do not reach back to
    the cursor are a gap (nothing done)."""
    url = s.url("changedump")
    assert url is not None
    loose = planner.planner.loose
    packages, slack = _change_dump_packages(
        run.client, url, s, cursor.datetime, planner.planner.slack
    )
    loose(url, slack)
    report.gap = _gap(packages, cursor.datetime, slack)
    if report.gap is not None:
        return cursor
    report.via = "dumps"
    db = plan.db
    db.execute(
        "CREATE TEMP TABLE IF NOT EXISTS dumped (uri TEXT PRIMARY KEY, package TEXT, datetime TEXT)"
    )
    db.execute("DELETE FROM dumped")
    work = Path(tempfile.mkdtemp(prefix="dump-", dir=run.mirror.state_dir))
    try:
        order = InOrder()  # the manifests' changes, in the order listed (core §13.1.1)

        def dumped() -> Iterator[Resource]:
            for n, package in enumerate(packages):
                zpath = work / f"package-{n:06d}.zip"
                run_loop(_download(run, package, zpath))
                order.start(package.from_, "the package")
                for entry in _manifest(zpath, package, report, loose):
                    order.see(entry)
                    when = entry.change_time
                    db.execute(
                        "INSERT OR REPLACE INTO dumped (uri, package, datetime) VALUES (?, ?, ?)",
                        (entry.loc, zpath.name, format_w3c(when) if when else None),
                    )
                    yield entry
                late = order.warning()
                if late is not None:
                    report.problem(package.loc, late)

        new_cursor = planner.changes(dumped(), plan, report, cursor)
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
        for res, outcome in extract(mirror, zpath, last.values()):
            if isinstance(outcome, ResourceSyncError):
                # Fetched on its own instead: the plan still says fetch.
                report.problem(res.loc, f"not taken from the package: {outcome.message}")
                continue
            _taken(run, res, outcome, key, report)
            plan.keep(res.loc)


async def _download(run: Run, package: Resource, target: Path) -> None:
    await _download_with(run.options.http, run.bandwidth, package, target)


async def _download_with(
    http: HttpOptions, bandwidth: Bandwidth | None, package: Resource, target: Path
) -> None:
    # What the package holds is as of this time (a closed Change Dump package's last change, a
    # Resource Dump package's `at`): a cache's copy taken before it is another package's. With
    # a digest of the package in the dump, its bytes tell (the package's own digest, issue
    # 10.15: a package altered on the way is not unpacked). A package that does not match is
    # asked for once more past the caches.
    current = package.until or package.at or package.change_time or package.from_
    algos = list(checkable(package.hashes))[:1]
    stale: str | None = None
    async with TransferSession(http) as client:
        for headers in ({}, NO_CACHE):
            async with client.open(
                package.loc, declared=package.length, headers=headers
            ) as response:
                stale = cached_before(
                    response.headers, current, what="the time the dump gives for the package"
                )
                if stale is not None and not algos:
                    continue  # asked once more past the caches
                size = 0
                hasher = MultiHasher(algos)
                with open(target, "wb") as f:
                    async for chunk in response.body(bandwidth):
                        size += len(chunk)
                        hasher.update(chunk)
                        f.write(chunk)
            problem = _package_problem(package, size, hasher.hexdigests())
            if problem is None:
                return
            if headers:
                raise ReadError(
                    problem if stale is None else f"{problem}; {stale}", source=package.loc
                )
    raise ReadError(f"{stale}: not used", source=package.loc)


def _package_problem(package: Resource, size: int, digests: dict[str, str]) -> str | None:
    """How a downloaded package differs from what the dump says of it, or None."""
    if package.length is not None and size != package.length:
        return f"package is {size} bytes, the dump says {package.length}"
    for algo, got in digests.items():
        if got != package.hashes[algo]:
            return f"package {algo} is {got}, the dump says {package.hashes[algo]}"
    return None
