"""Hostile Sources against `resourcesync sync` (issue 17): what each attack costs us.

Each attack is a Source on 127.0.0.1 (Starlette under uvicorn, in a thread of this process)
whose documents are ordinary except for one thing that misbehaves: a body that never ends, a
length that lies, a body or a document that trickles, a compression bomb, a dump package that
never ends, an index nested too deep, an element with 200,000 attributes, a host that is down.
`resourcesync sync` runs against it as a subprocess with the limits below, and for each attack
this prints the sync's peak memory (its own maxrss), the most disk DEST held at any moment
(polled every 20 ms, `.part` files and the state folder included), the seconds until the run
ended (the transfer abandoned), the bytes the Source managed to send, and the exit code.

Targets: peak memory < 200 MB and disk ≤ the configured maximum, whatever the Source sends.

Usage: python bench/bench_hostile.py [--only NAME] [--max-size 64M] [--deadline 60]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

MiB = 1 << 20
NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)
AT = "2024-01-01T00:00:00Z"


def urlset(capability: str, locs: list[tuple[str, int | None]], **md: str) -> bytes:
    attrs = "".join(f' {k}="{v}"' for k, v in {"capability": capability, **md}.items())
    rows = [f"<?xml version='1.0' encoding='UTF-8'?>\n<urlset {NS}><rs:md{attrs}/>"]
    for loc, length in locs:
        md_ = f'<rs:md length="{length}"/>' if length is not None else ""
        rows.append(f"<url><loc>{loc}</loc>{md_}</url>")
    rows.append("</urlset>\n")
    return "\n".join(rows).encode()


def caps(base: str, extra: dict[str, str] | None = None) -> bytes:
    rows = [f"<?xml version='1.0' encoding='UTF-8'?>\n<urlset {NS}>"]
    rows.append('<rs:md capability="capabilitylist"/>')
    for cap, loc in {"resourcelist": f"{base}/resourcelist.xml", **(extra or {})}.items():
        rows.append(f'<url><loc>{loc}</loc><rs:md capability="{cap}"/></url>')
    rows.append("</urlset>\n")
    return "\n".join(rows).encode()


@dataclass
class Source:
    """Paths → handlers; `sent` counts the bytes the misbehaving handlers yielded."""

    base: str = ""
    routes: dict[str, Callable[[Request], Any]] = field(default_factory=dict)
    sent: int = 0

    def static(self, path: str, body: bytes, **headers: str) -> None:
        async def handle(request: Request) -> Response:
            self.sent += len(body)
            return Response(body, headers=headers, media_type="application/xml")

        self.routes[path] = handle

    def endless(self, path: str, piece: bytes, *, head: bytes = b"", pause: float = 0.0) -> None:
        async def handle(request: Request) -> Response:
            async def body() -> AsyncIterator[bytes]:
                if head:
                    yield head
                while not await request.is_disconnected():
                    if pause:
                        await asyncio.sleep(pause)
                    self.sent += len(piece)
                    yield piece

            return StreamingResponse(body(), media_type="application/octet-stream")

        self.routes[path] = handle

    def app(self) -> Starlette:
        async def endpoint(request: Request) -> Response:
            handler = self.routes.get(request.url.path)
            if handler is None:
                return PlainTextResponse("not here", status_code=404)
            result: Response = await handler(request)
            return result

        return Starlette(routes=[Route("/{path:path}", endpoint)])


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


# ---------------------------------------------------------------------------------------------
# The catalogue: each sets up `src` (whose base is known) and returns extra sync arguments.


def ordinary(src: Source, resources: list[tuple[str, int | None]]) -> None:
    b = src.base
    src.static(
        "/.well-known/resourcesync",
        urlset("description", [(f"{b}/capabilitylist.xml", None)]),
    )
    src.static("/capabilitylist.xml", caps(b))
    src.static("/resourcelist.xml", urlset("resourcelist", resources, at=AT))


def endless_body(src: Source) -> list[str]:
    ordinary(src, [(f"{src.base}/endless.bin", None)])
    src.endless("/endless.bin", b"x" * (64 << 10))
    return []


def lying_length(src: Source) -> list[str]:
    ordinary(src, [(f"{src.base}/liar.bin", 1000)])
    src.endless("/liar.bin", b"x" * (64 << 10))
    return []


def slowloris_resource(src: Source) -> list[str]:
    ordinary(src, [(f"{src.base}/slow.bin", None)])
    src.endless("/slow.bin", b"x", pause=1.0)
    return []


def slowloris_document(src: Source) -> list[str]:
    ordinary(src, [])
    head = urlset("resourcelist", [], at=AT).split(b"</urlset>")[0]
    src.endless("/resourcelist.xml", b" ", head=head, pause=1.0)
    return []


def _bomb(size: int, fill: bytes = b"\0") -> bytes:
    """gzip of `size` bytes of `fill`, compressed a MiB at a time."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = fill * MiB
    out = [z.compress(block) for _ in range(size // MiB)]
    return b"".join([*out, z.flush()])


def gzip_bomb_declared(src: Source) -> list[str]:
    ordinary(src, [(f"{src.base}/bomb.txt", 4)])
    src.static("/bomb.txt", _bomb(1 << 30), **{"Content-Encoding": "gzip"})
    return []


def gzip_bomb_undeclared(src: Source) -> list[str]:
    ordinary(src, [(f"{src.base}/bomb.txt", None)])
    src.static("/bomb.txt", _bomb(1 << 30), **{"Content-Encoding": "gzip"})
    return []


def double_gzip_document(src: Source) -> list[str]:
    ordinary(src, [])
    inner = _bomb(1 << 30, b" ")
    src.static("/resourcelist.xml", gzip.compress(inner, 9), **{"Content-Encoding": "gzip, gzip"})
    return []


def endless_package(src: Source) -> list[str]:
    b = src.base
    # A Resource List with one resource, so that the package may hold something planned (a
    # package is downloaded only then: dumps are a source of bytes, the lists the truth).
    ordinary(src, [(f"{b}/r0.bin", 1000)])
    src.static("/r0.bin", b"r" * 1000)
    src.static("/capabilitylist.xml", caps(b, {"resourcedump": f"{b}/resourcedump.xml"}))
    src.static("/resourcedump.xml", urlset("resourcedump", [(f"{b}/p1.zip", MiB)], at=AT))
    src.endless("/p1.zip", b"x" * (64 << 10))
    return ["--via", "dumps"]


def endless_document(src: Source) -> list[str]:
    ordinary(src, [])
    head = urlset("resourcelist", [], at=AT).split(b"</urlset>")[0]
    src.endless("/resourcelist.xml", b"<!--" + b"x" * 65000 + b"-->", head=head)
    return []


def deep_index(src: Source) -> list[str]:
    b = src.base
    ordinary(src, [])
    depth = 50
    for level in range(depth):
        name = "/resourcelist.xml" if level == 0 else f"/index{level}.xml"
        child = f"{b}/index{level + 1}.xml"
        body = (
            f"<?xml version='1.0' encoding='UTF-8'?>\n<sitemapindex {NS}>"
            f'<rs:md capability="resourcelist" at="{AT}"/>'
            f"<sitemap><loc>{child}</loc></sitemap></sitemapindex>\n"
        ).encode()
        src.static(name, body)
    src.static(f"/index{depth}.xml", urlset("resourcelist", [], at=AT))
    return []


def many_attributes(src: Source) -> list[str]:
    ordinary(src, [])
    attrs = " ".join(f'a{i}="x"' for i in range(200_000))
    body = (
        f"<?xml version='1.0' encoding='UTF-8'?>\n<urlset {NS}>"
        f'<rs:md capability="resourcelist" at="{AT}"/>'
        f"<url {attrs}><loc>{src.base}/x</loc></url></urlset>\n"
    ).encode()
    src.static("/resourcelist.xml", body)
    return []


def dead_host(src: Source) -> list[str]:
    with socket.create_server(("127.0.0.1", 0)) as s:
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    ordinary(src, [(f"{dead}/r{i:04d}.bin", None) for i in range(1000)])
    return ["--map", f"{dead}/=DEST"]


_HELD: list[socket.socket] = []


def silent_host(src: Source) -> list[str]:
    """A host whose connections time out: a listening socket that never accepts, its
    queue filled, so the kernel drops further SYNs."""
    for s in _HELD:
        s.close()
    _HELD.clear()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    _HELD.append(listener)
    port = listener.getsockname()[1]
    for _ in range(4):
        c = socket.socket()
        c.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            c.connect(("127.0.0.1", port))
        _HELD.append(c)
    silent = f"http://127.0.0.1:{port}"
    ordinary(src, [(f"{silent}/r{i:04d}.bin", None) for i in range(1000)])
    return ["--map", f"{silent}/=DEST"]


ATTACKS: dict[str, Callable[[Source], list[str]]] = {
    "endless body (no length)": endless_body,
    "lying length (listed 1000 B)": lying_length,
    "slowloris resource (1 B/s)": slowloris_resource,
    "slowloris Resource List (1 B/s)": slowloris_document,
    "gzip bomb, listed 4 B (1 GiB)": gzip_bomb_declared,
    "gzip bomb, no length (1 GiB)": gzip_bomb_undeclared,
    "gzip, gzip bomb document (1 GiB)": double_gzip_document,
    "endless dump package (1 MiB declared)": endless_package,
    "endless Resource List": endless_document,
    "index nested 50 deep": deep_index,
    "200,000 attributes on one element": many_attributes,
    "host down, 1,000 resources": dead_host,
    "host silent (connections time out), 1,000 resources": silent_host,
}


# ---------------------------------------------------------------------------------------------


def disk_used(root: Path) -> int:
    total = 0
    for dirpath, _, names in os.walk(root):
        for n in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, n)).st_size
    return total


@dataclass
class Outcome:
    rss_mb: float
    disk_mb: float
    seconds: float
    sent_mb: float
    code: int
    said: str


def run(name: str, limits: list[str], cap: float) -> Outcome:
    src = Source()
    with serve(src.app()) as base, tempfile.TemporaryDirectory() as tmp:
        src.base = base
        extra = ATTACKS[name](src)
        dest = Path(tmp) / "dest"
        extra = [a.replace("DEST", str(dest)) for a in extra]
        cmd = [sys.executable, "-m", "resourcesync", "sync", base + "/", str(dest)]
        err = Path(tmp) / "stderr"
        started = time.monotonic()
        with open(err, "wb") as stderr:
            proc = subprocess.Popen(
                [*cmd, *limits, *extra], stdout=subprocess.DEVNULL, stderr=stderr
            )
        peak_disk = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if dest.exists():
                peak_disk = max(peak_disk, disk_used(dest))
            if time.monotonic() - started > cap:
                proc.kill()
            time.sleep(0.02)
        seconds = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        lines = [ln for ln in err.read_text(errors="replace").splitlines() if ln.strip()]
        said = next((ln for ln in lines if ln.startswith("resourcesync:")), "")
        return Outcome(
            rss_mb=usage.ru_maxrss / 1024,
            disk_mb=peak_disk / MiB,
            seconds=seconds,
            sent_mb=src.sent / MiB,
            code=proc.returncode,
            said=said.replace(base, "…")[:110],
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="Run only the attacks whose name contains this.")
    ap.add_argument("--max-size", default="64M")
    ap.add_argument("--max-document-size", default="32M")
    ap.add_argument("--deadline", default="60")
    ap.add_argument("--cap", type=float, default=300.0, help="Kill a sync after this long.")
    args = ap.parse_args()
    limits = [
        "--max-size",
        args.max_size,
        "--max-document-size",
        args.max_document_size,
        "--deadline",
        args.deadline,
    ]
    print("limits in force:", " ".join(limits), "(others at their defaults)")
    print("| attack | peak memory MB | peak disk MB | s until abandoned | sent MB | exit | said |")
    print("|---|---:|---:|---:|---:|---:|---|")
    worst_rss = 0.0
    for name in ATTACKS:
        if args.only and args.only not in name:
            continue
        o = run(name, limits, args.cap)
        worst_rss = max(worst_rss, o.rss_mb)
        said = o.said.replace("|", "/")
        print(
            f"| {name} | {o.rss_mb:.0f} | {o.disk_mb:.1f} | {o.seconds:.1f} | "
            f"{o.sent_mb:.1f} | {o.code} | {said} |",
            flush=True,
        )
    print(f"worst peak memory: {worst_rss:.0f} MB (target < 200 MB)")


if __name__ == "__main__":
    main()
