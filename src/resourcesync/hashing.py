"""Streaming digests and the spec's hash tokens (`md5:…`, `sha-1:…`, `sha-256:…`).

The `hash` attribute holds one or more space-separated `algorithm:value` tokens, hex-encoded
digests (core §7). The spec's examples are md5 and sha-256; the tokens are the IANA Hash
Function Textual Names, and we compute every one of them hashlib always has: md5, sha-1,
sha-224, sha-256, sha-384, sha-512 (`ALGORITHMS`). Other algorithm tokens are kept as read
(`parse_hashes`, the reader); `checkable` gives the digests a copy is verified against.

Ground floor: imports nothing of ours.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

__all__ = [
    "ALGORITHMS",
    "HEX_DIGEST",
    "HEX_LENGTH",
    "PLAIN_DIGEST",
    "MultiHasher",
    "check_hash_value",
    "checkable",
    "format_hashes",
    "hash_file",
    "hash_stream",
    "parse_hashes",
    "plain_digest",
]

#: Spec token → hashlib name: the IANA Hash Function Textual Names hashlib always provides.
ALGORITHMS: dict[str, str] = {
    "md5": "md5",
    "sha-1": "sha1",
    "sha-224": "sha224",
    "sha-256": "sha256",
    "sha-384": "sha384",
    "sha-512": "sha512",
}
#: The hex digits of each algorithm's digest.
HEX_LENGTH = {"md5": 32, "sha-1": 40, "sha-224": 56, "sha-256": 64, "sha-384": 96, "sha-512": 128}
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_HEX = re.compile(r"[0-9a-fA-F]+")
#: A digest of each algorithm as hex (of either case) of its length exactly.
HEX_DIGEST = {algo: re.compile(f"[0-9a-fA-F]{{{n}}}") for algo, n in HEX_LENGTH.items()}
_B64 = re.compile(r"[A-Za-z0-9+/_-]+")
CHUNK = 1 << 20


@functools.cache
def _constructors() -> dict[str, Callable[[], Any]]:
    """hashlib's named constructors, loaded on first use: a command that only reads hash
    tokens (`validate`) does not load OpenSSL's digests."""
    import hashlib

    return {
        "md5": hashlib.md5,
        "sha1": hashlib.sha1,
        "sha224": hashlib.sha224,
        "sha256": hashlib.sha256,
        "sha384": hashlib.sha384,
        "sha512": hashlib.sha512,
    }


class MultiHasher:
    """Feed bytes once, get every requested digest."""

    def __init__(self, algorithms: Iterable[str] = ("md5",)) -> None:
        self._hashers = {}
        for algo in algorithms:
            name = ALGORITHMS.get(algo)
            if name is None:
                raise ValueError(
                    f"unsupported hash algorithm {algo!r} (use one of {', '.join(ALGORITHMS)})"
                )
            # The named constructors: hashlib.new() looks the algorithm up each time, which
            # costs more than hashing a small resource.
            make = _constructors().get(name)
            if make is None:
                import hashlib

                make = functools.partial(hashlib.new, name)
            self._hashers[algo] = make()
        self.length = 0

    def update(self, data: bytes) -> None:
        self.length += len(data)
        for h in self._hashers.values():
            h.update(data)

    def hexdigests(self) -> dict[str, str]:
        return {algo: h.hexdigest() for algo, h in self._hashers.items()}


def hash_stream(
    stream: BinaryIO, algorithms: Iterable[str] = ("md5",)
) -> tuple[int, dict[str, str]]:
    """Read a binary stream to its end; return (length, {algorithm: hexdigest})."""
    hasher = MultiHasher(algorithms)
    while chunk := stream.read(CHUNK):
        hasher.update(chunk)
    return hasher.length, hasher.hexdigests()


def hash_file(path: str | Path, algorithms: Iterable[str] = ("md5",)) -> tuple[int, dict[str, str]]:
    """Hash a file in chunks; return (length, {algorithm: hexdigest})."""
    with open(path, "rb") as f:
        return hash_stream(f, algorithms)


def format_hashes(hashes: Mapping[str, str]) -> str:
    """{'md5': 'ab…', 'sha-256': 'cd…'} → 'md5:ab… sha-256:cd…'."""
    return " ".join(f"{algo}:{value}" for algo, value in hashes.items())


def checkable(hashes: Mapping[str, str]) -> Mapping[str, str]:
    """The digests of `hashes` we can compute (`ALGORITHMS`; tokens as a Destination's reader
    gives them, in lower case): what a copy is verified against. A digest of another algorithm
    verifies nothing, and a resource it alone describes is one the list gives no digest for."""
    for algo in hashes:
        if algo not in ALGORITHMS:
            return {a: v for a, v in hashes.items() if a in ALGORITHMS}
    return hashes


#: A `hash` attribute of the common case: one `algorithm:digest` token, of an algorithm
#: computed here, its digest hex of the algorithm's length. Every reader takes it as written
#: (`parse_hashes`) and the validator has nothing to say of it. `plain_digest(text)`.
PLAIN_DIGEST = re.compile(
    "|".join(f"{re.escape(a)}:[0-9a-fA-F]{{{n}}}" for a, n in HEX_LENGTH.items() if a in ALGORITHMS)
)


def plain_digest(text: str) -> bool:
    """Whether a `hash` attribute is of the common case (`PLAIN_DIGEST`)."""
    return PLAIN_DIGEST.fullmatch(text) is not None


def parse_hashes(text: str) -> dict[str, str]:
    """'md5:ab… sha-256:cd…' → {'md5': 'ab…', 'sha-256': 'cd…'}.

    Raises ValueError for a token that is not `algorithm:value` or an algorithm given twice.
    """
    if " " not in text:
        algo, sep, value = text.partition(":")
        if sep and value and algo in ALGORITHMS and not value.isspace() and value.strip() == value:
            return {algo: value}
    result: dict[str, str] = {}
    for token in text.split():
        algo, sep, value = token.partition(":")
        if not sep or not value or not _TOKEN.fullmatch(algo):
            raise ValueError(f"hash token {token!r} is not of the form algorithm:value")
        if algo in result:
            raise ValueError(f"hash algorithm {algo!r} given twice")
        result[algo] = value
    if not result:
        raise ValueError("empty hash attribute")
    return result


def normalise_digest(algo: str, value: str) -> str | None:
    """The hex form of a digest of a known algorithm given in base64 or base64url (as the
    2014 Cornell simulator publishes MD5s); None when `value` is neither hex nor such a
    digest. Hex values come back in lower case."""
    expected = HEX_LENGTH.get(algo)
    if expected is None:
        return None
    if len(value) == expected and _HEX.fullmatch(value):
        return value.lower()
    raw = value.strip().rstrip("=")
    if not _B64.fullmatch(raw):
        return None
    raw = raw.replace("-", "+").replace("_", "/")
    try:
        digest = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(digest) * 2 != expected:
        return None
    return digest.hex()


def check_hash_value(algo: str, value: str) -> str | None:
    """A problem with a digest of a known algorithm (not hex, wrong length), or None."""
    expected = HEX_LENGTH.get(algo)
    if expected is None:
        return None
    if not _HEX.fullmatch(value):
        return f"{algo} value {value!r} is not hexadecimal"
    if len(value) != expected:
        return f"{algo} value has {len(value)} hex digits, expected {expected}"
    return None
