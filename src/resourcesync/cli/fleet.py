"""`fleet`: follow many Sources — register them, run them on a schedule, see their status."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ._common import DURATION, DURATION_OR_ZERO, EXIT_FINDINGS, EXIT_OK, fail, handle_errors

if TYPE_CHECKING:
    from ..fleet import FleetStore, Outcome, Row

# The fleet's modules (and through them the sync engine, psycopg, Celery) are imported when a
# command runs, not when the command line starts.


def _where(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option(
        "--db",
        metavar="URL",
        envvar="RESOURCESYNC_FLEET_DB",
        help="A postgresql:// store shared by a cluster (default: SQLite under --root).",
    )(func)
    return click.option(
        "--root",
        type=click.Path(file_okay=False, path_type=Path),
        default=".",
        show_default=True,
        help="The fleet's home: its database and each Source's copy at ROOT/NAME/.",
    )(func)


@contextlib.contextmanager
def _store(root: Path, db: str | None, *, create: bool = False) -> Iterator[FleetStore]:
    """The fleet's store; only registering Sources (`create`) makes one where there is none."""
    from ..fleet import open_store

    store = open_store(root, db, create=create)
    try:
        yield store
    finally:
        store.close()


@click.group()
def fleet() -> None:
    """Follow many Sources: register them, run their syncs on a schedule, see their status.

    Each Source's copy lives at ROOT/NAME/ (or its --dest). Embedded by default (SQLite under
    ROOT, syncs in this process); with --broker and --db, the syncs run on Celery workers
    (`resourcesync worker`) sharing a PostgreSQL store.

    \b
    Example:
      resourcesync fleet add https://repo.example.org/ --name repo --every 6h
      resourcesync fleet run --once && resourcesync fleet status
    """


@fleet.command(short_help="Register a Source (its site or Source Description URL).")
@click.argument("source")
@click.option("--name", required=True, help="Its name in the fleet (and its copy's folder).")
@click.option("--dest", type=click.Path(file_okay=False), help="Its copy elsewhere than ROOT/NAME.")
@click.option("--every", type=DURATION, default="1h", show_default=True, help="How often to sync.")
@click.option(
    "--via",
    type=click.Choice(["auto", "lists", "dumps"]),
    default="auto",
    show_default=True,
    help="Its syncs from lists + GETs or from dump packages (as sync --via).",
)
@click.option("--delete", is_flag=True, help="Apply the Source's deletions to the copy.")
@click.option(
    "--max-delete",
    type=click.IntRange(min=0),
    help="With --delete: a sync that would delete more files than this deletes none (kept "
    "pending, not ok), as sync --max-delete.",
)
@click.option(
    "--allow-empty",
    is_flag=True,
    help="With --delete: empty the copy when the Source lists nothing (by default such a sync "
    "deletes none, not ok: an outage looks the same), as sync --allow-empty.",
)
@click.option(
    "--lookback",
    type=DURATION_OR_ZERO,
    default="10m",
    show_default=True,
    help="How far behind its copy's cursor its syncs look for a change listed late, as sync "
    "--lookback (0 for none).",
)
@click.option(
    "--history-grace",
    type=DURATION_OR_ZERO,
    default="1h",
    show_default=True,
    help="How long its Change Lists may end before the change its copy last read from them "
    "before that is a changed history (a Source restored from a backup), as sync "
    "--history-grace (0: at once).",
)
@click.option(
    "--reconcile-every",
    type=DURATION_OR_ZERO,
    default="7d",
    show_default=True,
    help="How long after its copy was last compared with a Resource List its syncs compare it "
    "with a newer one, as sync --reconcile-every (0: never).",
)
@click.option(
    "--any-address",
    is_flag=True,
    help="Let its redirects, mirrors and documents' links lead to loopback, private and "
    "link-local addresses it is not on itself, as sync --any-address.",
)
@click.option(
    "--follow",
    is_flag=True,
    help="Subscribe to its change notifications: each one makes it due at once (fleet run).",
)
@click.option(
    "--header",
    multiple=True,
    metavar="'NAME: VALUE'",
    help="Request header for the Source's host (repeatable).",
)
@click.option("--replace", is_flag=True, help="Update the Source of this name if registered.")
@_where
@handle_errors
def add(
    source: str,
    name: str,
    dest: str | None,
    every: float,
    via: str,
    delete: bool,
    max_delete: int | None,
    allow_empty: bool,
    lookback: float,
    history_grace: float,
    reconcile_every: float,
    any_address: bool,
    follow: bool,
    header: tuple[str, ...],
    replace: bool,
    root: Path,
    db: str | None,
) -> None:
    """Register SOURCE (its site or Source Description URL). It runs at the next `fleet run`.

    \b
    Example:
      resourcesync fleet add https://repo.example.org/ --name repo --every 6h --delete
    """
    from ..fleet import Entry
    from ..fleet.registry import parse_header

    try:
        headers = dict(parse_header(h) for h in header)
        where = str(Path(dest).resolve()) if dest else None
        entry = Entry(
            name=name,
            source=source,
            dest=where,
            every=every,
            via=via,
            delete=delete,
            headers=headers,
            follow=follow,
            max_delete=max_delete,
            allow_empty=allow_empty,
            lookback=lookback,
            history_grace=history_grace,
            reconcile_every=reconcile_every,
            any_address=any_address,
        )
        entry.check()
    except ValueError as exc:
        fail(str(exc))
    with _store(root, db, create=True) as store:
        store.add([entry], now=time.time(), replace=replace)
    click.echo(f"added {name}: {source} every {every:g} s", err=True)


@fleet.command(short_help="Stop following a Source (its copy's files are kept).")
@click.argument("name")
@_where
@handle_errors
def remove(name: str, root: Path, db: str | None) -> None:
    """Stop following NAME (its copy's files are left where they are; the state the fleet
    kept for it goes).

    \b
    Example:
      resourcesync fleet remove repo
    """
    with _store(root, db) as store:
        if not store.remove(name):
            fail(f"no Source named {name!r} in this fleet")
    click.echo(f"removed {name}", err=True)


@fleet.command("list", short_help="The registered Sources, tab-separated.")
@_where
@handle_errors
def list_(root: Path, db: str | None) -> None:
    """The registered Sources: NAME, SOURCE, every (seconds), via, delete, follow —
    tab-separated ("?" for a value the store holds that cannot be read, with a warning).

    \b
    Example:
      resourcesync fleet list
    """
    with _store(root, db) as store:
        for row in store.rows():
            e = row.entry
            unknown = row.unreadable
            every = "?" if "every" in unknown else f"{e.every:g}"
            delete = "?" if "apply_delete" in unknown else "delete" if e.delete else "-"
            follow = "?" if "follow" in unknown else "follow" if e.follow else "-"
            click.echo(f"{e.name}\t{e.source}\t{every}\t{e.via}\t{delete}\t{follow}")
            if row.damaged is not None:
                click.echo(f"warning: {row.damaged}", err=True)


@fleet.command("import", short_help="Register every Source of a TOML or CSV file.")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--replace", is_flag=True, help="Update the Sources already registered.")
@_where
@handle_errors
def import_(file: Path, replace: bool, root: Path, db: str | None) -> None:
    """Register every Source of FILE: TOML (`[[source]]` tables with name, source, and
    optionally dest, every, via, delete, headers) or CSV (a header row naming those columns).
    All or nothing: one bad entry and none is registered.

    \b
    Example:
      resourcesync fleet import sources.csv
    """
    from ..fleet import read_entries

    entries = list(read_entries(file))  # all checked before the first is stored
    with _store(root, db, create=True) as store:
        n = store.add(entries, now=time.time(), replace=replace)
    click.echo(f"imported {n} Sources from {file}", err=True)


def _line(row: Row, outcome: Outcome) -> None:
    if outcome.ok:
        c = outcome.counts
        click.echo(
            f"{row.name}: ok ({outcome.mode}): {c.get('fetched', 0)} fetched, "
            f"{c.get('deleted', 0)} deleted in {outcome.seconds:.2f} s",
            err=True,
        )
    else:
        click.echo(f"{row.name}: FAILED: {outcome.error}", err=True)


@fleet.command(short_help="Run each Source's sync when it is due (until stopped, or --once).")
@click.option("--once", is_flag=True, help="Run what is due, wait for it, exit (0: all ok).")
@click.option("--all", "all_", is_flag=True, help="With --once: every Source, due or not.")
@click.option(
    "--jobs",
    type=click.IntRange(1, 1024),
    default=8,
    show_default=True,
    help="Syncs at once in all.",
)
@click.option(
    "--per-host",
    type=click.IntRange(1, 256),
    default=2,
    show_default=True,
    help="Syncs at once against one host (shared by its Sources).",
)
@click.option(
    "--requests",
    type=click.IntRange(1, 64),
    default=2,
    show_default=True,
    help="Requests in flight per sync.",
)
@click.option(
    "--retry-after",
    type=DURATION,
    default="1m",
    show_default=True,
    help="First wait after a failure (doubled each time).",
)
@click.option(
    "--max-backoff",
    type=DURATION,
    default="6h",
    show_default=True,
    help="Longest wait after failures.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Seconds one connect or read of a sync may wait without progress.",
)
@click.option(
    "--retries",
    type=click.IntRange(0, 20),
    default=3,
    show_default=True,
    help="Retries of a failed request within one sync.",
)
@click.option(
    "--broker",
    metavar="URL",
    envvar="RESOURCESYNC_FLEET_BROKER",
    help="redis://…: queue the syncs as Celery tasks for `resourcesync worker` (needs --db).",
)
@click.option(
    "--requeue-after",
    type=DURATION,
    default="1h",
    show_default=True,
    help="With --broker: queue a Source again when its task has not come back for this long.",
)
@click.option(
    "--listen",
    metavar="HOST:PORT",
    help="Where the callback server for --follow Sources listens (default 127.0.0.1, any port).",
)
@click.option("--callback-url", help="The callback URL as hubs must call it (behind a proxy).")
@click.option(
    "--lease",
    type=click.IntRange(60),
    default=86400,
    show_default=True,
    help="The lease asked of hubs for --follow Sources (renewed before it ends).",
)
@click.option(
    "--status-port",
    type=click.IntRange(0, 65535),
    help="Also serve the status page at http://127.0.0.1:PORT/ (and /status.json).",
)
@_where
@handle_errors
def run(
    once: bool,
    all_: bool,
    jobs: int,
    per_host: int,
    requests: int,
    retry_after: float,
    max_backoff: float,
    timeout: float,
    retries: int,
    broker: str | None,
    requeue_after: float,
    listen: str | None,
    callback_url: str | None,
    lease: int,
    status_port: int | None,
    root: Path,
    db: str | None,
) -> None:
    """Run each Source's sync when it is due: its first run is a baseline, later ones are
    incremental; a failing Source is retried after a growing wait. Keeps going until stopped
    (Ctrl-C, SIGTERM: no sync starts, the syncs in flight finish and are recorded; a second
    Ctrl-C stops them at once); with --once, runs what is due and exits 0 when every sync
    succeeded, 1 otherwise, 130 when interrupted.

    \b
    Example:
      resourcesync fleet run --once --all
      resourcesync fleet run --broker redis://queue/0 --db postgresql://db/fleet
    """
    if all_ and not once:
        fail("--all goes with --once")
    if broker and not db:
        fail("--broker needs --db postgresql://… (the store the workers share)")
    if status_port is not None:
        from ..fleet.status import serve_status

        try:
            page = serve_status(root, db, status_port)
        except OSError as exc:
            fail(f"--status-port {status_port}: {exc.strerror or exc}")
            return
        click.echo(f"status at http://127.0.0.1:{page.server_address[1]}/", err=True)
    from ..fleet import Backoff, Limits
    from ..fleet.embedded import Embedded

    # Ctrl-C / SIGTERM: no sync starts, those in flight finish and are recorded; a second
    # one ends the process at once (each copy resumes where it stopped, as after a kill).
    stop, restore = _stop_on_signals()
    try:
        notes = None if once else _notifications(root, db, listen, callback_url, lease, stop)
        if broker:
            assert db is not None  # checked above
            from ..fleet.cluster import TaskOptions

            task = TaskOptions(per_host, requests, timeout, retries, retry_after, max_backoff)
            try:
                _cluster(broker, db, root, task, requeue_after, once, all_, stop)
            finally:
                _finish(notes, stop)
            return
        limits = Limits(jobs=jobs, per_host=per_host, requests=requests)
        backoff = Backoff(first=retry_after, cap=max_backoff)
        with _store(root, db) as store:
            runner = Embedded(
                store, root, limits, backoff, timeout=timeout, retries=retries, on_outcome=_line
            )
            try:
                if once:
                    rows = list(store.rows() if all_ else store.due(time.time(), 1 << 62))
                    results = runner.run_once(rows, stop)
                    for name, outcome in results:
                        if outcome is None:
                            click.echo(f"{name}: skipped: another run is syncing it", err=True)
                    bad = sum(1 for _, o in results if o is None or not o.ok)
                    if stop.is_set():
                        fail(
                            f"interrupted: {len(results)} Sources run ({bad} not ok), "
                            f"{len(rows) - len(results)} not started",
                            130,
                        )
                    click.echo(f"{len(results)} Sources run, {bad} not ok", err=True)
                    sys.exit(EXIT_FINDINGS if bad else EXIT_OK)
                runner.run(stop)
            finally:
                runner.close()
                _finish(notes, stop)
    finally:
        restore()


def _notifications(
    root: Path,
    db: str | None,
    listen: str | None,
    callback_url: str | None,
    lease: int,
    stop: Any,
) -> Any:
    """Subscribe the --follow Sources in a thread of its own, when there are any (or when
    --listen asks for the callback server anyway, for Sources added later)."""
    import threading

    from ..fleet.follow import Notifications

    with _store(root, db) as store:
        if listen is None and not any(r.entry.follow for r in store.rows()):
            return None

    def event(kind: str, detail: Any) -> None:
        if kind in (
            "notified",
            "subscribed",
            "denied",
            "no-channel",
            "follow-unavailable",
            "store-unavailable",
            "notifications-stopped",
        ):
            shown = detail if isinstance(detail, str) else json.dumps(detail, default=str)
            click.echo(f"resourcesync: {kind}: {shown}", err=True)

    notes = Notifications(
        root,
        db,
        listen=listen or "127.0.0.1:0",
        callback_url=callback_url,
        lease=lease,
        on_event=event,
    )
    thread = threading.Thread(target=notes.run, args=(stop,), daemon=True, name="follow")
    thread.start()
    notes.ready.wait(15)
    if notes.address:
        click.echo(f"callbacks at http://{notes.address[0]}:{notes.address[1]}/callback/", err=True)
    return thread


def _finish(notes: Any, stop: Any) -> None:
    """Stop the subscriptions (they are unsubscribed) once the runs are over."""
    if notes is not None:
        stop.set()
        notes.join(timeout=30)


def _stop_on_signals() -> tuple[Any, Callable[[], None]]:
    """An event set by the first Ctrl-C or SIGTERM (the runs stop starting syncs and record
    those in flight as they finish); the second one ends the process at once, with 130 or 143,
    as a kill would: every write of a sync is atomic and its journal names what it put in
    place, so each copy resumes where it stopped (its temporary files are removed then)."""
    import os
    import signal
    import threading

    stop = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        code = 143 if signum == signal.SIGTERM else 130
        if stop.is_set():
            click.echo("resourcesync: stopped now; each copy resumes where it stopped", err=True)
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
        stop.set()
        click.echo(
            "resourcesync: stopping: no sync starts, those in flight finish and are recorded "
            f"({'Ctrl-C' if code == 130 else 'SIGTERM'} again: stop them now)",
            err=True,
        )

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for sig, was in previous.items():
            signal.signal(sig, was)

    return stop, restore


def _cluster(
    broker: str,
    db: str,
    root: Path,
    task: Any,
    requeue_after: float,
    once: bool,
    all_: bool,
    stop: Any,
) -> None:
    from ..fleet.cluster import Producer, make_app

    app = make_app(broker)
    with _store(root, db) as store:
        producer = Producer(store, app, task, requeue_after=requeue_after)
        if not once:
            producer.run(stop)
            return
        rows = list(store.rows() if all_ else store.due(time.time(), 1 << 62))
        tickets = producer.send(rows)
        if len(tickets) < len(rows):
            fail(f"the broker at {broker} refused tasks: {len(rows) - len(tickets)} not queued")
        producer.wait(tickets, stop)
        bad = 0
        for name in tickets:
            row = store.get(name)
            if row is None:
                continue
            if row.ok and store.done(name, tickets[name]):
                click.echo(f"{name}: ok ({row.mode})", err=True)
            else:
                bad += 1
                click.echo(f"{name}: FAILED: {row.error or 'not finished'}", err=True)
        if stop.is_set():
            # The tasks queued run on the workers all the same; this run stopped waiting.
            fail(f"interrupted: {len(tickets)} Sources queued, {bad} not finished or not ok", 130)
        click.echo(f"{len(tickets)} Sources run, {bad} not ok", err=True)
        sys.exit(EXIT_FINDINGS if bad else EXIT_OK)


@fleet.command(short_help="Per Source: last run, counts, lag, failures; then totals.")
@click.option("--json", "as_json", is_flag=True, help="JSON on stdout.")
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write an HTML page to FILE.",
)
@_where
@handle_errors
def status(as_json: bool, html_file: Path | None, root: Path, db: str | None) -> None:
    """Per Source: last run and result, counts, cursor, lag, next run, consecutive failures and
    the last error; then the totals. Exit 0 when no Source is failing, 1 otherwise.

    \b
    Example:
      resourcesync fleet status --json | jq '.sources[] | select(.ok == false)'
    """
    from ..fleet.status import Totals, entry_status, rows_html, write_json

    now = time.time()
    with _store(root, db) as store:
        if html_file is not None:
            from ..atomic import AtomicFile

            with AtomicFile(html_file) as f:
                for chunk in rows_html(store.rows(), now):
                    f.write(chunk.encode())
        if as_json:
            totals = write_json(store.rows(), now, sys.stdout)
        elif html_file is None:
            totals = _table(store.rows(), now)
        else:
            totals = Totals()
            for row in store.rows():
                totals.add(entry_status(row, now))
    sys.exit(EXIT_FINDINGS if totals.failing else EXIT_OK)


def _table(rows: Iterator[Row], now: float) -> Any:
    from rich.console import Console
    from rich.table import Table

    from ..fleet.status import Totals, age, entry_status

    table = Table(box=None, header_style="bold")
    for col in (
        "Name",
        "Host",
        "Result",
        "Last run",
        "Took",
        "Lag",
        "Fetched",
        "Deleted",
        "Failed",
        "Next",
        "Fails",
        "Last error",
    ):
        table.add_column(
            col,
            justify="right"
            if col in ("Took", "Lag", "Fetched", "Deleted", "Failed", "Fails")
            else "left",
            overflow="fold",
            no_wrap=col in ("Name", "Result", "Host", "Last run", "Next"),
        )
    totals = Totals()
    for row in rows:
        s = entry_status(row, now)
        totals.add(s)
        result = (
            "[dim]never run[/]"
            if s["ok"] is None
            else "[green]ok[/]"
            if s["ok"]
            else "[bold red]FAILED[/]"
        )
        table.add_row(
            s["name"],
            s["host"],
            result,
            age(now - row.last_run) + " ago" if row.last_run else "-",
            f"{s['seconds']:.1f}s" if s["seconds"] is not None else "-",
            age(s["lag"]),
            str(s["fetched"]),
            str(s["deleted"]),
            str(s["failed"]),
            "due" if s["due"] else "in " + age(row.next_run - now),
            "?" if s["failures"] is None else str(s["failures"]) if s["failures"] else "",
            s["error"] or "",
        )
    # A pipe or a file gets the whole table, not one folded to 80 columns.
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)
    failing = f"{totals.failing} failing"
    if totals.failing:
        failing = f"[bold red]{failing}[/]"
    console.print(
        f"{totals.sources} Sources: [green]{totals.ok} ok[/], {failing}, "
        f"{totals.never_run} never run, {totals.due} due"
    )
    return totals


__all__ = ["fleet"]
