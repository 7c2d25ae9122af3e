from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resourcesync.w3cdt import W3CDatetimeError, coarseness, format_w3c, parse_w3c


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2013", datetime(2013, 1, 1, tzinfo=UTC)),
        ("2013-07", datetime(2013, 7, 1, tzinfo=UTC)),
        ("2013-07-16", datetime(2013, 7, 16, tzinfo=UTC)),
        ("2013-07-16T19:20Z", datetime(2013, 7, 16, 19, 20, tzinfo=UTC)),
        ("2013-07-16T19:20+01:00", datetime(2013, 7, 16, 18, 20, tzinfo=UTC)),
        ("2013-07-16T19:20:30Z", datetime(2013, 7, 16, 19, 20, 30, tzinfo=UTC)),
        ("2013-07-16T19:20:30-05:30", datetime(2013, 7, 17, 0, 50, 30, tzinfo=UTC)),
        ("2013-07-16T19:20:30.45Z", datetime(2013, 7, 16, 19, 20, 30, 450000, tzinfo=UTC)),
        # Fractions beyond microseconds are truncated, never rounded up past the next second.
        ("2013-07-16T19:20:30.9999999Z", datetime(2013, 7, 16, 19, 20, 30, 999999, tzinfo=UTC)),
        ("2013-12-31T23:30:00-01:00", datetime(2014, 1, 1, 0, 30, tzinfo=UTC)),
    ],
)
def test_every_granularity_parses_to_aware_utc(text: str, expected: datetime) -> None:
    value = parse_w3c(text)
    assert value == expected
    assert value.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "13",
        "2013-7-16",
        "2013-07-16T19:20",  # a time needs its zone designator
        "2013-07-16T19:20:30",
        "2013-07-16 19:20:30Z",
        "2013-W29-2T19:20:30Z",  # ISO week dates are not W3C Datetime
        "2013-13-01",
        "2013-02-30",
        "2013-07-16T24:00:00Z",
        "2013-07-16T19:20:30+25:00",
        "2013-07-16T19:20:30.Z",
        "２０１３-07-16T19:20:30Z",
        "２０１３-07-16",  # digits are ASCII digits, in every form
        "2013-07-16T19:20:30.١٢٣Z",
        "2013-07-16T19:20:30+09:60",
        # Before year 1 or after 9999 once in UTC: no datetime holds them (OverflowError, before).
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59-01:00",
        "9999-12-31T23:59:59.5-01:00",
        "2013-07-16T19:20:30Zjunk",
    ],
)
def test_malformed_values_are_refused(text: str) -> None:
    with pytest.raises(W3CDatetimeError):
        parse_w3c(text)


def test_format_is_utc_with_z_and_microseconds_only_when_present() -> None:
    assert format_w3c(datetime(2013, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2013-01-02T03:04:05Z"
    assert (
        format_w3c(datetime(2013, 1, 2, 3, 4, 5, 60, tzinfo=UTC)) == "2013-01-02T03:04:05.000060Z"
    )
    east = timezone(timedelta(hours=9))
    assert format_w3c(datetime(2013, 1, 2, 9, 0, tzinfo=east)) == "2013-01-02T00:00:00Z"
    assert format_w3c(datetime(2013, 1, 2)) == "2013-01-02T00:00:00Z"  # naive is UTC


@given(
    st.datetimes(
        min_value=datetime(1000, 1, 1),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from(
            [UTC, timezone(timedelta(hours=-5)), timezone(timedelta(hours=9, minutes=30))]
        ),
    )
)
def test_parse_of_format_is_identity(value: datetime) -> None:
    assert parse_w3c(format_w3c(value)) == value


#: Pieces of the full forms, right and wrong, for the test below.
_PIECES = st.tuples(
    st.sampled_from(["2013-07-16", "2013-02-30", "2013-13-01", "２０１３-07-16", "2013-7-16"]),
    st.sampled_from(["T", " ", "t"]),
    st.sampled_from(["19:20:30", "24:00:00", "19:20:60", "19:2a:30", "19:20:3"]),
    st.sampled_from(["", ".", ".4", ".45", ".170491", ".9999999", ".١٢٣", ".4a", ",5"]),
    st.sampled_from(
        ["Z", "z", "", "+09:00", "-05:30", "+23:59", "+24:00", "+09:60", "+0900", "+09:0x", "+²3"]
    ),
)


@given(_PIECES)
def test_the_fast_paths_read_as_the_pattern_does(pieces: tuple[str, ...]) -> None:
    """The shortcuts through the C parser (file times with fractions, numeric zones) give what
    the pattern gives, and refuse what it refuses."""
    from resourcesync.w3cdt import _by_pattern

    text = "".join(pieces)
    try:
        expected = _by_pattern(text)
    except W3CDatetimeError:
        with pytest.raises(W3CDatetimeError):
            parse_w3c(text)
        return
    assert parse_w3c(text) == expected
    assert parse_w3c(text).tzinfo is UTC


def test_seconds_before_stops_at_the_earliest_datetime() -> None:
    from resourcesync.w3cdt import seconds_before

    t = datetime(2024, 1, 1, tzinfo=UTC)
    assert seconds_before(t, 600) == datetime(2023, 12, 31, 23, 50, tzinfo=UTC)
    assert seconds_before(datetime(1, 1, 1, 0, 5, tzinfo=UTC), 600) == datetime.min.replace(
        tzinfo=UTC
    )


@pytest.mark.parametrize(
    ("text", "hours"),
    [
        ("2024-01-02", 24 + 14),
        (" 2024-01-02 ", 24 + 14),
        ("2024-01", 31 * 24 + 14),
        ("2024", 366 * 24 + 14),
        ("2024-01-02T10:00Z", 0),
        ("2024-01-02T10:00:00Z", 0),
        ("2024-01-02T10:00:00.5+09:00", 0),
    ],
)
def test_a_time_naming_a_day_month_or_year_leaves_that_span_and_any_zone_open(
    text: str, hours: int
) -> None:
    assert coarseness(text) == hours * 3600
