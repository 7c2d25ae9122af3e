"""The Destination against Sources that misbehave: 500s, hangs, bodies cut short, lying
lengths and digests, redirect loops, hostile URIs, hostile dump packages, and a sync killed
with SIGKILL half way.

The servers are Starlette apps on 127.0.0.1 (tests/destination/helpers.py `HandSource`), and,
for what an ASGI server refuses to send (a body longer than its Content-Length), a raw socket
server. What must hold throughout: nothing is written outside DEST, no good file is replaced by
a bad one, and every problem is reported with its URI.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from resourcesync.destination.sync import SyncOptions, sync
from resourcesync.http import HttpOptions, RetryPolicy
from tests.destination.helpers import (
    HandSource,
    cli,
    cli_json,
    entry,
    hand_source,
    md5,
    published_source,
    set_report,
    snapshot,
    state_rows,
    tree,
    urlset,
)
from tests.servers import read_head

SET = "capabilitylist.xml"  # the name of a HandSource's one set (its Capability List's file)
FAST = ("--timeout", "1", "--retries", "1")
WIDE = ("--transfers", "32", "--per-host", "32")


def problems(summary: dict[str, Any]) -> dict[str, str]:
    return {p["uri"]: p["message"] for p in set_report(summary, SET)["problems"]}


def outside(snap: dict[str, Any], dest: Path) -> dict[str, Any]:
    """The part of a snapshot that is not DEST or under it."""
    d = str(dest)
    return {k: v for k, v in snap.items() if k != d and not k.startswith(d + os.sep)}


def no_part_files(dest: Path) -> bool:
    return not [p for p in dest.rglob("*.part")]


def baseline_then_v2(src: HandSource, dest: Path, name: str, v1: bytes, v2: bytes) -> None:
    """Sync `name` at v1, then have the Source list v2 (its server may not deliver it)."""
    b = src.base
    src.files["/ok.txt"] = b"ok"
    src.files["/" + name] = v1
    src.publish([entry(b, "/ok.txt", b"ok"), entry(b, "/" + name, v1)])
    assert cli("sync", b + "/", dest).exit_code == 0
    assert (dest / name).read_bytes() == v1
    src.publish([entry(b, "/ok.txt", b"ok"), entry(b, "/" + name, v2)], at="2024-02-01T00:00:00Z")


# ---------------------------------------------------------------------------------------------
# Errors and retries


def test_500s_then_success_are_retried(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        calls = {"n": 0}

        async def flaky(request: Request) -> Response:
            calls["n"] += 1
            if calls["n"] <= 2:
                return PlainTextResponse("busy", status_code=500, headers={"Retry-After": "0"})
            return Response(b"finally")

        src.handlers["/flaky.txt"] = flaky
        src.publish([entry(b, "/flaky.txt", b"finally")])
        code, summary = cli_json("sync", b + "/", dest, "--retries", "2")
        assert code == 0, str(summary)
        assert calls["n"] == 3
        assert tree(dest) == {"flaky.txt": b"finally"}


def test_retries_back_off_without_retry_after(tmp_path: Path) -> None:
    """Through the library, with a small backoff: 503, 503, 200 without Retry-After."""
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        times: list[float] = []

        async def flaky(request: Request) -> Response:
            times.append(time.monotonic())
            if len(times) <= 2:
                return PlainTextResponse("busy", status_code=503)
            return Response(b"x")

        src.handlers["/x.txt"] = flaky
        src.publish([entry(b, "/x.txt", b"x")])
        retry = RetryPolicy(retries=2, backoff=0.1)
        report = sync(b + "/", dest, SyncOptions(http=HttpOptions(timeout=2, retry=retry)))
        assert report.ok, report
        assert len(times) == 3
        assert times[1] - times[0] >= 0.05  # first retry: 0.05–0.1 s
        assert times[2] - times[1] >= 0.1  # second: 0.1–0.2 s


def test_500_forever_is_reported_kept_as_failed_and_retried_later(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base
        broken = {"yes": True}

        async def down(request: Request) -> Response:
            if broken["yes"]:
                return PlainTextResponse("down", status_code=500, headers={"Retry-After": "0"})
            return Response(b"up again")

        src.handlers["/down.txt"] = down
        src.files["/ok.txt"] = b"ok"
        src.publish([entry(b, "/ok.txt", b"ok"), entry(b, "/down.txt", b"up again")])
        code, summary = cli_json("sync", b + "/", dest, "--retries", "2")
        assert code == 1
        assert set_report(summary, SET)["failed"] == 1
        assert "HTTP 500" in problems(summary)[b + "/down.txt"]
        assert src.hits["/down.txt"] == 3
        assert tree(dest) == {"ok.txt": b"ok"}
        assert [r[0] for r in state_rows(dest, "failed")] == [b + "/down.txt"]
        result = cli("sync", b + "/", dest, "--retries", "0")
        assert result.exit_code == 1
        assert f"{b}/down.txt: HTTP 500" in result.stderr  # the text summary names it too
        # The Source recovers; nothing new is listed, yet the next run fetches it.
        broken["yes"] = False
        code, summary = cli_json("sync", b + "/", dest)
        assert code == 0, str(summary)
        assert set_report(summary, SET)["mode"] == "incremental"
        assert tree(dest) == {"ok.txt": b"ok", "down.txt": b"up again"}
        assert state_rows(dest, "failed") == []


def test_a_hanging_server_times_out(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    release = threading.Event()
    with hand_source() as src:
        b = src.base

        async def hang(request: Request) -> Response:
            while not release.is_set():
                await asyncio.sleep(0.05)
            return Response(b"too late")

        src.handlers["/hang.txt"] = hang
        src.files["/ok.txt"] = b"ok"
        src.publish([entry(b, "/ok.txt", b"ok"), entry(b, "/hang.txt", b"too late")])
        started = time.monotonic()
        try:
            code, summary = cli_json("sync", b + "/", dest, "--timeout", "1", "--retries", "0")
        finally:
            release.set()
        assert time.monotonic() - started < 5
        assert code == 1
        assert b + "/hang.txt" in problems(summary)
        assert tree(dest) == {"ok.txt": b"ok"}
        assert no_part_files(dest)


def test_a_body_cut_short_keeps_the_previous_copy(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    v1, v2 = b"version one", bytes(range(256)) * 40
    with hand_source() as src:
        baseline_then_v2(src, dest, "cut.bin", v1, v2)

        async def cut(request: Request) -> Response:
            class Cut(Response):
                async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
                    await send(
                        {
                            "type": "http.response.start",
                            "status": 200,
                            "headers": [(b"content-length", str(len(v2)).encode())],
                        }
                    )
                    await send({"type": "http.response.body", "body": v2[:3000], "more_body": True})
                    # …and the connection closes with the rest unsent.

            return Cut()

        src.handlers["/cut.bin"] = cut
        code, summary = cli_json("sync", src.base + "/", dest, "--baseline", *FAST)
        assert code == 1
        assert src.base + "/cut.bin" in problems(summary)
        assert (dest / "cut.bin").read_bytes() == v1
        assert no_part_files(dest)


class _Raw(socketserver.BaseRequestHandler):
    """HTTP/1.1 by hand: whatever `server.responses[path]` says, byte for byte, then close."""

    def handle(self) -> None:
        head = read_head(self.request)
        if head is None:
            return
        path = head.split(b" ", 2)[1].decode()
        responses: dict[str, bytes] = self.server.responses  # type: ignore[attr-defined]
        self.request.sendall(responses.get(path, b"HTTP/1.1 404 Not Found\r\n\r\n"))
        with contextlib.suppress(OSError):
            self.request.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def raw_server(responses: dict[str, bytes]) -> Iterator[str]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Raw)
    server.daemon_threads = True
    server.responses = responses  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_lying_about_content_length(tmp_path: Path) -> None:
    """Resources on a raw server: one says 5 bytes and sends 10, one says 20 and sends 10."""
    dest = tmp_path / "dest"
    body = b"0123456789"
    responses = {
        "/short.txt": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n" + body,
        "/long.txt": b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n" + body,
        "/ok.txt": b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n" + body,
    }
    with hand_source() as src, raw_server(responses) as raw:
        names = ("short.txt", "long.txt", "ok.txt")
        src.publish([entry(raw, "/" + n, body) for n in names])
        code, summary = cli_json("sync", src.base + "/", dest, "--map", f"{raw}/={dest}", *FAST)
        assert code == 1
        found = problems(summary)
        assert sorted(found) == [raw + "/long.txt", raw + "/short.txt"], found
        assert tree(dest) == {"ok.txt": body}
        assert no_part_files(dest)


def test_bytes_whose_digest_differs_are_retried_once_then_reported(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    v1, v2 = b"good old copy", b"new content!!"
    bad = b"NOT the bytes"
    assert len(bad) == len(v2) and md5(bad) != md5(v2)
    with hand_source() as src:
        baseline_then_v2(src, dest, "h.txt", v1, v2)
        src.files["/h.txt"] = bad
        src.hits.clear()
        code, summary = cli_json("sync", src.base + "/", dest, "--baseline", *FAST)
        assert code == 1
        assert src.hits["/h.txt"] == 2
        message = problems(summary)[src.base + "/h.txt"]
        assert "md5" in message.lower() or "hash" in message.lower() or "digest" in message.lower()
        assert (dest / "h.txt").read_bytes() == v1
        assert no_part_files(dest)
        # Once the Source serves the right bytes, the failure is retried and cleared.
        src.files["/h.txt"] = v2
        code, summary = cli_json("sync", src.base + "/", dest)
        assert code == 0, str(summary)
        assert (dest / "h.txt").read_bytes() == v2


def test_a_redirect_loop_is_reported(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with hand_source() as src:
        b = src.base

        async def loop(request: Request) -> Response:
            return RedirectResponse(b + "/loop-b.txt", status_code=302)

        async def loop_b(request: Request) -> Response:
            return RedirectResponse(b + "/loop.txt", status_code=302)

        src.handlers["/loop.txt"], src.handlers["/loop-b.txt"] = loop, loop_b
        src.files["/ok.txt"] = b"ok"
        src.publish([entry(b, "/ok.txt", b"ok"), entry(b, "/loop.txt", b"never")])
        started = time.monotonic()
        code, summary = cli_json("sync", b + "/", dest, *FAST)
        assert time.monotonic() - started < 10
        assert code == 1
        assert "redirect" in problems(summary)[b + "/loop.txt"]
        assert tree(dest) == {"ok.txt": b"ok"}


# ---------------------------------------------------------------------------------------------
# Hostile URIs and packages


def test_hostile_uris_are_refused_and_nothing_lands_outside_dest(tmp_path: Path) -> None:
    parent = tmp_path / "parent"
    dest = parent / "dest"
    (parent / "victim.txt").parent.mkdir(parents=True)
    (parent / "victim.txt").write_bytes(b"do not touch")
    dest.mkdir()
    with hand_source() as src:
        b = src.base
        hostile = [
            f"{b}/../victim.txt",
            f"{b}/a/../../victim.txt",
            f"{b}/%2e%2e/victim.txt",
            f"{b}/a/%2E%2E/%2e%2e/victim.txt",
            f"{b}/..%2fvictim.txt",
            f"{b}/a%2f..%2f..%2fvictim.txt",
            f"{b}/..\\victim.txt",
            f"{b}/a\\..\\..\\victim.txt",
            f"{b}/nul%00.txt",
            f"{b}/.resourcesync/state.sqlite",
            "http://127.0.0.1:1/elsewhere.txt",
            f"http://localhost:{b.rsplit(':', 1)[1]}/other-host.txt",
            f"{b}/{'n' * 300}.txt",
            f"{b}/" + "/".join(["d" * 200] * 25) + "/deep.txt",
        ]
        body = b"evil"
        for uri in hostile:
            src.files[uri.removeprefix(b)] = body
        src.files["/fine.txt"] = b"fine"
        entries = [entry(b, "/fine.txt", b"fine")]
        entries += [{"loc": u, "length": len(body), "md5": md5(body)} for u in hostile]
        src.publish(entries)
        before = snapshot(parent)
        code, summary = cli_json("sync", b + "/", dest, *FAST)
        assert code == 1
        s = set_report(summary, SET)
        found = problems(summary)
        assert sorted(found) == sorted(hostile), found
        assert all(m.startswith("refused") for m in found.values()), found
        assert s["refused"] == len(hostile)
        assert outside(snapshot(parent), dest) == outside(before, dest)
        assert (parent / "victim.txt").read_bytes() == b"do not touch"
        assert tree(dest) == {"fine.txt": b"fine"}
        # No refused resource was even requested.
        assert set(src.hits) <= {
            "/.well-known/resourcesync",
            "/capabilitylist.xml",
            "/resourcelist.xml",
            "/changelist.xml",
            "/fine.txt",
            "/",
        }

        # Deletions of hostile URIs in a Change List, with --delete: refused too.
        src.publish(
            [entry(b, "/fine.txt", b"fine")],
            changes=[
                {"loc": u, "change": "deleted", "datetime": "2024-01-01T00:00:01Z"}
                for u in hostile[:6]
            ],
        )
        code, summary = cli_json("sync", b + "/", dest, "--delete", *FAST)
        assert code == 1
        # The deletions are refused; the other refused URIs, remembered, are refused again
        # (no run says ok while the copy lacks what the Source lists).
        assert sorted(problems(summary)) == sorted(hostile)
        assert (parent / "victim.txt").read_bytes() == b"do not touch"
        # The deleted ones are forgotten: the next run says only the others again.
        code, summary = cli_json("sync", b + "/", dest, "--delete", *FAST)
        assert code == 1
        assert sorted(problems(summary)) == sorted(hostile[6:])


def _package(members: dict[str, bytes], manifest: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.xml", manifest)
        for name, data in members.items():
            zf.writestr(zipfile.ZipInfo(name), data, compress_type=zipfile.ZIP_DEFLATED)
    return buf.getvalue()


def test_a_hostile_dump_package_extracts_only_what_is_safe(tmp_path: Path) -> None:
    parent = tmp_path / "parent"
    dest = parent / "dest"
    parent.mkdir()
    with hand_source() as src:
        b = src.base
        good, other = b"good bytes", b"other good bytes"
        bomb = b"\0" * (4 << 20)  # 4 MiB of zeros: a compression ratio near 1000
        evil = b"evil"
        manifest_entries = [
            entry(b, "/good.txt", good, path="/res/good.txt"),
            entry(b, "/dir/other.txt", other, path="/res/other.txt"),
            entry(b, "/dotdot.txt", evil, path="/../dotdot.txt"),
            entry(b, "/deeper.txt", evil, path="/res/../../deeper.txt"),
            entry(b, "/absolute.txt", evil, path="//etc/absolute.txt"),
            entry(b, "/bomb.bin", bomb, path="/res/bomb.bin"),
        ]
        manifest = urlset("resourcedump-manifest", manifest_entries, at="2024-01-01T00:00:00Z")
        package = _package(
            {
                "res/good.txt": good,
                "res/other.txt": other,
                "../dotdot.txt": evil,
                "../../deeper.txt": evil,
                "/etc/absolute.txt": evil,
                "res/bomb.bin": bomb,
            },
            manifest,
        )
        src.files["/dump/part1.zip"] = package
        src.docs["/resourcedump.xml"] = urlset(
            "resourcedump",
            [entry(b, "/dump/part1.zip", package)],
            at="2024-01-01T00:00:00Z",
        )
        # The Resource List lists them all: the dump is where their bytes would come from.
        src.publish(
            [{k: v for k, v in e.items() if k != "path"} for e in manifest_entries],
            extra_caps=[{"loc": b + "/resourcedump.xml", "capability": "resourcedump"}],
        )
        before = snapshot(parent)
        code, summary = cli_json("sync", b + "/", dest, "--via", "dumps", *FAST)
        assert code == 1
        s = set_report(summary, SET)
        assert s["via"] == "dumps"
        # Each refused member is reported with its URI and why (the run then also tries the
        # resource by itself, which this Source does not serve: a second problem, 404).
        found = [(p["uri"], p["message"]) for p in s["problems"]]
        why = {
            "/dotdot.txt": "'..' segment",
            "/deeper.txt": "'..' segment",
            "/absolute.txt": "absolute member name",
            "/bomb.bin": "compression ratio",
        }
        for bad, reason in why.items():
            assert any(u == b + bad and reason in m for u, m in found), (bad, found)
        assert tree(dest) == {"good.txt": good, "dir/other.txt": other}
        assert outside(snapshot(parent), dest) == outside(before, dest)
        assert not (tmp_path / "dotdot.txt").exists() and not (tmp_path / "deeper.txt").exists()
        assert no_part_files(dest)
        assert not list((dest / ".resourcesync").glob("dump-*"))  # the download is cleaned up


def test_each_refused_dump_member_is_counted_once(tmp_path: Path) -> None:
    with hand_source() as src:
        b = src.base
        manifest = urlset(
            "resourcedump-manifest",
            [entry(b, "/dotdot.txt", b"evil", path="/../dotdot.txt")],
            at="2024-01-01T00:00:00Z",
        )
        package = _package({"../dotdot.txt": b"evil"}, manifest)
        src.files["/dump/part1.zip"] = package
        src.docs["/resourcedump.xml"] = urlset(
            "resourcedump", [entry(b, "/dump/part1.zip", package)], at="2024-01-01T00:00:00Z"
        )
        src.publish(
            [entry(b, "/dotdot.txt", b"evil")],
            extra_caps=[{"loc": b + "/resourcedump.xml", "capability": "resourcedump"}],
        )
        code, summary = cli_json("sync", b + "/", tmp_path / "dest", "--via", "dumps", *FAST)
        s = set_report(summary, SET)
        assert code == 1
        assert s["failed"] + s["refused"] == 1, str(s)


def test_a_resource_dump_of_resource_dumps_is_followed_not_unpacked(tmp_path: Path) -> None:
    """A Resource Dump written as a urlset whose entries are Resource Dumps (they carry
    `capability="resourcedump"`): followed as an index's parts, their packages used; never
    taken for a package itself (read as one, it was not a ZIP: the dump unusable)."""
    with hand_source() as src:
        b = src.base
        one, two = b"first", b"second"
        packages = {}
        for name, body in (("one", one), ("two", two)):
            manifest = urlset(
                "resourcedump-manifest",
                [entry(b, f"/{name}.txt", body, path=f"/{name}.txt")],
                at="2024-01-01T00:00:00Z",
            )
            packages[name] = _package({f"{name}.txt": body}, manifest)
            src.files[f"/dump/{name}.zip"] = packages[name]
        src.docs["/resourcedump.xml"] = urlset(
            "resourcedump",
            [
                entry(b, "/dump/one.zip", packages["one"]),
                {"loc": f"{b}/dump2.xml", "capability": "resourcedump"},
            ],
            at="2024-01-01T00:00:00Z",
        )
        src.docs["/dump2.xml"] = urlset(
            "resourcedump", [entry(b, "/dump/two.zip", packages["two"])], at="2024-01-01T00:00:00Z"
        )
        src.publish(
            [entry(b, "/one.txt", one), entry(b, "/two.txt", two)],
            extra_caps=[{"loc": b + "/resourcedump.xml", "capability": "resourcedump"}],
        )
        code, summary = cli_json("sync", b + "/", tmp_path / "dest", "--via", "dumps", *FAST)
        s = set_report(summary, SET)
        assert code == 0 and s["via"] == "dumps", summary
        assert tree(tmp_path / "dest") == {"one.txt": one, "two.txt": two}
        assert "/one.txt" not in src.hits and "/two.txt" not in src.hits  # from the packages
        assert src.hits.get("/dump2.xml") == 1


# ---------------------------------------------------------------------------------------------
# kill -9


def _sync_process(root: str, dest: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "resourcesync", "sync", root, str(dest), "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _kill_when(proc: subprocess.Popen[bytes], fetched: Any, at_least: int) -> None:
    deadline = time.monotonic() + 20
    while fetched() < at_least:
        assert proc.poll() is None, "the sync finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def _final(files: dict[str, bytes]) -> dict[str, bytes]:
    """The files at their final names (temporary `.part` files of a killed run left out)."""
    return {k: v for k, v in files.items() if not k.rsplit("/", 1)[-1].endswith(".part")}


def test_kill_9_during_a_sync_then_resume(tmp_path: Path) -> None:
    n = 200
    files = {f"d{i % 7}/f{i:03d}.txt": b"v1 %d " % i * 40 for i in range(n)}
    dest = tmp_path / "dest"
    with published_source(tmp_path, files, delay=0.02) as src:
        # A baseline killed part way.
        proc = _sync_process(src.root, dest)
        _kill_when(proc, lambda: len(src.resource_gets()), 60)
        # A killed run may leave temporary files (`.name.xxxxxxxx.part`, never served, removed by
        # the next run); what matters is that no final name holds a partial file.
        got = _final(tree(dest))
        assert 0 < len(got) < n
        assert all(files[k] == v for k, v in got.items())  # no partial file at a final name
        code, summary = cli_json("sync", src.root, dest, *WIDE)
        assert code == 0, str(summary)
        assert tree(dest) == files
        assert no_part_files(dest)

        # An incremental killed part way: every file is then either its old or its new self.
        new = {k: b"v2 " + v for k, v in files.items()}
        src.write(new)
        src.publish()
        src.recorder.reset()
        proc = _sync_process(src.root, dest)
        _kill_when(proc, lambda: len(src.resource_gets()), 60)
        got = _final(tree(dest))
        assert set(got) == set(files)
        assert all(v in (files[k], new[k]) for k, v in got.items())
        assert 0 < sum(v == new[k] for k, v in got.items()) < n
        # Resume: no change lost.
        code, summary = cli_json("sync", src.root, dest, *WIDE)
        assert code == 0, str(summary)
        assert tree(dest) == new
        assert no_part_files(dest)
        assert cli("audit", src.root, dest).exit_code == 0


def test_what_lies_in_a_new_copy_is_refused_before_any_request(tmp_path: Path) -> None:
    """A first baseline into a DEST that already holds a symlink out of it and a file where
    a directory is needed (its state is empty, so the plan maps URIs without looking at the
    disk): each is refused before it is requested, nothing lands outside, and the refusals
    are remembered (the next run says them again)."""
    parent = tmp_path / "parent"
    dest = parent / "dest"
    (parent / "outside").mkdir(parents=True)
    dest.mkdir()
    (dest / "out").symlink_to(parent / "outside")
    (dest / "plain").write_bytes(b"a file")
    with hand_source() as src:
        b = src.base
        files = {"/ok.txt": b"fine", "/out/evil.txt": b"evil", "/plain/x.txt": b"x"}
        src.files.update(files)
        src.publish([entry(b, rel, body) for rel, body in files.items()])
        for _ in range(2):
            code, summary = cli_json("sync", b + "/", dest, *FAST)
            assert code == 1
            found = problems(summary)
            assert sorted(found) == [f"{b}/out/evil.txt", f"{b}/plain/x.txt"], found
            assert "symlink" in found[f"{b}/out/evil.txt"]
            assert "conflicts with an existing file" in found[f"{b}/plain/x.txt"]
            assert set_report(summary, SET)["refused"] == 2
        assert "/out/evil.txt" not in src.hits and "/plain/x.txt" not in src.hits
    assert list((parent / "outside").iterdir()) == []
    assert (dest / "plain").read_bytes() == b"a file"
    assert (dest / "ok.txt").read_bytes() == b"fine"


def test_a_state_that_cannot_be_written_at_the_end_still_closes_the_connections(
    tmp_path: Path, monkeypatch: Any
) -> None:
    # The last batch of records fails (a full disk): the run stops with that error, and the
    # transfer session is closed on the way out (left open, aiohttp printed "Unclosed client
    # session" lines after the one line the command line gives).
    import sqlite3

    from resourcesync.destination.state import DestinationState
    from resourcesync.http.transfer import TransferSession

    closed: list[bool] = []
    real_aclose = TransferSession.aclose

    async def aclose(self: TransferSession) -> None:
        closed.append(True)
        await real_aclose(self)

    def full(self: DestinationState, rows: list[Any]) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(TransferSession, "aclose", aclose)
    monkeypatch.setattr(DestinationState, "record_many", full)
    with hand_source() as src:
        b = src.base
        src.files["/a.txt"] = b"a"
        src.publish([entry(b, "/a.txt", b"a")])
        with pytest.raises(sqlite3.OperationalError, match="disk is full"):
            sync(b + "/", tmp_path / "dest", SyncOptions())
    assert closed == [True]
