"""The `resourcesync validate` and `resourcesync cat` commands, as a user meets them: exit codes,
what goes to stdout and stderr, JSON shapes, following a tree of documents, hostile inputs.

Most tests go through click's CliRunner; a few run the installed console script in a real
subprocess (a real pipe, a real process exit).
"""

from __future__ import annotations

import gzip
import itertools
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from resourcesync.cli import main

SM = "http://www.sitemaps.org/schemas/sitemap/0.9"
RS = "http://www.openarchives.org/rs/terms/"
SITE = "http://example.com"
SCRIPT = Path(sys.executable).parent / "resourcesync"


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def script(*args: str | Path, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(SCRIPT), *(str(a) for a in args)],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


def urlset(md: str, *body: str, index: bool = False) -> str:
    root = "sitemapindex" if index else "urlset"
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', f'<{root} xmlns="{SM}" xmlns:rs="{RS}">']
    lines.append(f"<rs:md {md}/>")
    lines.extend(body)
    lines.append(f"</{root}>")
    return "\n".join(lines) + "\n"


UP = f'<rs:ln rel="up" href="{SITE}/dataset1/capabilitylist.xml"/>'
RESOURCE_LIST = urlset(
    'capability="resourcelist" at="2013-01-03T09:00:00Z" completed="2013-01-03T09:01:00Z"',
    UP,
    "<url><loc>http://example.com/res1</loc><lastmod>2013-01-02T13:00:00Z</lastmod>"
    '<rs:md hash="md5:1584abdf8ebdc9802ac0c6a7402c03b6" length="8876" type="text/html"/>'
    '<rs:ln rel="duplicate" href="http://mirror.example.com/res1" pri="1"'
    ' modified="2013-01-02T13:00:00Z"/></url>',
    "<url><loc>http://example.com/res2</loc></url>",
)
CHANGE_LIST = urlset(
    'capability="changelist" from="2013-01-02T00:00:00Z"',
    UP,
    "<url><loc>http://example.com/res1</loc>"
    '<rs:md change="updated" datetime="2013-01-02T13:00:00Z" length="10"/></url>',
    "<url><loc>http://example.com/res2</loc>"
    '<rs:md change="deleted" datetime="2013-01-02T14:00:00+01:00"/></url>',
)
BROKEN_CHANGE_LIST = urlset(
    'capability="changelist" from="2013-01-02T00:00:00Z"',
    UP,
    "<url><loc>http://example.com/res1</loc>"
    '<rs:md change="updated" datetime="2013-01-02T13:00:00Z"/></url>',
    "<url><loc>http://example.com/res2</loc>"
    '<rs:md change="updated" datetime="2013-01-02T12:00:00Z"/></url>',
    "<url><loc>http://example.com/res3</loc>"
    '<rs:md change="moved" datetime="2013-01-02T14:00:00Z"/></url>',
)
WARNING_ONLY = urlset(
    # A missing up link is an error since issue 13 (core 1.1 §10.1); changefreq "sometimes"
    # is outside the Sitemap vocabulary: a warning.
    'capability="resourcelist" at="2013-01-03T09:00:00Z"',
    UP,
    "<url><loc>http://example.com/res1</loc><changefreq>sometimes</changefreq></url>",
)


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        text = text.encode("utf-8")
    path.write_bytes(text)
    return path


def json_lines(text: str) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# -- validate: exit codes and output -----------------------------------------------------------


def test_validate_clean_document_exits_0(tmp_path: Path) -> None:
    path = write(tmp_path / "resourcelist.xml", RESOURCE_LIST)
    result = run("validate", path)
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "1 document, 2 entries: 0 errors, 0 warnings" in result.stderr


def test_validate_warnings_only_exits_0(tmp_path: Path) -> None:
    path = write(tmp_path / "rl.xml", WARNING_ONLY)
    result = run("validate", path)
    assert result.exit_code == 0
    assert f"{path}:5: warning: changefreq 'sometimes'" in result.stdout
    assert "0 errors, 1 warning" in result.stderr


def test_validate_errors_exit_1_with_locations(tmp_path: Path) -> None:
    path = write(tmp_path / "changelist.xml", BROKEN_CHANGE_LIST)
    result = run("validate", path)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert any(
        line.startswith(f"{path}:6: error: changes out of chronological order")
        and line.endswith("(entry http://example.com/res2)")
        for line in lines
    ), lines
    assert any(
        line.startswith(f"{path}:7: error: change 'moved' is not created, updated or deleted")
        for line in lines
    ), lines
    assert "2 errors" in result.stderr


def test_validate_unreadable_target_exits_2_and_others_are_still_checked(tmp_path: Path) -> None:
    good = write(tmp_path / "rl.xml", RESOURCE_LIST)
    bad = write(tmp_path / "broken.xml", "<urlset")
    result = run("validate", good, bad)
    assert result.exit_code == 2
    # An input that cannot be read is a one-line error on stderr, not a finding on stdout.
    assert f"resourcesync: {bad}:1: not well-formed XML" in result.stderr
    assert str(bad) not in result.stdout
    assert "1 document, 2 entries" in result.stderr
    assert "1 unreadable" in result.stderr


def test_validate_unreadable_wins_over_errors(tmp_path: Path) -> None:
    bad = write(tmp_path / "changelist.xml", BROKEN_CHANGE_LIST)
    result = run("validate", bad, tmp_path / "missing.xml")
    assert result.exit_code == 2
    assert f"resourcesync: {tmp_path / 'missing.xml'}: no such file" in result.stderr


def test_validate_errors_only_hides_warnings(tmp_path: Path) -> None:
    broken = urlset(
        'capability="resourcelist"',  # no at: an error
        UP,
        "<url><loc>http://example.com/res1</loc><changefreq>sometimes</changefreq></url>",
    )
    path = write(tmp_path / "rl.xml", broken)
    full = run("validate", path)
    assert ": warning: " in full.stdout and ": error: " in full.stdout
    result = run("validate", path, "--errors-only")
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"{path}:3: error: document <rs:md> needs at in a resourcelist (Appendix A)"
    ]


def test_validate_json_shape(tmp_path: Path) -> None:
    good = write(tmp_path / "rl.xml", RESOURCE_LIST)
    bad = write(tmp_path / "cl.xml", BROKEN_CHANGE_LIST)
    result = run("validate", good, bad, "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)  # one object, nothing else on stdout
    assert set(report) == {"ok", "documents", "findings", "unreadable"}
    assert report["ok"] is False
    assert report["unreadable"] == []
    assert report["documents"] == [
        {
            "source": str(good),
            "capability": "resourcelist",
            "index": False,
            "entries": 2,
            "errors": 0,
            "warnings": 0,
        },
        {
            "source": str(bad),
            "capability": "changelist",
            "index": False,
            "entries": 3,
            "errors": 2,
            "warnings": 0,
        },
    ]
    first = report["findings"][0]
    assert first["level"] == "error"
    assert first["source"] == str(bad)
    assert first["line"] == 6
    assert first["entry"] == "http://example.com/res2"
    assert "out of chronological order" in first["message"]
    assert first["rule"] == "core-12.1-change-order"  # stable, for scripts to filter on
    assert set(first) == {"level", "message", "source", "line", "entry", "rule"}


def test_validate_json_omits_absent_fields_and_lists_unreadable(tmp_path: Path) -> None:
    empty = write(tmp_path / "empty.xml", b"")
    result = run("validate", empty, "--json")
    assert result.exit_code == 2
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["documents"] == []
    assert report["unreadable"] == [
        {
            "level": "error",
            "message": "empty document (no XML)",
            "source": str(empty),
            "rule": "unreadable",
        }
    ]


def test_validate_gzip_document(tmp_path: Path) -> None:
    path = write(tmp_path / "resourcelist.xml.gz", gzip.compress(RESOURCE_LIST.encode()))
    result = run("validate", path)
    assert result.exit_code == 0, result.output
    assert "1 document, 2 entries: 0 errors" in result.stderr


def test_validate_bad_map_is_a_usage_error(tmp_path: Path) -> None:
    path = write(tmp_path / "rl.xml", RESOURCE_LIST)
    result = run("validate", path, "--map", "not-a-mapping")
    assert result.exit_code == 2
    assert "URL=DIR" in result.stderr
    assert "Traceback" not in result.output


# -- following a tree of documents -------------------------------------------------------------


def source_tree(root: Path) -> dict[str, Path]:
    """A Source as files, named by URL under http://example.com/:
    description → capability list → resource list index → two parts, and a change list."""
    files = {
        ".well-known/resourcesync": urlset(
            'capability="description"',
            f'<rs:ln rel="describedby" href="{SITE}/info"/>',
            f"<url><loc>{SITE}/dataset1/capabilitylist.xml</loc>"
            '<rs:md capability="capabilitylist"/></url>',
        ),
        "dataset1/capabilitylist.xml": urlset(
            'capability="capabilitylist"',
            f'<rs:ln rel="up" href="{SITE}/.well-known/resourcesync"/>',
            f"<url><loc>{SITE}/dataset1/resourcelist.xml</loc>"
            '<rs:md capability="resourcelist"/></url>',
            f'<url><loc>{SITE}/dataset1/changelist.xml</loc><rs:md capability="changelist"/></url>',
        ),
        "dataset1/resourcelist.xml": urlset(
            'capability="resourcelist" at="2013-01-03T09:00:00Z"',
            UP,
            f"<sitemap><loc>{SITE}/dataset1/resourcelist-part1.xml</loc></sitemap>",
            f"<sitemap><loc>{SITE}/dataset1/resourcelist-part2.xml</loc></sitemap>",
            index=True,
        ),
        "dataset1/resourcelist-part1.xml": urlset(
            'capability="resourcelist" at="2013-01-03T09:00:00Z"',
            UP,
            f'<rs:ln rel="index" href="{SITE}/dataset1/resourcelist.xml"/>',
            "<url><loc>http://example.com/res1</loc></url>",
            "<url><loc>http://example.com/res2</loc></url>",
        ),
        "dataset1/resourcelist-part2.xml": urlset(
            'capability="resourcelist" at="2013-01-03T09:00:00Z"',
            UP,
            f'<rs:ln rel="index" href="{SITE}/dataset1/resourcelist.xml"/>',
            "<url><loc>http://example.com/res3</loc></url>",
        ),
        "dataset1/changelist.xml": CHANGE_LIST,
    }
    return {name: write(root / name, text) for name, text in files.items()}


def test_validate_follow_with_map_reads_the_whole_tree(tmp_path: Path) -> None:
    files = source_tree(tmp_path / "site")
    result = run(
        "validate",
        files[".well-known/resourcesync"],
        "--follow",
        "--map",
        f"{SITE}/={tmp_path / 'site'}",
        "--json",
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["findings"] == []
    got = {
        Path(d["source"]).relative_to(tmp_path / "site").as_posix(): d for d in report["documents"]
    }
    assert set(got) == set(files)
    assert got["dataset1/resourcelist.xml"]["index"] is True
    assert got["dataset1/resourcelist-part1.xml"]["entries"] == 2
    assert got["dataset1/resourcelist-part2.xml"]["entries"] == 1
    assert sum(d["entries"] for d in report["documents"]) == 1 + 2 + 2 + 2 + 1 + 2


def test_validate_follow_finds_errors_in_a_part(tmp_path: Path) -> None:
    files = source_tree(tmp_path / "site")
    write(files["dataset1/changelist.xml"], BROKEN_CHANGE_LIST)
    result = run(
        "validate", files[".well-known/resourcesync"], "--follow", "--map",
        f"{SITE}/={tmp_path / 'site'}",
    )  # fmt: skip
    assert result.exit_code == 1
    assert f"{files['dataset1/changelist.xml']}:6: error: changes out of chronological order" in (
        result.stdout
    )


def test_validate_without_follow_reads_one_document(tmp_path: Path) -> None:
    files = source_tree(tmp_path / "site")
    result = run("validate", files[".well-known/resourcesync"], "--json")
    assert [d["capability"] for d in json.loads(result.stdout)["documents"]] == ["description"]


def test_validate_follow_resolves_siblings_without_a_map(tmp_path: Path) -> None:
    # The capability list and the documents below it, all in one directory.
    files = source_tree(tmp_path / "site")
    flat = tmp_path / "flat"
    for name in (
        "capabilitylist.xml",
        "resourcelist.xml",
        "resourcelist-part1.xml",
        "resourcelist-part2.xml",
        "changelist.xml",
    ):
        write(flat / name, files[f"dataset1/{name}"].read_bytes())
    result = run("validate", flat / "capabilitylist.xml", "--follow", "--json")
    assert result.exit_code == 0, result.output
    sources = sorted(Path(d["source"]).name for d in json.loads(result.stdout)["documents"])
    assert sources == [
        "capabilitylist.xml",
        "changelist.xml",
        "resourcelist-part1.xml",
        "resourcelist-part2.xml",
        "resourcelist.xml",
    ]


def test_validate_follow_reports_a_missing_sibling_as_not_followed(tmp_path: Path) -> None:
    files = source_tree(tmp_path / "site")
    flat = write(
        tmp_path / "flat" / "resourcelist.xml", files["dataset1/resourcelist.xml"].read_bytes()
    )
    write(
        flat.parent / "resourcelist-part1.xml",
        files["dataset1/resourcelist-part1.xml"].read_bytes(),
    )
    result = run("validate", flat, "--follow")
    assert "not followed: http://example.com/dataset1/resourcelist-part2.xml" in result.stdout
    assert "--map URL=DIR" in result.stdout
    assert "Traceback" not in result.output


def test_an_index_listing_itself_is_reported_not_fatal(tmp_path: Path) -> None:
    path = write(
        tmp_path / "resourcelist.xml",
        urlset(
            'capability="resourcelist" at="2013-01-03T09:00:00Z"',
            UP,
            f"<sitemap><loc>{SITE}/dataset1/resourcelist.xml</loc></sitemap>",
            index=True,
        ),
    )
    result = run("validate", path, "--follow")
    assert result.exit_code == 0, result.output
    assert "warning: not followed: " in result.stdout
    assert "a loop" in result.stdout
    assert "1 document, 1 entry: 0 errors, 1 warning" in result.stderr


# -- cat -----------------------------------------------------------------------------------------


def test_cat_json_document_line_and_entries(tmp_path: Path) -> None:
    path = write(tmp_path / "resourcelist.xml", RESOURCE_LIST)
    result = run("cat", path, "--json")
    assert result.exit_code == 0
    lines = json_lines(result.stdout)
    assert lines[0] == {
        "document": {
            "source": str(path),
            "capability": "resourcelist",
            "index": False,
            "at": "2013-01-03T09:00:00Z",
            "completed": "2013-01-03T09:01:00Z",
            "links": [{"rel": "up", "href": f"{SITE}/dataset1/capabilitylist.xml"}],
        }
    }
    assert lines[1] == {
        "loc": "http://example.com/res1",
        "lastmod": "2013-01-02T13:00:00Z",
        "hashes": {"md5": "1584abdf8ebdc9802ac0c6a7402c03b6"},
        "length": 8876,
        "type": "text/html",
        "links": [
            {
                "rel": "duplicate",
                "href": "http://mirror.example.com/res1",
                "pri": 1,
                "modified": "2013-01-02T13:00:00Z",
            }
        ],
    }
    assert isinstance(lines[1]["length"], int)
    assert isinstance(lines[1]["links"][0]["pri"], int)
    assert lines[2] == {"loc": "http://example.com/res2"}  # absent values omitted
    assert len(lines) == 3


def test_cat_json_change_list_times_in_utc(tmp_path: Path) -> None:
    path = write(tmp_path / "changelist.xml", CHANGE_LIST)
    lines = json_lines(run("cat", path, "--json").stdout)
    doc = lines[0]["document"]
    assert doc["from"] == "2013-01-02T00:00:00Z"
    assert "until" not in doc and "at" not in doc
    assert lines[1] == {
        "loc": "http://example.com/res1",
        "change": "updated",
        "datetime": "2013-01-02T13:00:00Z",
        "length": 10,
    }
    assert lines[2] == {
        "loc": "http://example.com/res2",
        "change": "deleted",
        "datetime": "2013-01-02T13:00:00Z",  # +01:00 converted to UTC
    }


def test_cat_json_capability_and_archive_entries(tmp_path: Path) -> None:
    path = write(
        tmp_path / "archive.xml",
        urlset(
            'capability="changelist-archive"',
            UP,
            f"<url><loc>{SITE}/cl1.xml</loc>"
            '<rs:md capability="changelist" from="2013-01-01T00:00:00Z"'
            ' until="2013-01-02T00:00:00Z"/></url>',
        ),
    )
    lines = json_lines(run("cat", path, "--json").stdout)
    assert lines[1] == {
        "loc": f"{SITE}/cl1.xml",
        "capability": "changelist",
        "from": "2013-01-01T00:00:00Z",
        "until": "2013-01-02T00:00:00Z",
    }


def test_cat_in_a_pipe_is_tab_separated(tmp_path: Path) -> None:
    path = write(tmp_path / "changelist.xml", CHANGE_LIST)
    result = run("cat", path)
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "2013-01-02T13:00:00Z\tupdated\t10\t-\thttp://example.com/res1",
        "2013-01-02T13:00:00Z\tdeleted\t-\t-\thttp://example.com/res2",
    ]


def test_cat_follow_lists_the_parts_of_an_index(tmp_path: Path) -> None:
    files = source_tree(tmp_path / "site")
    result = run("cat", files["dataset1/resourcelist.xml"], "--follow")
    assert result.exit_code == 0, result.output
    locs = [line.split("\t")[-1] for line in result.stdout.splitlines()]
    assert locs == ["http://example.com/res1", "http://example.com/res2", "http://example.com/res3"]


def test_cat_follow_json_gives_a_document_line_per_document(tmp_path: Path) -> None:
    files = source_tree(tmp_path / "site")
    result = run(
        "cat", files["dataset1/resourcelist.xml"], "--follow", "--json", "--map",
        f"{SITE}/={tmp_path / 'site'}",
    )  # fmt: skip
    lines = json_lines(result.stdout)
    docs = [(i, Path(x["document"]["source"]).name) for i, x in enumerate(lines) if "document" in x]
    assert docs == [
        (0, "resourcelist.xml"),
        (3, "resourcelist-part1.xml"),
        (6, "resourcelist-part2.xml"),
    ]
    assert lines[0]["document"]["index"] is True


def test_cat_loop_is_reported_on_stderr_not_fatal(tmp_path: Path) -> None:
    path = write(
        tmp_path / "resourcelist.xml",
        urlset(
            'capability="resourcelist" at="2013-01-03T09:00:00Z"',
            f"<sitemap><loc>{SITE}/resourcelist.xml</loc></sitemap>",
            index=True,
        ),
    )
    result = run("cat", path, "--follow")
    assert result.exit_code == 0
    assert "resourcesync: not followed: " in result.stderr
    assert "a loop" in result.stderr


# -- hostile and broken inputs -----------------------------------------------------------------

SECRET = "S3CRET-f1le-c0ntent-8d2e"


def hostile_inputs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name → (file, fragment of the one-line message)."""
    secret = write(tmp_path / "secret.txt", SECRET + "\n")
    xxe = (
        '<?xml version="1.0"?>\n'
        f'<!DOCTYPE urlset [<!ENTITY s SYSTEM "file://{secret}">]>\n'
        f'<urlset xmlns="{SM}" xmlns:rs="{RS}">\n'
        '<rs:md capability="resourcelist" at="2013-01-03T09:00:00Z"/>\n'
        "<url><loc>http://example.com/&s;</loc></url>\n</urlset>\n"
    )
    laughs = '<?xml version="1.0"?>\n<!DOCTYPE urlset [<!ENTITY l0 "lol">'
    for i in range(1, 12):
        laughs += f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">'
    laughs += f']>\n<urlset xmlns="{SM}"><url><loc>&l11;</loc></url></urlset>\n'
    bomb = gzip.compress(
        f'<urlset xmlns="{SM}">'.encode() + b" " * (20 * 1024 * 1024) + b"</urlset>", 9
    )
    cases = {
        "xxe": (write(tmp_path / "xxe.xml", xxe), "DOCTYPE declarations are not allowed"),
        # Refused, but see test_billion_laughs_is_refused_as_a_doctype for the message.
        "billion-laughs": (write(tmp_path / "laughs.xml", laughs), "laughs.xml:"),
        "garbage": (
            write(tmp_path / "garbage.xml", bytes(range(256)) * 16),
            "not well-formed XML",
        ),
        "truncated": (write(tmp_path / "truncated.xml", RESOURCE_LIST[:300]), "not well-formed"),
        "empty": (write(tmp_path / "empty.xml", b""), "empty document"),
        "gzip-bomb": (write(tmp_path / "bomb.xml.gz", bomb), "larger than the limit of 1048576"),
        "corrupt-gzip": (
            write(tmp_path / "corrupt.xml.gz", gzip.compress(RESOURCE_LIST.encode())[:40]),
            "gzip",
        ),
        "html": (
            write(tmp_path / "page.xml", "<html><body>hi</body></html>"),
            "an HTML page, not a ResourceSync",
        ),
        "missing": (tmp_path / "missing.xml", "no such file"),
        "directory": (tmp_path, "is a directory"),
    }
    return cases


HOSTILE = [
    "xxe",
    "billion-laughs",
    "garbage",
    "truncated",
    "empty",
    "gzip-bomb",
    "corrupt-gzip",
    "html",
    "missing",
    "directory",
]


@pytest.mark.parametrize("case", HOSTILE)
def test_cat_hostile_input_one_line_on_stderr_exit_2(tmp_path: Path, case: str) -> None:
    path, fragment = hostile_inputs(tmp_path)[case]
    result = run("cat", path, "--max-size", "1M")
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"resourcesync: {path}")
    assert fragment in lines[0]
    assert SECRET not in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("case", HOSTILE)
def test_validate_hostile_input_named_exit_2(tmp_path: Path, case: str) -> None:
    path, fragment = hostile_inputs(tmp_path)[case]
    result = run("validate", path, "--max-size", "1M")
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"resourcesync: {path}")
    assert fragment in lines[0]
    assert lines[1] == "0 documents, 0 entries: 0 errors, 0 warnings, 1 unreadable"
    assert SECRET not in result.output
    assert "Traceback" not in result.output


def test_billion_laughs_is_refused_as_a_doctype(tmp_path: Path) -> None:
    path, _ = hostile_inputs(tmp_path)["billion-laughs"]
    result = run("cat", path)
    assert result.exit_code == 2
    assert "DOCTYPE declarations are not allowed" in result.stderr
    assert "xmlCtxtSetMaxAmplification" not in result.stderr


def test_gzip_document_under_the_size_limit_is_read(tmp_path: Path) -> None:
    path = write(tmp_path / "changelist.xml.gz", gzip.compress(CHANGE_LIST.encode()))
    result = run("cat", path, "--json", "--max-size", "1M")
    assert result.exit_code == 0
    assert [x.get("loc") for x in json_lines(result.stdout)[1:]] == [
        "http://example.com/res1",
        "http://example.com/res2",
    ]


def test_max_size_counts_plain_documents_too(tmp_path: Path) -> None:
    path = write(tmp_path / "rl.xml", RESOURCE_LIST)
    result = run("cat", path, "--max-size", "100")
    assert result.exit_code == 2
    assert "larger than the limit of 100 bytes" in result.stderr
    assert run("cat", path, "--max-size", "1k").exit_code == 0


def test_bad_max_size_is_a_usage_error(tmp_path: Path) -> None:
    path = write(tmp_path / "rl.xml", RESOURCE_LIST)
    result = run("cat", path, "--max-size", "lots")
    assert result.exit_code == 2
    assert "not a size" in result.stderr


# -- through the installed console script ------------------------------------------------------


def test_script_validate_exit_codes(tmp_path: Path) -> None:
    good = write(tmp_path / "rl.xml", RESOURCE_LIST)
    bad = write(tmp_path / "cl.xml", BROKEN_CHANGE_LIST)
    assert script("validate", good).returncode == 0
    proc = script("validate", bad)
    assert proc.returncode == 1
    assert f"{bad}:6: error: changes out of chronological order".encode() in proc.stdout
    proc = script("validate", tmp_path / "nope.xml")
    assert proc.returncode == 2
    assert b"Traceback" not in proc.stderr


def test_script_cat_into_a_real_pipe_is_tab_separated(tmp_path: Path) -> None:
    path = write(tmp_path / "changelist.xml", CHANGE_LIST)
    proc = script("cat", path)
    assert proc.returncode == 0
    assert proc.stdout.decode().splitlines()[0].split("\t") == [
        "2013-01-02T13:00:00Z",
        "updated",
        "10",
        "-",
        "http://example.com/res1",
    ]


def test_script_cat_json_is_json_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "resourcelist.xml", RESOURCE_LIST)
    proc = script("cat", path, "--json")
    assert proc.returncode == 0
    lines = json_lines(proc.stdout.decode())
    assert list(lines[0]) == ["document"]
    assert [x["loc"] for x in lines[1:]] == ["http://example.com/res1", "http://example.com/res2"]


def test_script_hostile_xxe_never_prints_the_secret(tmp_path: Path) -> None:
    path, _ = hostile_inputs(tmp_path)["xxe"]
    for command in ("cat", "validate"):
        proc = script(command, path)
        assert proc.returncode == 2
        assert SECRET.encode() not in proc.stdout + proc.stderr
        assert b"Traceback" not in proc.stderr
        assert str(path).encode() in proc.stdout + proc.stderr


def test_script_gzip_bomb_refused_quickly(tmp_path: Path) -> None:
    path, _ = hostile_inputs(tmp_path)["gzip-bomb"]
    proc = script("cat", path, "--max-size", "1M")
    assert proc.returncode == 2
    assert proc.stderr.decode().splitlines() == [
        f"resourcesync: {path}: larger than the limit of 1048576 bytes (raise it with --max-size)"
    ]


def test_script_cat_closed_pipe_is_not_an_error(tmp_path: Path) -> None:
    many = urlset(
        'capability="resourcelist" at="2013-01-03T09:00:00Z"',
        *(f"<url><loc>http://example.com/r{i}</loc></url>" for i in range(50_000)),
    )
    path = write(tmp_path / "big.xml", many)
    cat = subprocess.Popen(
        [str(SCRIPT), "cat", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert cat.stdout is not None and cat.stderr is not None
    first = cat.stdout.readline()
    cat.stdout.close()  # as `| head -1` does
    err = cat.stderr.read()
    cat.stderr.close()
    assert cat.wait(timeout=30) == 0
    assert first.endswith(b"http://example.com/r0\n")
    assert b"Traceback" not in err


def test_script_version_and_help() -> None:
    proc = script("--version")
    assert proc.returncode == 0
    assert proc.stdout.startswith(b"resourcesync, version ")
    proc = script("validate", "--help")
    assert proc.returncode == 0
    assert b"--follow" in proc.stdout and b"--errors-only" in proc.stdout


def test_cat_bad_value_is_one_line_with_file_and_line(tmp_path: Path) -> None:
    path = write(
        tmp_path / "rl.xml",
        urlset(
            'capability="resourcelist" at="2013-01-03T09:00:00Z"',
            "<url><loc>http://example.com/res1</loc></url>",
            "<url><loc>http://example.com/res2</loc><lastmod>soon</lastmod></url>",
        ),
    )
    # An entry's value is shown as not given, with a warning (as a Destination reads it).
    result = run("cat", path)
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        f"resourcesync: warning: {path}: line 5: lastmod: not a W3C datetime: 'soon': read as "
        "not given, and so may other values in this document"
    ]
    # The document's own: one line, exit 2.
    text = path.read_text().replace('at="2013-01-03T09:00:00Z"', 'at="soon"')
    path.write_text(text)
    result = run("cat", path)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"resourcesync: {path}:3: rs:md at: not a W3C datetime: 'soon'"
    ]
    assert "Traceback" not in result.output


def test_map_never_reads_outside_its_directory(tmp_path: Path) -> None:
    write(
        tmp_path / "outside.xml",
        urlset(
            'capability="resourcelist" at="2013-01-03T09:00:00Z"',
            "<url><loc>http://example.com/OUTSIDE-ENTRY</loc></url>",
        ),
    )
    index = write(
        tmp_path / "site" / "resourcelist.xml",
        urlset(
            'capability="resourcelist" at="2013-01-03T09:00:00Z"',
            UP,
            f"<sitemap><loc>{SITE}/%2e%2e/outside.xml</loc></sitemap>",
            f"<sitemap><loc>{SITE}/a/../../outside.xml</loc></sitemap>",
            index=True,
        ),
    )
    mapping = f"{SITE}/={tmp_path / 'site'}"
    result = run("cat", index, "--follow", "--json", "--map", mapping)
    assert result.exit_code == 0
    assert "OUTSIDE-ENTRY" not in result.stdout
    assert result.stderr.count("maps outside") == 2
    # Each line names its URL once.
    assert result.stderr.count("outside.xml") == 2, result.stderr
    result = run("validate", index, "--follow", "--json", "--map", mapping)
    report = json.loads(result.stdout)
    assert [Path(d["source"]).name for d in report["documents"]] == ["resourcelist.xml"]
    assert sum("maps outside" in f["message"] for f in report["findings"]) == 2


def test_a_signal_once_the_command_is_done_keeps_its_exit_code(tmp_path: Path) -> None:
    # Ctrl-C (or SIGTERM) that comes after the command's last line, while the interpreter shuts
    # down, used to kill the process by the signal (exit -2 after "ok") or make click print
    # "Aborted!": the program now ends with the command's own code. Played deterministically
    # by a signal sent from an exit handler.
    doc = tmp_path / "rl.xml"
    doc.write_text(
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:rs="http://www.openarchives.org/rs/terms/">'
        '<rs:ln rel="up" href="http://example.org/capabilitylist.xml"/>'
        '<rs:md capability="resourcelist" at="2026-01-01T00:00:00Z"/>'
        "<url><loc>http://example.org/a</loc></url></urlset>"
    )
    # Two moments: an exit function (before the interpreter gives the signals back), and the
    # teardown of the modules after it (a global's __del__), where the default action used
    # to kill the process (seen in CI: exit -2 after "published 3,000 resources").
    senders = {
        "exit function": "atexit.register(lambda: os.kill(os.getpid(), signal.{sig}))\n",
        "teardown": (
            "class Late:\n"
            "    def __del__(self):\n"
            "        os.kill(os.getpid(), signal.{sig})\n"
            "        time.sleep(0.2)\n"
            "late = Late()\n"
        ),
    }
    for (when, sender), sig in itertools.product(senders.items(), ("SIGINT", "SIGTERM")):
        for target, code in ((doc, 0), (tmp_path / "missing.xml", 2)):
            program = (
                "import atexit, os, signal, sys, time\n"
                + sender.format(sig=sig)
                + "from resourcesync.cli import run\n"
                f"sys.argv = ['resourcesync', 'validate', {str(target)!r}]\n"
                "run()\n"
            )
            done = subprocess.run(
                [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
            )
            assert done.returncode == code, (when, sig, target, done.returncode, done.stderr)
            assert "Traceback" not in done.stderr and "Aborted" not in done.stderr, done.stderr
            assert "Exception ignored" not in done.stderr, done.stderr


def _program_end(tmp_path: Path, argv: list[str], before: str = "") -> tuple[int, str, set[str]]:
    """Run the program (`_program.entry`, as its console script does) on `argv` after
    `before`, with an exit function and a module-level object's finalizer that each leave a
    mark; its exit code, its output, and the marks left."""
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    program = (
        "import atexit, pathlib, sys, threading, time\n"
        f"MARKS = pathlib.Path({str(marks)!r})\n"
        "atexit.register(lambda: (MARKS / 'exit function').touch())\n"
        "class Late:\n"
        "    def __del__(self):\n"
        "        (MARKS / 'teardown').touch()\n"
        "late = Late()\n" + before + "from resourcesync._program import entry\n"
        f"sys.argv = ['resourcesync', *{argv!r}]\n"
        "entry()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    return done.returncode, done.stdout + done.stderr, {m.name for m in marks.iterdir()}


def test_the_program_ends_once_done_with_its_code_its_output_and_its_exit_functions(
    tmp_path: Path,
) -> None:
    # Once the command is done the process ends without tearing its modules down (20 ms of a
    # 0.3 s re-publish): its exit code, every line of its output through a pipe, and its exit
    # functions are kept; only the teardown (a finalizer of a module's object) is left out.
    entries = "".join(f"<url><loc>{SITE}/r{i:05}</loc></url>" for i in range(20_000))
    doc = write(
        tmp_path / "rl.xml",
        urlset('capability="resourcelist" at="2026-01-01T00:00:00Z"', UP, entries),
    )
    bad = write(
        tmp_path / "bad.xml", urlset('capability="resourcelist"', "<url><loc>x</loc></url>")
    )
    for argv, code in (
        (["cat", str(doc)], 0),
        (["validate", str(bad)], 1),
        (["validate", str(tmp_path / "missing.xml")], 2),
    ):
        for mark in (tmp_path / "marks").glob("*"):
            mark.unlink()
        got, output, marks = _program_end(tmp_path, argv)
        assert got == code, (argv, output[-500:])
        assert marks == {"exit function"}, (argv, marks)
        if argv[0] == "cat":
            assert output.count(f"{SITE}/r") == 20_000 and f"{SITE}/r19999" in output
        assert "Traceback" not in output and "Exception ignored" not in output


def test_the_program_with_a_thread_still_running_exits_as_any_program(tmp_path: Path) -> None:
    # A thread still at work when the command returns (a library's, a host's): the usual exit,
    # which waits for it, then tears down.
    start = (
        "def late_work():\n"
        "    time.sleep(0.3)\n"
        "    (MARKS / 'thread').touch()\n"
        "threading.Thread(target=late_work).start()\n"
    )
    got, output, marks = _program_end(tmp_path, ["validate", str(tmp_path / "missing.xml")], start)
    assert got == 2, output
    assert marks == {"exit function", "teardown", "thread"}, marks


def test_the_program_collects_its_youngest_objects_less_often_and_the_library_never() -> None:
    # The program's collector looks at new objects every 10,000 allocations (a sync at 64
    # connections spent 8 % of its CPU collecting); the older generations keep CPython's
    # thresholds (garbage in cycles is still found: a process running for months must not
    # grow); importing the library or the command line changes nothing for a host program.
    program = (
        "import gc, json\n"
        "before = gc.get_threshold()\n"
        "import resourcesync, resourcesync.cli as cli\n"
        "from resourcesync.destination import sync\n"
        "imported = gc.get_threshold()\n"
        "seen = []\n"
        "cli.main = lambda: seen.append(gc.get_threshold())\n"
        "cli.run()\n"
        "print(json.dumps([before, imported, seen[0]]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    before, imported, running = json.loads(done.stdout)
    assert imported == before
    assert running == [10_000, before[1], before[2]]


@pytest.mark.parametrize(
    "loading",
    ["click", "resourcesync.cli.document"],
    ids=["the command line", "the command's module"],
)
@pytest.mark.parametrize(
    ("signum", "code", "said"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
    ids=["Ctrl-C", "SIGTERM"],
)
def test_a_signal_while_the_program_loads_is_one_line_and_its_code(
    loading: str, signum: int, code: int, said: str, tmp_path: Path
) -> None:
    # A Ctrl-C in the program's first tenth of a second (the console script importing the
    # command line, the group importing the command's module) printed the traceback of the
    # import it interrupted, or click's "Aborted!" with exit 1; a SIGTERM killed it without a
    # word. Played deterministically: the signal sent to itself as that import begins.
    program = (
        "import os, sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name == {loading!r}:\n"
        f"            os.kill(os.getpid(), {int(signum)})\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        f"sys.argv = ['resourcesync', 'validate', {str(tmp_path / 'x.xml')!r}]\n"
        "from resourcesync._program import main\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == code, done.stderr
    assert done.stderr == f"resourcesync: {said}\n", done.stderr


@pytest.mark.parametrize("loading", ["signal", "threading", "typing"])
def test_a_ctrl_c_in_the_programs_first_steps_is_one_line_too(loading: str, tmp_path: Path) -> None:
    # The program's own module imported `signal` (its enums), `threading` and `typing` before
    # it could answer a Ctrl-C: one in its first 15 ms printed the traceback of that import.
    # (A SIGTERM before its handler is in still ends the process by the signal, writing
    # nothing: the handler needs `signal`.)
    program = (
        "import os, sys\n"
        f"assert {loading!r} not in sys.modules\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name == {loading!r}:\n"
        "            os.kill(os.getpid(), 2)\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        f"sys.argv = ['resourcesync', 'validate', {str(tmp_path / 'x.xml')!r}]\n"
        "from resourcesync._program import main\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 130, done.stderr
    assert done.stderr == "resourcesync: interrupted\n", done.stderr


def test_the_program_gives_sigterm_back_when_no_command_took_it() -> None:
    """Its handler for the loading is the program's only until a command puts its own in:
    a caller of `main` that goes on after it (here after `--version`, which runs no command)
    finds SIGTERM as it was."""
    program = (
        "import signal, sys\n"
        "def mine(signum, frame): pass\n"
        "signal.signal(signal.SIGTERM, mine)\n"
        "sys.argv = ['resourcesync', '--version']\n"
        "from resourcesync._program import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as done:\n"
        "    print(done.code, signal.getsignal(signal.SIGTERM) is mine)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 True", done.stdout


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1/",
        "http://127.0.0.1:x/",
        "http://127.0.0.1:99999999/",
        # No host (httpx said "missing an 'http://' protocol"); a space in the host (looked up).
        "http:///list.xml",
        "http://exa mple.org/list.xml",
    ],
)
@pytest.mark.parametrize("command", ["sync", "validate"])
def test_a_malformed_url_is_one_line_and_2(command: str, url: str, tmp_path: Path) -> None:
    # `sync http://[::1/ DEST` printed urllib's "ValueError: Invalid IPv6 URL" traceback.
    argv = [command, url] + ([str(tmp_path / "copy")] if command == "sync" else [])
    result = run(*argv)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "Error:" not in result.stderr.split(":", 1)[0]
    problems = [line for line in result.stderr.splitlines() if url in line]
    assert len(problems) == 1, result.stderr
    # (Port 99999999: urllib refuses it; the documents' client tries it and cannot connect.)
    reasons = ("not a valid URL", "cannot connect", "request failed")
    assert any(why in problems[0] for why in reasons), problems
    assert result.exception is None or isinstance(result.exception, SystemExit)
    if "///" in url or " " in url:
        # Said for what it is, before any request: not a "missing protocol" nor a DNS failure.
        assert "not a valid URL: it " in problems[0], problems


def test_validate_and_cat_take_the_credentials_sync_takes(tmp_path: Path) -> None:
    """A Source behind a token could be synced (`--token`) but not validated nor listed: the
    documents' requests were sent without it (HTTP 401, exit 2). `--header` and `--token` go
    to the targets' own origins, as `sync` sends them to its Source's."""
    from tests.destination.helpers import HandSource, behind_a_token, entry
    from tests.servers import serve

    src = HandSource()
    with serve(behind_a_token(src.app(), "T")) as base:
        src.base = base
        src.files["/a.txt"] = b"alpha"
        src.publish([entry(base, "/a.txt", b"alpha")])
        target = f"{base}/capabilitylist.xml"
        refused = run("validate", target, "--follow")
        assert refused.exit_code == 2 and "401" in refused.stderr, refused.stderr
        # Read whole with it (the hand-made documents lack their `up` links: findings, exit 1).
        read = run("validate", target, "--follow", "--token", "T")
        assert read.exit_code == 1 and "3 documents, 3 entries" in read.output, read.output
        header = ("--header", "Authorization: Bearer T")
        listed = run("cat", f"{base}/resourcelist.xml", *header)
        assert listed.exit_code == 0 and f"{base}/a.txt" in listed.stdout, listed.stderr
        assert run("cat", f"{base}/resourcelist.xml").exit_code == 2
