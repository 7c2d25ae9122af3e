"""Real servers for tests: an ASGI app served by uvicorn on 127.0.0.1 with an ephemeral port."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn


def read_head(sock: socket.socket) -> bytes | None:
    """An HTTP request's head (up to the blank line) read from `sock` by hand; None when the
    client went away first."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            return None
        data += chunk
    return data.split(b"\r\n\r\n")[0]


def tls_files(directory: Any) -> tuple[str, str, str]:
    """A throw-away CA and a certificate it issued for 127.0.0.1, as files in `directory`:
    (certificate chain, private key, the CA's certificate) for `serve(tls=...)` and
    SSL_CERT_FILE."""
    import trustme

    ca = trustme.CA()
    chain, key, ca_file = (str(directory / name) for name in ("chain.pem", "key.pem", "ca.pem"))
    issued = ca.issue_cert("127.0.0.1")
    issued.cert_chain_pems[0].write_to_path(chain)
    for pem in issued.cert_chain_pems[1:]:
        pem.write_to_path(chain, append=True)
    issued.private_key_pem.write_to_path(key)
    ca.cert_pem.write_to_path(ca_file)
    return chain, key, ca_file


@contextlib.contextmanager
def serve(
    app: Any, host: str = "127.0.0.1", *, tls: tuple[str, str] | None = None
) -> Iterator[str]:
    """Run `app` on `host` (a loopback address: another one stands for another host) in a
    background thread; yield its base URL (no trailing slash). With `tls` (certificate chain
    file, key file), over https."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    ssl = {"ssl_certfile": tls[0], "ssl_keyfile": tls[1]} if tls else {}
    # asyncio's event loop, as `resourcesync serve` runs (uvicorn would pick uvloop, which is
    # installed for the transfers, and write small answers in fewer pieces).
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        access_log=False,
        loop="asyncio",
        **ssl,  # type: ignore[arg-type]
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    try:
        yield f"{'https' if tls else 'http'}://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
