"""Admission per queue: at most `concurrency` slot holders, the rest wait in priority-then-FIFO order.

A slot holder is a job that is running, has a pod still alive, or has just been granted a slot (reserved)
and is starting its pod. Holders are recomputed from the view on every change, so the count is rebuilt
from the cluster on start and holds across operator restarts.
"""

from __future__ import annotations

import heapq
from collections import defaultdict

Key = tuple[str, str]
Entry = tuple[int, float, int, Key]  # (-priority, queued_at, order first seen, job)


class Admission:
    def __init__(self) -> None:
        self._holders: dict[Key, set[Key]] = defaultdict(set)  # queue → jobs holding a slot
        self._holder_queue: dict[Key, Key] = {}  # job → the queue it holds a slot in
        self._ready: dict[Key, list[Entry]] = defaultdict(list)
        self._entry: dict[Key, Entry] = {}
        self.reserved: set[Key] = set()

    def running(self, queue: Key) -> int:
        return len(self._holders.get(queue, ()))

    def hold(self, job: Key, queue: Key, holds: bool) -> bool:
        """Record whether job holds a slot in queue. True when a slot was freed."""
        holds = holds or job in self.reserved
        previous = self._holder_queue.get(job)
        if previous is not None and (not holds or previous != queue):
            self._holders[previous].discard(job)
            del self._holder_queue[job]
        if holds:
            self._holders[queue].add(job)
            self._holder_queue[job] = queue
        return previous is not None and not holds

    def offer(self, job: Key, queue: Key, priority: int, queued_at: float, seen: int) -> None:
        """job is runnable: put it in line (once; a changed position replaces the old one).

        seen breaks ties of queued_at, which has one-second resolution for new jobs (creationTimestamp):
        the order in which the watch delivered them, which is the order they were created in."""
        entry = (-priority, queued_at, seen, job)
        if self._entry.get(job) == entry:
            return
        self._entry[job] = entry
        heapq.heappush(self._ready[queue], entry)

    def withdraw(self, job: Key) -> None:
        self._entry.pop(job, None)

    def take(self, queue: Key, concurrency: int) -> list[Key]:
        """Grant free slots to the first in line; granted jobs are reserved until release()."""
        granted: list[Key] = []
        line = self._ready.get(queue)
        while line and self.running(queue) < concurrency:
            entry = heapq.heappop(line)
            job = entry[3]
            if self._entry.get(job) is not entry:
                continue  # stale: withdrawn or re-offered
            del self._entry[job]
            self.reserved.add(job)
            self.hold(job, queue, True)
            granted.append(job)
        return granted

    def release(self, job: Key) -> None:
        """The reservation ends: the job now holds its slot by its state and pods, or not at all."""
        self.reserved.discard(job)

    def forget(self, job: Key) -> None:
        self.release(job)
        self.withdraw(job)
        queue = self._holder_queue.pop(job, None)
        if queue is not None:
            self._holders[queue].discard(job)
