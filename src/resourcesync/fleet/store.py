"""The fleet's registry, schedule and status behind one interface, with one schema and two
backends: SQLite at the fleet's root (embedded, nothing to install) and PostgreSQL (shared by
the scheduler and the workers of a cluster, `pgstore.py`).

The SQL is written once with `?` placeholders; the PostgreSQL backend translates them. Times are
seconds since the epoch (DOUBLE PRECISION in both), so the schedule compares numbers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .. import sqlite as sqlite_habits
from ..destination.state import column_json
from ..errors import StateDamaged, storage_failure
from .copystate import COPY_ADDED, COPY_SCHEMA, COPY_TABLES, StoreCopyState
from .registry import Entry, FleetError, StoreUnavailable

__all__ = ["FleetStore", "Outcome", "Row", "SQLiteStore", "open_store"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS fleet_source (
  name TEXT PRIMARY KEY,
  source TEXT NOT NULL,
  dest TEXT,
  every DOUBLE PRECISION NOT NULL,
  via TEXT NOT NULL,
  apply_delete INTEGER NOT NULL,
  headers TEXT NOT NULL,
  added DOUBLE PRECISION NOT NULL,
  next_run DOUBLE PRECISION NOT NULL,
  last_run DOUBLE PRECISION,
  seconds DOUBLE PRECISION,
  ok INTEGER,
  mode TEXT,
  failures INTEGER NOT NULL DEFAULT 0,
  error TEXT,
  counts TEXT,
  cursor TEXT,
  last_ok DOUBLE PRECISION,
  queued DOUBLE PRECISION,
  ticket BIGINT NOT NULL DEFAULT 0,
  done_ticket BIGINT NOT NULL DEFAULT 0,
  follow INTEGER NOT NULL DEFAULT 0,
  woken DOUBLE PRECISION,
  max_delete INTEGER,
  allow_empty INTEGER NOT NULL DEFAULT 0,
  lookback DOUBLE PRECISION NOT NULL DEFAULT 600,
  history_grace DOUBLE PRECISION NOT NULL DEFAULT 3600,
  any_address INTEGER NOT NULL DEFAULT 0,
  reconcile_every DOUBLE PRECISION NOT NULL DEFAULT 604800
);
CREATE INDEX IF NOT EXISTS fleet_source_next_run ON fleet_source (next_run);
CREATE TABLE IF NOT EXISTS fleet_meta (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
"""

#: Columns added after the first schema, for stores created before them.
ADDED = (
    ("follow", "INTEGER NOT NULL DEFAULT 0"),
    ("woken", "DOUBLE PRECISION"),
    ("max_delete", "INTEGER"),
    ("allow_empty", "INTEGER NOT NULL DEFAULT 0"),
    ("lookback", "DOUBLE PRECISION NOT NULL DEFAULT 600"),
    ("history_grace", "DOUBLE PRECISION NOT NULL DEFAULT 3600"),
    ("any_address", "INTEGER NOT NULL DEFAULT 0"),
    ("reconcile_every", "DOUBLE PRECISION NOT NULL DEFAULT 604800"),
)

_COLUMNS = (
    "name, source, dest, every, via, apply_delete, headers, added, next_run, last_run, seconds, "
    "ok, mode, failures, error, counts, cursor, last_ok, queued, ticket, done_ticket, follow, "
    "woken, max_delete, allow_empty, lookback, history_grace, any_address, reconcile_every"
)
_COLUMN_NAMES = tuple(c.strip() for c in _COLUMNS.split(","))


@dataclass
class Outcome:
    """What one sync of one Source came to."""

    started: float
    seconds: float
    ok: bool
    mode: str = ""
    error: str | None = None
    cursor: str | None = None
    counts: dict[str, int] = field(default_factory=dict)


@dataclass
class Row:
    """A registered Source with its schedule and the outcome of its last run."""

    entry: Entry
    added: float
    next_run: float
    last_run: float | None = None
    seconds: float | None = None
    ok: bool | None = None
    mode: str | None = None
    failures: int = 0
    error: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    cursor: str | None = None
    last_ok: float | None = None
    queued: float | None = None
    ticket: int = 0
    done_ticket: int = 0
    #: When a notification asked for a run (None: none pending).
    woken: float | None = None
    #: Why some of its stored values cannot be read (one line naming the store and the remedy;
    #: None: all can). Such a Source is never synced: its runs fail with this line.
    damaged: str | None = None
    #: The columns (names of `_COLUMNS`) whose stored values cannot be read: shown as unknown,
    #: not as the stand-in the row carries for them.
    unreadable: frozenset[str] = frozenset()

    @property
    def name(self) -> str:
        return self.entry.name


#: The registry's numbers, by their index in `_COLUMNS`: (index, what it is, None allowed,
#: an integer). SQLite keeps whatever a column is given: a value of another type is damage.
_NUMBERS = (
    (3, "the interval", False, False),
    (7, "when it was added", False, False),
    (8, "its next run", False, False),
    (9, "its last run", True, False),
    (10, "its last run's seconds", True, False),
    (13, "its failures", False, True),
    (17, "its last success", True, False),
    (18, "when it was queued", True, False),
    (19, "its ticket", False, True),
    (20, "its last ticket done", False, True),
    (22, "when a notification woke it", True, False),
    (23, "--max-delete", True, True),
    (25, "--lookback", False, False),
    (26, "--history-grace", False, False),
    (28, "--reconcile-every", False, False),
)
#: Its yes-or-no columns (0 or 1; `ok` may be NULL: never run).
_FLAGS = (
    (5, "--delete"),
    (11, "its last result"),
    (21, "--follow"),
    (24, "--allow-empty"),
    (27, "--any-address"),
)


def _row(r: Sequence[Any], where: str) -> Row:
    """A registry row. One whose stored values cannot be read (damaged, or written by something
    else) is read with those values left out and `Row.damaged` saying which, naming the store
    and what mends it: such a Source is never synced (its runs fail with that line, the others
    go on), and no value is taken for another. Its last run's counts, which only status shows,
    are read as none (its next run records them again)."""
    name = r[0]
    values = list(r)
    bad: list[str] = []
    columns: set[int] = set()
    for i, what, none, integer in _NUMBERS:
        v = r[i]
        if (v is None and none) or type(v) is int or (type(v) is float and not integer):
            continue
        bad.append(f"{what} ({v!r})")
        columns.add(i)
        values[i] = None if none else 0
    for i, what in _FLAGS:
        if r[i] in (0, 1) or (i == 11 and r[i] is None):
            continue
        bad.append(f"{what} ({r[i]!r})")
        columns.add(i)
        values[i] = None if i == 11 else 0
    headers: Any = {}
    try:
        headers = json.loads(r[6])
    except (ValueError, TypeError) as exc:
        bad.append(f"the request headers ({exc})")
        columns.add(6)
        headers = {}
    if type(headers) is not dict or not all(
        type(k) is str and type(v) is str for k, v in headers.items()
    ):
        bad.append("the request headers (not names and their values)")
        columns.add(6)
        headers = {}
    try:
        counts = column_json(r[15], dict, "the counts", name) if r[15] else {}
    except StateDamaged:
        counts = {}
    damaged = None
    if bad:
        damaged = str(
            StateDamaged(
                f"the fleet's store holds values of Source {name} that cannot be read: "
                f"{'; '.join(bad)}: it is not synced until it is removed (`resourcesync fleet "
                f"remove {name}`) and added again (its copy's files stay, and its next run "
                "compares them with the Source)",
                source=where,
            )
        )
    v = values
    entry = Entry(
        name=name,
        source=v[1],
        dest=v[2],
        every=v[3],
        via=v[4],
        delete=bool(v[5]),
        headers=headers,
        follow=bool(v[21]),
        max_delete=v[23],
        allow_empty=bool(v[24]),
        lookback=v[25],
        history_grace=v[26],
        any_address=bool(v[27]),
        reconcile_every=v[28],
    )
    return Row(
        entry=entry,
        added=v[7],
        next_run=v[8],
        last_run=v[9],
        seconds=v[10],
        ok=None if v[11] is None else bool(v[11]),
        mode=v[12],
        failures=v[13],
        error=v[14],
        counts=counts,
        cursor=v[16],
        last_ok=v[17],
        queued=v[18],
        ticket=v[19],
        done_ticket=v[20],
        woken=v[22],
        damaged=damaged,
        unreadable=frozenset(_COLUMN_NAMES[i] for i in columns),
    )


class FleetStore(Protocol):
    """Where the fleet keeps its Sources, their schedule and their last outcome."""

    def add(self, entries: Iterable[Entry], *, now: float, replace: bool = False) -> int:
        """Register `entries` in one transaction (all or none). An existing name is an error,
        or with `replace` its settings are updated and its schedule and history kept."""
        ...

    def remove(self, name: str) -> bool: ...

    def get(self, name: str) -> Row | None: ...

    def rows(self) -> Iterator[Row]:
        """Every Source, by name."""
        ...

    def count(self) -> int: ...

    def due(self, now: float, limit: int, *, requeue_after: float | None = None) -> list[Row]:
        """Up to `limit` Sources whose next run is at or before `now`, earliest first. With
        `requeue_after`, a Source handed to a queue and not reported back for that long is due
        again (its task was lost)."""
        ...

    def enqueue(self, names: Sequence[str], now: float) -> dict[str, int]:
        """Mark `names` as handed to the queue; return the new ticket of each."""
        ...

    def wake(self, name: str, now: float) -> bool:
        """A notification from the Source: make `name` due now, and due again after a run
        that started before the notification (it may not have seen the change)."""
        ...

    def enqueue_failed(self, name: str, ticket: int) -> None:
        """The task of `ticket` could not be handed to the queue: `name` is due again."""
        ...

    def record(self, name: str, outcome: Outcome, next_run: float, ticket: int = 0) -> None:
        """Store the outcome of a run and when the next one is due."""
        ...

    def done(self, name: str, ticket: int) -> bool:
        """Whether the run holding `ticket` has already been recorded (a redelivered task)."""
        ...

    def lock(self, name: str) -> contextlib.AbstractContextManager[bool]:
        """Hold the one-sync-at-a-time lock of `name` for the block; yields False when it is
        already held elsewhere."""
        ...

    def where(self) -> str:
        """The store as messages name it (its file, or its URL without the password)."""
        ...

    def copy_state(self, name: str) -> StoreCopyState:
        """The Destination state of `name`'s copy, kept in this store."""
        ...

    def claim_meta(self, key: str, value: str) -> str:
        """Store `value` under `key` unless one is there already; return the one stored."""
        ...

    def close(self) -> None: ...


class SQLStore:
    """The SQL both backends share; subclasses give `_execute`, `_transaction` and `lock`."""

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        raise NotImplementedError  # pragma: no cover - abstract

    def _executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError  # pragma: no cover - abstract

    def _transaction(self) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError  # pragma: no cover - abstract

    def where(self) -> str:
        raise NotImplementedError  # pragma: no cover - abstract

    def copy_state(self, name: str) -> StoreCopyState:
        """The Destination state of `name`'s copy, kept in this store (see `copystate.py`)."""
        return StoreCopyState(self, name)

    def claim_meta(self, key: str, value: str) -> str:
        with self._transaction():
            self._execute(
                "INSERT INTO fleet_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
                (key, value),
            )
            return str(self._execute("SELECT value FROM fleet_meta WHERE key = ?", (key,))[0][0])

    def add(self, entries: Iterable[Entry], *, now: float, replace: bool = False) -> int:
        n = 0
        with self._transaction():
            for e in entries:
                e.check()
                values = (
                    e.source,
                    e.dest,
                    e.every,
                    e.via,
                    int(e.delete),
                    json.dumps(dict(e.headers)),
                    int(e.follow),
                    e.max_delete,
                    int(e.allow_empty),
                    e.lookback,
                    e.history_grace,
                    int(e.any_address),
                    e.reconcile_every,
                )
                exists = self._execute("SELECT 1 FROM fleet_source WHERE name = ?", (e.name,))
                if exists and not replace:
                    raise FleetError(f"a Source named {e.name!r} is already registered")
                if exists:
                    self._execute(
                        "UPDATE fleet_source SET source = ?, dest = ?, every = ?, via = ?, "
                        "apply_delete = ?, headers = ?, follow = ?, max_delete = ?, "
                        "allow_empty = ?, lookback = ?, history_grace = ?, any_address = ?, "
                        "reconcile_every = ? WHERE name = ?",
                        (*values, e.name),
                    )
                else:
                    self._execute(
                        "INSERT INTO fleet_source (name, source, dest, every, via, apply_delete,"
                        " headers, follow, max_delete, allow_empty, lookback, history_grace,"
                        " any_address, reconcile_every, added, next_run)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (e.name, *values, now, now),
                    )
                n += 1
        return n

    def remove(self, name: str) -> bool:
        with self._transaction():
            found = bool(self._execute("SELECT 1 FROM fleet_source WHERE name = ?", (name,)))
            self._execute("DELETE FROM fleet_source WHERE name = ?", (name,))
            # The copy's state goes with it (its files stay, as `fleet remove` says).
            for table in COPY_TABLES:
                self._execute(f"DELETE FROM {table} WHERE copy_name = ?", (name,))
        return found

    def get(self, name: str) -> Row | None:
        rows = self._execute(f"SELECT {_COLUMNS} FROM fleet_source WHERE name = ?", (name,))
        return _row(rows[0], self.where()) if rows else None

    def rows(self) -> Iterator[Row]:
        # Pages by name, so a fleet of any size is listed in flat memory.
        after = ""
        while True:
            page = self._execute(
                f"SELECT {_COLUMNS} FROM fleet_source WHERE name > ? ORDER BY name LIMIT 500",
                (after,),
            )
            for r in page:
                yield _row(r, self.where())
            if len(page) < 500:
                return
            after = page[-1][0]

    def count(self) -> int:
        return int(self._execute("SELECT count(*) FROM fleet_source")[0][0])

    def due(self, now: float, limit: int, *, requeue_after: float | None = None) -> list[Row]:
        if requeue_after is None:
            sql = f"SELECT {_COLUMNS} FROM fleet_source WHERE next_run <= ? "
            params: tuple[Any, ...] = (now,)
        else:
            sql = (
                f"SELECT {_COLUMNS} FROM fleet_source WHERE next_run <= ? "
                "AND (queued IS NULL OR queued <= ?) "
            )
            params = (now, now - requeue_after)
        where = self.where()
        rows = self._execute(sql + "ORDER BY next_run LIMIT ?", (*params, limit))
        return [_row(r, where) for r in rows]

    def enqueue(self, names: Sequence[str], now: float) -> dict[str, int]:
        tickets: dict[str, int] = {}
        with self._transaction():
            for i in range(0, len(names), 500):
                chunk = list(names[i : i + 500])
                marks = ", ".join("?" * len(chunk))
                self._execute(
                    "UPDATE fleet_source SET queued = ?, ticket = ticket + 1 "
                    f"WHERE name IN ({marks})",
                    (now, *chunk),
                )
                rows = self._execute(
                    f"SELECT name, ticket FROM fleet_source WHERE name IN ({marks})", chunk
                )
                tickets.update((r[0], int(r[1])) for r in rows)
        return tickets

    def wake(self, name: str, now: float) -> bool:
        with self._transaction():
            found = bool(self._execute("SELECT 1 FROM fleet_source WHERE name = ?", (name,)))
            self._execute(
                "UPDATE fleet_source SET woken = ?, "
                "next_run = CASE WHEN next_run > ? THEN ? ELSE next_run END WHERE name = ?",
                (now, now, now, name),
            )
        return found

    def enqueue_failed(self, name: str, ticket: int) -> None:
        self._execute(
            "UPDATE fleet_source SET queued = NULL WHERE name = ? AND ticket = ?", (name, ticket)
        )

    def record(self, name: str, outcome: Outcome, next_run: float, ticket: int = 0) -> None:
        with self._transaction():
            self._execute(
                "UPDATE fleet_source SET last_run = ?, seconds = ?, ok = ?, mode = ?, "
                "failures = CASE WHEN ? = 1 THEN 0 ELSE failures + 1 END, error = ?, "
                "counts = ?, cursor = COALESCE(?, cursor), "
                "last_ok = CASE WHEN ? = 1 THEN ? ELSE last_ok END, "
                # A notification that came after this run started: run again at once.
                "next_run = CASE WHEN woken > ? THEN woken ELSE ? END, "
                "woken = CASE WHEN woken > ? THEN woken ELSE NULL END, "
                "queued = CASE WHEN ticket <= ? THEN NULL ELSE queued END, "
                "done_ticket = CASE WHEN done_ticket < ? THEN ? ELSE done_ticket END "
                "WHERE name = ?",
                (
                    outcome.started,
                    outcome.seconds,
                    int(outcome.ok),
                    outcome.mode,
                    int(outcome.ok),
                    outcome.error,
                    json.dumps(outcome.counts),
                    outcome.cursor,
                    int(outcome.ok),
                    outcome.started,
                    outcome.started,
                    next_run,
                    outcome.started,
                    ticket,
                    ticket,
                    ticket,
                    name,
                ),
            )

    def done(self, name: str, ticket: int) -> bool:
        rows = self._execute("SELECT done_ticket FROM fleet_source WHERE name = ?", (name,))
        # A Source removed meanwhile has nothing left to do.
        return not rows or int(rows[0][0]) >= ticket


#: What mends a damaged fleet database (said with the error).
_RESTORE = (
    "restore it from a backup, or set it aside (rename it) and add the Sources again: each "
    "copy's next sync is then a baseline"
)


class SQLiteStore(SQLStore):
    """The embedded store: one SQLite file; the per-Source lock is an flock on a file beside it
    (so two `fleet run` on one root never sync one Source at once)."""

    def where(self) -> str:
        return str(self.path)

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = path
        if not create and not path.is_file():
            raise FleetError(_NO_FLEET, source=str(path.parent.parent))
        # The registry holds the Sources' request headers (credentials): for its owner only.
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.db = sqlite_habits.connect(
            path, SCHEMA + COPY_SCHEMA, error=FleetError, remedy=_RESTORE
        )
        self.locks = path.parent / "locks"
        have = {r[1] for r in self._execute("PRAGMA table_info(fleet_source)")}
        for column, kind in ADDED:
            if column not in have:
                self._execute(f"ALTER TABLE fleet_source ADD COLUMN {column} {kind}")
        for table, column, kind in COPY_ADDED:
            if column not in {r[1] for r in self._execute(f"PRAGMA table_info({table})")}:
                self._execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        try:
            return self.db.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise self._error(exc) from None

    def _executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        try:
            self.db.executemany(sql, rows)
        except sqlite3.DatabaseError as exc:
            raise self._error(exc) from None

    def _error(self, exc: sqlite3.DatabaseError) -> FleetError | StateDamaged:
        """Its disk full (or failing) is waited out by the runs, as PostgreSQL away is; a
        damaged file is said as such, and stops them (waiting does not mend it)."""
        damaged = sqlite_habits.damage(exc, self.path)
        if damaged is not None:
            return damaged
        said = storage_failure(exc, self.path, what="the fleet database")
        if said is not None:  # full (waited out), or read-only: the line names the file
            return StoreUnavailable(said[0]) if said[1] else FleetError(said[0])
        return FleetError(f"fleet database: {exc}", source=str(self.path))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        try:
            with _nested(self.db):
                yield
        except sqlite3.DatabaseError as exc:  # its BEGIN or COMMIT
            raise self._error(exc) from None

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[bool]:
        self.locks.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.locks / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)  # closing releases the flock

    def close(self) -> None:
        self.db.close()


@contextlib.contextmanager
def _nested(db: sqlite3.Connection) -> Iterator[None]:
    """A transaction, or a part of the one already open (SQLite's BEGIN does not nest)."""
    if db.in_transaction:
        yield
        return
    with sqlite_habits.transaction(db):
        yield


FLEET_DIR = ".fleet"


#: What every command but `fleet add` and `fleet import` says where there is no fleet: a root
#: given wrong, or a shared filesystem not mounted there, is never an empty fleet that
#: "ran 0 Sources, all ok".
_NO_FLEET = (
    f"no fleet here ({FLEET_DIR}/fleet.sqlite): register Sources with `resourcesync fleet add` "
    "or `fleet import`, or give the fleet's --root (is its filesystem mounted?)"
)


def open_store(root: Path, db: str | None = None, *, create: bool = False) -> FleetStore:
    """The store at `db` (a postgresql:// URL), or the embedded one under `root`. Without
    `create` (registering Sources creates it), a store that does not exist yet is an error."""
    if db and db.startswith(("postgresql://", "postgres://")):
        from .pgstore import PostgresStore  # psycopg only when a cluster is used

        return PostgresStore(db, create=create)
    if db:
        raise FleetError(f"--db must be a postgresql:// URL, not {db!r}")
    return SQLiteStore(root / FLEET_DIR / "fleet.sqlite", create=create)


#: The file under a cluster's ROOT that names its fleet (see `check_root`).
ROOT_MARK = "cluster-id"


def check_root(store: FleetStore, root: Path, *, wait: float = 5.0) -> None:
    """That `root` is the filesystem this cluster's copies are on, before a worker writes a
    copy there. The first worker names the fleet (an id in the store, the same id in
    `ROOT/.fleet/cluster-id`); a worker whose ROOT lacks that file — a shared filesystem not
    mounted on its machine, a --root given wrong — writes nothing and says so, instead of
    making copies on its own disk that the others cannot see while it reports them ok.
    `wait`: how long the file may take to appear when another worker has just named the
    fleet."""
    import time
    import uuid

    from ..atomic import AtomicFile

    mark = root / FLEET_DIR / ROOT_MARK
    proposed = uuid.uuid4().hex
    fleet_id = store.claim_meta("cluster_id", proposed)
    if fleet_id == proposed:
        mark.parent.mkdir(parents=True, exist_ok=True)
        with AtomicFile(mark) as f:
            f.write(f"{fleet_id}\n".encode())
    # Another worker may have named the fleet a moment ago and not yet written the file.
    deadline = time.monotonic() + (0.0 if fleet_id == proposed else wait)
    while True:
        try:
            found: str | None = mark.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            found = None
        except OSError as exc:
            raise FleetError(
                f"cannot read {mark}: {exc.strerror or exc}", source=str(root)
            ) from None
        if found is not None or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if found != fleet_id:
        what = "is missing" if found is None else "names another fleet"
        raise FleetError(
            f"not this fleet's root: {mark} {what} (is the shared filesystem mounted here? every "
            "worker must see the same ROOT)",
            source=str(root),
        )
