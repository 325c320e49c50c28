"""Kube's requests over aiohttp, against a real HTTP server on 127.0.0.1 (aiohttp.web, in the test's event loop):
keep-alive connections, the headers a request carries, a header with a line break refused before anything is sent,
a path that tries to end the request line, an answer over its byte cap cut (and its connection not reused), timeouts
and retries."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import AsyncIterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest
from aiohttp import web

from sextant.kube.client import ACCEPT_METADATA, ApiError, Kube
from sextant.kube.kubeconfig import Connection
from tests.harness import serve_app

WATCH_EVENTS = [{"type": kind, "object": {"metadata": {"name": f"o-{i}", "resourceVersion": str(i)}}}
                for i, kind in enumerate(["ADDED", "MODIFIED", "BOOKMARK", "DELETED", "ADDED"] * 3)]
SMALL = {"metadata": {"resourceVersion": "7"}, "items": [{"metadata": {"name": "a"}}]}


class Api:
    """Records each request (its connection's client port, path and headers) and answers as its path says."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, str, dict[str, str]]] = []
        self.limits: list[int] = []  # /items: the number of items each page asked for
        self.failures = 0  # /flaky: answers 503 this many times first
        self.release = asyncio.Event()  # lets the answers that hang end (at the server's shutdown)

    async def answer(self, request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername")[1] if request.transport else 0
        self.seen.append((peer, request.path, dict(request.headers)))
        await request.read()
        tail = request.match_info["tail"]
        if tail == "flaky" and self.failures:
            self.failures -= 1
            return web.json_response({"kind": "Status", "code": 503, "reason": "ServiceUnavailable"}, status=503,
                                     headers={"Retry-After": "0"})
        if tail == "bad":
            return web.json_response({"kind": "Status", "code": 400, "reason": "BadRequest"}, status=400)
        if tail == "slow":
            await self.release.wait()
        if tail == "items":
            return await self._items(request)
        if tail == "watch":
            return await self._watch(request)
        return web.json_response({"kind": "PartialObjectMetadata", "metadata": {"name": "x"}})

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        """WATCH_EVENTS written in pieces cut anywhere: several events in one write, one event over several; ?cut:
        the stream ends inside the last event."""
        stream = b"".join(orjson.dumps(event) + b"\n" for event in WATCH_EVENTS)
        if "cut" in request.query:
            stream = stream[:-10]
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(stream), 37):
            await response.write(stream[start:start + 37])
        await response.write_eof()
        return response

    async def _items(self, request: web.Request) -> web.StreamResponse:
        """A list page: over any small cap when more than one item is asked for, and then it never ends (framed by
        Content-Length for 10 items, chunked for fewer): only a reader that stops at its cap gets past it."""
        limit = int(request.query["limit"])
        self.limits.append(limit)
        if limit == 1:
            return web.json_response(SMALL)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        if limit >= 10:
            response.content_length = 10_000_000
        else:
            response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(b'{"items": [' + b"0," * 5000)
        await self.release.wait()
        return response


@contextlib.asynccontextmanager
async def api_server(api: Api, token: str | None = "t", **kube: Any) -> AsyncIterator[Kube]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", api.answer)
    try:
        async with serve_app(app) as url, Kube(Connection(server=url, ssl_context=False, _token=token),
                                             user_agent="sextant-test", **kube) as client:
            yield client
    finally:
        api.release.set()


async def test_requests_one_after_another_share_one_keep_alive_connection():
    api = Api()
    async with api_server(api) as kube:
        for _ in range(5):
            await kube.get("/ok")
        await asyncio.gather(*(kube.get("/ok") for _ in range(3)))
    ports = Counter(port for port, _, _ in api.seen)
    assert len(ports) <= 3 and ports.most_common(1)[0][1] >= 5


async def test_a_request_carries_the_clients_headers_and_no_accept_encoding():
    api = Api()
    async with api_server(api) as kube:
        await kube.merge_patch("/patched", {"spec": {}})
        assert await kube.create_as_sent("/created", {"spec": {"a": 1}}) == {"spec": {"a": 1},
                                                                             "metadata": {"name": "x"}}
        await kube.get("/read")
    (_, _, patched), (_, _, created), (_, _, read) = api.seen
    for headers in (patched, created, read):
        assert headers["User-Agent"] == "sextant-test" and headers["Authorization"] == "Bearer t"
        assert "Accept-Encoding" not in headers
    assert patched["Content-Type"] == "application/merge-patch+json" and patched["Accept"] == "application/json"
    assert created["Content-Type"] == "application/json" and created["Accept"] == ACCEPT_METADATA
    assert "Content-Type" not in read


@pytest.mark.parametrize("token", ["x\r\nX-Evil: 1", "x\nX-Evil: 1", "x\r"])
async def test_a_header_with_a_line_break_is_refused_before_anything_is_sent(token: str):
    api = Api()
    async with api_server(api, token=token) as kube:
        with pytest.raises(ApiError, match="a request header holds a line break") as refused:
            await kube.get("/ok")
    assert refused.value.status == 0 and api.seen == [] and kube.requests == Counter()


async def test_a_path_can_never_end_the_request_line():
    api = Api()
    async with api_server(api) as kube:
        await kube.get("/api/v1/namespaces/a/pods/b HTTP/1.1\r\nX-Evil: 1")
    ((_, path, headers),) = api.seen
    assert "X-Evil" not in headers and path.startswith("/api/v1/namespaces/a/pods/b HTTP/1.1")


async def test_an_answer_over_its_byte_cap_is_not_read_further_and_its_connection_not_reused():
    """Kube.pages caps each answer at 3 × page_bytes: a page over it is cut (whether its length is announced or
    not) and asked for again with a quarter of the items; the answers cut never end here, so only a reader that
    stops at the cap gets on."""
    api = Api()
    async with api_server(api) as kube:
        async with asyncio.timeout(10):
            pages = [page async for page in kube.pages("/items", page_bytes=1000)]
    assert pages == [(SMALL["items"], "7")]
    assert api.limits == [10, 2, 1]
    assert len({port for port, _, _ in api.seen}) == 3, "a connection cut mid-answer was used again"


async def test_a_timed_out_request_is_an_api_error_and_the_client_goes_on():
    api = Api()
    async with api_server(api) as kube:
        with pytest.raises(ApiError) as late:
            await kube.request("GET", "/slow", timeout=0.3, retry=False)
        assert late.value.status == 0 and isinstance(late.value.__cause__, TimeoutError)
        assert await kube.get("/ok")
    assert api.seen[0][0] != api.seen[1][0]


async def test_a_retryable_answer_is_tried_again_and_another_error_is_not():
    api = Api()
    api.failures = 2
    async with api_server(api, attempts=3) as kube:
        assert await kube.get("/flaky")
        with pytest.raises(ApiError) as bad:
            await kube.get("/bad")
    assert bad.value.status == 400
    assert [path for _, path, _ in api.seen] == ["/flaky"] * 3 + ["/bad"]
    assert kube.requests[("get", "?", 503)] == 2 and kube.requests[("get", "?", 200)] == 1


async def test_a_watch_yields_each_event_however_the_stream_is_cut_and_an_event_cut_short_is_an_error():
    api = Api()
    async with api_server(api) as kube:
        events = [event async for event in kube.watch("/watch", "1")]
        assert events == [(event["type"], event["object"]) for event in WATCH_EVENTS]
        with pytest.raises(ApiError, match="ended inside an event") as cut:
            async for _ in kube.watch("/watch", "1", params={"cut": "1"}):
                pass
    assert cut.value.status == 0


def test_one_client_serves_one_event_loop_after_another():
    """A process may run one event loop after another with one Kube (the local node agent's thread): each loop has
    connections of its own."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        kube = Kube(Connection(server=f"http://127.0.0.1:{server.server_address[1]}", ssl_context=False))

        async def get() -> dict[str, Any]:
            try:
                return await kube.get("/ok")
            finally:
                await kube.close()

        assert asyncio.run(get()) == asyncio.run(get()) == {"ok": True}
    finally:
        server.shutdown()
        server.server_close()
