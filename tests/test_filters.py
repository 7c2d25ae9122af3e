"""`--include`/`--exclude` as a copy remembers them (`PathFilter.options`), and whether other
filters may take what they left out (`PathFilter.within`)."""

from __future__ import annotations

import pytest

from resourcesync.filters import PathFilter


@pytest.mark.parametrize(
    "f",
    [
        PathFilter(),
        PathFilter.of(["k/*"]),
        PathFilter.of(exclude=["*.log", "it's here/*", "a b"]),
        PathFilter.of(["x/*", "y/*"], ["*.pdf"]),
    ],
)
def test_options_read_back_as_the_same_filter(f: PathFilter) -> None:
    assert PathFilter.from_options(f.options()) == f


@pytest.mark.parametrize(
    ("now", "made", "within"),
    [
        (PathFilter(), PathFilter(), True),
        (PathFilter.of(exclude=["*.log"]), PathFilter(), True),
        (PathFilter.of(["k/*"]), PathFilter(), True),
        (PathFilter(), PathFilter.of(exclude=["*.log"]), False),
        (PathFilter(), PathFilter.of(["k/*"]), False),
        (PathFilter.of(["k/*"]), PathFilter.of(["k/*", "d/*"]), True),
        (PathFilter.of(["k/*", "d/*"]), PathFilter.of(["k/*"]), False),
        (PathFilter.of(exclude=["*.txt"]), PathFilter.of(["k/*"]), False),
        (PathFilter.of(exclude=["*.pdf"]), PathFilter.of(exclude=["*.log"]), False),
    ],
)
def test_within_says_whether_every_path_taken_was_taken_before(
    now: PathFilter, made: PathFilter, within: bool
) -> None:
    assert now.within(made) is within


def test_options_not_written_by_options_are_refused() -> None:
    with pytest.raises(ValueError):
        PathFilter.from_options("--include")
