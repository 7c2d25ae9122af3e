"""The conformance rules of `resourcesync.sitemap.rules`, each shown by a small document that
breaks it and one that keeps it.

Section numbers are those of ResourceSync core 1.1 (Z39.99-2017), Archives 0.9.1 and Change
Notification 1.0.1. Every finding is checked for its level, its line and its message.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from resourcesync.sitemap import Report, validate
from resourcesync.sitemap.rules import ERROR, WARNING, Finding
from tests.conftest import (
    framework_spec_examples,
    needs_specs,
    notification_spec_examples,
    spec_example_files,
)

SM = "http://www.sitemaps.org/schemas/sitemap/0.9"
RS = "http://www.openarchives.org/rs/terms/"
UP = '<rs:ln rel="up" href="http://example.com/capabilitylist.xml"/>'
UP_DESC = '<rs:ln rel="up" href="http://example.com/.well-known/resourcesync"/>'


# -- building documents -------------------------------------------------------------------------


def url(loc: str | None = "http://example.com/res1", md: str | None = None, extra: str = "") -> str:
    """One entry on one line, so the entry, its rs:md and its rs:ln share a line number."""
    parts = ["<url>"]
    if loc is not None:
        parts.append(f"<loc>{loc}</loc>")
    parts.append(extra)
    if md is not None:
        parts.append(f"<rs:md {md}/>")
    parts.append("</url>")
    return "".join(parts)


def sitemap(loc: str, md: str | None = None, extra: str = "") -> str:
    return url(loc, md, extra).replace("<url>", "<sitemap>").replace("</url>", "</sitemap>")


def doc(
    md: str | None, *entries: str, links: tuple[str, ...] = (UP,), index: bool = False
) -> bytes:
    """A document, one element per line: root, rs:md, links, entries."""
    root = "sitemapindex" if index else "urlset"
    lines = [f'<{root} xmlns="{SM}" xmlns:rs="{RS}">']
    if md is not None:
        lines.append(f"<rs:md {md}/>")
    lines.extend(links)
    lines.extend(entries)
    lines.append(f"</{root}>")
    return ("\n".join(lines) + "\n").encode("utf-8")


def line_of(data: bytes, marker: str, nth: int = 1) -> int:
    """The 1-based line on which `marker` occurs for the nth time."""
    seen = 0
    for number, line in enumerate(data.decode("utf-8").splitlines(), 1):
        if marker in line:
            seen += 1
            if seen == nth:
                return number
    raise AssertionError(f"{marker!r} not in the document")


def check(data: bytes) -> Report:
    report = validate([data])
    assert not report.unreadable, report.unreadable
    return report


def only(report: Report, level: str, fragment: str) -> Finding:
    """The one finding of this level whose message contains `fragment`."""
    hits = [f for f in report.findings if f.level == level and fragment in f.message]
    assert len(hits) == 1, (fragment, [str(f) for f in report.findings])
    return hits[0]


def clean(report: Report) -> None:
    assert report.findings == [], [str(f) for f in report.findings]
    assert report.ok


RL = 'capability="resourcelist" at="2013-01-03T09:00:00Z"'
CL = 'capability="changelist" from="2013-01-02T00:00:00Z"'
CAPLIST = 'capability="capabilitylist"'


# -- the document-level rs:md (§7) --------------------------------------------------------------


def test_missing_document_md_is_an_error_on_line_1() -> None:
    report = check(doc(None, url()))
    f = only(report, ERROR, "has no <rs:md> child")
    assert f.line == 1
    assert "urlset" in f.message
    assert not report.ok


def test_missing_document_md_in_an_index_names_the_sitemapindex() -> None:
    f = only(check(doc(None, sitemap("http://example.com/p1.xml"), index=True)), ERROR, "<rs:md>")
    assert "sitemapindex" in f.message


def test_missing_capability_is_an_error_on_the_md_line() -> None:
    data = doc('at="2013-01-03T09:00:00Z"', url())
    f = only(check(data), ERROR, "no capability attribute")
    assert f.line == line_of(data, "<rs:md")


def test_unknown_capability_is_an_error() -> None:
    data = doc('capability="resourcelistt" at="2013-01-03T09:00:00Z"', url())
    f = only(check(data), ERROR, "unknown capability 'resourcelistt'")
    assert f.line == 2


def test_a_valid_resource_list_has_no_findings() -> None:
    clean(check(doc(RL, url("http://example.com/res1"), url("http://example.com/res2"))))


@pytest.mark.parametrize(
    "cap", ["capabilitylist", "change-notification", "resourcedump-manifest", "changedump-manifest"]
)
def test_documents_that_are_never_an_index(cap: str) -> None:
    data = doc(
        f'capability="{cap}" at="2013-01-03T09:00:00Z" from="2013-01-03T09:00:00Z"',
        sitemap("http://example.com/p1.xml"),
        index=True,
    )
    f = only(check(data), ERROR, "is never a <sitemapindex>")
    assert cap in f.message
    assert f.line == 2


def test_more_than_one_document_md_is_an_error() -> None:
    data = doc(RL, url(), links=(UP, '<rs:md capability="resourcelist"/>'))
    f = only(check(data), ERROR, "more than one document-level <rs:md>")
    assert f.line == 4


# -- Appendix A: time attributes per document type ----------------------------------------------


@pytest.mark.parametrize(
    ("md", "index", "fragment"),
    [
        ('capability="resourcelist"', False, "document <rs:md> needs at in a resourcelist"),
        ('capability="resourcelist"', True, "needs at in a resourcelist index"),
        ('capability="resourcedump"', False, "needs at in a resourcedump"),
        ('capability="resourcedump-manifest"', False, "needs at in a resourcedump-manifest"),
        ('capability="changelist"', False, "document <rs:md> needs from in a changelist"),
        ('capability="changelist"', True, "needs from in a changelist index"),
        ('capability="changedump"', False, "needs from in a changedump"),
        ('capability="changedump-manifest"', False, "needs from in a changedump-manifest"),
        ('capability="change-notification"', False, "needs from in a change-notification"),
    ],
)
def test_mandatory_document_times(md: str, index: bool, fragment: str) -> None:
    entry = sitemap("http://example.com/p.xml") if index else url()
    data = doc(md, entry, index=index)
    f = only(check(data), ERROR, fragment)
    assert f.line == 2
    assert f.entry is None


@pytest.mark.parametrize(
    ("md", "fragment"),
    [
        (f'{RL} from="2013-01-01T00:00:00Z"', "from is not used on the document of a resourcelist"),
        (f'{CL} at="2013-01-03T00:00:00Z"', "at is not used on the document of a changelist"),
    ],
)
def test_document_times_that_are_not_used_are_warnings(md: str, fragment: str) -> None:
    entry = (
        url(md='change="created" datetime="2013-01-03T00:00:00Z"') if "changelist" in md else url()
    )
    report = check(doc(md, entry))
    f = only(report, WARNING, fragment)
    assert f.line == 2
    assert report.errors == []


@pytest.mark.parametrize(
    ("md", "fragment"),
    [
        (f'{CL} completed="2013-01-03T00:00:00Z"', "completed"),
        (f'{RL} until="2013-01-04T00:00:00Z"', "until"),
    ],
)
def test_companion_times_that_are_not_used_are_warnings(md: str, fragment: str) -> None:
    report = check(doc(md))
    assert [f.line for f in report.findings if fragment in f.message] == [2]


def test_change_order_compares_instants_across_zone_offsets() -> None:
    data = doc(
        CL,
        change("res1", "2013-01-02T11:00:00Z"),
        change("res2", "2013-01-02T12:00:00+02:00"),  # 10:00 UTC: earlier
    )
    f = only(check(data), ERROR, "out of chronological order")
    assert "2013-01-02T10:00:00Z after 2013-01-02T11:00:00Z" in f.message
    clean(
        check(
            doc(
                CL,
                change("res1", "2013-01-02T11:00:00Z"),
                change("res2", "2013-01-02T12:30:00+01:00"),
            )
        )
    )


def test_at_on_a_resource_list_entry_is_not_used() -> None:
    data = doc(RL, url(md='at="2013-01-01T00:00:00Z"'))
    f = only(check(data), WARNING, "at is not used on the entry of a resourcelist")
    assert f.line == 4
    assert f.entry == "http://example.com/res1"


def test_change_list_index_part_without_from_is_a_warning() -> None:
    data = doc(
        CL,
        sitemap(
            "http://example.com/cl1.xml", 'capability="changelist" from="2013-01-02T00:00:00Z"'
        ),
        sitemap("http://example.com/cl2.xml", 'capability="changelist"'),
        index=True,
    )
    report = check(data)
    f = only(report, WARNING, "entry <rs:md> should have from in a changelist")
    assert f.line == line_of(data, "cl2.xml")
    assert f.entry == "http://example.com/cl2.xml"
    assert report.errors == []


def test_a_complete_change_list_index_is_clean() -> None:
    clean(
        check(
            doc(
                CL,
                sitemap("http://example.com/cl1.xml", 'capability="changelist" from="2013-01-02"'),
                sitemap("http://example.com/cl2.xml", 'capability="changelist" from="2013-01-03"'),
                index=True,
            )
        )
    )


def test_resource_list_archive_entry_without_at_is_a_warning() -> None:
    data = doc(
        'capability="resourcelist-archive"',
        url("http://example.com/rl1.xml", 'at="2013-01-01T00:00:00Z"'),
        url("http://example.com/rl2.xml"),
    )
    f = only(check(data), WARNING, "entry <rs:md> should have at in a resourcelist-archive")
    assert f.line == line_of(data, "rl2.xml")


def test_completed_before_at_is_an_error() -> None:
    data = doc(f'{RL} completed="2013-01-03T08:59:59Z"', url())
    f = only(check(data), ERROR, "completed 2013-01-03T08:59:59Z is before at 2013-01-03T09:00:00Z")
    assert f.line == 2


def test_completed_after_at_is_fine() -> None:
    clean(check(doc(f'{RL} completed="2013-01-03T09:00:01Z"', url())))


def test_completed_without_at_is_an_error() -> None:
    report = check(doc('capability="resourcelist" completed="2013-01-03T09:00:00Z"', url()))
    assert only(report, ERROR, "completed without at").line == 2
    only(report, ERROR, "needs at")


def test_until_before_from_is_an_error() -> None:
    data = doc(f'{CL} until="2013-01-01T00:00:00Z"')
    f = only(check(data), ERROR, "until 2013-01-01T00:00:00Z is before from 2013-01-02T00:00:00Z")
    assert f.line == 2


def test_until_before_from_on_an_archive_entry_is_an_error() -> None:
    data = doc(
        'capability="changelist-archive"',
        url(
            "http://example.com/cl1.xml",
            'from="2013-01-02T00:00:00Z" until="2013-01-01T00:00:00Z"',
        ),
    )
    f = only(check(data), ERROR, "is before from")
    assert f.line == 4
    assert f.entry == "http://example.com/cl1.xml"


def test_until_after_from_is_fine() -> None:
    clean(check(doc(f'{CL} until="2013-01-03T00:00:00Z"')))


# -- change documents (§12, §13, Change Notification) ------------------------------------------

CHANGE_DOCS = {
    "changelist": CL,
    "changedump-manifest": 'capability="changedump-manifest" from="2013-01-02T00:00:00Z"',
    "change-notification": (
        'capability="change-notification" from="2013-01-02T00:00:00Z" until="2013-01-03T00:00:00Z"'
    ),
}


def change(loc: str, when: str, kind: str | None = "updated", path: str = "/p") -> str:
    md = f'datetime="{when}"'
    if kind is not None:
        md = f'change="{kind}" {md}'
    return url(f"http://example.com/{loc}", f'{md} path="{path}"')


@pytest.mark.parametrize("cap", sorted(CHANGE_DOCS))
def test_change_missing_is_an_error(cap: str) -> None:
    data = doc(
        CHANGE_DOCS[cap],
        change("res1", "2013-01-02T10:00:00Z"),
        change("res2", "2013-01-02T11:00:00Z", kind=None),
    )
    f = only(check(data), ERROR, f"a {cap} entry needs rs:md change")
    assert f.line == line_of(data, "res2")
    assert f.entry == "http://example.com/res2"


@pytest.mark.parametrize("cap", sorted(CHANGE_DOCS))
def test_change_invalid_is_an_error(cap: str) -> None:
    data = doc(CHANGE_DOCS[cap], change("res1", "2013-01-02T10:00:00Z", kind="modified"))
    f = only(check(data), ERROR, "change 'modified' is not created, updated or deleted")
    assert f.line == 4


@pytest.mark.parametrize("cap", sorted(CHANGE_DOCS))
def test_changes_out_of_order_are_an_error(cap: str) -> None:
    data = doc(
        CHANGE_DOCS[cap],
        change("res1", "2013-01-02T10:00:00Z", "created"),
        change("res2", "2013-01-02T12:00:00Z", "created"),
        change("res3", "2013-01-02T11:00:00Z", "deleted"),
    )
    f = only(check(data), ERROR, "changes out of chronological order")
    assert f.line == line_of(data, "res3")
    assert f.entry == "http://example.com/res3"
    assert f"(line {line_of(data, 'res2')})" in f.message
    assert "2013-01-02T11:00:00Z after 2013-01-02T12:00:00Z" in f.message


@pytest.mark.parametrize("cap", sorted(CHANGE_DOCS))
def test_changes_in_order_are_clean(cap: str) -> None:
    data = doc(
        CHANGE_DOCS[cap],
        change("res1", "2013-01-02T10:00:00Z", "created"),
        change("res2", "2013-01-02T10:00:00Z", "updated"),  # the same time is in order
        change("res1", "2013-01-02T11:00:00Z", "deleted"),
        links=() if cap == "change-notification" else (UP,),
    )
    clean(check(data))


def test_lastmod_is_not_a_change_time_so_never_out_of_order() -> None:
    """Issue 10.3, core 1.1 §7 and Example 19's shape: an entry with <lastmod> and no
    rs:md@datetime has an unknown change time (lastmod is the resource's Last-Modified: a
    `created` entry may well carry a lastmod of 2000), so no "out of order" from lastmod."""
    data = doc(
        CL,
        url("http://example.com/a", 'change="updated"', "<lastmod>2013-01-02T12:00:00Z</lastmod>"),
        url("http://example.com/b", 'change="created"', "<lastmod>2000-01-01T01:01:00Z</lastmod>"),
        url("http://example.com/c", 'change="updated"', "<lastmod>2013-01-02T11:00:00Z</lastmod>"),
    )
    clean(check(data))
    # The datetime, when it is there, is the change time and is ordered.
    dated = doc(
        CL,
        url("http://example.com/a", 'change="updated" datetime="2013-01-02T12:00:00Z"'),
        url("http://example.com/b", 'change="created"', "<lastmod>2000-01-01T01:01:00Z</lastmod>"),
        url("http://example.com/c", 'change="updated" datetime="2013-01-02T11:00:00Z"'),
    )
    f = only(check(dated), ERROR, "out of chronological order")
    assert f.line == line_of(dated, "/c<")
    assert f.rule == "core-12.1-change-order"


def test_change_dump_manifest_entry_needs_path_unless_deleted() -> None:
    cap = CHANGE_DOCS["changedump-manifest"]
    data = doc(
        cap,
        url("http://example.com/res1", 'change="deleted" datetime="2013-01-02T10:00:00Z"'),
        url("http://example.com/res2", 'change="updated" datetime="2013-01-02T11:00:00Z"'),
    )
    f = only(check(data), ERROR, "a Change Dump Manifest entry needs rs:md path")
    assert f.line == line_of(data, "res2")


def test_change_datetime_before_from_is_an_error() -> None:
    data = doc(CL, change("res1", "2013-01-01T23:59:59Z"))
    f = only(
        check(data),
        ERROR,
        "change datetime 2013-01-01T23:59:59Z is before the document's from 2013-01-02T00:00:00Z",
    )
    assert f.line == 4


def test_change_datetime_after_until_is_an_error() -> None:
    data = doc(f'{CL} until="2013-01-03T00:00:00Z"', change("res1", "2013-01-03T00:00:01Z"))
    f = only(check(data), ERROR, "is after the document's until 2013-01-03T00:00:00Z")
    assert f.line == 4


def test_change_datetime_on_the_bounds_is_fine() -> None:
    clean(
        check(
            doc(
                f'{CL} until="2013-01-03T00:00:00Z"',
                change("res1", "2013-01-02T00:00:00Z"),
                change("res2", "2013-01-03T00:00:00Z"),
            )
        )
    )


@pytest.mark.parametrize("cap", ["changelist-archive", "changedump-archive"])
def test_change_archives_are_ordered_by_from(cap: str) -> None:
    data = doc(
        f'capability="{cap}"',
        url("http://example.com/c1.xml", 'from="2013-01-01T00:00:00Z" until="2013-01-02"'),
        url("http://example.com/c3.xml", 'from="2013-01-03T00:00:00Z"'),
        url("http://example.com/c2.xml", 'from="2013-01-02T00:00:00Z" until="2013-01-03"'),
    )
    f = only(check(data), ERROR, "Change Lists in an archive out of chronological order")
    assert f.line == line_of(data, "c2.xml")


@pytest.mark.parametrize("cap", ["changelist-archive", "changedump-archive"])
def test_change_archive_in_order_is_clean(cap: str) -> None:
    data = doc(
        f'capability="{cap}"',
        url("http://example.com/c1.xml", 'from="2013-01-01T00:00:00Z" until="2013-01-02"'),
        url("http://example.com/c2.xml", 'from="2013-01-02T00:00:00Z"'),
    )
    clean(check(data))


def test_change_index_parts_out_of_order_is_an_error() -> None:
    """Core 1.1 §12.2: the parts of a Change List Index must be in chronological order."""
    data = doc(
        CL,
        sitemap("http://example.com/cl2.xml", 'capability="changelist" from="2013-01-03"'),
        sitemap("http://example.com/cl1.xml", 'capability="changelist" from="2013-01-02"'),
        index=True,
    )
    report = check(data)
    f = only(report, ERROR, "parts of a change index out of chronological order")
    assert f.line == line_of(data, "cl1.xml")
    assert f.rule == "core-12.2-index-order"


def test_index_part_with_another_capability_is_an_error() -> None:
    data = doc(RL, sitemap("http://example.com/p.xml", 'capability="changelist"'), index=True)
    f = only(check(data), ERROR, "an index of a resourcelist lists a part with capability")
    assert f.line == 4


def test_change_on_a_resource_list_entry_is_a_warning() -> None:
    f = only(check(doc(RL, url(md='change="created"'))), WARNING, "change is not used in a")
    assert f.line == 4


# -- Capability List (§9.2) and Source Description (§8) ---------------------------------------


def cap_entry(name: str, cap: str | None, extra: str = "") -> str:
    md = f'capability="{cap}"' if cap is not None else None
    return url(f"http://example.com/{name}.xml", md, extra)


def caplist(*entries: str) -> bytes:
    return doc(CAPLIST, *entries, links=(UP_DESC,))


def test_a_valid_capability_list_is_clean() -> None:
    hub = '<rs:ln rel="hub" href="http://example.com/hub"/>'
    clean(
        check(
            caplist(
                cap_entry("resourcelist", "resourcelist"),
                cap_entry("changelist", "changelist"),
                cap_entry("notify", "change-notification", hub),
            )
        )
    )


def test_capability_list_entry_without_capability() -> None:
    data = caplist(cap_entry("resourcelist", "resourcelist"), cap_entry("what", None))
    f = only(check(data), ERROR, "a Capability List entry needs rs:md capability")
    assert f.line == line_of(data, "what.xml")


def test_capability_list_entry_with_unknown_capability() -> None:
    data = caplist(cap_entry("what", "sitemap"))
    f = only(check(data), ERROR, "unknown capability 'sitemap' in a Capability List")
    assert f.line == 4


def test_capability_listed_twice() -> None:
    data = caplist(
        cap_entry("rl1", "resourcelist"),
        cap_entry("cl", "changelist"),
        cap_entry("rl2", "resourcelist"),
    )
    f = only(check(data), ERROR, "capability 'resourcelist' is listed twice")
    assert f.line == line_of(data, "rl2.xml")
    assert f"first on line {line_of(data, 'rl1.xml')}" in f.message


@pytest.mark.parametrize("cap", ["description", "capabilitylist"])
def test_capability_list_does_not_list_a_description_or_capability_list(cap: str) -> None:
    data = caplist(cap_entry("other", cap))
    f = only(check(data), ERROR, f"a Capability List does not list a {cap}")
    assert f.line == 4


def test_change_notification_channel_without_hub() -> None:
    data = caplist(cap_entry("notify", "change-notification"))
    f = only(check(data), ERROR, 'needs <rs:ln rel="hub">')
    assert f.line == 4


def test_capability_list_without_up_is_an_error() -> None:
    """Core 1.1 §9.2: the up link to the Source Description is mandatory."""
    data = doc(CAPLIST, cap_entry("resourcelist", "resourcelist"), links=())
    f = only(check(data), ERROR, 'no <rs:ln rel="up"> to the Source Description')
    assert f.line == 2
    assert "recommended" not in f.message
    assert f.rule == "core-up-missing"


def test_source_description_entries_are_capability_lists_and_rs_md_is_optional() -> None:
    """Core 1.1 §8: an entry's rs:md is optional; when there, it says capabilitylist."""
    data = doc(
        'capability="description"',
        cap_entry("caplist1", "capabilitylist"),
        cap_entry("rl", "resourcelist"),
        cap_entry("none", None),
        links=(),
    )
    report = check(data)
    errors = [f for f in report.errors if "a Source Description entry has" in f.message]
    assert [(f.line, f.entry) for f in errors] == [
        (line_of(data, "rl.xml"), "http://example.com/rl.xml"),
    ]
    assert "found 'resourcelist'" in errors[0].message
    assert report.errors == errors


def test_a_source_description_needs_no_up_link() -> None:
    clean(check(doc('capability="description"', cap_entry("c", "capabilitylist"), links=())))


# -- manifests and dumps (§11, §13) ------------------------------------------------------------

RDM = 'capability="resourcedump-manifest" at="2013-01-03T09:00:00Z"'


def test_resource_dump_manifest_entry_needs_path() -> None:
    data = doc(RDM, url("http://example.com/res1", 'path="/res1"'), url("http://example.com/res2"))
    f = only(check(data), ERROR, "a Resource Dump Manifest entry needs rs:md path")
    assert f.line == line_of(data, "res2")
    assert f.entry == "http://example.com/res2"


def test_path_must_begin_with_a_slash() -> None:
    data = doc(RDM, url("http://example.com/res1", 'path="resources/res1"'))
    f = only(check(data), ERROR, "rs:md path 'resources/res1' must begin with /")
    assert f.line == 4


def test_a_valid_resource_dump_manifest_is_clean() -> None:
    clean(check(doc(RDM, url("http://example.com/res1", 'path="/resources/res1"'))))


def test_resource_dump_package_without_type_length_manifest_warns() -> None:
    data = doc('capability="resourcedump" at="2013-01-03T09:00:00Z"', url("http://e.com/d.zip"))
    report = check(data)
    for fragment in ("should give its type", "should give its length", 'rel="contents"'):
        assert only(report, WARNING, fragment).line == 4
    assert report.errors == []
    complete = url(
        "http://e.com/d.zip",
        'type="application/zip" length="4765"',
        '<rs:ln rel="contents" href="http://e.com/manifest.xml" type="application/xml"/>',
    )
    clean(check(doc('capability="resourcedump" at="2013-01-03T09:00:00Z"', complete)))


# -- links (§14 pri; up links) -----------------------------------------------------------------


@pytest.mark.parametrize("pri", ["0", "1000000"])
def test_pri_outside_range_is_an_error(pri: str) -> None:
    ln = f'<rs:ln rel="duplicate" href="http://mirror.example.com/res1" pri="{pri}"/>'
    data = doc(RL, url(extra=ln))
    f = only(check(data), ERROR, f"rs:ln pri {pri} is outside 1..999999")
    assert f.line == 4
    assert f.entry == "http://example.com/res1"


def test_pri_on_the_bounds_is_fine() -> None:
    lns = "".join(
        f'<rs:ln rel="duplicate" href="http://m{p}.example.com/res1" pri="{p}"/>'
        for p in (1, 999999)
    )
    clean(check(doc(RL, url(extra=lns))))


def test_pri_negative_is_an_error() -> None:
    ln = '<rs:ln rel="duplicate" href="http://mirror.example.com/res1" pri="-1"/>'
    f = only(check(doc(RL, url(extra=ln))), ERROR, "rs:ln pri: '-1' is not a non-negative integer")
    assert f.line == 4


def test_link_without_href_is_an_error() -> None:
    data = doc(RL, url(extra='<rs:ln rel="duplicate"/>'))
    f = only(check(data), ERROR, "<rs:ln> needs both rel and href")
    assert f.line == 4


def test_relative_link_href_is_a_warning() -> None:
    data = doc(RL, url(extra='<rs:ln rel="duplicate" href="/res1-copy"/>'))
    f = only(check(data), WARNING, "rs:ln href '/res1-copy' is not an absolute URI")
    assert f.line == 4


@pytest.mark.parametrize(
    "md",
    [
        RL,
        CL,
        'capability="resourcedump" at="2013-01-03T09:00:00Z"',
        'capability="resourcelist-archive"',
        'capability="resourcedump-manifest" at="2013-01-03T09:00:00Z"',
        'capability="changedump-manifest" from="2013-01-03T09:00:00Z"',
    ],
)
def test_missing_up_link_is_an_error_in_core_documents(md: str) -> None:
    """Core 1.1 §10–13: the up link is mandatory (errors, not "recommended"); the Archives
    spec does not mandate it (a warning)."""
    report = check(doc(md, links=()))
    level = WARNING if "archive" in md else ERROR
    f = only(report, level, 'no <rs:ln rel="up"> to the Capability List')
    assert f.line == 2
    assert "recommended" not in f.message
    assert len(report.findings) == 1
    assert not [f for f in check(doc(md)).findings if "up" in f.message]


def test_change_notification_needs_no_up_link() -> None:
    data = doc(CHANGE_DOCS["change-notification"], change("r", "2013-01-02T10:00:00Z"), links=())
    clean(check(data))


def test_header_element_between_entries_is_a_warning() -> None:
    data = doc(
        RL,
        url("http://example.com/res1"),
        '<rs:ln rel="describedby" href="http://example.com/info"/>',
        url("http://example.com/res2"),
    )
    report = check(data)
    f = only(report, WARNING, "document-level <rs:md>/<rs:ln> after the entries")
    assert f.line == line_of(data, "/info")
    assert report.errors == []


def test_header_element_after_the_last_entry_is_a_warning() -> None:
    data = doc(
        RL,
        url("http://example.com/res1"),
        '<rs:ln rel="describedby" href="http://example.com/info"/>',
    )
    f = only(check(data), WARNING, "after the entries")
    assert f.line == line_of(data, "/info")


def test_header_element_between_entries_past_the_first_chunk_is_a_warning() -> None:
    many = [url(f"http://example.com/r{i}") for i in range(10_000)]
    late = '<rs:ln rel="describedby" href="http://example.com/info"/>'
    data = doc(RL, *many, late, url("http://example.com/last"))
    f = only(check(data), WARNING, "after the entries")
    assert f.line == line_of(data, "/info")


# -- values: datetimes, numbers, hashes, <loc> -------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        (url(extra="<lastmod>2013-13-01</lastmod>"), "lastmod: "),
        (url(extra="<lastmod>yesterday</lastmod>"), "lastmod: not a W3C datetime: 'yesterday'"),
        (url(extra="<lastmod>2013-01-02T10:00:00</lastmod>"), "lastmod: "),
        (url(md='datetime="2013-02-30T00:00:00Z"'), "rs:md datetime: "),
        (url(md='length="12.5"'), "rs:md length: '12.5' is not a non-negative integer"),
        (url(md='length="-3"'), "rs:md length: '-3' is not a non-negative integer"),
        (url(md='length="many"'), "rs:md length: 'many' is not a non-negative integer"),
        # More digits than Python converts (4,300): a traceback from a hostile list, before.
        (url(md=f'length="{"9" * 5000}"'), "rs:md length: '9999999999"),
        (url(md='length="²"'), "rs:md length: '²' is not a non-negative integer"),
        (url(md='hash="md5"'), "rs:md hash: hash token 'md5' is not of the form algorithm:value"),
        (url(md='hash="md5:"'), "rs:md hash: hash token 'md5:'"),
        (url(md='hash="md5:aa md5:bb"'), "hash algorithm 'md5' given twice"),
        (url(md='hash=""'), "rs:md hash: "),
    ],
)
def test_bad_entry_values_are_errors(entry: str, fragment: str) -> None:
    data = doc(RL, entry)
    f = only(check(data), ERROR, fragment)
    assert f.line == 4
    assert f.entry == "http://example.com/res1"


def test_bad_document_datetime_is_an_error() -> None:
    data = doc('capability="resourcelist" at="2013-01-03 at 09:00"', url())
    f = only(check(data), ERROR, "rs:md at: not a W3C datetime")
    assert f.line == 2 and f.rule == "value-syntax"
    # A form near it that Destinations read through is an error all the same.
    data = doc('capability="resourcelist" at="2013-01-03 09:00"', url())
    f = only(check(data), ERROR, "rs:md at: '2013-01-03 09:00' has no time zone")
    assert f.line == 2 and f.rule == "w3c-datetime-zone"
    data = doc('capability="resourcelist" at="2013-01-03T09:00+0900"', url())
    f = only(check(data), ERROR, "is not W3C Datetime but reads unambiguously")
    assert f.rule == "w3c-datetime-form"
    assert "(a zone without its colon): Destinations read it as 2013-01-03T00:00:00Z" in f.message


@pytest.mark.parametrize(
    "when",
    [
        "2013",
        "2013-01",
        "2013-01-03",
        "2013-01-03T09:00Z",
        "2013-01-03T09:00:00+01:00",
        "2013-01-03T09:00:00.123456789Z",
    ],
)
def test_every_w3c_datetime_granularity_is_accepted(when: str) -> None:
    clean(check(doc(RL, url(extra=f"<lastmod>{when}</lastmod>"))))


@pytest.mark.parametrize(
    ("hashes", "fragment"),
    [
        (
            "md5:zz1b0ee4e2a4a4d9d4f5a8a2e3e4f5a6",
            "md5 value 'zz1b0ee4e2a4a4d9d4f5a8a2e3e4f5a6' is not hex",
        ),
        ("sha-1:1234", "sha-1 value has 4 hex digits, expected 40"),
        ("sha-256:" + "g" * 64, "sha-256 value"),
    ],
)
def test_bad_digest_values_are_warnings(hashes: str, fragment: str) -> None:
    report = check(doc(RL, url(md=f'hash="{hashes}"')))
    f = only(report, WARNING, fragment)
    assert f.line == 4
    assert report.errors == []


def test_good_digests_are_clean() -> None:
    hashes = "md5:1e0d5cb8ef6ba40c99b14c0237be735e sha-1:" + "a" * 40 + " sha-256:" + "B" * 64
    hashes += " sha-224:" + "c" * 56 + " sha-384:" + "d" * 96 + " sha-512:" + "e" * 128
    clean(check(doc(RL, url(md=f'hash="{hashes}"'))))


def test_an_algorithm_destinations_cannot_check_is_said_once_a_document() -> None:
    """A digest no Destination checks (ours computes the IANA textual names hashlib has): the
    resources it alone describes are synced unverified. The spec does not restrict the
    algorithms: a warning, once a document for each algorithm, at its first use."""
    md5 = "md5:1e0d5cb8ef6ba40c99b14c0237be735e"
    report = check(
        doc(
            RL,
            url(md='hash="x-custom:anything"'),
            url("http://example.com/res2", md=f'hash="x-custom:other {md5}"'),
            url("http://example.com/res3", md='hash="SHA-256:' + "b" * 64 + '"'),
        )
    )
    assert report.errors == []
    f = only(report, WARNING, "'x-custom' is not one Destinations check")
    assert (f.rule, f.line, f.entry) == ("core-7-hash-algorithm", 4, "http://example.com/res1")
    f = only(report, WARNING, "'SHA-256' in upper case (the token is 'sha-256')")
    assert f.rule == "core-7-hash-algorithm" and f.line == 6
    assert len(report.findings) == 2, [str(f) for f in report.findings]


def test_bad_hash_on_a_link_is_checked_too() -> None:
    ln = '<rs:ln rel="duplicate" href="http://m.example.com/res1" hash="md5:xyz"/>'
    f = only(check(doc(RL, url(extra=ln))), WARNING, "md5 value 'xyz' is not hexadecimal")
    assert f.line == 4


@pytest.mark.parametrize("entry", [url(None), url("")])
def test_missing_loc_is_an_error(entry: str) -> None:
    data = doc(RL, url("http://example.com/ok"), entry)
    f = only(check(data), ERROR, "<url> without <loc>")
    assert f.line == 5


def test_missing_loc_in_an_index_names_the_sitemap_element() -> None:
    data = doc(RL, '<sitemap><rs:md at="2013-01-03"/></sitemap>', index=True)
    f = only(check(data), ERROR, "<sitemap> without <loc>")
    assert f.line == 4


@pytest.mark.parametrize("loc", ["/res1", "res1", "example.com/res1", "//example.com/res1"])
def test_relative_loc_is_an_error(loc: str) -> None:
    data = doc(RL, url(loc))
    f = only(check(data), ERROR, f"<loc> {loc!r} is not an absolute URI")
    assert f.line == 4


def test_non_http_loc_is_a_warning() -> None:
    report = check(doc(RL, url("ftp://example.com/res1")))
    assert only(report, WARNING, "is not an http(s) URI").line == 4
    assert report.errors == []


def test_wrong_entry_element_is_an_error() -> None:
    data = doc(RL, url(), sitemap("http://example.com/p.xml"))
    f = only(check(data), ERROR, "<sitemap> in a <urlset>")
    assert f.line == 5


def test_changefreq_and_priority_out_of_vocabulary_are_warnings() -> None:
    report = check(doc(RL, url(extra="<changefreq>sometimes</changefreq><priority>1.5</priority>")))
    assert only(report, WARNING, "changefreq 'sometimes'").line == 4
    assert only(report, WARNING, "priority 1.5 is outside").line == 4
    assert report.errors == []


def test_all_findings_of_a_file_object_name_the_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "list.xml"
    path.write_bytes(doc(RL, url(extra="<lastmod>never</lastmod>"), url("relative")))
    with open(path, "rb") as f:
        report = validate([f])
    assert len(report.findings) == 2
    assert {f.source for f in report.findings} == {str(path)}


# -- size --------------------------------------------------------------------------------------


class _Generated(io.RawIOBase):
    """A document produced on the fly: nothing of it is ever held whole in memory."""

    def __init__(self, parts: Iterator[bytes]) -> None:
        self._parts = parts
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        while len(self._buf) < len(b):
            chunk = next(self._parts, None)
            if chunk is None:
                break
            self._buf += chunk
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def _big_list(n: int) -> Iterator[bytes]:
    yield f'<urlset xmlns="{SM}" xmlns:rs="{RS}">\n<rs:md {RL}/>\n{UP}\n'.encode()
    batch = 5000
    for start in range(0, n, batch):
        yield "".join(
            f"<url><loc>http://example.com/r{i}</loc></url>\n"
            for i in range(start, min(n, start + batch))
        ).encode()
    yield b"</urlset>\n"


@pytest.mark.parametrize(("n", "warned"), [(50_000, False), (50_001, True)])
def test_more_than_50000_entries_is_a_warning(n: int, warned: bool) -> None:
    report = validate([io.BufferedReader(_Generated(_big_list(n)), 1 << 16)])
    assert report.documents[0].entries == n
    assert report.errors == []
    if warned:
        f = only(report, WARNING, "50001 entries: over the Sitemap limit of 50000")
        assert f.line is None
    else:
        assert report.findings == []


# -- the specifications' own examples ----------------------------------------------------------

EXAMPLES = spec_example_files()

# The examples' own flaws: they break a "must" of the prose, and the validator says so.
EXAMPLE_FLAWS = {
    # Core 1.1 §10.1, §11.1, §11.2, §12.1 make <rs:ln rel="up"> mandatory; Examples 1-5 and 8
    # (the introductory ones) leave it out.
    "resourcesync_ex_1.xml": {"core-up-missing"},
    "resourcesync_ex_2.xml": {"core-up-missing"},
    "resourcesync_ex_3.xml": {"core-up-missing"},
    "resourcesync_ex_4.xml": {"core-up-missing"},
    "resourcesync_ex_5.xml": {"core-up-missing"},
    "resourcesync_ex_8.xml": {"core-up-missing"},
    # Archives 0.9.1 Example 6.1: the second Change Dump starts at 2012-01-20, a year before the
    # first ends (2013-01-20): a typo for 2013, but as written the two overlap.
    "archives_ex_6_1.xml": {"core-12.2-overlap"},
}


@needs_specs
@pytest.mark.parametrize(
    "path", [p for p in EXAMPLES if p.name != "resourcesync_ex_9.xml"], ids=lambda p: p.name
)
def test_spec_examples_have_no_errors(path) -> None:  # type: ignore[no-untyped-def]
    """Every example is valid, except where the example itself breaks a "must" (named in
    EXAMPLE_FLAWS with the rule it breaks)."""
    report = validate([path])
    assert report.unreadable == []
    flaws = EXAMPLE_FLAWS.get(path.name, set())
    assert {f.rule for f in report.errors} == flaws, [str(f) for f in report.errors]
    assert len(report.documents) == 1
    assert report.documents[0].entries > 0


@needs_specs
def test_spec_example_9_is_an_html_page_reported_unreadable() -> None:
    path = next(p for p in EXAMPLES if p.name == "resourcesync_ex_9.xml")
    report = validate([path])
    assert report.documents == []
    assert len(report.unreadable) == 1
    f = report.unreadable[0]
    assert f.source == str(path)
    assert "an HTML page, not a ResourceSync document" in f.message
    assert not report.ok


NOTIFICATION_EXAMPLES = notification_spec_examples()


@needs_specs
def test_notification_spec_has_complete_examples() -> None:
    assert len(NOTIFICATION_EXAMPLES) >= 2


@needs_specs
@pytest.mark.parametrize(
    ("name", "data"), NOTIFICATION_EXAMPLES, ids=[n for n, _ in NOTIFICATION_EXAMPLES]
)
def test_notification_spec_examples_have_no_errors(name: str, data: bytes) -> None:
    report = validate([data])
    assert report.unreadable == []
    assert report.errors == [], [str(f) for f in report.errors]
    assert [d.capability for d in report.documents] in (
        ["change-notification"],
        ["capabilitylist"],
    )


# -- Framework Notification 1.0.1 ---------------------------------------------------------------

FN = 'capability="framework-notification"'


@pytest.mark.parametrize("name,data", framework_spec_examples() or [("none", b"")])
def test_framework_notification_spec_examples_have_no_errors(name: str, data: bytes) -> None:
    if not data:
        pytest.skip("../shared/specs is absent")
    report = check(data)
    assert report.errors == [], [str(f) for f in report.findings]
    # Its entries carry `change` by definition (§4): no warning says otherwise.
    assert not [f for f in report.findings if "change is not used" in f.message]


def test_a_framework_notification_entry_needs_change_and_capability() -> None:
    good = url(
        "http://example.com/resourcelist.xml",
        'change="created" datetime="2013-01-03T00:07:22Z" capability="resourcelist"',
    )
    clean(check(doc(FN, good)))
    no_change = url("http://example.com/resourcelist.xml", 'capability="resourcelist"')
    only(check(doc(FN, no_change)), ERROR, "needs rs:md change")
    no_cap = url("http://example.com/resourcelist.xml", 'change="updated"')
    only(check(doc(FN, no_cap)), ERROR, "needs rs:md capability")
