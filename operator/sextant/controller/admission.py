"""Admission per queue: at most `concurrency` slot holders, the rest wait in priority-then-FIFO order.

A slot holder is a job that is running, has a pod still alive, or has just been granted a slot (reserved)
and is starting its pod. Holders are recomputed from the view on every change, so the count is rebuilt
from the cluster on start and holds across operator restarts.

Besides its concurrency: once the scheduler reports one of a queue's pods unschedulable (the cluster is full),
the queue has at most `pending_limit` holders whose pod waits for a node (or is still being created) until
the scheduler places them. A full cluster then keeps the backlog in the queue, in priority order, instead of
as thousands of Pending pods that the scheduler retries over and over (each retry a status patch and an Event)
and that a later, more urgent job could not overtake. While pods find nodes, nothing is held back: the gate
costs a cluster with room neither latency nor the extra "queued" status write of a job that waits.
"""

from __future__ import annotations

import enum
import heapq
from collections import defaultdict
from collections.abc import Callable

Key = tuple[str, str]
Entry = tuple[int, float, int, Key]  # (-priority, queued_at, order first seen, job)
# How many jobs in line one take() passes over that cannot start yet (a worker-mode job no worker has a free slot
# for), so that a pod-mode job behind them still starts, without scanning a long backlog on every change.
SKIP_LIMIT = 16


class Placement(enum.Enum):
    BOUND = "bound"  # on a node, or no live pod
    PENDING = "pending"  # waiting for the scheduler
    UNSCHEDULABLE = "unschedulable"  # the scheduler found no node for it (yet)


class Admission:
    def __init__(self) -> None:
        self._holders: dict[Key, set[Key]] = defaultdict(set)  # queue → jobs holding a slot
        self._holder_queue: dict[Key, Key] = {}  # job → the queue it holds a slot in
        self._pending: dict[Key, set[Key]] = defaultdict(set)  # queue → holders whose pod has no node yet
        self._unschedulable: dict[Key, set[Key]] = defaultdict(set)  # queue → those the scheduler could not place
        self._ready: dict[Key, list[Entry]] = defaultdict(list)
        self._entry: dict[Key, Entry] = {}
        self.reserved: set[Key] = set()

    def running(self, queue: Key) -> int:
        return len(self._holders.get(queue, ()))

    def pending(self, queue: Key) -> int:
        return len(self._pending.get(queue, ()))

    def hold(self, job: Key, queue: Key, holds: bool, placement: Placement = Placement.BOUND) -> bool:
        """Record whether job holds a slot in queue, and whether its pod still waits for a node. True when
        room was freed: a slot, or a waiting pod that got its node."""
        holds = holds or job in self.reserved
        pending = holds and (placement is not Placement.BOUND or job in self.reserved)
        unschedulable = holds and placement is Placement.UNSCHEDULABLE
        previous = self._holder_queue.get(job)
        was_pending = previous is not None and job in self._pending[previous]
        if previous is not None and (not holds or previous != queue):
            self._holders[previous].discard(job)
            self._pending[previous].discard(job)
            self._unschedulable[previous].discard(job)
            del self._holder_queue[job]
        if holds:
            self._holders[queue].add(job)
            self._holder_queue[job] = queue
            (self._pending[queue].add if pending else self._pending[queue].discard)(job)
            (self._unschedulable[queue].add if unschedulable else self._unschedulable[queue].discard)(job)
        return (previous is not None and not holds) or (was_pending and not pending)

    def full(self, queue: Key, pending_limit: int | None) -> bool:
        """The cluster has no room for the queue's pods, and enough of them already wait for a node."""
        return (pending_limit is not None and bool(self._unschedulable.get(queue))
                and self.pending(queue) >= pending_limit)

    def offer(self, job: Key, queue: Key, priority: int, queued_at: float, seen: int) -> None:
        """job is runnable: put it in line (once; a changed position replaces the old one).

        seen breaks ties of queued_at, which has one-second resolution for new jobs (creationTimestamp):
        the order in which the watch delivered them, which is the order they were created in."""
        entry = (-priority, queued_at, seen, job)
        if self._entry.get(job) == entry:
            return
        self._entry[job] = entry
        heapq.heappush(self._ready[queue], entry)

    def in_line(self, job: Key) -> bool:
        """job waits in its queue's line for a slot."""
        return job in self._entry

    def withdraw(self, job: Key) -> None:
        self._entry.pop(job, None)

    def take(self, queue: Key, concurrency: int, pending_limit: int | None = None,
             startable: Callable[[Key], bool] | None = None) -> list[Key]:
        """Grant free slots to the first in line that can start (`startable`, e.g. a worker has room for it);
        granted jobs are reserved until release(). Those passed over keep their place."""
        granted: list[Key] = []
        skipped: list[Entry] = []
        line = self._ready.get(queue)
        while line and self.running(queue) < concurrency and not self.full(queue, pending_limit):
            entry = heapq.heappop(line)
            job = entry[3]
            if self._entry.get(job) is not entry:
                continue  # stale: withdrawn or re-offered
            if startable is not None and not startable(job):
                skipped.append(entry)
                if len(skipped) >= SKIP_LIMIT:
                    break
                continue
            del self._entry[job]
            self.reserved.add(job)
            self.hold(job, queue, True)
            granted.append(job)
        for entry in skipped:
            heapq.heappush(self._ready[queue], entry)
        return granted

    def release(self, job: Key) -> None:
        """The reservation ends: the job now holds its slot by its state and pods, or not at all."""
        self.reserved.discard(job)

    def forget(self, job: Key) -> None:
        self.release(job)
        self.withdraw(job)
        queue = self._holder_queue.get(job)
        if queue is not None:
            self.hold(job, queue, False)
