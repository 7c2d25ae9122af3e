"""Real Sources that bend the rules are synced, with a warning; the validator still calls them
errors (issue 10.12, 10.13): be strict in what you report, tolerant in what you sync."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from resourcesync.hashing import normalise_digest
from resourcesync.w3cdt import format_w3c, parse_bent, parse_w3c, parse_zoneless
from tests.destination.helpers import cli, cli_json, hand_source, tree

RS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/"'


def _resourcelist(at: str, urls: list[str], head: str = "") -> bytes:
    """A Resource List written by hand: `head` (links) before its `rs:md`, then `urls`."""
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><urlset {RS}>{head}'
        f'<rs:md capability="resourcelist" at="{at}"/>{"".join(urls)}</urlset>'
    ).encode()


def _core_resourcelist(base: str, bodies: dict[str, bytes]) -> bytes:
    """Shaped like CORE's: datetimes with microseconds and no time zone."""
    urls = [
        f"<url><loc>{base}/{name}</loc><lastmod>2021-01-20T20:25:31.541226</lastmod>"
        f'<rs:md length="{len(body)}"/></url>'
        for name, body in bodies.items()
    ]
    up = f'<rs:ln rel="up" href="{base}/capabilitylist.xml"/>'
    return _resourcelist("2021-01-20T20:25:31.541226", urls, up)


def _cornell_resourcelist(base: str, bodies: dict[str, bytes], *, url_safe: bool) -> bytes:
    """Shaped like the 2014 Cornell simulator's: MD5 digests in base64."""
    enc = base64.urlsafe_b64encode if url_safe else base64.b64encode
    urls = [
        f"<url><loc>{base}/{name}</loc><lastmod>2014-05-01T10:00:00Z</lastmod>"
        f'<rs:md hash="md5:{enc(hashlib.md5(body).digest()).decode()}" length="{len(body)}"/>'
        "</url>"
        for name, body in bodies.items()
    ]
    return _resourcelist("2014-05-01T10:00:00Z", urls)


def _serve(src: object, bodies: dict[str, bytes], resourcelist: bytes) -> None:
    from tests.destination.helpers import urlset

    b = src.base  # type: ignore[attr-defined]
    src.docs["/.well-known/resourcesync"] = urlset(  # type: ignore[attr-defined]
        "description", [{"loc": f"{b}/capabilitylist.xml", "capability": "capabilitylist"}]
    )
    src.docs["/capabilitylist.xml"] = urlset(  # type: ignore[attr-defined]
        "capabilitylist", [{"loc": f"{b}/resourcelist.xml", "capability": "resourcelist"}]
    )
    src.docs["/resourcelist.xml"] = resourcelist  # type: ignore[attr-defined]
    for name, body in bodies.items():
        src.files[f"/{name}"] = body  # type: ignore[attr-defined]


def test_zoneless_datetimes_are_read_as_utc() -> None:
    value = parse_zoneless("2021-01-20T20:25:31.541226")
    assert value is not None and format_w3c(value) == "2021-01-20T20:25:31.541226Z"
    assert parse_zoneless("2021-01-20T20:25") is not None
    assert parse_zoneless("2021-01-20") is None  # a date alone is W3C already
    assert parse_zoneless("yesterday") is None


@pytest.mark.parametrize(
    ("text", "means", "how"),
    [
        # Python's str() of an aware datetime, and of a naive one.
        ("2024-01-01 10:00:00+00:00", "2024-01-01T10:00:00Z", "' ' for the T"),
        ("2024-01-01 10:00:00.25", "2024-01-01T10:00:00.250000Z", "no zone, ' ' for the T"),
        # Java's SimpleDateFormat `Z`, PHP's `O`.
        ("2024-01-01T10:00:00+0900", "2024-01-01T01:00:00Z", "a zone without its colon"),
        ("2024-01-01T10:00:00-05", "2024-01-01T15:00:00Z", "a zone of hours only"),
        ("2024-01-01T10:00:00 +09:00", "2024-01-01T01:00:00Z", "a space before the zone"),
        (
            "2024-01-01T10:00:00 UTC",
            "2024-01-01T10:00:00Z",
            "a space before the zone, the zone written UTC",
        ),
        ("2024-01-01t10:00z", "2024-01-01T10:00:00Z", "'t' for the T, the zone written z"),
        ("2024-01-01T10:00:00,5Z", "2024-01-01T10:00:00.500000Z", "a decimal comma"),
        # RSS habits: an e-mail (HTTP) date.
        ("Mon, 01 Jan 2024 10:00:00 GMT", "2024-01-01T10:00:00Z", "an e-mail date"),
        ("Mon, 01 Jan 2024 10:00:00 +0900", "2024-01-01T01:00:00Z", "an e-mail date"),
    ],
)
def test_datetimes_near_w3c_are_read_as_they_mean(text: str, means: str, how: str) -> None:
    got = parse_bent(text)
    assert got is not None and (format_w3c(got[0]), got[1]) == (means, how)


@pytest.mark.parametrize(
    "text",
    [
        "yesterday",
        "2024-13-01T00:00:00Z",
        "2024-01-01T25:00Z",
        "01/02/2024 10:00",
        "May 5",
        "2024-01-01T10:00:00+09:00:00",
        "Mon, 99 Jan 2024 10:00:00 GMT",
        "20240101T100000Z",
    ],
)
def test_datetimes_that_leave_doubt_are_not_read(text: str) -> None:
    assert parse_bent(text) is None


def _bent_resourcelist(base: str, bodies: dict[str, bytes], stamp: str) -> bytes:
    """Every time written as `stamp` (a form near W3C Datetime)."""
    urls = [
        f"<url><loc>{base}/{name}</loc><lastmod>{stamp}</lastmod>"
        f'<rs:md length="{len(body)}" hash="md5:{hashlib.md5(body).hexdigest()}"/></url>'
        for name, body in bodies.items()
    ]
    return _resourcelist(stamp, urls)


def test_a_source_writing_times_near_w3c_is_synced_with_one_warning(tmp_path: Path) -> None:
    """A Source whose times are `str()` of Python datetimes (a space for the T) or Java's
    `+0900`: one such time stopped the whole sync ("not a W3C datetime", exit 2), for every
    run. Read as they mean, said once; the files get the times meant; the validator still calls
    them errors."""
    bodies = {"a.txt": b"alpha", "b.txt": b"beta"}
    for stamp, meant in (
        ("2024-01-01 10:00:00+00:00", "2024-01-01T10:00:00Z"),
        ("2024-01-01T19:00:00+0900", "2024-01-01T10:00:00Z"),
    ):
        dest = tmp_path / stamp.replace(":", "").replace(" ", "_")
        with hand_source() as src:
            _serve(src, bodies, _bent_resourcelist(src.base, bodies, stamp))
            code, summary = cli_json("sync", src.base, dest)
            assert code == 0, summary
            assert tree(dest) == bodies
            said = [p["message"] for p in summary["sets"][0]["problems"]]
            assert len(said) == 1 and "reads unambiguously" in said[0], said
            assert f"Destinations read it as {meant}" in said[0]
            want = parse_w3c(meant).timestamp()
            assert (dest / "a.txt").stat().st_mtime == want
            assert cli("audit", src.base, dest).exit_code == 0
            (tmp_path / "rl.xml").write_bytes(_bent_resourcelist(src.base, bodies, stamp))
            code, report = cli_json("validate", tmp_path / "rl.xml")
            assert code == 1, report
            bent = [f for f in report["findings"] if f["rule"] == "w3c-datetime-form"]
            assert len(bent) == 3 and {f["level"] for f in bent} == {"error"}, report


def test_base64_digests_read_as_hex() -> None:
    body = b"hello"
    hexed = hashlib.md5(body).hexdigest()
    assert normalise_digest("md5", base64.b64encode(hashlib.md5(body).digest()).decode()) == hexed
    raw = hashlib.sha256(b"\xff" * 10).digest()
    assert normalise_digest("sha-256", base64.urlsafe_b64encode(raw).decode().rstrip("=")) == (
        raw.hex()
    )
    assert normalise_digest("md5", hexed.upper()) == hexed
    assert normalise_digest("md5", "not a digest!") is None
    assert normalise_digest("md5", base64.b64encode(b"short").decode()) is None


def test_a_core_shaped_source_is_baselined_with_one_warning(tmp_path: Path) -> None:
    bodies = {"oai/1": b"record one", "oai/2": b"record two", "oai/3": b"record three"}
    dest = tmp_path / "dest"
    with hand_source() as src:
        _serve(src, bodies, _core_resourcelist(src.base, bodies))
        result = cli("cat", f"{src.base}/resourcelist.xml")
        assert result.exit_code == 0, result.stderr
        assert result.stdout.count("2021-01-20T20:25:31.541226Z") == 3
        assert result.stderr.count("no time zone") == 1
        code, summary = cli_json("sync", src.base, dest)
        assert code == 0, summary
        assert tree(dest) == bodies
        warnings = [p for p in summary["sets"][0]["problems"] if "warning" in p["message"]]
        assert len(warnings) == 1 and "read it as UTC" in warnings[0]["message"]
        # The validator keeps calling it an error.
        (tmp_path / "rl.xml").write_bytes(_core_resourcelist(src.base, bodies))
        result = cli("validate", tmp_path / "rl.xml")
        assert result.exit_code != 0 and "time zone" in result.output


def test_a_source_with_base64_digests_is_synced_and_verified(tmp_path: Path) -> None:
    for url_safe in (False, True):
        bodies = {"a": b"alpha" * 50, "b": b"\xfb\xff" * 40}
        dest = tmp_path / f"dest-{url_safe}"
        with hand_source() as src:
            _serve(src, bodies, _cornell_resourcelist(src.base, bodies, url_safe=url_safe))
            code, summary = cli_json("sync", src.base, dest)
            assert code == 0, summary
            assert tree(dest) == bodies
            report = summary["sets"][0]
            assert report["fetched"] == 2
            assert any("base64" in p["message"] for p in report["problems"])
            # The same digests, compared again on the next run: nothing differs.
            code, summary = cli_json("sync", src.base, dest, "--baseline")
            assert code == 0 and summary["sets"][0]["fetched"] == 0, summary
            assert cli("audit", src.base, dest).exit_code == 0
            # A body that does not match its base64 digest still fails.
            lying = {**bodies, "a": b"tampered" * 31}
            src.docs["/resourcelist.xml"] = _cornell_resourcelist(
                src.base, lying, url_safe=url_safe
            )
            code, summary = cli_json("sync", src.base, dest, "--baseline")
            assert code == 1 and summary["sets"][0]["failed"] == 1, summary
            assert tree(dest)["a"] == bodies["a"]


def _hashed_resourcelist(
    base: str, bodies: dict[str, bytes], hashes: dict[str, str], *, described: bool = False
) -> bytes:
    """Each resource listed with the `hash` attribute `hashes[name]`; with `described`, its
    length and a `<lastmod>` too."""
    urls = []
    for name, body in bodies.items():
        lastmod = "<lastmod>2024-04-01T00:00:00Z</lastmod>" if described else ""
        length = f' length="{len(body)}"' if described else ""
        md = f'<rs:md hash="{hashes[name]}"{length}/>'
        urls.append(f"<url><loc>{base}/{name}</loc>{lastmod}{md}</url>")
    return _resourcelist("2024-05-01T10:00:00Z", urls)


PAPER = b"%PDF-1.7 the paper itself " * 40
SIGN_IN = b"<!DOCTYPE html><html><body>Please sign in</body></html>"


def test_a_digest_of_every_algorithm_hashlib_has_is_checked(tmp_path: Path) -> None:
    """sha-512 (an IANA Hash Function Textual Name the spec allows): the digest was not
    computed, and not seen as missing either (no check of the type, no cache check): the wrong
    bytes, or a sign-in page for a PDF, were written, and sync and audit said ok. Upper-case
    tokens (`SHA-256:`) are read in lower case, with a warning."""
    wrong = b"X" * len(PAPER)
    for token in ("sha-512", "sha-384", "sha-224", "SHA-256"):
        algo = token.lower().replace("-", "")
        listed = {"paper.pdf": f"{token}:{hashlib.new(algo, PAPER).hexdigest()}"}
        dest = tmp_path / token
        with hand_source() as src:
            for served in (wrong, SIGN_IN):
                _serve(
                    src,
                    {"paper.pdf": served},
                    _hashed_resourcelist(src.base, {"paper.pdf": served}, listed),
                )
                code, summary = cli_json("sync", src.base, dest)
                assert code == 1 and summary["sets"][0]["failed"] == 1, (token, summary)
                assert "mismatch" in summary["sets"][0]["problems"][-1]["message"]
                assert tree(dest) == {}
            _serve(
                src,
                {"paper.pdf": PAPER},
                _hashed_resourcelist(src.base, {"paper.pdf": PAPER}, listed),
            )
            code, summary = cli_json("sync", src.base, dest)
            assert code == 0 and tree(dest) == {"paper.pdf": PAPER}, summary
            said = [p["message"] for p in summary["sets"][0]["problems"]]
            assert said == (
                [f"warning: line 1: rs:md hash: {token} read as sha-256, and so may others"]
                if token == "SHA-256"
                else []
            ), said
            assert cli("audit", src.base, dest).exit_code == 0
            # An edit here that keeps the size: audit holds the file to the listed digest.
            (dest / "paper.pdf").write_bytes(wrong)
            assert cli("audit", src.base, dest).exit_code == 1


def test_a_digest_no_one_can_check_here_is_no_digest(tmp_path: Path) -> None:
    """A digest of an algorithm we do not compute (sha3-256) was taken for a digest: the type
    of a resource it alone described was not checked, and a sign-in page answered for a PDF
    was written as the PDF (sync said ok). It is set aside, said once a document: the resource
    is checked as one the list gives no digest for; the validator warns about it once."""
    listed = {
        name: f"sha3-256:{hashlib.sha3_256(PAPER).hexdigest()}" for name in ("a.pdf", "b.pdf")
    }
    dest = tmp_path / "dest"
    with hand_source() as src:
        pages = {"a.pdf": SIGN_IN, "b.pdf": SIGN_IN}
        _serve(src, pages, _hashed_resourcelist(src.base, pages, listed))
        code, summary = cli_json("sync", src.base, dest)
        assert code == 1 and summary["sets"][0]["failed"] == 2, summary
        assert tree(dest) == {}
        said = [p["message"] for p in summary["sets"][0]["problems"]]
        unchecked = [m for m in said if "sha3-256 digests" in m]
        assert len(unchecked) == 1 and "are not checked" in unchecked[0], said
        papers = {"a.pdf": PAPER, "b.pdf": PAPER}
        _serve(src, papers, _hashed_resourcelist(src.base, papers, listed, described=True))
        code, summary = cli_json("sync", src.base, dest)
        assert code == 0 and tree(dest) == papers, summary
        assert cli("audit", src.base, dest).exit_code == 0
        # Edited here, size and time kept: held to the MD5 the copy recorded, as without a
        # digest (a digest that checks nothing had made `sync --repair` keep the edit).
        before = (dest / "a.pdf").stat()
        (dest / "a.pdf").write_bytes(b"Y" * len(PAPER))
        os.utime(dest / "a.pdf", ns=(before.st_atime_ns, before.st_mtime_ns))
        assert cli("audit", src.base, dest).exit_code == 1
        assert cli("sync", src.base, dest, "--repair").exit_code == 0
        assert tree(dest) == papers
        assert cli("audit", src.base, dest).exit_code == 0
        # The validator says it once, as a warning (the spec does not restrict algorithms).
        (tmp_path / "rl.xml").write_bytes(_hashed_resourcelist(src.base, papers, listed))
        code, report = cli_json("validate", tmp_path / "rl.xml")
        found = [f for f in report["findings"] if f["rule"] == "core-7-hash-algorithm"]
        assert len(found) == 1 and found[0]["level"] == "warning", report
        assert "'sha3-256' is not one Destinations check" in found[0]["message"]


def test_an_entry_value_that_cannot_be_read_is_read_as_not_given(tmp_path: Path) -> None:
    """A Source whose template writes empty values for what it lacks (`length=""`, `hash=""`,
    `<lastmod/>`), a length written `12.0`, a priority written as a word, a link without its
    href: one such value stopped the whole sync ("not a non-negative integer", exit 2), on
    every run. Read as not given, said once; what else the entry gives is still checked (a
    sign-in page answered for a PDF is refused by its type). In the document's own `rs:md` (its
    `at`, which the copy's cursor follows) it stays an error."""
    bodies = {"a.pdf": PAPER, "b.txt": b"beta", "c.txt": b"gamma"}
    urls = [
        '<url><loc>{b}/a.pdf</loc><lastmod/><rs:md length="" hash=""/></url>',
        '<url><loc>{b}/b.txt</loc><priority>high</priority><rs:md length="4.0"/>'
        '<rs:ln rel="duplicate"/></url>',
        '<url><loc>{b}/c.txt</loc><lastmod></lastmod><rs:md length="5"/></url>',
    ]
    dest = tmp_path / "dest"
    with hand_source() as src:
        listed = [u.replace("{b}", src.base) for u in urls]
        _serve(src, {**bodies, "a.pdf": SIGN_IN}, _resourcelist("2024-05-01T10:00:00Z", listed))
        code, summary = cli_json("sync", src.base, dest)
        assert code == 1, summary
        report = summary["sets"][0]
        assert report["failed"] == 1 and tree(dest) == {"b.txt": b"beta", "c.txt": b"gamma"}
        said = [p["message"] for p in report["problems"] if "read as not given" in p["message"]]
        assert len(said) == 1 and "and so may other values in this document" in said[0], report
        src.files["/a.pdf"] = PAPER
        code, summary = cli_json("sync", src.base, dest)
        assert code == 0 and tree(dest) == bodies, summary
        assert cli("audit", src.base, dest).exit_code == 0
        # The validator calls each an error.
        (tmp_path / "rl.xml").write_bytes(_resourcelist("2024-05-01T10:00:00Z", listed))
        code, report = cli_json("validate", tmp_path / "rl.xml")
        errors = [f for f in report["findings"] if f["level"] == "error"]
        assert code == 1 and len(errors) >= 6, report
        # The document's own time, empty: the list cannot be read.
        src.docs["/resourcelist.xml"] = _resourcelist("", listed)
        result = cli("sync", src.base, dest)
        assert result.exit_code == 2 and "rs:md at: not a W3C datetime: ''" in result.stderr


PHP_NOTICE = (
    b"\n<br />\n<b>Notice</b>:  Undefined index: page in <b>/srv/sitemap.php</b> on line <b>41</b>"
    b"<br />\n"
)


@pytest.mark.parametrize(
    ("bend", "warning", "unreadable"),
    [
        (
            lambda doc: b"\r\n\n" + doc,
            "line 1: whitespace before the XML declaration (not well-formed XML): read without it",
            "XML declaration allowed only at the start",
        ),
        (
            lambda doc: doc + PHP_NOTICE,
            "line 2: text after the root element (not well-formed XML: Extra content at the end "
            "of the document): ignored",
            "Extra content at the end of the document",
        ),
    ],
    ids=["blank-line-before-the-declaration", "php-notice-after-the-root"],
)
def test_a_document_bent_around_its_root_element_is_read(
    tmp_path: Path, bend: Callable[[bytes], bytes], warning: str, unreadable: str
) -> None:
    """A generator's stray newline before `<?xml …?>` (PHP includes, templates), or a PHP
    notice printed after `</urlset>` once the sitemap was written: not well-formed XML, and the
    sync stopped on every run. A Destination moves the declaration before the blank lines (line
    numbers after it kept), or reads what the root element holds and ignores what follows;
    said once. `validate` still calls the document unreadable."""
    bodies = {"a.txt": b"alpha", "b.txt": b"beta"}
    dest = tmp_path / "dest"
    with hand_source() as src:
        listed = [
            f"<url><loc>{src.base}/{name}</loc>"
            f'<rs:md length="{len(body)}" hash="md5:{hashlib.md5(body).hexdigest()}"/></url>'
            for name, body in bodies.items()
        ]
        document = bend(_resourcelist("2024-05-01T10:00:00Z", listed))
        _serve(src, bodies, document)
        code, summary = cli_json("sync", src.base, dest)
        assert code == 0 and tree(dest) == bodies, summary
        said = [p["message"] for p in summary["sets"][0]["problems"]]
        assert said == [f"warning: {warning}"], said
        assert cli("audit", src.base, dest).exit_code == 0
        (tmp_path / "rl.xml").write_bytes(document)
        code, report = cli_json("validate", tmp_path / "rl.xml")
        assert code != 0 and report["unreadable"], report
        assert unreadable in str(report["unreadable"])
