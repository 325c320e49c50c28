"""Kubernetes Events, one per transition, posted off the hot path: never awaited by a reconcile, rate-limited
and with a bounded backlog, so that a burst of thousands of jobs spends the API server's capacity on the jobs
rather than on their Events.

Two budgets (token buckets, like client-go's recorder): Warnings (failures, dead, timeouts, refusals) wait for
a token of the larger one; Normal Events (queued, started, succeeded) get a small one and are dropped, not
queued, when it is empty. A person reading `kubectl describe` sees every transition of a quiet system and every
Warning of a busy one; a 10k burst does not pay one Event write per transition. Drops are counted
(sextant_events_dropped_total)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Any, Protocol

from . import metrics
from ..resources import contract
from ..resources.common import format_time
from .client import ApiError, Kube

log = logging.getLogger(__name__)


class Event(Protocol):
    """What an Event says (the lifecycle's transitions.Event is one), read here without importing the rules."""

    reason: str
    message: str
    type: str


class TokenBucket:
    def __init__(self, qps: float, burst: int) -> None:
        self.qps, self.burst = qps, burst
        self._tokens, self._filled_at = float(burst), time.monotonic()

    def _fill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._filled_at) * self.qps)
        self._filled_at = now

    def try_take(self) -> bool:
        self._fill()
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False

    async def take(self) -> None:
        while not self.try_take():
            await asyncio.sleep((1 - self._tokens) / self.qps)


class EventRecorder:
    def __init__(self, kube: Kube, now, enabled: bool = True, parallel: int = 4, backlog: int = 2000,
                 qps: float = 25.0, burst: int = 100, normal_qps: float = 5.0, normal_burst: int = 100,
                 component: str = "sextant-operator") -> None:
        self.kube = kube
        self.component = component  # the Events' source: the operator, or a worker (sextant-worker)
        self.now = now
        self.enabled = enabled
        self.backlog = backlog
        self.dropped = 0
        self._bucket = TokenBucket(qps, burst)  # every post takes one of these
        self._normal = TokenBucket(normal_qps, normal_burst)  # and a Normal Event one of these first
        self._queue: asyncio.Queue[tuple[dict[str, Any], Event]] = asyncio.Queue()
        self._parallel = parallel
        self._instance = socket.gethostname()

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    def record(self, obj: dict[str, Any], event: Event) -> None:
        if not self.enabled:
            return
        if self._queue.qsize() >= self.backlog or (event.type == "Normal" and not self._normal.try_take()):
            self.dropped += 1  # under a burst the API server's capacity is better spent on jobs
            metrics.EVENTS_DROPPED.labels(event.type).inc()
            return
        self._queue.put_nowait((obj, event))

    async def run(self) -> None:
        await asyncio.gather(*(self._post_forever() for _ in range(self._parallel)))

    async def _post_forever(self) -> None:
        while True:
            obj, event = await self._queue.get()
            await self._bucket.take()
            try:
                # Nothing of the answer is read: the API server need not send the Event back whole.
                await self.kube.request("POST", contract.events_path(obj["metadata"]["namespace"]),
                                        body=self._body(obj, event), metadata_only=True)
            except ApiError as exc:
                log.debug("event not posted: %s", exc)
            except Exception as exc:  # noqa: BLE001 - an odd object must not stop the poster
                log.warning("event %s not posted: %s: %s", event.reason, type(exc).__name__, exc)

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
            "source": {"component": self.component},
            "reportingComponent": "sextant.dev/" + self.component.removeprefix("sextant-"),
            "reportingInstance": self._instance,
        }
