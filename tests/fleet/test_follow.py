"""`fleet add --follow`: a change notification from the Source's hub makes its Source due at
once, long before its interval; a Source not followed waits for its interval."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.destination.helpers import behind_a_token, cli, tree
from tests.fleet.helpers import change, many_sources
from tests.hub.conftest import fast_config, run_hub


def _wait(predicate: Callable[[], bool], what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.1)


def _same(copy: Path, files: dict[str, bytes]) -> bool:
    try:  # the copy is being written while we look
        return tree(copy) == files
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def _fleet_run(root: Path) -> Iterator[list[str]]:
    """`fleet run` in a subprocess; yields the lines it writes on stderr, as they come. It
    exits 0 when terminated."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "resourcesync", "fleet", "run", "--root", str(root)],
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []

    def read() -> None:
        assert proc.stderr
        lines.extend(iter(proc.stderr.readline, ""))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield lines
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        reader.join(timeout=10)
    assert proc.returncode == 0, "".join(lines)


def test_a_notification_makes_a_followed_source_due_at_once(tmp_path: Path) -> None:
    root = tmp_path / "fleet"
    with (
        run_hub(fast_config(), tmp_path / "hub.sqlite") as hub,
        many_sources(tmp_path, ["127.0.0.2", "127.0.0.3"], hub=hub) as (sites, _),
    ):
        followed, polled = sites
        add = ("fleet", "add", "--every", "1h", "--delete", "--root", root)
        assert cli(*add, followed.url, "--name", "followed", "--follow").exit_code == 0
        assert cli(*add, polled.url, "--name", "polled").exit_code == 0
        assert (
            "followed\t" + followed.url + "\t3600\tauto\tdelete\tfollow"
            in cli("fleet", "list", "--root", root).stdout
        )
        with _fleet_run(root) as lines:
            _wait(lambda: any("subscribed" in line for line in lines), "the subscription")
            _wait(lambda: sum(": ok (baseline)" in line for line in lines) == 2, "baselines")
            change(sites, 1)  # republished: the hub notifies the followed Source's subscribers
            _wait(lambda: _same(root / "followed", followed.files()), "the notified change")
            assert any("notified: followed" in line for line in lines)
            # The other Source is not due for an hour: its copy still has the old files.
            assert tree(root / "polled") != polled.files()


def test_a_followed_source_behind_a_token_is_subscribed(tmp_path: Path) -> None:
    """`fleet add --follow --header`: the follower read each Source's Capability List without
    the Source's credentials (its syncs had them): a Source that asks for them was never
    subscribed ("follow-unavailable: HTTP 401" at every refresh)."""
    root = tmp_path / "fleet"
    with (
        run_hub(fast_config(), tmp_path / "hub.sqlite") as hub,
        many_sources(tmp_path, ["127.0.0.2"], hub=hub) as (sites, hosts),
    ):
        (site,) = sites
        key = (site.host, site.port)
        hosts.apps[key] = behind_a_token(hosts.apps[key], "T")
        add = ("fleet", "add", "--every", "1h", "--delete", "--root", root, "--follow")
        header = ("--header", "Authorization: Bearer T")
        assert cli(*add, site.url, "--name", "guarded", *header).exit_code == 0
        with _fleet_run(root) as lines:
            _wait(lambda: any("subscribed" in line for line in lines), "the subscription")
            _wait(lambda: any(": ok (baseline)" in line for line in lines), "the baseline")
            change(sites, 1)
            _wait(lambda: _same(root / "guarded", site.files()), "the notified change")
        assert not any("follow-unavailable" in line for line in lines), "".join(lines)


def test_subscriptions_that_cannot_go_on_say_so(tmp_path: Path) -> None:
    """The thread that follows the Sources' notifications ended in silence on a failure of its
    own (a traceback, and Sources no longer woken by their notifications, nothing said to the
    operator). It says `notifications-stopped`, with why; the Sources still run at their times."""
    from resourcesync.fleet.follow import Notifications

    events: list[tuple[str, object]] = []
    notes = Notifications(tmp_path / "no-fleet-here", None, on_event=lambda *e: events.append(e))
    stop = threading.Event()
    thread = threading.Thread(target=notes.run, args=(stop,))
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert notes.ready.is_set()
    ((kind, why),) = events
    assert kind == "notifications-stopped" and "no fleet here" in str(why), events
