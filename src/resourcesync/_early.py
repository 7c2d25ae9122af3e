"""A `publish` re-run's walk begun before the command line is loaded (issue 15.3).

A re-run of `publish` from cron over 50,000 files spends a third of its time loading: the
interpreter, click (a quarter of that: `inspect`, `uuid`), the command's own modules. The walk
that the re-run shares with a forked lister (`source.prefetch`) needs none of it: only the
set's directory, its base URL, what it includes and where its state is. So the program's entry
reads those from its arguments first (`begin`), before it imports the command line, and forks
the lister then; the command takes it over for its head start (`take`, then
`prefetch.head_start`) only when it lists the very inventory that the command's own reading of
the same arguments describes (`ListingPrefetch.start` compares the two inventories'
signatures), and ends it otherwise; and the scan compares with the state's listings only those
of the inventory they were kept for. A misreading here costs a child's work, never a listing.

The arguments are read as `publish` declares them (`OPTIONS`, which the tests hold equal to the
click command's parameters), as click reads them (`--opt value`, `--opt=value`, the last of a
single-valued option, `--` before operands), and anything else gives up without starting
anything: another command, a help, an option not known here, combined short flags, a second
directory. Errors are the command's to say: here an argument that cannot be used, a tree or
state that cannot be read, starts nothing.

Imports nothing until it knows the command is a `publish` (every other command pays nothing
for it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from .source.prefetch import ListingPrefetch

__all__ = ["INVENTORY", "OPTIONS", "begin", "close", "read", "take"]

#: Every option of `publish` (`cli/publish.py`): its names → (its parameter, takes a value,
#: may be repeated).
OPTIONS: dict[str, tuple[str, bool, bool]] = {
    "--base-url": ("base_url", True, False),
    "--out": ("out", True, False),
    "--config": ("config_file", True, False),
    "--name": ("name", True, False),
    "--docs-url": ("docs_url", True, False),
    "--capabilities": ("capabilities", True, False),
    "--hash": ("hashes", True, True),
    "--include": ("include", True, True),
    "--exclude": ("exclude", True, True),
    "--describedby": ("describedby", True, False),
    "--hidden": ("hidden", False, False),
    "--hub": ("hub", True, False),
    "--framework-notification": ("framework_notification", False, False),
    "--hub-token": ("hub_token", True, False),
    "--max-entries": ("max_entries", True, False),
    "--max-size": ("max_size", True, False),
    "--changelist-max-entries": ("changelist_max_entries", True, False),
    "--changelist-max-age": ("changelist_max_age", True, False),
    "--resourcelist-every": ("resourcelist_every", True, False),
    "--package-size": ("package_size", True, False),
    "--keep-resourcelists": ("keep_resourcelists", True, False),
    "--keep-resourcedumps": ("keep_resourcedumps", True, False),
    "--keep-changelists": ("keep_changelists", True, False),
    "--keep-changedumps": ("keep_changedumps", True, False),
    "--max-delete": ("max_delete", True, False),
    "--allow-empty": ("allow_empty", False, False),
    "--spec-version": ("spec_version", True, False),
    "--fsync": ("fsync", False, False),
    "--dry-run": ("dry_run", False, False),
    "--json": ("as_json", False, False),
    "-v": ("verbose", False, False),
    "--verbose": ("verbose", False, False),
    "-q": ("quiet", False, False),
    "--quiet": ("quiet", False, False),
}

#: The parameters that decide what the walk lists and where the state is: the only ones the
#: early start takes (the others are read only to be passed over), as the command takes them.
INVENTORY = frozenset(
    ("base_url", "out", "config_file", "name", "hashes", "include", "exclude", "hidden")
)
#: Parameters given as paths (`click.Path(path_type=Path)`).
_PATHS = frozenset(("out", "config_file"))

_started: ListingPrefetch | None = None


def read(args: list[str]) -> tuple[Path | None, dict[str, Any]] | None:
    """`publish`'s arguments (after the command's name) as the command reads them: its
    directory and its inventory's parameters; None when they are not read here (see the
    module's note)."""
    from pathlib import Path

    directory: str | None = None
    values: dict[str, Any] = {}
    operands_only = False
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if operands_only or not arg.startswith("-") or arg == "-":
            if directory is not None:
                return None  # a second directory: the command's usage error
            directory = arg
            continue
        if arg == "--":
            operands_only = True
            continue
        name, eq, value = arg.partition("=")
        known = OPTIONS.get(name)
        if known is None or (eq and not name.startswith("--")):
            return None  # a help, an option not known here, a short option with its value
        param, takes_value, multiple = known
        if not takes_value:
            if eq:
                return None  # a flag given a value: the command's usage error
            values[param] = True
            continue
        if not eq:
            if i == len(args):
                return None  # its value missing: the command's usage error
            value = args[i]
            i += 1
        if param not in INVENTORY:
            continue
        if multiple:
            values.setdefault(param, []).append(value)
        else:
            values[param] = Path(value) if param in _PATHS else value
    options = {param: v for param, v in values.items() if param in INVENTORY}
    for param in ("hashes", "include", "exclude"):
        if param in options:
            options[param] = tuple(options[param])
    return (Path(directory) if directory is not None else None), options


def begin(argv: list[str]) -> None:
    """The program's arguments (`sys.argv[1:]`): when they run `publish`, its lister begun
    now where a re-run's walk would be shared (`prefetch.begin`); otherwise nothing."""
    global _started
    if argv[:1] != ["publish"] or _started is not None:
        return
    parsed = read(argv[1:])
    if parsed is None:
        return
    from .source.config import config_from_options
    from .source.prefetch import begin as begin_listing

    try:
        _started = begin_listing(config_from_options(*parsed))
    except Exception:
        # Whatever it is (a bad value, a configuration file or state that cannot be read),
        # the command finds it again and says it; a head start never stops the command.
        _started = None


def take() -> ListingPrefetch | None:
    """The lister begun by `begin`, now the command's to take over or end."""
    global _started
    started, _started = _started, None
    return started


def close() -> None:
    """End the lister if the command did not take it (it stopped before: a usage error, a
    Ctrl-C while it loaded)."""
    started = take()
    if started is not None:
        started.close()
