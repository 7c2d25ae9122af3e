"""The copy's state behind the `CopyState` interface (issue 12): `SyncOptions.state` picks where
it lives, so a copy synced on one machine is carried on by another that has only the files."""

from __future__ import annotations

import shutil
from pathlib import Path

from resourcesync.destination.state import CopyState, DestinationState
from resourcesync.destination.sync import SyncOptions, sync
from tests.destination.helpers import published_source, tree

FILES = {"a.txt": b"alpha", "k/b.txt": b"beta", "c.txt": b"gamma"}


def test_a_copy_state_kept_elsewhere_carries_the_copy_to_another_machine(tmp_path: Path) -> None:
    shared = tmp_path / "shared-store"
    shared.mkdir()
    opened: list[Path] = []

    def store(local: Path) -> CopyState:
        # The state lives in the shared place, never under DEST/.resourcesync/.
        opened.append(local)
        return DestinationState(shared / "copy.sqlite")

    options = SyncOptions(state=store)
    one, two = tmp_path / "machine1" / "dest", tmp_path / "machine2" / "dest"
    with published_source(tmp_path, FILES) as src:
        first = sync(src.root, one, options)
        assert first.ok and first.sets[0].mode == "baseline"
        assert opened and not (one / ".resourcesync" / "state.sqlite").exists()
        # "Another machine": the files copied over, no local state at all.
        shutil.copytree(one, two, ignore=shutil.ignore_patterns(".resourcesync"))
        (src.data / "a.txt").write_bytes(b"alpha, edited")
        (src.data / "d.txt").write_bytes(b"delta")
        src.publish()
        src.recorder.reset()
        second = sync(src.root, two, options)
        s = second.sets[0]
        assert second.ok and s.mode == "incremental", s
        assert s.fetched == 2
        assert src.resource_gets() == {"/a.txt": 1, "/d.txt": 1}
        assert tree(two) == {**FILES, "a.txt": b"alpha, edited", "d.txt": b"delta"}


def test_a_failure_remembers_the_entry_it_was_planned_from(tmp_path: Path) -> None:
    """What a failed fetch keeps is the entry the next run asks for: length, digests, times,
    type and links survive the state (JSON); a row kept before times, type and links were
    (length and digests only) still reads."""
    from datetime import UTC, datetime

    from resourcesync.destination.state import expected_of, expected_resource
    from resourcesync.model import Link, Resource

    res = Resource(
        loc="http://example.org/a.pdf",
        length=7,
        hashes={"md5": "0" * 32},
        lastmod=datetime(2024, 1, 1, tzinfo=UTC),
        datetime=datetime(2024, 1, 2, 3, 4, 5, 600000, tzinfo=UTC),
        type="application/pdf",
        encoding="gzip",
        links=[
            Link(rel="duplicate", href="http://mirror.example.org/a.pdf", pri=1),
            Link(rel="describedby", href="http://example.org/a.xml", type="application/xml"),
        ],
    )
    state = DestinationState(tmp_path / "state.sqlite")
    state.fail(res.loc, expected_of(res), "a reason", "set")
    ((uri, expected, reason),) = state.failures("set")
    assert (uri, reason) == (res.loc, "a reason")
    assert expected_resource(uri, expected) == res
    old = expected_resource(uri, {"length": 7, "hashes": {"md5": "0" * 32}})
    assert (old.length, old.hashes) == (7, res.hashes)
    assert (old.lastmod, old.datetime, old.type, old.encoding, old.links) == (
        None,
        None,
        None,
        None,
        [],
    )


def test_a_state_read_to_read_only_is_not_written(tmp_path: Path) -> None:
    """`DestinationState.reading` (audit, ls) writes nothing: a state from before a migration
    is not migrated by reading it (said, the next sync brings it up to date), and a missing
    one is not created."""
    import sqlite3

    import pytest

    from resourcesync.destination.state import StateError

    path = tmp_path / "state.sqlite"
    DestinationState(path).close()
    with DestinationState.reading(path) as state:
        assert state.known("http://example.org/a") is None
    db = sqlite3.connect(path)
    db.execute("DROP INDEX resources_path_key")
    db.execute("ALTER TABLE resources DROP COLUMN links")
    db.close()
    before = path.read_bytes()
    with pytest.raises(StateError, match="older version of resourcesync: the next sync"):
        DestinationState.reading(path)
    assert path.read_bytes() == before
    with pytest.raises(StateError, match="cannot open the state database"):
        DestinationState.reading(tmp_path / "none.sqlite")
    assert not (tmp_path / "none.sqlite").exists()
    DestinationState(path).close()  # the next sync's opening migrates it
    DestinationState.reading(path).close()


def test_a_record_keeps_the_time_of_the_latest_change_applied(tmp_path: Path) -> None:
    """`changed`: the time of the latest change of a resource the copy applied — kept when a
    record comes from a Resource List's entry (None) or from an older change, compared as
    times (a fraction of a second included), and read as None from a state from before it
    (read only, not written; migrated by the next opening to write)."""
    import sqlite3
    from datetime import UTC, datetime, timedelta

    from resourcesync.destination.state import changed_column

    path = tmp_path / "state.sqlite"
    uri = "http://example.org/a"
    t = datetime(2024, 1, 1, tzinfo=UTC)
    row = (uri, "a", 1, {"md5": "x"}, None, None, None, "set")
    with DestinationState(path) as state:
        state.record(*row, changed=t + timedelta(seconds=1))
        for older in (None, t, t + timedelta(microseconds=500_000)):
            state.record(*row, changed=older)
            state.mark_changed([(uri, older or t)])
        known = state.known(uri)
        assert known is not None and known.changed == changed_column(t + timedelta(seconds=1))
        state.mark_changed([(uri, t + timedelta(seconds=1, microseconds=1))])
        known = state.known(uri)
        assert known is not None and known.changed == "2024-01-01T00:00:01.000001Z"
        state.forget(uri)
        state.record(*row)
        known = state.known(uri)
        assert known is not None and known.changed is None
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE resources DROP COLUMN changed")
    db.commit()
    db.close()
    before = path.read_bytes()
    with DestinationState.reading(path) as state:
        known = state.known(uri)
        assert known is not None and known.changed is None
    assert path.read_bytes() == before
    with DestinationState(path) as state:
        state.record(*row, changed=t)
        known = state.known(uri)
        assert known is not None and known.changed == "2024-01-01T00:00:00.000000Z"
