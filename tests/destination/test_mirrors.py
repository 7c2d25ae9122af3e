"""`rel="duplicate"` mirrors (core §14.2; issue 10.14): when `<loc>` fails, the entry's mirrors
are tried in `pri` order, each verified against the same digest; a mirror serving other bytes
is never taken, and a resource no mirror could give is a failure as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.responses import PlainTextResponse

from tests.destination.helpers import cli_json, entry, hand_source, tree


async def _down(request: Any) -> Any:
    """A `<loc>` that does not answer with the resource."""
    return PlainTextResponse("down", status_code=404)


def _with_links(
    doc: bytes, loc: str, links: list[tuple[str, int]], rel: str = "duplicate"
) -> bytes:
    """Insert `rs:ln rel="duplicate"` (href, pri) links after the `<loc>` of `loc`."""
    tags = "".join(f'<rs:ln rel="{rel}" href="{h}" pri="{p}"/>' for h, p in links)
    return doc.replace(f"<loc>{loc}</loc>".encode(), f"<loc>{loc}</loc>{tags}".encode(), 1)


def test_a_failing_resource_is_fetched_from_its_mirrors_in_pri_order(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base

        src.handlers["/a.txt"] = _down
        src.handlers["/b.txt"] = _down
        src.files["/m1/a.txt"] = b"alpha"  # pri 1: the right bytes
        src.files["/m2/a.txt"] = b"ALPHA"  # pri 2: never asked
        src.files["/m1/b.txt"] = b"not b"  # the only mirror of b.txt lies
        src.publish([entry(b, "/a.txt", b"alpha"), entry(b, "/b.txt", b"bravo")])
        doc = src.docs["/resourcelist.xml"]
        doc = _with_links(doc, f"{b}/a.txt", [(f"{b}/m2/a.txt", 2), (f"{b}/m1/a.txt", 1)])
        doc = _with_links(doc, f"{b}/b.txt", [(f"{b}/m1/b.txt", 1)])
        src.docs["/resourcelist.xml"] = doc
        code, summary = cli_json("sync", b, dest, "--retries", "0")
        s = summary["sets"][0]
        assert code == 1, summary
        assert tree(dest) == {"a.txt": b"alpha"}
        assert s["fetched"] == 1 and s["failed"] == 1, summary
        messages = {p["uri"].rsplit("/", 1)[1]: p["message"] for p in s["problems"]}
        assert "fetched from its mirror" in messages["a.txt"]
        assert "HTTP 404" in messages["b.txt"]
        assert src.hits.get("/m2/a.txt") is None
        assert not (dest / "b.txt").exists()


def test_a_relation_type_in_another_case_is_the_same_relation(tmp_path: Path) -> None:
    """RFC 8288 §2.1.1: registered relation types compare without regard to case, so a
    mirror linked as `rel="Duplicate"` (or ` duplicate`) is a mirror, said once a document;
    read as written it was never tried."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base

        src.handlers["/a.txt"] = _down
        src.files["/m1/a.txt"] = b"alpha"
        src.publish([entry(b, "/a.txt", b"alpha")])
        src.docs["/resourcelist.xml"] = _with_links(
            src.docs["/resourcelist.xml"], f"{b}/a.txt", [(f"{b}/m1/a.txt", 1)], rel="Duplicate"
        )
        code, summary = cli_json("sync", b, dest, "--retries", "0")
        assert code == 0, summary
        assert tree(dest) == {"a.txt": b"alpha"}, summary
        messages = [p["message"] for p in summary["sets"][0]["problems"]]
        assert any("rs:ln rel 'Duplicate' read as 'duplicate'" in m for m in messages), messages
        assert any("fetched from its mirror" in m for m in messages), messages
