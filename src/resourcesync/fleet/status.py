"""What an operator looks at every morning: per Source its last run and result, counts, cursor,
lag, next run, consecutive failures and last error; and the totals. As JSON (streamed, one
Source at a time), a rich table, or an HTML page."""

from __future__ import annotations

import html
import io
import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

from ..w3cdt import format_w3c
from .job import COUNTS
from .store import Row

__all__ = ["Totals", "age", "entry_status", "rows_html", "serve_status", "write_json"]


def _when(t: float | None) -> str | None:
    return None if t is None else format_w3c(datetime.fromtimestamp(t, UTC))


def entry_status(row: Row, now: float) -> dict[str, Any]:
    """One Source's status. `lag` is how far the copy may be behind the Source: the seconds
    since the start of its last successful sync (None: never in step)."""
    out: dict[str, Any] = {
        "name": row.name,
        "source": row.entry.source,
        "host": row.entry.host,
        # A Source whose registration cannot be read is failing, whatever its last run was.
        "ok": False if row.damaged is not None else row.ok,
        "mode": row.mode,
        "last_run": _when(row.last_run),
        "seconds": None if row.seconds is None else round(row.seconds, 3),
        "next_run": _when(row.next_run),
        "due": row.next_run <= now,
        "failures": row.failures,
        # On a cluster: when its task was queued, until a worker reports back.
        "queued": _when(row.queued),
        "error": row.damaged or row.error,
        "cursor": row.cursor,
        "last_ok": _when(row.last_ok),
        "lag": None if row.last_ok is None else round(max(now - row.last_ok, 0.0), 1),
        "every": row.entry.every,
    }
    # A value the store holds that cannot be read is unknown (None), not the stand-in the row
    # carries for it (a next run in 1970, an interval of 0).
    for key in ("every", "failures", "next_run"):
        if key in row.unreadable:
            out[key] = None
    for k in COUNTS:
        out[k] = int(row.counts.get(k, 0))
    return out


@dataclass
class Totals:
    sources: int = 0
    ok: int = 0
    failing: int = 0
    never_run: int = 0
    due: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))

    def add(self, s: dict[str, Any]) -> None:
        self.sources += 1
        if s["ok"] is None:
            self.never_run += 1
        elif s["ok"]:
            self.ok += 1
        else:
            self.failing += 1
        self.due += bool(s["due"])
        for k in COUNTS:
            self.counts[k] += s[k]

    def to_json(self) -> dict[str, Any]:
        return {
            "total": self.sources,
            "ok": self.ok,
            "failing": self.failing,
            "never_run": self.never_run,
            "due": self.due,
            **self.counts,
        }


def write_json(rows: Iterable[Row], now: float, out: IO[str]) -> Totals:
    """`{"sources": [...], "total": N, "ok": N, "failing": N, …}`, one Source at a time."""
    totals = Totals()
    out.write('{"sources": [')
    for i, row in enumerate(rows):
        s = entry_status(row, now)
        totals.add(s)
        out.write(("," if i else "") + "\n" + json.dumps(s, ensure_ascii=False))
    rest = json.dumps(totals.to_json(), ensure_ascii=False)[1:]
    out.write("\n], " + rest + "\n")
    return totals


def age(seconds: float | None) -> str:
    """A short human duration: 45s, 12m, 3h, 2d."""
    if seconds is None:
        return "-"
    s = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.0f}{unit}"
    return f"{s:.0f}s"


def when_next(s: dict[str, Any], next_run: float, now: float) -> str:
    return "due" if s["due"] else "in " + age(next_run - now)


def _result(s: dict[str, Any]) -> str:
    if s["ok"] is None:
        return "never run"
    return "ok" if s["ok"] else "FAILED"


def rows_html(rows: Iterable[Row], now: float) -> Iterator[str]:
    totals = Totals()
    yield (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<title>resourcesync fleet status</title><style>"
        "body{font-family:system-ui,sans-serif;margin:1.5rem}"
        "table{border-collapse:collapse;font-size:.9rem}"
        "th,td{padding:.25rem .6rem;border-bottom:1px solid #ddd;text-align:left}"
        "td.n{text-align:right}tr.failed td{background:#fde8e8}tr.never td{color:#777}"
        "</style></head><body><h1>Fleet status</h1>"
        f"<p>As of {html.escape(_when(now) or '')}.</p><table><thead><tr>"
        "<th>Name</th><th>Source</th><th>Result</th><th>Last run</th><th>Lag</th>"
        "<th>Fetched</th><th>Deleted</th><th>Failed</th><th>Next run</th>"
        "<th>Failures</th><th>Last error</th></tr></thead><tbody>"
    )
    for row in rows:
        s = entry_status(row, now)
        totals.add(s)
        css = {"never run": "never", "FAILED": "failed"}.get(_result(s), "ok")
        cells = [
            html.escape(s["name"]),
            f"<a href='{html.escape(s['source'], quote=True)}'>{html.escape(s['source'])}</a>",
            _result(s),
            html.escape(s["last_run"] or "-"),
            age(s["lag"]),
            str(s["fetched"]),
            str(s["deleted"]),
            str(s["failed"]),
            html.escape(when_next(s, row.next_run, now)),
            "?" if s["failures"] is None else str(s["failures"]),
            html.escape(s["error"] or ""),
        ]
        yield f"<tr class='{css}'>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
    t = totals
    yield (
        f"</tbody></table><p>{t.sources} Sources: {t.ok} ok, {t.failing} failing, "
        f"{t.never_run} never run, {t.due} due.</p></body></html>\n"
    )


def serve_status(
    root: Path, db: str | None, port: int, host: str = "127.0.0.1"
) -> ThreadingHTTPServer:
    """Serve the status page (`/`) and its JSON (`/status.json`) from a thread; each request
    reads the store afresh through its own connection (503, with the reason, while it cannot be
    read: PostgreSQL restarting). Call `shutdown()` to stop."""
    from .registry import FleetError
    from .store import open_store

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path not in ("/", "/status.json"):
                self.send_error(404)
                return
            now = time.time()
            try:
                store = open_store(root, db)
                try:
                    if path == "/":
                        body = "".join(rows_html(store.rows(), now)).encode()
                        kind = "text/html; charset=utf-8"
                    else:
                        out = io.StringIO()
                        write_json(store.rows(), now, out)
                        body, kind = out.getvalue().encode(), "application/json"
                finally:
                    store.close()
            except FleetError as exc:
                body = f"the fleet's store cannot be read now: {exc}\n".encode()
                self.send_response(503)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Retry-After", "10")
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # an operator's page views are not the fleet's log

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True, name="status").start()
    return server
