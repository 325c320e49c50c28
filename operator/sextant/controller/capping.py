"""The count cap on finished jobs kept as objects (issue 42; docs/archive.md, "How many finished jobs stay objects"):
past a queue's retention.maxJobs or the operator's --max-finished-jobs, the oldest finished jobs are deleted before
their time, through retention's delete path (archived first, deleted with uid and resourceVersion preconditions).
lifecycle/retention.py's over_cap decides which; this module keeps what it walks and acts on it while leading."""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

from ..kube.events import EventRecorder
from ..kube.informer import Key, key_of
from ..lifecycle import retention
from ..lifecycle.decision import Event
from ..resources import API_VERSION
from .records import FinishedJob, JobRecord
from .view import View

log = logging.getLogger(__name__)

# Jobs deleted per pass at most (the API server's deletes, a few ms each), and deletes in flight at once.
PASS_LIMIT = 200
DELETES_AT_ONCE = 8
# Seconds between two passes while jobs are over a cap, and between two looks when nothing asks for one.
PAUSE, IDLE = 0.5, 10.0
# One Warning Event per queue at most this often: under a steady rate the cap deletes jobs every second.
EVENT_EVERY = timedelta(minutes=1)
# A queue's heap is rebuilt from the view when it holds this many entries more than twice its finished jobs
# (entries of jobs deleted or retried are dropped lazily, when a walk meets them).
SLACK = 1024


class FinishedIndex:
    """The finished jobs of each queue by when they finished, oldest first: a heap per queue of (finish time as
    epoch seconds, job name). Fed from the informer path (JobController.on_job) when a job finishes, or finishes
    again; an entry whose job went, changed queue or finished again later is dropped when a walk meets it (the view
    says what is current), so feeding costs one push per finish and deleting nothing."""

    def __init__(self, view: View) -> None:
        self.view = view
        self.heaps: dict[Key, list[tuple[float, str]]] = {}

    def observe(self, key: Key, before: JobRecord | None, after: JobRecord) -> bool:
        """A job's new record: filed when it is newly finished (or finished at another time); True then."""
        if after.unfinished or after.finished_at is None:
            return False
        if before is not None and not before.unfinished and before.finished_at == after.finished_at \
                and before.queue == after.queue:
            return False
        heapq.heappush(self.heaps.setdefault((key[0], after.queue), []), (after.finished_at.timestamp(), key[1]))
        return True

    def _current(self, queue: Key, entry: tuple[float, str]) -> bool:
        record = self.view.jobs.get((queue[0], entry[1]))
        return (record is not None and not record.unfinished and record.queue == queue[1]
                and record.finished_at is not None and abs(record.finished_at.timestamp() - entry[0]) < 1e-3)

    def compact(self, counts: dict[Key, int]) -> None:
        for queue, heap in list(self.heaps.items()):
            if not counts.get(queue):
                heap.clear()  # the queue has no finished job left: every entry is stale
            elif len(heap) > 2 * counts[queue] + SLACK:
                heap[:] = [(r.finished_at.timestamp(), k[1]) for k, r in self.view.jobs_of_queue(queue)
                           if not r.unfinished and r.finished_at is not None]
                heapq.heapify(heap)
            if not heap:
                del self.heaps[queue]

    def over_cap(self, counts: dict[Key, int], caps: dict[Key, int | None], cluster_cap: int | None,
                 limit: int) -> list[tuple[Key, Key]]:
        """over_cap's answer, walking every queue's heap at once oldest first; what the walk took off the heaps
        goes back (the chosen too: their deletion, seen from the watch, makes their entries stale)."""
        taken: list[tuple[Key, tuple[float, str]]] = []
        seen: set[Key] = set()

        def walk(queue: Key) -> Iterator[tuple[float, Key, Key]]:
            heap = self.heaps.get(queue, [])
            while heap:
                entry = heapq.heappop(heap)
                key = (queue[0], entry[1])
                if key in seen or not self._current(queue, entry):
                    continue  # stale or a second entry of one finish: dropped for good
                seen.add(key)
                taken.append((queue, entry))
                yield entry[0], key, queue

        try:
            merged = heapq.merge(*(walk(q) for q in list(self.heaps)))
            return retention.over_cap(((key, queue) for _, key, queue in merged), counts, caps, cluster_cap, limit)
        finally:
            for queue, entry in taken:
                heapq.heappush(self.heaps.setdefault(queue, []), entry)


class Capper:
    """Deletes what over_cap chooses, while this replica leads, and says so: a Warning Event RetentionCapped on the
    queue (at most one per EVENT_EVERY) and sextant_jobs_deleted_total{reason="cap"}."""

    def __init__(self, view: View, index: FinishedIndex, events: EventRecorder, leading: asyncio.Event,
                 now: Callable[[], datetime], cluster_cap: int | None,
                 delete: Callable[[Key, FinishedJob], Awaitable[str | None]]) -> None:
        self.view, self.index, self.events, self.leading, self.now = view, index, events, leading, now
        self.cluster_cap = cluster_cap
        self.delete = delete  # deletes one job (archived first): the reason counted, or None when it did not
        self.queue_uids: dict[Key, str] = {}  # for the Events' involved object
        self._warned: dict[Key, datetime] = {}
        self._kick = asyncio.Event()

    def kick(self) -> None:
        self._kick.set()

    def on_queue(self, kind: str, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        if kind == "delete":
            self.queue_uids.pop(key, None)
        else:
            self.queue_uids[key] = obj["metadata"].get("uid", "")
        self.kick()  # its maxJobs may have changed

    def _counts(self) -> dict[Key, int]:
        return {queue: sum(states.values()) for queue, states in list(self.view.finished_by_queue.items())}

    def _caps(self) -> dict[Key, int | None]:
        return {queue: spec.retention.max_jobs for queue, spec in list(self.view.queues.items())}

    async def run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._kick.wait(), IDLE)
            except asyncio.TimeoutError:
                pass
            self._kick.clear()
            await self.leading.wait()
            if await self.pass_once():
                self._kick.set()  # more may be over: another pass after the pause
            await asyncio.sleep(PAUSE)

    async def pass_once(self) -> int:
        """One pass: how many jobs it chose (deleted, or waiting for their records to land)."""
        counts, caps = self._counts(), self._caps()
        self.index.compact(counts)
        over_queue = any(c is not None and counts.get(q, 0) > c for q, c in caps.items())
        if not over_queue and (self.cluster_cap is None or sum(counts.values()) <= self.cluster_cap):
            return 0
        chosen = self.index.over_cap(counts, caps, self.cluster_cap, PASS_LIMIT)
        capped: dict[Key, int] = {}
        for start in range(0, len(chosen), DELETES_AT_ONCE):
            part = chosen[start:start + DELETES_AT_ONCE]
            reasons = await asyncio.gather(*(self._delete(key) for key, _ in part))
            for (_, queue), reason in zip(part, reasons):
                if reason == "cap":
                    capped[queue] = capped.get(queue, 0) + 1
        for queue, n in capped.items():
            self._warn(queue, n, counts.get(queue, 0), caps.get(queue))
        return len(chosen)

    async def _delete(self, key: Key) -> str | None:
        record = self.view.jobs.get(key)
        if not isinstance(record, FinishedJob):
            return None  # gone, or finished but not yet settled: the rules still act on it
        try:
            return await self.delete(key, record)
        except Exception as exc:  # noqa: BLE001 - one refused delete (or a deposed leader) must not stop the pass
            log.warning("job %s/%s: not deleted by the cap: %s: %s", *key, type(exc).__name__, exc)
            return None

    def _warn(self, queue: Key, deleted: int, count: int, cap: int | None) -> None:
        now = self.now()
        last = self._warned.get(queue)
        if last is not None and now - last < EVENT_EVERY:
            return
        self._warned[queue] = now
        if cap is not None and count > cap:
            why = f"the queue keeps at most {cap} finished jobs (spec.retention.maxJobs)"
        else:
            why = f"the cluster keeps at most {self.cluster_cap} finished jobs (the operator's --max-finished-jobs)"
        log.warning("queue %s/%s: %d finished jobs deleted before their retention: %s", *queue, deleted, why)
        obj = {"apiVersion": API_VERSION, "kind": "Queue",
               "metadata": {"namespace": queue[0], "name": queue[1], "uid": self.queue_uids.get(queue, "")}}
        self.events.record(obj, Event("RetentionCapped", f"{deleted} finished jobs deleted before their retention "
                                      f"(oldest first): {why}", "Warning"))
