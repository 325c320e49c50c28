"""The job controller's retention: a finished job, or its pods, deleted once the retention of its queue is over
(lifecycle/retention.py decides when). A part of JobController (controller/jobs.py), which holds the state."""

from __future__ import annotations

from datetime import datetime

from ..kube import metrics
from ..kube.client import Conflict, NotFound
from ..kube.informer import Key
from ..lifecycle import idempotency, retention
from ..lifecycle.states import FINISHED
from ..resources import contract
from ..resources.queue import QueueSpec
from .records import JobRecord


def earliest(*moments: datetime | None) -> datetime | None:
    present = [m for m in moments if m is not None]
    return min(present) if present else None


class Retention:
    def _expiry(self, key: Key, record: JobRecord) -> retention.Expiry:
        queue = self.view.queues.get((key[0], record.queue))
        return retention.expiry(record.state, record.finished_at, queue.retention if queue else QueueSpec().retention,
                                idempotency.claim_end(record.idempotency_key, record.created_at,
                                                      self.view.idempotency_window))

    async def _retain(self, key: Key, now: datetime) -> datetime | None:
        """Delete a finished job, or its pods, once its retention is over; else when to look again."""
        record = self.view.jobs.get(key)
        if record is None:
            return None
        due = self._expiry(key, record)
        if due.job_at is not None and now >= due.job_at:
            try:  # only the version we judged: a job retried meanwhile is not deleted
                await self.kube.delete(contract.jobs_path(*key), None, {"uid": record.uid,
                                                                        "resourceVersion": record.resource_version})
                metrics.JOBS_DELETED.labels(key[0], record.queue).inc()
            except (NotFound, Conflict):
                pass  # gone, or changed since it was judged: the watch brings another look
            return None
        pods = self.view.pods_of(key)  # never someone else's pod that merely carries the job's labels
        if due.pods_at is not None and pods:
            if now < due.pods_at:
                return earliest(due.pods_at, due.job_at)
            for pod in list(pods.values()):
                if not pod.deleting:
                    try:
                        await self.kube.delete(contract.pods_path(key[0], pod.name))
                    except NotFound:
                        pass  # gone already
        return due.job_at

    def schedule_retention(self, key: Key) -> None:
        """A finished job that needs no reconcile still needs its retention wake-up (cheap: no parsing)."""
        record = self.view.jobs.get(key)
        if record is not None and record.state in FINISHED:
            due = self._expiry(key, record)
            when = due.job_at if not self.view.pods_of(key) else earliest(due.pods_at, due.job_at)
            self.timers.schedule(key, when, self.queue.add)
