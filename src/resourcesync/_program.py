"""The `resourcesync` program's entry: its console script and `python -m resourcesync`.

It imports nothing of the command line before it can answer a Ctrl-C: one pressed while the
program loads (the command line, then the command's own module) ends it as one pressed later
does — "resourcesync: interrupted", exit 130 — not with the traceback of the import it
interrupted.
"""

from __future__ import annotations

import sys

#: 128 + SIGINT, as a shell reports a command that Ctrl-C stopped.
INTERRUPTED = 130


def main() -> None:
    try:
        from . import _imports

        _imports.enable()
        from .cli import run

        run()
    except KeyboardInterrupt:
        # Only while the program loads: a command's own handling says the same from then on.
        sys.stderr.write("resourcesync: interrupted\n")
        sys.exit(INTERRUPTED)
