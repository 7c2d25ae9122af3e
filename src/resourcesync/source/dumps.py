"""The Resource Dump (core 1.1 §11) and the Change Dump (§13), with their archives, a stage of
`publish`: the set's files packaged into ZIPs with their manifests, checked against what the
scan hashed as they are read."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from ..hashing import parse_hashes
from ..model import Capability, Document, Link, Resource
from ..w3cdt import format_w3c, parse_w3c
from .package import PackageInfo, PackageItem, write_packages
from .setrun import SetRun, stamp
from .state import TICK

__all__ = ["publish_changedump", "publish_resourcedump"]


def publish_resourcedump(run: SetRun) -> None:
    state = run.state
    if run.snapshot_due("resourcedump", "resourcedump.xml"):
        seq = state.max_seq()
        at = run.scan.started
        when = stamp(at)
        folder = f"resourcedumps/{when}"
        manifest_doc = run.doc(
            Capability.RESOURCEDUMP_MANIFEST,
            at=at,
            completed=run.scan.completed,
            links=[run.up],
        )
        items = (
            PackageItem(
                key=key,
                entry=Resource(loc=uri, type=kind, lastmod=parse_w3c(lastmod)),
                open=_opener(run, key),
                length=length,
                expect=parse_hashes(hashes),
            )
            for key, uri, lastmod, length, kind, hashes in state.resource_rows()
        )
        entries = []
        for info in _packages(run, folder, items, manifest_doc, run.s.package_size):
            entries.append(
                Resource(
                    loc=info.url,
                    type="application/zip",
                    length=info.length,
                    hashes={"md5": info.md5},
                    at=at,
                    completed=run.scan.completed,
                    links=[Link(rel="contents", href=info.manifest_url, type="application/xml")],
                )
            )
        doc = run.doc(
            Capability.RESOURCEDUMP,
            at=at,
            completed=run.clock(),
            links=[
                run.up,
                Link(rel="archives", href=run.link_url("resourcedump-archive.xml")),
            ],
        )
        # The dump's own copy in its folder (what the archive will point at), then live.
        run.write(f"{folder}/resourcedump.xml", doc, entries)
        run.write("resourcedump.xml", doc, entries)
        run.event(Capability.RESOURCEDUMP, f"{folder}/resourcedump.xml", "created")
        state.archive(
            "resourcedump",
            folder,
            run.link_url(f"{folder}/resourcedump.xml"),
            at=at,
            completed=doc.completed,
            extra=str(len(entries)),
        )
        state.put("resourcedump_seq", str(seq))
        run.prune("resourcedump", run.s.keep_resourcedumps + 1)
    rows = state.archived("resourcedump")
    current = rows[-1]
    run.note(
        "resourcedump",
        "resourcedump.xml",
        run.doc(Capability.RESOURCEDUMP, at=current.at, completed=current.completed),
        int(current.extra or 0),
    )
    # The archive lists the earlier dumps (not the live one).
    earlier = [r for r in rows if r.id != current.id]
    entries = [Resource(loc=r.url, at=r.at, completed=r.completed) for r in earlier]
    doc = run.doc(Capability.RESOURCEDUMP_ARCHIVE, links=[run.up])
    index, n = run.split("resourcedump-archive.xml", doc, iter(entries))
    run.note("resourcedump-archive", "resourcedump-archive.xml", doc, n, index=index)
    run.sweep("resourcedump", "resourcedumps")


def publish_changedump(run: SetRun) -> None:
    """Package the changes not packaged yet (this run's, and those of a run that was killed
    before it packaged them), one package per interval; the interval and the last change
    packaged are recorded with the package, in one transaction."""
    state = run.state
    scan = run.scan
    until_text = state.get("cd_until")
    baseline = state.get("baselined")
    done_text = state.get("cd_last_seq")
    if done_text is not None:
        done = int(done_text)
    else:
        # A state from before the mark: everything up to this run's changes was packaged.
        done = scan.first_seq - 1 if scan.first_seq is not None else state.max_seq()
    top = state.max_seq()
    if top > done:
        start = parse_w3c(until_text) if until_text else parse_w3c(baseline or "")
        # After it begins, even with a clock set back: each package begins where the one
        # before it ended (the live dump's are found by reading back from the newest), and
        # has a folder of its own (the next, named by its start, is another).
        until = max(start + TICK, scan.completed, state.seq_time(top) or scan.completed)
        folder = f"changedumps/{stamp(start)}"
        manifest_doc = run.doc(
            Capability.CHANGEDUMP_MANIFEST, from_=start, until=until, links=[run.up]
        )
        items = _change_items(run, done + 1, top)
        # One package per interval.
        written = list(_packages(run, folder, items, manifest_doc, 1 << 62))
        with state.transaction():
            # A run killed after packaging, before this, packaged into the same folder.
            state.forget_packages(folder=folder)
            for info in written:
                state.archive(
                    "changedump-package",
                    folder,
                    info.url,
                    from_=start,
                    until=until,
                    extra=json.dumps(
                        {"length": info.length, "md5": info.md5, "manifest": info.manifest_url}
                    ),
                )
            state.put("cd_until", format_w3c(until))
            state.put("cd_last_seq", str(top))
    elif done_text is None:
        state.put("cd_last_seq", str(done))
    # The live Change Dump lists the packages since its own `from`; past the limit it is
    # closed into the archive and a new one starts where it ended.
    live_from = state.changedump_from() or scan.started
    live = state.live_packages(live_from)
    if len(live) > run.s.changedump_max_packages:
        closing = live[: run.s.changedump_max_packages]
        end = closing[-1].until
        assert end is not None
        name = f"changedumps/changedump-{stamp(live_from)}.xml"
        doc = run.doc(Capability.CHANGEDUMP, from_=live_from, until=end, links=[run.up])
        run.write(name, doc, [_package_entry(p) for p in closing])
        run.event(Capability.CHANGEDUMP, name, "created")
        with state.transaction():
            state.archive("changedump", name, run.link_url(name), from_=live_from, until=end)
            state.put("cd_from", format_w3c(end))
        live_from = end
        live = live[run.s.changedump_max_packages :]
        closed_one = True
    else:
        closed_one = False
    dropped = _drop_changedumps(run)
    # The archive before the live Change Dump: a reader meanwhile may find a package in
    # both (the same URL), never in neither. It lists the closed dumps: written again when
    # one closed or was let go (or all is written again), not by every run.
    run.archive_document(
        "changedump",
        "changedump-archive.xml",
        by="from",
        whole=closed_one or bool(dropped) or run.renew,
    )
    doc = run.doc(
        Capability.CHANGEDUMP,
        from_=live_from,
        links=[run.up, Link(rel="archives", href=run.link_url("changedump-archive.xml"))],
    )
    if run.redo or closed_one or top > done or not run.path("changedump.xml").exists():
        existed = run.path("changedump.xml").exists()
        run.write("changedump.xml", doc, [_package_entry(p) for p in live])
        run.event(Capability.CHANGEDUMP, "changedump.xml", "updated" if existed else "created")
    run.note("changedump", "changedump.xml", doc, len(live))
    if run.s.keep_changedumps is not None:
        # What the documents no longer name: the dropped dumps, their packages (and those of
        # a run killed before it removed them).
        for name in dropped:
            run.event(Capability.CHANGEDUMP, name, "deleted")
        named = state.archived_paths("changedump")
        dumps = run.path("changedumps")
        if dumps.is_dir():
            for p in dumps.glob("changedump-*.xml"):
                if f"changedumps/{p.name}" not in named:
                    p.unlink(missing_ok=True)
        run.sweep("changedump-package", "changedumps")


def _drop_changedumps(run: SetRun) -> list[str]:
    """Forget the oldest closed Change Dumps past `keep_changedumps` and their packages, as
    far as none holds a change after the live Resource Dump's (and Resource List's) `at`: a
    Destination that starts from it needs every change after it. Returns their documents."""
    keep, state = run.s.keep_changedumps, run.state
    if keep is None or state.archived_count("changedump") <= keep:
        return []
    closed = state.archived("changedump")
    floor = run.snapshot_floor()
    dropped = []
    with state.transaction():
        for row in closed[: len(closed) - keep]:
            if floor is None or row.from_ is None or row.until is None or row.until > floor:
                break
            state.forget_packages(until=row.until)
            state.forget(row.id)
            dropped.append(row.path)
    return dropped


def _packages(
    run: SetRun, folder: str, items: Iterator[PackageItem], manifest: Document, size: int
) -> Iterator[PackageInfo]:
    """The packages of `items` written into `folder` (with their manifests, `manifest` the
    document of each), counted into the run; a file that changed as it was packaged is read
    again by the next run (`_changed_since_scan`)."""
    for info in write_packages(
        run.path(folder),
        run.link_url(folder + "/"),
        items,
        manifest,
        package_size=size,
        algorithms=run.s.hashes,
        spec_version=run.v,
    ):
        run.packages += 1
        run.written += 2
        run.problems += info.skipped
        _changed_since_scan(run, info.changed)
        yield info


def _opener(run: SetRun, key: str) -> Callable[[], Any]:
    path = run.s.dir / key
    return lambda: open(path, "rb")


def _changed_since_scan(run: SetRun, keys: list[str]) -> None:
    """Files whose packaged bytes are not the ones the scan hashed: the next run reads
    them again and lists them as updated (with what it then finds), so the dumps and the
    lists agree again even if the file went back to the bytes the scan saw."""
    if keys:
        run.state.mark_dirty(keys)
        run.problems.append(
            f"{len(keys)} file(s) changed while they were packaged (listed again next run)"
        )


def _package_entry(row: Any) -> Resource:
    extra = json.loads(row.extra or "{}")
    return Resource(
        loc=row.url,
        type="application/zip",
        length=extra.get("length"),
        hashes={"md5": extra["md5"]} if "md5" in extra else {},
        from_=row.from_,
        until=row.until,
        links=[Link(rel="contents", href=extra.get("manifest", ""), type="application/xml")],
    )


def _change_items(run: SetRun, first: int, last: int) -> Iterator[PackageItem]:
    for key, res in run.state.packaged_changes(first, last):
        if res.change == "deleted":
            yield PackageItem(key=key, entry=res, open=None)
        else:
            yield PackageItem(
                key=key,
                entry=res,
                open=_opener(run, key),
                length=res.length or 0,
                expect=res.hashes,
            )
