"""Ctrl-C and SIGTERM during `publish` (issue 14.4): one line, exit 130 / 143, never a
traceback (a generator closed after its database printed one in the dump phase), and the next
run completes a publication that validates."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CAPS = "resourcelist,changelist,resourcedump,changedump"


def _tree(root: Path, n: int) -> None:
    for i in range(n):
        d = root / f"d{i // 500:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:05d}.txt").write_bytes(os.urandom(200 + i % 300))


def _publish(data: Path, out: Path) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "resourcesync", "publish", str(data), "--out", str(out)]
    argv += ["--base-url", "http://127.0.0.1:9/files/", "--capabilities", CAPS]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize(
    ("sig", "code", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_a_publish_stopped_by_a_signal_says_one_line_and_the_next_run_completes(
    tmp_path: Path, sig: int, code: int, word: str
) -> None:
    data = tmp_path / "data"
    _tree(data, 3000)
    started = time.monotonic()
    first = _publish(data, tmp_path / "timing")
    first.communicate(timeout=120)
    whole = time.monotonic() - started
    stopped = 0
    for i, share in enumerate((0.35, 0.55, 0.75, 0.9)):
        out = tmp_path / f"out{i}"
        proc = _publish(data, out)
        time.sleep(whole * share)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        assert "Traceback" not in err and "Exception ignored" not in err, err
        if proc.returncode == code:
            stopped += 1
            assert err == f"resourcesync: {word}\n", err
        else:
            assert proc.returncode == 0, err  # it had finished before the signal
        again = _publish(data, out)
        _, err = again.communicate(timeout=120)
        assert again.returncode == 0, err
        check = subprocess.run(
            [
                sys.executable,
                "-m",
                "resourcesync",
                "validate",
                "--follow",
                str(out / ".well-known" / "resourcesync"),
                "--map",
                f"http://127.0.0.1:9/={out}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
    assert stopped >= 2
