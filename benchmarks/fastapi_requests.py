"""Concurrent FastAPI requests doing a read-modify-write of a Redis counter, with and without
``redlease.contrib.fastapi.lock``: throughput, p50/p99 latency, lost updates.

The app runs under uvicorn in a process of its own (one worker, one event loop); this process
sends the requests with httpx, ``--concurrency`` at a time, ``--requests`` per run, over
``--keys`` counters (1: every request contends for one lock). Each endpoint reads the
counter, yields to the loop once, and writes it back plus one: without the lock concurrent
requests overwrite each other (lost updates); with it none is lost. A private server is
started (the newest binary found) unless ``--url`` is given.

    python benchmarks/fastapi_requests.py --requests 2000 --concurrency 200 --keys 1 64
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import statistics
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from typing import Annotated, Any

import httpx
from fastapi import Depends, FastAPI

from redlease import AsyncClient, Lease
from redlease.contrib.fastapi import exclusive, get_client, lifespan

ENDPOINTS = ("unlocked", "locked")


Client = Annotated[AsyncClient, Depends(get_client)]


def make_app(url: str) -> FastAPI:
    # redis-py's pool refuses more than max_connections commands at once: one per request
    app = FastAPI(lifespan=lifespan(url, max_connections=1024))

    async def bump(client: AsyncClient, key: str) -> int:
        value = int(await client.redis.get(key) or 0)
        await asyncio.sleep(0)  # other requests run between the read and the write
        await client.redis.set(key, value + 1)
        return value + 1

    @app.post("/unlocked/{key}")
    async def unlocked(key: str, client: Client) -> dict[str, int]:
        return {"value": await bump(client, f"count:{key}")}

    @app.post("/locked/{key}")
    async def locked(
        key: str,
        client: Client,
        lease: Annotated[Lease, Depends(exclusive("c:{key}", timeout=120))],
    ) -> dict[str, int]:
        return {"value": await bump(client, f"count:{key}"), "token": lease.fencing_token}

    return app


def serve(url: str) -> None:
    """The child: uvicorn on a free port, printed on stdout once bound."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(
        make_app(url),
        log_level="warning",
        backlog=4096,
        access_log=False,
        timeout_keep_alive=300,  # a connection idle between two of its requests stays open
    )
    uvicorn.Server(config).run(sockets=[sock])


async def run(
    base: str, endpoint: str, keys: list[str], requests: int, concurrency: int
) -> dict[str, Any]:
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    sent = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=300) as http:

        async def worker() -> None:
            nonlocal sent
            while sent < requests:
                sent += 1
                key = random.choice(keys)
                began = time.perf_counter()
                try:
                    status = (await http.post(f"/{endpoint}/{key}")).status_code
                except httpx.TransportError:
                    status = 0  # no answer
                latencies.append(time.perf_counter() - began)
                statuses[status] = statuses.get(status, 0) + 1

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "rate": requests / elapsed,
        "p50": statistics.median(latencies) * 1000,
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "statuses": statuses,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a server to use (default: a private one)")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--keys", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    import redis

    from redlease.testing import RedisServer, find_server

    with ExitStack() as stack:
        if args.url:
            url = args.url
            label = "--url"
        else:
            binary = find_server()
            url = stack.enter_context(RedisServer(binary)).url
            label = binary.label
        env = dict(os.environ)
        child = subprocess.Popen(
            [sys.executable, __file__, "--serve", url], stdout=subprocess.PIPE, env=env, text=True
        )
        try:
            assert child.stdout is not None
            port = int(child.stdout.readline())
            base = f"http://127.0.0.1:{port}"
            _wait_up(base)
            raw = stack.enter_context(redis.Redis.from_url(url))
            print(
                f"server {label}; {args.requests} requests, {args.concurrency} at a time, "
                f"uvicorn (1 worker) in a process of its own; Python {sys.version.split()[0]}"
            )
            print()
            print("| keys | endpoint | requests/s | p50 ms | p99 ms | statuses | lost updates |")
            print("|---|---|---|---|---|---|---|")
            for nkeys in args.keys:
                for endpoint in ENDPOINTS:
                    keys = [f"{endpoint}-{uuid.uuid4().hex[:8]}-{i}" for i in range(nkeys)]
                    got = asyncio.run(run(base, endpoint, keys, args.requests, args.concurrency))
                    counted = sum(int(raw.get(f"count:{k}") or 0) for k in keys)
                    ok = got["statuses"].get(200, 0)
                    print(
                        f"| {nkeys} | {endpoint} | {got['rate']:.0f} | {got['p50']:.1f} | "
                        f"{got['p99']:.1f} | {_statuses(got['statuses'])} | {ok - counted} |",
                        flush=True,
                    )
        finally:
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(10)


def _statuses(statuses: dict[int, int]) -> str:
    return ", ".join(f"{n} x {code}" for code, n in sorted(statuses.items()))


def _wait_up(base: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"{base}/docs", timeout=2)
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


if __name__ == "__main__":
    main()
