"""A re-run compares each directory with the listing the last scan kept (issue 15.3): only the
files whose stat differs are looked up and read; the snapshot it leaves is the one a whole
scan from nothing would make."""

from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path

import pytest

from resourcesync.source.inventory import DirectoryInventory
from resourcesync.source.packed import UNSURE, Listing
from resourcesync.source.scan import Scan, ScanResult
from resourcesync.source.state import SetState

BASE = "http://example.org/data/"


def snapshot(state: SetState) -> list[tuple[str, int | None, dict[str, str]]]:
    return [(r.loc, r.length, r.hashes) for r in state.resources()]


def fresh(tmp_path: Path, data: Path, **kw: object) -> list[tuple[str, int | None, dict[str, str]]]:
    path = tmp_path / "fresh.sqlite"
    path.unlink(missing_ok=True)
    with SetState(path) as state:
        Scan(state).run(DirectoryInventory(data, BASE, **kw), ["md5"], uri_base=BASE)  # type: ignore[arg-type]
        out = snapshot(state)
    for p in tmp_path.glob("fresh.sqlite*"):
        p.unlink()
    return out


@pytest.fixture(autouse=True)
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written by the test count as settled (not racily clean): read when they change."""
    monkeypatch.setattr("resourcesync.source.scan.RACY_NS", 0)


def test_a_rerun_looks_up_only_what_changed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for d in ("a", "b", "b/c", "e"):
        (data / d).mkdir(parents=True)
        for i in range(30):
            (data / d / f"f{i:02d}.txt").write_text(f"{d} {i}")
    statements: list[str] = []
    with SetState(tmp_path / "state.sqlite") as state:
        Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)
        (data / "a" / "f01.txt").write_text("changed")
        (data / "a" / "f02.txt").unlink()
        (data / "a" / "new.txt").write_text("new")
        shutil.rmtree(data / "b" / "c")
        (data / "e" / "f03.txt").unlink()
        (data / "e" / "f03.txt").mkdir()
        (data / "e" / "f03.txt" / "inner").write_text("inner")
        state.db.set_trace_callback(statements.append)
        result = Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)
        state.db.set_trace_callback(None)
        assert (result.created, result.updated, result.deleted) == (2, 1, 32)
        assert result.rehashed == 3
        assert snapshot(state) == fresh(tmp_path, data)
    lookups = [s for s in statements if s.startswith("SELECT") and "WHERE key IN" in s]
    looked_up = sorted(k for s in lookups for k in re.findall(r"'([^']*)'", s))
    # The changed, created and deleted files of the directories that changed; nothing of the
    # 29 + 30 + 29 files that did not.
    assert looked_up == ["a/f01.txt", "a/f02.txt", "a/new.txt", "e/f03.txt", "e/f03.txt/inner"]
    assert not [s for s in statements if "FROM snapshot ORDER BY key" in s]
    assert not [s for s in statements if "FROM resources ORDER BY key" in s]


def test_random_changes_leave_the_snapshot_a_whole_scan_makes(tmp_path: Path) -> None:
    rng = random.Random(153)
    data = tmp_path / "data"
    data.mkdir()
    names = [f"{d}f{i}" for d in ("", "x/", "x/y/", "z/", "z/w/v/") for i in range(6)]

    def write(name: str) -> None:
        p = data / name
        if p.is_dir():
            shutil.rmtree(p)
        for parent in reversed(p.relative_to(data).parents):
            if (data / parent).is_file():
                (data / parent).unlink()
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rng.randbytes(rng.randrange(0, 50)))

    for name in rng.sample(names, 12):
        write(name)
    with SetState(tmp_path / "state.sqlite") as state:
        for step in range(60):
            for _ in range(rng.randrange(0, 4)):
                op = rng.random()
                existing = [p for p in data.rglob("*") if p.is_file()]
                if op < 0.4 or not existing:
                    write(rng.choice(names))
                elif op < 0.6:
                    rng.choice(existing).unlink()
                elif op < 0.7:
                    d = rng.choice(["x", "z", "z/w", "x/y"])
                    shutil.rmtree(data / d, ignore_errors=True)
                elif op < 0.8:
                    p = rng.choice(existing)
                    os.utime(p, ns=(0, rng.randrange(10**18)))
                else:
                    # A directory where a file was, or a file where a directory was.
                    d = data / rng.choice(["x", "z/w"])
                    if d.is_dir():
                        shutil.rmtree(d)
                        d.write_text("now a file")
                    else:
                        d.unlink(missing_ok=True)
                        write(str(d.relative_to(data)) + "/f0")
            kw: dict[str, object] = {"exclude": ("*f5",)} if step % 20 == 19 else {}
            result = Scan(state).run(DirectoryInventory(data, BASE, **kw), ["md5"], uri_base=BASE)  # type: ignore[arg-type]
            assert snapshot(state) == fresh(tmp_path, data, **kw), step
            assert result.resources == len(snapshot(state))


def test_a_dirty_file_is_read_again_though_its_stat_did_not_change(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    (data / "b.txt").write_text("b")
    with SetState(tmp_path / "state.sqlite") as state:
        Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)
        state.mark_dirty(["a.txt"])
        result = Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)
        assert (result.updated, result.rehashed, result.unchanged) == (1, 1, 1)


def test_change_lists_from_the_kept_entries_are_the_ones_the_journal_gives(tmp_path: Path) -> None:
    from resourcesync.sitemap import read_document, write_document
    from resourcesync.source.config import PublishConfig, SetConfig
    from resourcesync.source.publish import publish

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    (data / "b&c <d>.txt").write_text("b")
    cfg = PublishConfig(out=tmp_path / "out", sets=[SetConfig("s", data, BASE)])
    publish(cfg)
    (data / "a.txt").write_text("a2")
    (data / "b&c <d>.txt").unlink()
    (data / "é.txt").write_text("new")
    publish(cfg)
    written = (tmp_path / "out" / "s" / "changelist.xml").read_bytes()
    doc, entries = read_document(tmp_path / "out" / "s" / "changelist.xml")
    assert [e.change for e in entries] == ["updated", "deleted", "created"]
    again = tmp_path / "again.xml"
    with SetState(tmp_path / "out" / ".resourcesync" / "s.sqlite") as state:
        write_document(again, doc, state.changes(1))
        assert again.read_bytes() == written
        # A state from before the entries were kept: the same document.
        state.db.execute("UPDATE changes SET xml = NULL")
        assert b"".join(state.change_entries(1)) in written


@pytest.mark.parametrize("change", ["created", "updated"])
@pytest.mark.parametrize("kind", [None, "text/plain; charset=utf-8"])
@pytest.mark.parametrize(
    "hashes", ["md5:0cc175b9c0f1b6a831c399e269772661", "md5:0cc1 sha-256:ca97"]
)
def test_a_change_entry_made_from_the_resource_entry_is_the_one_the_serializer_makes(
    change: str, kind: str | None, hashes: str
) -> None:
    from resourcesync.hashing import parse_hashes
    from resourcesync.model import Resource
    from resourcesync.sitemap.write import entry_xml
    from resourcesync.source.scan import change_xml
    from resourcesync.source.state import change_resource
    from resourcesync.w3cdt import format_w3c, parse_w3c

    uri = "http://example.org/b&c%20%3Cd%3E/\u00e9.txt"
    lastmod = format_w3c(parse_w3c("2026-11-29T01:02:03.456789Z"))
    when = format_w3c(parse_w3c("2026-11-29T02:03:04.000001Z"))
    entry = entry_xml(
        Resource(
            loc=uri, lastmod=parse_w3c(lastmod), length=7, type=kind, hashes=parse_hashes(hashes)
        )
    )
    made = change_xml(entry, change, when)
    assert made == entry_xml(change_resource(uri, change, when, lastmod, 7, kind, hashes))
    assert f'<rs:md change="{change}" datetime="{when}" hash='.encode() in made


def listing_row(state: SetState, prefix: str) -> tuple[bytes, bytes | None]:
    """A directory's listing and its delta (kept apart from it)."""
    row = state.db.execute(
        "SELECT d.files, x.delta FROM dirs AS d LEFT JOIN dir_deltas AS x ON x.path = d.path "
        "WHERE d.path = ?",
        (prefix,),
    ).fetchone()
    return row[0], row[1]


def test_a_few_changes_are_kept_as_the_listings_delta_until_it_grows(tmp_path: Path) -> None:
    """A re-run that finds a few files changed in a directory of many writes what changed
    (the listing's delta), not the listing of the whole directory; past an eighth of it the
    listing is written whole again. Every run leaves the snapshot a whole scan makes, and a
    run after it finds nothing to read."""
    data = tmp_path / "data"
    (data / "d").mkdir(parents=True)
    for i in range(200):
        (data / "d" / f"f{i:03d}.txt").write_text(f"file {i}")
    rng = random.Random(7)
    with SetState(tmp_path / "state.sqlite") as state:
        Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)
        whole, delta = listing_row(state, "d/")
        assert delta is None
        sizes = []
        for run in range(12):
            names = rng.sample(range(200), 3)
            (data / "d" / f"f{names[0]:03d}.txt").write_text(f"changed in run {run}")
            (data / "d" / f"f{names[1]:03d}.txt").unlink(missing_ok=True)
            (data / "d" / f"new{run}.txt").write_text("new")
            statements: list[str] = []
            state.db.set_trace_callback(statements.append)
            Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)
            state.db.set_trace_callback(None)
            assert snapshot(state) == fresh(tmp_path, data), run
            files, delta = listing_row(state, "d/")
            written_whole = [s for s in statements if s.startswith("INSERT OR REPLACE INTO dirs")]
            if delta is not None:
                # The listing's row not written at all: SQLite would write it whole again.
                touched = [s for s in statements if re.match(r"(UPDATE|INSERT.*INTO) dirs ", s)]
                assert files == whole and not touched, (run, touched)
                sizes.append(len(delta))
            else:
                # Written whole once the delta would pass an eighth of the listing.
                assert written_whole and files != whole, run
                whole = files
                break
            again = Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)
            assert (again.rehashed, again.created, again.updated, again.deleted) == (0, 0, 0, 0)
        else:
            pytest.fail("the delta was never folded into the listing")
        # A delta of a few changes is a small fraction of the listing it spares.
        assert sizes and sizes[0] * 20 < len(whole)
        again = Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)
        assert (again.rehashed, again.created, again.updated, again.deleted) == (0, 0, 0, 0)


def test_a_delta_over_a_listing_named_another_way_is_dropped_once(tmp_path: Path) -> None:
    """A delta that names its listing otherwise (as an earlier resourcesync did, by BLAKE2b,
    not by length and CRC-32) does not match the listing: it is dropped, the files it held are
    looked up again (their stat differs from the listing), and nothing is journaled twice; a
    file changed meanwhile is journaled once. The run after leaves a delta named the new way."""
    import hashlib
    import marshal

    data = tmp_path / "data"
    (data / "d").mkdir(parents=True)
    for i in range(200):
        (data / "d" / f"f{i:03d}.txt").write_text(f"file {i}")
    with SetState(tmp_path / "state.sqlite") as state:
        Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)
        (data / "d" / "f001.txt").write_text("changed once")
        first = Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)
        assert first.updated == 1
        whole, delta = listing_row(state, "d/")
        assert delta is not None
        _, grown = marshal.loads(delta)
        old_id = hashlib.blake2b(whole, digest_size=8).digest()
        state.db.execute(
            "UPDATE dir_deltas SET delta = ? WHERE path = 'd/'", (marshal.dumps((old_id, grown)),)
        )
        (data / "d" / "f002.txt").write_text("changed twice")
        run = Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)
        # f001.txt looked up again (its delta gone) and found as the snapshot records it: not
        # read, not a change; f002.txt read and journaled.
        assert (run.rehashed, run.updated, run.created, run.deleted) == (1, 1, 0, 0)
        assert snapshot(state) == fresh(tmp_path, data)
        changes = [
            r[0] for r in state.db.execute("SELECT uri FROM changes WHERE change = 'updated'")
        ]
        assert sorted(changes) == [BASE + "d/f001.txt", BASE + "d/f002.txt"]
        _, delta = listing_row(state, "d/")
        assert delta is not None
        assert marshal.loads(delta)[0] != old_id
        again = Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)
        assert (again.rehashed, again.created, again.updated, again.deleted) == (0, 0, 0, 0)


#: A listing's column, and what is written over it: bytes, None for the first half of the
#: listing's own bytes, or a value to `marshal`.
DAMAGES: dict[str, tuple[str, object]] = {
    "bytes": ("files", b"\xde\xad\xbe\xef"),
    "cut short": ("files", None),
    "another type": ("files", [1, 2]),
    "a listing of dictionaries": ("files", {"f001.txt": (1, 2, 3, 4)}),
    "names for other stats": ("files", ("f000.txt/f001.txt", b"\x00" * 32)),
    "names out of order": (
        "files",
        ("/".join(f"f{i:03d}.txt" for i in reversed(range(20))), b"\x00" * 32 * 20),
    ),
    "a name listed twice": ("files", ("f000.txt/f000.txt", b"\x00" * 64)),
    "sub-directories": ("subdirs", b"\x00"),
    "a delta kept apart, of another shape": ("dir_deltas.delta", (1, 2, 3)),
    "a delta kept apart, its bytes": ("dir_deltas.delta", b"\xde\xad"),
    "a delta kept apart, a name of another shape": ("dir_deltas.delta", {"a/b": False}),
    "a delta kept apart, a stat of another shape": ("dir_deltas.delta", {"f003.txt": b"x"}),
}


def damage_listing(state: SetState, column: str, bad: bytes) -> None:
    if column.startswith("dir_deltas."):
        state.db.execute("INSERT OR REPLACE INTO dir_deltas (path, delta) VALUES ('d/', ?)", (bad,))
    else:
        state.db.execute(f"UPDATE dirs SET {column} = ? WHERE path = 'd/'", (bad,))


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_listing_costs_a_whole_comparison_never_a_wrong_snapshot(
    tmp_path: Path, damage: str
) -> None:
    """A listing the state kept that cannot be read (bytes damaged on disk, or written by
    something else) does not stop the scan nor mislead it: the tree is compared whole with the
    snapshot — a file deleted, changed or added meanwhile is found — the scan says so, and the
    listings are made again for the next run."""
    import marshal

    from resourcesync.source.listings import _listing_id

    data = tmp_path / "data"
    for d in ("d", "e"):
        (data / d).mkdir(parents=True)
        for i in range(20):
            (data / d / f"f{i:03d}.txt").write_text(f"{d} {i}")
    with SetState(tmp_path / "state.sqlite") as state:
        Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)
        (data / "d" / "f000.txt").write_text("changed")
        Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)
        column, bad = DAMAGES[damage]
        files, _ = listing_row(state, "d/")
        if bad is None:
            bad = files[: len(files) // 2]
        elif column.startswith("dir_deltas.") and isinstance(bad, dict):
            # Kept over the listing it names: read, not dropped.
            bad = marshal.dumps((_listing_id(files), bad))
        elif not isinstance(bad, bytes):
            bad = marshal.dumps(bad)
        damage_listing(state, column, bad)
        (data / "d" / "f001.txt").write_text("changed too")
        (data / "d" / "f002.txt").unlink()
        (data / "d" / "new.txt").write_text("new")
        run = Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)
        assert (run.created, run.updated, run.deleted) == (1, 1, 1)
        assert snapshot(state) == fresh(tmp_path, data)
        assert [p for p in run.problems if "listing of d/" in p and "made again" in p], run.problems
        again = Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)
        assert (again.rehashed, again.created, again.updated, again.deleted) == (0, 0, 0, 0)
        assert not again.problems
        # Resources marked dirty in a damaged listing are read again by the next scan.
        damage_listing(state, column, bad)
        state.mark_dirty(["d/f003.txt"])
        marked = Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)
        assert (marked.rehashed, marked.updated) == (1, 1)
        assert snapshot(state) == fresh(tmp_path, data)


def forty_files(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(40):
        (data / f"f{i:02d}.txt").write_text(f"file {i}")
    return data


def rescan(state: SetState, data: Path) -> ScanResult:
    return Scan(state).run(DirectoryInventory(data, BASE), ["md5"], uri_base=BASE)


def test_a_listing_written_again_without_its_delta_drops_the_delta(tmp_path: Path) -> None:
    """A delta applies to the listing it was written over only: a listing written whole again
    by a writer that left the delta in place (a file marked dirty in it) is taken as it is."""
    import marshal

    data = forty_files(tmp_path)
    with SetState(tmp_path / "state.sqlite") as state:
        rescan(state, data)
        (data / "f01.txt").write_text("changed")
        (data / "f02.txt").write_text("changed too")
        rescan(state, data)
        files, delta = listing_row(state, "")
        assert delta is not None
        # A writer that left the delta in place: the snapshot's row marked dirty, the
        # listing read without the delta, the file marked in it and written back; the
        # delta left as it was (it holds the new stats of f01 and f02: applied over this
        # listing, it would take f02 as unchanged and lose the mark).
        for table in ("resources", "pending"):  # wherever the snapshot holds its row
            state.db.execute(f"UPDATE {table} SET fingerprint = 'dirty' WHERE key = 'f02.txt'")
        listing = Listing.load(marshal.loads(files), "").changed({"f02.txt": UNSURE})
        state.db.execute(
            "UPDATE dirs SET files = ? WHERE path = ''", (marshal.dumps(listing.parts()),)
        )
        result = rescan(state, data)
        # The delta is dropped: f01 (its old stat in the listing) is looked up and found as
        # the snapshot holds it; f02 is read again and journaled: the dirty mark holds.
        assert (result.rehashed, result.updated, result.unchanged) == (1, 1, 39)
        assert snapshot(state) == fresh(tmp_path, data)
        again = rescan(state, data)
        assert (again.rehashed, again.updated, again.unchanged) == (0, 0, 40)


def test_a_file_marked_dirty_while_its_directory_has_a_delta_is_read_again(
    tmp_path: Path,
) -> None:
    data = forty_files(tmp_path)
    with SetState(tmp_path / "state.sqlite") as state:
        rescan(state, data)
        (data / "f01.txt").write_text("changed")
        rescan(state, data)
        assert listing_row(state, "")[1] is not None
        state.mark_dirty(["f01.txt", "f05.txt"])
        result = rescan(state, data)
        assert (result.updated, result.rehashed, result.unchanged) == (2, 2, 38)
        again = rescan(state, data)
        assert (again.updated, again.rehashed) == (0, 0)


def test_a_state_from_before_deltas_gains_them(tmp_path: Path) -> None:
    """A state written before listings had deltas (no `dirs.delta` column) is read as it is,
    gains the column when opened, and keeps deltas from then on."""
    data = forty_files(tmp_path)
    with SetState(tmp_path / "state.sqlite") as state:
        rescan(state, data)
        state.db.execute("ALTER TABLE dirs DROP COLUMN delta")
    (data / "f01.txt").write_text("changed")
    with SetState(tmp_path / "state.sqlite") as state:
        result = rescan(state, data)
        assert (result.updated, result.rehashed, result.unchanged) == (1, 1, 39)
        assert listing_row(state, "")[1] is not None
        assert snapshot(state) == fresh(tmp_path, data)


def first_delta(state: SetState, data: Path) -> bytes:
    """A first scan, then one with f01.txt changed: the delta it keeps."""
    rescan(state, data)
    (data / "f01.txt").write_text("changed")
    rescan(state, data)
    _, delta = listing_row(state, "")
    assert delta is not None
    return delta


def test_listings_of_an_earlier_form_cost_one_whole_comparison(tmp_path: Path) -> None:
    """Listings an earlier resourcesync kept (a dictionary of stat tuples a directory, its
    delta in the listing's row, for the signature of that form) are not read: the first run
    compares the tree whole with the snapshot — a file changed meanwhile is journaled once,
    nothing else is read — and makes the listings again, packed; the run after reads
    nothing."""
    import marshal

    data = forty_files(tmp_path)
    with SetState(tmp_path / "state.sqlite") as state:
        rescan(state, data)
        signature = state.get("dirs_for")
        assert signature is not None and signature.startswith("(2, ")
        files = {
            name: None if st is None else st
            for name, st in Listing.load(marshal.loads(listing_row(state, "")[0]), "").items()
        }
        files["f03.txt"] = (1, 2, 3, 4)  # would be taken for a change if it were read
        state.db.execute(
            "UPDATE dirs SET files = ?, delta = ? WHERE path = ''",
            (marshal.dumps(files), marshal.dumps((b"x" * 8, {"f04.txt": (5, 6, 7, 8)}))),
        )
        state.put("dirs_for", "(1, " + signature[len("(2, ") :])
        (data / "f01.txt").write_text("changed")
        result = rescan(state, data)
        assert (result.rehashed, result.updated, result.unchanged) == (1, 1, 39)
        assert not result.problems
        assert state.get("dirs_for") == signature
        listed = Listing.load(marshal.loads(listing_row(state, "")[0]), "")
        assert len(listed) == 40 and dict(listed.items())["f03.txt"] != (1, 2, 3, 4)
        assert snapshot(state) == fresh(tmp_path, data)
        again = rescan(state, data)
        assert (again.rehashed, again.updated, again.unchanged) == (0, 0, 40)


def test_a_dirty_mark_is_kept_in_the_listings_delta(tmp_path: Path) -> None:
    """`mark_dirty` keeps the mark as a change of the listing (its delta, the listing's row
    left as it was): the next scan reads the file again, whatever its stat."""
    import marshal

    data = forty_files(tmp_path)
    with SetState(tmp_path / "state.sqlite") as state:
        first_delta(state, data)
        before, _ = listing_row(state, "")
        state.mark_dirty(["f05.txt"])
        files, apart = listing_row(state, "")
        assert files == before and apart is not None
        assert marshal.loads(apart)[1]["f05.txt"] == UNSURE
        result = rescan(state, data)
        assert (result.rehashed, result.updated, result.unchanged) == (1, 1, 39)
        again = rescan(state, data)
        assert (again.rehashed, again.updated, again.unchanged) == (0, 0, 40)


def test_a_few_changes_in_a_large_directory_write_a_few_pages(tmp_path: Path) -> None:
    """What a re-run writes follows what changed: three files changed in a directory of
    5,000 write their rows, their journal entries and a small delta, not the directory's
    listing again (SQLite writes a row whole, overflow pages and all, when its size changes:
    a delta kept in the listing's row did)."""
    data = tmp_path / "data"
    data.mkdir()
    for i in range(5000):
        (data / f"f{i:04d}.txt").write_text(f"file {i}")
    wal = tmp_path / "state.sqlite-wal"
    with SetState(tmp_path / "state.sqlite") as state:
        rescan(state, data)
        listing, _ = listing_row(state, "")
        for run in range(3):
            for i in (run, 1000 + run, 4000 + run):
                (data / f"f{i:04d}.txt").write_text(f"changed in run {run}")
            state.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            assert wal.stat().st_size == 0
            result = rescan(state, data)
            assert result.updated == 3
            written = wal.stat().st_size
            assert written < len(listing) / 4, (run, written, len(listing))
        assert snapshot(state) == fresh(tmp_path, data)
