"""`resourcesync ls DEST`: what a copy holds, from its state — each resource's URI, local path,
length, digests and the links its Source gave (issue 10.16)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click

from ..destination.audit import STATE_FILE
from ..destination.mirror import STATE_DIR_NAME
from ..destination.state import DestinationState, Known, time_kept
from ..iri import display_iri
from ..w3cdt import format_w3c
from ._common import EXIT_FINDINGS, emit_json, fail, handle_read_errors


def _line(k: Known, human: bool) -> str:
    uri = display_iri(k.uri) if human else k.uri
    links = " ".join(
        f"{ln['rel']}={display_iri(ln['href']) if human else ln['href']}" for ln in k.links
    )
    length = "" if k.length is None else str(k.length)
    return "\t".join((uri, k.path, length, links))


@click.command("ls")
@click.argument("dest", type=click.Path(path_type=Path, file_okay=False))
@click.argument("uris", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="JSON Lines: one object per resource.")
@handle_read_errors
def ls(dest: Path, uris: tuple[str, ...], as_json: bool) -> None:
    """What the copy in DEST holds, from its state: per resource its URI, local path (under
    DEST), length and the links its Source gave for it (`alternate`, `canonical`, `memento`,
    `patch`, `describedby`, `duplicate` …); only the URIs given, when some are.

    Tab-separated lines (URI, path, length, links as REL=HREF); IRIs shown decoded on a
    terminal. With --json, JSON Lines: {"uri", "path", "length", "hashes", "etag",
    "last_modified", "lastmod", "changed", "links": [{"rel", "href", …}]} (`lastmod`: the
    Source's for what is held; `changed`: the time of the latest change of it the copy
    applied, null when held from a Resource List or a dump). Exit 1 when a URI given is not
    held.

    \b
    Example:
      resourcesync ls ./copy --json | jq 'select(.links != [])'
    """
    state_path = dest / STATE_DIR_NAME / STATE_FILE
    if not state_path.is_file():
        fail(
            f"{dest}: no copy's state here ({STATE_DIR_NAME}/{STATE_FILE}): not a copy made by "
            "`resourcesync sync` (a cluster keeps its copies' state in the fleet's database)"
        )
    human = sys.stdout.isatty() and not as_json
    missing = 0
    with DestinationState.reading(state_path) as state:
        pairs: Iterator[tuple[str, Known | None]] = (
            ((u, state.known(u)) for u in uris) if uris else ((k.uri, k) for k in state.all_known())
        )
        for uri, known in pairs:
            if known is None:
                missing += 1
                click.echo(f"resourcesync: not held in {dest}: {uri}", err=True)
                continue
            if as_json:
                emit_json(
                    {
                        "uri": known.uri,
                        "path": known.path,
                        "length": known.length,
                        "hashes": known.hashes,
                        "etag": known.etag,
                        "last_modified": known.last_modified,
                        "lastmod": known.lastmod,
                        "changed": _changed(known.changed),
                        "links": known.links,
                    }
                )
            else:
                click.echo(_line(known, human))
    if missing:
        sys.exit(EXIT_FINDINGS)


def _changed(text: str | None) -> str | None:
    """When the copy recorded the resource's change, as W3C; a value the state holds that
    cannot be read is shown as it is (`ls` shows the state, it does not mend it)."""
    when = time_kept(text)
    return format_w3c(when) if when is not None else text or None
