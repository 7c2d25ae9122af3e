"""Baselines from Resource Dumps: download each package, check it, extract what its manifest
lists through the mirror. A member that cannot be used is fetched on its own instead."""

from __future__ import annotations

import asyncio
import tempfile
import zipfile
import zlib
from datetime import datetime
from pathlib import Path

from ..errors import ReadError, ResourceSyncError
from ..hashing import ALGORITHMS, MultiHasher
from ..http import aiter_body, make_async_client, open_stream_async
from ..model import Resource
from ..sitemap import open_document, walk
from ..sitemap.follow import FOLLOW_INDEX
from .discover import SetInfo
from .mirror import UnsafePath
from .options import Run
from .plan import MAX_PARTS, Plan, Planner, expect, tell_warnings
from .report import SetReport

#: The largest manifest read from a package (after decompression): about 1,000,000 entries.
MAX_MANIFEST = 512 * 1024**2

__all__ = ["baseline_from_dumps"]


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
                tell_warnings(reader, report)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
        raise ReadError(f"not a readable ZIP package: {exc}", source=package.loc) from None
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
        report.fetched += 1
        report.bytes += outcome.length
        run.state.record(
            res.loc,
            mirror.relpath(res.loc),
            outcome.length,
            outcome.hashes,
            res.lastmod,
            None,
            None,
            key,
        )


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
            f"package is {size} bytes, the Resource Dump says {package.length}",
            source=package.loc,
        )
    # The package's own digest, when the dump gives one (issue 10.15): a package altered on
    # the way is not unpacked.
    for algo, got in hasher.hexdigests().items():
        if got != package.hashes[algo]:
            raise ReadError(
                f"package {algo} is {got}, the Resource Dump says {package.hashes[algo]}",
                source=package.loc,
            )
