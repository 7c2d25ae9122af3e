"""`make demo` is what a newcomer runs first: the script must keep working end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_demo_runs_end_to_end() -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        ["bash", str(ROOT / "examples" / "demo.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "in sync: 5 expected, 5 in sync, 0 missing, 0 extra, 0 different" in output
    assert "the change arrived at the follower" in output
    assert "Traceback" not in output
