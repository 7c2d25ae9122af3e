"""Links on entries (issue 10.16): `alternate`, `canonical`, `memento`, `patch`, `describedby`
(and any other) links the Source gives for a resource are kept in the Destination's state, shown
by `sync --json` for what a run fetched and by `resourcesync ls` for everything held — while the
resource itself is always fetched from `<loc>` (core §14.1)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.destination.helpers import cli, cli_json, entry, hand_source, tree

LINKS = (
    '<rs:ln rel="alternate" href="{b}/a.html" type="text/html"/>'
    '<rs:ln rel="canonical" href="http://example.org/a"/>'
    '<rs:ln rel="memento" href="{b}/mementos/a-1.txt" modified="2023-12-01T00:00:00Z"/>'
    '<rs:ln rel="patch" href="{b}/patches/a.diff" type="text/x-diff" hash="md5:00ff"/>'
    '<rs:ln rel="describedby" href="{b}/a.meta.xml" type="application/xml"/>'
)


def _with(doc: bytes, loc: str, tags: str) -> bytes:
    return doc.replace(f"<loc>{loc}</loc>".encode(), f"<loc>{loc}</loc>{tags}".encode(), 1)


def _ls(dest: Path, *uris: str) -> list[dict[str, object]]:
    result = cli("ls", dest, "--json", *uris)
    assert result.exit_code == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_links_are_kept_shown_and_never_fetched_instead_of_loc(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"alpha"
        src.files["/b.txt"] = b"bravo"
        src.publish([entry(b, "/a.txt", b"alpha"), entry(b, "/b.txt", b"bravo")])
        src.docs["/resourcelist.xml"] = _with(
            src.docs["/resourcelist.xml"], f"{b}/a.txt", LINKS.format(b=b)
        )
        code, summary = cli_json("sync", b, dest)
        assert code == 0, summary
        assert tree(dest) == {"a.txt": b"alpha", "b.txt": b"bravo"}
        # Only <loc> was fetched: no link was followed.
        assert set(src.hits) >= {"/a.txt", "/b.txt"}
        assert not [p for p in src.hits if p.startswith(("/a.html", "/mementos", "/patches"))]
        assert "/a.meta.xml" not in src.hits

        shown = summary["sets"][0]["links"]
        assert list(shown) == [f"{b}/a.txt"]
        rels = [ln["rel"] for ln in shown[f"{b}/a.txt"]]
        assert rels == ["alternate", "canonical", "memento", "patch", "describedby"]
        memento = shown[f"{b}/a.txt"][2]
        assert memento == {
            "rel": "memento",
            "href": f"{b}/mementos/a-1.txt",
            "modified": "2023-12-01T00:00:00Z",
        }
        assert shown[f"{b}/a.txt"][3]["hashes"] == {"md5": "00ff"}

        held = {r["uri"]: r for r in _ls(dest)}
        assert set(held) == {f"{b}/a.txt", f"{b}/b.txt"}
        assert held[f"{b}/a.txt"]["links"] == shown[f"{b}/a.txt"]
        assert held[f"{b}/a.txt"]["path"] == "a.txt" and held[f"{b}/a.txt"]["length"] == 5
        assert held[f"{b}/b.txt"]["links"] == []
        # Text: one line per resource, the links as REL=HREF.
        text = cli("ls", dest, f"{b}/a.txt").stdout.splitlines()
        assert len(text) == 1
        uri, path, length, links = text[0].split("\t")
        assert (uri, path, length) == (f"{b}/a.txt", "a.txt", "5")
        assert "canonical=http://example.org/a" in links.split(" ")


def test_links_that_change_on_an_unchanged_resource_are_updated(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"alpha"
        src.publish([entry(b, "/a.txt", b"alpha")])
        src.docs["/resourcelist.xml"] = _with(
            src.docs["/resourcelist.xml"],
            f"{b}/a.txt",
            f'<rs:ln rel="describedby" href="{b}/v1.xml"/>',
        )
        assert cli("sync", b, dest).exit_code == 0
        # The same bytes, described elsewhere now: nothing fetched, the state follows.
        src.publish([entry(b, "/a.txt", b"alpha")], at="2024-02-01T00:00:00Z")
        src.docs["/resourcelist.xml"] = _with(
            src.docs["/resourcelist.xml"],
            f"{b}/a.txt",
            f'<rs:ln rel="describedby" href="{b}/v2.xml"/>',
        )
        hits = src.hits.get("/a.txt", 0)
        code, summary = cli_json("sync", b, dest, "--baseline")
        assert code == 0 and summary["sets"][0]["fetched"] == 0, summary
        assert src.hits.get("/a.txt", 0) == hits
        (held,) = _ls(dest)
        assert held["links"] == [{"rel": "describedby", "href": f"{b}/v2.xml"}]
        # A change entry with other links, for the same bytes, updates them too.
        src.docs["/changelist.xml"] = _with(
            src.docs["/changelist.xml"].replace(
                b"</urlset>",
                f'<url><loc>{b}/a.txt</loc><rs:md change="updated" '
                f'datetime="2024-02-02T00:00:00Z" length="5" '
                f'hash="md5:2c1743a391305fbf367df8e4f069f9f9"/></url></urlset>'.encode(),
            ),
            f"{b}/a.txt",
            f'<rs:ln rel="alternate" href="{b}/a.html"/>',
        )
        code, summary = cli_json("sync", b, dest)
        assert code == 0 and summary["sets"][0]["mode"] == "incremental", summary
        (held,) = _ls(dest)
        assert held["links"] == [{"rel": "alternate", "href": f"{b}/a.html"}]


def test_ls_says_what_is_not_held_and_where_there_is_no_copy(tmp_path: Path) -> None:
    result = cli("ls", tmp_path)
    assert result.exit_code == 2
    assert "no copy's state here" in result.stderr
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"alpha"
        src.publish([entry(b, "/a.txt", b"alpha")])
        assert cli("sync", b, dest).exit_code == 0
        result = cli("ls", dest, f"{b}/a.txt", f"{b}/nope.txt")
        assert result.exit_code == 1
        assert result.stdout.startswith(f"{b}/a.txt\ta.txt\t5")
        assert f"not held in {dest}: {b}/nope.txt" in result.stderr


def test_ls_shows_the_time_of_the_change_each_resource_is_held_as_of(tmp_path: Path) -> None:
    """`ls --json` gives the Source's `lastmod` of what is held, and `changed`: the time of
    the latest change of it the copy applied (null for what a Resource List gave)."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"], src.files["/b.txt"] = b"alpha", b"bravo"
        listed = [entry(b, "/a.txt", b"alpha"), entry(b, "/b.txt", b"bravo")]
        src.publish(listed)
        assert cli("sync", b, dest).exit_code == 0
        src.files["/a.txt"] = b"alpha 2"
        change = entry(
            b,
            "/a.txt",
            b"alpha 2",
            change="updated",
            datetime="2024-01-01T09:30:00.25+09:00",
            lastmod="2024-01-01T00:29:00Z",
        )
        src.publish(listed, changes=[change])
        assert cli("sync", b, dest).exit_code == 0
    shown = {d["uri"]: d for d in _ls(dest)}
    assert shown[f"{b}/a.txt"]["changed"] == "2024-01-01T00:30:00.250000Z", shown
    assert shown[f"{b}/a.txt"]["lastmod"] == "2024-01-01T00:29:00Z", shown
    assert shown[f"{b}/b.txt"]["changed"] is None, shown
