"""The LIRS codec against real files: every encoding and line-ending style, and hostile input."""

from __future__ import annotations

import gzip
import io
import os
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from resourcesync.errors import FormatError, ReadError, ResourceSyncError
from resourcesync.lirs.codec import (
    MAX_TIME,
    LirsWarning,
    LirsWriter,
    Record,
    detect_encoding,
    escape_field,
    format_record,
    open_lirs,
    parse_record,
    split_fields,
    write_records,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "lirs"

# The record from the LIRS 2.1 text ("データ書式"), with its extension part.
SPEC_LINE = (
    "LIRS,938779260,938781002,32400,49383,http://hiya.ouchi.to/n/,ただよう記憶,ひや,"
    "http://amano.hauN.org/,(etc.etc...),"
)
SPEC_RECORD = Record(
    938779260,
    938781002,
    32400,
    49383,
    "http://hiya.ouchi.to/n/",
    "ただよう記憶",
    "ひや",
    "http://amano.hauN.org/",
    ("(etc.etc...)",),
)

JAPANESE = [
    Record(1008510480, 1008513000, 32400, 0, "http://diary.example.jp/~a/", "日記\\, 改", "山田"),
    Record(1008400000, 1008513000, 32400, 10, "http://example.jp/", "ソ表示の能力", "ﾊﾝｶｸ"),
    Record(938779260, 938781002, 32400, 49383, "http://hiya.ouchi.to/n/", "ただよう記憶", "ひや"),
]


def read_all(source: object, **kw: object) -> tuple[list[Record], list[LirsWarning]]:
    warnings: list[LirsWarning] = []
    with open_lirs(source, on_warning=warnings.append, **kw) as reader:  # type: ignore[arg-type]
        return list(reader), warnings


# -- the record ----------------------------------------------------------------------------


def test_spec_example_record_reads_and_writes_back() -> None:
    assert parse_record(SPEC_LINE) == SPEC_RECORD
    assert format_record(SPEC_RECORD) == SPEC_LINE


def test_escapes_read_any_backslash_pair_as_the_second_character() -> None:
    record = parse_record(r"LIRS,1,2,0,3,http://x/,a\,b\\c\d,\q,\\\,,e\,,")
    assert record.title == "a,b\\cd"
    assert record.author == "q"
    assert record.source_url == "\\,"
    assert record.extensions == ("e,",)


def test_writer_escapes_backslash_and_comma_and_drops_line_breaks() -> None:
    assert escape_field("a\\b,c") == "a\\\\b\\,c"
    assert escape_field("one\r\ntwo\nthree\rfour") == "onetwothreefour"
    line = format_record(Record(1, 2, 0, 0, "http://x/", "t,1\\", "a\nb", "", ("x,y", "")))
    assert line == "LIRS,1,2,0,0,http://x/,t\\,1\\\\,ab,,x\\,y,,"
    assert parse_record(line).extensions == ("x,y", "")


def test_missing_final_comma_is_accepted() -> None:
    # tama dropped the final comma.
    assert parse_record("LIRS,1,2,32400,0,http://x/,t,a,http://s/") == Record(
        1, 2, 32400, 0, "http://x/", "t", "a", "http://s/"
    )
    assert parse_record("LIRS,1,2,32400,0,http://x/,t,a,http://s/,ext").extensions == ("ext",)


def test_signed_time_zone_offsets() -> None:
    assert parse_record("LIRS,1,2,+32400,0,http://x/,,,,").tz_offset == 32400
    assert parse_record("LIRS,1,2,-18000,0,http://x/,,,,").tz_offset == -18000


@pytest.mark.parametrize(
    "line, message",
    [
        ("LIRS,abc,2,0,0,http://x/,,,,", "Last-Modified is not a number"),
        ("LIRS,1,-2,0,0,http://x/,,,,", "Last-Detected is not a number"),
        ("LIRS,1,2,0,١٢,http://x/,,,,", "Content-Length is not a number"),
        ("LIRS,1,2,0,1_000,http://x/,,,,", "Content-Length is not a number"),
        ("LIRS, 1,2,0,0,http://x/,,,,", "Last-Modified is not a number"),
        ("LIRS,,2,0,0,http://x/,,,,", "Last-Modified is not a number"),
        ("LIRS,1,2,0x10,0,http://x/,,,,", "time-zone offset is not a number"),
        ("LIRS,1,2,99999999,0,http://x/,,,,", "time-zone offset out of range"),
        (f"LIRS,{MAX_TIME + 1},2,0,0,http://x/,,,,", "Last-Modified out of range"),
        ("LIRS,1,2,0," + "9" * 40 + ",http://x/,,,,", "Content-Length out of range"),
        ("LIRS,1,2,0,0,not a url,,,,", "URL field is not a URL"),
        ("LIRS,1,2,0,0,http://x/,,", "fields after LIRS"),
        ("LIRZ,1,2,0,0,http://x/,,,,", "not a LIRS record"),
        ("LIRS,1,2,0,0,http://x/,t\x01,,,", "control character"),
    ],
)
def test_invalid_records_are_refused_with_a_reason(line: str, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        parse_record(line)


def test_split_fields_keeps_a_dangling_backslash() -> None:
    assert split_fields("a,b\\") == ["a", "b\\"]
    assert split_fields("a\\,b,") == ["a,b", ""]


# -- files: encodings and line endings -------------------------------------------------------

ENCODINGS = [
    ("utf-8", "utf-8", b""),
    ("utf-8-bom", "utf-8", b"\xef\xbb\xbf"),
    ("euc_jp", "euc-jp", b""),
    ("cp932", "shift_jis", b""),
]
NEWLINES = [("lf", "\n"), ("crlf", "\r\n"), ("cr", "\r")]


@pytest.mark.parametrize("codec, expected, bom", ENCODINGS, ids=[e[0] for e in ENCODINGS])
@pytest.mark.parametrize("newline", [n for _, n in NEWLINES], ids=[n for n, _ in NEWLINES])
@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
def test_files_in_every_encoding_and_line_ending(
    tmp_path: Path, codec: str, expected: str, bom: bytes, newline: str, compressed: bool
) -> None:
    lines = ["# comment line", ""] + [format_record(r) for r in JAPANESE] + [""]
    data = bom + newline.join(lines).encode("utf-8" if codec.startswith("utf") else codec)
    if compressed:
        data = gzip.compress(data)
    # The name says nothing: gzip is found by its magic bytes.
    path = tmp_path / "feed.lirs"
    path.write_bytes(data)
    warnings: list[LirsWarning] = []
    with open_lirs(path, on_warning=warnings.append) as reader:
        records = list(reader)
        assert reader.encoding == expected
        assert reader.compressed == compressed
    assert records == JAPANESE
    assert warnings == []


def test_the_example_files_read_the_same(tmp_path: Path) -> None:
    utf8, w1 = read_all(EXAMPLES / "antenna.utf8.lirs")
    euc, w2 = read_all(EXAMPLES / "antenna.eucjp.lirs")
    assert utf8 == euc
    assert len(utf8) == 5 and not w1 and not w2
    assert utf8[1].title == "山田の日記, 改"
    assert utf8[1].extensions == ("http://diary.example.jp/~yamada/index.html",)
    assert utf8[2].title == "C:\\Windows と戯れる"
    assert utf8[3].is_error


def test_encoding_is_detected_past_a_long_ascii_start(tmp_path: Path) -> None:
    ascii_part = [
        Record(i + 1, i + 2, 0, 0, f"http://example.com/{i}/", "plain") for i in range(20000)
    ]
    path = tmp_path / "late.lirs"
    write_records(path, [*ascii_part, *JAPANESE], encoding="euc-jp")
    assert os.path.getsize(path) > 1 << 20
    records, warnings = read_all(path)
    assert records[-3:] == JAPANESE and not warnings


def test_encoding_override(tmp_path: Path) -> None:
    data = "\n".join(format_record(r) for r in JAPANESE).encode("euc_jp")
    records, _ = read_all(data, encoding="EUC-JP")
    assert records == JAPANESE
    # Forced to the wrong one, the Japanese lines are bad records, named by line.
    with pytest.raises(ReadError, match="no valid record"):
        read_all(data, encoding="utf-8")
    with pytest.raises(ReadError, match="unknown encoding"):
        read_all(data, encoding="klingon")


def test_a_line_in_another_encoding_is_read_with_a_warning() -> None:
    data = (format_record(JAPANESE[0]) + "\n").encode("utf-8") + (
        format_record(JAPANESE[2]) + "\n"
    ).encode("euc_jp")
    records, warnings = read_all(data)
    assert records == [JAPANESE[0], JAPANESE[2]]
    assert [(w.line, w.message) for w in warnings] == [(2, "line is in euc-jp, not utf-8")]
    with pytest.raises(FormatError, match=r"<bytes>:2: not valid utf-8 text"):
        read_all(data, strict=True)


def test_detect_encoding_prefers_what_reads_as_japanese() -> None:
    text = "更新時刻情報受け渡しデータ仕様、ただよう記憶"
    assert detect_encoding(text.encode("euc_jp")) == "euc-jp"
    assert detect_encoding(text.encode("cp932")) == "shift_jis"
    assert detect_encoding(text.encode("utf-8")) == "utf-8"
    # Vendor characters (NEC row 13) in both Japanese encodings.
    assert detect_encoding("①の日記".encode("cp932")) == "shift_jis"
    assert detect_encoding("①の日記".encode("euc_jis_2004")) == "euc-jp"


def test_line_numbers_across_chunk_boundaries_and_split_crlf() -> None:
    class Trickle(io.RawIOBase):
        """Gives 7 bytes at a time, so CR and LF of one line ending arrive apart."""

        def __init__(self, data: bytes) -> None:
            self.data = data

        def readable(self) -> bool:
            return True

        def read(self, size: int = -1) -> bytes:
            out, self.data = self.data[:7], self.data[7:]
            return out

    lines = [format_record(r) for r in JAPANESE] + ["garbage", format_record(JAPANESE[0])]
    data = "\r\n".join(lines).encode("utf-8")
    records, warnings = read_all(Trickle(data))
    assert records == [*JAPANESE, JAPANESE[0]]
    assert [w.line for w in warnings] == [4]


# -- lenient and strict ----------------------------------------------------------------------


def test_lenient_skips_bad_records_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "mixed.lirs"
    path.write_text(
        "LIRS,1,2,0,0,http://a/,,,,\nLIRS,x,2,0,0,http://b/,,,,\n\n# note\nLIRS,3,4,0,0,http://c/,,,,\n"
    )
    records, warnings = read_all(path)
    assert [r.url for r in records] == ["http://a/", "http://c/"]
    assert [str(w) for w in warnings] == [
        f"{path}:2: Last-Modified is not a number: 'x'; record skipped"
    ]
    with pytest.raises(FormatError) as info:
        read_all(path, strict=True)
    assert str(info.value) == f"{path}:2: Last-Modified is not a number: 'x'"


def test_wdb_seven_fields_lenient_with_warning_strict_refused() -> None:
    data = b"LIRS,1008510480,1008513000,2048,http://wdb.example.jp/,WDB,author,http://src/,\n"
    records, warnings = read_all(data)
    assert records == [
        Record(
            1008510480,
            1008513000,
            32400,
            2048,
            "http://wdb.example.jp/",
            "WDB",
            "author",
            "http://src/",
        )
    ]
    assert "WDB 7-field record" in warnings[0].message
    with pytest.raises(FormatError, match="WDB 7-field"):
        read_all(data, strict=True)


def test_eight_fields_with_empty_source_and_no_final_comma() -> None:
    records, warnings = read_all(b"LIRS,1,2,32400,0,http://x/,t,a,\n")
    assert records == [Record(1, 2, 32400, 0, "http://x/", "t", "a", "")]
    assert not warnings


# -- hostile input ---------------------------------------------------------------------------


def test_binary_input_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "image.lirs"
    path.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(ReadError, match="binary data") as info:
        read_all(path)
    assert info.value.source == str(path)


def test_utf16_is_refused() -> None:
    with pytest.raises(ReadError, match="UTF-16"):
        read_all(SPEC_LINE.encode("utf-16"))


def test_corrupt_gzip_is_a_read_error() -> None:
    data = gzip.compress(SPEC_LINE.encode() * 1000)
    with pytest.raises(ReadError, match=r"<bytes>"):
        read_all(data[:60])
    with pytest.raises(ReadError):
        read_all(data[:10] + b"\x00" * 50 + data[60:])


def test_html_is_not_a_lirs_file() -> None:
    with pytest.raises(ReadError, match=r"<bytes>:1: not a LIRS file: no valid record"):
        read_all(b"<!DOCTYPE html>\n<html><body>Not Found</body></html>\n")


def test_enormous_line_is_skipped_without_holding_it(tmp_path: Path) -> None:
    path = tmp_path / "huge.lirs"
    with open(path, "wb") as f:
        f.write(b"LIRS,1,2,0,0,http://a/,,,,\n")
        f.write(b"LIRS,1,2,0,0,http://b/," + b"x" * (24 << 20) + b",,,\r\n")
        f.write(b"LIRS,3,4,0,0,http://c/,,,,\n")
        f.write(b"LIRS,5,6,0,0,http://d/," + b"y" * (3 << 20))
    records, warnings = read_all(path)
    assert [r.url for r in records] == ["http://a/", "http://c/"]
    assert [(w.line, "longer than" in w.message) for w in warnings] == [(2, True), (4, True)]
    with pytest.raises(FormatError, match=r"huge.lirs:2: line longer"):
        read_all(path, strict=True)


def test_empty_and_comment_only_files_have_no_records() -> None:
    assert read_all(b"") == ([], [])
    assert read_all(b"# nothing yet\r\n\r\n") == ([], [])


def test_missing_file_is_a_read_error(tmp_path: Path) -> None:
    with pytest.raises(ReadError, match="No such file") as info:
        read_all(tmp_path / "absent.lirs")
    assert info.value.source == str(tmp_path / "absent.lirs")


# -- writing -----------------------------------------------------------------------------------


def test_write_gzip_by_suffix_and_euc_jp(tmp_path: Path) -> None:
    path = tmp_path / "out.lirs.gz"
    stats = write_records(path, JAPANESE, encoding="euc-jp", newline="\r\n")
    assert stats.records == 3
    raw = gzip.decompress(path.read_bytes())
    assert raw.endswith(b",\r\n")
    assert raw.decode("euc_jp").splitlines()[0] == format_record(JAPANESE[0])
    assert read_all(path)[0] == JAPANESE


def test_euc_jp_output_replaces_what_it_cannot_hold(tmp_path: Path) -> None:
    path = tmp_path / "out.lirs"
    records = [Record(1, 2, 0, 0, "http://x/", "絵文字😀と①", "")]
    stats = write_records(path, records, encoding="euc-jp")
    assert stats.replaced == 1
    assert read_all(path)[0][0].title == "絵文字?と①"


def test_failed_write_leaves_the_old_file_in_place(tmp_path: Path) -> None:
    path = tmp_path / "antenna.lirs"
    write_records(path, JAPANESE)
    before = path.read_bytes()

    def records() -> object:
        yield JAPANESE[0]
        raise ReadError("feed broke", source="feed")

    with pytest.raises(ReadError):
        write_records(path, records())  # type: ignore[arg-type]
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["antenna.lirs"]


@pytest.mark.parametrize("name", ["antenna.lirs", "antenna.lirs.gz"])
def test_the_same_records_again_leave_the_file_as_it_was(tmp_path: Path, name: str) -> None:
    # An antenna polls a LIRS file by its Last-Modified: written again with the same records,
    # the file (and its time) stays; other records replace it.
    path = tmp_path / name
    write_records(path, JAPANESE)
    os.utime(path, (1_000_000_000, 1_000_000_000))
    before = path.stat()
    write_records(path, JAPANESE)
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    write_records(path, JAPANESE[:1])
    assert path.stat().st_mtime_ns != before.st_mtime_ns
    assert read_all(path)[0] == JAPANESE[:1]
    assert sorted(os.listdir(tmp_path)) == [name]


def test_writer_refuses_what_readers_would_refuse(tmp_path: Path) -> None:
    for bad in (
        Record(-1, 2, 0, 0, "http://x/"),
        Record(1, 2, 0, -5, "http://x/"),
        Record(1, 2, 0, 0, "no url"),
        Record(1, 2, 100000, 0, "http://x/"),
    ):
        with pytest.raises(FormatError):
            format_record(bad)
    with pytest.raises(ResourceSyncError, match="cannot write"):
        write_records(tmp_path / "no" / "such" / "dir.lirs", JAPANESE)


def test_writer_to_a_stream() -> None:
    out = io.BytesIO()
    with LirsWriter(out) as writer:
        writer.write(SPEC_RECORD)
    assert out.getvalue() == (SPEC_LINE + "\n").encode("utf-8")


# -- property: parse(write(records)) == records ------------------------------------------------

_text = st.text(
    alphabet=st.one_of(
        st.sampled_from(list(",\\\\,#\t ") + list("あいうソ表能予ｱｲ日記漢字①～")),
        st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="\ufffe\uffff"),
    ),
    max_size=30,
)
_url = st.builds(
    lambda host, path: f"http://{host}.example.jp/{path}",
    st.from_regex(r"[a-zA-Z0-9]{1,10}", fullmatch=True),
    st.text(
        alphabet=st.characters(
            blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp"),
            blacklist_characters="\ufffe\uffff\x85\xa0\u1680\u180e",
        ),
        max_size=20,
    ).filter(lambda s: not any(c.isspace() for c in s)),
)
_records = st.builds(
    Record,
    st.integers(0, MAX_TIME),
    st.integers(0, MAX_TIME),
    st.integers(-86400, 86400),
    st.integers(0, 2**63 - 1),
    _url,
    _text,
    _text,
    _text,
    st.lists(_text, max_size=4).map(tuple),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_records, max_size=20), st.sampled_from(["utf-8", "euc-jp", "shift_jis"]))
@example(  # a line Shift_JIS (cp932) cannot hold whole; Shift_JIS-2004 reads "~" as "‾"
    [Record(0, 0, 0, 0, "http://0.example.jp/", "", "", "~·", ())], "shift_jis"
)
def test_property_parse_of_write_is_identity(records: list[Record], encoding: str) -> None:
    out = io.BytesIO()
    stats = write_records(out, records, encoding=encoding)
    if stats.replaced:
        return  # the encoding could not hold some character; covered by the UTF-8 runs
    back, warnings = read_all(out.getvalue(), encoding=encoding)
    assert back == records
    assert warnings == []


@settings(max_examples=200, deadline=None)
@given(st.lists(_records, min_size=1, max_size=20))
def test_property_detected_utf8_round_trip(records: list[Record]) -> None:
    out = io.BytesIO()
    write_records(out, records, compress=True)
    back, warnings = read_all(out.getvalue())
    assert back == records and warnings == []


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40))
def test_property_line_breaks_and_controls_are_removed_not_misread(title: str) -> None:
    record = Record(1, 2, 0, 0, "http://x/", title)
    back = parse_record(format_record(record))
    assert back.title == escape_field(title).replace("\\\\", "\x00").replace("\\", "").replace(
        "\x00", "\\"
    )
    assert "\n" not in back.title and "\r" not in back.title
