"""Increments from Change Dumps (issue 10.15): `--via dumps|auto` takes the changes' bytes from
the Change Dump's packages, verified against their manifests, instead of one GET per change —
with the final state per URI winning across packages, the Change Lists after the last package,
and the Change Lists instead whenever a package cannot be used or the packages leave a gap."""

from __future__ import annotations

import hashlib
import io
import os
import re
import zipfile
from pathlib import Path

import pytest

from tests.destination.helpers import (
    cli,
    cli_json,
    entry,
    hand_source,
    md5,
    published_source,
    set_report,
    tree,
    urlset,
)

CAPS = ("resourcelist", "changelist", "changedump")
FILES = {"a.txt": b"alpha", "b.txt": b"beta", "k/c.txt": b"gamma"}


def _packages(out: Path) -> list[Path]:
    return sorted(out.rglob("changedumps/*/package-*.zip"))


def _members(package: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(package) as zf:
        return {info.filename: zf.read(info) for info in zf.infolist()}


def _repackage(out: Path, package: Path, members: dict[str, bytes]) -> None:
    """Rewrite `package` with `members`, and its entry in the Change Dump with its new length
    and digest (a package the Source made so, not one altered on the way)."""
    with zipfile.ZipFile(package, "w") as zf:
        for name, body in members.items():
            zf.writestr(name, body)
    body = package.read_bytes()
    dump = next(out.rglob("changedump.xml"))
    where = f"{package.parent.name}/{package.name}</loc>"

    def mend(url: re.Match[str]) -> str:
        if where not in url[0]:
            return url[0]
        return re.sub(
            r'hash="md5:[0-9a-f]+" length="\d+"',
            f'hash="md5:{hashlib.md5(body).hexdigest()}" length="{len(body)}"',
            url[0],
        )

    dump.write_text(re.sub(r"<url>.*?</url>", mend, dump.read_text(), flags=re.S))


def _edit(src: object, data: Path) -> None:
    (data / "a.txt").write_bytes(b"alpha 2")
    (data / "b.txt").unlink()
    (data / "d.txt").write_bytes(b"delta")


def test_an_increment_takes_its_bytes_from_the_change_dump(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES, capabilities=CAPS) as src:
        code, summary = cli_json("sync", src.root, dest, "--delete")
        assert code == 0 and set_report(summary)["mode"] == "baseline"
        # Two publishes: a.txt changes in both, so its final state is in the second package.
        _edit(src, src.data)
        src.publish()
        (src.data / "a.txt").write_bytes(b"alpha 3")
        (src.data / "k" / "c.txt").write_bytes(b"gamma 2")
        src.publish()
        assert len(_packages(src.out)) == 2
        src.recorder.reset()
        code, summary = cli_json("sync", src.root, dest, "--delete")
        s = set_report(summary)
        assert code == 0, summary
        assert (s["mode"], s["via"], s["fetched"], s["deleted"]) == ("incremental", "dumps", 3, 1)
        assert src.resource_gets() == {}  # every byte came in the packages
        expected = {"a.txt": b"alpha 3", "k/c.txt": b"gamma 2", "d.txt": b"delta"}
        assert tree(dest) == expected
        assert cli("audit", src.root, dest).exit_code == 0
        # The state knows what the packages put in place: the next run fetches nothing.
        src.recorder.reset()
        code, summary = cli_json("sync", src.root, dest, "--delete")
        assert code == 0 and set_report(summary)["fetched"] == 0
        assert src.resource_gets() == {}


def test_changes_after_the_last_package_come_from_the_change_lists(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES, capabilities=CAPS) as src:
        assert cli("sync", src.root, dest, "--delete").exit_code == 0
        _edit(src, src.data)
        src.publish()
        (src.data / "a.txt").write_bytes(b"alpha 3")
        src.publish()
        # A Change Dump that lags behind the Change List: its newest package is not listed yet.
        dump = next(src.out.rglob("changedump.xml"))
        text = dump.read_text()
        urls = re.findall(r"<url>.*?</url>", text, flags=re.S)
        assert len(urls) == 2
        dump.write_text(text.replace(urls[1], ""))
        src.recorder.reset()
        code, summary = cli_json("sync", src.root, dest, "--delete")
        s = set_report(summary)
        assert code == 0, summary
        assert s["via"] == "dumps"
        # d.txt from the package; a.txt's final state is only in the Change List: one GET.
        assert src.resource_gets() == {"/a.txt": 1}
        assert tree(dest) == {"a.txt": b"alpha 3", "k/c.txt": b"gamma", "d.txt": b"delta"}


def test_a_member_that_differs_from_its_manifest_is_fetched_on_its_own(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES, capabilities=CAPS) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        _edit(src, src.data)
        src.publish()
        (package,) = _packages(src.out)
        # The package rebuilt with d.txt's bytes altered (same length), its manifest untouched,
        # and the Change Dump updated to the new package's length and digest.
        members = _members(package)
        members[next(n for n in members if n.endswith("d.txt"))] = b"DELTA"
        _repackage(src.out, package, members)
        src.recorder.reset()
        code, summary = cli_json("sync", src.root, dest)
        s = set_report(summary)
        assert code == 0, summary
        assert s["via"] == "dumps"
        assert any("not taken from the package" in p["message"] for p in s["problems"]), s
        assert src.resource_gets() == {"/d.txt": 1}  # a.txt came in the package
        assert tree(dest) == {
            "a.txt": b"alpha 2",
            "b.txt": b"beta",
            "k/c.txt": b"gamma",
            "d.txt": b"delta",
        }


def test_auto_falls_back_to_the_lists_when_a_package_is_altered(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES, capabilities=CAPS) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        _edit(src, src.data)
        src.publish()
        _flip_a_byte(_packages(src.out)[0])
        src.recorder.reset()
        code, summary = cli_json("sync", src.root, dest)
        s = set_report(summary)
        assert code == 0, summary
        assert s["via"] == "lists"
        assert any("dump not usable" in p["message"] for p in s["problems"]), s
        assert src.resource_gets() == {"/a.txt": 1, "/d.txt": 1}
        assert tree(dest)["d.txt"] == b"delta"


def _flip_a_byte(path: Path) -> None:
    body = bytearray(path.read_bytes())
    body[len(body) // 2] ^= 0xFF
    path.write_bytes(bytes(body))


def test_via_dumps_refuses_a_package_altered_on_the_way(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES, capabilities=CAPS) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        before = tree(dest)
        _edit(src, src.data)
        src.publish()
        _flip_a_byte(_packages(src.out)[0])
        result = cli("sync", src.root, dest, "--via", "dumps")
        assert result.exit_code == 2
        assert "package md5 is" in result.stderr and "package-00001.zip" in result.stderr
        # Nothing applied, the cursor where it was: the next run does the whole increment.
        assert tree(dest) == before
        code, summary = cli_json("sync", src.root, dest, "--via", "lists")
        assert code == 0 and set_report(summary)["fetched"] == 2


def test_a_change_no_package_holds_is_fetched_on_its_own(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES, capabilities=CAPS) as src:
        assert cli("sync", src.root, dest, "--delete").exit_code == 0
        _edit(src, src.data)
        src.publish()
        (src.data / "a.txt").write_bytes(b"alpha 3")
        src.publish()
        # The Source dropped its first package (and the archive says nothing of it).
        dump = next(src.out.rglob("changedump.xml"))
        text = dump.read_text()
        first = re.findall(r"<url>.*?</url>", text, flags=re.S)[0]
        dump.write_text(text.replace(first, ""))
        src.recorder.reset()
        code, summary = cli_json("sync", src.root, dest, "--delete")
        s = set_report(summary)
        assert code == 0, summary
        assert s["via"] == "dumps"
        # a.txt's final state is in the second package; d.txt's creation was in the first.
        assert src.resource_gets() == {"/d.txt": 1}
        assert tree(dest) == {"a.txt": b"alpha 3", "k/c.txt": b"gamma", "d.txt": b"delta"}


def test_a_package_that_disagrees_with_the_change_list_is_not_taken(tmp_path: Path) -> None:
    """A Source whose Change Dump and Change List disagree (a package made while the file
    changed again): the copy holds what the Change List says, never the package's version."""
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES, capabilities=CAPS) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        _edit(src, src.data)
        src.publish()
        # The package and its manifest rewritten consistently (and the Change Dump's digest
        # of the package too), but with other bytes for a.txt than the Change List lists.
        (package,) = _packages(src.out)
        members = _members(package)
        members[next(n for n in members if n.endswith("a.txt"))] = b"alpha X"
        other = hashlib.md5(b"alpha X").hexdigest()
        members["manifest.xml"] = re.sub(
            rb"(<loc>[^<]*a\.txt</loc>\s*(?:<lastmod>[^<]*</lastmod>\s*)?<rs:md[^>]*?)"
            rb'hash="md5:[0-9a-f]+"',
            rb'\1hash="md5:' + other.encode() + b'"',
            members["manifest.xml"],
        )
        assert other.encode() in members["manifest.xml"]
        _repackage(src.out, package, members)
        src.recorder.reset()
        code, summary = cli_json("sync", src.root, dest)
        assert code == 0, summary
        assert src.resource_gets() == {"/a.txt": 1}  # d.txt came in the package
        assert tree(dest)["a.txt"] == b"alpha 2"


def test_via_lists_never_reads_the_change_dump(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES, capabilities=CAPS) as src:
        assert cli("sync", src.root, dest).exit_code == 0
        _edit(src, src.data)
        src.publish()
        src.recorder.reset()
        code, summary = cli_json("sync", src.root, dest, "--via", "lists")
        assert code == 0 and set_report(summary)["via"] == "lists"
        assert not [h for h in src.recorder.gets() if "changedump" in h.path]
        assert src.resource_gets() == {"/a.txt": 1, "/d.txt": 1}


def test_a_source_with_a_change_dump_and_no_change_list(tmp_path: Path) -> None:
    """Without a Change List the Change Dump's manifests are all the Source says of its
    changes: the increment is planned from them (final state per URI) and taken from the
    packages."""
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES, capabilities=("resourcelist", "changedump")) as src:
        assert cli("sync", src.root, dest, "--delete").exit_code == 0
        _edit(src, src.data)
        src.publish()
        (src.data / "a.txt").write_bytes(b"alpha 3")
        src.publish()
        assert not list(src.out.rglob("changelist*.xml"))
        src.recorder.reset()
        code, summary = cli_json("sync", src.root, dest, "--delete")
        s = set_report(summary)
        assert code == 0, summary
        assert (s["mode"], s["via"]) == ("incremental", "dumps")
        assert src.resource_gets() == {}
        assert tree(dest) == {"a.txt": b"alpha 3", "k/c.txt": b"gamma", "d.txt": b"delta"}


def test_members_taken_from_a_package_get_their_lastmod_as_their_time(tmp_path: Path) -> None:
    """As a fetched file does (`--times`, the default): a member extracted from a Change Dump's
    package gets the `<lastmod>` its change gives; with `--no-times`, the time it was written."""
    old = 1_000_000_000
    with published_source(tmp_path, FILES, capabilities=CAPS) as src:
        dests = {"times": tmp_path / "dest", "no-times": tmp_path / "other"}
        for name, dest in dests.items():
            extra = ("--no-times",) if name == "no-times" else ()
            assert cli("sync", src.root, dest, *extra).exit_code == 0
        for i, rel in enumerate(("a.txt", "k/c.txt")):
            (src.data / rel).write_bytes(b"changed " + rel.encode())
            os.utime(src.data / rel, (old + i, old + i))
        src.publish()
        src.recorder.reset()
        for name, dest in dests.items():
            extra = ("--no-times",) if name == "no-times" else ()
            code, summary = cli_json("sync", src.root, dest, "--via", "dumps", *extra)
            s = set_report(summary)
            assert code == 0 and (s["via"], s["fetched"]) == ("dumps", 2), summary
        assert src.resource_gets() == {}  # both from the package
        for i, rel in enumerate(("a.txt", "k/c.txt")):
            assert abs((dests["times"] / rel).stat().st_mtime - (old + i)) < 1e-3, rel
            assert (dests["no-times"] / rel).stat().st_mtime > old + 86400, rel


def test_a_manifest_change_dated_too_early_is_not_skipped(tmp_path: Path) -> None:
    """A manifest's changes are in forward chronological order (core §13.1.1): one dated
    before the copy's cursor in a package after it (a file's kept mtime given as the time of
    its change) is applied in the order listed, with a warning — skipped for its date, the
    copy lacked it while every run said ok. `audit` reads a dump-only Source's manifests."""
    dest = tmp_path / "dest"
    with published_source(tmp_path, FILES, capabilities=("resourcelist", "changedump")) as src:
        assert cli("sync", src.root, dest, "--delete").exit_code == 0
        (src.data / "a.txt").write_bytes(b"alpha 2")
        src.publish()
        assert cli("sync", src.root, dest, "--delete").exit_code == 0
        (src.data / "e.txt").write_bytes(b"epsilon")
        src.publish()
        package = _packages(src.out)[-1]
        members = _members(package)
        manifest = members["manifest.xml"].decode()
        assert manifest.count("datetime=") == 1
        members["manifest.xml"] = re.sub(
            r'datetime="[^"]+"', 'datetime="2001-01-01T00:00:00Z"', manifest
        ).encode()
        _repackage(src.out, package, members)
        code, summary = cli_json("sync", src.root, dest, "--delete")
        s = set_report(summary)
        assert code == 0 and (s["via"], s["changes"]) == ("dumps", 1), summary
        assert tree(dest)["e.txt"] == b"epsilon"
        assert any("out of chronological order" in p["message"] for p in s["problems"]), s
        code, summary = cli_json("sync", src.root, dest, "--delete")
        assert code == 0 and set_report(summary)["changes"] == 0, summary
        # `audit` reads the manifests as `sync` does (it read the Resource List alone, and
        # called this copy 1 extra, 1 different); and it still sees what the copy lacks.
        r = cli("audit", src.root, dest)
        assert r.exit_code == 0, r.stdout + r.stderr
        (dest / "e.txt").unlink()
        r = cli("audit", src.root, dest)
        assert r.exit_code == 1 and "missing: " in r.stdout and "e.txt" in r.stdout, r.stdout


@pytest.mark.parametrize(
    ("dated", "hours"),
    [("2024-01-01T09:00:00", 14), ("2024-01-01", 38)],
    ids=["zoneless", "a-day"],
)
def test_a_change_dump_in_times_without_a_zone_is_not_skipped_behind_the_cursor(
    tmp_path: Path, dated: str, hours: int
) -> None:
    """A Source with a Resource List (`at` 12:00Z) and a Change Dump only, its packages and
    manifests dated in local time without a zone (UTC−5: the change made at 14:00Z is
    09:00), or by their day: read as UTC, the package ended before the cursor — left out,
    and `sync` said ok and `audit` in sync over the old bytes. The dumps' times widen the
    look behind the cursor as the Change Lists' do."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"old"
        src.capabilities(
            [
                {"loc": f"{b}/resourcelist.xml", "capability": "resourcelist"},
                {"loc": f"{b}/changedump.xml", "capability": "changedump"},
            ]
        )
        span = {"from": dated[:10] + "T07:00:00" if "T" in dated else dated}
        src.docs["/resourcelist.xml"] = urlset(
            "resourcelist", [entry(b, "/a.txt", b"old")], at="2024-01-01T12:00:00Z"
        )
        src.docs["/changedump.xml"] = urlset("changedump", [], **span)
        assert cli("sync", b, dest).exit_code == 0
        src.files["/a.txt"] = b"new"
        change = entry(b, "/a.txt", b"new", change="updated", datetime=dated, path="/a.txt")
        manifest = urlset("changedump-manifest", [change], **span, until=dated)
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as zf:
            zf.writestr("manifest.xml", manifest)
            zf.writestr("a.txt", b"new")
        package = out.getvalue()
        src.files["/p1.zip"] = package
        listed = {"loc": f"{b}/p1.zip", "length": len(package), "md5": md5(package)}
        src.docs["/changedump.xml"] = urlset(
            "changedump", [{**listed, **span, "until": dated}], **span
        )
        code, found = cli_json("audit", b, dest)
        assert code == 1 and found["different"] == 1, found
        code, summary = cli_json("sync", b, dest)
        s = set_report(summary, "capabilitylist.xml")
        assert code == 0 and s["via"] == "dumps" and tree(dest) == {"a.txt": b"new"}, summary
        warned = [p["message"] for p in s["problems"]]
        assert any(f"up to {hours} h behind the cursor" in m for m in warned), warned
        assert "/a.txt" not in src.hits or src.hits["/a.txt"] == 1  # the baseline's GET
        code, found = cli_json("audit", b, dest)
        assert code == 0 and found["in_sync"] == 1, found
