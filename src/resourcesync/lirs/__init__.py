"""LIRS: the antenna sites' last-modified relay format (LIRS 2.1 and the practice around it).

`codec` reads and writes records, `merge` combines relayed records, `convert` bridges LIRS and
ResourceSync, `antenna` polls sites and publishes what it saw. Stands on `model`, `sitemap` and
`http`; imports nothing of `source`, `destination` or `hub`.
"""

from __future__ import annotations

from .codec import (
    LirsReader,
    LirsWarning,
    LirsWriter,
    Record,
    detect_encoding,
    format_record,
    open_lirs,
    parse_record,
    read_records,
    write_records,
)

__all__ = [
    "LirsReader",
    "LirsWarning",
    "LirsWriter",
    "Record",
    "detect_encoding",
    "format_record",
    "open_lirs",
    "parse_record",
    "read_records",
    "write_records",
]
