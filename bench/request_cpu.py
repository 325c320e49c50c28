"""The client's CPU per request: Kube's requests (aiohttp, with its session set up once for the API server) against a
ClientSession of aiohttp's defaults, on a local control plane (or $SEXTANT_TEST_KUBECONFIG).

    .venv/bin/python bench/request_cpu.py [--requests 3000] [--parallel 20] [--rounds 3]

Each round GETs one small object (the namespace's kube-root-ca.crt ConfigMap, ~1.5 KB of JSON) --requests times,
--parallel at once, over TLS, both ways, and prints one JSON line: this process's CPU µs per request (its user and
system time: the client's whole cost, TLS included) and requests per second, the median of the rounds for each. The
API server runs on the same machine, so requests per second mean little; the CPU per request is the figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from sextant.dev.localcluster import LocalCluster, new_name  # noqa: E402
from sextant.kube import kubeconfig  # noqa: E402
from sextant.kube.client import Kube  # noqa: E402
from sextant.kube.kubeconfig import Connection  # noqa: E402

PATH = "/api/v1/namespaces/default/configmaps/kube-root-ca.crt"


async def _measure(get: Callable[[], Awaitable[object]], requests: int, parallel: int) -> tuple[float, float]:
    await asyncio.gather(*(get() for _ in range(parallel)))  # connections open, caches warm
    gate = asyncio.Semaphore(parallel)

    async def one() -> None:
        async with gate:
            await get()

    cpu, wall = time.process_time(), time.monotonic()
    await asyncio.gather(*(one() for _ in range(requests)))
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    return cpu / requests * 1e6, requests / wall


async def _round(conn: Connection, requests: int, parallel: int) -> dict[str, tuple[float, float]]:
    async with Kube(conn) as kube:
        own = await _measure(lambda: kube.get(PATH), requests, parallel)
    headers = {"User-Agent": "sextant-bench", "Accept": "application/json", **conn.headers()}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=conn.ssl_context, limit=256),
                                     headers=headers) as session:
        async def get() -> object:
            async with session.get(conn.server + PATH, timeout=aiohttp.ClientTimeout(total=60)) as resp:
                assert resp.status == 200, resp.status
                return json.loads(await resp.read())

        old = await _measure(get, requests, parallel)
    return {"kube": own, "aiohttp": old}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--parallel", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    import uvloop  # as the operator runs

    external = os.environ.get("SEXTANT_TEST_KUBECONFIG")
    cluster = None if external else LocalCluster(name=new_name("sextant-bench"), nodes=1).up()
    try:
        conn = kubeconfig.load(external or str(cluster.kubeconfig))  # type: ignore[union-attr]
        rounds = [uvloop.run(_round(conn, args.requests, args.parallel)) for _ in range(args.rounds)]
    finally:
        if cluster is not None:
            cluster.down()
    out = {"requests": args.requests, "parallel": args.parallel, "rounds": args.rounds,
           "loadavg": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}
    for way in ("kube", "aiohttp"):
        out[f"{way}_cpu_us_per_request"] = round(statistics.median(r[way][0] for r in rounds), 1)
        out[f"{way}_requests_per_s"] = round(statistics.median(r[way][1] for r in rounds))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
