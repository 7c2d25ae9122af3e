"""A state database that SQLite finds damaged — a page that is not what was written (a failing
disk, a copy taken mid-write, a hand), or a file that is not a database at all.

Every command says it in one line naming the file and what mends it, exit 2, and records
nothing; it used to be a traceback as soon as a run read the damaged page (the file opened
well). `sync --repair` — what the line names for a copy — sets the damaged state aside and
makes it again from the files and the Source: files whose digests are the Source's are taken
as they are (not fetched again), the others fetched, and files of resources the Source
deleted removed with --delete (kept before, as "never held": the remedy `audit` names did
not remedy). A Source's state set aside starts its history again, and a Destination that
synced before finds the gap rather than an ok."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from resourcesync import sqlite as sqlite_habits
from resourcesync.errors import StateDamaged
from resourcesync.hub.store import Store
from resourcesync.lirs.antenna import Antenna, AntennaConfig
from resourcesync.sqlite import damage, healthy, register
from tests.destination.helpers import STATE, cli, entry, hand_source, published_source, tree
from tests.test_full_disk import _one_line as one_line

FILES = {f"d/f{i:02}.txt": f"file {i}\n".encode() for i in range(30)}


def spoil(db: Path) -> None:
    """Every page after the first overwritten with bytes no page starts with (SQLite's b-tree
    page types are 2, 5, 10 and 13): the file opens, and the first read of a table fails."""
    for extra in ("-wal", "-shm"):
        assert not db.with_name(db.name + extra).exists(), "a connection is still open"
    size = db.stat().st_size
    with open(db, "r+b") as f:
        f.seek(4096)
        f.write(b"\xa5" * (size - 4096))


def test_sync_on_a_damaged_state_says_so_and_repair_makes_it_again(tmp_path: Path) -> None:
    dest = tmp_path / "copy"
    with published_source(tmp_path, FILES) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        state = dest / STATE / "state.sqlite"
        spoil(state)
        before = tree(dest)
        for extra in ([], ["--dry-run"], ["--baseline"]):
            r = cli("sync", src.root, dest, *extra)
            assert r.exit_code == 2, r.stderr
            line = one_line(r.stderr)
            assert str(state) in line and "is damaged" in line and "--repair" in line, line
            assert tree(dest) == before
        assert not healthy(state)

        src.recorder.hits.clear()
        r = cli("sync", src.root, dest, "--repair", "--json")
        assert r.exit_code == 0, r.stderr
        (report,) = json.loads(r.stdout)["sets"]
        assert report["fetched"] == 0 and report["unchanged"] == len(FILES), report
        said = [p["message"] for p in report["problems"]]
        assert any("damaged: set aside as state.sqlite.damaged-" in m for m in said), said
        # Every file was the Source's (its digest): taken as it is, none fetched again.
        assert src.resource_gets() == {}
        (aside,) = (dest / STATE).glob("state.sqlite.damaged-*[0-9TZ]")
        assert not healthy(aside) and healthy(state)
        assert tree(dest) == before

        assert cli("sync", src.root, dest).exit_code == 0
        assert cli("audit", src.root, dest).exit_code == 0


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE resources SET hashes = '{bad' WHERE uri LIKE '%f03.txt'",
        "UPDATE resources SET hashes = '[1, 2]' WHERE uri LIKE '%f03.txt'",
        "UPDATE resources SET links = 'not json' WHERE uri LIKE '%f04.txt'",
        "UPDATE resources SET links = '{\"rel\": \"x\"}' WHERE uri LIKE '%f04.txt'",
        "INSERT INTO failed (uri, expected, reason, set_key) "
        "SELECT uri, '{cut', 'a reason', set_key FROM resources WHERE uri LIKE '%f05.txt'",
        "INSERT INTO failed (uri, expected, reason, set_key) "
        """SELECT uri, '{"lastmod": "soon"}', 'a reason', set_key FROM resources """
        "WHERE uri LIKE '%f05.txt'",
        "INSERT INTO failed (uri, expected, reason, set_key) "
        """SELECT uri, '{"links": 5}', 'a reason', set_key FROM resources """
        "WHERE uri LIKE '%f05.txt'",
        "UPDATE cursors SET datetime = 'garbage'",
        "UPDATE cursors SET baseline_at = 'yesterday'",
    ],
    ids=[
        "digests",
        "digests of another shape",
        "links",
        "links of another shape",
        "failure",
        "failure's time",
        "failure's links",
        "cursor",
        "baseline",
    ],
)
def test_a_value_of_the_state_that_cannot_be_read_is_said_and_repair_makes_it_again(
    tmp_path: Path, damage: str
) -> None:
    """A value in the copy's state that cannot be read though SQLite reads its pages (a hand,
    a tool, bytes changed inside a page): `sync` and `audit` say it in one line naming the
    file, the resource and `--repair`, exit 2, nothing recorded (a traceback before); `sync
    --repair` sets the state aside and makes it again, as for a state SQLite finds damaged."""
    dest = tmp_path / "copy"
    with published_source(tmp_path, FILES) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        state = dest / STATE / "state.sqlite"
        db = sqlite3.connect(state)
        with db:
            db.execute(damage)
        db.close()
        # The Source changes the three resources, so that the next sync looks at what the
        # state holds of each.
        for name in ("f03", "f04", "f05"):
            (src.data / "d" / f"{name}.txt").write_bytes(b"changed\n")
        src.publish()
        before = tree(dest)
        # (A baseline records each resource again from the Source's list: it may mend the
        # value without reading it. `audit` judges the files by the Source's lists: it reads
        # the value only where it needs it, and then says the same.)
        for command in (["sync"], ["sync", "--dry-run"], ["audit"]):
            r = cli(command[0], src.root, dest, *command[1:])
            if command == ["audit"] and r.exit_code != 2:
                assert r.exit_code == 1 and "Traceback" not in r.stderr, r.stderr  # behind
                continue
            assert r.exit_code == 2, (command, r.stderr)
            line = one_line(r.stderr)
            assert str(state) in line and "cannot be read" in line and "--repair" in line, line
            assert tree(dest) == before
        r = cli("sync", src.root, dest, "--repair", "--json")
        assert r.exit_code == 0, r.stderr
        (report,) = json.loads(r.stdout)["sets"]
        said = [p["message"] for p in report["problems"]]
        assert any(
            "cannot be read" in m and "set aside as state.sqlite.damaged-" in m for m in said
        )
        assert report["fetched"] == 3, report
        assert tree(dest) == tree(src.data)
        assert cli("sync", src.root, dest).exit_code == 0
        assert cli("audit", src.root, dest).exit_code == 0


def test_a_held_files_time_that_cannot_be_read_sends_it_to_its_digest(tmp_path: Path) -> None:
    """The time the copy recorded for a file, damaged: the look at the files held takes it
    as no time — a file changed here is fetched again, its record made anew — never a
    traceback (the time was parsed where a file changed here is planned)."""
    dest = tmp_path / "copy"
    with published_source(tmp_path, FILES) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        db = sqlite3.connect(dest / STATE / "state.sqlite")
        with db:
            db.execute("UPDATE resources SET lastmod = 'soon' WHERE uri LIKE '%f03.txt'")
        db.close()
        (dest / "d" / "f03.txt").write_bytes(b"edited here, longer than it was\n")
        r = cli("sync", src.root, dest, "--json")
        assert r.exit_code == 0, r.stderr
        (report,) = json.loads(r.stdout)["sets"]
        assert report["changed_here"] == 1 and report["fetched"] == 1, report
        assert tree(dest) == tree(src.data)
        assert cli("sync", src.root, dest).exit_code == 0
        assert cli("audit", src.root, dest).exit_code == 0


def test_a_state_that_is_not_a_database(tmp_path: Path) -> None:
    dest = tmp_path / "copy"
    with published_source(tmp_path, FILES) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        state = dest / STATE / "state.sqlite"
        state.write_bytes(b"not a database at all, " * 400)
        r = cli("sync", src.root, dest)
        assert r.exit_code == 2
        line = one_line(r.stderr)
        assert "file is not a database" in line and "--repair" in line, line
        assert cli("sync", src.root, dest, "--repair").exit_code == 0
        assert cli("audit", src.root, dest).exit_code == 0


def test_repair_of_a_lost_state_takes_what_is_the_sources_and_no_more(tmp_path: Path) -> None:
    """The state gone (or set aside), and meanwhile the Source deleted a file and changed
    another, and a file was changed here: the repair fetches the two that differ, takes the
    rest as they are, and keeps the deleted one until --delete removes it.
    (Nothing it takes is then deleted as unlisted: a first version deleted them all.)"""
    dest = tmp_path / "copy"
    with published_source(tmp_path, FILES) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        (src.data / "d/f01.txt").unlink()
        (src.data / "d/f02.txt").write_bytes(b"changed at the Source\n")
        src.publish()
        (dest / "d/f03.txt").write_bytes(b"file X\n")  # the same length, not the same file
        for p in (dest / STATE).glob("state.sqlite*"):
            p.unlink()

        src.recorder.hits.clear()
        r = cli("sync", src.root, dest, "--repair", "--json")
        assert r.exit_code == 0, r.stderr
        (report,) = json.loads(r.stdout)["sets"]
        assert src.resource_gets() == {"/d/f02.txt": 1, "/d/f03.txt": 1}
        # Kept: a stray (when the Source no longer lists it) or a pending deletion (when its
        # Resource List still does and a Change List deletes it), as the Source publishes.
        assert report["strays"] + report["pending_deletes"] == 1, json.dumps(report)
        assert report["deleted"] == 0
        assert (dest / "d/f01.txt").exists()
        assert cli("audit", src.root, dest).exit_code == 1  # f01 is extra

        r = cli("sync", src.root, dest, "--repair", "--delete", "--json")
        assert r.exit_code == 0, r.stderr
        (report,) = json.loads(r.stdout)["sets"]
        assert report["deleted"] == 1 and report["fetched"] == 0, report
        assert not (dest / "d/f01.txt").exists()
        assert cli("audit", src.root, dest).exit_code == 0
        expected = {k: v for k, v in FILES.items() if k != "d/f01.txt"}
        expected["d/f02.txt"] = b"changed at the Source\n"
        assert tree(dest) == expected
        # The state made again holds every file: the next changes are applied as usual.
        (src.data / "d/f04.txt").unlink()
        src.publish()
        assert cli("sync", src.root, dest, "--delete").exit_code == 0
        assert not (dest / "d/f04.txt").exists()
        assert cli("audit", src.root, dest).exit_code == 0


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (None, "is damaged"),
        ("UPDATE archive SET extra = '{cut' WHERE kind = 'resourcelist'", "cannot be read"),
        ("UPDATE archive SET extra = '[1]' WHERE kind = 'resourcelist'", "cannot be read"),
        ("UPDATE archive SET at = 'yesterday' WHERE kind = 'resourcelist'", "cannot be read"),
        ("UPDATE changelists SET from_ = 'yesterday'", "Change List 1 cannot be read"),
        ("UPDATE meta SET value = 'soon' WHERE key = 'baselined'", "mark baselined cannot"),
        ("UPDATE meta SET value = 'x' WHERE key = 'resourcelist_seq'", "cannot be read"),
    ],
    ids=[
        "pages",
        "a record's details",
        "its details of another shape",
        "a record's time",
        "a Change List's time",
        "its first run's time",
        "a count",
    ],
)
def test_publish_on_a_damaged_state_and_a_history_started_again(
    tmp_path: Path, damage: str | None, said: str
) -> None:
    """A Source's state SQLite finds damaged, or whose record of a document it published
    cannot be read though SQLite reads its pages (a traceback on every run before, after the
    Change List was written): `publish` says it in one line naming the state and what mends
    it, exit 2, and publishes nothing from it; mended as the line says."""
    dest = tmp_path / "copy"
    with published_source(tmp_path, FILES) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        (state,) = (src.out / STATE).glob("*.sqlite")
        if damage is None:
            spoil(state)
        else:
            db = sqlite3.connect(state)
            with db:
                assert db.execute(damage).rowcount >= 1
            db.close()
        documents = tree(src.out)
        (src.data / "d/f05.txt").write_bytes(b"changed\n")
        args = ("publish", src.data, "--out", src.out, "--base-url", src.root, "--name", "set1")
        r = cli(*args)
        assert r.exit_code == 2, r.stderr
        line = one_line(r.stderr)
        assert str(state) in line and said in line and "set it aside" in line, line
        assert tree(src.out) == documents  # nothing published from a state it cannot read

        state.rename(state.with_name(state.name + ".damaged"))
        assert cli(*args).exit_code == 0
        # The changes between the copy's cursor and the new history are not listed: a gap,
        # never an ok over a copy that missed them.
        r = cli("sync", src.root, dest)
        assert r.exit_code == 1, r.stdout
        assert "gap" in r.stderr and "--baseline" in r.stderr
        assert cli("sync", src.root, dest, "--baseline").exit_code == 0
        assert cli("audit", src.root, dest).exit_code == 0


def test_a_snapshot_record_that_cannot_be_read_is_published_as_updated(tmp_path: Path) -> None:
    """The snapshot's digests of a file that changed, damaged: the file is published as
    updated with a warning naming it (a Destination fetches it again and checks it), never
    taken for the file it was (a `ValueError` traceback from every run before)."""
    dest = tmp_path / "copy"
    with published_source(tmp_path, FILES) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        (state,) = (src.out / STATE).glob("*.sqlite")
        db = sqlite3.connect(state)
        with db:
            db.execute("UPDATE resources SET hashes = '{cut' WHERE key = 'd/f05.txt'")
        db.close()
        (src.data / "d/f05.txt").write_bytes(b"changed\n")
        args = ("publish", src.data, "--out", src.out, "--base-url", src.root, "--name", "set1")
        r = cli(*args)
        assert r.exit_code == 0, r.stderr
        assert "d/f05.txt cannot be read" in r.stderr and "published as updated" in r.stderr
        assert "1 updated" in r.stderr
        assert cli("sync", src.root, dest).exit_code == 0
        assert tree(dest) == tree(src.data)
        assert cli("publish", *args[1:]).exit_code == 0
        assert cli("audit", src.root, dest).exit_code == 0


def test_other_state_databases_say_it_too(tmp_path: Path) -> None:
    hub = tmp_path / "hub.sqlite"
    Store(hub).close()
    hub.write_bytes(b"\xa5" * 8192)
    with pytest.raises(StateDamaged, match="set it aside") as caught:
        Store(hub)
    assert caught.value.source == str(hub)

    antenna = tmp_path / "antenna"
    antenna.mkdir()
    (antenna / "antenna.sqlite").write_bytes(b"\xa5" * 8192)
    with pytest.raises(StateDamaged, match="checked afresh"):
        Antenna(AntennaConfig(out_dir=antenna))

    root = tmp_path / "fleet"
    assert cli("fleet", "add", "http://127.0.0.2:1/", "--name", "a", "--root", root).exit_code == 0
    (db,) = root.rglob("fleet.sqlite")
    spoil(db)
    r = cli("fleet", "list", "--root", root)
    assert r.exit_code == 2
    line = one_line(r.stderr)
    assert str(db) in line and "is damaged" in line and "restore it from a backup" in line


def test_the_damaged_one_is_found_among_those_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's error does not name its file: of the databases a process opened, the damaged
    one is named (each checked), with its owner's remedy."""
    monkeypatch.setattr(sqlite_habits, "_OPENED", {})  # not those of the tests before
    paths = []
    for i in range(3):
        p = tmp_path / f"s{i}.sqlite"
        with sqlite3.connect(p) as db:
            db.execute("CREATE TABLE t (x)")
            db.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * 100)
        db.close()
        register(p, f"remedy {i}")
        paths.append(p)
    spoil(paths[1])
    with sqlite3.connect(paths[1]) as db, pytest.raises(sqlite3.DatabaseError) as caught:
        db.execute("SELECT COUNT(*) FROM t WHERE x > ''").fetchall()
    db.close()
    found = damage(caught.value)
    assert found is not None and found.source == str(paths[1])
    assert found.message.endswith(": remedy 1")
    assert damage(sqlite3.OperationalError("database is locked")) is None
    assert damage(ValueError("malformed")) is None


def test_a_repair_does_not_take_another_uris_file_for_a_stray(tmp_path: Path) -> None:
    """A deletion of a URI the copy never held, at a place another URI holds (`dir/` kept
    over `dir/index.html`): the file is that URI's, not a stray, whatever a repair is told."""
    dest = tmp_path / "copy"
    page = b"<p>the directory</p>"
    with hand_source() as src:
        b = src.base
        src.files["/dir/"] = page
        src.publish([entry(b, "/dir/", page)])
        assert cli("sync", src.base + "/", dest).exit_code == 0
        assert tree(dest) == {"dir/index.html": page}
        gone = entry(b, "/dir/index.html", b"x", change="deleted", datetime="2024-01-02T00:00:00Z")
        src.publish([entry(b, "/dir/", page)], changes=[gone])
        cli("sync", src.base + "/", dest, "--repair", "--delete")
        assert tree(dest) == {"dir/index.html": page}
        assert cli("audit", src.base + "/", dest).exit_code == 0


def test_a_copys_bookkeeping_time_that_cannot_be_read_starts_again_from_now(
    tmp_path: Path,
) -> None:
    """When the copy was last compared with a Resource List (for `--reconcile-every`), kept
    as text and damaged: a `ValueError` traceback from every sync before. It is the copy's own
    bookkeeping: the clock starts again from now, and the sync goes on."""
    dest = tmp_path / "copy"
    with published_source(tmp_path, FILES) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        assert cli("sync", src.root, dest).exit_code == 0
        db = sqlite3.connect(dest / STATE / "state.sqlite")
        with db:
            damaged = db.execute(
                "UPDATE meta SET value = 'soon' WHERE key LIKE 'reconciled:%'"
            ).rowcount
        db.close()
        assert damaged == 1
        (src.data / "d" / "f07.txt").write_bytes(b"changed\n")
        src.publish()
        r = cli("sync", src.root, dest)
        assert r.exit_code == 0, r.stderr
        assert tree(dest) == tree(src.data)
        db = sqlite3.connect(dest / STATE / "state.sqlite")
        (value,) = db.execute("SELECT value FROM meta WHERE key LIKE 'reconciled:%'").fetchone()
        db.close()
        assert float(value) > 0
