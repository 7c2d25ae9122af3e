"""A SOURCE that is part of a site or a file on disk (issue 14.10): a local Resource List is
synced as its site would be; URIs no mapping covers are refused with their reason and the
`--map` that would take them, said once, not once per URI; a mapping outside DEST works."""

from __future__ import annotations

from pathlib import Path

from tests.destination.helpers import cli, cli_json, published_source, set_report, tree

FILES = {"a.txt": b"alpha", "k/b.txt": b"beta", "k/c.txt": b"gamma"}


def test_a_local_resource_list_is_synced_as_its_site_would_be(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES) as src:
        local = next(src.out.rglob("resourcelist.xml"))
        code, summary = cli_json("sync", local, dest)
        assert code == 0, summary
        assert tree(dest) == FILES
        assert cli("audit", src.root, dest).exit_code == 0


def test_a_sub_path_source_says_once_what_lies_outside_it_and_the_map_for_it(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES) as src:
        # The part of the site under k/ lands at DEST's root; a.txt lies outside it.
        code, summary = cli_json("sync", src.root + "k/", dest)
        s = set_report(summary)
        assert code == 1 and s["refused"] == 1, summary
        assert tree(dest) == {"b.txt": b"beta", "c.txt": b"gamma"}
        (problem,) = s["problems"]
        assert problem["uri"] == src.root + "a.txt"
        assert f"it is outside {src.root}k/" in problem["message"]
        assert f"add --map {src.root}=DIR" in problem["message"]
        # Following the hint takes it.
        code, summary = cli_json("sync", src.root + "k/", dest, "--map", f"{src.root}={dest}")
        assert code == 0, summary
        assert tree(dest) == {"a.txt": b"alpha", "b.txt": b"beta", "c.txt": b"gamma"}


def test_refusals_for_want_of_a_mapping_are_aggregated(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    many = {f"d/f{i:02d}.txt": b"x%d" % i for i in range(30)}
    with published_source(tmp_path, {**FILES, **many}) as src:
        # The Resource List's entries on another site: no mapping covers any of them.
        rl = next(src.out.rglob("resourcelist.xml"))
        rl.write_text(rl.read_text().replace(f"<loc>{src.root}", "<loc>http://127.0.0.1:9/"))
        code, summary = cli_json("sync", src.root, dest)
        s = set_report(summary)
        assert code == 1 and s["refused"] == 33, summary
        (problem,) = s["problems"]
        assert "it is on 127.0.0.1:9, not on " in problem["message"]
        assert "add --map http://127.0.0.1:9/=DIR" in problem["message"]
        assert s["unmapped"] == {problem["message"].split("refused: ")[1].split(";")[0]: 33}
        result = cli("sync", src.root, tmp_path / "again")
        assert result.exit_code == 1
        assert result.stderr.count("no mapping covers") == 1, result.stderr


def test_a_mapping_outside_dest(tmp_path: Path) -> None:
    dest, outside = tmp_path / "dest", tmp_path / "elsewhere"
    with published_source(tmp_path, FILES) as src:
        code, summary = cli_json("sync", src.root, dest, "--map", f"{src.root}k/={outside}")
        assert code == 0, summary
        assert tree(dest) == {"a.txt": b"alpha"}
        assert tree(outside) == {"b.txt": b"beta", "c.txt": b"gamma"}
        (src.data / "k" / "b.txt").write_bytes(b"beta 2")
        src.publish()
        code, summary = cli_json("sync", src.root, dest, "--map", f"{src.root}k/={outside}")
        assert code == 0 and set_report(summary)["fetched"] == 1, summary
        assert tree(outside)["b.txt"] == b"beta 2"
