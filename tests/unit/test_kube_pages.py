"""Kube.pages asks for the next page of a list before its caller digests the current one, so that the API server
encodes page N+1 while the operator digests page N (a start-up with 100k jobs takes the larger of the two times,
not their sum). Checked against a paging HTTP server on its own thread: only the order of requests and digests is
asserted, never a duration."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from aiohttp import web

from sextant.kube.client import Kube
from sextant.kube.kubeconfig import Connection

PAGES = 4


class PagingServer:
    """Serves /items in PAGES pages and records, in one shared log, when each page was asked for."""

    def __init__(self, log: list[tuple[str, int]]) -> None:
        self.log, self.port = log, 0
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _items(self, request: web.Request) -> web.Response:
        page = int(request.query.get("continue", "0"))
        self.log.append(("asked", page))
        meta: dict[str, Any] = {"resourceVersion": "7"} if page == PAGES - 1 else {"continue": str(page + 1)}
        return web.json_response({"metadata": meta, "items": [{"metadata": {"name": f"o-{page}"}}]})

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_get("/items", self._items)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self) -> PagingServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


async def test_the_next_page_is_asked_for_before_the_caller_digests_this_one():
    log: list[tuple[str, int]] = []
    with PagingServer(log) as server:
        async with Kube(Connection(server=f"http://127.0.0.1:{server.port}", ssl_context=False)) as kube:
            pages = []
            async for items, version in kube.pages("/items"):
                page = len(pages)
                pages.append((items[0]["metadata"]["name"], version))
                deadline = time.monotonic() + 5
                # The caller's digest holds the event loop; the next page's request is already on its way.
                while ("asked", page + 1) not in log and page + 1 < PAGES and time.monotonic() < deadline:
                    time.sleep(0.005)
                log.append(("digested", page))
    assert pages == [("o-0", None), ("o-1", None), ("o-2", None), ("o-3", "7")]
    for page in range(PAGES - 1):
        assert log.index(("asked", page + 1)) < log.index(("digested", page)), log


async def test_a_caller_that_stops_early_leaves_no_request_behind():
    log: list[tuple[str, int]] = []
    with PagingServer(log) as server:
        async with Kube(Connection(server=f"http://127.0.0.1:{server.port}", ssl_context=False)) as kube:
            pages = kube.pages("/items")
            async for _items, _version in pages:
                break
            await pages.aclose()  # the page asked for ahead is cancelled, and raises nothing later
            for _ in range(20):  # turns of the loop for a request that should not go out
                await asyncio.sleep(0)
    assert log[0] == ("asked", 0) and len(log) <= 2


@pytest.fixture(autouse=True)
def _no_unretrieved_exceptions(caplog):
    yield
    assert "exception was never retrieved" not in caplog.text
