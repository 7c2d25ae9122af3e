"""Following links down a tree of documents: index → parts, description → capability lists,
capability list → capability documents, archives → archived lists, dumps → manifests.

Every document is opened with the one reader. The walk is breadth-first with a visited set
(loops are reported, not followed), a depth limit, and a cap on the number of documents.

A document read from a local file names its children by URL. Those are found through
`--map URL=DIR` mappings, else next to the referring file by their last path segment; a local
tree is never left for the network unless a mapping says so. A document read over HTTP has its
children fetched over HTTP.
"""

from __future__ import annotations

import posixpath
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

from ..errors import ReadError
from ..model import INDEXABLE, Capability, Resource
from .read import DEFAULT_MAX_BYTES, DocumentReader, ProblemHandler, Source, is_url, open_document

__all__ = [
    "FOLLOW_ALL",
    "FOLLOW_INDEX",
    "FOLLOW_NONE",
    "Mapping",
    "Resolver",
    "Visit",
    "earliest_at",
    "iter_entries",
    "walk",
]

FOLLOW_NONE = "none"
FOLLOW_INDEX = "index"
FOLLOW_ALL = "all"

_ARCHIVES = frozenset(
    {
        Capability.RESOURCELIST_ARCHIVE,
        Capability.RESOURCEDUMP_ARCHIVE,
        Capability.CHANGELIST_ARCHIVE,
        Capability.CHANGEDUMP_ARCHIVE,
    }
)


@dataclass(frozen=True, slots=True)
class Mapping:
    """`URL prefix = local directory`: documents under the prefix are read from the directory."""

    prefix: str
    directory: Path

    @classmethod
    def parse(cls, text: str) -> Mapping:
        prefix, sep, directory = text.partition("=")
        if not sep or not is_url(prefix) or not directory:
            raise ValueError(f"a mapping is URL=DIR, not {text!r}")
        return cls(prefix, Path(directory))


class Resolver:
    """Turns a URL named by a document into something the reader can open."""

    def __init__(self, mappings: Sequence[Mapping] = ()) -> None:
        # Longest prefix first, so a mapping for a sub-tree wins over one for the site.
        self.mappings = sorted(mappings, key=lambda m: len(m.prefix), reverse=True)

    def resolve(self, url: str, referrer: DocumentReader | None) -> Source:
        for m in self.mappings:
            if url.startswith(m.prefix):
                rest = unquote(urlsplit(url[len(m.prefix) :]).path).lstrip("/")
                return _inside(m.directory, rest, url)
        if referrer is not None and referrer.path is not None and is_url(url):
            name = posixpath.basename(unquote(urlsplit(url).path))
            candidate = referrer.path.parent / name if name else None
            if candidate is not None and candidate.is_file():
                return candidate
            raise ReadError(
                f"cannot follow {url} from a local file: no {name or 'file'} beside it "
                "(map the URL to a directory with --map URL=DIR)",
                source=referrer.name,
            )
        if referrer is not None and referrer.url is not None:
            return urljoin(referrer.url, url)
        return url


def _inside(directory: Path, rest: str, url: str) -> Path:
    base = directory.resolve()
    candidate = (base / rest).resolve()
    if candidate != base and base not in candidate.parents:
        raise ReadError(f"maps outside {directory}", source=url)
    return candidate


def children(reader: DocumentReader, res: Resource, mode: str) -> list[str]:
    """The documents an entry points down to, under the follow mode."""
    if mode == FOLLOW_NONE:
        return []
    doc = reader.document
    if doc.index:
        return [res.loc]
    if mode != FOLLOW_ALL:
        return []
    cap = doc.capability
    if cap == Capability.DESCRIPTION or cap in _ARCHIVES:
        return [res.loc]
    if cap == Capability.CAPABILITYLIST:
        return [] if res.capability == Capability.CHANGE_NOTIFICATION else [res.loc]
    if cap in (Capability.RESOURCEDUMP, Capability.CHANGEDUMP):
        return [ln.href for ln in res.links if ln.rel == "contents"]
    return []


@dataclass
class Visit:
    """One document reached by the walk. Iterate `entries()` (or don't: the walk drains it)."""

    reader: DocumentReader
    depth: int
    parent: str | None
    _mode: str
    _found: list[str] = field(default_factory=list)
    _limit: int = 100_000

    @property
    def name(self) -> str:
        return self.reader.name

    def entries(self) -> Iterator[tuple[int, Resource]]:
        """The document's entries. Following, an entry of a urlset that carries the list's own
        capability (`<rs:md capability="resourcelist"/>` in a Resource List: a list of lists
        written as a urlset, not as a sitemapindex) is a part, followed as an index's; with
        FOLLOW_INDEX it is not given as an entry (it is no resource: read as one, the part
        was stored as content and the resources it lists were never seen), said once."""
        if self._mode == FOLLOW_NONE:
            yield from self.reader.entries()
            return
        doc = self.reader.document
        own = doc.capability if not doc.index and doc.capability in INDEXABLE else None
        for line, res in self.reader.entries():
            if own is not None and res.capability == own:
                if len(self._found) < self._limit:
                    self._found.append(res.loc)
                if self._mode == FOLLOW_INDEX:
                    self.reader.warn(
                        "nested-list",
                        f"a {own} listed as an entry of a {own} (a list of lists written as a "
                        "urlset, not as a sitemapindex): followed as an index's part, and so "
                        "may others",
                        line,
                    )
                    continue
            elif len(self._found) < self._limit:
                self._found.extend(children(self.reader, res, self._mode))
            yield line, res


OnSkip = Callable[[str, str, str | None], None]


def earliest_at(at: datetime | None, visit: Visit) -> datetime | None:
    """The `at` (or `completed`) of the lists a walk has read so far, `at` before `visit`:
    the first document's that gives one — an index's, else its first dated part's — lowered by
    any later root's (`walk`'s `also`): lists made at different times are the Source as of the
    earliest, and the changes after it are what a copy must apply."""
    doc = visit.reader.document
    this = doc.at or doc.completed
    if at is None:
        return this
    if visit.depth == 0 and this is not None and this < at:
        return this
    return at


def walk(
    start: Source,
    *,
    mode: str = FOLLOW_ALL,
    resolver: Resolver | None = None,
    client: Any = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = 6,
    max_documents: int = 10_000,
    on_problem: Callable[[str], ProblemHandler] | None = None,
    on_skip: OnSkip | None = None,
    on_error: Callable[[ReadError, str | None], None] | None = None,
    also: Sequence[str] = (),
) -> Iterator[Visit]:
    """Yield each document of the tree below `start`, the start first.

    `also`: documents read beside `start`, as the parts of one index whose first part it is
    (a Capability List that lists a capability more than once): each at depth 0, after
    `start` and before any part of either (see `earliest_at`).

    `on_problem(name)` gives the problem handler for the document called `name` (for the
    validator); `on_skip(url, reason, referrer)` hears of links not followed (loops, depth,
    cap). A document that cannot be read raises ReadError, or, with `on_error(error, referrer)`,
    is reported there and the walk goes on with the others.
    """
    resolver = resolver or Resolver()
    # Each queued document carries the chain of documents that led to it: a link back into
    # that chain is a loop (reported); a document reached again by another way (a Change List
    # in both the index and the archive) is simply not read twice.
    queue: deque[tuple[Source, int, str | None, frozenset[str]]] = deque()
    queue.append((start, 0, None, frozenset()))
    queue.extend((more, 0, None, frozenset()) for more in also)
    seen: set[str] = set()
    count = 0
    while queue:
        target, depth, parent, ancestors = queue.popleft()
        key = str(target)
        if key in ancestors:
            if on_skip:
                on_skip(key, "a loop: it links back to a document that led to it", parent)
            continue
        if key in seen:
            continue
        seen.add(key)
        count += 1
        if count > max_documents:
            if on_skip:
                on_skip(key, f"more than {max_documents} documents: stopped following", parent)
            return
        name = key if isinstance(target, str | Path) else None
        try:
            reader = open_document(target, name=name, client=client, max_bytes=max_bytes)
            if on_problem is not None:
                # Before anything is parsed: every problem carries the reader's own name.
                reader.on_problem = on_problem(reader.name)
        except ReadError as exc:
            if on_error is None:
                raise
            on_error(exc, parent)
            continue
        with reader:
            visit = Visit(reader, depth, parent, mode)
            try:
                reader.document  # noqa: B018 - a ReadError surfaces here, before the yield
            except ReadError as exc:
                if on_error is None:
                    raise
                on_error(exc, parent)
                continue
            yield visit
            try:
                for _ in visit.entries():  # drain what the caller did not read
                    pass
            except ReadError as exc:
                if on_error is None:
                    raise
                on_error(exc, parent)
        for url in visit._found:
            if depth + 1 > max_depth:
                if on_skip:
                    on_skip(url, f"deeper than {max_depth} levels: not followed", reader.name)
                continue
            try:
                child = resolver.resolve(url, reader)
            except ReadError as exc:
                if on_skip:
                    on_skip(url, exc.message, reader.name)
                continue
            queue.append((child, depth + 1, reader.name, ancestors | {key}))


def iter_entries(
    source: Source,
    *,
    resolver: Resolver | None = None,
    client: Any = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = 3,
) -> Iterator[Resource]:
    """The entries of a document; for an index, the entries of all its parts, in order.

    Loops and excessive depth raise ReadError: a list that cannot be read whole must not look
    like a shorter list.
    """

    def skip(url: str, reason: str, referrer: str | None) -> None:
        raise ReadError(f"index part {url}: {reason}", source=referrer)

    for visit in walk(
        source,
        mode=FOLLOW_INDEX,
        resolver=resolver,
        client=client,
        max_bytes=max_bytes,
        max_depth=max_depth,
        on_skip=skip,
    ):
        if visit.reader.document.index:
            for _ in visit.entries():
                pass
            continue
        for _, res in visit.entries():
            yield res
