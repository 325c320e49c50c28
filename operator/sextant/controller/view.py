"""The in-memory view of everything Sextant owns, fed by the informers; the reconciler reads only this."""

from __future__ import annotations

import itertools
import json
import logging
import sys
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from ..kube.clock import utcnow
from ..lifecycle.idempotency import WINDOW, claimant, undecided
from ..lifecycle.attempts import PodObservation
from ..lifecycle.states import FINISHED
from ..lifecycle import workers as W
from ..lifecycle.reading import PAYLOAD_NOTE, lean_job, read_job
from ..lifecycle.transitions import JobSnapshot, Observations, pod_name
from ..resources import contract
from ..resources.contract import LABEL_JOB, sequence_label
from ..resources.common import parse_duration, parse_time, time_or_none
from ..resources.handler import HandlerSpec
from ..resources.job import State, sequence_of
from ..resources.queue import QueueSpec
from ..resources.report import Progress
from ..resources.worker import Assignment
from ..kube.informer import Key, key_of, trim
from .pods import controller_uid, observe

log = logging.getLogger(__name__)


def _rv(obj: dict[str, Any]) -> int:
    value = obj["metadata"].get("resourceVersion", "")
    return int(value) if value.isdigit() else 0


class Versions:
    """The newest resourceVersion seen per object, so an older copy never replaces a newer one.

    Our own writes' responses and the watch race each other: a create's response can arrive after the watch
    has already shown the pod finished, and storing the response would forget that it finished. Deleted
    objects are remembered for a while (tombstones) so that a late response cannot bring them back.
    resourceVersions are etcd revisions; a relist or an object without one (0) is always taken.
    """

    TOMBSTONES = 50_000

    def __init__(self) -> None:
        self._live: dict[Key, int] = {}
        self._gone: OrderedDict[Key, int] = OrderedDict()

    def newer(self, key: Key, rv: int) -> bool:
        if rv and rv < max(self._live.get(key, 0), self._gone.get(key, 0)):
            return False
        if rv and key in self._gone and rv > self._gone[key]:
            del self._gone[key]  # created again under the same name
        self._live[key] = max(rv, self._live.get(key, 0))
        return True

    def forget(self, key: Key, rv: int) -> None:
        last = max(rv, self._live.pop(key, 0))
        if last:
            self._gone[key] = last
            self._gone.move_to_end(key)
            while len(self._gone) > self.TOMBSTONES:
                self._gone.popitem(last=False)


SLIM = "sextant.dev/slim"  # marks a view copy that keeps only what settled, finished jobs are read for


def settled(raw: dict[str, Any]) -> bool:
    """Finished, and its spec already acted upon: only retention and counting read it until the next change."""
    status = raw.get("status") or {}
    return state_of(raw) in FINISHED and status.get("observedGeneration") == raw["metadata"].get("generation")


def slim(raw: dict[str, Any]) -> dict[str, Any]:
    """A settled job as the view keeps it: about a fifth of the object, so that 100k finished jobs fit in a small
    operator. The timeline, payload and conditions are left out: whoever needs them (a reconcile that may write
    status, the HTTP API) reads the object from the API server. Repeated strings are interned."""
    meta, spec, status = raw["metadata"], raw.get("spec") or {}, raw.get("status") or {}
    labels = meta.get("labels") or {}
    return {
        SLIM: True,
        "apiVersion": sys.intern(raw.get("apiVersion", "")),
        "kind": sys.intern(raw.get("kind", "")),
        "metadata": {
            "name": meta["name"],
            "namespace": sys.intern(meta.get("namespace", "")),
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
            "generation": meta.get("generation", 1),
            "creationTimestamp": meta.get("creationTimestamp"),
            **({"labels": labels} if labels else {}),
            **_schedule_annotation(meta),
        },
        "spec": {k: sys.intern(v) if isinstance(v, str) else v for k, v in spec.items()
                 if k in ("queue", "handler", "idempotencyKey", "priority")},
        "status": {
            "state": sys.intern(status["state"]),
            "sequence": sequence_of(status),
            "finishedAt": status.get("finishedAt"),
            "observedGeneration": status.get("observedGeneration"),
            **({"duplicateOf": status["duplicateOf"]} if status.get("duplicateOf") else {}),
        },
    }


def _schedule_annotation(meta: dict[str, Any]) -> dict[str, Any]:
    """A schedule's job keeps its tick (sextant.dev/scheduled-at) when slim: the schedule's evaluation reads it."""
    tick = (meta.get("annotations") or {}).get(contract.ANNOTATION_SCHEDULED_AT)
    return {"annotations": {contract.ANNOTATION_SCHEDULED_AT: tick}} if tick else {}


def schedule_of(raw: dict[str, Any] | None) -> Key | None:
    """(namespace, schedule) of a schedule's job (the label sextant.dev/schedule), else None."""
    if raw is None:
        return None
    meta = raw["metadata"]
    name = (meta.get("labels") or {}).get(contract.LABEL_SCHEDULE)
    return (meta.get("namespace", ""), name) if name else None


def is_slim(raw: dict[str, Any]) -> bool:
    return SLIM in raw


def state_of(raw: dict[str, Any]) -> State | None:
    value = (raw.get("status") or {}).get("state")
    try:
        return State(value) if value else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Placed:
    """An assignment in a Worker's status, indexed by its job: which worker (and which object of that name) has it."""

    worker: str
    worker_uid: str
    assignment: Assignment
    # When the operator first saw it in the Worker's status (durable): its attempt runs from then at the earliest, so
    # the first second of lifecycle/transitions.RECORD_RUNNING_AFTER counts from here, not from the decision to assign
    # (under load a status write takes longer than that second to land).
    landed_at: datetime | None = None


@dataclass(frozen=True)
class WorkerChange:
    """A Worker object as it was and is now in the view (before None: new; after None: deleted)."""

    key: Key
    before: W.Believed | None
    after: W.Believed | None


@dataclass(frozen=True)
class LeaseObservation:
    """An attempt's Lease as the runner writes it: what it says, and whose it claims to be."""

    renewed_at: datetime  # its renewTime, but never later than when the operator saw it
    pod_uid: str | None  # the uid of the Pod its ownerReference names
    progress: Progress | None = None  # its handler's latest, as the runner annotated it


def lease_progress(lease: dict[str, Any]) -> Progress | None:
    """The progress annotation of an attempt's Lease; None when absent or unreadable (never an error)."""
    text = ((lease["metadata"].get("annotations") or {}).get(contract.ANNOTATION_PROGRESS))
    if not isinstance(text, str) or len(text) > 4096:
        return None
    try:
        return Progress.model_validate(json.loads(text))
    except (ValueError, ValidationError):
        return None


def attempt_of(obj: dict[str, Any]) -> tuple[str, int] | None:
    """(job name, sequence) of an attempt's pod or Lease, when its name is the one the operator gives that attempt.

    Labels alone prove nothing (anyone may label a pod sextant.dev/job=X): an object named otherwise is not an
    attempt, whatever it says. Whose it really is, the ownerReferences tell (compared when the job is read).
    """
    meta = obj["metadata"]
    labels = meta.get("labels") or {}
    job, sequence = labels.get(LABEL_JOB), sequence_label(labels)
    if not job or sequence is None or meta.get("name") != pod_name(job, sequence):
        return None
    return job, sequence


class View:
    def __init__(self, now: Callable[[], datetime] = utcnow, idempotency_window: timedelta = WINDOW,
                 max_worker_slots: int = W.MAX_WORKER_SLOTS) -> None:
        self.now = now
        self.idempotency_window = idempotency_window
        self.jobs: dict[Key, dict[str, Any]] = {}
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
        # Unfinished jobs per queue and handler, to wake when those appear or change.
        self.unfinished_by_queue: dict[Key, set[Key]] = defaultdict(set)
        self.unfinished_by_handler: dict[Key, set[Key]] = defaultdict(set)
        # Finished jobs per queue and state, counted as they come and go (GET /v2/queues: no scan of the jobs).
        self.finished_by_queue: dict[Key, Counter[str]] = defaultdict(Counter)
        self.by_idempotency_key: dict[Key, dict[str, datetime]] = defaultdict(dict)  # (ns, key) → name → created
        # Worker mode (docs/workers.md): the Worker objects as believed, per namespace; when the operator last
        # observed each renew (its clock); those it found expired (after a GET); assignments by job and sequence,
        # those that landed (in a Worker's status) and those on their way (in the status writer's outbox).
        self.max_worker_slots = max_worker_slots
        self.workers: dict[str, dict[str, W.Believed]] = defaultdict(dict)
        self.observed_at: dict[Key, datetime] = {}
        self.expired: dict[Key, datetime] = {}  # worker → when it was found expired
        self.assigned: dict[Key, dict[int, Placed]] = defaultdict(dict)
        self.pending: dict[Key, Placed] = {}
        # Per job, the sequences whose assignment's removal is being written (workerstatus.py): not strays to look
        # up again (has_strays), only on their way out.
        self.leaving: dict[Key, set[int]] = {}
        self._worker_versions = Versions()
        # WorkerPools (controller/pools.py): per pool, the workers it retires on a scale-down, given no new jobs.
        self.retiring: dict[Key, frozenset[str]] = {}
        self.seen: dict[Key, int] = {}  # the order jobs were first seen in: creation order, from the watch
        self._seen_order = itertools.count()
        self._job_versions = Versions()
        self._pod_versions = Versions()
        # Schedules (controller/schedules.py): (namespace, schedule) → its jobs' names, and whom to tell when one
        # of them appears, goes, finishes or runs again (what a schedule's evaluation depends on).
        self.by_schedule: dict[Key, set[str]] = defaultdict(set)
        self.on_schedule_jobs: Callable[[Key], None] = lambda schedule: None

    # --- feeding -------------------------------------------------------------------------------------------
    def has_version(self, raw: dict[str, Any]) -> bool:
        """The view holds exactly this version of the job already (a write's response, then its watch event)."""
        rv = raw["metadata"].get("resourceVersion")
        stored = self.jobs.get(key_of(raw))
        return bool(rv) and stored is not None and stored["metadata"].get("resourceVersion") == rv

    def upsert_job(self, raw: dict[str, Any]) -> bool:
        """Store a job, unless the view already has a newer version; False then. What is stored is the job without its
        payload (lifecycle/reading.lean_job: one over 512 bytes is read where it is needed, by a GET), or a
        slim copy once it settled."""
        key = key_of(raw)
        if not self._job_versions.newer(key, _rv(raw)):
            return False
        previous = self.jobs.get(key)
        # Trimmed here too: our own writes' answers come whole, and their managedFields name every key of the payload
        # again (kept, a job written `queued` weighed its whole payload once more: issue 28).
        raw = lean_job(trim(raw), previous)  # no payload but a small one: its size and validity
        if previous is not None:
            self._unindex(key, previous)
        else:
            self.seen.setdefault(key, next(self._seen_order))
            idem = (raw.get("spec") or {}).get("idempotencyKey")
            created = time_or_none(raw["metadata"].get("creationTimestamp"))
            if idem and isinstance(idem, str) and created is not None:
                self.by_idempotency_key[(key[0], idem)][key[1]] = created
        self.jobs[key] = slim(raw) if settled(raw) else raw
        self._count_finished(key, previous, -1)
        self._count_finished(key, raw, +1)
        self._index_schedule(key, previous, raw)
        if state_of(raw) not in FINISHED:
            ns = key[0]
            spec = raw.get("spec") or {}
            self.unfinished_by_queue[(ns, spec.get("queue", ""))].add(key)
            self.unfinished_by_handler[(ns, spec.get("handler", ""))].add(key)
        return True

    def delete_job(self, raw: dict[str, Any]) -> Key:
        key = key_of(raw)
        self._job_versions.forget(key, _rv(raw))
        previous = self.jobs.pop(key, None)
        self.seen.pop(key, None)
        self.gone.pop(key, None)
        if previous is not None:
            self._unindex(key, previous)
            self._count_finished(key, previous, -1)
            self._index_schedule(key, previous, None)
            idem = (previous.get("spec") or {}).get("idempotencyKey")
            holders = self.by_idempotency_key.get((key[0], idem))
            if holders is not None:
                holders.pop(key[1], None)
                if not holders:
                    del self.by_idempotency_key[(key[0], idem)]
        return key

    def _index_schedule(self, key: Key, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        old, new = schedule_of(before), schedule_of(after)
        if old is not None and old != new:
            names = self.by_schedule.get(old)
            if names is not None:
                names.discard(key[1])
                if not names:
                    del self.by_schedule[old]
            self.on_schedule_jobs(old)
        if new is not None:
            self.by_schedule[new].add(key[1])
            if old != new or (state_of(before) in FINISHED) != (state_of(after) in FINISHED):
                self.on_schedule_jobs(new)

    def _count_finished(self, key: Key, raw: dict[str, Any] | None, step: int) -> None:
        state = state_of(raw) if raw is not None else None
        if state not in FINISHED:
            return
        queue = (key[0], (raw.get("spec") or {}).get("queue", "")) if raw is not None else key
        counts = self.finished_by_queue[queue]
        counts[state.value] += step
        if counts[state.value] <= 0:
            del counts[state.value]
            if not counts:
                del self.finished_by_queue[queue]

    def _unindex(self, key: Key, raw: dict[str, Any]) -> None:
        ns, spec = key[0], raw.get("spec") or {}
        self.unfinished_by_queue.get((ns, spec.get("queue", "")), set()).discard(key)
        self.unfinished_by_handler.get((ns, spec.get("handler", "")), set()).discard(key)

    def upsert_pod(self, pod: dict[str, Any]) -> Key | None:
        """Store an attempt pod (unless a newer version is known); returns its job's key when what the operator
        reads of the pod changed (not for a condition, an annotation, or the echo of the pod it created)."""
        if attempt_of(pod) is None:
            return None  # labelled as an attempt, but not named as one: someone else's pod
        job = self.job_of_pod(pod)
        seen = observe(pod)
        if job is None or seen is None or not self._pod_versions.newer(key_of(pod), _rv(pod)):
            return None
        runs = self.pods[job]
        if runs.get(seen.sequence) == seen:
            return None
        runs[seen.sequence] = seen
        return job

    def delete_pod(self, pod: dict[str, Any]) -> Key | None:
        job = self.job_of_pod(pod)
        self._pod_versions.forget(key_of(pod), _rv(pod))
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
        """Store an attempt's Lease: named as the attempt's pod and held by it (holderIdentity), its owner the pod
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

    # --- Worker objects (protocol v2) --------------------------------------------------------------------------
    def worker(self, key: Key) -> W.Believed | None:
        return self.workers.get(key[0], {}).get(key[1])

    def live(self, key: Key) -> bool:
        """Not found expired: the operator observed a renewal within its lease (expiry is decided by the job
        controller, after a GET)."""
        return key in self.observed_at and key not in self.expired

    def upsert_worker(self, obj: dict[str, Any]) -> WorkerChange | None:
        """Store a Worker object (unless a newer version is known). A new generation or object is a renewal: observed
        now, by the operator's clock. Its assignments are indexed by job."""
        key = key_of(obj)
        if not self._worker_versions.newer(key, _rv(obj)):
            return None
        before = self.worker(key)
        after = W.read_worker(obj, self.max_worker_slots)
        if W.renewed(before, after):
            self.observed_at[key] = self.now()
            self.expired.pop(key, None)
        self.workers[key[0]][key[1]] = after
        self._index_assignments(key, before, after)
        return WorkerChange(key, before, after)

    def delete_worker(self, obj: dict[str, Any]) -> WorkerChange:
        """A Worker object is gone. Its assignments stay indexed (their worker gone: their attempts lost) until their
        jobs have recorded them."""
        key = key_of(obj)
        self._worker_versions.forget(key, _rv(obj))
        before = self.workers.get(key[0], {}).pop(key[1], None)
        if not self.workers.get(key[0]):
            self.workers.pop(key[0], None)
        self.observed_at.pop(key, None)
        self.expired.pop(key, None)
        return WorkerChange(key, before, None)

    def _index_assignments(self, key: Key, before: W.Believed | None, after: W.Believed) -> None:
        ns, name = key
        landed: dict[tuple[str, int], datetime | None] = {}
        if before is not None and before.uid == after.uid:
            for a in before.assignments:
                runs = self.assigned.get((ns, a.job), {})
                placed = runs.get(a.sequence)
                if placed is not None and placed.worker == name and placed.worker_uid == before.uid:
                    landed[(a.job, a.sequence)] = placed.landed_at
                    del runs[a.sequence]
                    if not runs:
                        self.assigned.pop((ns, a.job), None)
        now = self.now()
        for a in after.assignments:
            self.assigned[(ns, a.job)][a.sequence] = Placed(name, after.uid, a, landed.get((a.job, a.sequence), now))

    def unindex_assignment(self, job: Key, sequence: int) -> Placed | None:
        """Forget an assignment whose Worker object is gone (its job has recorded it)."""
        runs = self.assigned.get(job, {})
        placed = runs.pop(sequence, None)
        if not runs:
            self.assigned.pop(job, None)
        return placed

    def assignments_of(self, job: Key) -> dict[int, Placed]:
        return self.assigned.get(job, {})

    def placed(self, job: Key, sequence: int) -> Placed | None:
        """The job's assignment of this sequence number, landed or on its way."""
        landed = self.assigned.get(job, {}).get(sequence)
        if landed is not None:
            return landed
        pending = self.pending.get(job)
        return pending if pending is not None and pending.assignment.sequence == sequence else None

    def live_workers(self, ns: str) -> list[tuple[W.Believed, bool]]:
        return [(w, self.live((ns, name))) for name, w in self.workers.get(ns, {}).items()]

    def assignable_workers(self, ns: str) -> list[tuple[W.Believed, bool]]:
        """live_workers without those a WorkerPool retires (they drain before their pods go): whom a job may be given.
        Whether a job is served (NoWorker) still counts them: they are live, and the pool keeps room elsewhere."""
        out = set().union(*(names for (namespace, _), names in self.retiring.items() if namespace == ns))
        return [(w, live) for w, live in self.live_workers(ns) if w.name not in out]

    def worker_busy(self, ns: str) -> dict[str, int]:
        """Per worker of the namespace: its assignments, landed and on their way (an assignment holds its worker's
        slot until it is removed, after its end is recorded)."""
        busy = {name: len(w.assignments) for name, w in self.workers.get(ns, {}).items()}
        for job, placed in self.pending.items():
            if job[0] == ns and placed.assignment.sequence not in self.assigned.get(job, {}):
                busy[placed.worker] = busy.get(placed.worker, 0) + 1
        return busy

    def holds_assignment(self, job: Key) -> bool:
        """The job holds its queue slot by an assignment: on its way or landed, until it is removed (after the
        attempt's end is recorded)."""
        return job in self.pending or bool(self.assigned.get(job))

    def worker_observations(self, key: Key, uid: str, now: datetime) -> list[PodObservation]:
        """The job's assignments as PodObservations (lifecycle/workers.observe_assignment)."""
        ns = key[0]
        seen = []
        runs = self.assigned.get(key, {})
        for placed in runs.values():
            if placed.assignment.uid != uid:
                continue  # a job of the same name before this one: the worker's reconcile drops it
            w = self.worker((ns, placed.worker))
            believed = w if w is not None and w.uid == placed.worker_uid else None
            seen.append(W.observe_assignment(placed.assignment, placed.worker, believed,
                                             self.live((ns, placed.worker)), now, landed_at=placed.landed_at))
        pending = self.pending.get(key)
        if pending is not None and pending.assignment.uid == uid and pending.assignment.sequence not in runs:
            seen.append(W.observe_assignment(pending.assignment, pending.worker, None, True, now, durable=False))
        return seen

    def jobs_of_schedule(self, schedule: Key) -> list[dict[str, Any]]:
        """The jobs labelled sextant.dev/schedule=NAME in the schedule's namespace (finished ones as slim copies)."""
        ns = schedule[0]
        return [self.jobs[(ns, name)] for name in self.by_schedule.get(schedule, ())]

    @staticmethod
    def job_of_pod(pod: dict[str, Any]) -> Key | None:
        meta = pod["metadata"]
        name = (meta.get("labels") or {}).get(LABEL_JOB)
        if not name:  # a delete notice from a relist carries only namespace and name
            name = meta["name"].rsplit("-", 1)[0] if "-" in meta["name"] else None
        return (meta.get("namespace", ""), name) if name else None

    # --- reading -------------------------------------------------------------------------------------------
    def whole_job(self, key: Key) -> dict[str, Any] | None:
        """The job as last seen, when the view holds all of it: not a slim copy of a finished job (no timeline), nor
        one whose payload was left out (any payload but {}: whoever shows it GETs the job)."""
        raw = self.jobs.get(key)
        return None if raw is None or is_slim(raw) or PAYLOAD_NOTE in raw else raw

    @staticmethod
    def snapshot(key: Key, raw: dict[str, Any]) -> JobSnapshot:
        """The lifecycle's reading of a full job object (lifecycle/reading.read_job)."""
        return read_job(raw)

    def pods_of(self, key: Key, uid: str | None = None) -> dict[int, PodObservation]:
        """The job's attempt pods: those whose controller ownerReference is the job (by uid), as client-go's
        ControllerRefManager decides. A pod someone else labelled as the job's is never adopted, waited for or
        deleted; nor is a pod of an earlier job of the same name."""
        runs = self.pods.get(key)
        if not runs:
            return {}
        if uid is None:
            uid = ((self.jobs.get(key) or {}).get("metadata") or {}).get("uid")
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
            pods=seen,
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
        holders = self.by_idempotency_key.get((key[0], job.spec.idempotency_key), {})
        if len(holders) < 2:
            return None
        return claimant(((created, self._undecided((key[0], name)), name) for name, created in holders.items()),
                        job.created_at, job.name, self.idempotency_window)

    def _undecided(self, key: Key) -> bool:
        return undecided((self.jobs.get(key) or {}).get("status"),
                         started=bool(self.pods_of(key)) or bool(self.assigned.get(key)))

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

    def has_strays(self, key: Key, raw: dict[str, Any]) -> bool:
        """Pods of sequence numbers the status does not know (an operator stopped between creating a pod and
        recording it)."""
        sequence = sequence_of(raw.get("status"))
        if any(r > sequence for r in self.pods_of(key)):
            return True
        # An assignment left over (the operator stopped between recording its end and removing it); not one whose
        # removal is being written.
        leaving = self.leaving.get(key, set())
        return state_of(raw) in FINISHED and any(s not in leaving for s in self.assigned.get(key, {}))
