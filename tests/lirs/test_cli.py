"""`resourcesync lirs …` and `resourcesync antenna` as a user runs them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from click.testing import CliRunner

from resourcesync.cli.lirs import antenna, lirs
from resourcesync.lirs.codec import Record, format_record, read_records
from resourcesync.sitemap import validate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "lirs"


def run(*args: object, input: bytes | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(lirs, [str(a) for a in args], input=input)
    return result.exit_code, result.stdout, result.stderr


def test_cat_json_lines(tmp_path: Path) -> None:
    code, out, err = run("cat", EXAMPLES / "antenna.eucjp.lirs", "--json")
    assert code == 0 and err == ""
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 5
    assert rows[1] == {
        "last_modified": 1008510480,
        "last_detected": 1008513000,
        "tz_offset": 32400,
        "content_length": 0,
        "url": "http://diary.example.jp/~yamada/",
        "title": "山田の日記, 改",
        "author": "山田",
        "source_url": "http://antenna.example.jp/",
        "extensions": ["http://diary.example.jp/~yamada/index.html"],
    }


def test_cat_table() -> None:
    code, out, _ = run("cat", EXAMPLES / "antenna.utf8.lirs")
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith("1999-10-01T12:01:00Z  1999-10-01T12:30:02Z")
    assert "http://hiya.ouchi.to/n/  ただよう記憶" in first


def test_cat_lenient_warns_strict_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "bad.lirs"
    path.write_bytes(b"LIRS,1,2,0,0,http://a/,,,,\nLIRS,1e9,2,0,0,http://b/,,,,\n")
    code, out, err = run("cat", path, "--json")
    assert code == 0 and len(out.splitlines()) == 1
    assert err == (
        f"resourcesync: warning: {path}:2: Last-Modified is not a number: '1e9'; record skipped\n"
    )
    code, out, err = run("cat", path, "--strict")
    assert code == 1
    assert err == f"resourcesync: {path}:2: Last-Modified is not a number: '1e9'\n"


def test_cat_unreadable_input_is_one_line_exit_2(tmp_path: Path) -> None:
    code, _, err = run("cat", tmp_path / "missing.lirs")
    assert code == 2 and err.count("\n") == 1 and "missing.lirs" in err
    binary = tmp_path / "x.lirs"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    code, _, err = run("cat", binary)
    assert (code, err) == (2, f"resourcesync: {binary}: binary data, not a LIRS file\n")
    code, _, err = run("cat", EXAMPLES / "antenna.utf8.lirs", "--encoding", "nope")
    assert code == 2 and "unknown encoding" in err


def test_write_from_json_lines_round_trips_with_cat(tmp_path: Path) -> None:
    code, out, _ = run("cat", EXAMPLES / "antenna.utf8.lirs", "--json")
    jsonl = tmp_path / "records.jsonl"
    jsonl.write_text(out + '{"url": "not a url"}\n', encoding="utf-8")
    target = tmp_path / "out.lirs.gz"
    code, out, err = run("write", jsonl, "-o", target, "--out-encoding", "euc-jp", "--json")
    assert code == 0, err
    assert f"{jsonl}:6: not a URL" in err
    summary = json.loads(out)
    assert summary["records"] == 5 and summary["input_format"] == "jsonl"
    assert list(read_records(target)) == list(read_records(EXAMPLES / "antenna.utf8.lirs"))


def test_write_re_encodes_lirs_and_never_leaves_a_partial_file(tmp_path: Path) -> None:
    target = tmp_path / "out.lirs"
    code, _, _ = run("write", EXAMPLES / "antenna.eucjp.lirs", "-o", target, "--crlf")
    assert code == 0
    good = target.read_bytes()
    assert good.count(b",\r\n") == 5
    bad = tmp_path / "bad.lirs"
    bad.write_bytes(good + b"LIRS,x,2,0,0,http://b/,,,,\r\n")
    code, _, err = run("write", bad, "-o", target, "--strict")
    assert code == 1 and f"{bad}:6:" in err
    assert target.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.lirs", "out.lirs"]


def test_merge_command(tmp_path: Path) -> None:
    a = tmp_path / "a.lirs"
    b = tmp_path / "b.lirs.gz"
    a.write_text(
        format_record(Record(100, 1000, 32400, 0, "http://Site.jp/d/", "from a"))
        + "\n"
        + format_record(Record(100, 10, 32400, 0, "http://old.jp/", "old"))
        + "\n"
    )
    b.write_bytes(
        gzip.compress(
            (
                format_record(Record(200, 2000, 32400, 0, "http://site.JP/d/", "from b")) + "\n"
            ).encode("euc_jp")
        )
    )
    out = tmp_path / "merged.lirs"
    code, stdout, err = run(
        "merge", a, b, "-o", out, "--expires", "5000", "--now", "6000", "--json"
    )
    assert code == 0, err
    assert json.loads(stdout) == {
        "inputs": [str(a), str(b)],
        "output": str(out),
        "read": 3,
        "written": 1,
        "expired": 1,
        "duplicates": 1,
        "warnings": 0,
    }
    assert list(read_records(out)) == [Record(200, 2000, 32400, 0, "http://site.JP/d/", "from b")]


def test_to_and_from_resourcesync_commands(tmp_path: Path) -> None:
    cl = tmp_path / "changelist.xml"
    code, out, err = run(
        "to-resourcesync",
        EXAMPLES / "antenna.eucjp.lirs",
        "--capability",
        "changelist",
        "--capability-list",
        "http://antenna.example.jp/capabilitylist.xml",
        "-o",
        cl,
        "--json",
    )
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["entries"], summary["error_rows"]) == (4, 1)
    assert validate([cl]).ok
    back = tmp_path / "back.lirs.gz"
    code, out, err = run("from-resourcesync", cl, "-o", back, "--json")
    assert code == 0, err
    assert json.loads(out)["records"] == 4
    assert gzip.decompress(back.read_bytes()).startswith(b"LIRS,")
    code, _, err = run("to-resourcesync", EXAMPLES / "antenna.utf8.lirs", "-o", tmp_path / "r.xml")
    assert code == 0
    assert "left out 1 error rows (0,0) and 0 records without a Last-Modified" in err


def test_from_resourcesync_of_a_non_document_fails_cleanly(tmp_path: Path) -> None:
    target = tmp_path / "out.lirs"
    target.write_text("keep me")
    code, _, err = run("from-resourcesync", EXAMPLES / "antenna.utf8.lirs", "-o", target)
    assert code == 2 and err.startswith("resourcesync: ") and err.count("\n") == 1
    assert target.read_text() == "keep me"


def test_antenna_command_with_a_bad_list_names_the_line(tmp_path: Path) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.1:9/ok\nnot-a-url\n")
    result = CliRunner().invoke(antenna, [str(urls), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert result.stderr == f"resourcesync: {urls}:2: not an http(s) URL: 'not-a-url'\n"


def test_antenna_command_one_round_json(tmp_path: Path) -> None:
    # Port 9 (discard) on loopback: nothing listens, the check fails fast and is reported.
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.1:9/ 閉じたサイト\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        antenna, [str(urls), "--out", str(out), "--timeout", "2", "--delay", "0", "--json"]
    )
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["checked"], summary["failed"]) == (1, 1)
    [record] = read_records(out / "antenna.lirs.gz")
    assert record.is_error and record.title == "閉じたサイト"
    assert {p.name for p in out.iterdir()} >= {
        "antenna.lirs.gz",
        "resourcelist.xml",
        "changelist.xml",
        "index.html",
    }


def test_antenna_refuses_a_base_url_its_documents_could_not_name_things_under(
    tmp_path: Path,
) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.1:9/ok\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        antenna, [str(urls), "--out", str(out), "--base-url", "http://h/#x"]
    )
    assert result.exit_code == 2
    assert "'http://h/#x' has a query or a fragment" in result.stderr
    assert not out.exists()
