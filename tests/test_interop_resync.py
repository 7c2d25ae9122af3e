"""Interoperability with the reference implementation, resync 2.0.1 from PyPI."""

from __future__ import annotations

import io
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from resync.change_list import ChangeList
from resync.resource import Resource as ResyncResource
from resync.resource_list import ResourceList
from resync.sitemap import Sitemap

from resourcesync.model import Document, Link, Resource
from resourcesync.sitemap import read_document, validate, write_document, write_split

T0 = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


def _ours(n: int) -> list[Resource]:
    return [
        Resource(
            loc=f"http://example.com/res/{i}",
            lastmod=T0 + timedelta(minutes=i),
            hashes={"md5": f"{i:032x}", "sha-256": f"{i:064x}"},
            length=100 + i,
            type="text/plain",
        )
        for i in range(n)
    ]


def test_resync_reads_our_resource_list() -> None:
    buf = io.BytesIO()
    doc = Document(
        capability="resourcelist",
        at=T0,
        completed=T0 + timedelta(seconds=5),
        links=[Link(rel="up", href="http://example.com/capabilitylist.xml")],
    )
    write_document(buf, doc, _ours(5))
    buf.seek(0)
    parsed = Sitemap().parse_xml(fh=buf, capability="resourcelist")
    assert parsed.md["capability"] == "resourcelist"
    assert parsed.md["md_at"] == "2024-05-06T07:08:09Z"
    got = sorted(parsed, key=lambda r: r.uri)
    want = sorted(_ours(5), key=lambda r: r.loc)
    assert [r.uri for r in got] == [r.loc for r in want]
    for theirs, ours in zip(got, want, strict=True):
        assert theirs.md5 == ours.hashes["md5"]
        assert theirs.sha256 == ours.hashes["sha-256"]
        assert theirs.length == ours.length
        assert theirs.mime_type == ours.type
        assert theirs.timestamp == ours.lastmod.timestamp()


def test_resync_reads_our_change_list_with_change_datetimes() -> None:
    buf = io.BytesIO()
    entries = [
        Resource(loc="http://example.com/a", change="created", datetime=T0),
        Resource(loc="http://example.com/b", change="updated", datetime=T0 + timedelta(1)),
        Resource(loc="http://example.com/a", change="deleted", datetime=T0 + timedelta(2)),
    ]
    write_document(buf, Document(capability="changelist", from_=T0), entries)
    buf.seek(0)
    parsed = Sitemap().parse_xml(fh=buf, capability="changelist")
    assert [(r.uri, r.change) for r in parsed] == [(e.loc, e.change) for e in entries]
    assert [r.ts_datetime for r in parsed] == [e.datetime.timestamp() for e in entries]


def test_we_read_and_validate_what_resync_writes(tmp_path: Path) -> None:
    rl = ResourceList()
    rl.md_at = "2024-05-06T07:08:09Z"
    rl.up = "http://example.com/capabilitylist.xml"
    for i in range(3):
        rl.add(
            ResyncResource(
                uri=f"http://example.com/r{i}",
                lastmod=f"2024-05-0{i + 1}T00:00:00Z",
                length=i,
                md5=f"{i:032x}",
            )
        )
    path = tmp_path / "resourcelist.xml"
    path.write_text(rl.as_xml())
    doc, entries = read_document(path)
    assert doc.capability == "resourcelist" and doc.at == T0
    assert [e.loc for e in entries] == [f"http://example.com/r{i}" for i in range(3)]
    assert entries[1].hashes == {"md5": f"{1:032x}"}
    assert validate([path]).ok

    cl = ChangeList()
    cl.md_from = "2024-05-06T00:00:00Z"
    cl.up = "http://example.com/capabilitylist.xml"  # mandatory (core 1.1 §12.1)
    cl.add(
        ResyncResource(
            uri="http://example.com/x", change="updated", datetime="2024-05-06T10:00:00Z"
        )
    )
    path = tmp_path / "changelist.xml"
    path.write_text(cl.as_xml())
    doc, (entry,) = read_document(path)
    assert entry.change == "updated"
    assert entry.change_time == datetime(2024, 5, 6, 10, tzinfo=UTC)
    assert validate([path]).ok


def test_resync_sync_parses_our_split_list_index(tmp_path: Path) -> None:
    target = tmp_path / "resourcelist.xml"
    result = write_split(
        target,
        (tmp_path / "resourcelist.xml").as_uri(),
        Document(capability="resourcelist", at=T0),
        _ours(25),
        max_entries=10,
    )
    assert result.index
    out = subprocess.run(
        [str(Path(sys.executable).parent / "resync-sync"), "--parse", "--sitemap", str(target)],
        capture_output=True,
        text=True,
        check=True,
    )
    # resync reads the index itself (it lists the three parts) without following it.
    assert "resourcelist document with 3 entries" in out.stdout, out.stdout
    part = subprocess.run(
        [
            str(Path(sys.executable).parent / "resync-sync"),
            "--parse",
            "--sitemap",
            str(result.parts[0].path),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "with 10 entries" in part.stdout, part.stdout
