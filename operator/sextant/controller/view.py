"""The in-memory view of everything Sextant owns; the reconcilers read only this.

Its only writer is the informers: each object is turned into its record as it arrives (controller/records.py), and
the indexes are declared once (controller/indexes.py). The answers to the operator's own writes go to its
expectations (controller/expectations.py), never here; Worker objects are the one exception
(controller/workerview.py).
"""

from __future__ import annotations

import itertools
import logging
import struct
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from ..kube.clock import utcnow
from ..kube.informer import Key, give_back_memory, key_of
from ..lifecycle import workers as W
from ..lifecycle.attempts import PodObservation
from ..lifecycle.idempotency import WINDOW, claimant, undecided
from ..lifecycle.reading import read_job
from ..lifecycle.states import FINISHED
from ..lifecycle.transitions import JobSnapshot, Observations
from ..resources.common import time_or_none
from ..resources.contract import LABEL_JOB
from ..resources.handler import HandlerSpec
from ..resources.job import State
from ..resources.queue import QueueSpec
from ..resources.report import Progress
from .indexes import Index, Indexes, Tally
from .pods import controller_uid, observe
from .records import FinishedJob, JobRecord, LeaseObservation, LiveJob, attempt_of, job_record, lease_progress
from .workerview import WorkerView

log = logging.getLogger(__name__)

_MOVED = struct.Struct("<IHI")  # a finished job in View.compact's buffer: its namespace's number, name and record sizes


def _indexes() -> Indexes[JobRecord]:
    """Every index of the jobs: by what each files a record under."""
    return Indexes(
        # Unfinished jobs per queue and handler, to wake when those appear or change.
        unfinished_by_queue=Index(lambda key, r: [(key[0], r.queue)] if r.unfinished else []),
        unfinished_by_handler=Index(lambda key, r: [(key[0], r.handler)] if r.unfinished else []),
        # Finished jobs per queue and state, counted as they come and go (GET /v2/queues: no scan of the jobs).
        finished_by_queue=Tally(lambda key, r: None if r.unfinished else ((key[0], r.queue), r.state.value)),
        # (namespace, idempotency key) → its jobs.
        by_idempotency_key=Index(lambda key, r: [(key[0], r.idempotency_key)] if r.idempotency_key else []),
        # (namespace, schedule) → its jobs (the label sextant.dev/schedule).
        by_schedule=Index(lambda key, r: [(key[0], r.schedule)] if r.schedule else []),
    )


class _JobVersions(Mapping[Key, str]):
    def __init__(self, jobs: dict[Key, JobRecord], namespace: str | None) -> None:
        self.jobs, self.namespace = jobs, namespace

    def _ours(self, key: Key) -> bool:
        return self.namespace is None or key[0] == self.namespace

    def __getitem__(self, key: Key) -> str:
        if not self._ours(key):
            raise KeyError(key)
        return self.jobs[key].resource_version

    def __iter__(self) -> Iterator[Key]:
        return (key for key in list(self.jobs) if self._ours(key))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class View(WorkerView):
    def __init__(self, now: Callable[[], datetime] = utcnow, idempotency_window: timedelta = WINDOW,
                 max_worker_slots: int = W.MAX_WORKER_SLOTS) -> None:
        super().__init__(now, max_worker_slots)
        self.idempotency_window = idempotency_window
        self.jobs: dict[Key, JobRecord] = {}
        self.indexes = _indexes()
        # job → sequence → pod: every pod named and labelled as the job's attempt, its owner compared when read
        # (pods_of), since a pod may be seen before its job.
        self.pods: dict[Key, dict[int, PodObservation]] = defaultdict(dict)
        self.queues: dict[Key, QueueSpec] = {}
        self.handlers: dict[Key, HandlerSpec] = {}
        self.leases: dict[Key, dict[int, LeaseObservation]] = defaultdict(dict)  # job → sequence → its Lease
        # job → sequence → the last state of an attempt pod deleted after a disruption (PodGC marks the pod of a
        # deleted node and force-deletes it at once: the deletion may be all a reconcile sees). Rare, dropped with the
        # job.
        self.gone: dict[Key, dict[int, PodObservation]] = defaultdict(dict)
        self._seen_order = itertools.count()
        # Whom to tell when one of a schedule's jobs appears, goes, finishes or runs again (what a schedule's
        # evaluation depends on: controller/schedules.py).
        self.on_schedule_jobs: Callable[[Key, str], None] = lambda schedule, job: None

    @property
    def unfinished_by_queue(self) -> dict[Key, set[Key]]:
        return self.indexes["unfinished_by_queue"]

    @property
    def unfinished_by_handler(self) -> dict[Key, set[Key]]:
        return self.indexes["unfinished_by_handler"]

    @property
    def finished_by_queue(self) -> dict[Key, Any]:
        return self.indexes["finished_by_queue"]

    @property
    def by_idempotency_key(self) -> dict[Key, set[Key]]:
        return self.indexes["by_idempotency_key"]

    @property
    def by_schedule(self) -> dict[Key, set[Key]]:
        return self.indexes["by_schedule"]

    # --- feeding (the informers) ---------------------------------------------------------------------------
    def upsert_job(self, raw: dict[str, Any]) -> JobRecord:
        """Take a job in as its informer delivers it (the watch delivers each object's versions in order)."""
        namespace, name = key_of(raw)
        key = (sys.intern(namespace), name)  # one copy of a namespace's name for its 100k jobs, not one each
        previous = self.jobs.get(key)
        record = job_record(raw, previous, next(self._seen_order) if not isinstance(previous, LiveJob) else 0)
        if previous is not None:
            self.indexes.remove(key, previous)
        self.jobs[key] = record
        self.indexes.add(key, record)
        self._tell_schedule(key, previous, record)
        return record

    def compact(self) -> None:
        """Make the finished jobs' keys and records again, in a row (once the first list is in). Made while each list
        page was digested, they lie scattered among the pages' freed objects, and CPython's allocator returns an
        arena (1 MiB) to the OS only when all of it is free: 100k listed jobs kept ~40 MB of mostly empty arenas
        alive. Moved out into one flat buffer (outside those arenas), dropped, then made again: the arenas the
        pages left empty go back. Synchronous (no reader sees the view half-made); the jobs keep their order."""
        buffer, order, namespaces = bytearray(), [], {}
        for key, record in self.jobs.items():
            if isinstance(record, FinishedJob):
                name = key[1].encode()
                buffer += _MOVED.pack(namespaces.setdefault(key[0], len(namespaces)), len(name), len(record))
                buffer += name
                buffer += record
                order.append(None)
            else:
                order.append((key, record))
        by_number = list(namespaces)
        self.jobs.clear()
        at, view = 0, memoryview(buffer)
        for entry in order:
            if entry is None:
                namespace, size, length = _MOVED.unpack_from(view, at)
                at += _MOVED.size
                name = str(view[at:at + size], "utf-8")
                self.jobs[(by_number[namespace], name)] = FinishedJob(view[at + size:at + size + length])
                at += size + length
            else:
                self.jobs[entry[0]] = entry[1]
        view.release()
        give_back_memory()

    def delete_job(self, raw: dict[str, Any]) -> Key:
        key = key_of(raw)
        previous = self.jobs.pop(key, None)
        self.gone.pop(key, None)
        if previous is not None:
            self.indexes.remove(key, previous)
            self._tell_schedule(key, previous, None)
        return key

    def _tell_schedule(self, key: Key, before: JobRecord | None, after: JobRecord | None) -> None:
        old = before.schedule if before is not None else None
        new = after.schedule if after is not None else None
        if old is not None and old != new:
            self.on_schedule_jobs((key[0], old), key[1])
        if new is not None and (old != new or before is None or before.unfinished != after.unfinished):
            self.on_schedule_jobs((key[0], new), key[1])

    def upsert_pod(self, pod: dict[str, Any]) -> Key | None:
        """Take an attempt pod in; returns its job's key when what the operator reads of the pod changed (not for a
        condition or an annotation)."""
        if attempt_of(pod) is None:
            return None  # labelled as an attempt, but not named as one: someone else's pod
        job = self.job_of_pod(pod)
        seen = observe(pod)
        if job is None or seen is None:
            return None
        runs = self.pods[job]
        if runs.get(seen.sequence) == seen:
            return None
        runs[seen.sequence] = seen
        return job

    def delete_pod(self, pod: dict[str, Any]) -> Key | None:
        job = self.job_of_pod(pod)
        if job is None:
            return None
        last = observe(pod) if attempt_of(pod) is not None else None  # a relist's delete notice has no state
        if last is not None and last.disruption is not None:
            self.gone[job][last.sequence] = last
        runs = self.pods.get(job, {})
        for sequence, current in list(runs.items()):
            if current.name == pod["metadata"]["name"]:
                del runs[sequence]
        if not runs:
            self.pods.pop(job, None)
        return job

    def upsert_lease(self, lease: dict[str, Any]) -> Key | None:
        """Take an attempt's Lease in: named as the attempt's pod and held by it (holderIdentity), its owner the pod
        (compared with the attempt's pod when read). The renewal counts from when it was seen at the latest, so
        a renewTime in the future cannot keep an attempt alive."""
        attempt = attempt_of(lease)
        spec = lease.get("spec") or {}
        renewed = time_or_none(spec.get("renewTime"))  # unreadable: no sign of life
        if attempt is None or renewed is None or spec.get("holderIdentity") != lease["metadata"]["name"]:
            return None
        job, sequence = attempt
        key = (lease["metadata"].get("namespace", ""), job)
        self.leases[key][sequence] = LeaseObservation(min(renewed, self.now()), controller_uid(lease, "Pod", ""),
                                                      lease_progress(lease))
        return key

    def delete_lease(self, lease: dict[str, Any]) -> Key | None:
        attempt = attempt_of(lease)
        if attempt is None:
            return None
        job, sequence = attempt
        key = (lease["metadata"].get("namespace", ""), job)
        runs = self.leases.get(key, {})
        runs.pop(sequence, None)
        if not runs:
            self.leases.pop(key, None)
        return key

    @staticmethod
    def job_of_pod(pod: dict[str, Any]) -> Key | None:
        meta = pod["metadata"]
        name = (meta.get("labels") or {}).get(LABEL_JOB)
        if not name:  # a delete notice from a relist carries only namespace and name
            name = meta["name"].rsplit("-", 1)[0] if "-" in meta["name"] else None
        return (meta.get("namespace", ""), name) if name else None

    def job_versions(self, namespace: str | None) -> Mapping[Key, str]:
        """The resourceVersion of each job the view holds (of one namespace, or all): what the jobs' informer diffs a
        relist against, instead of remembering 100k versions of its own."""
        return _JobVersions(self.jobs, namespace)

    # --- reading -------------------------------------------------------------------------------------------
    def live_job(self, key: Key) -> LiveJob | None:
        record = self.jobs.get(key)
        return record if isinstance(record, LiveJob) else None

    def jobs_of_queue(self, queue: Key) -> Iterator[tuple[Key, JobRecord]]:
        """Every job of the queue, finished or not (a scan: for what changes rarely)."""
        return ((key, r) for key, r in list(self.jobs.items()) if key[0] == queue[0] and r.queue == queue[1])

    def unfinished_raw(self, queue: Key) -> list[dict[str, Any]]:
        """The unfinished jobs of the queue, as the rules read them."""
        records = (self.jobs.get(k) for k in list(self.unfinished_by_queue.get(queue, ())))
        return [r.raw for r in records if isinstance(r, LiveJob)]

    def jobs_of_schedule(self, schedule: Key) -> list[tuple[str, JobRecord]]:
        """The jobs labelled sextant.dev/schedule=NAME in the schedule's namespace."""
        return [(key[1], self.jobs[key]) for key in self.by_schedule.get(schedule, ())]

    def whole_job(self, key: Key) -> dict[str, Any] | None:
        """The job as last seen, when the view holds all of it (not a finished job's record, nor one whose payload,
        labels or annotations were left out: whoever shows it GETs the job)."""
        record = self.jobs.get(key)
        return record.raw if isinstance(record, LiveJob) and record.whole else None

    @staticmethod
    def snapshot(record: LiveJob) -> JobSnapshot:
        """The lifecycle's reading of a job (lifecycle/reading.read_job)."""
        return read_job(record.raw, record.payload_bytes)

    def pods_of(self, key: Key, uid: str | None = None) -> dict[int, PodObservation]:
        """The job's attempt pods: those whose controller ownerReference is the job (by uid), as client-go's
        ControllerRefManager decides. A pod someone else labelled as the job's is never adopted, waited for or
        deleted; nor is a pod of an earlier job of the same name."""
        runs = self.pods.get(key)
        if not runs:
            return {}
        if uid is None:
            record = self.jobs.get(key)
            uid = record.uid if record is not None else None
        if not uid:
            return {}  # the job is not known (yet): nothing can be proven to be its
        if all(p.owner_uid == uid for p in runs.values()):
            return runs
        return {sequence: p for sequence, p in runs.items() if p.owner_uid == uid}

    def observations(self, key: Key, job: JobSnapshot, now: datetime | None = None) -> Observations:
        now = now or self.now()
        ns = key[0]
        handler = self.handlers.get((ns, job.spec.handler))
        queue = self.queues.get((ns, job.spec.queue))
        pods = self.pods_of(key, job.uid)
        gone = self.gone.get(key, {}).get(job.status.sequence)
        seen, heartbeat = tuple(pods.values()), self._heartbeat(key, job.status.sequence, pods, handler)
        progress = self._progress(key, job.status.sequence, pods)
        if progress is not None:
            seen = tuple(replace(p, progress=progress) if p.sequence == job.status.sequence else p for p in seen)
        assigned = self.worker_observations(key, job.uid, now)
        seen = (*seen, *assigned)
        no_worker = (handler is not None and handler.on_workers and job.status.state != State.RUNNING
                     and not W.is_served(self.live_workers(ns), job.spec.queue, job.spec.handler))
        return Observations(
            queue=queue,
            handler=handler,
            attempts=seen,
            lease_renewed_at=heartbeat,
            # A job without a state whose pod exists was admitted on first sight (its state is written when the pod
            # starts): the operator already let it run, it is no duplicate.
            duplicate_of=self._duplicate_of(key, job) if job.status.state is None and not pods and not assigned else None,
            no_worker=no_worker,
            gone=(gone,) if gone is not None and gone.owner_uid == job.uid else (),
        )

    def _duplicate_of(self, key: Key, job: JobSnapshot) -> str | None:
        """The job that holds this job's idempotency key, when it is not this one (a kubectl-applied copy)."""
        if not job.spec.idempotency_key:
            return None
        holders = self.by_idempotency_key.get((key[0], job.spec.idempotency_key), ())
        if len(holders) < 2:
            return None
        candidates = ((self.jobs[holder].created_at, self._undecided(holder), holder[1]) for holder in holders)
        return claimant(((c, u, n) for c, u, n in candidates if c is not None), job.created_at, job.name,
                        self.idempotency_window)

    def _undecided(self, key: Key) -> bool:
        record = self.jobs[key]
        status = {"state": record.state.value if record.state else None, "duplicateOf": record.duplicate_of}
        return undecided(status, started=bool(self.pods_of(key)) or bool(self.assigned.get(key)))

    def _heartbeat(self, key: Key, sequence: int, pods: dict[int, PodObservation],
                   handler: HandlerSpec | None) -> datetime | None:
        """The last sign of life of the running attempt: its lease's renewal, or its container's start.

        The lease clock starts when the container starts (a pod still pulling its image is the timeout's
        business): a runner that crashes or hangs before its first renewal still expires.
        """
        if handler is not None and not handler.heartbeat:
            return None
        pod = pods.get(sequence)
        lease = self.leases.get(key, {}).get(sequence)
        # Only the attempt's own Lease: the one its pod owns. Another pod's Lease labelled as this attempt's
        # neither fails nor prolongs it.
        renewed = lease.renewed_at if lease is not None and pod is not None and lease.pod_uid == pod.uid else None
        signs = [t for t in (renewed, pod.started_at if pod else None) if t is not None]
        return max(signs) if signs else None

    def _progress(self, key: Key, sequence: int, pods: dict[int, PodObservation]) -> Progress | None:
        """The running attempt's progress, from its own Lease (the one its pod owns, as for its heartbeat)."""
        pod, lease = pods.get(sequence), self.leases.get(key, {}).get(sequence)
        return lease.progress if lease is not None and pod is not None and lease.pod_uid == pod.uid else None

    def has_strays(self, key: Key, record: JobRecord) -> bool:
        """Pods of sequence numbers the status does not know (an operator stopped between creating a pod and
        recording it)."""
        if any(r > record.sequence for r in self.pods_of(key)):
            return True
        # An assignment left over (the operator stopped between recording its end and removing it); not one whose
        # removal is being written.
        leaving = self.leaving.get(key, set())
        return record.state in FINISHED and any(s not in leaving for s in self.assigned.get(key, {}))
