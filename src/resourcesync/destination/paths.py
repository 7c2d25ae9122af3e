"""Where a URI lands in a Destination's tree, from the URI alone (the rules of `mirror`'s
docstring): the mapping, without a look at the disk. Only `Mirror` uses it: what lies on the
disk on the way (a symlink out of the tree, a file where a directory is needed) is the
Mirror's to check, at every write.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

from ..errors import ResourceSyncError

__all__ = [
    "INDEX_NAME",
    "MAX_NAME_BYTES",
    "MAX_PATH_BYTES",
    "STATE_DIR_NAME",
    "TEMP_OVERHEAD",
    "TEMP_RE",
    "Mapping",
    "Root",
    "Unmapped",
    "UnsafePath",
    "UriMap",
    "is_within",
]

#: The directory under DEST that holds the Destination's state; nothing is mapped into it.
STATE_DIR_NAME = ".resourcesync"
#: The file name a URI ending in "/" maps to.
INDEX_NAME = "index.html"
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4096

_DEFAULT_PORTS = {"http": 80, "https": 443}
_PCT = re.compile(rb"%([0-9A-Fa-f]{2})")
# Our temporary files: "." + name + "." + 8 random hex digits + ".part".
TEMP_RE = re.compile(r"\..+\.[0-9a-f]{8}\.part\Z", re.DOTALL)
TEMP_OVERHEAD = len("..12345678.part")
#: A last path segment the mapping takes as it is (nothing to decode, resolve or refuse but
#: its length and the temporary-file pattern): ASCII, no control character, backslash, "%",
#: "?" or "#".
_PLAIN_NAME = re.compile(r"[\x20-\x22\x24\x26-\x3e\x40-\x5b\x5d-\x7e]+\Z")
#: Directories whose mapping is remembered (`UriMap._map_unchecked`); the memo is dropped
#: when full, so memory does not grow with the size of the tree.
_MAPPED_DIRS_MAX = 1 << 16


class UnsafePath(ResourceSyncError):
    """A URI (or ZIP member) that cannot be mapped to a local path safely; the message says why."""


class Unmapped(UnsafePath):
    """A URI no mapping covers: on another host, or outside the part of the site mapped.
    `hint` is the `--map` that would take it."""

    def __init__(self, message: str, *, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True, slots=True)
class Mapping:
    """URIs starting with `prefix` land under `directory`.

    The prefix is normalized: scheme and host lower-cased, a default port dropped, a trailing
    "/" added. A relative `directory` is taken relative to the Mirror's DEST.
    """

    prefix: str
    directory: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefix", _normalize_prefix(self.prefix))
        object.__setattr__(self, "directory", Path(self.directory))


@dataclass(frozen=True, slots=True)
class Root:
    """A mapping as the tree sees it: its URI key (scheme, host, port) and decoded path
    segments, and its directory (absolute, lexical; `text` as a string)."""

    mapping: Mapping
    key: tuple[str, str, int]
    segments: tuple[str, ...]
    directory: Path  # absolute, lexical
    inside_dest: bool
    text: str = ""  # str(directory)

    def __post_init__(self) -> None:
        if not self.text:
            object.__setattr__(self, "text", str(self.directory))


def _normalize_prefix(prefix: str) -> str:
    problem = _bad_chars(prefix, controls_only=True)
    if problem:
        raise ResourceSyncError(f"mapping prefix {problem}", source=prefix)
    try:
        parts = urlsplit(prefix)
        port = parts.port
    except ValueError as exc:
        raise ResourceSyncError(f"mapping prefix is not a URI: {exc}", source=prefix) from None
    if parts.scheme.lower() not in _DEFAULT_PORTS or not parts.hostname:
        raise ResourceSyncError("mapping prefix must be an absolute http(s) URI", source=prefix)
    if "@" in parts.netloc or parts.query or parts.fragment or "?" in prefix or "#" in prefix:
        raise ResourceSyncError(
            "mapping prefix must not have userinfo, a query or a fragment", source=prefix
        )
    scheme = parts.scheme.lower()
    host = parts.hostname
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc += f":{port}"
    path = parts.path or "/"
    if not path.endswith("/"):
        path += "/"
    try:
        segments = _decode_segments(path[1:-1].split("/")) if path != "/" else []
    except UnsafePath as exc:
        raise ResourceSyncError(f"mapping prefix: {exc.message}", source=prefix) from None
    for seg in segments:
        if seg in ("", ".", ".."):
            raise ResourceSyncError(
                "mapping prefix path must not have empty, '.' or '..' segments", source=prefix
            )
    return f"{scheme}://{netloc}{path}"


def _authority(parts: SplitResult) -> tuple[str, str, int]:
    """(scheme, host, port) with the default port filled in; raises ValueError on a bad port."""
    scheme = parts.scheme.lower()
    port = parts.port
    return scheme, parts.hostname or "", port if port is not None else _DEFAULT_PORTS[scheme]


_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")
_CONTROLS_OR_BACKSLASH = re.compile("[\x00-\x1f\x7f-\x9f\\\\]")


def _bad_chars(text: str, *, controls_only: bool = False) -> str | None:
    """Why `text` cannot be (part of) a file name, or None."""
    found = (_CONTROLS if controls_only else _CONTROLS_OR_BACKSLASH).search(text)
    if found is None:
        return None
    ch = found.group()
    if ch == "\0":
        return "contains NUL"
    if ch == "\\":
        return "contains a backslash"
    return f"contains the control character {ch!r}"


def _decode_segments(raw_segments: Iterable[str]) -> list[str]:
    """Percent-decode each segment once (UTF-8, strict)."""
    out = []
    for raw in raw_segments:
        if "%" not in raw and raw.isascii():
            out.append(raw)  # nothing to decode
            continue
        try:
            data = raw.encode("utf-8")
        except UnicodeEncodeError:
            raise UnsafePath(f"segment {raw!r} is not valid Unicode") from None
        decoded = _PCT.sub(lambda m: bytes([int(m.group(1), 16)]), data)
        if b"%" in _PCT.sub(b"", data):
            raise UnsafePath(f"segment {raw!r} has a '%' that is not a percent-encoding")
        try:
            out.append(decoded.decode("utf-8"))
        except UnicodeDecodeError:
            raise UnsafePath(f"segment {raw!r} does not decode as UTF-8") from None
    return out


def is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class UriMap:
    """The mappings of a tree (`dest`, its state directory `state_dir`): where a URI lands.
    When several mappings have the same prefix, the last one given wins; a relative mapping
    directory is relative to `dest`."""

    def __init__(self, dest: Path, mappings: Sequence[Mapping], state_dir: Path) -> None:
        self._state_str = str(state_dir)
        self._state_prefix = self._state_str.rstrip(os.sep) + os.sep
        #: URI up to its last "/" -> (root, local directory, bytes of its path below the root
        #: plus one): the part of the mapping that is the same for every name in a directory.
        self._mapped_dirs: dict[str, tuple[Root, str, int]] = {}
        by_prefix: dict[str, Root] = {}
        for mapping in mappings:
            directory = Path(os.path.abspath(dest / mapping.directory))
            if is_within(str(directory), str(state_dir)):
                raise ResourceSyncError(
                    f"mapping directory {directory} lies in the state directory {state_dir}",
                    source=mapping.prefix,
                )
            parts = urlsplit(mapping.prefix)
            path = parts.path
            segments = tuple(_decode_segments(path[1:-1].split("/"))) if path != "/" else ()
            by_prefix[mapping.prefix] = Root(
                mapping=mapping,
                key=_authority(parts),
                segments=segments,
                directory=directory,
                inside_dest=is_within(str(directory), str(dest)),
            )
        #: Longest first: the first root that matches is the longest prefix.
        self.roots = sorted(by_prefix.values(), key=lambda r: len(r.segments), reverse=True)

    @property
    def mappings(self) -> list[Mapping]:
        return [r.mapping for r in self.roots]

    def map(self, uri: str) -> tuple[str, Root]:
        """Where `uri` maps (the rules of `mirror`'s docstring), from the URI alone."""
        try:
            return self._map_unchecked(uri)
        except UnsafePath as exc:
            if exc.source is None:
                exc.source = uri
            raise

    def _map_unchecked(self, uri: str) -> tuple[str, Root]:
        # The hot path of every sync (twice a resource): a URI in a directory mapped before
        # whose last segment is plain costs the checks that depend on that segment only.
        head, _, name = uri.rpartition("/")
        known = self._mapped_dirs.get(head)
        plain = _PLAIN_NAME.match(name) is not None and name not in (".", "..")
        if known is None or not plain:
            path, root = self._map_uri(uri)
            if plain and "?" not in head and "#" not in head:
                text = path
                if len(self._mapped_dirs) >= _MAPPED_DIRS_MAX:
                    self._mapped_dirs.clear()
                below = text[1:] if root.text == "/" else text[len(root.text) + 1 :]
                rel = len(below.encode("utf-8")) - len(name)
                self._mapped_dirs[head] = (root, text[: -len(name) - 1], rel)
            return path, root
        root, directory, rel = known
        # The directory's segments were checked when it was mapped; the name's length here
        # (ASCII: a character a byte), the rest as `_map_uri` checks it.
        if len(name) > MAX_NAME_BYTES:
            raise UnsafePath(f"a name is longer than {MAX_NAME_BYTES} bytes: {name[:40]!r}…")
        return self._tail(name, rel + len(name), f"{directory}/{name}"), root

    def _map_uri(self, uri: str) -> tuple[str, Root]:
        """The mapping of the module docstring, from the URI alone."""
        problem = _bad_chars(uri, controls_only=True)
        if problem:
            raise UnsafePath(f"URI {problem}")
        try:
            parts = urlsplit(uri)
            key = _authority(parts) if parts.scheme.lower() in _DEFAULT_PORTS else None
        except ValueError as exc:
            raise UnsafePath(f"not a valid URI: {exc}") from None
        if "@" in parts.netloc:
            raise UnsafePath("URI has userinfo (user@host); refused")
        uri_path = parts.path or "/"
        if key is None or not uri_path.startswith("/"):
            raise Unmapped("no mapping covers this URI (not an http(s) URI)", hint="")
        raw = uri_path.split("/")[1:]
        decoded = _decode_segments(raw)
        for root in self.roots:
            n = len(root.segments)
            if root.key == key and len(decoded) > n and tuple(decoded[:n]) == root.segments:
                break
        else:
            raise self._unmapped(parts, key)

        rest, raw_rest = decoded[n:], raw[n:]
        if rest[-1] == "":
            rest[-1] = INDEX_NAME
        # One search over the whole path for the characters no name may hold; the segment
        # that holds one is looked for only then.
        check_chars = _CONTROLS_OR_BACKSLASH.search("".join(rest)) is not None
        for i, (seg, raw_seg) in enumerate(zip(rest, raw_rest, strict=True)):
            if seg == "":
                what = "a leading" if i == 0 else "an"
                raise UnsafePath(f"{what} empty path segment (//)")
            if seg in (".", ".."):
                raise UnsafePath(f"path segment {raw_seg!r} is {seg!r}")
            if "/" in seg:
                raise UnsafePath(f"path segment {raw_seg!r} decodes to a name with '/'")
            bad = _bad_chars(seg) if check_chars else None
            if bad:
                raise UnsafePath(f"path segment {raw_seg!r} {bad}")
        if parts.query:
            if "\\" in parts.query:
                raise UnsafePath("query contains a backslash")
            rest[-1] += "?" + parts.query.replace("/", "%2F")
        for seg in rest:
            # A character is at most 4 bytes in UTF-8: short names need no encoding to tell.
            if len(seg) * 4 > MAX_NAME_BYTES and len(seg.encode("utf-8")) > MAX_NAME_BYTES:
                raise UnsafePath(f"a name is longer than {MAX_NAME_BYTES} bytes: {seg[:40]!r}…")
        joined = "/".join(rest)
        # One string, parsed once (no segment is empty, "." or "..", nor holds a "/").
        text = f"{root.text}/{joined}" if root.text != "/" else f"/{joined}"
        return self._tail(rest[-1], len(joined.encode("utf-8")), text), root

    def _tail(self, name: str, below: int, text: str) -> str:
        """The checks of a mapping that depend on its last segment `name`, once every segment
        is known to be a sane name: the temporary-file pattern, the length below the root
        (`below` bytes) and in all, the state directory. `text`: the local path."""
        if TEMP_RE.match(name):
            raise UnsafePath(f"name {name!r} looks like a temporary file of ours")
        if below > MAX_PATH_BYTES:
            raise UnsafePath(f"path is longer than {MAX_PATH_BYTES} bytes")
        if len(os.fsencode(text)) + TEMP_OVERHEAD >= MAX_PATH_BYTES:
            raise UnsafePath("local path would be too long for the file system")
        if text.startswith(self._state_prefix) or text == self._state_str:
            raise UnsafePath(f"would land in the state directory {STATE_DIR_NAME}")
        return text

    def _unmapped(self, parts: SplitResult, key: tuple[str, str, int]) -> Unmapped:
        """Why no mapping covers a URI, and the --map that would take it."""
        site = f"{parts.scheme}://{parts.netloc}/"
        covered = [r.mapping.prefix for r in self.roots]
        if not covered:
            why = "no mapping covers this URI"
        elif all(r.key != key for r in self.roots):
            hosts = sorted({urlsplit(p).netloc for p in covered})
            why = f"no mapping covers this URI: it is on {parts.netloc}, not on {', '.join(hosts)}"
        else:
            why = "no mapping covers this URI: it is outside " + ", ".join(
                p for p in covered if urlsplit(p).netloc == parts.netloc
            )
        return Unmapped(why, hint=f"--map {site}=DIR")
