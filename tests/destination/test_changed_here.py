"""A copy changed here, not at the Source: files deleted, truncated, edited, replaced by a
directory or by a link out of the copy. An incremental run learns nothing of these from the
Source's Change Lists; it used to say ok over a copy with a file missing (`audit` said NOT in
sync). Every incremental run now looks at each file it holds (`destination/held.py`)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from resourcesync.w3cdt import parse_w3c
from tests.destination.helpers import cli, cli_json, published_source, set_report

FILES = {
    "a.txt": b"alpha",
    "b.txt": b"bravo",
    "c.txt": b"charlie",
    "d.txt": b"delta",
    "e.txt": b"echo",
    "sub/f.txt": b"foxtrot",
}


def _lastmod(dest: Path, name: str) -> float:
    """The `<lastmod>` the copy recorded for a file (the time `--times` gave it)."""
    with contextlib.closing(sqlite3.connect(dest / ".resourcesync" / "state.sqlite")) as db:
        (text,) = db.execute("SELECT lastmod FROM resources WHERE path = ?", (name,)).fetchone()
    return parse_w3c(text).timestamp()


def test_an_incremental_run_fetches_again_what_changed_here(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        (dest / "a.txt").unlink()  # deleted here
        (dest / "b.txt").write_bytes(b"br")  # truncated
        (dest / "c.txt").write_bytes(b"CHARLIE")  # edited to the same size, later
        later = _lastmod(dest, "c.txt") + 3600
        os.utime(dest / "c.txt", (later, later))
        os.utime(dest / "d.txt", (later, later))  # touched only: the same bytes
        (dest / "sub" / "f.txt").unlink()
        (dest / "sub" / "f.txt").mkdir()  # a directory where the file was
        before = {p: p.stat().st_mtime for p in dest.rglob("*") if ".resourcesync" not in str(p)}

        code, summary = cli_json("sync", src.root, dest, "--dry-run")
        s = set_report(summary)
        # The directory in f.txt's place is not ours to remove: refused, in the dry run too.
        assert code == 1 and s["mode"] == "incremental", summary
        assert sorted(s["would"]["updated"]) == [src.root + n for n in ("a.txt", "b.txt", "c.txt")]
        assert (s["changed_here"], s["refused"]) == (4, 1), summary
        assert not (dest / "a.txt").exists() and (dest / "b.txt").read_bytes() == b"br"
        assert {p: p.stat().st_mtime for p in before if p.exists()} == before

        code, summary = cli_json("sync", src.root, dest)
        s = set_report(summary)
        assert code == 1 and not summary["ok"], summary
        assert (s["fetched"], s["changed_here"], s["refused"]) == (3, 4, 1), summary
        messages = {p["uri"].rsplit("/", 1)[1]: p["message"] for p in s["problems"]}
        assert "changed here (missing)" in messages["a.txt"]
        assert "changed here (its size changed)" in messages["b.txt"]
        assert "changed here (its content changed)" in messages["c.txt"]
        assert "d.txt" not in messages  # its digest is what was written: kept
        assert "refused" in messages["f.txt"]
        for name in ("a.txt", "b.txt", "c.txt", "d.txt", "e.txt"):
            assert (dest / name).read_bytes() == FILES[name], name
            assert (dest / name).stat().st_mtime == _lastmod(dest, name), name  # --times
        assert cli("audit", src.root, dest).exit_code == 1  # f.txt: still not a file

        (dest / "sub" / "f.txt").rmdir()
        code, summary = cli_json("sync", src.root, dest)
        assert code == 0 and summary["ok"], summary
        assert (dest / "sub" / "f.txt").read_bytes() == b"foxtrot"
        assert cli("audit", src.root, dest).exit_code == 0
        # Nothing changed here any more: nothing fetched, nothing said.
        code, summary = cli_json("sync", src.root, dest)
        s = set_report(summary)
        assert code == 0 and (s["fetched"], s["changed_here"], s["problems"]) == (0, 0, [])


def test_a_link_out_of_the_copy_in_a_files_place_is_not_taken_for_it(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"alpha")  # the same bytes, out of the copy
    with published_source(tmp_path, {"a.txt": b"alpha"}) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        (dest / "a.txt").unlink()
        (dest / "a.txt").symlink_to(outside)
        code, summary = cli_json("sync", src.root, dest)
        s = set_report(summary)
        assert code == 1 and (s["changed_here"], s["refused"]) == (1, 1), summary
        assert outside.read_bytes() == b"alpha"  # never written through


def test_what_the_source_serves_differently_now_is_not_taken_unlisted(tmp_path: Path) -> None:
    """A file deleted here whose Source file has changed since, without a Change List that
    says so yet: the bytes served are not what the copy recorded, so the run fails it (and
    says so) rather than take bytes no list describes; once the Source publishes, it is
    fetched as listed."""
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"a.txt": b"alpha", "b.txt": b"bravo"}) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        (dest / "a.txt").unlink()
        (src.data / "a.txt").write_bytes(b"alpha, later")  # not published yet
        code, summary = cli_json("sync", src.root, dest)
        s = set_report(summary)
        assert code == 1 and (s["changed_here"], s["failed"]) == (1, 1), summary
        assert not (dest / "a.txt").exists()
        src.publish()
        code, summary = cli_json("sync", src.root, dest)
        assert code == 0, summary
        assert (dest / "a.txt").read_bytes() == b"alpha, later"
        assert cli("audit", src.root, dest).exit_code == 0


def test_left_out_pending_and_no_times(tmp_path: Path) -> None:
    """Files left out by --exclude are not looked at; a deletion kept pending is not fetched
    back; with --no-times the size is what is looked at."""
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"a.txt": b"alpha", "b.txt": b"bravo", "c.txt": b"c"}) as src:
        assert cli("sync", src.root, dest, "--no-times").exit_code == 0
        (src.data / "b.txt").unlink()
        src.publish()
        code, summary = cli_json("sync", src.root, dest, "--no-times")
        assert set_report(summary)["pending_deletes"] == 1, summary
        (dest / "a.txt").unlink()
        (dest / "b.txt").unlink()  # the Source deleted it too: nothing to fetch back
        (dest / "c.txt").write_bytes(b"C")  # same size, and --no-times: not seen
        code, summary = cli_json("sync", src.root, dest, "--no-times", "--exclude", "a.txt")
        s = set_report(summary)
        assert code == 0 and (s["fetched"], s["changed_here"]) == (0, 0), summary
        assert not (dest / "a.txt").exists()
        # Taken again: compared with the Resource List (the run with --exclude passed it by).
        code, summary = cli_json("sync", src.root, dest, "--no-times")
        s = set_report(summary)
        assert code == 0 and (s["mode"], s["fetched"]) == ("baseline", 1), summary
        assert (dest / "a.txt").read_bytes() == b"alpha"


def test_repair_finds_the_files_put_here_and_delete_removes_them(tmp_path: Path) -> None:
    """Files of DEST that no URI of the Source maps to and the copy does not hold: `audit`
    calls them extra and says `--repair --delete` repairs; that run left them in place (only
    URIs the copy held were looked at), and audit kept saying NOT in sync."""
    dest, backups = tmp_path / "dest", tmp_path / "backups"
    with published_source(tmp_path, {"a.txt": b"alpha", "sub/b.txt": b"bravo"}) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        (dest / "extra.txt").write_bytes(b"put here")
        (dest / "sub" / "more").mkdir()
        (dest / "sub" / "more" / "junk.txt").write_bytes(b"junk")
        (dest / "notes.log").write_bytes(b"left out")
        assert cli("audit", src.root, dest, "--exclude", "*.log").exit_code == 1

        code, summary = cli_json("sync", src.root, dest, "--repair", "--exclude", "*.log")
        s = set_report(summary)
        assert code == 0 and (s["mode"], s["strays"], s["deleted"]) == ("baseline", 2, 0)
        assert (dest / "extra.txt").exists()

        code, summary = cli_json("sync", src.root, dest, "--repair", "--delete", "--dry-run")
        s = set_report(summary)
        assert s["mode"] == "baseline", summary  # a dry run of a baseline plans a baseline
        assert sorted(s["would"]["deleted"]) == sorted(
            f"file {dest.resolve() / p}" for p in ("extra.txt", "notes.log", "sub/more/junk.txt")
        )
        assert (dest / "extra.txt").exists()

        limited = ("--repair", "--delete", "--max-delete", "1", "--exclude", "*.log")
        code, summary = cli_json("sync", src.root, dest, *limited)
        assert code == 1 and (dest / "extra.txt").exists(), summary  # 2 > 1: none deleted

        args = ("--repair", "--delete", "--backup-dir", backups, "--exclude", "*.log")
        code, summary = cli_json("sync", src.root, dest, *args)
        s = set_report(summary)
        assert code == 0 and s["deleted"] == 2, summary
        assert not (dest / "extra.txt").exists() and not (dest / "sub" / "more").exists()
        assert (backups / "extra.txt").read_bytes() == b"put here"
        assert (backups / "sub" / "more" / "junk.txt").read_bytes() == b"junk"
        assert (dest / "notes.log").exists() and (dest / "sub" / "b.txt").exists()
        assert cli("audit", src.root, dest, "--exclude", "*.log").exit_code == 0
