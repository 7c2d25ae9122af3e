"""An antenna: check a list of sites for updates and publish what it saw, as the Japanese
antenna sites did (LIRS-NOTES "What an antenna does"), and as ResourceSync.

Each round:

1. The site list is brought into the state (SQLite): new sites are added, sites no longer listed
   are dropped (a `deleted` change).
2. Every site that is due is checked: `HEAD` for its Last-Modified, `GET` when there is none (or
   HEAD is refused); both conditional on the ETag and Last-Modified seen before, so an unchanged
   site answers 304. Without a Last-Modified, the signal is a hash of the body with markup and
   whitespace stripped (so a changing ad or counter in an attribute does not count; a changing
   visible counter still does); a changed hash dates the update at the time of the check.
3. Politeness: at most `concurrency` checks at once, at most `per_host` requests at once to one
   host and `delay` seconds between them, a timeout on every check, and a site that keeps not
   changing (or keeps failing) is checked less and less often, doubling from `min_interval` up to
   `max_interval`.
4. Relayed LIRS feeds (`relays`) are fetched conditionally and cached in the state; their records
   are merged with ours by the relaying rules (`merge`): the larger Last-Detected wins, and
   records older than `expires` are dropped. Our own records never expire: our list decides.
5. Written atomically into `out_dir`: `antenna.lirs.gz` (ours and relayed, newest first),
   `resourcelist.xml` (our sites with their Last-Modified), `changelist.xml` (changes we observed
   in the last `history` seconds: `datetime` = when we saw it, `<lastmod>` = the site's
   Last-Modified) and `index.html` (newest first): `output.AntennaOutput`.

Last-Detected is the time of our last successful check of a site (LIRS 2.1: the time the update
time was last obtained directly). A site never checked successfully is published as an error row
(`0,0`); a site whose latest check failed keeps its last good observation, which ages as its
Last-Detected does.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import html
import os
import re
import sqlite3
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..errors import FetchError, ReadError, ResourceSyncError
from ..http import HttpOptions, RetryPolicy, make_async_client, not_whole
from ..http.reach import Reach
from ..model import Change
from ..sqlite import damage, register
from ..units import ascii_int
from ..w3cdt import parse_http_date
from .codec import LirsWarning, Record, detect_encoding, is_lirs_url, open_lirs
from .merge import url_key
from .output import CHANGELIST_FILE, HTML_FILE, LIRS_FILE, RESOURCELIST_FILE, AntennaOutput

__all__ = [
    "Antenna",
    "AntennaConfig",
    "Observation",
    "RoundSummary",
    "Site",
    "read_site_list",
    "strip_markup",
]


@dataclass(slots=True)
class AntennaConfig:
    """How an antenna checks and where it writes. Times in seconds."""

    out_dir: str | os.PathLike[str]
    state: str | os.PathLike[str] | None = None
    #: Where `out_dir` is published; our records name it as their source URL.
    base_url: str = ""
    relays: list[str] = field(default_factory=list)
    timeout: float = 20.0
    concurrency: int = 8
    per_host: int = 1
    delay: float = 1.0
    min_interval: int = 600
    max_interval: int = 86400
    expires: int = 86400
    history: int = 7 * 86400
    tz_offset: int = 32400
    #: Bytes of a page read for the hash; the rest is not fetched.
    max_body: int = 2 << 20
    #: Bytes of a relayed feed accepted (after transfer decoding).
    max_feed: int = 256 << 20
    #: Let redirects lead anywhere. By default requests go to the listed sites' and relays'
    #: hosts and to public addresses: a site cannot redirect the antenna to the machine's own
    #: services or its network (`http.reach`).
    any_address: bool = False


def _reach(sites: list[Site], relays: list[str]) -> Reach:
    """Where an antenna's requests may go: the hosts its operator listed (sites and relays,
    on whatever address) and the public Internet."""
    hosts = set()
    for url in [*(s.url for s in sites), *relays]:
        with contextlib.suppress(ValueError):
            if host := urlsplit(url).hostname:
                hosts.add(host.lower())
    return Reach(hosts=frozenset(hosts), leader="a listed site")


@dataclass(frozen=True, slots=True)
class Site:
    """One line of the site list: `URL [title]`."""

    url: str
    title: str = ""


def read_site_list(path: str | os.PathLike[str]) -> list[Site]:
    """The sites of a list file: `URL [title]` a line, `#` comments and blank lines skipped.

    A line that does not start with an http(s) URL is an error naming the file and line. A URL
    listed twice (host compared without case) is taken once.
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            data = f.read(64 << 20)
    except OSError as exc:
        raise ReadError(exc.strerror or str(exc), source=name) from None
    if b"\x00" in data:
        raise ReadError("binary data, not a list of URLs", source=name)
    text = data.decode(detect_encoding(data), errors="replace").lstrip("\ufeff")
    sites: list[Site] = []
    seen: set[str] = set()
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        url, _, title = line.partition(" ")
        if not url.lower().startswith(("http://", "https://")) or not is_lirs_url(url):
            raise ReadError(f"not an http(s) URL: {url[:80]!r}", source=name, line=lineno)
        key = url_key(url)
        if key in seen:
            continue
        seen.add(key)
        sites.append(Site(url, title.strip()))
    return sites


_SCRIPT = re.compile(rb"(?is)<(script|style)\b.*?</\1\s*>")
_COMMENT = re.compile(rb"(?s)<!--.*?-->")
_TAG = re.compile(rb"(?s)<[^>]*>")
_SPACE = re.compile(rb"\s+")
_TITLE = re.compile(rb"(?is)<title[^>]*>(.*?)</title")
_CHARSET = re.compile(rb"""(?i)charset\s*=\s*["']?([A-Za-z0-9_\-]+)""")


def strip_markup(body: bytes) -> bytes:
    """The body without scripts, styles, comments, tags and whitespace: what a reader sees."""
    body = _SCRIPT.sub(b"", body)
    body = _COMMENT.sub(b"", body)
    body = _TAG.sub(b"", body)
    return _SPACE.sub(b"", body)


def _page_title(body: bytes, content_type: str | None) -> str:
    m = _TITLE.search(body[: 1 << 16])
    if m is None:
        return ""
    raw = m.group(1)
    encoding = None
    for where in (content_type.encode("latin-1", "replace") if content_type else b"", body[:4096]):
        cm = _CHARSET.search(where)
        if cm is not None:
            encoding = cm.group(1).decode("ascii")
            break
    text: str | None = None
    if encoding is not None:
        with contextlib.suppress(LookupError, UnicodeDecodeError):
            text = raw.decode(encoding)
    if text is None:
        text = raw.decode(_py_codec(detect_encoding(raw)), errors="replace")
    return " ".join(html.unescape(text).split())[:200]


def _py_codec(encoding: str) -> str:
    return {"euc-jp": "euc_jp", "shift_jis": "cp932"}.get(encoding, encoding)


def _http_date(value: str | None, now: int) -> int | None:
    when = parse_http_date(value)
    if when is None:
        return None
    seconds = int(when.timestamp())
    if seconds <= 0:
        return None
    # A clock ahead of ours does not make an update in the future.
    return min(seconds, now)


@dataclass(slots=True)
class Observation:
    """The outcome of checking one site."""

    url: str
    #: "new" (first success), "changed", "unchanged" or "failed".
    status: str
    last_modified: int | None = None
    content_length: int | None = None
    etag: str | None = None
    last_modified_header: str | None = None
    body_hash: str | None = None
    page_title: str | None = None
    error: str | None = None
    #: "head", "get", "304"
    via: str = ""


class _HostGate:
    """At most `per_host` requests at once to one host, `delay` seconds apart."""

    def __init__(self, per_host: int, delay: float) -> None:
        self.per_host = per_host
        self.delay = delay
        self._sems: dict[str, asyncio.Semaphore] = {}
        self._next: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    @contextlib.asynccontextmanager
    async def slot(self, url: str) -> AsyncIterator[None]:
        host = (urlsplit(url).hostname or "").lower()
        sem = self._sems.setdefault(host, asyncio.Semaphore(self.per_host))
        lock = self._locks.setdefault(host, asyncio.Lock())
        async with sem:
            if self.delay > 0:
                async with lock:
                    loop = asyncio.get_running_loop()
                    wait = self._next.get(host, 0.0) - loop.time()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    self._next[host] = loop.time() + self.delay
            yield


@dataclass(slots=True)
class _SiteState:
    url: str
    title: str
    etag: str | None
    last_modified_header: str | None
    last_modified: int
    last_detected: int
    body_hash: str | None


async def _check_site(
    client: httpx.AsyncClient, gate: _HostGate, site: _SiteState, config: AntennaConfig, now: int
) -> Observation:
    conditional: dict[str, str] = {}
    if site.etag:
        conditional["If-None-Match"] = site.etag
    if site.last_modified_header:
        conditional["If-Modified-Since"] = site.last_modified_header
    first = site.last_detected == 0

    def judged(last_modified: int, **kw: Any) -> Observation:
        if first:
            status = "new"
        elif last_modified != site.last_modified:
            status = "changed"
        else:
            status = "unchanged"
        return Observation(site.url, status, last_modified=last_modified, **kw)

    async with gate.slot(site.url):
        head = await client.head(site.url, headers=conditional)
    if head.status_code == 304:
        return Observation(site.url, "unchanged", via="304")
    if head.is_success:
        lm = _http_date(head.headers.get("Last-Modified"), now)
        if lm is not None:
            length = head.headers.get("Content-Length", "")
            return judged(
                lm,
                content_length=ascii_int(length) or 0,
                etag=head.headers.get("ETag"),
                last_modified_header=head.headers.get("Last-Modified"),
                via="head",
            )
    # No Last-Modified, or HEAD refused: look at the page itself.
    async with gate.slot(site.url), client.stream("GET", site.url, headers=conditional) as resp:
        if resp.status_code == 304:
            return Observation(site.url, "unchanged", via="304")
        if not resp.is_success:
            reason = f"HTTP {resp.status_code} {resp.reason_phrase}".rstrip()
            return Observation(site.url, "failed", error=reason)
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.aiter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size >= config.max_body:
                break
        body = b"".join(chunks)[: config.max_body]
        headers = resp.headers
    title = _page_title(body, headers.get("Content-Type"))
    length_header = headers.get("Content-Length", "")
    length = ascii_int(length_header)
    if length is None:
        length = len(body)
    lm = _http_date(headers.get("Last-Modified"), now)
    common: dict[str, Any] = {
        "content_length": length,
        "etag": headers.get("ETag"),
        "last_modified_header": headers.get("Last-Modified"),
        "page_title": title,
        "via": "get",
    }
    if lm is not None:
        return judged(lm, **common)
    digest = hashlib.sha256(strip_markup(body)).hexdigest()
    common["body_hash"] = digest
    if first:
        # The first look says nothing about when the page last changed.
        return Observation(site.url, "new", last_modified=0, **common)
    if site.body_hash is not None and digest != site.body_hash:
        return Observation(site.url, "changed", last_modified=now, **common)
    return Observation(site.url, "unchanged", last_modified=site.last_modified, **common)


async def _guarded(
    client: httpx.AsyncClient,
    gate: _HostGate,
    limit: asyncio.Semaphore,
    site: _SiteState,
    config: AntennaConfig,
    now: int,
) -> Observation:
    async with limit:
        try:
            async with asyncio.timeout(config.timeout * 2):
                return await _check_site(client, gate, site, config, now)
        except TimeoutError:
            return Observation(site.url, "failed", error=f"timed out after {config.timeout:g}s")
        except httpx.TimeoutException:
            return Observation(site.url, "failed", error=f"timed out after {config.timeout:g}s")
        except httpx.HTTPError as exc:
            return Observation(site.url, "failed", error=str(exc) or type(exc).__name__)
        except FetchError as exc:  # a redirect outside the reach (`AntennaConfig.any_address`)
            return Observation(site.url, "failed", error=str(exc))


@dataclass(slots=True)
class _FeedFetch:
    feed: str
    status: str  # "fetched", "unchanged", "failed"
    path: str | None = None
    etag: str | None = None
    last_modified_header: str | None = None
    error: str | None = None


async def _fetch_feed(
    client: httpx.AsyncClient,
    gate: _HostGate,
    feed: str,
    etag: str | None,
    last_modified_header: str | None,
    config: AntennaConfig,
    tmpdir: str,
) -> _FeedFetch:
    headers: dict[str, str] = {}
    if etag:
        headers["If-None-Match"] = etag
    if last_modified_header:
        headers["If-Modified-Since"] = last_modified_header
    try:
        async with (
            asyncio.timeout(config.timeout * 4),
            gate.slot(feed),
            client.stream("GET", feed, headers=headers) as resp,
        ):
            if resp.status_code == 304:
                return _FeedFetch(feed, "unchanged")
            if not resp.is_success:
                reason = f"HTTP {resp.status_code} {resp.reason_phrase}".rstrip()
                return _FeedFetch(feed, "failed", error=reason)
            partial = not_whole(
                resp.status_code, resp.reason_phrase, resp.headers.get("Content-Range")
            )
            if partial is not None:
                return _FeedFetch(feed, "failed", error=partial.message)
            fd, path = tempfile.mkstemp(dir=tmpdir, suffix=".lirs")
            size = 0
            with os.fdopen(fd, "wb") as f:
                async for chunk in resp.aiter_bytes():
                    size += len(chunk)
                    if size > config.max_feed:
                        return _FeedFetch(
                            feed, "failed", error=f"larger than {config.max_feed} bytes"
                        )
                    f.write(chunk)
            return _FeedFetch(
                feed,
                "fetched",
                path=path,
                etag=resp.headers.get("ETag"),
                last_modified_header=resp.headers.get("Last-Modified"),
            )
    except (TimeoutError, httpx.TimeoutException):
        return _FeedFetch(feed, "failed", error=f"timed out after {config.timeout * 4:g}s")
    except httpx.HTTPError as exc:
        return _FeedFetch(feed, "failed", error=str(exc) or type(exc).__name__)
    except FetchError as exc:
        return _FeedFetch(feed, "failed", error=str(exc))


@dataclass(slots=True)
class RoundSummary:
    """What one round did."""

    started: int
    sites: int = 0
    checked: int = 0
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    failed: int = 0
    not_due: int = 0
    removed: int = 0
    relayed: int = 0
    records: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return (
            f"antenna: {self.checked} of {self.sites} sites checked: {self.new} new, "
            f"{self.changed} changed, {self.unchanged} unchanged, {self.failed} failed; "
            f"{self.not_due} not due; {self.relayed} relayed records; "
            f"{self.records} records written"
        )


#: What mends a damaged antenna state (said with the error).
_AFRESH = (
    "set it aside (rename it) and run again: every site is checked afresh, and its times "
    "taken as they are found"
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sites (
    key TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    page_title TEXT NOT NULL DEFAULT '',
    etag TEXT,
    lm_header TEXT,
    last_modified INTEGER NOT NULL DEFAULT 0,
    last_detected INTEGER NOT NULL DEFAULT 0,
    content_length INTEGER NOT NULL DEFAULT 0,
    body_hash TEXT,
    checked_at INTEGER NOT NULL DEFAULT 0,
    next_check INTEGER NOT NULL DEFAULT 0,
    quiet INTEGER NOT NULL DEFAULT 0,
    failures INTEGER NOT NULL DEFAULT 0,
    error TEXT
);
CREATE TABLE IF NOT EXISTS changes (
    id INTEGER PRIMARY KEY,
    url TEXT NOT NULL,
    change TEXT NOT NULL,
    at INTEGER NOT NULL,
    last_modified INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS feeds (
    feed TEXT PRIMARY KEY,
    etag TEXT,
    lm_header TEXT,
    fetched_at INTEGER NOT NULL DEFAULT 0,
    error TEXT
);
CREATE TABLE IF NOT EXISTS relayed (
    feed TEXT NOT NULL,
    seq INTEGER NOT NULL,
    lm INTEGER NOT NULL,
    ld INTEGER NOT NULL,
    tz INTEGER NOT NULL,
    cl INTEGER NOT NULL,
    url TEXT NOT NULL,
    title TEXT NOT NULL,
    author TEXT NOT NULL,
    source TEXT NOT NULL,
    ext TEXT NOT NULL,
    PRIMARY KEY (feed, seq)
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


#: The number columns of the state, which a round reads as numbers.
_SITE_NUMBERS = (
    "last_modified",
    "last_detected",
    "content_length",
    "checked_at",
    "next_check",
    "quiet",
    "failures",
)
_RECORD_NUMBERS = {
    "changes": ("at", "last_modified"),
    "relayed": ("seq", "lm", "ld", "tz", "cl"),
    "feeds": ("fetched_at",),
}


class Antenna:
    """The antenna's state and rounds. Use as a context manager (it holds a SQLite file)."""

    def __init__(
        self,
        config: AntennaConfig,
        *,
        on_warning: Callable[[LirsWarning | str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.out = Path(config.out_dir)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ResourceSyncError(
                f"cannot create: {exc.strerror or exc}", source=str(self.out)
            ) from None
        state = Path(config.state) if config.state else self.out / "antenna.sqlite"
        register(state, _AFRESH)
        try:
            self.db = sqlite3.connect(state, isolation_level=None)
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            found = damage(exc, state)
            if found is not None:
                raise found from None
            raise ReadError(f"not an antenna state database: {exc}", source=str(state)) from None
        self._warn = on_warning or (lambda w: None)
        self._clock = clock

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Antenna:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the round ---------------------------------------------------------------------------

    def run_round(self, sites: list[Site]) -> RoundSummary:
        """Check the sites that are due, fetch the relays, write the outputs."""
        now = int(self._clock())
        summary = RoundSummary(started=now, sites=len(sites))
        db = self.db
        self._heal()
        if db.execute("SELECT value FROM meta WHERE key = 'first_run'").fetchone() is None:
            db.execute("INSERT INTO meta VALUES ('first_run', ?)", (str(now),))
        summary.removed = self._sync_sites(sites, now)
        due = [
            _SiteState(*row)
            for row in db.execute(
                "SELECT url, title, etag, lm_header, last_modified, last_detected, body_hash "
                "FROM sites WHERE next_check <= ? ORDER BY next_check, url",
                (now,),
            )
        ]
        summary.not_due = len(sites) - len(due)
        feeds = self._feed_states()
        with tempfile.TemporaryDirectory(dir=self.out, prefix=".relay-") as tmpdir:
            reach = None if self.config.any_address else _reach(sites, self.config.relays)
            observations, fetches = asyncio.run(self._gather(due, feeds, now, tmpdir, reach))
            for obs in observations:
                self._apply(obs, now, summary)
            for fetch in fetches:
                self._store_feed(fetch, now)
        for path in self.config.relays:
            if not path.startswith(("http://", "https://")):
                self._store_local_feed(path, now)
        db.execute("DELETE FROM changes WHERE at < ?", (now - self.config.history,))
        summary.relayed, summary.records = AntennaOutput(self.config, self.db, self.out).write(now)
        summary.files = [LIRS_FILE, RESOURCELIST_FILE, CHANGELIST_FILE, HTML_FILE]
        return summary

    def _heal(self) -> None:
        """Values of the state that are not of their column's type (SQLite keeps what a
        column is given: a hand, a tool, a disk): a round stopped on them with a traceback, or
        left a site never due again. A site's is taken afresh (as at its first check, due
        now); a change or a relayed record that cannot be read is let go. Each said once."""
        db = self.db
        for column in _SITE_NUMBERS:
            rows = db.execute(
                f"SELECT url, {column} FROM sites WHERE typeof({column}) != 'integer'"
            ).fetchall()
            for url, value in rows:
                self._warn(
                    f"{url}: its stored {column.replace('_', ' ')} ({value!r}) cannot be read: "
                    "checked afresh"
                )
            if rows:
                db.execute(
                    # Asked again without its validators: its times come back as answered.
                    f"UPDATE sites SET {column} = 0, next_check = 0, etag = NULL, "
                    f"lm_header = NULL WHERE typeof({column}) != 'integer'"
                )
        for table, columns in _RECORD_NUMBERS.items():
            bad = " OR ".join(f"typeof({c}) != 'integer'" for c in columns)
            gone = db.execute(f"DELETE FROM {table} WHERE {bad}").rowcount
            if gone:
                what = "change" if table == "changes" else "relayed record"
                self._warn(
                    f"{gone} {what}{'s' if gone > 1 else ''} of the state that cannot be read "
                    "let go"
                )

    def _sync_sites(self, sites: list[Site], now: int) -> int:
        db = self.db
        listed = {url_key(s.url): s for s in sites}
        held = {key: url for key, url in db.execute("SELECT key, url FROM sites")}
        db.execute("BEGIN")
        for key, site in listed.items():
            if key in held:
                db.execute(
                    "UPDATE sites SET url = ?, title = ? WHERE key = ?", (site.url, site.title, key)
                )
            else:
                db.execute(
                    "INSERT INTO sites (key, url, title) VALUES (?, ?, ?)",
                    (key, site.url, site.title),
                )
        removed = 0
        for key, url in held.items():
            if key not in listed:
                db.execute("DELETE FROM sites WHERE key = ?", (key,))
                db.execute(
                    "INSERT INTO changes (url, change, at, last_modified) VALUES (?, ?, ?, 0)",
                    (url, Change.DELETED.value, now),
                )
                removed += 1
        db.execute("COMMIT")
        return removed

    def _feed_states(self) -> list[tuple[str, str | None, str | None]]:
        out = []
        for feed in self.config.relays:
            if not feed.startswith(("http://", "https://")):
                continue
            row = self.db.execute(
                "SELECT etag, lm_header FROM feeds WHERE feed = ?", (feed,)
            ).fetchone()
            out.append((feed, *(row or (None, None))))
        return out

    async def _gather(
        self,
        due: list[_SiteState],
        feeds: list[tuple[str, str | None, str | None]],
        now: int,
        tmpdir: str,
        reach: Reach | None = None,
    ) -> tuple[list[Observation], list[_FeedFetch]]:
        config = self.config
        options = HttpOptions(
            timeout=config.timeout,
            connect_timeout=min(config.timeout, 10.0),
            max_connections=config.concurrency,
            max_keepalive=config.concurrency,
            retry=RetryPolicy(retries=0),
            reach=reach,
        )
        client = make_async_client(options)
        gate = _HostGate(config.per_host, config.delay)
        limit = asyncio.Semaphore(config.concurrency)
        async with client:
            checks = [_guarded(client, gate, limit, site, config, now) for site in due]
            fetches = [
                _fetch_feed(client, gate, feed, etag, lm, config, tmpdir)
                for feed, etag, lm in feeds
            ]
            results = await asyncio.gather(*checks, *fetches)
        observations = [r for r in results if isinstance(r, Observation)]
        feed_results = [r for r in results if isinstance(r, _FeedFetch)]
        return observations, feed_results

    def _next(self, quiet: int, now: int) -> int:
        """The time of the next check after `quiet` checks in a row without news (or failures):
        `min_interval`, doubled for each, up to `max_interval`."""
        config = self.config
        wait = min(config.min_interval * (1 << min(quiet, 30)), config.max_interval)
        return now + max(wait, min(config.min_interval, config.max_interval))

    def _apply(self, obs: Observation, now: int, summary: RoundSummary) -> None:
        db = self.db
        key = url_key(obs.url)
        row = db.execute(
            "SELECT quiet, failures, last_modified FROM sites WHERE key = ?", (key,)
        ).fetchone()
        if row is None:
            return
        quiet, failures, old_lm = row
        summary.checked += 1
        if obs.status == "failed":
            summary.failed += 1
            failures += 1
            summary.failures.append({"url": obs.url, "error": obs.error or "failed"})
            self._warn(f"{obs.url}: {obs.error}")
            db.execute(
                "UPDATE sites SET checked_at = ?, next_check = ?, failures = ?, error = ? "
                "WHERE key = ?",
                (now, self._next(failures, now), failures, obs.error, key),
            )
            return
        if obs.status == "unchanged":
            summary.unchanged += 1
            quiet += 1
        else:
            quiet = 0
            if obs.status == "new":
                summary.new += 1
            else:
                summary.changed += 1
        lm = old_lm if obs.last_modified is None else obs.last_modified
        sets = {
            "last_modified": lm,
            "last_detected": now,
            "checked_at": now,
            "next_check": self._next(quiet, now),
            "quiet": quiet,
            "failures": 0,
            "error": None,
        }
        if obs.via != "304":
            sets["etag"] = obs.etag
            sets["lm_header"] = obs.last_modified_header
            if obs.content_length is not None:
                sets["content_length"] = obs.content_length
            if obs.body_hash is not None:
                sets["body_hash"] = obs.body_hash
            if obs.page_title:
                sets["page_title"] = obs.page_title
        assignments = ", ".join(f"{k} = ?" for k in sets)
        db.execute(f"UPDATE sites SET {assignments} WHERE key = ?", (*sets.values(), key))
        if obs.status in ("new", "changed"):
            change = Change.CREATED if obs.status == "new" else Change.UPDATED
            db.execute(
                "INSERT INTO changes (url, change, at, last_modified) VALUES (?, ?, ?, ?)",
                (obs.url, change.value, now, lm),
            )

    # -- relays ------------------------------------------------------------------------------

    def _store_feed(self, fetch: _FeedFetch, now: int) -> None:
        db = self.db
        if fetch.status == "failed":
            self._warn(f"{fetch.feed}: {fetch.error}")
            db.execute(
                "INSERT INTO feeds (feed, error) VALUES (?, ?) "
                "ON CONFLICT(feed) DO UPDATE SET error = excluded.error",
                (fetch.feed, fetch.error),
            )
            return
        if fetch.status == "unchanged":
            db.execute(
                "UPDATE feeds SET fetched_at = ?, error = NULL WHERE feed = ?", (now, fetch.feed)
            )
            return
        assert fetch.path is not None
        if self._load_feed(fetch.feed, fetch.path):
            db.execute(
                "INSERT INTO feeds (feed, etag, lm_header, fetched_at, error) "
                "VALUES (?, ?, ?, ?, NULL) ON CONFLICT(feed) DO UPDATE SET etag = excluded.etag, "
                "lm_header = excluded.lm_header, fetched_at = excluded.fetched_at, error = NULL",
                (fetch.feed, fetch.etag, fetch.last_modified_header, now),
            )

    def _store_local_feed(self, path: str, now: int) -> None:
        self._load_feed(path, path)

    def _load_feed(self, feed: str, path: str) -> bool:
        """Replace the cached records of a feed with those in `path`; keep them on failure."""
        db = self.db
        from .codec import join_fields

        def rows(reader: Iterator[Record]) -> Iterator[tuple[object, ...]]:
            for seq, r in enumerate(reader):
                yield (
                    feed,
                    seq,
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

        db.execute("BEGIN")
        try:
            with open_lirs(path, name=feed, on_warning=self._warn) as reader:
                db.execute("DELETE FROM relayed WHERE feed = ?", (feed,))
                db.executemany(
                    "INSERT INTO relayed VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows(iter(reader))
                )
        except ResourceSyncError as exc:
            db.execute("ROLLBACK")
            self._warn(f"relay {exc}")
            return False
        db.execute("COMMIT")
        return True
