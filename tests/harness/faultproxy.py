"""A small HTTP proxy in front of the real API server that misbehaves on purpose, for the operator's hardening tests.

The operator talks plain HTTP to it (a kubeconfig copy pointing at http://127.0.0.1:PORT, no credentials); it
forwards to the API server over TLS with the kubeconfig's own client certificate. On the way it, on a fixed
rotation (so every kind of fault happens within the first few requests and watches, whatever the timing):
- answers requests 429 (with a Retry-After) or 503 without forwarding them;
- forwards a write and then answers 503 anyway (the answer is lost: the write happened, the client does not know);
- answers a watch 410 Gone, or ends it with an ERROR event of code 410 after some events;
- cuts a watch mid-stream, in the middle of an event's line (a truncated chunk), or slips a malformed line in.

A test may also take the API server away (`down`): while it is down every request, watches included, is held
without an answer and never forwarded, and every watch open is cut, as a stopped API server behind a load balancer
looks to its clients; when it comes back up the held requests' connections are reset (their clients ask again).

A test may also refuse requests of its choice on demand (`refuse`): the next few that match are answered 503 without
being forwarded.

A test may also strike the watches of one client and kind on demand (`strike`): the next few watches that match
get the fault it names (a malformed line, a 410), and the matching watches open now are cut so that they ask again.

Bounded: it listens on 127.0.0.1 only, in a thread of its own, and stops by itself after `lifetime` seconds (and
at stop()). `counts` says which faults it injected, so a test can check that it was not vacuous; `seen`, which
client (by its User-Agent) asked for what.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

from sextant.kube.kubeconfig import Connection

_HOP_HEADERS = {"content-type", "accept", "user-agent"}


class FaultProxy:
    # Every watch in turn: cut mid-chunk after some events, answered 410, ended by an ERROR 410 event after some
    # events, a malformed line slipped in first. No watch lasts more than a few events or a second of quiet.
    WATCH_FAULTS = ("cut", "gone", "error-410", "garbage", "cut", "error-410")

    def __init__(self, upstream: Connection, *, lifetime: float = 600.0, refuse_every: int = 7,
                 unavailable_every: int = 11, lose_every: int = 5) -> None:
        self.upstream = upstream
        self.lifetime = lifetime
        self.refuse_every, self.unavailable_every, self.lose_every = refuse_every, unavailable_every, lose_every
        self.counts: Counter[str] = Counter()
        self.seen: Counter[tuple[str, str, bool]] = Counter()  # requests by (User-Agent, path, a watch)
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None
        self._ready = threading.Event()
        self._requests = self._writes = self._watches = 0
        self.faulty = True  # False: a plain proxy (to let the operator settle)
        self._strikes: list[tuple[Callable[[web.Request], bool], str]] = []  # (which watches, fault), in order
        self._refusals: list[Callable[[web.Request], bool]] = []  # which requests to answer 503, one each
        self._struck = 0  # bumped by strike(): the matching watches open then are cut
        self._up: asyncio.Event | None = None  # cleared while down
        self.down_requests = 0  # requests held (never forwarded) while down

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
        self._up = asyncio.Event()
        self._up.set()
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

    @property
    def down(self) -> bool:
        return self._up is not None and not self._up.is_set()

    @down.setter
    def down(self, down: bool) -> None:
        """Take the API server away (True) or bring it back (False), from any thread."""
        assert self._loop is not None and self._up is not None, "start() first"
        done = threading.Event()

        def flip() -> None:
            assert self._up is not None
            self._up.clear() if down else self._up.set()
            done.set()

        self._loop.call_soon_threadsafe(flip)
        done.wait(5)

    async def _held(self, request: web.Request) -> web.StreamResponse:
        """Down: no answer until up again, then the connection is reset (the request never reached the server)."""
        assert self._up is not None
        self.down_requests += 1
        await self._up.wait()
        assert request.transport is not None
        request.transport.abort()
        return web.Response(status=503)

    def strike(self, fault: str, times: int, match: Callable[[web.Request], bool]) -> None:
        """The next `times` watches that `match` get `fault` ("garbage": a malformed first line; "gone": answered
        410), whatever `faulty` says; the matching watches open now are cut, so that their clients ask again."""
        self._strikes.extend([(match, fault)] * times)
        self._struck += 1

    def refuse(self, times: int, match: Callable[[web.Request], bool]) -> None:
        """The next `times` requests (not watches) that `match` are answered 503, whatever `faulty` says."""
        self._refusals.extend([match] * times)

    def _refused(self, request: web.Request) -> bool:
        for i, match in enumerate(self._refusals):
            if match(request):
                del self._refusals[i]
                self.counts["refused on demand"] += 1
                return True
        return False

    def _strike_for(self, request: web.Request) -> str | None:
        for i, (match, fault) in enumerate(self._strikes):
            if match(request):
                del self._strikes[i]
                self.counts[f"struck {fault}"] += 1
                return fault
        return None

    def _cut_now(self, request: web.Request, struck: int) -> bool:
        return struck != self._struck and any(match(request) for match, _ in self._strikes)

    # --- the faults -----------------------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.counts["requests"] += 1
        watch = request.query.get("watch") in ("true", "1")
        self.seen[request.headers.get("User-Agent", ""), request.path, watch] += 1
        if self.down:
            return await self._held(request)
        if watch:
            self._watches += 1
            fault = self._strike_for(request)
            if fault is None:
                fault = self.WATCH_FAULTS[self._watches % len(self.WATCH_FAULTS)] if self.faulty else None
            if fault == "gone":
                self.counts["watch 410"] += 1
                return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
                                          "reason": "Expired", "message": "too old resource version"}, status=410)
            return await self._watch(request, fault, 1 + self._watches % 3)
        self._requests += 1
        if self._refused(request):
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 503,
                                      "reason": "ServiceUnavailable", "message": "the fault proxy says no"},
                                     status=503)
        for every, status in ((self.refuse_every, 429), (self.unavailable_every, 503)):
            if self.faulty and self._requests % every == every // 2:
                self.counts[f"refused {status}"] += 1
                return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
                                          "reason": "TooManyRequests" if status == 429 else "ServiceUnavailable",
                                          "message": "the fault proxy says no"}, status=status,
                                         headers={"Retry-After": str(self._requests % 2)})
        body = await request.read()
        async with self.session.request(request.method, self.upstream.server + request.path_qs, data=body or None,
                                        headers=self._headers(request)) as upstream:
            data = await upstream.read()
            if request.method != "GET":
                self._writes += 1
                if self.faulty and self._writes % self.lose_every == self.lose_every // 2:
                    self.counts["answer lost 503"] += 1  # the write happened; its answer never arrives
                    return web.json_response({"kind": "Status", "code": 503, "message": "answer lost"}, status=503)
            return web.Response(status=upstream.status, body=data,
                                content_type=upstream.headers.get("Content-Type", "application/json").split(";")[0])

    async def _watch(self, request: web.Request, fault: str | None, after: int) -> web.StreamResponse:
        """Pass a watch through; `fault` strikes after `after` events, or after a second without any (a quiet
        watch is struck too); a garbage line comes first."""
        struck = self._struck
        async with self.session.get(self.upstream.server + request.path_qs, headers=self._headers(request),
                                    timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as upstream:
            if upstream.status != 200:
                return web.Response(status=upstream.status, body=await upstream.read(), content_type="application/json")
            response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            if fault == "garbage":
                self.counts["watch garbage line"] += 1
                await response.write(b'{"type":"MODIFIED","object":{"metadata":\n')
            events = 0
            while True:
                if fault is None and self.faulty:
                    fault, after, events = "cut", 0, 0  # a watch opened while calm is struck once faults start
                if self.down:  # the server went away under an open watch
                    assert request.transport is not None
                    request.transport.abort()
                    return response
                if self._cut_now(request, struck):
                    self.counts["watch cut for a strike"] += 1
                    assert request.transport is not None
                    request.transport.abort()
                    return response
                try:
                    line = await asyncio.wait_for(upstream.content.readline(), 1.0)
                except asyncio.TimeoutError:
                    if fault is None:
                        continue
                    line = None  # quiet: strike now
                if line == b"":
                    break
                events += line is not None
                if fault == "cut" and (line is None or events >= after):
                    self.counts["watch cut mid-chunk"] += 1
                    whole = line or b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"1"}}}\n'
                    await response.write(whole[: len(whole) // 2])
                    assert request.transport is not None
                    request.transport.abort()  # the rest of the chunk never comes: a truncated stream
                    return response
                if fault == "error-410" and (line is None or events > after):
                    self.counts["watch ERROR 410"] += 1
                    await response.write(b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1",'
                                         b'"status":"Failure","code":410,"reason":"Expired",'
                                         b'"message":"too old resource version"}}\n')
                    break
                if line is not None:
                    await response.write(line)
            await response.write_eof()
            return response

    def _headers(self, request: web.Request) -> dict[str, Any]:
        """The caller's content headers, and the proxy's own credentials (besides its client certificate)."""
        return {**{k: v for k, v in request.headers.items() if k.lower() in _HOP_HEADERS}, **self.upstream.headers()}
