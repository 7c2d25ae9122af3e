"""`sync --follow` as a person runs it for months: what it says on the terminal and in its log
at every run. A warning about a document the Source serves unchanged is said once, not at
every poll."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from tests.hub.conftest import fast_config, run_hub
from tests.servers import serve

from .test_follow import wait_for

NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)


def _urlset(md: str, *entries: str) -> str:
    body = "\n".join(entries)
    head = '<?xml version="1.0" encoding="UTF-8"?>'
    return f"{head}\n<urlset {NS}>\n<rs:md {md}/>\n{body}\n</urlset>\n"


def _follower(base: str, dest: Path, *more: str | Path) -> subprocess.Popen[str]:
    """`sync --follow` of the site, polling every second."""
    command = [sys.executable, "-m", "resourcesync", "sync", f"{base}/capabilitylist.xml", dest]
    return subprocess.Popen(
        [*command, "--follow", "--poll-interval", "1", *more],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )


def _site(root: Path, base: str, hub: str) -> None:
    """A Source whose times have no zone (as CORE's and RSEngine's): synced with a warning."""
    (root / "r1.txt").write_text("one\n")
    (root / "r2.txt").write_text("two\n")
    (root / "capabilitylist.xml").write_text(
        _urlset(
            'capability="capabilitylist"',
            f'<url><loc>{base}/resourcelist.xml</loc><rs:md capability="resourcelist"/></url>',
            f'<url><loc>{base}/changelist.xml</loc><rs:md capability="changelist"/></url>',
            f'<url><loc>{base}/changelist.xml</loc><rs:md capability="change-notification"/>'
            f'<rs:ln rel="hub" href="{hub}"/></url>',
        )
    )
    (root / "resourcelist.xml").write_text(
        _urlset(
            'capability="resourcelist" at="2026-11-01T00:00:00"',
            f"<url><loc>{base}/r1.txt</loc><lastmod>2026-10-01T00:00:00</lastmod>"
            '<rs:md length="4"/></url>',
        )
    )
    (root / "changelist.xml").write_text(
        _urlset(
            'capability="changelist" from="2026-11-01T00:00:00"',
            f"<url><loc>{base}/r2.txt</loc>"
            '<rs:md change="created" datetime="2026-11-02T00:00:00" length="4"/></url>',
        )
    )


def _r3_created(root: Path, base: str, md: str = "") -> None:
    """The site's Change List with r3.txt created after r2.txt (`md`: more of its rs:md)."""
    (root / "changelist.xml").write_text(
        _urlset(
            'capability="changelist" from="2026-11-01T00:00:00"',
            f"<url><loc>{base}/r2.txt</loc>"
            '<rs:md change="created" datetime="2026-11-02T00:00:00" length="4"/></url>',
            f"<url><loc>{base}/r3.txt</loc>"
            f'<rs:md change="created" datetime="2026-11-03T00:00:00" length="6"{md}/></url>',
        )
    )


def _without_channel(root: Path) -> str:
    """The site's Capability List without its change notification channel; returns the one
    with it."""
    with_channel = (root / "capabilitylist.xml").read_text()
    channel = r'<url><loc>[^<]*</loc><rs:md capability="change-notification"/>.*?</url>'
    (root / "capabilitylist.xml").write_text(re.sub(channel, "", with_channel))
    return with_channel


@contextlib.contextmanager
def _source(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """The Source of `_site` served from `tmp_path/site` beside a hub; yields (site, base)."""
    root = tmp_path / "site"
    root.mkdir()
    app = Starlette(routes=[Mount("/", StaticFiles(directory=root))])
    with run_hub(fast_config(), tmp_path / "hub.sqlite") as hub, serve(app) as base:
        _site(root, base, hub)
        yield root, base


def test_a_followers_warnings_about_an_unchanged_document_are_said_once(tmp_path: Path) -> None:
    dest, log = tmp_path / "copy", tmp_path / "sync.log"
    with _source(tmp_path) as (root, base):
        proc = _follower(base, dest, "--log-file", log)
        try:

            def runs() -> int:
                return log.read_text().count("incremental via") if log.exists() else 0

            wait_for(lambda: runs() >= 3, timeout=30)
            # A new change whose digest is in base64 (the 2014 simulator's): a new warning,
            # said once too; the zone-less times still not said again.
            (root / "r3.txt").write_text("three\n")
            digest = base64.b64encode(hashlib.md5(b"three\n").digest()).decode()
            _r3_created(root, base, f' hash="md5:{digest}"')
            wait_for(lambda: (dest / "r3.txt").exists(), timeout=30)
            seen = runs()
            wait_for(lambda: runs() >= seen + 2, timeout=30)
        finally:
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
    assert (dest / "r3.txt").read_text() == "three\n", err
    logged = log.read_text()
    for said in (err, logged):
        assert said.count("incremental via") >= 5, said
        # Each document's zone-less times, once each; the base64 digests once; the wider
        # look behind the cursor that zone-less times call for, once (against the Resource
        # List, whose `at` the cursor may be).
        assert said.count("resourcelist.xml: warning: line") == 1, said
        assert said.count("has no time zone") == 2, said
        assert said.count("14 h behind the cursor") == 1, said
        assert said.count("base64") == 1, said
    assert out.count("sync ok") >= 6, out


def _is_run(event: dict[str, object]) -> bool:
    """A run's report (the first sync, a catch-up, a notification applied)."""
    return isinstance(event["detail"], dict) and "sets" in event["detail"]


def test_every_runs_warnings_stay_in_the_json_events(tmp_path: Path) -> None:
    dest = tmp_path / "copy"
    with _source(tmp_path) as (_, base):
        proc = _follower(base, dest, "--json")
        events: list[dict[str, object]] = []
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                events.append(json.loads(line))
                if sum(1 for e in events if _is_run(e)) >= 3:
                    break
        finally:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)
    runs = [e["detail"] for e in events if _is_run(e)]
    assert len(runs) >= 3
    for run in runs:
        problems = [p for s in run["sets"] for p in s["problems"]]  # type: ignore[index]
        assert any("has no time zone" in p["message"] for p in problems), run


def test_a_log_rotated_away_is_opened_again_at_its_name(tmp_path: Path) -> None:
    """logrotate renames the log (and may compress and remove it): the follower's next lines
    go to a new file at the name it was given, not to the renamed one."""
    dest, log, rotated = tmp_path / "copy", tmp_path / "sync.log", tmp_path / "sync.log.1"
    with _source(tmp_path) as (_, base):
        proc = _follower(base, dest, "--log-file", log)
        try:
            wait_for(lambda: log.exists() and "incremental via" in log.read_text(), timeout=30)
            log.rename(rotated)
            wait_for(lambda: log.exists() and "incremental via" in log.read_text(), timeout=30)
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "baseline via" in rotated.read_text()
    # The follower's last words (it unsubscribes as it stops) are in the new file only.
    assert "unsubscribed" in log.read_text() and "unsubscribed" not in rotated.read_text()


def test_a_quiet_follower_says_only_what_went_wrong(tmp_path: Path) -> None:
    """`-q` with `--follow`: nothing for the runs that went well, nor for subscriptions and
    renewals; a Source out is still said. The log keeps everything."""
    dest, log = tmp_path / "copy", tmp_path / "sync.log"
    with _source(tmp_path) as (root, base):
        proc = _follower(base, dest, "-q", "--log-file", log)
        try:

            def logged(what: str) -> bool:
                return log.exists() and what in log.read_text()

            wait_for(lambda: logged("incremental via"), timeout=30)
            kept = (root / "changelist.xml").read_bytes()
            (root / "changelist.xml").unlink()  # the Source's Change List is gone: 404
            wait_for(lambda: logged("source-unavailable"), timeout=30)
            (root / "changelist.xml").write_bytes(kept)
        finally:
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out == "", out
    assert "source unavailable" in err, err
    for quiet in ("subscribed", "via lists", "warning", "sync ok"):
        assert quiet not in err, err
    assert "subscribed" in log.read_text() and "warning" in log.read_text()


def test_a_dry_run_does_not_follow(tmp_path: Path) -> None:
    """A follower subscribes at the Source's hubs (a change there) and applies what they
    announce: `--dry-run` with `--follow` is refused before anything is asked or written."""
    from tests.destination.helpers import cli

    dest = tmp_path / "copy"
    result = cli("sync", "http://127.0.0.1:9/", dest, "--follow", "--dry-run")
    assert result.exit_code == 2, result.output
    assert "cannot be given with --follow" in result.stderr
    assert not dest.exists()


def test_a_source_without_a_channel_is_followed_by_its_change_list(tmp_path: Path) -> None:
    """Most Sources offer no change notification channel. `sync --follow` synced once and
    stopped ("offers no change notification channel"); it follows such a Source by reading its
    Change List every --poll-interval, says so once, and subscribes when the Source starts
    offering a channel (looked for at every --check-interval)."""
    dest = tmp_path / "copy"
    with _source(tmp_path) as (root, base):
        with_channel = _without_channel(root)
        proc = _follower(base, dest, "--json", "--check-interval", "2")
        events: list[dict[str, object]] = []
        try:
            assert proc.stdout is not None
            lines = iter(proc.stdout)

            def until(what: str) -> None:
                for line in lines:
                    events.append(json.loads(line))
                    if events[-1]["event"] == what:
                        return
                raise AssertionError(f"the follower ended before {what}: {events}")

            until("no-channel")
            assert (dest / "r2.txt").read_text() == "two\n"
            (root / "r3.txt").write_text("three\n")
            _r3_created(root, base)
            wait_for(lambda: (dest / "r3.txt").exists(), timeout=30)
            (root / "capabilitylist.xml").write_text(with_channel)
            until("subscribed")
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
    (said,) = [e for e in events if e["event"] == "no-channel"]  # once, not at every check
    assert "followed by reading its Change List every 1 s" in str(said["detail"])
    assert (dest / "r3.txt").read_text() == "three\n"


def test_a_follower_keeps_its_last_reports_not_every_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower runs for months, a catch-up every few minutes: it held every report it ever
    made (each with up to 1,000 problems and 10,000 links) until it stopped. Every report goes
    to `on_event`; the last `KEPT_REPORTS` are kept and returned (10 here, for time: the
    default is 100)."""
    from resourcesync.destination import subscribe
    from resourcesync.destination.subscribe import FollowOptions, follow
    from resourcesync.destination.sync import SyncOptions

    monkeypatch.setattr(subscribe, "KEPT_REPORTS", 10)
    kept_reports = subscribe.KEPT_REPORTS
    runs: list[object] = []
    with _source(tmp_path) as (root, base):
        _without_channel(root)
        kept = follow(
            f"{base}/capabilitylist.xml",
            tmp_path / "copy",
            SyncOptions(),
            FollowOptions(poll_interval=0.01, duration=60),
            on_event=lambda kind, detail: runs.append(detail) if kind == "caught-up" else None,
            stop=_after(lambda: len(runs) > kept_reports + 20),
        )
    assert len(runs) > kept_reports + 20
    assert len(kept) == kept_reports
    assert kept[-1] is runs[-1] and kept[0] is runs[-kept_reports]


def _after(done: Callable[[], bool]) -> threading.Event:
    """An event set once `done()` holds (looked at every 10 ms, from a thread)."""
    stop = threading.Event()

    def watch() -> None:
        while not done():
            time.sleep(0.01)
        stop.set()

    threading.Thread(target=watch, daemon=True).start()
    return stop


def test_a_full_dest_is_waited_out_not_the_end_of_the_follower(tmp_path: Path) -> None:
    """DEST's disk fills while following (played by RLIMIT_FSIZE, as tests/test_full_disk.py
    does): the follower stopped for good ("cannot write a state database … free some space and
    run again"). It says so (`dest-unwritable`, never `caught-up`), tries again with backoff,
    and once there is room the change is in the copy."""
    import resource

    dest = tmp_path / "copy"
    with _source(tmp_path) as (root, base):
        _without_channel(root)
        command = [sys.executable, "-m", "resourcesync", "sync", f"{base}/capabilitylist.xml"]
        proc = subprocess.Popen(
            [*command, dest, "--follow", "--poll-interval", "1", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGXFSZ, signal.SIG_IGN),
        )
        events: list[dict[str, Any]] = []
        try:
            assert proc.stdout is not None
            lines = iter(proc.stdout)

            def until(what: str) -> dict[str, Any]:
                for line in lines:
                    events.append(json.loads(line))
                    if events[-1]["event"] == what:
                        return events[-1]
                raise AssertionError(f"the follower ended before {what}: {events}")

            until("caught-up")  # following (its state opened once it began)
            # The disk full: no file of the process may grow past 1,000 bytes.
            limit = resource.RLIM_INFINITY
            resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (1000, limit))
            (root / "r3.txt").write_text("three\n")
            _r3_created(root, base)
            full = until("dest-unwritable")
            assert "free some space and run again" in full["detail"]["reason"], full
            assert not any(
                e["event"] == "caught-up" and e["detail"]["sets"][0]["changes"] for e in events
            ), events
            resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (limit, limit))
            while not (until("caught-up")["detail"]["ok"] and (dest / "r3.txt").exists()):
                pass
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "Traceback" not in err, err
        # The copy is whole: what the run cut short left nothing behind.
        audit = subprocess.run([*command, dest], capture_output=True, text=True)
        assert audit.returncode == 0, audit.stdout + audit.stderr
    assert (dest / "r3.txt").read_text() == "three\n"


def test_a_damaged_state_stops_the_follower_with_one_line(tmp_path: Path) -> None:
    """The copy's state found damaged while following (the file replaced by one that is not a
    database between two catch-ups): the follower's thread ended on a traceback. What mends it
    (`sync --repair`) needs the copy the follower holds, and no wait mends it: the follower
    stops with the line `sync` says (the file, "is damaged", `--repair`), and the repair then
    makes the copy whole."""
    import pytest

    from resourcesync.destination.subscribe import FollowOptions, follow
    from resourcesync.destination.sync import SyncOptions, audit, sync
    from resourcesync.errors import StateDamaged

    dest = tmp_path / "copy"
    state = dest / ".resourcesync" / "state.sqlite"
    caught_up = 0

    def on_event(kind: str, detail: Any) -> None:
        nonlocal caught_up
        if kind == "caught-up":
            caught_up += 1
            if caught_up == 1:
                garbage = state.with_name("garbage")
                garbage.write_bytes(b"not a database " * 500)
                os.replace(garbage, state)

    with _source(tmp_path) as (root, base):
        _without_channel(root)
        source = f"{base}/capabilitylist.xml"
        with pytest.raises(StateDamaged) as stopped:
            follow(
                source,
                dest,
                SyncOptions(),
                FollowOptions(poll_interval=0.05, duration=60),
                on_event=on_event,
            )
        line = str(stopped.value)
        assert str(state) in line and "is damaged" in line and "--repair" in line, line
        assert caught_up == 1
        assert sync(source, dest, SyncOptions(repair=True)).ok
        assert audit(source, dest).ok
    assert (dest / "r2.txt").read_text() == "two\n"


def test_retry_in_is_when_the_follower_tries_again(tmp_path: Path) -> None:
    """A follower that polls every 0.2 s, with a backoff of a minute: it tries again at the
    next poll, and `retry_in` said the minute."""
    from resourcesync.destination.subscribe import FollowOptions, follow
    from resourcesync.destination.sync import SyncOptions

    unavailable: list[dict[str, Any]] = []
    done = threading.Event()

    with _source(tmp_path) as (root, base):
        _without_channel(root)

        def on_event(kind: str, detail: Any) -> None:
            if kind == "caught-up" and not unavailable:
                (root / "changelist.xml").unlink(missing_ok=True)  # the Source fails to answer
            elif kind == "source-unavailable":
                unavailable.append(detail)
                if len(unavailable) == 3:
                    done.set()

        follow(
            f"{base}/capabilitylist.xml",
            tmp_path / "copy",
            SyncOptions(),
            FollowOptions(poll_interval=0.2, retry_backoff=60, duration=60),
            on_event=on_event,
            stop=done,
        )
    assert len(unavailable) == 3
    assert all(0 <= d["retry_in"] <= 0.2 for d in unavailable), unavailable
