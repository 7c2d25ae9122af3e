"""The process's one TLS context (`resourcesync.http.tls`): loaded once, by a command's thread
while it imports and discovers, or on first use; a CA bundle that cannot be loaded is one
clear error naming it."""

from __future__ import annotations

import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from resourcesync.errors import ResourceSyncError
from resourcesync.http import tls


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    tls.forget()
    yield
    tls.forget()


def _subjects(ctx: ssl.SSLContext) -> set[str]:
    return {str(c.get("subject")) for c in ctx.get_ca_certs()}


def test_the_context_is_loaded_once_by_the_preload_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    loaders: list[str] = []
    real = tls._load

    def load(cafile: str | None, capath: str | None) -> ssl.SSLContext:
        loaders.append(threading.current_thread().name)
        return real(cafile, capath)

    monkeypatch.setattr(tls, "_load", load)
    tls.preload()
    tls.preload()  # a second call starts nothing
    ctx = tls.context()
    assert tls.context() is ctx
    assert loaders == ["resourcesync-tls"]
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert len(ctx.get_ca_certs()) == 1  # SSL_CERT_FILE's CA, nothing else
    tls.forget()
    assert tls.context() is not ctx and loaders == ["resourcesync-tls", "MainThread"]


@pytest.mark.parametrize("preloaded", [False, True])
def test_a_bundle_that_cannot_be_loaded_is_named(
    preloaded: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "missing.pem"
    monkeypatch.setenv("SSL_CERT_FILE", str(missing))
    if preloaded:
        tls.preload()
    with pytest.raises(ResourceSyncError, match="cannot load the CA certificates") as caught:
        tls.context()
    assert caught.value.source == str(missing)
    assert f"SSL_CERT_FILE={missing}" in str(caught.value)
    # Not remembered: fixed, it loads.
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(missing))
    assert len(tls.context().get_ca_certs()) == 1

    not_pem = tmp_path / "hostname"
    not_pem.write_text("box\n")
    monkeypatch.setenv("SSL_CERT_FILE", str(not_pem))
    tls.forget()
    with pytest.raises(ResourceSyncError, match="no certificate"):
        tls.context()


def test_the_command_line_says_which_bundle(tmp_path: Path) -> None:
    env = {"SSL_CERT_FILE": str(tmp_path / "nope.pem"), "PATH": "/usr/bin:/bin"}
    for command in (
        ["sync", "http://127.0.0.1:9/", str(tmp_path / "copy")],
        ["audit", "http://127.0.0.1:9/", str(tmp_path)],
    ):
        run = subprocess.run(
            [sys.executable, "-c", "from resourcesync.cli import run; run()", *command],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert run.returncode == 2, run.stderr
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in run.stderr
        assert "cannot load the CA certificates" in lines[0] and "SSL_CERT_FILE=" in lines[0]
        assert "cannot write" not in lines[0]


def test_a_child_forked_during_the_load_loads_for_itself(tmp_path: Path) -> None:
    # The thread does not exist in a child forked while it runs: the child must not wait for
    # it forever.
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    program = f"""
import os, time
from resourcesync.http import tls
os.environ["SSL_CERT_FILE"] = {str(tmp_path / "ca.pem")!r}
real = tls._load
tls._load = lambda cafile, capath: (time.sleep(1.0), real(cafile, capath))[1]
tls.preload()
pid = os.fork()
if pid == 0:
    ok = len(tls.context().get_ca_certs()) == 1
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
assert len(tls.context().get_ca_certs()) == 1
"""
    run = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=30
    )
    assert run.returncode == 0, run.stderr


def test_the_program_imports_aiohttp_without_loading_certificates_it_never_uses() -> None:
    """In the program's process (`resourcesync._program`), aiohttp's two default contexts are
    made without a CA bundle (100 ms of `sync`'s start-up here): the verified one would refuse
    every server, and `ssl` is as it was for everything after the import."""
    program = """
import ssl
before = ssl.create_default_context().cert_store_stats()["x509_ca"]
from resourcesync import _imports
_imports.enable()
import resourcesync.http.transfer
import aiohttp.connector as connector
assert connector._SSL_CONTEXT_VERIFIED.cert_store_stats()["x509_ca"] == 0
assert connector._SSL_CONTEXT_VERIFIED.verify_mode == ssl.CERT_REQUIRED
assert "set_default_verify_paths" not in vars(ssl.SSLContext)
assert ssl.create_default_context().cert_store_stats()["x509_ca"] == before
print(before)
"""
    run = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr


def test_the_programs_transfers_verify_with_the_one_context(tmp_path: Path) -> None:
    """`resourcesync sync` as a user runs it: documents over http, resources over https (the
    transfers, on aiohttp, with the contexts above made empty). A server whose CA is not
    trusted is refused, nothing is written in its place; trusted through SSL_CERT_FILE, the
    copy is made."""
    from resourcesync.source.config import PublishConfig, SetConfig
    from resourcesync.source.publish import publish
    from resourcesync.source.server import create_app
    from tests.servers import serve, tls_files

    chain, key, ca_file = tls_files(tmp_path)
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    out.mkdir()
    files = {f"f{i}.txt": f"resource {i}\n" for i in range(5)}
    for name, text in files.items():
        (data / name).write_text(text)
    app = create_app(out)
    with serve(app, tls=(chain, key)) as secure, serve(app) as plain:
        publish(
            PublishConfig(
                out=out,
                sets=[SetConfig("set1", data, secure + "/files/")],
                docs_url=plain + "/",
            )
        )

        def sync(dest: Path, **env: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "resourcesync",
                    "sync",
                    plain + "/",
                    str(dest),
                    "--map",
                    f"{secure}/files/={dest}",
                    "--retries",
                    "0",
                ],
                capture_output=True,
                text=True,
                timeout=120,
                env={"PATH": "/usr/bin:/bin", **env},
            )

        refused = sync(tmp_path / "refused")
        assert refused.returncode == 1, refused.stderr
        assert "is not trusted" in refused.stderr and "Traceback" not in refused.stderr
        assert not any((tmp_path / "refused").glob("f*"))

        trusted = sync(tmp_path / "copy", SSL_CERT_FILE=ca_file)
        assert trusted.returncode == 0, trusted.stderr
        for name, text in files.items():
            assert (tmp_path / "copy" / name).read_text() == text
