"""The `resourcesync` command: thin click commands over the library.

Each command's module is imported when that command runs (the help's list of them is written
here): a command pays at start-up only for what it uses (issue 15.5; `python -X importtime`).
"""

from __future__ import annotations

import atexit
import gc
import importlib
import sys
from typing import Any

import click

from .. import __version__

# httpx imports its own command line at `import httpx` (click, rich, pygments: a quarter of
# httpx's import time) whenever they are installed, as rich is for us. Our command never runs
# httpx's, so that module stays out of this process (an import of it raises ImportError, which
# httpx expects; upstream makes it lazy in pydantic/httpx2#947).
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

#: Command name → (module under resourcesync.cli, attribute, what the help's list says of it),
#: in the order the help lists them: the order of the work (issue 14.18). The list is written
#: here so that `resourcesync --help` imports none of the commands (it took half a second).
COMMANDS: dict[str, tuple[str, str, str]] = {
    # A Source: publish, serve (or both, watching); check what was published.
    "publish": ("publish", "publish", "Publish a directory as ResourceSync documents."),
    "serve": ("serve", "serve", "Serve what `publish` wrote, and its resources, over HTTP."),
    "source": ("serve", "source", "Publish a directory, serve it, publish again as it changes."),
    "validate": ("document", "validate", "Check documents against the ResourceSync rules."),
    "cat": ("document", "cat", "List the entries of a document (file or URL)."),
    # A Destination: copy, check, look inside.
    "sync": ("sync", "sync", "Bring a local copy in step with a Source."),
    "audit": ("sync", "audit", "Compare a local copy with the Source's current state."),
    "ls": ("ls", "ls", "What a local copy holds, from its state."),
    # Between them, and at scale.
    "hub": ("hub", "hub", "Run a WebSub hub for ResourceSync Change Notification."),
    "fleet": ("fleet", "fleet", "Follow many Sources: register, schedule, see their status."),
    "worker": ("worker", "worker", "Run a Celery worker that syncs a fleet's Sources."),
    # LIRS, the antenna sites' format.
    "lirs": ("lirs", "lirs", "LIRS: read, write, merge, and convert to and from ResourceSync."),
    "antenna": ("lirs", "antenna", "Check the sites of a list and publish what changed."),
}


class _LazyGroup(click.Group):
    """A group whose commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*COMMANDS, *(n for n in super().list_commands(ctx) if n not in COMMANDS)]

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            # A command's module being imported (a command handles Ctrl-C itself once it
            # runs): what `handle_errors` says then, not click's "Aborted!" and 1.
            from ._common import fail

            fail("interrupted", 130)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is None:
            return super().get_command(ctx, cmd_name)
        module = importlib.import_module(f"{__name__}.{where[0]}")
        command = getattr(module, where[1])
        assert isinstance(command, click.Command)
        command.short_help = where[2]  # as the help lists it, wherever click shows it
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The list of commands, from `COMMANDS` (click's own imports each to ask it)."""
        rows = [(name, where[2]) for name, where in COMMANDS.items()]
        for name in super().list_commands(ctx):
            command = super().get_command(ctx, name)
            if name not in COMMANDS and command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(formatter.width)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(
    cls=_LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="resourcesync")
def main() -> None:
    """Keep copies of web resources in step with their origin (ResourceSync, ANSI/NISO Z39.99).

    Exit codes: 0 success, 1 the command found problems (errors, differences), 2 an input could
    not be read or the command could not run, 130 stopped by Ctrl-C, 143 stopped by SIGTERM
    (each said in one line; what was done stays done).
    """


#: How many new container objects the collector lets come before it looks at the youngest
#: generation (CPython's default: 700). See `run`.
YOUNG_COLLECTION_EVERY = 10_000


def run() -> None:
    """The `resourcesync` program (its console script and `python -m resourcesync`): `main`,
    with what only a whole process may decide: its signals once a command is done, and how
    often its garbage collector runs.

    The youngest generation is collected every `YOUNG_COLLECTION_EVERY` new objects instead of
    700: a `sync` at 64 connections spent 8 % of its CPU in the collector (0.56 s of 6.7 s for
    20,000 resources; 0.013 s after), `validate` 7 % of a 50,000-entry list. The older
    generations keep their thresholds, so garbage held in cycles is still found and a process
    that runs for months (`sync --follow`, `source`, `hub`, `worker`) does not grow. A program
    that embeds the library keeps its own settings."""
    from ._common import as_program, hold_signals_at_exit

    as_program()
    # Registered first, so run last of the exit functions: see `hold_signals_at_exit`.
    atexit.register(hold_signals_at_exit)
    gc.set_threshold(YOUNG_COLLECTION_EVERY, *gc.get_threshold()[1:])
    main()


__all__ = ["main", "run"]
