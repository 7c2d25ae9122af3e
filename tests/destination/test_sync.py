"""`resourcesync sync` and `audit` end to end, against our own `publish` and server on 127.0.0.1:
baseline from lists and from dumps, incremental changes, rotation through the Change List Index
and Archive, gaps, discovery, options, audit, conditional requests, headers, concurrency.

Every server counts what it is asked (tests/destination/helpers.py `Recorder`), so "fetched
once", "nothing transferred" and "at most N at once" are measured where the bytes leave.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route

from resourcesync.source.config import PublishConfig, SetConfig
from resourcesync.source.publish import publish
from resourcesync.source.server import create_app
from tests.destination.helpers import (
    STATE,
    Recorder,
    cli,
    cli_json,
    entry,
    hand_source,
    published_source,
    set_report,
    state_rows,
    tree,
    urlset,
)
from tests.servers import serve

FILES = {
    "k1/item 1.txt": b"item one",
    "k1/item 2.txt": b"item two",
    "a.txt": b"alpha",
    "empty.bin": b"",
    "deep/er/still/z.json": b'{"z": true}',
    "東京/駅 1.txt": "日本".encode(),
    "big.bin": bytes(range(256)) * 1200,
    "odd #name%.txt": b"percent and hash",
}


# ---------------------------------------------------------------------------------------------
# Baseline


def test_baseline_via_lists_mirrors_the_published_dir(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES) as src:
        code, summary = cli_json("sync", src.root, dest, "--via", "lists")
        assert code == 0, summary
        assert tree(dest) == FILES
        s = set_report(summary)
        assert (s["mode"], s["via"], s["fetched"], s["failed"]) == ("baseline", "lists", 8, 0)
        assert s["bytes"] == sum(len(b) for b in FILES.values())
        # The server saw each resource once, by its percent-encoded URI.
        gets = src.resource_gets()
        assert sorted(gets) == sorted("/" + k for k in FILES)
        assert set(gets.values()) == {1}
        assert cli("audit", src.root, dest).exit_code == 0


def test_baseline_via_dumps_mirrors_the_published_dir(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    caps = ("resourcelist", "changelist", "resourcedump")
    # Small packages: the baseline has to read several of them.
    with published_source(tmp_path, FILES, capabilities=caps, package_size=1024) as src:
        code, summary = cli_json("sync", src.root, dest, "--via", "dumps")
        assert code == 0, summary
        s = set_report(summary)
        assert (s["mode"], s["via"], s["failed"]) == ("baseline", "dumps", 0)
        assert tree(dest) == FILES
        assert src.resource_gets() == {}  # everything came in the packages
        assert len([h for h in src.recorder.gets() if h.path.endswith(".zip")]) >= 2
        # The state knows every resource: the next run is an incremental that fetches nothing.
        (src.data / "a.txt").write_bytes(b"alpha 2")
        src.publish()
        src.recorder.reset()
        code, summary = cli_json("sync", src.root, dest)
        s = set_report(summary)
        assert (code, s["mode"], s["fetched"]) == (0, "incremental", 1)
        assert src.resource_gets() == {"/a.txt": 1}
        assert tree(dest) == {**FILES, "a.txt": b"alpha 2"}


def test_via_dumps_without_a_resource_dump_is_an_error(tmp_path: Path) -> None:
    with published_source(tmp_path, {"a.txt": b"a"}) as src:
        result = cli("sync", src.root, tmp_path / "dest", "--via", "dumps")
        assert result.exit_code == 2
        assert "Resource Dump" in result.stderr


# ---------------------------------------------------------------------------------------------
# Incremental


def test_incremental_applies_exactly_the_changes_each_uri_once_in_its_final_state(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        d = src.data
        (d / "a.txt").write_bytes(b"alpha, edited")  # edit
        (d / "k1" / "item 2.txt").unlink()  # delete
        (d / "new file.txt").write_bytes(b"created")  # create
        (d / "deep" / "er" / "still" / "z.json").rename(d / "renamed.json")  # rename
        src.publish()
        # One URI changed several times, over several publications: fetched once, last state.
        for i in range(4):
            (d / "k1" / "item 1.txt").write_bytes(b"version %d" % i)
            src.publish()
        src.recorder.reset()
        code, summary = cli_json("sync", src.root, dest)
        assert code == 0, summary
        s = set_report(summary)
        assert s["mode"] == "incremental"
        assert s["changes"] == 1 + 1 + 1 + 2 + 4  # edit, delete, create, rename, 4 edits
        assert s["fetched"] == 4 and s["failed"] == 0
        assert s["deleted"] == 0 and s["pending_deletes"] == 2
        assert src.resource_gets() == {
            "/a.txt": 1,
            "/new file.txt": 1,
            "/renamed.json": 1,
            "/k1/item 1.txt": 1,
        }
        expected = {
            **FILES,
            "a.txt": b"alpha, edited",
            "new file.txt": b"created",
            "renamed.json": b'{"z": true}',
            "k1/item 1.txt": b"version 3",
        }
        # Without --delete the deleted files stay, and are kept as pending.
        assert tree(dest) == expected
        pending = sorted(r[0] for r in state_rows(dest, "pending_deletes"))
        assert pending == [
            src.root + "deep/er/still/z.json",
            src.root + "k1/item%202.txt",
        ]
        # A run with nothing new changes nothing and keeps them pending.
        src.recorder.reset()
        code, summary = cli_json("sync", src.root, dest)
        assert (code, set_report(summary)["pending_deletes"]) == (0, 2)
        assert src.resource_gets() == {}
        # A later run with --delete applies them.
        code, summary = cli_json("sync", src.root, dest, "--delete")
        s = set_report(summary)
        assert (code, s["deleted"], s["pending_deletes"]) == (0, 2, 0)
        del expected["k1/item 2.txt"], expected["deep/er/still/z.json"]
        assert tree(dest) == expected == tree(src.data)
        assert not (dest / "deep").exists()  # emptied folders pruned
        assert state_rows(dest, "pending_deletes") == []
        assert cli("audit", src.root, dest).exit_code == 0


def test_created_then_deleted_between_runs_is_not_fetched(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"a.txt": b"a"}) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        (src.data / "brief.txt").write_bytes(b"here and gone")
        src.publish()
        (src.data / "brief.txt").unlink()
        src.publish()
        src.recorder.reset()
        code, summary = cli_json("sync", src.root, dest, "--delete")
        assert code == 0, summary
        assert src.resource_gets() == {}
        assert tree(dest) == {"a.txt": b"a"}


def test_rotation_walks_back_through_the_index_and_the_archive(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"seed.txt": b"0"}, changelist_max_entries=2) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        expected = {"seed.txt": b"0"}
        n = 0
        # Seven publications of two changes each: the open Change List now starts long after
        # the cursor, which lies in the first, archived one.
        for round_ in range(7):
            for i in range(2):
                name = f"r{round_}/f{i}.txt"
                (src.data / name).parent.mkdir(exist_ok=True)
                body = f"round {round_} file {i}".encode()
                (src.data / name).write_bytes(body)
                expected[name] = body
                n += 1
            src.publish()
            if round_ == 2:
                # A sync in the middle: its cursor lies inside a list that is closed later.
                assert cli("sync", src.root, dest).exit_code == 0
                src.recorder.reset()
        index = (src.out / "set1" / "changelist.xml").read_text()
        assert "sitemapindex" in index
        code, summary = cli_json("sync", src.root, dest)
        assert code == 0, summary
        s = set_report(summary)
        assert s["gap"] is None
        assert s["changes"] == 8  # rounds 3..6, nothing before the cursor, nothing twice
        assert s["fetched"] == 8
        gets = src.resource_gets()
        assert set(gets.values()) == {1} and len(gets) == 8
        assert tree(dest) == expected


def test_walks_back_through_the_change_list_archive(tmp_path: Path) -> None:
    """Our `publish` keeps every Change List in its index; this Source (hand-made) offers only
    the open Change List and a Change List Archive of the closed ones, in its Capability List."""
    dest = tmp_path / "dest"
    t0, t1 = "2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.publish([entry(b, "/a.txt", b"a")], at=t0)
        assert cli("sync", b + "/", dest).exit_code == 0
        # Two days of changes: the first day's list is closed and only in the archive.
        src.files["/b.txt"] = b"b"
        src.files["/a.txt"] = b"a, edited"
        closed = [
            entry(b, "/b.txt", b"b", change="created", datetime="2024-01-01T12:00:00Z"),
            {"loc": b + "/a.txt", "change": "deleted", "datetime": "2024-01-01T13:00:00Z"},
        ]
        src.docs["/changelist-day1.xml"] = urlset("changelist", closed, **{"from": t0, "until": t1})
        src.docs["/changelist-archive.xml"] = urlset(
            "changelist-archive", [{"loc": b + "/changelist-day1.xml", "from": t0, "until": t1}]
        )
        src.publish(
            [entry(b, "/a.txt", b"a, edited"), entry(b, "/b.txt", b"b")],
            at="2024-01-03T00:00:00Z",
            changes=[
                entry(b, "/a.txt", b"a, edited", change="created", datetime="2024-01-02T08:00:00Z")
            ],
            changes_from=t1,
            extra_caps=[{"loc": b + "/changelist-archive.xml", "capability": "changelist-archive"}],
        )
        src.hits.clear()
        code, summary = cli_json("sync", b + "/", dest)
        s = set_report(summary, "capabilitylist.xml")
        assert code == 0, str(s)
        assert (s["mode"], s["changes"], s["gap"]) == ("incremental", 3, None)
        assert src.hits.get("/changelist-archive.xml") == 1
        assert src.hits.get("/changelist-day1.xml") == 1
        # a.txt deleted then created again: fetched once, in its final state.
        assert (src.hits.get("/a.txt"), src.hits.get("/b.txt")) == (1, 1)
        assert tree(dest) == {"a.txt": b"a, edited", "b.txt": b"b"}


def test_a_gap_is_reported_and_baseline_recovers(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"a.txt": b"a", "b.txt": b"b"}) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        # The Source starts again from a new state: its lists restart after our cursor, so
        # the changes in between (here b.txt edited) are listed nowhere.
        (src.data / "b.txt").write_bytes(b"b, changed while nobody listed it")
        src.state_dir = tmp_path / "new-state"
        src.publish()
        (src.data / "c.txt").write_bytes(b"c")
        src.publish()
        result = cli("sync", src.root, dest)
        assert result.exit_code == 1, result.stderr
        assert "gap" in result.stderr and "--baseline" in result.stderr
        assert tree(dest) == {"a.txt": b"a", "b.txt": b"b"}  # nothing half-applied
        # The gap is reported again until it is recovered: the cursor did not move on.
        code, summary = cli_json("sync", src.root, dest)
        assert code == 1 and set_report(summary)["gap"]
        code, summary = cli_json("sync", src.root, dest, "--baseline")
        assert code == 0, summary
        assert tree(dest) == tree(src.data)
        code, summary = cli_json("sync", src.root, dest)
        assert (code, set_report(summary)["mode"]) == (0, "incremental")


def test_a_change_list_the_index_names_but_the_source_lost(tmp_path: Path) -> None:
    """The Source's closed Change Lists vanish while its index still names them: an error
    naming the missing list (exit 2), nothing applied, and `--baseline` recovers (its Resource
    List, written by every run here, and the open Change List after it are enough)."""
    dest = tmp_path / "dest"
    with published_source(
        tmp_path, {"a.txt": b"a"}, changelist_max_entries=1, resourcelist_every="always"
    ) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        for i in range(4):
            (src.data / f"n{i}.txt").write_bytes(b"%d" % i)
            src.publish()
        lost = [
            p
            for p in (src.out / "set1").rglob("changelist-*.xml")
            if p.is_file() and "archive" not in p.name and "open" not in p.name
        ]
        assert len(lost) >= 3
        for p in lost:
            p.unlink()
        result = cli("sync", src.root, dest)
        assert result.exit_code == 2
        assert "HTTP 404" in result.stderr and "/set1/changelists/" in result.stderr
        assert tree(dest) == {"a.txt": b"a"}
        code, summary = cli_json("sync", src.root, dest, "--baseline")
        assert code == 0, str(summary)
        assert tree(dest) == tree(src.data)


# ---------------------------------------------------------------------------------------------
# Discovery


def _gate(app: Any, *, block: tuple[str, ...], extra: list[Route]) -> Starlette:
    """`app` behind a few routes of our own, with some of its paths answering 404."""

    async def not_found(request: Request) -> Response:
        return PlainTextResponse("no", status_code=404)

    routes: list[Any] = [Route(p, not_found) for p in block]
    return Starlette(routes=[*extra, *routes, Mount("/", app=app)])


def _discovery_app(way: str) -> Any:
    def wrap(app: Any, recorder: Recorder) -> Any:
        caplist = "/set1/capabilitylist.xml"
        if way == "robots":
            return _gate(app, block=("/.well-known/resourcesync",), extra=[])
        if way == "link-header":

            async def page(request: Request) -> Response:
                return HTMLResponse(
                    "<html><head><title>no link here</title></head></html>",
                    headers={"Link": f'<{caplist}>; rel="resourcesync"'},
                )

            return _gate(
                app, block=("/.well-known/resourcesync", "/robots.txt"), extra=[Route("/", page)]
            )
        if way == "html-link":

            async def page(request: Request) -> Response:
                return HTMLResponse(
                    f'<html><head><link rel="stylesheet" href="/x.css">'
                    f'<link rel="resourcesync" href="{caplist}"></head></html>'
                )

            return _gate(
                app, block=("/.well-known/resourcesync", "/robots.txt"), extra=[Route("/", page)]
            )
        return app

    return wrap


@pytest.mark.parametrize(
    ("way", "how"),
    [
        ("well-known", "well-known URI"),
        ("robots", "robots.txt"),
        ("link-header", "Link header"),
        ("html-link", "HTML link"),
    ],
)
def test_discovery_four_ways(tmp_path: Path, way: str, how: str) -> None:
    dest = tmp_path / "dest"
    files = {"a.txt": b"a", "k1/item 1.txt": b"one"}
    with published_source(tmp_path, files, wrap=_discovery_app(way)) as src:
        code, summary = cli_json("sync", src.root, dest)
        assert code == 0, summary
        assert summary["how"] == how
        assert tree(dest) == files


def test_nothing_to_discover_is_an_error(tmp_path: Path) -> None:
    async def page(request: Request) -> Response:
        return HTMLResponse("<html>just a page</html>")

    with serve(Starlette(routes=[Route("/{p:path}", page)])) as base:
        result = cli("sync", base + "/", tmp_path / "dest")
        assert result.exit_code == 2
        assert "no ResourceSync here" in result.stderr
        assert "Traceback" not in result.stderr


def test_a_list_given_directly_finds_its_capability_list(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"a.txt": b"a", "k/b.txt": b"b"}) as src:
        code, summary = cli_json("sync", src.root + "set1/resourcelist.xml", dest)
        assert code == 0, summary
        assert tree(dest) == {"a.txt": b"a", "k/b.txt": b"b"}
        (src.data / "c.txt").write_bytes(b"c")
        src.publish()
        # …and follows its Change List next time (found through the `up` link).
        code, summary = cli_json("sync", src.root + "set1/resourcelist.xml", dest)
        assert (code, set_report(summary)["mode"]) == (0, "incremental")
        assert (dest / "c.txt").read_bytes() == b"c"


# ---------------------------------------------------------------------------------------------
# Options


def test_set_chooses_one_resource_set(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"one/a.txt": b"a"}) as src:
        src.sets[0].dir = tmp_path / "data" / "one"
        src.sets[0].base_url = src.root + "one/"
        (tmp_path / "data2").mkdir()
        (tmp_path / "data2" / "b.txt").write_bytes(b"b")
        src.sets.append(SetConfig(name="set2", dir=tmp_path / "data2", base_url=src.root + "two/"))
        src.publish()
        code, summary = cli_json("sync", src.root, dest, "--set", "set2")
        assert code == 0, summary
        assert [s["name"] for s in summary["sets"]] == ["set2"]
        assert tree(dest) == {"two/b.txt": b"b"}
        result = cli("sync", src.root, dest, "--set", "nope")
        assert result.exit_code == 2
        assert "set1" in result.stderr and "set2" in result.stderr
        # Without --set, every set, each where its URIs place it.
        code, summary = cli_json("sync", src.root, tmp_path / "all")
        assert code == 0
        assert tree(tmp_path / "all") == {"one/a.txt": b"a", "two/b.txt": b"b"}


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES) as src:
        code, summary = cli_json("sync", src.root, dest, "--dry-run")
        assert code == 0
        assert summary["dry_run"] is True and set_report(summary)["planned"] == len(FILES)
        assert tree(dest) == {}
        assert src.resource_gets() == {}
        assert cli("sync", src.root, dest).exit_code == 0
        before = tree(dest, skip_state=False)
        (src.data / "a.txt").write_bytes(b"alpha 2")
        (src.data / "k1" / "item 1.txt").unlink()
        src.publish()
        src.recorder.reset()
        for flags in (("--dry-run",), ("--dry-run", "--delete"), ("--dry-run", "--baseline")):
            code, summary = cli_json("sync", src.root, dest, *flags)
            assert code == 0, (flags, summary)
            assert tree(dest, skip_state=False) == before, flags
        assert src.resource_gets() == {}
        # Nothing was consumed either: the real run still sees both changes.
        code, summary = cli_json("sync", src.root, dest, "--delete")
        s = set_report(summary)
        assert (code, s["fetched"], s["deleted"]) == (0, 1, 1)
        assert tree(dest) == tree(src.data)


def test_dry_run_plans_on_a_converted_copy_of_an_older_state(tmp_path: Path) -> None:
    """A dry run on a copy whose state is of an older format opened it to write and migrated
    it (a write in a dry run, where DEST could be written) or stopped ("the next sync brings
    it up to date", where it could not): it plans on a converted copy, and the state is left
    as it was for the next sync to convert."""
    import sqlite3

    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        state = dest / STATE / "state.sqlite"
        db = sqlite3.connect(state)
        db.execute("DROP INDEX resources_path_key")
        db.execute("ALTER TABLE resources DROP COLUMN links")
        db.close()
        (src.data / "a.txt").write_bytes(b"alpha 3")
        src.publish()
        before = tree(dest, skip_state=False)
        code, summary = cli_json("sync", src.root, dest, "--dry-run", "-v")
        assert code == 0, summary
        assert set_report(summary)["would"]["updated"] == [src.base + "/a.txt"], summary
        assert tree(dest, skip_state=False) == before
        db = sqlite3.connect(state)
        assert "links" not in {r[1] for r in db.execute("PRAGMA table_info(resources)")}
        db.close()
        code, summary = cli_json("sync", src.root, dest)
        assert (code, set_report(summary)["fetched"]) == (0, 1)
        assert cli("audit", src.root, dest).exit_code == 0


def test_dry_run_does_not_create_dest(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"a.txt": b"a"}) as src:
        assert cli("sync", src.root, dest, "--dry-run").exit_code == 0
        assert not dest.exists()


def test_json_summary_shape(tmp_path: Path) -> None:
    with published_source(tmp_path, {"a.txt": b"a"}) as src:
        code, summary = cli_json("sync", src.root, tmp_path / "dest")
    assert code == 0
    assert {"source", "dest", "how", "sets", "seconds", "dry_run", "ok"} <= set(summary)
    assert summary["ok"] is True and summary["source"] == src.root
    (s,) = summary["sets"]
    keys = {"name", "mode", "via", "planned", "fetched", "not_modified", "unchanged", "deleted"}
    keys |= {"pending_deletes", "failed", "refused", "bytes", "changes", "gap", "cursor"}
    assert keys | {"problems"} <= set(s)
    assert (s["name"], s["fetched"], s["bytes"], s["problems"]) == ("set1", 1, 1, [])
    assert isinstance(s["cursor"], str) and s["cursor"].endswith("Z")


def test_details_go_to_stderr_and_one_summary_line_to_stdout(tmp_path: Path) -> None:
    """Per set details on stderr; the run's one summary line, in the shape publish and audit
    use too, on stdout (issue 14.7)."""
    with published_source(tmp_path, {"a.txt": b"a"}) as src:
        result = cli("sync", src.root, tmp_path / "dest")
        published = cli(
            "publish", src.data, "--base-url", src.root, "--out", src.out, "--name", "set1"
        )
        audited = cli("audit", src.root, tmp_path / "dest")
    assert result.exit_code == 0
    assert "set1: baseline via lists: fetched 1" in result.stderr
    (line,) = result.stdout.splitlines()
    assert re.fullmatch(
        r"resourcesync: sync ok: 1 fetched, 0 unchanged, 0 deleted; 1 B in [0-9.]+ s "
        r"\([0-9,]+/s, [0-9.]+ [KMG]?i?B/s\)",
        line,
    ), line
    (line,) = published.stdout.splitlines()
    assert re.fullmatch(
        r"resourcesync: publish ok: 1 resource, 0 created, 0 updated, 0 deleted; in [0-9.]+ s"
        r" \([0-9,]+/s\)",
        line,
    ), line
    (line,) = audited.stdout.splitlines()
    assert re.fullmatch(
        r"resourcesync: audit in sync: 1 expected, 1 in sync, 0 missing, 0 extra, 0 different;"
        r" in [0-9.]+ s \([0-9,]+/s\)",
        line,
    ), line


# ---------------------------------------------------------------------------------------------
# Audit


def test_audit_exit_codes_and_counts(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    files = {"a.txt": b"a", "b.txt": b"b", "c/d.txt": b"d"}
    with published_source(tmp_path, files) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        result = cli("audit", src.root, dest)
        assert result.exit_code == 0, result.stdout
        assert "in sync: 3 expected, 3 in sync, 0 missing, 0 extra, 0 different" in result.stdout

        (dest / "a.txt").unlink()  # missing
        (dest / "b.txt").write_bytes(b"B")  # different (same length: by digest)
        result = cli("audit", src.root, dest)
        assert result.exit_code == 1
        assert "1 missing" in result.stdout and "1 different" in result.stdout
        code, report = cli_json("audit", src.root, dest)
        assert code == 1
        assert (report["missing"], report["different"], report["extra"]) == (1, 1, 0)
        assert report["examples"]["missing"] == [src.root + "a.txt"]
        assert report["examples"]["different"] == [src.root + "b.txt"]

        (dest / "b.txt").write_bytes(b"b")  # (a --baseline does not repair it: see below)
        assert cli("sync", src.root, dest, "--baseline").exit_code == 0
        assert cli("audit", src.root, dest).exit_code == 0

        # The Source deletes a file the copy still has (no --delete): extra.
        (src.data / "c" / "d.txt").unlink()
        src.publish()
        assert cli("sync", src.root, dest).exit_code == 0
        code, report = cli_json("audit", src.root, dest)
        assert code == 1
        assert (report["extra"], report["missing"], report["different"]) == (1, 0, 0)
        assert report["examples"]["extra"] == [src.root + "c/d.txt"]
        # A change listed after the Resource List but not applied yet: missing.
        (src.data / "e.txt").write_bytes(b"e")
        src.publish()
        code, report = cli_json("audit", src.root, dest)
        assert (code, report["missing"]) == (1, 1)
        assert cli("sync", src.root, dest, "--delete").exit_code == 0
        code, report = cli_json("audit", src.root, dest)
        assert (code, report["expected"], report["in_sync"]) == (0, 3, 3)


def test_baseline_repairs_files_changed_locally(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    files = {"a.txt": b"a", "b.txt": b"b", "c.txt": b"c"}
    with published_source(tmp_path, files) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        (dest / "a.txt").unlink()
        (dest / "b.txt").write_bytes(b"B")
        (dest / "c.txt").write_bytes(b"longer than c")
        assert cli("audit", src.root, dest).exit_code == 1
        assert cli("sync", src.root, dest, "--baseline").exit_code == 0
        assert tree(dest) == files


def test_audit_finds_files_no_uri_accounts_for(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"a.txt": b"a"}) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        (dest / "stray.txt").write_bytes(b"put here by hand")
        (dest / ".a.txt.0123abcd.part").write_bytes(b"a killed run's leftover")
        code, report = cli_json("audit", src.root, dest)
        assert code == 1
        assert (report["expected"], report["in_sync"], report["extra"]) == (1, 1, 1)
        (example,) = report["examples"]["extra"]
        assert example.startswith("file ") and example.endswith("stray.txt")
        (dest / "stray.txt").unlink()
        assert cli("audit", src.root, dest).exit_code == 0


def test_two_sources_sharing_a_dest_are_each_audited_in_sync(tmp_path: Path) -> None:
    """Two Sources synced into one DEST (their paths apart): `audit` of one named the other's
    files extra ("NOT in sync", exit 1) and told to run `sync … --repair --delete`, which —
    rightly, as the copy holds them — removed nothing: the audit never came back in sync. A
    file the copy holds under a URI this Source's mapping does not cover is the other
    Source's: neither expected nor extra. A file put there by hand still is extra."""
    dest = tmp_path / "dest"
    (tmp_path / "A").mkdir()
    (tmp_path / "B").mkdir()
    with (
        published_source(tmp_path / "A", {"a/1.txt": b"a1"}) as a,
        published_source(tmp_path / "B", {"b/1.txt": b"b1", "b/2.txt": b"b2"}) as b,
    ):
        assert cli("sync", a.root, dest).exit_code == 0
        assert cli("sync", b.root, dest).exit_code == 0
        code, summary = cli_json("audit", a.root, dest)
        assert (code, summary["expected"], summary["in_sync"], summary["extra"]) == (0, 1, 1, 0)
        assert summary["others"] == 2, summary
        code, summary = cli_json("audit", b.root, dest)
        assert (code, summary["expected"], summary["in_sync"], summary["extra"]) == (0, 2, 2, 0)
        said = cli("audit", a.root, dest)
        assert "2 other files: held for URIs outside this Source" in said.stdout, said.output
        (dest / "b" / "stray.txt").write_bytes(b"by hand")
        code, summary = cli_json("audit", a.root, dest)
        assert (code, summary["extra"]) == (1, 1), summary
        assert summary["examples"]["extra"] == [f"file {dest / 'b' / 'stray.txt'}"]
        assert cli("sync", a.root, dest, "--repair", "--delete").exit_code == 0
        assert tree(dest) == {"a/1.txt": b"a1", "b/1.txt": b"b1", "b/2.txt": b"b2"}
        assert cli("audit", a.root, dest).exit_code == 0
        assert cli("audit", b.root, dest).exit_code == 0


@contextlib.contextmanager
def _read_only(path: Path) -> Iterator[None]:
    """`path` as a read-only mount (a snapshot, a backup's mount) for the block; the test is
    skipped where bind mounts cannot be made (not root, or no CAP_SYS_ADMIN)."""
    import subprocess

    made = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {made.stderr.decode(errors='replace').strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True)
        yield
    finally:
        # Lazily: a file the block left open (a failing command's) must not keep it mounted.
        subprocess.run(["umount", "-l", str(path)], check=True)


def test_audit_and_ls_read_a_copy_on_read_only_media(tmp_path: Path) -> None:
    """A copy audited where it cannot be written (a read-only mount, a snapshot): `audit` and
    `ls` said "cannot open the state database: unable to open database file" (exit 2), as
    they opened the state to write (WAL, schema, migrations), as did `sync --dry-run`, which
    also took the copy's lock. They open it to read only now, and keep what an audit holds
    elsewhere."""
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"a.txt": b"alpha", "k/b.txt": b"beta"}) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        state = dest / ".resourcesync" / "state.sqlite"
        before = state.read_bytes()
        with _read_only(dest):
            code, summary = cli_json("audit", src.root, dest)
            assert (code, summary["in_sync"]) == (0, 2), summary
            listed = cli("ls", dest)
            assert listed.exit_code == 0 and "k/b.txt" in listed.stdout, listed.output
        (dest / "a.txt").write_bytes(b"ALPHA")
        with _read_only(dest):
            code, summary = cli_json("audit", src.root, dest)
            assert (code, summary["different"]) == (1, 1), summary
            # What a sync would do, as a dry run: it cannot lock nor write such a copy.
            code, summary = cli_json("sync", src.root, dest, "--dry-run", "--baseline")
            assert code == 0 and summary["sets"][0]["would"], summary
        assert state.read_bytes() == before
        # Read where it can be written, the state is left as a run leaves it: no WAL files.
        assert cli("audit", src.root, dest).exit_code == 1
        assert cli("ls", dest).exit_code == 0
        assert not [p.name for p in state.parent.iterdir() if p.name.endswith(("-wal", "-shm"))]


def test_audit_exit_2_on_error(tmp_path: Path) -> None:
    (tmp_path / "dest").mkdir()
    with published_source(tmp_path, {"a.txt": b"a"}) as src:
        result = cli("audit", src.root, tmp_path / "nowhere")
        assert result.exit_code == 2
        dead = src.root
    result = cli("audit", dead, tmp_path / "dest", "--timeout", "1", "--retries", "0")
    assert result.exit_code == 2
    assert result.stderr.startswith("resourcesync: ") and "Traceback" not in result.stderr


# ---------------------------------------------------------------------------------------------
# Conditional requests, headers, concurrency


def test_a_second_baseline_of_an_unchanged_source_transfers_no_resource(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        src.recorder.reset()
        code, summary = cli_json("sync", src.root, dest, "--baseline")
        assert code == 0
        s = set_report(summary)
        assert s["mode"] == "baseline" and s["fetched"] == 0
        assert s["unchanged"] + s["not_modified"] == len(FILES)
        sent = sum(h.bytes for h in src.recorder.gets() if src.resource_gets().get(h.path))
        assert sent == 0
        for h in src.recorder.gets():
            if h.path in src.resource_gets():
                assert h.status == 304, h
                assert "if-none-match" in h.headers or "if-modified-since" in h.headers
        assert tree(dest) == FILES


def test_a_source_without_a_change_list_is_followed_through_its_resource_list(
    tmp_path: Path,
) -> None:
    """A Source that publishes Resource Lists only (Change Lists are optional): every later
    run compares the copy with the Resource List, as a baseline does — what the copy holds as
    listed is not fetched again, what changed is, what is gone is pending (or deleted with
    --delete). Before, every run after the first stopped at once ("the Source offers no Change
    List to follow (use --baseline)", exit 2): a cron job, or a fleet, failed on every run."""
    dest = tmp_path / "dest"
    files = {"a.txt": b"alpha", "b.txt": b"beta", "c.txt": b"gamma"}
    with published_source(tmp_path, files, capabilities=("resourcelist",)) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        src.recorder.reset()
        code, summary = cli_json("sync", src.root, dest)
        assert code == 0, summary
        s = set_report(summary)
        assert (s["mode"], s["fetched"]) == ("baseline", 0), s
        assert src.resource_gets() == {}
        src.write({"b.txt": b"beta, again"})
        (src.data / "c.txt").unlink()
        time.sleep(0.01)
        src.publish()
        code, summary = cli_json("sync", src.root, dest)
        assert code == 0, summary
        s = set_report(summary)
        assert (s["fetched"], s["pending_deletes"]) == (1, 1), s
        code, summary = cli_json("sync", src.root, dest, "--delete")
        assert (code, set_report(summary)["deleted"]) == (0, 1), summary
    assert tree(dest) == {"a.txt": b"alpha", "b.txt": b"beta, again"}


def test_a_source_with_a_resource_dump_only_is_followed_through_its_dump(
    tmp_path: Path,
) -> None:
    """No Resource List, no Change List: every run takes the Resource Dump again, and writes
    only what changed there or here (before: every run wrote every file again, and counted
    each as fetched)."""
    dest = tmp_path / "dest"
    files = {"a.txt": b"alpha", "b.txt": b"beta"}
    with published_source(tmp_path, files, capabilities=("resourcedump",)) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        code, summary = cli_json("sync", src.root, dest)
        s = set_report(summary)
        assert code == 0 and (s["via"], s["fetched"], s["unchanged"]) == ("dumps", 0, 2), s
        src.write({"b.txt": b"beta, again"})
        time.sleep(0.01)
        src.publish()
        (dest / "a.txt").unlink()  # and one lost here
        code, summary = cli_json("sync", src.root, dest)
        s = set_report(summary)
        assert code == 0 and (s["fetched"], s["unchanged"]) == (2, 0), s
        code, summary = cli_json("sync", src.root, dest)
        assert set_report(summary)["fetched"] == 0, summary
    assert tree(dest) == {"a.txt": b"alpha", "b.txt": b"beta, again"}


def test_a_copy_of_a_source_with_a_resource_dump_only_is_audited_against_its_manifests(
    tmp_path: Path,
) -> None:
    """`audit` said "the Source offers no Resource List to audit against" (exit 2) for a Source
    that `sync` follows through its Resource Dump. It now expects what the packages'
    manifests list: read through each package's `rel="contents"` link, or from the package
    itself when there is none."""
    dest = tmp_path / "dest"
    files = {"a.txt": b"alpha", "k/b.txt": b"beta"}
    with published_source(tmp_path, files, capabilities=("resourcedump",)) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        code, summary = cli_json("audit", src.root, dest)
        assert (code, summary["expected"], summary["in_sync"]) == (0, 2, 2), summary
        (dest / "a.txt").write_bytes(b"ALPHA")
        (dest / "k" / "b.txt").unlink()
        (dest / "extra.txt").write_bytes(b"not the Source's")
        code, summary = cli_json("audit", src.root, dest)
        assert code == 1, summary
        assert (summary["different"], summary["missing"], summary["extra"]) == (1, 1, 1)
        # Without the manifests beside the packages (the links lead nowhere): the packages.
        manifests = list(src.out.rglob("*manifest*.xml"))
        assert manifests
        for manifest in manifests:
            manifest.unlink()
        code, again = cli_json("audit", src.root, dest)
        assert (code, again["different"], again["missing"], again["extra"]) == (1, 1, 1, 1)
        assert again["examples"] == summary["examples"]


def test_audit_keeps_what_grows_with_the_source_on_the_copys_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An audit holds a row per resource and per file of the copy, and downloads a dump's
    packages to read their manifests: in memory and in the system's temporary directory (often
    a RAM disk), that grew with the Source. They are kept in a throw-away directory in the
    copy's state directory, removed afterwards; a copy with none (never synced here, or
    audited read-only) uses the system's."""
    import tempfile

    dest = tmp_path / "dest"
    files = {"a.txt": b"alpha", "k/b.txt": b"beta"}
    with published_source(tmp_path, files, capabilities=("resourcedump",)) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        for manifest in src.out.rglob("*manifest*.xml"):
            manifest.unlink()  # the packages themselves are downloaded
        # No system temporary directory to be had: the audit does not need one.
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-dir"))
        code, summary = cli_json("audit", src.root, dest)
        assert (code, summary["expected"], summary["in_sync"]) == (0, 2, 2), summary
        assert not list((dest / ".resourcesync").glob("audit-*"))
        # A copy made by other means, without a state directory: the system's.
        other = tmp_path / "other"
        shutil.copytree(dest, other, ignore=shutil.ignore_patterns(".resourcesync"))
        (tmp_path / "systmp").mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "systmp"))
        code, summary = cli_json("audit", src.root, other)
        assert (code, summary["expected"], summary["in_sync"]) == (0, 2, 2), summary
        assert not (other / ".resourcesync").exists()
        assert list((tmp_path / "systmp").iterdir()) == []


def test_a_source_with_change_lists_only_is_followed_from_a_time(tmp_path: Path) -> None:
    """No Resource List: nothing to start a copy from, said with the way to follow the
    Change Lists (`--from`, for a copy made by other means), which then works."""
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"a.txt": b"alpha"}, capabilities=("changelist",)) as src:
        result = cli("sync", src.root, dest)
        assert result.exit_code == 2
        assert "offers no Resource List (a copy made by other means follows its Change " in (
            result.output
        ), result.output
        since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # after its first run
        time.sleep(0.01)
        src.write({"b.txt": b"beta"})
        src.publish()
        code, summary = cli_json("sync", src.root, dest, "--from", since)
        assert code == 0, summary
    assert tree(dest) == {"b.txt": b"beta"}


def test_a_refetch_is_conditional_and_a_304_counts_as_verified(tmp_path: Path) -> None:
    """A resource the state lists as failed is fetched again with the validators we hold."""
    dest = tmp_path / "dest"

    with published_source(tmp_path, {"a.txt": b"alpha"}) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        with sqlite3.connect(dest / ".resourcesync" / "state.sqlite") as db:
            (key,) = db.execute("SELECT set_key FROM resources").fetchone()
            db.execute(
                "INSERT INTO failed VALUES (?, ?, ?, ?)",
                (src.root + "a.txt", '{"hashes": {}, "length": null}', "test", key),
            )
        db.close()
        src.recorder.reset()
        code, summary = cli_json("sync", src.root, dest)
        assert code == 0, summary
        (hit,) = src.recorder.gets("/a.txt")
        assert "if-none-match" in hit.headers and hit.status == 304 and hit.bytes == 0
        assert set_report(summary)["not_modified"] == 1
        assert state_rows(dest, "failed") == []


def _two_hosts(tmp_path: Path) -> tuple[Path, Path, Path]:
    data, out = tmp_path / "data", tmp_path / "out"
    for name in ("here", "there"):
        (data / name).mkdir(parents=True)
        (data / name / "x.txt").write_bytes(name.encode())
    out.mkdir()
    return data, out, tmp_path / "dest"


def _publish_two_hosts(data: Path, out: Path, a: str, b: str) -> None:
    publish(
        PublishConfig(
            out=out,
            docs_url=a + "/",
            sets=[
                SetConfig(name="set1", dir=data / "here", base_url=a + "/here/"),
                SetConfig(name="set2", dir=data / "there", base_url=b + "/there/"),
            ],
        )
    )


def test_header_and_token_go_to_the_sources_host_only(tmp_path: Path) -> None:
    """Set 1's resources are at the Source's host A, set 2's at host B (another port): the
    credentials go with A's resources and never to B."""
    data, out, dest = _two_hosts(tmp_path)
    rec_a, rec_b = Recorder(create_app(out)), Recorder(create_app(out))
    with serve(rec_a) as a, serve(rec_b) as b:
        _publish_two_hosts(data, out, a, b)
        args = ("--header", "X-Api-Key: k3y", "--token", "s3cret", "--map", f"{b}/={dest}")
        code, summary = cli_json("sync", a + "/", dest, *args)
        assert code == 0, summary
        assert tree(dest) == {"here/x.txt": b"here", "there/x.txt": b"there"}
        (hit_a,) = rec_a.gets("/here/")
        assert hit_a.headers.get("authorization") == "Bearer s3cret"
        assert hit_a.headers.get("x-api-key") == "k3y"
        (hit_b,) = rec_b.hits
        assert hit_b.path == "/there/x.txt"
        assert "authorization" not in hit_b.headers and "x-api-key" not in hit_b.headers


def test_header_and_token_open_an_authenticated_source(tmp_path: Path) -> None:
    data, out, dest = _two_hosts(tmp_path)

    def guarded(app: Any) -> Any:
        async def asgi(scope: Any, receive: Any, send: Any) -> None:
            headers = dict(scope.get("headers") or [])
            if scope["type"] == "http" and headers.get(b"authorization") != b"Bearer s3cret":
                await PlainTextResponse("who are you?", status_code=401)(scope, receive, send)
                return
            await app(scope, receive, send)

        return asgi

    rec_b = Recorder(create_app(out))
    with serve(guarded(create_app(out))) as a, serve(rec_b) as b:
        _publish_two_hosts(data, out, a, b)
        code, summary = cli_json(
            "sync", a + "/", dest, "--token", "s3cret", "--map", f"{b}/={dest}"
        )
        assert code == 0, summary
        assert tree(dest) == {"here/x.txt": b"here", "there/x.txt": b"there"}
        assert all("authorization" not in h.headers for h in rec_b.hits)


@pytest.mark.parametrize(("transfers", "per_host", "bound"), [(3, 8, 3), (8, 2, 2)])
def test_transfers_and_per_host_bound_concurrent_requests(
    tmp_path: Path, transfers: int, per_host: int, bound: int
) -> None:
    files = {f"f{i:02d}.txt": b"%d" % i for i in range(24)}
    dest = tmp_path / "dest"
    with published_source(tmp_path, files, delay=0.05) as src:
        args = ("--transfers", str(transfers), "--per-host", str(per_host))
        code, summary = cli_json("sync", src.root, dest, *args)
        assert code == 0, summary
        assert tree(dest) == files
        # Bounded, and the bound reached (the pipeline does run transfers in parallel).
        assert src.recorder.max_inflight == bound


def test_delay_spaces_requests_to_one_host(tmp_path: Path) -> None:

    files = {f"f{i}.txt": b"x" for i in range(5)}
    with published_source(tmp_path, files) as src:
        started = time.monotonic()
        code, _ = cli_json("sync", src.root, tmp_path / "dest", "--delay", "0.1")
        assert code == 0
        assert time.monotonic() - started >= 0.4


def test_the_next_request_to_a_host_goes_out_before_a_copy_waits_for_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --fsync a copy's commit waits for the disk, the event loop with it: the host's
    next request is sent first (the per-host limit counts requests in flight, not our disk's
    work). The disk here is slow until the Source has been asked for b.txt: before, the
    request for b.txt waited behind the disk, for as long as the disk took."""
    asked_for_b = threading.Event()
    waited: list[bool] = []
    real_fsync = os.fsync

    def slow_disk(fd: int) -> None:
        if not waited and "a.txt" in os.readlink(f"/proc/self/fd/{fd}"):
            waited.append(asked_for_b.wait(timeout=5))
        real_fsync(fd)

    def watch(app: Any, _: Any) -> Any:
        async def middleware(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["path"] == "/b.txt":
                asked_for_b.set()
            await app(scope, receive, send)

        return middleware

    files = {"a.txt": b"a", "b.txt": b"b"}
    dest = tmp_path / "dest"
    with published_source(tmp_path, files, wrap=watch) as src:
        monkeypatch.setattr(os, "fsync", slow_disk)
        code, summary = cli_json("sync", src.root, dest, "--per-host", "1", "--fsync")
        assert code == 0, summary
    assert tree(dest) == files
    assert waited == [True]


def test_with_fsync_the_other_copies_go_on_while_one_waits_for_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --fsync a copy's fsyncs run in a worker thread: while the disk holds one commit
    (a/x.txt's directory here, after its journal line is written and the file renamed) the
    other copies are received, committed and recorded. The journal, which names what was
    written and is not yet recorded (removed after a crash), is not emptied by their records
    while that commit is in flight: it still names a/x.txt when b/y.txt is recorded."""
    from resourcesync.destination import transfer

    b_recorded = threading.Event()
    waited: list[bool] = []
    journal_then: list[bytes] = []
    real_fsync, real_flush = os.fsync, transfer.Transfer.flush_records
    dest = tmp_path / "dest"

    def slow_disk(fd: int) -> None:
        if not journal_then and os.readlink(f"/proc/self/fd/{fd}") == str(dest / "a"):
            waited.append(b_recorded.wait(timeout=5))
            journal_then.append((dest / ".resourcesync" / "written").read_bytes())
        real_fsync(fd)

    def flush_records(self: Any) -> None:
        b_in = any(row[0].endswith("/b/y.txt") for row in self._records)
        real_flush(self)
        if b_in:
            b_recorded.set()

    files = {"a/x.txt": b"a", "b/y.txt": b"b"}
    with published_source(tmp_path, files) as src:
        monkeypatch.setattr(transfer, "RECORD_BATCH", 1)
        monkeypatch.setattr(transfer.Transfer, "flush_records", flush_records)
        monkeypatch.setattr(os, "fsync", slow_disk)
        code, summary = cli_json("sync", src.root, dest, "--fsync")
        assert code == 0, summary
    assert tree(dest) == files
    assert waited == [True] and len(journal_then) == 1
    assert b"a/x.txt" in journal_then[0], journal_then
    # Every commit recorded: the journal is empty again.
    assert (dest / ".resourcesync" / "written").read_bytes() == b""


def test_baseline_of_an_emptied_source_keeps_files_pending_until_delete(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, {"a.txt": b"a", "b.txt": b"b"}) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        (src.data / "b.txt").unlink()
        src.publish()
        code, summary = cli_json("sync", src.root, dest, "--baseline")
        assert (code, set_report(summary)["pending_deletes"]) == (0, 1)
        assert (dest / "b.txt").exists()
        code, summary = cli_json("sync", src.root, dest, "--baseline", "--delete")
        assert (code, set_report(summary)["deleted"]) == (0, 1)
        assert tree(dest) == {"a.txt": b"a"}
        shutil.rmtree(dest)
