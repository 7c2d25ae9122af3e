"""Is this an HTML page? The check that keeps a sign-in or error page, answered `200` in place
of a resource or a document, from being taken for it: the WHATWG MIME sniffing standard's HTML
signatures (§7.1) after blanks and a byte order mark, or an XML declaration before an `<html`
element (XHTML). Ground floor: imports nothing of ours.
"""

from __future__ import annotations

__all__ = [
    "HTML_TYPES",
    "WINDOW",
    "binary_type",
    "looks_like_html",
    "media_type",
    "named_type",
    "not_a_page",
    "not_a_page_for",
]

#: The media types of an HTML page.
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
#: How many of the first bytes are looked at.
WINDOW = 512
#: The WHATWG "HTML" signatures (MIME Sniffing §7.1), each followed by a tag-terminating
#: byte, plus `<meta` and `<form` that sign-in pages start with. (The standard's `<!--` is
#: not one here: an XML document may begin with a comment; comments are looked past.)
_SIGNATURES = tuple(
    s.encode()
    for s in (
        "<!doctype html",
        "<html",
        "<head",
        "<script",
        "<iframe",
        "<h1",
        "<div",
        "<font",
        "<table",
        "<a",
        "<style",
        "<title",
        "<b",
        "<body",
        "<br",
        "<p",
        "<meta",
        "<form",
    )
)
_TAG_END = b" >\t\n\r\x0c/"
_BLANK = b" \t\n\r\x0c"


def media_type(value: str | None) -> str:
    """The essence of a media type (`text/html; charset=utf-8` → `text/html`); "" for none."""
    if not value:
        return ""
    return value.split(";", 1)[0].strip().lower()


def not_a_page(listed: str | None) -> str:
    """The essence of the type a list gives when an HTML page cannot be that resource; "" when
    it can: no type given, an HTML type, or an XML one (an XHTML page is XML: a Source may list
    its pages as `application/xml`)."""
    essence = media_type(listed)
    if essence in HTML_TYPES or essence in ("application/xml", "text/xml"):
        return ""
    if essence.endswith("+xml"):
        return ""
    return essence


#: The formats a resource's name says it is and an HTML page cannot be: documents, images,
#: sound, video, archives and data files (a fixed table, not the system's `mime.types`, so
#: every machine judges alike). Names of pages and of scripts that make pages (`.html`,
#: `.php`, `.asp`, `.jsp`, `.cgi` …) are not in it, nor XML.
_NAMED = {
    "pdf": "application/pdf",
    "ps": "application/postscript",
    "eps": "application/postscript",
    "rtf": "application/rtf",
    "epub": "application/epub+zip",
    "doc": "application/msword",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xls": "application/vnd.ms-excel",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "ppt": "application/vnd.ms-powerpoint",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "odt": "application/vnd.oasis.opendocument.text",
    "ods": "application/vnd.oasis.opendocument.spreadsheet",
    "odp": "application/vnd.oasis.opendocument.presentation",
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "tif": "image/tiff",
    "tiff": "image/tiff",
    "webp": "image/webp",
    "bmp": "image/bmp",
    "jp2": "image/jp2",
    "djvu": "image/vnd.djvu",
    "mp3": "audio/mpeg",
    "wav": "audio/wav",
    "flac": "audio/flac",
    "ogg": "audio/ogg",
    "mp4": "video/mp4",
    "mov": "video/quicktime",
    "avi": "video/x-msvideo",
    "webm": "video/webm",
    "mkv": "video/x-matroska",
    "zip": "application/zip",
    "gz": "application/gzip",
    "tgz": "application/gzip",
    "bz2": "application/x-bzip2",
    "xz": "application/x-xz",
    "7z": "application/x-7z-compressed",
    "tar": "application/x-tar",
    "warc": "application/warc",
    "csv": "text/csv",
    "tsv": "text/tab-separated-values",
    "json": "application/json",
    "txt": "text/plain",
}


_BINARY_PREFIXES = (
    "image/",
    "audio/",
    "video/",
    "font/",
    "application/vnd.openxmlformats-officedocument.",
    "application/vnd.oasis.opendocument.",
)
_BINARY = frozenset(
    {
        "application/pdf",
        "application/zip",
        "application/gzip",
        "application/x-gzip",
        "application/x-tar",
        "application/x-bzip2",
        "application/x-xz",
        "application/x-7z-compressed",
        "application/epub+zip",
        "application/msword",
        "application/vnd.ms-excel",
        "application/vnd.ms-powerpoint",
        "application/warc",
    }
)


def binary_type(essence: str) -> bool:
    """Whether a media type's bytes are never text: a document, image, sound, video, font or
    archive format (an HTML page is never one, whatever the answer's label says; a text type's
    file may hold HTML source)."""
    return essence in _BINARY or (
        essence.startswith(_BINARY_PREFIXES) and not essence.endswith(("+xml", "+json"))
    )


def not_a_page_for(listed: str | None, uri: str) -> tuple[str, str]:
    """(the type an HTML page cannot be, who says so) for a resource the list gives as `listed`
    at `uri`: the list's type when it gives one (`not_a_page`: none for an HTML or XML type),
    else the type its name says (`named_type`); ("", "") when nothing rules a page out."""
    if media_type(listed):
        essence = not_a_page(listed)
        return (essence, "the list gives") if essence else ("", "")
    named = named_type(uri)
    return (named, "its name says") if named else ("", "")


def named_type(uri: str) -> str:
    """The media type the last segment of `uri`'s path names by its extension (`…/paper.pdf`,
    `…/file.PDF?sequence=1` → `application/pdf`) when that is a format an HTML page cannot be;
    "" otherwise (no extension, a page's or a script's, XML, or one not in the table)."""
    path = uri.split("#", 1)[0].split("?", 1)[0]
    name = path.rsplit("/", 1)[-1]
    if "." not in name:
        return ""
    return _NAMED.get(name.rsplit(".", 1)[1].lower(), "")


def looks_like_html(head: bytes) -> bool:
    """Whether bytes begin as an HTML page does: an HTML signature after blanks (and a byte
    order mark) and comments, or an XML declaration followed by an `<html` element (XHTML)."""
    text = head[:WINDOW].lstrip(_BLANK)
    if text.startswith(b"\xef\xbb\xbf"):
        text = text[3:].lstrip(_BLANK)
    lowered = text.lower()
    while lowered.startswith(b"<!--"):
        end = lowered.find(b"-->", 4)
        if end == -1:
            return False  # a comment longer than the window: nothing to tell by
        lowered = lowered[end + 3 :].lstrip(_BLANK)
    if lowered.startswith(b"<?xml"):
        at = lowered.find(b"<html")
        # (A byte after the name, or none: `in` finds b"" in any bytes.)
        return at != -1 and lowered[at + 5 : at + 6] in _TAG_END
    # (`<b` and `<body`, `<br`: each signature is tried.)
    return any(
        lowered.startswith(sig) and lowered[len(sig) : len(sig) + 1] in _TAG_END
        for sig in _SIGNATURES
    )
