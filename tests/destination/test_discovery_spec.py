"""Discovery as the spec allows it (issue 10.9): a robots.txt listing a plain Sitemap before the
ResourceSync document (core Example 11 puts a Resource List among a site's Sitemaps), and a
Source Description Index (core §8) whose parts are Source Descriptions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.responses import PlainTextResponse

from tests.destination.helpers import cli_json, entry, hand_source, sitemapindex, tree, urlset

SM = "http://www.sitemaps.org/schemas/sitemap/0.9"
AT = "2024-01-01T00:00:00Z"


def _two_sets(src: Any) -> tuple[str, str]:
    """Two sets of one file each, `one` and `two`: each a folder with its Capability List and
    Resource List (no `up` link)."""
    b = src.base
    names = ("one", "two")
    for name in names:
        src.files[f"/{name}/x.txt"] = name.encode()
        src.docs[f"/{name}/capabilitylist.xml"] = urlset(
            "capabilitylist",
            [{"loc": f"{b}/{name}/resourcelist.xml", "capability": "resourcelist"}],
        )
        src.docs[f"/{name}/resourcelist.xml"] = urlset(
            "resourcelist", [entry(b, f"/{name}/x.txt", name.encode())], at=AT
        )
    return names


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
        for name in _two_sets(src):
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


def test_robots_txt_naming_a_resource_list_for_each_set(tmp_path: Path) -> None:
    """Core §6.3.4: a Source with several sets adds a `Sitemap:` directive for each set's
    Resource List. Discovery stopped at the first: the other sets were never synced while
    the run said ok. Every ResourceSync document robots.txt names is a set (each through its
    `up` link to its Capability List when it gives one); one that cannot be read is said."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        for name in _two_sets(src):
            up = f'<rs:ln rel="up" href="{b}/{name}/capabilitylist.xml"/><url>'
            doc = src.docs[f"/{name}/resourcelist.xml"]
            src.docs[f"/{name}/resourcelist.xml"] = doc.replace(b"<url>", up.encode(), 1)

        async def broken(request: Any) -> Any:
            return PlainTextResponse("the database is down", status_code=500)

        async def robots(request: Any) -> Any:
            # With a byte order mark before its first line (RFC 9309 §2.3 lets it be), and
            # lines ended by CRLF.
            return PlainTextResponse(
                f"\ufeffSitemap: {b}/one/resourcelist.xml\r\nUser-agent: *\r\n"
                f"Sitemap: {b}/three/resourcelist.xml\r\n"
                f"Sitemap: {b}/two/resourcelist.xml\r\nSitemap: {b}/gone.xml\r\n"
            )

        src.handlers["/robots.txt"] = robots
        src.handlers["/three/resourcelist.xml"] = broken
        code, summary = cli_json("sync", b + "/", dest)
        assert code == 0, summary
        assert summary["how"] == "robots.txt"
        assert sorted(s["name"] for s in summary["sets"]) == ["one", "two"]
        assert tree(dest) == {"one/x.txt": b"one", "two/x.txt": b"two"}
        warned = [p["message"] for s in summary["sets"] for p in s["problems"]]
        # The list that answered 500 is said; the one that is not there (404) is not.
        assert [m for m in warned if "robots.txt names" in m] == [
            f"warning: robots.txt names {b}/three/resourcelist.xml, which could not be read "
            "(HTTP 500 Internal Server Error): a set of resources it may list is not synced"
        ], warned


def test_a_capability_list_listed_twice_is_one_set(tmp_path: Path) -> None:
    """A Source Description that lists a Capability List twice (or two parts of its index
    that both list it): one set, synced once a run — not twice, its report said twice."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        names = _two_sets(src)

        def listed(name: str) -> dict[str, str]:
            return {"loc": f"{b}/{name}/capabilitylist.xml", "capability": "capabilitylist"}

        src.docs["/.well-known/resourcesync"] = urlset(
            "description", [*(listed(n) for n in names), listed(names[0])]
        )
        code, summary = cli_json("sync", b + "/", dest)
        assert code == 0, summary
        assert [s["name"] for s in summary["sets"]] == ["one", "two"]
        assert tree(dest) == {"one/x.txt": b"one", "two/x.txt": b"two"}


def test_robots_txt_sitemaps_are_read_up_to_a_limit_and_that_is_said(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Each `Sitemap:` line is a request, and a site's plain Sitemaps may be many: the first
    `MAX_ROBOTS_SITEMAPS` are read, and a run says so (a set the others list is not synced)."""
    import resourcesync.destination.discover as discover_module

    monkeypatch.setattr(discover_module, "MAX_ROBOTS_SITEMAPS", 2)
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        _two_sets(src)
        plain = f'<?xml version="1.0"?><urlset xmlns="{SM}"><url><loc>{b}/</loc></url></urlset>'
        src.docs["/sitemap.xml"] = plain.encode()

        async def robots(request: Any) -> Any:
            return PlainTextResponse(
                f"Sitemap: {b}/one/resourcelist.xml\nSitemap: {b}/sitemap.xml\n"
                f"Sitemap: {b}/two/resourcelist.xml\n"
            )

        src.handlers["/robots.txt"] = robots
        code, summary = cli_json("sync", b + "/", dest)
        assert code == 0 and [s["name"] for s in summary["sets"]] == ["one"], summary
        assert "/two/resourcelist.xml" not in src.hits
        warned = [p["message"] for p in summary["sets"][0]["problems"]]
        assert "warning: robots.txt names 3 Sitemaps, of which the first 2 were read" in (
            " ".join(warned)
        ), warned


def test_a_source_description_that_cannot_be_read_now_is_said(tmp_path: Path) -> None:
    """`/.well-known/resourcesync` answering 503 for a while: discovery goes on to robots.txt,
    which names one set's Resource List — and the run said ok over a copy whose other set (only
    the Source Description names it) it never looked at. It says so now."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        names = _two_sets(src)
        src.docs["/.well-known/resourcesync"] = urlset(
            "description",
            [{"loc": f"{b}/{n}/capabilitylist.xml", "capability": "capabilitylist"} for n in names],
        )

        async def robots(request: Any) -> Any:
            return PlainTextResponse(f"Sitemap: {b}/one/resourcelist.xml\n")

        async def down(request: Any) -> Any:
            return PlainTextResponse("down for maintenance", status_code=503)

        src.handlers["/robots.txt"] = robots
        src.handlers["/.well-known/resourcesync"] = down
        code, summary = cli_json("sync", b + "/", dest, "--retries", "0")
        assert code == 0 and summary["how"] == "robots.txt", summary
        assert len(summary["sets"]) == 1, summary
        warned = " ".join(p["message"] for p in summary["sets"][0]["problems"])
        assert "/.well-known/resourcesync could not be read (HTTP 503" in warned, warned
        assert "a set only it names is not synced" in warned, warned
