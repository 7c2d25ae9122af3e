"""The fleet's store in PostgreSQL: the same schema and SQL as the embedded store, shared by the
scheduler and every worker of a cluster. Exactly one sync per Source at a time across the
cluster is a PostgreSQL advisory lock, held on its own connection for the length of the sync:
a worker that dies (even by kill -9) drops its connection and PostgreSQL releases the lock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg

from .copystate import COPY_ADDED, COPY_SCHEMA
from .registry import FleetError
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


class PostgresStore(SQLStore):
    def __init__(self, url: str, *, create: bool = True) -> None:
        self.url = url
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
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise FleetError(f"cannot connect: {first}", source=_redact(self.url)) from None

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        try:
            cur = self.conn.execute(sql.replace("?", "%s"), params)  # type: ignore[arg-type]
            return list(cur.fetchall()) if cur.description else []
        except psycopg.Error as exc:
            raise FleetError(f"fleet database: {exc}", source=_redact(self.url)) from None

    def _executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        try:
            with self.conn.cursor() as cur:
                # psycopg sends the rows in one pipeline: one round trip, not one per row.
                cur.executemany(sql.replace("?", "%s"), rows)  # type: ignore[arg-type]
        except psycopg.Error as exc:
            raise FleetError(f"fleet database: {exc}", source=_redact(self.url)) from None

    def _transaction(self) -> contextlib.AbstractContextManager[Any]:
        return self.conn.transaction()

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[bool]:
        conn = self._connect()
        try:
            row = conn.execute(
                "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (_LOCK_KEY + name,)
            ).fetchone()
            yield bool(row and row[0])
        finally:
            conn.close()  # ends the session: the lock goes with it

    def close(self) -> None:
        self.conn.close()
