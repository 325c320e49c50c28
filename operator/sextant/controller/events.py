"""Kubernetes Events, one per transition, posted off the hot path: never awaited by a reconcile, rate-limited
(a token bucket, like client-go's recorder) and with a bounded backlog, so that a burst of thousands of jobs
spends the API server's capacity on the jobs rather than on their Events; what is dropped is counted."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Any

from ..lifecycle.transitions import Event
from ..resources.common import format_time
from ..kube import ApiError, Kube

log = logging.getLogger(__name__)


class EventRecorder:
    def __init__(self, kube: Kube, now, enabled: bool = True, parallel: int = 4, backlog: int = 2000,
                 qps: float = 25.0, burst: int = 100) -> None:
        self.kube = kube
        self.now = now
        self.enabled = enabled
        self.backlog = backlog
        self.dropped = 0
        self.qps, self.burst = qps, burst
        self._tokens, self._filled_at = float(burst), time.monotonic()
        self._queue: asyncio.Queue[tuple[dict[str, Any], Event]] = asyncio.Queue()
        self._parallel = parallel
        self._instance = socket.gethostname()

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    def record(self, obj: dict[str, Any], event: Event) -> None:
        if not self.enabled:
            return
        if self._queue.qsize() >= self.backlog:
            self.dropped += 1  # under a burst the API server's capacity is better spent on jobs
            return
        self._queue.put_nowait((obj, event))

    async def run(self) -> None:
        await asyncio.gather(*(self._post_forever() for _ in range(self._parallel)))

    async def _post_forever(self) -> None:
        while True:
            obj, event = await self._queue.get()
            await self._token()
            try:
                await self.kube.create(f"/api/v1/namespaces/{obj['metadata']['namespace']}/events", self._body(obj, event))
            except ApiError as exc:
                log.debug("event not posted: %s", exc)

    async def _token(self) -> None:
        while True:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._filled_at) * self.qps)
            self._filled_at = now
            if self._tokens >= 1:
                self._tokens -= 1
                return
            await asyncio.sleep((1 - self._tokens) / self.qps)

    def _body(self, obj: dict[str, Any], event: Event) -> dict[str, Any]:
        meta = obj["metadata"]
        stamp = format_time(self.now(), precise=False)
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "reason": event.reason,
            "message": event.message[:1024],
            "type": event.type,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "source": {"component": "sextant-operator"},
            "reportingComponent": "sextant.dev/operator",
            "reportingInstance": self._instance,
        }
