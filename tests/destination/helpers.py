"""Shared parts of the Destination's end-to-end tests: a published Source served on 127.0.0.1
with every request recorded, hand-written documents for fault servers, the CLI, tree snapshots.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import os
import sqlite3
import threading
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

from click.testing import CliRunner, Result

from resourcesync.cli import main
from resourcesync.source.config import PublishConfig, SetConfig
from resourcesync.source.publish import publish
from resourcesync.source.server import create_app
from tests.servers import serve

STATE = ".resourcesync"


# ---------------------------------------------------------------------------------------------
# Recording what a server is asked


@dataclass
class Hit:
    method: str
    path: str
    headers: dict[str, str]
    status: int = 0
    bytes: int = 0


@dataclass
class Recorder:
    """ASGI middleware: every request (path, headers, status, body bytes sent), the most
    requests in flight at once, and an optional delay for paths `slow` says are slow."""

    app: Any
    delay: float = 0.0
    slow: Callable[[str], bool] = lambda path: False
    hits: list[Hit] = field(default_factory=list)
    inflight: int = 0
    max_inflight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        hit = Hit(scope["method"], scope["path"], headers)
        slow = self.slow(scope["path"])
        with self.lock:
            self.hits.append(hit)
            if slow:
                self.inflight += 1
                self.max_inflight = max(self.max_inflight, self.inflight)

        async def send_counting(message: Any) -> None:
            if message["type"] == "http.response.start":
                hit.status = message["status"]
            elif message["type"] == "http.response.body":
                hit.bytes += len(message.get("body", b""))
            await send(message)

        try:
            if slow and self.delay:
                await asyncio.sleep(self.delay)
            await self.app(scope, receive, send_counting)
        finally:
            if slow:
                with self.lock:
                    self.inflight -= 1

    def reset(self) -> None:
        with self.lock:
            self.hits.clear()
            self.max_inflight = 0

    def gets(self, prefix: str = "/") -> list[Hit]:
        """GETs of paths under `prefix` (decoded paths, as the ASGI scope has them)."""
        with self.lock:
            return [h for h in self.hits if h.method == "GET" and h.path.startswith(prefix)]


# ---------------------------------------------------------------------------------------------
# Our own Source: publish + server


@dataclass
class Published:
    """DIR published (by the real `publish`) at the site root of a real server."""

    data: Path
    out: Path
    base: str  # http://127.0.0.1:PORT (no slash)
    recorder: Recorder
    sets: list[SetConfig]
    state_dir: Path | None = None

    @property
    def root(self) -> str:
        return self.base + "/"

    def config(self) -> PublishConfig:
        return PublishConfig(out=self.out, sets=self.sets, state_dir=self.state_dir)

    def publish(self) -> None:
        publish(self.config())

    def write(self, files: dict[str, bytes]) -> None:
        write_tree(self.data, files)

    def resource_gets(self) -> dict[str, int]:
        """How often each resource (decoded path) was fetched since the last reset."""
        counts: dict[str, int] = {}
        for h in self.recorder.gets():
            if _is_resource(h.path):
                counts[h.path] = counts.get(h.path, 0) + 1
        return counts


def _is_resource(path: str) -> bool:
    first = path.lstrip("/").split("/", 1)[0]
    return first not in ("set1", "set2", ".well-known", "robots.txt", "")


@contextlib.contextmanager
def published_source(
    tmp_path: Path,
    files: dict[str, bytes],
    *,
    delay: float = 0.0,
    wrap: Callable[[Any, Recorder], Any] | None = None,
    **set_kw: Any,
) -> Iterator[Published]:
    """Serve OUTDIR on 127.0.0.1 and publish `files` as set `set1` with the site root as its
    base URL, so a URI's path is the file's path under DIR. `delay` slows resources down."""
    data, out = tmp_path / "data", tmp_path / "out"
    write_tree(data, files)
    data.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    recorder = Recorder(create_app(out), delay=delay, slow=_is_resource)
    app = wrap(recorder, recorder) if wrap else recorder
    with serve(app) as base:
        s = SetConfig(name="set1", dir=data, base_url=base + "/", **set_kw)
        src = Published(data=data, out=out, base=base, recorder=recorder, sets=[s])
        src.publish()
        yield src


# ---------------------------------------------------------------------------------------------
# Files


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, body in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(body)


def tree(root: Path, *, skip_state: bool = True) -> dict[str, bytes]:
    """Every file under `root` (relative POSIX path → bytes), our state folder left out."""
    out: dict[str, bytes] = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        if skip_state and rel_dir == Path("."):
            dirnames[:] = [d for d in dirnames if d != STATE]
        for name in filenames:
            p = Path(dirpath) / name
            out[(rel_dir / name).as_posix()] = p.read_bytes()
    return out


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every file and folder under `root` with its size and md5 (folders: -1)."""
    out: dict[str, tuple[int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.join(dirpath, d)] = (-1, "")
        for name in filenames:
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                out[p] = (-2, os.readlink(p))
                continue
            body = Path(p).read_bytes()
            out[p] = (len(body), hashlib.md5(body).hexdigest())
    return out


def md5(body: bytes) -> str:
    return hashlib.md5(body).hexdigest()


def state_rows(dest: Path, table: str) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(dest / STATE / "state.sqlite")) as db:
        return list(db.execute(f"SELECT * FROM {table}"))


# ---------------------------------------------------------------------------------------------
# The command


def cli(*args: str | Path) -> Result:
    """`resourcesync ARGS` in this process (the servers run in threads beside it)."""
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def cli_json(*args: str | Path) -> tuple[int, dict[str, Any]]:
    """`resourcesync ARGS --json`: the exit code and the summary."""
    result = cli(*args, "--json")
    assert result.stdout.strip(), result.stderr
    return result.exit_code, json.loads(result.stdout)


def set_report(summary: dict[str, Any], name: str = "set1") -> dict[str, Any]:
    (s,) = [s for s in summary["sets"] if s["name"] == name]
    return s


# ---------------------------------------------------------------------------------------------
# Hand-written documents (for servers that are not ours)

RS_NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)


def urlset(capability: str, entries: list[dict[str, Any]], **md: str) -> bytes:
    """A urlset document: `entries` are dicts of loc, and optional length, md5, change,
    datetime, from, until, lastmod, path, type, encoding, capability."""
    attrs = "".join(f" {k}={quoteattr(v)}" for k, v in {"capability": capability, **md}.items())
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', f"<urlset {RS_NS}>", f"<rs:md{attrs}/>"]
    for e in entries:
        body = f"<loc>{_esc(e['loc'])}</loc>"
        if "lastmod" in e:
            body += f"<lastmod>{e['lastmod']}</lastmod>"
        md_attrs = {
            "capability": e.get("capability"),
            "change": e.get("change"),
            "datetime": e.get("datetime"),
            "from": e.get("from"),
            "until": e.get("until"),
            "length": str(e["length"]) if "length" in e else None,
            "hash": f"md5:{e['md5']}" if "md5" in e else None,
            "path": e.get("path"),
            "type": e.get("type"),
            "encoding": e.get("encoding"),
        }
        rendered = "".join(f" {k}={quoteattr(v)}" for k, v in md_attrs.items() if v is not None)
        if rendered:
            body += f"<rs:md{rendered}/>"
        lines.append(f"<url>{body}</url>")
    lines.append("</urlset>")
    return ("\n".join(lines) + "\n").encode("utf-8")


def package(members: dict[str, bytes], manifest: bytes) -> bytes:
    """A Resource Dump's package: `manifest` as manifest.xml, and `members` by name."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.xml", manifest)
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def sitemapindex(capability: str, parts: list[dict[str, Any]], **md: str) -> bytes:
    """A sitemapindex document: `parts` are dicts as for `urlset` (loc, from, until, at…)."""
    text = urlset(capability, parts, **md).decode()
    text = text.replace("<urlset ", "<sitemapindex ").replace("</urlset>", "</sitemapindex>")
    return text.replace("<url>", "<sitemap>").replace("</url>", "</sitemap>").encode()


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# ---------------------------------------------------------------------------------------------
# A hand-made Source: documents and resources from dicts, any path may misbehave


Handler = Callable[[Any], Any]  # async (Request) -> Response


class HandSource:
    """A Starlette app serving `docs` (XML) and `files` by path; a path in `handlers` answers
    however its handler likes. Every request path is counted in `hits`."""

    def __init__(self) -> None:
        self.docs: dict[str, bytes] = {}
        self.files: dict[str, bytes] = {}
        self.handlers: dict[str, Handler] = {}
        self.hits: dict[str, int] = {}
        self.base = ""

    def app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.responses import PlainTextResponse, Response
        from starlette.routing import Route

        async def endpoint(request: Any) -> Any:
            path = request.url.path
            self.hits[path] = self.hits.get(path, 0) + 1
            if path in self.handlers:
                return await self.handlers[path](request)
            if path in self.docs:
                return Response(self.docs[path], media_type="application/xml")
            if path in self.files:
                return Response(self.files[path], media_type="application/octet-stream")
            return PlainTextResponse("not here", status_code=404)

        return Starlette(routes=[Route("/{path:path}", endpoint)])

    def publish(
        self,
        resources: list[dict[str, Any]],
        *,
        at: str = "2024-01-01T00:00:00Z",
        changes: list[dict[str, Any]] | None = None,
        changes_from: str | None = None,
        extra_caps: list[dict[str, Any]] | None = None,
    ) -> None:
        """Well-known description, Capability List, Resource List (and a Change List)."""
        b = self.base
        caps = [{"loc": f"{b}/resourcelist.xml", "capability": "resourcelist"}]
        caps.append({"loc": f"{b}/changelist.xml", "capability": "changelist"})
        self.capabilities(caps + (extra_caps or []))
        self.docs["/resourcelist.xml"] = urlset("resourcelist", resources, at=at)
        self.docs["/changelist.xml"] = urlset(
            "changelist", changes or [], **{"from": changes_from or at}
        )

    def capabilities(self, caps: list[dict[str, Any]]) -> None:
        """The well-known Source Description and its one Capability List, listing `caps`
        (dicts of loc and capability)."""
        self.docs["/.well-known/resourcesync"] = urlset(
            "description",
            [{"loc": f"{self.base}/capabilitylist.xml", "capability": "capabilitylist"}],
        )
        self.docs["/capabilitylist.xml"] = urlset("capabilitylist", caps)


def entry(base: str, rel: str, body: bytes, **extra: Any) -> dict[str, Any]:
    """A Resource List entry for `body` served at `base + rel`."""
    return {"loc": base + rel, "length": len(body), "md5": md5(body), **extra}


def behind_a_token(app: Any, token: str) -> Any:
    """`app`, answering 401 to every request without `Authorization: Bearer TOKEN`."""
    from starlette.responses import PlainTextResponse

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization")
            if given != f"Bearer {token}".encode():
                await PlainTextResponse("sign in", status_code=401)(scope, receive, send)
                return
        await app(scope, receive, send)

    return guarded


@contextlib.contextmanager
def hand_source() -> Iterator[HandSource]:
    src = HandSource()
    with serve(src.app()) as base:
        src.base = base
        yield src
