"""The streaming writer: round trips for every document type, splitting, atomicity, v1.0."""

from __future__ import annotations

import io
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resourcesync.errors import FormatError
from resourcesync.model import Capability, Document, Link, Resource
from resourcesync.sitemap import (
    iter_entries,
    open_document,
    read_document,
    validate,
    write_document,
    write_split,
)
from tests.conftest import needs_specs, spec_example_files
from tests.sitemap.test_rules import EXAMPLE_FLAWS

NS = "urn:example:ext"

xml_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\ufffe\uffff")
    | st.sampled_from(["\t", "\n", "\r", "&", "<", ">", '"', "'", "東", "é"]),
    max_size=20,
)
token = st.from_regex(r"[A-Za-z][A-Za-z0-9._-]{0,8}", fullmatch=True)
times = st.datetimes(
    min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
opt_times = st.none() | times
uris = st.builds(
    lambda host, path: f"http://{host}.example.com/{path}",
    token,
    st.text(alphabet="abcxyz019-._~%/?=&", max_size=15),
)
hashes = st.dictionaries(
    st.sampled_from(["md5", "sha-1", "sha-256", "x-other"]),
    st.from_regex(r"[0-9a-f]{1,16}", fullmatch=True),
    max_size=3,
)
extra = st.dictionaries(
    st.sampled_from(["note", "x-flag", f"{{{NS}}}title", f"{{{NS}}}author"]), xml_text, max_size=3
)
links = st.lists(
    st.builds(
        Link,
        rel=st.sampled_from(["up", "index", "describedby", "duplicate", "contents", "via"]),
        href=uris,
        type=st.none() | st.just("application/xml"),
        length=st.none() | st.integers(0, 10**12),
        hashes=hashes,
        modified=opt_times,
        path=st.none() | st.just("/a/b.txt"),
        pri=st.none() | st.integers(1, 999999),
        encoding=st.none() | st.just("gzip"),
        extra=extra,
    ),
    max_size=2,
)
extensions = st.lists(
    st.sampled_from(
        [
            f'<x:note xmlns:x="{NS}">hello</x:note>',
            f'<x:meta xmlns:x="{NS}" lang="ja"><x:t>東京 &amp; 大阪</x:t></x:meta>',
        ]
    ),
    max_size=2,
)
resources = st.builds(
    Resource,
    loc=uris,
    lastmod=opt_times,
    changefreq=st.none() | st.sampled_from(["daily", "never"]),
    priority=st.none() | st.floats(0, 1),
    hashes=hashes,
    length=st.none() | st.integers(0, 10**15),
    type=st.none() | st.sampled_from(["text/html", "application/json; charset=utf-8"]),
    encoding=st.none() | st.just("gzip"),
    change=st.none() | st.sampled_from(["created", "updated", "deleted"]),
    datetime=opt_times,
    path=st.none() | st.just("/res/1"),
    capability=st.none() | st.sampled_from([c.value for c in Capability]),
    at=opt_times,
    completed=opt_times,
    from_=opt_times,
    until=opt_times,
    links=links,
    md_extra=extra,
    extensions=extensions,
)
documents = st.builds(
    Document,
    capability=st.sampled_from([c.value for c in Capability]),
    index=st.booleans(),
    at=opt_times,
    completed=opt_times,
    from_=opt_times,
    until=opt_times,
    links=links,
    md_extra=extra,
    extensions=extensions,
    namespaces=st.just({"x": NS}),
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(documents, st.lists(resources, max_size=5))
def test_read_of_write_is_identity_for_every_document_type(
    document: Document, entries: list[Resource]
) -> None:
    buf = io.BytesIO()
    assert write_document(buf, document, entries) == len(entries)
    again, read_entries = read_document(buf.getvalue())
    assert again == document
    assert read_entries == entries


@needs_specs
@pytest.mark.parametrize(
    "path",
    [p for p in spec_example_files() if p.name != "resourcesync_ex_9.xml"],
    ids=lambda p: p.name,
)
def test_spec_examples_round_trip(path: Path) -> None:
    document, entries = read_document(path)
    buf = io.BytesIO()
    write_document(buf, document, entries)
    assert read_document(buf.getvalue()) == (document, entries)
    report = validate([buf.getvalue()])
    # Only the examples' own flaws (named in test_rules.EXAMPLE_FLAWS) remain.
    assert {f.rule for f in report.errors} == EXAMPLE_FLAWS.get(path.name, set()), report.errors


def test_version_10_writes_the_change_time_in_lastmod() -> None:
    t = datetime(2013, 1, 2, 13, tzinfo=UTC)
    entry = Resource(loc="http://e.com/a", change="updated", datetime=t, lastmod=t - timedelta(1))
    buf = io.BytesIO()
    write_document(buf, Document(capability="changelist", from_=t), [entry], spec_version="1.0")
    text = buf.getvalue().decode()
    assert "datetime=" not in text
    assert "<lastmod>2013-01-02T13:00:00Z</lastmod>" in text
    _, (back,) = read_document(buf.getvalue())
    assert back.change_time == t


def test_characters_xml_cannot_carry_are_refused_naming_the_entry() -> None:
    with pytest.raises(FormatError, match=r"http://e\.com/a"):
        write_document(
            io.BytesIO(),
            Document(capability="resourcelist"),
            [Resource(loc="http://e.com/a", type="text/\x01plain")],
        )


def test_every_character_xml_can_carry_is_written_and_every_other_refused() -> None:
    """XML 1.0's Char production, code point by code point: what it allows is written (and
    read back), what it does not is refused."""
    allowed = [
        cp
        for cp in range(0x110000)
        if cp in (0x9, 0xA, 0xD)
        or 0x20 <= cp <= 0xD7FF
        or 0xE000 <= cp <= 0xFFFD
        or 0x10000 <= cp <= 0x10FFFF
    ]
    refused = sorted(set(range(0x110000)) - set(allowed))
    assert len(refused) == 0x20 - 3 + 0x800 + 2
    for cp in refused:
        with pytest.raises(FormatError, match="a character XML cannot carry"):
            write_document(
                io.BytesIO(), Document(capability="resourcelist"), [Resource(loc=f"a{chr(cp)}")]
            )
    # Every allowed character in one document (in types: a <loc> is read back stripped).
    text = "".join(map(chr, allowed))
    chunks = [text[i : i + 4096] for i in range(0, len(text), 4096)]
    buf = io.BytesIO()
    entries = [Resource(loc=f"http://e.com/{i}", type=c) for i, c in enumerate(chunks)]
    write_document(buf, Document(capability="resourcelist"), entries)
    _, back = read_document(buf.getvalue())
    # (In attribute values: white space is written as character references, so it comes back.)
    assert "".join(r.type or "" for r in back) == text


def _resources(n: int, start: datetime) -> list[Resource]:
    return [
        Resource(
            loc=f"http://e.com/r/{i}",
            change="updated",
            datetime=start + timedelta(seconds=i),
            hashes={"md5": f"{i:032x}"},
            length=i,
        )
        for i in range(n)
    ]


def test_small_lists_are_one_document_and_large_ones_an_index_over_parts(tmp_path: Path) -> None:
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    up = Link(rel="up", href="http://e.com/capabilitylist.xml")
    doc = Document(capability="resourcelist", at=t0, completed=t0, links=[up])
    url = "http://e.com/resourcelist.xml"
    target = tmp_path / "resourcelist.xml"

    one = write_split(target, url, doc, _resources(10, t0), max_entries=10)
    assert not one.index and one.count == 10
    assert read_document(target)[0] == doc

    many = write_split(target, url, doc, _resources(25, t0), max_entries=10)
    assert many.index and [p.count for p in many.parts] == [10, 10, 5]
    index, parts = read_document(target)
    assert index.index and index.capability == "resourcelist" and index.at == t0
    assert [p.loc for p in parts] == [f"http://e.com/resourcelist-0000{i}.xml" for i in (1, 2, 3)]
    for i in (1, 2, 3):
        part, _ = read_document(tmp_path / f"resourcelist-0000{i}.xml")
        assert part.link("index") is not None and part.link("index").href == url
        assert part.link("up") == up
    assert [r.loc for r in iter_entries(target)] == [r.loc for r in _resources(25, t0)]
    assert not validate([target], follow=True).errors

    # Shrinking again removes the parts that are no longer listed.
    write_split(target, url, doc, _resources(5, t0), max_entries=10)
    assert not (tmp_path / "resourcelist-00001.xml").exists()


def test_change_list_parts_cover_consecutive_intervals(tmp_path: Path) -> None:
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    doc = Document(capability="changelist", from_=t0, until=t0 + timedelta(hours=1))
    result = write_split(
        tmp_path / "changelist.xml",
        "http://e.com/changelist.xml",
        doc,
        _resources(7, t0),
        max_entries=3,
    )
    froms = [p.from_ for p in result.parts]
    untils = [p.until for p in result.parts]
    assert froms[0] == t0 and untils[-1] == doc.until
    assert froms[1:] == untils[:-1]  # no gaps, no overlaps
    for part in result.parts:
        header, entries = read_document(part.path)
        assert (header.from_, header.until) == (part.from_, part.until)
        assert all(part.from_ <= e.datetime <= part.until for e in entries)
    # The parts are written without an up link here (none is given): that is the only error.
    errors = validate([tmp_path / "changelist.xml"], follow=True).errors
    assert {f.rule for f in errors} <= {"core-up-missing"}, errors


def test_byte_limit_splits_too(tmp_path: Path) -> None:
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    result = write_split(
        tmp_path / "rl.xml",
        "http://e.com/rl.xml",
        Document(capability="resourcelist", at=t0),
        _resources(200, t0),
        max_bytes=8192,
    )
    assert result.index
    assert all(p.path.stat().st_size <= 8192 for p in result.parts)
    assert sum(p.count for p in result.parts) == 200


def test_a_failed_write_leaves_the_previous_document_and_no_temporary_files(tmp_path: Path) -> None:
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    target = tmp_path / "resourcelist.xml"
    doc = Document(capability="resourcelist", at=t0)
    write_document(target, doc, _resources(3, t0))
    good = target.read_bytes()

    def failing():  # type: ignore[no-untyped-def]
        yield from _resources(2, t0)
        raise RuntimeError("inventory failed half way")

    with pytest.raises(RuntimeError):
        write_document(target, doc, failing())
    with pytest.raises(RuntimeError):
        write_split(target, "http://e.com/resourcelist.xml", doc, failing(), max_entries=1)
    assert target.read_bytes() == good
    assert sorted(os.listdir(tmp_path)) == ["resourcelist.xml"]


def test_streaming_write_then_read_of_many_entries(tmp_path: Path) -> None:
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    target = tmp_path / "big.xml"
    n = 20_000
    gen = (Resource(loc=f"http://e.com/{i}", lastmod=t0, length=i) for i in range(n))
    assert write_document(target, Document(capability="resourcelist", at=t0), gen) == n
    with open_document(target) as reader:
        assert sum(1 for _ in reader) == n
