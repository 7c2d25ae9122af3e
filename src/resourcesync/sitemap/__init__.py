"""The sitemap codec: the one reader, the streaming writer, and the spec's rules."""

from .follow import Mapping, Resolver, iter_entries, walk
from .read import DEFAULT_MAX_BYTES, DocumentReader, open_document, read_document
from .rules import Finding, Report, validate
from .write import DocumentWriter, SplitResult, write_document, write_split

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
