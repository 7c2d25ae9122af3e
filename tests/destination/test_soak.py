"""The soak, bounded (issue 11, "Done when"): `bench/soak_follow.py` for 20 seconds — a Source
changing files at random, the hub and the follower killed and restarted at random, a proxy
dropping a fifth of the notifications and delivering almost a third twice (at once, or late and out
of order). The copy must end equal to the Source's tree, with no
change lost, and the follower must have reported the outages it lived through. Longer runs:
`python bench/soak_follow.py --duration 600`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "soak_follow.py"


def test_a_follower_converges_through_random_outages(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    command = [sys.executable, str(SCRIPT), "--duration", "20", "--seed", "7", "--json", str(out)]
    command += ["--duplicate", "0.3"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert out.is_file(), run.stdout[-2000:] + run.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["converged"], r
    assert r["changes_lost"] == 0, r
    assert run.returncode == 0
    assert r["changes"] > 20 and r["hub_kills"] + r["follower_kills"] >= 3
    assert r["notifications_dropped"] > 0 and r["notifications_duplicated"] > 0
    events = r["follower_events"]
    # It synced, subscribed, lost notifications and caught up from the Change List.
    assert events["synced"] >= 1 and events["subscribed"] >= 1
    assert events.get("caught-up", 0) > 0
