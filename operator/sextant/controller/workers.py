"""Taking a job for a worker (docs/workers.md §2): which worker gets an admitted worker-mode job.

The queue's slot comes from Admission, as for a pod; on top of it a worker-mode job needs a free slot of a live
worker that serves its queue and handler. A worker's slot is held from the moment it is picked here until the
status write that assigns the job is in the view (then the view's `assigned` index counts it), so two reconciles
running at once never give one worker more jobs than it has slots.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from ..lifecycle import workers as W
from .informer import Key
from .view import View


class Assignments:
    def __init__(self, view: View) -> None:
        self.view = view
        self._reserved: dict[Key, tuple[str, W.WorkerLease]] = {}  # job → (namespace, the worker picked)
        self._inflight: Counter[tuple[str, str]] = Counter()  # (namespace, worker) → picked, not yet in the view

    def reserve(self, job: Key, queue: str, handler: str, now: datetime) -> bool:
        """Pick a worker with a free slot for job; False when none has one now."""
        if job in self._reserved:
            return True
        ns = job[0]
        busy = self.view.busy(ns)
        for (namespace, worker), count in self._inflight.items():
            if namespace == ns:
                busy[worker] = busy.get(worker, 0) + count
        lease = W.pick(self.view.workers.get(ns, {}).values(), queue, handler, now, busy)
        if lease is None:
            return False
        self._reserved[job] = (ns, lease)
        self._inflight[(ns, lease.name)] += 1
        return True

    def holder(self, job: Key) -> str | None:
        """The worker (<name>/<incarnation>) picked for job, if any."""
        picked = self._reserved.get(job)
        return picked[1].holder if picked else None

    def release(self, job: Key) -> None:
        picked = self._reserved.pop(job, None)
        if picked is not None:
            ns, lease = picked
            self._inflight[(ns, lease.name)] -= 1
            if self._inflight[(ns, lease.name)] <= 0:
                del self._inflight[(ns, lease.name)]
