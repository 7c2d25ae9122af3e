"""Hostile Sources (issue 17.1–17.3, 17.13, 14.3): a body that never ends, a body that
trickles, a compression bomb, a redirect that downgrades to plain http, a host that goes away.
Every server here is bounded in bytes and seconds, so a test that fails fails quickly."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
import threading
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse

from resourcesync.destination.sync import SyncOptions, sync
from resourcesync.errors import ReadError
from resourcesync.http import HttpOptions, RetryPolicy, make_client, origin
from tests.destination.helpers import (
    STATE,
    HandSource,
    cli,
    cli_json,
    entry,
    hand_source,
    set_report,
    state_rows,
    tree,
    urlset,
)
from tests.servers import serve

SET = "capabilitylist.xml"
FAST = ("--timeout", "2", "--retries", "0")
MiB = 1 << 20


class Endless:
    """A body that goes on (up to `cap` bytes, so a failing test ends), counting what the
    server managed to hand to the network."""

    def __init__(self, piece: bytes = b"x" * (64 << 10), cap: int = 64 * MiB, pause: float = 0):
        self.piece, self.cap, self.pause, self.sent = piece, cap, pause, 0

    async def body(self, request: Request) -> AsyncIterator[bytes]:
        while self.sent < self.cap:
            if self.pause:
                await asyncio.sleep(self.pause)
            if await request.is_disconnected():
                return  # the client gave up (the server would write into the void)
            self.sent += len(self.piece)
            yield self.piece

    def handler(self, head: bytes = b"", media_type: str = "application/octet-stream") -> Any:
        async def handle(request: Request) -> Response:
            async def gen() -> AsyncIterator[bytes]:
                if head:
                    yield head
                async for piece in self.body(request):
                    yield piece

            return StreamingResponse(gen(), media_type=media_type)

        return handle


def files_under(root: Path) -> dict[str, int]:
    """Every file under `root` (the state folder included) with its size."""
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def problems(summary: dict[str, Any]) -> list[str]:
    return [p["message"] for p in set_report(summary, SET)["problems"]]


# ---------------------------------------------------------------------------------------------
# 17.1: sizes


def test_a_body_that_never_ends_is_abandoned_at_max_size(tmp_path: Path) -> None:
    """No Content-Length, no length in the list: the body stops at --max-size, nothing
    partial is left, the run says why and exits 1."""
    dest = tmp_path / "dest"
    endless = Endless()
    with hand_source() as src:
        b = src.base
        src.handlers["/endless.bin"] = endless.handler()
        src.files["/ok.txt"] = b"fine"
        src.publish([{"loc": b + "/endless.bin"}, entry(b, "/ok.txt", b"fine")])
        code, summary = cli_json("sync", b + "/", dest, "--max-size", "1M", *FAST)
    assert code == 1
    assert any("--max-size" in m for m in problems(summary)), problems(summary)
    assert not (dest / "endless.bin").exists()
    assert (dest / "ok.txt").read_bytes() == b"fine"
    assert not [p for p in files_under(dest) if p.endswith(".part")]
    # The transfer was given up soon after the limit, not at the end of the 64 MiB.
    assert endless.sent < 32 * MiB


def test_an_endless_update_keeps_the_previous_copy(tmp_path: Path) -> None:
    """A resource held, then changed at the Source into a body that never ends: abandoned
    at --max-size, and the copy we held stays in place, whole."""
    dest = tmp_path / "dest"
    endless = Endless()
    with hand_source() as src:
        b = src.base
        src.files["/a.bin"] = b"version 1"
        src.publish([{"loc": b + "/a.bin"}])
        code, _ = cli_json("sync", b + "/", dest, *FAST)
        assert code == 0
        del src.files["/a.bin"]
        src.handlers["/a.bin"] = endless.handler()
        src.publish([{"loc": b + "/a.bin", "md5": "0" * 32}], at="2024-02-01T00:00:00Z")
        code, summary = cli_json("sync", b + "/", dest, "--baseline", "--max-size", "1M", *FAST)
    assert code == 1
    assert any("--max-size" in m for m in problems(summary)), problems(summary)
    assert (dest / "a.bin").read_bytes() == b"version 1"
    assert not [p for p in files_under(dest) if p.endswith(".part")]
    assert endless.sent < 32 * MiB


def test_an_endless_dump_package_is_abandoned_at_its_declared_length(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    endless = Endless()
    with hand_source() as src:
        b = src.base
        src.handlers["/dump/part1.zip"] = endless.handler()
        src.docs["/resourcedump.xml"] = urlset(
            "resourcedump",
            [{"loc": b + "/dump/part1.zip", "length": 4096}],
            at="2024-01-01T00:00:00Z",
        )
        # A resource to take from the dump (the package is downloaded only when it may hold
        # something the lists ask for).
        src.publish(
            [entry(b, "/a.txt", b"a")],
            extra_caps=[{"loc": b + "/resourcedump.xml", "capability": "resourcedump"}],
        )
        result = cli("sync", b + "/", dest, "--via", "dumps", *FAST)
    assert result.exit_code == 2, result.output
    assert "more than the 4096 bytes declared" in result.stderr, result.stderr
    assert endless.sent < 32 * MiB
    assert not list((dest / STATE).glob("dump-*"))


def test_a_document_that_never_ends_is_abandoned_at_max_document_size(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    endless = Endless(piece=b"<!--" + b"x" * 65000 + b"-->")
    with hand_source() as src:
        b = src.base
        src.publish([])
        head = urlset("resourcelist", [], at="2024-01-01T00:00:00Z").split(b"</urlset>")[0]
        src.handlers["/resourcelist.xml"] = endless.handler(head, "application/xml")
        result = cli("sync", b + "/", dest, "--max-document-size", "1M", *FAST)
    assert result.exit_code == 2 and "--max-document-size" in result.stderr, result.output
    assert endless.sent < 32 * MiB


# ---------------------------------------------------------------------------------------------
# 17.2: time


def _library_sync(src: HandSource, dest: Path, **http: Any) -> Any:
    options = SyncOptions(http=HttpOptions(timeout=5, retry=RetryPolicy(retries=0), **http))
    return sync(src.base + "/", dest, options)


@pytest.mark.parametrize(
    ("limits", "option"),
    [
        ({"deadline": 1.0, "min_rate": 0}, "--deadline"),
        ({"min_rate": 1000, "rate_window": 0.5}, "--min-rate"),
    ],
)
def test_a_trickling_resource_is_abandoned(
    tmp_path: Path, limits: dict[str, float], option: str
) -> None:
    """One byte every 20 ms keeps every read within --timeout; the deadline, or the minimum
    rate, ends it."""
    trickle = Endless(piece=b"x", cap=400, pause=0.02)  # 8 s if nothing stops it
    with hand_source() as src:
        b = src.base
        src.handlers["/slow.bin"] = trickle.handler()
        src.publish([{"loc": b + "/slow.bin"}])
        report = _library_sync(src, tmp_path / "dest", **limits)
    (s,) = report.sets
    assert s.failed == 1
    assert any(option in p.message for p in s.problems), s.problems
    assert trickle.sent < 400
    assert not (tmp_path / "dest" / "slow.bin").exists()


def test_a_trickling_resource_list_is_abandoned_at_the_deadline(tmp_path: Path) -> None:
    trickle = Endless(piece=b" ", cap=400, pause=0.02)
    with hand_source() as src:
        src.publish([])
        body = urlset("resourcelist", [], at="2024-01-01T00:00:00Z")
        head, tail = body.split(b"</urlset>")

        async def handle(request: Request) -> Response:
            async def gen() -> AsyncIterator[bytes]:
                yield head
                async for piece in trickle.body(request):
                    yield piece
                yield b"</urlset>" + tail

            return StreamingResponse(gen(), media_type="application/xml")

        src.handlers["/resourcelist.xml"] = handle
        with pytest.raises(Exception, match="--deadline"):
            _library_sync(src, tmp_path / "dest", deadline=1.0, min_rate=0)
    assert trickle.sent < 400


@contextlib.contextmanager
def trickling_headers() -> Iterator[tuple[str, list[int]]]:
    """A raw socket server that sends its status line and headers a byte every 20 ms (400
    bytes at most); yields its base URL and the count of bytes sent."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    sent = [0]

    def trickle() -> None:
        listener.settimeout(10)
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with conn:
                for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 400:
                    if stop.is_set():
                        return
                    conn.sendall(bytes([byte]))
                    sent[0] += 1
                    time.sleep(0.02)

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", sent
    finally:
        stop.set()
        thread.join(10)
        listener.close()


def test_headers_that_trickle_are_abandoned_at_the_deadline(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with trickling_headers() as (slow, sent), hand_source() as src:
        src.publish([{"loc": f"{slow}/slow.bin"}])
        options = SyncOptions(
            http=HttpOptions(timeout=5, retry=RetryPolicy(retries=0), deadline=1.0, min_rate=0),
            mappings=[(f"{slow}/", dest)],
        )
        report = sync(src.base + "/", dest, options)
    (s,) = report.sets
    assert s.failed == 1
    assert any("--deadline" in p.message for p in s.problems), s.problems
    assert sent[0] < 400


def test_a_resource_list_whose_headers_trickle_is_abandoned_at_the_deadline(
    tmp_path: Path,
) -> None:
    """The same on a document (read synchronously): abandoned, and not tried again."""
    with trickling_headers() as (slow, sent), hand_source() as src:
        src.publish([])
        src.docs["/capabilitylist.xml"] = urlset(
            "capabilitylist", [{"loc": f"{slow}/resourcelist.xml", "capability": "resourcelist"}]
        )
        options = SyncOptions(
            http=HttpOptions(timeout=5, retry=RetryPolicy(retries=3), deadline=1.0, min_rate=0)
        )
        with pytest.raises(ReadError, match="--deadline"):
            sync(src.base + "/", tmp_path / "dest", options)
    assert sent[0] < 400


# ---------------------------------------------------------------------------------------------
# 17.3: compression bombs


def _bomb(coding: str, size: int) -> bytes:
    zeros = b"\0" * size
    if coding == "gzip":
        return gzip.compress(zeros, 9)
    return zlib.compress(zeros, 9)


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
@pytest.mark.parametrize("declared", [True, False])
def test_a_compression_bomb_costs_a_bounded_amount_of_memory(
    tmp_path: Path, coding: str, declared: bool
) -> None:
    """64 MiB of zeros in 64 KiB, sent with Content-Encoding: the resource is listed as 4
    bytes (or not at all, with --max-size 1 MiB): refused, and the memory it cost is a few
    pieces of the body, never the bomb's expanded size."""
    bomb = _bomb(coding, 64 * MiB)

    async def handle(request: Request) -> Response:
        return Response(bomb, headers={"Content-Encoding": coding})

    with hand_source() as src:
        b = src.base
        src.handlers["/bomb.txt"] = handle
        src.publish([{"loc": b + "/bomb.txt", **({"length": 4} if declared else {})}])
        options = SyncOptions(http=HttpOptions(retry=RetryPolicy(retries=0), max_size=MiB))
        tracemalloc.start()
        try:
            report = sync(b + "/", tmp_path / "dest", options)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    (s,) = report.sets
    assert s.failed == 1, s
    assert peak < 16 * MiB, peak
    assert not (tmp_path / "dest" / "bomb.txt").exists()


def test_a_double_gzip_bomb_in_a_document_is_refused(tmp_path: Path) -> None:
    """`Content-Encoding: gzip, gzip`: each layer is inflated in bounded pieces."""
    inner = gzip.compress(b" " * (128 * MiB), 9)
    bomb = gzip.compress(inner, 9)

    async def handle(request: Request) -> Response:
        return Response(
            bomb, media_type="application/xml", headers={"Content-Encoding": "gzip, gzip"}
        )

    with hand_source() as src:
        src.publish([])
        src.handlers["/resourcelist.xml"] = handle
        options = SyncOptions(http=HttpOptions(retry=RetryPolicy(retries=0), max_document_size=MiB))
        tracemalloc.start()
        try:
            with pytest.raises(Exception, match="--max-document-size"):
                sync(src.base + "/", tmp_path / "dest", options)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 16 * MiB, peak


def test_gzip_and_deflate_bodies_are_still_decoded(tmp_path: Path) -> None:
    body = b"hello, " * 1000

    with hand_source() as src:
        b = src.base
        src.handlers["/g.txt"] = _coded("gzip", gzip.compress(body))
        src.handlers["/z.txt"] = _coded("deflate", zlib.compress(body))
        raw = zlib.compressobj(wbits=-15)
        src.handlers["/r.txt"] = _coded("deflate", raw.compress(body) + raw.flush())
        src.publish([entry(b, f"/{n}.txt", body) for n in "gzr"])
        code, summary = cli_json("sync", b + "/", tmp_path / "dest", *FAST)
    assert code == 0, summary
    for n in "gzr":
        assert (tmp_path / "dest" / f"{n}.txt").read_bytes() == body


def _coded(coding: str, data: bytes) -> Any:
    async def handle(request: Request) -> Response:
        return Response(data, headers={"Content-Encoding": coding})

    return handle


def test_a_coded_body_cut_short_is_a_failed_transfer_not_a_shorter_file(tmp_path: Path) -> None:
    """A body whose content coding ends before the stream does (half a gzip stream, a gzip
    stream without its trailer and CRC, a zlib stream without its checksum), sent whole as far
    as HTTP can tell (its Content-Length), from a list that gives neither length nor digest:
    each is a failed transfer, said and retried. Before, each was written cut short (or
    unchecked) and the run said ok."""
    body = b"".join(b"line %d of a resource\n" % i for i in range(4000))
    whole = gzip.compress(body)
    with hand_source() as src:
        b = src.base
        src.handlers["/half.txt"] = _coded("gzip", whole[: len(whole) // 2])
        src.handlers["/no-trailer.txt"] = _coded("gzip", whole[:-8])
        src.handlers["/no-checksum.txt"] = _coded("deflate", zlib.compress(body)[:-4])
        src.handlers["/after-end.txt"] = _coded("gzip", whole + b"GARBAGE")
        src.handlers["/whole.txt"] = _coded("gzip", whole)
        names = ("half", "no-trailer", "no-checksum", "after-end", "whole")
        src.publish([{"loc": f"{b}/{n}.txt"} for n in names])
        code, summary = cli_json("sync", b + "/", tmp_path / "dest", *FAST)
    assert code == 1, summary
    report = set_report(summary, SET)
    assert (report["fetched"], report["failed"]) == (1, 4), report
    said = "\n".join(problems(summary))
    assert said.count("is cut short: its coding does not end") == 3, said
    assert "data after the end of the gzip body" in said
    assert tree(tmp_path / "dest") == {"whole.txt": body}


def test_a_success_that_does_not_carry_the_whole_resource_is_not_written(
    tmp_path: Path,
) -> None:
    """204 No Content, 205 Reset Content, 206 Partial Content (a part nobody asked for: no
    request of ours sends Range), to a GET of a resource listed without length or digest:
    each a failed transfer, nothing written. Before, an empty file, an empty file and the
    part were written, and the run said ok. A 204 for a resource the list says is empty is
    that resource (it was refused as well)."""

    def answer(status: int, body: bytes = b"", **headers: str) -> Any:
        async def handle(request: Request) -> Response:
            return Response(body, status_code=status, headers=headers)

        return handle

    with hand_source() as src:
        b = src.base
        src.handlers["/none.txt"] = answer(204)
        src.handlers["/reset.txt"] = answer(205)
        src.handlers["/part.txt"] = answer(206, b"part", **{"Content-Range": "bytes 0-3/100"})
        src.handlers["/whole.txt"] = answer(203, b"the whole resource")
        src.handlers["/empty.txt"] = answer(204)
        src.handlers["/empty-digest.txt"] = answer(204)
        src.publish(
            [{"loc": f"{b}/{n}.txt"} for n in ("none", "reset", "part", "whole")]
            + [{"loc": f"{b}/empty.txt", "length": 0}, entry(b, "/empty-digest.txt", b"")]
        )
        code, summary = cli_json("sync", b + "/", tmp_path / "dest", *FAST)
    assert code == 1, summary
    said = "\n".join(problems(summary))
    assert "HTTP 204 No Content: the answer carries no content" in said, said
    assert "HTTP 205 Reset Content: the answer carries no content" in said, said
    assert (
        "HTTP 206 Partial Content: only a part of the resource, which was not asked for "
        "(Content-Range: bytes 0-3/100)"
    ) in said, said
    assert len(problems(summary)) == 3, said
    assert tree(tmp_path / "dest") == {
        "whole.txt": b"the whole resource",
        "empty.txt": b"",
        "empty-digest.txt": b"",
    }


SIGN_IN = (
    b"\n<!DOCTYPE html>\n<html lang=en><head><title>Sign in</title></head>"
    b"<body><form method=post action=/login><input name=user></form></body></html>\n"
)
XHTML_ERROR = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 '
    b'Strict//EN" "http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd">\n'
    b'<html xmlns="http://www.w3.org/1999/xhtml"><body>Internal error</body></html>'
)
PDF = b"%PDF-1.7\n" + b"<< /Type /Catalog >>\n" * 200 + b"%%EOF\n"


def test_an_html_page_is_not_taken_for_a_resource_listed_with_another_type(
    tmp_path: Path,
) -> None:
    """A repository behind a sign-in answers a request for a PDF with 200 and its sign-in
    page (after a redirect, or at once; an XHTML error page too): without a digest in the list,
    the page was written as the PDF and the run said ok. Now a failed transfer naming it, and
    the good copy from an earlier run stays; the same for an answer with no Content-Type.
    A page labelled as the binary format the list gives (`application/pdf`) is refused too.
    Not refused: a text file holding HTML source served as text/plain, a PDF from a server
    that labels everything text/html, a page the list gives as HTML, as XML (XHTML is) or
    with no type, and an answer its digest vouches for."""
    state = {"paper": PDF}

    def page(body: bytes, ctype: str = "text/html; charset=utf-8") -> Any:
        async def handle(request: Request) -> Response:
            return Response(body, headers={"Content-Type": ctype})

        return handle

    async def paper(request: Request) -> Response:
        ctype = "application/pdf" if state["paper"] == PDF else "text/html"
        return Response(state["paper"], headers={"Content-Type": ctype})

    async def moved(request: Request) -> Response:
        return RedirectResponse("/login?next=/moved.pdf", status_code=302)

    async def unlabelled(request: Request) -> Response:
        response = Response(SIGN_IN)
        del response.headers["content-type"]
        return response

    async def source_code(request: Request) -> Response:
        return Response(SIGN_IN, headers={"Content-Type": "text/plain"})

    pdf = {"type": "application/pdf"}
    with hand_source() as src:
        b = src.base
        src.handlers["/paper.pdf"] = paper
        src.handlers["/moved.pdf"] = moved
        src.handlers["/login"] = page(SIGN_IN)
        src.handlers["/error.pdf"] = page(XHTML_ERROR, "application/xhtml+xml")
        src.handlers["/scripted.pdf"] = page(PDF)
        src.handlers["/page.html"] = page(SIGN_IN)
        src.handlers["/untyped"] = page(SIGN_IN)
        src.handlers["/vouched.pdf"] = page(SIGN_IN)
        src.handlers["/export.xml"] = page(XHTML_ERROR)
        src.handlers["/unlabelled.pdf"] = unlabelled
        src.handlers["/sign-in.txt"] = source_code
        src.handlers["/named.pdf"] = page(SIGN_IN)
        src.handlers["/labelled.pdf"] = page(SIGN_IN, "application/pdf")
        src.handlers["/labelled.png"] = page(SIGN_IN, "text/plain")
        src.handlers["/view.php"] = page(SIGN_IN)
        src.publish([{"loc": f"{b}/paper.pdf", "lastmod": "2024-01-01T00:00:00Z", **pdf}])
        code, summary = cli_json("sync", b + "/", tmp_path / "dest", *FAST)
        assert code == 0, summary
        state["paper"] = SIGN_IN
        src.publish(
            [
                {"loc": f"{b}/paper.pdf", "lastmod": "2024-02-01T00:00:00Z", **pdf},
                {"loc": f"{b}/moved.pdf", **pdf},
                {"loc": f"{b}/error.pdf", **pdf},
                {"loc": f"{b}/scripted.pdf", **pdf},
                {"loc": f"{b}/page.html", "type": "text/html"},
                {"loc": f"{b}/untyped"},
                entry(b, "/vouched.pdf", SIGN_IN, **pdf),
                {"loc": f"{b}/export.xml", "type": "application/xml"},
                {"loc": f"{b}/unlabelled.pdf", **pdf},
                {"loc": f"{b}/sign-in.txt", "type": "text/plain"},
                {"loc": f"{b}/named.pdf"},
                {"loc": f"{b}/view.php"},
                {"loc": f"{b}/labelled.pdf", **pdf},
                {"loc": f"{b}/labelled.png", "type": "image/png"},
            ]
        )
        code, summary = cli_json("sync", b + "/", tmp_path / "dest", "--baseline", *FAST)
    assert code == 1, summary
    said = problems(summary)
    refused = "an HTML page came where the list gives application/pdf: a sign-in or error page"
    assert sum(refused in p for p in said) == 5, said
    # A page labelled as the binary format asked for (a server that labels by the name).
    assert sum("where the list gives image/png: a sign-in" in p for p in said) == 1, said
    # No type in the list, and a name that says one (a PDF's): refused all the same.
    named = "an HTML page came where its name says application/pdf: a sign-in or error page"
    assert sum(named in p for p in said) == 1, said
    assert tree(tmp_path / "dest") == {
        "paper.pdf": PDF,
        "scripted.pdf": PDF,
        "page.html": SIGN_IN,
        "untyped": SIGN_IN,
        "vouched.pdf": SIGN_IN,
        "export.xml": XHTML_ERROR,
        "sign-in.txt": SIGN_IN,
        "view.php": SIGN_IN,
    }


def test_a_failed_transfer_is_asked_for_again_as_listed(tmp_path: Path) -> None:
    """A failure is retried by the next run from what the failed run remembered of the entry:
    its length and digests only. The retry of a PDF refused as a sign-in page had lost the
    type, so the next run, with nothing changed at the Source, took the page and said ok; and a
    retry that succeeded recorded the copy without its `<lastmod>` (`audit`: different). Now
    the entry is remembered whole: the page is refused again, the PDF taken when it comes, and
    the copy is in sync."""
    dest = tmp_path / "dest"
    served = {"body": SIGN_IN}

    async def paper(request: Request) -> Response:
        html = served["body"] == SIGN_IN
        return Response(
            served["body"], headers={"Content-Type": "text/html" if html else "application/pdf"}
        )

    with hand_source() as src:
        b = src.base
        src.handlers["/paper.pdf"] = paper
        listed = {"loc": f"{b}/paper.pdf", "lastmod": "2024-01-01T00:00:00Z"}
        src.publish([{**listed, "type": "application/pdf"}])
        refused = "an HTML page came where the list gives application/pdf"
        for _ in range(2):  # the first run, then a retry with nothing changed at the Source
            code, summary = cli_json("sync", b + "/", dest, *FAST)
            assert code == 1 and any(refused in p for p in problems(summary)), summary
            assert tree(dest) == {}
        served["body"] = PDF
        code, summary = cli_json("sync", b + "/", dest, *FAST)
        assert code == 0, summary
        assert tree(dest) == {"paper.pdf": PDF}
        assert cli("audit", b + "/", dest).exit_code == 0


def test_an_empty_answer_is_not_taken_for_a_file_of_a_binary_format(tmp_path: Path) -> None:
    """A script that fails after sending its headers answers `200` and nothing; for a PDF the
    list gives no length or digest for, the empty file was written and the run said ok. No PDF,
    image or archive is empty: a failed transfer now, the good copy kept; `audit` calls such
    an empty file held different. An empty text file is a text file; a PDF the list says is
    empty (`length="0"`) is what the Source says."""
    dest = tmp_path / "dest"
    served = {"body": PDF}

    async def paper(request: Request) -> Response:
        return Response(served["body"], headers={"Content-Type": "application/pdf"})

    with hand_source() as src:
        b = src.base
        src.handlers["/paper.pdf"] = paper
        src.handlers["/scan.png"] = _coded("identity", b"")
        src.files["/empty.txt"] = b""
        src.files["/said-empty.pdf"] = b""
        listed = [
            {"loc": f"{b}/paper.pdf", "lastmod": "2024-01-01T00:00:00Z"},
            {"loc": f"{b}/empty.txt"},
            {"loc": f"{b}/said-empty.pdf", "length": 0},
        ]
        src.publish(listed)
        assert cli("sync", b + "/", dest, *FAST).exit_code == 0
        served["body"] = b""
        listed[0]["lastmod"] = "2024-02-01T00:00:00Z"
        src.publish([*listed, {"loc": f"{b}/scan.png", "type": "image/png"}])
        code, summary = cli_json("sync", b + "/", dest, "--baseline", *FAST)
        assert code == 1, summary
        said = problems(summary)
        empty = "an empty answer where {}: no such file is empty"
        assert sum(empty.format("its name says application/pdf") in p for p in said) == 1
        assert sum(empty.format("the list gives image/png") in p for p in said) == 1, said
        assert tree(dest) == {"paper.pdf": PDF, "empty.txt": b"", "said-empty.pdf": b""}
        served["body"] = PDF
        src.publish(listed)
        assert cli("sync", b + "/", dest, "--baseline", *FAST).exit_code == 0
        assert cli("audit", b + "/", dest).exit_code == 0
        (dest / "paper.pdf").write_bytes(b"")  # as another tool would have left it
        code, summary = cli_json("audit", b + "/", dest)
        assert code == 1 and summary["examples"]["different"] == [f"{b}/paper.pdf"], summary


def test_audit_finds_an_html_page_held_for_a_resource_listed_with_another_type(
    tmp_path: Path,
) -> None:
    """A copy made by another tool (or before the transfer checked) holds the sign-in page
    where the list gives a PDF without a digest: `audit` called it in sync (the length is not
    listed, the file is there). Now different; a real PDF, an HTML page listed as HTML, an
    untyped entry and a text file that holds HTML source (as the transfer takes one labelled
    text/plain) are in sync."""
    dest = tmp_path / "dest"
    dest.mkdir()
    for name, body in [
        ("signed-out.pdf", SIGN_IN),
        ("error.pdf", XHTML_ERROR),
        ("paper.pdf", PDF),
        ("page.html", SIGN_IN),
        ("untyped", SIGN_IN),
        ("named.pdf", SIGN_IN),
        ("notes.txt", SIGN_IN),
    ]:
        (dest / name).write_bytes(body)
    pdf = {"type": "application/pdf"}
    with hand_source() as src:
        b = src.base
        src.publish(
            [
                {"loc": f"{b}/signed-out.pdf", **pdf},
                {"loc": f"{b}/error.pdf", "type": "application/pdf; version=1.7"},
                {"loc": f"{b}/paper.pdf", **pdf},
                {"loc": f"{b}/page.html", "type": "text/html"},
                {"loc": f"{b}/untyped"},
                {"loc": f"{b}/named.pdf"},
                {"loc": f"{b}/notes.txt", "type": "text/plain"},
            ]
        )
        code, summary = cli_json("audit", b + "/", dest)
    assert code == 1, summary
    assert (summary["in_sync"], summary["different"]) == (4, 3), summary
    assert sorted(summary["examples"]["different"]) == [
        f"{b}/error.pdf",
        f"{b}/named.pdf",
        f"{b}/signed-out.pdf",
    ]


def test_a_gzip_file_served_with_its_compression_as_a_coding_is_kept_as_the_file(
    tmp_path: Path,
) -> None:
    """A server that labels a `.gz` file's compression as a content coding (Apache's
    `AddEncoding x-gzip .gz`): the body is the file the Source lists, kept as it came — by
    its name (`.gz`, `.tgz`, `.svgz`, `.emz`, `.wmz`) or by its media type — as wget's
    "broken server workaround" keeps it. Before, the uncompressed bytes were written under
    the `.gz` name (and the run said ok when the list gave no digest; with one, every run
    failed). A coded body that is not a gzip file is still decoded."""
    table = b"".join(b"%d,row %d\n" % (i, i) for i in range(2000))
    packed = gzip.compress(table)

    def served(ctype: str, coding: str = "x-gzip") -> Any:
        async def handle(request: Request) -> Response:
            return Response(packed, headers={"Content-Encoding": coding, "Content-Type": ctype})

        return handle

    with hand_source() as src:
        b = src.base
        src.handlers["/table.csv.gz"] = served("text/csv")
        src.handlers["/archive.tgz"] = served("application/x-tar", "gzip")
        src.handlers["/download"] = served("application/gzip", "gzip")
        src.handlers["/listed.csv.gz"] = served("text/csv")
        src.handlers["/table.csv"] = served("text/csv", "gzip")
        src.handlers["/drawing.svgz"] = served("image/svg+xml", "gzip")
        src.handlers["/figure.emz"] = served("image/x-emf", "gzip")
        src.handlers["/figure.WMZ"] = served("application/x-msmetafile", "gzip")
        src.publish(
            [
                {"loc": f"{b}/table.csv.gz"},
                {"loc": f"{b}/archive.tgz"},
                {"loc": f"{b}/download"},
                entry(b, "/listed.csv.gz", packed),
                {"loc": f"{b}/table.csv"},
                {"loc": f"{b}/drawing.svgz"},
                {"loc": f"{b}/figure.emz"},
                {"loc": f"{b}/figure.WMZ"},
            ]
        )
        code, summary = cli_json("sync", b + "/", tmp_path / "dest", *FAST)
    assert code == 0, summary
    assert tree(tmp_path / "dest") == {
        "table.csv.gz": packed,
        "archive.tgz": packed,
        "download": packed,
        "listed.csv.gz": packed,
        "table.csv": table,
        "drawing.svgz": packed,
        "figure.emz": packed,
        "figure.WMZ": packed,
    }


def test_a_resource_the_list_gives_a_content_coding_is_kept_as_it_came(tmp_path: Path) -> None:
    """`rs:md encoding` says what content codings the Source's answer carries, and its
    `length` and `hash` are then those of the coded bytes, as `Content-Length` (core §7). Such
    an answer was decoded, and a Source that followed the spec failed on every run ("more than
    the expected 46 bytes arrived"). Now kept as it came, checked against the list, and `audit`
    finds it in sync; a coding we never decode (`br`) is asked for when the list gives it.
    Without `encoding` in the list, a coded answer is decoded as before."""
    table = b"".join(b"%d,row %d\n" % (i, i) for i in range(2000))
    packed = gzip.compress(table)
    squeezed = b"\x1b\x03not really brotli, never decoded"

    async def br_when_asked(request: Request) -> Response:
        if "br" in request.headers.get("accept-encoding", ""):
            return Response(squeezed, headers={"Content-Encoding": "br"})
        return Response(table)

    with hand_source() as src:
        b = src.base
        src.handlers["/listed.csv"] = _coded("gzip", packed)
        src.handlers["/bare.csv"] = _coded("gzip", packed)
        src.handlers["/squeezed.csv"] = br_when_asked
        src.handlers["/plain.csv"] = _coded("gzip", packed)
        src.publish(
            [
                entry(b, "/listed.csv", packed, encoding="gzip"),
                {"loc": f"{b}/bare.csv", "encoding": "gzip"},
                entry(b, "/squeezed.csv", squeezed, encoding="br"),
                entry(b, "/plain.csv", table),
            ]
        )
        dest = tmp_path / "dest"
        code, summary = cli_json("sync", b + "/", dest, *FAST)
        assert code == 0, summary
        assert tree(dest) == {
            "listed.csv": packed,
            "bare.csv": packed,
            "squeezed.csv": squeezed,
            "plain.csv": table,
        }
        code, summary = cli_json("audit", b + "/", dest)
        assert (code, summary["in_sync"]) == (0, 4), summary


def test_a_gzip_body_of_several_members_is_decoded_whole(tmp_path: Path) -> None:
    """Members one after the other (RFC 1952 §2.2: what `cat a.gz b.gz` makes, and `gzip -d`
    and Python's `gzip` read whole), NUL padding after one: the whole body. Before, the
    first member alone was written, and the run said ok."""
    first, second = b"first member\n" * 500, b"second member\n" * 500
    with hand_source() as src:
        b = src.base
        data = gzip.compress(first) + b"\0" * 4 + gzip.compress(second)
        src.handlers["/two.txt"] = _coded("gzip", data)
        src.publish([{"loc": f"{b}/two.txt"}])
        code, summary = cli_json("sync", b + "/", tmp_path / "dest", *FAST)
    assert code == 0, summary
    assert (tmp_path / "dest" / "two.txt").read_bytes() == first + second


# ---------------------------------------------------------------------------------------------
# 17.13: credentials and the scheme


def test_credentials_given_for_https_never_go_over_plain_http(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Credentials scoped to https://HOST:PORT are not sent to http://HOST:PORT (an https
    Source redirecting to plain http on the same host), and that is said once."""
    seen: list[str | None] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope["headers"])
        seen.append(headers.get(b"authorization", b"").decode() or None)
        await Response(b"ok")(scope, receive, send)

    with serve(app) as base:
        port = int(base.rsplit(":", 1)[1])
        options = HttpOptions(
            scoped_headers={"Authorization": "Bearer s3cret"},
            scoped_hosts=frozenset({origin("https", "127.0.0.1", port)}),
        )
        with make_client(options) as client, caplog.at_level("WARNING"):
            client.get(base + "/a")
            client.get(base + "/b")
    assert seen == [None, None]
    said = [r for r in caplog.records if "plain http" in r.getMessage()]
    assert len(said) == 1


def test_origins_differ_by_scheme() -> None:
    assert origin("https", "Example.org", 443) == "https://example.org"
    assert origin("http", "example.org", 80) == "http://example.org"
    assert origin("https", "example.org", None) != origin("http", "example.org", None)


# ---------------------------------------------------------------------------------------------
# 14.3: a host that goes away


def _closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


def test_a_host_that_refuses_connections_is_given_up(tmp_path: Path) -> None:
    """60 resources on a host that refuses every connection: after --max-host-failures in a
    row the rest are not tried; all are failed (retried next run), said once, exit 1."""
    dest = tmp_path / "dest"
    dead = f"http://127.0.0.1:{_closed_port()}"
    with hand_source() as src:
        src.files["/ok.txt"] = b"fine"
        res = [{"loc": f"{dead}/r{i:03d}.txt"} for i in range(60)]
        src.publish([entry(src.base, "/ok.txt", b"fine"), *res])
        code, summary = cli_json(
            "sync",
            src.base + "/",
            dest,
            "--map",
            f"{dead}/={dest}",
            "--max-host-failures",
            "3",
            "--transfers",
            "1",
            *FAST,
        )
    assert code == 1
    s = set_report(summary, SET)
    assert s["failed"] == 60 and s["fetched"] == 1
    given_up = [m for m in problems(summary) if "given up" in m]
    assert len(given_up) == 1 and "57 more" in given_up[0], problems(summary)
    # Per-resource failures are the three attempts that tripped it, not 60.
    assert sum("request failed" in m for m in problems(summary)) == 3
    assert len(state_rows(dest, "failed")) == 60


def test_numbers_in_headers_are_ascii_digits_or_nothing(tmp_path: Path) -> None:
    """`str.isdigit` takes `²`, which `int` and `float` refuse: a Source answering 503 with
    `Retry-After: ²` stopped `sync` with a Python error. A header's number is ASCII digits or
    it is not one (the delay is then the policy's own); the same for a server's `Range`, the
    hub's and the subscriber's leases, the antenna's `Content-Length`."""
    from resourcesync.http import retry_after_seconds
    from resourcesync.source.server import parse_ranges

    assert retry_after_seconds("120") == 120.0
    assert retry_after_seconds("²") is None and retry_after_seconds("١٢") is None
    assert retry_after_seconds("9" * 5000) is None  # (int() refuses past 4,300 digits)
    assert parse_ranges("bytes=0-9", 20) == [(0, 10)]
    assert parse_ranges("bytes=0-" + "9" * 30, 20) == [(0, 20)]
    for bad in ("bytes=²-", "bytes=-²", "bytes=0-²", "bytes=١-٢", "bytes=0-" + "9" * 5000):
        assert parse_ranges(bad, 20) is None, bad
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        asked: list[str] = []

        async def busy_once(request: Request) -> Response:
            asked.append(request.url.path)
            if len(asked) == 1:
                # Starlette writes header values as Latin-1: these two bytes are `²` in UTF-8.
                return Response(b"", status_code=503, headers={"Retry-After": "\xc2\xb2"})
            return Response(b"a")

        src.handlers["/a.txt"] = busy_once
        src.publish([entry(b, "/a.txt", b"a")])
        code, summary = cli_json("sync", b, dest)
        assert code == 0, summary
        assert (dest / "a.txt").read_bytes() == b"a" and len(asked) == 2
