"""The hub's memory: subscriptions, notifications and pending deliveries in one SQLite file.

Why SQLite: a notification the hub has answered 200 for must reach every subscriber that was
active when it arrived, even if the hub is killed in between. So the notification and one
`deliveries` row per subscriber are written in the same transaction before the 200 goes out,
and a delivery row is deleted only once its subscriber answered 2xx (or the subscription ended).
A restarted hub finds the rows and carries on, in order: a subscriber's queue is its delivery
rows ordered by notification id, and its worker only ever tries the oldest one.

Durability: the file is in WAL mode. Accepting a notification and changing a subscription are
committed with `synchronous=FULL` (fsynced before the hub answers); the bookkeeping of delivery
attempts with `synchronous=NORMAL`, which survives a killed process and at worst, after a power
loss, delivers a notification a second time — never loses one.

All methods are synchronous and short; the hub calls them from its event loop (one connection,
one thread), so a transaction never interleaves with another.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Delivery", "Store", "Subscription"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS subscriptions (
    id INTEGER PRIMARY KEY,
    topic TEXT NOT NULL,
    callback TEXT NOT NULL,
    secret BLOB,
    lease_seconds INTEGER NOT NULL,
    expires REAL NOT NULL,
    created REAL NOT NULL,
    UNIQUE (topic, callback)
);
CREATE TABLE IF NOT EXISTS notifications (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    topic TEXT NOT NULL,
    link TEXT NOT NULL,
    body BLOB NOT NULL,
    received REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS deliveries (
    subscription_id INTEGER NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
    notification_id INTEGER NOT NULL REFERENCES notifications (id),
    attempts INTEGER NOT NULL DEFAULT 0,
    next_try REAL NOT NULL,
    last_error TEXT,
    PRIMARY KEY (subscription_id, notification_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS deliveries_by_notification ON deliveries (notification_id);
"""


@dataclass(frozen=True, slots=True)
class Subscription:
    """An active (verified) subscription of `callback` to `topic`."""

    id: int
    topic: str
    callback: str
    secret: bytes | None
    lease_seconds: int
    expires: float


@dataclass(frozen=True, slots=True)
class Delivery:
    """The oldest pending notification of one subscription, with what is needed to send it."""

    subscription_id: int
    notification_id: int
    attempts: int
    next_try: float
    topic: str
    link: str
    body: bytes
    callback: str
    secret: bytes | None
    expires: float


class Store:
    """The hub's SQLite file. `clock` gives the current time in seconds since the epoch."""

    def __init__(self, path: str | Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = str(path)
        self.clock = clock
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._db.execute("PRAGMA optimize")
        self._db.close()

    @contextlib.contextmanager
    def _tx(self, durable: bool) -> Iterator[sqlite3.Connection]:
        db = self._db
        db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    # -- subscriptions ---------------------------------------------------------------------

    def subscribe(
        self, topic: str, callback: str, secret: bytes | None, lease_seconds: int
    ) -> Subscription:
        """Create or renew (same topic and callback) a verified subscription.

        A renewal keeps the subscription's id, so its pending deliveries stay queued (and are
        signed with the new secret); their backoff is reset, since the subscriber just showed
        it is alive.
        """
        now = self.clock()
        expires = now + lease_seconds
        with self._tx(durable=True) as db:
            row = db.execute(
                "INSERT INTO subscriptions (topic, callback, secret, lease_seconds, expires,"
                " created) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (topic, callback) DO UPDATE SET secret = excluded.secret,"
                " lease_seconds = excluded.lease_seconds, expires = excluded.expires"
                " RETURNING id",
                (topic, callback, secret, lease_seconds, expires, now),
            ).fetchone()
            sub_id = int(row[0])
            db.execute(
                "UPDATE deliveries SET next_try = ? WHERE subscription_id = ?", (now, sub_id)
            )
        return Subscription(sub_id, topic, callback, secret, lease_seconds, expires)

    def unsubscribe(self, topic: str, callback: str) -> bool:
        """End the subscription of `callback` to `topic`; whether there was one."""
        with self._tx(durable=True) as db:
            row = db.execute(
                "SELECT id FROM subscriptions WHERE topic = ? AND callback = ?", (topic, callback)
            ).fetchone()
            if row is None:
                return False
            self._drop(db, int(row[0]))
        return True

    def end(self, subscription_id: int) -> None:
        """End a subscription by id (410 Gone, lease expired, callback no longer allowed)."""
        with self._tx(durable=True) as db:
            self._drop(db, subscription_id)

    def _drop(self, db: sqlite3.Connection, subscription_id: int) -> None:
        ids = [
            r[0]
            for r in db.execute(
                "SELECT notification_id FROM deliveries WHERE subscription_id = ?",
                (subscription_id,),
            )
        ]
        db.execute("DELETE FROM deliveries WHERE subscription_id = ?", (subscription_id,))
        db.execute("DELETE FROM subscriptions WHERE id = ?", (subscription_id,))
        for nid in ids:
            self._collect(db, nid)

    def subscription(self, topic: str, callback: str) -> Subscription | None:
        row = self._db.execute(
            "SELECT id, topic, callback, secret, lease_seconds, expires FROM subscriptions"
            " WHERE topic = ? AND callback = ?",
            (topic, callback),
        ).fetchone()
        return None if row is None else Subscription(*row)

    def expire(self) -> list[int]:
        """End every subscription whose lease has run out; their ids."""
        now = self.clock()
        ids = [
            int(r[0])
            for r in self._db.execute("SELECT id FROM subscriptions WHERE expires <= ?", (now,))
        ]
        if ids:
            with self._tx(durable=False) as db:
                for sub_id in ids:
                    self._drop(db, sub_id)
        return ids

    # -- notifications ---------------------------------------------------------------------

    def publish(self, topic: str, link: str, body: bytes) -> list[int]:
        """Record a notification and queue it for every subscription of `topic` whose lease
        has not ended; the ids of those subscriptions (none: nothing is stored)."""
        now = self.clock()
        with self._tx(durable=True) as db:
            subs = [
                int(r[0])
                for r in db.execute(
                    "SELECT id FROM subscriptions WHERE topic = ? AND expires > ?", (topic, now)
                )
            ]
            if not subs:
                return []
            cur = db.execute(
                "INSERT INTO notifications (topic, link, body, received) VALUES (?, ?, ?, ?)",
                (topic, link, body, now),
            )
            nid = cur.lastrowid
            db.executemany(
                "INSERT INTO deliveries (subscription_id, notification_id, next_try)"
                " VALUES (?, ?, ?)",
                [(sub_id, nid, now) for sub_id in subs],
            )
        return subs

    # -- deliveries ------------------------------------------------------------------------

    def next_delivery(self, subscription_id: int) -> Delivery | None:
        """The oldest pending delivery of a subscription, or None when its queue is empty."""
        row = self._db.execute(
            "SELECT d.subscription_id, d.notification_id, d.attempts, d.next_try, n.topic,"
            " n.link, n.body, s.callback, s.secret, s.expires"
            " FROM deliveries d JOIN notifications n ON n.id = d.notification_id"
            " JOIN subscriptions s ON s.id = d.subscription_id"
            " WHERE d.subscription_id = ? ORDER BY d.notification_id LIMIT 1",
            (subscription_id,),
        ).fetchone()
        return None if row is None else Delivery(*row)

    def delivered(self, subscription_id: int, notification_id: int) -> None:
        with self._tx(durable=False) as db:
            db.execute(
                "DELETE FROM deliveries WHERE subscription_id = ? AND notification_id = ?",
                (subscription_id, notification_id),
            )
            self._collect(db, notification_id)

    def failed(
        self, subscription_id: int, notification_id: int, next_try: float, error: str
    ) -> None:
        with self._tx(durable=False) as db:
            db.execute(
                "UPDATE deliveries SET attempts = attempts + 1, next_try = ?, last_error = ?"
                " WHERE subscription_id = ? AND notification_id = ?",
                (next_try, error[:500], subscription_id, notification_id),
            )

    def _collect(self, db: sqlite3.Connection, notification_id: int) -> None:
        """Forget a notification nobody is waiting for any more."""
        db.execute(
            "DELETE FROM notifications WHERE id = ? AND NOT EXISTS"
            " (SELECT 1 FROM deliveries WHERE notification_id = ?)",
            (notification_id, notification_id),
        )

    def pending_subscriptions(self) -> list[int]:
        """Subscriptions with deliveries waiting (what a restarted hub resumes)."""
        return [
            int(r[0])
            for r in self._db.execute(
                "SELECT DISTINCT subscription_id FROM deliveries ORDER BY subscription_id"
            )
        ]

    def stats(self) -> dict[str, int]:
        """Counts for the status page: subscriptions, topics, queued deliveries, notifications."""
        db = self._db
        now = self.clock()

        def one(sql: str, *args: object) -> int:
            return int(db.execute(sql, args).fetchone()[0])

        return {
            "subscriptions": one("SELECT count(*) FROM subscriptions WHERE expires > ?", now),
            "topics": one("SELECT count(DISTINCT topic) FROM subscriptions WHERE expires > ?", now),
            "pending_deliveries": one("SELECT count(*) FROM deliveries"),
            "stored_notifications": one("SELECT count(*) FROM notifications"),
        }
