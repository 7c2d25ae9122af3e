"""`publish`: bring a Source's ResourceSync documents up to date with its resources."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..source.config import (
    CAPABILITIES,
    DEFAULT_RESOURCELIST_EVERY,
    ConfigError,
    PublishConfig,
    SetConfig,
    load_config,
    parse_duration,
    parse_size,
)
from ._common import (
    EXIT_FINDINGS,
    emit_json,
    fail,
    handle_errors,
    plural,
    show_progress,
    stderr_console,
    summary_line,
)


def _split_list(values: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for v in values:
        out += [x.strip() for x in v.split(",") if x.strip()]
    return tuple(out)


def publish_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Every option of `publish` (shared with `source`, which publishes too)."""
    options = [
        click.option("--base-url", help="URL where DIR is published (the resources' URIs)."),
        click.option("--out", "out", type=click.Path(path_type=Path), help="OUTDIR for documents."),
        click.option(
            "--config",
            "config_file",
            type=click.Path(path_type=Path),
            help="A resourcesync.toml with several resource sets (instead of DIR).",
        ),
        click.option(
            "--name",
            default="resourcesync",
            show_default=True,
            help="Name of the resource set: its documents are published under DOCS_URL/NAME/.",
        ),
        click.option("--docs-url", help="URL where OUTDIR is published (default: site root)."),
        click.option(
            "--capabilities",
            default="resourcelist,changelist",
            show_default=True,
            help=f"Comma-separated, from: {','.join(CAPABILITIES)}.",
        ),
        click.option(
            "--hash",
            "hashes",
            multiple=True,
            help="Hash algorithm(s): md5 (default), sha-1, sha-224, sha-256, sha-384, sha-512; "
            "repeat or comma-separate.",
        ),
        click.option("--include", multiple=True, help="Only files matching (fnmatch, repeatable)."),
        click.option("--exclude", multiple=True, help="Skip files/dirs matching (repeatable)."),
        click.option("--describedby", help="URL describing the set (rel=describedby)."),
        click.option("--hidden", is_flag=True, help="Publish hidden files (.name) too."),
        click.option("--hub", help="WebSub hub to send change notifications to."),
        click.option(
            "--framework-notification",
            is_flag=True,
            help="With --hub: also announce new and updated documents on the set's framework "
            "channel (NAME/framework/, Framework Notification 1.0.1).",
        ),
        click.option(
            "--hub-token",
            envvar="RESOURCESYNC_HUB_TOKEN",
            show_envvar=True,
            help="Send Authorization: Bearer TOKEN to the hub (a hub started with --token); "
            "better given in the environment than on the command line.",
        ),
        click.option(
            "--max-entries",
            type=click.IntRange(min=1),
            default=50_000,
            show_default=True,
            help="Split lists into an index over parts past this many entries.",
        ),
        click.option(
            "--max-size",
            default="50M",
            show_default=True,
            help="… or past this many bytes.",
        ),
        click.option(
            "--changelist-max-entries",
            type=click.IntRange(min=1),
            default=10_000,
            show_default=True,
            help="Close the open Change List after this many changes.",
        ),
        click.option(
            "--changelist-max-age",
            help="… or when it has been open this long (e.g. 1d, 6h).",
        ),
        click.option(
            "--resourcelist-every",
            default=DEFAULT_RESOURCELIST_EVERY,
            show_default=True,
            help="Write a new Resource List (and Resource Dump) once the last one is this old "
            "(e.g. 6h) or this many changes behind (e.g. 5000-changes), whichever comes first "
            "(comma-separated); `always`: every run that finds changes. Between them a run "
            "writes the Change Lists only.",
        ),
        click.option(
            "--package-size",
            default="256M",
            show_default=True,
            help="Resource Dump packages hold at most this many bytes of resources.",
        ),
        click.option(
            "--keep-resourcelists",
            type=click.IntRange(min=0),
            default=5,
            show_default=True,
            help="Earlier Resource Lists kept in the archive.",
        ),
        click.option(
            "--keep-resourcedumps",
            type=click.IntRange(min=0),
            default=2,
            show_default=True,
            help="Earlier Resource Dumps kept in the archive.",
        ),
        click.option(
            "--keep-changelists",
            type=click.IntRange(min=0),
            metavar="N",
            help="Closed Change Lists kept, the newest (default: every one). Older ones are "
            "removed once the live Resource List is past them: a Destination further behind "
            "is told to run a baseline.",
        ),
        click.option(
            "--keep-changedumps",
            type=click.IntRange(min=0),
            metavar="N",
            help="Closed Change Dumps kept, with their packages, the newest (default: every "
            "one). Older ones are removed once the live Resource Dump is past them.",
        ),
        click.option(
            "--max-delete",
            type=click.IntRange(min=0),
            help="A run that would publish more deletions than this publishes nothing (exit 1).",
        ),
        click.option(
            "--allow-empty",
            is_flag=True,
            help="Publish the deletion of every resource when DIR holds no file (refused "
            "otherwise, exit 1: a filesystem that is not mounted looks the same).",
        ),
        click.option(
            "--spec-version",
            type=click.Choice(["1.0", "1.1"]),
            default="1.1",
            show_default=True,
            help="The ResourceSync version the documents follow (1.0: for old Destinations).",
        ),
        click.option("--fsync", is_flag=True, help="fsync every file (power-loss safety)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def config_from_options(directory: Path | None, **o: Any) -> PublishConfig:
    """The PublishConfig that the `publish_options` describe."""
    try:
        if o.get("config_file"):
            config = load_config(o["config_file"])
            if o.get("out"):
                config.out = o["out"]
            if o.get("hub_token"):
                for s in config.sets:
                    s.hub_token = s.hub_token or o["hub_token"]
            return config
        if directory is None or not o.get("base_url") or not o.get("out"):
            raise click.UsageError("give DIR, --base-url and --out (or --config FILE)")
        hashes = _split_list(o.get("hashes") or ()) or ("md5",)
        max_age = o.get("changelist_max_age")
        s = SetConfig(
            name=o.get("name") or "resourcesync",
            dir=directory,
            base_url=o["base_url"],
            capabilities=_split_list((o.get("capabilities") or "",)),
            hashes=hashes,
            include=tuple(o.get("include") or ()),
            exclude=tuple(o.get("exclude") or ()),
            describedby=o.get("describedby"),
            hidden=bool(o.get("hidden")),
            hub=o.get("hub"),
            hub_token=o.get("hub_token") or None,
            framework_notification=bool(o.get("framework_notification")),
            max_entries=o.get("max_entries") or 50_000,
            max_bytes=parse_size(o.get("max_size") or "50M"),
            changelist_max_entries=o.get("changelist_max_entries") or 10_000,
            changelist_max_age=parse_duration(max_age) if max_age else None,
            package_size=parse_size(o.get("package_size") or "256M"),
            resourcelist_every=o.get("resourcelist_every", DEFAULT_RESOURCELIST_EVERY),
            keep_resourcelists=o.get("keep_resourcelists", 5),
            keep_resourcedumps=o.get("keep_resourcedumps", 2),
            keep_changelists=o.get("keep_changelists"),
            keep_changedumps=o.get("keep_changedumps"),
            max_delete=o.get("max_delete"),
            allow_empty=bool(o.get("allow_empty")),
        )
        return PublishConfig(
            out=o["out"],
            sets=[s],
            docs_url=o.get("docs_url") or "",
            spec_version=o.get("spec_version") or "1.1",
            fsync=bool(o.get("fsync")),
        )
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


@click.command()
@click.argument("directory", required=False, type=click.Path(path_type=Path), metavar="[DIR]")
@publish_options
@click.option("--dry-run", is_flag=True, help="Find the changes; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="A JSON summary on stdout.")
@click.option(
    "-v", "--verbose", is_flag=True, help="List each change (+ created, * updated, - deleted)."
)
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@handle_errors
def publish(
    directory: Path | None,
    dry_run: bool,
    as_json: bool,
    verbose: bool,
    quiet: bool,
    **options: Any,
) -> None:
    """Publish DIR at --base-url as ResourceSync documents in --out.

    Each run brings the documents up to date with what changed since the last one: the
    Source Description (OUTDIR/.well-known/resourcesync), a Capability List per set, the
    Resource List, Change Lists (rotated into an index and archive), dumps and archives.
    Ends with one summary line on stdout (counts, bytes, rate, time).

    \b
    Example:
      resourcesync publish ./files --base-url https://example.org/files/ --out ./public
    """
    from ..source.prefetch import head_start

    config = config_from_options(directory, **options)
    # The tree's listing begun first, while the scan and the writers are loaded (issue 15.3).
    with head_start(config) as early:
        from ..source.publish import publish as run_publish
        from ..source.scan import DeletionsRefused

        try:
            if show_progress() and not as_json and not quiet:
                # rich only on a terminal: its import is a sixth of a cron re-run's time.
                with stderr_console().status("scanning…") as status:

                    def progress(name: str, n: int) -> None:
                        # n < 0: a phase of the run (writing lists, packaging dumps, notifying).
                        status.update(f"{name}…" if n < 0 else f"scanning {name}: {n:,} files")

                    result = run_publish(
                        config, dry_run=dry_run, progress=progress, head_starts=early
                    )
            else:
                result = run_publish(config, dry_run=dry_run, head_starts=early)
        except DeletionsRefused as exc:
            fail(str(exc), EXIT_FINDINGS)
            return
    if as_json:
        emit_json(result.to_json())
        return
    for s in result.sets:
        scan = s.scan
        if verbose and not quiet and not dry_run and scan.first_seq is not None:
            _list_changes(config, s.name, scan.first_seq, scan.last_seq)
        verb = "would publish" if dry_run else "published"
        line = (
            f"{s.name}: {verb} {plural(scan.resources, 'resource')}: {scan.created:,} created, "
            f"{scan.updated:,} updated, {scan.deleted:,} deleted"
        )
        if scan.baseline and not dry_run:
            line += " (baseline: the first Resource List; changes are listed from now on)"
        if s.rotated:
            line += f"; {plural(s.rotated, 'Change List')} closed"
        if s.dropped:
            line += f"; {plural(s.dropped, 'older Change List')} let go (--keep-changelists)"
        if s.packages:
            line += f"; {plural(s.packages, 'package')}"
        if not quiet:
            click.echo(line, err=True)
        for problem in s.problems + scan.problems:
            if not quiet:
                click.echo(f"resourcesync: warning: {s.name}: {problem}", err=True)
    if not quiet:
        click.echo(_publish_summary(result))


def _list_changes(config: Any, name: str, first: int, last: int | None) -> None:
    """`-v`: each change the run published, as `sync -v` lists what it does to a copy."""
    from ..iri import display_iri
    from ..source.state import SetState

    signs = {"created": "+", "updated": "*", "deleted": "-"}
    with SetState(config.state_file(name)) as state:
        for change in state.changes(first, last):
            sign = signs.get(str(change.change), " ")
            click.echo(f"{sign} {change.change} {display_iri(change.loc)}")


def _publish_summary(result: Any) -> str:
    scans = [s.scan for s in result.sets]
    resources = sum(x.resources for x in scans)
    counts = [
        (resources, "resources"),
        (sum(x.created for x in scans), "created"),
        (sum(x.updated for x in scans), "updated"),
        (sum(x.deleted for x in scans), "deleted"),
    ]
    warnings = sum(len(s.problems) + len(s.scan.problems) for s in result.sets)
    verdict = "dry run" if result.dry_run else "ok"
    if warnings:
        counts.append((warnings, "warnings"))
    return summary_line("publish", verdict, counts, items=resources, seconds=result.seconds)


__all__ = ["config_from_options", "publish", "publish_options"]
