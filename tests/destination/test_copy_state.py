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
