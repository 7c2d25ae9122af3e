"""W3C Datetime (https://www.w3.org/TR/NOTE-datetime), the profile of ISO 8601 the spec uses.

All six granularities are read: `YYYY`, `YYYY-MM`, `YYYY-MM-DD`, `YYYY-MM-DDThh:mmTZD`,
`YYYY-MM-DDThh:mm:ssTZD`, `YYYY-MM-DDThh:mm:ss.sTZD`. A time always carries its zone designator
(`Z` or `+hh:mm`/`-hh:mm`); a date alone is taken as midnight UTC. Every value comes back as an
aware datetime in UTC, and is written as `YYYY-MM-DDThh:mm:ss[.ffffff]Z`.

Ground floor: imports nothing of ours.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

__all__ = [
    "ZONE_SPAN",
    "W3CDatetimeError",
    "coarseness",
    "format_w3c",
    "named_span",
    "parse_bent",
    "parse_http_date",
    "parse_w3c",
    "parse_zoneless",
    "seconds_before",
]

_PATTERN = re.compile(
    r"(?P<year>\d{4})"
    r"(?:-(?P<month>\d{2})"
    r"(?:-(?P<day>\d{2})"
    r"(?:T(?P<hour>\d{2}):(?P<minute>\d{2})"
    r"(?::(?P<second>\d{2})(?:\.(?P<fraction>\d+))?)?"
    r"(?P<tz>Z|[+-]\d{2}:\d{2}))?)?)?",
    re.ASCII,  # digits are ASCII digits (`\d` alone also takes `２０１３` and `١٢٣`)
)


_ZONELESS = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})T(?P<time>\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)", re.ASCII
)


#: From UTC−12 to UTC+14: a time read as UTC that was written without its zone is within 14
#: hours of the time meant.
ZONE_SPAN = 14 * 3600.0
#: What a W3C Datetime of reduced precision names, by its length: a day, a month, a year,
#: and the most seconds that is.
_SPANS = {10: ("day", 86400.0), 7: ("month", 31 * 86400.0), 4: ("year", 366 * 86400.0)}


def named_span(text: str) -> str | None:
    """ "day", "month" or "year" when a W3C Datetime names one rather than a time; else None."""
    span = _SPANS.get(len(text.strip()))
    return None if span is None else span[0]


def coarseness(text: str) -> float:
    """How far (seconds) the time meant by a W3C Datetime may be from the one `parse_w3c`
    reads when the text names a day, a month or a year rather than a time (`2024-01-02` is
    read as its midnight UTC; the change it dates may be at any time of that day, in any
    zone): the span it names and `ZONE_SPAN`. 0 for a time of day (to the minute, with its
    zone)."""
    span = _SPANS.get(len(text.strip()))
    return 0.0 if span is None else span[1] + ZONE_SPAN


class W3CDatetimeError(ValueError):
    """The text is not a W3C Datetime."""


def parse_w3c(text: str) -> datetime:
    """Parse a W3C Datetime into an aware UTC datetime.

    Fractions beyond microseconds are truncated (so order is kept). Raises W3CDatetimeError.
    """
    if (
        len(text) == 20
        and text[19] == "Z"
        and text[10] == "T"
        and text[4] == "-"
        and text[7] == "-"
        and text[13] == ":"
        and text[16] == ":"
    ):
        # The common full form: the C parser, after checking its shape ourselves (fromisoformat
        # alone also takes ISO week dates and other forms W3C Datetime does not allow; with the
        # separators fixed it accepts only ASCII digits between them).
        try:
            return datetime.fromisoformat(text)
        except ValueError as exc:
            raise W3CDatetimeError(f"not a valid datetime: {text!r} ({exc})") from None
    if len(text) > 20 and text[10] == "T" and text[13] == ":" and text[16] == ":":
        fast = _full_form(text)
        if fast is not None:
            return fast
    return _by_pattern(text)


def _by_pattern(text: str) -> datetime:
    """`parse_w3c` by the pattern alone: every form, and the reason a text is refused."""
    m = _PATTERN.fullmatch(text.strip())
    if m is None:
        raise W3CDatetimeError(f"not a W3C datetime: {text!r}")
    g = m.groupdict()
    try:
        year = int(g["year"])
        month = int(g["month"] or 1)
        day = int(g["day"] or 1)
        hour = int(g["hour"] or 0)
        minute = int(g["minute"] or 0)
        second = int(g["second"] or 0)
        fraction = g["fraction"]
        micro = int((fraction + "000000")[:6]) if fraction else 0
        tz = g["tz"]
        if tz is None or tz == "Z":
            zone: timezone = UTC
        else:
            sign = -1 if tz[0] == "-" else 1
            hours, minutes = int(tz[1:3]), int(tz[4:6])
            if hours > 23 or minutes > 59:
                raise ValueError(f"zone offset out of range: {tz}")
            zone = timezone(sign * timedelta(hours=hours, minutes=minutes))
        value = datetime(year, month, day, hour, minute, second, micro, tzinfo=zone)
        return value.astimezone(UTC) if zone is not UTC else value
    except ValueError as exc:
        raise W3CDatetimeError(f"not a valid datetime: {text!r} ({exc})") from None
    except OverflowError:
        # `0001-01-01T00:00:00+01:00` is before year 1 in UTC (and 9999's last hour after
        # 9999 west of Greenwich): no datetime holds it.
        raise W3CDatetimeError(f"out of range once in UTC: {text!r}") from None


def _full_form(text: str) -> datetime | None:
    """The other full forms the C parser reads as W3C Datetime means them, when `text` has one
    of their shapes exactly: a fraction of any length (`…:ss.170491Z`, what file times give),
    a numeric zone (`…:ss+09:00`, as Japanese repositories write), or both. None otherwise
    (and when the C parser refuses it): the pattern then decides, and says why."""
    if text[4] != "-" or text[7] != "-":
        return None
    if text[-1] == "Z":
        zone = len(text) - 1
    elif text[-6] in "+-" and text[-3] == ":":
        zone = len(text) - 6
        if not (text[-5:-3] + text[-2:]).isdigit() or text[-2] > "5":
            return None  # (the C parser takes a zone's minutes up to 99)
    else:
        return None
    if zone != 19:
        digits = text[20:zone]
        if text[19] != "." or not digits or not (digits.isascii() and digits.isdigit()):
            return None
    try:
        value = datetime.fromisoformat(text)
        return value if text[-1] == "Z" else value.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def seconds_before(t: datetime, seconds: float) -> datetime:
    """`t` less `seconds`, or the earliest datetime there is when that is before year 1 (a
    document may date a change at `0001-01-01T00:00:00Z`; a window behind it must not end a
    run with OverflowError)."""
    try:
        return t - timedelta(seconds=seconds)
    except OverflowError:
        return datetime.min.replace(tzinfo=t.tzinfo)


def parse_zoneless(text: str) -> datetime | None:
    """A date and time without its zone designator (`2021-01-20T20:25:31.541226`, as CORE and
    RSEngine publish), read as UTC; None when the text is not of that shape. Not W3C Datetime:
    readers that tolerate it say so (the validator calls it an error)."""
    m = _ZONELESS.fullmatch(text.strip())
    if m is None:
        return None
    bent = parse_bent(text)
    return None if bent is None else bent[0]


#: ISO 8601 forms near W3C Datetime: `T` or a space (or `t`), a decimal comma, a zone written
#: `z`, `+hhmm`, `+hh`, `UTC` or `GMT`, or after a space, or none.
_BENT = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})(?P<sep>[Tt ])"
    r"(?P<hm>\d{2}:\d{2})(?::(?P<s>\d{2})(?:[.,](?P<f>\d+))?)?"
    r"(?P<gap> ?)(?P<zone>[Zz]|UTC|GMT|[+-]\d{2}(?::?\d{2})?)?",
    re.ASCII,
)
#: The start of an HTTP or e-mail date (`Mon, 01 Jan 2024 …`, `Monday, 01-Jan-24 …`,
#: `Mon Jan  1 …`).
_MAIL_DATE = re.compile(r"[A-Z][a-z]{2}(?:[a-z]*,| )", re.ASCII)


def parse_bent(text: str) -> tuple[datetime, str] | None:
    """A datetime written in a form near W3C Datetime that leaves no doubt what it means — as
    Sources write them: `str()` of a Python datetime (`2024-01-01 10:00:00+00:00`), Java's and
    PHP's `+0900`, a time without its zone (CORE, RSEngine: read as UTC), an HTTP or e-mail date
    (RSS habits) — with how it bends the form (`"no zone"` first when it has none); None when
    the text is none of these, or no valid time. Not W3C Datetime: readers that tolerate it say
    so (the validator calls it an error)."""
    t = text.strip()
    m = _BENT.fullmatch(t)
    if m is None:
        if _MAIL_DATE.match(t) is None:
            return None
        when = parse_http_date(t)
        return None if when is None else (when, "an e-mail date")
    bends = []
    zone = m["zone"]
    if zone is None:
        bends.append("no zone")
        zone = "Z"
    if m["sep"] != "T":
        bends.append(f"{m['sep']!r} for the T")
    if m["f"] is not None and "," in t:
        bends.append("a decimal comma")
    if m["gap"]:
        bends.append("a space before the zone")
    if zone in ("z", "UTC", "GMT"):
        bends.append(f"the zone written {zone}")
        zone = "Z"
    elif zone != "Z" and len(zone) != 6:
        bends.append("a zone without its colon" if len(zone) == 5 else "a zone of hours only")
        zone = f"{zone[:3]}:{zone[3:5] or '00'}"
    seconds = f":{m['s']}" if m["s"] is not None else ""
    fraction = f".{m['f']}" if m["f"] is not None else ""
    try:
        value = parse_w3c(f"{m['date']}T{m['hm']}{seconds}{fraction}{zone}")
    except W3CDatetimeError:
        return None
    return value, ", ".join(bends)


def format_w3c(value: datetime) -> str:
    """Write a datetime as `YYYY-MM-DDThh:mm:ss[.ffffff]Z` in UTC. Naive values are taken as UTC."""
    if value.tzinfo is UTC:
        # What parse_w3c gives: the C formatter, `+00:00` written `Z` (a year is always
        # written with four digits, a fraction with six).
        return value.isoformat()[:-6] + "Z"
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    elif value.utcoffset():
        value = value.astimezone(UTC)
    if value.microsecond:
        return (
            f"{value.year:04d}-{value.month:02d}-{value.day:02d}T"
            f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}.{value.microsecond:06d}Z"
        )
    return (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}T"
        f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}Z"
    )


def parse_http_date(value: str | None) -> datetime | None:
    """An HTTP-date (`Sun, 06 Nov 1994 08:49:37 GMT`, and the obsolete forms RFC 9110 §5.6.7
    has recipients read) as an aware UTC datetime; None when absent or not a date. A date
    without a zone (`-0000`) is UTC, never this machine's local time."""
    if not value:
        return None
    import email.utils  # (11 ms of imports: only for the commands that meet a date)

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
