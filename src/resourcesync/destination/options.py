"""What a sync is asked to do (`SyncOptions`), and what every stage of one run shares (`Run`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ..filters import PathFilter
from ..http import Bandwidth, HttpOptions, scoped_to
from ..http.reach import Reach

if TYPE_CHECKING:
    import httpx

    from .mirror import Mirror
    from .report import Action
    from .state import CopyState

__all__ = ["Progress", "Run", "SyncOptions", "scoped"]

#: A progress callback: (phase, done, total, bytes).
Progress = Callable[[str, int, int, int], None]


@dataclass
class SyncOptions:
    delete: bool = False
    dry_run: bool = False
    baseline: bool = False
    #: A baseline that also finds the files of DEST no URI the Source lists maps to and the
    #: copy does not hold (removed with `delete`, else reported): `sync --repair`.
    repair: bool = False
    via: str = "auto"
    transfers: int = 8
    per_host: int = 4
    delay: float = 0.0
    checksum: bool = True
    fsync: bool = False
    #: Extra request headers (e.g. Authorization), sent only to the Source's own hosts.
    headers: dict[str, str] = field(default_factory=dict)
    http: HttpOptions = field(default_factory=HttpOptions)
    mappings: list[tuple[str, Path]] = field(default_factory=list)
    set: str | None = None
    #: Give each fetched file the `<lastmod>` the Source lists as its modification time
    #: (as resync, `rsync -t` and rclone do).
    preserve_times: bool = True
    #: Connection failures in a row (after retries) after which a host is given up for the
    #: rest of the run: what is left for it is reported failed, to be retried next run.
    host_failures: int = 5
    #: With --delete: a run that would delete more than this deletes nothing (rclone's
    #: --max-delete): the deletions stay pending and the run exits 1.
    max_delete: int | None = None
    #: With --delete: a run that would delete every resource the copy holds of a set and
    #: fetch none (its Source lists nothing: an outage, a volume that did not mount) deletes
    #: nothing unless this is set (Unison's `confirmbigdeletes`): kept pending, exit 1.
    allow_empty: bool = False
    #: Seconds behind its cursor an incremental run looks at the changes listed there, for
    #: one the copy does not hold (a Source's transaction that committed after a later one
    #: was read, listed in time order behind it); 0: none.
    lookback: float = 600.0
    #: Seconds the Source's Change Lists may end before a cursor that was read from them
    #: (not from a notification) before the copy calls it a history that changed (a Source
    #: restored from a backup that has changed nothing since): a list served stale by a cache
    #: or a lagging replica looks the same for a while. 0: at once.
    history_grace: float = 3600.0
    #: Told of every change made to the copy (or, with --dry-run, that would be made).
    on_action: Callable[[Action], None] | None = None
    #: Where the copy's state is kept, given the path of its SQLite file under
    #: DEST/.resourcesync/ (default: that file; a fleet gives its shared store's).
    state: Callable[[Path], CopyState] | None = None
    #: Which resources, by where they land under DEST (fnmatch patterns, `*` across `/`):
    #: the others are neither fetched, nor deleted, nor audited.
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    #: An incremental run from this time instead of the copy's cursor (resync's --from).
    since: datetime | None = None
    #: Seconds after which an incremental run compares the copy with the Source's Resource
    #: List, as a baseline does, once the Source has published one newer than the one the
    #: copy was last compared with (0: never). A Change List that missed a change (a Source's
    #: bug, a file changed behind its publisher) left the copy behind for good while every
    #: run said ok; only `audit` told.
    reconcile: float = 7 * 86400.0
    #: Files replaced or deleted are moved here first, at their path under DEST (rsync's and
    #: rclone's --backup-dir).
    backup_dir: Path | None = None
    #: Bytes per second all of a run's transfers share (rclone's --bwlimit); None: no limit.
    bwlimit: int | None = None
    #: Let requests go to loopback, private and link-local addresses wherever the Source's
    #: documents and answers lead (`--any-address`); by default only to the kinds of address
    #: the Source itself is on (`http.reach`). Ignored when `http.reach` is given.
    any_address: bool = False

    def __post_init__(self) -> None:
        # From Python paths may be str and lists lists (issue 14.15).
        self.mappings = [(prefix, Path(d)) for prefix, d in self.mappings]
        if self.backup_dir is not None:
            self.backup_dir = Path(self.backup_dir)
        self.include, self.exclude = tuple(self.include), tuple(self.exclude)

    @property
    def filter(self) -> PathFilter:
        return PathFilter(self.include, self.exclude)


@dataclass
class Run:
    """The parts one sync run's stages (plan, dumps, transfer) share."""

    options: SyncOptions
    mirror: Mirror
    state: CopyState
    client: httpx.Client
    progress: Progress | None = None
    #: The run's shared bandwidth budget (`SyncOptions.bwlimit`).
    bandwidth: Bandwidth | None = None


def scoped(options: SyncOptions, source: str) -> SyncOptions:
    """The run's options as they hold for `source`: credentials (`--header`, `--token`) go to
    the Source's own host on every request — documents and resources — and to no other host;
    requests go to the public Internet, the Source's host, the hosts its mappings name and the
    kinds of address the Source is on (`http.reach`), unless `any_address`."""
    http = options.http
    if http.reach is None and not options.any_address:
        mapped = [prefix for prefix, _ in options.mappings]
        http = dataclasses.replace(http, reach=Reach.around(source, mapped))
    if options.headers and not http.scoped_headers:
        http = scoped_to(http, options.headers, [source])
    return options if http is options.http else dataclasses.replace(options, http=http)
