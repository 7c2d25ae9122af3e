"""What every command shares: turning our errors into one line and an exit code, JSON output,
and a console that shows progress on a terminal and stays quiet in pipes."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import click

from .._program import TERMINATED, Terminated, terminate
from ..errors import ResourceSyncError, damaged_database, storage_failure
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


def credential_options(whose: str) -> list[Callable[[Any], Any]]:
    """`--header` and `--token`, sent to `whose` origins only (`request_headers` reads them)."""
    return [
        click.option(
            "--header",
            "header",
            multiple=True,
            metavar="'NAME: VALUE'",
            help=f"Request header for {whose} host (repeatable).",
        ),
        click.option(
            "--token",
            envvar="RESOURCESYNC_TOKEN",
            help=f"Bearer token for {whose} origin (or RESOURCESYNC_TOKEN, which keeps it out "
            "of process listings and shell history).",
        ),
    ]


def request_headers(values: tuple[str, ...], token: str | None) -> dict[str, str]:
    """`--header 'Name: value'` (repeatable) and `--token` as request headers."""
    headers = {}
    for v in values:
        name, sep, value = v.partition(":")
        if not sep or not name.strip():
            raise click.BadParameter(f"a header is 'Name: value', not {v!r}", param_hint="--header")
        headers[name.strip()] = value.strip()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def emit_json(obj: object) -> None:
    """One JSON object on one line of stdout."""
    import json  # (only for --json: not paid by every command)

    sys.stdout.write(json.dumps(obj, ensure_ascii=False, default=json_default) + "\n")


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 resource`, `2 resources`, `1,000 resources`."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


#: The counted nouns of the summary lines, for a count of one.
_SINGULAR = {
    "resources": "resource",
    "warnings": "warning",
    "deletions pending": "deletion pending",
    "deletions pending (--delete)": "deletion pending (--delete)",
}


def summary_line(
    command: str,
    verdict: str,
    counts: list[tuple[int, str]],
    *,
    items: int,
    seconds: float,
    size: int | None = None,
) -> str:
    """The one line every `sync`, `publish` and `audit` ends with, in one shape (issue 14.7):
    `resourcesync: COMMAND VERDICT: COUNTS; SIZE in TIME (RATE)`."""
    from ..units import format_size

    shown = ", ".join(
        f"{n:,} {_SINGULAR.get(label, label) if n == 1 else label}" for n, label in counts
    )
    took = f"{seconds:.2f} s"
    rate = f"{items / seconds:,.0f}/s" if seconds > 0 and items else ""
    if size is not None:
        took = f"{format_size(size)} in {took}"
        if seconds > 0 and size:
            rate += (", " if rate else "") + f"{format_size(size / seconds)}/s"
    else:
        took = f"in {took}"
    return f"resourcesync: {command} {verdict}: {shown}; {took}" + (f" ({rate})" if rate else "")


def check_port(host: str, port: int) -> None:
    """Fail with one line when `host:port` cannot be listened on (the port in use, a host
    that is not ours) — before a server starts and says it in its own words (issue 14.18)."""
    import socket

    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                fail(f"cannot listen on {host}:{port}: the port is in use (choose another --port)")
            fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")


def fail(message: str, code: int = EXIT_ERROR) -> None:
    """Print one line on stderr and exit with `code`."""
    click.echo(f"resourcesync: {message}", err=True)
    sys.exit(code)


def handle_errors(func: F) -> F:
    """Our errors become one line on stderr and exit code 2; never a traceback for bad input."""
    return _handled(func, "write")


def handle_read_errors(func: F) -> F:
    """`handle_errors` for a command that only reads local files (`audit`, `ls`): a file system
    that refuses it (a directory it may not search) is said as what it could not read."""
    return _handled(func, "read")


def _handled(func: F, verb: str) -> F:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # SIGTERM (a service manager stopping us) ends a run as Ctrl-C does: cleanly, one
        # line, exit 143 — every write is atomic, so what was done stays done (issue 14.4).
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, terminate)
        status: object = 1  # an error nobody caught, until the command returns
        try:
            try:
                result = func(*args, **kwargs)
                status = 0
                return result
            except ResourceSyncError as exc:
                fail(str(exc), EXIT_FINDINGS if exc.full else EXIT_ERROR)
            except KeyboardInterrupt:
                fail("interrupted", 130)
            except Terminated:
                fail("terminated", TERMINATED)
            except BrokenPipeError:
                # The reader of our output went away (e.g. `| head`): not an error of ours.
                sys.stderr.close()
                sys.exit(0)
            except Exception as exc:
                # A state database SQLite finds damaged, wherever in the run: one line naming
                # it and what mends it (a traceback before, at the first page read that was
                # not what was written).
                if damaged_database(exc):
                    from ..sqlite import damage  # sqlite3 is loaded: it raised

                    fail(str(damage(exc)))
                # A file system or a state database that refuses a write (full, read-only,
                # permission denied, a file in the way): one line naming the path; every write
                # is atomic, so nothing is half-written and the next run completes (issue
                # 17.17, 14.5).
                said = storage_failure(exc, _database_of(exc), verb=verb)
                if said is None:
                    raise
                message, full = said
                fail(message, EXIT_FINDINGS if full else EXIT_ERROR)
        except SystemExit as exc:
            status = exc.code
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            if _program and threading.current_thread() is threading.main_thread():
                _when_done(status)

    return wrapper  # type: ignore[return-value]


def _database_of(exc: BaseException) -> str | None:
    """The state database an SQLite error is of, as far as the process can tell
    (`sqlite.database_of`)."""
    if type(exc).__module__ != "sqlite3":
        return None
    from ..sqlite import database_of  # sqlite3 is loaded: it raised

    return database_of(exc)


#: Set by the program itself (`cli.run`), never by a test's CliRunner: what `_when_done` does
#: is process-wide.
_program = False


def as_program() -> None:
    """This process is the `resourcesync` program: see `_when_done`."""
    global _program
    _program = True


def _when_done(code: object) -> None:
    """The command is done, its last line printed: a Ctrl-C or SIGTERM from now on, while the
    interpreter shuts down, ends the process at once with the command's own exit code. (It
    used to kill it by the signal after its "ok" line, or make click print "Aborted!".)"""
    status = code if isinstance(code, int) else 0 if code is None else 1

    def now(signum: int, frame: Any) -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)

    signal.signal(signal.SIGINT, now)
    signal.signal(signal.SIGTERM, now)


def hold_signals_at_exit() -> None:
    """The program's last exit function: SIGINT and SIGTERM are held from here to the end.

    After the exit functions the interpreter gives the signals back to their default action
    and then tears its modules down; a Ctrl-C in that last stretch killed the process by the
    signal (exit 130 after an "ok" line). Held, such a signal is dropped with the process,
    which exits with the command's own code. Until here `_when_done`'s handler ends a
    shutdown that hangs (an exit function waiting on something) at once."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})


class Duration(click.ParamType[float]):
    """A duration in seconds: `600`, `90s`, `15m`, `1h30m`, `3d` (see `resourcesync.units`);
    positive unless `zero` is allowed."""

    name = "DURATION"

    def __init__(self, *, zero: bool = False) -> None:
        self.zero = zero

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        from ..units import parse_duration

        try:
            seconds = parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if seconds == 0 and not self.zero:
            self.fail(f"a duration must be positive, not {value!r}", param, ctx)
        return seconds


DURATION = Duration()
DURATION_OR_ZERO = Duration(zero=True)
