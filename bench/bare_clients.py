"""The anchors of `bench_client.py`: the least a sync client must do per resource, written as
bare loops over a list of URLs — GET, md5 of the body, a temporary file renamed into place, the
digest compared with the list's — with one library each and nothing else.

Usage: python bench/bare_clients.py aiohttp|aiohttp-uvloop|httpx URLS_TSV DEST CONCURRENCY
(`aiohttp-uvloop`: the aiohttp loop on uvloop's event loop, as `sync`'s transfers run.)
URLS_TSV: one `url<TAB>md5<TAB>relative path` per line.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys


def targets(tsv: str, dest: str) -> list[tuple[str, str, str]]:
    rows = []
    with open(tsv) as f:
        for line in f:
            url, md5, rel = line.rstrip("\n").split("\t")
            rows.append((url, md5, os.path.join(dest, rel)))
    for d in {os.path.dirname(p) for _, _, p in rows}:
        os.makedirs(d, exist_ok=True)
    return rows


def store(path: str, chunks: list[bytes], md5: str) -> None:
    h = hashlib.md5()
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        for c in chunks:
            h.update(c)
            f.write(c)
    if h.hexdigest() != md5:
        os.unlink(tmp)
        raise SystemExit(f"{path}: digest mismatch")
    os.replace(tmp, path)


async def with_aiohttp(rows: list[tuple[str, str, str]], n: int) -> None:
    import aiohttp

    sem = asyncio.Semaphore(n)
    conn = aiohttp.TCPConnector(limit=n)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def one(url: str, md5: str, path: str) -> None:
            async with sem, session.get(url) as r:
                r.raise_for_status()
                chunks = [c async for c in r.content.iter_chunked(1 << 18)]
            store(path, chunks, md5)

        await gather(rows, n, one)


async def with_httpx(rows: list[tuple[str, str, str]], n: int) -> None:
    import httpx

    sem = asyncio.Semaphore(n)
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(limits=limits) as client:

        async def one(url: str, md5: str, path: str) -> None:
            async with sem, client.stream("GET", url) as r:
                r.raise_for_status()
                chunks = [c async for c in r.aiter_bytes(1 << 18)]
            store(path, chunks, md5)

        await gather(rows, n, one)


async def gather(rows: list[tuple[str, str, str]], n: int, one) -> None:  # type: ignore[no-untyped-def]
    # A window of 2n tasks, as a client following a long list must (not one task per URL
    # at once), kept with a semaphore.
    window = asyncio.Semaphore(2 * n)
    failed: list[BaseException] = []

    def done(task: asyncio.Task[None]) -> None:
        window.release()
        if not task.cancelled() and task.exception() is not None:
            failed.append(task.exception())  # type: ignore[arg-type]

    tasks = set()
    for row in rows:
        await window.acquire()
        if failed:
            raise failed[0]
        task = asyncio.create_task(one(*row))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        task.add_done_callback(done)
    for _ in range(2 * n):
        await window.acquire()
    if failed:
        raise failed[0]


def main() -> None:
    lib, tsv, dest, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    rows = targets(tsv, dest)
    if lib == "aiohttp-uvloop":
        import uvloop

        uvloop.run(with_aiohttp(rows, n))
    else:
        asyncio.run((with_aiohttp if lib == "aiohttp" else with_httpx)(rows, n))


if __name__ == "__main__":
    main()
