"""A copy is kept under the mappings it was made with (`destination/remap.py`): a run given
other ones — a `--map` forgotten on one run, or added to reorganise the copy — put what changed
under them, left the rest where it was, and said ok over a copy split across two layouts
(found by trying). It now stops and says so; `--repair` moves the copy to the new ones."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.destination.helpers import STATE, cli, published_source, snapshot, tree

FILES = {f"d/f{i:02}.txt": f"file {i}\n".encode() for i in range(12)} | {"top.txt": b"top\n"}


def test_a_forgotten_map_stops_the_run_and_changes_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "copy"
    with published_source(tmp_path, FILES) as src:
        mapped = ("--map", f"{src.base}/d/={dest / 'docs'}")
        assert cli("sync", src.root, dest, *mapped).exit_code == 0
        assert set(tree(dest)) == {"top.txt"} | {f"docs/f{i:02}.txt" for i in range(12)}
        (src.data / "d/f03.txt").write_bytes(b"changed\n")
        src.publish()
        before = snapshot(dest)
        for extra in ([], ["--dry-run"], ["--baseline"], ["--delete"]):
            r = cli("sync", src.root, dest, *extra)  # the --map forgotten
            assert r.exit_code == 2, (extra, r.stdout, r.stderr)
            (line,) = r.stderr.strip().splitlines()
            assert "12 files this copy holds are not where these mappings put them" in line
            assert "--repair" in line and str(dest) in line, line
            assert snapshot(dest) == before
        # `audit` without it: the same line, not 12 missing and 12 extra and the advice to
        # repair (which would move the copy to the mappings forgotten).
        r = cli("audit", src.root, dest)
        assert r.exit_code == 2, r.stdout
        assert "12 files this copy holds are not where these mappings put them" in r.stderr
        r = cli("sync", src.root, dest, *mapped)
        assert r.exit_code == 0, r.stderr
        assert (dest / "docs/f03.txt").read_bytes() == b"changed\n"
        assert not (dest / "d").exists()
        assert cli("audit", src.root, dest, *mapped).exit_code == 0


def test_repair_moves_the_copy_to_the_new_mappings(tmp_path: Path) -> None:
    dest = tmp_path / "copy"
    with published_source(tmp_path, FILES) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        mapped = ("--map", f"{src.base}/d/={dest / 'docs'}")
        src.recorder.hits.clear()
        r = cli("sync", src.root, dest, *mapped, "--repair", "--delete", "--json")
        assert r.exit_code == 0, r.stderr
        (report,) = json.loads(r.stdout)["sets"]
        said = [p["message"] for p in report["problems"]]
        assert any("12 files moved to where they map now" in m for m in said), said
        assert src.resource_gets() == {}  # renamed, not fetched again
        assert tree(dest) == {"top.txt": b"top\n"} | {
            f"docs/f{i:02}.txt": f"file {i}\n".encode() for i in range(12)
        }
        assert not (dest / "d").exists() or not any((dest / "d").rglob("*"))
        with sqlite3.connect(dest / STATE / "state.sqlite") as db:
            paths = {p for (p,) in db.execute("SELECT path FROM resources")}
        db.close()
        assert paths == {"top.txt"} | {f"docs/f{i:02}.txt" for i in range(12)}
        # Under the new mappings from now on: a deletion finds its file.
        (src.data / "d/f05.txt").unlink()
        src.publish()
        assert cli("sync", src.root, dest, *mapped, "--delete").exit_code == 0
        assert not (dest / "docs/f05.txt").exists()
        assert cli("audit", src.root, dest, *mapped).exit_code == 0
        assert cli("sync", src.root, dest).exit_code == 2  # and the old ones are not these


def test_mappings_that_move_nothing_held_are_taken(tmp_path: Path) -> None:
    """A `--map` for URIs the copy holds none of (another host, a part not synced yet), and a
    state from before the mappings were kept: nothing is elsewhere, the run goes on."""
    dest = tmp_path / "copy"
    with published_source(tmp_path, FILES) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        elsewhere = ("--map", f"http://127.0.0.9:1/={dest / 'other'}")
        assert cli("sync", src.root, dest, *elsewhere).exit_code == 0
        with sqlite3.connect(dest / STATE / "state.sqlite") as db:
            db.execute("DELETE FROM meta WHERE key LIKE 'mappings %'")
        db.close()
        assert cli("sync", src.root, dest).exit_code == 0
        assert cli("audit", src.root, dest).exit_code == 0


def test_a_source_that_moved_is_followed_at_its_new_address(tmp_path: Path) -> None:
    """A Source moves (http to https, a new host name: here 127.0.0.1 to localhost) and lists
    every resource under a new URI, at the place the copy holds it for the old one. Each new
    URI was refused ("maps to the same local file as …, which keeps it"), the copy kept holding
    the old ones — and a resource the Source deleted later was "never held" at its new URI:
    its file stayed, and sync said ok (found by trying). The files whose content is what the
    Source lists are its new URIs' now (nothing fetched), the one that changed at the move is
    fetched, and what happens to them next is applied."""
    import dataclasses

    dest = tmp_path / "copy"
    with published_source(tmp_path, FILES) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        moved = src.base.replace("127.0.0.1", "localhost") + "/"
        src.sets[0] = dataclasses.replace(src.sets[0], base_url=moved)
        (src.data / "d/f01.txt").write_bytes(b"changed as it moved\n")
        src.publish()
        src.recorder.hits.clear()
        r = cli("sync", moved, dest, "--json")
        assert r.exit_code == 0, r.stderr
        assert src.resource_gets() == {"/d/f01.txt": 1}
        (report,) = json.loads(r.stdout)["sets"]
        said = [p["message"] for p in report["problems"]]
        assert any("13 files held for URIs no mapping of this run covers" in m for m in said)
        assert cli("audit", moved, dest).exit_code == 0

        (src.data / "d/f00.txt").write_bytes(b"changed after the move\n")
        (src.data / "d/f02.txt").unlink()
        src.publish()
        r = cli("sync", moved, dest, "--delete")
        assert r.exit_code == 0, r.stderr
        assert (dest / "d/f00.txt").read_bytes() == b"changed after the move\n"
        assert not (dest / "d/f02.txt").exists()
        assert cli("audit", moved, dest).exit_code == 0


def test_a_source_that_moved_and_changed_all_it_lists_is_not_said_ok_until_taken(
    tmp_path: Path,
) -> None:
    """A Source moves and every file it lists changed at the move: nothing tells that its new
    URIs are the old ones', and each is refused ("maps to the same local file as …"). The
    first run said so; the next, incremental, did not look at them again and said ok over
    files that are not the Source's (seen when the move was first followed: the claim
    refusals were not remembered). Every run says it now, with the remedy, until the files
    are taken: by the next run when the Source listed its old URIs' deletions, else by
    `sync --repair`."""
    import dataclasses

    for lists_deletions in (True, False):
        base = tmp_path / str(lists_deletions)
        dest = base / "copy"
        with published_source(base, FILES) as src:
            assert cli("sync", src.root, dest).exit_code == 0
            moved = src.base.replace("127.0.0.1", "localhost") + "/"
            src.sets[0] = dataclasses.replace(src.sets[0], base_url=moved)
            if not lists_deletions:
                src.state_dir = base / "new-state"  # a new publisher: no history of the old
            for name in FILES:
                (src.data / name).write_bytes(b"changed as it moved: " + name.encode())
            src.publish()
            r = cli("sync", moved, dest, "--json")
            assert r.exit_code == 1, r.stdout
            (report,) = json.loads(r.stdout)["sets"]
            said = [p["message"] for p in report["problems"] if "same local file" in p["message"]]
            assert len(said) == len(FILES) <= report["refused"], report["problems"]
            assert all("`sync --repair` takes it" in m for m in said), said
            assert (dest / "top.txt").read_bytes() == b"top\n"
            r = cli("sync", moved, dest, "--json")
            if lists_deletions:
                # The old URIs are gone from the state (deleted at the Source): the new ones,
                # remembered as refused, are fetched.
                assert r.exit_code == 0, r.stdout
            else:
                assert r.exit_code == 1, r.stdout
                (report,) = json.loads(r.stdout)["sets"]
                assert report["mode"] == "incremental" and report["refused"] == len(FILES)
                assert cli("audit", moved, dest).exit_code == 1
                assert cli("sync", moved, dest, "--repair").exit_code == 0
            assert tree(dest) == {n: b"changed as it moved: " + n.encode() for n in FILES}
            assert cli("sync", moved, dest).exit_code == 0
            assert cli("audit", moved, dest).exit_code == 0
