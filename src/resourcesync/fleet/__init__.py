"""Many Sources for an aggregator: a registry of Sources, their schedule and their status, and
runners that keep a copy of each in step — in-process (embedded: SQLite at the fleet's root,
a pool of threads) or as Celery tasks on workers sharing a PostgreSQL store.

The fleet decides what a unit of work is (one incremental sync of one Source, `job.py`); the
Destination does the sync; Celery, PostgreSQL and Redis do the queueing, the locking and the
shared limits.
"""

from .registry import Entry, FleetError, parse_duration, read_entries
from .schedule import Backoff, Limits
from .store import FleetStore, Outcome, Row, open_store

__all__ = [
    "Backoff",
    "Entry",
    "FleetError",
    "FleetStore",
    "Limits",
    "Outcome",
    "Row",
    "open_store",
    "parse_duration",
    "read_entries",
]
