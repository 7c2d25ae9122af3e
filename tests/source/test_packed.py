"""The packed directory listing a re-run compares (`source/packed.py`): what it finds differ is
what a comparison of {name: stat} dictionaries finds, whatever the names and changes; what it
is made to hold is what a dictionary would hold; what is not a listing is refused."""

from __future__ import annotations

import marshal
import random
from pathlib import Path

import pytest

from resourcesync.source.packed import (
    GONE,
    SIZE,
    UNSURE,
    Listing,
    ListingDamaged,
    Stat,
    record,
    unpack,
)

Files = dict[str, Stat | None]


def listing(files: Files) -> Listing:
    """The listing of files given as {name: stat} (None: to be compared again)."""
    return Listing.of_records({name: record(st) for name, st in files.items()})


def truth(new: Files, old: Files) -> list[tuple[str, Stat | None, bool]]:
    """What differs, by dictionaries: (name, its stat here, whether it is here)."""
    names = {n for n in new.keys() | old.keys() if n not in new or n not in old or new[n] != old[n]}
    return [(n, new.get(n), n in new) for n in sorted(names)]


def found(new: Files, old: Files) -> list[tuple[str, Stat | None, bool]]:
    return [
        (name, None if rec is None else unpack(rec), rec is not None)
        for name, rec in listing(new).differ(listing(old))
    ]


def a_stat(rng: random.Random) -> Stat | None:
    if rng.random() < 0.05:
        return None
    return (
        rng.randrange(0, 1 << 40),
        rng.randrange(-(1 << 62), 1 << 62),
        rng.randrange(0, 1 << 64),  # inode numbers use all 64 bits on some file systems
        rng.randrange(-(1 << 62), 1 << 62),
    )


def a_name(rng: random.Random) -> str:
    alphabet = "ab.-_~ é日本0"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6)))


@pytest.mark.parametrize("seed", range(300))
def test_what_differs_is_what_dictionaries_say(seed: int) -> None:
    rng = random.Random(seed)
    size = rng.choice([0, 1, 2, 15, 16, 17, 40, 300])
    old: Files = {a_name(rng): a_stat(rng) for _ in range(size)}
    new = dict(old)
    for _ in range(rng.choice([0, 1, 3, 20, 200])):
        roll = rng.random()
        if roll < 0.4 and new:
            new[rng.choice(sorted(new))] = a_stat(rng)  # changed
        elif roll < 0.7 and new:
            del new[rng.choice(sorted(new))]  # gone
        else:
            new[a_name(rng) + "x"] = a_stat(rng)  # new
    assert found(new, old) == truth(new, old)
    assert found(old, new) == truth(old, new)
    assert found(new, new) == []


@pytest.mark.parametrize("seed", range(200))
def test_changes_made_are_what_a_dictionary_holds(seed: int) -> None:
    rng = random.Random(seed)
    files: Files = {a_name(rng): a_stat(rng) for _ in range(rng.choice([0, 5, 60, 400]))}
    changes: dict[str, bytes | bool] = {}
    expected = dict(files)
    # Enough names in or out, some runs, to take the way through a dictionary too.
    for _ in range(rng.choice([0, 1, 5, 40, 120])):
        name = rng.choice(sorted(files)) if files and rng.random() < 0.6 else a_name(rng) + "y"
        if rng.random() < 0.3:
            changes[name] = GONE
            expected.pop(name, None)
        else:
            st = a_stat(rng)
            changes[name] = record(st)
            expected[name] = st
    made = listing(files).changed(changes)
    assert made == listing(expected)
    assert made.names() == sorted(expected)
    assert dict(made.items()) == expected
    # What the scan reads back of it: the parts, through marshal.
    again = Listing.load(marshal.loads(marshal.dumps(made.parts())), "d/")
    assert again == made and again.names() == sorted(expected)
    for name, st in expected.items():
        assert name in again and unpack(again.record(name) or b"") == st
        assert again.record(name) == record(st)
    assert "no such name" not in again and again.record("no such name") is None


def test_a_file_to_compare_again_never_equals_a_file() -> None:
    """`UNSURE` (racy, dirty) differs from any stat, even one of all ones but the size."""
    st: Stat = ((1 << 64) - 2, -1, (1 << 64) - 1, -1)
    assert record(None) == UNSURE and record(st) != UNSURE and unpack(record(st)) == st
    assert found({"a": st}, {"a": None}) == [("a", st, True)]
    assert found({"a": None}, {"a": None}) == []


REFUSED: dict[str, object] = {
    "a dictionary (an earlier form)": {"a": (1, 2, 3, 4)},
    "a list": ["a", b"x" * SIZE],
    "three parts": ("a", b"x" * SIZE, b""),
    "names as bytes": (b"a", b"x" * SIZE),
    "stats as text": ("a", "x" * SIZE),
    "more names than stats": ("a/b", b"x" * SIZE),
    "more stats than names": ("a", b"x" * 2 * SIZE),
    "stats cut short": ("a", b"x" * (SIZE - 1)),
    "no names, some stats": ("", b"x" * SIZE),
}


@pytest.mark.parametrize("kept", REFUSED)
def test_what_is_not_a_listing_is_refused_naming_the_directory(kept: str) -> None:
    with pytest.raises(ListingDamaged, match=r"^d/: "):
        Listing.load(REFUSED[kept], "d/")


def test_old_names_out_of_order_or_twice_are_damage_not_a_wrong_answer() -> None:
    here = listing({"a": (1, 1, 1, 1), "b": (2, 2, 2, 2), "c": (3, 3, 3, 3)})
    backwards = Listing("c/b/a", b"".join(record((i, i, i, i)) for i in (3, 2, 1)))
    with pytest.raises(ListingDamaged, match="out of order"):
        here.differ(backwards, "d/")
    twice = Listing("a/a/b", b"".join(record((i, i, i, i)) for i in (1, 1, 2)))
    with pytest.raises(ListingDamaged, match="twice"):
        here.differ(twice, "d/")


def test_listings_made_again_from_rows_out_of_order_are_sorted(tmp_path: Path) -> None:
    """`Listings.rebuild` takes a directory's rows as SQLite orders them (UTF-8 bytes, which
    order as code points do); rows that came otherwise still make a listing of sorted names."""
    from resourcesync.source.state import SetState

    with SetState(tmp_path / "state.sqlite") as state:
        rows = [("d/", "d/b", "1:2:3:4"), ("d/", "d/a", "racy:5:6:7:8"), ("e/", "e/z", "9:9:9:9")]
        state.listings.rebuild(iter(rows))
        _, files, delta, _ = state.listings.read("d/")
        assert delta is None and files.names() == ["a", "b"]
        assert files.record("a") == UNSURE
        assert unpack(files.record("b") or b"") == (1, 2, 3, 4)
        _, root, _, subdirs = state.listings.read("")
        assert len(root) == 0 and subdirs == ["d", "e"]
