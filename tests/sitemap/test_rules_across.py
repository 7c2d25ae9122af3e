"""Issue 13: the rules across documents (with follow), each with a tree that breaks it and the
consistent tree that keeps it. The trees are real files; the documents name each other by URL
and are found beside the file that lists them."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from resourcesync.cli import main
from resourcesync.sitemap import Report, validate
from tests.sitemap.test_http_read import Site, site  # noqa: F401 - its fixture
from tests.sitemap.test_rules import doc, sitemap, url

E = "http://example.com"
CAPS = f"{E}/capabilitylist.xml"
UP = f'<rs:ln rel="up" href="{CAPS}"/>'
UP_DESC = f'<rs:ln rel="up" href="{E}/.well-known/resourcesync"/>'
T1, T2, T3, T4 = (f"2013-01-0{d}T00:00:00Z" for d in (1, 2, 3, 4))


def change(loc: str, when: str) -> str:
    return url(f"{E}/{loc}", f'change="updated" datetime="{when}"')


def tree() -> dict[str, bytes]:
    """A consistent Source: description → capability list → resource list index (2 parts),
    change list index (3 parts, the last open), change list archive."""
    rl_md = f'capability="resourcelist" at="{T3}"'
    return {
        "sd.xml": doc(
            'capability="description"',
            url(CAPS, 'capability="capabilitylist"'),
            links=(),
        ),
        "capabilitylist.xml": doc(
            'capability="capabilitylist"',
            url(f"{E}/resourcelist.xml", 'capability="resourcelist"'),
            url(f"{E}/changelist.xml", 'capability="changelist"'),
            url(f"{E}/changelist-archive.xml", 'capability="changelist-archive"'),
            links=(UP_DESC,),
        ),
        "resourcelist.xml": doc(
            rl_md,
            sitemap(f"{E}/rl1.xml", f'at="{T3}"'),
            sitemap(f"{E}/rl2.xml", f'at="{T3}"'),
            links=(UP,),
            index=True,
        ),
        "rl1.xml": doc(rl_md, url(f"{E}/a"), links=(UP,)),
        "rl2.xml": doc(rl_md, url(f"{E}/b"), links=(UP,)),
        "changelist.xml": doc(
            f'capability="changelist" from="{T1}"',
            sitemap(f"{E}/cl1.xml", f'from="{T1}" until="{T2}"'),
            sitemap(f"{E}/cl2.xml", f'from="{T2}" until="{T3}"'),
            sitemap(f"{E}/cl3.xml", f'from="{T3}"'),
            links=(UP,),
            index=True,
        ),
        "cl1.xml": doc(f'capability="changelist" from="{T1}" until="{T2}"', change("a", T1)),
        "cl2.xml": doc(f'capability="changelist" from="{T2}" until="{T3}"', change("a", T2)),
        "cl3.xml": doc(f'capability="changelist" from="{T3}"', change("a", T3)),
        "changelist-archive.xml": doc(
            'capability="changelist-archive"',
            url(f"{E}/cl1.xml", f'from="{T1}" until="{T2}"'),
            url(f"{E}/cl2.xml", f'from="{T2}" until="{T3}"'),
            links=(UP,),
        ),
    }


def write(tmp_path: Path, docs: dict[str, bytes]) -> Path:
    for name, data in docs.items():
        (tmp_path / name).write_bytes(data)
    return tmp_path / "sd.xml"


def rules(report: Report) -> list[tuple[str, str]]:
    """(rule, document file name) of every finding."""
    return [(f.rule, Path(f.source).name) for f in report.findings]


def test_a_consistent_source_is_clean_and_every_document_is_read(tmp_path: Path) -> None:
    report = validate([write(tmp_path, tree())], follow=True)
    assert report.findings == [], [str(f) for f in report.findings]
    assert report.unreadable == []
    assert len(report.documents) == len(tree())


def test_an_index_part_of_another_capability_is_an_error(tmp_path: Path) -> None:
    docs = tree()
    docs["rl2.xml"] = doc(f'capability="changelist" from="{T1}"', change("b", T1), links=(UP,))
    report = validate([write(tmp_path, docs)], follow=True)
    assert ("core-index-part-capability", "rl2.xml") in rules(report)
    f = next(f for f in report.findings if f.rule == "core-index-part-capability")
    assert "resourcelist.xml:5 lists it as a resourcelist" in f.message


def test_times_on_an_index_entry_equal_the_parts_own(tmp_path: Path) -> None:
    docs = tree()
    docs["rl1.xml"] = doc(f'capability="resourcelist" at="{T4}"', url(f"{E}/a"), links=(UP,))
    report = validate([write(tmp_path, docs)], follow=True)
    assert rules(report) == [("core-index-part-times", "rl1.xml")]
    assert f"its at is {T4}, but the index entry" in report.findings[0].message


def test_an_open_change_list_must_be_the_last(tmp_path: Path) -> None:
    docs = tree()
    docs["cl2.xml"] = doc(f'capability="changelist" from="{T2}"', change("a", T2))
    report = validate([write(tmp_path, docs)], follow=True)
    assert sorted(rules(report)) == [
        ("core-12.2-open-last", "changelist.xml"),
        # The index entry still says until: it disagrees with the part.
        ("core-index-part-times", "cl2.xml"),
    ]


def test_a_gap_between_consecutive_change_lists_is_an_error(tmp_path: Path) -> None:
    docs = tree()
    later = "2013-01-02T06:00:00Z"
    docs["cl2.xml"] = doc(f'capability="changelist" from="{later}" until="{T3}"', change("a", T3))
    docs["changelist.xml"] = docs["changelist.xml"].replace(
        f'cl2.xml</loc><rs:md from="{T2}"'.encode(), f'cl2.xml</loc><rs:md from="{later}"'.encode()
    )
    report = validate([write(tmp_path, docs)], follow=True)
    assert ("core-12.2-gap", "changelist.xml") in rules(report)
    assert ("core-12.2-gap", "changelist-archive.xml") in rules(report)


def test_a_capability_list_entry_has_the_capability_it_claims(tmp_path: Path) -> None:
    docs = tree()
    docs["capabilitylist.xml"] = docs["capabilitylist.xml"].replace(
        b'resourcelist.xml</loc><rs:md capability="resourcelist"',
        b'resourcelist.xml</loc><rs:md capability="resourcedump"',
    )
    report = validate([write(tmp_path, docs)], follow=True)
    assert ("core-9.2-capability-claimed", "resourcelist.xml") in rules(report)


def test_up_points_at_the_document_that_lists_it(tmp_path: Path) -> None:
    docs = tree()
    elsewhere = f'<rs:ln rel="up" href="{E}/other/capabilitylist.xml"/>'
    docs["rl2.xml"] = doc(f'capability="resourcelist" at="{T3}"', url(f"{E}/b"), links=(elsewhere,))
    docs["changelist.xml"] = docs["changelist.xml"].replace(UP.encode(), elsewhere.encode())
    report = validate([write(tmp_path, docs)], follow=True)
    found = rules(report)
    # The index points up elsewhere than the Capability List that lists it; its part does not
    # point where the index points.
    assert ("core-up-target", "changelist.xml") in found
    assert ("core-up-target", "rl2.xml") in found
    f = next(f for f in report.findings if Path(f.source).name == "changelist.xml")
    assert CAPS in f.message


def test_an_archive_lists_documents_of_its_capability(tmp_path: Path) -> None:
    docs = tree()
    docs["changelist-archive.xml"] = doc(
        'capability="changelist-archive"',
        url(f"{E}/rl1.xml", f'from="{T1}"'),
        links=(UP,),
    )
    report = validate([write(tmp_path, docs)], follow=True)
    assert ("archives-capability", "rl1.xml") in rules(report)


def test_the_command_follows_from_a_description_by_default_and_not_with_no_follow(
    tmp_path: Path,
) -> None:
    docs = tree()
    docs["rl2.xml"] = doc(f'capability="changelist" from="{T1}"', change("b", T1), links=(UP,))
    sd = write(tmp_path, docs)
    runner = CliRunner()
    result = runner.invoke(main, ["validate", str(sd), "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert len(report["documents"]) == len(docs)
    assert "core-index-part-capability" in {f["rule"] for f in report["findings"]}
    result = runner.invoke(main, ["validate", str(sd), "--json", "--no-follow"])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["documents"]) == 1
    # A Resource List index given alone is not followed unless asked.
    result = runner.invoke(main, ["validate", str(tmp_path / "resourcelist.xml"), "--json"])
    assert len(json.loads(result.stdout)["documents"]) == 1
    result = runner.invoke(
        main, ["validate", str(tmp_path / "resourcelist.xml"), "--json", "--follow"]
    )
    assert result.exit_code == 1
    assert len(json.loads(result.stdout)["documents"]) == 3


def test_over_http_up_links_are_checked_against_the_urls_documents_were_fetched_from(
    site: Site,  # noqa: F811 - test_http_read's fixture
) -> None:
    """Over HTTP a document's URL is where it was fetched from: a listed document's up link
    must name it (core 1.1 §10.1); the Capability List is followed by default."""

    def rl(up: str) -> bytes:
        return doc(
            f'capability="resourcelist" at="{T3}"',
            url("{base}/res1"),
            links=(f'<rs:ln rel="up" href="{up}"/>',),
        )

    site.xml(
        "/capabilitylist.xml",
        doc(
            'capability="capabilitylist"',
            url("{base}/good.xml", 'capability="resourcelist"'),
            url("{base}/bad.xml", 'capability="changelist"'),
            links=('<rs:ln rel="up" href="{base}/.well-known/resourcesync"/>',),
        ),
    )
    site.xml("/good.xml", rl("{base}/capabilitylist.xml"))
    site.xml("/bad.xml", rl("{base}/elsewhere/capabilitylist.xml"))
    result = CliRunner().invoke(main, ["validate", site.url("/capabilitylist.xml"), "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    found = sorted((f["rule"], f["source"]) for f in report["findings"])
    assert found == [
        ("core-9.2-capability-claimed", site.url("/bad.xml")),
        ("core-up-target", site.url("/bad.xml")),
    ]
    up = next(f for f in report["findings"] if f["rule"] == "core-up-target")
    assert site.url("/capabilitylist.xml") in up["message"]


def test_overlapping_change_lists_are_an_error(tmp_path: Path) -> None:
    docs = tree()
    earlier = "2013-01-01T18:00:00Z"
    docs["cl2.xml"] = doc(f'capability="changelist" from="{earlier}" until="{T3}"', change("a", T2))
    docs["changelist.xml"] = docs["changelist.xml"].replace(
        f'cl2.xml</loc><rs:md from="{T2}"'.encode(),
        f'cl2.xml</loc><rs:md from="{earlier}"'.encode(),
    )
    report = validate([write(tmp_path, docs)], follow=True)
    assert ("core-12.2-overlap", "changelist.xml") in rules(report)
    assert ("core-12.2-overlap", "changelist-archive.xml") in rules(report)
