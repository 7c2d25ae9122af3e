"""The README's quick start, run as a newcomer would paste it (issue 14.2): its shell blocks are
read from README.md (not copied here) and run in order at the top of this checkout. Two things
are changed, both to let the test run beside others: `/tmp/` becomes a fresh temporary folder
and port 8000 a free one. `make demo` is left to tests/test_demo.py (it runs the demo script)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def quick_start() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and ".resourcesync" not in p.parts
    }


def test_the_quick_start_works_as_written(tmp_path: Path) -> None:
    blocks = quick_start()
    assert len(blocks) == 2, "the quick start's shell blocks changed: update this test"
    port = str(_free_port())
    script = ["set -euo pipefail", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT"]
    for block in blocks:
        for line in block.splitlines():
            if line.startswith("make demo"):
                continue  # tests/test_demo.py runs it
            script.append(line.replace("/tmp/", f"{tmp_path}/").replace("8000", port))
    assert any(". .venv/bin/activate" in line for line in script)
    venv = Path(sys.executable).parent.parent
    if not (ROOT / ".venv").exists():
        # A checkout whose environment lives elsewhere: the activation line finds it there.
        script = [line.replace(". .venv/bin/activate", f". {venv}/bin/activate") for line in script]
    result = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=ROOT,
        env={**os.environ, "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "Traceback" not in output
    assert "in sync:" in output and "0 missing, 0 extra, 0 different" in output
    # The copy is the published tree, the edits included (under files/, as on the site).
    copy, files = _files(tmp_path / "copy" / "files"), _files(tmp_path / "files")
    assert copy == files and "data/new.txt" in copy and "articles/notes.md" not in copy
    assert "resourcesync: warning:" not in result.stderr, output[-2000:]


def library_snippets() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Library\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def _python(code: str, tmp_path: Path, port: str) -> subprocess.CompletedProcess[str]:
    code = code.replace("/tmp/", f"{tmp_path}/").replace("8000", port)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_library_snippets_run_as_written(tmp_path: Path) -> None:
    """The README's Python snippets (issue 14.15), with the same two changes as above."""
    documents, source_and_destination = library_snippets()
    port = str(_free_port())
    result = _python(documents, tmp_path, port)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "changelist" in result.stdout and "True 0" in result.stdout
    assert (tmp_path / "rs-library" / "resourcelist.xml").is_file()

    # The second runs against a served Source, as the quick start's.
    shutil.copytree(ROOT / "examples" / "resources", tmp_path / "files")
    (tmp_path / "public").mkdir()
    argv = [sys.executable, "-m", "resourcesync", "serve", str(tmp_path / "public")]
    server = subprocess.Popen([*argv, "--port", port], stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", int(port)), timeout=0.2).close()
                break
            time.sleep(0.05)
        result = _python(source_and_destination, tmp_path, port)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("True [('resourcesync', 'baseline', 5)]"), result.stdout
    assert lines[1] == "True 0 0 0", result.stdout
    assert _files(tmp_path / "copy" / "files") == _files(tmp_path / "files")
