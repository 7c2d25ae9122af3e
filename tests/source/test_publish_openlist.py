"""The open Change List extended rather than written whole (issue 15.3: a re-run costs what
changed, not the length of the list it adds to): the file a run leaves is byte for byte the one
a whole write gives, and a file that is not as the state recorded it is written whole."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from resourcesync.sitemap import read_document
from resourcesync.sitemap.write import DocumentWriter
from resourcesync.source.config import PublishConfig, SetConfig
from resourcesync.source.publish import publish
from resourcesync.source.setrun import OPEN_LIST
from resourcesync.source.state import SetState
from tests.source.history import Clock, check_history

BASE = "http://example.org/data/"
DOCS = "http://example.org/"


def config(out: Path, data: Path, version: str = "1.1", **kw: object) -> PublishConfig:
    return PublishConfig(
        out=out,
        sets=[SetConfig("set1", data, BASE, **kw)],  # type: ignore[arg-type]
        docs_url=DOCS,
        spec_version=version,
    )


def state_of(out: Path) -> SetState:
    return SetState(out / ".resourcesync" / "set1.sqlite")


def forget_record(out: Path) -> None:
    """What a resourcesync from before the record leaves: the next run writes the list whole."""
    with state_of(out) as state:
        state.db.execute("DELETE FROM meta WHERE key = ?", (OPEN_LIST,))


class Copies:
    """Counts the entries copied from a list as the last run left it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entries = 0
        copy = DocumentWriter.copy_entries

        def counted(w: DocumentWriter, source: object, length: int, entries: int) -> None:
            self.entries += entries
            copy(w, source, length, entries)  # type: ignore[arg-type]

        monkeypatch.setattr(DocumentWriter, "copy_entries", counted)


def lists(out: Path) -> dict[str, bytes]:
    """Every Change List of the set (the open one, the index, the closed ones), by name."""
    folder = out / "set1"
    names = ["changelist.xml", "changelist-archive.xml"]
    if (folder / "changelists").is_dir():
        names += [f"changelists/{p.name}" for p in sorted((folder / "changelists").iterdir())]
    return {n: (folder / n).read_bytes() for n in names}


def open_list(out: Path) -> tuple[int, int]:
    """How many Change Lists are closed, and how many entries the open one holds."""
    folder = out / "set1"
    index, entries = read_document(folder / "changelist.xml")
    if not index.index:
        return 0, len(entries)
    _, open_entries = read_document(folder / entries[-1].loc.removeprefix(f"{DOCS}set1/"))
    return len(entries) - 1, len(open_entries)


@pytest.mark.parametrize("version", ["1.1", "1.0"])
@pytest.mark.parametrize("max_entries", [10_000, 7])
def test_the_open_list_extended_is_the_list_a_whole_write_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, max_entries: int
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(20):
        (data / f"f{i:02d}.txt").write_bytes(b"x" * i)
    extended, whole = tmp_path / "extended", tmp_path / "whole"
    clocks = Clock(), Clock()
    copies = Copies(monkeypatch)
    before = (0, 0)  # closed lists, entries of the open one
    for round_ in range(12):
        if round_:
            # Updated, created and deleted: 3 to 4 changes a run, against lists of 7 (closed
            # into an index every other run) or of 10,000 (one open list throughout).
            (data / f"f{round_:02d}.txt").write_bytes(f"round {round_}".encode())
            (data / f"new{round_}.txt").write_bytes(b"new")
            (data / f"f{19 - round_:02d}.txt").unlink(missing_ok=True)
            if round_ % 3 == 0:
                (data / f"new{round_ - 1}.txt").unlink()
        copied = copies.entries
        for out, clock in zip((extended, whole), clocks, strict=True):
            if out is whole and round_:
                forget_record(out)
            publish(config(out, data, version, changelist_max_entries=max_entries), clock=clock)
        assert lists(extended) == lists(whole), round_
        # A run extends the open list it found, unless it closed it (and opened another).
        now = open_list(extended)
        if round_ > 1:
            assert copies.entries - copied == (before[1] if now[0] == before[0] else 0)
        before = now
    assert copies.entries >= (10 if max_entries == 7 else 100)
    if version == "1.1":  # (the reader of the history takes a change's time from rs:md)
        check_history(extended, DOCS, "set1")


def test_the_record_is_kept_by_a_run_that_changes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_bytes(b"a")
    out = tmp_path / "out"
    clock = Clock()
    publish(config(out, data), clock=clock)
    (data / "a.txt").write_bytes(b"aa")
    publish(config(out, data), clock=clock)
    with state_of(out) as state:
        record = state.get(OPEN_LIST)
    assert record is not None
    publish(config(out, data), clock=clock)
    with state_of(out) as state:
        assert state.get(OPEN_LIST) == record


class Twins:
    """The same set published twice, from the same data by the same clock: `extended` as a
    run does it, `whole` with the state's record of its open list forgotten before each run
    (so written whole); a test compares the two."""

    def __init__(self, tmp_path: Path) -> None:
        self.data = tmp_path / "data"
        self.data.mkdir()
        for i in range(5):
            (self.data / f"f{i}.txt").write_bytes(b"x")
        self.extended, self.whole = tmp_path / "extended", tmp_path / "whole"
        self.clocks = Clock(), Clock()
        self.run()

    def run(self) -> None:
        for out, clock in zip((self.extended, self.whole), self.clocks, strict=True):
            forget_record(self.whole)
            publish(config(out, self.data), clock=clock)


def _rewrite_in_place(path: Path, old: bytes, new: bytes) -> None:
    """The same size, inode and time of change, other bytes: only the header or the footer
    can tell."""
    st = path.stat()
    body = path.read_bytes()
    assert len(old) == len(new) and old in body
    with open(path, "r+b") as f:
        f.write(body.replace(old, new, 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize(
    "damage",
    ["rewritten", "truncated", "appended", "replaced", "header", "footer", "removed", "record"],
)
def test_a_list_not_as_the_record_says_is_written_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    twins = Twins(tmp_path)
    data, extended, whole, run = twins.data, twins.extended, twins.whole, twins.run
    (data / "f1.txt").write_bytes(b"changed")
    run()
    cl = extended / "set1" / "changelist.xml"
    body = cl.read_bytes()
    if damage == "rewritten":
        cl.write_bytes(body.replace(b"changed", b"CHANGED"))
    elif damage == "truncated":
        cl.write_bytes(body[:-40])
    elif damage == "appended":
        cl.write_bytes(body + b"\n")
    elif damage == "replaced":
        shutil.copy(cl, tmp_path / "copy.xml")
        os.replace(tmp_path / "copy.xml", cl)  # the same bytes under another inode
    elif damage == "header":
        _rewrite_in_place(cl, b'capability="changelist"', b'capability="changelisx"')
    elif damage == "footer":
        _rewrite_in_place(cl, b"</urlset>", b"</urlsex>")
    elif damage == "removed":
        cl.unlink()
    else:
        with state_of(extended) as state:
            state.put(OPEN_LIST, "not what a run records")
    copies = Copies(monkeypatch)
    (data / "f2.txt").write_bytes(b"changed too")
    run()
    assert copies.entries == 0
    assert lists(extended) == lists(whole)
    check_history(extended, DOCS, "set1")


def test_a_run_that_dies_before_its_record_leaves_a_list_the_next_run_writes_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    twins = Twins(tmp_path)
    data, extended, whole, run = twins.data, twins.extended, twins.whole, twins.run
    (data / "f1.txt").write_bytes(b"changed")
    run()
    with state_of(extended) as state:
        record = state.get(OPEN_LIST)
    # The next run dies once its list is in place, before the state records it.
    (data / "f2.txt").write_bytes(b"changed too")
    put = SetState.put

    def dies(state: SetState, key: str, value: str) -> None:
        if key == OPEN_LIST:
            raise KeyboardInterrupt
        put(state, key, value)

    with monkeypatch.context() as m:
        m.setattr(SetState, "put", dies)
        for out, clock in zip((extended, whole), twins.clocks, strict=True):
            with pytest.raises(KeyboardInterrupt):
                publish(config(out, data), clock=clock)
    with state_of(extended) as state:
        assert state.get(OPEN_LIST) == record
    assert b"changed too" not in (extended / "set1" / "changelist.xml").read_bytes()
    (data / "f3.txt").write_bytes(b"changed as well")
    copies = Copies(monkeypatch)
    run()
    assert copies.entries == 0
    assert lists(extended) == lists(whole)
    check_history(extended, DOCS, "set1")
