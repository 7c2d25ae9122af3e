"""Sizes and durations as people write them on a command line or in a configuration file."""

from __future__ import annotations

import re

__all__ = ["ascii_int", "format_size", "parse_duration", "parse_size"]

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


#: Digits beyond which a number in a header is not taken (Python refuses to convert more than
#: 4,300; no length, delay or lease needs more than 20).
MAX_DIGITS = 100


def ascii_int(text: str) -> int | None:
    """The value of `text` when it is ASCII digits and nothing else (as the numbers of HTTP
    headers and forms are: Content-Length, Retry-After, Range, a lease), at most 100 of them;
    else None. `str.isdigit` alone takes `²`, which `int` refuses (a traceback from one
    header), and `١٢`, which it reads."""
    if len(text) > MAX_DIGITS or not (text.isascii() and text.isdigit()):
        return None
    return int(text)


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


_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str | float) -> float:
    """`3600`, `90s`, `15m`, `6h`, `1d`, `2w`, `1h30m` → seconds (zero allowed). ValueError
    for anything else."""
    if isinstance(text, int | float):
        return float(text)
    t = str(text).strip().lower()
    try:
        seconds = float(t)
    except ValueError:
        pos, seconds = 0, 0.0
        for m in _DURATION.finditer(t):
            if m.start() != pos:
                break
            seconds += float(m.group(1)) * _SECONDS[m.group(2)]
            pos = m.end()
        if pos != len(t) or not t:
            raise ValueError(f"not a duration: {text!r} (say 90s, 15m, 6h, 1d)") from None
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative: {text!r}")
    return seconds
