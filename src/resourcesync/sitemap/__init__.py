"""The sitemap codec: the one reader, the streaming writer, and the spec's rules.

The names below are imported from their modules on first use (PEP 562), so that a command
that only writes does not load the reader, the rules and lxml (issue 15.5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import exports

if TYPE_CHECKING:
    from .follow import Mapping, Resolver, iter_entries, walk
    from .read import DEFAULT_MAX_BYTES, DocumentReader, open_document, read_document
    from .rules import Finding, Report
    from .rules.validate import validate
    from .write import DocumentWriter, SplitResult, write_document, write_split

_WHERE = {
    "Mapping": "follow",
    "Resolver": "follow",
    "iter_entries": "follow",
    "walk": "follow",
    "DEFAULT_MAX_BYTES": "read",
    "DocumentReader": "read",
    "open_document": "read",
    "read_document": "read",
    "Finding": "rules",
    "Report": "rules",
    "validate": "rules",
    "DocumentWriter": "write",
    "SplitResult": "write",
    "write_document": "write",
    "write_split": "write",
}


__getattr__ = exports(__name__, _WHERE, globals())


__all__ = [
    "DEFAULT_MAX_BYTES",
    "DocumentReader",
    "DocumentWriter",
    "Finding",
    "Mapping",
    "Report",
    "Resolver",
    "SplitResult",
    "iter_entries",
    "open_document",
    "read_document",
    "validate",
    "walk",
    "write_document",
    "write_split",
]
