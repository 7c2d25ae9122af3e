"""Sizes as people write them on a command line or in a configuration file."""

from __future__ import annotations

__all__ = ["format_size", "parse_size"]

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str | int) -> int:
    """`1048576`, `512K`, `50M`, `2G`, `1T` (binary multiples; a trailing `B`/`iB` allowed)
    → bytes. ValueError for anything else."""
    if isinstance(text, int):
        return text
    t = str(text).strip().lower().removesuffix("b").removesuffix("i")
    unit = t[-1:] if t[-1:] in _UNITS else ""
    try:
        return int(float(t[: len(t) - len(unit)]) * _UNITS[unit])
    except ValueError:
        raise ValueError(f"not a size: {text!r} (a number of bytes, or with K, M, G)") from None


def format_size(n: float) -> str:
    """Bytes as people read them: `512 B`, `1.1 KiB`, `48.0 MiB`, `2.3 GiB`."""
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"
    return f"{n:.1f} GiB"  # pragma: no cover - the loop returns
