"""`resourcesync lirs …` (cat, write, merge, to-resourcesync, from-resourcesync) and
`resourcesync antenna`: thin commands over `resourcesync.lirs`."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import IO, Any

import click

from ..errors import FormatError, ReadError, ResourceSyncError
from ..iri import display_iri
from ..lirs.codec import (
    LirsWarning,
    LirsWriter,
    Record,
    normalize_encoding,
    open_lirs,
)
from ..lirs.merge import expiry_cutoff, merge_records
from ..w3cdt import format_w3c
from ._common import EXIT_FINDINGS, emit_json, fail, handle_errors, show_progress, stderr_console

__all__ = ["antenna", "lirs"]

#: Warnings printed before the rest are only counted.
MAX_WARNINGS = 100


class Warnings:
    """Prints lenient-mode warnings on stderr, the first hundred in full, then a count."""

    def __init__(self, limit: int = MAX_WARNINGS) -> None:
        self.limit = limit
        self.count = 0

    def __call__(self, warning: LirsWarning | str) -> None:
        self.count += 1
        if self.count <= self.limit:
            click.echo(f"resourcesync: warning: {warning}", err=True)

    def finish(self) -> None:
        if self.count > self.limit:
            click.echo(f"resourcesync: {self.count - self.limit} more warnings not shown", err=True)


def _base_url(value: str) -> str:
    """`--base-url` as given, refused when the documents could not name things under it."""
    from ..iri import url_problem

    if value and (why := url_problem(value)) is not None:
        raise click.BadParameter(f"{value!r} {why}")
    return value


@contextlib.contextmanager
def strict_exit(strict: bool) -> Iterator[None]:
    """In strict mode a bad record exits 1 (the input has a finding), not 2."""
    try:
        yield
    except FormatError as exc:
        if not strict:
            raise
        fail(str(exc), EXIT_FINDINGS)


def _encoding_option(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return normalize_encoding(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _check_encoding(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return _encoding_option(value)


def _out_target(out: str) -> str | IO[bytes]:
    return sys.stdout.buffer if out == "-" else out


def _time(seconds: int) -> str:
    if seconds == 0:
        return "-"
    return format_w3c(datetime.fromtimestamp(seconds, UTC))


@click.group("lirs")
def lirs() -> None:
    """LIRS: read, write, merge, and convert to and from ResourceSync.

    \b
    Example:
      resourcesync lirs cat https://antenna.example.jp/di.lirs.gz
    """


@lirs.command("cat", short_help="Print the records of a LIRS file or URL.")
@click.argument("source")
@click.option("--json", "as_json", is_flag=True, help="JSON Lines: one object per record.")
@click.option("--strict", is_flag=True, help="Stop at the first bad record (exit 1).")
@click.option("--encoding", callback=_check_encoding, help="Input encoding (default: detect).")
@handle_errors
def cat(source: str, as_json: bool, strict: bool, encoding: str | None) -> None:
    """Print the records of FILE or URL (gzip and encoding detected).

    \b
    Example:
      resourcesync lirs cat sites.lirs --json
    """
    warnings = Warnings()
    with (
        strict_exit(strict),
        open_lirs(source, encoding=encoding, strict=strict, on_warning=warnings) as reader,
    ):
        write = sys.stdout.write
        tty = sys.stdout.isatty() and not as_json
        if tty:
            # A header for people; a pipe gets the records alone (issue 14.18).
            write(f"{'LAST-MODIFIED':20}  {'LAST-DETECTED':20}  {'LENGTH':>10}  URL  TITLE\n")
        for record in reader:
            if as_json:
                write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
            else:
                url = display_iri(record.url) if tty else record.url
                write(
                    f"{_time(record.last_modified):20}  {_time(record.last_detected):20}  "
                    f"{record.content_length:>10}  {url}  {record.title}\n"
                )
    warnings.finish()


def _json_records(source: str, strict: bool, warnings: Warnings) -> Iterator[Record]:
    """Records from JSON Lines (as `lirs cat --json` prints them)."""
    stream: IO[bytes]
    with contextlib.ExitStack() as stack:
        if source == "-":
            stream = sys.stdin.buffer
        else:
            try:
                stream = stack.enter_context(open(source, "rb"))
            except OSError as exc:
                raise ReadError(exc.strerror or str(exc), source=source) from None
        for lineno, raw in enumerate(stream, 1):
            if not raw.strip():
                continue
            try:
                record = Record.from_json(json.loads(raw))
                from ..lirs.codec import format_record

                format_record(record)
            except (ValueError, ResourceSyncError) as exc:
                message = exc.message if isinstance(exc, ResourceSyncError) else str(exc)
                if strict:
                    raise FormatError(message, source=source, line=lineno) from None
                warnings(LirsWarning(source, lineno, f"{message}; record skipped"))
                continue
            yield record


def _looks_like_json(source: str) -> bool:
    if source == "-" or source.startswith(("http://", "https://")):
        return False
    try:
        with open(source, "rb") as f:
            head = f.read(512).lstrip()
    except OSError:
        return False
    return head.startswith(b"{")


def _writer_options(func: Any) -> Any:
    func = click.option(
        "--crlf", is_flag=True, help="End records with CRLF (the 2.1 text) instead of LF."
    )(func)
    func = click.option(
        "--gzip/--no-gzip",
        "compress",
        default=None,
        help="Compress the output (default: when OUT ends in .gz).",
    )(func)
    func = click.option(
        "--out-encoding",
        default="utf-8",
        show_default=True,
        callback=_check_encoding,
        help="Output encoding: utf-8, euc-jp or shift_jis.",
    )(func)
    func = click.option("-o", "--output", "out", required=True, help="Output file (- = stdout).")(
        func
    )
    return func


def _report_replaced(writer: LirsWriter, warnings: Warnings) -> None:
    if writer.stats.replaced:
        warnings(
            f"{writer.stats.replaced} characters have no place in {writer.encoding} "
            "and were written as '?'"
        )


@lirs.command("write", short_help="Write LIRS from JSON Lines, or re-encode a LIRS file.")
@click.argument("source")
@_writer_options
@click.option("--strict", is_flag=True, help="Stop at the first bad record (exit 1).")
@click.option("--encoding", callback=_check_encoding, help="Input encoding for LIRS input.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
@handle_errors
def write(
    source: str,
    out: str,
    out_encoding: str,
    compress: bool | None,
    crlf: bool,
    strict: bool,
    encoding: str | None,
    as_json: bool,
) -> None:
    """Write LIRS from JSON Lines (as `lirs cat --json` prints) or re-encode a LIRS file.

    SOURCE is read as JSON Lines when it starts with `{`, as LIRS otherwise; `-` is stdin
    (JSON Lines).

    \b
    Example:
      resourcesync lirs cat sites.lirs --json | resourcesync lirs write - --out sites.lirs.gz
    """
    warnings = Warnings()
    with strict_exit(strict), contextlib.ExitStack() as stack:
        if source == "-" or _looks_like_json(source):
            records: Any = _json_records(source, strict, warnings)
            kind = "jsonl"
        else:
            records = stack.enter_context(
                open_lirs(source, encoding=encoding, strict=strict, on_warning=warnings)
            )
            kind = "lirs"
        writer = LirsWriter(
            _out_target(out),
            encoding=out_encoding,
            compress=compress,
            newline="\r\n" if crlf else "\n",
        )
        with writer:
            writer.write_all(records)
    _report_replaced(writer, warnings)
    warnings.finish()
    if as_json:
        emit_json(
            {
                "input": source,
                "input_format": kind,
                "output": out,
                "records": writer.stats.records,
                "encoding": writer.encoding,
                "warnings": warnings.count,
            }
        )


@lirs.command("merge", short_help="Merge LIRS feeds: the fresher record of each URL wins.")
@click.argument("sources", nargs=-1, required=True)
@_writer_options
@click.option(
    "--expires",
    type=click.IntRange(min=0),
    help="Drop records whose Last-Detected is more than SECONDS before --now.",
)
@click.option(
    "--now",
    type=click.IntRange(min=0),
    help="The current time, seconds since the epoch (default: now).",
)
@click.option("--strict", is_flag=True, help="Stop at the first bad record (exit 1).")
@click.option("--encoding", callback=_check_encoding, help="Input encoding (default: detect).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
@handle_errors
def merge(
    sources: tuple[str, ...],
    out: str,
    out_encoding: str,
    compress: bool | None,
    crlf: bool,
    expires: int | None,
    now: int | None,
    strict: bool,
    encoding: str | None,
    as_json: bool,
) -> None:
    """Merge LIRS feeds: one record per URL, the fresher observation (larger Last-Detected)
    winning; Last-Detected is carried over, never set to the time of merging.

    \b
    Example:
      resourcesync lirs merge a.lirs b.lirs.gz --out merged.lirs
    """
    warnings = Warnings()
    now = int(time.time()) if now is None else now

    def feeds() -> Iterator[Iterator[Record]]:
        for source in sources:
            with open_lirs(source, encoding=encoding, strict=strict, on_warning=warnings) as r:
                yield iter(r)

    with strict_exit(strict):
        table, stats = merge_records(feeds(), expires=expires, now=now)
        with table:
            writer = LirsWriter(
                _out_target(out),
                encoding=out_encoding,
                compress=compress,
                newline="\r\n" if crlf else "\n",
            )
            with writer:
                writer.write_all(table.records(min_detected=expiry_cutoff(expires, now)))
    _report_replaced(writer, warnings)
    warnings.finish()
    if as_json:
        emit_json(
            {
                "inputs": list(sources),
                "output": out,
                "read": stats.read,
                "written": stats.written,
                "expired": stats.expired,
                "duplicates": stats.duplicates,
                "warnings": warnings.count,
            }
        )


@lirs.command("to-resourcesync", short_help="Convert LIRS to a Change List or Resource List.")
@click.argument("source")
@click.option(
    "--capability",
    type=click.Choice(["changelist", "resourcelist"]),
    default="changelist",
    show_default=True,
    help="Write the records as a Change List (each a change at its time) or a Resource List.",
)
@click.option("-o", "--output", "out", required=True, help="Output document (- = stdout).")
@click.option("--capability-list", help="URL of the Capability List, linked as rel=up.")
@click.option("--strict", is_flag=True, help="Stop at the first bad record (exit 1).")
@click.option("--encoding", callback=_check_encoding, help="Input encoding (default: detect).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
@handle_errors
def to_resourcesync(
    source: str,
    capability: str,
    out: str,
    capability_list: str | None,
    strict: bool,
    encoding: str | None,
    as_json: bool,
) -> None:
    """Convert LIRS to a Change List or Resource List; title, author and the other fields are
    kept as rs:md attributes in the namespace https://resourcesync.dev/ns/lirs#.

    \b
    Example:
      resourcesync lirs to-resourcesync sites.lirs --out ./public --base-url https://example.org/
    """
    from ..lirs.convert import to_resourcesync as convert

    warnings = Warnings()
    with (
        strict_exit(strict),
        open_lirs(source, encoding=encoding, strict=strict, on_warning=warnings) as reader,
    ):
        stats = convert(reader, _out_target(out), capability, capability_list=capability_list)
    warnings.finish()
    left_out = stats.error_rows + stats.no_time
    if left_out and not as_json:
        click.echo(
            f"resourcesync: {source}: left out {stats.error_rows} error rows (0,0) and "
            f"{stats.no_time} records without a Last-Modified",
            err=True,
        )
    if as_json:
        emit_json({"input": source, "output": out, "capability": capability, **stats.to_json()})


@lirs.command("from-resourcesync", short_help="Convert a Resource List or Change List to LIRS.")
@click.argument("source")
@_writer_options
@click.option(
    "--tz-offset",
    type=click.IntRange(-86400, 86400),
    default=0,
    show_default=True,
    help="Time-zone offset (seconds) for entries that do not carry lirs:tz.",
)
@click.option("--source-url", default="", help="Source URL for entries without lirs:source.")
@click.option("--now", type=click.IntRange(min=0), help="Last-Detected when nothing else says.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
@handle_errors
def from_resourcesync(
    source: str,
    out: str,
    out_encoding: str,
    compress: bool | None,
    crlf: bool,
    tz_offset: int,
    source_url: str,
    now: int | None,
    as_json: bool,
) -> None:
    """Convert a Resource List or Change List (file or URL; an index is followed) to LIRS.

    Last-Detected is each entry's lirs:detected, else the document's `at`/`until`, else now.

    \b
    Example:
      resourcesync lirs from-resourcesync https://example.org/ --out sites.lirs
    """
    from ..lirs.convert import from_resourcesync as convert

    stats = convert(
        source,
        _out_target(out),
        encoding=out_encoding,
        compress=compress,
        newline="\r\n" if crlf else "\n",
        now=now,
        tz_offset=tz_offset,
        source_url=source_url,
    )
    if stats.replaced:
        click.echo(
            f"resourcesync: warning: {stats.replaced} characters have no place in "
            f"{out_encoding} and were written as '?'",
            err=True,
        )
    if as_json:
        emit_json({"input": source, "output": out, **stats.to_json()})


@click.command("antenna")
@click.argument("urls", type=click.Path(dir_okay=False))
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Where the antenna keeps its state and writes its LIRS, lists and page.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0),
    default=0,
    help="Seconds between rounds; 0 (default) runs one round and exits.",
)
@click.option("--rounds", type=click.IntRange(min=1), help="Stop after this many rounds.")
@click.option(
    "--relay", "relays", multiple=True, help="A LIRS feed (file or URL) to merge; repeatable."
)
@click.option("--state", help="SQLite state file (default: OUT/antenna.sqlite).")
@click.option(
    "--base-url",
    default="",
    callback=lambda ctx, param, value: _base_url(value),
    help="URL where OUT is published (for the documents).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=20.0,
    show_default=True,
    help="Seconds one check of a site may wait without progress.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Sites checked at once (at most two per host).",
)
@click.option(
    "--per-host",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Requests at once to one host.",
)
@click.option(
    "--delay",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Seconds between requests to one host.",
)
@click.option(
    "--min-interval",
    type=click.IntRange(min=0),
    default=600,
    show_default=True,
    help="Seconds before a site is checked again.",
)
@click.option(
    "--max-interval",
    type=click.IntRange(min=0),
    default=86400,
    show_default=True,
    help="Longest wait for a site that rarely changes (backoff doubles up to this).",
)
@click.option(
    "--expires",
    type=click.IntRange(min=0),
    default=86400,
    show_default=True,
    help="Relayed records older than this (seconds since Last-Detected) are dropped.",
)
@click.option(
    "--tz-offset",
    type=click.IntRange(-86400, 86400),
    default=32400,
    show_default=True,
    help="The time zone written in the LIRS records, in seconds east of UTC (Japan: 32400).",
)
@click.option(
    "--any-address",
    is_flag=True,
    help="Let the sites' redirects lead to loopback, private and link-local addresses the list "
    "does not name (by default only the listed sites' hosts and public addresses).",
)
@click.option("--json", "as_json", is_flag=True, help="A JSON summary per round.")
@handle_errors
def antenna(
    urls: str,
    out_dir: str,
    interval: float,
    rounds: int | None,
    relays: tuple[str, ...],
    state: str | None,
    base_url: str,
    timeout: float,
    concurrency: int,
    per_host: int,
    delay: float,
    min_interval: int,
    max_interval: int,
    expires: int,
    tz_offset: int,
    any_address: bool,
    as_json: bool,
) -> None:
    """Check the sites listed in URLS (one `URL [title]` a line) and publish what changed:
    OUT/antenna.lirs.gz, resourcelist.xml, changelist.xml and index.html.

    \b
    Example:
      resourcesync antenna urls.txt --out ./antenna
    """
    from ..lirs.antenna import Antenna, AntennaConfig, read_site_list

    config = AntennaConfig(
        out_dir=out_dir,
        state=state,
        base_url=base_url,
        relays=list(relays),
        timeout=timeout,
        concurrency=concurrency,
        per_host=per_host,
        delay=delay,
        min_interval=min_interval,
        max_interval=max_interval,
        expires=expires,
        tz_offset=tz_offset,
        any_address=any_address,
    )
    warnings = Warnings()
    done = 0
    with Antenna(config, on_warning=warnings) as ant:
        while True:
            sites = read_site_list(urls)
            if show_progress() and not as_json:
                with stderr_console().status(f"checking {len(sites)} sites"):
                    summary = ant.run_round(sites)
            else:
                summary = ant.run_round(sites)
            done += 1
            if as_json:
                emit_json(summary.to_json())
            else:
                click.echo(summary.describe(), err=True)
            if interval <= 0 or (rounds is not None and done >= rounds):
                break
            time.sleep(interval)
    warnings.finish()
