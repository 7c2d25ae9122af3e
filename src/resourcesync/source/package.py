"""Dump packages: ZIP files of bitstreams with `manifest.xml` at the top level (§11, §13).

Packages are written streaming (one resource at a time, hashed while it is copied in), capped
in size (a new package starts when the next bitstream would pass the cap; one larger than the
cap gets a package of its own), ZIP64 where needed, and atomically (a temporary file renamed
into place). The manifest lists what actually went in — path (with its leading `/`), length
and digests of the bytes copied — and a copy of it, byte for byte the same as the one inside,
is published beside the package for the `rs:ln rel="contents"` link.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from ..atomic import AtomicFile
from ..hashing import MultiHasher, hash_file
from ..model import Document, Resource
from ..sitemap import DocumentWriter

__all__ = ["MANIFEST_NAME", "PackageInfo", "PackageItem", "write_packages"]

MANIFEST_NAME = "manifest.xml"
RESOURCES_PREFIX = "resources/"
_COMPRESSIBLE = ("text/", "application/xml", "application/json", "application/javascript")
ZIP64_FROM = 1 << 31


@dataclass(slots=True)
class PackageItem:
    """A bitstream to package: its manifest entry (loc, times, change …), where its bytes are,
    and its key (the path inside the package, under `/resources/`)."""

    key: str
    entry: Resource
    open: Callable[[], BinaryIO] | None
    length: int = 0
    #: The digests the bytes are expected to have (what the lists say); a bitstream that
    #: differs (the file changed since it was hashed) is packaged as read and reported.
    expect: dict[str, str] | None = None


@dataclass(slots=True)
class PackageInfo:
    """A written package and its manifest copy."""

    path: Path
    url: str
    manifest_path: Path
    manifest_url: str
    length: int
    md5: str
    entries: int
    first: datetime | None = None
    last: datetime | None = None
    skipped: list[str] = field(default_factory=list)
    #: Keys whose packaged bytes differ from their expected digests (or were left out).
    changed: list[str] = field(default_factory=list)


def _zip_time(value: datetime | None) -> tuple[int, int, int, int, int, int]:
    if value is None or value.year < 1980:
        return (1980, 1, 1, 0, 0, 0)
    if value.year > 2107:
        return (2107, 12, 31, 23, 59, 58)
    return (value.year, value.month, value.day, value.hour, value.minute, value.second)


def _compress(kind: str | None) -> int:
    if kind and kind.startswith(_COMPRESSIBLE):
        return zipfile.ZIP_DEFLATED
    return zipfile.ZIP_STORED


class _Package:
    """One package being written: the ZIP (temporary until committed) and its manifest."""

    def __init__(
        self,
        directory: Path,
        name: str,
        url_base: str,
        manifest_doc: Document,
        algorithms: tuple[str, ...],
        spec_version: str,
    ) -> None:
        self.path = directory / f"{name}.zip"
        self.url = url_base + f"{name}.zip"
        self.manifest_path = directory / f"{name}-manifest.xml"
        self.manifest_url = url_base + f"{name}-manifest.xml"
        self.algorithms = algorithms
        self.atomic = AtomicFile(self.path, make_parents=True)
        z: zipfile.ZipFile | None = None
        tmp_path: Path | None = None
        try:
            z = zipfile.ZipFile(self.atomic.file, "w", allowZip64=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{name}-manifest.", suffix=".tmp", dir=directory)
            os.close(fd)
            tmp_path = Path(tmp)
            manifest = DocumentWriter(tmp_path, manifest_doc, spec_version=spec_version)
        except BaseException:
            # Stopped half way (Ctrl-C, SIGTERM, a full disk): nothing left behind, and no
            # ZipFile left to complain when collected after its file (issue 14.4).
            _forget(z)
            self.atomic.abort()
            if tmp_path is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp_path)
            raise
        self.zip = z
        self.manifest_tmp = tmp_path
        self.manifest = manifest
        self.size = 0
        self.count = 0
        self.first: datetime | None = None
        self.last: datetime | None = None
        self.skipped: list[str] = []
        self.changed: list[str] = []

    def add(self, item: PackageItem) -> None:
        entry = item.entry
        if item.open is None:
            # A deletion in a Change Dump Manifest: an entry without a bitstream.
            self.manifest.write(entry)
            self._note(entry)
            return
        name = RESOURCES_PREFIX + item.key
        info = zipfile.ZipInfo(name, date_time=_zip_time(entry.lastmod))
        info.compress_type = _compress(entry.type)
        info.external_attr = 0o644 << 16
        hasher = MultiHasher(self.algorithms)
        try:
            src = item.open()
        except OSError as exc:
            # Gone or unreadable since the scan: left out of this package, reported.
            self.skipped.append(f"{item.key}: {exc.strerror or exc}")
            if item.expect is not None:
                self.changed.append(item.key)
            return
        try:
            with src, self.zip.open(info, "w", force_zip64=item.length >= ZIP64_FROM) as dst:
                while True:
                    try:
                        chunk = src.read(1 << 20)
                    except OSError as exc:
                        raise _Unread(exc) from None
                    if not chunk:
                        break
                    hasher.update(chunk)
                    dst.write(chunk)
        except _Unread as unread:
            # A read that failed half way leaves a member the manifest does not list; readers
            # of a dump go by its manifest.
            failed: OSError = unread.args[0]
            self.skipped.append(f"{item.key}: {failed.strerror or failed}")
            if item.expect is not None:
                self.changed.append(item.key)
            return
        except OSError as exc:
            # The package could not be written (a full disk): the run stops, saying which
            # (never an item said unreadable and left out of a package that goes on).
            self.atomic.name_in(exc)
            raise
        self.size += hasher.length
        digests = hasher.hexdigests()
        if item.expect is not None and any(item.expect.get(a, v) != v for a, v in digests.items()):
            self.changed.append(item.key)
        self.manifest.write(entry.replace(path="/" + name, length=hasher.length, hashes=digests))
        self._note(entry)

    def _note(self, entry: Resource) -> None:
        self.count += 1
        t = entry.change_time or entry.at
        if t is not None:
            self.first = self.first or t
            self.last = t

    def finish(self) -> PackageInfo:
        try:
            self.manifest.close()
            self.zip.write(self.manifest_tmp, MANIFEST_NAME, compress_type=zipfile.ZIP_DEFLATED)
            self.zip.close()
            self.atomic.commit()
            os.chmod(self.manifest_tmp, 0o644)
            os.replace(self.manifest_tmp, self.manifest_path)
        except BaseException as exc:
            self.abort(exc)
            raise
        length, digests = hash_file(self.path, ("md5",))
        return PackageInfo(
            path=self.path,
            url=self.url,
            manifest_path=self.manifest_path,
            manifest_url=self.manifest_url,
            length=length,
            md5=digests["md5"],
            entries=self.count,
            first=self.first,
            last=self.last,
            skipped=self.skipped,
            changed=self.changed,
        )

    def abort(self, exc: BaseException | None = None) -> None:
        _forget(self.zip)
        self.atomic.abort(exc)
        self.manifest.abort()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.manifest_tmp)


class _Unread(Exception):
    """A package's item that could not be read (its `OSError` the argument)."""


def _forget(z: zipfile.ZipFile | None) -> None:
    """Close a ZIP being abandoned, and make sure it never tries again: a ZipFile collected
    after its file was closed prints "Exception ignored … seek of closed file"."""
    if z is None:
        return
    try:
        with contextlib.suppress(Exception):
            z.close()
    finally:
        z.fp = None


def write_packages(
    directory: Path,
    url_base: str,
    items: Iterable[PackageItem],
    manifest_doc: Document,
    *,
    package_size: int,
    algorithms: tuple[str, ...] = ("md5",),
    spec_version: str = "1.1",
    prefix: str = "package",
) -> Iterator[PackageInfo]:
    """Write the items into as many packages as the size cap asks (`prefix-00001.zip`, …),
    yielding each package as it is finished."""
    directory.mkdir(parents=True, exist_ok=True)
    current: _Package | None = None
    number = 0
    try:
        for item in items:
            if (
                current is not None
                and current.count
                and (current.size + item.length > package_size)
            ):
                info = current.finish()
                current = None
                yield info
            if current is None:
                number += 1
                current = _Package(
                    directory,
                    f"{prefix}-{number:05d}",
                    url_base,
                    manifest_doc,
                    algorithms,
                    spec_version,
                )
            current.add(item)
        if current is not None:
            info = current.finish()
            current = None
            yield info
    finally:
        if current is not None:
            current.abort()
