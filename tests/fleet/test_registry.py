"""Registering Sources: `fleet add/remove/list/import`, their checks, and the schedule's rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from resourcesync.fleet import Backoff, Entry, Outcome, Row, open_store, parse_duration
from resourcesync.fleet.schedule import next_run
from tests.destination.helpers import cli


def names(root: Path) -> list[str]:
    out = cli("fleet", "list", "--root", root).stdout
    return [line.split("\t")[0] for line in out.splitlines()]


def test_add_list_remove(tmp_path: Path) -> None:
    r = cli(
        "fleet", "add", "http://127.0.0.2:1/", "--name", "a", "--every", "15m", "--root", tmp_path
    )
    assert r.exit_code == 0, r.stderr
    cli("fleet", "add", "http://127.0.0.3:1/", "--name", "b", "--delete", "--root", tmp_path)
    assert cli("fleet", "list", "--root", tmp_path).stdout.splitlines() == [
        "a\thttp://127.0.0.2:1/\t900\tauto\t-\t-",
        "b\thttp://127.0.0.3:1/\t3600\tauto\tdelete\t-",
    ]
    dup = cli("fleet", "add", "http://127.0.0.4:1/", "--name", "a", "--root", tmp_path)
    assert dup.exit_code == 2 and "'a' is already registered" in dup.stderr
    assert cli("fleet", "remove", "a", "--root", tmp_path).exit_code == 0
    gone = cli("fleet", "remove", "a", "--root", tmp_path)
    assert gone.exit_code == 2 and "no Source named 'a'" in gone.stderr
    assert names(tmp_path) == ["b"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["http://x/", "--name", "../up"], "name '../up'"),
        (["ftp://x/", "--name", "a"], "source must be an http(s) URL"),
        (["http://[::1/", "--name", "a"], "a: source is not a valid URL (Invalid IPv6 URL)"),
        (["http://x y/", "--name", "a"], "a: source holds white space"),
        (["http://x:99999/", "--name", "a"], "a: source has a bad port"),
        (["http://x/", "--name", "a", "--every", "soon"], "not a duration"),
        (["http://x/", "--name", "a", "--every", "0"], "a duration must be positive"),
        (["http://x/", "--name", "a", "--lookback", "-1m"], "not a duration"),
        (["http://x/", "--name", "a", "--history-grace", "soon"], "not a duration"),
        (["http://x/", "--name", "a", "--header", "nocolon"], "a header is 'Name: value'"),
    ],
)
def test_bad_entries_are_one_clear_line(tmp_path: Path, args: list[str], message: str) -> None:
    r = cli("fleet", "add", *args, "--root", tmp_path)
    assert r.exit_code == 2 and message in r.stderr, r.stderr
    assert names(tmp_path) == []


def test_import_toml_and_csv_all_or_nothing(tmp_path: Path) -> None:
    toml = tmp_path / "list.toml"
    toml.write_text(
        '[[source]]\nname = "t1"\nsource = "http://127.0.0.2:1/"\nevery = "1d"\n'
        'headers = {Authorization = "Bearer x"}\n\n'
        '[[source]]\nname = "t2"\nsource = "http://127.0.0.2:2/"\nvia = "dumps"\n'
        'lookback = "2h"\nhistory_grace = "0"\n'
    )
    assert cli("fleet", "import", toml, "--root", tmp_path).exit_code == 0
    store = open_store(tmp_path)
    t1, t2 = store.get("t1"), store.get("t2")
    assert (
        t1 is not None
        and t1.entry.every == 86400
        and t1.entry.headers == {"Authorization": "Bearer x"}
        and t1.entry.lookback == 600
        and t1.entry.history_grace == 3600
    )
    assert t2 is not None and (t2.entry.lookback, t2.entry.history_grace) == (7200, 0)
    store.close()

    bad = tmp_path / "list.csv"
    bad.write_text("name,source,every\nc1,http://127.0.0.5:1/,1h\nc2,http://127.0.0.5:2/,often\n")
    r = cli("fleet", "import", bad, "--root", tmp_path)
    assert r.exit_code == 2
    assert (
        r.stderr.strip() == f"resourcesync: {bad}:3: not a duration: 'often' (say 90s, 15m, 6h, 1d)"
    )
    assert names(tmp_path) == ["t1", "t2"]  # nothing of the bad file

    # Importing a list again with --replace updates, and keeps each Source's history.
    again = tmp_path / "again.csv"
    again.write_text("name,source,every\nt1,http://127.0.0.2:1/,2h\nc3,http://127.0.0.6:1/,\n")
    assert cli("fleet", "import", again, "--root", tmp_path).exit_code == 2
    assert cli("fleet", "import", again, "--root", tmp_path, "--replace").exit_code == 0
    assert names(tmp_path) == ["c3", "t1", "t2"]
    assert "t1\thttp://127.0.0.2:1/\t7200" in cli("fleet", "list", "--root", tmp_path).stdout


def test_durations() -> None:
    assert [parse_duration(t) for t in ("90", "90s", "15m", "1h30m", "2d", "1w")] == [
        90,
        90,
        900,
        5400,
        172800,
        604800,
    ]
    for bad in ("", "0", "-5", "1x", "h", "1h 30m"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_backoff_doubles_and_is_capped() -> None:
    b = Backoff(first=60, cap=3600)
    assert [b.delay(n) for n in range(1, 9)] == [60, 120, 240, 480, 960, 1920, 3600, 3600]
    row = Row(Entry("a", "http://x/", every=600), added=0, next_run=0, failures=2)
    ok = Outcome(started=1000, seconds=5, ok=True)
    assert next_run(row, ok, b, now=1005) == 1600  # from the start of the run, not its end
    failed = Outcome(started=1000, seconds=5, ok=False, error="down")
    assert next_run(row, failed, b, now=1005) == 1005 + 240  # the third failure in a row


def test_one_sync_per_source_across_processes_on_one_root(tmp_path: Path) -> None:
    one, two = open_store(tmp_path, create=True), open_store(tmp_path)
    with one.lock("a") as got:
        assert got
        with two.lock("a") as again, two.lock("b") as other:
            assert (again, other) == (False, True)
    with two.lock("a") as after:
        assert after
    one.close()
    two.close()


def test_queued_sources_wait_for_their_task_or_its_loss(tmp_path: Path) -> None:
    store = open_store(tmp_path, create=True)
    store.add([Entry(n, "http://127.0.0.2:1/") for n in ("a", "b", "c")], now=100.0)
    assert store.enqueue(["a", "b", "gone"], now=200.0) == {"a": 1, "b": 1}
    # Queued Sources are not handed out again until their task reports back…
    assert sorted(r.name for r in store.due(300.0, 10, requeue_after=1000)) == ["c"]
    store.record("a", Outcome(started=250, seconds=1, ok=True), next_run=250.0, ticket=1)
    assert store.done("a", 1) and not store.done("b", 1)
    assert sorted(r.name for r in store.due(300.0, 10, requeue_after=1000)) == ["a", "c"]
    # …or until it is overdue (its message was lost), or it could not be sent at all.
    assert sorted(r.name for r in store.due(1300.0, 10, requeue_after=1000)) == ["a", "b", "c"]
    store.enqueue_failed("b", 1)
    assert sorted(r.name for r in store.due(300.0, 10, requeue_after=1000)) == ["a", "b", "c"]
    # A redelivered task of an old ticket is recognised as done.
    assert store.enqueue(["a"], now=400.0) == {"a": 2}
    assert store.done("a", 1) and not store.done("a", 2)
    store.close()


def test_a_notification_during_a_run_makes_the_source_due_again(tmp_path: Path) -> None:
    store = open_store(tmp_path, create=True)
    store.add([Entry("a", "http://127.0.0.2:1/", every=3600)], now=100.0)
    store.record("a", Outcome(started=100, seconds=1, ok=True), next_run=3700.0)
    assert store.wake("a", now=200.0) and not store.wake("gone", now=200.0)
    assert [r.name for r in store.due(200.0, 10)] == ["a"]
    # A run that started before the notification may not have seen its change: due again.
    store.record("a", Outcome(started=150, seconds=60, ok=True), next_run=3750.0)
    row = store.get("a")
    assert row is not None and (row.next_run, row.woken) == (200.0, 200.0)
    # A run that started after it has: the interval applies again.
    store.record("a", Outcome(started=250, seconds=1, ok=True), next_run=3850.0)
    row = store.get("a")
    assert row is not None and (row.next_run, row.woken) == (3850.0, None)
    store.close()


def test_a_store_of_the_first_schema_gains_the_new_columns(tmp_path: Path) -> None:
    import sqlite3

    from resourcesync.fleet.store import ADDED, SCHEMA

    path = tmp_path / ".fleet" / "fleet.sqlite"
    path.parent.mkdir()
    first = SCHEMA
    for column, kind in ADDED:
        first = first.replace(f",\n  {column} {kind}", "")
    assert "follow" not in first
    with sqlite3.connect(path) as db:
        db.executescript(first)
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT INTO fleet_source (name, source, every, via, apply_delete, headers, added,"
            " next_run) VALUES ('old', 'http://127.0.0.2:2/', 60, 'auto', 0, '{}', 1, 1)"
        )
    store = open_store(tmp_path)
    store.add([Entry("a", "http://127.0.0.2:1/", follow=True)], now=1.0)
    row, old = store.get("a"), store.get("old")
    assert row is not None and row.entry.follow
    assert old is not None and (old.entry.lookback, old.entry.allow_empty) == (600, False)
    assert old.entry.history_grace == 3600 and not old.entry.any_address
    store.close()


@pytest.mark.parametrize(
    ("column", "value", "said"),
    [
        ("apply_delete", "'yes'", "--delete ('yes')"),
        ("every", "'soon'", "the interval ('soon')"),
        ("max_delete", "2.5", "--max-delete (2.5)"),
        ("last_run", "'yesterday'", "its last run ('yesterday')"),
        ("failures", "'many'", "its failures ('many')"),
    ],
)
def test_a_registry_value_of_another_type_is_said_never_taken_for_another(
    tmp_path: Path, column: str, value: str, said: str
) -> None:
    """SQLite keeps whatever a column is given: a registration or schedule value of another type
    (a hand, a tool, a disk) is said with the store, the Source and the remedy — never taken
    for another value (a text `--delete` read as on), never a traceback in status."""
    import sqlite3

    store = open_store(tmp_path, create=True)
    store.add([Entry("a", "http://127.0.0.2:1/"), Entry("b", "http://127.0.0.2:2/")], now=1.0)
    store.close()
    with sqlite3.connect(tmp_path / ".fleet" / "fleet.sqlite") as db:
        db.execute(f"UPDATE fleet_source SET {column} = {value} WHERE name = 'a'")
    store = open_store(tmp_path)
    try:
        a, b = store.get("a"), store.get("b")
        assert a is not None and a.damaged is not None and said in a.damaged, a and a.damaged
        assert "fleet remove a" in a.damaged and "fleet.sqlite" in a.damaged
        assert not a.entry.delete
        assert b is not None and b.damaged is None
    finally:
        store.close()
    shown = cli("fleet", "status", "--json", "--root", tmp_path)
    assert shown.exit_code == 1, shown.stderr
    doc = json.loads(shown.stdout)
    a_status = next(s for s in doc["sources"] if s["name"] == "a")
    assert a_status["ok"] is False and said in a_status["error"]
    unknown = {"every": "every", "failures": "failures"}.get(column)
    if unknown is not None:
        assert a_status[unknown] is None, a_status
    assert a_status["every"] in (3600, None) and a_status["next_run"] is not None
    listed = cli("fleet", "list", "--root", tmp_path)
    assert listed.exit_code == 0 and said in listed.stderr
    lines = [line.split("\t") for line in listed.stdout.splitlines()]
    assert [line[0] for line in lines] == ["a", "b"]
    # A value that cannot be read is shown as unknown, never as the stand-in the row carries.
    shown_as = {"every": (2, "?"), "apply_delete": (4, "?")}.get(column)
    if shown_as is not None:
        assert lines[0][shown_as[0]] == shown_as[1], lines[0]
    assert "?" not in lines[1] and lines[0][2] in ("3600", "?"), lines


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["fleet", "run", "--broker", "redis://127.0.0.1:1/0"], "--broker needs --db"),
        (["fleet", "run", "--all"], "--all goes with --once"),
        (["fleet", "list", "--db", "mysql://127.0.0.1/x"], "--db must be a postgresql:// URL"),
        (
            ["fleet", "list", "--db", "postgresql://fleet:secret@127.0.0.1:1/x"],
            "postgresql://fleet@127.0.0.1:1/x: cannot connect",
        ),
        (
            ["worker", "--broker", "redis://127.0.0.1:1/0", "--db", "fleet.sqlite"],
            "--db must be a postgresql:// URL",
        ),
        (
            [
                "fleet",
                "run",
                "--once",
                "--broker",
                "amqp://x",
                "--db",
                "postgresql://127.0.0.1:1/x",
            ],
            "--broker must be a redis:// URL",
        ),
    ],
)
def test_bad_setups_are_one_clear_line(tmp_path: Path, args: list[str], message: str) -> None:
    r = cli(*args, "--root", tmp_path)
    assert r.exit_code == 2, r.stderr
    assert message in r.stderr and "secret" not in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_copy_that_cannot_be_written_is_that_sources_failure_said_plainly(
    tmp_path: Path,
) -> None:
    """The copy's disk refusing (here its folder under a file): the Source's outcome says
    which path and why, as `sync` says it (not an OSError's repr)."""
    from resourcesync.fleet.job import sync_source
    from tests.fleet.helpers import many_sources

    (tmp_path / "afile").write_text("not a folder")
    with many_sources(tmp_path, ["127.0.0.2"]) as (sites, _):
        entry = Entry("a", sites[0].url, dest=str(tmp_path / "afile" / "copy"))
        outcome = sync_source(entry, tmp_path)
    assert not outcome.ok
    assert outcome.error == f"cannot write {tmp_path / 'afile' / 'copy'}: Not a directory"


@pytest.mark.parametrize(
    "args",
    [
        ["fleet", "status"],
        ["fleet", "status", "--json"],
        ["fleet", "list"],
        ["fleet", "run", "--once"],
        ["fleet", "run", "--once", "--all"],
        ["fleet", "remove", "a"],
    ],
)
def test_a_root_without_a_fleet_is_an_error_never_an_empty_fleet(
    tmp_path: Path, args: list[str]
) -> None:
    """A --root given wrong, or a shared filesystem not mounted there, was an empty fleet
    created on the spot: `fleet run --once` said "0 Sources run, 0 not ok" (exit 0) and
    `fleet status` was all ok. Only `fleet add` and `fleet import` make a fleet."""
    root = tmp_path / "mnt" / "harvest"
    root.mkdir(parents=True)
    r = cli(*args, "--root", root)
    assert r.exit_code == 2, r.stderr
    assert "no fleet here" in r.stderr and "mounted" in r.stderr and str(root) in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not r.stdout
    assert not any(root.iterdir())  # nothing made
    assert cli("fleet", "add", "http://127.0.0.2:1/", "--name", "a", "--root", root).exit_code == 0
    after = (
        cli(*args, "--root", root, "--retries", "0")
        if "run" in args
        else cli(*args, "--root", root)
    )
    assert after.exit_code in (0, 1) and "no fleet" not in after.stderr, after.stderr


def test_a_sources_lookback_reaches_its_syncs(tmp_path: Path) -> None:
    """`fleet add --lookback` (CSV/TOML `lookback`): its syncs look that far behind the copy's
    cursor for a change listed late, as `sync --lookback`; 10 minutes unless told."""
    add = ("fleet", "add", "http://127.0.0.2:1/", "--root", tmp_path)
    assert cli(*add, "--name", "a", "--lookback", "0").exit_code == 0
    assert cli(*add, "--name", "b", "--lookback", "1h30m").exit_code == 0
    assert cli(*add, "--name", "c").exit_code == 0
    got = {name: o.lookback for name, o in _sync_options(tmp_path, "abc").items()}
    assert got == {"a": 0.0, "b": 5400.0, "c": 600.0}


def _sync_options(root: Path, names: str) -> dict[str, Any]:
    """The options each of `names` (one letter each) has its syncs run with."""
    from resourcesync.fleet.job import _options

    store = open_store(root)
    got = {}
    for name in names:
        row = store.get(name)
        assert row is not None
        got[name] = _options(row.entry, 4, 30.0, 3, baseline=False)
    store.close()
    return got


def test_a_sources_history_grace_reaches_its_syncs(tmp_path: Path) -> None:
    """`fleet add --history-grace` (CSV/TOML `history_grace`): as `sync --history-grace` for its
    syncs; an hour unless told. `--replace` changes it."""
    add = ("fleet", "add", "http://127.0.0.2:1/", "--root", tmp_path)
    assert cli(*add, "--name", "a", "--history-grace", "0").exit_code == 0
    assert cli(*add, "--name", "b", "--history-grace", "6h").exit_code == 0
    assert cli(*add, "--name", "c").exit_code == 0
    csv = tmp_path / "more.csv"
    csv.write_text("name,source,history_grace\nd,http://127.0.0.2:4/,30m\ne,http://127.0.0.2:5/,\n")
    assert cli("fleet", "import", csv, "--root", tmp_path).exit_code == 0
    assert cli(*add, "--name", "b", "--history-grace", "2h", "--replace").exit_code == 0
    got = {name: o.history_grace for name, o in _sync_options(tmp_path, "abcde").items()}
    assert got == {"a": 0.0, "b": 7200.0, "c": 3600.0, "d": 1800.0, "e": 3600.0}


def test_a_sources_reach_is_opened_for_it_alone(tmp_path: Path) -> None:
    """`fleet add --any-address` (CSV/TOML `any_address`): that Source's syncs (and its
    follower's reading of its Capability List) may lead to loopback, private and link-local
    addresses it is not on, as `sync --any-address`; every other Source stays walled in."""
    from resourcesync.destination.options import scoped

    add = ("fleet", "add", "http://127.0.0.2:1/", "--root", tmp_path)
    assert cli(*add, "--name", "a").exit_code == 0
    assert cli(*add, "--name", "b", "--any-address").exit_code == 0
    csv = tmp_path / "more.csv"
    csv.write_text("name,source,any_address\nc,http://127.0.0.2:3/,yes\nd,http://127.0.0.2:4/,\n")
    assert cli("fleet", "import", csv, "--root", tmp_path).exit_code == 0
    got = _sync_options(tmp_path, "abcd")
    assert {name: o.any_address for name, o in got.items()} == {
        "a": False,
        "b": True,
        "c": True,
        "d": False,
    }
    walls = {name: scoped(o, "http://127.0.0.2:1/").http.reach for name, o in got.items()}
    assert walls["b"] is None and walls["c"] is None
    assert walls["a"] is not None and walls["d"] is not None


def test_a_sources_reconcile_every_reaches_its_syncs(tmp_path: Path) -> None:
    """`fleet add --reconcile-every` (CSV/TOML `reconcile_every`): as `sync --reconcile-every`
    for its syncs; 7 days unless told, 0 for never. `--replace` changes it; a negative one is
    refused, naming the Source."""
    add = ("fleet", "add", "http://127.0.0.2:1/", "--root", tmp_path)
    assert cli(*add, "--name", "a", "--reconcile-every", "0").exit_code == 0
    assert cli(*add, "--name", "b", "--reconcile-every", "1d").exit_code == 0
    assert cli(*add, "--name", "c").exit_code == 0
    csv = tmp_path / "more.csv"
    csv.write_text(
        "name,source,reconcile_every\nd,http://127.0.0.2:4/,12h\ne,http://127.0.0.2:5/,\n"
    )
    assert cli("fleet", "import", csv, "--root", tmp_path).exit_code == 0
    assert cli(*add, "--name", "b", "--reconcile-every", "2d", "--replace").exit_code == 0
    got = {name: o.reconcile for name, o in _sync_options(tmp_path, "abcde").items()}
    week = 7 * 86400.0
    assert got == {"a": 0.0, "b": 2 * 86400.0, "c": week, "d": 43200.0, "e": week}
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[[source]]\nname = "f"\nsource = "http://127.0.0.2:6/"\nreconcile_every = "x"\n'
    )
    result = cli("fleet", "import", bad, "--root", tmp_path)
    assert result.exit_code != 0 and "bad.toml" in result.stderr, result.stderr
