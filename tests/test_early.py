"""The program's entry reads `publish`'s arguments before loading the command line
(`resourcesync._early`, issue 15.3): as click reads them, or not at all.

What the entry reads decides only which child lists the tree ahead (the command takes it over
only for its own inventory: `tests/source/test_publish_prefetch.py`); these tests hold its
reading to click's own, on the command's declared options and on random command lines.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import click
import pytest

from resourcesync import _early
from resourcesync.cli.publish import publish
from resourcesync.source.config import ConfigError, config_from_options
from resourcesync.source.inventory import DirectoryInventory


def _declared() -> dict[str, tuple[str, bool, bool]]:
    out = {}
    for param in publish.params:
        if isinstance(param, click.Option):
            for name in [*param.opts, *param.secondary_opts]:
                assert param.name is not None
                out[name] = (param.name, not param.is_flag, param.multiple)
    return out


def test_the_entry_knows_every_option_of_publish_as_click_declares_it() -> None:
    """An option added to `publish` and not to `_early.OPTIONS` fails here (until then the
    entry would give up on any command line using it: slower, never wrong)."""
    assert _declared() == _early.OPTIONS
    assert {name for name, _, _ in _early.OPTIONS.values()} >= _early.INVENTORY


def _by_click(args: list[str]) -> tuple[Path | None, dict[str, Any]]:
    ctx = publish.make_context("publish", list(args))
    params = dict(ctx.params)
    return params.pop("directory"), params


def _described(directory: Path | None, options: dict[str, Any]) -> tuple[str, Path] | str:
    """What the early start depends on: the inventory's signature and the state's file (or
    why there is no config)."""
    try:
        config = config_from_options(directory, options)
    except ConfigError as exc:
        return f"error: {exc}"
    s = config.sets[0]
    signature = DirectoryInventory.of_set(config, s).signature(s.hashes)
    return signature, config.state_file(s)


@pytest.mark.parametrize(
    "args",
    [
        ["d", "--base-url", "http://example.org/", "--out", "o"],
        ["--out=o", "--base-url=http://example.org/", "d"],
        ["d", "--base-url", "http://example.org/", "--out", "o", "--hidden", "--name", "n"],
        ["d", "--base-url", "http://e.org/", "--out", "o", "--hash", "md5,sha-256"],
        ["d", "--base-url", "http://e.org/", "--out", "o", "--hash", "sha-256", "--hash", "md5"],
        ["d", "--base-url", "http://e.org/", "--out", "o", "--include", "*.x", "--include=*.y"],
        ["d", "--base-url", "http://e.org/", "--out", "o1", "--out", "o2"],  # the last one
        ["--base-url", "http://e.org/", "--out", "o", "--exclude", "a/*", "--", "-d"],
        ["d", "--base-url", "http://e.org/", "--out", "o", "--max-entries", "7", "--fsync"],
        ["d", "--base-url", "http://e.org/", "--out", "o", "--hub-token=t", "-q", "--json"],
        ["d", "--base-url", "http://e.org/", "--out", "o", "--resourcelist-every", "always"],
        ["--config", "c.toml", "--out", "o"],
        ["d", "--out", "o"],  # no base URL: the command's usage error, no early start either
    ],
)
def test_the_entry_reads_a_command_line_as_click_does(args: list[str], tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('out = "x"\n[[set]]\nname = "s"\ndir = "data"\nbase_url = "http://e.org/"\n')
    args = [str(config) if a == "c.toml" else a for a in args]
    early = _early.read(args)
    assert early is not None
    assert _described(*early) == _described(*_by_click(args))


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["-h"],
        ["d", "e", "--base-url", "http://e.org/", "--out", "o"],  # two directories
        ["d", "--base-url", "http://e.org/", "--out"],  # a value missing
        ["d", "--base-url", "http://e.org/", "--out", "o", "-qv"],  # combined short flags
        ["d", "--base-url", "http://e.org/", "--out", "o", "--hidden=yes"],
        ["d", "--base-url", "http://e.org/", "--out", "o", "--unknown"],
        ["d", "--base", "http://e.org/", "--out", "o"],  # not an abbreviation click takes
    ],
)
def test_the_entry_gives_up_on_what_it_does_not_read(args: list[str]) -> None:
    assert _early.read(args) is None


def test_random_command_lines_are_read_as_click_reads_them_or_not_at_all(tmp_path: Path) -> None:
    """Random command lines from `publish`'s options, values that look like options and
    operands among them: whatever the entry reads, click reads the same inventory and state."""
    rng = random.Random(1599)
    names = sorted(_early.OPTIONS)
    values = ["d", "o", "-", "--", "x,y", "md5", "sha-256,md5", "*.txt", "http://e.org/", "-d"]
    read = compared = 0
    for _ in range(3000):
        # A command line that can publish, in some order, with random ones among its own.
        units = [["d"], ["--base-url", "http://e.org/"], ["--out", "o"]]
        for _ in range(rng.randint(0, 6)):
            pick = rng.random()
            if pick < 0.1:
                units.append([rng.choice(values)])
            else:
                name = rng.choice(names)
                _, takes_value, _ = _early.OPTIONS[name]
                if takes_value and rng.random() < 0.3 and name.startswith("--"):
                    units.append([f"{name}={rng.choice(values)}"])
                else:
                    units.append([name])
                    if takes_value and rng.random() < 0.95:
                        units[-1].append(rng.choice(values))
        rng.shuffle(units)
        args = [arg for unit in units for arg in unit]
        early = _early.read(args)
        if early is None:
            continue
        read += 1
        try:
            theirs = _by_click(args)
        except click.ClickException:
            # click refuses it (e.g. a value of the wrong type): the command stops with a
            # usage error; an early child, if any, is ended (`test_publish_prefetch`).
            continue
        mine, click_s = _described(*early), _described(*theirs)
        if isinstance(mine, str) or isinstance(click_s, str):
            # Either reading has no config: the entry begins nothing, or the command stops.
            continue
        compared += 1
        assert mine == click_s, args
    assert read > 300 and compared > 100, (read, compared)
