"""A Destination never reports ok over a wrong copy (issue 10 points 2–4, 6, 7; issue 17
points 10–12): hand-made Sources shaped like the deployments and spec examples that broke it."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from starlette.responses import PlainTextResponse

import resourcesync.destination.sync as sync_module
from resourcesync.destination.discover import discover
from resourcesync.destination.subscribe import _Applier
from resourcesync.destination.sync import SyncOptions, sync
from resourcesync.model import Resource
from resourcesync.sitemap import validate
from tests.destination.helpers import (
    cli,
    cli_json,
    entry,
    hand_source,
    package,
    sitemapindex,
    tree,
    urlset,
)

AT = "2024-01-01T00:00:00Z"


def _set(summary: dict[str, Any]) -> dict[str, Any]:
    return summary["sets"][0]  # type: ignore[no-any-return]


def test_a_gap_inside_a_change_list_index_is_reported(tmp_path: Path) -> None:
    """Core §12.2: one list's `until` earlier than the next list's `from` leaves changes
    listed nowhere — a gap, exit 1, nothing applied (issue 10.2)."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.publish([entry(b, "/a.txt", b"a")], at=AT)
        assert cli("sync", b, dest).exit_code == 0
        src.files["/b.txt"] = b"b"
        src.files["/c.txt"] = b"c"
        src.docs["/changelist.xml"] = sitemapindex(
            "changelist",
            [
                {"loc": f"{b}/cl1.xml", "from": AT, "until": "2024-01-02T00:00:00Z"},
                {"loc": f"{b}/cl2.xml", "from": "2024-01-05T00:00:00Z"},
            ],
            **{"from": AT},
        )
        src.docs["/cl1.xml"] = urlset(
            "changelist",
            [entry(b, "/b.txt", b"b", change="created", datetime="2024-01-01T12:00:00Z")],
            **{"from": AT, "until": "2024-01-02T00:00:00Z"},
        )
        src.docs["/cl2.xml"] = urlset(
            "changelist",
            [entry(b, "/c.txt", b"c", change="created", datetime="2024-01-05T12:00:00Z")],
            **{"from": "2024-01-05T00:00:00Z"},
        )
        code, summary = cli_json("sync", b, dest)
        assert code == 1, summary
        assert "cl1.xml" in _set(summary)["gap"] and "cl2.xml" in _set(summary)["gap"]
        assert tree(dest) == {"a.txt": b"a"}


def test_lastmod_without_datetime_is_not_the_time_of_the_change(tmp_path: Path) -> None:
    """Core 1.1 §7 (its Example 19 gives a `created` entry a 2000-01-01 lastmod): without
    `rs:md@datetime`, `<lastmod>` is the resource's Last-Modified. Such a change is applied
    however old its lastmod — and not applied again by the next run (issue 10.3, 10.6)."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.publish([entry(b, "/a.txt", b"a")], at=AT)
        assert cli("sync", b, dest).exit_code == 0
        src.files["/old.txt"] = b"made long ago, published now"
        src.docs["/changelist.xml"] = urlset(
            "changelist",
            [
                entry(
                    b,
                    "/old.txt",
                    b"made long ago, published now",
                    change="created",
                    lastmod="2000-01-01T00:00:00Z",
                )
            ],
            **{"from": AT},
        )
        code, summary = cli_json("sync", b, dest)
        assert code == 0, summary
        assert tree(dest)["old.txt"] == b"made long ago, published now"
        assert _set(summary)["changes"] == 1
        before = src.hits.get("/old.txt", 0)
        code, summary = cli_json("sync", b, dest)
        assert code == 0 and _set(summary)["changes"] == 0, summary
        assert src.hits.get("/old.txt", 0) == before


def test_a_change_list_of_change_lists_is_followed_not_downloaded(tmp_path: Path) -> None:
    """WEKO3 publishes a "change list" whose entries are its daily Change Lists (they carry
    `capability`): they are followed as documents, never stored as content; an entry with
    neither `change` nor `capability` is reported and never fetched (issue 10.4)."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.publish([entry(b, "/a.txt", b"a")], at=AT)
        assert cli("sync", b, dest).exit_code == 0
        src.files["/records/1"] = b"record one"
        src.docs["/changelist.xml"] = urlset(
            "changelist",
            [{"loc": f"{b}/daily/20240102.xml", "capability": "changelist"}],
            **{"from": AT},
        )
        src.docs["/daily/20240102.xml"] = urlset(
            "changelist",
            [
                entry(
                    b,
                    "/records/1",
                    b"record one",
                    change="created",
                    datetime="2024-01-02T01:00:00Z",
                )
            ],
            **{"from": "2024-01-02T00:00:00Z", "until": "2024-01-03T00:00:00Z"},
        )
        code, summary = cli_json("sync", b, dest)
        assert code == 0, summary
        assert tree(dest) == {"a.txt": b"a", "records/1": b"record one"}
        # An entry that is neither a change nor a document: reported, exit 1, not fetched.
        src.files["/mystery"] = b"?"
        src.docs["/daily/20240102.xml"] = urlset(
            "changelist",
            [{"loc": f"{b}/mystery", "datetime": "2024-01-02T02:00:00Z"}],
            **{"from": "2024-01-02T00:00:00Z"},
        )
        code, summary = cli_json("sync", b, dest)
        assert code == 1, summary
        assert any(
            "neither change nor capability" in p["message"] for p in _set(summary)["problems"]
        )
        assert "/mystery" not in src.hits and "mystery" not in tree(dest)


def test_a_resource_list_of_resource_lists_is_followed_not_downloaded(tmp_path: Path) -> None:
    """The sibling of issue 10.4 for Resource Lists: a list of lists written as a urlset (its
    entries carry `capability="resourcelist"`) was synced by storing the parts as content and
    said ok over a copy lacking every resource they list (and `audit` said in sync). Parts
    are followed as an index's are, said once; another document listed there is no resource:
    said, never fetched."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        for name in ("a", "b", "c"):
            src.files[f"/{name}.txt"] = name.encode()
        src.publish([], at=AT)
        src.docs["/resourcelist.xml"] = urlset(
            "resourcelist",
            [
                {"loc": f"{b}/rl1.xml", "capability": "resourcelist"},
                entry(b, "/a.txt", b"a"),
                {"loc": f"{b}/resourcedump.xml", "capability": "resourcedump"},
                {"loc": f"{b}/rl2.xml", "capability": "resourcelist"},
            ],
            at=AT,
        )
        src.docs["/rl1.xml"] = urlset("resourcelist", [entry(b, "/b.txt", b"b")], at=AT)
        src.docs["/rl2.xml"] = urlset("resourcelist", [entry(b, "/c.txt", b"c")], at=AT)
        code, summary = cli_json("sync", b, dest, "--delete")
        assert code == 0, summary
        assert tree(dest) == {"a.txt": b"a", "b.txt": b"b", "c.txt": b"c"}
        messages = [(p["uri"], p["message"]) for p in _set(summary)["problems"]]
        assert any("a resourcelist listed as an entry of a resourcelist" in m for _, m in messages)
        assert (f"{b}/resourcedump.xml", True) in [
            (u, "not a resource, not fetched" in m) for u, m in messages
        ], messages
        assert "/resourcedump.xml" not in src.hits
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["in_sync"] == 3, found
        # A part that changes is seen, and what it no longer lists is deleted.
        src.docs["/rl2.xml"] = urlset("resourcelist", [], at="2024-01-02T00:00:00Z")
        code, summary = cli_json("sync", b, dest, "--delete", "--baseline")
        assert code == 0 and _set(summary)["deleted"] == 1, summary
        assert tree(dest) == {"a.txt": b"a", "b.txt": b"b"}


def test_an_entry_without_a_change_is_said_by_every_run_until_a_change_resolves_it(
    tmp_path: Path,
) -> None:
    """What such an entry means for the copy is unknown (a creation, an update, a deletion):
    the cursor moves past it, so a run that forgot it would say ok over a copy that may lack
    it. Every run says it again — without fetching it (issue 10.4) — until the Source lists a
    change for it, or a baseline takes the resource from the Resource List."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.publish([entry(b, "/a.txt", b"a")], at=AT)
        assert cli("sync", b, dest).exit_code == 0
        src.files["/a.txt"] = b"a, edited"
        src.docs["/changelist.xml"] = urlset(
            "changelist",
            [{"loc": f"{b}/a.txt", "datetime": "2024-01-02T00:00:00Z"}],
            **{"from": AT},
        )
        for _ in range(2):
            code, summary = cli_json("sync", b, dest)
            assert code == 1, summary
            problems = _set(summary)["problems"]
            assert [p["uri"] for p in problems] == [f"{b}/a.txt"], problems
            assert "neither change nor capability" in problems[0]["message"]
            assert _set(summary)["refused"] == 1
        assert src.hits.get("/a.txt", 0) == 1 and tree(dest) == {"a.txt": b"a"}
        # Nor can the audit tell what the copy should hold: not in sync, and nothing extra.
        code, found = cli_json("audit", b, dest)
        assert code == 1 and not found["in_sync_ok"], found
        assert (found["unknown"], found["extra"], found["in_sync"]) == (1, 0, 0), found
        assert found["examples"] == {"unknown": [f"{b}/a.txt"]}, found
        text = cli("audit", b, dest).output
        assert "1 unknown: listed last in a Change List with no change" in text, text
        assert "--repair" not in text, text
        # Still said after the Source lists other changes (the cursor far past it).
        src.files["/b.txt"] = b"b"
        src.docs["/changelist.xml"] = urlset(
            "changelist",
            [
                {"loc": f"{b}/a.txt", "datetime": "2024-01-02T00:00:00Z"},
                entry(b, "/b.txt", b"b", change="created", datetime="2024-01-03T00:00:00Z"),
            ],
            **{"from": AT},
        )
        for _ in range(2):
            code, summary = cli_json("sync", b, dest)
            assert code == 1 and _set(summary)["refused"] == 1, summary
            assert _set(summary)["cursor"] == "2024-01-03T00:00:00Z"
        assert tree(dest) == {"a.txt": b"a", "b.txt": b"b"}
        # The Source lists what the change was: taken, and every run after is ok.
        src.docs["/changelist.xml"] = urlset(
            "changelist",
            [
                {"loc": f"{b}/a.txt", "datetime": "2024-01-02T00:00:00Z"},
                entry(b, "/b.txt", b"b", change="created", datetime="2024-01-03T00:00:00Z"),
                entry(b, "/a.txt", b"a, edited", change="updated", datetime="2024-01-04T00:00:00Z"),
            ],
            **{"from": AT},
        )
        for _ in range(2):
            code, summary = cli_json("sync", b, dest)
            assert code == 0 and _set(summary)["problems"] == [], summary
        assert tree(dest) == {"a.txt": b"a, edited", "b.txt": b"b"}
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["unknown"] == 0 and found["in_sync"] == 2, found
        # Another one, resolved by a baseline: the Resource List says what the resource is.
        src.files["/b.txt"] = b"b, edited"
        src.docs["/changelist.xml"] = urlset(
            "changelist",
            [{"loc": f"{b}/b.txt", "datetime": "2024-01-05T00:00:00Z"}],
            **{"from": "2024-01-04T00:00:00Z"},
        )
        for _ in range(2):
            assert cli_json("sync", b, dest)[0] == 1
        src.publish(
            [entry(b, "/a.txt", b"a, edited"), entry(b, "/b.txt", b"b, edited")],
            at="2024-01-06T00:00:00Z",
        )
        code, summary = cli_json("sync", b, dest, "--baseline")
        assert code == 0, summary
        code, summary = cli_json("sync", b, dest)
        assert code == 0 and _set(summary)["problems"] == [], summary
        assert tree(dest) == {"a.txt": b"a, edited", "b.txt": b"b, edited"}


def test_the_cursor_is_the_latest_change_applied_not_the_last_listed(tmp_path: Path) -> None:
    """A Change List out of order: the next run must not report the same changes again
    (issue 10.6)."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.publish([entry(b, "/a.txt", b"a")], at=AT)
        assert cli("sync", b, dest).exit_code == 0
        src.files["/x.txt"] = b"x"
        src.files["/y.txt"] = b"y"
        src.docs["/changelist.xml"] = urlset(
            "changelist",
            [
                entry(b, "/x.txt", b"x", change="created", datetime="2024-01-03T00:00:00Z"),
                entry(b, "/y.txt", b"y", change="created", datetime="2024-01-02T00:00:00Z"),
            ],
            **{"from": AT},
        )
        code, summary = cli_json("sync", b, dest)
        assert (code, _set(summary)["changes"]) == (0, 2), summary
        assert _set(summary)["cursor"] == "2024-01-03T00:00:00Z"
        code, summary = cli_json("sync", b, dest)
        assert (code, _set(summary)["changes"], _set(summary)["fetched"]) == (0, 0, 0), summary


def test_a_source_whose_history_went_back_is_not_followed_as_if_nothing_changed(
    tmp_path: Path,
) -> None:
    """A Source restored from a backup lists its changes up to the backup, then what changed
    since the restore: lists that reach back to the change this copy last applied (`from` no
    later), go on past it, and no longer hold it (nor a later change of the same resource) are
    not the history the copy followed (core §12.1: every change is listed, once per change).
    The run applies nothing and says so (exit 1; it said ok over a copy holding what the
    Source no longer had); a baseline recovers. A list that dropped the entry for a later
    change of the same resource is not that, nor one that ends before the cursor."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.publish([entry(b, "/a.txt", b"a")], at=AT)
        assert cli("sync", b, dest).exit_code == 0
        early = entry(b, "/a.txt", b"a", change="updated", datetime="2024-01-01T06:00:00Z")
        made = entry(b, "/made.txt", b"m", change="created", datetime="2024-01-02T00:00:00Z")
        src.files["/made.txt"] = b"m"
        src.docs["/changelist.xml"] = urlset("changelist", [early, made], **{"from": AT})
        code, summary = cli_json("sync", b, dest)
        assert code == 0 and tree(dest) == {"a.txt": b"a", "made.txt": b"m"}, summary
        # Restored from the backup of 2024-01-01T12:00: `made.txt` is gone, and a change made
        # since then is listed.
        del src.files["/made.txt"]
        src.files["/new.txt"] = b"n"
        new = entry(b, "/new.txt", b"n", change="created", datetime="2024-01-03T00:00:00Z")
        src.docs["/changelist.xml"] = urlset("changelist", [early, new], **{"from": AT})
        for delete in ((), ("--delete",)):
            code, summary = cli_json("sync", b, dest, *delete)
            gap = _set(summary)["gap"] or ""
            assert code == 1, summary
            assert "no longer list the change this copy last applied" in gap
            assert f"{b}/made.txt" in gap and "--baseline" in gap
            assert (_set(summary)["changes"], _set(summary)["fetched"]) == (0, 0)
            assert tree(dest) == {"a.txt": b"a", "made.txt": b"m"}
            assert _set(summary)["cursor"] is None or "2024-01-02" in _set(summary)["cursor"]
        assert cli("audit", b, dest).exit_code == 1
        src.publish([entry(b, "/a.txt", b"a"), entry(b, "/new.txt", b"n")], at=AT)
        src.docs["/changelist.xml"] = urlset("changelist", [early, new], **{"from": AT})
        code, summary = cli_json("sync", b, dest, "--baseline", "--delete")
        assert code == 0 and tree(dest) == {"a.txt": b"a", "new.txt": b"n"}, summary
        assert cli("audit", b, dest).exit_code == 0
        # A Source that keeps only the latest change of a resource: not a history that went
        # back (the change at the cursor was superseded, and the later one is listed).
        src.files["/new.txt"] = b"n2"
        again = entry(b, "/new.txt", b"n2", change="updated", datetime="2024-01-04T00:00:00Z")
        src.docs["/changelist.xml"] = urlset("changelist", [early, new, again], **{"from": AT})
        code, summary = cli_json("sync", b, dest)
        assert code == 0 and tree(dest)["new.txt"] == b"n2", summary
        src.files["/new.txt"] = b"n3"
        last = entry(b, "/new.txt", b"n3", change="updated", datetime="2024-01-05T00:00:00Z")
        src.docs["/changelist.xml"] = urlset("changelist", [early, last], **{"from": AT})
        code, summary = cli_json("sync", b, dest)
        assert code == 0 and tree(dest)["new.txt"] == b"n3", summary
        # Lists that end before the copy's cursor may only be late (a notification runs
        # ahead of them): nothing to apply, not a history that changed.
        src.docs["/changelist.xml"] = urlset("changelist", [early], **{"from": AT})
        code, summary = cli_json("sync", b, dest)
        assert code == 0 and _set(summary)["gap"] is None, summary


def _restored(src: Any, dest: Path, options: SyncOptions) -> tuple[dict[str, Any], ...]:
    """A Source that lists `made.txt` (a change after its Resource List) and that the copy
    follows; the entries to list again: (early, made)."""
    b = src.base
    src.files["/a.txt"] = b"a"
    src.publish([entry(b, "/a.txt", b"a")], at=AT)
    assert sync(b, dest, options).ok
    early = entry(b, "/a.txt", b"a", change="updated", datetime="2024-01-01T06:00:00Z")
    made = entry(b, "/made.txt", b"m", change="created", datetime="2024-01-02T00:00:00Z")
    src.files["/made.txt"] = b"m"
    return early, made


def test_lists_that_stay_behind_a_cursor_read_from_them_are_a_history_that_changed(
    tmp_path: Path,
) -> None:
    """A Source restored from a backup that has changed nothing since: its lists reach back
    to the change the copy last applied, read from them, and end before it. No later change
    gives it away (the copy said ok, holding what the Source no longer has, until the Source
    changed again). A list served stale by a cache or a replica looks the same for a while,
    so the copy calls it a changed history once it has lasted `history_grace` (an hour by
    default): exit 1, nothing applied. Lists that hold the change again start the clock
    over."""
    dest = tmp_path / "dest"
    options = SyncOptions(history_grace=0.3)
    with hand_source() as src:
        b = src.base
        early, made = _restored(src, dest, options)
        src.docs["/changelist.xml"] = urlset("changelist", [early, made], **{"from": AT})
        assert sync(b, dest, options).ok and tree(dest)["made.txt"] == b"m"
        # Restored from its backup of 2024-01-01T12:00: made.txt is gone, and not listed.
        del src.files["/made.txt"]
        src.docs["/changelist.xml"] = urlset("changelist", [early], **{"from": AT})
        for _ in range(2):  # at first, and for less than the grace: a stale list, maybe
            report = sync(b, dest, options)
            assert report.ok and report.sets[0].gap is None, report
        time.sleep(0.4)
        report = sync(b, dest, options)
        gap = report.sets[0].gap or ""
        assert not report.ok and "have not listed the change this copy last applied" in gap
        assert f"{b}/made.txt" in gap and "restored from a backup?" in gap
        assert "--baseline" in gap
        assert tree(dest) == {"a.txt": b"a", "made.txt": b"m"}
        code, summary = cli_json("sync", b, dest, "--history-grace", "0")
        assert code == 1 and "restored from a backup?" in (_set(summary)["gap"] or ""), summary
        # The stale list was only that: listed again, ok, and the clock starts over.
        src.docs["/changelist.xml"] = urlset("changelist", [early, made], **{"from": AT})
        assert sync(b, dest, options).ok
        src.docs["/changelist.xml"] = urlset("changelist", [early], **{"from": AT})
        report = sync(b, dest, options)
        assert report.ok and report.sets[0].gap is None, report


def test_lists_that_lag_a_notification_are_not_held_to_it(tmp_path: Path) -> None:
    """A cursor moved by a change notification may run ahead of the Source's lists for as
    long as the Source takes to write them: no changed history however long they lag. Once
    they hold the change, they are held to it like any cursor read from them."""
    dest = tmp_path / "dest"
    options = SyncOptions(history_grace=0.3)
    with hand_source() as src:
        b = src.base
        early, made = _restored(src, dest, options)
        src.docs["/changelist.xml"] = urlset("changelist", [early], **{"from": AT})
        info = discover(b)
        applier = _Applier(info, dest, options)
        try:
            pushed = Resource(
                loc=f"{b}/made.txt",
                change="created",
                datetime=datetime(2024, 1, 2, tzinfo=UTC),
                length=1,
                hashes={"md5": made["md5"]},
            )
            assert applier.apply(info.sets[0], [pushed]).gap is None
        finally:
            applier.close()
        assert tree(dest)["made.txt"] == b"m"
        for _ in range(2):
            report = sync(b, dest, options)
            assert report.ok and report.sets[0].gap is None, report
            time.sleep(0.4)
        src.docs["/changelist.xml"] = urlset("changelist", [early, made], **{"from": AT})
        assert sync(b, dest, options).ok
        src.docs["/changelist.xml"] = urlset("changelist", [early], **{"from": AT})
        assert sync(b, dest, options).ok
        time.sleep(0.4)
        assert sync(b, dest, options).sets[0].gap is not None


def test_an_edit_that_keeps_the_length_is_fetched_from_a_source_without_digests(
    tmp_path: Path,
) -> None:
    """A Source that gives no digest (the spec makes them optional): a listed update, or a
    Resource List whose `<lastmod>` moved, with the same length as the copy holds is fetched
    (asked with the copy's validators). It was counted unchanged, and the run said ok over a
    copy that kept the old bytes (an edit often keeps the length: a digit, a date, a flag).
    Length and `<lastmod>` both as recorded: not asked for (rsync's quick check). A 304 for a
    moved `<lastmod>` keeps the file and records the new time. `audit` compares the same."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        t2, t3, t4 = "2024-01-02T00:00:00Z", "2024-01-03T00:00:00Z", "2024-01-04T00:00:00Z"

        def plain(rel: str, body: bytes, **extra: Any) -> dict[str, Any]:
            return {"loc": b + rel, "length": len(body), **extra}

        served = {"/c.txt": b"cccc"}

        async def validated(request: Any) -> Any:
            # An ETag that never changes (as a server's weak, time-based ones can).
            from starlette.responses import Response

            if request.headers.get("if-none-match") == '"c1"':
                return Response(status_code=304, headers={"ETag": '"c1"'})
            return Response(served[request.url.path], headers={"ETag": '"c1"'})

        src.files["/a.txt"] = b"aaaa"
        src.files["/b.txt"] = b"bbbb"
        src.handlers["/c.txt"] = validated
        listed = {
            "/a.txt": plain("/a.txt", b"aaaa", lastmod=AT),
            "/b.txt": plain("/b.txt", b"bbbb", lastmod=AT),
            "/c.txt": plain("/c.txt", b"cccc", lastmod=AT),
        }
        src.publish(list(listed.values()), at=AT)
        assert cli("sync", b, dest).exit_code == 0
        # A listed update that keeps the length.
        src.files["/a.txt"] = b"AAAA"
        listed["/a.txt"] = plain("/a.txt", b"AAAA", lastmod=t2)
        update = {**listed["/a.txt"], "change": "updated", "datetime": t2}
        src.docs["/changelist.xml"] = urlset("changelist", [update], **{"from": AT})
        # `audit` compares the <lastmod> recorded with what the copy holds, too (it said in
        # sync by the length alone).
        assert cli("audit", b, dest).exit_code == 1
        code, summary = cli_json("sync", b, dest)
        assert code == 0 and tree(dest)["a.txt"] == b"AAAA", summary
        assert cli("audit", b, dest).exit_code == 0
        # A baseline: b's <lastmod> moved, its length did not.
        src.files["/b.txt"] = b"BBBB"
        listed["/b.txt"] = plain("/b.txt", b"BBBB", lastmod=t3)
        src.publish(list(listed.values()), at=t3)
        before = dict(src.hits)
        code, summary = cli_json("sync", b, dest, "--baseline")
        assert code == 0 and tree(dest)["b.txt"] == b"BBBB", summary
        assert src.hits["/a.txt"] == before["/a.txt"]  # as recorded: not asked for
        assert src.hits["/c.txt"] == before["/c.txt"]
        # c's <lastmod> moves, its bytes do not: one conditional request, 304, kept.
        listed["/c.txt"] = plain("/c.txt", b"cccc", lastmod=t4)
        src.publish(list(listed.values()), at=t4)
        before = dict(src.hits)
        code, summary = cli_json("sync", b, dest, "--baseline")
        assert code == 0 and _set(summary)["not_modified"] == 1, summary
        assert src.hits["/c.txt"] == before["/c.txt"] + 1
        assert tree(dest) == {"a.txt": b"AAAA", "b.txt": b"BBBB", "c.txt": b"cccc"}
        code, summary = cli_json("sync", b, dest, "--baseline")
        assert code == 0 and src.hits["/c.txt"] == before["/c.txt"] + 1, summary
        assert cli("audit", b, dest).exit_code == 0
        # A 304 while the list gives another length: the list wins, c is fetched whole.
        served["/c.txt"] = b"ccccc"
        listed["/c.txt"] = plain("/c.txt", b"ccccc", lastmod=t4)
        src.publish(list(listed.values()), at=t4)
        code, summary = cli_json("sync", b, dest, "--baseline")
        assert code == 0 and tree(dest)["c.txt"] == b"ccccc", summary


def test_audit_finds_a_file_changed_here_when_the_list_gives_no_digest(tmp_path: Path) -> None:
    """A Source without digests: a file edited in the copy with its size and time kept, and one
    cut short whose length the list does not give, were "in sync" for `audit` (nothing in the
    list to compare; the `<lastmod>` recorded was the listed one), though neither holds the
    bytes the sync verified. `audit` now holds each file to the MD5 the copy recorded when it
    wrote it: different; `sync --repair` holds the edited one to it too (before, it kept it),
    and fetches both again, not the file left alone."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files.update({"/a.txt": b"alpha", "/b.txt": b"bravo", "/c.txt": b"charlie"})
        listed = [{"loc": f"{b}/{n}.txt", "lastmod": AT} for n in "abc"]
        listed[0]["length"], listed[2]["length"] = 5, 7  # b's not given
        src.publish(listed, at=AT)
        assert cli("sync", b, dest).exit_code == 0
        assert cli("audit", b, dest).exit_code == 0
        kept = os.stat(dest / "a.txt")
        (dest / "a.txt").write_bytes(b"ALPHA")
        os.utime(dest / "a.txt", ns=(kept.st_atime_ns, kept.st_mtime_ns))
        (dest / "b.txt").write_bytes(b"br")
        code, summary = cli_json("audit", b, dest)
        assert code == 1, summary
        assert sorted(summary["examples"]["different"]) == [f"{b}/a.txt", f"{b}/b.txt"]
        code, summary = cli_json("sync", b, dest, "--repair")
        assert code == 0 and _set(summary)["fetched"] == 2, summary
        assert tree(dest) == {"a.txt": b"alpha", "b.txt": b"bravo", "c.txt": b"charlie"}
        assert cli("audit", b, dest).exit_code == 0


def test_a_later_change_supersedes_a_remembered_failure(tmp_path: Path) -> None:
    """A fetch that failed is retried by the next run — unless a later change superseded it:
    a deletion, or an update with a new length and digest (issue 10.7, seen against
    resync-simulator)."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.publish([entry(b, "/a.txt", b"a")], at=AT)
        assert cli("sync", b, dest).exit_code == 0

        async def broken(request: Any) -> Any:
            return PlainTextResponse("down", status_code=500)

        src.handlers["/gone.txt"] = broken
        src.handlers["/moved.txt"] = broken
        src.docs["/changelist.xml"] = urlset(
            "changelist",
            [
                entry(b, "/gone.txt", b"v1", change="created", datetime="2024-01-02T00:00:00Z"),
                entry(b, "/moved.txt", b"v1", change="created", datetime="2024-01-02T00:00:01Z"),
            ],
            **{"from": AT},
        )
        code, summary = cli_json("sync", b, dest, "--delete")
        assert code == 1 and _set(summary)["failed"] == 2, summary
        tries = src.hits["/gone.txt"]
        # The Source recovers; gone.txt was deleted meanwhile, moved.txt updated.
        del src.handlers["/gone.txt"], src.handlers["/moved.txt"]
        src.files["/moved.txt"] = b"version two"
        src.docs["/changelist.xml"] = urlset(
            "changelist",
            [
                entry(b, "/gone.txt", b"v1", change="created", datetime="2024-01-02T00:00:00Z"),
                entry(b, "/moved.txt", b"v1", change="created", datetime="2024-01-02T00:00:01Z"),
                {"loc": f"{b}/gone.txt", "change": "deleted", "datetime": "2024-01-03T00:00:00Z"},
                entry(
                    b,
                    "/moved.txt",
                    b"version two",
                    change="updated",
                    datetime="2024-01-03T00:00:01Z",
                ),
            ],
            **{"from": AT},
        )
        code, summary = cli_json("sync", b, dest, "--delete")
        assert code == 0, summary
        assert tree(dest) == {"a.txt": b"a", "moved.txt": b"version two"}
        assert src.hits["/gone.txt"] == tries  # not asked again: it is gone
        code, summary = cli_json("sync", b, dest, "--delete")
        assert code == 0 and _set(summary)["failed"] == 0, summary


def test_a_pending_deletion_superseded_by_a_re_creation_is_not_applied(tmp_path: Path) -> None:
    """Deleted (kept pending: no --delete), then created again: a later run with --delete must
    keep the live resource."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.publish([entry(b, "/a.txt", b"a")], at=AT)
        assert cli("sync", b, dest).exit_code == 0
        src.docs["/changelist.xml"] = urlset(
            "changelist",
            [{"loc": f"{b}/a.txt", "change": "deleted", "datetime": "2024-01-02T00:00:00Z"}],
            **{"from": AT},
        )
        code, summary = cli_json("sync", b, dest)
        assert (code, _set(summary)["pending_deletes"]) == (0, 1), summary
        src.docs["/changelist.xml"] = urlset(
            "changelist",
            [
                {"loc": f"{b}/a.txt", "change": "deleted", "datetime": "2024-01-02T00:00:00Z"},
                entry(b, "/a.txt", b"a", change="created", datetime="2024-01-03T00:00:00Z"),
            ],
            **{"from": AT},
        )
        code, summary = cli_json("sync", b, dest, "--delete")
        assert code == 0, summary
        assert (_set(summary)["deleted"], _set(summary)["pending_deletes"]) == (0, 0)
        assert tree(dest) == {"a.txt": b"a"}


def test_a_deletion_never_removes_a_file_this_sync_did_not_write(tmp_path: Path) -> None:
    """A deletion listed for a URI this copy never held, whose path is the user's own file,
    or for a file changed locally since it was written: the file is kept and the refusal
    reported (issue 17.10)."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.files["/b.txt"] = b"b"
        src.publish([entry(b, "/a.txt", b"a"), entry(b, "/b.txt", b"b")], at=AT)
        assert cli("sync", b, dest).exit_code == 0
        (dest / "notes.txt").write_bytes(b"the user's own notes")
        (dest / "b.txt").write_bytes(b"edited by hand")
        src.docs["/changelist.xml"] = urlset(
            "changelist",
            [
                {"loc": f"{b}/notes.txt", "change": "deleted", "datetime": "2024-01-02T00:00:00Z"},
                {"loc": f"{b}/b.txt", "change": "deleted", "datetime": "2024-01-02T00:00:01Z"},
                {"loc": f"{b}/a.txt", "change": "deleted", "datetime": "2024-01-02T00:00:02Z"},
            ],
            **{"from": AT},
        )
        # The Source deletes all it listed, and means it (see test_habits for the guard).
        delete = ("--delete", "--allow-empty")
        code, summary = cli_json("sync", b, dest, *delete)
        assert code == 1, summary
        assert tree(dest) == {"notes.txt": b"the user's own notes", "b.txt": b"edited by hand"}
        messages = " ".join(p["message"] for p in _set(summary)["problems"])
        assert "never held" in messages and "changed since" in messages
        assert _set(summary)["deleted"] == 1
        # The file changed here stays a deletion to make: every later run says so (it used
        # to be forgotten, and the next run said ok over the file the Source no longer
        # lists); the user's own file, never held, was said once.
        code, summary = cli_json("sync", b, dest, *delete)
        problems = _set(summary)["problems"]
        assert code == 1 and [p["uri"] for p in problems] == [f"{b}/b.txt"], summary
        code, summary = cli_json("sync", b, dest)
        assert code == 0 and _set(summary)["pending_deletes"] == 1, summary
        assert cli("audit", b, dest).exit_code == 1
        (dest / "b.txt").unlink()
        code, summary = cli_json("sync", b, dest, *delete)
        assert code == 0 and _set(summary)["pending_deletes"] == 0, summary
        assert tree(dest) == {"notes.txt": b"the user's own notes"}


def test_a_baseline_that_cannot_read_the_whole_list_deletes_nothing(tmp_path: Path) -> None:
    """`--baseline --delete` when a part of the Resource List Index is not read (nested past
    the walk's depth): nothing is deleted and the run exits 1 (issue 17.11, 17.12)."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.files["/deep.txt"] = b"deep"
        src.publish([entry(b, "/a.txt", b"a"), entry(b, "/deep.txt", b"deep")], at=AT)
        assert cli("sync", b, dest).exit_code == 0
        # The Resource List becomes an index whose second part lies 8 levels down.
        src.docs["/resourcelist.xml"] = sitemapindex(
            "resourcelist",
            [{"loc": f"{b}/part-a.xml"}, {"loc": f"{b}/nest-0.xml"}],
            at=AT,
        )
        src.docs["/part-a.xml"] = urlset("resourcelist", [entry(b, "/a.txt", b"a")], at=AT)
        for i in range(8):
            src.docs[f"/nest-{i}.xml"] = sitemapindex(
                "resourcelist", [{"loc": f"{b}/nest-{i + 1}.xml"}]
            )
        src.docs["/nest-8.xml"] = urlset("resourcelist", [entry(b, "/deep.txt", b"deep")], at=AT)
        code, summary = cli_json("sync", b, dest, "--baseline", "--delete")
        assert code == 1, summary
        assert "nothing was deleted" in _set(summary)["incomplete"]
        assert tree(dest) == {"a.txt": b"a", "deep.txt": b"deep"}


def test_two_uris_never_share_one_local_file(tmp_path: Path) -> None:
    """`dir/` and `dir/index.html`, `q%3Fx` and `q?x`, NFC and NFD, names differing in case:
    each pair maps to one file (on some file system). The first owner keeps it, the second is
    refused and reported, and deleting the second never removes the first's file (issue 17.6,
    17.7)."""
    dest = tmp_path / "dest"
    pairs = [
        ("/dir/", "/dir/index.html"),
        ("/q%3Fx", "/q?x"),
        ("/caf%C3%A9", "/cafe%CC%81"),
        ("/Read.txt", "/read.txt"),
    ]
    with hand_source() as src:
        b = src.base
        resources = []
        for first, second in pairs:
            # The server sees the decoded path: only the first of each pair is ever asked for.
            for served in {first, unquote(first)}:
                src.files[served] = b"first " + first.encode()
            resources.append(entry(b, first, b"first " + first.encode()))
            resources.append(entry(b, second, b"second"))
        src.publish(resources, at=AT)
        code, summary = cli_json("sync", b, dest)
        assert code == 1, summary
        problems = _set(summary)["problems"]
        refused = sorted(p["uri"] for p in problems if "same local file" in p["message"])
        assert refused == sorted(b + second for _, second in pairs)
        assert _set(summary)["fetched"] == len(pairs), problems
        copy = tree(dest)
        assert len(copy) == len(pairs)
        assert all(body.startswith(b"first ") for body in copy.values())
        # The Source deletes the second of each pair: the first's file stays.
        src.docs["/changelist.xml"] = urlset(
            "changelist",
            [
                {"loc": b + second, "change": "deleted", "datetime": "2024-01-02T00:00:00Z"}
                for _, second in pairs
            ],
            **{"from": AT},
        )
        code, summary = cli_json("sync", b, dest, "--delete")
        assert tree(dest) == copy, summary
        assert _set(summary)["deleted"] == 0


def test_a_state_directory_planted_as_a_symlink_stops_the_run(tmp_path: Path) -> None:
    """`DEST/.resourcesync` as a symbolic link out of DEST: one clear line, exit 2, nothing
    written outside DEST (issue 17.8)."""
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    (dest / ".resourcesync").symlink_to(outside)
    with hand_source() as src:
        src.files["/a.txt"] = b"a"
        src.publish([entry(src.base, "/a.txt", b"a")], at=AT)
        for command in ("sync", "audit"):
            result = cli(command, src.base, dest)
            assert result.exit_code == 2, result.output
            assert "symbolic link" in result.stderr and "Traceback" not in result.output
            assert len(result.stderr.strip().splitlines()) == 1
            # The state directory named once, where the line says what it is.
            assert result.stderr.count(".resourcesync") == 1, result.stderr
        assert list(outside.iterdir()) == []
        assert not (dest / "a.txt").exists()


def test_a_state_directory_that_is_a_file_stops_the_run(tmp_path: Path) -> None:
    """`DEST/.resourcesync` as a file: one line naming it once, exit 2, the file left as it
    was, nothing synced (a dry run says the same)."""
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / ".resourcesync").write_bytes(b"not mine")
    with hand_source() as src:
        src.files["/a.txt"] = b"a"
        src.publish([entry(src.base, "/a.txt", b"a")], at=AT)
        for args in (("sync",), ("sync", "--dry-run"), ("audit",)):
            result = cli(*args, src.base, dest)
            assert result.exit_code == 2, result.output
            line = result.stderr.strip()
            assert len(line.splitlines()) == 1 and "Traceback" not in result.output
            assert "not a directory" in line and line.count(".resourcesync") == 1, line
        assert (dest / ".resourcesync").read_bytes() == b"not mine"
        assert not (dest / "a.txt").exists()


def test_audit_reads_the_change_list_archive(tmp_path: Path) -> None:
    """Changes listed only in a closed Change List that the archive names are part of the
    Source's state: audit must not call the resources they created extra (issue 10.10)."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.files["/b.txt"] = b"b"
        src.files["/c.txt"] = b"c"
        day2, day3 = "2024-01-02T00:00:00Z", "2024-01-03T00:00:00Z"
        src.publish(
            [entry(b, "/a.txt", b"a")],
            at=AT,
            changes=[entry(b, "/c.txt", b"c", change="created", datetime="2024-01-03T12:00:00Z")],
            changes_from=day3,
            extra_caps=[{"loc": f"{b}/archive.xml", "capability": "changelist-archive"}],
        )
        src.docs["/archive.xml"] = urlset(
            "changelist-archive",
            [
                {"loc": f"{b}/cl1.xml", "from": AT, "until": day2},
                {"loc": f"{b}/cl2.xml", "from": day2, "until": day3},
            ],
        )
        src.docs["/cl1.xml"] = urlset(
            "changelist",
            [entry(b, "/b.txt", b"b", change="created", datetime="2024-01-01T12:00:00Z")],
            **{"from": AT, "until": day2},
        )
        src.docs["/cl2.xml"] = urlset(
            "changelist",
            [entry(b, "/a.txt", b"a", change="deleted", datetime="2024-01-02T12:00:00Z")],
            **{"from": day2, "until": day3},
        )
        code, summary = cli_json("sync", b, dest)
        assert code == 0, summary
        assert tree(dest) == {"b.txt": b"b", "c.txt": b"c"}
        code, report = cli_json("audit", b, dest)
        assert code == 0, report
        assert (report["expected"], report["extra"], report["missing"]) == (2, 0, 0)
        # A file the archive's changes deleted is extra when it comes back.
        (dest / "a.txt").write_bytes(b"a")
        code, report = cli_json("audit", b, dest)
        assert code == 1 and report["extra"] == 1, report


def test_audit_dates_changes_by_datetime_only(tmp_path: Path) -> None:
    """A Change List entry with an old `<lastmod>` and no `rs:md@datetime` is a change of
    unknown time (core 1.1 §7): sync applies it, and audit must expect it rather than skip it
    as older than the Resource List (issue 10.3, 10.10)."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.files["/old.txt"] = b"old"
        src.publish(
            [entry(b, "/a.txt", b"a", lastmod="2023-06-01T00:00:00Z")],
            at=AT,
            changes=[
                entry(b, "/old.txt", b"old", change="created", lastmod="2000-01-01T00:00:00Z"),
                # Older than what the Resource List holds for a.txt: the Resource List wins.
                entry(b, "/a.txt", b"a", change="deleted", lastmod="2020-01-01T00:00:00Z"),
            ],
        )
        dest.mkdir()
        code, report = cli_json("audit", b, dest)
        assert code == 1 and report["missing"] == 2, report
        src.docs["/changelist.xml"] = urlset(
            "changelist",
            [entry(b, "/old.txt", b"old", change="created", lastmod="2000-01-01T00:00:00Z")],
            **{"from": AT},
        )
        assert cli("sync", b, dest).exit_code == 0
        assert tree(dest) == {"a.txt": b"a", "old.txt": b"old"}
        code, report = cli_json("audit", b, dest)
        assert code == 0, report
        assert (report["expected"], report["extra"]) == (2, 0)


def test_a_closed_change_list_given_as_source_leads_to_the_later_lists(tmp_path: Path) -> None:
    """Core §12.1: a closed Change List (with `until`) is not polled forever: its `up` link
    leads to the Capability List and the Source's current Change List, whose later changes
    are applied (issue 10.5)."""
    dest = tmp_path / "dest"
    day2 = "2024-01-02T00:00:00Z"
    with hand_source() as src:
        b = src.base
        for name, body in (("a", b"a"), ("b", b"b"), ("c", b"c")):
            src.files[f"/{name}.txt"] = body
        src.publish([entry(b, "/a.txt", b"a")], at=AT)
        closed = urlset(
            "changelist",
            [entry(b, "/b.txt", b"b", change="created", datetime="2024-01-01T12:00:00Z")],
            **{"from": AT, "until": day2},
        ).replace(
            b"<rs:md capability",
            f'<rs:ln rel="up" href="{b}/capabilitylist.xml"/><rs:md capability'.encode(),
            1,
        )
        src.docs["/cl1.xml"] = closed
        src.docs["/changelist.xml"] = urlset(
            "changelist",
            [entry(b, "/c.txt", b"c", change="created", datetime="2024-01-02T12:00:00Z")],
            **{"from": day2},
        )
        code, summary = cli_json("sync", f"{b}/cl1.xml", dest, "--map", f"{b}/={dest}")
        assert code == 0, summary
        assert tree(dest) == {"a.txt": b"a", "b.txt": b"b", "c.txt": b"c"}
        # Later changes in the current list reach the copy through the closed one too.
        src.files["/d.txt"] = b"d"
        src.docs["/changelist.xml"] = urlset(
            "changelist",
            [
                entry(b, "/c.txt", b"c", change="created", datetime="2024-01-02T12:00:00Z"),
                entry(b, "/d.txt", b"d", change="created", datetime="2024-01-03T12:00:00Z"),
            ],
            **{"from": day2},
        )
        code, summary = cli_json("sync", f"{b}/cl1.xml", dest, "--map", f"{b}/={dest}")
        assert code == 0 and _set(summary)["mode"] == "incremental", summary
        assert tree(dest) == {"a.txt": b"a", "b.txt": b"b", "c.txt": b"c", "d.txt": b"d"}


def test_an_index_of_10000_parts_is_read_whole(tmp_path: Path) -> None:
    """Issue 17.12: 10,000 parts (500 million entries at 50,000 each) is legitimate: every part
    is read and the resource listed in the last one arrives. (Local parts beside the index, so
    the suite stays fast; the walk and its limits are the same as over HTTP.)"""
    dest = tmp_path / "dest"
    docs = tmp_path / "docs"
    docs.mkdir()
    with hand_source() as src:
        b = src.base
        src.files["/last.txt"] = b"the last part's"
        parts = [{"loc": f"http://example.org/parts/p{i:05}.xml"} for i in range(10_000)]
        (docs / "resourcelist.xml").write_bytes(sitemapindex("resourcelist", parts, at=AT))
        empty = urlset("resourcelist", [], at=AT)
        for i in range(9_999):
            (docs / f"p{i:05}.xml").write_bytes(empty)
        (docs / "p09999.xml").write_bytes(
            urlset("resourcelist", [entry(b, "/last.txt", b"the last part's")], at=AT)
        )
        code, summary = cli_json("sync", docs / "resourcelist.xml", dest, "--map", f"{b}/={dest}")
        assert code == 0, summary
        assert _set(summary)["incomplete"] is None
        assert tree(dest) == {"last.txt": b"the last part's"}


def _baselined(src: Any, dest: Path, *paths: str) -> None:
    """A Source holding `paths` (each file's body the first letter of its name) in a
    Resource List at AT, baselined into `dest`."""
    for rel in paths:
        src.files[rel] = rel[1:2].encode()
    src.publish([entry(src.base, rel, src.files[rel]) for rel in paths], at=AT)
    assert cli("sync", src.base, dest).exit_code == 0


def _synced_to_x(src: Any, dest: Path, *paths: str) -> dict[str, Any]:
    """`_baselined`, then `/x.txt` created on 2024-01-03 and synced: the copy's cursor is at
    x. Returns x's entry."""
    b = src.base
    _baselined(src, dest, *paths)
    src.files["/x.txt"] = b"x"
    x = entry(b, "/x.txt", b"x", change="created", datetime="2024-01-03T00:00:00Z")
    src.docs["/changelist.xml"] = urlset("changelist", [x], **{"from": AT})
    code, summary = cli_json("sync", b, dest)
    assert (code, _set(summary)["changes"]) == (0, 1), summary
    return x


def test_a_change_listed_out_of_chronological_order_is_not_skipped(tmp_path: Path) -> None:
    """Core §12.1: a Change List is in forward chronological order, and a Destination finds
    its first unprocessed change by that order, the change's datetime and its URI. A Source
    that dates a change too early — by the file's preserved mtime (`cp -p`, `tar x`), or by
    a transaction's start that committed after a later one — lists it after changes dated
    later, or in a list whose `from` is later. Skipped for its date, the change was lost for
    good, and `sync` and `audit` both said in sync over a copy without the file. The order
    listed is taken as the truth: an entry is no earlier than what precedes it (nor than its
    list's `from`), with a warning; the validator still calls it an error."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        x = _synced_to_x(src, dest, "/a.txt")
        # Appended after the change the copy last applied, dated before it.
        src.files["/y.txt"] = b"y"
        y = entry(b, "/y.txt", b"y", change="created", datetime="2024-01-02T00:00:00Z")
        src.docs["/changelist.xml"] = urlset("changelist", [x, y], **{"from": AT})
        code, summary = cli_json("sync", b, dest)
        assert (code, _set(summary)["changes"], _set(summary)["fetched"]) == (0, 1, 1), summary
        assert tree(dest)["y.txt"] == b"y"
        warned = [p["message"] for p in _set(summary)["problems"]]
        assert any("out of chronological order" in m and "y.txt" in m for m in warned), warned
        code, summary = cli_json("sync", b, dest)
        assert (code, _set(summary)["changes"], _set(summary)["fetched"]) == (0, 0, 0), summary
        # In the next list (its `from` after the copy's cursor), dated long before: a file
        # copied in with its old mtime kept.
        src.files["/old.txt"] = b"old"
        old = entry(b, "/old.txt", b"old", change="created", datetime="2023-06-01T00:00:00Z")
        src.docs["/changelist.xml"] = sitemapindex(
            "changelist",
            [
                {"loc": f"{b}/cl1.xml", "from": AT, "until": "2024-01-04T00:00:00Z"},
                {"loc": f"{b}/cl2.xml", "from": "2024-01-04T00:00:00Z"},
            ],
            **{"from": AT},
        )
        src.docs["/cl1.xml"] = urlset(
            "changelist", [x, y], **{"from": AT, "until": "2024-01-04T00:00:00Z"}
        )
        src.docs["/cl2.xml"] = urlset("changelist", [old], **{"from": "2024-01-04T00:00:00Z"})
        code, summary = cli_json("sync", b, dest)
        assert (code, _set(summary)["changes"], _set(summary)["fetched"]) == (0, 1, 1), summary
        assert tree(dest) == {"a.txt": b"a", "x.txt": b"x", "y.txt": b"y", "old.txt": b"old"}
        code, summary = cli_json("sync", b, dest)
        assert (code, _set(summary)["changes"], _set(summary)["fetched"]) == (0, 0, 0), summary
        assert cli("audit", b, dest).exit_code == 0
        # The validator still calls the lists wrong.
        assert cli("validate", f"{b}/cl2.xml").exit_code == 1


def test_a_change_that_appears_late_behind_the_cursor_is_applied(tmp_path: Path) -> None:
    """A Source that builds its Change List from a database, sorted by change time, lists a
    change whose transaction committed after a later one had been read at that change's
    (earlier) time: behind the change this copy last applied, where a cursor never looks
    again. Every run said ok over a copy without it. A run looks back `--lookback` (10
    minutes by default) behind its cursor and takes what the copy does not hold as listed
    there, with a warning; what it holds is not counted again, and a deletion listed there is
    applied. Further back, a change is the Source's to re-date (or a `--baseline`'s)."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        x = _synced_to_x(src, dest, "/a.txt", "/w.txt")
        # Committed late, listed in time order: before x.
        src.files["/y.txt"] = b"y"
        y = entry(b, "/y.txt", b"y", change="created", datetime="2024-01-02T23:59:50Z")
        w = {"loc": f"{b}/w.txt", "change": "deleted", "datetime": "2024-01-02T23:59:55Z"}
        del src.files["/w.txt"]
        src.docs["/changelist.xml"] = urlset("changelist", [y, w, x], **{"from": AT})
        code, summary = cli_json("sync", b, dest, "--lookback", "0")
        assert (code, _set(summary)["changes"]) == (0, 0), summary  # what it did before
        code, summary = cli_json("sync", b, dest, "--delete")
        s = _set(summary)
        assert (code, s["changes"], s["fetched"], s["deleted"]) == (0, 2, 1, 1), summary
        assert tree(dest) == {"a.txt": b"a", "x.txt": b"x", "y.txt": b"y"}
        assert s["cursor"] == "2024-01-03T00:00:00Z"
        warned = [(p["uri"], p["message"]) for p in s["problems"]]
        assert [u for u, m in warned if "listed late" in m] == [f"{b}/y.txt"], warned
        # What the copy holds as listed behind its cursor is not a change again.
        code, summary = cli_json("sync", b, dest, "--delete")
        s = _set(summary)
        assert (code, s["changes"], s["fetched"], s["deleted"], s["problems"]) == (
            0,
            0,
            0,
            0,
            [],
        ), summary
        # Two days behind: outside the default window, inside a wider one.
        src.files["/z.txt"] = b"z"
        z = entry(b, "/z.txt", b"z", change="created", datetime="2024-01-01T00:00:01Z")
        src.docs["/changelist.xml"] = urlset("changelist", [z, y, w, x], **{"from": AT})
        code, summary = cli_json("sync", b, dest)
        assert (code, _set(summary)["changes"]) == (0, 0), summary
        code, summary = cli_json("sync", b, dest, "--lookback", "3d")
        assert (code, _set(summary)["changes"], _set(summary)["fetched"]) == (0, 1, 1), summary
        assert tree(dest)["z.txt"] == b"z"
        assert cli("audit", b, dest).exit_code == 0
        # A copy made by other means, as of a time given with `--from`: that run does not look
        # behind it, and the next runs take the files in place there for what they hold.
        other = tmp_path / "other"
        other.mkdir()
        (other / "a.txt").write_bytes(b"a")
        (other / "y.txt").write_bytes(b"y")
        code, summary = cli_json("sync", b, other, "--from", "2024-01-02T23:59:59Z")
        assert (code, sorted(tree(other))) == (0, ["a.txt", "x.txt", "y.txt"]), summary
        code, summary = cli_json("sync", b, other)
        s = _set(summary)
        assert (code, s["changes"], s["fetched"], s["problems"]) == (0, 0, 0, []), summary
        bad = cli("sync", b, dest, "--lookback", "soon")
        assert bad.exit_code == 2 and "not a duration: 'soon'" in bad.stderr, bad.stderr


def test_audit_expects_what_a_change_listed_late_behind_the_resource_list_brought(
    tmp_path: Path,
) -> None:
    """A change committed late and dated minutes before the Resource List's `at` is not in
    that list (made before the commit), and a cursor at `at` never reads it: `sync
    --lookback` takes it, and `audit` read the Resource List plus the changes after `at`
    alone, so it called the file the copy rightly holds "extra" (exit 1, a false alarm). It
    reads the changes listed `--lookback` behind `at` too; further back, neither does."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        _baselined(src, dest, "/a.txt", "/b.txt")
        # Committed after the Resource List was made, dated two minutes before its `at`.
        src.files["/y.txt"] = b"y"
        src.files["/b.txt"] = b"B"
        y = entry(b, "/y.txt", b"y", change="created", datetime="2023-12-31T23:58:00Z")
        b2 = entry(b, "/b.txt", b"B", change="updated", datetime="2023-12-31T23:59:00Z")
        del src.files["/a.txt"]
        a = {"loc": f"{b}/a.txt", "change": "deleted", "datetime": "2024-01-01T00:01:00Z"}
        src.docs["/changelist.xml"] = urlset(
            "changelist", [y, b2, a], **{"from": "2023-12-31T23:00:00Z"}
        )
        code, summary = cli_json("sync", b, dest, "--delete")
        s = _set(summary)
        assert (code, s["fetched"], s["deleted"]) == (0, 2, 1), summary
        assert tree(dest) == {"b.txt": b"B", "y.txt": b"y"}
        code, report = cli_json("audit", b, dest)
        assert code == 0, report
        assert (report["in_sync"], report["extra"], report["different"]) == (2, 0, 0), report
        # Without the window, as before: what the Resource List missed reads as wrong.
        code, report = cli_json("audit", b, dest, "--lookback", "0")
        assert code == 1 and (report["extra"], report["different"]) == (1, 1), report
        # A copy that lacks the late change is told so.
        (dest / "y.txt").unlink()
        code, report = cli_json("audit", b, dest)
        assert code == 1 and report["missing"] == 1, report


def test_a_source_dated_at_year_one_is_followed(tmp_path: Path) -> None:
    """A Resource List whose `at` is `0001-01-01T00:00:00Z` (a placeholder some Sources
    write): the copy's cursor is there, and the window `--lookback` looks behind it (and
    `audit` behind `at`) began before year 1 — every later run and audit ended in a Python
    OverflowError. The window stops at the earliest datetime."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.publish([entry(b, "/a.txt", b"a")], at="0001-01-01T00:00:00Z")
        assert cli("sync", b, dest).exit_code == 0
        code, summary = cli_json("sync", b, dest)
        assert (code, _set(summary)["changes"]) == (0, 0), summary
        code, report = cli_json("audit", b, dest)
        assert code == 0 and report["in_sync"] == 1, report


def test_a_resource_list_without_its_time_is_followed_and_said(tmp_path: Path) -> None:
    """A Resource List without `at` (Appendix A makes it mandatory; simple generators leave it
    out) beside a Change List: which listed changes come after it cannot be told, so the copy
    is the Resource List's on every run (a baseline) — and each run now says so, instead of
    an ok that hid a change the Change List gives and the Resource List does not show yet."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"], src.files["/b.txt"] = b"alpha", b"beta"
        src.publish([entry(b, "/a.txt", b"alpha"), entry(b, "/b.txt", b"beta")])
        timeless = src.docs["/resourcelist.xml"].replace(b' at="2024-01-01T00:00:00Z"', b"")
        src.docs["/resourcelist.xml"] = timeless
        change = {"change": "updated", "datetime": "2024-02-01T00:00:00Z"}
        src.docs["/changelist.xml"] = urlset(
            "changelist", [{**entry(b, "/b.txt", b"BETA"), **change}], **{"from": AT}
        )
        for _ in range(2):
            code, summary = cli_json("sync", b, dest)
            assert code == 0 and summary["sets"][0]["mode"] == "baseline", summary
            said = [p["message"] for p in summary["sets"][0]["problems"]]
            assert len(said) == 1 and "the Resource List gives no time (`at`" in said[0], said
            assert tree(dest) == {"a.txt": b"alpha", "b.txt": b"beta"}


def test_a_uri_refused_its_file_is_refused_again_by_every_later_run(tmp_path: Path) -> None:
    """A URI refused because another holds its local file was said once, by the run that
    planned it; the next run, incremental, did not look at it again and said ok over a copy
    that lacks it. It is remembered as refused (as a URI no mapping covers is): every run says
    it until the Source stops listing it, and none writes over the file that is held."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/Read.txt"] = b"first"
        src.files["/b.txt"] = b"b"
        src.publish([entry(b, "/Read.txt", b"first"), entry(b, "/read.txt", b"second")], at=AT)
        code, summary = cli_json("sync", b, dest)
        assert code == 1, summary
        for _ in range(2):
            code, summary = cli_json("sync", b, dest)
            assert code == 1, summary
            problems = _set(summary)["problems"]
            assert [p["uri"] for p in problems if "same local file" in p["message"]] == [
                b + "/read.txt"
            ], problems
            assert _set(summary)["refused"] == 1
            assert tree(dest) == {"Read.txt": b"first"}
        # A change elsewhere is applied; the refusal is still said.
        src.docs["/changelist.xml"] = urlset(
            "changelist",
            [entry(b, "/b.txt", b"b", change="created", datetime="2024-01-02T00:00:00Z")],
            **{"from": AT},
        )
        code, summary = cli_json("sync", b, dest)
        assert code == 1 and _set(summary)["refused"] == 1, summary
        assert tree(dest) == {"Read.txt": b"first", "b.txt": b"b"}
        # The Source deletes the second URI: nothing of the first's is touched, and ok.
        src.docs["/changelist.xml"] = urlset(
            "changelist",
            [
                entry(b, "/b.txt", b"b", change="created", datetime="2024-01-02T00:00:00Z"),
                {"loc": b + "/read.txt", "change": "deleted", "datetime": "2024-01-03T00:00:00Z"},
            ],
            **{"from": AT},
        )
        code, summary = cli_json("sync", b, dest, "--delete")
        assert code == 0, summary
        assert tree(dest) == {"Read.txt": b"first", "b.txt": b"b"}
        code, summary = cli_json("sync", b, dest)
        assert code == 0, summary


def test_a_deletion_that_failed_is_made_by_the_next_run(tmp_path: Path, monkeypatch: Any) -> None:
    """A deletion the Source listed that could not be made here (the file busy, a directory
    the copy cannot write) was said by that run and then forgotten: once the cursor had moved
    past it by more than the lookback (which found it again by chance, as "listed late"), the
    runs said ok over the file the Source had deleted (audit: extra), with --delete too. It
    is kept pending: the next run with --delete makes it (without, counts it pending, as any
    deletion kept)."""
    import errno

    from resourcesync.destination.mirror import Mirror

    dest = tmp_path / "dest"
    later = "2024-01-03T00:00:00Z"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.files["/b.txt"] = b"b"
        src.publish([entry(b, "/a.txt", b"a"), entry(b, "/b.txt", b"b")], at=AT)
        assert cli("sync", b, dest).exit_code == 0
        deleted = {"loc": b + "/b.txt", "change": "deleted", "datetime": "2024-01-02T00:00:00Z"}
        src.docs["/changelist.xml"] = urlset("changelist", [deleted], **{"from": AT})
        real = Mirror.delete

        def busy(self: Mirror, uri: str) -> bool:
            raise OSError(errno.EBUSY, "Device or resource busy")

        monkeypatch.setattr(Mirror, "delete", busy)
        code, summary = cli_json("sync", b, dest, "--delete", "--lookback", "0")
        assert code == 1 and _set(summary)["failed"] == 1, summary
        monkeypatch.setattr(Mirror, "delete", real)
        # A later change moves the cursor on.
        src.files["/a.txt"] = b"a2"
        changed = entry(b, "/a.txt", b"a2", change="updated", datetime=later)
        src.docs["/changelist.xml"] = urlset("changelist", [deleted, changed], **{"from": AT})
        code, summary = cli_json("sync", b, dest, "--lookback", "0")  # kept, pending
        assert code == 0 and _set(summary)["pending_deletes"] == 1, summary
        assert (dest / "b.txt").exists()
        code, summary = cli_json("sync", b, dest, "--delete", "--lookback", "0")
        assert code == 0, summary
        assert tree(dest) == {"a.txt": b"a2"}
        assert cli("audit", b, dest).exit_code == 0


def test_a_change_value_in_another_case_is_read_as_it_means_another_word_is_not_applied(
    tmp_path: Path,
) -> None:
    """`Deleted` or ` created` (a template's case or spaces) is read as the value it means,
    one warning (read as written, the deletion was fetched, a 404 on every run, and `audit`
    said in sync over the file the Source deleted); another word (`modified`) is a change
    whose meaning is unknown: not applied, said by every run, `audit` unknown. The validator
    still calls both errors."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        for name in ("a", "b", "c"):
            src.files[f"/{name}.txt"] = name.encode()
        src.publish([entry(b, "/a.txt", b"a"), entry(b, "/b.txt", b"b")], at=AT)
        assert cli("sync", b, dest).exit_code == 0
        del src.files["/a.txt"]
        src.files["/b.txt"] = b"b, edited"
        changes = [
            {"loc": f"{b}/a.txt", "change": "Deleted", "datetime": "2024-01-02T00:00:00Z"},
            entry(b, "/b.txt", b"b, edited", change="modified", datetime="2024-01-02T00:00:01Z"),
            entry(b, "/c.txt", b"c", change=" created", datetime="2024-01-02T00:00:02Z"),
        ]
        src.docs["/changelist.xml"] = urlset("changelist", changes, **{"from": AT})
        said = []
        for _ in range(2):
            code, summary = cli_json("sync", b, dest, "--delete")
            assert code == 1 and _set(summary)["refused"] == 1, summary
            messages = [(p["uri"], p["message"]) for p in _set(summary)["problems"]]
            assert src.hits["/a.txt"] == 1 and tree(dest) == {"b.txt": b"b", "c.txt": b"c"}
            assert any("rs:md change 'Deleted' read as 'deleted'" in m for _, m in messages), (
                messages
            )
            said += [m for u, m in messages if u == f"{b}/b.txt" and "not fetched" in m]
        # Named by the run that read it, and by the next (the cursor past it) as it was kept.
        assert all(
            m.startswith("a Change List entry with change 'modified', none of") for m in said
        ), said
        assert len(said) == 2
        code, found = cli_json("audit", b, dest)
        assert code == 1, found
        assert (found["unknown"], found["in_sync"], found["extra"]) == (1, 1, 0), found
        # The validator sees the values as written.
        report = validate(src.docs["/changelist.xml"])
        values = [f for f in report.findings if f.rule == "core-12.1-change-value"]
        assert len(values) == 3 and all(f.level == "error" for f in values), report.findings


def test_a_capability_in_another_case_is_read_as_it_means(tmp_path: Path) -> None:
    """`capability="ResourceList"` (a template's case, or spaces): read as the value it means,
    one warning a document. Read as written, the Capability List named no Resource List (and
    a list saying `ResourceList` was refused as another kind of document, exit 2). The
    validator still calls it an error."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.files["/b.txt"] = b"b"
        src.publish([entry(b, "/a.txt", b"a")], at=AT)
        src.docs["/.well-known/resourcesync"] = urlset(
            "Description", [{"loc": f"{b}/capabilitylist.xml", "capability": "CapabilityList"}]
        )
        src.docs["/capabilitylist.xml"] = urlset(
            " capabilitylist",
            [
                {"loc": f"{b}/resourcelist.xml", "capability": "ResourceList"},
                {"loc": f"{b}/changelist.xml", "capability": "CHANGELIST"},
            ],
        )
        src.docs["/resourcelist.xml"] = urlset("ResourceList", [entry(b, "/a.txt", b"a")], at=AT)
        code, summary = cli_json("sync", b, dest)
        assert code == 0, summary
        assert tree(dest) == {"a.txt": b"a"}
        warned = [p["message"] for p in _set(summary)["problems"]]
        assert any("capability 'ResourceList' read as 'resourcelist'" in m for m in warned), warned
        src.docs["/changelist.xml"] = urlset(
            "ChangeList",
            [entry(b, "/b.txt", b"b", change="created", datetime="2024-01-02T00:00:00Z")],
            **{"from": AT},
        )
        code, summary = cli_json("sync", b, dest)
        assert code == 0 and _set(summary)["mode"] == "incremental", summary
        assert tree(dest) == {"a.txt": b"a", "b.txt": b"b"}
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["in_sync"] == 2, found
        report = validate(src.docs["/resourcelist.xml"])
        assert any(f.level == "error" and "ResourceList" in f.message for f in report.findings), (
            report.findings
        )


def test_a_capability_listed_more_than_once_is_read_whole(tmp_path: Path) -> None:
    """A Capability List that lists two Resource Lists and two Change Lists (core §9.2 asks
    for one of each, an index when they are many). Only the first of each was read: the
    resources of the second list never fetched, the changes of the second Change List never
    applied, and every run said ok (audit in sync). All are read, as the parts of one index
    (the Change Lists in the order of their `from`), and each run says so once a capability;
    the validator calls the list wrong."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        for name in "abcde":
            src.files[f"/{name}.txt"] = name.encode()
        src.capabilities(
            [
                {"loc": f"{b}/rl1.xml", "capability": "resourcelist"},
                {"loc": f"{b}/cl2.xml", "capability": "changelist"},
                {"loc": f"{b}/rl2.xml", "capability": "resourcelist"},
                {"loc": f"{b}/cl1.xml", "capability": "changelist"},
            ]
        )
        src.docs["/rl1.xml"] = urlset(
            "resourcelist", [entry(b, "/a.txt", b"a"), entry(b, "/b.txt", b"b")], at=AT
        )
        # Made an hour later: the copy is as of the earlier list, the changes after it applied.
        src.docs["/rl2.xml"] = urlset(
            "resourcelist", [entry(b, "/c.txt", b"c")], at="2024-01-01T01:00:00Z"
        )
        src.docs["/cl1.xml"] = urlset(
            "changelist",
            [entry(b, "/d.txt", b"d", change="created", datetime="2024-01-01T12:00:00Z")],
            **{"from": AT, "until": "2024-01-02T00:00:00Z"},
        )
        src.docs["/cl2.xml"] = urlset(
            "changelist",
            [{"loc": f"{b}/a.txt", "change": "deleted", "datetime": "2024-01-03T00:00:00Z"}],
            **{"from": "2024-01-02T00:00:00Z"},
        )
        code, summary = cli_json("sync", b, dest, "--delete")
        assert code == 0, summary
        assert tree(dest) == {"b.txt": b"b", "c.txt": b"c", "d.txt": b"d"}
        assert _set(summary)["cursor"] == "2024-01-03T00:00:00Z", summary
        warned = [p["message"] for p in _set(summary)["problems"]]
        for cap in ("resourcelist", "changelist"):
            assert sum(f"2 documents with capability {cap!r}" in m for m in warned) == 1, warned
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["in_sync"] == 3, found
        # The second Change List goes on: a change listed there is applied by the next run.
        src.docs["/cl2.xml"] = urlset(
            "changelist",
            [
                {"loc": f"{b}/a.txt", "change": "deleted", "datetime": "2024-01-03T00:00:00Z"},
                entry(b, "/e.txt", b"e", change="created", datetime="2024-01-04T00:00:00Z"),
            ],
            **{"from": "2024-01-02T00:00:00Z"},
        )
        code, summary = cli_json("sync", b, dest, "--delete")
        assert code == 0 and _set(summary)["mode"] == "incremental", summary
        assert tree(dest) == {"b.txt": b"b", "c.txt": b"c", "d.txt": b"d", "e.txt": b"e"}
        report = validate(src.docs["/capabilitylist.xml"])
        assert any(f.rule == "core-9.2-capability-repeated" for f in report.findings), (
            report.findings
        )


def test_a_change_list_index_of_indexes_is_read_through(tmp_path: Path) -> None:
    """A Change List Index whose part is itself a Change List Index (an index of indexes):
    its parts were read as changes of a Change List — entries with no `change`, never
    applied, exit 1 on every run. Its parts are read in its place, said once a run."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"], src.files["/b.txt"] = b"a", b"b"
        src.publish([entry(b, "/a.txt", b"a")], at=AT)
        assert cli("sync", b, dest).exit_code == 0
        src.docs["/changelist.xml"] = sitemapindex(
            "changelist", [{"loc": f"{b}/inner.xml", "from": AT}], **{"from": AT}
        )
        src.docs["/inner.xml"] = sitemapindex(
            "changelist", [{"loc": f"{b}/cl1.xml", "from": AT}], **{"from": AT}
        )
        src.docs["/cl1.xml"] = urlset(
            "changelist",
            [entry(b, "/b.txt", b"b", change="created", datetime="2024-01-02T00:00:00Z")],
            **{"from": AT},
        )
        code, summary = cli_json("sync", b, dest)
        assert code == 0, summary
        assert tree(dest) == {"a.txt": b"a", "b.txt": b"b"}
        warned = [p["message"] for p in _set(summary)["problems"]]
        assert any("listed as a part of a Change List Index" in m for m in warned), warned
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["in_sync"] == 2, found


def test_a_resource_list_entry_that_says_deleted_is_not_listed(tmp_path: Path) -> None:
    """A Source that keeps its deleted resources in its Resource List as tombstones
    (`change="deleted"`, as OAI-PMH keeps deleted records). Each run asked for them (a 404,
    exit 1 for ever), and `audit` said in sync over the copy that still held them. A
    tombstone is taken as not listed: not fetched, not expected, deleted with --delete."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"], src.files["/b.txt"] = b"a", b"b"
        src.publish([entry(b, "/a.txt", b"a"), entry(b, "/b.txt", b"b")], at=AT)
        assert cli("sync", b, dest).exit_code == 0
        del src.files["/b.txt"]
        src.publish(
            [entry(b, "/a.txt", b"a"), {"loc": f"{b}/b.txt", "change": "deleted"}],
            at="2024-01-02T00:00:00Z",
        )
        code, found = cli_json("audit", b, dest)
        assert code == 1 and found["extra"] == 1 and found["in_sync"] == 1, found
        code, summary = cli_json("sync", b, dest, "--baseline", "--delete")
        assert code == 0, summary
        assert tree(dest) == {"a.txt": b"a"}
        warned = [p["message"] for p in _set(summary)["problems"]]
        assert any('1 entry says change="deleted"' in m for m in warned), warned
        assert src.hits.get("/b.txt") == 1  # by the first run only
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["in_sync"] == 1, found


def test_a_resource_dump_manifest_entry_that_says_deleted_is_not_listed(tmp_path: Path) -> None:
    """The same tombstone in the manifest of a Resource Dump, for a Source that publishes
    only its dump (no Resource List): the entry was taken as a member to extract, not found
    in the package, then asked for on its own (a 404, exit 1 for ever), and `audit` said in
    sync over the copy that still held it. Taken as not listed, as in a Resource List."""

    def dump(b: str, entries: list[dict[str, Any]], members: dict[str, bytes], at: str) -> None:
        zipped = package(members, urlset("resourcedump-manifest", entries, at=at))
        src.files["/dump/part1.zip"] = zipped
        src.docs["/resourcedump.xml"] = urlset(
            "resourcedump", [entry(b, "/dump/part1.zip", zipped)], at=at
        )

    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.capabilities([{"loc": f"{b}/resourcedump.xml", "capability": "resourcedump"}])
        src.files["/a.txt"], src.files["/b.txt"] = b"a", b"b"
        listed = [entry(b, "/a.txt", b"a", path="/a.txt"), entry(b, "/b.txt", b"b", path="/b.txt")]
        dump(b, listed, {"a.txt": b"a", "b.txt": b"b"}, AT)
        code, summary = cli_json("sync", b, dest, "--delete")
        assert code == 0 and tree(dest) == {"a.txt": b"a", "b.txt": b"b"}, summary
        del src.files["/b.txt"]
        tomb = {"loc": f"{b}/b.txt", "change": "deleted"}
        dump(b, [listed[0], tomb], {"a.txt": b"a"}, "2024-01-02T00:00:00Z")
        code, found = cli_json("audit", b, dest)
        assert code == 1 and found["extra"] == 1 and found["in_sync"] == 1, found
        code, summary = cli_json("sync", b, dest, "--delete")
        assert code == 0, summary
        assert tree(dest) == {"a.txt": b"a"}
        warned = [p["message"] for p in _set(summary)["problems"]]
        assert any('1 entry says change="deleted"' in m for m in warned), warned
        assert src.hits.get("/b.txt") is None  # never asked for
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["in_sync"] == 1, found


def test_a_uri_listed_twice_in_a_resource_list_takes_its_last_entry_as_audit_does(
    tmp_path: Path,
) -> None:
    """A Resource List that lists one URI twice with two descriptions (a sitemap generated
    from a join, an item in two collections). `audit` takes the last entry; a baseline took
    the first whenever the last described what the copy held: it failed for ever on a digest
    mismatch while `audit` said in sync, or said ok over the bytes of the first entry while
    `audit` said different. Now the last entry wins in both, and the run says the list is
    bent (the validator calls it an error)."""
    old, new = b"old bytes", b"new bytes!"
    with hand_source() as src:
        b = src.base
        for case, served in (("last held", old), ("first served", new)):
            dest = tmp_path / case
            src.files["/x.txt"], src.files["/y.txt"] = old, b"y"
            src.publish([entry(b, "/x.txt", old), entry(b, "/y.txt", b"y")])
            code, summary = cli_json("sync", b, dest)
            assert code == 0 and tree(dest) == {"x.txt": old, "y.txt": b"y"}, summary
            src.files["/x.txt"] = served
            twice = [entry(b, "/x.txt", new), entry(b, "/y.txt", b"y"), entry(b, "/x.txt", old)]
            src.publish(twice, at="2024-01-02T00:00:00Z")
            code, summary = cli_json("sync", b, dest, "--baseline")
            assert code == 0, (case, summary)
            assert tree(dest) == {"x.txt": old, "y.txt": b"y"}, case
            got = _set(summary)
            assert (got["fetched"], got["unchanged"], got["failed"]) == (0, 2, 0), (case, got)
            warned = [p["message"] for p in got["problems"]]
            assert any(
                m.startswith("warning: 1 entry lists again a URI") and m.endswith(f"{b}/x.txt")
                for m in warned
            ), warned
            code, found = cli_json("audit", b, dest)
            assert code == 0 and found["in_sync"] == 2, (case, found)

        # The other way round: the last entry is the new one — fetched, counted once.
        dest = tmp_path / "last new"
        src.files["/x.txt"] = old
        src.publish([entry(b, "/x.txt", old), entry(b, "/y.txt", b"y")])
        assert cli_json("sync", b, dest)[0] == 0
        src.files["/x.txt"] = new
        twice = [entry(b, "/x.txt", old), entry(b, "/y.txt", b"y"), entry(b, "/x.txt", new)]
        src.publish(twice, at="2024-01-03T00:00:00Z")
        code, summary = cli_json("sync", b, dest, "--baseline")
        got = _set(summary)
        assert code == 0 and (got["fetched"], got["unchanged"]) == (1, 1), got
        assert tree(dest) == {"x.txt": new, "y.txt": b"y"}
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["in_sync"] == 2, found


def test_a_uri_listed_twice_in_a_resource_dump_takes_its_last_entry_as_audit_does(
    tmp_path: Path,
) -> None:
    """The same for a Source that publishes only its Resource Dump: a manifest listing one URI
    twice (two members) had both extracted, and a run over a copy that held the last one
    extracted the first — ok over the bytes `audit` (the last entry) called different. The
    last entry of each URI is taken, in one manifest and across packages, and said."""
    old, new = b"old bytes", b"new bytes!"
    with hand_source() as src:
        b = src.base
        src.capabilities([{"loc": f"{b}/resourcedump.xml", "capability": "resourcedump"}])
        src.files["/x.txt"] = new  # what the Source serves on its own is not the question
        one = [entry(b, "/x.txt", new, path="/x1.txt"), entry(b, "/x.txt", old, path="/x2.txt")]
        z = package({"x1.txt": new, "x2.txt": old}, urlset("resourcedump-manifest", one, at=AT))
        two = [
            package(
                {"x.txt": body},
                urlset("resourcedump-manifest", [entry(b, "/x.txt", body, path="/x.txt")], at=AT),
            )
            for body in (new, old)
        ]
        layouts = {"one manifest": [z], "two packages": two}
        for case, packages in layouts.items():
            parts = []
            for n, zipped in enumerate(packages):
                src.files[f"/p{n}.zip"] = zipped
                parts.append(entry(b, f"/p{n}.zip", zipped))
            for gone in range(len(packages), 2):
                src.files.pop(f"/p{gone}.zip", None)
            src.docs["/resourcedump.xml"] = urlset("resourcedump", parts, at=AT)
            dest = tmp_path / case
            for run in ("first", "again"):
                code, summary = cli_json(
                    "sync", b, dest, *(["--baseline"] if run == "again" else [])
                )
                got = _set(summary)
                assert code == 0 and tree(dest) == {"x.txt": old}, (case, run, got)
                warned = [p["message"] for p in got["problems"]]
                assert any(
                    m.startswith("warning: 1 entry lists again a URI the Resource Dump")
                    for m in warned
                ), (case, run, warned)
                code, found = cli_json("audit", b, dest)
                assert code == 0 and found["in_sync"] == 1, (case, run, found)
            if case == "one manifest":
                assert (got["fetched"], got["unchanged"]) == (0, 1), got


def test_a_resource_dump_that_spells_a_uri_another_way_keeps_its_file(tmp_path: Path) -> None:
    """A dump-only Source whose next manifest spells a resource another way (`%61.txt` for
    `a.txt`, one URI): the member was written to the same local file, and then, the record
    being under the old spelling that the dump no longer listed, deleted with `--delete` —
    `sync` said ok over a copy without the file (found by test_bent_lists.py). The record
    goes over to the spelling listed now, as from a Resource List."""

    def dump(b: str, rel: str, at: str) -> None:
        manifest = urlset("resourcedump-manifest", [entry(b, rel, b"a", path="/m.txt")], at=at)
        src.files["/p.zip"] = zipped = package({"m.txt": b"a"}, manifest)
        src.docs["/resourcedump.xml"] = urlset("resourcedump", [entry(b, "/p.zip", zipped)], at=at)

    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.capabilities([{"loc": f"{b}/resourcedump.xml", "capability": "resourcedump"}])
        dump(b, "/a.txt", AT)
        assert cli_json("sync", b, dest, "--delete")[0] == 0
        dump(b, "/%61.txt", "2024-01-02T00:00:00Z")
        for _ in range(2):
            code, summary = cli_json("sync", b, dest, "--delete")
            assert code == 0 and tree(dest) == {"a.txt": b"a"}, summary
            assert _set(summary)["deleted"] == 0, summary
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["in_sync"] == 1, found


def test_a_change_the_change_lists_never_listed_is_found_by_a_newer_resource_list(
    tmp_path: Path,
) -> None:
    """A Source whose Change Lists missed a change (a bug, a file changed behind its
    publisher) but whose newer Resource List gives it: every incremental run said ok over
    the old bytes (only `audit` told). Once `--reconcile-every` has passed since the copy was
    last compared with a Resource List, a run that finds a newer one compares the copy with
    it as a baseline does (what the copy holds as listed is not fetched again), and says so;
    with 0, never."""
    dest, other = tmp_path / "dest", tmp_path / "other"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"], src.files["/b.txt"], src.files["/c.txt"] = b"v1", b"b", b"c"
        kept = entry(b, "/c.txt", b"c")
        listed = [entry(b, "/a.txt", b"v1"), entry(b, "/b.txt", b"b"), kept]
        src.publish(listed, at=AT)
        for copy in (dest, other):
            assert cli("sync", b, copy, "--delete").exit_code == 0
        # Not due yet: the copies were compared a moment ago (by this machine's clock).
        src.files["/a.txt"] = b"v2"
        del src.files["/b.txt"]
        src.publish([entry(b, "/a.txt", b"v2"), kept], at="2024-01-09T00:00:00Z", changes_from=AT)
        code, summary = cli_json("sync", b, dest, "--delete", "--reconcile-every", "1s")
        assert code == 0 and _set(summary)["mode"] == "incremental", summary
        time.sleep(1.1)
        code, summary = cli_json("sync", b, other, "--delete", "--reconcile-every", "0")
        assert code == 0 and _set(summary)["mode"] == "incremental", summary
        assert tree(other) == {"a.txt": b"v1", "b.txt": b"b", "c.txt": b"c"}  # never compared
        hits = src.hits.get("/c.txt")
        code, summary = cli_json("sync", b, dest, "--delete", "--reconcile-every", "1s")
        assert code == 0 and _set(summary)["mode"] == "baseline", summary
        said = [p["message"] for p in _set(summary)["problems"]]
        assert any("compared with the Resource List of 2024-01-09T00:00:00Z" in m for m in said)
        assert tree(dest) == {"a.txt": b"v2", "c.txt": b"c"}
        assert src.hits.get("/c.txt") == hits  # what the copy holds as listed: not fetched
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["in_sync"] == 2, found
        # Compared now: the next runs follow the Change Lists again.
        code, summary = cli_json("sync", b, dest, "--delete", "--reconcile-every", "1h")
        assert code == 0 and _set(summary)["mode"] == "incremental", summary


def test_a_uri_the_source_spells_another_way_is_the_same_resource(tmp_path: Path) -> None:
    """RFC 3986 §6.2.2: `%7E` and `~`, `%2e` and `.`, a host in upper case spell one URI; an
    IRI's `新` is `%E6%96%B0` (RFC 3987 §3.1). A Source whose Change List spells a resource
    otherwise than its Resource List did had its update refused ("maps to the same local
    file as …") and its deletion "never held" — said once, and the next run said ok over the
    file the Source deleted. The copy's record goes over to the spelling listed now, and the
    change is applied."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a~b.txt"], src.files["/c.txt"], src.files["/d.txt"] = b"x", b"c", b"d"
        src.files["/新.txt"] = b"n"
        listed = [
            entry(b, "/a%7Eb.txt", b"x"),
            entry(b, "/c.txt", b"c"),
            entry(b, "/d%2etxt", b"d"),
            entry(b, "/新.txt", b"n"),
        ]
        src.publish(listed, at=AT)
        assert cli("sync", b, dest).exit_code == 0
        assert tree(dest) == {"a~b.txt": b"x", "c.txt": b"c", "d.txt": b"d", "新.txt": b"n"}
        del src.files["/a~b.txt"]
        src.files["/c.txt"], src.files["/新.txt"] = b"cc", b"nn"
        port = b.rsplit(":", 1)[1]
        shouting = f"HTTP://127.0.0.1:{port}"
        src.publish(
            [entry(b, "/c.txt", b"cc"), entry(b, "/d.txt", b"d"), entry(b, "/新.txt", b"nn")],
            at=AT,
            changes=[
                entry(
                    b, "/%e6%96%b0.txt", b"nn", change="updated", datetime="2024-01-01T01:00:00Z"
                ),
                {"loc": f"{b}/a~b.txt", "change": "deleted", "datetime": "2024-01-02T00:00:00Z"},
                entry(shouting, "/c.txt", b"cc", change="updated", datetime="2024-01-03T00:00:00Z"),
                entry(b, "/d.txt", b"d", change="updated", datetime="2024-01-04T00:00:00Z"),
            ],
        )
        for _ in range(2):
            code, summary = cli_json("sync", b, dest, "--delete")
            assert code == 0 and not _set(summary)["problems"], summary
            assert tree(dest) == {"c.txt": b"cc", "d.txt": b"d", "新.txt": b"nn"}
        assert src.hits["/d.txt"] == 1  # held as listed: its record went over, not fetched
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["extra"] == 0, found
        # From the list as it is now: the records are the spellings it uses.
        code, summary = cli_json("sync", b, dest, "--baseline", "--delete")
        assert code == 0 and _set(summary)["fetched"] == 0, summary


def test_a_deletion_then_a_creation_under_another_spelling_is_the_creation(
    tmp_path: Path,
) -> None:
    """A Change List that deletes a resource under the spelling the copy holds, then creates
    it again under another (found by test_bent_lists.py): the creation took the copy's record
    over to its spelling and the deletion, planned before it, then failed the run ("this copy
    never held" the first spelling). The later entry wins, as for one spelling."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.publish([entry(b, "/a.txt", b"a")], at=AT)
        assert cli_json("sync", b, dest, "--delete")[0] == 0
        changes = [
            {"loc": f"{b}/a.txt", "change": "deleted", "datetime": "2024-01-02T00:00:00Z"},
            entry(b, "/%61.txt", b"a", change="created", datetime="2024-01-02T00:00:00Z"),
        ]
        src.publish([entry(b, "/a.txt", b"a")], at=AT, changes=changes)
        code, summary = cli_json("sync", b, dest, "--delete")
        assert code == 0 and not _set(summary)["problems"], summary
        assert tree(dest) == {"a.txt": b"a"}
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["in_sync"] == 1, found
        # A resource the copy never held, deleted under one spelling and created under
        # another: the deletion was left in the plan and refused the new file ("never held").
        src.files["/d.txt"] = b"d"
        changes += [
            {"loc": f"{b}/%64.txt", "change": "deleted", "datetime": "2024-01-03T00:00:00Z"},
            entry(b, "/d.txt", b"d", change="created", datetime="2024-01-03T00:00:00Z"),
        ]
        src.publish([entry(b, "/a.txt", b"a")], at=AT, changes=changes)
        code, summary = cli_json("sync", b, dest, "--delete")
        assert code == 0 and not _set(summary)["problems"], summary
        assert tree(dest) == {"a.txt": b"a", "d.txt": b"d"}


def test_a_deletion_listed_under_two_spellings_is_one_deletion(tmp_path: Path) -> None:
    """A Change List that deletes `a.txt` and then `%61.txt` (one URI): the second took the
    copy's record over to its spelling and deleted the file, and the first then failed the
    run with "not deleted: this copy never held … the file is kept" — over a file that was
    gone (found by test_bent_lists.py)."""
    dest = tmp_path / "dest"
    when = "2024-01-02T00:00:00Z"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"], src.files["/b.txt"] = b"a", b"b"
        listed = [entry(b, "/a.txt", b"a"), entry(b, "/b.txt", b"b")]
        src.publish(listed, at=AT)
        assert cli_json("sync", b, dest, "--delete")[0] == 0
        del src.files["/a.txt"]
        src.publish(
            listed,
            at=AT,
            changes=[
                {"loc": f"{b}/a.txt", "change": "deleted", "datetime": when},
                {"loc": f"{b}/%61.txt", "change": "deleted", "datetime": when},
            ],
        )
        code, summary = cli_json("sync", b, dest, "--delete")
        assert code == 0 and not _set(summary)["problems"], summary
        assert _set(summary)["deleted"] == 1 and tree(dest) == {"b.txt": b"b"}
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["in_sync"] == 1, found


def test_changes_looked_at_again_behind_the_cursor_take_the_last_spelling(
    tmp_path: Path,
) -> None:
    """A Change List that creates `a.txt` and then `%61.txt` (one URI) with other bytes, at one
    time: the first run applied the last, as it should. The next run looks `--lookback` behind
    its cursor and read `a.txt`'s entry there as a change the copy never saw (its record had
    gone over to `%61.txt`): fetched against the first entry's digest, failed on every run
    after (found by test_bent_lists.py). Behind the cursor too, the last entry of a resource,
    under any spelling, is its state."""
    dest = tmp_path / "dest"
    when = "2024-01-02T00:00:00Z"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.publish([entry(b, "/a.txt", b"a")], at=AT)
        assert cli_json("sync", b, dest, "--delete")[0] == 0
        src.files["/a.txt"] = b"a, then more"
        src.publish(
            [entry(b, "/a.txt", b"a")],
            at=AT,
            changes=[
                entry(b, "/a.txt", b"a", change="created", datetime=when),
                entry(b, "/%61.txt", b"a, then more", change="created", datetime=when),
            ],
        )
        for _ in range(3):
            code, summary = cli_json("sync", b, dest, "--delete")
            assert code == 0 and not _set(summary)["problems"], summary
            assert tree(dest) == {"a.txt": b"a, then more"}
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["in_sync"] == 1, found


def test_spellings_of_one_uri_in_one_run_are_one_resource(tmp_path: Path) -> None:
    """Within one run: the Resource List spells a resource one way and the Change List after
    it deletes it under another; one list spells a resource both ways. The later entry wins,
    as for one spelling listed twice — before, the first was fetched (the Source's 404: exit
    1) or the second refused as another URI's file."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/c.txt"], src.files["/e~.txt"] = b"c", b"e"
        src.publish(
            [
                entry(b, "/a%7Eb.txt", b"gone"),
                entry(b, "/c.txt", b"c"),
                entry(b, "/e%7E.txt", b"e"),
                entry(b, "/e~.txt", b"e"),
            ],
            at=AT,
            changes=[
                {"loc": f"{b}/a~b.txt", "change": "deleted", "datetime": "2024-01-02T00:00:00Z"}
            ],
        )
        code, summary = cli_json("sync", b, dest, "--delete")
        assert code == 0 and not _set(summary)["problems"], summary
        assert tree(dest) == {"c.txt": b"c", "e~.txt": b"e"}
        assert "/a~b.txt" not in src.hits and src.hits["/e~.txt"] == 1
        code, found = cli_json("audit", b, dest)
        assert code == 0, found


def test_change_lists_in_times_without_a_zone_east_of_utc_are_no_gap(tmp_path: Path) -> None:
    """The other side of the same Source: Change Lists in Japan's time without a zone (a list
    from 21:00 that means 12:00Z), beside a Resource List whose `at` (12:00Z) has its zone.
    Read as UTC, the lists started nine hours after the copy: a gap on every run, and a
    baseline (the advice) no help. Lists without a zone that start within 14 hours of the
    cursor reach it."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"], src.files["/b.txt"] = b"a", b"b"
        at, local_from = "2024-01-01T12:00:00Z", "2024-01-01T21:00:00"  # 12:00Z at UTC+9
        src.publish([entry(b, "/a.txt", b"a")], at=at, changes_from=local_from)
        code, summary = cli_json("sync", b, dest)
        assert code == 0 and _set(summary)["gap"] is None, summary
        change = entry(b, "/b.txt", b"b", change="created", datetime="2024-01-01T22:00:00")
        src.publish([entry(b, "/a.txt", b"a")], at=at, changes=[change], changes_from=local_from)
        code, summary = cli_json("sync", b, dest)
        assert code == 0 and tree(dest) == {"a.txt": b"a", "b.txt": b"b"}, summary
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["in_sync"] == 2, found


@pytest.mark.parametrize(
    ("at", "cl_from", "dated", "hours"),
    [
        # Local times without a zone west of UTC (`fromtimestamp()`): 07:00 at UTC-5 is 12:00Z,
        # and the change made at 14:00Z is dated 09:00.
        ("2024-01-01T12:00:00Z", "2024-01-01T07:00:00", "2024-01-01T09:00:00", 14),
        # Changes dated by their day (valid W3C Datetime, as a daily batch writes them): the
        # change made at 10:00Z, after `at`, is dated 2024-01-02, read as midnight UTC.
        ("2024-01-02T05:00:00Z", "2024-01-02", "2024-01-02", 38),
    ],
    ids=["zoneless", "a-day"],
)
def test_changes_in_times_without_a_zone_are_not_skipped_behind_the_cursor(
    tmp_path: Path, at: str, cl_from: str, dated: str, hours: int
) -> None:
    """A Source whose Resource List gives `at` with its zone and whose Change Lists give times
    without one, or name a day: read as UTC (a day as its midnight), a change made after `at`
    looked hours older than the cursor and was skipped — the copy kept the old bytes while
    `sync` said ok and `audit` said in sync. Once the lists give such times the window behind
    the cursor is 14 hours (any zone), and a day more for a day, and what the copy does not
    hold as listed there is applied."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"old"
        src.publish([entry(b, "/a.txt", b"old")], at=at, changes_from=cl_from)
        assert cli("sync", b, dest).exit_code == 0
        src.files["/a.txt"] = b"new"
        change = entry(b, "/a.txt", b"new", change="updated", datetime=dated)
        src.publish([entry(b, "/a.txt", b"old")], at=at, changes=[change], changes_from=cl_from)
        code, found = cli_json("audit", b, dest)
        assert code == 1 and found["different"] == 1, found
        code, summary = cli_json("sync", b, dest)
        assert code == 0 and tree(dest) == {"a.txt": b"new"}, summary
        warned = [p["message"] for p in _set(summary)["problems"]]
        assert any(f"up to {hours} h behind the cursor" in m for m in warned), warned
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["in_sync"] == 1, found
        assert cli("sync", b, dest).exit_code == 0  # and nothing fetched again
        assert src.hits["/a.txt"] == 2


def test_a_notification_in_times_without_a_zone_is_not_skipped_behind_the_cursor(
    tmp_path: Path,
) -> None:
    """The same Source's change notification, its times without a zone in local time west of
    UTC: applied with the same wider look behind the cursor as its Change Lists (a follower's
    notifications were skipped until its next catch-up)."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"old"
        src.publish([entry(b, "/a.txt", b"old")], at="2024-01-01T12:00:00Z")
        assert cli("sync", b, dest).exit_code == 0
        src.files["/a.txt"] = b"new"
        info = discover(b)
        applier = _Applier(info, dest, SyncOptions())
        try:
            pushed = Resource(
                loc=f"{b}/a.txt",
                change="updated",
                datetime=datetime(2024, 1, 1, 9, tzinfo=UTC),  # `09:00` as read: 14:00Z meant
                length=3,
                hashes={"md5": entry(b, "/a.txt", b"new")["md5"]},
            )
            report = applier.apply(info.sets[0], [pushed], loose=("notification", 14 * 3600.0))
            assert report.fetched == 1, report
        finally:
            applier.close()
        assert tree(dest) == {"a.txt": b"new"}


def test_a_notification_delivered_after_a_later_one_of_the_same_resource_is_superseded(
    tmp_path: Path,
) -> None:
    """A follower applied a notification re-creating a resource (12:02), then receives one
    deleting it (12:01, within `--lookback`), delivered late: applied as "listed late", it
    deleted the file the Source has. Older than the change of that resource the copy last
    applied (its cursor), it is superseded."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"], src.files["/b.txt"] = b"v1", b"b"
        src.publish([entry(b, "/a.txt", b"v1"), entry(b, "/b.txt", b"b")], at=AT)
        assert cli("sync", b, dest).exit_code == 0
        src.files["/a.txt"] = b"v2"
        info = discover(b)
        applier = _Applier(info, dest, SyncOptions(delete=True))
        try:
            created = Resource(
                loc=f"{b}/a.txt",
                change="created",
                datetime=datetime(2024, 1, 1, 0, 2, tzinfo=UTC),
                length=2,
                hashes={"md5": entry(b, "/a.txt", b"v2")["md5"]},
            )
            report = applier.apply(info.sets[0], [created])
            assert report.fetched == 1, report
            deleted = Resource(
                loc=f"{b}/a.txt", change="deleted", datetime=datetime(2024, 1, 1, 0, 1, tzinfo=UTC)
            )
            report = applier.apply(info.sets[0], [deleted])
            assert (report.deleted, report.pending_deletes) == (0, 0), report
        finally:
            applier.close()
        assert tree(dest) == {"a.txt": b"v2", "b.txt": b"b"}


def _notified(b: str, name: str, change: str, minute: int, body: bytes | None = None) -> Resource:
    """A change notification's entry for `name`, dated `minute` minutes past AT."""
    described: dict[str, Any] = {}
    if body is not None:
        described = {"length": len(body), "hashes": {"md5": entry(b, "/" + name, body)["md5"]}}
    when = datetime(2024, 1, 1, 0, minute, tzinfo=UTC)
    return Resource(loc=f"{b}/{name}", change=change, datetime=when, **described)


@pytest.mark.parametrize(
    ("scenario", "after"),
    [
        # Deleted at 00:01 (delivered late), created again at 00:02: the deletion came last.
        ("deleted", {"a.txt": b"v2", "b.txt": b"bb"}),
        # Updated at 00:01 (delivered late) and at 00:02: the older update came last, asking
        # for bytes the Source no longer has (a digest mismatch every run).
        ("updated", {"a.txt": b"v3", "b.txt": b"bb"}),
        # Deleted at 00:01 (late), then updated at 00:02 to the bytes the copy still held
        # (kept, nothing fetched): the deletion came last.
        ("kept", {"a.txt": b"v1", "b.txt": b"bb"}),
        # Created at 00:01 (delivered late) and deleted at 00:02: the creation came last, and
        # the Source answers 404 (a failure every run, which no later change resolved).
        ("gone", {"b.txt": b"bb"}),
    ],
)
def test_a_notification_delivered_after_later_ones_is_superseded_by_what_the_copy_applied(
    tmp_path: Path, scenario: str, after: dict[str, bytes]
) -> None:
    """A hub may deliver a notification late (a retry after a failed delivery): here after the
    later change of the same resource and another resource's change. Behind the cursor, it
    was applied as "listed late": a deletion took the Source's file away (warned of, `sync`
    ok), an older update or creation failed every run. The copy keeps the time of the change
    each record came from: a change older than that is superseded; a late one the Source
    answers 404 for (gone since) is said, not failed."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"], src.files["/b.txt"] = b"v1", b"b"
        src.publish([entry(b, "/a.txt", b"v1"), entry(b, "/b.txt", b"b")], at=AT)
        assert cli("sync", b, dest).exit_code == 0
        info = discover(b)
        # (Through `scoped`, as `subscribe` does: the fleet's tests keep the state elsewhere.)
        applier = _Applier(info, dest, sync_module.scoped(SyncOptions(delete=True), b))
        s = info.sets[0]
        try:
            if scenario == "deleted":
                src.files["/a.txt"] = b"v2"
                late = _notified(b, "a.txt", "deleted", 1)
                first = _notified(b, "a.txt", "created", 2, b"v2")
            elif scenario == "updated":
                src.files["/a.txt"] = b"v3"
                late = _notified(b, "a.txt", "updated", 1, b"v2")
                first = _notified(b, "a.txt", "updated", 2, b"v3")
            elif scenario == "kept":
                late = _notified(b, "a.txt", "deleted", 1)
                first = _notified(b, "a.txt", "updated", 2, b"v1")
            else:
                del src.files["/a.txt"]
                late = _notified(b, "a.txt", "created", 1, b"v2")
                first = _notified(b, "a.txt", "deleted", 2)
            report = applier.apply(s, [first])
            assert report.failed == 0 and not report.problems, report
            src.files["/b.txt"] = b"bb"
            report = applier.apply(s, [_notified(b, "b.txt", "updated", 3, b"bb")])
            assert report.fetched == 1, report
            report = applier.apply(s, [late])
            assert (report.failed, report.deleted, report.pending_deletes) == (0, 0, 0), report
            if scenario == "gone":
                said = [p.message for p in report.problems]
                assert any("gone from the Source since" in m for m in said), said
            else:
                assert not report.problems, report
            # Nothing left to fail in the runs after it.
            src.files["/b.txt"] = b"bbb"
            report = applier.apply(s, [_notified(b, "b.txt", "updated", 4, b"bbb")])
            assert (report.failed, report.fetched) == (0, 1), report
        finally:
            applier.close()
        assert tree(dest) == after | {"b.txt": b"bbb"}


@pytest.mark.parametrize(
    ("at", "cl_from", "changed"),
    [
        # `at` without a zone, in local time west of UTC: 07:00 that means 12:00Z.
        ("2024-01-01T07:00:00", "2024-01-01T12:00:00Z", "2024-01-01T13:00:00Z"),
        # `at` a day: read as midnight UTC; made at midnight in Japan, 15:00Z the day before.
        ("2024-01-02", "2024-01-01T15:00:00Z", "2024-01-01T20:00:00Z"),
    ],
    ids=["zoneless", "a-day"],
)
def test_a_resource_list_time_without_a_zone_is_no_gap_for_change_lists_with_theirs(
    tmp_path: Path, at: str, cl_from: str, changed: str
) -> None:
    """The reverse: the Resource List's `at` without a zone (or a day), its Change Lists with
    their zones and times from when it was made. Read as UTC, the copy was hours behind the
    lists: a gap on the baseline and on every run after it (a change made after the copy,
    dated before `at` as read, skipped). The set is remembered to give such times, and the
    incremental runs after the baseline (which read no Resource List) take its cursor so
    too."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"], src.files["/b.txt"] = b"a", b"b"
        src.publish([entry(b, "/a.txt", b"a")], at=at, changes_from=cl_from)
        for mode in ("baseline", "incremental"):
            code, summary = cli_json("sync", b, dest)
            assert code == 0 and _set(summary)["mode"] == mode, summary
        change = entry(b, "/b.txt", b"b", change="created", datetime=changed)
        src.publish([entry(b, "/a.txt", b"a")], at=at, changes=[change], changes_from=cl_from)
        code, summary = cli_json("sync", b, dest)
        assert code == 0 and tree(dest) == {"a.txt": b"a", "b.txt": b"b"}, summary
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["in_sync"] == 2, found
