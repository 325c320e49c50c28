"""The job controller's retention: a finished job, or its pods, deleted once the retention of its queue is over
(lifecycle/retention.py decides when), or once its queue or the cluster holds too many (controller/capping.py). A
part of JobController (controller/jobs.py), which holds the state.

With an archive (controller/archiving.py) no job is deleted before the record of the very version deleted has
landed: the delete's preconditions (uid and resourceVersion) are that version's."""

from __future__ import annotations

from datetime import datetime, timedelta

from ..kube import metrics
from ..kube.client import Conflict, NotFound
from ..kube.informer import Key
from ..lifecycle import idempotency, retention
from ..lifecycle.states import FINISHED
from ..resources import contract
from ..resources.queue import QueueSpec
from .archiving import Archiver
from .records import JobRecord

# A job whose record waits for the archive is looked at again after this at the latest (its record's landing
# brings the look sooner).
ARCHIVE_RECHECK = timedelta(seconds=30)


def earliest(*moments: datetime | None) -> datetime | None:
    present = [m for m in moments if m is not None]
    return min(present) if present else None


class Retention:
    archiver: Archiver | None

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
            if await self._delete_finished(key, record, "retention") is False:
                return now + ARCHIVE_RECHECK
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

    async def _delete_finished(self, key: Key, record: JobRecord, reason: str) -> bool | None:
        """Delete this version of a finished job once its record landed: True when deleted, False when it waits for
        the archive (asked to write it), None when it was gone or had changed (the watch brings another look)."""
        if self.archiver is not None and not self.archiver.landed(record.uid, record.version):
            self.archiver.request(key, record.uid, record.version)
            return False
        try:  # only the version we judged (and archived): a job retried meanwhile is not deleted
            await self.kube.delete(contract.jobs_path(*key), None, {"uid": record.uid,
                                                                    "resourceVersion": record.resource_version})
        except (NotFound, Conflict):
            return None
        metrics.JOBS_DELETED.labels(key[0], record.queue, reason).inc()
        return True

    async def _delete_capped(self, key: Key, record: JobRecord) -> str | None:
        """The cap's delete (controller/capping.py): counted as retention's when its time was over anyway."""
        due = self._expiry(key, record).job_at
        reason = "retention" if due is not None and self.now() >= due else "cap"
        return reason if await self._delete_finished(key, record, reason) else None

    def schedule_retention(self, key: Key) -> None:
        """A finished job that needs no reconcile still needs its retention wake-up (cheap: no parsing)."""
        record = self.view.jobs.get(key)
        if record is not None and record.state in FINISHED:
            due = self._expiry(key, record)
            when = due.job_at if not self.view.pods_of(key) else earliest(due.pods_at, due.job_at)
            self.timers.schedule(key, when, self.queue.add)
