"""Real servers for the fleet's cluster tests: a throw-away PostgreSQL 15 and Redis on loopback
ports, and `resourcesync worker` processes. Without the programs the tests say what to install
and skip — except on CI, where they must run."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_BIN = Path(os.environ.get("RESOURCESYNC_PG_BIN", "/usr/lib/postgresql/15/bin"))


def missing(program: str, package: str) -> None:
    message = f"{program} is not installed: apt-get install {package} (the fleet's cluster tests)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.05)


class Postgres:
    """initdb + postgres in a temporary folder; as root, run as the `postgres` user (or nobody)
    since PostgreSQL refuses to run as root."""

    def __init__(self) -> None:
        if not (PG_BIN / "initdb").exists():
            missing("PostgreSQL 15", "postgresql-15")
        self.dir = Path(tempfile.mkdtemp(prefix="rs-fleet-pg-"))
        self.port = free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                with contextlib.suppress(KeyError):
                    pw = pwd.getpwnam(name)
                    os.chown(self.dir, pw.pw_uid, pw.pw_gid)
                    self.user = name
                    break
        data = self.dir / "data"
        initdb = [str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"]
        self._run([*initdb, "-E", "UTF8", "--no-sync"])
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off"
        self.options = options
        pg_ctl = [str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", options]
        self._run([*pg_ctl, "-l", str(self.dir / "log"), "-w", "start"])
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, argv: list[str]) -> None:
        if self.user:
            argv = ["runuser", "-u", self.user, "--", *argv]
        subprocess.run(argv, check=True, capture_output=True, cwd=self.dir)

    def database(self) -> str:
        """A new empty database; its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def restart(self) -> None:
        """Stopped (every session cut, as by a failover or an upgrade) and started again."""
        data, log = str(self.dir / "data"), str(self.dir / "log")
        self._run([str(PG_BIN / "pg_ctl"), "-D", data, "-l", log, "-m", "fast", "-w", "restart"])

    @contextlib.contextmanager
    def away(self) -> Iterator[None]:
        """Stopped for the block (connections refused), started again after it."""
        data, log = str(self.dir / "data"), str(self.dir / "log")
        self._run([str(PG_BIN / "pg_ctl"), "-D", data, "-m", "fast", "-w", "stop"])
        try:
            yield
        finally:
            pg_ctl = [str(PG_BIN / "pg_ctl"), "-D", data, "-o", self.options, "-l", log]
            self._run([*pg_ctl, "-w", "start"])

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run(
                [str(PG_BIN / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "immediate", "stop"]
            )
        shutil.rmtree(self.dir, ignore_errors=True)


class Redis:
    """redis-server with an append-only file, so that a restart keeps the queue."""

    def __init__(self) -> None:
        self.program = shutil.which("redis-server")
        if not self.program:
            missing("redis-server", "redis-server")
        self.dir = Path(tempfile.mkdtemp(prefix="rs-fleet-redis-"))
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        assert self.program
        argv = [
            self.program,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
        ]
        argv += ["--appendonly", "yes", "--save", "", "--protected-mode", "no"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_port(self.port, self.proc, "redis-server")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()  # redis writes its append-only file and exits
            self.proc.wait(timeout=30)

    def close(self) -> None:
        """Stop for good and remove the data folder."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def flush(self) -> None:
        import redis

        redis.Redis.from_url(self.url).flushall()


class Worker:
    """`resourcesync worker` in its own process group (so kill -9 takes its pool with it)."""

    def __init__(
        self, broker: str, db: str, root: Path, name: str, log: Path, **options: str
    ) -> None:
        self.name, self.log = name, log
        argv = [sys.executable, "-m", "resourcesync", "worker", "--broker", broker, "--db", db]
        argv += ["--root", str(root), "--name", name, "--concurrency", "1"]
        for k, v in options.items():
            argv += [f"--{k.replace('_', '-')}", v]
        self.out = log.open("wb")
        self.proc = subprocess.Popen(
            argv, stdout=self.out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.out.close()


@contextlib.contextmanager
def workers(
    n: int, broker: str, db: str, root: Path, logs: Path, **options: str
) -> Iterator[list[Worker]]:
    started = [
        Worker(broker, db, root, f"w{i}@test", logs / f"w{i}.log", **options) for i in range(n)
    ]
    try:
        yield started
    finally:
        for w in started:
            w.stop()
