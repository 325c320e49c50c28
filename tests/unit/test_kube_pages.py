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

from sextant.kube.client import FIRST_PAGE, Kube
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
        runner = self._runner = web.AppRunner(app)
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
        # Its connections' handlers end with it (a client's keep-alive connection may still be open).
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
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


class SizedServer(PagingServer):
    """Serves /items from a list of object sizes, honouring `limit` and `continue` (an offset) as the API server
    does; records the limit of each request."""

    def __init__(self, sizes: list[int]) -> None:
        super().__init__([])
        self.sizes = sizes
        self.limits: list[int] = []
        self.asked: list[tuple[int, int]] = []  # (offset, limit) of each request

    async def _items(self, request: web.Request) -> web.Response:
        start, limit = int(request.query.get("continue", "0")), int(request.query["limit"])
        self.limits.append(limit)
        self.asked.append((start, limit))
        end = min(len(self.sizes), start + limit)
        items = [{"metadata": {"name": f"o-{i}"}, "spec": {"payload": {"blob": "x" * self.sizes[i]}}}
                 for i in range(start, end)]
        meta: dict[str, Any] = {"continue": str(end)} if end < len(self.sizes) else {"resourceVersion": "7"}
        return web.json_response({"metadata": meta, "items": items})


async def _names(server: SizedServer, page_bytes: int) -> list[str]:
    async with Kube(Connection(server=f"http://127.0.0.1:{server.port}", ssl_context=False)) as kube:
        return [o["metadata"]["name"] async for items, _ in kube.pages("/items", None, 5000, page_bytes)
                for o in items]


async def test_a_page_sized_by_bytes_holds_few_heavy_objects_and_many_light_ones():
    """The informers' lists (issue 28): 10,000 jobs of 256 KiB must not come 5000 at a time (~14 GB parsed)."""
    heavy, light = 100_000, 100
    with SizedServer([heavy] * 200) as server:
        assert await _names(server, 1_000_000) == [f"o-{i}" for i in range(200)]
    assert server.limits[0] == FIRST_PAGE and max(server.limits[1:]) <= 10, server.limits
    with SizedServer([light] * 20_000) as server:
        assert await _names(server, 1_000_000) == [f"o-{i}" for i in range(20_000)]
    # Growing at most 8-fold a page, up to the page's item cap.
    assert server.limits[:4] == [FIRST_PAGE, 8 * FIRST_PAGE, 64 * FIRST_PAGE, 5000], server.limits


async def test_a_page_far_over_its_bytes_is_asked_for_again_with_fewer_items():
    """Light objects, then heavy ones: the page sized for light ones would be 100 times too long. It is not read past
    3 × page_bytes; the same page is asked for again with a quarter of the items, until it fits."""
    sizes = [100] * 2000 + [100_000] * 100
    with SizedServer(sizes) as server:
        assert await _names(server, 1_000_000) == [f"o-{i}" for i in range(len(sizes))]
    again = [(a, b) for a, b in zip(server.asked, server.asked[1:]) if a[0] == b[0]]  # the same page asked again
    assert again and all(b[1] == max(1, a[1] // 4) for a, b in again), server.asked
    # Each page that was read whole held at most 3 × page_bytes: the heavy ones came at most ~30 at a time.
    read = [a for a, b in zip(server.asked, server.asked[1:] + [(len(sizes), 0)]) if a[0] != b[0]]
    assert all(sum(sizes[start:start + limit]) <= 3 * 1_000_000 for start, limit in read), server.asked


async def test_without_page_bytes_pages_are_the_callers_size():
    with SizedServer([10] * 50) as server:
        async with Kube(Connection(server=f"http://127.0.0.1:{server.port}", ssl_context=False)) as kube:
            items, _ = await kube.list("/items", None, 20)
    assert len(items) == 50 and server.limits == [20, 20, 20]
