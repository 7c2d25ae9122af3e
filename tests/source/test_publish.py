"""publish: trees of files → a complete, evolving, valid ResourceSync document tree."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import re
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from resync.sitemap import Sitemap

from resourcesync.cli import main
from resourcesync.errors import ResourceSyncError
from resourcesync.sitemap import Mapping, Resolver, iter_entries, read_document, validate
from resourcesync.source.config import PublishConfig, SetConfig, load_config
from resourcesync.source.inventory import Item
from resourcesync.source.publish import publish

BASE = "http://example.org/data/"
DOCS = "http://example.org/"


class Clock:
    """A clock the tests move by hand (microsecond steps in between, as a real one would)."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(microseconds=7)
        return self.now


def make_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def config(tmp_path: Path, **kw: object) -> PublishConfig:
    # A new Resource List after every run with changes (the policy has tests of its own).
    set_kw = {
        "name": "set1",
        "dir": tmp_path / "data",
        "base_url": BASE,
        "resourcelist_every": "always",
    }
    set_kw.update({k: v for k, v in kw.items() if k in SetConfig.__dataclass_fields__})
    return PublishConfig(
        out=tmp_path / "out",
        sets=[SetConfig(**set_kw)],  # type: ignore[arg-type]
        spec_version=str(kw.get("spec_version", "1.1")),
    )


def resolver(tmp_path: Path) -> Resolver:
    return Resolver([Mapping(DOCS, tmp_path / "out")])


def check_valid(tmp_path: Path) -> None:
    report = validate(
        [tmp_path / "out" / ".well-known" / "resourcesync"],
        follow=True,
        resolver=resolver(tmp_path),
    )
    assert report.ok, [str(f) for f in report.findings + report.unreadable]
    assert not report.warnings, [str(f) for f in report.warnings]
    # …and resync 2.0.1's parser reads every document we wrote.
    documents = [*(tmp_path / "out").rglob("*.xml"), tmp_path / "out" / ".well-known/resourcesync"]
    for path in documents:
        with open(path, "rb") as f:
            Sitemap().parse_xml(fh=f)


def changes(tmp_path: Path) -> list[tuple[str, str]]:
    entries = iter_entries(
        tmp_path / "out" / "set1" / "changelist.xml", resolver=resolver(tmp_path)
    )
    return [(e.change or "", e.loc.removeprefix(BASE)) for e in entries]


FILES = {
    "a.txt": b"alpha",
    "b/c.html": b"<p>c</p>",
    "b/d.json": b'{"d": 1}',
    "a-b.txt": b"order matters",
    "東京/駅 1.txt": "日本".encode(),
}


def test_media_types_are_the_same_on_every_machine(tmp_path: Path) -> None:
    """Each file's type comes from Python's built-in table and ours, never from the machine's
    /etc/mime.types (which differs between machines: Debian's knows `.deb`), whether or not
    something in the process read that file first; a compressed file is what it is."""
    import mimetypes

    mimetypes.init()  # the module's own tables from the system, as a server's might be
    names = ["a.html", "b.md", "c.jsonl", "d.csv", "e.tar.gz", "f.deb", "g.weird", "h.lirs"]
    make_tree(tmp_path / "data", {n: b"x" for n in names})
    publish(config(tmp_path), clock=Clock())
    _, entries = read_document(tmp_path / "out" / "set1" / "resourcelist.xml")
    assert {e.loc.removeprefix(BASE): e.type for e in entries} == {
        "a.html": "text/html",
        "b.md": "text/markdown",
        "c.jsonl": "application/x-ndjson",
        "d.csv": "text/csv",
        "e.tar.gz": "application/gzip",
        "f.deb": "application/octet-stream",
        "g.weird": "application/octet-stream",
        "h.lirs": "application/x-lirs",
    }


def test_first_run_publishes_a_valid_tree_with_every_file(tmp_path: Path) -> None:
    make_tree(tmp_path / "data", FILES)
    result = publish(config(tmp_path), clock=Clock())
    (s,) = result.sets
    assert (s.scan.created, s.scan.baseline) == (5, True)
    check_valid(tmp_path)
    doc, entries = read_document(tmp_path / "out" / "set1" / "resourcelist.xml")
    assert doc.at is not None and doc.completed is not None and doc.completed >= doc.at
    by_uri = {e.loc: e for e in entries}
    assert sorted(by_uri) == sorted(
        [
            BASE + "a.txt",
            BASE + "a-b.txt",
            BASE + "b/c.html",
            BASE + "b/d.json",
            BASE + "%E6%9D%B1%E4%BA%AC/%E9%A7%85%201.txt",
        ]
    )
    for rel, data in FILES.items():
        uri = BASE + "/".join(quote(p) for p in rel.split("/"))
        e = by_uri[uri]
        assert e.length == len(data)
        assert e.hashes == {"md5": hashlib.md5(data).hexdigest()}
    assert by_uri[BASE + "b/c.html"].type == "text/html"
    # The baseline lists nothing as changed: the Resource List is the starting point.
    assert changes(tmp_path) == []
    # resync 2.0.1 reads what we wrote.
    with open(tmp_path / "out" / "set1" / "resourcelist.xml", "rb") as f:
        parsed = Sitemap().parse_xml(fh=f)
    assert len(list(parsed)) == 5
    published = json.loads((tmp_path / "out" / ".resourcesync" / "published.json").read_text())
    assert published["sets"][0]["resources"] == 5
    assert {d["capability"] for d in published["sets"][0]["documents"]} >= {
        "resourcelist",
        "changelist",
    }


def test_edits_creates_deletes_renames_and_touches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Files written just before they are read are read again by the next run (see the racy
    # test below); here every file counts as settled, so that a quiet re-run reads none.
    monkeypatch.setattr("resourcesync.source.scan.RACY_NS", 0)
    data = tmp_path / "data"
    make_tree(data, FILES)
    clock = Clock()
    cfg = config(tmp_path)
    publish(cfg, clock=clock)
    (data / "a.txt").write_bytes(b"alpha, edited")  # edit
    (data / "b" / "d.json").unlink()  # delete
    (data / "new.txt").write_bytes(b"new")  # create
    os.rename(data / "b" / "c.html", data / "b" / "renamed.html")  # rename
    os.utime(data / "a-b.txt", (1, 1))  # touch: same bytes, other mtime
    content = (data / "東京" / "駅 1.txt").read_bytes()
    (data / "東京" / "駅 1.txt").unlink()
    (data / "東京" / "駅 1.txt").write_bytes(content)  # copied back: new inode and mtime
    result = publish(cfg, clock=clock)
    scan = result.sets[0].scan
    assert (scan.created, scan.updated, scan.deleted, scan.touched) == (2, 1, 2, 2)
    got = changes(tmp_path)
    assert sorted(got) == sorted(
        [
            ("updated", "a.txt"),
            ("deleted", "b/c.html"),
            ("deleted", "b/d.json"),
            ("created", "b/renamed.html"),
            ("created", "new.txt"),
        ]
    )
    check_valid(tmp_path)
    _, entries = read_document(tmp_path / "out" / "set1" / "changelist.xml")
    times = [e.datetime for e in entries]
    assert all(t is not None for t in times)
    assert times == sorted(times) and len(set(times)) == len(times)  # strictly increasing
    updated = next(e for e in entries if e.change == "updated")
    assert updated.hashes == {"md5": hashlib.md5(b"alpha, edited").hexdigest()}
    assert updated.length == len(b"alpha, edited")
    # A re-run with nothing changed reads no file and finds nothing.
    again = publish(cfg, clock=clock).sets[0]
    assert (again.scan.changes, again.scan.rehashed) == (0, 0)
    assert changes(tmp_path) == got
    # The earlier Resource List is in the archive, with its time.
    archive, archived = read_document(tmp_path / "out" / "set1" / "resourcelist-archive.xml")
    assert archive.capability == "resourcelist-archive" and len(archived) == 1
    assert archived[0].at is not None


def test_change_lists_rotate_into_an_index_and_the_archive(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_tree(data, {"seed.txt": b"0"})
    clock = Clock()
    cfg = config(tmp_path, changelist_max_entries=3)
    publish(cfg, clock=clock)
    expected = []
    for round_ in range(3):
        for i in range(3):
            name = f"r{round_}-{i}.txt"
            (data / name).write_bytes(name.encode())
            expected.append(("created", name))
        publish(cfg, clock=clock)
    (data / "last.txt").write_bytes(b"x")
    expected.append(("created", "last.txt"))
    result = publish(cfg, clock=clock)
    assert result.sets[0].rotated >= 1
    index, lists = read_document(tmp_path / "out" / "set1" / "changelist.xml")
    assert index.index and index.capability == "changelist"
    assert len(lists) == 4
    assert all(e.until is not None for e in lists[:-1]) and lists[-1].until is None
    for before, after in itertools.pairwise(lists):
        assert before.until == after.from_  # no gaps, no overlaps
    assert changes(tmp_path) == expected  # nothing lost, nothing twice, in order
    _, archived = read_document(tmp_path / "out" / "set1" / "changelist-archive.xml")
    assert [a.loc for a in archived] == [e.loc for e in lists[:-1]]
    check_valid(tmp_path)


def test_change_lists_also_close_after_a_period(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_tree(data, {"seed.txt": b"0"})
    clock = Clock()
    cfg = config(tmp_path, changelist_max_age=3600.0)
    publish(cfg, clock=clock)
    (data / "one.txt").write_bytes(b"1")
    publish(cfg, clock=clock)
    clock.now += timedelta(hours=2)
    (data / "two.txt").write_bytes(b"2")
    result = publish(cfg, clock=clock)
    assert result.sets[0].rotated == 1
    index, lists = read_document(tmp_path / "out" / "set1" / "changelist.xml")
    assert index.index and len(lists) == 2
    first, _ = read_document(tmp_path / "out" / "set1" / lists[0].loc.removeprefix(DOCS + "set1/"))
    assert first.until == lists[0].until == lists[1].from_
    assert changes(tmp_path) == [("created", "one.txt"), ("created", "two.txt")]
    check_valid(tmp_path)


def _zip_matches_manifest(zip_path: Path, manifest_path: Path) -> list[str]:
    with zipfile.ZipFile(zip_path) as zf:
        inside = zf.read("manifest.xml")
        assert inside == manifest_path.read_bytes()  # the published copy is the same
        _, entries = read_document(inside)
        paths = []
        for e in entries:
            if e.path is None:
                assert e.change == "deleted"
                continue
            assert e.path.startswith("/")
            data = zf.read(e.path[1:])
            assert len(data) == e.length
            assert hashlib.md5(data).hexdigest() == e.hashes["md5"]
            paths.append(e.path)
        names = set(zf.namelist())
        assert names == {"manifest.xml", *(p[1:] for p in paths)}
    return paths


def test_resource_dump_packages_match_their_manifests(tmp_path: Path) -> None:
    data = tmp_path / "data"
    files = {f"f{i:02d}.bin": os.urandom(3000) for i in range(10)}
    make_tree(data, files)
    cfg = config(
        tmp_path, capabilities=("resourcelist", "changelist", "resourcedump"), package_size=10_000
    )
    publish(cfg, clock=Clock())
    dump, packages = read_document(tmp_path / "out" / "set1" / "resourcedump.xml")
    assert dump.at is not None and len(packages) == 4  # 3 files of 3,000 bytes each a package
    all_paths = []
    for p in packages:
        assert p.type == "application/zip"
        rel = p.loc.removeprefix(DOCS)
        zpath = tmp_path / "out" / rel
        assert zpath.stat().st_size == p.length
        contents = p.link("contents")
        assert contents is not None
        all_paths += _zip_matches_manifest(
            zpath, tmp_path / "out" / contents.href.removeprefix(DOCS)
        )
    assert sorted(all_paths) == sorted(f"/resources/{n}" for n in files)
    check_valid(tmp_path)


def test_change_dumps_package_each_runs_changes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_tree(data, {"keep.txt": b"k", "gone.txt": b"g", "edit.txt": b"e"})
    clock = Clock()
    cfg = config(tmp_path, capabilities=("resourcelist", "changelist", "changedump"))
    publish(cfg, clock=clock)
    (data / "gone.txt").unlink()
    (data / "edit.txt").write_bytes(b"edited")
    (data / "added.txt").write_bytes(b"added")
    publish(cfg, clock=clock)
    doc, packages = read_document(tmp_path / "out" / "set1" / "changedump.xml")
    assert doc.capability == "changedump" and len(packages) == 1
    (package,) = packages
    assert package.from_ is not None and package.until is not None
    manifest_url = package.link("contents").href  # type: ignore[union-attr]
    zpath = tmp_path / "out" / package.loc.removeprefix(DOCS)
    mpath = tmp_path / "out" / manifest_url.removeprefix(DOCS)
    paths = _zip_matches_manifest(zpath, mpath)
    assert sorted(paths) == ["/resources/added.txt", "/resources/edit.txt"]
    manifest, entries = read_document(mpath)
    assert manifest.capability == "changedump-manifest"
    assert sorted((e.change, e.loc.removeprefix(BASE)) for e in entries) == [
        ("created", "added.txt"),
        ("deleted", "gone.txt"),
        ("updated", "edit.txt"),
    ]
    assert all(package.from_ <= e.datetime <= package.until for e in entries)  # type: ignore[operator]
    check_valid(tmp_path)


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    make_tree(tmp_path / "data", FILES)
    result = publish(config(tmp_path), dry_run=True, clock=Clock())
    assert result.sets[0].scan.created == 5
    assert not (tmp_path / "out").exists()
    cfg = config(tmp_path)
    publish(cfg, clock=Clock())
    before = {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    (tmp_path / "data" / "a.txt").write_bytes(b"changed")
    dry = publish(cfg, dry_run=True, clock=Clock())
    assert dry.sets[0].scan.updated == 1
    after = {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    assert after == before
    assert publish(cfg, clock=Clock()).sets[0].scan.updated == 1  # still there to find


def test_version_10_puts_change_times_in_lastmod(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_tree(data, {"a.txt": b"a"})
    cfg = config(tmp_path, spec_version="1.0")
    publish(cfg, clock=Clock())
    (data / "a.txt").write_bytes(b"b")
    publish(cfg, clock=Clock())
    text = (tmp_path / "out" / "set1" / "changelist.xml").read_text()
    assert "datetime=" not in text and "<lastmod>" in text
    check_valid(tmp_path)


def test_several_sets_from_a_config_file(tmp_path: Path) -> None:
    make_tree(tmp_path / "articles", {"one.html": b"1"})
    make_tree(tmp_path / "datasets", {"two.csv": b"2"})
    (tmp_path / "resourcesync.toml").write_text(
        'out = "public"\n'
        'describedby = "http://example.org/about.html"\n'
        "[[set]]\n"
        'name = "articles"\ndir = "articles"\nbase_url = "http://example.org/a/"\n'
        "[[set]]\n"
        'name = "datasets"\ndir = "datasets"\nbase_url = "http://example.org/d/"\n'
        'hashes = ["md5", "sha-256"]\nmax_size = "10M"\n'
    )
    cfg = load_config(tmp_path / "resourcesync.toml")
    publish(cfg, clock=Clock())
    desc, caps = read_document(tmp_path / "public" / ".well-known" / "resourcesync")
    assert desc.link("describedby") is not None
    assert [c.loc for c in caps] == [
        "http://example.org/articles/capabilitylist.xml",
        "http://example.org/datasets/capabilitylist.xml",
    ]
    _, (entry,) = read_document(tmp_path / "public" / "datasets" / "resourcelist.xml")
    assert set(entry.hashes) == {"md5", "sha-256"}
    report = validate(
        [tmp_path / "public" / ".well-known" / "resourcesync"],
        follow=True,
        resolver=Resolver([Mapping(DOCS, tmp_path / "public")]),
    )
    assert report.ok and len(report.documents) == 1 + 2 * 5


def test_excludes_symlinks_and_our_own_output_are_not_published(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_tree(data, {"keep.txt": b"k", "skip.tmp": b"t", ".git/config": b"g"})
    (data / "link.txt").symlink_to(tmp_path / "outside.txt")
    (tmp_path / "outside.txt").write_bytes(b"secret")
    cfg = PublishConfig(
        out=data / "public",  # the output inside the published tree is never published
        sets=[SetConfig("set1", data, BASE, exclude=("*.tmp", ".git"))],
        docs_url="http://example.org/docs/",
    )
    publish(cfg, clock=Clock())
    publish(cfg, clock=Clock())
    _, entries = read_document(data / "public" / "set1" / "resourcelist.xml")
    assert [e.loc for e in entries] == [BASE + "keep.txt"]


def test_the_unfiltered_walk_takes_what_the_filtered_walk_takes(tmp_path: Path) -> None:
    """A walk without filters or links followed tells files by the one `lstat` each gets;
    it must take, skip and count exactly what the general walk does."""
    from resourcesync.source.inventory import DirectoryInventory

    data = tmp_path / "data"
    make_tree(data, {"a.txt": b"a", "sub/b.txt": b"b", ".hidden": b"h", "sub/.x/c.txt": b"c"})
    (tmp_path / "outside.txt").write_bytes(b"secret")
    (data / "out.txt").symlink_to(tmp_path / "outside.txt")
    (data / "in.txt").symlink_to(data / "a.txt")
    (data / "dirlink").symlink_to(data / "sub", target_is_directory=True)
    (data / "dangling").symlink_to(tmp_path / "nothing")
    os.mkfifo(data / "fifo")
    (data / os.fsdecode(b"bad\xff.txt")).write_bytes(b"x")  # no UTF-8 name: skipped, said
    (data / "skipped").mkdir()
    (data / "skipped" / "s.txt").write_bytes(b"s")

    def walk(**kw: object) -> tuple[list[tuple[str, str]], object]:
        inv = DirectoryInventory(data, BASE, skip=[data / "skipped"], **kw)  # type: ignore[arg-type]
        items = [(item.key, item.uri) for item in inv]
        return items, inv.stats

    for hidden in (False, True):
        plain, plain_stats = walk(hidden=hidden)
        general, general_stats = walk(hidden=hidden, exclude=("*.no-such-name",))
        assert plain == general
        assert plain_stats == general_stats
        assert plain_stats.skipped_links == 4  # type: ignore[attr-defined]
        assert len(plain_stats.skipped_names) == 1  # type: ignore[attr-defined]
    assert [key for key, _ in walk()[0]] == ["a.txt", "sub/b.txt"]


def test_documents_and_resources_never_share_urls(tmp_path: Path) -> None:
    make_tree(tmp_path / "data", {"set1/capabilitylist.xml": b"mine"})
    cfg = PublishConfig(
        out=tmp_path / "out",
        sets=[SetConfig("set1", tmp_path / "data", "http://example.org/")],
    )
    with pytest.raises(ResourceSyncError, match="choose another --name") as caught:
        publish(cfg)
    # The file in the way named once, first, as every error names its input.
    said = str(caught.value)
    assert said.startswith(str(tmp_path / "data" / "set1")) and said.count("data/set1") == 1


def test_cli_publish_json_and_errors(tmp_path: Path) -> None:
    make_tree(tmp_path / "data", FILES)
    runner = CliRunner()
    args = ["publish", str(tmp_path / "data"), "--base-url", BASE, "--out", str(tmp_path / "out")]
    result = runner.invoke(main, [*args, "--json", "--hash", "md5,sha-256"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["sets"][0]["created"] == 5 and summary["dry_run"] is False
    _, entries = read_document(tmp_path / "out" / "resourcesync" / "resourcelist.xml")
    assert all(set(e.hashes) == {"md5", "sha-256"} for e in entries)
    missing = runner.invoke(
        main, ["publish", str(tmp_path / "nope"), "--base-url", BASE, "--out", str(tmp_path / "o2")]
    )
    assert missing.exit_code == 2
    assert "nope" in missing.stderr and "Traceback" not in missing.output
    bad = runner.invoke(main, [*args, "--capabilities", "resourcelist,everything"])
    assert bad.exit_code == 2 and "everything" in bad.output
    assert not io.StringIO(result.stderr).read().count("Traceback")


def test_a_new_base_url_is_every_resource_gone_and_come_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("resourcesync.source.scan.RACY_NS", 0)  # every file settled
    make_tree(tmp_path / "data", {"a.txt": b"a", "b/c.txt": b"c"})
    clock = Clock()
    publish(config(tmp_path), clock=clock)
    moved = PublishConfig(
        out=tmp_path / "out",
        sets=[SetConfig("set1", tmp_path / "data", "http://example.org/moved/")],
        docs_url=DOCS,
    )
    scan = publish(moved, clock=clock).sets[0].scan
    assert (scan.created, scan.deleted, scan.updated) == (2, 2, 0)
    entries = iter_entries(
        tmp_path / "out" / "set1" / "changelist.xml", resolver=resolver(tmp_path)
    )
    assert sorted((e.change, e.loc) for e in entries) == [
        ("created", "http://example.org/moved/a.txt"),
        ("created", "http://example.org/moved/b/c.txt"),
        ("deleted", BASE + "a.txt"),
        ("deleted", BASE + "b/c.txt"),
    ]
    # Re-running with the same base reads nothing again.
    again = publish(moved, clock=clock).sets[0].scan
    assert (again.changes, again.rehashed) == (0, 0)


def test_any_sorted_inventory_can_be_a_source(tmp_path: Path) -> None:
    """A database table as the README shows it: only changed fingerprints are read."""
    reads: list[str] = []
    table = {f"rec{i:03d}": (1, f"<r>{i}</r>".encode()) for i in range(5)}

    def inventory() -> Iterator[Item]:
        for key in sorted(table):
            version, body = table[key]

            def opener(key: str = key, body: bytes = body) -> io.BytesIO:
                reads.append(key)
                return io.BytesIO(body)

            yield Item(
                key=key,
                fingerprint=str(version),
                length=len(body),
                uri=f"http://example.org/items/{key}",
                type="application/xml",
                lastmod=datetime(2026, 1, 1, tzinfo=UTC),
                open=opener,
            )

    cfg = PublishConfig(
        out=tmp_path / "out",
        sets=[SetConfig("records", tmp_path, "http://example.org/items/")],
    )
    clock = Clock()
    publish(cfg, inventories={"records": inventory()}, clock=clock)
    assert len(reads) == 5
    reads.clear()
    table["rec002"] = (2, b"<r>changed</r>")
    del table["rec004"]
    scan = publish(cfg, inventories={"records": inventory()}, clock=clock).sets[0].scan
    assert reads == ["rec002"]
    assert (scan.updated, scan.deleted) == (1, 1)
    with pytest.raises(ResourceSyncError, match="ascending key order"):
        publish(cfg, inventories={"records": reversed(list(inventory()))}, clock=clock)


def test_hidden_files_are_published_only_when_asked(tmp_path: Path) -> None:
    make_tree(tmp_path / "data", {"a.txt": b"a", ".env": b"secret", ".cache/x": b"x"})
    publish(config(tmp_path), clock=Clock())
    _, entries = read_document(tmp_path / "out" / "set1" / "resourcelist.xml")
    assert [e.loc for e in entries] == [BASE + "a.txt"]
    publish(config(tmp_path, hidden=True), clock=Clock())
    _, entries = read_document(tmp_path / "out" / "set1" / "resourcelist.xml")
    assert sorted(e.loc for e in entries) == [BASE + ".cache/x", BASE + ".env", BASE + "a.txt"]


def test_a_file_whose_name_no_uri_can_hold_is_said_not_published(tmp_path: Path) -> None:
    # A name that is not valid UTF-8 cannot become a URI: the file is left out, and the run
    # says so on stderr and counts it as a warning (it used to be in --json only: "ok" over a
    # file that exists and was not published).
    data = tmp_path / "data"
    data.mkdir()
    (data / "good.txt").write_bytes(b"g")
    (Path(os.fsdecode(bytes(data))) / os.fsdecode(b"bad\xff.txt")).write_bytes(b"b")
    result = CliRunner().invoke(
        main,
        ["publish", str(data), "--base-url", "http://example.org/d/", "--out", str(tmp_path / "o")],
    )
    assert result.exit_code == 0, result.output
    assert "bad\ufffd.txt: the name is not valid UTF-8, so no URI can name it: not published" in (
        result.stderr
    )
    assert re.search(r"publish ok: 1 resources?, .*, 1 warning;", result.stdout), result.stdout


def test_a_configuration_that_cannot_be_read_is_one_line_naming_it(tmp_path: Path) -> None:
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe[set]\n")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[[\n")
    for path, message in [
        (tmp_path / "missing.toml", "no such file"),
        (tmp_path, "is a directory, not a configuration file"),
        (binary, "not UTF-8 text: invalid start byte at byte 0"),
        (bad, "not valid TOML"),
    ]:
        with pytest.raises(ResourceSyncError) as caught:
            load_config(path)
        assert str(caught.value).startswith(f"{path}: {message}"), str(caught.value)
        assert "Errno" not in str(caught.value)
        result = CliRunner().invoke(main, ["publish", "--config", str(path)])
        assert result.exit_code == 2 and message in result.output, result.output
        assert "Traceback" not in result.output
