"""The Destination against an independent Source: `resync-simulator` 1.1.0 (PyPI).

The simulator serves a Source Description, a Capability List, a live Resource List and a
dynamic Change List, and changes its resources at random every `change_delay` seconds. Its wheel
ships no configuration, so the test writes one (keys `source`, `resource_list_builder`,
`changememory`) and a minimal logging configuration. It is told its base URL
(`-b http://127.0.0.1:PORT`, which its documents use); it binds every interface on PORT.

How it is run: a Python 3.10 is present under pyenv, but without the simulator's dependencies
(tornado, PyYAML, resync) and this machine installs nothing at test time, so the simulator runs
under the venv's Python 3.11 through `tests/destination/run_simulator.py`, which lets
`random.sample` take dict views again (the simulation thread otherwise dies at its first update)
and then runs the simulator's own entry point.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from resourcesync.sitemap import read_document
from tests.destination.helpers import cli, cli_json, md5, set_report, tree

WRAPPER = Path(__file__).with_name("run_simulator.py")
RESOURCES = 12
EVENTS = 3
DELAY = 1.0  # seconds between simulated changes

CONFIG = f"""\
source:
  name: resourcesync-test
  number_of_resources: {RESOURCES}
  change_delay: {DELAY}
  event_types: [create, update, delete]
  average_payload: 200
  max_events: {EVENTS}
  stats_interval: 100
resource_list_builder:
  class: DynamicResourceListBuilder
  uri_path: resourcelist.xml
changememory:
  class: DynamicChangeList
  uri_path: changelist.xml
  max_changes: 1000
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def simulator(
    tmp_path: Path, events: int, kinds: str = "create, update, delete", delay: float = DELAY
) -> Iterator[str]:
    config, logging_config = tmp_path / "simulator.yaml", tmp_path / "logging.yaml"
    text = CONFIG.replace(f"max_events: {EVENTS}", f"max_events: {events}")
    text = text.replace(f"change_delay: {DELAY}", f"change_delay: {delay}")
    config.write_text(text.replace("create, update, delete", kinds))
    logging_config.write_text("version: 1\ndisable_existing_loggers: false\n")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    args = ["-c", str(config), "-l", str(logging_config), "-p", str(port), "-b", base]
    log = (tmp_path / "simulator.log").open("wb")
    proc = subprocess.Popen([sys.executable, str(WRAPPER), *args], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                if httpx.get(base + "/resourcelist.xml", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError((tmp_path / "simulator.log").read_text())
            time.sleep(0.05)
        yield base
    finally:
        proc.kill()
        proc.wait(timeout=10)
        log.close()


def _changes(base: str) -> int:
    response = httpx.get(base + "/changelist.xml", timeout=2)
    if response.status_code == 500:  # the simulator's answer until its first change
        return 0
    response.raise_for_status()
    return len(read_document(response.content)[1])


def _wait_for_changes(base: str, n: int, tmp_path: Path) -> None:
    deadline = time.monotonic() + 6.0 * n + 10
    while _changes(base) < n:
        assert time.monotonic() < deadline, (tmp_path / "simulator.log").read_text()
        time.sleep(0.1)


def test_baseline_and_incremental_from_resync_simulator(tmp_path: Path) -> None:
    """A baseline while the simulator changes (it changes every 0.4 s; the baseline spaces its
    requests by 0.25 s, so it lasts over 3 s), then an incremental after all its changes: the
    incremental exits 0 and the copy is exactly what the simulator's own Resource List lists."""
    dest = tmp_path / "dest"
    events = 8
    with simulator(tmp_path, events, delay=0.4) as base:
        _wait_for_changes(base, 1, tmp_path)
        before = _changes(base)
        code, summary = cli_json("sync", base + "/", dest, "--timeout", "5", "--delay", "0.25")
        during = _changes(base) - before
        assert during >= 1, "the simulator did not change during the baseline"
        s = summary["sets"][0]
        assert s["mode"] == "baseline" and s["refused"] == 0
        # A resource deleted or changed between its listing and its fetch is a failure of this
        # run (reported, exit 1), never a silent ok.
        assert code == 0 or s["failed"] >= 1, str(summary)
        assert all(p.startswith("resources/") for p in tree(dest))
        _wait_for_changes(base, events, tmp_path)
        code, summary = cli_json("sync", base + "/", dest, "--delete", "--timeout", "5")
        s = set_report(summary, s["name"])
        assert code == 0, str(s)
        assert s["mode"] == "incremental" and s["changes"] >= 1
        # The simulator's own Resource List says the copy is in sync…
        result = cli("audit", base + "/", dest)
        assert result.exit_code == 0, result.stdout + result.stderr
        # …and so does a direct comparison with it.
        _, entries = read_document(httpx.get(base + "/resourcelist.xml", timeout=2).content)
        listed = {e.loc.removeprefix(base + "/"): e for e in entries}
        got = tree(dest)
        assert sorted(got) == sorted(listed)
        for path, body in got.items():
            assert listed[path].hashes == {"md5": md5(body)}
            assert listed[path].length == len(body)


def test_a_baseline_taken_before_the_first_change_meets_a_gap_and_baseline_recovers(
    tmp_path: Path,
) -> None:
    """The simulator's Change List starts (`from`) at its first change, after a baseline taken
    before it, and it keeps no archive: the time in between is not listed anywhere. That is a
    gap — reported, exit 1, nothing half-applied — and `--baseline` recovers (fetching only
    what differs). (With a deletion first its Change List has no `from`, hence the update.)"""
    dest = tmp_path / "dest"
    # Its first change comes 6 s after it starts: the baseline (12 small resources) is done
    # long before, however loaded the machine.
    with simulator(tmp_path, 1, "update", delay=6.0) as base:
        code, summary = cli_json("sync", base + "/", dest, "--timeout", "5")
        assert _changes(base) == 0, "the simulator changed before the baseline was done"
        # Until its first change the simulator answers its Change List with HTTP 500: the
        # copy is its Resource List, but whether anything changed since cannot be known, so
        # the run says so (exit 1) rather than ok.
        s = summary["sets"][0]
        assert code == 1 and s["failed"] == 0 and s["fetched"] == RESOURCES, str(summary)
        assert "changelist.xml: HTTP 500" in s["gap"]
        assert len(tree(dest)) == RESOURCES
        _wait_for_changes(base, 1, tmp_path)
        code, summary = cli_json("sync", base + "/", dest, "--delete", "--timeout", "5")
        assert code == 1, str(summary)
        assert summary["sets"][0]["gap"] and summary["sets"][0]["fetched"] == 0
        code, summary = cli_json(
            "sync", base + "/", dest, "--baseline", "--delete", "--timeout", "5"
        )
        assert code == 0, str(summary)
        assert cli("audit", base + "/", dest).exit_code == 0
