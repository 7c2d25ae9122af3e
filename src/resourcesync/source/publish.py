"""State → document tree: one publication of a Source.

For each set: scan the inventory against the state (committing what changed), then bring the
set's documents up to date from the state. Every file is written under a temporary name and
renamed into place, children before the documents that point at them (packages and manifests,
closed Change Lists, archives, then the live lists), each Capability List after its documents,
the Source Description after the Capability Lists, and `published.json` last.

The state is committed before the documents are written, and a publication that did not
finish is redone by the next run: documents are derived from the state only, so a crash
between the two loses nothing and duplicates nothing.

File names inside OUTDIR/<set>/:

    capabilitylist.xml
    resourcelist.xml (+ resourcelist-NNNNN.xml parts)     resourcelist-archive.xml
    archive/resourcelist-<stamp>.xml                        earlier Resource Lists
    changelist.xml   the open Change List, or, once one has been closed, a Change List Index
    changelists/changelist-NNNNN.xml                        every closed Change List
    changelists/changelist-NNNNN-open.xml                   the open one, once there is an index
    changelist-archive.xml
    resourcedump.xml  resourcedump-archive.xml  resourcedumps/<stamp>/package-NNNNN.zip (+ manifest)
    changedump.xml    changedump-archive.xml    changedumps/<from>/package-NNNNN.zip (+ manifest)
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..atomic import AtomicFile
from ..errors import ResourceSyncError
from ..hashing import parse_hashes
from ..model import Capability, Document, Link, Resource
from ..sitemap import write_document, write_split
from ..sitemap.write import DocumentWriter, part_name
from ..w3cdt import format_w3c, parse_w3c
from .config import DESCRIPTION_PATH, PUBLISHED_FILE, PublishConfig, SetConfig
from .inventory import DirectoryInventory, Inventory, ScanStats
from .package import PackageItem, write_packages
from .state import ChangeListRow, DeletionsRefused, ScanResult, SetState

__all__ = ["DocumentInfo", "PublishResult", "SetResult", "publish"]

Progress = Callable[[str, int], None]


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


@dataclass
class SetResult:
    name: str
    scan: ScanResult
    documents: list[DocumentInfo] = field(default_factory=list)
    written: int = 0
    rotated: int = 0
    packages: int = 0
    stats: ScanStats | None = None
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        s = self.scan
        out: dict[str, Any] = {
            "name": self.name,
            "resources": s.resources,
            "created": s.created,
            "updated": s.updated,
            "deleted": s.deleted,
            "unchanged": s.unchanged,
            "touched": s.touched,
            "hashed": s.rehashed,
            "baseline": s.baseline,
            "documents_written": self.written,
            "changelists_closed": self.rotated,
            "packages": self.packages,
            "problems": self.problems + s.problems,
        }
        if self.stats is not None:
            out["skipped_links"] = self.stats.skipped_links
            out["skipped_names"] = self.stats.skipped_names
            out["excluded"] = self.stats.excluded
        return out


@dataclass
class PublishResult:
    sets: list[SetResult]
    dry_run: bool
    seconds: float

    @property
    def changes(self) -> int:
        return sum(s.scan.changes for s in self.sets)

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "seconds": round(self.seconds, 3),
            "changes": self.changes,
            "sets": [s.to_json() for s in self.sets],
        }


def _link_into_place(source: Path, target: Path) -> None:
    """Make `target` the same file as `source`, atomically (a copy where links are refused)."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)


def _stamp(t: datetime) -> str:
    return t.strftime("%Y%m%dT%H%M%S") + f".{t.microsecond:06d}Z"


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def publish(
    config: PublishConfig,
    *,
    dry_run: bool = False,
    inventories: dict[str, Inventory] | None = None,
    progress: Progress | None = None,
    clock: Callable[[], datetime] | None = None,
    changed: Mapping[str, Iterable[str]] | None = None,
) -> PublishResult:
    """Publish every set of the Source once. `inventories` replaces the directory scan of the
    named sets (a database, a feed: see `inventory.Inventory`). `changed`: for the named sets,
    the paths (relative to the set's directory) that changed since the last publication; only
    their directories are scanned (the watcher's: the tree is not walked), when the state has
    the listings of the last scan (otherwise the whole set is)."""
    started = time.monotonic()
    _check_clashes(config)
    only = {name: _directories(paths) for name, paths in (changed or {}).items()}
    if dry_run:
        return _publish(config, dry_run, inventories, progress, clock, started, only)
    with run_lock(config.state):
        return _publish(config, dry_run, inventories, progress, clock, started, only)


def _refused_deletions(s: SetConfig, scan: ScanResult) -> str | None:
    """Why the deletions a scan of set `s` found are not to be published, if they are not:
    every resource gone at once (a directory whose filesystem is not mounted is empty too), or
    more than the set's `max_delete`."""
    if scan.deleted and scan.resources == 0 and not s.allow_empty:
        return (
            f"holds no file to publish, and the {scan.deleted:,} resources published before "
            "would all be deleted: is its filesystem mounted? Nothing was published "
            "(--allow-empty publishes their deletion)"
        )
    if s.max_delete is not None and scan.deleted > s.max_delete:
        return (
            f"this run would publish {scan.deleted:,} deletions, more than --max-delete "
            f"{s.max_delete:,}: nothing was published"
        )
    return None


def _directories(paths: Iterable[str]) -> set[str]:
    """The directories to list again for changed paths: each one's parent, and the path itself
    in case it is a directory (`SetState.scan` keeps those it knows, or their ancestors)."""
    out = set()
    for path in paths:
        rel = path.strip("/")
        if not rel or rel == ".":
            out.add("")
            continue
        head = rel.rpartition("/")[0]
        out.add(head + "/" if head else "")
        out.add(rel + "/")
    return out


# Within one process, a publication waits for the background sender of notifications (which
# holds the lock a second or so) rather than failing; between processes the file lock decides.
_in_process = threading.Lock()


@contextlib.contextmanager
def run_lock(state_dir: Path, *, wait: bool = True) -> Iterator[None]:
    """One publication at a time per OUTDIR (a second process stops at once, saying why).
    `wait=False`: do not wait for another thread of this process either."""
    if not _in_process.acquire(blocking=wait):
        raise ResourceSyncError("a publication is running for this output", source=str(state_dir))
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        with open(state_dir / "publish.lock", "a+b") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ResourceSyncError(
                    "another publish is running for this output", source=str(state_dir)
                ) from None
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    finally:
        _in_process.release()


def _publish(
    config: PublishConfig,
    dry_run: bool,
    inventories: dict[str, Inventory] | None,
    progress: Progress | None,
    clock: Callable[[], datetime] | None,
    started: float,
    only: Mapping[str, set[str]],
) -> PublishResult:
    out = config.out
    results: list[SetResult] = []
    set_docs: dict[str, list[DocumentInfo]] = {}
    recent: dict[str, list[dict[str, str]]] = {}
    counts: dict[str, int] = {}
    framework: dict[str, tuple[list[Resource], dict[str, str], SetResult]] = {}
    for s in config.sets:
        state_path = config.state / f"{s.name}.sqlite"
        scratch = None
        if dry_run and not state_path.exists():
            # A dry run writes nothing of ours: a first run is tried on a scratch state.
            scratch = tempfile.mkdtemp(prefix="resourcesync-dry-run-")
            state_path = Path(scratch) / "state.sqlite"
        with SetState(state_path, clock=clock) as state:
            inventory: Inventory
            stats = None
            if inventories and s.name in inventories:
                inventory = inventories[s.name]
            else:
                if not s.dir.is_dir():
                    raise ResourceSyncError("not a directory", source=str(s.dir))
                d = DirectoryInventory(
                    s.dir,
                    s.base_url,
                    include=s.include,
                    exclude=s.exclude,
                    skip=[out, config.state],
                    hidden=s.hidden,
                )
                inventory = d
            step = (lambda n, name=s.name: progress(name, n)) if progress else None
            try:
                scan = state.scan(
                    inventory,
                    s.hashes,
                    dry_run=dry_run,
                    progress=step,
                    uri_base=s.base_url if isinstance(inventory, DirectoryInventory) else None,
                    only=only.get(s.name),
                    refuse=functools.partial(_refused_deletions, s),
                )
            except DeletionsRefused as exc:
                raise DeletionsRefused(exc.message, source=str(s.dir)) from None
            if isinstance(inventory, DirectoryInventory):
                stats = inventory.stats
            result = SetResult(s.name, scan, stats=stats)
            if stats is not None:
                result.problems += stats.unreadable
                # Said, not only counted in --json: a file that exists and is not published.
                result.problems += [
                    f"{name}: the name is not valid UTF-8, so no URI can name it: not published"
                    for name in stats.skipped_names
                ]
            results.append(result)
            if dry_run:
                continue
            publisher = _SetPublisher(config, s, state, scan, clock)
            if progress is not None:
                publisher.phase = functools.partial(_tell_phase, progress, s.name)
            publisher.run()
            result.documents = publisher.documents
            result.written = publisher.written
            result.rotated = publisher.rotated
            result.packages = publisher.packages
            result.problems += publisher.problems
            set_docs[s.name] = publisher.documents
            framework[s.name] = (publisher.events, publisher.framework_marks, result)
            recent[s.name] = state.recent_changes()
            counts[s.name] = scan.resources
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if not dry_run:
        _remove_leftovers(config.out / ".well-known")
        _remove_leftovers(config.state)
        _write_description(config)
        _write_published(config, set_docs, recent, counts, clock)
        now = (clock or (lambda: datetime.now(UTC)))()
        for s in config.sets:
            with SetState(config.state / f"{s.name}.sqlite", clock=clock) as state:
                if s.hub and s.framework_notification and s.name in framework:
                    events, marks, set_result = framework[s.name]
                    from .notify import announce_framework, retry_in_background

                    problem = announce_framework(config, s, state, events, marks, now)
                    if problem is not None:
                        set_result.problems.append(problem)
                        retry_in_background(config)
                run = state.last_run()
                if run is not None:
                    state.put("published_run", str(run[0]))
    return PublishResult(results, dry_run, time.monotonic() - started)


def _no_phase(what: str) -> None:
    pass


def _tell_phase(progress: Progress, name: str, what: str) -> None:
    """A step of a set's run, for the status line (a count below zero: no count)."""
    progress(f"{name}: {what}", -1)


class _SetPublisher:
    """Brings one set's documents up to date with its state."""

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
        self.redo = (
            scan.changes > 0
            or published is None
            or run is None
            or int(published) < run[0] - 1
            or self.settings_changed
        )
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
                path=_rel(p, self.config.out),
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
        """A Change List of the journal's entries from `first` (to `last`)."""
        if self.v != "1.1":
            self.write(name, doc, self.state.changes(first, last))
            return
        with DocumentWriter(self.path(name), doc, fsync=self.config.fsync) as w:
            for xml in self.state.change_entries(first, last):
                w.write_bytes(xml)
        self.written += 1

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

    # -- the run ---------------------------------------------------------------------------

    #: Told of each step of the run (the command's status line shows it).
    phase: Callable[[str], None] = staticmethod(_no_phase)

    def run(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        _remove_leftovers(self.dir)
        caps = self.s.capabilities
        # The changes first, then the Resource List that already shows them: a run stopped in
        # between (kill -9, a full disk) leaves the Change Lists ahead of the Resource List,
        # which a Destination catches up with — never a Resource List ahead of the changes,
        # which would let a Destination that follows them say ok over a copy that lacks what
        # the new Resource List shows (found by the Destination's random walk, issue 10).
        if "changelist" in caps:
            self.phase("writing the Change Lists")
            self.changelist()
        if "changedump" in caps:
            self.phase("packaging the Change Dump")
            self.changedump()
        if "resourcelist" in caps:
            self.phase("writing the Resource List")
            self.resourcelist()
        if "resourcedump" in caps:
            self.phase("packaging the Resource Dump")
            self.resourcedump()
        entries: list[Resource] = []
        for kind in ("resourcelist", "resourcedump", "changelist", "changedump"):
            if kind in caps:
                entries += [
                    Resource(loc=self.link_url(f"{kind}.xml"), capability=kind),
                    Resource(
                        loc=self.link_url(f"{kind}-archive.xml"), capability=f"{kind}-archive"
                    ),
                ]
        if self.s.hub:
            self.phase("notifying the hub")
            self.notify()
            entries.append(
                Resource(
                    loc=self.config.topic_url(self.s),
                    capability=Capability.CHANGE_NOTIFICATION,
                    links=[Link(rel="hub", href=self.s.hub)],
                )
            )
            if self.s.framework_notification:
                entries.append(
                    Resource(
                        loc=self.config.framework_topic_url(self.s),
                        capability=Capability.FRAMEWORK_NOTIFICATION,
                        links=[Link(rel="hub", href=self.s.hub)],
                    )
                )
        links = [Link(rel="up", href=self.config.description_url)]
        if self.s.describedby:
            links.append(Link(rel="describedby", href=self.s.describedby))
        doc = self.doc(Capability.CAPABILITYLIST, links=links)
        self.write("capabilitylist.xml", doc, entries)
        self.state.put("settings", self._settings)
        what = json.dumps([[e.loc, e.capability] for e in entries] + [lk.href for lk in links])
        before = self.state.get("fw_capabilitylist")
        if before != what:
            self.event(
                Capability.CAPABILITYLIST,
                "capabilitylist.xml",
                "created" if before is None else "updated",
            )
            self.framework_marks["fw_capabilitylist"] = what

    # -- Resource List (§10) and its archive -------------------------------------------------

    def resourcelist(self) -> None:
        """Each Resource List is written once, in a folder of its own (`resourcelists/<at>/`,
        parts beside it); `resourcelist.xml` is a hard link to the newest, and the archive lists
        the earlier ones, which stay where they were written. Nothing is copied to archive it.
        The entries were serialized when their resources last changed (state `xml`)."""
        state = self.state
        live = self.path("resourcelist.xml")
        if self._snapshot_due("resourcelist", "resourcelist.xml"):
            seq = state.max_seq()
            at = self.scan.started
            completed = self.scan.completed
            name = f"resourcelists/{_stamp(at)}/resourcelist.xml"
            doc = self.doc(
                Capability.RESOURCELIST,
                at=at,
                completed=completed,
                links=[
                    self.up,
                    Link(rel="archives", href=self.link_url("resourcelist-archive.xml")),
                ],
            )
            index, count = self.split(name, doc, state.resource_xml())
            _link_into_place(self.path(name), live)
            if index:
                first = f"{name.rpartition('/')[0]}/{part_name('resourcelist.xml', 1)}"
                self.event(Capability.RESOURCELIST, first, "created", index=name)
            else:
                self.event(Capability.RESOURCELIST, name, "created")
            state.archive(
                "resourcelist",
                name,
                self.link_url(name),
                at=at,
                completed=completed,
                extra=json.dumps({"index": index, "entries": count}),
            )
            state.put("resourcelist_seq", str(seq))
            self._prune("resourcelist", self.s.keep_resourcelists + 1)
        rows = state.archived("resourcelist")
        current = rows[-1]
        extra = json.loads(current.extra or "{}")
        self.note(
            "resourcelist",
            "resourcelist.xml",
            self.doc(Capability.RESOURCELIST, at=current.at, completed=current.completed),
            int(extra.get("entries", 0)),
            index=bool(extra.get("index")),
        )
        earlier = [Resource(loc=r.url, at=r.at, completed=r.completed) for r in rows[:-1]]
        doc = self.doc(Capability.RESOURCELIST_ARCHIVE, links=[self.up])
        index, n = self.split("resourcelist-archive.xml", doc, iter(earlier))
        self.note("resourcelist-archive", "resourcelist-archive.xml", doc, n, index=index)
        self._sweep("resourcelist", "resourcelists")

    def _snapshot_due(self, kind: str, live: str) -> bool:
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

    def _prune(self, kind: str, keep: int) -> None:
        """Forget the oldest documents of `kind` past `keep`; their files are removed by
        `_sweep` once the archive that named them has been written again without them."""
        rows = self.state.archived(kind)
        for row in rows[: max(0, len(rows) - keep)]:
            self.state.forget(row.id)

    def _sweep(self, kind: str, folder: str) -> None:
        """Remove the folders under `folder` that no document of `kind` in the state is in
        (pruned ones, and those of a run killed before it recorded them)."""
        root = self.path(folder)
        if not root.is_dir():
            return
        keep = set()
        for row in self.state.archived(kind):
            p = self.dir / row.path
            keep.add(p if p.suffix != ".xml" else p.parent)
        for child in root.iterdir():
            if child.is_dir() and child not in keep:
                shutil.rmtree(child, ignore_errors=True)

    def _archive_document(self, kind: str, name: str, *, by: str) -> None:
        """Write the archive of `kind` (Archives §3–§6), in chronological order."""
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

    # -- Change List (§12), rotation, index and archive ----------------------------------------

    def changelist(self) -> None:
        state = self.state
        # The first Change List starts where the baseline began (the first Resource List's
        # `at`), so a Destination that baselined from it finds no gap.
        baseline = state.get("baselined")
        start = self.scan.started if baseline is None else parse_w3c(baseline)
        with state.transaction():
            current = state.open_changelist(start)
        rotated = self._rotate(current)
        lists = state.changelists()
        open_row = lists[-1]
        archive_link = Link(rel="archives", href=self.link_url("changelist-archive.xml"))
        index_link = Link(rel="index", href=self.link_url("changelist.xml"))
        closed = [r for r in lists if r.until is not None]
        # A closed list is written once, under a name of its own (the open one has another:
        # the index a reader already holds keeps pointing at a list as it was, never at one
        # whose `until` or entries changed under it). The state remembers the last list written
        # closed (after it was written): a run killed in between writes it again. A state
        # without the mark rewrites every closed list once, which repairs a tree published when
        # a closed list kept the contents it had while open.
        written = int(state.get("cl_closed_written") or 0)
        for row in closed:
            name = self._cl_name(row)
            if row.id > written or not self.path(name).exists():
                doc = self.doc(
                    Capability.CHANGELIST,
                    from_=row.from_,
                    until=row.until,
                    links=[self.up, index_link],
                )
                self.write_changes(name, doc, row.first_seq, row.last_seq)
                self.event(Capability.CHANGELIST, name, "created", index="changelist.xml")
        if closed and closed[-1].id > written:
            state.put("cl_closed_written", str(closed[-1].id))
        # The archive lists the closed Change Lists (before the index: it names closed lists
        # only, all written by now).
        if rotated or self.redo or not self.path("changelist-archive.xml").exists():
            entries = [
                Resource(loc=self.link_url(self._cl_name(r)), from_=r.from_, until=r.until)
                for r in closed
            ]
            doc = self.doc(Capability.CHANGELIST_ARCHIVE, links=[self.up])
            index, n = self.split("changelist-archive.xml", doc, iter(entries))
        else:
            index, n = False, len(closed)
        self.note(
            "changelist-archive",
            "changelist-archive.xml",
            self.doc(Capability.CHANGELIST_ARCHIVE),
            n,
            index=index,
        )
        count = state.count_changes(open_row.first_seq)
        if closed:
            # The open list lives among the others; changelist.xml becomes their index.
            open_doc = self.doc(
                Capability.CHANGELIST, from_=open_row.from_, links=[self.up, index_link]
            )
            if self.redo or rotated or not self.path(self._cl_name(open_row)).exists():
                self.write_changes(self._cl_name(open_row), open_doc, open_row.first_seq)
                self.event(
                    Capability.CHANGELIST,
                    self._cl_name(open_row),
                    "created" if rotated else "updated",
                    index="changelist.xml",
                )
            index_doc = self.doc(
                Capability.CHANGELIST,
                index=True,
                from_=lists[0].from_,
                links=[self.up, archive_link],
            )
            if self.redo or rotated or not self.path("changelist.xml").exists():
                self.write(
                    "changelist.xml",
                    index_doc,
                    [
                        Resource(loc=self.link_url(self._cl_name(r)), from_=r.from_, until=r.until)
                        for r in lists
                    ],
                )
            self.note("changelist", "changelist.xml", index_doc, len(lists), index=True)
            if self.redo or rotated:
                # The open lists of before, now closed and out of the index.
                for row in closed:
                    self.path(self._cl_name(row, open_=True)).unlink(missing_ok=True)
        else:
            doc = self.doc(
                Capability.CHANGELIST, from_=open_row.from_, links=[self.up, archive_link]
            )
            if self.redo or not self.path("changelist.xml").exists():
                existed = self.path("changelist.xml").exists()
                self.write_changes("changelist.xml", doc, open_row.first_seq)
                self.event(
                    Capability.CHANGELIST, "changelist.xml", "updated" if existed else "created"
                )
            self.note("changelist", "changelist.xml", doc, count)

    @staticmethod
    def _cl_name(row: ChangeListRow, *, open_: bool | None = None) -> str:
        if row.until is None if open_ is None else open_:
            return f"changelists/changelist-{row.id:05d}-open.xml"
        return f"changelists/changelist-{row.id:05d}.xml"

    def _rotate(self, current: ChangeListRow) -> int:
        """Close the open list when the policy says so; returns how many were closed."""
        state = self.state
        s = self.s
        closed = 0
        while True:
            count = state.count_changes(current.first_seq)
            if count > s.changelist_max_entries:
                last = state.nth_seq(current.first_seq, s.changelist_max_entries)
                until = state.seq_time(last)
                assert until is not None
            elif (
                s.changelist_max_age is not None
                and count > 0
                and (self.clock() - current.from_).total_seconds() >= s.changelist_max_age
            ):
                last = state.max_seq()
                until = state.next_datetime()
            else:
                break
            state.close_changelist(current, last, until)
            closed += 1
            current = state.changelists()[-1]
        self.rotated += closed
        return closed

    # -- Resource Dump (§11) and its archive ---------------------------------------------------

    def resourcedump(self) -> None:
        state = self.state
        if self._snapshot_due("resourcedump", "resourcedump.xml"):
            seq = state.max_seq()
            at = self.scan.started
            stamp = _stamp(at)
            folder = f"resourcedumps/{stamp}"
            manifest_doc = self.doc(
                Capability.RESOURCEDUMP_MANIFEST,
                at=at,
                completed=self.scan.completed,
                links=[self.up],
            )
            items = (
                PackageItem(
                    key=key,
                    entry=Resource(loc=uri, type=kind, lastmod=parse_w3c(lastmod)),
                    open=self._opener(key),
                    length=length,
                    expect=parse_hashes(hashes),
                )
                for key, uri, lastmod, length, kind, hashes in state.resource_rows()
            )
            entries = []
            for info in write_packages(
                self.path(folder),
                self.link_url(folder + "/"),
                items,
                manifest_doc,
                package_size=self.s.package_size,
                algorithms=self.s.hashes,
                spec_version=self.v,
            ):
                self.packages += 1
                self.written += 2
                self.problems += info.skipped
                self._changed_since_scan(info.changed)
                entries.append(
                    Resource(
                        loc=info.url,
                        type="application/zip",
                        length=info.length,
                        hashes={"md5": info.md5},
                        at=at,
                        completed=self.scan.completed,
                        links=[
                            Link(rel="contents", href=info.manifest_url, type="application/xml")
                        ],
                    )
                )
            doc = self.doc(
                Capability.RESOURCEDUMP,
                at=at,
                completed=self.clock(),
                links=[
                    self.up,
                    Link(rel="archives", href=self.link_url("resourcedump-archive.xml")),
                ],
            )
            # The dump's own copy in its folder (what the archive will point at), then live.
            self.write(f"{folder}/resourcedump.xml", doc, entries)
            self.write("resourcedump.xml", doc, entries)
            self.event(Capability.RESOURCEDUMP, f"{folder}/resourcedump.xml", "created")
            state.archive(
                "resourcedump",
                folder,
                self.link_url(f"{folder}/resourcedump.xml"),
                at=at,
                completed=doc.completed,
                extra=str(len(entries)),
            )
            state.put("resourcedump_seq", str(seq))
            self._prune("resourcedump", self.s.keep_resourcedumps + 1)
        rows = state.archived("resourcedump")
        current = rows[-1]
        self.note(
            "resourcedump",
            "resourcedump.xml",
            self.doc(Capability.RESOURCEDUMP, at=current.at, completed=current.completed),
            int(current.extra or 0),
        )
        # The archive lists the earlier dumps (not the live one).
        earlier = [r for r in rows if r.id != current.id]
        entries = [Resource(loc=r.url, at=r.at, completed=r.completed) for r in earlier]
        doc = self.doc(Capability.RESOURCEDUMP_ARCHIVE, links=[self.up])
        index, n = self.split("resourcedump-archive.xml", doc, iter(entries))
        self.note("resourcedump-archive", "resourcedump-archive.xml", doc, n, index=index)
        self._sweep("resourcedump", "resourcedumps")

    def _opener(self, key: str) -> Callable[[], Any]:
        path = self.s.dir / key
        return lambda: open(path, "rb")

    # -- Change Notification (Change Notification 1.0.1 §3, §4.1) ---------------------------

    def notify(self) -> None:
        """Turn the changes not yet announced into notification payloads (consecutive,
        non-overlapping `from`/`until`, at most `notification_max_entries` each), keep them in
        the state, and send the unsent ones to the hub in order, retrying; what the hub does not
        accept now is sent by the next run. The latest payload is also published at the topic
        URI (`change/latest.xml`, served there with its `self` and `hub` links)."""
        from .notify import retry_in_background, send_unsent  # with a hub only

        state = self.state
        s = self.s
        done = state.notifications()
        last_seq = done[-1][2] if done else int(state.get("cn_start_seq") or state.max_seq())
        if not done and state.get("cn_start_seq") is None:
            # Announcing starts now: what was journaled before is in the Change Lists.
            state.put("cn_start_seq", str(last_seq))
            state.put("cn_from", format_w3c(self.scan.started))
        start = done[-1][4] if done else parse_w3c(state.get("cn_from") or "")
        top = state.max_seq()
        if top > last_seq:
            first = last_seq + 1
            while first <= top:
                count = min(s.notification_max_entries, state.count_changes(first, top))
                last = state.nth_seq(first, count)
                final = last == top
                until = self.scan.completed if final else state.seq_time(last)
                assert until is not None
                until = max(until, start)
                state.add_notification(first, last, start, until)
                start, first = until, last + 1
        rows = state.notifications()
        if rows:
            _, first, last, from_, until = rows[-1]
            self.write(
                "change/latest.xml",
                self._payload(first, last, from_, until),
                state.changes(first, last),
            )
        elif not self.path("change/latest.xml").exists():
            # Nothing announced yet: the topic still answers, with an empty notification.
            self.write("change/latest.xml", self._payload(0, 0, start, start), [])
        try:
            self.notified += send_unsent(self.config, s, state)
        except ResourceSyncError as exc:
            self.problems.append(f"notification not accepted by the hub yet: {exc}")
            # Sent by the next run, and meanwhile by this process if it keeps running.
            retry_in_background(self.config)

    def _payload(self, first: int, last: int, from_: datetime, until: datetime) -> Document:
        from .notify import payload

        return payload(self.config, self.s, from_, until)

    # -- Change Dump (§13) and its archive ---------------------------------------------------

    def changedump(self) -> None:
        """Package the changes not packaged yet (this run's, and those of a run that was killed
        before it packaged them), one package per interval; the interval and the last change
        packaged are recorded with the package, in one transaction."""
        state = self.state
        scan = self.scan
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
            until = max(scan.completed, state.seq_time(top) or scan.completed)
            folder = f"changedumps/{_stamp(start)}"
            manifest_doc = self.doc(
                Capability.CHANGEDUMP_MANIFEST, from_=start, until=until, links=[self.up]
            )
            written = []
            for info in write_packages(
                self.path(folder),
                self.link_url(folder + "/"),
                self._change_items(done + 1, top),
                manifest_doc,
                package_size=1 << 62,  # one package per interval
                algorithms=self.s.hashes,
                spec_version=self.v,
            ):
                self.packages += 1
                self.written += 2
                self.problems += info.skipped
                self._changed_since_scan(info.changed)
                written.append(info)
            with state.transaction():
                # A run killed after packaging, before this, packaged into the same folder.
                for row in state.archived("changedump-package"):
                    if row.path == folder:
                        state.forget(row.id)
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
        packages = state.archived("changedump-package")
        # The live Change Dump lists the packages since its own `from`; past the limit it is
        # closed into the archive and a new one starts where it ended.
        live_from_text = state.get("cd_from") or baseline
        live_from = parse_w3c(live_from_text) if live_from_text else scan.started
        live = [p for p in packages if p.from_ is not None and p.from_ >= live_from]
        if len(live) > self.s.changedump_max_packages:
            closing = live[: self.s.changedump_max_packages]
            end = closing[-1].until
            assert end is not None
            name = f"changedumps/changedump-{_stamp(live_from)}.xml"
            doc = self.doc(Capability.CHANGEDUMP, from_=live_from, until=end, links=[self.up])
            self.write(name, doc, [self._package_entry(p) for p in closing])
            self.event(Capability.CHANGEDUMP, name, "created")
            with state.transaction():
                state.archive("changedump", name, self.link_url(name), from_=live_from, until=end)
                state.put("cd_from", format_w3c(end))
            live_from = end
            live = live[self.s.changedump_max_packages :]
            closed_one = True
        else:
            closed_one = False
        # The archive before the live Change Dump: a reader meanwhile may find a package in
        # both (the same URL), never in neither.
        self._archive_document("changedump", "changedump-archive.xml", by="from")
        doc = self.doc(
            Capability.CHANGEDUMP,
            from_=live_from,
            links=[self.up, Link(rel="archives", href=self.link_url("changedump-archive.xml"))],
        )
        if self.redo or closed_one or top > done or not self.path("changedump.xml").exists():
            existed = self.path("changedump.xml").exists()
            self.write("changedump.xml", doc, [self._package_entry(p) for p in live])
            self.event(Capability.CHANGEDUMP, "changedump.xml", "updated" if existed else "created")
        self.note("changedump", "changedump.xml", doc, len(live))

    def _changed_since_scan(self, keys: list[str]) -> None:
        """Files whose packaged bytes are not the ones the scan hashed: the next run reads
        them again and lists them as updated (with what it then finds), so the dumps and the
        lists agree again even if the file went back to the bytes the scan saw."""
        if keys:
            self.state.mark_dirty(keys)
            self.problems.append(
                f"{len(keys)} file(s) changed while they were packaged (listed again next run)"
            )

    def _package_entry(self, row: Any) -> Resource:
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

    def _change_items(self, first: int, last: int) -> Iterator[PackageItem]:
        for key, res in self.state.packaged_changes(first, last):
            if res.change == "deleted":
                yield PackageItem(key=key, entry=res, open=None)
            else:
                yield PackageItem(
                    key=key,
                    entry=res,
                    open=self._opener(key),
                    length=res.length or 0,
                    expect=res.hashes,
                )


_LEFTOVERS = (".*.tmp", ".*.staged", ".*.staged.relink")


def _remove_leftovers(directory: Path) -> None:
    """Temporary files of a run that was killed (they are never served: dot files)."""
    for pattern in _LEFTOVERS:
        for p in directory.rglob(pattern):
            p.unlink(missing_ok=True)


def _check_clashes(config: PublishConfig) -> None:
    """Documents and resources must not share URLs: refuse a layout where a set's documents
    would be published where a file of some set's directory is published too."""
    for s in config.sets:
        docs = config.set_url(s)
        for other in config.sets:
            if docs.startswith(other.base_url):
                rel = docs[len(other.base_url) :].rstrip("/")
                if rel and (other.dir / rel).exists():
                    raise ResourceSyncError(
                        f"the documents of set {s.name!r} would be published at {docs}, where "
                        f"{other.dir / rel} is published too: choose another --name or "
                        "--docs-url",
                        source=str(other.dir / rel),
                    )
            if (
                other.base_url.startswith(docs)
                or other.base_url == config.docs_url + ".well-known/"
            ):
                raise ResourceSyncError(
                    f"set {other.name!r} publishes its resources at {other.base_url}, inside "
                    f"the documents of set {s.name!r} ({docs}): choose another --name"
                )


def _write_description(config: PublishConfig) -> None:
    links = []
    if config.describedby:
        links.append(Link(rel="describedby", href=config.describedby))
    entries = []
    for s in config.sets:
        entry = Resource(loc=config.set_url(s) + "capabilitylist.xml", capability="capabilitylist")
        if s.describedby:
            entry.links.append(Link(rel="describedby", href=s.describedby))
        entries.append(entry)
    write_document(
        config.out / DESCRIPTION_PATH,
        Document(capability=Capability.DESCRIPTION, links=links),
        entries,
        spec_version=config.spec_version,
        fsync=config.fsync,
    )


def _write_published(
    config: PublishConfig,
    docs: dict[str, list[DocumentInfo]],
    recent: dict[str, list[dict[str, str]]],
    counts: dict[str, int],
    clock: Callable[[], datetime] | None,
) -> None:
    now = (clock or (lambda: datetime.now(UTC)))()
    data = {
        "format": 1,
        "published_at": format_w3c(now),
        "docs_url": config.docs_url,
        "description": {"path": DESCRIPTION_PATH, "url": config.description_url},
        "sets": [
            {
                "name": s.name,
                "dir": str(s.dir.resolve()),
                "base_url": s.base_url,
                "capabilitylist": {
                    "path": f"{s.name}/capabilitylist.xml",
                    "url": config.set_url(s) + "capabilitylist.xml",
                },
                "documents": [d.to_json() for d in docs.get(s.name, [])],
                "resources": counts.get(s.name, 0),
                "recent_changes": recent.get(s.name, []),
                **(
                    {
                        "channel": {
                            "topic": config.topic_url(s),
                            "hub": s.hub,
                            "latest": f"{s.name}/change/latest.xml",
                        },
                    }
                    if s.hub
                    else {}
                ),
                **(
                    {
                        "framework_channel": {
                            "topic": config.framework_topic_url(s),
                            "hub": s.hub,
                            "latest": f"{s.name}/framework/latest.xml",
                        }
                    }
                    if s.hub and s.framework_notification
                    else {}
                ),
            }
            for s in config.sets
        ],
    }
    config.state.mkdir(parents=True, exist_ok=True)
    with AtomicFile(config.state / PUBLISHED_FILE, fsync=config.fsync) as f:
        f.write(json.dumps(data, indent=1).encode("utf-8"))
