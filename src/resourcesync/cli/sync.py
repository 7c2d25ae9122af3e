"""`sync` and `audit`: keep a local copy in step with a Source, and check that it is."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..units import parse_size
from ._common import (
    DURATION_OR_ZERO,
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_OK,
    credential_options,
    emit_json,
    fail,
    handle_errors,
    handle_read_errors,
    plural,
    request_headers,
    show_progress,
    stderr_console,
    summary_line,
)

if TYPE_CHECKING:
    from ..destination.report import Action, SetReport
    from ..destination.sync import SyncOptions, SyncReport

# The engine (httpx, asyncio, SQLite) is imported when a command runs, not when the command
# line starts: `resourcesync validate` should not pay for `sync`.


def _mappings(values: tuple[str, ...]) -> list[tuple[str, Path]]:
    out = []
    for v in values:
        prefix, sep, directory = v.partition("=")
        if not sep or not prefix.startswith(("http://", "https://")) or not directory:
            raise click.BadParameter(f"a mapping is URI_PREFIX=DIR, not {v!r}", param_hint="--map")
        out.append((prefix, Path(directory)))
    return out


class _Size(click.ParamType[int]):
    """A size in bytes: `1073741824`, `512K`, `256M`, `1G` (binary multiples)."""

    name = "SIZE"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        try:
            n = parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if n < 1:
            self.fail(f"a size must be at least 1 byte, not {value!r}", param, ctx)
        return n


class _Datetime(click.ParamType[datetime]):
    """A W3C datetime (`2026-11-01`, `2026-11-01T12:00:00Z`); without a zone, UTC."""

    name = "DATETIME"

    def convert(self, value: Any, param: Any, ctx: Any) -> datetime:
        if isinstance(value, datetime):
            return value
        from ..w3cdt import parse_w3c

        try:
            when = parse_w3c(value)
        except ValueError as exc:
            self.fail(f"{value!r} is not a W3C datetime ({exc})", param, ctx)
        return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


_DATETIME = _Datetime()


def sync_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--set", "set_", metavar="NAME|URL", help="Only this resource set."),
        click.option(
            "--include",
            multiple=True,
            metavar="PATTERN",
            help="Only resources whose path under DEST matches (fnmatch, `*` across `/`; "
            "repeatable).",
        ),
        click.option(
            "--exclude",
            multiple=True,
            metavar="PATTERN",
            help="Leave out resources whose path under DEST matches: neither fetched, deleted "
            "nor audited (repeatable).",
        ),
        click.option(
            "--map",
            "maps",
            multiple=True,
            metavar="URI_PREFIX=DIR",
            help="Where URIs under a prefix go (repeatable; adds to the default).",
        ),
        click.option(
            "--transfers",
            type=click.IntRange(1, 256),
            default=8,
            show_default=True,
            help="Concurrent fetches.",
        ),
        click.option(
            "--per-host",
            type=click.IntRange(1, 256),
            default=4,
            show_default=True,
            help="Concurrent requests to one host.",
        ),
        click.option(
            "--delay",
            type=click.FloatRange(min=0),
            default=0.0,
            show_default=True,
            help="Seconds between requests to one host (politeness).",
        ),
        click.option(
            "--retries",
            type=click.IntRange(0, 20),
            default=3,
            show_default=True,
            help="Attempts after the first, with backoff, for a request that fails for a "
            "reason worth retrying (connection, 5xx, 429; Retry-After honoured).",
        ),
        click.option(
            "--timeout",
            type=click.FloatRange(min=0.1),
            default=30.0,
            show_default=True,
            help="Seconds one connect or read may wait without progress.",
        ),
        *credential_options("the Source's own"),
        click.option(
            "--max-delete",
            type=click.IntRange(min=0),
            default=None,
            metavar="N",
            help="With --delete: delete nothing when a run would delete more than N "
            "resources (a Source that suddenly lists far less), exit 1.",
        ),
        click.option(
            "--allow-empty",
            is_flag=True,
            help="With --delete: delete every resource of a set when its Source lists none "
            "(by default such a run deletes nothing and exits 1: an outage looks the same).",
        ),
        click.option(
            "--any-address",
            is_flag=True,
            help="Let redirects, mirrors and the documents' links lead to loopback, private "
            "and link-local addresses (by default only where the Source itself is).",
        ),
        click.option(
            "--lookback",
            type=DURATION_OR_ZERO,
            default="10m",
            show_default=True,
            metavar="DURATION",
            help="How far behind the copy's cursor to look at the changes listed there for "
            "one the copy lacks (a Source whose transaction committed late lists it in time "
            "order, behind later ones); 0 for none.",
        ),
        click.option(
            "--reconcile-every",
            type=DURATION_OR_ZERO,
            default="7d",
            show_default=True,
            metavar="DURATION",
            help="Compare the copy with the Source's Resource List, as a baseline does, once "
            "it is newer than the one the copy was last compared with and this long has "
            "passed: a change the Change Lists never listed is applied; 0 for never.",
        ),
        click.option(
            "--max-size",
            type=_Size(),
            default="1G",
            show_default=True,
            help="Largest resource or dump package whose length is not declared.",
        ),
        click.option(
            "--max-document-size",
            type=_Size(),
            default="256M",
            show_default=True,
            help="Largest document (list, index, dump), decoded.",
        ),
        click.option(
            "--deadline",
            type=click.FloatRange(min=1),
            default=3600.0,
            show_default=True,
            help="Seconds one transfer may take, request to last byte.",
        ),
        click.option(
            "--min-rate",
            type=_Size(),
            default="1K",
            show_default=True,
            help="Bytes per second a transfer must keep up (over each 30 s).",
        ),
        click.option(
            "--max-host-failures",
            type=click.IntRange(1),
            default=5,
            show_default=True,
            help="Connection failures in a row before a host is given up for the run.",
        ),
        click.option("--json", "as_json", is_flag=True, help="A JSON summary on stdout."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _options(**o: Any) -> SyncOptions:
    from ..http import (
        DEFAULT_DEADLINE,
        DEFAULT_MAX_DOCUMENT_SIZE,
        DEFAULT_MAX_SIZE,
        DEFAULT_MIN_RATE,
        HttpOptions,
        RetryPolicy,
        tls,
    )

    # The CA bundle loads in a thread (without the GIL) while the engine is imported and
    # the Source discovered: 50 ms off the time before the first request on a slow machine.
    tls.preload()
    from ..destination.sync import SyncOptions

    retry = RetryPolicy(retries=o.get("retries", 3))
    http = HttpOptions(
        timeout=o.get("timeout", 30.0),
        retry=retry,
        max_connections=max(o.get("transfers", 8) * 2, 10),
        http2=True,
        max_size=o.get("max_size", DEFAULT_MAX_SIZE),
        max_document_size=o.get("max_document_size", DEFAULT_MAX_DOCUMENT_SIZE),
        deadline=o.get("deadline", DEFAULT_DEADLINE),
        min_rate=o.get("min_rate", DEFAULT_MIN_RATE),
    )
    return SyncOptions(
        delete=bool(o.get("delete")),
        dry_run=bool(o.get("dry_run")),
        baseline=bool(o.get("baseline") or o.get("repair")),
        repair=bool(o.get("repair")),
        via=o.get("via") or "auto",
        transfers=o.get("transfers", 8),
        per_host=o.get("per_host", 4),
        delay=o.get("delay", 0.0),
        checksum=o.get("checksum", True),
        fsync=bool(o.get("fsync")),
        headers=request_headers(o.get("header") or (), o.get("token")),
        http=http,
        mappings=_mappings(o.get("maps") or ()),
        set=o.get("set_"),
        preserve_times=o.get("times", True),
        max_delete=o.get("max_delete"),
        allow_empty=bool(o.get("allow_empty")),
        lookback=o.get("lookback", 600.0),
        reconcile=o.get("reconcile_every", 7 * 86400.0),
        history_grace=o.get("history_grace", 3600.0),
        host_failures=o.get("max_host_failures", 5),
        include=tuple(o.get("include") or ()),
        exclude=tuple(o.get("exclude") or ()),
        since=o.get("since"),
        backup_dir=o.get("backup_dir"),
        bwlimit=o.get("bwlimit"),
        any_address=bool(o.get("any_address")),
    )


_SIGNS = {"created": "+", "updated": "*", "deleted": "-", "pending": "?"}
_WOULD = {"created": "would create", "updated": "would update", "deleted": "would delete"}


def _action_line(action: Action, *, dry_run: bool) -> str:
    """One line per change to the copy: `+ created URI → PATH`, `* updated …`, `- deleted URI`,
    `? pending URI` (a deletion kept for --delete); `would …` in a dry run."""
    from ..iri import display_iri

    verb = _WOULD.get(action.kind, action.kind) if dry_run else action.kind
    if action.kind == "pending":
        verb = "deletion pending (--delete)"
    line = f"{_SIGNS.get(action.kind, ' ')} {verb} {display_iri(action.uri)}"
    if action.path is not None and action.kind in ("created", "updated"):
        line += f" → {action.path}"
    return line


class _LogFile:
    """`--log-file`: every change, problem and summary of the run, one timestamped line each,
    appended (the terminal's -v/-q do not change what goes there).

    A follower runs for months: a log rotated away (logrotate's default renames it, and may
    compress and remove it) is opened again at its name before the next line, as
    `logging.handlers.WatchedFileHandler` does; the lines would otherwise go to the renamed
    file, or to none."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.file = self._open()
        except OSError as exc:
            fail(f"{path}: cannot open the log file: {exc.strerror or exc}")
        self._reopen_failed = False

    def _open(self) -> Any:
        file = self.path.open("a", encoding="utf-8", buffering=1)
        st = os.fstat(file.fileno())
        self._id = (st.st_dev, st.st_ino)
        return file

    def _follow_rotation(self) -> None:
        try:
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == self._id:
                return
        except OSError:
            pass  # gone: created again
        try:
            file = self._open()
        except OSError as exc:
            if not self._reopen_failed:  # (said once; the lines go on to the file it had)
                self._reopen_failed = True
                click.echo(
                    f"resourcesync: {self.path}: cannot open the log file again after it "
                    f"was moved: {exc.strerror or exc}",
                    err=True,
                )
            return
        self.file.close()
        self.file, self._reopen_failed = file, False

    def write(self, line: str) -> None:
        from ..w3cdt import format_w3c

        self._follow_rotation()
        stamp = format_w3c(datetime.now(UTC).replace(microsecond=0))
        self.file.write(f"{stamp} {line}\n")

    def report(
        self, report: SyncReport, *, delete: bool = False, said: frozenset[int] = frozenset()
    ) -> None:
        """`said`: the problems (by `id`) not to write again (`_SaidOnce`)."""
        from ..iri import display_iri

        for s in report.sets:
            self.write(_set_line(s, report.dry_run, delete))
            for what in (s.gap and f"gap: {s.gap}", s.incomplete):
                if what:
                    self.write(f"{s.name}: {what}")
            for p in s.problems:
                if id(p) not in said:
                    self.write(f"! {display_iri(p.uri)}: {p.message}")
        self.write(f"{'ok' if report.ok else 'NOT OK'} in {report.seconds:.2f} s")

    def close(self) -> None:
        self.file.close()


class _SaidOnce:
    """While following: a warning about a document (a rule it bends that we read through: a
    zone-less datetime, a base64 digest) is said the first time it is heard, not again at
    every run that reads the same document (every poll, every notification: 288 times a day
    at the default poll interval). Said again when its words change (a new value, another
    line). Failures are said every time. The JSON events keep every run's problems."""

    #: Remembered at most: a Source whose warnings change at every run is said anew after.
    LIMIT = 10_000

    def __init__(self) -> None:
        self._said: set[tuple[str, str]] = set()

    def repeats(self, report: SyncReport) -> frozenset[int]:
        """The problems of `report` (by `id`) already said; the others are remembered."""
        repeated = set()
        for s in report.sets:
            for p in s.problems:
                if not p.message.startswith("warning:"):
                    continue
                key = (p.uri, p.message)
                if key in self._said:
                    repeated.add(id(p))
                    continue
                if len(self._said) >= self.LIMIT:
                    self._said.clear()
                self._said.add(key)
        return frozenset(repeated)


def _set_line(s: SetReport, dry_run: bool, delete: bool = False) -> str:
    """One set's line. `delete`: the run had --delete (deletions it left pending were held
    back for a reason said on their own lines, not for want of the option)."""
    hint = "" if delete else " (use --delete)"
    verb = "would fetch" if dry_run else "fetched"
    line = (
        f"{s.name}: {s.mode} via {s.via}: {verb} {s.planned if dry_run else s.fetched}"
        f", {s.not_modified} not modified, {s.unchanged} unchanged, {s.deleted} deleted"
    )
    if s.mode == "incremental":
        line += f" ({plural(s.changes, 'change')})"
    if s.pending_deletes:
        line += f", {plural(s.pending_deletes, 'deletion')} pending{hint}"
    if s.failed:
        line += f", {s.failed} FAILED"
    if s.refused:
        line += f", {s.refused} refused"
    if s.excluded:
        line += f", {s.excluded} excluded"
    if s.changed_here:
        line += f", {s.changed_here} changed here"
    if s.strays:
        line += f", {s.strays} not from the Source kept{hint}"
    return line


def _summary(
    report: SyncReport,
    *,
    quiet: bool = False,
    delete: bool = False,
    said: frozenset[int] = frozenset(),
) -> None:
    """`said`: the problems (by `id`) not to say again (`_SaidOnce`)."""
    from ..iri import display_iri

    for s in report.sets:
        line = _set_line(s, report.dry_run, delete)
        if not quiet:
            click.echo(line, err=True)
        if s.gap:
            click.echo(f"resourcesync: {s.name}: gap: {s.gap}", err=True)
        if s.incomplete:
            click.echo(f"resourcesync: {s.name}: {s.incomplete}", err=True)
        for p in s.problems[:20]:
            if (quiet and p.message.startswith("warning:")) or id(p) in said:
                continue
            click.echo(f"resourcesync: {display_iri(p.uri)}: {p.message}", err=True)
        if len(s.problems) > 20:
            click.echo(f"resourcesync: … and {len(s.problems) - 20} more problems", err=True)
    if not quiet:
        click.echo(_sync_summary(report, delete))


def _sync_summary(report: SyncReport, delete: bool = False) -> str:
    """The run's one summary line (on stdout; the same shape as publish's and audit's)."""
    sets = report.sets
    total = {
        k: sum(getattr(s, k) for s in sets)
        for k in (
            "planned",
            "fetched",
            "not_modified",
            "unchanged",
            "deleted",
            "pending_deletes",
            "failed",
            "refused",
            "excluded",
            "changed_here",
            "strays",
            "bytes",
        )
    }
    option = "" if delete else " (--delete)"  # with it, held back for reasons said apart
    if report.dry_run:
        counts = [(total["planned"], "to fetch"), (total["pending_deletes"], "deletions pending")]
        verdict = "dry run"
    else:
        counts = [
            (total["fetched"], "fetched"),
            (total["not_modified"] + total["unchanged"], "unchanged"),
            (total["deleted"], "deleted"),
        ]
        verdict = "ok" if report.ok else "NOT ok"
    for key, label in (
        ("pending_deletes", "deletions pending" + option),
        ("failed", "failed"),
        ("refused", "refused"),
        ("excluded", "excluded"),
        ("changed_here", "changed here (fetched again)"),
        ("strays", "files not from the Source kept" + option),
    ):
        if total[key] and not (report.dry_run and key == "pending_deletes"):
            if report.dry_run and key == "changed_here":
                label = "changed here (to fetch again)"
            counts.append((total[key], label))
    return summary_line(
        "sync",
        verdict,
        counts,
        items=total["fetched"],
        seconds=report.seconds,
        size=total["bytes"],
    )


class _ProgressDisplay:
    """The terminal's view of a run: what is being read, then resources and bytes fetched with
    their rates and the time left; gone when the run ends (the summary line stays)."""

    def __init__(self) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[extra]}"),
            TimeRemainingColumn(),
            console=stderr_console(),
            transient=True,
        )
        self.task = self.bar.add_task("reading the Source's documents", total=None, extra="")
        self.expected: int | None = None
        self.started = 0.0

    def __enter__(self) -> _ProgressDisplay:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(None, None, None)

    def update(self, phase: str, done: int, total: int, size: int) -> None:
        import time

        from ..units import format_size

        if phase == "read":
            self.bar.update(self.task, description=f"reading: {done:,} entries", extra="")
        elif phase == "plan":
            # Before the transfers: how many, and how many bytes when the lists say.
            self.expected = size or None
            self.started = time.monotonic()
            self.bar.update(self.task, description="fetching", completed=0, total=total)
        elif phase == "fetch":
            elapsed = max(time.monotonic() - self.started, 1e-6)
            of = f" of {format_size(self.expected)}" if self.expected else ""
            extra = f"resources • {format_size(size)}{of} • {format_size(size / elapsed)}/s"
            self.bar.update(self.task, completed=done, total=total, extra=extra)


@click.command()
@click.argument("source")
@click.argument("dest", type=click.Path(path_type=Path))
@click.option("--baseline", is_flag=True, help="Start again from the Resource List (or dump).")
@click.option(
    "--repair",
    is_flag=True,
    help="Make the copy what the Source lists again: a baseline that checks every file held "
    "against the Source's digests and fetches what is missing or different, and reports the "
    "files in DEST that no URI of the Source maps to (with --delete, removes them and what "
    "the Source no longer lists). What `audit` finds, this repairs.",
)
@click.option(
    "--via",
    type=click.Choice(["lists", "dumps", "auto"]),
    default="auto",
    show_default=True,
    help="Baselines and increments from lists + GETs, or from the Resource and Change Dumps' "
    "packages (auto: dumps when the Source offers them).",
)
@click.option("--delete", is_flag=True, help="Apply deletions (off by default: kept pending).")
@click.option("--dry-run", is_flag=True, help="Show what would be done; change nothing.")
@click.option(
    "--checksum/--no-checksum",
    default=True,
    show_default=True,
    help="Verify digests the Source gives.",
)
@click.option("--fsync", is_flag=True, help="fsync every file (power-loss safety).")
@click.option(
    "--times/--no-times",
    default=True,
    show_default=True,
    help="Give each file the Source's <lastmod> as its modification time (fetched, from a "
    "package, or kept when only the time changed).",
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="List each change to the copy (+ created, * updated, - deleted, ? pending).",
)
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.option(
    "--follow",
    is_flag=True,
    help="Then follow the Source's change notifications (WebSub) until stopped; a Source "
    "that offers none, by reading its Change List every --poll-interval.",
)
@click.option(
    "--listen",
    default="127.0.0.1:0",
    show_default=True,
    metavar="HOST:PORT",
    help="With --follow: where the callback server listens.",
)
@click.option("--callback-url", help="With --follow: the callback URL as the hub must call it.")
@click.option(
    "--lease",
    type=click.IntRange(60),
    default=86400,
    show_default=True,
    help="With --follow: the lease asked of the hub (renewed before it ends).",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=1),
    default=300.0,
    show_default=True,
    help="With --follow: catch up from the Change List after this much silence.",
)
@click.option(
    "--check-interval",
    type=click.FloatRange(min=1),
    default=3600.0,
    show_default=True,
    help="With --follow: an incremental sync, which also looks at every file of the copy, at "
    "least this often however many notifications arrive (they tell only what changed at the "
    "Source).",
)
@click.option(
    "--verify-timeout",
    type=click.FloatRange(min=0.1),
    default=15.0,
    show_default=True,
    help="With --follow: how long to wait for the hub to verify a subscription before "
    "asking again.",
)
@click.option(
    "--history-grace",
    type=DURATION_OR_ZERO,
    default="1h",
    show_default=True,
    metavar="DURATION",
    help="How long the Source's Change Lists may end before the change the copy last read "
    "from them (a stale cache, a lagging replica) before that is reported as a history that "
    "changed (a Source restored from a backup): exit 1, run --baseline. 0: at once.",
)
@click.option(
    "--from",
    "since",
    type=_DATETIME,
    metavar="DATETIME",
    help="An incremental run from this W3C datetime instead of the copy's cursor (resync's "
    "--from): the copy is taken to be the Source as of then.",
)
@click.option(
    "--backup-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Move files replaced or deleted here first, at their path under DEST (outside DEST).",
)
@click.option(
    "--bwlimit",
    type=_Size(),
    metavar="RATE",
    help="Bytes per second for all transfers together, e.g. 500K, 10M.",
)
@click.option(
    "--log-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Append every change, problem and summary, timestamped, to this file.",
)
@click.option("--duration", type=click.FloatRange(min=0), hidden=True)
@sync_options
@handle_errors
def sync(
    source: str,
    dest: Path,
    as_json: bool,
    follow: bool,
    listen: str,
    callback_url: str | None,
    lease: int,
    poll_interval: float,
    check_interval: float,
    verify_timeout: float,
    duration: float | None,
    verbose: bool,
    quiet: bool,
    log_file: Path | None,
    **o: Any,
) -> None:
    """Bring DEST in step with SOURCE: a site, a Source Description, a Capability List, a
    Resource List or Change List (URL or file).

    The first run is a baseline; later runs are incremental from where the last one stopped.
    Exit 0 when everything was applied, 1 when something failed or was refused, 2 on error.

    \b
    Example:
      resourcesync sync https://example.org/ ./copy
      resourcesync sync https://example.org/ ./copy --delete --follow
    """

    if o.get("since") is not None and (o.get("baseline") or o.get("repair")):
        fail("--from starts an incremental run; it cannot be given with --baseline or --repair")
    if follow and o.get("dry_run"):
        # A follower subscribes at hubs and applies what they announce as it comes: there is
        # nothing it would do that one dry run does not show.
        fail("--dry-run shows what one sync would do; it cannot be given with --follow")
    opts = _options(**o)
    log = _LogFile(log_file) if log_file is not None else None
    dry = opts.dry_run
    # A dry run lists what it would do: that is what it is for (issue 14.8).
    shown = (verbose or dry) and not as_json and not quiet
    if shown or log is not None:

        def on_action(action: Action) -> None:
            line = _action_line(action, dry_run=dry)
            if shown:
                click.echo(line)
            if log is not None:
                log.write(line)

        opts.on_action = on_action
    try:
        _sync(
            source,
            dest,
            opts,
            as_json,
            quiet,
            log,
            follow,
            listen,
            callback_url,
            lease,
            (poll_interval, check_interval),
            duration,
            verify_timeout,
        )
    finally:
        if log is not None:
            log.close()


def _sync(
    source: str,
    dest: Path,
    opts: SyncOptions,
    as_json: bool,
    quiet: bool,
    log: _LogFile | None,
    follow: bool,
    listen: str,
    callback_url: str | None,
    lease: int,
    intervals: tuple[float, float],
    duration: float | None,
    verify_timeout: float,
) -> None:
    from ..destination.sync import sync as run_sync

    if follow:
        _follow(
            source,
            dest,
            opts,
            as_json,
            listen,
            callback_url,
            lease,
            intervals,
            duration,
            verify_timeout,
            log,
            quiet,
        )
        return
    if show_progress() and not as_json and not quiet:
        with _ProgressDisplay() as display:
            report = run_sync(source, dest, opts, progress=display.update)
    else:
        report = run_sync(source, dest, opts)
    if log is not None:
        log.report(report, delete=opts.delete)
    if as_json:
        emit_json(report.to_json())
    else:
        _summary(report, quiet=quiet, delete=opts.delete)
    sys.exit(EXIT_OK if report.ok else EXIT_FINDINGS)


def _event_line(kind: str, detail: Any) -> str:
    """A follower's event as a person reads it: when, what, and its details as words
    (`reason: …, retry in 4.0 s`), not a Python dict (issue 14.18)."""
    from ..iri import display_iri
    from ..w3cdt import format_w3c

    def word(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.1f}"
        if isinstance(value, str) and value.startswith(("http://", "https://")):
            return display_iri(value)
        return str(value)

    if isinstance(detail, dict):
        text = ", ".join(
            f"{k.replace('_', ' ')} {word(v)}{' s' if k == 'retry_in' else ''}"
            for k, v in detail.items()
        )
    elif isinstance(detail, list):
        text = "; ".join(
            " ".join(word(v) for v in item.values() if v) if isinstance(item, dict) else word(item)
            for item in detail
        )
    else:
        text = word(detail)
    stamp = format_w3c(datetime.now(UTC).replace(microsecond=0))
    return f"{stamp} resourcesync: {kind.replace('-', ' ')}: {text}"


#: A follower's events that say something went wrong (-q still shows them): a hub or the
#: Source out, a subscription denied or lost, a notification that could not be used.
_TROUBLE = frozenset(
    {
        "hub-unavailable",
        "source-unavailable",
        "dest-unwritable",
        "denied",
        "dropped",
        "resubscribing",
    }
)


def _follow(
    source: str,
    dest: Path,
    opts: SyncOptions,
    as_json: bool,
    listen: str,
    callback_url: str | None,
    lease: int,
    intervals: tuple[float, float],
    duration: float | None,
    verify_timeout: float = 15.0,
    log: _LogFile | None = None,
    quiet: bool = False,
) -> None:
    """`intervals`: the poll and check intervals (`FollowOptions`). `quiet` (-q): on the
    terminal only what went wrong — a run's failures and gaps, and the events of trouble
    (`_TROUBLE`); the log and the JSON events keep everything."""
    import signal
    import threading

    from ..destination.subscribe import FollowOptions, follow

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    once = _SaidOnce()

    def event(kind: str, detail: Any) -> None:
        run = hasattr(detail, "sets") and hasattr(detail, "dry_run")
        said = once.repeats(detail) if run else frozenset()
        if log is not None:
            if run:
                log.report(detail, delete=opts.delete, said=said)
            else:
                log.write(f"{kind}: {detail}")
        if as_json:
            emit_json(
                {
                    "event": kind,
                    "detail": detail.to_json() if hasattr(detail, "to_json") else detail,
                }
            )
            sys.stdout.flush()
        elif run:
            _summary(detail, quiet=quiet, delete=opts.delete, said=said)
        elif not quiet or kind in _TROUBLE:
            click.echo(_event_line(kind, detail), err=True)

    follow(
        source,
        dest,
        opts,
        FollowOptions(
            listen=listen,
            callback_url=callback_url,
            lease_seconds=lease,
            poll_interval=intervals[0],
            check_interval=intervals[1],
            duration=duration,
            verify_timeout=verify_timeout,
        ),
        on_event=event,
        stop=stop,
    )


@click.command()
@click.argument("source")
@click.argument("dest", type=click.Path(path_type=Path))
@click.option("-v", "--verbose", is_flag=True, help="List every difference, not ten of each.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors (the exit code says).")
@sync_options
@handle_read_errors
def audit(source: str, dest: Path, as_json: bool, verbose: bool, quiet: bool, **o: Any) -> None:
    """Compare DEST with the Source's current state (its Resource List, or its Resource Dump's
    manifests, plus the changes after it): missing, extra and different resources. Exit 0 in
    sync, 1 when it differs, 2 on error. Ends with one summary line on stdout.

    \b
    Example:
      resourcesync audit https://example.org/ ./copy
    """
    if not dest.is_dir():
        click.echo(f"resourcesync: {dest}: no such directory", err=True)
        sys.exit(EXIT_ERROR)
    from ..destination.sync import audit as run_audit

    opts = _options(**o)
    report = run_audit(source, dest, opts, examples=None if verbose else 10)
    if not quiet:
        for warning in report.warnings:
            click.echo(f"resourcesync: {warning}", err=True)
    if as_json:
        emit_json(report.to_json())
    elif not quiet:
        from ..iri import display_iri

        for kind, uris in report.examples.items():
            for uri in uris:
                click.echo(f"  {kind}: {display_iri(uri)}")
        if report.unknown:
            click.echo(
                f"  {report.unknown:,} unknown: listed last in a Change List with no change "
                "(or another word than created, updated, deleted), so what the copy should hold "
                "cannot be told (the Source's to mend)"
            )
        if report.missing or report.extra or report.different:
            fix = f"resourcesync sync {source} {dest} --repair"
            if report.extra:
                fix += " --delete"
            click.echo(f"to repair: {fix}")
        if report.others:
            click.echo(
                f"  {report.others:,} other files: held for URIs outside this Source (another "
                "Source synced into DEST, or its former address), not audited"
            )
        verdict = "in sync" if report.ok else "NOT in sync"
        counts = [
            (report.expected, "expected"),
            (report.in_sync, "in sync"),
            (report.missing, "missing"),
            (report.extra, "extra"),
            (report.different, "different"),
        ]
        if report.unknown:
            counts.append((report.unknown, "unknown"))
        click.echo(
            summary_line("audit", verdict, counts, items=report.expected, seconds=report.seconds)
        )
    sys.exit(EXIT_OK if report.ok else EXIT_FINDINGS)


__all__ = ["audit", "sync"]
