"""The embedded fleet end to end: many Sources on loopback hosts (some sharing a host), the real
`fleet` commands, copies compared byte for byte with their Sources, and the politeness limits
measured at the servers."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.destination.helpers import cli, tree
from tests.fleet.helpers import Site, change, csv_of, many_sources

# 24 Sources on 8 hosts: 127.0.0.2 holds 6 of them, the others 2 or 3.
HOSTS = ["127.0.0.2"] * 6 + [f"127.0.0.{3 + i % 7}" for i in range(18)]


def status(root: Path) -> dict[str, dict[str, object]]:
    result = cli("fleet", "status", "--json", "--root", root)
    doc = json.loads(result.stdout)
    assert doc["total"] == len(doc["sources"])
    return {s["name"]: s for s in doc["sources"]}


def test_a_fleet_follows_many_sources_and_every_copy_equals_its_source(tmp_path: Path) -> None:
    root = tmp_path / "fleet"
    with many_sources(tmp_path, HOSTS, delay=0.02) as (sites, hosts):
        listing = tmp_path / "sources.csv"
        listing.write_text(csv_of(sites))
        assert cli("fleet", "import", listing, "--root", root).exit_code == 0

        # The first run baselines every Source, within the limits: per host one sync at a time
        # with two requests each, so a host never sees more than 2 requests at once.
        first = cli("fleet", "run", "--once", "--root", root, "--jobs", "8", "--per-host", "1")
        assert first.exit_code == 0, first.stderr
        for site in sites:
            assert tree(root / site.name) == site.files(), site.name
        assert max(hosts.peak.values()) <= 2
        assert set(hosts.peak) == set(HOSTS)
        s = status(root)
        assert all(v["ok"] and v["mode"] == "baseline" and v["fetched"] == 5 for v in s.values())

        # Nothing is due before its interval; --all runs every Source anyway.
        again = cli("fleet", "run", "--once", "--root", root)
        assert (again.exit_code, again.stderr.strip()) == (0, "0 Sources run, 0 not ok")

        change(sites, 1)
        hosts.peak.clear()
        second = cli("fleet", "run", "--once", "--all", "--root", root, "--per-host", "2")
        assert second.exit_code == 0, second.stderr
        for site in sites:
            assert tree(root / site.name) == site.files(), site.name
        assert max(hosts.peak.values()) <= 4
        s = status(root)
        assert len(s) == len(sites)
        for site in sites:
            v = s[site.name]
            assert (v["ok"], v["mode"], v["failures"], v["error"]) == (True, "incremental", 0, None)
            assert (v["fetched"], v["deleted"], v["source"]) == (2, 1, site.url)
            assert v["cursor"] and v["lag"] is not None and not v["due"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_failing_source_is_reported_backed_off_and_recovers(tmp_path: Path) -> None:
    root = tmp_path / "fleet"
    with many_sources(tmp_path, ["127.0.0.2", "127.0.0.2"]) as (sites, _):
        for site in sites:
            assert cli("fleet", "add", site.url, "--name", site.name, "--root", root).exit_code == 0
        dead = f"http://127.0.0.1:{_closed_port()}/"
        cli("fleet", "add", dead, "--name", "dead", "--root", root, "--every", "10m")

        run = cli("fleet", "run", "--once", "--root", root, "--retry-after", "1h", "--retries", "0")
        assert run.exit_code == 1
        assert "dead: FAILED:" in run.stderr and "3 Sources run, 1 not ok" in run.stderr
        s = status(root)
        assert (s["dead"]["ok"], s["dead"]["failures"], s["dead"]["due"]) == (False, 1, False)
        assert "127.0.0.1" in str(s["dead"]["error"])
        assert s["s000"]["ok"] and s["s001"]["ok"]
        # Status says something is failing (exit 1), and names it in the table.
        table = cli("fleet", "status", "--root", root)
        assert table.exit_code == 1 and "FAILED" in table.stdout and "dead" in table.stdout

        # Backed off: not due again before an hour, however often `run --once` is called.
        assert "0 Sources run" in cli("fleet", "run", "--once", "--root", root).stderr
        # Failing again doubles the wait.
        assert (
            cli("fleet", "run", "--once", "--all", "--root", root, "--retries", "0").exit_code == 1
        )
        assert status(root)["dead"]["failures"] == 2

        # The Source comes back at that address: the next run succeeds and the count resets.
        cli("fleet", "add", sites[0].url, "--name", "dead", "--replace", "--root", root)
        ok = cli("fleet", "run", "--once", "--all", "--root", root)
        assert ok.exit_code == 0, ok.stderr
        s = status(root)
        assert (s["dead"]["ok"], s["dead"]["failures"], s["dead"]["error"]) == (True, 0, None)
        assert tree(root / "dead") == sites[0].files()

        html = tmp_path / "status.html"
        assert cli("fleet", "status", "--html", html, "--root", root).exit_code == 0
        page = html.read_text()
        assert all(name in page for name in ("dead", "s000", "s001"))
        assert "3 Sources: 3 ok, 0 failing" in page


def test_a_source_whose_registration_cannot_be_read_fails_alone(tmp_path: Path) -> None:
    """One Source's stored request headers damaged: the fleet goes on with the others, that
    one is never synced without them (it fails, naming the store and `fleet remove`, and is
    backed off like any failure), and once added again it is synced."""
    import sqlite3

    root = tmp_path / "fleet"
    with many_sources(tmp_path, ["127.0.0.2", "127.0.0.3"]) as (sites, _):
        for site in sites:
            added = cli("fleet", "add", site.url, "--name", site.name, "--root", root)
            assert added.exit_code == 0, added.stderr
        with sqlite3.connect(root / ".fleet" / "fleet.sqlite") as db:
            db.execute("UPDATE fleet_source SET headers = '{cut' WHERE name = 's000'")

        run = cli("fleet", "run", "--once", "--root", root, "--retry-after", "1h")
        assert run.exit_code == 1, run.stderr
        assert "Traceback" not in run.stderr
        assert "s000: FAILED:" in run.stderr and "fleet remove s000" in run.stderr
        assert "2 Sources run, 1 not ok" in run.stderr
        assert tree(root / "s001") == sites[1].files()
        assert not (root / "s000").exists()
        s = status(root)
        assert (s["s000"]["ok"], s["s000"]["failures"], s["s000"]["due"]) == (False, 1, False)
        assert "request headers" in str(s["s000"]["error"])
        assert s["s001"]["ok"]

        assert cli("fleet", "remove", "s000", "--root", root).exit_code == 0
        assert cli("fleet", "add", sites[0].url, "--name", "s000", "--root", root).exit_code == 0
        again = cli("fleet", "run", "--once", "--root", root)
        assert again.exit_code == 0, again.stderr
        assert tree(root / "s000") == sites[0].files()


def _wait(predicate: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.2)


def _in_step(root: Path, sites: list[Site]) -> bool:
    # The copies are being synced while we look: a file may go between listing and reading.
    try:
        return all(tree(root / s.name) == s.files() for s in sites)
    except FileNotFoundError:
        return False


def test_the_scheduler_keeps_copies_in_step_until_stopped(tmp_path: Path) -> None:
    root = tmp_path / "fleet"
    with many_sources(tmp_path, ["127.0.0.2", "127.0.0.2", "127.0.0.3"]) as (sites, _):
        listing = tmp_path / "sources.csv"
        listing.write_text(csv_of(sites, every="1s"))
        assert cli("fleet", "import", listing, "--root", root).exit_code == 0
        argv = [sys.executable, "-m", "resourcesync", "fleet", "run", "--root", str(root)]
        proc = subprocess.Popen(
            [*argv, "--status-port", "0"],
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stderr
            page = proc.stderr.readline().strip().removeprefix("status at ")
            _wait(lambda: all(v["ok"] for v in status(root).values()), "every Source baselined")
            change(sites, 1)
            _wait(lambda: _in_step(root, sites), "every copy following its changed Source")
            # The status page is served while the scheduler runs.
            html = httpx.get(page).text
            assert all(f"<td>{s.name}</td>" in html for s in sites)
            doc = httpx.get(page + "status.json").json()
            assert (doc["total"], doc["failing"]) == (3, 0)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "s000: ok (baseline)" in err and "s000: ok (incremental)" in err


def _slow_files(i: int) -> dict[str, bytes]:
    return {f"r{k:02d}.txt": f"source {i} resource {k}".encode() for k in range(30)}


def test_ctrl_c_lets_the_syncs_in_flight_finish_and_records_them_a_second_stops_them(
    tmp_path: Path,
) -> None:
    """`fleet run --once`, interrupted: the first Ctrl-C starts no more syncs and lets those in
    flight finish, recorded (before, the process said "interrupted" and then went on syncing
    them to the end at exit, their outcomes lost); a second one ends the process at once, and
    the next run resumes those copies."""
    root = tmp_path / "fleet"
    hosts = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]
    with many_sources(tmp_path, hosts, delay=0.05, files=_slow_files) as (sites, _):
        listing = tmp_path / "sources.csv"
        listing.write_text(csv_of(sites))
        assert cli("fleet", "import", listing, "--root", root).exit_code == 0
        argv = [sys.executable, "-m", "resourcesync", "fleet", "run", "--once", "--root"]

        def started(names: list[str]) -> bool:
            return any(any((root / n).glob("r*.txt")) for n in names)

        proc = subprocess.Popen(
            [*argv, str(root), "--jobs", "2"], stderr=subprocess.PIPE, text=True
        )
        _wait(lambda: started([s.name for s in sites]), "a sync under way")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "stopping: no sync starts" in err
        assert "interrupted: 2 Sources run (0 not ok), 2 not started" in err
        s = status(root)
        ran = [site for site in sites if s[site.name]["ok"]]
        assert len(ran) == 2 and all(s[x.name]["mode"] == "baseline" for x in ran)
        assert all(tree(root / x.name) == x.files() for x in ran)
        rest = [site.name for site in sites if site not in ran]
        assert all(s[n]["last_run"] is None for n in rest)

        proc = subprocess.Popen(
            [*argv, str(root), "--jobs", "2"], stderr=subprocess.PIPE, text=True
        )
        _wait(lambda: started(rest), "the other syncs under way")
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 130, err
        assert "stopped now" in err and "Traceback" not in err
        after = status(root)
        assert not any(after[n]["ok"] for n in rest)

        again = cli("fleet", "run", "--once", "--root", root)
        assert again.exit_code == 0, again.stderr
        assert all(tree(root / site.name) == site.files() for site in sites)
        assert not any(root.rglob("*.part"))


def test_max_delete_holds_a_sources_mass_deletion_back(tmp_path: Path) -> None:
    """`fleet add --delete --max-delete N` (and `max_delete` in an imported file): a Source
    that suddenly deletes more than N resources has none deleted from its copy, the run is not
    ok and says why; raised, the deletions are applied."""
    root = tmp_path / "fleet"
    with many_sources(tmp_path, ["127.0.0.2", "127.0.0.3"]) as (sites, _):
        one, two = sites
        add = ("fleet", "add", one.url, "--name", one.name, "--delete", "--root", root)
        assert cli(*add, "--max-delete", "1").exit_code == 0
        listing = tmp_path / "more.csv"
        listing.write_text(f"name,source,delete,max_delete\n{two.name},{two.url},true,2\n")
        assert cli("fleet", "import", listing, "--root", root).exit_code == 0
        assert cli("fleet", "run", "--once", "--root", root).exit_code == 0
        copies = {s.name: tree(root / s.name) for s in sites}
        for site in sites:
            for name in ("r0.txt", "r1.txt", "r2.txt"):
                (site.data / name).unlink()
            site.publish()

        held = cli("fleet", "run", "--once", "--all", "--root", root)
        assert held.exit_code == 1, held.stderr
        s = status(root)
        for site in sites:
            assert tree(root / site.name) == copies[site.name]
            assert s[site.name]["ok"] is False
            assert "3 deletions planned, more than --max-delete" in str(s[site.name]["error"])
        assert cli(*add, "--max-delete", "3", "--replace").exit_code == 0
        again = cli("fleet", "run", "--once", "--all", "--root", root)
        assert again.exit_code == 1, again.stderr  # the other one is still held back
        assert tree(root / one.name) == one.files()
        assert tree(root / two.name) == copies[two.name]


def test_a_source_that_lists_nothing_empties_no_copy_unless_allowed(tmp_path: Path) -> None:
    """A Source whose list is suddenly empty (what an outage publishes) has nothing deleted
    from its copy, even with `--delete`: the run is not ok and says how to allow it; with
    `--allow-empty` (or `allow_empty` in an imported file) the copy follows it."""
    root = tmp_path / "fleet"
    with many_sources(tmp_path, ["127.0.0.2", "127.0.0.3"]) as (sites, _):
        one, two = sites
        add = ("fleet", "add", one.url, "--name", one.name, "--delete", "--root", root)
        assert cli(*add).exit_code == 0
        listing = tmp_path / "more.csv"
        listing.write_text(f"name,source,delete,allow_empty\n{two.name},{two.url},true,yes\n")
        assert cli("fleet", "import", listing, "--root", root).exit_code == 0
        assert cli("fleet", "run", "--once", "--root", root).exit_code == 0
        copy = tree(root / one.name)
        assert copy
        for site in sites:
            for path in site.files():
                (site.data / path).unlink()
            site.publish(allow_empty=True)

        held = cli("fleet", "run", "--once", "--all", "--root", root)
        assert held.exit_code == 1, held.stderr
        s = status(root)
        assert tree(root / one.name) == copy
        assert s[one.name]["ok"] is False
        error = str(s[one.name]["error"])
        assert "the Source no longer lists any resource this copy holds" in error
        assert "--allow-empty" in error
        assert s[two.name]["ok"] is True and tree(root / two.name) == {}
        assert cli(*add, "--allow-empty", "--replace").exit_code == 0
        assert cli("fleet", "run", "--once", "--all", "--root", root).exit_code == 0
        assert tree(root / one.name) == {}


def test_a_full_disk_under_the_fleet_is_waited_out(tmp_path: Path) -> None:
    """The disk of the fleet's store fills while `fleet run` runs (RLIMIT_FSIZE, as
    tests/test_full_disk.py): the scheduler stopped ("fleet database: database or disk is
    full"). It waits it out, said once and once when it is over, and the copies catch up."""
    import resource

    root = tmp_path / "fleet"
    with many_sources(tmp_path, ["127.0.0.2", "127.0.0.3"]) as (sites, _):
        listing = tmp_path / "sources.csv"
        listing.write_text(csv_of(sites, every="1s"))
        assert cli("fleet", "import", listing, "--root", root).exit_code == 0
        said = tmp_path / "run.log"
        argv = [sys.executable, "-m", "resourcesync", "fleet", "run", "--root", str(root)]
        proc = subprocess.Popen(
            [*argv, "--retry-after", "1s"],
            stderr=said.open("w"),
            preexec_fn=lambda: signal.signal(signal.SIGXFSZ, signal.SIG_IGN),
        )
        try:
            _wait(lambda: _in_step(root, sites), "baselines")
            limit = resource.RLIM_INFINITY
            resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (1000, limit))
            change(sites, 1)
            _wait(lambda: "trying again until it is back" in said.read_text(), "the outage said")
            resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (limit, limit))
            _wait(lambda: _in_step(root, sites), "the copies caught up")
            _wait(lambda: "the fleet database is back" in said.read_text(), "the store back")
            assert proc.poll() is None, said.read_text()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        text = said.read_text()
        assert proc.returncode == 0, text
        assert "free some space and run again" in text and "Traceback" not in text, text
        assert f"cannot write the fleet database {root}" in text, text
        assert all(s["ok"] for s in status(root).values())


def test_the_fleet_databases_refusals_name_it_once(tmp_path: Path) -> None:
    """Its disk full (waited out) or the file read-only (not): one line naming the fleet's
    database in the sentence, as a copy's state is named, not as the line's source too."""
    import sqlite3

    from resourcesync.fleet.registry import StoreUnavailable
    from resourcesync.fleet.store import SQLiteStore

    path = tmp_path / "fleet" / "fleet.sqlite"
    store = SQLiteStore(path)
    try:
        full = store._error(sqlite3.OperationalError("database or disk is full"))
        assert isinstance(full, StoreUnavailable)
        assert str(full) == (
            f"cannot write the fleet database {path} (database or disk is full): "
            "free some space and run again"
        )
        readonly = store._error(sqlite3.OperationalError("attempt to write a readonly database"))
        assert not isinstance(readonly, StoreUnavailable)
        assert str(readonly) == (
            f"cannot write the fleet database {path} (attempt to write a readonly database)"
        )
    finally:
        store.close()
