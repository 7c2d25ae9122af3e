"""Rules across documents: each document against the entry that listed it (core 1.1 §8–13,
Archives 0.9.1), checked once the walk is over from a small record of every document read.

- an index's parts have the index's capability, and `at`/`completed`/`from`/`until` written on
  an index entry equal the part's own;
- a Source Description lists Capability Lists; a Capability List's entries have the capability
  they claim; an archive lists documents of its capability; a dump's `contents` is a manifest;
- the `up` link of a listed document points at the document that lists it (a Capability List
  at its Source Description, a capability document at its Capability List), and an index's
  parts point up where the index does;
- the Change Lists of an index or an archive are consecutive: no gap, no overlap, at most one
  open (no `until`) and it is the last.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from ...w3cdt import format_w3c
from .entries import Series
from .findings import ERROR, Finding

__all__ = ["DocInfo", "Listed", "check_across"]

_ARCHIVED = {
    "resourcelist-archive": "resourcelist",
    "resourcedump-archive": "resourcedump",
    "changelist-archive": "changelist",
    "changedump-archive": "changedump",
}
_MANIFEST = {"resourcedump": "resourcedump-manifest", "changedump": "changedump-manifest"}


@dataclass(frozen=True, slots=True)
class DocInfo:
    """What the cross-document rules need of a document that was read."""

    name: str
    url: str | None
    capability: str | None
    index: bool
    at: datetime | None
    completed: datetime | None
    from_: datetime | None
    until: datetime | None
    up: str | None


@dataclass(frozen=True, slots=True)
class Listed:
    """An entry of a parent document that names a child document (its `<loc>` or a link)."""

    parent: str
    child: str  # the walk's name for the child (a path or a URL)
    loc: str
    line: int
    position: int
    via_contents: bool
    capability: str | None
    at: datetime | None
    completed: datetime | None
    from_: datetime | None
    until: datetime | None


def _fmt(t: datetime | None) -> str:
    return format_w3c(t) if t is not None else "(none)"


def check_across(
    docs: dict[str, DocInfo], listed: list[Listed], emit: Callable[[Finding], None]
) -> None:
    by_parent: dict[str, list[Listed]] = {}
    for item in listed:
        by_parent.setdefault(item.parent, []).append(item)
    for parent_name, items in by_parent.items():
        parent = docs.get(parent_name)
        if parent is None or parent.capability is None:
            continue
        series_of: list[tuple[Listed, DocInfo]] = []
        for item in items:
            child = docs.get(item.child)
            if child is None:
                continue  # not read: reported by the walk (unreadable or not followed)
            _check_pair(parent, item, child, emit)
            if (parent.index and parent.capability in ("changelist", "changedump")) or (
                parent.capability in ("changelist-archive", "changedump-archive")
            ):
                series_of.append((item, child))
        if series_of:
            what = (
                f"{parent.capability} index" if parent.index else f"{parent.capability}"
            ) + f" {parent.name}"

            series = Series(what, _reporter(parent_name, emit))
            for item, child in sorted(series_of, key=lambda p: p[0].position):
                series.add(child.from_, child.until, item.line, item.loc)


def _reporter(
    source: str, emit: Callable[[Finding], None]
) -> Callable[[str, str, int | None, str | None], None]:
    def report(rule: str, message: str, line: int | None, name: str | None) -> None:
        emit(Finding(ERROR, message, source, line, name, rule))

    return report


def _check_pair(
    parent: DocInfo, item: Listed, child: DocInfo, emit: Callable[[Finding], None]
) -> None:
    def error(rule: str, message: str) -> None:
        emit(Finding(ERROR, message, child.name, None, None, rule))

    pcap = parent.capability
    where = f"{parent.name}:{item.line}"
    expected: str | None = None
    rule = ""
    if item.via_contents:
        expected, rule = _MANIFEST.get(pcap or ""), "core-dump-manifest-capability"
    elif parent.index:
        expected, rule = pcap, "core-index-part-capability"
    elif pcap == "description":
        expected, rule = "capabilitylist", "core-8-description-entry"
    elif pcap == "capabilitylist":
        expected, rule = item.capability, "core-9.2-capability-claimed"
    elif pcap in _ARCHIVED:
        expected, rule = _ARCHIVED[pcap], "archives-capability"
    if expected is not None and child.capability != expected:
        error(
            rule,
            f"is a {child.capability or 'document without capability'}"
            f"{' index' if child.index else ''}, but {where} lists it as a {expected}",
        )
    if parent.index and not item.via_contents:
        for name, on_entry, own in (
            ("at", item.at, child.at),
            ("completed", item.completed, child.completed),
            ("from", item.from_, child.from_),
            ("until", item.until, child.until),
        ):
            if on_entry is not None and on_entry != own:
                error(
                    "core-index-part-times",
                    f"its {name} is {_fmt(own)}, but the index entry at {where} says "
                    f"{_fmt(on_entry)}",
                )
    # The up link: to the document that lists it (Source Description → Capability List →
    # capability documents); an index's parts and an archive's lists point where it points.
    if item.via_contents or child.up is None:
        return
    if pcap in ("description", "capabilitylist") and not parent.index:
        target = parent.url
        whose = f"the {pcap} that lists it ({where})"
    elif parent.index or pcap in _ARCHIVED:
        target = parent.up
        whose = f"where {parent.name} points up"
    else:
        return
    if target is not None and child.up != target:
        error(
            "core-up-target",
            f'its <rs:ln rel="up"> is {child.up}, not {target}: {whose}',
        )
