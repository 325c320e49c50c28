"""The worker fences itself (docs/workers.md §5): when no renewal of its Lease is acknowledged within its renew deadline
(2/3 of the leaseDuration, on a monotonic clock), it stops its handlers — a command SIGKILLed — before others can see
the Lease expire, even while a renewal's PUT hangs. An API server on 127.0.0.1 that answers the worker's list and
watch, creates its Lease, and then never answers a PUT of it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.harness import running, until
from sextant.kube.client import Kube
from sextant.kube.kubeconfig import Connection
from sextant.worker.registration import Offer, Registration
from sextant.worker.service import Worker
from sextant.worker.settings import Settings

NS = "shop"
LEASE_SECONDS = 3


class HangingApi:
    """Creates the Lease, hangs every PUT of it; lists what `objects` returns, and holds watches open."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]] | None = None) -> None:
        self.objects = objects or {}
        self.puts = 0
        self.hold = asyncio.Event()  # never set: what hangs waits on it

    async def create(self, request: web.Request) -> web.Response:
        body = await request.json()
        body["metadata"]["resourceVersion"] = "1"
        return web.json_response(body, status=201)

    async def put(self, _: web.Request) -> web.Response:
        self.puts += 1
        await self.hold.wait()
        raise AssertionError("unreachable")

    async def collection(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") == "true":
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            await response.prepare(request)
            await self.hold.wait()
            return response
        items = self.objects.get(request.match_info["plural"], [])
        return web.json_response({"kind": "List", "items": [item() if callable(item) else item for item in items],
                                  "metadata": {"resourceVersion": "1"}})


@contextlib.asynccontextmanager
async def serving(api: HangingApi) -> AsyncIterator[Kube]:
    app = web.Application()
    app.router.add_post("/apis/coordination.k8s.io/v1/namespaces/shop/leases", api.create)
    app.router.add_put("/apis/coordination.k8s.io/v1/namespaces/shop/leases/{name}", api.put)
    app.router.add_get("/apis/sextant.dev/v1alpha1/namespaces/shop/{plural}", api.collection)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with Kube(Connection(server=f"http://127.0.0.1:{port}", ssl_context=False), attempts=1) as kube:
            yield kube
    finally:
        await runner.cleanup()


async def test_a_hanging_renewal_gives_up_by_the_renew_deadline_not_after_the_lease():
    api = HangingApi()
    offer = Offer(frozenset({"q"}), frozenset({"h"}), 1, timedelta(seconds=LEASE_SECONDS))
    async with serving(api) as kube:
        registration = Registration(kube, NS, "w", "w/1", lambda: offer)
        sent = time.monotonic()
        await registration.register()
        renewing = asyncio.create_task(registration.run())
        try:
            await asyncio.wait_for(registration.lost.wait(), LEASE_SECONDS)  # well before the PUT's own 60 s
        finally:
            renewing.cancel()
        lost_after = time.monotonic() - sent
    assert api.puts >= 1, "a renewal was sent and hung"
    assert offer.renew_deadline <= lost_after < LEASE_SECONDS, lost_after
    assert "renew deadline" in registration.lost_reason
    assert registration.expires_in() > 0, "lost while others still see the Lease as held"


async def test_a_worker_whose_renewals_hang_kills_its_command_before_its_lease_expires(tmp_path: Path):
    pidfile = tmp_path / "pid"
    # A command that ignores SIGTERM, of a queue whose cancelGrace (30 s) outlasts the lease: only a SIGKILL
    # within the time left stops it in time.
    stubborn = ["sh", "-c", f'trap "" TERM; echo $$ > {pidfile}; while :; do sleep 0.05; done']
    queue = {"metadata": {"name": "q"}, "spec": {"leaseDuration": f"{LEASE_SECONDS}s", "cancelGrace": "30s"}}
    handler = {"metadata": {"name": "h"}, "spec": {"worker": {"command": stubborn}}}
    settings = Settings(namespace=NS, name="w", concurrency=1, drain_grace=1.0, want_queues=None,
                        want_handlers=None, events=False)
    worker: Worker | None = None

    def assigned() -> dict[str, Any]:  # the job as the operator wrote it for this worker's incarnation
        assert worker is not None
        entry = {"attempt": 1, "sequence": 1, "worker": worker.holder, "node": "w",
                 "startedAt": "2026-03-01T12:00:00Z", "result": "running"}
        return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
                "metadata": {"name": "job-a", "namespace": NS, "uid": "u-1", "resourceVersion": "1",
                             "creationTimestamp": "2026-03-01T11:59:00Z"},
                "spec": {"queue": "q", "handler": "h", "payload": {}},
                "status": {"state": "running", "worker": "w", "sequence": 1, "attempt": 1, "attempts": [entry]}}

    api = HangingApi({"jobs": [assigned]})
    async with serving(api) as kube:
        from sextant.resources.handler import HandlerSpec
        from sextant.resources.queue import QueueSpec

        worker = Worker(kube, settings, {}, {"q": QueueSpec.model_validate(queue["spec"])},
                        {"h": HandlerSpec.model_validate(handler["spec"])}, lambda: None)
        sent = time.monotonic()  # no later than the Lease's creation is sent
        serving_task = asyncio.create_task(worker.run())
        try:
            await until(lambda: pidfile.exists() and pidfile.read_text().strip(), timeout=10,
                        message="the command to start")
            pid = int(pidfile.read_text())
            await until(lambda: not running(pid), timeout=LEASE_SECONDS + 1, interval=0.02,
                        message="the command to be killed")
            killed_after = time.monotonic() - sent
            code = await asyncio.wait_for(serving_task, 5)
        finally:
            serving_task.cancel()
            if pidfile.exists() and running(pid := int(pidfile.read_text())):
                os.kill(pid, 9)
    assert killed_after < LEASE_SECONDS, f"the command ran on {killed_after:.2f}s, past the lease as others see it"
    assert code == 1 and "renew deadline" in worker.registration.lost_reason
    assert api.puts >= 1, "a renewal was sent and hung"

