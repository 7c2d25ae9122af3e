"""Discovery as the spec allows it (issue 10.9): a robots.txt listing a plain Sitemap before the
ResourceSync document (core Example 11 puts a Resource List among a site's Sitemaps), and a
Source Description Index (core §8) whose parts are Source Descriptions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.responses import PlainTextResponse

from tests.destination.helpers import cli_json, entry, hand_source, sitemapindex, tree, urlset

SM = "http://www.sitemaps.org/schemas/sitemap/0.9"


def test_robots_txt_with_a_plain_sitemap_first(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.publish([entry(b, "/a.txt", b"a")])
        del src.docs["/.well-known/resourcesync"]
        src.docs["/sitemap.xml"] = (
            f'<?xml version="1.0"?><urlset xmlns="{SM}"><url><loc>{b}/</loc></url></urlset>'
        ).encode()

        async def robots(request: Any) -> Any:
            return PlainTextResponse(
                "User-agent: *\nDisallow: /tmp/\n"
                f"Sitemap: {b}/sitemap.xml\nSitemap: {b}/resourcelist.xml\n"
            )

        src.handlers["/robots.txt"] = robots
        code, summary = cli_json("sync", b + "/", dest)
        assert code == 0, summary
        assert summary["how"] == "robots.txt"
        assert tree(dest) == {"a.txt": b"a"}


def test_a_source_description_index(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        for name in ("one", "two"):
            src.files[f"/{name}/x.txt"] = name.encode()
            src.docs[f"/{name}/capabilitylist.xml"] = urlset(
                "capabilitylist",
                [{"loc": f"{b}/{name}/resourcelist.xml", "capability": "resourcelist"}],
            )
            src.docs[f"/{name}/resourcelist.xml"] = urlset(
                "resourcelist",
                [entry(b, f"/{name}/x.txt", name.encode())],
                at="2024-01-01T00:00:00Z",
            )
            src.docs[f"/{name}/description.xml"] = urlset(
                "description",
                [{"loc": f"{b}/{name}/capabilitylist.xml", "capability": "capabilitylist"}],
            )
        src.docs["/.well-known/resourcesync"] = sitemapindex(
            "description",
            [{"loc": f"{b}/one/description.xml"}, {"loc": f"{b}/two/description.xml"}],
        )
        code, summary = cli_json("sync", b + "/", dest)
        assert code == 0, summary
        assert sorted(s["name"] for s in summary["sets"]) == ["one", "two"]
        assert tree(dest) == {"one/x.txt": b"one", "two/x.txt": b"two"}
