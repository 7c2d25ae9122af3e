"""The one TLS context of a process: every client (httpx for documents, aiohttp for transfers)
verifies servers against it.

Loading a CA bundle costs tens of milliseconds (50 ms on a slow machine) and OpenSSL does it
without holding the GIL, so a command that will speak HTTP may start the load in a thread
(`preload`) and go on with its imports and its first steps; the first client waits for it.
A bundle that cannot be loaded is one clear error naming it, not a "cannot write".
"""

from __future__ import annotations

import os
import ssl
import threading
from concurrent.futures import Future

from ..errors import ResourceSyncError

__all__ = ["context", "forget", "preload"]

_lock = threading.Lock()
_loaded: ssl.SSLContext | None = None
_loading: Future[ssl.SSLContext] | None = None


def _locations() -> tuple[str | None, str | None]:
    """(cafile, capath): SSL_CERT_FILE / SSL_CERT_DIR when set, else certifi's bundle."""
    cafile = os.environ.get("SSL_CERT_FILE") or None
    capath = os.environ.get("SSL_CERT_DIR") or None
    if cafile or capath:
        return cafile, capath
    import certifi

    return certifi.where(), None


def _load(cafile: str | None, capath: str | None) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=cafile, capath=capath)
    except OSError as exc:  # ssl.SSLError included: a file that holds no certificate
        if os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR"):
            named = " and ".join(
                f"{var}={value}"
                for var, value in (("SSL_CERT_FILE", cafile), ("SSL_CERT_DIR", capath))
                if value
            )
            hint = f"set {named}: fix or unset it"
        else:
            hint = "certifi's bundle: reinstall certifi, or set SSL_CERT_FILE"
        if isinstance(exc, ssl.SSLError) and exc.reason:
            why = exc.reason.replace("_", " ").lower()  # NO_CERTIFICATE_OR_CRL_FOUND
        else:
            why = exc.strerror or str(exc)
        raise ResourceSyncError(
            f"cannot load the CA certificates ({why}); {hint}", source=cafile or capath
        ) from None


def _forget_in_child() -> None:
    """A child forked while the thread loads has no such thread: it loads for itself."""
    global _lock, _loading
    _lock = threading.Lock()
    if _loading is not None and not _loading.done():
        _loading = None


os.register_at_fork(after_in_child=_forget_in_child)


def preload() -> None:
    """Start loading the context in a thread. For a command that is about to speak HTTP in a
    process that will not fork meanwhile (a program's command, not a library's import): the
    thread imports nothing (certifi is found here first), so it cannot meet an import lock."""
    global _loading
    with _lock:
        if _loaded is not None or _loading is not None:
            return
        cafile, capath = _locations()
        loading: Future[ssl.SSLContext] = Future()

        def run() -> None:
            try:
                loading.set_result(_load(cafile, capath))
            except BaseException as exc:  # handed to whoever asks for the context
                loading.set_exception(exc)

        threading.Thread(target=run, name="resourcesync-tls", daemon=True).start()
        _loading = loading


def context() -> ssl.SSLContext:
    """The process's TLS context (loaded here, or by `preload`'s thread)."""
    global _loaded, _loading
    if _loaded is not None:
        return _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        loading = _loading
        if loading is not None:
            # The load's error is raised as a load here would raise it (and tried again by
            # the next call, as then).
            _loading = None
            _loaded = loading.result()
        else:
            _loaded = _load(*_locations())
        return _loaded


def forget() -> None:
    """Load again on next use (after SSL_CERT_FILE changed: tests, a long-lived process)."""
    global _loaded, _loading
    with _lock:
        loading, _loaded, _loading = _loading, None, None
    if loading is not None:
        loading.exception()  # let a load under way finish (its outcome is dropped)
