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

Bounds (issue 17.5): a payload is stored once however many subscribers wait for it, and held in
memory once (`_Bodies`) however many deliveries of it are in flight. What is kept is capped per
subscription (`max_pending`) and per topic (`max_topic_notifications`, `max_topic_bytes`): past
a cap the oldest are dropped, and each subscription that lost deliveries counts them in
`dropped` — a gap its subscriber sees (the next notification's `from` is after the last `until`
it got) and repairs from the Change List.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..sqlite import damage, register

__all__ = ["Delivery", "Store", "Subscription"]

log = logging.getLogger("resourcesync.hub")

#: What mends a damaged hub database (said with the error).
_AFRESH = (
    "set it aside (rename it) and start the hub again: it starts with no subscription, and "
    "each subscriber is notified again once it renews its own (at the latest when its lease "
    "ends)"
)

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
CREATE INDEX IF NOT EXISTS notifications_by_topic ON notifications (topic, id);
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


def _unreadable(
    attempts: object, next_try: object, expires: object, callback: object, secret: object
) -> str | None:
    """What of a delivery's stored values is not of its type (None: all are)."""
    if type(attempts) is not int:
        return f"attempts ({attempts!r})"
    for what, value in (("next try", next_try), ("lease end", expires)):
        if type(value) not in (int, float):
            return f"{what} ({value!r})"
    if type(callback) is not str:
        return f"callback ({callback!r})"
    if secret is not None and type(secret) is not bytes:
        return f"secret ({type(secret).__name__})"
    return None


class _Bodies:
    """Payloads read from the file, kept in memory up to `budget` bytes (least recently used
    first out): every delivery of one notification shares one `bytes` object."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.size = 0
        self._items: OrderedDict[int, bytes] = OrderedDict()

    def get(self, nid: int, load: Callable[[], bytes]) -> bytes:
        body = self._items.get(nid)
        if body is not None:
            self._items.move_to_end(nid)
            return body
        body = load()
        self._items[nid] = body
        self.size += len(body)
        while self.size > self.budget and len(self._items) > 1:
            _, old = self._items.popitem(last=False)
            self.size -= len(old)
        return body

    def forget(self, nid: int) -> None:
        body = self._items.pop(nid, None)
        if body is not None:
            self.size -= len(body)


class Store:
    """The hub's SQLite file. `clock` gives the current time in seconds since the epoch; the
    caps are described in the module docstring (0: no cap)."""

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Callable[[], float] = time.time,
        max_pending: int = 0,
        max_topic_notifications: int = 0,
        max_topic_bytes: int = 0,
        memory_budget: int = 64 << 20,
    ) -> None:
        self.path = str(path)
        self.clock = clock
        self.max_pending = max_pending
        self.max_topic_notifications = max_topic_notifications
        self.max_topic_bytes = max_topic_bytes
        self._bodies = _Bodies(memory_budget)
        self._damage_said = False
        register(self.path, _AFRESH)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.execute("PRAGMA busy_timeout=5000")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            self._db.close()
            found = damage(exc, self.path)
            if found is not None:
                raise found from None
            raise
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(subscriptions)")}
        if "dropped" not in columns:  # a file from an earlier version
            self._db.execute(
                "ALTER TABLE subscriptions ADD COLUMN dropped INTEGER NOT NULL DEFAULT 0"
            )

    def damaged(self, exc: BaseException) -> bool:
        """Whether `exc` is SQLite finding this database damaged while the hub runs; said once
        in the log (one line naming the file and what mends it), whoever meets it first: a
        request, a delivery worker, the lease sweeper."""
        found = damage(exc, self.path)
        if found is None:
            return False
        if not self._damage_said:
            self._damage_said = True
            log.error("%s", found)
        return True

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
            self._cap(db, topic, subs)
        return subs

    def _cap(self, db: sqlite3.Connection, topic: str, subs: list[int]) -> None:
        """Drop the oldest of what is kept past the caps, counting the gaps."""
        dropped: dict[int, int] = {}
        if self.max_pending:
            over = db.execute(
                "SELECT subscription_id, count(*) - ? FROM deliveries WHERE subscription_id IN"
                f" ({','.join('?' * len(subs))}) GROUP BY subscription_id"
                " HAVING count(*) > ?",
                (self.max_pending, *subs, self.max_pending),
            ).fetchall()
            for sub_id, n in over:
                gone = [
                    int(r[0])
                    for r in db.execute(
                        "SELECT notification_id FROM deliveries WHERE subscription_id = ?"
                        " ORDER BY notification_id LIMIT ?",
                        (sub_id, n),
                    )
                ]
                db.executemany(
                    "DELETE FROM deliveries WHERE subscription_id = ? AND notification_id = ?",
                    [(sub_id, g) for g in gone],
                )
                dropped[sub_id] = dropped.get(sub_id, 0) + len(gone)
                for g in gone:
                    self._collect(db, g)
        if self.max_topic_notifications or self.max_topic_bytes:
            rows = db.execute(
                "SELECT id, length(body) FROM notifications WHERE topic = ? ORDER BY id DESC",
                (topic,),
            ).fetchall()
            kept = total = 0
            for nid, size in rows:
                kept += 1
                total += size
                if kept == 1:
                    continue  # the newest is always kept
                over_count = self.max_topic_notifications and kept > self.max_topic_notifications
                if over_count or (self.max_topic_bytes and total > self.max_topic_bytes):
                    for (sub_id,) in db.execute(
                        "SELECT subscription_id FROM deliveries WHERE notification_id = ?", (nid,)
                    ).fetchall():
                        dropped[sub_id] = dropped.get(sub_id, 0) + 1
                    db.execute("DELETE FROM deliveries WHERE notification_id = ?", (nid,))
                    self._collect(db, nid)
        for sub_id, n in dropped.items():
            db.execute("UPDATE subscriptions SET dropped = dropped + ? WHERE id = ?", (n, sub_id))
            log.info(
                "hub: %d oldest notification(s) for subscription %d dropped (cap reached);"
                " its subscriber sees a gap and catches up",
                n,
                sub_id,
            )

    # -- deliveries ------------------------------------------------------------------------

    def next_delivery(self, subscription_id: int) -> Delivery | None:
        """The oldest pending delivery of a subscription, or None when its queue is empty."""
        row = self._db.execute(
            "SELECT d.subscription_id, d.notification_id, d.attempts, d.next_try, n.topic,"
            " n.link, s.callback, s.secret, s.expires"
            " FROM deliveries d JOIN notifications n ON n.id = d.notification_id"
            " JOIN subscriptions s ON s.id = d.subscription_id"
            " WHERE d.subscription_id = ? ORDER BY d.notification_id LIMIT 1",
            (subscription_id,),
        ).fetchone()
        if row is None:
            return None
        sub_id, nid, attempts, next_try, topic, link, callback, secret, expires = row
        bad = _unreadable(attempts, next_try, expires, callback, secret)
        if bad is not None:
            # SQLite keeps what a column is given: a value of another type (a hand, a tool,
            # a disk) would stop this subscription's deliveries for good, with a traceback in
            # the log at every restart. It ends, said once; its subscriber is told again once
            # it renews (at the latest when its lease ends), as after a hub's state set aside.
            log.warning(
                "hub: subscription %d (%s): its stored %s cannot be read: ended; its "
                "subscriber is notified again once it renews",
                subscription_id,
                callback,
                bad,
            )
            self.end(subscription_id)
            return None
        body = self._bodies.get(nid, lambda: self._body(nid))
        return Delivery(
            sub_id, nid, attempts, next_try, topic, link, body, callback, secret, expires
        )

    def _body(self, nid: int) -> bytes:
        row = self._db.execute("SELECT body FROM notifications WHERE id = ?", (nid,)).fetchone()
        return bytes(row[0]) if row is not None else b""

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
        gone = db.execute(
            "DELETE FROM notifications WHERE id = ? AND NOT EXISTS"
            " (SELECT 1 FROM deliveries WHERE notification_id = ?)",
            (notification_id, notification_id),
        ).rowcount
        if gone:
            self._bodies.forget(notification_id)

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
            "stored_bytes": one("SELECT coalesce(sum(length(body)), 0) FROM notifications"),
            "dropped_deliveries": one("SELECT coalesce(sum(dropped), 0) FROM subscriptions"),
        }
