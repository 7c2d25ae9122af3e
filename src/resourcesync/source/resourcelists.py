"""The Resource List (core 1.1 §10) and its archive (Archives §3), a stage of `publish`.

Each Resource List is written once, in a folder of its own, when the set's policy says one is
due (`SetRun.snapshot_due`); between them the last one stays published and the Change Lists
carry every change after it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ..model import Capability, Link, Resource
from ..sitemap.write import part_name
from .setrun import SetRun, stamp

__all__ = ["publish_resourcelist"]


def _link_into_place(source: Path, target: Path) -> None:
    """Make `target` the same file as `source`, atomically (a copy where links are refused)."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)


def publish_resourcelist(run: SetRun) -> None:
    """Each Resource List is written once, in a folder of its own (`resourcelists/<at>/`,
    parts beside it); `resourcelist.xml` is a hard link to the newest, and the archive lists
    the earlier ones, which stay where they were written. Nothing is copied to archive it.
    The entries were serialized when their resources last changed (state `xml`)."""
    state = run.state
    live = run.path("resourcelist.xml")
    if run.snapshot_due("resourcelist", "resourcelist.xml"):
        # The rows a re-run left pending taken into `resources` (state.py), while every row
        # is read anyway: what changed after this list is all that stays pending.
        with state.transaction():
            state.fold()
        seq = state.max_seq()
        at = run.scan.started
        completed = run.scan.completed
        name = f"resourcelists/{stamp(at)}/resourcelist.xml"
        doc = run.doc(
            Capability.RESOURCELIST,
            at=at,
            completed=completed,
            links=[
                run.up,
                Link(rel="archives", href=run.link_url("resourcelist-archive.xml")),
            ],
        )
        index, count = run.split(name, doc, state.resource_xml())
        _link_into_place(run.path(name), live)
        if index:
            first = f"{name.rpartition('/')[0]}/{part_name('resourcelist.xml', 1)}"
            run.event(Capability.RESOURCELIST, first, "created", index=name)
        else:
            run.event(Capability.RESOURCELIST, name, "created")
        state.archive(
            "resourcelist",
            name,
            run.link_url(name),
            at=at,
            completed=completed,
            extra=json.dumps({"index": index, "entries": count}),
        )
        state.put("resourcelist_seq", str(seq))
        run.prune("resourcelist", run.s.keep_resourcelists + 1)
    rows = state.archived("resourcelist")
    current = rows[-1]
    extra = json.loads(current.extra or "{}")
    run.note(
        "resourcelist",
        "resourcelist.xml",
        run.doc(Capability.RESOURCELIST, at=current.at, completed=current.completed),
        int(extra.get("entries", 0)),
        index=bool(extra.get("index")),
    )
    earlier = [Resource(loc=r.url, at=r.at, completed=r.completed) for r in rows[:-1]]
    doc = run.doc(Capability.RESOURCELIST_ARCHIVE, links=[run.up])
    index, n = run.split("resourcelist-archive.xml", doc, iter(earlier))
    run.note("resourcelist-archive", "resourcelist-archive.xml", doc, n, index=index)
    run.sweep("resourcelist", "resourcelists")
