"""The habits rsync and rclone users bring to `sync` (issue 14 points 8, 11, 12): a dry run
that lists what it would do and does not contradict itself, modification times from
`<lastmod>`, no phantom pending deletions after a fresh baseline, `-v` and `-q`."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from resourcesync.sitemap import read_document
from tests.destination.helpers import cli, cli_json, published_source, set_report, tree


def _lastmods(out: Path) -> dict[str, float]:
    """Each resource's published `<lastmod>`: the Resource List's, then the Change List's
    (a re-run may publish the Change List only)."""
    found: dict[str, float] = {}
    for name in ("resourcelist.xml", "changelist.xml"):
        _, entries = read_document(out / "set1" / name)
        found.update({e.loc.rsplit("/", 1)[1]: e.lastmod.timestamp() for e in entries if e.lastmod})
    return found


def test_dry_run_lists_what_it_would_do_and_agrees_with_itself(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    files = {"a.txt": b"a", "b.txt": b"b", "c.txt": b"c"}
    with published_source(tmp_path, files) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        (src.data / "a.txt").unlink()
        (src.data / "b.txt").write_bytes(b"b, changed")
        (src.data / "new.txt").write_bytes(b"new")
        src.publish()
        before = tree(dest)
        code, summary = cli_json("sync", src.root, dest, "--dry-run", "--delete")
        s = set_report(summary)
        assert code == 0, summary
        assert s["would"] == {
            "created": [src.root + "new.txt"],
            "updated": [src.root + "b.txt"],
            "deleted": [src.root + "a.txt"],
        }
        assert (s["deleted"], s["pending_deletes"]) == (1, 0)
        # Without --delete the deletion would be kept pending: said once, not as deleted.
        code, summary = cli_json("sync", src.root, dest, "--dry-run")
        s = set_report(summary)
        assert (s["deleted"], s["pending_deletes"]) == (0, 1)
        assert s["would"]["pending"] == [src.root + "a.txt"]
        result = cli("sync", src.root, dest, "--dry-run", "--delete")
        lines = result.stdout.splitlines()
        assert f"+ would create {src.root}new.txt → new.txt" in lines
        assert f"* would update {src.root}b.txt → b.txt" in lines
        assert f"- would delete {src.root}a.txt" in lines
        assert tree(dest) == before
        # The real run does what the dry run said.
        result = cli("sync", src.root, dest, "--delete", "-v")
        assert result.exit_code == 0
        *actions, summary_line = result.stdout.splitlines()
        assert sorted(actions) == sorted(
            [
                f"+ created {src.root}new.txt → new.txt",
                f"* updated {src.root}b.txt → b.txt",
                f"- deleted {src.root}a.txt",
            ]
        )
        # The run ends with its one summary line (issue 14.7).
        assert summary_line.startswith("resourcesync: sync ok: 2 fetched, 0 unchanged, 1 deleted;")
        assert tree(dest) == tree(src.data)


def test_quiet_prints_only_errors(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"a.txt": b"a"}) as src:
        result = cli("sync", src.root, dest, "-q")
        assert result.exit_code == 0
        assert (result.stdout, result.stderr) == ("", "")
        (src.data / "b.txt").write_bytes(b"b")
        src.publish()
        (src.out / "set1" / "capabilitylist.xml").unlink()
        result = cli("sync", src.root, dest, "-q")
        assert result.exit_code == 2 and result.stderr.strip()


def test_modification_times_come_from_lastmod(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_bytes(b"a")
    os.utime(tmp_path / "data" / "a.txt", (1_000_000_000, 1_000_000_000))
    with published_source(tmp_path, {"d/b.txt": b"b"}) as src:
        (src.data / "c.txt").write_bytes(b"c")
        src.publish()
        assert cli("sync", src.root, dest).exit_code == 0
        want = _lastmods(src.out)
        assert want["a.txt"] == 1_000_000_000
        for name, rel in (("a.txt", "a.txt"), ("b.txt", "d/b.txt"), ("c.txt", "c.txt")):
            assert abs((dest / rel).stat().st_mtime - want[name]) < 1e-3, rel
        other = tmp_path / "other"
        assert cli("sync", src.root, other, "--no-times").exit_code == 0
        assert (other / "a.txt").stat().st_mtime > 1_000_000_000 + 86400


def test_a_fresh_baseline_leaves_no_phantom_pending_deletions(tmp_path: Path) -> None:
    """The Source's Change List, replayed after its Resource List, deletes what this copy
    never held: nothing is pending, now or in the next run (issue 14.12)."""
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"a.txt": b"a", "b.txt": b"b"}) as src:
        (src.data / "b.txt").unlink()
        (src.data / "c.txt").write_bytes(b"c")
        src.publish()
        for _ in range(2):
            code, summary = cli_json("sync", src.root, dest)
            assert code == 0, summary
            assert set_report(summary)["pending_deletes"] == 0, summary
        assert tree(dest) == {"a.txt": b"a", "c.txt": b"c"}


def test_two_syncs_of_one_copy_do_not_run_at_once(tmp_path: Path) -> None:
    """DEST is locked as `publish` locks OUTDIR (issue 14.13): a second sync stops at once
    with one line, the first completes, and the lock dies with its holder."""
    import subprocess
    import sys
    import time

    dest = tmp_path / "dest"
    files = {f"f{i}.txt": b"x" * i for i in range(12)}
    with published_source(tmp_path, files, delay=0.4) as src:
        first = subprocess.Popen(
            [sys.executable, "-m", "resourcesync", "sync", src.root, str(dest), "--transfers", "1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 30
            while not list(dest.glob("f*.txt")) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert list(dest.glob("f*.txt")), "the first sync never started"
            result = cli("sync", src.root, dest)
            assert result.exit_code == 2
            assert "another sync is running" in result.stderr
            assert len(result.stderr.strip().splitlines()) == 1
            assert first.wait(timeout=60) == 0
        finally:
            first.kill()
            first.wait()
        assert tree(dest) == files
        # Killed holders leave no lock behind.
        again = subprocess.Popen(
            [sys.executable, "-m", "resourcesync", "sync", src.root, str(dest), "--baseline"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)
        again.kill()
        again.wait()
        assert cli("sync", src.root, dest).exit_code == 0


def test_max_delete_keeps_a_copy_whose_source_suddenly_lists_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    files = {f"f{i}.txt": b"x" for i in range(5)}
    with published_source(tmp_path, files) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        for name in files:
            (src.data / name).unlink()
        # A Source that does publish it (told to, or not resourcesync: ours refuses by default).
        src.sets[0].allow_empty = True
        src.publish()
        code, summary = cli_json("sync", src.root, dest, "--delete", "--max-delete", "3")
        s = set_report(summary)
        assert code == 1, summary
        assert "5 deletions planned, more than --max-delete 3" in s["incomplete"]
        assert (s["deleted"], s["pending_deletes"]) == (0, 5)
        assert tree(dest) == files
        args = ("--delete", "--max-delete", "5", "--allow-empty")
        code, summary = cli_json("sync", src.root, dest, *args)
        assert code == 0 and tree(dest) == {}, summary


def test_a_source_that_suddenly_lists_nothing_empties_no_copy_by_default(tmp_path: Path) -> None:
    # Unison's `confirmbigdeletes`: a run that would delete every resource the copy holds and
    # fetch none is what a Source that lost its data publishes (a database restored empty, a
    # volume that did not mount). With --delete it deletes nothing, keeps the deletions
    # pending and exits 1, incremental or baseline, until --allow-empty says it is meant.
    dest = tmp_path / "dest"
    files = {f"f{i}.txt": b"x" for i in range(5)}
    with published_source(tmp_path, files) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        # Fewer resources is not an empty Source: four of five go as usual.
        for name in list(files)[1:]:
            (src.data / name).unlink()
        src.publish()
        code, summary = cli_json("sync", src.root, dest, "--delete")
        assert code == 0 and tree(dest) == {"f0.txt": b"x"}, summary
        (src.data / "f0.txt").unlink()
        src.sets[0].allow_empty = True
        src.publish()
        for extra in ((), ("--baseline",), ("--dry-run",)):
            code, summary = cli_json("sync", src.root, dest, "--delete", *extra)
            s = set_report(summary)
            assert code == 1, (extra, summary)
            assert "the Source no longer lists any resource this copy holds (1)" in s["incomplete"]
            assert "--allow-empty" in s["incomplete"]
            assert (s["deleted"], s["pending_deletes"]) == (0, 1), extra
            assert tree(dest) == {"f0.txt": b"x"}, extra
        result = cli("sync", src.root, dest, "--delete")
        assert result.exit_code == 1
        said = result.stderr + result.stdout
        assert "--allow-empty" in said and "1 deletion pending" in said
        # Held back for the reason said, not for want of --delete.
        assert "use --delete" not in said and "(--delete)" not in said
        # Without --delete nothing is deleted anyway: pending, as for any deletion.
        code, summary = cli_json("sync", src.root, dest)
        assert set_report(summary)["incomplete"] is None
        assert "1 deletion pending (use --delete)" in cli("sync", src.root, dest).stderr
        code, summary = cli_json("sync", src.root, dest, "--delete", "--allow-empty")
        assert code == 0 and tree(dest) == {}, summary
        # An empty copy following an empty Source is in sync.
        code, summary = cli_json("sync", src.root, dest, "--delete")
        assert code == 0, summary


def test_the_token_can_come_from_the_environment(tmp_path: Path, monkeypatch: Any) -> None:
    seen: list[str | None] = []

    def wrap(app: Any, recorder: Any) -> Any:
        async def guarded(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                headers = dict(scope["headers"])
                seen.append((headers.get(b"authorization") or b"").decode() or None)
            await app(scope, receive, send)

        return guarded

    monkeypatch.setenv("RESOURCESYNC_TOKEN", "s3cret")
    with published_source(tmp_path, {"a.txt": b"a"}, wrap=wrap) as src:
        assert cli("sync", src.root, tmp_path / "dest").exit_code == 0
    assert seen and all(v == "Bearer s3cret" for v in seen), seen


def test_repair_fixes_what_audit_finds(tmp_path: Path) -> None:
    """Issue 14.9: audit says what to run, and `sync --repair` makes the copy right again —
    a missing file, one changed in place at the same size, one the Source no longer lists."""
    dest = tmp_path / "dest"
    files = {"a.txt": b"aaaa", "b.txt": b"bbbb", "c.txt": b"cccc"}
    with published_source(tmp_path, files) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        (dest / "a.txt").unlink()
        (dest / "b.txt").write_bytes(b"BBBB")  # same size: only a digest tells
        (src.data / "c.txt").unlink()
        src.publish()
        assert cli("sync", src.root, dest).exit_code == 0  # c.txt pending deletion
        result = cli("audit", src.root, dest)
        assert result.exit_code == 1
        assert f"to repair: resourcesync sync {src.root} {dest} --repair --delete" in result.stdout
        assert cli("sync", src.root, dest, "--repair", "--delete").exit_code == 0
        assert tree(dest) == {"a.txt": b"aaaa", "b.txt": b"bbbb"}
        assert cli("audit", src.root, dest).exit_code == 0


def test_ctrl_c_and_sigterm_stop_a_sync_with_one_line(tmp_path: Path) -> None:
    """Issue 14.4: SIGINT and SIGTERM stop a sync cleanly — one line, exit 130 or 143, no
    traceback — and the next run completes the copy."""
    import signal
    import subprocess
    import sys
    import time

    # 15 rounds of 4 requests at 0.3 s: the signal lands inside the run even when this
    # machine is busy enough to see the first file late.
    files = {f"f{i:02}.txt": b"x" * i for i in range(60)}
    with published_source(tmp_path, files, delay=0.3) as src:
        for sig, code, word in (
            (signal.SIGINT, 130, "interrupted"),
            (signal.SIGTERM, 143, "terminated"),
        ):
            dest = tmp_path / f"dest-{code}"
            proc = subprocess.Popen(
                [sys.executable, "-m", "resourcesync", "sync", src.root, str(dest)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            deadline = time.monotonic() + 30
            while not list(dest.glob("f*.txt")) and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == code, err
            assert err.strip() == f"resourcesync: {word}", err
            assert cli("sync", src.root, dest).exit_code == 0
            assert tree(dest) == files


def test_a_copy_kept_as_it_is_takes_the_time_the_source_now_gives(tmp_path: Path) -> None:
    """Only the time changed at the Source (its list gives a.txt a new `<lastmod>`, the same
    bytes): the copy is not fetched again but takes the new time, as rsync -t and rclone do —
    not with `--no-times`, not in a dry run."""
    copies = {name: tmp_path / name for name in ("times", "no-times")}
    with published_source(tmp_path, {"a.txt": b"a", "b.txt": b"b"}) as src:
        for name, dest in copies.items():
            extra = ("--no-times",) if name == "no-times" else ()
            assert cli("sync", src.root, dest, *extra).exit_code == 0
        listed = src.out / "set1" / "resourcelist.xml"
        text, n = re.subn(
            r"(a\.txt</loc>\s*<lastmod>)[^<]+", r"\g<1>2001-09-09T01:46:40Z", listed.read_text()
        )
        assert n == 1
        listed.write_text(text)
        before = (copies["times"] / "a.txt").stat().st_mtime
        assert cli("sync", src.root, copies["times"], "--baseline", "--dry-run").exit_code == 0
        assert (copies["times"] / "a.txt").stat().st_mtime == before
        for name, dest in copies.items():
            extra = ("--no-times",) if name == "no-times" else ()
            code, summary = cli_json("sync", src.root, dest, "--baseline", *extra)
            s = set_report(summary)
            assert code == 0 and (s["fetched"], s["unchanged"]) == (0, 2), summary
        assert (copies["times"] / "a.txt").stat().st_mtime == 1_000_000_000
        assert (copies["no-times"] / "a.txt").stat().st_mtime > 1_000_000_000 + 86400
        assert (copies["times"] / "b.txt").stat().st_mtime == _lastmods(src.out)["b.txt"]
        # A list without digests or lengths: each copy is asked for conditionally, and a 304
        # keeps it.
        text = re.sub(r' (hash|length)="[^"]+"', "", listed.read_text())
        text, n = re.subn(r"(b\.txt</loc>\s*<lastmod>)[^<]+", r"\g<1>2002-01-01T00:00:00Z", text)
        assert n == 1
        listed.write_text(text)
        code, summary = cli_json("sync", src.root, copies["times"], "--baseline")
        s = set_report(summary)
        assert code == 0 and (s["fetched"], s["not_modified"]) == (0, 2), summary
        assert (copies["times"] / "b.txt").stat().st_mtime == 1_009_843_200
        assert (copies["times"] / "a.txt").stat().st_mtime == 1_000_000_000


def test_a_copy_edited_here_is_not_taken_for_intact_by_its_size(tmp_path: Path) -> None:
    """A change the Source lists that ends where the copy's bytes were (edited, then edited
    back): the copy is kept if it is still what was fetched. One edited here to the same size
    used to pass for it (its size was all that was looked at) and the run said ok over it;
    its time, not the Source's, now has its digest checked, and it is fetched again."""
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"a.txt": b"alpha", "b.txt": b"beta"}) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        (dest / "a.txt").write_bytes(b"ALPHA")  # the same size, another time
        edited = (dest / "a.txt").stat().st_mtime - 3600
        os.utime(dest / "a.txt", (edited, edited))
        for body in (b"alph2", b"alpha"):
            (src.data / "a.txt").write_bytes(body)
            src.publish()
        code, summary = cli_json("sync", src.root, dest, "--dry-run")
        assert set_report(summary)["would"]["updated"] == [src.root + "a.txt"], summary
        code, summary = cli_json("sync", src.root, dest)
        s = set_report(summary)
        assert code == 0 and (s["mode"], s["fetched"]) == ("incremental", 1), summary
        assert (dest / "a.txt").read_bytes() == b"alpha"
        assert cli("audit", src.root, dest).exit_code == 0
