"""State → document tree: one publication of a Source.

For each set: scan the inventory against the state (committing what changed), then bring the
set's documents up to date from the state. Every file is written under a temporary name and
renamed into place, children before the documents that point at them (packages and manifests,
closed Change Lists, archives, then the live lists), each Capability List after its documents,
the Source Description after the Capability Lists, and `published.json` last.

The state is committed before the documents are written, and a publication that did not
finish is redone by the next run: documents are derived from the state only, so a crash
between the two loses nothing and duplicates nothing.

The documents of a set are written by stages, each in its module, over one `SetRun`
(`setrun`): `changelists`, `dumps`, `resourcelists`, and `notify` for the hub.

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
import stat
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
from ..model import Capability, Document, Link, Resource
from ..sitemap import write_document
from ..w3cdt import format_w3c
from .changelists import publish_changelists
from .config import DESCRIPTION_PATH, PUBLISHED_FILE, PublishConfig, SetConfig
from .inventory import DirectoryInventory, Inventory, ScanStats
from .prefetch import ListingPrefetch
from .resourcelists import publish_resourcelist
from .scan import DeletionsRefused, Scan, ScanResult
from .setrun import DocumentInfo, SetRun
from .state import SetState

__all__ = ["DocumentInfo", "PublishResult", "SetResult", "publish"]

Progress = Callable[[str, int], None]


@dataclass
class SetResult:
    name: str
    scan: ScanResult
    documents: list[DocumentInfo] = field(default_factory=list)
    written: int = 0
    rotated: int = 0
    #: Closed Change Lists let go (`keep_changelists`).
    dropped: int = 0
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
            "changelists_dropped": self.dropped,
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


def publish(
    config: PublishConfig,
    *,
    dry_run: bool = False,
    inventories: dict[str, Inventory] | None = None,
    progress: Progress | None = None,
    clock: Callable[[], datetime] | None = None,
    changed: Mapping[str, Iterable[str]] | None = None,
    head_starts: Mapping[str, ListingPrefetch] | None = None,
) -> PublishResult:
    """Publish every set of the Source once. `inventories` replaces the directory scan of the
    named sets (a database, a feed: see `inventory.Inventory`). `changed`: for the named sets,
    the paths (relative to the set's directory) that changed since the last publication; only
    their directories are scanned (the watcher's: the tree is not walked), when the state has
    the listings of the last scan (otherwise the whole set is). `head_starts`: the listings
    of the named sets begun before this was imported (`prefetch.head_start`), for their scans
    to take over; the caller ends them (as `head_start` does), taken over or not."""
    started = time.monotonic()
    _check_dirs(config, inventories or {})
    _check_clashes(config)
    only = {name: _directories(paths) for name, paths in (changed or {}).items()}
    early = dict(head_starts or {})
    if dry_run:
        return _publish(config, dry_run, inventories, progress, clock, started, only, early)
    with run_lock(config.state):
        return _publish(config, dry_run, inventories, progress, clock, started, only, early)


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
    in case it is a directory (`Scan` keeps those it knows, or their ancestors)."""
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
    early: dict[str, ListingPrefetch],
) -> PublishResult:
    results: list[SetResult] = []
    set_docs: dict[str, list[DocumentInfo]] = {}
    recent: dict[str, list[dict[str, str]]] = {}
    counts: dict[str, int] = {}
    framework: dict[str, tuple[list[Resource], dict[str, str], SetResult]] = {}
    for s in config.sets:
        state_path = config.state_file(s)
        scratch = None
        if dry_run and not state_path.exists():
            # A dry run writes nothing of ours: a first run is tried on a scratch state.
            scratch = tempfile.mkdtemp(prefix="resourcesync-dry-run-")
            state_path = Path(scratch) / "state.sqlite"
        with SetState(state_path, clock=clock) as state:
            # What it published before, read whole first: a record that cannot be read stops
            # the run before anything of it is written.
            state.check()
            inventory: Inventory
            stats = None
            if inventories and s.name in inventories:
                inventory = inventories[s.name]
            else:
                inventory = DirectoryInventory.of_set(config, s)
            step = (lambda n, name=s.name: progress(name, n)) if progress else None
            try:
                scan = Scan(state).run(
                    inventory,
                    s.hashes,
                    dry_run=dry_run,
                    progress=step,
                    uri_base=s.base_url if isinstance(inventory, DirectoryInventory) else None,
                    only=only.get(s.name),
                    refuse=functools.partial(_refused_deletions, s),
                    prefetch=early.pop(s.name, None),
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
            result.dropped = publisher.dropped
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
            with SetState(config.state_file(s), clock=clock) as state:
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


def _tell_phase(progress: Progress, name: str, what: str) -> None:
    """A step of a set's run, for the status line (a count below zero: no count)."""
    progress(f"{name}: {what}", -1)


class _SetPublisher(SetRun):
    """Brings one set's documents up to date with its state: the stages in their order."""

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

    # -- the stages ----------------------------------------------------------------------------

    def resourcelist(self) -> None:
        """The Resource List (§10) and its archive."""
        publish_resourcelist(self)

    def changelist(self) -> None:
        """The Change Lists (§12): rotation, index and archive."""
        publish_changelists(self)

    def resourcedump(self) -> None:
        """The Resource Dump (§11) and its archive."""
        # Imported here: a set without dumps (most runs) needs no ZIP writer (zipfile, tempfile
        # and the package builder are ~5 ms of a re-run's start-up).
        from .dumps import publish_resourcedump

        publish_resourcedump(self)

    def changedump(self) -> None:
        """The Change Dump (§13) and its archive."""
        from .dumps import publish_changedump

        publish_changedump(self)

    def notify(self) -> None:
        """Change notifications to the hub (Change Notification 1.0.1 §3, §4.1)."""
        from .notify import publish_notifications  # with a hub only

        publish_notifications(self)


#: What a run that was killed leaves: dot files, `.NAME` and these endings.
_LEFTOVERS = (".tmp", ".staged", ".staged.relink")


def _remove_leftovers(directory: Path) -> None:
    """Temporary files of a run that was killed (they are never served: dot files), found
    in one walk of the folder (which holds every Change List kept: thousands)."""
    for folder, _, files in os.walk(directory):
        for name in files:
            if name[0] == "." and any(name.endswith(e) and len(name) > len(e) for e in _LEFTOVERS):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(folder, name))


def _check_dirs(config: PublishConfig, inventories: Mapping[str, Inventory]) -> None:
    """Each set's directory (but those an inventory replaces) is a directory this process can
    look at, said first: one below a directory it may not search was said as a file that could
    not be written, from wherever the run first met it. (One it cannot read itself is kept as
    published where the scan meets it.)"""
    for s in config.sets:
        if s.name in inventories:
            continue
        try:
            is_dir = stat.S_ISDIR(s.dir.stat().st_mode)
        except PermissionError as exc:
            raise ResourceSyncError(
                f"cannot be looked at ({exc.strerror}): a directory above it cannot be searched",
                source=str(s.dir),
            ) from None
        except OSError:
            is_dir = False
        if not is_dir:
            raise ResourceSyncError("not a directory", source=str(s.dir))


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
                        "this is published too: choose another --name or --docs-url",
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
