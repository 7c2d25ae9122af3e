"""What an antenna writes after each round (`antenna.Antenna`; its module docstring, step 5):
into `out_dir`, atomically, `antenna.lirs.gz` (its own records and the relayed ones, newest
first), `resourcelist.xml` and `changelist.xml` (with a base URL, a Capability List and a Source
Description too: the antenna is a small ResourceSync Source) and `index.html`.
"""

from __future__ import annotations

import html
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from ..atomic import AtomicFile
from ..model import Capability, Document, Link, Resource
from ..sitemap import write_document
from ..w3cdt import format_w3c
from .codec import LirsWriter, Record
from .convert import LIRS_NS, record_to_resource
from .merge import RecordTable

if TYPE_CHECKING:
    from .antenna import AntennaConfig

__all__ = [
    "CAPABILITYLIST_FILE",
    "CHANGELIST_FILE",
    "HTML_FILE",
    "HTML_ROWS",
    "LIRS_FILE",
    "RESOURCELIST_FILE",
    "AntennaOutput",
]

LIRS_FILE = "antenna.lirs.gz"
RESOURCELIST_FILE = "resourcelist.xml"
CHANGELIST_FILE = "changelist.xml"
CAPABILITYLIST_FILE = "capabilitylist.xml"
HTML_FILE = "index.html"
#: Rows on the HTML page; the LIRS file has them all.
HTML_ROWS = 2000


class AntennaOutput:
    """The outputs of one antenna (`config`), from its state (`db`), into `out`."""

    def __init__(self, config: AntennaConfig, db: sqlite3.Connection, out: Path) -> None:
        self.config = config
        self.db = db
        self.out = out

    def _relayed(self, cutoff: int) -> Iterator[Iterator[Record]]:
        from .codec import split_fields

        for feed in self.config.relays:
            cursor = self.db.execute(
                "SELECT lm, ld, tz, cl, url, title, author, source, ext FROM relayed "
                "WHERE feed = ? AND ld >= ? ORDER BY seq",
                (feed, cutoff),
            )
            yield (
                Record(lm, ld, tz, cl, url, title, author, source, tuple(split_fields(ext)[:-1]))
                for lm, ld, tz, cl, url, title, author, source, ext in cursor
            )

    def _own_records(self) -> Iterator[Record]:
        config = self.config
        source = config.base_url.rstrip("/") + "/" + LIRS_FILE if config.base_url else ""
        for url, title, page_title, lm, ld, cl in self.db.execute(
            "SELECT url, title, page_title, last_modified, last_detected, content_length "
            "FROM sites ORDER BY key"
        ).fetchall():
            shown = title or page_title
            if ld == 0:
                yield Record(0, 0, config.tz_offset, 0, url, shown, "", source)
            else:
                yield Record(lm, ld, config.tz_offset, cl, url, shown, "", source)

    def write(self, now: int) -> tuple[int, int]:
        """Every output of a round at `now`; (records relayed, records in the LIRS file)."""
        config = self.config
        out = self.out
        relayed = 0
        with RecordTable() as table:
            table.add_feed(self._own_records())
            own = table.count()
            for feed in self._relayed(now - config.expires):
                relayed += table.add_feed(feed)
            with LirsWriter(out / LIRS_FILE) as writer:
                writer.write_all(table.records(order="newest"))
            self._write_html(table, own, now)
            written = writer.stats.records
        at = datetime.fromtimestamp(now, UTC)
        ns = {"lirs": LIRS_NS}
        up = self._write_capabilities()
        resources = (
            record_to_resource(r, Capability.RESOURCELIST)
            for r in self._own_records()
            if r.last_modified > 0
        )
        write_document(
            out / RESOURCELIST_FILE,
            Document(capability=Capability.RESOURCELIST, at=at, namespaces=ns, links=up),
            resources,
        )
        first_run = int(
            self.db.execute("SELECT value FROM meta WHERE key = 'first_run'").fetchone()[0]
        )
        start = datetime.fromtimestamp(max(first_run, now - config.history), UTC)
        write_document(
            out / CHANGELIST_FILE,
            Document(
                capability=Capability.CHANGELIST, from_=start, until=at, namespaces=ns, links=up
            ),
            self._changes(),
        )
        return relayed, written

    def _write_capabilities(self) -> list[Link]:
        """With a base URL, the antenna is a small ResourceSync Source: a Capability List for
        its two lists and a Source Description (OUT/.well-known/resourcesync, found there when
        OUT is the site root). Returns the `up` link for the lists."""
        if not self.config.base_url:
            return []
        base = self.config.base_url.rstrip("/") + "/"
        description = base + ".well-known/resourcesync"
        capabilitylist = base + CAPABILITYLIST_FILE
        write_document(
            self.out / CAPABILITYLIST_FILE,
            Document(
                capability=Capability.CAPABILITYLIST, links=[Link(rel="up", href=description)]
            ),
            [
                Resource(loc=base + RESOURCELIST_FILE, capability=Capability.RESOURCELIST),
                Resource(loc=base + CHANGELIST_FILE, capability=Capability.CHANGELIST),
            ],
        )
        write_document(
            self.out / ".well-known" / "resourcesync",
            Document(capability=Capability.DESCRIPTION),
            [Resource(loc=capabilitylist, capability=Capability.CAPABILITYLIST)],
        )
        return [Link(rel="up", href=capabilitylist)]

    def _changes(self) -> Iterator[Resource]:
        titles = dict(
            self.db.execute(
                "SELECT url, CASE WHEN title != '' THEN title ELSE page_title END FROM sites"
            ).fetchall()
        )
        for url, change, at, lm in self.db.execute(
            "SELECT url, change, at, last_modified FROM changes ORDER BY at, id"
        ).fetchall():
            md = {f"{{{LIRS_NS}}}title": titles[url]} if titles.get(url) else {}
            yield Resource(
                loc=url,
                change=change,
                datetime=datetime.fromtimestamp(at, UTC),
                lastmod=datetime.fromtimestamp(lm, UTC) if lm else None,
                md_extra=md,
            )

    def _write_html(self, table: RecordTable, own: int, now: int) -> None:
        rows = []
        for n, r in enumerate(table.records(order="newest")):
            if n >= HTML_ROWS:
                break
            rows.append(_html_row(r, self.config.base_url))
        generated = format_w3c(datetime.fromtimestamp(now, UTC))
        page = _HTML.format(
            generated=html.escape(generated),
            count=own,
            rows="\n".join(rows),
        )
        _atomic_write(self.out / HTML_FILE, page.encode("utf-8"))


def _local_time(seconds: int, tz: int) -> str:
    zone = timezone(timedelta(seconds=tz))
    when = datetime.fromtimestamp(seconds, zone)
    return (
        when.strftime("%Y-%m-%d %H:%M ") + when.strftime("%z")[:3] + ":" + when.strftime("%z")[3:]
    )


def _html_row(r: Record, base_url: str) -> str:
    if r.is_error:
        updated = "error"
    elif r.last_modified == 0:
        updated = "-"
    else:
        updated = _local_time(r.last_modified, r.tz_offset)
    title = r.title if r.title and r.title != "0" else r.url
    href = r.url if r.url.lower().startswith(("http://", "https://")) else "#"
    ours = not r.source_url or (base_url and r.source_url.startswith(base_url))
    via = "" if ours else html.escape(r.source_url)
    return (
        f'<tr><td class="t">{html.escape(updated)}</td>'
        f'<td><a href="{html.escape(href, quote=True)}">{html.escape(title)}</a></td>'
        f"<td>{via}</td></tr>"
    )


_HTML = """<!DOCTYPE html>
<html lang="ja">
<head>
<meta charset="utf-8">
<title>antenna</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }}
td {{ padding: 0.2em 0.6em; }} td.t {{ white-space: nowrap; font-family: monospace; }}
</style>
</head>
<body>
<h1>antenna</h1>
<p>{count} sites checked here; updated {generated}.
<a href="antenna.lirs.gz">LIRS</a> · <a href="resourcelist.xml">Resource List</a> ·
<a href="changelist.xml">Change List</a></p>
<table>
<thead><tr><th>updated</th><th>site</th><th>via</th></tr></thead>
<tbody>
{rows}
</tbody>
</table>
</body>
</html>
"""


def _atomic_write(path: Path, data: bytes) -> None:
    with AtomicFile(path, fsync=True, keep_same=True) as f:
        f.write(data)
