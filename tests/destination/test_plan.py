"""The plan's table: the final state per URI, in the order of each URI's last occurrence."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from urllib.parse import urlsplit

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from resourcesync.destination import plan as plan_module
from resourcesync.destination.hosts import host_key
from resourcesync.destination.plan import Plan
from resourcesync.model import Resource


def test_a_uri_planned_again_takes_its_last_action_and_moves_to_the_end() -> None:
    plan = Plan(sqlite3.connect(":memory:"))
    for uri in ("a", "b", "c"):
        plan.add(uri, "fetch", Resource(loc=uri, length=1))
    plan.add("a", "delete")
    plan.flush()  # across batches as within one
    plan.add("b", "fetch", Resource(loc="b", length=2))
    plan.add("d", "fetch", Resource(loc="d"))
    plan.add("c", "keep")
    plan.flush()
    rows = plan.db.execute("SELECT uri, action, length FROM plan ORDER BY seq").fetchall()
    assert rows == [
        ("a", "delete", None),
        ("b", "fetch", 2),
        ("d", "fetch", None),
        ("c", "keep", None),
    ]
    assert [uri for uri, _ in plan.rows("fetch")] == ["b", "d"]
    assert plan.count() == 4


def test_a_planned_entry_comes_back_as_it_was_planned() -> None:
    plan = Plan(sqlite3.connect(":memory:"))
    lastmod = datetime(2026, 1, 1, 12, 0, 0, 500, tzinfo=UTC)
    changed = datetime(2026, 1, 2, tzinfo=UTC)
    plan.add("r", "fetch", Resource(loc="r", lastmod=lastmod, length=3, hashes={"md5": "ab"}))
    plan.add("c", "fetch", Resource(loc="c", lastmod=lastmod, datetime=changed))
    plan.add("n", "fetch", Resource(loc="n"))
    got = dict(plan.rows("fetch"))
    # A Resource List entry: changed when modified.
    assert (got["r"].lastmod, got["r"].datetime) == (lastmod, lastmod)
    assert got["r"].hashes == {"md5": "ab"} and got["r"].length == 3
    # A Change List entry keeps its own change time.
    assert (got["c"].lastmod, got["c"].datetime) == (lastmod, changed)
    assert (got["n"].lastmod, got["n"].datetime, got["n"].hashes) == (None, None, {})


@settings(max_examples=60, deadline=None)
@given(
    claims=st.lists(st.tuples(st.sampled_from("abcdefgh"), st.sampled_from("uvwxyz")), max_size=40),
    bound=st.integers(min_value=1, max_value=6),
)
def test_claims_answer_alike_in_memory_and_in_their_table(
    claims: list[tuple[str, str]], bound: int
) -> None:
    """The first URI to claim a local path keeps it, whether the claims are still in memory or
    have moved to their table past the bound (and across a reset); a claim is answered with the
    URI that claimed the path before, the same URI when it did (listed again), None when
    none did."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plan_module, "CLAIMS_IN_MEMORY", bound)
        plan = Plan(sqlite3.connect(":memory:"))
        for _ in range(2):
            owners: dict[str, str] = {}
            for key, uri in claims:
                expected = owners.get(key)
                owners.setdefault(key, uri)
                assert plan.claim(key, uri) == expected
            moved = plan.db.execute("SELECT COUNT(*) FROM claims").fetchone()[0]
            assert moved == (len(owners) if len(owners) > bound else 0)
            plan.reset()


@settings(max_examples=300, deadline=None)
@given(
    uri=st.one_of(
        st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zs")), max_size=40),
        st.builds(
            "{}://{}{}".format,
            st.sampled_from(["http", "HTTPS", "ftp", "a+b.c-d"]),
            st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zs")), max_size=20),
            st.sampled_from(["", "/", "/p?q", "?q/x", "#f/x", "/a#b"]),
        ),
    )
)
@example(uri="HTTP://Host.Example:8080/x")
@example(uri="http://u@h?x/y")
@example(uri="mailto:x@y")
@example(uri="http:/x")
def test_the_host_a_transfer_counts_is_urlsplits_netloc(uri: str) -> None:
    """The per-host limits key each URI by its authority as `urlsplit` takes it (for the URIs
    `urlsplit` takes: the others are refused by the mapping before they are planned)."""
    try:
        netloc = urlsplit(uri).netloc
    except ValueError:
        assume(False)
    assert host_key(uri) == netloc.lower()


def test_strays_come_back_every_one_in_order_past_a_page() -> None:
    plan = Plan(sqlite3.connect(":memory:"))
    paths = [f"/dest/d{i % 7}/f{i:05d}.txt" for i in range(2_503)]
    for p in reversed(paths):
        plan.stray(p)
    plan.stray(paths[0])  # found twice: once
    assert list(plan.strays()) == sorted(paths)
    plan.reset()
    assert list(plan.strays()) == []


_DIGESTS = st.dictionaries(
    st.sampled_from(["md5", "sha-256", "sha-1", "a:b", "{x", "", "é"]) | st.text(max_size=5),
    st.sampled_from(["921ded5f4056685398acbce502bcbe7e", "kXNVhrMA==", "", "a b", "x:y", "é\n"])
    | st.text(max_size=8),
    max_size=3,
)


@given(_DIGESTS)
@example({"md5": "921ded5f4056685398acbce502bcbe7e"})
def test_digests_are_kept_as_they_were_given(hashes: dict[str, str]) -> None:
    """The plan and the state keep an entry's digests in one column, written by hand for the
    usual single token: both read back what was given, and the column is the JSON it always
    was (a copy's database read by an older or newer version alike)."""
    import json

    from resourcesync.destination.state import hashes_column, hashes_of

    plan = Plan(sqlite3.connect(":memory:"))
    plan.add("u", "fetch", Resource(loc="u", hashes=hashes))
    assert [(uri, res.hashes) for uri, res in plan.rows("fetch")] == [("u", hashes)]
    assert hashes_column(hashes) == json.dumps(hashes, sort_keys=True)
    assert hashes_of(hashes_column(hashes)) == hashes
