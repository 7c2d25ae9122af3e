"""Issue 13: the rules within one document that were not checked before, each with a document
that breaks it and one that keeps it, and the stable rule id each finding carries."""

from __future__ import annotations

import pytest

from resourcesync.sitemap import validate
from resourcesync.sitemap.rules import ERROR, WARNING
from tests.sitemap.test_rules import (
    CAPLIST,
    CL,
    RL,
    UP,
    UP_DESC,
    check,
    clean,
    doc,
    line_of,
    only,
    sitemap,
    url,
)

RDM = 'capability="resourcedump-manifest" at="2013-01-03T09:00:00Z"'
CN = 'capability="change-notification" from="2013-01-02T00:00:00Z" until="2013-01-03T00:00:00Z"'


def test_a_repeated_rs_md_in_an_entry_is_an_error_not_a_silent_merge() -> None:
    twice = '<rs:md change="created" datetime="2013-01-02T10:00:00Z"/><rs:md change="deleted"/>'
    data = doc(CL, url("http://example.com/res1", extra=twice))
    f = only(check(data), ERROR, "more than one <rs:md> in an entry")
    assert (f.rule, f.line, f.entry) == ("core-7-md-repeated", 4, "http://example.com/res1")
    clean(check(doc(CL, url(md='change="created" datetime="2013-01-02T10:00:00Z"'))))


@pytest.mark.parametrize(
    "child",
    [
        "<loc>http://example.com/other</loc>",
        "<lastmod>2013-01-02T10:00:00Z</lastmod>",
        "<changefreq>daily</changefreq>",
        "<priority>0.5</priority>",
    ],
)
def test_a_child_the_sitemap_schema_allows_once_given_twice_is_an_error(child: str) -> None:
    # The Sitemap schema's url: loc once, lastmod, changefreq and priority at most once. Which
    # of two <loc>s is the resource? A reader takes the later; the validator says so.
    name = child[1 : child.index(">")]
    once = child if name == "loc" else ""
    twice = child if name == "loc" else child + child
    data = doc(RL, url("http://example.com/res1", extra=twice))
    f = only(check(data), ERROR, f"more than one <{name}> in an entry")
    assert (f.rule, f.line) == ("sitemap-child-repeated", 4)
    if once:
        clean(check(doc(RL, url(None, extra=once))))
    else:
        clean(check(doc(RL, url("http://example.com/res1", extra=child))))


def test_a_repeated_up_link_is_an_error() -> None:
    other = '<rs:ln rel="up" href="http://example.com/other-capabilitylist.xml"/>'
    f = only(check(doc(RL, url(), links=(UP, other))), ERROR, 'document-level <rs:ln rel="up">')
    assert f.rule == "core-7-up-repeated"
    f = only(check(doc(RL, url(extra=UP + other))), ERROR, '<rs:ln rel="up"> on one entry')
    assert f.rule == "core-7-up-repeated"
    clean(check(doc(RL, url())))


@pytest.mark.parametrize("md", [RL, RDM])
def test_a_duplicate_loc_in_a_resource_list_or_manifest_is_an_error(md: str) -> None:
    path = 'path="/res1"' if "manifest" in md else None
    data = doc(md, url("http://example.com/a", path), url("http://example.com/a", path))
    f = only(check(data), ERROR, "<loc> http://example.com/a is listed twice")
    assert f.rule == "core-duplicate-entry"
    assert f.line == line_of(data, "/a<", 2)
    assert f"(first on line {line_of(data, '/a<')})" in f.message
    clean(check(doc(md, url("http://example.com/a", path), url("http://example.com/b", path))))


def test_the_same_change_twice_in_a_change_list_is_an_error() -> None:
    when = 'change="updated" datetime="2013-01-02T10:00:00Z"'
    data = doc(CL, url("http://example.com/a", when), url("http://example.com/a", when))
    f = only(check(data), ERROR, "the same change of http://example.com/a")
    assert f.rule == "core-duplicate-entry"
    later = 'change="deleted" datetime="2013-01-02T11:00:00Z"'
    clean(check(doc(CL, url("http://example.com/a", when), url("http://example.com/a", later))))


def test_rs_prefixed_and_unnamespaced_foreign_attributes_are_errors() -> None:
    data = doc(RL, url(extra='<rs:md rs:length="10"/>'))
    f = only(check(data), ERROR, "attribute rs:length on rs:md")
    assert f.rule == "core-7-attribute-prefixed"
    data = doc(RL, url(extra='<rs:md colour="red"/>'))
    f = only(check(data), ERROR, "attribute 'colour' on rs:md is not defined")
    assert f.rule == "core-7-attribute-unknown"
    data = doc(RL, url(extra='<rs:ln rel="duplicate" href="http://m.example.com/r" mirror="1"/>'))
    assert only(check(data), ERROR, "attribute 'mirror' on rs:ln").rule == (
        "core-7-attribute-unknown"
    )
    # Attributes in their own namespace are extensions the XSD allows (##other).
    clean(check(doc(RL, url(extra='<rs:md xmlns:x="urn:x" x:colour="red" length="10"/>'))))


@pytest.mark.parametrize(
    ("rel", "bad"),
    [
        ("mirror", True),
        ("Duplicate", True),
        ("duplicate", False),
        ("describedby", False),
        ("http://www.openarchives.org/rs/terms/patch", False),
        ("urn:example:rel", False),
    ],
)
def test_rel_is_a_registered_relation_or_a_uri(rel: str, bad: bool) -> None:
    extra = f'<rs:ln rel="{rel}" href="http://example.com/x" type="text/plain"/>'
    report = check(doc(RL, url(extra=extra)))
    if bad:
        f = only(report, ERROR, f"rs:ln rel {rel!r} is neither a registered link relation")
        assert f.rule == "core-7-ln-rel"
    else:
        clean(report)


def test_a_patch_link_needs_a_type() -> None:
    patch = '<rs:ln rel="http://www.openarchives.org/rs/terms/patch" href="http://e.com/p"{}/>'
    f = only(check(doc(RL, url(extra=patch.format("")))), ERROR, "a patch link needs type")
    assert f.rule == "core-patch-type"
    clean(check(doc(RL, url(extra=patch.format(' type="application/json-patch"')))))


@pytest.mark.parametrize(("path", "bad"), [("/res1/", True), ("res1", True), ("/a/res1", False)])
def test_manifest_path_follows_the_xsd(path: str, bad: bool) -> None:
    report = check(doc(RDM, url(md=f'path="{path}"')))
    if bad:
        assert [f.rule for f in report.findings] == ["core-11.2-path"]
        assert report.errors
    else:
        clean(report)


@pytest.mark.parametrize(
    ("md", "links", "cap"),
    [
        ('capability="description"', (), "capabilitylist"),
        (CAPLIST, (UP_DESC,), "resourcelist"),
    ],
)
def test_lastmod_on_a_description_or_capability_list_is_a_warning(
    md: str, links: tuple[str, ...], cap: str
) -> None:
    entry = url(
        "http://example.com/doc.xml",
        f'capability="{cap}"',
        "<lastmod>2013-01-02T00:00:00Z</lastmod>",
    )
    report = check(doc(md, entry, links=links))
    f = only(report, WARNING, "<lastmod> in a")
    assert f.rule == "core-lastmod-omitted"
    assert report.errors == []
    clean(check(doc(md, url("http://example.com/doc.xml", f'capability="{cap}"'), links=links)))


def test_documents_inside_a_change_list_are_an_error_the_weko3_shape() -> None:
    """WEKO3 publishes a "change list" whose entries are its daily Change Lists."""
    data = doc(CL, url("http://example.com/cl-2013-01-02.xml", 'capability="changelist"'))
    report = check(data)
    f = only(report, ERROR, "is a document, not a change")
    assert f.rule == "core-12.1-document-entry"
    clean(check(doc(CL, url(md='change="created" datetime="2013-01-02T10:00:00Z"'))))


def test_a_change_notification_without_until_is_an_error() -> None:
    entry = url(md='change="created" datetime="2013-01-02T10:00:00Z"')
    no_until = CN.replace(' until="2013-01-03T00:00:00Z"', "")
    f = only(check(doc(no_until, entry, links=())), ERROR, "a change notification needs until")
    assert (f.rule, f.line) == ("cn-3-until", 2)
    clean(check(doc(CN, entry, links=())))


def test_a_datetime_without_a_zone_is_an_error_saying_destinations_read_utc() -> None:
    data = doc('capability="resourcelist" at="2013-01-03T09:00:00"', url())
    f = only(check(data), ERROR, "has no time zone")
    assert f.rule == "w3c-datetime-zone"
    assert "Destinations read it as UTC" in f.message


def test_a_source_description_entry_without_rs_md_is_fine() -> None:
    clean(check(doc('capability="description"', url("http://example.com/caps.xml"), links=())))


@pytest.mark.parametrize(
    ("second", "rule"),
    [
        ('from="2013-01-02T12:00:00Z" until="2013-01-03T00:00:00Z"', "core-12.2-gap"),
        ('from="2013-01-01T12:00:00Z" until="2013-01-03T00:00:00Z"', "core-12.2-overlap"),
        ('from="2013-01-02T00:00:00Z" until="2013-01-03T00:00:00Z"', None),
    ],
)
def test_change_list_index_entries_are_consecutive(second: str, rule: str | None) -> None:
    first = 'capability="changelist" from="2013-01-01T00:00:00Z" until="2013-01-02T00:00:00Z"'
    data = doc(
        'capability="changelist" from="2013-01-01T00:00:00Z"',
        sitemap("http://example.com/cl1.xml", first),
        sitemap("http://example.com/cl2.xml", f'capability="changelist" {second}'),
        index=True,
    )
    report = check(data)
    if rule is None:
        clean(report)
    else:
        assert [f.rule for f in report.findings] == [rule]
        assert report.errors[0].line == line_of(data, "cl2.xml")


def test_every_finding_carries_a_rule_id() -> None:
    data = doc(
        'capability="changelist"',
        url("relative", 'change="moved" datetime="2013-01-02"'),
        url("ftp://example.com/x", 'colour="red"', "<changefreq>often</changefreq>"),
        links=('<rs:ln rel="mirror" href="x" pri="0"/>',),
    )
    report = validate([data])
    assert len(report.findings) >= 8
    assert all(f.rule for f in report.findings), [str(f) for f in report.findings]
    assert all("rule" in f.to_json() for f in report.findings)


def test_a_framework_notification_validates_without_up_and_with_index_links() -> None:
    """Framework Notification 1.0.1 §4: up is optional; each entry has change and capability
    (spec or other-spec values); a document under an index links it with rel=index."""
    fn = 'capability="framework-notification" from="2013-01-02T00:00:00Z"'
    index = '<rs:ln rel="index" href="http://example.com/resourcelist-index.xml"/>'
    entry = url(
        "http://example.com/resourcelist-3.xml",
        'change="created" capability="resourcelist" datetime="2013-01-03T00:07:22Z"',
        index,
    )
    clean(check(doc(fn, entry, links=())))
    other = url("http://example.com/w.xml", 'change="updated" capability="widgetlist"')
    report = check(doc(fn, other, links=()))
    assert [(f.level, f.rule) for f in report.findings] == [(WARNING, "fn-4-capability-unknown")]


def test_every_rule_id_in_the_code_is_registered_and_every_registered_id_is_used() -> None:
    """The ids are the stable interface of --json: RULES lists them all, once."""
    import re
    from pathlib import Path

    from resourcesync.sitemap import rules as rules_package
    from resourcesync.sitemap.rules import RULES

    here = Path(rules_package.__file__).parent
    pattern = re.compile(
        r'"((?:core|appendix|archives|cn|fn|sitemap|w3c|value|follow|unreadable)(?:-[a-z0-9.]+)*)"'
    )
    used = set()
    for path in here.glob("*.py"):
        if path.name != "findings.py":
            used |= set(pattern.findall(path.read_text(encoding="utf-8")))
    used -= {"core"}
    assert used == set(RULES)
