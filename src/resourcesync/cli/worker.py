"""`worker`: run a Celery worker of a fleet on this machine."""

from __future__ import annotations

import socket
from pathlib import Path

import click

from ._common import DURATION, handle_errors


@click.command()
@click.option(
    "--broker",
    required=True,
    metavar="URL",
    envvar="RESOURCESYNC_FLEET_BROKER",
    help="The fleet's Redis (redis://HOST:PORT/DB), as given to `fleet run --broker`.",
)
@click.option(
    "--db",
    required=True,
    metavar="URL",
    envvar="RESOURCESYNC_FLEET_DB",
    help="The fleet's PostgreSQL store (postgresql://…).",
)
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="Where the copies are: one filesystem shared by every worker, at the same path.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
    default=2,
    show_default=True,
    help="Syncs at once on this machine (worker processes).",
)
@click.option(
    "--visibility-timeout",
    type=DURATION,
    default="1h",
    show_default=True,
    help="A task not acknowledged for this long (its worker died) is given to another worker. "
    "Longer than the longest sync, or a running sync is offered twice (the second waits).",
)
@click.option("--name", "node", help="This worker's name (default: fleet@HOSTNAME-PID).")
@click.option(
    "--loglevel",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
    default="INFO",
    show_default=True,
    help="What the worker logs (INFO: each task and its outcome).",
)
@handle_errors
def worker(
    broker: str,
    db: str,
    root: Path,
    concurrency: int,
    visibility_timeout: float,
    node: str | None,
    loglevel: str,
) -> None:
    """Run a Celery worker that syncs the Sources a fleet's scheduler (`fleet run --broker
    --db`) queues. Start one on each machine; stop it with Ctrl-C or SIGTERM (its syncs in
    flight finish first; a worker killed outright has its task redone by another).

    \b
    Example:
      resourcesync worker --root /shared/harvest --broker redis://queue/0 --db postgresql://db/fleet
    """
    import logging
    import os

    from ..fleet import open_store
    from ..fleet.cluster import QUEUE, make_app
    from ..fleet.store import check_root

    # One line per request is the sync's business at DEBUG, not a worker's log at INFO.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # A wrong --db, or a ROOT that is not the cluster's shared filesystem, is one clear line
    # now, not a failure in every task (or copies written where no other worker sees them).
    store = open_store(root, db)
    try:
        check_root(store, root.resolve())
    finally:
        store.close()
    app = make_app(broker, db, root.resolve(), visibility_timeout=visibility_timeout)
    name = node or f"fleet@{socket.gethostname()}-{os.getpid()}"
    app.worker_main(
        [
            "worker",
            f"--concurrency={concurrency}",
            f"--loglevel={loglevel}",
            f"--hostname={name}",
            f"--queues={QUEUE}",
            # Start at once: the fleet's workers need not know one another.
            "--without-mingle",
            "--without-gossip",
        ]
    )


__all__ = ["worker"]
