"""The LIRS record codec: read what antennas wrote, write what their readers accept.

A record (LIRS 2.1 "データ書式", completed by LIRS-NOTES.md "Record" and "Escaping and lines")::

    LIRS,<Last-Modified>,<Last-Detected>,<tz offset>,<Content-Length>,<URL>,<title>,<author>,
    <source URL>,[extensions…,]

Reading is a stream: bytes come in chunks (gzip detected by its magic bytes, whatever the name),
are cut into lines on CRLF, LF or CR, and each line is decoded and parsed on its own, so a file of
a million records costs a few megabytes and an enormous line costs nothing but a warning.

The encoding is taken from a BOM, else found at the first line that is not ASCII, from that line
and the rest of the chunk around it: valid UTF-8, else EUC-JP or Shift_JIS by which one decodes
into ordinary Japanese text. A line that does not decode in the encoding found is re-detected on
its own (merged feeds mix encodings) with a warning.

Lenient reading (the default) skips a bad record with a warning naming the input and line, and
accepts the WDB 7-field variant with a warning; strict reading raises FormatError at the first of
either. Input that is not text at all (NUL bytes, UTF-16) is refused with ReadError.
"""

from __future__ import annotations

import codecs
import contextlib
import gzip
import io
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, NamedTuple

from ..atomic import AtomicFile
from ..errors import FormatError, ReadError

__all__ = [
    "MAX_LINE",
    "MAX_TIME",
    "LirsReader",
    "LirsWarning",
    "LirsWriter",
    "Record",
    "detect_encoding",
    "escape_field",
    "format_record",
    "is_lirs_url",
    "join_fields",
    "normalize_encoding",
    "open_lirs",
    "parse_record",
    "read_records",
    "split_fields",
    "write_records",
]

#: The largest time we accept: 9999-12-31T23:59:59Z, the last second a datetime can hold.
MAX_TIME = 253402300799
#: Content-Length fits in a signed 64-bit integer (SQLite's and most readers' limit).
MAX_LENGTH = 2**63 - 1
#: A time-zone offset beyond a day is not an offset.
MAX_TZ = 86400
#: Lines longer than this (bytes) are refused: real records are a few hundred bytes.
MAX_LINE = 1 << 20

_CHUNK = 1 << 18
_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = codecs.BOM_UTF8
_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)

# Characters with no place in a record: C0 controls but TAB (CR and LF end the line), and the
# two XML non-characters, so that every record we accept can also be written as ResourceSync.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_CONTROL_OR_BREAK = re.compile("[\x00-\x08\x0a-\x1f\ufffe\uffff]")
_URL = re.compile("[A-Za-z][A-Za-z0-9+.\\-]*:[^\\s\x00-\x1f\x7f\ufffe\uffff]+")
_TOKEN = re.compile(r"\\(.)|(,)|([^\\,]+)|(\\)$", re.S)
_TZ = re.compile(r"[+-]?[0-9]+")
# The usual record, numbers well formed: parsed without the general path's checks and messages.
_HEAD = re.compile(r"LIRS,([0-9]{1,12}),([0-9]{1,12}),([+-]?[0-9]{1,6}),([0-9]{1,19}),")
# What escape_field would change.
_SPECIAL = re.compile("[\\\\,\x00-\x1f\ufffe\uffff]")


class Record(NamedTuple):
    """One LIRS record, fields as in the file: times are seconds since the epoch (UTC).

    A named tuple: immutable, and built in a fraction of a frozen dataclass's time, which is
    most of the cost of reading a million records.

    `title`, `author` and `source_url` are decoded, unescaped text, kept as written (`0` and the
    empty string both meant "unknown" to the antennas; we do not tell them apart on reading).
    """

    last_modified: int
    last_detected: int
    tz_offset: int
    content_length: int
    url: str
    title: str = ""
    author: str = ""
    source_url: str = ""
    extensions: tuple[str, ...] = ()

    @property
    def is_error(self) -> bool:
        """An error row: `0,0` says the last check of the site failed."""
        return self.last_modified == 0 and self.last_detected == 0

    def to_json(self) -> dict[str, Any]:
        """The record as `lirs cat --json` prints it."""
        return {
            "last_modified": self.last_modified,
            "last_detected": self.last_detected,
            "tz_offset": self.tz_offset,
            "content_length": self.content_length,
            "url": self.url,
            "title": self.title,
            "author": self.author,
            "source_url": self.source_url,
            "extensions": list(self.extensions),
        }

    @classmethod
    def from_json(cls, obj: object) -> Record:
        """The inverse of `to_json`; raises ValueError naming the field that is wrong."""
        if not isinstance(obj, dict):
            raise ValueError("a record must be a JSON object")
        ints: list[int] = []
        for name in ("last_modified", "last_detected", "tz_offset", "content_length"):
            value = obj.get(name, 0)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer, not {value!r}")
            ints.append(value)
        texts: list[str] = []
        for name in ("url", "title", "author", "source_url"):
            value = obj.get(name, "")
            if not isinstance(value, str):
                raise ValueError(f"{name} must be a string, not {value!r}")
            texts.append(value)
        ext = obj.get("extensions", [])
        if not isinstance(ext, list) or not all(isinstance(e, str) for e in ext):
            raise ValueError("extensions must be a list of strings")
        return cls(
            last_modified=ints[0],
            last_detected=ints[1],
            tz_offset=ints[2],
            content_length=ints[3],
            url=texts[0],
            title=texts[1],
            author=texts[2],
            source_url=texts[3],
            extensions=tuple(ext),
        )


@dataclass(frozen=True, slots=True)
class LirsWarning:
    """A record skipped or read with a doubt, and where."""

    source: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.message}"


class _BadRecord(Exception):
    def __init__(self, message: str, *, wdb: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.wdb = wdb


# ---------------------------------------------------------------------------------------------
# Fields


def escape_field(text: str) -> str:
    """A field as written: `\\` → `\\\\`, `,` → `\\,`; CR, LF and other controls removed."""
    if _CONTROL_OR_BREAK.search(text):
        text = _CONTROL_OR_BREAK.sub("", text)
    if "\\" in text:
        text = text.replace("\\", "\\\\")
    if "," in text:
        text = text.replace(",", "\\,")
    return text


def split_fields(text: str) -> list[str]:
    """Split a line on unescaped commas, unescaping `\\x` to `x`.

    A line ending with a comma gives a last element `""`. A lone backslash at the very end of the
    line (nothing left to escape) is kept as a backslash.
    """
    if "\\" not in text:
        return text.split(",")
    fields: list[str] = []
    current: list[str] = []
    for m in _TOKEN.finditer(text):
        escaped, comma, plain, dangling = m.groups()
        if comma is not None:
            fields.append("".join(current))
            current = []
        elif plain is not None:
            current.append(plain)
        elif escaped is not None:
            current.append(escaped)
        elif dangling is not None:
            current.append("\\")
    fields.append("".join(current))
    return fields


def join_fields(fields: Iterable[str]) -> str:
    """Fields escaped, each followed by a comma (the form of the extension part of a record)."""
    return "".join(escape_field(f) + "," for f in fields)


def format_record(record: Record) -> str:
    """One record as a line, without the line ending. Raises FormatError for what readers reject."""
    lm, ld, tz, cl = (
        record.last_modified,
        record.last_detected,
        record.tz_offset,
        record.content_length,
    )
    if not (
        0 <= lm <= MAX_TIME
        and 0 <= ld <= MAX_TIME
        and -MAX_TZ <= tz <= MAX_TZ
        and 0 <= cl <= MAX_LENGTH
    ):
        _check_numbers(record)
    if not _URL.fullmatch(record.url):
        raise FormatError(f"not a URL: {record.url!r}", entry=record.url)
    texts = (record.url, record.title, record.author, record.source_url)
    if not _SPECIAL.search("".join(texts)) and not record.extensions:
        return f"LIRS,{lm},{ld},{tz},{cl},{','.join(texts)},"
    url = escape_field(record.url)
    head = (
        f"LIRS,{record.last_modified},{record.last_detected},{record.tz_offset},"
        f"{record.content_length},{url},{escape_field(record.title)},"
        f"{escape_field(record.author)},{escape_field(record.source_url)},"
    )
    if record.extensions:
        return head + join_fields(record.extensions)
    return head


def is_lirs_url(text: str) -> bool:
    """Whether LIRS readers take this as a URL: a scheme, no spaces or control characters."""
    return _URL.fullmatch(text) is not None


def _check_numbers(record: Record) -> None:
    for name, value, low, high in (
        ("Last-Modified", record.last_modified, 0, MAX_TIME),
        ("Last-Detected", record.last_detected, 0, MAX_TIME),
        ("time-zone offset", record.tz_offset, -MAX_TZ, MAX_TZ),
        ("Content-Length", record.content_length, 0, MAX_LENGTH),
    ):
        if not low <= value <= high:
            raise FormatError(f"{name} out of range: {value}", entry=record.url)


def _digits(text: str, name: str, high: int) -> int:
    if not text or not (text.isascii() and text.isdigit()):
        raise _BadRecord(f"{name} is not a number: {text[:40]!r}")
    if len(text) > 20 or int(text) > high:
        raise _BadRecord(f"{name} out of range: {text[:40]}")
    return int(text)


def _tz(text: str) -> int:
    if not _TZ.fullmatch(text):
        raise _BadRecord(f"time-zone offset is not a number: {text[:40]!r}")
    if len(text) > 8 or abs(int(text)) > MAX_TZ:
        raise _BadRecord(f"time-zone offset out of range: {text[:40]}")
    return int(text)


#: The offset given to WDB records, which have none: LIRS 2.1 says that in Japan it is always
#: +32400, and WDB was a Japanese antenna.
WDB_TZ_OFFSET = 32400


def parse_record(text: str) -> Record:
    """Parse one line (without its line ending) into a Record; raises FormatError.

    Accepts a missing final comma. The WDB 7-field variant is refused here; `open_lirs` reads it
    in lenient mode.
    """
    try:
        record, wdb = _parse(text)
    except _BadRecord as exc:
        raise FormatError(exc.message) from None
    if wdb:
        raise FormatError("WDB 7-field record (no time-zone offset)")
    return record


def _parse(text: str) -> tuple[Record, bool]:
    m = _HEAD.match(text)
    if m is not None and not _CONTROL.search(text):
        lm, ld, tz, cl = int(m[1]), int(m[2]), int(m[3]), int(m[4])
        if lm <= MAX_TIME and ld <= MAX_TIME and -MAX_TZ <= tz <= MAX_TZ and cl <= MAX_LENGTH:
            rest = split_fields(text[m.end() :])
            if rest[-1] == "":
                rest.pop()
            if len(rest) >= 4 and _URL.fullmatch(rest[0]):
                return Record(
                    lm, ld, tz, cl, rest[0], rest[1], rest[2], rest[3], tuple(rest[4:])
                ), False
    return _parse_general(text)


def _parse_general(text: str) -> tuple[Record, bool]:
    if not text.startswith("LIRS,"):
        if text.startswith("LIRS"):
            raise _BadRecord("no comma after the LIRS header")
        raise _BadRecord(f"not a LIRS record: {text[:40]!r}")
    if _CONTROL.search(text):
        raise _BadRecord("control character in record")
    parts = split_fields(text)
    # A comma ends every field, so a line ending in one leaves an empty last part; a line from a
    # writer that dropped the final comma (tama) does not.
    ended = len(parts) > 1 and parts[-1] == ""
    data = parts[1:-1] if ended else parts[1:]
    wdb = False
    if len(data) >= 8 and _URL.fullmatch(data[4]):
        pass
    elif len(data) == 7 and ended and _URL.fullmatch(data[4]):
        # Eight fields with an empty source URL and no final comma.
        data.append("")
    elif len(data) >= 7 and _URL.fullmatch(data[3]) and not _URL.fullmatch(data[4]):
        # WDB: Last-Modified, Last-Detected, Content-Length, URL, title, author, source URL.
        wdb = True
        data.insert(2, str(WDB_TZ_OFFSET))
    elif len(data) < 8:
        raise _BadRecord(f"{len(data)} fields after LIRS, at least 8 needed")
    else:
        raise _BadRecord(f"URL field is not a URL: {data[4][:80]!r}")
    record = Record(
        _digits(data[0], "Last-Modified", MAX_TIME),
        _digits(data[1], "Last-Detected", MAX_TIME),
        _tz(data[2]),
        _digits(data[3], "Content-Length", MAX_LENGTH),
        data[4],
        data[5],
        data[6],
        data[7],
        tuple(data[8:]),
    )
    return record, wdb


# ---------------------------------------------------------------------------------------------
# Encodings

_NAMES = {
    "ascii": "utf-8",
    "utf-8": "utf-8",
    "utf_8": "utf-8",
    "utf-8-sig": "utf-8",
    "utf_8_sig": "utf-8",
    "euc_jp": "euc-jp",
    "euc_jis_2004": "euc-jp",
    "euc_jisx0213": "euc-jp",
    "shift_jis": "shift_jis",
    "cp932": "shift_jis",
    "shift_jis_2004": "shift_jis",
    "shift_jisx0213": "shift_jis",
}

# Decoders tried in turn for each of our encodings: the common table first, then the superset
# that holds the vendor rows (①, ～) that real files contain.
_DECODERS = {
    "utf-8": ("utf-8",),
    "euc-jp": ("euc_jp", "euc_jis_2004"),
    "shift_jis": ("cp932", "shift_jis_2004"),
}


def normalize_encoding(name: str) -> str:
    """Our name for an encoding (`utf-8`, `euc-jp`, `shift_jis`, or Python's name for others).

    Raises ValueError for an unknown encoding.
    """
    try:
        info = codecs.lookup(name)
    except LookupError:
        raise ValueError(f"unknown encoding: {name}") from None
    return _NAMES.get(info.name.replace("-", "_"), _NAMES.get(info.name, info.name))


def _decode(raw: bytes, encoding: str) -> str:
    error: UnicodeDecodeError | None = None
    for codec in _DECODERS.get(encoding, (encoding,)):
        try:
            return raw.decode(codec)
        except UnicodeDecodeError as exc:
            error = error or exc
    assert error is not None
    raise error


def _japanese_score(text: str) -> int:
    good = bad = 0
    for ch in text:
        o = ord(ch)
        if 0x3040 <= o <= 0x30FF or 0x4E00 <= o <= 0x9FFF or 0x3000 <= o <= 0x303F:
            good += 1
        elif 0xFF61 <= o <= 0xFF9F or 0xE000 <= o <= 0xF8FF or 0x80 <= o < 0x3000:
            bad += 1
    return good - 2 * bad


def detect_encoding(sample: bytes) -> str:
    """`utf-8`, `euc-jp` or `shift_jis` for a sample of text (whole lines).

    A BOM or valid UTF-8 says UTF-8, as does a sample whose non-ASCII lines are at least half
    valid UTF-8 (merged feeds mix encodings). Otherwise EUC-JP or Shift_JIS by which one decodes
    the other lines, and if both do, by which one gives ordinary Japanese text (EUC-JP read as
    Shift_JIS turns into half-width katakana). Ties go to EUC-JP, the classic feeds' encoding.
    """
    if sample.startswith(_UTF8_BOM) or sample.isascii():
        return "utf-8"
    try:
        sample.decode("utf-8")
        return "utf-8"
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data" and exc.start >= len(sample) - 3:
            return "utf-8"
    others: list[bytes] = []
    utf8 = 0
    for line in sample.splitlines():
        if line.isascii():
            continue
        try:
            line.decode("utf-8")
            utf8 += 1
        except UnicodeDecodeError:
            others.append(line)
        if utf8 + len(others) >= 1000:
            break
    if utf8 >= len(others):
        return "utf-8"
    scores: dict[str, int] = {}
    for encoding in ("euc-jp", "shift_jis"):
        decoded = 0
        score = 0
        for line in others:
            try:
                score += _japanese_score(_decode(line, encoding))
                decoded += 1
            except UnicodeDecodeError:
                continue
        scores[encoding] = decoded * 1_000_000 + score
    return max(scores, key=lambda e: (scores[e], e == "euc-jp"))


# ---------------------------------------------------------------------------------------------
# Byte sources


class _Prefixed(io.RawIOBase):
    """A reader that gives back bytes already read, then the rest of a stream."""

    def __init__(self, head: bytes, read: Callable[[int], bytes]) -> None:
        self._head = head
        self._read = read

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self._head:
            if size < 0 or size >= len(self._head):
                head, self._head = self._head, b""
                return head
            head, self._head = self._head[:size], self._head[size:]
            return head
        return self._read(size if size >= 0 else _CHUNK)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class _IterReader:
    """`read(n)` over an iterator of byte chunks (an HTTP response body)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = b""

    def read(self, size: int = -1) -> bytes:
        while not self._buffer:
            chunk = next(self._chunks, None)
            if chunk is None:
                return b""
            self._buffer = chunk
        if size < 0 or size >= len(self._buffer):
            out, self._buffer = self._buffer, b""
        else:
            out, self._buffer = self._buffer[:size], self._buffer[size:]
        return out


Source = str | os.PathLike[str] | bytes | IO[bytes]


def _is_url(source: object) -> bool:
    return isinstance(source, str) and source.startswith(("http://", "https://"))


def _source_name(source: Source, name: str | None) -> str:
    if name is not None:
        return name
    if isinstance(source, bytes):
        return "<bytes>"
    if isinstance(source, str | os.PathLike):
        return os.fspath(source)
    return str(getattr(source, "name", "<stream>"))


# ---------------------------------------------------------------------------------------------
# Reading


@dataclass(slots=True)
class ReadStats:
    """What a read saw, for summaries."""

    records: int = 0
    skipped: int = 0
    warnings: int = 0


class LirsReader:
    """An iterator of records over one input; made by `open_lirs`.

    `encoding` is the encoding in use (None until a non-ASCII line showed it), `compressed` says
    whether the input was gzip, `stats` counts records, skipped lines and warnings.
    """

    def __init__(
        self,
        read: Callable[[int], bytes],
        *,
        name: str,
        encoding: str | None,
        strict: bool,
        on_warning: Callable[[LirsWarning], None] | None,
        max_line: int,
        compressed: bool,
    ) -> None:
        self.name = name
        self.encoding = encoding
        self.strict = strict
        self.compressed = compressed
        self.stats = ReadStats()
        self._read = read
        self._on_warning = on_warning
        self._max_line = max_line
        self._explicit = encoding is not None
        self._started = False
        self._first_problem: LirsWarning | None = None

    def _warn(self, line: int, message: str) -> None:
        warning = LirsWarning(self.name, line, message)
        self.stats.warnings += 1
        if self._on_warning is not None:
            self._on_warning(warning)

    def _bad(self, line: int, message: str) -> None:
        if self.strict:
            raise FormatError(message, source=self.name, line=line)
        self.stats.skipped += 1
        if self._first_problem is None:
            self._first_problem = LirsWarning(self.name, line, message)
        self._warn(line, f"{message}; record skipped")

    def _blocks(self) -> Iterator[tuple[int, list[bytes] | None]]:
        """(number of the first line, lines) per chunk; `None` for a line that was too long."""
        read = self._read
        max_line = self._max_line
        lineno = 1
        pending = b""
        skipping = False
        drop_lf = False
        while True:
            try:
                chunk = read(_CHUNK)
            except (OSError, EOFError, zlib.error) as exc:
                raise ReadError(
                    f"cannot read: {exc or type(exc).__name__}", source=self.name, line=lineno
                ) from None
            if drop_lf and chunk.startswith(b"\n"):
                chunk = chunk[1:]
            drop_lf = False
            if skipping:
                if not chunk:
                    yield lineno, None
                    return
                m = re.search(b"[\r\n]", chunk)
                if m is None:
                    continue
                end = m.end()
                if chunk[m.start()] == 13:
                    if end < len(chunk) and chunk[end] == 10:
                        end += 1
                    elif end == len(chunk):
                        drop_lf = True
                yield lineno, None
                lineno += 1
                chunk = chunk[end:]
                skipping = False
                if not chunk:
                    continue
            if not chunk:
                if pending:
                    if len(pending) > max_line:
                        yield lineno, None
                    else:
                        # A final CR was held back in case an LF followed.
                        yield lineno, pending.splitlines()
                return
            buf = pending + chunk if pending else chunk
            size = len(buf)
            end = size - 1 if buf[-1] == 13 else size
            cut = max(buf.rfind(b"\n", 0, end), buf.rfind(b"\r", 0, end)) + 1
            if cut == 0:
                pending = buf
            else:
                lines = buf[:cut].splitlines()
                pending = buf[cut:]
                yield lineno, lines
                lineno += len(lines)
            if len(pending) > max_line:
                pending = b""
                skipping = True

    def __iter__(self) -> Iterator[Record]:
        if self._started:
            raise RuntimeError("a LIRS reader can be iterated only once")
        self._started = True
        return self._records()

    def _records(self) -> Iterator[Record]:
        stats = self.stats
        strict = self.strict
        max_line = self._max_line
        encoding = self.encoding
        primary: str | None = None
        content = 0
        for first, lines in self._blocks():
            if lines is None:
                content += 1
                self._bad(first, f"line longer than {max_line} bytes")
                continue
            block: bytes | None = None
            for i, raw in enumerate(lines):
                lineno = first + i
                if len(raw) > max_line:
                    content += 1
                    self._bad(lineno, f"line longer than {max_line} bytes")
                    continue
                if raw.isascii():
                    text = raw.decode("ascii")
                else:
                    if encoding is None:
                        if block is None:
                            block = b"\n".join(lines[i:])
                        encoding = self.encoding = detect_encoding(block)
                    if primary is None:
                        primary = _DECODERS.get(encoding, (encoding,))[0]
                    try:
                        try:
                            text = raw.decode(primary)
                        except UnicodeDecodeError:
                            text = _decode(raw, encoding)
                    except UnicodeDecodeError:
                        # Merged feeds mix encodings: read such a line in its own, with a warning.
                        guess = None if self._explicit or strict else detect_encoding(raw)
                        recovered: str | None = None
                        if guess is not None and guess != encoding:
                            with contextlib.suppress(UnicodeDecodeError):
                                recovered = _decode(raw, guess)
                        if recovered is None:
                            content += 1
                            self._bad(lineno, f"not valid {encoding} text")
                            continue
                        text = recovered
                        self._warn(lineno, f"line is in {guess}, not {encoding}")
                if not text or text[0] == "#" or text.isspace():
                    continue
                content += 1
                try:
                    record, wdb = _parse(text)
                except _BadRecord as exc:
                    self._bad(lineno, exc.message)
                    continue
                if wdb:
                    if strict:
                        raise FormatError(
                            "WDB 7-field record (no time-zone offset)",
                            source=self.name,
                            line=lineno,
                        )
                    self._warn(
                        lineno,
                        f"WDB 7-field record (no time-zone offset); read with +{WDB_TZ_OFFSET}",
                    )
                stats.records += 1
                yield record
        if stats.records == 0 and content and self._first_problem is not None:
            first_problem = self._first_problem
            raise ReadError(
                f"not a LIRS file: no valid record (first problem: {first_problem.message})",
                source=self.name,
                line=first_problem.line,
            )


@contextlib.contextmanager
def open_lirs(
    source: Source,
    *,
    name: str | None = None,
    encoding: str | None = None,
    strict: bool = False,
    on_warning: Callable[[LirsWarning], None] | None = None,
    client: Any = None,
    max_line: int = MAX_LINE,
) -> Iterator[LirsReader]:
    """Open a LIRS input (path, `-` for stdin, http(s) URL, bytes or binary file) for reading.

    Iterating the reader yields records. Raises ReadError when the input cannot be opened or is
    not text, FormatError (strict mode) at the first bad record.
    """
    label = _source_name(source, name)
    if encoding is not None:
        try:
            encoding = normalize_encoding(encoding)
        except ValueError as exc:
            raise ReadError(str(exc), source=label) from None
    with contextlib.ExitStack() as stack:
        read: Callable[[int], bytes]
        if isinstance(source, bytes):
            read = io.BytesIO(source).read
        elif _is_url(source):
            from ..http import iter_body, open_stream

            assert isinstance(source, str)
            response = stack.enter_context(open_stream(source, client=client))
            read = _IterReader(iter_body(response, source, _CHUNK)).read
        elif isinstance(source, str | os.PathLike):
            path = os.fspath(source)
            if path == "-":
                import sys

                read = sys.stdin.buffer.read
                label = name or "<stdin>"
            else:
                try:
                    handle = stack.enter_context(open(path, "rb"))
                except OSError as exc:
                    raise ReadError(exc.strerror or str(exc), source=label) from None
                read = handle.read
        else:
            read = source.read
        try:
            head = read(_CHUNK)
        except OSError as exc:
            raise ReadError(f"cannot read: {exc.strerror or exc}", source=label) from None
        compressed = head.startswith(_GZIP_MAGIC)
        if compressed:
            gz = gzip.GzipFile(fileobj=_Prefixed(head, read), mode="rb")
            stack.enter_context(gz)
            read = gz.read
            try:
                head = read(_CHUNK)
            except (OSError, EOFError, zlib.error) as exc:
                raise ReadError(f"bad gzip data: {exc}", source=label) from None
        if head.startswith(_UTF16_BOMS):
            raise ReadError("UTF-16 text, not a LIRS file", source=label)
        if head.startswith(_UTF8_BOM):
            head = head[len(_UTF8_BOM) :]
            if encoding is None:
                encoding = "utf-8"
        if b"\x00" in head[:8192]:
            raise ReadError("binary data, not a LIRS file", source=label)
        yield LirsReader(
            _Prefixed(head, read).read,
            name=label,
            encoding=encoding,
            strict=strict,
            on_warning=on_warning,
            max_line=max_line,
            compressed=compressed,
        )


def read_records(source: Source, **options: Any) -> Iterator[Record]:
    """The records of one input, as a generator that closes the input when done."""
    with open_lirs(source, **options) as reader:
        yield from reader


# ---------------------------------------------------------------------------------------------
# Writing


@dataclass(slots=True)
class WriteStats:
    records: int = 0
    #: Characters that the output encoding cannot hold, written as `?`.
    replaced: int = 0


class LirsWriter:
    """Writes records to a path (atomically: a temporary file renamed over the target when the
    writer closes without error) or to a binary stream. gzip when `compress` is true, or when
    it is None and the path ends in `.gz`.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | IO[bytes],
        *,
        encoding: str = "utf-8",
        compress: bool | None = None,
        newline: str = "\n",
    ) -> None:
        self.encoding = normalize_encoding(encoding)
        self.stats = WriteStats()
        if newline not in ("\n", "\r\n"):
            raise ValueError("newline must be LF or CRLF")
        self._newline = newline
        self._batch: list[str] = []
        self._atomic: AtomicFile | None = None
        self._raw: IO[bytes]
        self._gz: gzip.GzipFile | None = None
        if isinstance(target, str | os.PathLike):
            path = os.fspath(target)
            if compress is None:
                compress = path.endswith(".gz")
            # The same records again leave the file as it was (an antenna polls it by its
            # Last-Modified): gzip is written with mtime 0, so its bytes are the same too.
            self._atomic = AtomicFile(path, fsync=True, suffix=".lirs", keep_same=True)
            self._raw = self._atomic.file
            inner = os.path.basename(path)
        else:
            self._raw = target
            inner = ""
        if compress:
            inner = inner[:-3] if inner.endswith(".gz") else inner
            self._gz = gzip.GzipFile(
                filename=inner, mode="wb", fileobj=self._raw, compresslevel=6, mtime=0
            )
        self._out: IO[bytes] = self._raw
        if self._gz is not None:
            self._out = self._gz  # type: ignore[assignment]

    def write(self, record: Record) -> None:
        self._batch.append(format_record(record))
        self.stats.records += 1
        if len(self._batch) >= 2048:
            self._flush()

    def write_all(self, records: Iterable[Record]) -> int:
        n = 0
        for record in records:
            self.write(record)
            n += 1
        return n

    def _encode(self, text: str) -> bytes:
        codecs_ = _DECODERS.get(self.encoding, (self.encoding,))
        try:
            return text.encode(codecs_[0])
        except UnicodeEncodeError:
            pass
        # Line by line: a reader decodes each line with the first codec that takes it whole, so
        # a line is written in one codec only, and in that one only if it reads back as written
        # (Shift_JIS-2004 reads `~` as an overline, for instance).
        nl = self._newline
        return nl.encode("ascii").join(self._encode_line(line, codecs_) for line in text.split(nl))

    def _encode_line(self, line: str, codecs_: tuple[str, ...]) -> bytes:
        for codec in codecs_:
            try:
                data = line.encode(codec)
            except UnicodeEncodeError:
                continue
            with contextlib.suppress(UnicodeDecodeError):
                if _decode(data, self.encoding) == line:
                    return data
        # No codec holds the whole line: the one that reads back with the fewest `?` in place
        # of what it lacks.
        best: tuple[int, bytes] | None = None
        for codec in codecs_:
            out = bytearray()
            shown = []
            missing = 0
            for ch in line:
                try:
                    out += ch.encode(codec)
                    shown.append(ch)
                except UnicodeEncodeError:
                    out += b"?"
                    shown.append("?")
                    missing += 1
            with contextlib.suppress(UnicodeDecodeError):
                if _decode(bytes(out), self.encoding) == "".join(shown) and (
                    best is None or missing < best[0]
                ):
                    best = (missing, bytes(out))
        if best is None:  # pragma: no cover - ASCII and `?` always read back
            best = (len(line), line.encode("ascii", "replace"))
        self.stats.replaced += best[0]
        return best[1]

    def _flush(self) -> None:
        if self._batch:
            nl = self._newline
            self._out.write(self._encode(nl.join(self._batch) + nl))
            self._batch = []

    def close(self) -> None:
        """Finish the output; for a path, put it in place."""
        try:
            self._flush()
            if self._gz is not None:
                self._gz.close()
        except BaseException as exc:
            self.abort(exc)
            raise
        if self._atomic is not None:
            self._atomic.commit()
        else:
            self._raw.flush()

    def abort(self, exc: BaseException | None = None) -> None:
        """Give up: remove the temporary file, leave any existing target as it was (`exc`
        named with it: `AtomicFile.abort`)."""
        if self._atomic is not None:
            self._atomic.abort(exc)

    def __enter__(self) -> LirsWriter:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort(exc)


def write_records(
    target: str | os.PathLike[str] | IO[bytes],
    records: Iterable[Record],
    *,
    encoding: str = "utf-8",
    compress: bool | None = None,
    newline: str = "\n",
) -> WriteStats:
    """Write records to a path (atomically) or binary stream; returns the counts."""
    with LirsWriter(target, encoding=encoding, compress=compress, newline=newline) as writer:
        writer.write_all(records)
    return writer.stats
