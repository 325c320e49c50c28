"""The worker fences itself (docs/workers.md): when no write of its Worker object is acknowledged within its renew
deadline (2/3 of the leaseDuration, on a monotonic clock), it stops its handlers — a command SIGKILLed — before the
operator can see it expire, even while a write hangs; and it registers again instead of exiting. An API server on
127.0.0.1 that answers the worker's lists, watches and GETs, creates its Worker object, and then never answers a
PATCH of it."""

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

from tests.harness import running, serve_app, until
from sextant.kube.client import Kube
from sextant.kube.kubeconfig import Connection
from sextant.worker.registration import Offer, Registration
from sextant.worker.service import Worker
from sextant.worker.settings import Settings

NS = "shop"
LEASE_SECONDS = 3


class HangingApi:
    """Creates the Worker object, hangs every PATCH of it; lists what `objects` returns, answers GETs of the jobs
    in it, and holds watches open."""

    def __init__(self, objects: dict[str, list[Any]] | None = None) -> None:
        self.objects = objects or {}
        self.patches = 0
        self.creates: list[dict[str, Any]] = []
        self.patched: list[list[dict[str, Any]]] = []  # the PATCHes answered, once `back` is set
        self.hold = asyncio.Event()  # never set: what hangs waits on it
        self.back = False  # PATCHes are answered again (the API is back)

    async def create(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.creates.append(body)
        body["metadata"]["resourceVersion"] = "1"
        return web.json_response(body, status=201)

    async def patch(self, request: web.Request) -> web.Response:
        self.patches += 1
        if self.back:
            self.patched.append(await request.json())
            return web.json_response({"metadata": {"name": request.match_info["name"]}})
        await self.hold.wait()
        raise AssertionError("unreachable")

    async def get(self, request: web.Request) -> web.Response:
        for item in self.objects.get(request.match_info["plural"], []):
            found = item() if callable(item) else item
            if found["metadata"]["name"] == request.match_info["name"]:
                return web.json_response(found)
        return web.json_response({"kind": "Status", "reason": "NotFound", "message": "not found"}, status=404)

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
    app.router.add_post("/apis/sextant.dev/v1alpha1/namespaces/shop/workers", api.create)
    app.router.add_patch("/apis/sextant.dev/v1alpha1/namespaces/shop/workers/{name}", api.patch)
    app.router.add_get("/apis/sextant.dev/v1alpha1/namespaces/shop/{plural}", api.collection)
    app.router.add_get("/apis/sextant.dev/v1alpha1/namespaces/shop/{plural}/{name}", api.get)
    async with serve_app(app) as url, Kube(Connection(server=url, ssl_context=False), attempts=1) as kube:
        yield kube


async def test_a_hanging_write_gives_up_by_the_renew_deadline_not_after_the_lease():
    api = HangingApi()
    offer = Offer(frozenset({"q"}), frozenset({"h"}), 1, timedelta(seconds=LEASE_SECONDS))
    lost: list[tuple[float, str]] = []
    async with serving(api) as kube:
        def fenced(why: str) -> None:
            lost.append((time.monotonic(), why))
            api.back = True

        registration = Registration(kube, NS, "w", lambda: offer, lambda: [], on_lost=fenced)
        sent = time.monotonic()
        await registration.register()
        first = registration.incarnation
        renewing = asyncio.create_task(registration.run())
        try:
            await until(lambda: lost and api.patched, timeout=LEASE_SECONDS + 5,
                        message="fenced, then registered again")
        finally:
            renewing.cancel()
    lost_after = lost[0][0] - sent
    assert api.patches >= 1, "a write was sent and hung"
    assert offer.renew_deadline <= lost_after < LEASE_SECONDS, lost_after  # well before the request's own 60 s
    assert "renew deadline" in lost[0][1]
    # Registered again, not exited: one JSON patch, tested against the old incarnation, writing a new one.
    assert registration.incarnation != first and not registration.taken_over.is_set()
    [test, replace] = api.patched[0]
    assert test == {"op": "test", "path": "/spec/incarnation", "value": first}
    assert replace["op"] == "replace" and replace["path"] == "/spec"
    assert replace["value"]["incarnation"] == registration.incarnation


async def test_a_worker_whose_writes_hang_kills_its_command_before_it_can_expire(tmp_path: Path):
    pidfile = tmp_path / "pid"
    # A command that ignores SIGTERM, of a queue whose cancelGrace (30 s) outlasts the lease: only a SIGKILL
    # within the time left stops it in time.
    stubborn = ["sh", "-c", f'trap "" TERM; echo $$ > {pidfile}; while :; do sleep 0.05; done']
    queue = {"metadata": {"name": "q"}, "spec": {"leaseDuration": f"{LEASE_SECONDS}s", "cancelGrace": "30s"}}
    handler = {"metadata": {"name": "h"}, "spec": {"worker": {"command": stubborn}}}
    settings = Settings(namespace=NS, name="w", concurrency=1, drain_grace=1.0, want_queues=None,
                        want_handlers=None, allow_commands=True)
    worker: Worker | None = None
    job = {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
           "metadata": {"name": "job-a", "namespace": NS, "uid": "u-1", "resourceVersion": "1",
                        "creationTimestamp": "2026-03-01T11:59:00Z"},
           "spec": {"queue": "q", "handler": "h", "payload": {}}}

    def own() -> dict[str, Any]:  # the Worker object with one assignment for this worker's first incarnation
        assert worker is not None
        assignment = {"job": "job-a", "uid": "u-1", "queue": "q", "handler": "h", "sequence": 1, "attempt": 1,
                      "incarnation": first[0], "assignedAt": "2026-03-01T12:00:00Z"}
        return {"metadata": {"name": "w", "namespace": NS, "resourceVersion": "2"},
                "spec": {"incarnation": first[0]}, "status": {"assignments": [assignment]}}

    first: list[str] = []
    api = HangingApi({"workers": [own], "jobs": [job]})
    async with serving(api) as kube:
        from sextant.resources.handler import HandlerSpec
        from sextant.resources.queue import QueueSpec

        worker = Worker(kube, settings, {}, {"q": QueueSpec.model_validate(queue["spec"])},
                        {"h": HandlerSpec.model_validate(handler["spec"])}, lambda: None)
        first.append(worker.incarnation)
        fence = worker.registration.on_lost

        def fenced(why: str) -> None:  # the API is back as the worker fences itself
            api.back = True
            fence(why)

        worker.registration.on_lost = fenced
        sent = time.monotonic()  # no later than the object's creation is sent
        serving_task = asyncio.create_task(worker.run())
        try:
            await until(lambda: pidfile.exists() and pidfile.read_text().strip(), timeout=10,
                        message="the command to start")
            pid = int(pidfile.read_text())
            await until(lambda: not running(pid), timeout=LEASE_SECONDS + 1, interval=0.02,
                        message="the command to be killed")
            killed_after = time.monotonic() - sent
            await until(lambda: worker.registration.writes >= 2, timeout=5, message="registered again")
            assert not serving_task.done(), "a fenced worker does not exit"
            assert worker.results.to_write() == [], "the stopped attempt is not reported"
        finally:
            serving_task.cancel()
            if pidfile.exists() and running(pid := int(pidfile.read_text())):
                os.kill(pid, 9)
    assert killed_after < LEASE_SECONDS, f"the command ran on {killed_after:.2f}s, past the lease as others see it"
    assert api.patches >= 1, "a write was sent and hung"
    assert worker.incarnation != first[0]
