"""What every command shares: turning our errors into one line and an exit code, JSON output,
and a console that shows progress on a terminal and stays quiet in pipes."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import click

from ..errors import ResourceSyncError
from ..w3cdt import format_w3c

F = TypeVar("F", bound=Callable[..., Any])

#: Exit codes shared by all commands.
EXIT_OK = 0
EXIT_FINDINGS = 1  # the command ran and found something wrong (errors, differences)
EXIT_ERROR = 2  # an input could not be read, a request failed, bad usage


def stderr_console() -> Any:
    """Progress and messages go to stderr, so stdout stays clean for data and JSON."""
    from rich.console import Console  # on first use: most runs print no progress

    return Console(stderr=True)


def show_progress() -> bool:
    """Progress bars only on a terminal."""
    return sys.stderr.isatty()


def json_default(value: object) -> object:
    if isinstance(value, datetime):
        return format_w3c(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def emit_json(obj: object) -> None:
    """One JSON object on one line of stdout."""
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, default=json_default) + "\n")


def fail(message: str, code: int = EXIT_ERROR) -> None:
    """Print one line on stderr and exit with `code`."""
    click.echo(f"resourcesync: {message}", err=True)
    sys.exit(code)


def handle_errors(func: F) -> F:
    """Our errors become one line on stderr and exit code 2; never a traceback for bad input."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ResourceSyncError as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except BrokenPipeError:
            # The reader of our output went away (e.g. `| head`): not an error of ours.
            sys.stderr.close()
            sys.exit(0)

    return wrapper  # type: ignore[return-value]
