"""The fleet's store in PostgreSQL: the same schema and SQL as the embedded store, shared by the
scheduler and every worker of a cluster. Exactly one sync per Source at a time across the
cluster is a PostgreSQL advisory lock, held on its own connection for the length of the sync:
a worker that dies (even by kill -9) drops its connection and PostgreSQL releases the lock.

A connection the server cut (a restart, a failover, an idle timeout) is opened again at the next
use, between transactions and while its thread holds no lock (a lock held on a cut connection
is gone: the sync under it stops with `StoreUnavailable` and its task is tried again); a read
that finds its connection cut is asked once more on a new one. A server that is still away
raises `StoreUnavailable`, which the scheduler and the workers wait out.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg

from .copystate import COPY_ADDED, COPY_SCHEMA
from .registry import FleetError, StoreUnavailable
from .store import ADDED, SCHEMA, SQLStore

__all__ = ["PostgresStore"]

_LOCK_KEY = "resourcesync.fleet:"


def _redact(url: str) -> str:
    """The URL without its password, for messages."""
    head, at, tail = url.rpartition("@")
    if not at:
        return url
    scheme, sep, user = head.partition("://")
    return f"{scheme}{sep}{user.split(':', 1)[0]}@{tail}"


def _first(exc: BaseException) -> str:
    """The first line of a driver's message (its type when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class PostgresStore(SQLStore):
    def where(self) -> str:
        return _redact(self.url)

    def __init__(self, url: str, *, create: bool = True) -> None:
        self.url = url
        self._depth = 0  # transactions open on the connection
        # Locks held by each thread, each on a connection of its own (a worker syncs under its
        # lock in the thread that took it; the embedded runner's pool threads hold theirs while
        # its scheduler thread uses the connection).
        self._held = threading.local()
        #: Connections opened so far: a lock taken before the last one is taken for lost (the
        #: server that cut one connection cut the lock's too, most likely).
        self._generation = 0
        self.conn = self._connect()
        if not create and not self._execute("SELECT to_regclass('fleet_source')")[0][0]:
            self.conn.close()
            raise FleetError(
                "no fleet in this database (no table fleet_source): register Sources with "
                "`resourcesync fleet add --db …` or `fleet import --db …` first",
                source=_redact(url),
            )
        with self._transaction():
            # Two processes creating the schema at once would race on the catalog.
            self._execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('resourcesync.schema', 0))"
            )
            # SQLite's byte order is PostgreSQL's "C" collation.
            schema = (SCHEMA + COPY_SCHEMA).replace("COLLATE BINARY", 'COLLATE "C"')
            for statement in schema.split(";"):
                if statement.strip():
                    self._execute(statement)
            for column, kind in ADDED:
                self._execute(f"ALTER TABLE fleet_source ADD COLUMN IF NOT EXISTS {column} {kind}")
            for table, column, kind in COPY_ADDED:
                self._execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}")

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise StoreUnavailable(
                f"cannot connect: {_first(exc)}", source=_redact(self.url)
            ) from None

    def _locks_here(self) -> int:
        """Locks this thread holds: the connection is not opened again under one."""
        return int(getattr(self._held, "n", 0))

    def _cut(self) -> bool:
        return bool(self.conn.closed or self.conn.broken)

    def _error(self, exc: psycopg.Error) -> FleetError:
        kind = StoreUnavailable if self._cut() else FleetError
        return kind(f"fleet database: {_first(exc)}", source=_redact(self.url))

    def _usable(self) -> None:
        """A connection the server cut opened again, when nothing depends on the one cut."""
        held = self._locks_here()
        if held and getattr(self._held, "generation", self._generation) != self._generation:
            # Connected again (by another thread) since this thread took its lock.
            raise self._lost("a lock")
        if not self._cut():
            return
        if self._depth or held:
            raise self._lost("a transaction" if self._depth else "a lock")
        self.conn.close()
        self.conn = self._connect()
        self._generation += 1

    def _lost(self, what: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"fleet database: the connection was lost, and {what} with it",
            source=_redact(self.url),
        )

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        self._usable()
        query = sql.replace("?", "%s")
        try:
            try:
                cur = self.conn.execute(query, params)  # type: ignore[arg-type]
            except psycopg.OperationalError:
                # Found cut by this statement (the server restarted while it was idle): a read
                # is asked again on a new connection. A write is not: it may have been done.
                if not self._cut() or not sql.lstrip().upper().startswith("SELECT"):
                    raise
                self._usable()  # raises when something depended on the one cut
                cur = self.conn.execute(query, params)  # type: ignore[arg-type]
            return list(cur.fetchall()) if cur.description else []
        except psycopg.Error as exc:
            raise self._error(exc) from None

    def _executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        self._usable()
        try:
            with self.conn.cursor() as cur:
                # psycopg sends the rows in one pipeline: one round trip, not one per row.
                cur.executemany(sql.replace("?", "%s"), rows)  # type: ignore[arg-type]
        except psycopg.Error as exc:
            raise self._error(exc) from None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._usable()
        self._depth += 1
        try:
            with self.conn.transaction():
                yield
        except psycopg.Error as exc:  # its COMMIT, or its ROLLBACK on a cut connection
            raise self._error(exc) from None
        finally:
            self._depth -= 1

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[bool]:
        conn = self._connect()
        try:
            try:
                row = conn.execute(
                    "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (_LOCK_KEY + name,)
                ).fetchone()
            except psycopg.Error as exc:
                raise StoreUnavailable(
                    f"fleet database: {_first(exc)}", source=_redact(self.url)
                ) from None
            held = bool(row and row[0])
            if held and not self._locks_here():
                self._held.generation = self._generation
            self._held.n = self._locks_here() + held
            try:
                yield held
            finally:
                self._held.n -= held
        finally:
            conn.close()  # ends the session: the lock goes with it

    def close(self) -> None:
        self.conn.close()
