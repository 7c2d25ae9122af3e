"""What a Source publishes and where: resource sets, URLs, policies, and the tree's layout.

The layout of an output directory (OUTDIR), shared by `publish` (which writes it) and the
server (which serves it):

    OUTDIR/.well-known/resourcesync        the Source Description
    OUTDIR/<set>/capabilitylist.xml        one Capability List per resource set
    OUTDIR/<set>/resourcelist.xml          … and the set's other documents beside it
    OUTDIR/<set>/changelist.xml              (plus parts, archives, dump packages and manifests
    OUTDIR/<set>/…                           in sub-folders of OUTDIR/<set>/)
    OUTDIR/.resourcesync/                  state (SQLite) and `published.json`; never served

`published.json` (see `PUBLISHED_FILE`) is written last by every publication: the sets with their
resource directories and base URLs, every live document with its URL, times, size and entry
count, and the most recent changes. A server reads it to route requests and to describe the
Source; nothing else needs to parse our XML to know what was published.

Documents are published at `docs_url` (OUTDIR is served at that URL; by default the root of
the first set's base URL, so the Source Description is at `/.well-known/resourcesync`). The
resources of a set are published at its `base_url` (the set's directory is served there).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .. import units
from ..errors import ResourceSyncError
from ..hashing import ALGORITHMS
from ..iri import UrlUse, url_problem

__all__ = [
    "CAPABILITIES",
    "PUBLISHED_FILE",
    "STATE_DIR",
    "PublishConfig",
    "SetConfig",
    "load_config",
    "parse_duration",
    "parse_every",
    "parse_size",
]

STATE_DIR = ".resourcesync"
PUBLISHED_FILE = "published.json"
DESCRIPTION_PATH = ".well-known/resourcesync"
#: The capabilities `publish` can produce for a set (archives come with them).
CAPABILITIES = ("resourcelist", "changelist", "resourcedump", "changedump")
DEFAULT_CAPABILITIES = ("resourcelist", "changelist")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class ConfigError(ResourceSyncError):
    """A configuration value that cannot be used."""


def parse_size(text: str | int) -> int:
    """`50M`, `2G`, `1048576` → bytes (see `resourcesync.units`)."""
    try:
        return units.parse_size(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def parse_duration(text: str | int | float) -> float:
    """`90s`, `15m`, `6h`, `1d`, `2w`, `1h30m`, `3600` → seconds (see `resourcesync.units`)."""
    try:
        return units.parse_duration(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


#: By default a run writes a new Resource List (and Resource Dump) when the last one is a day
#: old or 10,000 changes behind, whichever comes first: a cron job every few minutes writes
#: the Change List and its notifications only (issue 15.3).
DEFAULT_RESOURCELIST_EVERY = "1d,10000-changes"


def parse_every(text: str) -> tuple[float | None, int | None]:
    """`1d`, `5000-changes`, `6h,5000-changes` (whichever comes first), `always` (every run
    that found changes) → (seconds or None, changes or None)."""
    seconds: float | None = None
    changes: int | None = None
    t = str(text).strip().lower()
    if t == "always":
        return None, 1
    for part in (x.strip() for x in t.split(",")):
        if part.endswith("-changes") or part.endswith("-change"):
            try:
                n = int(part.rpartition("-")[0])
            except ValueError:
                n = 0
            if n < 1:
                raise ConfigError(f"not a number of changes: {part!r} (e.g. 5000-changes)")
            changes = n if changes is None else min(changes, n)
        elif part:
            d = parse_duration(part)
            if d < 0:
                raise ConfigError(f"not a duration: {part!r}")
            seconds = d if seconds is None else min(seconds, d)
    if seconds is None and changes is None:
        raise ConfigError(f"not a policy: {text!r} (e.g. 1d, 5000-changes, 1d,5000-changes)")
    return seconds, changes


def site_root(url: str) -> str:
    """`https://example.org/data/x/` → `https://example.org/`."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/", "", ""))


def _slash(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def _http_url(url: str, what: str, *, use: UrlUse = "base") -> None:
    if (why := url_problem(url, use=use)) is not None:
        raise ConfigError(f"{what} {url!r} {why}")


@dataclass
class SetConfig:
    """One resource set: a directory published at a base URL, with its own Capability List."""

    name: str
    dir: Path
    base_url: str
    capabilities: tuple[str, ...] = DEFAULT_CAPABILITIES
    hashes: tuple[str, ...] = ("md5",)
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    describedby: str | None = None
    #: Publish hidden files and folders (names starting with a dot) too.
    hidden: bool = False
    #: Split a list into an index over parts past these limits (the Sitemap limits).
    max_entries: int = 50_000
    max_bytes: int = 50 * 1024 * 1024
    #: Close the open Change List after this many entries and/or this many seconds.
    changelist_max_entries: int = 10_000
    changelist_max_age: float | None = None
    #: Resource Dump packages hold at most this many bytes of resources each.
    package_size: int = 256 * 1024 * 1024
    #: When a run that found changes writes a new Resource List and Resource Dump (the Change
    #: Lists carry every change meanwhile): see `parse_every`.
    resourcelist_every: str = DEFAULT_RESOURCELIST_EVERY
    resourcelist_max_age: float | None = field(init=False, repr=False, default=None)
    resourcelist_max_changes: int | None = field(init=False, repr=False, default=None)
    #: Earlier Resource Lists kept in the Resource List Archive.
    keep_resourcelists: int = 5
    #: Earlier Resource Dumps kept in the Resource Dump Archive.
    keep_resourcedumps: int = 2
    #: Closed Change Lists kept (in the index, the archive and the state), the newest ones;
    #: None: every one. Never one that holds changes after the live Resource List's (or
    #: Resource Dump's) `at`, nor changes a notification or the Change Dump still needs.
    keep_changelists: int | None = None
    #: Closed Change Dumps kept (their packages with them), the newest; None: every one. Never
    #: one with changes after the live Resource Dump's (or Resource List's) `at`.
    keep_changedumps: int | None = None
    #: Change Dump packages listed in the live Change Dump before it is closed and archived.
    changedump_max_packages: int = 100
    #: A WebSub hub to send change notifications to (Change Notification 1.0.1).
    hub: str | None = None
    #: Sent to the hub as `Authorization: Bearer <token>` (a hub started with --token); never
    #: published.
    hub_token: str | None = field(default=None, repr=False)
    #: Also announce changes to the set's documents on its framework channel (Framework
    #: Notification 1.0.1), through the same hub.
    framework_notification: bool = False
    #: Changes per notification payload (larger batches are split in consecutive payloads).
    notification_max_entries: int = 1000
    #: A run that would publish more deletions than this publishes nothing (None: no limit).
    max_delete: int | None = None
    #: Publish the deletion of every resource when the directory holds none. Refused by
    #: default: a filesystem that is not mounted looks the same, and every Destination that
    #: follows the deletions would empty its copy.
    allow_empty: bool = False

    def __post_init__(self) -> None:
        # From Python a path may be a str and a list of names a list (issue 14.15).
        self.dir = Path(self.dir)
        for name in ("capabilities", "hashes", "include", "exclude"):
            value = getattr(self, name)
            if isinstance(value, str):
                value = (value,)
            setattr(self, name, tuple(value))
        if not _NAME.fullmatch(self.name):
            raise ConfigError(
                f"set name {self.name!r}: use letters, digits, '.', '_' or '-' "
                "(it becomes a folder and a URL path)"
            )
        _http_url(self.base_url, "base URL")
        self.base_url = _slash(self.base_url)
        unknown = set(self.capabilities) - set(CAPABILITIES)
        if unknown:
            raise ConfigError(
                f"unknown capabilities {', '.join(sorted(unknown))} "
                f"(choose from {', '.join(CAPABILITIES)})"
            )
        if not self.capabilities:
            raise ConfigError("no capabilities to publish")
        bad = set(self.hashes) - set(ALGORITHMS)
        if bad or not self.hashes:
            raise ConfigError(
                f"hash algorithms must be among {', '.join(ALGORITHMS)}, not {sorted(bad)}"
            )
        if self.max_entries < 1 or self.max_bytes < 4096:
            raise ConfigError("split limits are too small")
        self.resourcelist_max_age, self.resourcelist_max_changes = parse_every(
            self.resourcelist_every
        )
        for kept in ("keep_changelists", "keep_changedumps"):
            if (getattr(self, kept) or 0) < 0:
                raise ConfigError(f"{kept} must be 0 or more")
        if self.changelist_max_entries < 1:
            raise ConfigError("the change list rotation needs at least 1 entry")
        if self.package_size < 1024:
            raise ConfigError("the dump package size is too small")
        if self.hub is not None:
            _http_url(self.hub, "hub", use="published")


@dataclass
class PublishConfig:
    """A whole Source: its sets, where the documents go and at which URL they are served."""

    out: Path
    sets: list[SetConfig]
    docs_url: str = ""
    spec_version: str = "1.1"
    describedby: str | None = None
    fsync: bool = False
    state_dir: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        if self.state_dir is not None:
            self.state_dir = Path(self.state_dir)
        self.sets = list(self.sets)
        if not self.sets:
            raise ConfigError("no resource set to publish")
        names = [s.name for s in self.sets]
        if len(set(names)) != len(names):
            raise ConfigError(f"resource set names must differ: {names}")
        if self.docs_url:
            _http_url(self.docs_url, "docs URL")
        else:
            self.docs_url = site_root(self.sets[0].base_url)
        self.docs_url = _slash(self.docs_url)
        if self.spec_version not in ("1.0", "1.1"):
            raise ConfigError("spec version is 1.0 or 1.1")

    @property
    def state(self) -> Path:
        return self.state_dir or (self.out / STATE_DIR)

    def state_file(self, s: SetConfig | str) -> Path:
        """The state database of a set (`source/state.py`)."""
        return self.state / f"{s if isinstance(s, str) else s.name}.sqlite"

    def set_url(self, s: SetConfig) -> str:
        """Where the set's documents are published."""
        return f"{self.docs_url}{s.name}/"

    def topic_url(self, s: SetConfig) -> str:
        """The set's change notification channel (the WebSub topic)."""
        return f"{self.docs_url}{s.name}/change/"

    def framework_topic_url(self, s: SetConfig) -> str:
        """The set's framework notification channel (Framework Notification 1.0.1 §2, §5)."""
        return f"{self.docs_url}{s.name}/framework/"

    @property
    def description_url(self) -> str:
        return self.docs_url + DESCRIPTION_PATH


def load_config(path: str | Path) -> PublishConfig:
    """Read a `resourcesync.toml`:

        out = "public"                        # OUTDIR (relative to the file)
        docs_url = "https://example.org/"     # optional
        spec_version = "1.1"                  # optional
        describedby = "https://example.org/about.html"   # optional

        [[set]]
        name = "articles"
        dir = "data/articles"
        base_url = "https://example.org/articles/"
        capabilities = ["resourcelist", "changelist", "resourcedump"]
        hashes = ["md5", "sha-256"]
        exclude = ["*.tmp", ".git/*"]

    Every SetConfig field can be given in a set table, by its name or its command-line name
    (`max_size` for `max_bytes`; sizes as "50M", durations as "1d").
    """
    import tomllib  # with --config only

    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("no such file", source=str(p)) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a configuration file", source=str(p)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", source=str(p)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"not UTF-8 text: {exc.reason} at byte {exc.start}", source=str(p)
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", source=str(p)) from None
    here = p.parent
    try:
        sets = [_set_from(here, t) for t in data.get("set", [])]
        return PublishConfig(
            out=here / data.get("out", "public"),
            sets=sets,
            docs_url=data.get("docs_url", ""),
            spec_version=str(data.get("spec_version", "1.1")),
            describedby=data.get("describedby"),
            fsync=bool(data.get("fsync", False)),
        )
    except ConfigError as exc:
        raise ConfigError(exc.message, source=str(p)) from None
    except (TypeError, KeyError) as exc:
        raise ConfigError(f"bad configuration: {exc}", source=str(p)) from None


# The command-line names work in the file too.
_ALIASES = {"max_size": "max_bytes", "hash": "hashes", "max-size": "max_bytes"}
_SIZES = {"max_bytes", "package_size"}
_DURATIONS = {"changelist_max_age"}
_TUPLES = {"capabilities", "hashes", "include", "exclude"}


def _set_from(here: Path, table: dict[str, Any]) -> SetConfig:
    if "dir" not in table or "base_url" not in table:
        raise ConfigError("every [[set]] needs dir and base_url")
    values: dict[str, Any] = {}
    known = {n for n, f in SetConfig.__dataclass_fields__.items() if f.init}
    for key, value in table.items():
        key = _ALIASES.get(key, key).replace("-", "_")
        if key not in known:
            raise ConfigError(f"unknown set option {key!r}")
        if key in _SIZES:
            value = parse_size(value)
        elif key in _DURATIONS:
            value = parse_duration(value)
        elif key in _TUPLES:
            value = tuple(value)
        elif key == "dir":
            value = here / value
        values[key] = value
    values.setdefault("name", Path(values["dir"]).name)
    return SetConfig(**values)
