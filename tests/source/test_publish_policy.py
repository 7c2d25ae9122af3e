"""When a run writes a new Resource List (issue 15.3): `resourcelist_every`. Between two
Resource Lists the Change Lists carry every change, and the invariant of issue 16 holds: the
latest Resource List plus the changes after its `at` is the Source now."""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from resourcesync.cli import main
from resourcesync.sitemap import read_document
from resourcesync.source.config import ConfigError, PublishConfig, SetConfig, parse_every
from resourcesync.source.publish import publish
from resourcesync.source.server import create_app
from tests.servers import serve
from tests.source.history import Clock, check_history

BASE = "http://example.org/data/"
DOCS = "http://example.org/"


def config(
    tmp_path: Path,
    every: str | None = None,
    capabilities: tuple[str, ...] = ("resourcelist", "changelist", "resourcedump"),
) -> PublishConfig:
    kw = {} if every is None else {"resourcelist_every": every}
    return PublishConfig(
        out=tmp_path / "out",
        sets=[
            SetConfig(
                "set1",
                tmp_path / "data",
                BASE,
                capabilities=capabilities,
                **kw,  # type: ignore[arg-type]
            )
        ],
        docs_url=DOCS,
    )


def files(data: Path) -> dict[str, tuple[int, str]]:
    return {
        BASE + p.relative_to(data).as_posix(): (len(b), hashlib.md5(b).hexdigest())
        for p in sorted(data.rglob("*"))
        if p.is_file()
        for b in [p.read_bytes()]
    }


def five_files_published(tmp_path: Path) -> tuple[Path, Clock]:
    """A set of five files, published once (the default policy); its directory and clock."""
    data = tmp_path / "data"
    data.mkdir()
    for i in range(5):
        (data / f"f{i}.txt").write_text(f"file {i}")
    clock = Clock()
    publish(config(tmp_path), clock=clock)
    return data, clock


def at_of(tmp_path: Path, name: str = "resourcelist.xml") -> object:
    doc, _ = read_document(tmp_path / "out" / "set1" / name)
    return doc.at


def test_by_default_a_run_with_few_changes_writes_the_change_list_only(tmp_path: Path) -> None:
    data, clock = five_files_published(tmp_path)
    first = at_of(tmp_path)
    dump = at_of(tmp_path, "resourcedump.xml")
    (data / "f1.txt").write_text("changed")
    (data / "f2.txt").unlink()
    (data / "new.txt").write_text("new")
    result = publish(config(tmp_path), clock=clock)
    assert result.sets[0].scan.changes == 3
    # The Resource List and the Resource Dump stay as they were; the changes are listed.
    assert at_of(tmp_path) == first and at_of(tmp_path, "resourcedump.xml") == dump
    h = check_history(tmp_path / "out", DOCS, "set1")
    assert h.resourcelist[1] != files(data)
    assert h.current == files(data)
    assert [c.change for c in h.changes] == ["updated", "deleted", "created"]


@pytest.mark.parametrize("capabilities", [("resourcelist",), ("resourcelist", "resourcedump")])
def test_a_set_without_change_lists_has_a_new_resource_list_after_any_change(
    tmp_path: Path, capabilities: tuple[str, ...]
) -> None:
    """No Change List carries the changes: the Resource List (and the dump) is all a
    Destination has, so the policy does not hold it back. Before, a change was published
    nowhere until the policy's day had passed."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    clock = Clock()
    publish(config(tmp_path, capabilities=capabilities), clock=clock)
    first = at_of(tmp_path)
    (data / "a.txt").write_text("changed")
    (data / "b.txt").write_text("new")
    publish(config(tmp_path, capabilities=capabilities), clock=clock)
    assert at_of(tmp_path) != first
    _, entries = read_document(tmp_path / "out" / "set1" / "resourcelist.xml")
    assert {r.loc: r.length for r in entries} == {BASE + "a.txt": 7, BASE + "b.txt": 3}
    if "resourcedump" in capabilities:
        assert at_of(tmp_path, "resourcedump.xml") == at_of(tmp_path)
    # Nothing changed: nothing written again.
    again = at_of(tmp_path)
    publish(config(tmp_path, capabilities=capabilities), clock=clock)
    assert at_of(tmp_path) == again


def test_a_new_resource_list_after_n_changes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    clock = Clock()
    publish(config(tmp_path, "3-changes"), clock=clock)
    first = at_of(tmp_path)
    (data / "a.txt").write_text("a2")
    (data / "b.txt").write_text("b")
    publish(config(tmp_path, "3-changes"), clock=clock)
    assert at_of(tmp_path) == first
    (data / "c.txt").write_text("c")
    publish(config(tmp_path, "3-changes"), clock=clock)
    # Three changes since the last one: a new Resource List (and Resource Dump), the old one
    # in the archive, and the count starts again.
    second = at_of(tmp_path)
    assert second != first and at_of(tmp_path, "resourcedump.xml") == second
    h = check_history(tmp_path / "out", DOCS, "set1")
    assert h.resourcelist[1] == files(data) == h.current
    assert [t for t, _ in h.archived] == [first]
    (data / "d.txt").write_text("d")
    publish(config(tmp_path, "3-changes"), clock=clock)
    assert at_of(tmp_path) == second
    assert check_history(tmp_path / "out", DOCS, "set1").current == files(data)


def test_a_new_resource_list_once_the_last_one_is_old_and_something_changed(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    clock = Clock()
    publish(config(tmp_path, "1h"), clock=clock)
    first = at_of(tmp_path)
    clock.now += timedelta(hours=2)
    # Old, but nothing changed: nothing to write.
    publish(config(tmp_path, "1h"), clock=clock)
    assert at_of(tmp_path) == first
    (data / "a.txt").write_text("a2")
    publish(config(tmp_path, "1h"), clock=clock)
    assert at_of(tmp_path) != first
    h = check_history(tmp_path / "out", DOCS, "set1")
    assert h.resourcelist[1] == files(data) == h.current


def test_always_writes_a_resource_list_after_every_change(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    clock = Clock()
    publish(config(tmp_path, "always"), clock=clock)
    first = at_of(tmp_path)
    (data / "a.txt").write_text("a2")
    publish(config(tmp_path, "always"), clock=clock)
    assert at_of(tmp_path) != first


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("always", (None, 1)),
        ("1d", (86400.0, None)),
        ("500-changes", (None, 500)),
        ("6h, 5000-changes", (21600.0, 5000)),
    ],
)
def test_policies_are_read(text: str, expected: tuple[float | None, int | None]) -> None:
    assert parse_every(text) == expected


@pytest.mark.parametrize("text", ["", "soon", "0-changes", "x-changes", "-1h"])
def test_a_policy_that_means_nothing_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError):
        parse_every(text)
    (tmp_path / "data").mkdir()
    args = ["publish", str(tmp_path / "data"), "--base-url", BASE, "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(main, [*args, "--resourcelist-every", text])
    assert result.exit_code == 2, result.output
    assert "not a" in result.output
    assert not (tmp_path / "o").exists()


def test_a_document_written_again_the_same_keeps_its_time_and_is_not_fetched_again(
    tmp_path: Path,
) -> None:
    """A re-run rewrote the Capability List, the archives and the Source Description with the
    same bytes: their modification time, a server's Last-Modified and ETag, changed on every
    cron run, and a Destination polling them with conditional GETs fetched them every time.
    Now only what changed is written: nothing, then the Change List alone."""
    data, clock = five_files_published(tmp_path)
    (data / "f1.txt").write_text("changed")
    publish(config(tmp_path), clock=clock)
    out = tmp_path / "out"

    def served() -> dict[str, tuple[int, bytes]]:
        return {
            p.relative_to(out).as_posix(): (p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(out.rglob("*"))
            if p.is_file() and ".resourcesync" not in p.parts
        }

    before = served()
    assert {"set1/capabilitylist.xml", "set1/changelist.xml", ".well-known/resourcesync"} <= set(
        before
    )
    with serve(create_app(out)) as base, httpx.Client(base_url=base) as http:
        tags = {name: http.get("/" + name).headers["etag"] for name in before}
        publish(config(tmp_path), clock=clock)
        assert served() == before
        for name, tag in tags.items():
            again = http.get("/" + name, headers={"If-None-Match": tag})
            assert again.status_code == 304, name
        (data / "f2.txt").write_text("changed too")
        publish(config(tmp_path), clock=clock)
        after = served()
        changed = {name for name in before if after.get(name) != before[name]}
        assert changed == {"set1/changelist.xml"}, changed
        assert (
            http.get(
                "/set1/changelist.xml", headers={"If-None-Match": tags["set1/changelist.xml"]}
            ).status_code
            == 200
        )


#: URLs a Source cannot publish under, and what the one line says of each.
BAD_URLS = {
    "htp://example.org/": "is not an http(s) URL",
    "http:///no-host/": "names no host",
    "http://exa mple.org/": "white space or a control character",
    "http://example.org/\x00/": "white space or a control character",
    "http://example.org:99999/": "bad port",
    "http://example.org/data?x=1": "a query or a fragment",
    "http://example.org/#top": "a query or a fragment",
}


@pytest.mark.parametrize("option", ["--base-url", "--docs-url", "--hub"])
@pytest.mark.parametrize("url", BAD_URLS)
def test_a_url_the_documents_could_not_name_things_under_is_refused(
    tmp_path: Path, option: str, url: str
) -> None:
    """Every resource's URI (or every document's, or the hub's address) is made from it: one
    line naming the option and the URL, exit 2, nothing written — not a Resource List of URIs
    such as `http://exa mple.org/a.txt` or `http://example.org/#top/a.txt` (every one the same
    resource). A hub may have a query: nothing is appended to it."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    out = tmp_path / "out"
    args = ["publish", str(data), "--out", str(out)]
    args += (
        ["--base-url", url] if option == "--base-url" else ["--base-url", "http://h/", option, url]
    )
    result = CliRunner().invoke(main, args)
    if option == "--hub" and "a query or a fragment" in BAD_URLS[url]:
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 2, result.output
    assert BAD_URLS[url] in result.output and repr(url) in result.output
    assert not (out / "resourcesync").exists()
    # The same from Python.
    with pytest.raises(ConfigError, match=re.escape(BAD_URLS[url])):
        if option == "--base-url":
            PublishConfig(out=out, sets=[SetConfig("s", data, url)])
        elif option == "--docs-url":
            PublishConfig(out=out, sets=[SetConfig("s", data, "http://h/")], docs_url=url)
        else:
            PublishConfig(out=out, sets=[SetConfig("s", data, "http://h/", hub=url)])
