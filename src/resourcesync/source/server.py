"""The Source's HTTP server: the published tree and the resources, discoverable the four ways.

Core 1.1 §6.3 (Discovery) names the ways a Destination finds a Source, and each has a route:

- the well-known URI `/.well-known/resourcesync` (§6.3.2) serves the Source Description;
- `robots.txt` (§6.3.4) carries a `Sitemap:` directive per Resource List, after the operator's
  own rules;
- every resource carries `Link: <capability list>; rel="resourcesync"` (§6.3.3);
- the landing pages for people (`/` and `/<set>/`) have `<link rel="resourcesync">` in their head.

The app is built from OUTDIR alone: it reads `OUTDIR/.resourcesync/published.json` (written last
by `publish`) to learn the sets, their directories and URLs, reloading it when it changes (one
`stat` per request). URL paths are mapped by path only (the host is not checked): the documents
under the path of `docs_url` come from OUTDIR, the resources under the path of a set's `base_url`
come from the set's directory; where both could answer, the document wins.

Safety: nothing outside OUTDIR and the sets' directories is served. A URL path is split on `/`
before it is percent-decoded, so `%2f`, `%5c` (backslash), NUL, `.` and `..` segments, and
hidden names (`.x`, which covers the `.resourcesync/` state and the temporary files of atomic
writes) are refused whether encoded or not; the one hidden name served is `.well-known` at the
top of OUTDIR. The file's real path (symlinks resolved) must lie inside its root, and is checked
again on the opened descriptor. Directories are listed only when asked for (`listing=True`).

Atomicity: `publish` replaces files by rename, and a response is served from one descriptor
opened once: its headers (length, validators) and its body come from the same file, the old or
the new one, never a mix. Starlette's `FileResponse` is not used because it stats the path and
later reopens it (a rename in between mixes one file's headers with another's body), has no
conditional GET (that lives in `StaticFiles`), and answers an invalid `Range` with 400 where
RFC 9110 §14.2 asks to ignore it.
"""

from __future__ import annotations

import contextlib
import functools
import html
import json
import logging
import mimetypes
import os
import re
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import formatdate
from pathlib import Path
from secrets import token_hex
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote, unquote_to_bytes, urlsplit

import anyio
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ..iri import display_iri
from ..units import ascii_int
from ..w3cdt import parse_http_date, parse_w3c
from .config import DESCRIPTION_PATH, PUBLISHED_FILE, STATE_DIR, PublishConfig
from .inventory import guess_type

if TYPE_CHECKING:
    from .publish import PublishResult

__all__ = [
    "FileSend",
    "Publication",
    "PublishedDocument",
    "PublishedSet",
    "Site",
    "create_app",
    "load_publication",
    "republish_on_change",
]

log = logging.getLogger(__name__)

XML = "application/xml"
#: Bodies up to this size are read in the event loop (a page-cache read costs microseconds, a
#: thread hop more); larger ones are read in a worker thread, a chunk at a time.
SMALL = 64 * 1024
CHUNK = 256 * 1024
#: More ranges than this in one request and the Range header is ignored (RFC 9110 §14.2 allows
#: it; it keeps a crafted header from costing more than the file).
MAX_RANGES = 32
#: Compression "encodings" of `mimetypes` are served as the media type of the compressed file:
#: a Content-Encoding would have clients decompress it and store other bytes than the Source has.
_COMPRESSED = {
    "gzip": "application/gzip",
    "bzip2": "application/x-bzip2",
    "xz": "application/x-xz",
    "compress": "application/x-compress",
    "br": "application/x-brotli",
}
_ENCODINGS = mimetypes.MimeTypes(filenames=())


# ---------------------------------------------------------------------------------------------
# What was published: published.json


@dataclass(frozen=True)
class PublishedDocument:
    capability: str
    path: str
    url: str
    index: bool = False
    at: str | None = None
    completed: str | None = None
    from_: str | None = None
    until: str | None = None
    bytes: int | None = None
    entries: int | None = None


@dataclass(frozen=True)
class PublishedSet:
    name: str
    dir: Path
    base_url: str
    capabilitylist_url: str
    capabilitylist_path: str
    documents: tuple[PublishedDocument, ...] = ()
    resources: int | None = None
    recent_changes: tuple[Mapping[str, str], ...] = ()
    #: The change notification channel: topic URL, hub URL, latest payload (path in OUTDIR).
    topic_url: str | None = None
    hub_url: str | None = None
    latest_path: str | None = None
    #: The framework notification channel (Framework Notification 1.0.1 §5), the same way.
    framework_topic_url: str | None = None
    framework_latest_path: str | None = None

    def channel(self, kind: str) -> tuple[str, str, str] | None:
        """(topic URL, hub URL, latest payload path) of the `change` or `framework` channel."""
        topic, latest = (
            (self.topic_url, self.latest_path)
            if kind == "change"
            else (self.framework_topic_url, self.framework_latest_path)
            if kind == "framework"
            else (None, None)
        )
        if topic and latest and self.hub_url:
            return topic, self.hub_url, latest
        return None

    @property
    def base_path(self) -> tuple[str, ...]:
        return _url_segments(self.base_url)


@dataclass(frozen=True)
class Publication:
    """The contents of `published.json`; an empty one when nothing was published yet."""

    published_at: str | None = None
    docs_url: str = "/"
    description_url: str | None = None
    description_path: str = DESCRIPTION_PATH
    sets: tuple[PublishedSet, ...] = ()

    @property
    def docs_path(self) -> tuple[str, ...]:
        return _url_segments(self.docs_url)

    def set_named(self, name: str) -> PublishedSet | None:
        return next((s for s in self.sets if s.name == name), None)


def _url_segments(url: str) -> tuple[str, ...]:
    path = urlsplit(url).path
    return tuple(unquote_to_bytes(s).decode("utf-8", "replace") for s in path.split("/") if s)


def load_publication(path: Path) -> Publication:
    """Parse `published.json`. Raises ValueError (or OSError) when it cannot be used."""
    data = json.loads(path.read_bytes())
    if not isinstance(data, dict) or data.get("format") != 1:
        raise ValueError("not a published.json of format 1")
    desc = data.get("description") or {}
    sets = []
    for s in data.get("sets") or []:
        cap = s.get("capabilitylist") or {}
        docs = tuple(
            PublishedDocument(
                capability=str(d["capability"]),
                path=str(d["path"]),
                url=str(d["url"]),
                index=bool(d.get("index", False)),
                at=d.get("at"),
                completed=d.get("completed"),
                from_=d.get("from"),
                until=d.get("until"),
                bytes=d.get("bytes"),
                entries=d.get("entries"),
            )
            for d in s.get("documents") or []
        )
        sets.append(
            PublishedSet(
                name=str(s["name"]),
                dir=Path(s["dir"]),
                base_url=str(s["base_url"]),
                capabilitylist_url=str(cap.get("url", "")),
                capabilitylist_path=str(cap.get("path", "")),
                documents=docs,
                resources=s.get("resources"),
                recent_changes=tuple(s.get("recent_changes") or ()),
                topic_url=(s.get("channel") or {}).get("topic"),
                hub_url=(s.get("channel") or {}).get("hub"),
                latest_path=(s.get("channel") or {}).get("latest"),
                framework_topic_url=(s.get("framework_channel") or {}).get("topic"),
                framework_latest_path=(s.get("framework_channel") or {}).get("latest"),
            )
        )
    return Publication(
        published_at=data.get("published_at"),
        docs_url=str(data.get("docs_url") or "/"),
        description_url=desc.get("url"),
        description_path=str(desc.get("path") or DESCRIPTION_PATH),
        sets=tuple(sets),
    )


# ---------------------------------------------------------------------------------------------
# The site: roots, and URL paths to files inside them


class BadPath(Exception):
    """A URL path that can never name something we serve (traversal, hidden, malformed)."""


def split_path(raw: bytes) -> tuple[list[str], bool]:
    """A raw URL path → its decoded segments, and whether it ends with `/`.

    Split before decoding, so an encoded `/` cannot make a segment; every segment is then
    checked decoded, so `%2e%2e` is as much `..` as `..` is.
    """
    if not raw.startswith(b"/"):
        raise BadPath("relative path")
    parts = raw[1:].split(b"/")
    trailing = len(parts) > 1 and parts[-1] == b""
    if trailing or parts == [b""]:
        parts = parts[:-1]
    segments = []
    for part in parts:
        try:
            seg = unquote_to_bytes(part).decode("utf-8")
        except UnicodeDecodeError:
            raise BadPath("not UTF-8") from None
        if seg in ("", ".", "..") or "/" in seg or "\\" in seg or "\x00" in seg:
            raise BadPath(f"bad segment {seg!r}")
        segments.append(seg)
    return segments, trailing


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@dataclass(frozen=True)
class Root:
    """A directory served at a URL path; `link` is the capability list its files point to."""

    prefix: tuple[str, ...]
    dir: str  # real path
    kind: str  # "docs" or "resources"
    set: PublishedSet | None = None


@dataclass(frozen=True)
class Found:
    path: str  # real path of a regular file or directory
    root: Root
    is_dir: bool


@dataclass
class Site:
    """OUTDIR and the sets' directories, as the last `published.json` describes them.

    `resources` overrides a set's directory (by name), or with the key `None` the directory of
    the only set (or, before anything is published, a directory served at `/`).
    """

    outdir: Path
    resources: Mapping[str | None, Path] = field(default_factory=dict)
    robots: Path | None = None
    listing: bool = False
    #: Serve hidden names (`.x`) from the sets' directories (never from OUTDIR, whose hidden
    #: files are state and temporaries).
    hidden: bool = False

    def __post_init__(self) -> None:
        self.outdir_real = os.path.realpath(self.outdir)
        self.state_real = os.path.join(self.outdir_real, STATE_DIR)
        self._published = os.path.join(self.outdir_real, STATE_DIR, PUBLISHED_FILE)
        self._stamp: tuple[int, int, int] | None = None
        self.publication = Publication()
        self.roots: list[Root] = []
        self._build_roots()

    # -- published.json, reloaded when it changes

    def refresh(self) -> Publication:
        """Reload `published.json` if it was replaced since the last look (one stat)."""
        try:
            st = os.stat(self._published)
            stamp: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            stamp = None
        if stamp != self._stamp:
            if stamp is None:
                self.publication = Publication()
            else:
                try:
                    self.publication = load_publication(Path(self._published))
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    # Keep serving what was there; publish writes atomically, so this is a
                    # hand-edited or foreign file.
                    log.warning("%s: cannot use it (%s)", self._published, exc)
            self._stamp = stamp
            self._build_roots()
        return self.publication

    def _build_roots(self) -> None:
        pub = self.publication
        roots = [Root(pub.docs_path, self.outdir_real, "docs")]
        sets = list(pub.sets)
        for s in sets:
            override = self.resources.get(s.name)
            if override is None and len(sets) == 1:
                override = self.resources.get(None)
            directory = override if override is not None else s.dir
            roots.append(Root(s.base_path, os.path.realpath(directory), "resources", s))
        if not sets and None in self.resources:
            roots.append(Root((), os.path.realpath(self.resources[None]), "resources"))
        # The documents first, then the deepest resource prefix.
        self.roots = roots[:1] + sorted(roots[1:], key=lambda r: -len(r.prefix))

    # -- URL path → file

    def locate(self, segments: Sequence[str]) -> Found | None:
        """The file or directory a URL path names, or None. Never outside a root."""
        seen_dir: Found | None = None
        for root in self.roots:
            n = len(root.prefix)
            if tuple(segments[:n]) != root.prefix:
                continue
            rel = list(segments[n:])
            if root.kind == "docs":
                # The one hidden name served from OUTDIR is the Source Description itself;
                # anything else under .well-known (a temporary file of an atomic write, say)
                # is refused like every other hidden name (issue 17.9).
                hidden_ok = rel == [".well-known", "resourcesync"]
            else:
                hidden_ok = self.hidden
            if not hidden_ok and any(seg.startswith(".") for seg in rel):
                continue
            real = os.path.realpath(os.path.join(root.dir, *rel))
            if not _within(real, root.dir) or _within(real, self.state_real):
                continue
            try:
                st = os.stat(real)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                return Found(real, root, False)
            if stat.S_ISDIR(st.st_mode) and seen_dir is None:
                seen_dir = Found(real, root, True)
        return seen_dir

    def open(self, found: Found) -> tuple[int, os.stat_result] | None:
        """Open a located file once; None when it vanished, changed kind or moved out."""
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(found.path, flags)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not self._fd_inside(fd, found.root):
                os.close(fd)
                return None
        except OSError:
            os.close(fd)
            return None
        return fd, st

    def _fd_inside(self, fd: int, root: Root) -> bool:
        """Check where the opened file really is: a parent directory swapped for a symlink
        between `locate` and `open` is caught here (on systems with /proc)."""
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return True
        return _within(real, root.dir) and not _within(real, self.state_real)

    def robots_rules(self) -> str:
        """The operator's robots.txt rules: `robots`, else `OUTDIR/.resourcesync/robots.txt`."""
        path = self.robots or Path(self.state_real) / "robots.txt"
        try:
            return path.read_text(encoding="utf-8")
        except OSError:
            return "User-agent: *\nDisallow:\n"


# ---------------------------------------------------------------------------------------------
# One file, served from one descriptor: validators, conditional requests, ranges


def media_type(name: str) -> str:
    """The Content-Type of a file, by its name: the type `publish` lists (`inventory`'s table,
    the same on every machine), except that a compressed file is served as what it is."""
    _, encoding = _ENCODINGS.guess_type(name, strict=False)
    if encoding is not None:
        return _COMPRESSED.get(encoding, "application/octet-stream")
    return guess_type(name)


def etag_of(st: os.stat_result) -> str:
    """A strong validator: a replaced file (publish renames) has a new inode or time or size."""
    return f'"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"'


_ETAG = re.compile(r'\s*(\*|(?:W/)?"[^"]*")\s*(?:,|$)')


def _etags(value: str) -> list[str]:
    return [m.group(1) for m in _ETAG.finditer(value)]


def _http_date(value: str) -> float | None:
    when = parse_http_date(value)
    return None if when is None else when.timestamp()


def parse_ranges(value: str, size: int) -> list[tuple[int, int]] | None:
    """A `Range` header → satisfiable [start, end) ranges, sorted and coalesced.

    None means "ignore the header, send it all" (not bytes, malformed, too many: RFC 9110
    §14.2); an empty list means none is satisfiable (416).
    """
    unit, sep, spec = value.partition("=")
    if not sep or unit.strip().lower() != "bytes":
        return None
    specs = spec.split(",")
    if len(specs) > MAX_RANGES:
        return None
    ranges = []
    for item in specs:
        first_text, dash, last_text = item.strip().partition("-")
        first, last = ascii_int(first_text), ascii_int(last_text)
        if not dash or (first is None and (first_text or last is None)):
            return None
        if last_text and last is None:
            return None
        if first is None:  # suffix: the last N bytes
            assert last is not None
            if last > 0 and size > 0:
                ranges.append((max(size - last, 0), size))
            continue
        start = first
        if last is not None and last < start:
            return None
        if start >= size:
            continue
        end = min(last + 1, size) if last is not None else size
        ranges.append((start, end))
    ranges.sort()
    merged: list[tuple[int, int]] = []
    for start, end in ranges:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


class FileSend(Response):
    """An opened file as a response: 200, 206 (one range or multipart/byteranges), 304, 412 or
    416, decided from the descriptor's own stat. Owns the descriptor and closes it."""

    def __init__(
        self,
        fd: int,
        st: os.stat_result,
        *,
        content_type: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.fd = fd
        self.st = st
        self.content_type = content_type
        self.status_code = 200
        self.background = None
        self.media_type = None
        self.init_headers(headers)
        self.headers["content-type"] = content_type
        self.headers["last-modified"] = formatdate(st.st_mtime, usegmt=True)
        self.headers["etag"] = etag_of(st)
        self.headers["accept-ranges"] = "bytes"

    def _precondition(self, req: Headers, method: str) -> int | None:
        """RFC 9110 §13.2.2, in its order. A status to answer with instead, or None."""
        etag = self.headers["etag"]
        mtime = int(self.st.st_mtime)
        if "if-match" in req:
            tags = _etags(req["if-match"])
            if "*" not in tags and etag not in tags:
                return 412
        elif "if-unmodified-since" in req:
            when = _http_date(req["if-unmodified-since"])
            if when is not None and mtime > when:
                return 412
        if "if-none-match" in req:
            tags = [t.removeprefix("W/") for t in _etags(req["if-none-match"])]
            if "*" in tags or etag in tags:
                return 304 if method in ("GET", "HEAD") else 412
        elif "if-modified-since" in req and method in ("GET", "HEAD"):
            when = _http_date(req["if-modified-since"])
            if when is not None and mtime <= when:
                return 304
        return None

    def _if_range_holds(self, value: str) -> bool:
        value = value.strip()
        if value.startswith('"'):
            return value == self.headers["etag"]  # strong comparison only
        return value == self.headers["last-modified"]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._respond(scope, receive, send)
        finally:
            os.close(self.fd)

    async def _respond(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"].upper()
        req = Headers(scope=scope)
        size = self.st.st_size
        status = self._precondition(req, method)
        if status == 304:
            keep = ("etag", "last-modified", "link", "cache-control", "vary")
            raw = [(k, v) for k, v in self.raw_headers if k.decode("latin-1") in keep]
            await send({"type": "http.response.start", "status": 304, "headers": raw})
            await send({"type": "http.response.body", "body": b""})
            return
        if status == 412:
            await PlainTextResponse("Precondition Failed", 412)(scope, receive, send)
            return
        ranges = None
        if (
            method == "GET"
            and "range" in req
            and ("if-range" not in req or self._if_range_holds(req["if-range"]))
        ):
            ranges = parse_ranges(req["range"], size)
        if ranges is not None and not ranges:
            response = PlainTextResponse(
                "Range Not Satisfiable", 416, headers={"content-range": f"bytes */{size}"}
            )
            await response(scope, receive, send)
            return
        body_only = method != "HEAD"
        if ranges is None:
            self.headers["content-length"] = str(size)
            await self._start(send, 200)
            if body_only:
                await self._stream(scope, receive, send, [(0, size)], None)
            else:
                await send({"type": "http.response.body", "body": b""})
        elif len(ranges) == 1:
            start, end = ranges[0]
            self.headers["content-range"] = f"bytes {start}-{end - 1}/{size}"
            self.headers["content-length"] = str(end - start)
            await self._start(send, 206)
            await self._stream(scope, receive, send, ranges, None)
        else:
            boundary = token_hex(13)
            heads = [
                (
                    f"--{boundary}\r\nContent-Type: {self.content_type}\r\n"
                    f"Content-Range: bytes {s}-{e - 1}/{size}\r\n\r\n"
                ).encode("latin-1")
                for s, e in ranges
            ]
            tail = f"--{boundary}--\r\n".encode("latin-1")
            length = sum(len(h) + (e - s) + 2 for h, (s, e) in zip(heads, ranges, strict=True))
            self.headers["content-type"] = f"multipart/byteranges; boundary={boundary}"
            self.headers["content-length"] = str(length + len(tail))
            await self._start(send, 206)
            await self._stream(scope, receive, send, ranges, (heads, tail))

    async def _start(self, send: Send, status: int) -> None:
        await send({"type": "http.response.start", "status": status, "headers": self.raw_headers})

    async def _stream(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        ranges: list[tuple[int, int]],
        multipart: tuple[list[bytes], bytes] | None,
    ) -> None:
        total = sum(e - s for s, e in ranges)
        if total <= SMALL and multipart is None:
            start, end = ranges[0]
            body = os.pread(self.fd, end - start, start)
            if len(body) != end - start:
                raise RuntimeError(f"{self.fd}: file shorter than its stat")
            await send({"type": "http.response.body", "body": body})
            return

        async def pump() -> None:
            for i, (start, end) in enumerate(ranges):
                if multipart is not None:
                    await send(
                        {"type": "http.response.body", "body": multipart[0][i], "more_body": True}
                    )
                pos = start
                while pos < end:
                    n = min(CHUNK, end - pos)
                    chunk = await anyio.to_thread.run_sync(os.pread, self.fd, n, pos)
                    if not chunk:
                        # Truncated in place (not by publish, which renames): the promised
                        # length cannot be kept, so the connection is dropped rather than lie.
                        raise RuntimeError("file shorter than its stat")
                    pos += len(chunk)
                    last = pos >= end and i == len(ranges) - 1 and multipart is None
                    await send({"type": "http.response.body", "body": chunk, "more_body": not last})
                if multipart is not None:
                    await send({"type": "http.response.body", "body": b"\r\n", "more_body": True})
            if multipart is not None:
                await send({"type": "http.response.body", "body": multipart[1]})

        # ASGI before 2.4 does not raise when the client goes away: watch for the disconnect
        # so a large body stops being read for nobody.
        async with anyio.create_task_group() as group:

            async def run() -> None:
                await pump()
                group.cancel_scope.cancel()

            group.start_soon(run)
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    group.cancel_scope.cancel()
                    break


# ---------------------------------------------------------------------------------------------
# Pages for people and for robots


_CSS = """
body{font:16px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
h1{font-size:1.6rem;overflow-wrap:anywhere}h2{font-size:1.3rem;margin-top:2rem}
a,code{overflow-wrap:anywhere}.scroll{overflow-x:auto}table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.25rem .5rem;border-bottom:1px solid #ddd;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}time,td.n{white-space:nowrap}
code{font-size:.9em}ol.changes{padding-left:1.5rem}.muted{color:#666}
.copy{background:#f4f6f8;border:1px solid #dde;border-radius:6px;padding:.5rem 1rem;margin:1rem 0}
.copy pre{margin:.25rem 0;white-space:pre-wrap;overflow-wrap:anywhere}
@media (max-width:40rem){body{margin:1rem auto}.wide{display:none}}
"""


def _when(value: str | None) -> str:
    """A W3C datetime as people read it: `2026-11-25 05:13 UTC` (no microseconds)."""
    try:
        when = parse_w3c(value) if value else None
    except ValueError:
        return value or ""
    if when is None:
        return ""
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    return when.strftime("%Y-%m-%d %H:%M UTC")


def _size(n: int | None) -> str:
    if n is None:
        return ""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _a(url: str, text: str | None = None) -> str:
    """A link; its text, when it is the URL itself, shown as an IRI (decoded: people read
    `新着`, not `%E6%96%B0%E7%9D%80`; issue 14.16) while the href keeps the URI."""
    shown = text if text is not None else display_iri(url)
    return f'<a href="{html.escape(url)}">{html.escape(shown)}</a>'


def _time(value: str | None) -> str:
    """A time for people (the exact W3C value stays in `datetime`); a dash when there is none,
    never an empty cell (issue 14.17)."""
    if not value:
        return _NONE
    return f'<time datetime="{html.escape(value)}">{html.escape(_when(value))}</time>'


_NONE = '<span class="muted">—</span>'


def _set_section(s: PublishedSet, heading: str, listing: bool) -> Iterator[str]:
    yield f'<section class="set" id="set-{html.escape(s.name)}">'
    yield heading
    count = "Resources" if s.resources is None else f"{s.resources:,} resources"
    # The resources' folder is a link only when it can be listed: never a bare 404.
    base = _a(s.base_url) if listing else f"<code>{html.escape(display_iri(s.base_url))}</code>"
    yield f"<p>{count} published at {base}. Capability List: {_a(s.capabilitylist_url)}</p>"
    yield '<div class="scroll"><table class="documents"><thead><tr><th>Document</th>'
    yield '<th class="wide">Capability</th><th>At</th><th class="wide">Completed</th>'
    yield '<th class="n">Size</th><th class="n">Entries</th></tr></thead><tbody>'
    for d in s.documents:
        name = d.path.rsplit("/", 1)[-1] + (" (index)" if d.index else "")
        span = ""
        if d.from_ or d.until:
            ends = [f"{w} {_time(t)}" for w, t in (("from", d.from_), ("until", d.until)) if t]
            span = f'<br><span class="muted">{" ".join(ends)}</span>'
        at = _time(d.at) if d.at or not span else ""
        yield (
            f'<tr><td>{_a(d.url, name)}</td><td class="wide">{html.escape(d.capability)}</td>'
            f"<td>{at}{span.removeprefix('<br>') if not at else span}</td>"
            f'<td class="wide">{_time(d.completed)}</td>'
            f'<td class="n">{_size(d.bytes) or _NONE}</td>'
            f'<td class="n">{_NONE if d.entries is None else f"{d.entries:,}"}</td></tr>'
        )
    yield "</tbody></table></div>"
    if s.recent_changes:
        yield '<h3>Recent changes</h3><ol class="changes">'
        for c in s.recent_changes:
            loc = str(c.get("loc", ""))
            yield (
                f"<li>{_time(c.get('datetime'))} {html.escape(str(c.get('change', '')))} "
                f"{_a(loc)}</li>"
            )
        yield "</ol>"
    yield "</section>"


def landing_page(
    pub: Publication, only: PublishedSet | None = None, *, listing: bool = False
) -> str:
    """The HTML page for `/` (every set) or for one set, with the discovery links in its head."""
    sets = [only] if only is not None else list(pub.sets)
    title = f"ResourceSync: {only.name}" if only else "ResourceSync Source"
    out = ['<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">']
    out.append('<meta name="viewport" content="width=device-width, initial-scale=1">')
    out.append(f"<title>{html.escape(title)}</title>")
    for s in sets:
        if s.capabilitylist_url:
            url = html.escape(s.capabilitylist_url)
            out.append(f'<link rel="resourcesync" href="{url}">')
    out.append(f"<style>{_CSS}</style></head><body>")
    out.append(f"<h1>{html.escape(title)}</h1>")
    if not pub.sets:
        out.append("<p>Nothing has been published here yet.</p></body></html>\n")
        return "\n".join(out)
    intro = (
        "This site publishes its resources for synchronization with "
        '<a href="https://www.openarchives.org/rs/1.1/resourcesync">ResourceSync</a> '
        "(ANSI/NISO Z39.99). A Destination starts from the Source Description"
    )
    if pub.description_url:
        intro += f" at {_a(pub.description_url)}"
    out.append(f"<p>{intro}.</p>")
    if pub.published_at:
        out.append(f'<p class="muted">Last published {_time(pub.published_at)}.</p>')
    where = urlsplit(pub.description_url or "")
    if where.scheme in ("http", "https"):
        # What a Destination runs, ready to copy (issue 14.17).
        command = f"resourcesync sync {where.scheme}://{where.netloc}/ copy/"
        out.append(
            '<div class="copy"><p>Copy this Source (and keep the copy in step, run again):</p>'
            f"<pre><code>{html.escape(command)}</code></pre></div>"
        )
    for s in sets:
        if only is None:
            heading = f"<h2>{_a(_set_page_path(pub, s), s.name)}</h2>"
        else:
            heading = f"<p>{_a(_root_page_path(pub), 'All resource sets')}</p>"
        out.extend(_set_section(s, heading, listing))
    out.append("</body></html>\n")
    return "\n".join(out)


def _root_page_path(pub: Publication) -> str:
    return "/" + "".join(quote(s) + "/" for s in pub.docs_path)


def _set_page_path(pub: Publication, s: PublishedSet) -> str:
    return _root_page_path(pub) + quote(s.name) + "/"


def robots_txt(rules: str, pub: Publication) -> str:
    """The operator's rules, then a `Sitemap:` line per Resource List not already there."""
    text = rules if rules.endswith("\n") or not rules else rules + "\n"
    present = {
        line.split(":", 1)[1].strip()
        for line in text.splitlines()
        if line.lower().startswith("sitemap:")
    }
    lines = []
    for s in pub.sets:
        for d in s.documents:
            if d.capability == "resourcelist" and d.url not in present:
                lines.append(f"Sitemap: {d.url}")
                present.add(d.url)
    if lines:
        text += ("\n" if text else "") + "\n".join(lines) + "\n"
    return text


def _listing(found: Found, url_path: str) -> str:
    """A folder's page (`--listing`): its entries with their sizes and times, and the way up;
    styled as the landing page."""
    rows = []
    with contextlib.suppress(OSError), os.scandir(found.path) as it:
        for entry in it:
            if entry.name.startswith("."):
                continue
            try:
                st = entry.stat()
            except OSError:
                continue
            is_dir = entry.is_dir()
            rows.append((not is_dir, entry.name + ("/" if is_dir else ""), st, is_dir))
    rows.sort()
    title = html.escape(unquote_to_bytes(url_path).decode("utf-8", "replace"))
    body = [
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<style>{_CSS}</style></head><body><h1>{title}</h1>",
    ]
    if url_path.rstrip("/"):
        body.append('<p><a href="../">↑ Parent folder</a></p>')
    body.append('<div class="scroll"><table class="listing"><thead><tr><th>Name</th>')
    body.append('<th class="n">Size</th><th>Modified</th></tr></thead><tbody>')
    for _, name, st, is_dir in rows:
        size = _NONE if is_dir else _size(st.st_size)
        modified = datetime.fromtimestamp(st.st_mtime, UTC).isoformat()
        body.append(
            f'<tr><td>{_a(quote(name), name)}</td><td class="n">{size}</td>'
            f"<td>{_time(modified)}</td></tr>"
        )
    if not rows:
        body.append('<tr><td colspan="3" class="muted">(empty)</td></tr>')
    body.append("</tbody></table></div></body></html>\n")
    return "\n".join(body)


# ---------------------------------------------------------------------------------------------
# The app


def _link(s: PublishedSet | None) -> dict[str, str]:
    if s is None or not s.capabilitylist_url:
        return {}
    return {"link": f'<{s.capabilitylist_url}>; rel="resourcesync"'}


_NOT_FOUND = "Not Found\n"


class _Endpoints:
    def __init__(self, site: Site) -> None:
        self.site = site

    async def robots(self, request: Request) -> Response:
        pub = self.site.refresh()
        return PlainTextResponse(robots_txt(self.site.robots_rules(), pub))

    async def well_known(self, request: Request) -> Response:
        pub = self.site.refresh()
        found = self.site.locate(list(pub.docs_path) + pub.description_path.split("/"))
        if found is None or found.is_dir:
            return PlainTextResponse(_NOT_FOUND, 404)
        return self._file(found, XML)

    async def anything(self, request: Request) -> Response:
        pub = self.site.refresh()
        raw = request.scope.get("raw_path") or request.scope["path"].encode("utf-8")
        try:
            segments, trailing = split_path(raw.split(b"?", 1)[0])
        except BadPath:
            return PlainTextResponse(_NOT_FOUND, 404)
        docs = list(pub.docs_path)
        if segments in ([], docs):
            return self._page(request, landing_page(pub, listing=self.site.listing))
        rel = segments[len(docs) :] if segments[: len(docs)] == docs else None
        if (
            rel is not None
            and len(rel) == 2
            and (s := pub.set_named(rel[0])) is not None
            and (channel := s.channel(rel[1])) is not None
        ):
            # The topic URI (Change Notification §4.1, Framework Notification §5.1): the latest
            # notification, with the `self` and `hub` links a subscriber uses to find the hub;
            # before the first one, an empty body (Content-Length: 0), links all the same.
            topic, hub, latest = channel
            links = f'<{topic}>; rel="self", <{hub}>; rel="hub"'
            found = self.site.locate(docs + latest.split("/"))
            if found is None or found.is_dir:
                return Response(
                    b"",
                    200,
                    headers={"link": links, "cache-control": "no-cache"},
                    media_type=XML,
                )
            return self._file(found, XML, {"link": links, "cache-control": "no-cache"})
        if rel is not None and len(rel) == 1 and (s := pub.set_named(rel[0])) is not None:
            if not trailing:
                return RedirectResponse(_set_page_path(pub, s), 301)
            return self._page(request, landing_page(pub, s, listing=self.site.listing), _link(s))
        found = self.site.locate(segments)
        if found is None:
            return PlainTextResponse(_NOT_FOUND, 404)
        if found.is_dir:
            if not self.site.listing:
                return PlainTextResponse(_NOT_FOUND, 404)
            if not trailing:
                return RedirectResponse(request.url.path + "/", 301)
            return self._page(request, _listing(found, raw.decode("latin-1")))
        if trailing:
            return PlainTextResponse(_NOT_FOUND, 404)
        name = segments[-1]
        if found.root.kind == "docs":
            is_description = segments == docs + pub.description_path.split("/")
            kind = XML if is_description or name.endswith(".xml") else media_type(name)
            return self._file(found, kind, {"cache-control": "no-cache"})
        return self._file(found, media_type(name), _link(found.root.set))

    def _file(
        self, found: Found, content_type: str, headers: Mapping[str, str] | None = None
    ) -> Response:
        opened = self.site.open(found)
        if opened is None:
            return PlainTextResponse(_NOT_FOUND, 404)
        fd, st = opened
        return FileSend(fd, st, content_type=content_type, headers=headers)

    def _page(
        self, request: Request, text: str, headers: Mapping[str, str] | None = None
    ) -> Response:
        all_headers = {"cache-control": "no-cache", **(headers or {})}
        if not headers and request.url.path in ("/", _root_page_path(self.site.publication)):
            links = [_link(s).get("link") for s in self.site.publication.sets]
            if any(links):
                all_headers["link"] = ", ".join(x for x in links if x)
        return HTMLResponse(text, headers=all_headers)


def create_app(
    outdir: str | os.PathLike[str],
    *,
    resources: Mapping[str | None, str | os.PathLike[str]] | None = None,
    robots: str | os.PathLike[str] | None = None,
    listing: bool = False,
    hidden: bool = False,
) -> Starlette:
    """The ASGI app serving OUTDIR (as `publish` wrote it) and the resources of its sets.

    `resources` overrides a set's directory by name (`None`: the only set, or `/` before any
    publication); `robots` is a file of robots.txt rules (default `OUTDIR/.resourcesync/
    robots.txt`); `listing` lists directories that have no page of their own; `hidden` serves
    hidden names (`.x`) from the sets' directories.
    """
    site = Site(
        Path(outdir),
        resources={k: Path(v) for k, v in (resources or {}).items()},
        robots=Path(robots) if robots is not None else None,
        listing=listing,
        hidden=hidden,
    )
    site.refresh()
    ep = _Endpoints(site)
    app = Starlette(
        routes=[
            Route("/robots.txt", ep.robots, methods=["GET", "HEAD"]),
            Route("/.well-known/resourcesync", ep.well_known, methods=["GET", "HEAD"]),
            Route("/{path:path}", ep.anything, methods=["GET", "HEAD"]),
        ]
    )
    app.state.site = site
    return app


def describe(app: Starlette) -> dict[str, Any]:
    """What an app serves (for the `serve` command's start-up line)."""
    site: Site = app.state.site
    pub = site.refresh()
    return {
        "outdir": site.outdir_real,
        "published_at": pub.published_at,
        "sets": [{"name": r.set.name, "dir": r.dir} for r in site.roots if r.set is not None],
    }


# ---------------------------------------------------------------------------------------------
# A Source that keeps itself published: watch the sets' directories, publish after changes


class _Event(Protocol):
    def is_set(self) -> bool: ...

    async def wait(self) -> Any: ...


async def republish_on_change(
    config: PublishConfig,
    report: Callable[[PublishResult | Exception], None],
    *,
    quiet: float = 1.0,
    stop_event: _Event | None = None,
    full_every: float = 600.0,
    retry: float = 1.0,
    scan_first: bool = True,
) -> None:
    """Publish `config` again whenever its sets' directories change, once the changes have
    paused for `quiet` seconds (a burst of writes is one publication; a steady stream is
    published at least every 10 × `quiet`). Runs until `stop_event` is set.

    One publication at a time, in a worker thread (the server keeps answering); changes made
    meanwhile are picked up by the next one. `report` gets each result, or the error of a
    publication that failed (the last good publication stays served).

    A publication scans only the directories of the paths it heard of; the first, once the
    watch is set up (`scan_first`), and one every `full_every` seconds scan the whole tree
    (what a watch can miss: a change while it was not running or being set up, an event queue
    that overflowed), changes or not.

    A publication that failed (OUTDIR or the state full or read-only, a set's directory
    unreadable) keeps the paths it was to publish and is tried again after `retry` seconds,
    doubling up to a minute, whether or not more changes come: a quiet Source must not serve
    lists that lack the changes it heard of.
    """
    from watchfiles import DefaultFilter, awatch

    from ..errors import ResourceSyncError, storage_failure
    from ..sqlite import damage
    from .publish import publish

    dirs = [s.dir for s in config.sets]
    ignore = [str(config.out.resolve()), str(config.state.resolve())]
    step = max(int(quiet * 1000), 10)
    # The paths heard of and not yet published (kept across a publication that failed).
    pending: dict[str, set[str]] = {s.name: set() for s in config.sets}
    # The first wake scans the whole tree: what changed between the publication before the
    # watch and the watch being set up was heard by nobody.
    last_full = time.monotonic() - (full_every if scan_first else 0.0)
    failures = 0
    retry_at: float | None = None  # when a publication that failed is tried again
    async for changes in awatch(
        *dirs,
        watch_filter=DefaultFilter(ignore_paths=ignore),
        step=step,
        debounce=max(10 * step, 1600),
        stop_event=stop_event,
        # Woken every second without changes too: a retry, the periodic whole scan.
        rust_timeout=1000,
        yield_on_timeout=True,
    ):
        for _, path in changes:
            _note_change(config, pending, path)
        now = time.monotonic()
        full = now - last_full >= full_every
        if not changes and not full and (retry_at is None or now < retry_at):
            continue
        # Only the directories that changed are scanned again (issue 15.4): the tree is not
        # walked for one file.
        changed = {name: set(paths) for name, paths in pending.items()}
        try:
            result = await anyio.to_thread.run_sync(
                functools.partial(publish, config, changed=None if full else changed)
            )
        except Exception as exc:
            # A state SQLite finds damaged is said as such (what mends it) and tried again:
            # the last good publication stays served while someone sets it aside.
            exc = damage(exc) or exc
            said = storage_failure(exc, config.state)
            if not isinstance(exc, ResourceSyncError | OSError) and said is None:
                raise
            # The last good publication stays served; these paths are published next time.
            report(exc if said is None else ResourceSyncError(said[0]))
            # (A whole scan that failed is whole again at the retry.)
            failures += 1
            retry_at = time.monotonic() + min(60.0, retry * 2 ** (failures - 1))
        else:
            for name, paths in changed.items():
                pending[name] -= paths
            if full:
                last_full = time.monotonic()
            failures, retry_at = 0, None
            report(result)


def _note_change(config: PublishConfig, pending: dict[str, set[str]], path: str) -> None:
    """File a changed path under the set whose directory holds it (relative to it)."""
    real = os.path.realpath(path)
    for s in config.sets:
        root = os.path.realpath(s.dir)
        if real == root:
            pending[s.name].add("")
        elif real.startswith(root + os.sep):
            pending[s.name].add(os.path.relpath(real, root).replace(os.sep, "/"))
