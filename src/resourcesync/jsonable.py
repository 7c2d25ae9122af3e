"""The JSON forms of model values that leave the program or are kept in a state database: a
link as `cat --json` shows it, and back.

First floor: imports the model and the datetime codec.
"""

from __future__ import annotations

from typing import Any

from .model import Link
from .w3cdt import format_w3c, parse_w3c

__all__ = ["link_from_json", "link_json"]

_FIELDS = ("type", "length", "hashes", "modified", "path", "pri", "encoding")


def link_json(ln: Link) -> dict[str, Any]:
    """`{"rel", "href", …}` with only the attributes the link has (and those the spec does not
    define, by their names)."""
    out: dict[str, Any] = {"rel": ln.rel, "href": ln.href}
    for key, value in (
        ("type", ln.type),
        ("length", ln.length),
        ("hashes", ln.hashes or None),
        ("modified", format_w3c(ln.modified) if ln.modified is not None else None),
        ("path", ln.path),
        ("pri", ln.pri),
        ("encoding", ln.encoding),
    ):
        if value is not None:
            out[key] = value
    out.update(ln.extra)
    return out


def link_from_json(d: dict[str, Any]) -> Link:
    """The link `link_json` gave `d` for."""
    modified = d.get("modified")
    return Link(
        rel=d["rel"],
        href=d["href"],
        type=d.get("type"),
        length=d.get("length"),
        hashes=d.get("hashes") or {},
        modified=parse_w3c(modified) if modified else None,
        path=d.get("path"),
        pri=d.get("pri"),
        encoding=d.get("encoding"),
        extra={k: v for k, v in d.items() if k not in ("rel", "href", *_FIELDS)},
    )
