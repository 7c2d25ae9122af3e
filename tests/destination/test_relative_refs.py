"""Relative references in documents (issue 10.11): a `<loc>` or `href` relative to its document
is resolved against the document's URL — the URL after redirects (RFC 3986 §5.1.3) — never
against the current directory; `sync` reads through it with one warning, `validate` still calls
it an error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.responses import RedirectResponse

from tests.destination.helpers import cli, cli_json, hand_source, md5, tree, urlset


def _rel(path: str, body: bytes) -> dict[str, Any]:
    return {"loc": path, "length": len(body), "md5": md5(body)}


def test_relative_locs_resolve_against_the_document(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)  # a relative loc read against the current directory would land here
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/data/a.txt"] = b"a"
        src.files["/data/sub/b.txt"] = b"b"
        src.files["/moved/c.txt"] = b"c"
        src.docs["/.well-known/resourcesync"] = urlset(
            "description", [{"loc": "/data/capabilitylist.xml", "capability": "capabilitylist"}]
        )
        src.docs["/data/capabilitylist.xml"] = urlset(
            "capabilitylist", [{"loc": "resourcelist.xml", "capability": "resourcelist"}]
        )
        src.docs["/data/resourcelist.xml"] = urlset(
            "resourcelist",
            [_rel("a.txt", b"a"), _rel("sub/b.txt", b"b"), _rel("../moved/c.txt", b"c")],
            at="2024-01-01T00:00:00Z",
        )
        code, summary = cli_json("sync", b + "/", dest, "--map", f"{b}/=" + str(dest))
        assert code == 0, summary
        assert tree(dest) == {"data/a.txt": b"a", "data/sub/b.txt": b"b", "moved/c.txt": b"c"}
        warnings = [p["message"] for p in summary["sets"][0]["problems"]]
        assert any("relative <loc> values read against" in w for w in warnings), warnings

        # Behind a redirect, the base is where the document was found.
        async def moved(request: Any) -> Any:
            return RedirectResponse(f"{b}/moved/resourcelist.xml", 301)

        src.handlers["/old/resourcelist.xml"] = moved
        src.docs["/moved/resourcelist.xml"] = urlset(
            "resourcelist", [_rel("c.txt", b"c")], at="2024-01-01T00:00:00Z"
        )
        other = tmp_path / "other"
        code, summary = cli_json("sync", f"{b}/old/resourcelist.xml", other)
        assert code == 0, summary
        assert tree(other) == {"moved/c.txt": b"c"}
        assert not (tmp_path / "a.txt").exists()

        # The validator reads it as written.
        result = cli("validate", f"{b}/data/resourcelist.xml", "--no-follow")
        assert result.exit_code == 1
        assert "not an absolute URI" in result.stdout + result.stderr
