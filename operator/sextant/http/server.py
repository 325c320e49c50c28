"""One aiohttp server per operator process: /healthz, /readyz, /metrics, and the /v2 API (http/api.py)."""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Callable
from pathlib import Path
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


class ServingCertificate:
    """The server's TLS certificate and key, read again at the first handshake after their files change, so that
    a rotation (cert-manager renewing a Secret mounted as a volume) needs no restart. A change that cannot be
    read (a half-written pair) keeps the previous certificate."""

    def __init__(self, cert: str | Path, key: str | Path) -> None:
        self.cert, self.key = Path(cert), Path(key)
        self._stamp = self._files_stamp()
        # The listening socket's context: raises on a bad pair at start (a clear error beats serving nothing);
        # its handshake callback hands each connection the newest context.
        self.context = self._current = self._load()
        self.context.sni_callback = self._pick

    def _files_stamp(self) -> tuple[int, int]:
        return os.stat(self.cert).st_mtime_ns, os.stat(self.key).st_mtime_ns

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert, self.key)
        return context

    def _pick(self, conn: ssl.SSLObject, _server_name: str | None, _context: ssl.SSLContext) -> None:
        try:
            stamp = self._files_stamp()
            if stamp != self._stamp:
                self._current, self._stamp = self._load(), stamp
                log.warning("http: TLS certificate %s reloaded", self.cert)
        except (OSError, ssl.SSLError) as exc:
            log.error("http: cannot reload the TLS certificate, keeping the previous one: %s", exc)
        conn.context = self._current


async def serve(app: web.Application, host: str, port: int, tls: ServingCertificate | None = None) -> Any:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=tls.context if tls else None)
    await site.start()
    log.warning("http: listening on %s:%d (%s)", host, port, "https" if tls else "http")
    return runner
