"""`resourcesync.sniff`: what is taken for an HTML page (a sign-in or error page answered 200
in place of a resource or a document), and what is not."""

from __future__ import annotations

import pytest

from resourcesync.sniff import (
    binary_type,
    looks_like_html,
    media_type,
    not_a_page,
    not_a_page_for,
)


@pytest.mark.parametrize(
    "head",
    [
        b"<!DOCTYPE html>\n<html>",
        b"\xef\xbb\xbf  \n<HTML lang=en>",
        b"<html>",
        b"<head><title>x</title>",
        b"<p>Internal Server Error",
        b'<a href="/login">moved</a>',
        b"<!-- generated -->\n<!doctype html>",
        b'<?xml version="1.0"?>\n<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0//EN" "x">\n'
        b'<html xmlns="http://www.w3.org/1999/xhtml">',
        b"<body",
        b"<br>",
    ],
)
def test_html_pages(head: bytes) -> None:
    assert looks_like_html(head)


@pytest.mark.parametrize(
    "head",
    [
        b"",
        b"%PDF-1.7\n",
        b"\x89PNG\r\n\x1a\n",
        b'<?xml version="1.0"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">',
        b"<!-- made by hand -->\n<urlset>",
        b"<pdf>",  # an element whose name only starts like a signature
        b"<abbr>",
        b"<!-- a comment that runs past the window " + b"x" * 600,
        b"LIRS,1,2,3,4,http://example.jp/,title,author,source,",
        b"plain text that mentions <html> later",
    ],
)
def test_not_html_pages(head: bytes) -> None:
    assert not looks_like_html(head)


def test_only_the_window_is_looked_at() -> None:
    assert not looks_like_html(b" " * 600 + b"<html>")


@pytest.mark.parametrize(
    ("value", "essence"),
    [
        ("text/html; charset=utf-8", "text/html"),
        (" Application/XHTML+XML ", "application/xhtml+xml"),
        ("", ""),
        (None, ""),
    ],
)
def test_media_type_essence(value: str | None, essence: str) -> None:
    assert media_type(value) == essence


@pytest.mark.parametrize(
    ("listed", "refused"),
    [
        ("application/pdf", "application/pdf"),
        ("text/plain; charset=utf-8", "text/plain"),
        ("image/png", "image/png"),
        (None, ""),
        ("text/html", ""),
        ("application/xhtml+xml", ""),
        ("application/xml", ""),
        ("text/xml", ""),
        ("application/atom+xml", ""),
    ],
)
def test_the_types_an_html_page_cannot_be(listed: str | None, refused: str) -> None:
    assert not_a_page(listed) == refused


@pytest.mark.parametrize(
    ("listed", "uri", "refused"),
    [
        # The list's type when it gives one, whatever the name says.
        ("application/pdf", "http://x/a", ("application/pdf", "the list gives")),
        ("text/html", "http://x/a.pdf", ("", "")),
        ("application/xml", "http://x/a.pdf", ("", "")),
        # No type: the name's, when it is a format an HTML page cannot be.
        (None, "http://x/paper.pdf", ("application/pdf", "its name says")),
        ("", "http://x/bitstream/1/Paper.PDF?sequence=1", ("application/pdf", "its name says")),
        (None, "http://x/data/table.csv#row=2", ("text/csv", "its name says")),
        (None, "http://x/scan.tiff", ("image/tiff", "its name says")),
        (None, "http://x/a", ("", "")),
        (None, "http://x/dir/", ("", "")),
        (None, "http://x/page.html", ("", "")),
        (None, "http://x/view.php?file=a.pdf", ("", "")),
        (None, "http://x/record.xml", ("", "")),
        (None, "http://x/v1.2/", ("", "")),
        (None, "http://x/archive.unknownext", ("", "")),
    ],
)
def test_the_types_an_html_page_cannot_be_for_a_resource(
    listed: str | None, uri: str, refused: tuple[str, str]
) -> None:
    assert not_a_page_for(listed, uri) == refused


@pytest.mark.parametrize(
    ("essence", "binary"),
    [
        ("application/pdf", True),
        ("image/png", True),
        ("video/mp4", True),
        ("application/zip", True),
        ("application/vnd.openxmlformats-officedocument.wordprocessingml.document", True),
        ("image/svg+xml", False),
        ("text/plain", False),
        ("text/csv", False),
        ("application/json", False),
        ("application/octet-stream", False),
        ("application/vnd.api+json", False),
        ("", False),
    ],
)
def test_binary_types(essence: str, binary: bool) -> None:
    assert binary_type(essence) is binary
