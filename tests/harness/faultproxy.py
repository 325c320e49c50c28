"""A small HTTP proxy in front of the real API server that misbehaves on purpose, for the operator's hardening tests.

The operator talks plain HTTP to it (a kubeconfig copy pointing at http://127.0.0.1:PORT, no credentials); it
forwards to the API server over TLS with the kubeconfig's own client certificate. On the way it, at random but
reproducibly (one seed):
- answers requests 429 (with a Retry-After) or 503 without forwarding them;
- forwards a write and then answers 503 anyway (the answer is lost: the write happened, the client does not know);
- answers a watch 410 Gone, or ends it with an ERROR event of code 410 after some events;
- cuts a watch mid-stream, in the middle of an event's line (a truncated chunk), or slips a malformed line in.

Bounded: it listens on 127.0.0.1 only, in a thread of its own, and stops by itself after `lifetime` seconds (and
at stop()). `counts` says which faults it injected, so a test can check that it was not vacuous.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter
from typing import Any

import aiohttp
from aiohttp import web

from sextant.kubeconfig import Connection

_HOP_HEADERS = {"content-type", "accept", "user-agent"}


class FaultProxy:
    def __init__(self, upstream: Connection, *, seed: int = 16, lifetime: float = 600.0,
                 refuse: float = 0.12, lose_answer: float = 0.05, cut_watch: float = 0.5,
                 gone: float = 0.08, garbage: float = 0.05) -> None:
        self.upstream = upstream
        self.rng = random.Random(seed)
        self.lifetime = lifetime
        self.p_refuse, self.p_lose, self.p_cut, self.p_gone, self.p_garbage = (refuse, lose_answer, cut_watch,
                                                                               gone, garbage)
        self.counts: Counter[str] = Counter()
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None
        self._ready = threading.Event()
        self.faulty = True  # False: a plain proxy (e.g. to let a test settle at the end)

    # --- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> str:
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fault proxy did not start")
        return self.url

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._thread.join(15)

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stopped = asyncio.Event()
        connector = aiohttp.TCPConnector(ssl=self.upstream.ssl_context, limit=64)
        self.session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None,
                                                                                                sock_connect=10))
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()
        try:
            await asyncio.wait_for(self._stopped.wait(), self.lifetime)
        except asyncio.TimeoutError:
            pass  # stops by itself
        finally:
            await runner.cleanup()
            await self.session.close()

    # --- the faults -----------------------------------------------------------------------------------------
    def _chance(self, p: float) -> bool:
        return self.faulty and self.rng.random() < p

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.counts["requests"] += 1
        watch = request.query.get("watch") in ("true", "1")
        if self._chance(self.p_refuse):
            status = self.rng.choice([429, 503])
            self.counts[f"refused {status}"] += 1
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
                                      "reason": "TooManyRequests" if status == 429 else "ServiceUnavailable",
                                      "message": "the fault proxy says no"}, status=status,
                                     headers={"Retry-After": str(self.rng.choice([0, 1]))})
        if watch:
            if self._chance(self.p_gone):
                self.counts["watch 410"] += 1
                return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
                                          "reason": "Expired", "message": "too old resource version"}, status=410)
            return await self._watch(request)
        body = await request.read()
        async with self.session.request(request.method, self.upstream.server + request.path_qs, data=body or None,
                                        headers=self._headers(request)) as upstream:
            data = await upstream.read()
            if request.method != "GET" and self._chance(self.p_lose):
                self.counts["answer lost 503"] += 1
                return web.json_response({"kind": "Status", "code": 503, "message": "answer lost"}, status=503)
            return web.Response(status=upstream.status, body=data,
                                content_type=upstream.headers.get("Content-Type", "application/json").split(";")[0])

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        cut_after = self.rng.randint(1, 6) if self._chance(self.p_cut) else None
        gone_after = self.rng.randint(1, 6) if cut_after is None and self._chance(self.p_gone) else None
        garbage_after = self.rng.randint(0, 4) if self._chance(self.p_garbage) else None
        async with self.session.get(self.upstream.server + request.path_qs, headers=self._headers(request),
                                    timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as upstream:
            if upstream.status != 200:
                return web.Response(status=upstream.status, body=await upstream.read(), content_type="application/json")
            response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            events = 0
            while True:
                if garbage_after is not None and events == garbage_after:
                    self.counts["watch garbage line"] += 1
                    await response.write(b'{"type":"MODIFIED","object":{"metadata":\n')
                    garbage_after = None
                line = await upstream.content.readline()
                if not line:
                    break
                events += 1
                if cut_after is not None and events >= cut_after:
                    self.counts["watch cut mid-chunk"] += 1
                    await response.write(line[: max(1, len(line) // 2)])
                    assert request.transport is not None
                    request.transport.abort()  # the rest of the chunk never comes: a truncated stream
                    return response
                if gone_after is not None and events > gone_after:
                    self.counts["watch ERROR 410"] += 1
                    await response.write(b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1",'
                                         b'"status":"Failure","code":410,"reason":"Expired",'
                                         b'"message":"too old resource version"}}\n')
                    break
                await response.write(line)
            await response.write_eof()
            return response

    def _headers(self, request: web.Request) -> dict[str, Any]:
        """The caller's content headers, and the proxy's own credentials (besides its client certificate)."""
        return {**{k: v for k, v in request.headers.items() if k.lower() in _HOP_HEADERS}, **self.upstream.headers()}
