"""A package's item that cannot be read is left out and said; a package the disk cannot take
stops the run (issue 17.17's class: a refused write is never taken for an unreadable item)."""

from __future__ import annotations

import errno
import io
import zipfile
from pathlib import Path

import pytest

from resourcesync.model import Capability, Document, Resource
from resourcesync.source.package import PackageItem, write_packages

URL = "http://example.org/dump/"


class FailsHalfway(io.BytesIO):
    """A file whose second read fails (a disk error half way through it)."""

    def __init__(self) -> None:
        super().__init__(b"x" * 3_000_000)

    def read(self, size: int | None = -1) -> bytes:
        if self.tell():
            raise OSError(errno.EIO, "Input/output error")
        return super().read(size)


def items() -> list[PackageItem]:
    def item(key: str, data: bytes | None) -> PackageItem:
        opened = (lambda: io.BytesIO(data)) if data is not None else FailsHalfway
        return PackageItem(
            key=key,
            entry=Resource(loc=URL + key),
            open=opened,  # type: ignore[arg-type]
            length=len(data) if data is not None else 3_000_000,
        )

    return [item("a.txt", b"a"), item("broken.bin", None), item("c.txt", b"c")]


def test_an_item_unreadable_half_way_is_left_out_and_said(tmp_path: Path) -> None:
    doc = Document(capability=Capability.RESOURCEDUMP_MANIFEST)
    (info,) = write_packages(tmp_path, URL, items(), doc, package_size=1 << 30)
    assert info.entries == 2
    assert info.skipped == ["broken.bin: Input/output error"]
    with zipfile.ZipFile(info.path) as z:
        assert {"resources/a.txt", "resources/c.txt"} <= set(z.namelist())


def test_a_package_the_disk_refuses_is_the_failure_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = zipfile.ZipFile.open

    def refused(z: zipfile.ZipFile, name: object, mode: str = "r", **kw: object) -> object:
        member = real(z, name, mode, **kw)  # type: ignore[arg-type]
        if mode == "w":

            def write(data: bytes) -> int:
                raise OSError(errno.ENOSPC, "No space left on device")

            member.write = write  # type: ignore[method-assign]
        return member

    monkeypatch.setattr(zipfile.ZipFile, "open", refused)
    doc = Document(capability=Capability.RESOURCEDUMP_MANIFEST)
    with pytest.raises(OSError) as caught:
        list(write_packages(tmp_path, URL, items(), doc, package_size=1 << 30))
    assert caught.value.errno == errno.ENOSPC
    assert caught.value.filename == str(tmp_path / "package-00001.zip")
    assert [p.name for p in tmp_path.iterdir()] == []  # nothing left behind
