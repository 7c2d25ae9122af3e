"""Dump packages unpacked into a Destination's tree (core 1.1 §11.2, §13.2): each member its
manifest lists goes through `Mirror.incoming` to where its URI maps, checked against the
manifest's length and hashes; a hostile member (an unsafe name, a bomb, a lie about its size)
is refused, and the others still go in.
"""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import ResourceSyncError
from ..model import Change, Resource
from .mirror import CHUNK, IntegrityError, Mirror, UnsafePath, Written

__all__ = ["extract"]


def extract(
    mirror: Mirror,
    package: Path,
    manifest: Iterable[Resource],
    *,
    max_ratio: float = 200.0,
    max_entry_bytes: int = 4 * 1024**3,
    ratio_floor: int = 1 << 20,
) -> Iterator[tuple[Resource, Written | ResourceSyncError]]:
    """Extract the members of a dump package that its manifest lists, each to where its URI
    maps, checked against the manifest's length and hashes.

    Yields (entry, Written) or (entry, the error) for every manifest entry with a `path`;
    entries without one (deletions in a Change Dump manifest) and `deleted` entries are
    skipped. A member is refused when its name is unsafe (`..`, absolute, backslash, NUL),
    it is absent, encrypted or a directory, its declared size differs from the manifest's
    length or exceeds `max_entry_bytes`, or its compression ratio exceeds `max_ratio`
    (checked for members larger than `ratio_floor` bytes: a small file of spaces is no
    bomb). A package that is not a readable ZIP raises ResourceSyncError.
    """
    try:
        zf = zipfile.ZipFile(package)
    except (OSError, zipfile.BadZipFile, ValueError) as exc:
        raise ResourceSyncError(f"not a readable ZIP package: {exc}", source=str(package)) from None
    with zf:
        for entry in manifest:
            if entry.path is None or entry.change == Change.DELETED:
                continue
            try:
                written = _extract_one(
                    mirror, zf, package, entry, entry.path, max_ratio, max_entry_bytes, ratio_floor
                )
            except ResourceSyncError as exc:
                yield entry, exc
            else:
                yield entry, written


def _extract_one(
    mirror: Mirror,
    zf: zipfile.ZipFile,
    package: Path,
    entry: Resource,
    member_path: str,
    max_ratio: float,
    max_entry_bytes: int,
    ratio_floor: int,
) -> Written:
    name = member_path[1:] if member_path.startswith("/") else member_path

    def refuse(why: str, cls: type[ResourceSyncError] = UnsafePath) -> ResourceSyncError:
        return cls(f"{package.name} member {name!r}: {why}", source=entry.loc, entry=name)

    if not name:
        raise refuse("empty member name")
    if name.startswith("/"):
        raise refuse("absolute member name")
    if "\\" in name:
        raise refuse("member name contains a backslash")
    if "\0" in name:
        raise refuse("member name contains NUL")
    if any(seg in ("", ".", "..") for seg in name.split("/")):
        raise refuse("member name has an empty, '.' or '..' segment")
    try:
        info = zf.getinfo(name)
    except KeyError:
        raise refuse("absent from the package", ResourceSyncError) from None
    if info.is_dir():
        raise refuse("is a directory")
    if info.flag_bits & 0x1:
        raise refuse("is encrypted")
    size = info.file_size
    if entry.length is not None and size != entry.length:
        raise refuse(f"declares {size} bytes, the manifest says {entry.length}", IntegrityError)
    if size > max_entry_bytes:
        raise refuse(f"{size} bytes exceeds the limit of {max_entry_bytes}")
    if size > ratio_floor and size / max(info.compress_size, 1) > max_ratio:
        raise refuse(
            f"compression ratio {size / max(info.compress_size, 1):.0f} exceeds {max_ratio:g}"
        )
    with mirror.incoming(entry.loc, length=size, hashes=entry.hashes, mtime=entry.lastmod) as inc:
        try:
            with zf.open(info) as member:
                while chunk := member.read(CHUNK):
                    if inc.received + len(chunk) > size:
                        raise refuse(f"inflates past its declared {size} bytes", IntegrityError)
                    inc.write(chunk)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError) as exc:
            raise refuse(f"cannot be read: {exc}", IntegrityError) from None
    assert inc.written is not None
    return inc.written
