"""Issue 13, `--packages`: a dump's packages against the dump (core 1.1 §11.1, §13.1): length,
hash, manifest.xml inside equal to the copy at rel="contents", the paths it lists present."""

from __future__ import annotations

import zipfile
from pathlib import Path

from resourcesync.sitemap import read_document, validate
from resourcesync.source.publish import publish
from tests.source.test_publish import DOCS, Clock, config, make_tree, resolver


def published(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    make_tree(data, {"a.txt": b"alpha", "b/c.txt": b"gamma"})
    cfg = config(tmp_path, capabilities=("resourcelist", "changelist", "resourcedump"))
    publish(cfg, clock=Clock())
    return tmp_path / "out" / "set1" / "resourcedump.xml"


def package_of(tmp_path: Path, dump: Path) -> Path:
    _, (package,) = read_document(dump)
    return tmp_path / "out" / package.loc.removeprefix(DOCS)


def check(tmp_path: Path, dump: Path) -> list[str]:
    report = validate([dump], packages=True, resolver=resolver(tmp_path))
    assert report.unreadable == []
    return [f.rule for f in report.errors]


def test_packages_as_published_match_their_dump(tmp_path: Path) -> None:
    dump = published(tmp_path)
    assert check(tmp_path, dump) == []


def test_a_package_of_another_length_and_hash_is_an_error(tmp_path: Path) -> None:
    dump = published(tmp_path)
    zpath = package_of(tmp_path, dump)
    with zipfile.ZipFile(zpath, "a") as z:
        z.writestr("extra.txt", b"not in the dump's figures")
    rules = check(tmp_path, dump)
    assert "core-dump-package-length-mismatch" in rules
    assert "core-dump-package-hash-mismatch" in rules
    # Without --packages nothing is downloaded and nothing said.
    assert validate([dump], resolver=resolver(tmp_path)).ok


def test_a_manifest_copy_unlike_the_one_inside_is_an_error(tmp_path: Path) -> None:
    dump = published(tmp_path)
    _, (package,) = read_document(dump)
    link = package.link("contents")
    assert link is not None
    copy = tmp_path / "out" / link.href.removeprefix(DOCS)
    copy.write_bytes(copy.read_bytes().replace(b"/resources/a.txt", b"/resources/z.txt"))
    assert "core-dump-manifest-copy" in check(tmp_path, dump)


def test_a_package_without_manifest_or_missing_a_listed_file_is_an_error(tmp_path: Path) -> None:
    dump = published(tmp_path)
    zpath = package_of(tmp_path, dump)
    with zipfile.ZipFile(zpath) as z:
        members = {n: z.read(n) for n in z.namelist()}
    listed = next(n for n in members if n != "manifest.xml")
    with zipfile.ZipFile(zpath, "w") as z:
        for n, data in members.items():
            if n != listed:
                z.writestr(n, data)
    assert "core-dump-package-path" in check(tmp_path, dump)
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr(listed, members[listed])
    assert "core-dump-package-manifest" in check(tmp_path, dump)


def test_a_package_that_cannot_be_read_is_one_error_not_a_crash(tmp_path: Path) -> None:
    dump = published(tmp_path)
    zpath = package_of(tmp_path, dump)
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("manifest.xml", b"<urlset")
    assert "core-dump-package-unreadable" in check(tmp_path, dump)
    zpath.write_bytes(b"not a zip at all")
    assert "core-dump-package-unreadable" in check(tmp_path, dump)


def test_a_dump_links_its_own_kind_of_manifest(tmp_path: Path) -> None:
    dump = published(tmp_path)
    _, (package,) = read_document(dump)
    link = package.link("contents")
    assert link is not None
    manifest = tmp_path / "out" / link.href.removeprefix(DOCS)
    report = validate([dump], follow=True, resolver=resolver(tmp_path))
    assert report.ok, [str(f) for f in report.findings]
    manifest.write_bytes(
        manifest.read_bytes().replace(
            b'capability="resourcedump-manifest"', b'capability="changedump-manifest"'
        )
    )
    report = validate([dump], follow=True, resolver=resolver(tmp_path))
    assert "core-dump-manifest-capability" in {f.rule for f in report.errors}
