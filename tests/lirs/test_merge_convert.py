"""Merging relayed records, and converting LIRS to and from ResourceSync (checked by our
validator and read back by our reader)."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resourcesync.errors import ResourceSyncError
from resourcesync.lirs.codec import Record, read_records
from resourcesync.lirs.convert import LIRS_NS, from_resourcesync, to_resourcesync
from resourcesync.lirs.merge import expiry_cutoff, merge_records, url_key
from resourcesync.model import Change, Document, Resource
from resourcesync.sitemap import open_document, validate, write_document

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "lirs"


def merged(feeds: list[list[Record]], **kw: int | None) -> list[Record]:
    table, _ = merge_records(feeds, **kw)
    with table:
        return list(table.records(min_detected=expiry_cutoff(kw.get("expires"), kw.get("now"))))


# -- merge -----------------------------------------------------------------------------------


def test_url_key_ignores_host_case_not_path_case() -> None:
    assert url_key("HTTP://Example.JP/Diary/") == url_key("http://example.jp/Diary/")
    assert url_key("http://example.jp/Diary/") != url_key("http://example.jp/diary/")
    assert url_key("http://User@EXAMPLE.jp/x") == "http://User@example.jp/x"


def test_larger_last_detected_wins_and_is_inherited() -> None:
    a = [Record(100, 1000, 32400, 0, "http://Example.jp/d/", "old view")]
    b = [Record(200, 2000, 32400, 0, "http://example.JP/d/", "fresh view")]
    c = [Record(300, 1500, 32400, 0, "http://example.jp/d/", "stale")]
    assert merged([a, b, c]) == b  # Last-Detected 2000 kept, not the time of merging


def test_tie_keeps_the_record_held() -> None:
    a = [Record(100, 1000, 0, 0, "http://x/", "first")]
    b = [Record(900, 1000, 0, 0, "http://X/", "second")]
    assert merged([a, b]) == a


def test_within_one_file_the_later_record_wins() -> None:
    feed = [
        Record(100, 5000, 0, 0, "http://x/", "earlier, fresher"),
        Record(200, 1000, 0, 0, "http://x/", "later"),
    ]
    other = [Record(300, 2000, 0, 0, "http://x/", "other feed")]
    assert merged([feed]) == [feed[1]]
    # The later record of the first feed is what is held; the other feed's is fresher than it.
    assert merged([feed, other]) == other


def test_expires_drops_old_observations_relative_to_now() -> None:
    feed = [
        Record(1, 1000, 0, 0, "http://old/"),
        Record(1, 9000, 0, 0, "http://new/"),
        Record(0, 0, 0, 0, "http://error/"),
    ]
    table, stats = merge_records([feed], expires=2000, now=10000)
    with table:
        kept = list(table.records(min_detected=expiry_cutoff(2000, 10000)))
    assert [r.url for r in kept] == ["http://new/"]
    assert (stats.read, stats.written, stats.expired) == (3, 1, 2)
    assert [r.url for r in merged([feed])] == ["http://old/", "http://new/", "http://error/"]


def test_merge_keeps_first_seen_order_and_extensions() -> None:
    a = [
        Record(1, 10, 0, 0, "http://b/", extensions=("x,1", "\\")),
        Record(1, 10, 0, 0, "http://a/"),
    ]
    b = [Record(2, 20, 0, 0, "http://c/"), Record(2, 20, 0, 0, "http://b/", extensions=("y",))]
    assert merged([a, b]) == [b[1], a[1], b[0]]


# -- LIRS → ResourceSync ---------------------------------------------------------------------


CAPS = "http://antenna.example.jp/capabilitylist.xml"


def _validate(path: Path, *, linked: bool = True) -> None:
    report = validate([path])
    if linked:
        assert report.ok, [str(f) for f in report.findings + report.unreadable]
        assert report.warnings == []
    else:
        # Without a Capability List the output has no up link, which core 1.1 §10.1/§12.1
        # make mandatory: an error since issue 13 (it was a warning).
        assert not report.unreadable
        assert [f.rule for f in report.findings] == ["core-up-missing"]


def test_to_changelist_is_valid_chronological_and_spans_the_changes(tmp_path: Path) -> None:
    out = tmp_path / "changelist.xml"
    records = list(read_records(EXAMPLES / "antenna.utf8.lirs"))
    stats = to_resourcesync(records, out, "changelist", capability_list=CAPS)
    assert (stats.records, stats.entries, stats.error_rows, stats.no_time) == (5, 4, 1, 0)
    _validate(out)
    with open_document(out) as doc:
        header = doc.document
        entries = list(doc)
    times = [e.datetime for e in entries]
    assert all(e.change == "updated" for e in entries)
    assert times == sorted(times)
    assert header.from_ == times[0] and header.until == times[-1]
    first = entries[0]
    assert first.loc == "http://hiya.ouchi.to/n/"
    assert first.datetime == datetime(1999, 10, 1, 12, 1, tzinfo=UTC)
    assert first.length == 49383
    assert first.md_extra[f"{{{LIRS_NS}}}title"] == "ただよう記憶"
    assert first.md_extra[f"{{{LIRS_NS}}}detected"] == "1999-10-01T12:30:02Z"


def test_to_resourcelist_is_valid_with_lastmod_and_length(tmp_path: Path) -> None:
    out = tmp_path / "resourcelist.xml"
    records = [
        Record(1008510480, 1008513000, 32400, 2048, "http://a.example.jp/", "A"),
        Record(1008400000, 1008513500, 32400, 0, "http://b.example.jp/", "B"),
        Record(0, 1008513000, 32400, 0, "http://c.example.jp/", "no time"),
        Record(1008000000, 1008000000, 32400, 7, "http://a.example.jp/", "A again, later line"),
    ]
    stats = to_resourcesync(records, out, "resourcelist", capability_list=CAPS)
    assert (stats.entries, stats.no_time, stats.duplicates) == (2, 1, 1)
    _validate(out)
    with open_document(out) as doc:
        assert doc.document.at == datetime.fromtimestamp(1008513500, UTC)
        entries = list(doc)
    assert [(e.loc, e.length) for e in entries] == [
        ("http://a.example.jp/", 7),
        ("http://b.example.jp/", None),
    ]
    assert entries[0].lastmod == datetime.fromtimestamp(1008000000, UTC)


def test_empty_input_gives_a_valid_empty_changelist(tmp_path: Path) -> None:
    out = tmp_path / "cl.xml"
    stats = to_resourcesync([Record(0, 0, 0, 0, "http://down/")], out, "changelist", now=10**9)
    assert stats.entries == 0 and stats.error_rows == 1
    _validate(out, linked=False)


# -- ResourceSync → LIRS ---------------------------------------------------------------------

_field = st.text(
    alphabet=st.one_of(
        st.sampled_from(list(",\\&<>\"' ") + list("日記ソ表①")),
        st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="\ufffe\uffff"),
    ),
    max_size=15,
)
_record = st.builds(
    Record,
    st.integers(1, 4102444800),
    st.integers(0, 4102444800),
    st.integers(-50400, 50400),
    st.integers(0, 10**12),
    st.from_regex(r"http://[a-z]{1,8}\.example\.jp/[a-z0-9~%/]{0,12}", fullmatch=True),
    _field,
    _field,
    _field,
    st.lists(_field, max_size=3).map(tuple),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_record, max_size=12, unique_by=lambda r: url_key(r.url)))
def test_property_lirs_to_resourcelist_and_back(records: list[Record]) -> None:
    xml = io.BytesIO()
    to_resourcesync(records, xml, "resourcelist")
    lirs = io.BytesIO()
    from_resourcesync(xml.getvalue(), lirs)
    assert list(read_records(lirs.getvalue())) == records


def test_changelist_round_trip_through_files(tmp_path: Path) -> None:
    records = list(read_records(EXAMPLES / "antenna.eucjp.lirs"))
    to_resourcesync(records, tmp_path / "cl.xml", "changelist")
    stats = from_resourcesync(tmp_path / "cl.xml", tmp_path / "back.lirs.gz", encoding="euc-jp")
    assert stats.records == 4
    back = list(read_records(tmp_path / "back.lirs.gz"))
    expected = sorted((r for r in records if r.last_modified), key=lambda r: r.last_modified)
    assert back == expected


def test_plain_changelist_last_detected_from_until_and_deletions(tmp_path: Path) -> None:
    t = [datetime(2024, 5, d, tzinfo=UTC) for d in (1, 2, 3, 4)]
    doc = Document(capability="changelist", from_=t[0], until=t[3])
    entries = [
        Resource(loc="http://a.example/", change=Change.CREATED, datetime=t[0], length=5),
        Resource(loc="http://b.example/", change=Change.UPDATED, datetime=t[1]),
        Resource(loc="http://a.example/", change=Change.UPDATED, datetime=t[2], length=6),
        Resource(loc="http://b.example/", change=Change.DELETED, datetime=t[3]),
    ]
    write_document(tmp_path / "cl.xml", doc, entries)
    stats = from_resourcesync(tmp_path / "cl.xml", tmp_path / "out.lirs", tz_offset=32400)
    assert (stats.entries, stats.records, stats.deleted) == (4, 1, 1)
    until = int(t[3].timestamp())
    assert list(read_records(tmp_path / "out.lirs")) == [
        Record(int(t[2].timestamp()), until, 32400, 6, "http://a.example/")
    ]


def test_resourcelist_without_at_uses_now(tmp_path: Path) -> None:
    write_document(
        tmp_path / "rl.xml",
        Document(capability="resourcelist"),
        [Resource(loc="http://a.example/", lastmod=datetime(2020, 1, 1, tzinfo=UTC))],
    )
    from_resourcesync(tmp_path / "rl.xml", tmp_path / "o.lirs", now=1700000000)
    [record] = read_records(tmp_path / "o.lirs")
    assert (record.last_modified, record.last_detected) == (1577836800, 1700000000)


def test_entries_lirs_cannot_carry_are_counted(tmp_path: Path) -> None:
    write_document(
        tmp_path / "rl.xml",
        Document(capability="resourcelist", at=datetime(2024, 1, 1, tzinfo=UTC)),
        [
            Resource(loc="http://old.example/", lastmod=datetime(1960, 1, 1, tzinfo=UTC)),
            Resource(loc="http://ok.example/"),
        ],
    )
    stats = from_resourcesync(tmp_path / "rl.xml", tmp_path / "o.lirs")
    assert (stats.unrepresentable, stats.records) == (1, 1)
    [record] = read_records(tmp_path / "o.lirs")
    assert record.last_modified == 0  # an entry without a time: no update time


def _spec_example(specs_dir: Path, capability: str) -> Path:
    for path in sorted((specs_dir / "examples").rglob("*.xml")):
        try:
            with open_document(path) as doc:
                header = doc.document
                if header.capability == capability and not header.index and any(True for _ in doc):
                    return path
        except ResourceSyncError:
            continue
    pytest.skip(f"no {capability} among the spec examples")


@pytest.mark.parametrize("capability", ["changelist", "resourcelist"])
def test_spec_examples_convert(tmp_path: Path, specs_dir: Path, capability: str) -> None:
    example = _spec_example(specs_dir, capability)
    stats = from_resourcesync(example, tmp_path / "o.lirs")
    assert stats.records > 0
    records = list(read_records(tmp_path / "o.lirs"))
    assert all(r.url.startswith("http") for r in records)
    # And back: a valid document of the same kind.
    to_resourcesync(records, tmp_path / "again.xml", capability)
    _validate(tmp_path / "again.xml", linked=False)


@pytest.mark.parametrize(
    ("text", "tz"),
    [("+32400", 32400), ("-18000", -18000), ("3600", 3600), ("+-5", 7), ("²", 7), ("9" * 5000, 7)],
)
def test_an_entrys_time_zone_offset_is_a_number_or_the_default(text: str, tz: int) -> None:
    """`lirs:tz` as a hostile list may give it: a signed run of ASCII digits within range, else
    the default offset (`+-5` and 5,000 digits were tracebacks from `int`)."""
    from resourcesync.lirs.convert import resource_to_record

    res = Resource(loc="http://a.example/", md_extra={f"{{{LIRS_NS}}}tz": text})
    record = resource_to_record(res, detected=1700000000, tz_offset=7)
    assert record is not None and record.tz_offset == tz
