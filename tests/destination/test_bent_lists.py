"""`sync` and `audit` read a bent Resource List alike (a property test).

A Source's Resource List may list one URI several times with different descriptions, and keep
tombstones (`change="deleted"`) beside them; the Source may serve other bytes than it lists.
Whatever the list, `sync` must not say ok over a copy that `audit` — reading the same list —
calls different, and the copy it says ok over must be the one the list describes (the last
entry of each URI, tombstones not listed). When the Source serves what its list's last entries
say, `sync` must succeed.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.destination.helpers import (
    HandSource,
    cli_json,
    entry,
    hand_source,
    md5,
    package,
    tree,
    urlset,
)

URIS = ("a.txt", "b.txt", "c.txt")
VARIANTS = 2
DELETED = -1
AT = "2024-01-01T00:00:00Z"


def _body(name: str, variant: int) -> bytes:
    return f"{name} variant {variant}\n".encode() * (variant + 1)


@st.composite
def states(draw: st.DrawFn) -> tuple[dict[str, int | None], list[tuple[str, int, bool]]]:
    """One Source's state: the entries of its Resource List, in order (a URI, a variant or
    DELETED for a tombstone, and whether the URI is spelled another way: `%61.txt` for
    `a.txt`, one URI by RFC 3986 §6.2.2; URIs repeated often), and what it serves of each URI
    (a variant, or None for a 404) — for an honest Source, what the last entries describe."""
    listed = draw(
        st.lists(
            st.tuples(
                st.sampled_from(URIS[:2]) | st.sampled_from(URIS),
                st.integers(DELETED, 1),
                st.booleans(),
            ),
            max_size=7,
        )
    )
    served = draw(st.fixed_dictionaries({n: st.none() | st.integers(0, 1) for n in URIS}))
    if draw(st.booleans()):
        for name, variant, _ in listed:
            if variant != DELETED:
                served[name] = variant
    return served, listed


@pytest.fixture(scope="module")
def source() -> Iterator[HandSource]:
    with hand_source() as src:
        yield src


_dests = itertools.count()


def _publish(
    src: HandSource,
    served: dict[str, int | None],
    listed: list[tuple[str, int, bool]],
    at: str,
    as_dump: bool = False,
) -> None:
    b = src.base
    src.files.clear()
    for name, variant in served.items():
        if variant is not None:
            src.files[f"/{name}"] = _body(name, variant)
    entries: list[dict[str, Any]] = []
    for name, variant, spelled in listed:
        path = f"/%{ord(name[0]):02X}{name[1:]}" if spelled else f"/{name}"
        if variant == DELETED:
            entries.append({"loc": b + path, "change": "deleted"})
        else:
            entries.append(entry(b, path, _body(name, variant)))
    if not as_dump:
        src.publish(entries, at=at)
        return
    # A Source that publishes its state as a Resource Dump only: the entries are the
    # manifests' (each with its own member), split between two packages.
    parts = []
    half = (len(entries) + 1) // 2
    for n, chunk in enumerate((entries[:half], entries[half:])):
        members = {}
        for i, e in enumerate(chunk):
            if e.get("change") != "deleted":
                e["path"] = f"/m{n}-{i}.txt"
                members[f"m{n}-{i}.txt"] = _bodies[e["md5"]]
        zipped = package(members, urlset("resourcedump-manifest", chunk, at=at))
        src.files[f"/p{n}.zip"] = zipped
        parts.append(entry(b, f"/p{n}.zip", zipped))
    src.capabilities([{"loc": f"{b}/resourcedump.xml", "capability": "resourcedump"}])
    src.docs["/resourcedump.xml"] = urlset("resourcedump", parts, at=at)


_bodies = {md5(_body(n, v)): _body(n, v) for n in URIS for v in range(VARIANTS)}


def _served(served: dict[str, int | None], name: str) -> bytes | None:
    variant = served[name]
    return None if variant is None else _body(name, variant)


def _described(listed: list[tuple[str, int, bool]]) -> dict[str, bytes]:
    """The copy the list describes: the last entry of each URI; a tombstone is not listed."""
    last: dict[str, int] = {}
    for name, variant, _ in listed:
        if variant != DELETED:
            last[name] = variant
    return {name: _body(name, variant) for name, variant in last.items()}


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(states(), min_size=1, max_size=3))
@pytest.mark.parametrize("as_dump", [False, True], ids=["resource list", "resource dump"])
def test_sync_says_ok_only_over_the_copy_audit_finds_in_sync(
    source: HandSource, tmp_path_factory: pytest.TempPathFactory, steps: list[Any], as_dump: bool
) -> None:
    dest = tmp_path_factory.getbasetemp() / f"bent-{next(_dests)}"
    check_bent_lists(source, dest, steps, as_dump)


def check_bent_lists(src: HandSource, dest: Path, steps: list[Any], as_dump: bool) -> None:
    """Each step's Resource List (or Resource Dump) synced over the copy the last left:
    `sync` says ok only over the copy the list describes, which `audit` finds in sync."""
    # A copy of a plain list first, so that later lists meet files the copy holds.
    plain = [(name, 0, False) for name in URIS]
    _publish(src, dict.fromkeys(URIS, 0), plain, "2024-01-01T00:00:00Z", as_dump)
    code, summary = cli_json("sync", src.base, dest, "--delete")
    assert code == 0, summary
    for day, (served, listed) in enumerate(steps, start=2):
        _publish(src, served, listed, f"2024-01-{day:02d}T00:00:00Z", as_dump)
        code, summary = cli_json("sync", src.base, dest, "--baseline", "--delete", "--allow-empty")
        described = _described(listed)
        audited_code, audited = cli_json("audit", src.base, dest)
        held = tree(dest)
        if code == 0:
            assert held == described, (listed, served, summary)
            assert audited_code == 0, (listed, served, audited)
        # The Source serves what its last entries say (a dump holds the bytes themselves):
        # nothing can stop the copy.
        if as_dump or all(_served(served, name) == body for name, body in described.items()):
            assert code == 0, (listed, served, summary)
            assert held == described


NAMES = ("a.txt", "b.txt", "c.txt", "d.txt")
CHANGES = ("created", "updated", "deleted")


@st.composite
def change_steps(draw: st.DrawFn) -> tuple[list[tuple[str, str, int, bool, int]], bool]:
    """The changes one step adds to the Change List, in the order listed: a URI, its change,
    the variant its entry describes, whether the URI is spelled another way, and its hour in
    the step's day (out of order at random: taken as listed); and whether the Source serves
    what its changes leave (an honest Source) or whatever it likes."""
    changes = draw(
        st.lists(
            st.tuples(
                st.sampled_from(NAMES[:2]) | st.sampled_from(NAMES),
                st.sampled_from(CHANGES),
                st.integers(0, 1),
                st.booleans(),
                st.integers(0, 23),
            ),
            max_size=6,
        )
    )
    return changes, draw(st.booleans())


#: What the Change List test draws (also drawn with the copy's state in a fleet's store).
CHANGE_LIST_STEPS: dict[str, st.SearchStrategy[Any]] = {
    "steps": st.lists(change_steps(), min_size=1, max_size=2),
    # What a lying Source serves instead: a URI's other variant, or nothing.
    "lying": st.lists(st.tuples(st.sampled_from(NAMES), st.none() | st.integers(0, 1)), max_size=2),
}


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(**CHANGE_LIST_STEPS)
def test_sync_applies_a_bent_change_list_as_audit_reads_it(
    source: HandSource,
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[Any],
    lying: list[tuple[str, int | None]],
) -> None:
    """The same for the changes after a baseline: Change Lists that list a URI several times,
    out of order, under two spellings, create what exists, update or delete what the copy
    never held. The copy a run says ok over is the baseline with the last change of each URI
    applied, and `audit` finds it in sync; a Source that serves that state is followed."""
    dest = tmp_path_factory.getbasetemp() / f"bent-changes-{next(_dests)}"
    check_bent_change_lists(source, dest, steps, lying)


def check_bent_change_lists(
    src: HandSource, dest: Path, steps: list[Any], lying: list[tuple[str, int | None]]
) -> None:
    """A baseline, then each step's changes appended to the Change List and synced."""
    b = src.base
    state = {name: 0 for name in NAMES[:3]}
    listed = [entry(b, f"/{n}", _body(n, v)) for n, v in state.items()]
    changes: list[dict[str, Any]] = []

    def serve(current: dict[str, int]) -> None:
        src.files.clear()
        for name, variant in current.items():
            src.files[f"/{name}"] = _body(name, variant)

    serve(state)
    src.publish(listed, at=AT, changes=[])
    code, summary = cli_json("sync", b, dest, "--delete")
    assert code == 0, summary
    for day, (added, honest) in enumerate(steps, start=2):
        for name, change, variant, spelled, hour in added:
            path = f"/%{ord(name[0]):02X}{name[1:]}" if spelled else f"/{name}"
            when = f"2024-01-{day:02d}T{hour:02d}:00:00Z"
            if change == "deleted":
                changes.append({"loc": b + path, "change": change, "datetime": when})
                state.pop(name, None)
            else:
                changes.append(entry(b, path, _body(name, variant), change=change, datetime=when))
                state[name] = variant
        served: dict[str, int] = dict(state)
        if not honest:
            for name, variant in lying:
                if variant is None:
                    served.pop(name, None)
                else:
                    served[name] = variant
        serve(served)
        src.publish(listed, at=AT, changes=changes)
        # (--allow-empty: a list that deletes everything the copy holds is its own question.)
        code, summary = cli_json("sync", b, dest, "--delete", "--allow-empty")
        described = {name: _body(name, variant) for name, variant in state.items()}
        audited_code, audited = cli_json("audit", b, dest)
        if code == 0:
            assert tree(dest) == described, (changes, served, summary)
            assert audited_code == 0, (changes, served, audited)
        if served == state:
            assert code == 0, (changes, served, summary)
