"""The `resourcesync` command: thin click commands over the library."""

from __future__ import annotations

import click

from .. import __version__
from .document import cat, validate
from .fleet import fleet
from .hub import hub
from .lirs import antenna, lirs
from .publish import publish
from .serve import serve, source
from .sync import audit, sync
from .worker import worker


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="resourcesync")
def main() -> None:
    """Keep copies of web resources in step with their origin (ResourceSync, ANSI/NISO Z39.99).

    Exit codes: 0 success, 1 the command found problems (errors, differences), 2 an input could
    not be read or the command could not run.
    """


main.add_command(validate)
main.add_command(cat)
main.add_command(publish)
main.add_command(serve)
main.add_command(source)
main.add_command(sync)
main.add_command(audit)
main.add_command(hub)
main.add_command(lirs)
main.add_command(antenna)
main.add_command(fleet)
main.add_command(worker)

__all__ = ["main"]
