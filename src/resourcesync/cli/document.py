"""`validate` and `cat`: look at ResourceSync documents."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import click

from ..hashing import format_hashes
from ..iri import display_iri
from ..jsonable import link_json
from ..model import Document, Resource
from ..sitemap import Mapping, Resolver, walk
from ..sitemap import validate as validate_documents
from ..sitemap.follow import FOLLOW_ALL, FOLLOW_NONE
from ..sitemap.read import is_url
from ..sitemap.rules import ERROR, Finding
from ..units import parse_size
from ..w3cdt import format_w3c
from ._common import (
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_OK,
    credential_options,
    emit_json,
    handle_errors,
    plural,
    request_headers,
)


@functools.cache
def _console() -> Any:
    """rich, imported on first use (a listing in a pipe or a clean validation needs none)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _mappings(values: tuple[str, ...]) -> list[Mapping]:
    try:
        return [Mapping.parse(v) for v in values]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--map") from None


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@contextlib.contextmanager
def http_client(
    targets: Sequence[str],
    timeout: float,
    headers: dict[str, str] | None = None,
    any_address: bool = False,
) -> Iterator[Any]:
    """One HTTP client for the command when any target is a URL (httpx is imported only then:
    listing a local file should not pay for it). `headers` (`--header`, `--token`) go to the
    targets' own origins only, as `sync` sends them to its Source's. The documents they link
    to are read within the targets' reach (`http.reach`: a Source's documents cannot lead the
    command to the machine's own services) unless `any_address`."""
    urls = [t for t in targets if is_url(t)]
    if not urls:
        yield None
        return
    from ..http import HttpOptions, make_client, scoped_to
    from ..http.reach import Reach

    reach = None if any_address else Reach.around_all(urls)
    options = scoped_to(HttpOptions(timeout=timeout, reach=reach), headers or {}, urls)
    with make_client(options) as client:
        yield client


@dataclass(frozen=True, slots=True)
class Reading:
    """How `validate` and `cat` read their targets: the options both take (`reading_options`)."""

    maps: tuple[str, ...]
    max_size: str
    timeout: float
    header: tuple[str, ...]
    token: str | None
    any_address: bool

    def resolver(self) -> Resolver:
        return Resolver(_mappings(self.maps))

    def max_bytes(self) -> int:
        return _size(self.max_size)

    def client(self, targets: Sequence[str]) -> contextlib.AbstractContextManager[Any]:
        headers = request_headers(self.header, self.token)
        return http_client(targets, self.timeout, headers, self.any_address)


def reading_options(body: Callable[..., Any]) -> Callable[..., Any]:
    """The reading options, handed to the command as one `reading` (a `Reading`)."""

    @functools.wraps(body)
    def command(
        *args: Any,
        maps: tuple[str, ...],
        max_size: str,
        timeout: float,
        header: tuple[str, ...],
        token: str | None,
        any_address: bool,
        **kwargs: Any,
    ) -> Any:
        reading = Reading(maps, max_size, timeout, header, token, any_address)
        return body(*args, reading=reading, **kwargs)

    func: Callable[..., Any] = command
    func = click.option(
        "--map",
        "maps",
        multiple=True,
        metavar="URL=DIR",
        help="Read documents under URL from the local directory DIR (repeatable).",
    )(func)
    func = click.option(
        "--max-size",
        default="2G",
        show_default=True,
        help="Refuse a document larger than this (after decompression).",
    )(func)
    func = click.option(
        "--timeout", default=30.0, show_default=True, help="HTTP timeout in seconds."
    )(func)
    for option in credential_options("the targets' own"):
        func = option(func)
    func = click.option(
        "--any-address",
        is_flag=True,
        help="Let the documents' links and redirects lead to loopback, private and link-local "
        "addresses (by default only where the targets themselves are).",
    )(func)
    return func


@click.command()
@click.argument("targets", nargs=-1, required=True, metavar="TARGET...")
@click.option(
    "--follow/--no-follow",
    default=None,
    help="Also check the documents these link down to, each against the entry that lists it "
    "(default: follow from a Source Description or a Capability List, not from others).",
)
@click.option(
    "--packages",
    is_flag=True,
    help="Also download the packages of dumps and check their length, hash and manifest.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object with every finding (with its rule)."
)
@click.option("--errors-only", is_flag=True, help="Do not print warnings.")
@reading_options
@handle_errors
def validate(
    targets: tuple[str, ...],
    follow: bool | None,
    packages: bool,
    as_json: bool,
    errors_only: bool,
    reading: Reading,
) -> None:
    """Check documents (files or URLs) against the ResourceSync rules.

    Exit 0 when there are no errors, 1 when there are, 2 when a target cannot be read.

    \b
    Example:
      resourcesync validate https://example.org/.well-known/resourcesync --follow
      resourcesync validate site/.well-known/resourcesync --map https://example.org/=site
    """

    def show(f: Finding) -> None:
        if as_json or (errors_only and f.level != ERROR):
            return
        where = _where(f)
        colour = "red" if f.level == ERROR else "yellow"
        entry = f" [dim](entry {_escape(f.entry)})[/dim]" if f.entry else ""
        _console().print(
            f"{_escape(where)}: [{colour}]{f.level}[/{colour}]: {_escape(f.message)}{entry}"
        )

    with reading.client(targets) as client:
        report = validate_documents(
            list(targets),
            follow=follow,
            packages=packages,
            resolver=reading.resolver(),
            client=client,
            max_bytes=reading.max_bytes(),
            on_finding=show,
            on_unreadable=lambda f: click.echo(f"resourcesync: {_where(f)}: {f.message}", err=True),
        )
    if as_json:
        sys.stdout.write(report.to_json() + "\n")
    else:
        docs = len(report.documents)
        entries = sum(d.entries for d in report.documents)
        summary = (
            f"{plural(docs, 'document')}, {plural(entries, 'entry', 'entries')}: "
            f"{plural(len(report.errors), 'error')}, {plural(len(report.warnings), 'warning')}"
        )
        if report.unreadable:
            summary += f", {len(report.unreadable):,} unreadable"
        click.echo(summary, err=True)
    if report.unreadable:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if report.errors else EXIT_OK)


def _where(f: Finding) -> str:
    return f"{f.source}:{f.line}" if f.line else f.source


def _dt(value: datetime | None) -> str | None:
    return format_w3c(value) if value is not None else None


def document_json(doc: Document, source: str) -> dict[str, Any]:
    out: dict[str, Any] = {"source": source, "capability": doc.capability, "index": doc.index}
    for key, value in (
        ("at", doc.at),
        ("completed", doc.completed),
        ("from", doc.from_),
        ("until", doc.until),
    ):
        if value is not None:
            out[key] = format_w3c(value)
    out["links"] = [link_json(ln) for ln in doc.links]
    if doc.md_extra:
        out["extra"] = doc.md_extra
    return out


def resource_json(res: Resource) -> dict[str, Any]:
    out: dict[str, Any] = {"loc": res.loc}
    for key, value in (
        ("lastmod", _dt(res.lastmod)),
        ("changefreq", res.changefreq),
        ("priority", res.priority),
        ("change", res.change),
        ("datetime", _dt(res.datetime)),
        ("hashes", res.hashes or None),
        ("length", res.length),
        ("type", res.type),
        ("encoding", res.encoding),
        ("path", res.path),
        ("capability", res.capability),
        ("at", _dt(res.at)),
        ("completed", _dt(res.completed)),
        ("from", _dt(res.from_)),
        ("until", _dt(res.until)),
    ):
        if value is not None:
            out[key] = value
    if res.links:
        out["links"] = [link_json(ln) for ln in res.links]
    if res.md_extra:
        out["extra"] = res.md_extra
    if res.extensions:
        out["extensions"] = res.extensions
    return out


def _row(res: Resource) -> str:
    when = res.change_time or res.at or res.from_
    cols = [
        format_w3c(when) if when else "-",
        res.change or res.capability or "-",
        str(res.length) if res.length is not None else "-",
        format_hashes(res.hashes) if res.hashes else "-",
        res.loc,
    ]
    return "\t".join(cols)


@click.command()
@click.argument("target")
@click.option("--follow", is_flag=True, help="Also list the documents this links down to.")
@click.option("--json", "as_json", is_flag=True, help="JSON Lines: a document line, then entries.")
@reading_options
@handle_errors
def cat(
    target: str,
    follow: bool,
    as_json: bool,
    reading: Reading,
) -> None:
    """List the entries of a document (file or URL).

    On a terminal, a readable listing; in a pipe, tab-separated lines (time, change or
    capability, length, hashes, URI); with --json, JSON Lines.

    \b
    Example:
      resourcesync cat https://example.org/dataset1/changelist.xml
      resourcesync cat resourcelist.xml --json | jq -r .loc
    """
    tty = sys.stdout.isatty()
    with reading.client([target]) as client:
        for visit in walk(
            target,
            mode=FOLLOW_ALL if follow else FOLLOW_NONE,
            resolver=reading.resolver(),
            client=client,
            max_bytes=reading.max_bytes(),
            on_skip=lambda url, why, ref: click.echo(
                f"resourcesync: not followed: {url}: {why}", err=True
            ),
        ):
            doc = visit.reader.document
            if follow and doc.index and not as_json:
                continue  # the parts follow; their entries are the listing
            if as_json:
                emit_json({"document": document_json(doc, visit.name)})
                for _, res in visit.entries():
                    emit_json(resource_json(res))
                _show_warnings(visit.reader)
                continue
            if tty:
                # For people: a header, and IRIs as they read them (issue 14.16, 14.18); a
                # pipe and --json keep URIs as the document has them.
                console = _console()
                _print_header(console, doc, visit.name)
                console.print(
                    f"[bold]{'TIME':<27} {'CHANGE/CAPABILITY':<22} {'LENGTH':>10}  URI"
                    "  HASHES[/bold]"
                )
                for _, res in visit.entries():
                    when, change, length, hashes, loc = _row(res).split("\t")
                    console.print(
                        f"{when:<27} {change:<22} {length:>10}  {_escape(display_iri(loc))}"
                        + (f"  [dim]{_escape(hashes)}[/dim]" if hashes != "-" else "")
                    )
            else:
                out = sys.stdout
                for _, res in visit.entries():
                    out.write(_row(res) + "\n")
            _show_warnings(visit.reader)


def _show_warnings(reader: Any) -> None:
    """Rules the document bent that the reader read through, once each, on stderr."""
    for message in reader.warnings:
        click.echo(f"resourcesync: warning: {reader.name}: {message}", err=True)


def _print_header(console: Any, doc: Document, name: str) -> None:
    kind = f"{doc.capability or '?'}{' index' if doc.index else ''}"
    times = " ".join(
        f"{k}={format_w3c(v)}"
        for k, v in (
            ("at", doc.at),
            ("completed", doc.completed),
            ("from", doc.from_),
            ("until", doc.until),
        )
        if v is not None
    )
    console.print(f"[bold]{_escape(name)}[/bold]: {_escape(kind)} {times}")
    for ln in doc.links:
        console.print(f"  [dim]{_escape(ln.rel)}[/dim] {_escape(display_iri(ln.href))}")


__all__ = ["cat", "validate"]
