"""A Source publishing for months keeps its Change Lists within `keep_changelists` (core 1.1
§12: the spec leaves how long to the Source): the oldest closed lists leave the index, the
archive, the state and the disk once the live Resource List is past them. A Destination that
keeps up never notices; one further behind is told that the changes it needs are no longer
listed, and a baseline brings it back."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from resourcesync.sitemap import read_document, validate
from resourcesync.source.config import ConfigError, PublishConfig, SetConfig
from resourcesync.source.notify import stop_background
from resourcesync.source.publish import publish
from tests.destination.helpers import cli, cli_json, published_source, tree
from tests.servers import serve
from tests.source.history import Clock, check_history, read_change_dumps, replay
from tests.source.test_notify import Hub

BASE = "http://example.org/data/"
DOCS = "http://example.org/"


def _config(tmp_path: Path, **kw: object) -> PublishConfig:
    return PublishConfig(
        out=tmp_path / "out",
        sets=[SetConfig("set1", tmp_path / "data", BASE, **kw)],  # type: ignore[arg-type]
        docs_url=DOCS,
    )


def _first_run(tmp_path: Path, **kw: object) -> tuple[Path, PublishConfig, Clock]:
    """A set of one file, published once with the settings `kw`."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "seed.txt").write_bytes(b"0")
    clock = Clock()
    cfg = _config(tmp_path, **kw)
    publish(cfg, clock=clock)
    return data, cfg, clock


def _index(out: Path) -> list[str]:
    """The Change Lists the index names (paths under the set), oldest first."""
    doc, entries = read_document(out / "changelist.xml")
    if not doc.index:
        return ["changelist.xml"]
    return [e.loc.removeprefix(DOCS + "set1/") for e in entries]


def _now(data: Path) -> dict[str, tuple[int, str]]:
    """The Source as it is: URI → (length, md5) of every file."""
    return {
        BASE + p.name: (len(b), hashlib.md5(b).hexdigest())
        for p in sorted(data.iterdir())
        for b in [p.read_bytes()]
    }


def test_closed_lists_past_the_number_kept_are_dropped_once_the_resource_list_is_past_them(
    tmp_path: Path,
) -> None:
    data, cfg, clock = _first_run(
        tmp_path, changelist_max_entries=2, keep_changelists=2, resourcelist_every="always"
    )
    changes = dropped = 0
    for round_ in range(10):
        (data / f"new{round_}.txt").write_bytes(b"n")
        (data / "seed.txt").write_bytes(f"seed {round_}".encode())
        changes += 2
        result = publish(cfg, clock=clock).sets[0]
        dropped += result.dropped
        assert result.to_json()["changelists_dropped"] == result.dropped
        out = tmp_path / "out" / "set1"
        named = _index(out)
        h = check_history(tmp_path / "out", DOCS, "set1", archived=False)
        # The latest Resource List and the lists after its `at` give the Source as it is.
        assert h.current == _now(data)
        first_from = h.lists[0][0]
        assert first_from is not None and first_from <= h.resourcelist[0]
        # Two closed lists kept, and those a Destination starting from the live Resource
        # List needs (this run's): never more than a few, however long the Source runs.
        assert len(named) <= 2 + 2 + 1, named
        # On the disk: what the index names, nothing else.
        folder = out / "changelists"
        on_disk = {f"changelists/{p.name}" for p in folder.iterdir()} if folder.exists() else set()
        assert on_disk == {n for n in named if n.startswith("changelists/")}, (on_disk, named)
        _, archived = read_document(out / "changelist-archive.xml")
        assert [e.loc.removeprefix(DOCS + "set1/") for e in archived] == named[:-1]
    state = cfg.state / "set1.sqlite"
    with sqlite3.connect(state) as db:
        kept = int(db.execute("SELECT COUNT(*) FROM changes").fetchone()[0])
    assert kept < changes, (kept, changes)
    # Said in the summary: every list closed is in the index, or was let go.
    assert dropped >= 3 and int(_index(out)[0].split("-")[1].split(".")[0]) == dropped + 1
    # The validator finds nothing wrong with what is left.
    result = cli(
        "validate",
        tmp_path / "out" / "set1" / "changelist.xml",
        "--follow",
        "--map",
        f"{DOCS}set1/={tmp_path / 'out' / 'set1'}",
    )
    assert result.exit_code == 0, result.output


def test_lists_after_the_live_resource_list_stay_past_the_number_kept(tmp_path: Path) -> None:
    # The Resource List is written once and again only after 100 changes: every change
    # after it is in the lists, and a Destination that starts from it needs them all.
    data, cfg, clock = _first_run(
        tmp_path, changelist_max_entries=1, keep_changelists=1, resourcelist_every="100-changes"
    )
    for round_ in range(6):
        (data / "seed.txt").write_bytes(f"seed {round_}".encode())
        publish(cfg, clock=clock)
    out = tmp_path / "out" / "set1"
    named = _index(out)
    # Five closed (a list closes once a second change comes), one open: none dropped.
    assert len(named) == 6 and named[0] == "changelists/changelist-00001.xml", named
    h = check_history(tmp_path / "out", DOCS, "set1", archived=False)
    assert h.current == _now(data)


@pytest.mark.parametrize("via", ["lists", "dumps"])
def test_a_destination_that_keeps_up_never_notices_and_one_left_behind_is_told(
    tmp_path: Path, via: str
) -> None:
    files = {f"f{i}.txt": f"v0 {i}".encode() for i in range(4)}
    settings: dict[str, object] = {
        "changelist_max_entries": 2,
        "keep_changelists": 1,
        "resourcelist_every": "always",
    }
    if via == "dumps":
        settings.update(
            capabilities=("resourcelist", "changelist", "resourcedump", "changedump"),
            changedump_max_packages=1,
            keep_changedumps=1,
        )
    with published_source(tmp_path, files, **settings) as src:
        keeps_up, behind = tmp_path / "keeps-up", tmp_path / "behind"
        for dest in (keeps_up, behind):
            assert cli("sync", src.root, dest, "--delete", "--via", via).exit_code == 0
        for round_ in range(6):
            (src.data / f"f{round_ % 4}.txt").write_bytes(f"v{round_ + 1}".encode())
            (src.data / f"n{round_}.txt").write_bytes(b"new")
            src.publish()
            code, summary = cli_json("sync", src.root, keeps_up, "--delete", "--via", via)
            assert code == 0, summary
            assert summary["sets"][0]["mode"] == "incremental", summary
            assert summary["sets"][0]["via"] == via, summary
        assert tree(keeps_up) == tree(src.data)
        assert cli("audit", src.root, keeps_up).exit_code == 0
        # The changes after `behind`'s cursor are no longer listed: not an ok over a copy
        # that lacks them, but a gap and what to do.
        code, summary = cli_json("sync", src.root, behind, "--delete", "--via", via)
        assert code == 1, summary
        assert "no longer listed" in summary["sets"][0]["gap"], summary
        assert tree(behind) == files
        code, summary = cli_json("sync", src.root, behind, "--delete", "--baseline", "--via", via)
        assert code == 0, summary
        assert tree(behind) == tree(src.data)
        assert cli("audit", src.root, behind).exit_code == 0


def test_lists_that_start_at_the_copys_last_change_are_not_a_history_that_changed(
    tmp_path: Path,
) -> None:
    """A list closed by its count ends at its last change, and the next one starts there: once
    the first is dropped, the lists start at the time of the change this copy last applied
    without listing it. Nothing is missing (that change is the copy's, every later one is
    listed): the copy follows them, quiet or not — neither a gap nor a history that changed."""
    files = {"a.txt": b"a0", "b.txt": b"b0"}
    settings = {"changelist_max_entries": 1, "keep_changelists": 0, "resourcelist_every": "always"}
    with published_source(tmp_path, files, **settings) as src:
        dest = tmp_path / "copy"
        assert cli("sync", src.root, dest, "--delete").exit_code == 0
        (src.data / "a.txt").write_bytes(b"a1")
        src.publish()
        assert cli("sync", src.root, dest, "--delete").exit_code == 0  # its cursor: a1
        (src.data / "b.txt").write_bytes(b"b1")
        src.publish()  # a1's list closes at a1, b1's starts there
        src.publish()  # past the Resource List b1's run wrote: a1's list is dropped
        doc, entries = read_document(src.out / "set1" / "changelist.xml")
        assert not doc.index and [e.loc.rpartition("/")[2] for e in entries] == ["b.txt"]
        code, summary = cli_json("sync", src.root, dest, "--delete", "--history-grace", "0")
        assert code == 0, summary
        assert tree(dest) == {"a.txt": b"a1", "b.txt": b"b1"}
        # And quiet: nothing after the copy's last change, for longer than the grace.
        code, summary = cli_json("sync", src.root, dest, "--delete", "--history-grace", "0")
        assert code == 0, summary
        assert cli("audit", src.root, dest).exit_code == 0


def test_the_number_kept_is_checked() -> None:
    with pytest.raises(ConfigError):
        SetConfig("set1", Path("data"), BASE, keep_changelists=-1)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_destination_through_a_source_that_drops_its_lists_is_never_ok_over_a_wrong_copy(
    tmp_path: Path, seed: int
) -> None:
    """Random changes, publishes under random policies and syncs at random moments: a sync
    that says ok holds what the Source's documents say; one that finds its changes no longer
    listed says so, and its baseline brings the copy back."""
    rng = random.Random(seed)
    files = {f"f{i}.txt": rng.randbytes(rng.randrange(1, 50)) for i in range(6)}
    settings = {
        "changelist_max_entries": 2,
        "keep_changelists": 0,
        "resourcelist_every": "always",
    }
    with published_source(tmp_path, files, **settings) as src:
        dest = tmp_path / "copy"
        assert cli("sync", src.root, dest, "--delete").exit_code == 0
        gaps = oks = 0
        for _ in range(40):
            r = rng.random()
            if r < 0.45:
                name = src.data / f"f{rng.randrange(9)}.txt"
                if name.exists() and rng.random() < 0.3:
                    name.unlink()
                else:
                    name.write_bytes(rng.randbytes(rng.randrange(1, 50)))
            elif r < 0.85:
                s = src.sets[0]
                s.keep_changelists = rng.choice([0, 0, 1, 3, None])
                s.resourcelist_every = rng.choice(["always", "3-changes", "1d,10000-changes"])
                s.__post_init__()
                src.publish()
            else:
                code, summary = cli_json("sync", src.root, dest, "--delete")
                truth = check_history(src.out, src.root, "set1", archived=False).current
                if code == 0:
                    oks += 1
                    assert _copy(dest, src.root) == truth, summary
                elif "no longer listed" in (summary["sets"][0]["gap"] or ""):
                    gaps += 1
                    code, summary = cli_json("sync", src.root, dest, "--delete", "--baseline")
                    assert code != 0 or _copy(dest, src.root) == truth, summary
                else:
                    # Files changed since the last publish: served other bytes than listed.
                    assert summary["sets"][0]["failed"] > 0, json.dumps(summary)
        src.publish()
        assert cli("sync", src.root, dest, "--delete", "--baseline").exit_code == 0
        assert tree(dest) == tree(src.data)
        assert oks + gaps > 0


def _copy(dest: Path, root: str) -> dict[str, tuple[int, str]]:
    return {
        root + p.name: (len(b), hashlib.md5(b).hexdigest())
        for p in sorted(dest.iterdir())
        if p.is_file()
        for b in [p.read_bytes()]
    }


def test_closed_change_dumps_past_the_number_kept_go_with_their_packages(tmp_path: Path) -> None:
    data, cfg, clock = _first_run(
        tmp_path,
        capabilities=("resourcelist", "changelist", "resourcedump", "changedump"),
        changedump_max_packages=1,
        keep_changedumps=1,
        resourcelist_every="always",
    )
    out = tmp_path / "out" / "set1"
    for round_ in range(8):
        (data / f"new{round_}.txt").write_bytes(b"n")
        (data / "seed.txt").write_bytes(f"seed {round_}".encode())
        publish(cfg, clock=clock)
        dumps = read_change_dumps(tmp_path / "out", DOCS, "set1")
        for (a, _), (b, _) in itertools.pairwise(dumps):
            assert a.until is not None and a.until == b.from_, (a.loc, b.loc)
        _, archived = read_document(out / "changedump-archive.xml")
        # One closed dump kept, and the one a Destination starting from the live Resource
        # Dump needs (closed this run): never more, however long the Source runs.
        assert len(archived) <= 2, [a.loc for a in archived]
        # On the disk: the packages and closed dumps the documents name, nothing else.
        named = {p.loc.removeprefix(DOCS + "set1/").rpartition("/")[0] for p, _ in dumps}
        on_disk = {p.parent.relative_to(out).as_posix() for p in out.glob("changedumps/*/*.zip")}
        assert on_disk == named, (on_disk, named)
        closed = {p.relative_to(out).as_posix() for p in out.glob("changedumps/changedump-*.xml")}
        assert closed == {a.loc.removeprefix(DOCS + "set1/") for a in archived}
        # What the dumps hold, replayed onto the live Resource List, is the Source now.
        h = check_history(tmp_path / "out", DOCS, "set1", archived=False)
        at, listed = h.resourcelist
        assert dumps[0][0].from_ is not None and dumps[0][0].from_ <= at
        changes = [e for _, entries in dumps for e in entries]
        assert replay(listed, changes, at) == h.current == _now(data)
    assert round_ == 7 and len(list(out.glob("changedumps/*/*.zip"))) < 8


@contextlib.contextmanager
def _announced(tmp_path: Path, **kw: object) -> Iterator[tuple[Hub, Path, PublishConfig, Clock]]:
    """A set of one file that closes a Change List at every change, keeps none closed, and
    announces to a stand-in hub (`Hub`), published once."""
    hub = Hub()
    try:
        with serve(hub.app) as hub_base:
            data, cfg, clock = _first_run(
                tmp_path,
                changelist_max_entries=1,
                keep_changelists=0,
                resourcelist_every="always",
                hub=f"{hub_base}/hub",
                **kw,
            )
            yield hub, data, cfg, clock
    finally:
        stop_background()


def test_lists_whose_changes_the_hub_has_not_taken_are_kept(tmp_path: Path) -> None:
    """A hub that refuses: the changes it has not been sent are in no list let go, so that
    nothing announced later is missing from the lists; once it takes them, they may go."""
    with _announced(tmp_path) as (hub, data, cfg, clock):
        hub.refuse = True
        for round_ in range(4):
            (data / f"new{round_}.txt").write_bytes(b"n")
            result = publish(cfg, clock=clock).sets[0]
            assert result.dropped == 0, round_
        hub.refuse = False
        (data / "last.txt").write_bytes(b"n")
        publish(cfg, clock=clock)  # the lists first, then the hub takes what it refused
        assert publish(cfg, clock=clock).sets[0].dropped >= 3  # the next run lets them go
        # Everything the hub was told of is in what is published, or before it.
        h = check_history(tmp_path / "out", DOCS, "set1", archived=False)
        assert h.current == _now(data)
    assert len(hub.received) == 5


def test_the_lists_let_go_are_announced_as_deleted_on_the_framework_channel(
    tmp_path: Path,
) -> None:
    """Framework Notification 1.0.1 §3: a document the Source removes is a change of the
    framework: each Change List let go is announced as deleted, under its index."""
    with _announced(tmp_path, framework_notification=True) as (hub, data, cfg, clock):
        for round_ in range(4):
            (data / f"new{round_}.txt").write_bytes(b"n")
            publish(cfg, clock=clock)
    deleted = []
    for body in hub.framework:
        report = validate([body])
        assert report.ok and not report.errors, [str(f) for f in report.findings]
        _, entries = read_document(body)
        deleted += [e for e in entries if e.change == "deleted"]
    assert deleted, "no Change List announced as let go"
    for e in deleted:
        assert e.capability == "changelist" and "/changelists/changelist-" in e.loc, e
        assert e.link("index") is not None and e.link("index").href.endswith("/changelist.xml")
