"""With `--packages`: the packages of a Resource Dump or Change Dump are fetched and checked
against the dump (core 1.1 §11.1, §13.1): length and hash as the dump says, a `manifest.xml`
inside equal to the copy at `rel="contents"`, and every path it lists present in the ZIP."""

from __future__ import annotations

import contextlib
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...errors import ReadError
from ...hashing import ALGORITHMS, MultiHasher, normalise_digest
from ...model import Resource
from ..follow import Resolver
from ..read import DocumentReader, read_document
from .findings import ERROR, Finding

__all__ = ["check_package"]

_CHUNK = 1 << 20


@contextlib.contextmanager
def _local(source: Any, client: Any, max_bytes: int, hasher: MultiHasher) -> Iterator[Path]:
    """The package as a local file (downloaded to a temporary file when it is a URL), hashed
    on the way."""
    if isinstance(source, Path):
        with open(source, "rb") as f:
            while chunk := f.read(_CHUNK):
                hasher.update(chunk)
        yield source
        return
    from ... import http

    with tempfile.TemporaryDirectory(prefix="resourcesync-package-") as tmp:
        target = Path(tmp) / "package.zip"
        with http.open_stream(str(source), client=client) as response, open(target, "wb") as out:
            for chunk in http.iter_body(response, str(source), _CHUNK):
                hasher.update(chunk)
                if hasher.length > max_bytes:
                    raise ReadError(
                        f"package larger than the limit of {max_bytes} bytes", source=str(source)
                    )
                out.write(chunk)
        yield target


def check_package(
    reader: DocumentReader,
    res: Resource,
    line: int,
    resolver: Resolver,
    client: Any,
    max_bytes: int,
    emit: Callable[[Finding], None],
) -> None:
    name = reader.name

    def error(rule: str, message: str) -> None:
        emit(Finding(ERROR, message, name, line, res.loc, rule))

    algorithms = [a for a in res.hashes if a in ALGORITHMS]
    hasher = MultiHasher(algorithms)
    try:
        source = resolver.resolve(res.loc, reader)
        if not isinstance(source, Path | str):
            return
        with _local(source, client, max_bytes, hasher) as path:
            if res.length is not None and hasher.length != res.length:
                error(
                    "core-dump-package-length",
                    f"the package is {hasher.length} bytes, the dump says {res.length}",
                )
            for algo, digest in hasher.hexdigests().items():
                said = normalise_digest(algo, res.hashes[algo]) or res.hashes[algo]
                if said.lower() != digest:
                    error(
                        "core-dump-package-hash",
                        f"the package's {algo} is {digest}, the dump says {res.hashes[algo]}",
                    )
            _check_zip(path, reader, res, resolver, client, max_bytes, error)
    except ReadError as exc:
        error("core-dump-package-unreadable", f"package not checked: {exc.message}")
    except (OSError, zipfile.BadZipFile) as exc:
        error("core-dump-package-unreadable", f"package not checked: {exc}")


def _check_zip(
    path: Path,
    reader: DocumentReader,
    res: Resource,
    resolver: Resolver,
    client: Any,
    max_bytes: int,
    error: Callable[[str, str], None],
) -> None:
    with zipfile.ZipFile(path) as z:
        try:
            info = z.getinfo("manifest.xml")
        except KeyError:
            error("core-dump-package-manifest", "the package has no manifest.xml (§11.1)")
            return
        if info.file_size > max_bytes:
            error("core-dump-package-manifest", "the package's manifest.xml is over the size limit")
            return
        inside = z.read(info)
        names = set(z.namelist())
    inner_doc, inner = read_document(inside, name=f"{res.loc}!manifest.xml", max_bytes=max_bytes)
    for entry in inner:
        if entry.path is not None and entry.path.lstrip("/") not in names:
            error(
                "core-dump-package-path",
                f"the manifest lists {entry.path} ({entry.loc}), which is not in the package",
            )
            break
    contents = res.link("contents")
    if contents is None:
        return
    copy_source = resolver.resolve(contents.href, reader)
    copy_doc, copy = read_document(copy_source, client=client, max_bytes=max_bytes)
    if copy_doc != inner_doc or copy != inner:
        where = next(
            (i for i, (a, b) in enumerate(zip(copy, inner, strict=False)) if a != b),
            min(len(copy), len(inner)),
        )
        error(
            "core-dump-manifest-copy",
            f"the manifest at {contents.href} differs from the package's manifest.xml "
            f"(from entry {where + 1}; {len(copy)} against {len(inner)} entries)",
        )
