"""The one reader: every spec example, any prefix, streaming, and hostile input."""

from __future__ import annotations

import gzip
import io
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from resourcesync.errors import FormatError, ReadError
from resourcesync.sitemap import iter_entries, open_document, read_document
from tests.conftest import needs_specs, spec_example_files

SM = "http://www.sitemaps.org/schemas/sitemap/0.9"
RS = "http://www.openarchives.org/rs/terms/"


def doc(body: str, md: str = 'capability="resourcelist" at="2013-01-03T09:00:00Z"') -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{SM}" xmlns:rs="{RS}">\n'
        f"<rs:md {md}/>\n{body}</urlset>\n"
    ).encode()


@needs_specs
@pytest.mark.parametrize("path", spec_example_files(), ids=lambda p: p.name)
def test_every_spec_example_is_read(path: Path) -> None:
    if path.name == "resourcesync_ex_9.xml":  # an HTML page showing <link rel="resourcesync">
        with pytest.raises(ReadError, match="an HTML page, not a ResourceSync document"):
            read_document(path)
        return
    document, entries = read_document(path)
    assert document.capability
    assert all(e.loc.startswith("http") for e in entries)


def test_header_comes_before_entries_and_fields_are_decoded() -> None:
    data = doc(
        "<url><loc> http://example.com/a </loc><lastmod>2013-01-02</lastmod>"
        "<changefreq>daily</changefreq><priority>0.5</priority>"
        '<rs:md hash="md5:1584abdf8ebdc9802ac0c6a7402c03b6 sha-256:00ff" length="12" '
        'type="text/plain" encoding="gzip" change="updated" datetime="2013-01-02T10:00:00+02:00" '
        'path="/a"/><rs:ln rel="duplicate" href="http://m.example.com/a" pri="1" length="3" '
        'modified="2013-01-01T00:00:00Z" hash="md5:aa"/></url>',
        md='capability="changelist" from="2013-01-01T00:00:00Z" until="2013-01-04T00:00:00Z"',
    )
    with open_document(data) as reader:
        header = reader.document
        assert header.capability == "changelist"
        assert header.from_ == datetime(2013, 1, 1, tzinfo=UTC)
        assert header.until == datetime(2013, 1, 4, tzinfo=UTC)
        (entry,) = list(reader)
    assert entry.loc == "http://example.com/a"
    assert entry.lastmod == datetime(2013, 1, 2, tzinfo=UTC)
    assert entry.changefreq == "daily" and entry.priority == 0.5
    assert entry.hashes == {"md5": "1584abdf8ebdc9802ac0c6a7402c03b6", "sha-256": "00ff"}
    assert (entry.length, entry.type, entry.encoding, entry.change, entry.path) == (
        12,
        "text/plain",
        "gzip",
        "updated",
        "/a",
    )
    assert entry.datetime == datetime(2013, 1, 2, 8, 0, tzinfo=UTC)
    assert entry.change_time == entry.datetime
    (link,) = entry.links
    assert (link.rel, link.href, link.pri, link.length, link.hashes) == (
        "duplicate",
        "http://m.example.com/a",
        1,
        3,
        {"md5": "aa"},
    )


def test_v10_change_time_is_lastmod() -> None:
    data = doc(
        "<url><loc>http://e.com/a</loc><lastmod>2013-01-02T13:00:00Z</lastmod>"
        '<rs:md change="updated"/></url>',
        md='capability="changelist" from="2013-01-02T00:00:00Z"',
    )
    _, (entry,) = read_document(data)
    assert entry.datetime is None
    assert entry.change_time == datetime(2013, 1, 2, 13, tzinfo=UTC)


def test_prefixes_can_be_anything() -> None:
    data = (
        f'<s:urlset xmlns:s="{SM}" xmlns:sync="{RS}"><sync:md capability="resourcelist" '
        'at="2013-01-03T09:00:00Z"/><s:url><s:loc>http://e.com/x</s:loc>'
        '<sync:md length="5"/></s:url></s:urlset>'
    ).encode()
    document, (entry,) = read_document(data)
    assert document.capability == "resourcelist"
    assert entry.length == 5


def test_foreign_elements_and_attributes_are_kept() -> None:
    data = doc(
        '<url xmlns:x="urn:x" x:flag="1"><loc>http://e.com/a</loc>'
        '<x:note lang="en">hi <x:b>there</x:b></x:note><rs:md length="1" x:extra="v" plain="p"/>'
        "</url>"
    )
    _, (entry,) = read_document(data)
    assert entry.attrs == {"{urn:x}flag": "1"}
    assert entry.md_extra == {"{urn:x}extra": "v", "plain": "p"}
    assert entry.extensions == ['<x:note xmlns:x="urn:x" lang="en">hi <x:b>there</x:b></x:note>']


def test_value_problems_raise_with_line_or_go_to_a_handler() -> None:
    data = doc("<url><loc>http://e.com/a</loc>\n<lastmod>yesterday</lastmod></url>")
    # An entry's value: read as not given, said once (as a Destination reads it).
    with open_document(data) as reader:
        assert [e.lastmod for e in reader] == [None]
    assert reader.warnings == [
        "line 5: lastmod: not a W3C datetime: 'yesterday': read as not given, "
        "and so may other values in this document"
    ]
    # The document's own: the document cannot be read.
    bad_at = doc("<url><loc>http://e.com/a</loc></url>", 'capability="resourcelist" at="yesterday"')
    with pytest.raises(FormatError) as info:
        read_document(bad_at)
    assert "rs:md at: not a W3C datetime: 'yesterday'" in str(info.value)
    seen: list[tuple[str, int | None]] = []
    _, entries = read_document(data, on_problem=lambda m, line, e: seen.append((m, line)))
    assert entries[0].lastmod is None
    assert seen and "lastmod" in seen[0][0]


SECRET = "TOP-SECRET-VALUE-42"


@pytest.mark.parametrize(
    "name",
    ["xxe_file", "xxe_parameter", "billion_laughs", "external_dtd", "internal_dtd_only"],
)
def test_doctypes_are_refused_and_nothing_is_loaded(tmp_path: Path, name: str) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    prolog = {
        "xxe_file": f'<!DOCTYPE urlset [<!ENTITY s SYSTEM "file://{secret}">]>',
        "xxe_parameter": f'<!DOCTYPE urlset [<!ENTITY % p SYSTEM "file://{secret}"> %p;]>',
        "billion_laughs": '<!DOCTYPE urlset [<!ENTITY a "aaaaaaaaaa">'
        + "".join(f'<!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">' for i in range(8))
        + "]>",
        "external_dtd": '<!DOCTYPE urlset SYSTEM "http://127.0.0.1:9/evil.dtd">',
        "internal_dtd_only": "<!DOCTYPE urlset []>",
    }[name]
    ref = {"xxe_file": "&s;", "billion_laughs": "&i;"}.get(name, "")
    data = (
        f'<?xml version="1.0"?>\n{prolog}\n<urlset xmlns="{SM}" xmlns:rs="{RS}">'
        f'<rs:md capability="resourcelist" at="2013-01-03T09:00:00Z"/>'
        f"<url><loc>http://e.com/{ref}</loc></url></urlset>"
    ).encode()
    path = tmp_path / "hostile.xml"
    path.write_bytes(data)
    with pytest.raises(ReadError) as info:
        read_document(path)
    message = str(info.value)
    assert "DOCTYPE" in message or "not well-formed" in message
    assert str(path) in message
    assert SECRET not in message


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"", "empty"),
        (b"\x00\xff\xfe garbage \x89PNG\r\n", "not well-formed"),
        (doc("<url><loc>http://e.com/a</loc></url>")[:-30], "not well-formed"),
        (b"<html><body>hello</body></html>", "an HTML page, not a ResourceSync document"),
        # A sign-in page answered 200 for a list: said as such (it was "DOCTYPE declarations
        # are not allowed", which sent people looking for an entity attack).
        (
            b"\n<!DOCTYPE html>\n<html lang=en><head><title>Sign in</title></head></html>",
            "an HTML page, not a ResourceSync document (a sign-in or error page?)",
        ),
        (b'<urlset xmlns="urn:other"/>', "not a sitemap document"),
    ],
    ids=["empty", "binary", "truncated", "html", "sign-in", "wrong-namespace"],
)
def test_broken_input_gives_a_read_error_with_a_location(data: bytes, fragment: str) -> None:
    with pytest.raises(ReadError) as info:
        read_document(data, name="input.xml")
    assert fragment in str(info.value)
    assert str(info.value).startswith("input.xml")


PHP_WARNING = (
    b"<br />\n<b>Warning</b>:  Undefined variable $x in <b>/srv/sitemap.php</b> on line <b>3</b>"
)


@pytest.mark.parametrize(
    "tail",
    [PHP_WARNING, b"<!-- 0.2 s --><div>Generated</div>", b"\x00" * 64, b"</urlset>", b"Gen"],
    ids=["php-warning", "html-footer", "nul-padding", "closed-twice", "text"],
)
@pytest.mark.parametrize("entries", [0, 3, 300])
def test_text_after_the_root_element_is_ignored_with_a_warning(tail: bytes, entries: int) -> None:
    """Text after the root element ended (a PHP warning, a second document, padding): not
    well-formed XML, so the validator's reading stops there; a Destination's reads the whole
    document the root holds and ignores the rest, said once, whether or not any entries came
    and wherever the chunks fall."""
    data = doc("".join(f"<url><loc>http://e.com/{i}</loc></url>\n" for i in range(entries)))
    data += tail + b"\n" + tail
    with open_document(io.BufferedReader(io.BytesIO(data), buffer_size=64)) as reader:
        assert reader.document.capability == "resourcelist"
        assert [r.loc for r in reader] == [f"http://e.com/{i}" for i in range(entries)]
        assert len(reader.warnings) == 1, reader.warnings
        assert "text after the root element (not well-formed XML" in reader.warnings[0]
        assert reader.warnings[0].startswith(f"line {5 + entries}: ")
    problems: list[str] = []
    strict = open_document(data, on_problem=lambda m, line, e: problems.append(m))
    with pytest.raises(ReadError, match="not well-formed XML"), strict as reader:
        list(reader)


def test_a_document_cut_short_stays_unreadable_whatever_follows() -> None:
    """Only what follows a root element that ended is ignored: a document cut short, or with
    junk inside its root, is still not read."""
    whole = doc("".join(f"<url><loc>http://e.com/{i}</loc></url>\n" for i in range(3)))
    inside = whole.replace(b"</url>", b"</url><br>Notice: a & b", 1)
    for data in (whole[:-30] + PHP_WARNING, inside + PHP_WARNING):
        with pytest.raises(ReadError, match="not well-formed XML"):
            read_document(data)
    # Text after the root that looks like more of a list (two lists written into one answer,
    # stray entries) would be resources the copy lacks while the sync said ok: unreadable.
    for tail, shown in [
        (b"<?xml version='1.0'?>\n<urlset><url><loc>http://e.com/9</loc></url>", "<urlset>"),
        (PHP_WARNING + b"\n<sm:url><sm:loc>http://e.com/9</sm:loc></sm:url>", "<sm:url>"),
    ]:
        with pytest.raises(ReadError) as info:
            read_document(io.BufferedReader(io.BytesIO(whole + b"x" * 200 + tail), 64))
        assert f"holds more of a sitemap ({shown}...)" in str(info.value)
    # An element named urlset inside the root is neither an entry nor the document's end.
    nested = doc(f'<url><loc>http://e.com/a</loc></url><urlset xmlns="{SM}"/>\n')
    _, entries = read_document(nested + PHP_WARNING)
    assert [r.loc for r in entries] == ["http://e.com/a"]


def test_gzip_is_detected_and_the_cap_counts_decompressed_bytes() -> None:
    data = doc("".join(f"<url><loc>http://e.com/{i}</loc></url>" for i in range(100)))
    _, entries = read_document(gzip.compress(data))
    assert len(entries) == 100
    bomb = gzip.compress(doc("<!--" + "x" * 20_000_000 + "-->"), compresslevel=9)
    assert len(bomb) < 100_000
    with pytest.raises(ReadError, match="larger than the limit"):
        read_document(bomb, max_bytes=1_000_000)
    with pytest.raises(ReadError, match="larger than the limit"):
        read_document(data, max_bytes=1000)
    with pytest.raises(ReadError, match="gzip"):
        read_document(gzip.compress(data)[:-20])


def test_missing_file_and_directory_are_read_errors(tmp_path: Path) -> None:
    with pytest.raises(ReadError, match="no such file"):
        read_document(tmp_path / "nope.xml")
    with pytest.raises(ReadError, match="directory"):
        read_document(tmp_path)


class _GeneratedList(io.RawIOBase):
    """A Resource List of n entries produced on the fly: no file, no list in memory."""

    def __init__(self, n: int) -> None:
        self._chunks = self._gen(n)
        self._buf = b""

    def _gen(self, n: int) -> Iterator[bytes]:
        yield doc("")[: -len(b"</urlset>\n")]
        batch = []
        for i in range(n):
            batch.append(
                f"<url><loc>http://example.com/r/{i}</loc><lastmod>2013-01-02T13:00:00Z</lastmod>"
                f'<rs:md hash="md5:{i:032x}" length="{i}" type="text/plain"/></url>\n'
            )
            if len(batch) == 1000:
                yield "".join(batch).encode()
                batch = []
        yield ("".join(batch) + "</urlset>\n").encode()

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
        while not self._buf:
            try:
                self._buf = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def test_memory_stays_flat_whatever_the_number_of_entries() -> None:
    def peak(n: int) -> int:
        tracemalloc.start()
        count = 0
        with open_document(io.BufferedReader(_GeneratedList(n))) as reader:
            for _ in reader:
                count += 1
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert count == n
        return top

    small, large = peak(2_000), peak(100_000)
    # 50 times the entries, not 50 times the memory: the reader holds one chunk, not the list.
    assert large < small * 3, (small, large)
    assert large < 20 * 1024 * 1024


def _write(path: Path, body: str, md: str) -> None:
    path.write_bytes(doc(body, md))


def test_index_parts_are_followed_in_order_with_loop_protection(tmp_path: Path) -> None:
    at = 'at="2013-01-03T09:00:00Z"'
    index = (
        f'<?xml version="1.0"?><sitemapindex xmlns="{SM}" xmlns:rs="{RS}">'
        f'<rs:md capability="resourcelist" {at}/>'
        "<sitemap><loc>http://e.com/p1.xml</loc></sitemap>"
        "<sitemap><loc>http://e.com/p2.xml</loc></sitemap></sitemapindex>"
    )
    (tmp_path / "index.xml").write_text(index)
    _write(
        tmp_path / "p1.xml",
        "<url><loc>http://e.com/a</loc></url>",
        f'capability="resourcelist" {at}',
    )
    _write(
        tmp_path / "p2.xml",
        "<url><loc>http://e.com/b</loc></url>",
        f'capability="resourcelist" {at}',
    )
    assert [r.loc for r in iter_entries(tmp_path / "index.xml")] == [
        "http://e.com/a",
        "http://e.com/b",
    ]

    loop = index.replace("http://e.com/p2.xml", "http://e.com/index.xml")
    (tmp_path / "index.xml").write_text(loop)
    with pytest.raises(ReadError, match="a loop"):
        list(iter_entries(tmp_path / "index.xml"))


def test_a_second_loc_in_an_entry_is_read_and_said_once() -> None:
    """A Destination reads the later of two <loc>s (as it merges two rs:md), and says so once
    a document; the validator calls it an error (tests/sitemap/test_rules_within.py)."""
    entry = "<url><loc>http://example.com/a</loc><loc>http://example.com/b</loc></url>"
    data = (
        f'<urlset xmlns="{SM}" xmlns:rs="{RS}"><rs:md capability="resourcelist" '
        f'at="2013-01-03T09:00:00Z"/>{entry}{entry.replace("/b<", "/c<")}</urlset>'
    ).encode()
    with open_document(data) as reader:
        assert [r.loc for r in reader] == ["http://example.com/b", "http://example.com/c"]
        assert len(reader.warnings) == 1
        assert "more than one <loc> in an entry (the later one is read)" in reader.warnings[0]


def test_a_url_nested_in_the_first_entrys_extension_is_part_of_it() -> None:
    """An extension element may hold anything, a `<url>` too: in the first entry, its end came
    before the entry's and was taken for the first entry, its parent for the root ("not a
    sitemap document: the root element is wrap")."""
    nested = '<x:wrap xmlns:x="http://example.org/x"><url><loc>http://example.com/in</loc></url></x:wrap>'
    data = (
        f'<urlset xmlns="{SM}" xmlns:rs="{RS}"><rs:md capability="resourcelist" '
        f'at="2013-01-03T09:00:00Z"/><url><loc>http://example.com/a</loc>{nested}</url>'
        "<url><loc>http://example.com/b</loc></url></urlset>"
    ).encode()
    _, entries = read_document(data)
    assert [r.loc for r in entries] == ["http://example.com/a", "http://example.com/b"]
    assert len(entries[0].extensions) == 1 and "http://example.com/in" in entries[0].extensions[0]


@pytest.mark.parametrize(
    "value",
    [
        "2013-01-03T09:00:00Z",
        "2013-01-03T09:00:00.123456Z",
        "2013-01-03T18:00:00+09:00",
        "2013-01-03",
        "2013-01",
        " 2013-01-03T09:00:00Z ",
        "2013-01-03 09:00:00",
        "2013-01-03T09:00:00",
        "yesterday",
    ],
)
@pytest.mark.parametrize("key", ["from", "until", "at", "completed"])
def test_an_entrys_times_are_read_as_a_documents_are(key: str, value: str) -> None:
    """An index's or an archive's entry's `from`, `until`, `at` and `completed` (read inline,
    the decoder's hot path) take the value, the slack and the warning the same time takes in
    a document's header, whatever its form."""
    field = "from_" if key == "from" else key
    entry = doc(f'<url><loc>http://e.com/a</loc><rs:md {key}="{value}"/></url>')
    header = doc("", f'capability="resourcelist-archive" {key}="{value}"')
    with open_document(entry) as reader:
        (res,) = list(reader)
    try:
        with open_document(header) as head:
            document = head.document
            list(head)
    except FormatError:
        # A document's own time that cannot be read: the document cannot be (an entry's
        # is read as not given, said once).
        assert getattr(res, field) is None and len(reader.warnings) == 1
        return
    assert getattr(res, field) == getattr(document, field)
    assert reader.slack == head.slack
    assert [w.split(": ", 1)[1] for w in reader.warnings] == [
        w.split(": ", 1)[1] for w in head.warnings
    ]
