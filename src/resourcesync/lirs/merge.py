"""One record per URL from many LIRS feeds, the way relaying antennas combined them.

LIRS 2.1 makes the URL the key, the host compared without regard to case and the path with it;
within one file the later record for a URL wins (LIRS-NOTES "Record"); across feeds the record
with the larger Last-Detected — the fresher observation — wins, a tie keeps the one held
("Freshness and relaying"). Last-Detected is carried over as it is: relaying is not detecting.

The records are held in a temporary SQLite database, not in memory, so merging a million costs
megabytes.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from .codec import Record, join_fields, split_fields

__all__ = ["MergeStats", "RecordTable", "expiry_cutoff", "merge_records", "url_key"]

Order = Literal["input", "modified", "newest"]


_AUTHORITY = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://([^/?#]*)")


def url_key(url: str) -> str:
    """The key of a record: scheme and host lower-cased, the rest exactly as written."""
    m = _AUTHORITY.match(url)
    if m is None:
        return url
    scheme, netloc = m.groups()
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        netloc = f"{userinfo}@{hostport.lower()}"
    else:
        netloc = netloc.lower()
    return f"{scheme.lower()}://{netloc}{url[m.end() :]}"


_SCHEMA = """
CREATE TABLE {name} (
    key TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    lm INTEGER NOT NULL,
    ld INTEGER NOT NULL,
    tz INTEGER NOT NULL,
    cl INTEGER NOT NULL,
    url TEXT NOT NULL,
    title TEXT NOT NULL,
    author TEXT NOT NULL,
    source TEXT NOT NULL,
    ext TEXT NOT NULL
)
"""

_COLUMNS = "key, seq, lm, ld, tz, cl, url, title, author, source, ext"
_UPDATE = ", ".join(
    f"{c} = excluded.{c}"
    for c in ("lm", "ld", "tz", "cl", "url", "title", "author", "source", "ext")
)


@dataclass(slots=True)
class MergeStats:
    read: int = 0
    written: int = 0
    expired: int = 0

    @property
    def duplicates(self) -> int:
        return self.read - self.written - self.expired


class RecordTable:
    """Records keyed by `url_key`, in a temporary on-disk SQLite database.

    `add_feed` takes one feed: within it the later record for a URL wins; against what is held
    the larger Last-Detected wins and a tie keeps the record held. `add` replaces unconditionally
    (the later-wins rule alone, for converting one input).
    """

    def __init__(self, path: str = "") -> None:
        # "" is SQLite's private temporary database: on disk once it outgrows the page cache.
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode = OFF")
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.execute("PRAGMA cache_size = -16384")
        self._db.execute(_SCHEMA.format(name="held"))
        self._db.execute(_SCHEMA.format(name="stage"))
        self._seq = 0

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> RecordTable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rows(self, records: Iterable[Record], counter: list[int]) -> Iterator[tuple[object, ...]]:
        for r in records:
            self._seq += 1
            counter[0] += 1
            yield (
                url_key(r.url),
                self._seq,
                r.last_modified,
                r.last_detected,
                r.tz_offset,
                r.content_length,
                r.url,
                r.title,
                r.author,
                r.source_url,
                join_fields(r.extensions),
            )

    def add(self, records: Iterable[Record]) -> int:
        """Add records, a later one replacing a held one for the same URL; returns the count."""
        counter = [0]
        db = self._db
        db.execute("BEGIN")
        try:
            db.executemany(
                f"INSERT INTO held ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?) "
                f"ON CONFLICT(key) DO UPDATE SET {_UPDATE}",
                self._rows(records, counter),
            )
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return counter[0]

    def delete(self, url: str) -> None:
        """Forget the URL (a deletion read after its records, when converting a Change List)."""
        self._db.execute("DELETE FROM held WHERE key = ?", (url_key(url),))

    def add_feed(self, records: Iterable[Record]) -> int:
        """Merge one feed by the relaying rules; returns the number of records read from it."""
        counter = [0]
        db = self._db
        db.execute("BEGIN")
        try:
            db.execute("DELETE FROM stage")
            db.executemany(
                f"INSERT INTO stage ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?) "
                f"ON CONFLICT(key) DO UPDATE SET {_UPDATE}",
                self._rows(records, counter),
            )
            # "WHERE true" lets SQLite tell the upsert clause from a join condition.
            db.execute(
                f"INSERT INTO held ({_COLUMNS}) SELECT {_COLUMNS} FROM stage WHERE true "
                f"ON CONFLICT(key) DO UPDATE SET {_UPDATE} WHERE excluded.ld > held.ld"
            )
            db.execute("DELETE FROM stage")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return counter[0]

    def count(self, *, min_detected: int | None = None, with_time: bool = False) -> int:
        where, params = self._where(min_detected, with_time)
        row = self._db.execute(f"SELECT count(*) FROM held {where}", params).fetchone()
        return int(row[0])

    def span(self, *, with_time: bool = True) -> tuple[int, int] | None:
        """The earliest and latest Last-Modified held (records that have one), or None."""
        where, params = self._where(None, with_time)
        row = self._db.execute(f"SELECT min(lm), max(lm) FROM held {where}", params).fetchone()
        if row[0] is None:
            return None
        return int(row[0]), int(row[1])

    def max_detected(self, *, with_time: bool = False) -> int | None:
        where, params = self._where(None, with_time)
        row = self._db.execute(f"SELECT max(ld) FROM held {where}", params).fetchone()
        return None if row[0] is None else int(row[0])

    def count_errors(self) -> int:
        """Error rows (`0,0`) held."""
        row = self._db.execute("SELECT count(*) FROM held WHERE lm = 0 AND ld = 0").fetchone()
        return int(row[0])

    @staticmethod
    def _where(min_detected: int | None, with_time: bool) -> tuple[str, tuple[int, ...]]:
        clauses: list[str] = []
        params: list[int] = []
        if min_detected is not None:
            clauses.append("ld >= ?")
            params.append(min_detected)
        if with_time:
            clauses.append("lm > 0")
        return ("WHERE " + " AND ".join(clauses) if clauses else ""), tuple(params)

    def records(
        self,
        *,
        order: Order = "input",
        min_detected: int | None = None,
        with_time: bool = False,
    ) -> Iterator[Record]:
        """The records held: in the order their URLs were first seen (`input`), oldest change
        first (`modified`), or newest first (`newest`)."""
        where, params = self._where(min_detected, with_time)
        order_by = {
            "input": "seq",
            "modified": "lm, seq",
            "newest": "lm DESC, seq",
        }[order]
        cursor = self._db.execute(
            f"SELECT lm, ld, tz, cl, url, title, author, source, ext FROM held {where} "
            f"ORDER BY {order_by}",
            params,
        )
        while True:
            rows = cursor.fetchmany(2048)
            if not rows:
                return
            for lm, ld, tz, cl, url, title, author, source, ext in rows:
                extensions = tuple(split_fields(ext)[:-1]) if ext else ()
                yield Record(lm, ld, tz, cl, url, title, author, source, extensions)


def merge_records(
    feeds: Iterable[Iterable[Record]],
    *,
    expires: int | None = None,
    now: int | None = None,
    table: RecordTable | None = None,
) -> tuple[RecordTable, MergeStats]:
    """Merge feeds (each an iterable of records, read in turn) into a table.

    With `expires`, records whose age (`now` − Last-Detected) exceeds it are left out of
    `table.records(min_detected=...)`; the stats count them. Returns the table (the caller closes
    it) and the counts; iterate `table.records(min_detected=cutoff(...))` to write the result.
    """
    held = table if table is not None else RecordTable()
    stats = MergeStats()
    try:
        for feed in feeds:
            stats.read += held.add_feed(feed)
        total = held.count()
        cutoff = expiry_cutoff(expires, now)
        kept = held.count(min_detected=cutoff)
        stats.expired = total - kept
        stats.written = kept
    except BaseException:
        if table is None:
            held.close()
        raise
    return held, stats


def expiry_cutoff(expires: int | None, now: int | None = None) -> int | None:
    """The smallest Last-Detected kept under `expires` seconds, or None when nothing expires."""
    if expires is None:
        return None
    return (int(time.time()) if now is None else now) - expires
