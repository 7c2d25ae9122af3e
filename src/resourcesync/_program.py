"""The `resourcesync` program's entry: its console script and `python -m resourcesync`.

It imports nothing of the command line before it can answer a Ctrl-C or a SIGTERM: one that
comes while the program loads (the command line, then the command's own module) ends it as one
later does — "resourcesync: interrupted", exit 130; "resourcesync: terminated", exit 143 — not
with the traceback of the import it interrupted, nor killed by the signal without a word.

`entry` is the process's own entry (the console script, `python -m resourcesync`): `main`,
then the process ended as soon as the command is done (`end`). `main` alone raises SystemExit
as any click program does, for a caller that goes on after it.
"""

from __future__ import annotations

import atexit
import os
import sys

# Nothing more before `main` can answer a Ctrl-C: `signal` (its enums), `threading` and
# `typing` cost the first 15 ms of the program, which a Ctrl-C then interrupted with a
# traceback; they are imported inside `main`.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType

#: 128 + SIGINT, as a shell reports a command that Ctrl-C stopped.
INTERRUPTED = 130
#: 128 + SIGTERM.
TERMINATED = 143


class Terminated(BaseException):
    """SIGTERM, raised where the main thread is, as KeyboardInterrupt is for SIGINT."""


def terminate(signum: int, frame: FrameType | None) -> None:
    """A SIGTERM handler: `Terminated` (a service manager stopping the program ends a run as
    Ctrl-C does: cleanly, one line)."""
    raise Terminated


def main() -> None:
    previous = None
    try:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            # While the program loads; a command's own handling takes over once it runs.
            previous = signal.signal(signal.SIGTERM, terminate)
        from . import _imports

        _imports.enable()
        from .cli import run

        run()
    except KeyboardInterrupt:
        # Only while the program loads: a command's own handling says the same from then on.
        sys.stderr.write("resourcesync: interrupted\n")
        sys.exit(INTERRUPTED)
    except Terminated:
        sys.stderr.write("resourcesync: terminated\n")
        sys.exit(TERMINATED)
    finally:
        # Given back unless a command put its own in (the one that ends the process at once
        # once it is done: `cli._common`).
        if previous is not None:
            import signal

            if signal.getsignal(signal.SIGTERM) is terminate:
                signal.signal(signal.SIGTERM, previous)


def entry() -> None:
    """The `resourcesync` process: `main`, then `end`."""
    try:
        main()
    except SystemExit as done:
        end(done)
        raise


def end(done: SystemExit) -> None:
    """End the process with the command's exit code as soon as it is done: its exit functions
    run and its output is flushed, as at any exit, but the interpreter does not then tear down
    every module and object it loaded, which only gives memory back to a process about to
    end (20 ms of a 0.3 s `publish` re-run, issue 15.3; the same for every short command).
    Nothing of ours waits for that teardown: every file, state database and connection is
    closed by the command that opened it (`with`), never by a finalizer.

    Only when no other thread is alive (the interpreter would wait for one) and the code is a
    number; otherwise, and when the output cannot be flushed (then said by the interpreter as
    it would be), the usual exit."""
    import threading

    code = 0 if done.code is None else done.code
    if type(code) is not int or threading.active_count() > 1:
        return
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code)
