"""The fleet on a cluster: real Redis, real PostgreSQL, real `resourcesync worker` processes.
A worker killed with -9 mid-task has its task redone by another; the scheduler killed and
started again picks up where it was; a Redis restart and the work goes on. At the end every
copy equals its Source."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.destination.helpers import cli, tree
from tests.fleet.cluster import Postgres, Redis, workers
from tests.fleet.helpers import Site, change, csv_of, files_for, many_sources

HOSTS = ["127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.4", "127.0.0.5"]
SLOW = "127.0.0.9"


def _wait(predicate: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.2)


def _fleet(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "resourcesync", "fleet", *map(str, args)]


def _status(root: Path, db: str) -> dict[str, dict[str, object]]:
    doc = json.loads(cli("fleet", "status", "--json", "--root", root, "--db", db).stdout)
    return {s["name"]: s for s in doc["sources"]}


def _in_step(root: Path, sites: list[Site]) -> bool:
    # The copies are being synced while we look: a file may go between listing and reading.
    try:
        return all(tree(root / s.name) == s.files() for s in sites)
    except FileNotFoundError:
        return False


def _scheduler(tmp_path: Path, sites: list[Site], root: Path, db: str, broker: Redis) -> list[str]:
    """The Sources registered, due every second; the command of their scheduler."""
    listing = tmp_path / "sources.csv"
    listing.write_text(csv_of(sites, every="1s"))
    assert cli("fleet", "import", listing, "--root", root, "--db", db).exit_code == 0
    scheduler = _fleet("run", "--root", root, "--broker", broker.url, "--db", db)
    return [*scheduler, "--requeue-after", "10s"]


def _state_counts(db: str) -> dict[str, int]:
    """Resources per copy in the fleet's store."""
    import psycopg

    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT copy_name, count(*) FROM fleet_copy_resource GROUP BY copy_name"
        ).fetchall()
    return {name: n for name, n in rows}


def _files(i: int) -> dict[str, bytes]:
    # The last Source is slow (its host delays each resource) and has more to fetch.
    if i == len(HOSTS):
        return {f"slow/{k}.txt": f"slow {k}".encode() for k in range(12)}
    return files_for(i)


def test_two_workers_one_killed_mid_task_nothing_lost(
    tmp_path: Path, postgres: Postgres, broker: Redis
) -> None:
    root, db = tmp_path / "fleet", postgres.database()
    root.mkdir()
    with many_sources(tmp_path, [*HOSTS, SLOW], delay=0.25, slow={SLOW}, files=_files) as (
        sites,
        _,
    ):
        listing = tmp_path / "sources.csv"
        listing.write_text(csv_of(sites))
        assert cli("fleet", "import", listing, "--root", root, "--db", db).exit_code == 0
        slow = sites[-1].name
        with workers(2, broker.url, db, root, tmp_path, visibility_timeout="3s") as (w0, w1):
            once = _fleet("run", "--once", "--all", "--requests", "1", "--root", root)
            once += ["--broker", broker.url, "--db", db]
            run = subprocess.Popen(once, stderr=subprocess.PIPE, text=True)
            # Kill -9 the worker that is in the middle of the slow Source, pool and all.
            _wait(lambda: any(f"{slow}: syncing" in w.text() for w in (w0, w1)), "slow sync")
            victim, other = (w0, w1) if f"{slow}: syncing" in w0.text() else (w1, w0)
            victim.kill()
            _, err = run.communicate(timeout=60)
            assert run.returncode == 0, err + victim.text() + other.text()
            assert f"{len(sites)} Sources run, 0 not ok" in err
            # The other worker did it again, from the start of the killed one's state.
            assert f"{slow}: ok" in other.text()
            assert f"{slow}: ok" not in victim.text()
            assert _in_step(root, sites)
            status = _status(root, db)
            assert all(v["ok"] and v["failures"] == 0 for v in status.values())
            assert {v["queued"] for v in status.values()} == {None}  # every task reported back
            # Each copy's state is in PostgreSQL, with the registry, not on a worker's disk:
            # the killed worker's half-done copy was carried on from there.
            assert not list(root.glob("*/.resourcesync/state.sqlite"))
            assert _state_counts(db) == {s.name: len(s.files()) for s in sites}

            # The survivor alone follows the changes of every Source.
            change(sites[:-1], 1)
            again = cli(
                "fleet",
                "run",
                "--once",
                "--all",
                "--root",
                root,
                "--broker",
                broker.url,
                "--db",
                db,
            )
            assert again.exit_code == 0, again.stderr
            assert _in_step(root, sites)
            assert {v["mode"] for v in _status(root, db).values()} == {"incremental"}


def test_a_source_whose_registration_cannot_be_read_fails_alone_on_the_workers(
    tmp_path: Path, postgres: Postgres, broker: Redis
) -> None:
    """A cluster's registry row with request headers that cannot be read: its task fails on
    the worker with one line naming the store and `fleet remove` (never a sync without its
    credentials), recorded as its outcome; the other Sources are synced."""
    import psycopg

    root, db = tmp_path / "fleet", postgres.database()
    root.mkdir()
    with many_sources(tmp_path, ["127.0.0.2", "127.0.0.3"]) as (sites, _):
        listing = tmp_path / "sources.csv"
        listing.write_text(csv_of(sites))
        assert cli("fleet", "import", listing, "--root", root, "--db", db).exit_code == 0
        bad, good = sites[0].name, sites[1].name
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("UPDATE fleet_source SET headers = '{cut' WHERE name = %s", (bad,))
        with workers(1, broker.url, db, root, tmp_path):
            once = cli("fleet", "run", "--once", "--root", root, "--broker", broker.url, "--db", db)
        assert once.exit_code == 1, once.stderr
        assert f"{bad}: FAILED:" in once.stderr and f"fleet remove {bad}" in once.stderr
        assert "Traceback" not in once.stderr
        assert tree(root / good) == sites[1].files()
        assert not (root / bad).exists()
        status = _status(root, db)
        assert status[good]["ok"] and status[bad]["ok"] is False
        assert "request headers" in str(status[bad]["error"]) and status[bad]["failures"] == 1


def test_scheduler_and_redis_restarts_work_resumes(
    tmp_path: Path, postgres: Postgres, broker: Redis
) -> None:
    root, db = tmp_path / "fleet", postgres.database()
    root.mkdir()
    with many_sources(tmp_path, HOSTS) as (sites, _):
        scheduler = _scheduler(tmp_path, sites, root, db, broker)
        with workers(2, broker.url, db, root, tmp_path, visibility_timeout="10s"):
            first = subprocess.Popen(scheduler, stderr=subprocess.DEVNULL)
            try:
                _wait(lambda: all(v["ok"] for v in _status(root, db).values()), "baselines")
            finally:
                first.kill()  # -9: no goodbye
                first.wait()
            change(sites, 1)
            second = subprocess.Popen(scheduler, stderr=subprocess.PIPE, text=True)
            try:
                _wait(lambda: _in_step(root, sites), "the restarted scheduler")
                broker.stop()
                change(sites, 2)
                time.sleep(1)  # the scheduler and the workers meet a broker that is gone
                broker.start()
                _wait(lambda: _in_step(root, sites), "work resumed after the Redis restart")
            finally:
                second.send_signal(signal.SIGTERM)
                _, err = second.communicate(timeout=30)
            assert second.returncode == 0, err
        status = _status(root, db)
        assert all(v["ok"] and v["mode"] == "incremental" for v in status.values())


def test_a_postgres_restart_work_resumes(tmp_path: Path, postgres: Postgres, broker: Redis) -> None:
    """PostgreSQL restarted under a running cluster (a failover, a minor upgrade): every
    session is cut. The scheduler and the workers connect again; the work goes on. Away for a
    while, it is waited out, said once when it goes and once when it is back."""
    root, db = tmp_path / "fleet", postgres.database()
    root.mkdir()
    with many_sources(tmp_path, HOSTS) as (sites, _):
        scheduler = _scheduler(tmp_path, sites, root, db, broker)
        with workers(2, broker.url, db, root, tmp_path, visibility_timeout="10s") as running:
            said = tmp_path / "scheduler.log"
            run = subprocess.Popen(scheduler, stderr=said.open("w"), text=True)
            try:
                _wait(lambda: all(v["ok"] for v in _status(root, db).values()), "baselines")
                postgres.restart()
                change(sites, 1)
                _wait(lambda: _in_step(root, sites), "work resumed after the restart")
                postgres.restart()
                change(sites, 2)
                _wait(lambda: _in_step(root, sites), "work resumed after a second restart")
                with postgres.away():
                    change(sites, 3)
                    time.sleep(4)  # the scheduler and the workers meet a store that is gone
                _wait(lambda: _in_step(root, sites), "work resumed once it was back")
                assert run.poll() is None, "the scheduler stopped"
            finally:
                run.send_signal(signal.SIGTERM)
                run.wait(timeout=30)
            assert run.returncode == 0, said.read_text()
            assert all(w.proc.poll() is None for w in running), "a worker stopped"
        said_text = said.read_text()
        # Each outage said once, and its end once (a restart may be met too, if a pass falls
        # in the moment the server is down).
        outages = said_text.count("trying again until it is back")
        assert outages >= 1 and said_text.count("the fleet database is back") == outages, said_text
        assert "Traceback" not in said_text + "".join(w.text() for w in running)
        status = _status(root, db)
        assert all(v["ok"] and v["mode"] == "incremental" for v in status.values()), status


def test_a_sync_the_store_leaves_mid_way_is_done_again_never_reported_done(
    tmp_path: Path, postgres: Postgres, broker: Redis
) -> None:
    """PostgreSQL goes while a worker syncs a slow Source (its lock goes with the session): the
    sync is not recorded as done; its task is tried again once the store is back, and the run
    reports it only then, the copy equal to its Source."""
    root, db = tmp_path / "fleet", postgres.database()
    root.mkdir()
    with many_sources(tmp_path, [SLOW], delay=0.3, files=lambda i: _files(len(HOSTS))) as (
        sites,
        _,
    ):
        listing = tmp_path / "sources.csv"
        listing.write_text(csv_of(sites))
        assert cli("fleet", "import", listing, "--root", root, "--db", db).exit_code == 0
        name = sites[0].name
        with workers(1, broker.url, db, root, tmp_path) as (worker,):
            once = _fleet("run", "--once", "--all", "--requests", "1", "--root", root)
            once += ["--broker", broker.url, "--db", db]
            said = tmp_path / "run.log"
            run = subprocess.Popen(once, stderr=said.open("w"), text=True)
            _wait(lambda: f"{name}: syncing" in worker.text(), "the slow sync")
            with postgres.away():
                time.sleep(3)
            assert run.wait(timeout=120) == 0, said.read_text() + worker.text()
            log = worker.text()
        assert "is tried again in" in log, log
        assert log.index("is tried again in") < log.index(f"{name}: ok"), log
        assert f"{name}: ok" in said.read_text()
        assert _in_step(root, sites)
        (status,) = _status(root, db).values()
        assert status["ok"] and status["failures"] == 0, status


def test_the_embedded_runner_on_postgres_waits_out_the_store(
    tmp_path: Path, postgres: Postgres
) -> None:
    """`fleet run --db postgresql://…` without a broker (syncs in threads): the store away for a
    while and restarted; the run waits it out and goes on."""
    # With a password (trust lets it in): said nowhere.
    root, db = tmp_path / "fleet", postgres.database().replace("postgres@", "postgres:secret@")
    root.mkdir()
    with many_sources(tmp_path, HOSTS[:3]) as (sites, _):
        listing = tmp_path / "sources.csv"
        listing.write_text(csv_of(sites, every="1s"))
        assert cli("fleet", "import", listing, "--root", root, "--db", db).exit_code == 0
        said = tmp_path / "run.log"
        argv = _fleet("run", "--root", root, "--db", db, "--status-port", "0")
        run = subprocess.Popen(argv, stderr=said.open("w"))
        try:
            _wait(lambda: _in_step(root, sites), "baselines")
            page = said.read_text().splitlines()[0].removeprefix("status at ")
            assert httpx.get(page + "status.json").json()["total"] == 3
            with postgres.away():
                change(sites, 1)
                time.sleep(4)
                # The status page says why it cannot answer, in one line.
                away = httpx.get(page)
                assert away.status_code == 503, away.text
                assert away.text.startswith("the fleet's store cannot be read now: postgresql://")
                assert away.text.count("\n") == 1 and "secret" not in away.text
            _wait(lambda: _in_step(root, sites), "work resumed once it was back")
            assert httpx.get(page + "status.json").status_code == 200
            postgres.restart()
            change(sites, 2)
            _wait(lambda: _in_step(root, sites), "work resumed after a restart")
            assert run.poll() is None, said.read_text()
        finally:
            run.send_signal(signal.SIGTERM)
            run.wait(timeout=30)
        text = said.read_text()
        assert run.returncode == 0, text
        assert "the fleet database is back" in text, text
        assert "Traceback" not in text and "secret" not in text, text
        assert all(v["ok"] for v in _status(root, db).values())


def test_per_host_slots_are_shared_by_every_client_and_expire_with_their_holder(
    broker: Redis,
) -> None:
    import redis

    from resourcesync.fleet.cluster import host_slot

    one, other = redis.Redis.from_url(broker.url), redis.Redis.from_url(broker.url)
    with (
        host_slot(one, "127.0.0.2", 2, lease=5) as first,
        host_slot(other, "127.0.0.2", 2, lease=5) as second,
    ):
        with host_slot(other, "127.0.0.2", 2, lease=5) as third:
            assert (first, second, third) == (True, True, False)
        with host_slot(other, "127.0.0.3", 2, lease=5) as elsewhere:
            assert elsewhere  # another host has its own slots
    # A live holder keeps its slot past its lease (renewed in the background)…
    with host_slot(one, "127.0.0.5", 1, lease=1) as held:
        assert held
        time.sleep(2.5)
        assert not _free(other, "127.0.0.5")
    assert _free(other, "127.0.0.5")  # …and gives it back at the end of the block.
    # A holder that died without releasing (a worker killed -9): its slot frees with its lease.
    dead = one.lock("resourcesync:fleet:host:127.0.0.4:0", timeout=1, thread_local=False)
    assert dead.acquire(blocking=False)
    with host_slot(other, "127.0.0.4", 1, lease=5) as busy:
        assert not busy
    _wait(lambda: _free(other, "127.0.0.4"), "the dead holder's lease to end", limit=10)


def _free(client: object, host: str) -> bool:
    from resourcesync.fleet.cluster import host_slot

    with host_slot(client, host, 1, lease=5) as got:
        return got


def test_a_database_without_a_fleet_is_an_error_never_an_empty_fleet(
    postgres: Postgres, tmp_path: Path
) -> None:
    """As with an embedded root: `fleet status`, `list` and `run` against a database that
    holds no fleet say so (exit 2) and create nothing; `fleet add` makes the fleet."""
    import psycopg

    db = postgres.database()
    for args in (["status"], ["list"], ["run", "--once"]):
        r = cli("fleet", *args, "--root", tmp_path, "--db", db)
        assert r.exit_code == 2, r.stderr
        assert "no fleet in this database" in r.stderr and "Traceback" not in r.stderr
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT to_regclass('fleet_source')").fetchone() == (None,)
    added = cli(
        "fleet", "add", "http://127.0.0.2:1/", "--name", "a", "--root", tmp_path, "--db", db
    )
    assert added.exit_code == 0, added.stderr
    assert cli("fleet", "list", "--root", tmp_path, "--db", db).stdout.startswith("a\t")


def test_a_worker_whose_root_is_not_the_clusters_writes_nothing(
    postgres: Postgres, tmp_path: Path
) -> None:
    """Every worker must see the same ROOT. The first one names the fleet (an id in the
    store and in ROOT/.fleet/cluster-id); a worker whose ROOT lacks it — the shared
    filesystem not mounted on its machine — refuses to start, and a task it still gets fails
    the same way, instead of making copies on its own disk that no other worker sees."""
    from resourcesync.fleet import open_store
    from resourcesync.fleet.registry import FleetError
    from resourcesync.fleet.store import check_root

    db = postgres.database()
    shared, elsewhere = tmp_path / "shared", tmp_path / "not-mounted"
    elsewhere.mkdir()
    added = cli("fleet", "add", "http://127.0.0.2:1/", "--name", "a", "--root", shared, "--db", db)
    assert added.exit_code == 0, added.stderr
    store = open_store(shared, db)
    try:
        check_root(store, shared)
        mark = shared / ".fleet" / "cluster-id"
        assert mark.is_file()
        check_root(store, shared)  # and again, as every task does
        with pytest.raises(FleetError, match=r"cluster-id is missing \(is the shared filesystem"):
            check_root(store, elsewhere, wait=0)
        (elsewhere / ".fleet").mkdir()
        (elsewhere / ".fleet" / "cluster-id").write_text("0123456789abcdef\n")
        with pytest.raises(FleetError, match="names another fleet"):
            check_root(store, elsewhere, wait=0)
    finally:
        store.close()
    (elsewhere / ".fleet" / "cluster-id").unlink()
    run = subprocess.run(
        [*_worker_argv(elsewhere), "--broker", "redis://127.0.0.1:1/0", "--db", db],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    assert "not this fleet's root" in run.stderr and "Traceback" not in run.stderr
    assert not any(p.name != ".fleet" for p in elsewhere.iterdir())


def _worker_argv(root: Path) -> list[str]:
    return [sys.executable, "-m", "resourcesync", "worker", "--root", str(root)]


def test_a_cut_connection_is_opened_again_except_under_a_lock_its_thread_holds(
    postgres: Postgres,
) -> None:
    """After a restart the store connects again for a thread that holds no lock (the embedded
    runner's scheduler, while its pool threads sync under theirs), never for one that holds a
    lock: that lock went with the session, and the sync under it must stop."""
    import threading

    from resourcesync.fleet.pgstore import PostgresStore
    from resourcesync.fleet.registry import StoreUnavailable

    store = PostgresStore(postgres.database())
    taken, restarted, done = threading.Event(), threading.Event(), threading.Event()
    under_lock: list[BaseException | None] = []

    def syncing() -> None:
        with store.lock("s000") as mine:
            assert mine
            taken.set()
            restarted.wait(60)
            try:
                store.due(time.time(), 10)
                under_lock.append(None)
            except StoreUnavailable as exc:
                under_lock.append(exc)
            done.set()

    thread = threading.Thread(target=syncing)
    thread.start()
    try:
        assert taken.wait(30)
        postgres.restart()
        assert store.due(time.time(), 10) == []  # this thread holds no lock: connected again
        restarted.set()
        assert done.wait(30)
    finally:
        restarted.set()
        thread.join(timeout=30)
        store.close()
    (failure,) = under_lock
    assert isinstance(failure, StoreUnavailable) and "a lock with it" in str(failure), failure
