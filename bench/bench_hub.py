"""The hub: fan-out latency and delivered notifications per second, on loopback.

Three processes on 127.0.0.1: the hub (`python -m resourcesync hub`, its SQLite file in a
temporary folder), a receiver (uvicorn + Starlette) whose paths `/cb/<i>` are N distinct
subscribers — each one its own subscription, queue and worker in the hub —, and this script,
which subscribes them, publishes, and polls the receiver's count.

- fan-out: one notification to N_FANOUT subscribers (target of issue 6: 1,000 within 5 s),
  timed from the publish request to the receiver having counted them all;
- throughput: M notifications to N subscribers, published by 4 concurrent publishers, timed
  until all N×M deliveries are counted; and, as the raw limit, the same number of POSTs sent
  straight to the receiver by one httpx client at the hub's concurrency. The ratio says what
  the hub's bookkeeping (SQLite rows per delivery, one worker per subscriber) costs.

Run: `python bench/bench_hub.py` (BENCH_HUB_FANOUT, BENCH_HUB_SUBSCRIBERS, BENCH_HUB_MESSAGES).
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

N_FANOUT = int(os.environ.get("BENCH_HUB_FANOUT", "1000"))
N_SUBSCRIBERS = int(os.environ.get("BENCH_HUB_SUBSCRIBERS", "10"))
N_MESSAGES = int(os.environ.get("BENCH_HUB_MESSAGES", "200"))
CONCURRENCY = 256
TOPIC = "http://127.0.0.1:9/bench/change/"
HUB = ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def payload(i: int) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        ' xmlns:rs="http://www.openarchives.org/rs/terms/">\n'
        f'<rs:md capability="change-notification" from="2024-01-01T00:00:{i % 60:02d}Z"'
        f' until="2024-01-01T00:00:{i % 60:02d}.5Z"/>\n'
        f'<url><loc>http://127.0.0.1:9/res{i}</loc><rs:md change="updated"'
        f' datetime="2024-01-01T00:00:{i % 60:02d}Z" hash="md5:1584abdf8ebdc9802ac0c6a7402c03b6"'
        ' length="8876" type="text/html"/></url>\n'
        "</urlset>\n"
    ).encode()


def receiver_main(port: int) -> None:
    """The subscribers: echo challenges, count deliveries."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    counts = {"delivered": 0}

    async def callback(request: Request) -> Response:
        if request.method == "GET":
            return PlainTextResponse(request.query_params.get("hub.challenge", ""))
        await request.body()
        counts["delivered"] += 1
        return Response(status_code=204)

    async def count(request: Request) -> Response:
        return JSONResponse(counts)

    app = Starlette(
        routes=[
            Route("/cb/{i}", callback, methods=["GET", "POST"]),
            Route("/count", count),
        ]
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def start(args: list[str], url: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited: {args}")
        try:
            httpx.get(url, timeout=1)
            return proc
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError(f"no answer from {url}")


async def count(client: httpx.AsyncClient, receiver: str) -> int:
    return int((await client.get(f"{receiver}/count")).json()["delivered"])


async def wait_count(client: httpx.AsyncClient, receiver: str, target: int) -> float:
    deadline = time.monotonic() + 300
    while (await count(client, receiver)) < target:
        if time.monotonic() > deadline:
            raise RuntimeError("deliveries did not arrive")
        if os.environ.get("BENCH_HUB_DEBUG"):
            print(await count(client, receiver), (await client.get(HUB)).json(), flush=True)
            await asyncio.sleep(1)
        await asyncio.sleep(0.01)
    return time.monotonic()


async def subscribe_all(client: httpx.AsyncClient, hub: str, receiver: str, ids: range) -> None:
    sem = asyncio.Semaphore(32)
    target = (await client.get(hub)).json()["subscriptions"] + len(ids)

    async def one(i: int) -> None:
        async with sem:
            form = {
                "hub.mode": "subscribe",
                "hub.topic": TOPIC,
                "hub.callback": f"{receiver}/cb/{i}",
            }
            r = await post(client, hub, data=form)
            r.raise_for_status()

    await asyncio.gather(*(one(i) for i in ids))
    deadline = time.monotonic() + 120
    while (await client.get(hub)).json()["subscriptions"] < target:
        if time.monotonic() > deadline:
            raise RuntimeError("subscriptions were not verified")
        await asyncio.sleep(0.05)


async def post(client: httpx.AsyncClient, url: str, **kwargs: object) -> httpx.Response:
    """A POST retried once on a dropped keep-alive connection (as any client would)."""
    try:
        return await client.post(url, **kwargs)  # type: ignore[arg-type]
    except httpx.TransportError:
        return await client.post(url, **kwargs)  # type: ignore[arg-type]


async def publish(client: httpx.AsyncClient, hub: str, i: int) -> None:
    headers = {"Content-Type": "application/xml", "Link": f'<{TOPIC}>; rel="self"'}
    r = await post(client, hub, content=payload(i), headers=headers)
    r.raise_for_status()


async def bench(hub: str, receiver: str) -> dict[str, float]:
    out: dict[str, float] = {}
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        total = N_SUBSCRIBERS * N_MESSAGES
        # The raw limit first: the POSTs the throughput test has the hub send, straight to the
        # receiver, one sender per subscriber (the hub has one delivery in flight per
        # subscriber, too).
        body = payload(0)
        headers = {"Content-Type": "application/xml"}

        async def direct(n: int) -> None:
            url = f"{receiver}/cb/{100_000 + n}"
            for _ in range(N_MESSAGES):
                (await client.post(url, content=body, headers=headers)).raise_for_status()

        t0 = time.monotonic()
        await asyncio.gather(*(direct(n) for n in range(N_SUBSCRIBERS)))
        out["raw_per_s"] = total / (time.monotonic() - t0)
        raw_count = await count(client, receiver)

        # Fan-out: one notification, N_FANOUT subscribers.
        t = time.monotonic()
        await subscribe_all(client, hub, receiver, range(N_FANOUT))
        assert await count(client, receiver) == raw_count
        out["subscribe_per_s"] = N_FANOUT / (time.monotonic() - t)
        fanouts = []
        for i in range(3):
            base = await count(client, receiver)
            t0 = time.monotonic()
            await publish(client, hub, i)
            t1 = await wait_count(client, receiver, base + N_FANOUT)
            fanouts.append(t1 - t0)
        out["fanout_s"] = statistics.median(fanouts)
        out["fanout_best_s"] = min(fanouts)

        # Throughput: a second topic with N_SUBSCRIBERS, N_MESSAGES notifications.
        global TOPIC
        TOPIC = "http://127.0.0.1:9/bench/throughput/"
        await subscribe_all(client, hub, receiver, range(100_000, 100_000 + N_SUBSCRIBERS))
        base = await count(client, receiver)
        total = N_SUBSCRIBERS * N_MESSAGES
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(N_MESSAGES):
            queue.put_nowait(i)

        async def publisher() -> None:
            while not queue.empty():
                await publish(client, hub, queue.get_nowait())

        t0 = time.monotonic()
        await asyncio.gather(*(publisher() for _ in range(4)))
        t_pub = time.monotonic()
        t1 = await wait_count(client, receiver, base + total)
        out["accepted_per_s"] = N_MESSAGES / (t_pub - t0)
        out["delivered_per_s"] = total / (t1 - t0)

    return out


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--receiver":
        receiver_main(int(sys.argv[2]))
        return
    global HUB
    with tempfile.TemporaryDirectory() as tmp:
        hub_port, recv_port = free_port(), free_port()
        hub = HUB = f"http://127.0.0.1:{hub_port}/"
        receiver = f"http://127.0.0.1:{recv_port}"
        hub_args = [
            sys.executable, "-m", "resourcesync", "hub", "--port", str(hub_port),
            "--db", str(Path(tmp) / "hub.sqlite"), "--allow-loopback",
            "--log-level", os.environ.get("BENCH_HUB_LOG", "warning"),
            "--concurrency", str(CONCURRENCY),
            "--publish-rate", "0",  # the benchmark measures throughput, not the limit
        ]  # fmt: skip
        procs = [
            start([sys.executable, __file__, "--receiver", str(recv_port)], f"{receiver}/count"),
            start(hub_args, hub),
        ]
        try:
            r = asyncio.run(bench(hub, receiver))
        finally:
            for p in procs:
                p.terminate()
                p.wait(timeout=20)
    print(f"cores: {os.cpu_count()}")
    print(f"subscriptions verified: {r['subscribe_per_s']:.0f}/s")
    print(
        f"fan-out of one notification to {N_FANOUT} subscribers: median {r['fanout_s']:.2f} s "
        f"(best {r['fanout_best_s']:.2f} s; target < 5 s)"
    )
    print(f"notifications accepted (4 publishers): {r['accepted_per_s']:.0f}/s")
    print(
        f"delivered, {N_MESSAGES} notifications x {N_SUBSCRIBERS} subscribers: "
        f"{r['delivered_per_s']:.0f}/s; raw POSTs to the same receiver: {r['raw_per_s']:.0f}/s "
        f"(hub at {r['delivered_per_s'] / r['raw_per_s']:.2f}x the raw limit)"
    )


if __name__ == "__main__":
    main()
