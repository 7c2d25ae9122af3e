"""`serve` (a published tree over HTTP) and `source` (publish, serve, and keep publishing)."""

from __future__ import annotations

import ipaddress
from collections.abc import Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from ..errors import ResourceSyncError
from ._common import check_port, fail, handle_errors, handle_read_errors, plural

_RESOURCES_HELP = (
    "Serve the resources of set NAME from DIR (repeatable); without NAME=, the only set's "
    "(or, before anything is published, DIR at /). Normally published.json says where they are."
)


def _server_options(func: Any) -> Any:
    options = [
        click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind."),
        click.option(
            "--port",
            type=click.IntRange(0, 65535),
            default=8000,
            show_default=True,
            help="Port to listen on (0: any free one).",
        ),
        click.option(
            "--robots",
            type=click.Path(dir_okay=False, exists=True, path_type=Path),
            help="robots.txt rules to keep (default: OUTDIR/.resourcesync/robots.txt).",
        ),
        click.option("--listing", is_flag=True, help="List directories (off by default)."),
        click.option(
            "--log-level",
            type=click.Choice(["critical", "error", "warning", "info", "debug"]),
            default="info",
            show_default=True,
            help="uvicorn's logging (info includes an access log).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _parse_resources(values: tuple[str, ...]) -> dict[str | None, Path]:
    out: dict[str | None, Path] = {}
    for value in values:
        name, eq, directory = value.partition("=")
        key: str | None = name if eq and name and "/" not in name else None
        path = Path(directory if key is not None else value)
        if not path.is_dir():
            raise click.BadParameter(f"{path} is not a directory", param_hint="--resources")
        out[key] = path
    return out


def _uvicorn(app: Any, host: str, port: int, log_level: str) -> Any:
    import uvicorn

    check_port(host, port)

    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, lifespan="off", server_header=False
    )
    return uvicorn.Server(config)


def _run_until_stopped(main: Coroutine[Any, Any, None]) -> None:
    """Run the server; Ctrl-C is the ordinary way to stop it (exit 0, like http.server)."""
    try:
        import asyncio

        asyncio.run(main)
    except KeyboardInterrupt:
        click.echo("resourcesync: stopped", err=True)


def _where(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


@click.command()
@click.argument("outdir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--resources", multiple=True, metavar="[NAME=]DIR", help=_RESOURCES_HELP)
@_server_options
@click.option("--hidden", is_flag=True, help="Serve hidden names (.x) from the sets' directories.")
@handle_read_errors
def serve(
    outdir: Path,
    resources: tuple[str, ...],
    host: str,
    port: int,
    robots: Path | None,
    listing: bool,
    log_level: str,
    hidden: bool,
) -> None:
    """Serve what `publish` wrote to OUTDIR, and the resources it describes, over HTTP.

    The Source Description at /.well-known/resourcesync, robots.txt with a Sitemap line per
    Resource List, the documents, the resources (with Link: rel="resourcesync", validators,
    conditional and range requests) and a landing page for people. A new publication is
    picked up at the next request. Nothing outside OUTDIR and the sets' directories is served.

    \b
    Example:
      resourcesync serve ./public --port 8000
    """
    from ..source.server import create_app

    if not outdir.is_dir():
        raise ResourceSyncError("not a directory", source=str(outdir))
    app = create_app(
        outdir,
        resources=_parse_resources(resources),
        robots=robots,
        listing=listing,
        hidden=hidden,
    )
    pub = app.state.site.publication
    sets = ", ".join(s.name for s in pub.sets) or "nothing published yet"
    click.echo(f"resourcesync: serving {outdir} ({sets}) at {_where(host, port)}", err=True)
    for warning in _elsewhere(pub, host, port):
        click.echo(f"resourcesync: warning: {warning}", err=True)
    _run_until_stopped(_uvicorn(app, host, port, log_level).serve())


_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _elsewhere(pub: Any, host: str, port: int) -> list[str]:
    """Sets published for another address than the one served: a Destination that finds
    them here is sent there (issue 14.2). Behind a proxy that serves them there, this is
    expected; said once, not an error."""
    from urllib.parse import urlsplit

    if port == 0:
        return []
    served = _where(host, port)
    out = []
    for s in pub.sets:
        parts = urlsplit(s.base_url)
        there = parts.port or (443 if parts.scheme == "https" else 80)
        same_host = host in ("0.0.0.0", "::", "") or (
            parts.hostname == host or {parts.hostname, host} <= _LOOPBACK
        )
        if parts.scheme == "http" and same_host and there == port:
            continue
        fix = f"{served}{parts.path.lstrip('/')}"
        out.append(
            f"set {s.name} was published for {s.base_url} but is served at {served}: a "
            f"Destination that finds it here is sent to {parts.scheme}://{parts.netloc} "
            f"(publish again with --base-url {fix}, unless a proxy serves it there)"
        )
    return out


def _publish_options(func: Any) -> Any:
    """`publish`'s options, when that command exists (the CLI is assembled from pieces)."""
    from .publish import publish_options

    return publish_options(func)


@click.command()
@click.argument("directory", required=False, type=click.Path(path_type=Path), metavar="[DIR]")
@_publish_options
@_server_options
@click.option(
    "--quiet-time",
    type=click.FloatRange(min=0.01),
    default=0.1,
    show_default=True,
    help="Publish again once changes have paused this many seconds.",
)
@handle_errors
def source(
    directory: Path | None,
    host: str,
    port: int,
    robots: Path | None,
    listing: bool,
    log_level: str,
    quiet_time: float,
    **options: Any,
) -> None:
    """Publish DIR, serve it, and publish again whenever DIR changes: a whole small Source.

    Takes `publish`'s options. Without --base-url, DIR is published at
    http://HOST:PORT/<name of DIR>/; without --out, the documents go to a folder beside DIR
    (DIR-resourcesync). Hidden names (.x) are neither published nor served.

    \b
    Example:
      resourcesync source ./files --base-url http://127.0.0.1:8000/files/ --out ./public
    """
    from ..source.publish import publish
    from ..source.server import create_app, republish_on_change
    from .publish import config_from_options

    if directory is not None and options.get("config_file") is None:
        if not directory.is_dir():
            raise ResourceSyncError("not a directory", source=str(directory))
        if not options.get("base_url"):
            if port == 0 or _unspecified(host):
                fail(f"give --base-url (the URL of DIR is not known from {host}:{port})")
            options["base_url"] = _where(host, port) + quote(directory.resolve().name) + "/"
        if not options.get("out"):
            resolved = directory.resolve()
            options["out"] = resolved.parent / f"{resolved.name}-resourcesync"
    config = config_from_options(directory, **options)
    # Hidden names are published (--hidden) exactly when they are served.
    hidden = any(s.hidden for s in config.sets)
    config.out.mkdir(parents=True, exist_ok=True)

    def report(outcome: Any) -> None:
        if isinstance(outcome, Exception):
            click.echo(f"resourcesync: publishing failed: {outcome}", err=True)
            return
        for s in outcome.sets:
            scan = s.scan
            if scan.changes or scan.baseline:
                click.echo(
                    f"{s.name}: published {plural(scan.resources, 'resource')}: "
                    f"{scan.created} created, {scan.updated} updated, {scan.deleted} deleted",
                    err=True,
                )
            for problem in s.problems + scan.problems:
                click.echo(f"resourcesync: warning: {s.name}: {problem}", err=True)

    report(publish(config))
    app = create_app(config.out, robots=robots, listing=listing, hidden=hidden)
    server = _uvicorn(app, host, port, log_level)
    click.echo(
        f"resourcesync: serving {config.out} at {_where(host, port)}; "
        f"Source Description {config.description_url}; watching "
        + ", ".join(str(s.dir) for s in config.sets),
        err=True,
    )

    import asyncio

    async def main() -> None:
        stop = asyncio.Event()
        watcher = asyncio.create_task(
            republish_on_change(config, report, quiet=quiet_time, stop_event=stop)
        )

        def ended(task: asyncio.Task[None]) -> None:
            # The watcher never ends on its own: one that failed (a fault of ours) stops the
            # server too, its error raised below, rather than serving lists that no longer
            # follow DIR.
            if not task.cancelled() and task.exception() is not None:
                server.should_exit = True

        watcher.add_done_callback(ended)
        try:
            await server.serve()
        finally:
            stop.set()
            try:
                await asyncio.wait_for(watcher, timeout=5)
            except (TimeoutError, asyncio.CancelledError):
                watcher.cancel()

    _run_until_stopped(main())


def _unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


__all__ = ["serve", "source"]
