"""Dump packages that would blow up in memory (issue 17.4): a deflate-bombed manifest.xml is
read as a stream, capped after decompression, before the XML reader holds any of it; a
package that is not a ZIP is refused with one line, never a traceback (issue 10.8's crash)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

from tests.destination.helpers import (
    cli,
    cli_json,
    entry,
    hand_source,
    md5,
    sitemapindex,
    tree,
    urlset,
)


def _set(summary: dict[str, Any]) -> dict[str, Any]:
    return summary["sets"][0]  # type: ignore[no-any-return]


def test_a_deflate_bombed_manifest_is_capped_before_parsing(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """17.4: a package whose manifest.xml inflates to far more than any manifest: read as a
    stream and refused at the cap; the lists are used instead."""
    import resourcesync.destination.dumps as dumps

    monkeypatch.setattr(dumps, "MAX_MANIFEST", 4 << 20)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        head = b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        zf.writestr("manifest.xml", head + b" " * (64 << 20) + b"</urlset>")
    package = buf.getvalue()
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.files["/package.zip"] = package
        src.publish(
            [entry(b, "/a.txt", b"a")],
            extra_caps=[{"loc": f"{b}/resourcedump.xml", "capability": "resourcedump"}],
        )
        src.docs["/resourcedump.xml"] = urlset(
            "resourcedump",
            [{"loc": f"{b}/package.zip", "length": len(package), "md5": md5(package)}],
            at="2024-01-01T00:00:00Z",
        )
        code, summary = cli_json("sync", b, dest)
        s = _set(summary)
        assert code == 0 and s["via"] == "lists", summary
        (problem,) = [p for p in s["problems"] if "dump not usable" in p["message"]]
        assert "manifest.xml" in problem["message"] and "larger than" in problem["message"]
        assert tree(dest) == {"a.txt": b"a"}


def test_a_package_that_is_not_a_zip_falls_back_to_the_lists(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        junk = b"this is not a zip file at all" * 10
        src.files["/package.zip"] = junk
        src.publish(
            [entry(b, "/a.txt", b"a")],
            extra_caps=[{"loc": f"{b}/resourcedump.xml", "capability": "resourcedump"}],
        )
        src.docs["/resourcedump.xml"] = urlset(
            "resourcedump",
            [{"loc": f"{b}/package.zip", "length": len(junk)}],
            at="2024-01-01T00:00:00Z",
        )
        code, summary = cli_json("sync", b, dest)
        s = _set(summary)
        assert code == 0 and s["via"] == "lists", summary
        (problem,) = [p for p in s["problems"] if "dump not usable" in p["message"]]
        assert "not a readable ZIP package" in problem["message"]
        assert tree(dest) == {"a.txt": b"a"}
        result = cli("sync", b, tmp_path / "strict", "--via", "dumps")
        assert result.exit_code == 2
        assert result.stderr.strip() == (
            f"resourcesync: {b}/package.zip: not a readable ZIP package: File is not a zip file"
        )


def _package(b: str, files: dict[str, bytes]) -> bytes:
    """A dump package: manifest.xml and the bitstreams, as core §11 describes."""
    entries = [
        {**entry(b, f"/{name}", body), "path": f"/resources/{name}"} for name, body in files.items()
    ]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(
            "manifest.xml", urlset("resourcedump-manifest", entries, at="2024-01-01T00:00:00Z")
        )
        for name, body in files.items():
            zf.writestr(f"resources/{name}", body)
    return buf.getvalue()


_FILES = {"a.txt": b"a", "b.txt": b"bb", "c.txt": b"ccc"}


def _two_dumps(src: Any) -> dict[str, bytes]:
    """`_FILES` served, and in two packages at /p1.zip and /p2.zip (a.txt; b.txt and c.txt),
    each the one package of a Resource Dump (/rd1.xml, /rd2.xml); returns `_FILES`."""
    b = src.base
    src.files.update({f"/{k}": v for k, v in _FILES.items()})
    p1, p2 = _package(b, {"a.txt": b"a"}), _package(b, {"b.txt": b"bb", "c.txt": b"ccc"})
    src.files["/p1.zip"], src.files["/p2.zip"] = p1, p2
    for n, package in ((1, p1), (2, p2)):
        src.docs[f"/rd{n}.xml"] = urlset(
            "resourcedump",
            [{"loc": f"{b}/p{n}.zip", "length": len(package), "md5": md5(package)}],
            at="2024-01-01T00:00:00Z",
        )
    return dict(_FILES)


def test_a_resource_dump_index_is_followed_to_its_packages(tmp_path: Path) -> None:
    """Issue 10.8: a sitemapindex of Resource Dumps — its parts are dumps, not packages."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        files = _two_dumps(src)
        src.publish(
            [entry(b, f"/{k}", v) for k, v in files.items()],
            extra_caps=[{"loc": f"{b}/resourcedump.xml", "capability": "resourcedump"}],
        )
        src.docs["/resourcedump.xml"] = sitemapindex(
            "resourcedump",
            [{"loc": f"{b}/rd1.xml"}, {"loc": f"{b}/rd2.xml"}],
            at="2024-01-01T00:00:00Z",
        )
        code, summary = cli_json("sync", b, dest, "--via", "dumps")
        s = _set(summary)
        assert code == 0 and s["via"] == "dumps", summary
        assert tree(dest) == files
        # Only the packages were downloaded, never the dumps' own documents as packages;
        # no resource was fetched on its own.
        assert src.hits.get("/a.txt") is None and src.hits.get("/b.txt") is None


def test_resource_dumps_listed_twice_in_the_capability_list_are_both_used(
    tmp_path: Path,
) -> None:
    """A Source that offers its state as two Resource Dumps, both listed in its Capability
    List (core §9.2: one, a Resource Dump Index when they are many), and no Resource List:
    the second dump's packages were never read, and the copy lacked what they hold while
    `sync` and `audit` said ok. Both are read, as the parts of one index, said once a run."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        files = _two_dumps(src)
        src.capabilities(
            [
                {"loc": f"{b}/rd1.xml", "capability": "resourcedump"},
                {"loc": f"{b}/rd2.xml", "capability": "resourcedump"},
            ]
        )
        code, summary = cli_json("sync", b, dest)
        s = _set(summary)
        assert code == 0 and s["via"] == "dumps", summary
        assert tree(dest) == files
        assert src.hits.get("/b.txt") is None  # from the second dump's package
        warned = [p["message"] for p in s["problems"]]
        assert any("2 documents with capability 'resourcedump'" in m for m in warned), warned
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["in_sync"] == 3, found
        (dest / "c.txt").unlink()
        code, found = cli_json("audit", b, dest)
        assert code == 1 and found["missing"] == 1, found


def test_a_package_whose_digest_differs_is_not_unpacked(tmp_path: Path) -> None:
    """Issue 10.15: the package's hash is checked, not only its length."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        package = _package(b, {"a.txt": b"a"})
        src.files["/p1.zip"] = package
        src.publish(
            [entry(b, "/a.txt", b"a")],
            extra_caps=[{"loc": f"{b}/resourcedump.xml", "capability": "resourcedump"}],
        )
        src.docs["/resourcedump.xml"] = urlset(
            "resourcedump",
            [{"loc": f"{b}/p1.zip", "length": len(package), "md5": md5(b"another package")}],
            at="2024-01-01T00:00:00Z",
        )
        result = cli("sync", b, dest, "--via", "dumps")
        assert result.exit_code == 2
        assert "package md5 is" in result.stderr and "the dump says" in result.stderr
        code, summary = cli_json("sync", b, tmp_path / "auto")
        assert code == 0 and _set(summary)["via"] == "lists", summary
        assert tree(tmp_path / "auto") == {"a.txt": b"a"}
