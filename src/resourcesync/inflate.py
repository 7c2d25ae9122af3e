"""Gzip and deflate streams decompressed in bounded pieces: the one decoder of the HTTP
layer's content codings and of the reader's `.gz` documents.

A gzip stream may hold several members, one after the other (RFC 1952 §2.2), and NUL padding
after one, as `gzip -d` and Python's `gzip` read them; anything else after its end is refused,
and so is a stream that ends before its end (`finish`): a cut gzip stream is not a shorter
file. Ground floor: imports nothing of ours.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

__all__ = ["Inflate", "InflateError"]

_GZIP_MAGIC = b"\x1f\x8b"


class InflateError(ValueError):
    """Why a stream cannot be decoded, in `kind`: "corrupt" (not the format: `detail` says
    how), "after" (bytes after its end that are not another gzip member), "cut" (it ended
    before its end)."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(kind, detail)
        self.kind, self.detail = kind, detail


class Inflate:
    """A decoder of `coding` ("gzip", "x-gzip" or "deflate", which is often sent as a raw
    deflate stream without the zlib header) handing its output on in pieces of at most `piece`
    bytes, so a bomb costs a piece of memory, not its expanded size."""

    def __init__(self, coding: str, piece: int) -> None:
        self.coding = coding
        self._piece = piece
        self._gzip = coding in ("gzip", "x-gzip")
        self._raw_fallback = not self._gzip
        self._d = self._decoder()
        self._fed = False

    def _decoder(self) -> Any:
        return zlib.decompressobj(16 + zlib.MAX_WBITS if self._gzip else zlib.MAX_WBITS)

    def feed(self, data: bytes) -> Iterator[bytes]:
        if data:
            self._fed = True
        d, piece = self._d, self._piece
        while True:
            if d.eof:
                data = self._after_end(d.unused_data + data)
                if not data:
                    return
                d = self._d
            try:
                out = d.decompress(data, piece)
            except zlib.error as exc:
                if self._raw_fallback:
                    self._raw_fallback = False
                    self._d = d = zlib.decompressobj(-zlib.MAX_WBITS)
                    continue
                raise InflateError("corrupt", str(exc)) from None
            self._raw_fallback = False
            data = d.unconsumed_tail
            if out:
                yield out
            if not data and len(out) < piece and not d.eof:
                return

    def _after_end(self, rest: bytes) -> bytes:
        """What follows the end of the stream: for gzip, NUL padding and the next member
        (whose decoder it starts); nothing else."""
        if self._gzip:
            rest = rest.lstrip(b"\0")
            if not rest:
                return b""
            if rest.startswith(_GZIP_MAGIC[: len(rest)]):
                self._d = self._decoder()
                return rest
        elif not rest:
            return b""
        raise InflateError("after")

    def finish(self) -> Iterator[bytes]:
        """What the decoder still holds once the input has ended; InflateError "cut" when the
        stream had not ended (the gzip trailer, with its CRC, or the deflate stream's end
        never came). No input at all is an empty stream."""
        yield from self.feed(b"")
        if self._fed and not self._d.eof:
            raise InflateError("cut")
