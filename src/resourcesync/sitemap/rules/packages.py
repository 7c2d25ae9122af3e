"""With `--packages`: the packages of a Resource Dump or Change Dump are fetched and checked
against the dump (core 1.1 §11.1, §13.1): length and hash as the dump says, a `manifest.xml`
inside equal to the copy at `rel="contents"`, and every path it lists present in the ZIP."""

from __future__ import annotations

import contextlib
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from itertools import zip_longest
from pathlib import Path
from typing import Any

from ...errors import ReadError, ResourceSyncError
from ...hashing import ALGORITHMS, MultiHasher, normalise_digest
from ...model import Resource
from ..follow import Resolver
from ..read import DocumentReader, open_document
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
                    "core-dump-package-length-mismatch",
                    f"the package is {hasher.length} bytes, the dump says {res.length}",
                )
            for algo, digest in hasher.hexdigests().items():
                said = normalise_digest(algo, res.hashes[algo]) or res.hashes[algo]
                if said.lower() != digest:
                    error(
                        "core-dump-package-hash-mismatch",
                        f"the package's {algo} is {digest}, the dump says {res.hashes[algo]}",
                    )
            _check_zip(path, reader, res, resolver, client, max_bytes, error)
    except ResourceSyncError as exc:  # unreadable, or a manifest value the reader refuses
        error("core-dump-package-unreadable", f"package not checked: {exc}")
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
    """Both manifests are streamed side by side (the one inside read straight from the ZIP,
    capped at `max_bytes` after decompression): memory stays flat whatever their size."""
    contents = res.link("contents")
    with contextlib.ExitStack() as stack:
        z = stack.enter_context(zipfile.ZipFile(path))
        try:
            info = z.getinfo("manifest.xml")
        except KeyError:
            error("core-dump-package-manifest", "the package has no manifest.xml (§11.1)")
            return
        names = set(z.namelist())
        inner = stack.enter_context(
            open_document(
                stack.enter_context(z.open(info)),
                name=f"{res.loc}!manifest.xml",
                max_bytes=max_bytes,
            )
        )
        copy = None
        if contents is not None:
            copy = stack.enter_context(
                open_document(
                    resolver.resolve(contents.href, reader), client=client, max_bytes=max_bytes
                )
            )
        differs: str | None = None
        if copy is not None and copy.document != inner.document:
            differs = "in its header"
        missing: str | None = None
        pairs = zip_longest(inner, copy if copy is not None else (), fillvalue=None)
        for count, (mine, theirs) in enumerate(pairs, 1):
            if (
                mine is not None
                and missing is None
                and mine.path is not None
                and mine.path.lstrip("/") not in names
            ):
                missing = f"{mine.path} ({mine.loc})"
            if copy is not None and differs is None and mine != theirs:
                differs = f"from entry {count}"
            if (differs is not None or copy is None) and missing is not None:
                break
    if missing is not None:
        error(
            "core-dump-package-path",
            f"the manifest lists {missing}, which is not in the package",
        )
    if differs is not None and contents is not None:
        error(
            "core-dump-manifest-copy",
            f"the manifest at {contents.href} differs from the package's manifest.xml ({differs})",
        )
