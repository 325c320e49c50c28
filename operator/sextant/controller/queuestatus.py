"""Each Queue's status: its live numbers (running, queued, starting, scheduled, failed, the oldest queued job), so
that `kubectl get squeue` shows them.

Written from the in-memory view, never from a list: one wake-up on the operator's timer heap every INTERVAL
counts each queue's unfinished jobs (View.unfinished_by_queue: finished jobs cost nothing) and writes a queue's
status only when its numbers differ from what the Queue holds, so at most one write per queue per INTERVAL
and none while nothing changes. A round looks at every unfinished job, so with a large backlog the rounds are
spaced further apart: at most LOOKS_PER_SECOND job looks per second on average (a 10k backlog's numbers are then
20 s old at most, and counting costs under 1 % of a core instead of growing with the backlog). Only the leader
writes, through the controllers' fenced client; a standby keeps what the leader wrote (from the Queue watch) to
compare with once it takes over.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from ..kube.client import ApiError, Kube, NotFound, NotLeader
from ..lifecycle.queueing import count_unfinished, same_status, status_body
from ..resources import contract
from ..resources.job import State
from ..kube.informer import Key, key_of
from .timers import Timers
from .view import View

log = logging.getLogger(__name__)

INTERVAL = timedelta(seconds=3)
LOOKS_PER_SECOND = 500  # at 1000, counting was 2-5 % of the operator's CPU during a 10k burst
TIMER_KEY = ("queue-status",)


def next_round_after(looks: int, interval: timedelta) -> timedelta:
    """The wait before the next round, after one that looked at `looks` jobs: the interval, or longer with a backlog
    so that counting stays at LOOKS_PER_SECOND on average."""
    return max(interval, timedelta(seconds=looks / LOOKS_PER_SECOND))


class QueueStatusWriter:
    def __init__(self, kube: Kube, view: View, timers: Timers, now: Callable[[], datetime], leading: asyncio.Event,
                 interval: timedelta = INTERVAL,
                 rate: Callable[[Key], tuple[int, bool] | None] = lambda queue: None) -> None:
        self.kube, self.view, self.timers, self.now, self.leading = kube, view, timers, now, leading
        self.rate = rate  # a rate-limited queue's starts in its window, and whether jobs wait for it (Slots.rate)
        self.interval = interval
        self.generation: dict[Key, int | None] = {}
        self.stored: dict[Key, dict[str, Any]] = {}  # each Queue's status as last seen (watch) or written
        self._task: asyncio.Task[None] | None = None
        self._started = False

    def on_queue(self, kind: str, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        if kind == "delete":
            self.generation.pop(key, None)
            self.stored.pop(key, None)
            return
        self.generation[key] = obj["metadata"].get("generation")
        status = obj.get("status")
        self.stored[key] = status if isinstance(status, dict) else {}

    def start(self) -> None:
        """Once the view is complete: the first look at once, then every interval."""
        if not self._started:
            self._started = True
            self.timers.schedule(TIMER_KEY, self.now(), self._tick)

    def _tick(self, _key: object) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._round())
        else:
            self.timers.schedule(TIMER_KEY, self.now() + self.interval, self._tick)  # a slow round: skip this one

    async def _round(self) -> None:
        looks = 0
        try:
            if self.leading.is_set():
                for key in list(self.generation):
                    looks += len(self.view.unfinished_by_queue.get(key, ()))
                    await self.write(key)
        finally:
            self.timers.schedule(TIMER_KEY, self.now() + next_round_after(looks, self.interval), self._tick)

    def body(self, key: Key) -> dict[str, Any]:
        jobs = []
        for job_key in self.view.unfinished_by_queue.get(key, ()):
            record = self.view.live_job(job_key)
            if record is None:
                continue
            raw = record.raw
            if record.state not in (None, State.QUEUED):
                jobs.append((raw, False))  # only a queued job (or one not yet written) may be starting
                continue
            sequence = record.sequence
            pods = self.view.pods_of(job_key)
            # Starting: its pod has not started its handler, or its assignment is on its way to its worker.
            starting = any(p.sequence > sequence and p.alive and not p.started for p in pods.values()) or \
                job_key in self.view.pending
            jobs.append((raw, starting))
        spec = self.view.queues.get(key)
        numbers = count_unfinished(jobs, self.now())
        rate = self.rate(key)
        if rate is not None:
            numbers = replace(numbers, recent_starts=rate[0], rate_limited=rate[1])
        return status_body(numbers, self.generation.get(key), paused=spec is not None and spec.paused)

    async def write(self, key: Key) -> bool:
        """Write the queue's numbers when they changed; True when a write was made."""
        body = self.body(key)
        if same_status(self.stored.get(key), body):
            return False
        try:
            updated = await self.kube.merge_patch(contract.queues_path(*key, "status"), {"status": body}, retry=False)
        except NotLeader:
            return False
        except NotFound:  # gone: the watch brings the delete
            return False
        except ApiError as exc:
            log.warning("queue %s/%s: cannot write its status: %s", *key, exc)
            return False
        if key in self.generation:
            status = updated.get("status")
            self.stored[key] = status if isinstance(status, dict) else dict(body)
        return True
