"""One aiohttp server per operator process: /healthz, /readyz, /metrics, and the /v2 API (http/api.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

log = logging.getLogger("sextant.http")


def build_app(ready: Callable[[], bool], metrics: Callable[[], tuple[bytes, str]],
              extra_routes: Callable[[web.Application], None] | None = None,
              role: Callable[[], str] = lambda: "leader") -> web.Application:
    app = web.Application()

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")  # answering at all means the event loop is alive

    async def readyz(_: web.Request) -> web.Response:
        if ready():  # a standby is ready too: it serves the API from its warm view
            return web.Response(text=f"ok: {role()}")
        return web.Response(status=503, text="not ready: initial lists not complete or a watch is down")

    async def metrics_endpoint(_: web.Request) -> web.Response:
        body, content_type = metrics()
        return web.Response(body=body, headers={"Content-Type": content_type})

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
    if extra_routes is not None:
        extra_routes(app)
    return app


async def serve(app: web.Application, host: str, port: int) -> Any:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    log.warning("http: listening on %s:%d", host, port)
    return runner
