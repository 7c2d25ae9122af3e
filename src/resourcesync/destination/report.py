"""What a sync or an audit reports: counts, the problems by URI, and the verdict (`ok`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..jsonable import link_json
from ..model import Link

__all__ = ["Action", "AuditReport", "Problem", "SetReport", "SyncReport"]

#: Examples of each kind kept in an audit report.
EXAMPLES = 10
#: Problems kept per set (the counts stay exact beyond it).
MAX_PROBLEMS = 1000
#: URIs a dry run lists per kind of action (the counts stay exact beyond it).
MAX_LISTED = 10_000


@dataclass(frozen=True)
class Action:
    """One thing a run did, or with --dry-run would do, to the copy: `created`, `updated`
    (a fetch; `path` is where it lands), `deleted`, or `pending` (a deletion kept for a run
    with --delete)."""

    kind: str
    uri: str
    path: str | None = None


@dataclass
class Problem:
    uri: str
    message: str


@dataclass
class SetReport:
    name: str
    mode: str = ""
    via: str = "lists"
    planned: int = 0
    fetched: int = 0
    not_modified: int = 0
    unchanged: int = 0
    deleted: int = 0
    pending_deletes: int = 0
    failed: int = 0
    refused: int = 0
    #: Left out by --include/--exclude (neither fetched nor deleted).
    excluded: int = 0
    #: Files of the copy found deleted, replaced or edited here since it wrote them (an
    #: incremental run looks at each): fetched again.
    changed_here: int = 0
    #: With --repair and without --delete: files of DEST that no URI the Source lists maps to
    #: and the copy does not hold, kept.
    strays: int = 0
    bytes: int = 0
    changes: int = 0
    gap: str | None = None
    #: Why the Source's documents could not be read whole (nothing was deleted then).
    incomplete: str | None = None
    cursor: str | None = None
    problems: list[Problem] = field(default_factory=list)
    #: With --dry-run: the URIs each action would touch (`created`, `updated`, `deleted`,
    #: `pending`), at most MAX_LISTED of each.
    would: dict[str, list[str]] = field(default_factory=dict)
    #: The links the Source gave for the resources fetched in this run (`alternate`,
    #: `canonical`, `memento`, `patch`, `describedby`, `duplicate` …), by URI; at most
    #: MAX_LISTED. Every resource's links are kept in the state (`resourcesync ls`).
    links: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: URIs refused because no mapping covers them, by reason (see `refuse`).
    unmapped: dict[str, int] = field(default_factory=dict)

    def problem(self, uri: str, message: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(Problem(uri, message))

    def refuse(self, uri: str, exc: Exception) -> None:
        """A URI refused (its local path is unsafe, or no mapping covers it). URIs that no
        mapping covers are said once per reason, with the --map that would take them, and
        counted (issue 14.10): not one line each."""
        self.refused += 1
        message = getattr(exc, "message", str(exc))
        hint = getattr(exc, "hint", None)
        if hint is None:
            self.problem(uri, f"refused: {message}")
            return
        n = self.unmapped.get(message, 0)
        self.unmapped[message] = n + 1
        if n == 0:
            more = f"; to take such URIs, add {hint}" if hint else ""
            self.problem(uri, f"refused: {message}{more} (others like it are counted, not listed)")

    def link(self, uri: str, links: list[Link]) -> None:
        """A resource fetched in this run came with links (at most MAX_LISTED are shown)."""
        if links and len(self.links) < MAX_LISTED:
            self.links[uri] = [link_json(ln) for ln in links]

    def list_would(self, kind: str, uri: str) -> None:
        listed = self.would.setdefault(kind, [])
        if len(listed) < MAX_LISTED:
            listed.append(uri)


@dataclass
class SyncReport:
    source: str
    dest: str
    how: str
    sets: list[SetReport]
    seconds: float = 0.0
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return all(
            s.failed == 0 and s.refused == 0 and s.gap is None and s.incomplete is None
            for s in self.sets
        )

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        out["seconds"] = round(self.seconds, 3)
        return out


@dataclass
class AuditReport:
    source: str
    dest: str
    expected: int = 0
    in_sync: int = 0
    missing: int = 0
    extra: int = 0
    different: int = 0
    #: Files the copy holds under URIs the audited Source's mapping does not cover (another
    #: Source synced into the same DEST, or this one's former address): not audited.
    others: int = 0
    #: Listed last in a Change List with no `change` (nor `capability`), or another word than
    #: created, updated, deleted: what the copy should hold cannot be told, so the audit
    #: cannot say it is in sync.
    unknown: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)
    #: What discovery and the Capability Lists said, as a sync says it ("warning: …").
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: Examples kept of each kind (None: every one).
    limit: int | None = field(default=EXAMPLES, repr=False)

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.extra == 0 and self.different == 0 and self.unknown == 0

    def note(self, kind: str, uri: str) -> None:
        ex = self.examples.setdefault(kind, [])
        if self.limit is None or len(ex) < self.limit:
            ex.append(uri)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("limit")
        out["in_sync_ok"] = self.ok
        out["seconds"] = round(self.seconds, 3)
        return out
