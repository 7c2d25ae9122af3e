"""Issue 15.5: `validate` tells a Resource List's plain entries without making their
`Resource` (`EntryDecoder.plain`, `EntryRules.plain`). What it reports must be what checking
every entry whole reports: the same findings, in the same order, with the same lines and the
same counts. Documents of entries bent in every way the two paths could part on (each entry
drawn from a plain template and bent zero to three times, seeded) are validated both ways.
"""

from __future__ import annotations

import importlib
import random

import pytest

from resourcesync.hashing import ALGORITHMS, HEX_LENGTH, parse_hashes, plain_digest
from resourcesync.sitemap import validate
from resourcesync.sitemap.read import open_document
from resourcesync.sitemap.rules import entries as entry_rules
from resourcesync.sitemap.rules.findings import Finding
from resourcesync.sitemap.rules.values import Tally, ValueRules

#: The module (its name is also the function's, which the package exports).
validate_module = importlib.import_module("resourcesync.sitemap.rules.validate")
SM = "http://www.sitemaps.org/schemas/sitemap/0.9"
RS = "http://www.openarchives.org/rs/terms/"
HEAD = (
    f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{SM}" xmlns:rs="{RS}"\n'
    '    xmlns:x="http://example.org/ext">\n'
    '  <rs:ln rel="up" href="http://example.com/capabilitylist.xml"/>\n'
    '  <rs:md capability="{cap}" at="2026-01-02T00:00:00Z"/>\n'
)

#: Ways to bend one part of an entry: (part, replacement). `None` leaves the part out.
LOCS = [
    "  http://example.com/padded  ",
    "relative/path.txt",
    "ftp://example.com/file",
    "HTTP://EXAMPLE.COM/UPPER",
    "",
    "   ",
    None,
    "http://example.com/a space",
    "http://example.com/ideographic\u3000space",
    "http://example.com/a&amp;b",
    "http://",
    "http:///no-host",
    "https://example.com?query",
    "http://example.com/del\x7f",
    "http://example.com/nbsp\xa0x",
    "http://example.com/dup",
    "http://example.com/dup",
    "http://例え.jp/パス",
]
LASTMODS = [
    None,
    "",
    "2026-01-01T00:00:00",
    "2026-13-01T00:00:00Z",
    "2026-01-01",
    "2026",
    "2026-01-01T00:00:00.123456789Z",
    "2026-01-01T09:00:00+09:00",
    " 2026-01-01T00:00:00Z ",
    "2026-01-01 00:00:00Z",
    "2026-W01-1T00:00:00Z",
    "２０２６-01-01T00:00:00Z",
]
HASHES = [
    None,
    "sha-256:" + "a" * 64,
    "crc32:deadbeef",
    "MD5:" + "0" * 32,
    "md5:1B2M2Y8AsgTpgAmY7PhCfg==",
    "md5:" + "0" * 32 + " sha-1:" + "1" * 40,
    "md5:" + "0" * 31,
    "md5: " + "0" * 32,
    "md5:" + "0" * 32 + "\t",
    "md5:" + "A" * 32,
    "md5:",
    "",
    "sha-1:" + "0" * 32,
]
LENGTHS = [None, "１２", " 12", "-1", "12.0", "0", "1" * 101, "1" * 100, ""]
TYPES = [None, "", "text/plain", "not a type"]
OTHER_MD = [
    'change="updated"',
    'path="/a"',
    'capability="resourcelist"',
    'at="2026-01-01T00:00:00Z"',
    'datetime="2026-01-01T00:00:00Z"',
    'x:own="1"',
    'rs:hash="md5:' + "0" * 32 + '"',
    'encoding="gzip"',
    'unknown="1"',
]
EXTRAS = [
    '<rs:ln rel="alternate" href="http://example.com/alt"/>',
    "<changefreq>daily</changefreq>",
    "<changefreq>sometimes</changefreq>",
    "<priority>0.5</priority>",
    "<priority>2</priority>",
    "<x:thing>kept</x:thing>",
    "<!-- a comment -->",
    "<lastmod>2026-01-01T00:00:00Z</lastmod>",
    '<rs:md length="1"/>',
    "<loc>http://example.com/second-loc</loc>",
    "<x:wrap><url><loc>http://example.com/nested</loc></url></x:wrap>",
]


def entry(rng: random.Random, n: int) -> str:
    """One entry over several lines: plain, or bent up to three times."""
    loc: str | None = f"http://example.com/data/f{n:05d}.txt"
    lastmod: str | None = f"2026-01-01T00:{n % 60:02d}:00Z"
    md: dict[str, str | None] = {
        "hash": f"md5:{n:032x}",
        "length": str(100 + n),
        "type": "text/plain",
    }
    attrs = ""
    extras: list[str] = []
    for _ in range(rng.choice((0, 0, 1, 1, 2, 3))):
        part = rng.randrange(8)
        if part == 0:
            loc = rng.choice(LOCS)
        elif part == 1:
            lastmod = rng.choice(LASTMODS)
        elif part == 2:
            md["hash"] = rng.choice(HASHES)
        elif part == 3:
            md["length"] = rng.choice(LENGTHS)
        elif part == 4:
            md["type"] = rng.choice(TYPES)
        elif part == 5:
            key, _, value = rng.choice(OTHER_MD).partition("=")
            md[key] = value.strip('"')
        elif part == 6:
            extras.append(rng.choice(EXTRAS))
        else:
            attrs = rng.choice([' x:id="1"', ' id="1"'])
    lines = [f"  <url{attrs}>"]
    if loc is not None:
        lines.append(f"    <loc>{loc}</loc>")
    if lastmod is not None:
        lines.append(f"    <lastmod>{lastmod}</lastmod>")
    given = " ".join(f'{k}="{v}"' for k, v in md.items() if v is not None)
    if given or rng.random() < 0.1:
        lines.append(f"    <rs:md {given}/>")
    lines.extend(f"    {x}" for x in extras)
    lines.append("  </url>")
    return "\n".join(lines) + "\n"


def document(seed: int, entries: int, cap: str = "resourcelist") -> bytes:
    rng = random.Random(seed)
    body = "".join(entry(rng, rng.randrange(entries * 2)) for _ in range(entries))
    return (HEAD.format(cap=cap) + body + "</urlset>\n").encode("utf-8")


def findings(data: bytes, plain: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[object, ...]:
    monkeypatch.setattr(validate_module, "PLAIN", plain)
    report = validate(data)
    assert not report.unreadable, report.unreadable
    seen = tuple((f.level, f.rule, f.message, f.source, f.line, f.entry) for f in report.findings)
    return seen, tuple((d.capability, d.entries, d.errors, d.warnings) for d in report.documents)


@pytest.mark.parametrize("seed", range(40))
def test_plain_entries_are_reported_as_entries_checked_whole(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = document(seed, 120)
    plain = findings(data, True, monkeypatch)
    whole = findings(data, False, monkeypatch)
    assert plain == whole
    # The documents bend enough to mean something: findings of many kinds, and plain entries.
    assert len({f[1] for f in whole[0]}) >= 3 or seed % 10 == 9


def test_a_document_seldom_plain_is_decoded_whole_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    # Past a few more entries not plain than plain, the rest of the document is decoded whole
    # (`PLAIN_GIVE_UP`): the findings the same at every point of the switch.
    for give_up in (0, 2, 5):
        monkeypatch.setattr(validate_module, "PLAIN_GIVE_UP", give_up)
        for seed in range(4):
            data = document(300 + seed, 80)
            assert findings(data, True, monkeypatch) == findings(data, False, monkeypatch)


def test_the_duplicates_window_is_kept_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    # Past the window no <loc> is kept: the same on both paths (a small window, many entries).
    monkeypatch.setattr(entry_rules, "DUPLICATE_WINDOW", 7)
    for seed in range(5):
        data = document(100 + seed, 60)
        assert findings(data, True, monkeypatch) == findings(data, False, monkeypatch)


@pytest.mark.parametrize("cap", ["changelist", "resourcedump-manifest", "resourcelist-archive"])
def test_other_documents_are_checked_whole(cap: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = document(7, 40, cap)
    assert findings(data, True, monkeypatch) == findings(data, False, monkeypatch)


def test_a_plain_resource_list_is_valid_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    body = "".join(
        f"  <url><loc>http://example.com/{i}</loc><lastmod>2026-01-01T00:00:00Z</lastmod>"
        f'<rs:md hash="md5:{i:032x}" length="{i}" type="text/plain"/></url>\n'
        for i in range(2000)
    )
    data = (HEAD.format(cap="resourcelist") + body + "</urlset>\n").encode()
    seen, docs = findings(data, True, monkeypatch)
    assert seen == () and docs == (("resourcelist", 2000, 0, 0),)
    # And the second of two equal <loc>s far apart (past a chunk of input) is still found.
    twice = data.replace(b"http://example.com/1999<", b"http://example.com/3<")
    seen, docs = findings(twice, True, monkeypatch)
    assert [(s[1], s[4]) for s in seen] == [("core-duplicate-entry", 2005)]
    assert "(first on line 9)" in str(seen[0][2])


def test_what_the_decoder_calls_plain_decodes_with_nothing_to_say() -> None:
    """The decoder's side alone: a plain entry's `Resource` comes with no problem, and its
    `<loc>` is the one `plain` gave; an entry it does not call plain is left to `entry`."""
    said: list[str] = []
    for seed in range(20):
        data = document(200 + seed, 80)
        with open_document(data, on_problem=lambda m, line, e: said.append(m)) as reader:
            for batch in reader.element_batches():
                for line, el in batch:
                    loc = reader.plain(el)
                    before = len(said)
                    res = reader.decode(el, line)
                    if loc is not None:
                        assert len(said) == before, said[before:]
                        assert res.loc == loc


def test_a_plain_digest_is_read_as_written_and_has_nothing_to_say() -> None:
    rules_said: list[Finding] = []
    tally = Tally("t", rules_said.append)
    values = ValueRules(tally)
    for text in HASHES + [f"{a}:{'0' * n}" for a, n in HEX_LENGTH.items()]:
        if text is None or not plain_digest(text):
            continue
        algo, _, digest = text.partition(":")
        assert algo in ALGORITHMS
        assert parse_hashes(text) == {algo: digest}
        values.hashes(parse_hashes(text), 1, None)
    assert rules_said == []
    assert not plain_digest("md5:" + "0" * 32 + " ")
    assert not plain_digest("MD5:" + "0" * 32)
