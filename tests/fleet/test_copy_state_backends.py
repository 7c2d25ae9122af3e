"""A copy's state in the fleet's store (issue 12), on both of the store's backends: SQLite (the
embedded fleet's database) and a real PostgreSQL server.

Two kinds of evidence. First, a differential test: one random sequence of operations applied to
the Destination's own SQLite state and to the store's, every observation compared after every
step (a second copy in the same store, worked on in between, must never show through). Second,
the Destination's own tests, run again with the copy's state in the store instead of under
DEST/.resourcesync/: what they check of the copy and of the reports must hold on either backend.
The tests that read the state file itself, or sync in a child process, stay with the local
state.
"""

from __future__ import annotations

import dataclasses
import json
import random
import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import resourcesync.destination.audit as audit_module
import resourcesync.destination.sync as sync_module
from resourcesync.destination.options import scoped
from resourcesync.destination.plan import Plan
from resourcesync.destination.state import CopyState, Cursor, DestinationState, path_key
from resourcesync.destination.sync import SyncOptions, sync
from resourcesync.fleet.copystate import IMPORTED_SUFFIX, StoreCopyState
from resourcesync.fleet.store import SQLiteStore, SQLStore
from resourcesync.model import Link, Resource
from resourcesync.w3cdt import parse_w3c
from tests.destination.helpers import HandSource, hand_source, published_source, tree
from tests.destination.test_bent_lists import (
    CHANGE_LIST_STEPS,
    check_bent_change_lists,
    check_bent_lists,
    states,
)

# The Destination's tests, collected here again (each runs on both backends).
from tests.destination.test_faults import (  # noqa: F401
    test_500s_then_success_are_retried,
    test_a_body_cut_short_keeps_the_previous_copy,
    test_a_hostile_dump_package_extracts_only_what_is_safe,
    test_bytes_whose_digest_differs_are_retried_once_then_reported,
    test_each_refused_dump_member_is_counted_once,
)
from tests.destination.test_habits import (  # noqa: F401
    test_a_source_that_suddenly_lists_nothing_empties_no_copy_by_default,
)
from tests.destination.test_sync import (  # noqa: F401
    test_a_change_list_the_index_names_but_the_source_lost,
    test_a_gap_is_reported_and_baseline_recovers,
    test_a_second_baseline_of_an_unchanged_source_transfers_no_resource,
    test_audit_exit_codes_and_counts,
    test_baseline_of_an_emptied_source_keeps_files_pending_until_delete,
    test_baseline_repairs_files_changed_locally,
    test_baseline_via_dumps_mirrors_the_published_dir,
    test_baseline_via_lists_mirrors_the_published_dir,
    test_created_then_deleted_between_runs_is_not_fetched,
    test_dry_run_changes_nothing,
    test_rotation_walks_back_through_the_index_and_the_archive,
    test_set_chooses_one_resource_set,
    test_walks_back_through_the_change_list_archive,
)
from tests.destination.test_trust import (  # noqa: F401
    test_a_baseline_that_cannot_read_the_whole_list_deletes_nothing,
    test_a_change_list_of_change_lists_is_followed_not_downloaded,
    test_a_change_listed_out_of_chronological_order_is_not_skipped,
    test_a_change_that_appears_late_behind_the_cursor_is_applied,
    test_a_change_value_in_another_case_is_read_as_it_means_another_word_is_not_applied,
    test_a_deletion_listed_under_two_spellings_is_one_deletion,
    test_a_deletion_never_removes_a_file_this_sync_did_not_write,
    test_a_deletion_then_a_creation_under_another_spelling_is_the_creation,
    test_a_gap_inside_a_change_list_index_is_reported,
    test_a_later_change_supersedes_a_remembered_failure,
    test_a_notification_delivered_after_later_ones_is_superseded_by_what_the_copy_applied,
    test_a_pending_deletion_superseded_by_a_re_creation_is_not_applied,
    test_a_resource_dump_that_spells_a_uri_another_way_keeps_its_file,
    test_a_resource_list_entry_that_says_deleted_is_not_listed,
    test_a_resource_list_of_resource_lists_is_followed_not_downloaded,
    test_a_resource_list_time_without_a_zone_is_no_gap_for_change_lists_with_theirs,
    test_a_source_whose_history_went_back_is_not_followed_as_if_nothing_changed,
    test_a_uri_listed_twice_in_a_resource_dump_takes_its_last_entry_as_audit_does,
    test_a_uri_listed_twice_in_a_resource_list_takes_its_last_entry_as_audit_does,
    test_a_uri_the_source_spells_another_way_is_the_same_resource,
    test_an_edit_that_keeps_the_length_is_fetched_from_a_source_without_digests,
    test_an_entry_without_a_change_is_said_by_every_run_until_a_change_resolves_it,
    test_changes_in_times_without_a_zone_are_not_skipped_behind_the_cursor,
    test_changes_looked_at_again_behind_the_cursor_take_the_last_spelling,
    test_lastmod_without_datetime_is_not_the_time_of_the_change,
    test_spellings_of_one_uri_in_one_run_are_one_resource,
    test_the_cursor_is_the_latest_change_applied_not_the_last_listed,
    test_two_uris_never_share_one_local_file,
)


@pytest.fixture(params=["sqlite", "postgresql"], autouse=True)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SQLStore]:
    """The fleet's store on one backend; every sync in the test keeps its copy's state there
    (one copy per DEST), never under DEST/.resourcesync/."""
    opened: SQLStore
    if request.param == "postgresql":
        from resourcesync.fleet.pgstore import PostgresStore

        opened = PostgresStore(request.getfixturevalue("postgres").database())
    else:
        opened = SQLiteStore(tmp_path / "fleet-store" / "fleet.sqlite")
    names: dict[str, str] = {}

    def in_store(local: Path) -> CopyState:
        assert not local.exists(), f"a local state was written: {local}"
        return opened.copy_state(names.setdefault(str(local.parent.parent), f"c{len(names)}"))

    def with_store(options: SyncOptions, url: str) -> SyncOptions:
        return dataclasses.replace(scoped(options, url), state=in_store)

    # Every sync and audit the test runs (through the CLI too) is given that state.
    patch = pytest.MonkeyPatch()
    patch.setattr(sync_module, "scoped", with_store)
    patch.setattr(audit_module, "scoped", with_store)
    try:
        yield opened
    finally:
        patch.undo()
        opened.close()


# -- the Destination's property tests of bent lists, fewer examples a backend ---------------

_BENT = settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def bent_source() -> Iterator[HandSource]:
    with hand_source() as src:
        yield src


@_BENT
@given(steps=st.lists(states(), min_size=1, max_size=3))
@pytest.mark.parametrize("as_dump", [False, True], ids=["resource list", "resource dump"])
def test_bent_lists_in_the_store(
    bent_source: HandSource,
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[Any],
    as_dump: bool,
) -> None:
    """`tests/destination/test_bent_lists.py`'s Resource Lists and Dumps, the state in the
    store: sync says ok only over the copy the lists describe, and audit agrees."""
    check_bent_lists(bent_source, tmp_path_factory.mktemp("bent"), steps, as_dump)


@_BENT
@given(**CHANGE_LIST_STEPS)
def test_bent_change_lists_in_the_store(
    bent_source: HandSource,
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[Any],
    lying: list[tuple[str, int | None]],
) -> None:
    """The same for bent Change Lists after a baseline."""
    check_bent_change_lists(bent_source, tmp_path_factory.mktemp("bent-changes"), steps, lying)


# -- the differential test ----------------------------------------------------------------

URIS = [f"http://example.org/{p}" for p in ("a", "b", "B", "c/d", "é", "e\u0301", "f", "g")]
SETS = ["set1", "set2"]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _observe(state: CopyState) -> dict[str, Any]:
    """Everything the stages can ask of a state."""
    return {
        "known": {u: _known(state, u) for u in URIS},
        # Two URIs of one key are never both recorded by a sync; here they may be, and either
        # may be named: what must hold is that the owner named has that key.
        "owner": {k: _owner_key(state, k) for k in {path_key(u[19:]) for u in URIS}},
        "uris": {s: list(state.uris(s)) for s in SETS},
        "all": [
            (k.uri, k.path, k.length, k.hashes, k.etag, k.links, k.changed)
            for k in state.all_known()
        ],
        "held": {s: [_held(*row) for row in state.held(s)] for s in SETS},
        "count": state.count(),
        "cursor": {s: state.cursor(s) for s in SETS},
        "baseline_at": {s: state.baseline_at(s) for s in SETS},
        "pending": [state.pending_deletes(), *(state.pending_deletes(s) for s in SETS)],
        "failures": {s: state.failures(s) for s in SETS},
        "has_failure": {u: state.has_failure(u) for u in URIS},
        "undated": {u: state.undated_sig(u) for u in URIS},
        "meta": {k: state.get(k) for k in ("running", "note")},
    }


def _held(
    uri: str, path: str, length: int | None, lastmod: str | None, stamp: float | None
) -> tuple[Any, ...]:
    """A held row, its timestamp checked against its text (to the millisecond: SQLite's
    julianday is a double)."""
    if lastmod is None:
        assert stamp is None
    else:
        assert stamp is not None and abs(stamp - parse_w3c(lastmod).timestamp()) < 1e-3
    return uri, path, length, lastmod


def _owner_key(state: CopyState, key: str) -> str | None:
    owner = state.owner(key)
    known = state.known(owner) if owner is not None else None
    return None if known is None else path_key(known.path)


def _known(state: CopyState, uri: str) -> Any:
    k = state.known(uri)
    return (
        None
        if k is None
        else (k.path, k.length, k.hashes, k.etag, k.last_modified, k.links, k.changed)
    )


def _step(rng: random.Random) -> Callable[[CopyState], Any]:
    """One random operation, the same for every state it is applied to."""
    u, s = rng.choice(URIS), rng.choice(SETS)
    when = T0 + timedelta(seconds=rng.randrange(10_000))
    op = rng.randrange(15)
    links = rng.choice([None, [], [Link(rel="alternate", href=u + ".html", type="text/html")]])
    # The time of the change a record came from (None: a Resource List's entry), sometimes
    # with a fraction of a second (kept so that it sorts as the times do).
    changed = rng.choice([None, when, when + timedelta(microseconds=rng.randrange(1, 10**6))])
    if op <= 1:
        row = (u, u[19:], rng.randrange(100), {"md5": f"{rng.randrange(9)}"}, when, "e", "lm", s)
        return lambda st: st.record(*row, links=links, changed=changed)
    if op == 2:
        return lambda st: st.set_links(u, links)
    if op == 3:
        rows = [
            (v, v[19:], rng.randrange(100), {"sha-256": "x"}, None, None, None, s, None, changed)
            for v in rng.sample(URIS, 3)
        ]
        return lambda st: st.record_many(rows)
    if op == 4:
        return lambda st: st.forget(u)
    if op == 5:
        cursor, at = Cursor(when, rng.choice(["", u])), rng.choice([None, when])
        return lambda st: st.set_cursor(s, cursor, baseline_at=at)
    if op == 6:
        return (
            (lambda st: st.reset(s)) if rng.random() < 0.5 else lambda st: st.clear_outstanding(s)
        )
    if op == 7:
        w = rng.choice([None, when])
        return lambda st: st.pend_delete(u, w, s)
    if op == 8:
        expected = {"length": rng.randrange(50)}
        return lambda st: st.fail(u, expected, "a reason", s)
    if op == 9:
        return lambda st: st.clear_failure(u)
    if op == 10:
        value = str(rng.random())
        return lambda st: st.put("note", value) if value < "0.5" else st.drop("note")
    if op == 11:  # its file moved (the mappings changed: remap.py)
        to = rng.choice(["moved/", "x/"]) + u[19:]
        return lambda st: st.relocate(u, to)
    if op == 12:  # another URI's now (a Source that moved, or spells it otherwise: its set
        # kept); never over one held
        v, to = rng.choice(URIS), rng.choice([s, None])
        return lambda st: st.rekey(u, v, to) if v != u and st.known(v) is None else None
    # A run's plan on the scratch: what it saw, kept and marked as undated.
    seen = rng.sample(URIS, rng.randrange(len(URIS)))
    plan = [
        (
            v,
            rng.choice(["fetch", "keep", "delete"]),
            rng.choice([None, "sig"]),
            # Planned from a change (its time kept when it is kept), or from a Resource List.
            rng.choice([None, Resource(loc=v, change="updated", datetime=changed or when)]),
        )
        for v in seen
    ]

    def run(st: CopyState) -> list[str]:
        p = Plan(st.scratch())
        p.seen(seen)
        for v, action, sig, res in plan:
            p.add(v, action, res, sig=sig and f"{sig}-{v}")
        p.flush()
        unseen = sorted(st.unseen(s))
        st.supersede_kept()
        st.mark_changed(p.kept_changes())
        st.remember_undated(s)
        return unseen

    return run


def test_the_store_keeps_a_copys_state_exactly_as_the_destination_does(
    tmp_path: Path, store: SQLStore
) -> None:
    local = DestinationState(tmp_path / "local" / "state.sqlite")
    mine, other = store.copy_state("one"), store.copy_state("other")
    rng = random.Random(20261125)
    try:
        for i in range(400):
            op = _step(rng)
            assert op(local) == op(mine), f"step {i}"
            assert _observe(local) == _observe(mine), f"step {i}"
            _step(rng)(other)  # another copy's work in the same tables never shows through
    finally:
        local.close()
        mine.close()
        other.close()


def test_a_copys_plan_is_written_in_batches_of_one_transaction(store: SQLStore) -> None:
    """A fleet copy's plan lives in a scratch database of its own, which writes a batch of
    rows as one transaction, as a copy with its own state file does (tests/test_sqlite.py):
    one per row was half the cost of a baseline's plan."""
    state = store.copy_state("one")
    try:
        plan = Plan(state.scratch())
        db = plan.db
        db.execute("CREATE TEMP TABLE IF NOT EXISTS x (k TEXT PRIMARY KEY)")
        with pytest.raises(sqlite3.IntegrityError):
            db.executemany("INSERT INTO x VALUES (?)", [("a",), ("b",), ("a",)])
        assert db.execute("SELECT COUNT(*) FROM x").fetchone() == (0,)
        for i in range(2500):  # more than a batch: flushed on the way
            plan.add(f"http://127.0.0.1:9/r{i}", "fetch")
        assert plan.count("fetch") == 2500 and not db.in_transaction
    finally:
        state.close()


def test_removing_a_source_removes_its_copys_state(store: SQLStore) -> None:
    from resourcesync.fleet.registry import Entry

    store.add([Entry(name=n, source=f"http://127.0.0.1:9/{n}/") for n in ("a", "b")], now=0.0)
    for name in ("a", "b"):
        st = store.copy_state(name)
        st.record(URIS[0], "a", 1, {}, None, None, None, "set1")
        st.set_cursor("set1", Cursor(T0))
        st.close()
    assert store.remove("a")
    assert store.copy_state("a").count() == 0 and store.copy_state("a").cursor("set1") is None
    assert store.copy_state("b").count() == 1


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE fleet_copy_resource SET hashes = '{bad' WHERE copy_name = 'a'",
        "UPDATE fleet_copy_resource SET links = '{\"rel\": \"x\"}' WHERE copy_name = 'a'",
        "UPDATE fleet_copy_failed SET expected = 'cut' WHERE copy_name = 'a'",
    ],
    ids=["digests", "links", "failure"],
)
def test_a_value_the_store_cannot_read_is_said_naming_the_store_and_the_copy(
    store: SQLStore, damage: str
) -> None:
    """A copy's value in the store that cannot be read is `StateDamaged` naming the store
    (without its password), the copy and the resource — one Source's failure in a fleet —
    never a traceback nor a value taken for another. Another copy is not touched."""
    from resourcesync.errors import StateDamaged

    for name in ("a", "b"):
        st = store.copy_state(name)
        st.record(URIS[0], "a", 1, {"md5": "0" * 32}, None, None, None, "set1")
        st.fail(URIS[0], {"length": 1}, "a reason", "set1")
        st.close()
    store._execute(damage)
    st = store.copy_state("a")
    reads = [
        lambda: st.known(URIS[0]),
        lambda: list(st.all_known()),
        lambda: st.failures("set1"),
    ]
    failing = 0
    for read in reads:
        try:
            read()
        except StateDamaged as exc:
            failing += 1
            said = str(exc)
            assert store.where() in said and "the copy of a" in said, said
            assert URIS[0] in said and "cannot be read" in said, said
    assert failing == (1 if "failed" in damage else 2)
    other = store.copy_state("b")
    assert other.known(URIS[0]) is not None and other.failures("set1")


@pytest.mark.parametrize(
    ("damage", "read"),
    [
        ("UPDATE fleet_copy_cursor SET datetime = 'garbage'", "cursor"),
        ("UPDATE fleet_copy_cursor SET baseline_at = 'yesterday'", "baseline_at"),
        ("""UPDATE fleet_copy_failed SET expected = '{"lastmod": "soon"}'""", "failures"),
    ],
    ids=["cursor", "baseline", "failure's time"],
)
def test_a_time_the_store_cannot_read_is_said_naming_the_store_and_the_copy(
    store: SQLStore, damage: str, read: str
) -> None:
    """A copy's cursor, last baseline or failed fetch's time that cannot be read is
    `StateDamaged` naming the store and the copy (a `W3CDatetimeError` traceback from every
    run before); a held file's recorded time that cannot be read is no time (the file is
    compared by its digest), as SQLite's `julianday` makes it in a copy's own state."""
    from resourcesync.errors import StateDamaged

    st = store.copy_state("a")
    st.record(URIS[0], "a", 1, {"md5": "0" * 32}, T0, None, None, "set1")
    st.fail(URIS[0], {"length": 1, "lastmod": "2024-01-01T00:00:00Z"}, "a reason", "set1")
    st.set_cursor("set1", Cursor(T0), baseline_at=T0)
    st.close()
    store._execute(damage + " WHERE copy_name = 'a'")
    st = store.copy_state("a")
    with pytest.raises(StateDamaged) as caught:
        getattr(st, read)("set1")
    said = str(caught.value)
    assert store.where() in said and "the copy of a" in said and "cannot be read" in said, said
    store._execute("UPDATE fleet_copy_resource SET lastmod = 'soon' WHERE copy_name = 'a'")
    assert [h[4] for h in st.held("set1")] == [None]


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE fleet_source SET headers = '{cut' WHERE name = 'a'",
        "UPDATE fleet_source SET headers = '[1]' WHERE name = 'a'",
        """UPDATE fleet_source SET headers = '{"Authorization": 1}' WHERE name = 'a'""",
    ],
    ids=["cut", "a-list", "not-text"],
)
def test_a_registry_row_the_store_cannot_read_is_said_and_never_synced_as_another(
    store: SQLStore, damage: str
) -> None:
    """A Source's request headers that cannot be read: its row is read without them and says
    so, naming the store, the Source and how to mend it — a traceback from every fleet command
    before, then a halt of the whole fleet; never a Source synced without its credentials.
    The others are read as they are."""
    from resourcesync.fleet.registry import Entry

    store.add([Entry(name=n, source=f"http://127.0.0.1:9/{n}/") for n in ("a", "b")], now=0.0)
    store._execute(damage)
    a = store.get("a")
    assert a is not None and a.damaged is not None
    assert store.where() in a.damaged and "Source a" in a.damaged, a.damaged
    assert "request headers" in a.damaged and "fleet remove a" in a.damaged, a.damaged
    assert a.entry.headers == {}
    for rows in (list(store.rows()), store.due(1.0, 10)):
        assert [(r.name, r.damaged is not None) for r in rows] == [("a", True), ("b", False)]
    assert store.remove("a")
    assert [r.name for r in store.rows()] == ["b"]


def test_a_last_runs_counts_that_cannot_be_read_are_shown_as_none(store: SQLStore) -> None:
    """The last run's counts (only status shows them; the next run records them again)."""
    from resourcesync.fleet.registry import Entry

    store.add([Entry(name="a", source="http://127.0.0.1:9/a/")], now=0.0)
    store._execute("UPDATE fleet_source SET counts = '[1]' WHERE name = 'a'")
    a = store.get("a")
    assert a is not None and (a.counts, a.damaged) == ({}, None)


# -- a copy synced before, taken over --------------------------------------------------------


def test_a_copy_synced_with_local_state_is_taken_over_without_a_new_baseline(
    tmp_path: Path, store: SQLStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from resourcesync.fleet.job import sync_source
    from resourcesync.fleet.registry import Entry

    monkeypatch.setattr(sync_module, "scoped", scoped)
    files = {"a.txt": b"alpha", "b/c.txt": b"gamma"}
    root = tmp_path / "fleet"
    with published_source(tmp_path, files) as src:
        entry = Entry(name="site", source=src.root, delete=True)
        first = sync_source(entry, root)  # embedded: the state beside the copy
        local = root / "site" / ".resourcesync" / "state.sqlite"
        assert first.ok and first.mode == "baseline" and local.exists()
        src.write({"a.txt": b"alpha 2", "d.txt": b"delta"})
        (src.data / "b" / "c.txt").unlink()
        src.publish()
        src.recorder.reset()
        second = sync_source(entry, root, store=store)  # distributed: the state in the store
        assert second.ok and second.mode == "incremental", second
        assert src.resource_gets() == {"/a.txt": 1, "/d.txt": 1}
        assert tree(root / "site") == {"a.txt": b"alpha 2", "d.txt": b"delta"}
        assert not local.exists()
        assert local.with_name("state.sqlite" + IMPORTED_SUFFIX).exists()
        state = store.copy_state("site")
        assert sorted(k.path for k in state.all_known()) == ["a.txt", "d.txt"]
        assert state.get("running") is None
        state.close()


def test_a_sync_with_its_state_in_the_store_leaves_none_under_the_copy(
    tmp_path: Path, store: SQLStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sync_module, "scoped", scoped)  # the state given below, not the fixture's
    files = {"a.txt": b"alpha", "k/b.txt": b"beta"}
    dest = tmp_path / "dest"
    with published_source(tmp_path, files) as src:
        report = sync(src.root, dest, SyncOptions(state=lambda _: store.copy_state("x")))
        assert report.ok and tree(dest) == files
        assert not (dest / ".resourcesync" / "state.sqlite").exists()
        assert isinstance(store.copy_state("x"), StoreCopyState)
        counts = {k.uri.rsplit("/", 1)[-1]: k.length for k in store.copy_state("x").all_known()}
        assert counts == {"a.txt": 5, "b.txt": 4}
        assert json.dumps(sorted(counts))  # plain data, no backend types leak out
