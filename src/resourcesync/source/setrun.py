"""One set's publication under way (`SetRun`): what every stage of `publish` writes with.

The stages, each in its module, take the run and add to it: `changelists` (the Change Lists,
rotated into an index and an archive), `dumps` (the Change Dump, the Resource Dump),
`resourcelists` (the Resource List and its archive), `notify` (the hub). `publish` runs them in
that order (the changes before the Resource List that shows them) and writes the Capability
List after them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from ..model import Document, Link, Resource
from ..sitemap import write_document, write_split
from ..sitemap.write import DocumentWriter, part_name
from ..w3cdt import format_w3c
from .config import PublishConfig, SetConfig
from .scan import ScanResult
from .state import SetState

__all__ = ["DocumentInfo", "SetRun", "stamp"]

#: The state's record of the open Change List as it was last written (`SetRun.write_changes`).
OPEN_LIST = "cl_open_written"


def stamp(t: datetime) -> str:
    """A time as a folder name: `20261127T090500.123456Z`."""
    return t.strftime("%Y%m%dT%H%M%S") + f".{t.microsecond:06d}Z"


def _kept_open_list(
    record: str | None, name: str, path: Path, first: int, settings: str
) -> tuple[IO[bytes], int, int, int] | None:
    """The open Change List's file as the last run wrote it, opened, with its size, its
    number of entries and the journal's last change in it; None when the state's record of
    it is not of this list (its name, its first change, the settings) or no longer holds of
    the file (its size, time of change or inode moved: written by something else since)."""
    if record is None:
        return None
    try:
        was_name, was_first, through, count, size, mtime_ns, ino, was_settings = json.loads(record)
    except ValueError:
        return None
    if (was_name, was_first, was_settings) != (name, first, settings):
        return None
    try:
        f = open(path, "rb")  # noqa: SIM115 (the caller closes it)
    except OSError:
        return None
    st = os.fstat(f.fileno())
    if (st.st_size, st.st_mtime_ns, st.st_ino) != (size, mtime_ns, ino):
        f.close()
        return None
    return f, int(size), int(count), int(through)


def _tail(f: IO[bytes], size: int, n: int) -> bytes:
    f.seek(size - n)
    return f.read(n)


def _no_phase(what: str) -> None:
    """No one to tell of the run's steps."""


@dataclass
class DocumentInfo:
    """A live document as `published.json` describes it."""

    capability: str
    path: str
    url: str
    index: bool = False
    at: datetime | None = None
    completed: datetime | None = None
    from_: datetime | None = None
    until: datetime | None = None
    bytes: int = 0
    entries: int = 0

    def to_json(self) -> dict[str, Any]:
        def t(v: datetime | None) -> str | None:
            return format_w3c(v) if v else None

        return {
            "capability": self.capability,
            "path": self.path,
            "url": self.url,
            "index": self.index,
            "at": t(self.at),
            "completed": t(self.completed),
            "from": t(self.from_),
            "until": t(self.until),
            "bytes": self.bytes,
            "entries": self.entries,
        }


class SetRun:
    """One set's publication under way: its configuration, state and scan, what it has
    written so far, and the helpers every stage writes with. The stages (`resourcelists`,
    `changelists`, `dumps`, `notify`) take it and add to it; `publish` runs them in order."""

    def __init__(
        self,
        config: PublishConfig,
        s: SetConfig,
        state: SetState,
        scan: ScanResult,
        clock: Callable[[], datetime] | None,
    ) -> None:
        self.config = config
        self.s = s
        self.state = state
        self.scan = scan
        self.clock = clock or (lambda: datetime.now(UTC))
        self.dir = config.out / s.name
        self.url = config.set_url(s)
        self.capabilitylist_url = self.url + "capabilitylist.xml"
        self.up = Link(rel="up", href=self.capabilitylist_url)
        self.v = config.spec_version
        self.documents: list[DocumentInfo] = []
        self.written = 0
        self.rotated = 0
        #: Closed Change Lists let go this run (`keep_changelists`).
        self.dropped = 0
        self.packages = 0
        self.notified = 0
        self.problems: list[str] = []
        #: What changed in the framework this run (Framework Notification 1.0.1 §3).
        self.events: list[Resource] = []
        #: State marks to record once the framework notification holding them is kept.
        self.framework_marks: dict[str, str] = {}
        run = state.last_run()
        published = state.get("published_run")
        # A publication that did not finish (or settings that changed) is done again in full.
        settings = json.dumps(
            [s.max_entries, s.max_bytes, s.package_size, self.v, self.url, s.base_url]
        )
        self.settings_changed = state.get("settings") != settings
        #: The publication is done again in full: the last did not finish, the settings
        #: changed, or there is none yet.
        self.renew = (
            published is None or run is None or int(published) < run[0] - 1 or self.settings_changed
        )
        #: …or the scan found changes: every document they may be in is written again.
        self.redo = scan.changes > 0 or self.renew
        self._settings = settings

    # -- helpers ---------------------------------------------------------------------------

    def path(self, name: str) -> Path:
        return self.dir / name

    def link_url(self, name: str) -> str:
        return self.url + name

    def doc(self, capability: str, **kw: Any) -> Document:
        return Document(capability=capability, **kw)

    def note(
        self, capability: str, name: str, doc: Document, entries: int, index: bool = False
    ) -> None:
        p = self.path(name)
        self.documents.append(
            DocumentInfo(
                capability=capability,
                path=p.relative_to(self.config.out).as_posix(),
                url=self.link_url(name),
                index=index,
                at=doc.at,
                completed=doc.completed,
                from_=doc.from_,
                until=doc.until,
                bytes=p.stat().st_size if p.exists() else 0,
                entries=entries,
            )
        )

    @staticmethod
    def listing(ids: list[int], *more: object) -> str:
        """What an index or an archive shows, in a few words, to be kept in the state's marks
        beside it: the first and last of the ids of what it lists (documents that do not
        change once listed, in order), how many, and `more`. When the state's no longer
        says the same, it is written again."""
        return json.dumps([ids[:1], ids[-1:], len(ids), *more])

    def kept(self, capability: str, name: str, entries: int) -> None:
        """Note a document this run kept as an earlier one wrote it (`entries` long): an
        index if it was split (its first part is beside it: `write_split` removes the parts
        of a longer version)."""
        index = self.path(part_name(name, 1)).exists()
        self.note(capability, name, self.doc(capability), entries, index=index)

    def split(
        self, name: str, doc: Document, entries: Iterator[Resource] | Iterator[bytes]
    ) -> tuple[bool, int]:
        result = write_split(
            self.path(name),
            self.link_url(name),
            doc,
            entries,
            max_entries=self.s.max_entries,
            max_bytes=self.s.max_bytes,
            spec_version=self.v,
            fsync=self.config.fsync,
        )
        self.written += 1 + len(result.parts)
        return result.index, result.count

    def write(self, name: str, doc: Document, entries: Iterator[Resource] | list[Resource]) -> int:
        n = write_document(
            self.path(name), doc, entries, spec_version=self.v, fsync=self.config.fsync
        )
        self.written += 1
        return n

    def write_changes(self, name: str, doc: Document, first: int, last: int | None = None) -> None:
        """A Change List of the journal's entries from `first` (to `last`).

        The open list (no `last`) is written again by every run that journaled a change, and
        grows to `changelist_max_entries` before it is closed: it keeps the entries it was
        written with, copied from the file as the last run left it, and only the journal's
        new entries are read and serialized, so that a run costs what changed, not the
        list's length. The file is taken as the last run left it only as far as the state's
        record of it holds (the same list, settings, size, time of change and inode; the
        same header and footer): anything else writes the list whole."""
        path = self.path(name)
        top = self.state.max_seq() if last is None else last
        kept = (
            _kept_open_list(self.state.get(OPEN_LIST), name, path, first, self._settings)
            if last is None
            else None
        )
        with contextlib.ExitStack() as stack:
            w = stack.enter_context(
                DocumentWriter(path, doc, spec_version=self.v, fsync=self.config.fsync)
            )
            start = first
            if kept is not None:
                old = stack.enter_context(kept[0])
                size, count, through = kept[1:]
                length = size - len(w.header) - len(w.footer)
                if (
                    length >= 0
                    and old.read(len(w.header)) == w.header
                    and _tail(old, size, len(w.footer)) == w.footer
                ):
                    old.seek(len(w.header))
                    w.copy_entries(old, length, count)
                    start = through + 1
            if self.v == "1.1":
                for xml in self.state.change_entries(start, top):
                    w.write_bytes(xml)
            else:
                for resource in self.state.changes(start, top):
                    w.write(resource)
        self.written += 1
        if last is None:
            st = path.stat()
            record = [name, first, top, w.count, st.st_size, st.st_mtime_ns, st.st_ino]
            self.state.put(OPEN_LIST, json.dumps([*record, self._settings]))

    def event(self, capability: str, name: str, change: str, *, index: str | None = None) -> None:
        """Note a change to one of the set's documents for the framework channel (never an
        index: a document under one names it with rel="index")."""
        if not (self.s.hub and self.s.framework_notification):
            return
        links = [Link(rel="index", href=self.link_url(index))] if index else []
        self.events.append(
            Resource(
                loc=self.link_url(name),
                change=change,
                capability=capability,
                datetime=self.clock(),
                links=links,
            )
        )

    #: Told of each step of the run (the command's status line shows it).
    phase: Callable[[str], None] = staticmethod(_no_phase)

    # -- what the Resource List and the Resource Dump share ----------------------------------

    def snapshot_due(self, kind: str, live: str) -> bool:
        """Whether this run writes a new Resource List (`kind` "resourcelist") or Resource Dump
        ("resourcedump"): when there is none, when the settings changed, and otherwise by the
        set's policy (`resourcelist_every`) once something changed since the last one. Between
        them the last one stays published, with its `at`; the Change Lists carry every change
        after it, which is all a Destination needs to come to the present (issue 15.3). A set
        that publishes no Change List has a new one after any change."""
        state = self.state
        if self.settings_changed or not self.path(live).exists() or not state.archived(kind):
            return True
        seq = state.get(f"{kind}_seq")
        if seq is None:
            # A state from before the policy: as before, a new one after any change.
            return self.redo
        behind = state.count_changes(int(seq) + 1)
        if behind == 0:
            return False
        s = self.s
        if "changelist" not in s.capabilities:
            # No Change List carries the changes after it: the Resource List is all a
            # Destination has, so it is written again after any change.
            return True
        if s.resourcelist_max_changes is not None and behind >= s.resourcelist_max_changes:
            return True
        at = state.archived(kind)[-1].at
        return (
            s.resourcelist_max_age is not None
            and at is not None
            and (self.clock() - at).total_seconds() >= s.resourcelist_max_age
        )

    def snapshot_floor(self) -> datetime | None:
        """The earliest `at` of the live Resource List and Resource Dump: a Destination that
        starts from one needs every change after it (None: the set has neither yet, or
        publishes neither: every change is kept)."""
        floor = None
        for kind in ("resourcelist", "resourcedump"):
            if kind not in self.s.capabilities:
                continue
            rows = self.state.archived(kind)
            at = rows[-1].at if rows else None
            if at is None:
                return None
            floor = at if floor is None else min(floor, at)
        return floor

    def prune(self, kind: str, keep: int) -> None:
        """Forget the oldest documents of `kind` past `keep`; their files are removed by
        `sweep` once the archive that named them has been written again without them."""
        rows = self.state.archived(kind)
        for row in rows[: max(0, len(rows) - keep)]:
            self.state.forget(row.id)

    def sweep(self, kind: str, folder: str) -> None:
        """Remove the folders under `folder` that no document of `kind` in the state is in
        (pruned ones, and those of a run killed before it recorded them)."""
        root = self.path(folder)
        if not root.is_dir():
            return
        keep = set()
        for path in self.state.archived_paths(kind):
            p = self.dir / path
            keep.add(p if p.suffix != ".xml" else p.parent)
        for child in root.iterdir():
            if child.is_dir() and child not in keep:
                shutil.rmtree(child, ignore_errors=True)

    def archive_document(self, kind: str, name: str, *, by: str, whole: bool = True) -> None:
        """Write the archive of `kind` (Archives §3–§6), in chronological order; unless not
        `whole`, it is in place and it lists what the state holds of `kind` (`listing`): then
        it is kept as written."""
        mark = f"{kind}_archive_shown"
        ids = self.state.archived_ids(kind)
        shown = self.listing(ids)
        if not whole and self.path(name).exists() and self.state.get(mark) == shown:
            self.kept(f"{kind}-archive", name, len(ids))
            return
        rows = self.state.archived(kind)
        if by == "at":
            rows.sort(key=lambda r: r.at or datetime.min.replace(tzinfo=UTC))
            entries = [Resource(loc=r.url, at=r.at, completed=r.completed) for r in rows]
        else:
            rows.sort(key=lambda r: r.from_ or datetime.min.replace(tzinfo=UTC))
            entries = [Resource(loc=r.url, from_=r.from_, until=r.until) for r in rows]
        doc = self.doc(f"{kind}-archive", links=[self.up])
        index, count = self.split(name, doc, iter(entries))
        self.note(f"{kind}-archive", name, doc, count, index=index)
        self.state.put(mark, shown)
