"""A Source published for one address and served at another (issue 14.2): `serve` says so at
start, and a `sync` led to the other host says plainly why it cannot go on."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from resourcesync.source.config import PublishConfig, SetConfig
from resourcesync.source.publish import publish
from resourcesync.source.server import create_app
from tests.destination.helpers import cli
from tests.servers import serve


def _publish(tmp_path: Path, base_url: str) -> Path:
    data, out = tmp_path / "files", tmp_path / "public"
    data.mkdir(parents=True)
    (data / "a.txt").write_bytes(b"alpha")
    publish(PublishConfig(out=out, sets=[SetConfig("rs", data, base_url)]))
    return out


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve_stderr(out: Path, port: int) -> str:
    """What `resourcesync serve` says on start (it is stopped once it serves)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "resourcesync", "serve", str(out), "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    return err


def test_serve_warns_when_the_published_base_url_is_elsewhere(tmp_path: Path) -> None:
    port = _port()
    err = _serve_stderr(_publish(tmp_path / "a", "https://example.org/files/"), port)
    warnings = [line for line in err.splitlines() if "warning:" in line]
    assert len(warnings) == 1, err
    assert "set rs was published for https://example.org/files/" in warnings[0]
    assert f"--base-url http://127.0.0.1:{port}/files/" in warnings[0]
    # Published for where it is served (localhost stands for 127.0.0.1): nothing to say.
    port = _port()
    err = _serve_stderr(_publish(tmp_path / "b", f"http://localhost:{port}/files/"), port)
    assert "warning" not in err, err


def test_sync_says_the_source_leads_to_another_host(tmp_path: Path) -> None:
    out = _publish(tmp_path, "http://127.0.0.1:9/files/")  # nothing listens on port 9
    with serve(create_app(out)) as base:
        result = cli("sync", base + "/", tmp_path / "copy")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "cannot connect to 127.0.0.1:9: connection refused" in line
    assert f"the Source at {base} leads there" in line
    assert "published with another --base-url than where it is served" in line
