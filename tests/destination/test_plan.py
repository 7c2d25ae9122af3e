"""The plan's table: the final state per URI, in the order of each URI's last occurrence."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

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
