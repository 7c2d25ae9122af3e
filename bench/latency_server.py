"""A minimal HTTP/1.1 server that answers every request after a fixed delay, headers and body
in one write (stdlib only: not our server, so our client is what a benchmark measures).

Usage: python bench/latency_server.py PORT DELAY_SECONDS ROOT [PREFIX=DIR ...]
Serves ROOT at /, and each DIR at /PREFIX/ (keep-alive, GET and HEAD, 404 for the rest).
"""

from __future__ import annotations

import asyncio
import os
import sys
from email.utils import formatdate

TYPES = {".xml": b"application/xml", ".txt": b"text/plain"}


def resolve(mounts: list[tuple[str, str]], target: str) -> str | None:
    path = target.split("?", 1)[0]
    if ".." in path.split("/"):
        return None
    for prefix, directory in mounts:
        if path.startswith(prefix):
            return os.path.join(directory, path[len(prefix) :])
    return None


class Delayed(asyncio.Protocol):
    def __init__(self, mounts: list[tuple[str, str]], delay: float) -> None:
        self.mounts, self.delay = mounts, delay
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while b"\r\n\r\n" in self.buf:
            head, self.buf = self.buf.split(b"\r\n\r\n", 1)
            method, target = head.split(b"\r\n", 1)[0].split(b" ")[:2]
            reply = self.answer(method.decode(), target.decode())
            asyncio.get_running_loop().call_later(self.delay, self.send, reply)

    def send(self, reply: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(reply)

    def answer(self, method: str, target: str) -> bytes:
        path = resolve(self.mounts, target)
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

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def main() -> None:
    port, delay, root = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    mounts = []
    for spec in sys.argv[4:]:
        prefix, directory = spec.split("=", 1)
        mounts.append(("/" + prefix.strip("/") + "/", directory))
    mounts.append(("/", root))
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Delayed(mounts, delay), "127.0.0.1", port, backlog=1024
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
