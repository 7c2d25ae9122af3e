"""What the program leaves out of aiohttp's import (issue 15: start-up counts).

`import aiohttp` makes two TLS contexts, each loading the system's CA bundle (50 ms each here,
a fifth of `sync`'s start-up): the defaults of requests that name no context. The transfers
name one (their connector has the process's one context, `http.tls`), so those two are never
used by the program. (The sibling, httpx importing its own command line at `import httpx`, is
kept out by `resourcesync.cli`.)

`enable()` is called by the program's entry (`resourcesync._program`), the only place that
knows the whole process is ours: a library user's process imports aiohttp as it comes (it may
make aiohttp requests with the default contexts). In the program, aiohttp's two default
contexts are made without loading any certificate, so a request that did use the verified one
would fail verification: closed, never open.

Ground floor: imports only the standard library.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

__all__ = ["enable", "importing_aiohttp"]

_enabled = False


def enable() -> None:
    """For the program's process only (see the module's docstring)."""
    global _enabled
    _enabled = True


@contextlib.contextmanager
def importing_aiohttp() -> Iterator[None]:
    """Around `import aiohttp`: in the program, its default TLS contexts load no CA bundle.
    Only calls from this thread during the import are skipped; any other thread's context
    loads its certificates as usual."""
    if not _enabled or "aiohttp.connector" in sys.modules:
        yield
        return
    import ssl  # here: `enable()` runs for every command, most of which never load ssl

    importer = threading.get_ident()
    real = ssl.SSLContext.set_default_verify_paths
    own = "set_default_verify_paths" in vars(ssl.SSLContext)

    def set_default_verify_paths(self: ssl.SSLContext) -> None:
        if threading.get_ident() != importer:
            real(self)

    ssl.SSLContext.set_default_verify_paths = set_default_verify_paths  # type: ignore[method-assign]
    try:
        yield
    finally:
        if own:
            ssl.SSLContext.set_default_verify_paths = real  # type: ignore[method-assign]
        else:  # the C method, inherited again
            del ssl.SSLContext.set_default_verify_paths
