"""A minimal HTTP/1.1 server that answers every request after a fixed delay, headers and body
in one write (stdlib only: not our server, so our client is what a benchmark measures). A
thread per connection, so every answer is on time whatever the others do.

Usage: python bench/latency_server.py [--log FILE] PORT DELAY_SECONDS ROOT [PREFIX=DIR ...]
Serves ROOT at /, and each DIR at /PREFIX/ (keep-alive, GET and HEAD, 404 for the rest).
`--log FILE`: a line per request, `ARRIVED SENT PATH` (CLOCK_MONOTONIC seconds, the clock every
process shares), written when the server stops.
"""

from __future__ import annotations

import os
import signal
import socket
import socketserver
import sys
import time
from email.utils import formatdate
from typing import ClassVar

TYPES = {".xml": b"application/xml", ".txt": b"text/plain"}


def resolve(mounts: list[tuple[str, str]], target: str) -> str | None:
    path = target.split("?", 1)[0]
    if ".." in path.split("/"):
        return None
    for prefix, directory in mounts:
        if path.startswith(prefix):
            return os.path.join(directory, path[len(prefix) :])
    return None


class Handler(socketserver.BaseRequestHandler):
    """One connection, in its own thread: each answer is written `delay` after its request
    arrived, timed with `time.sleep` (nanosleep: a few tens of microseconds late at most; an
    event loop's timer rounds up to the millisecond and runs late under load)."""

    mounts: ClassVar[list[tuple[str, str]]] = []
    delay = 0.0
    log: ClassVar[list[tuple[float, float, str]]] = []

    def handle(self) -> None:
        sock = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                data = sock.recv(65536)
                if not data:
                    return
                buf += data
            arrived = time.monotonic()
            head, buf = buf.split(b"\r\n\r\n", 1)
            method, target = head.split(b"\r\n", 1)[0].split(b" ")[:2]
            reply = answer(self.mounts, method.decode(), target.decode())
            late = arrived + self.delay - time.monotonic()
            if late > 0:
                time.sleep(late)
            try:
                sock.sendall(reply)
            except OSError:
                return
            self.log.append((arrived, time.monotonic(), target.decode()))


def answer(mounts: list[tuple[str, str]], method: str, target: str) -> bytes:
    path = resolve(mounts, target)
    body = b""
    status = b"404 Not Found"
    ctype = b"text/plain"
    if path is not None and os.path.isfile(path):
        with open(path, "rb") as f:
            body = f.read()
        status = b"200 OK"
        ctype = TYPES.get(os.path.splitext(path)[1], b"application/xml")
    head = (
        b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype
        + b"\r\nContent-Length: " + str(len(body)).encode()
        + b"\r\nDate: " + formatdate(usegmt=True).encode()
        + b"\r\n\r\n"
    )  # fmt: skip
    return head + (body if method == "GET" else b"")


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024


def main() -> None:
    args = sys.argv[1:]
    log = None
    if args[0] == "--log":
        log, args = args[1], args[2:]
    port, delay, root = int(args[0]), float(args[1]), args[2]
    mounts = []
    for spec in args[3:]:
        prefix, directory = spec.split("=", 1)
        mounts.append(("/" + prefix.strip("/") + "/", directory))
    mounts.append(("/", root))
    Handler.mounts, Handler.delay = mounts, delay
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        with Server(("127.0.0.1", port), Handler) as server:
            server.serve_forever()
    finally:
        if log is not None:
            with open(log, "w") as f:
                f.writelines(f"{a:.6f} {b:.6f} {t}\n" for a, b, t in list(Handler.log))


if __name__ == "__main__":
    main()
