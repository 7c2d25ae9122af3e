"""What a fleet follows: one `Entry` per Source, read from the command line or from a TOML or
CSV list (so thousands can be registered at once), checked before anything is stored."""

from __future__ import annotations

import csv
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .. import units
from ..errors import ResourceSyncError
from ..iri import url_problem

__all__ = ["Entry", "FleetError", "parse_duration", "read_entries"]

#: A name is one path component: it names the copy's folder under the fleet's root.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
VIAS = ("auto", "lists", "dumps")
DEFAULT_EVERY = 3600.0
DEFAULT_LOOKBACK = 600.0
DEFAULT_HISTORY_GRACE = 3600.0
DEFAULT_RECONCILE = 7 * 86400.0


class FleetError(ResourceSyncError):
    """A fleet command could not do what it was asked: a bad entry, an unknown name, a store
    that cannot be opened."""


class StoreUnavailable(FleetError):
    """The fleet's database cannot be reached now (restarting, failing over, the network gone):
    what was asked may be asked again once it is back. The long-running parts (the scheduler,
    the workers, the subscriptions) wait and go on; a command says it and stops."""


def parse_duration(text: str) -> float:
    """Seconds in `text`: a number of seconds, or units like `90s`, `15m`, `6h`, `1d`, `1h30m`."""
    seconds = units.parse_duration(text)
    if seconds <= 0:
        raise ValueError(f"a duration must be positive, not {text!r}")
    return seconds


def parse_header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise ValueError(f"a header is 'Name: value', not {text!r}")
    return name.strip(), value.strip()


@dataclass(frozen=True)
class Entry:
    """One Source in the fleet: where it is, where its copy goes and how often it is synced."""

    name: str
    source: str
    #: The copy's folder; None: NAME under the fleet's root.
    dest: str | None = None
    every: float = DEFAULT_EVERY
    via: str = "auto"
    delete: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Subscribe to the Source's change notifications: a notification makes it due at once.
    follow: bool = False
    #: With `delete`: a sync that would delete more than this many files deletes none (they
    #: stay pending, the run is not ok) — as `sync --max-delete`. None: no limit.
    max_delete: int | None = None
    #: With `delete`: a sync may empty the copy when the Source lists nothing (by default it
    #: deletes none and is not ok) — as `sync --allow-empty`.
    allow_empty: bool = False
    #: Seconds behind the copy's cursor a sync looks at the changes listed there for one the
    #: copy lacks — as `sync --lookback`.
    lookback: float = DEFAULT_LOOKBACK
    #: Seconds the Source's Change Lists may end before the change its copy last read from
    #: them before that is a changed history (a Source restored from a backup) — as
    #: `sync --history-grace`.
    history_grace: float = DEFAULT_HISTORY_GRACE
    #: Seconds after its copy was last compared with a Resource List before a sync that finds
    #: a newer one compares the copy with it, as a baseline does (0: never) — as
    #: `sync --reconcile-every`.
    reconcile_every: float = DEFAULT_RECONCILE
    #: Let redirects, mirrors and the documents' links lead to loopback, private and link-local
    #: addresses the Source itself is not on — as `sync --any-address` (by default refused).
    any_address: bool = False

    def check(self) -> None:
        """Raise ValueError naming what is wrong with this entry."""
        if not NAME.match(self.name):
            raise ValueError(
                f"name {self.name!r}: use letters, digits, '.', '_' or '-' (it names a folder)"
            )
        try:
            parts = urlsplit(self.source)
        except ValueError as exc:  # "Invalid IPv6 URL"
            raise ValueError(
                f"{self.name}: source is not a valid URL ({exc}): {self.source!r}"
            ) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{self.name}: source must be an http(s) URL, not {self.source!r}")
        if (why := url_problem(self.source, use="fetched")) is not None:
            # White space, a control character, a port out of range.
            raise ValueError(f"{self.name}: source {why}: {self.source!r}")
        if self.via not in VIAS:
            raise ValueError(f"{self.name}: via must be one of {', '.join(VIAS)}")
        if self.every <= 0:
            raise ValueError(f"{self.name}: every must be positive")
        if self.max_delete is not None and self.max_delete < 0:
            raise ValueError(f"{self.name}: max_delete must be 0 or more")
        if self.lookback < 0:
            raise ValueError(f"{self.name}: lookback must be 0 or more")
        if self.history_grace < 0:
            raise ValueError(f"{self.name}: history_grace must be 0 or more")
        if self.reconcile_every < 0:
            raise ValueError(f"{self.name}: reconcile_every must be 0 or more")

    @property
    def host(self) -> str:
        """The host whose politeness budget this Source shares with its neighbours."""
        return (urlsplit(self.source).hostname or "").lower()

    def copy_dir(self, root: Path) -> Path:
        return Path(self.dest) if self.dest else root / self.name


def _flag(raw: Mapping[str, Any], key: str) -> bool:
    value = raw.get(key, False)
    if isinstance(value, str):
        if value.strip().lower() not in ("", "0", "1", "true", "false", "yes", "no"):
            raise ValueError(f"{key} must be true or false, not {value!r}")
        return value.strip().lower() in ("1", "true", "yes")
    return bool(value)


def _count(raw: Mapping[str, Any], key: str) -> int | None:
    value = raw.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"{key} must be a whole number, not {value!r}") from None


def _entry(raw: Mapping[str, Any]) -> Entry:
    known = {"name", "source", "dest", "every", "via", "delete", "follow", "headers", "header"}
    known |= {"max_delete", "allow_empty", "lookback", "history_grace", "any_address"}
    known |= {"reconcile_every"}
    unknown = set(raw) - known
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(sorted(unknown))}")
    for key in ("name", "source"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise ValueError(f"{key} is missing")
    headers: dict[str, str] = {}
    given = raw.get("headers", raw.get("header"))
    if isinstance(given, Mapping):
        headers = {str(k): str(v) for k, v in given.items()}
    elif isinstance(given, str) and given.strip():
        # CSV: several headers separated by ' | '
        headers = dict(parse_header(h) for h in given.split(" | "))
    elif isinstance(given, list):
        headers = dict(parse_header(str(h)) for h in given)
    every, lookback, grace = raw.get("every"), raw.get("lookback"), raw.get("history_grace")
    reconcile = raw.get("reconcile_every")
    entry = Entry(
        name=raw["name"].strip(),
        source=raw["source"].strip(),
        dest=(str(raw["dest"]).strip() or None) if raw.get("dest") else None,
        every=parse_duration(str(every)) if every not in (None, "") else DEFAULT_EVERY,
        via=str(raw.get("via") or "auto").strip(),
        delete=_flag(raw, "delete"),
        headers=headers,
        follow=_flag(raw, "follow"),
        max_delete=_count(raw, "max_delete"),
        allow_empty=_flag(raw, "allow_empty"),
        lookback=(
            units.parse_duration(str(lookback)) if lookback not in (None, "") else DEFAULT_LOOKBACK
        ),
        history_grace=(
            units.parse_duration(str(grace)) if grace not in (None, "") else DEFAULT_HISTORY_GRACE
        ),
        any_address=_flag(raw, "any_address"),
        reconcile_every=(
            units.parse_duration(str(reconcile))
            if reconcile not in (None, "")
            else DEFAULT_RECONCILE
        ),
    )
    entry.check()
    return entry


def read_entries(path: Path) -> Iterator[Entry]:
    """The entries of a TOML (`[[source]]` tables) or CSV (a header row naming the columns:
    name, source, and optionally dest, every, via, delete, max_delete, allow_empty, lookback,
    history_grace, reconcile_every, any_address, follow, header) file. Bad input raises a
    FleetError naming the file and line (CSV) or entry (TOML)."""
    try:
        if path.suffix.lower() == ".toml":
            with path.open("rb") as f:
                data = tomllib.load(f)
            items = data.get("source", [])
            if not isinstance(items, list):
                raise FleetError("expected [[source]] tables", source=str(path))
            for i, raw in enumerate(items, 1):
                try:
                    yield _entry(raw)
                except ValueError as exc:
                    raise FleetError(str(exc), source=str(path), entry=f"[[source]] #{i}") from None
            return
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if not reader.fieldnames or not {"name", "source"} <= set(reader.fieldnames):
                raise FleetError(
                    "the first row must name the columns (name,source,…)", source=str(path), line=1
                )
            for row in reader:
                try:
                    if None in row:
                        raise ValueError("more values than columns")
                    yield _entry({k: v for k, v in row.items() if v is not None})
                except ValueError as exc:
                    raise FleetError(str(exc), source=str(path), line=reader.line_num) from None
    except OSError as exc:
        raise FleetError(f"cannot read: {exc.strerror}", source=str(path)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, csv.Error) as exc:
        raise FleetError(f"not a valid list of Sources: {exc}", source=str(path)) from None
