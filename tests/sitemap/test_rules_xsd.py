"""Issue 13: the official XML Schema as a second opinion on our rules.

Every example of the specifications and every document our publisher writes goes through both
the XSD (lxml's XMLSchema: ../shared/specs/resourcesync-1.1.xsd for rs:md and rs:ln, inside the
Sitemap schema's <urlset>/<url>/<loc> structure written out below) and `validate`. They must
agree, except where a difference is named here:

- the XSD cannot express most of the prose's rules (a mandatory up link, order, times per
  capability): documents it accepts that break them are the examples' own flaws, listed in
  test_rules.EXAMPLE_FLAWS with the rule each breaks;
- the XSD types times as xsd:dateTime, which refuses the W3C Datetime forms the prose allows
  (a date alone, minutes without seconds): KNOWN_XSD_STRICTER.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
from lxml import etree

from resourcesync.sitemap import validate
from resourcesync.source.publish import publish
from tests.conftest import (
    SPECS,
    framework_spec_examples,
    needs_specs,
    notification_spec_examples,
    spec_example_files,
)
from tests.sitemap.test_rules import EXAMPLE_FLAWS, RS, SM, UP
from tests.source.test_publish import Clock, config, make_tree, resolver

SITEMAP_XSD = """<xsd:schema xmlns:xsd="http://www.w3.org/2001/XMLSchema"
 targetNamespace="{sm}" xmlns="{sm}" elementFormDefault="qualified">
 <xsd:import namespace="{rs}" schemaLocation="{rs_xsd}"/>
 <xsd:element name="urlset"><xsd:complexType><xsd:sequence>
  <xsd:any namespace="##other" processContents="lax" minOccurs="0" maxOccurs="unbounded"/>
  <xsd:element name="url" type="tUrl" minOccurs="0" maxOccurs="unbounded"/>
 </xsd:sequence></xsd:complexType></xsd:element>
 <xsd:element name="sitemapindex"><xsd:complexType><xsd:sequence>
  <xsd:any namespace="##other" processContents="lax" minOccurs="0" maxOccurs="unbounded"/>
  <xsd:element name="sitemap" type="tUrl" minOccurs="0" maxOccurs="unbounded"/>
 </xsd:sequence></xsd:complexType></xsd:element>
 <xsd:complexType name="tUrl"><xsd:sequence>
  <xsd:element name="loc" type="tLoc"/>
  <xsd:element name="lastmod" type="tLastmod" minOccurs="0"/>
  <xsd:element name="changefreq" type="tChangeFreq" minOccurs="0"/>
  <xsd:element name="priority" type="tPriority" minOccurs="0"/>
  <xsd:any namespace="##other" processContents="lax" minOccurs="0" maxOccurs="unbounded"/>
 </xsd:sequence></xsd:complexType>
 <xsd:simpleType name="tLoc"><xsd:restriction base="xsd:anyURI">
  <xsd:minLength value="12"/><xsd:maxLength value="2048"/></xsd:restriction></xsd:simpleType>
 <xsd:simpleType name="tLastmod"><xsd:union memberTypes="xsd:date xsd:dateTime"/></xsd:simpleType>
 <xsd:simpleType name="tChangeFreq"><xsd:restriction base="xsd:string">
  <xsd:enumeration value="always"/><xsd:enumeration value="hourly"/>
  <xsd:enumeration value="daily"/><xsd:enumeration value="weekly"/>
  <xsd:enumeration value="monthly"/><xsd:enumeration value="yearly"/>
  <xsd:enumeration value="never"/></xsd:restriction></xsd:simpleType>
 <xsd:simpleType name="tPriority"><xsd:restriction base="xsd:decimal">
  <xsd:minInclusive value="0.0"/><xsd:maxInclusive value="1.0"/></xsd:restriction></xsd:simpleType>
</xsd:schema>"""


@cache
def schema() -> etree.XMLSchema:
    text = SITEMAP_XSD.format(sm=SM, rs=RS, rs_xsd=(SPECS / "resourcesync-1.1.xsd").as_uri())
    return etree.XMLSchema(etree.fromstring(text.encode()))


def xsd_errors(data: bytes) -> list[str]:
    s = schema()
    ok = s.validate(etree.fromstring(data, etree.XMLParser(resolve_entities=False)))
    return [] if ok else [f"{e.line}: {e.message}" for e in s.error_log]


def our_rules(data: bytes) -> set[str]:
    report = validate([data])
    assert report.unreadable == []
    return {f.rule for f in report.errors}


SPEC_DOCS = [
    *((p.name, p) for p in spec_example_files() if p.name != "resourcesync_ex_9.xml"),
    *notification_spec_examples(),
    *framework_spec_examples(),
]


@needs_specs
@pytest.mark.parametrize(("name", "source"), SPEC_DOCS, ids=[n for n, _ in SPEC_DOCS])
def test_every_spec_example_the_xsd_and_our_rules_agree(name: str, source: object) -> None:
    data = source.read_bytes() if isinstance(source, Path) else source
    assert isinstance(data, bytes)
    assert xsd_errors(data) == []
    # What we find beyond the XSD are the prose's rules the example breaks, named there.
    assert our_rules(data) == EXAMPLE_FLAWS.get(name, set())


@needs_specs
def test_every_document_our_publisher_writes_passes_both(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_tree(data, {"a.txt": b"a", "b/c.html": b"<p>c</p>", "東京/駅 1.txt": "日本".encode()})
    clock = Clock()
    cfg = config(
        tmp_path,
        capabilities=("resourcelist", "changelist", "resourcedump", "changedump"),
        changelist_max_entries=2,
    )
    publish(cfg, clock=clock)
    for i in range(3):
        (data / f"new-{i}.txt").write_bytes(b"n" * i)
        (data / "a.txt").write_bytes(f"edit {i}".encode())
        publish(cfg, clock=clock)
    out = tmp_path / "out"
    documents = sorted([*out.rglob("*.xml"), out / ".well-known" / "resourcesync"])
    capabilities = set()
    for path in documents:
        raw = path.read_bytes()
        assert xsd_errors(raw) == [], path
        report = validate([path])
        assert report.ok, [str(f) for f in report.findings]
        capabilities.add(report.documents[0].capability)
    assert {
        "description",
        "capabilitylist",
        "resourcelist",
        "changelist",
        "resourcedump",
        "resourcedump-manifest",
        "changedump",
        "changedump-manifest",
        "changelist-archive",
    } <= capabilities
    # …and as one tree, each document against the one that lists it.
    tree = validate(
        [out / ".well-known" / "resourcesync"], follow=True, resolver=resolver(tmp_path)
    )
    assert tree.ok, [str(f) for f in tree.findings]


def _rl(at: str, extra: str = "") -> bytes:
    return (
        f'<urlset xmlns="{SM}" xmlns:rs="{RS}"><rs:md capability="resourcelist" at="{at}"/>{UP}'
        f"<url><loc>http://example.com/res1</loc>{extra}</url></urlset>"
    ).encode()


# The prose allows every W3C Datetime granularity (core 1.1 §7 "W3C Datetime"); the XSD's
# xsd:dateTime wants a full time with seconds: a known difference, decided for the prose.
KNOWN_XSD_STRICTER = {
    "date only": _rl("2013-01-03"),
    "year and month": _rl("2013-01"),
    "minutes without seconds": _rl("2013-01-03T09:00Z"),
}


@needs_specs
@pytest.mark.parametrize("name", sorted(KNOWN_XSD_STRICTER))
def test_known_difference_w3c_datetimes_the_xsd_refuses(name: str) -> None:
    data = KNOWN_XSD_STRICTER[name]
    assert xsd_errors(data) != []
    assert our_rules(data) == set()


# Breaches both find: the XSD and our rules agree on them (each found by its own rule id).
BOTH_REFUSE = {
    "change value": (
        _rl("2013-01-03T09:00:00Z", '<rs:md change="modified"/>'),
        "core-12.1-change-value",
    ),
    "path with a trailing slash": (
        f'<urlset xmlns="{SM}" xmlns:rs="{RS}"><rs:md capability="resourcedump-manifest" '
        f'at="2013-01-03T09:00:00Z"/>{UP}<url><loc>http://example.com/res1</loc>'
        '<rs:md path="/res1/"/></url></urlset>'.encode(),
        "core-11.2-path",
    ),
    "pri out of range": (
        _rl(
            "2013-01-03T09:00:00Z", '<rs:ln rel="duplicate" href="http://m.example.com/r" pri="0"/>'
        ),
        "core-7-ln-pri",
    ),
    "unnamespaced attribute": (
        _rl("2013-01-03T09:00:00Z", '<rs:md colour="red"/>'),
        "core-7-attribute-unknown",
    ),
    "rs:-prefixed attribute": (
        _rl("2013-01-03T09:00:00Z", '<rs:md rs:length="1"/>'),
        "core-7-attribute-prefixed",
    ),
}


@needs_specs
@pytest.mark.parametrize("name", sorted(BOTH_REFUSE))
def test_breaches_both_refuse(name: str) -> None:
    data, rule = BOTH_REFUSE[name]
    assert xsd_errors(data) != []
    assert rule in our_rules(data)
