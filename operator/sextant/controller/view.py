"""The in-memory view of everything Sextant owns, fed by the informers; the reconciler reads only this."""

from __future__ import annotations

import itertools
import logging
from collections import OrderedDict, defaultdict
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from ..idempotency import claimant
from ..lifecycle.attempts import PodObservation
from ..lifecycle.states import FINISHED
from ..lifecycle.transitions import JobSnapshot, Observations
from ..resources.common import parse_time
from ..resources.handler import HandlerSpec
from ..resources.job import JobSpec, JobStatus, State
from ..resources.queue import QueueSpec
from .informer import Key, key_of
from .pods import LABEL_JOB, LABEL_RUN, observe

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


def state_of(raw: dict[str, Any]) -> State | None:
    value = (raw.get("status") or {}).get("state")
    try:
        return State(value) if value else None
    except ValueError:
        return None


class View:
    def __init__(self) -> None:
        self.jobs: dict[Key, dict[str, Any]] = {}
        self.pods: dict[Key, dict[int, PodObservation]] = defaultdict(dict)  # job → run → pod
        self.queues: dict[Key, QueueSpec] = {}
        self.handlers: dict[Key, HandlerSpec] = {}
        self.leases: dict[Key, dict[int, datetime]] = defaultdict(dict)  # job → run → last renewal
        # Unfinished jobs per queue and handler, to wake when those appear or change.
        self.unfinished_by_queue: dict[Key, set[Key]] = defaultdict(set)
        self.unfinished_by_handler: dict[Key, set[Key]] = defaultdict(set)
        self.by_idempotency_key: dict[Key, dict[str, datetime]] = defaultdict(dict)  # (ns, key) → name → created
        self.seen: dict[Key, int] = {}  # the order jobs were first seen in: creation order, from the watch
        self._seen_order = itertools.count()
        self._job_versions = Versions()
        self._pod_versions = Versions()

    # --- feeding -------------------------------------------------------------------------------------------
    def upsert_job(self, raw: dict[str, Any]) -> bool:
        """Store a job, unless the view already has a newer version; False then."""
        key = key_of(raw)
        if not self._job_versions.newer(key, _rv(raw)):
            return False
        previous = self.jobs.get(key)
        if previous is not None:
            self._unindex(key, previous)
        else:
            self.seen.setdefault(key, next(self._seen_order))
            idem = (raw.get("spec") or {}).get("idempotencyKey")
            if idem:
                created = parse_time(raw["metadata"].get("creationTimestamp"))
                self.by_idempotency_key[(key[0], idem)][key[1]] = created
        self.jobs[key] = raw
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
        if previous is not None:
            self._unindex(key, previous)
            idem = (previous.get("spec") or {}).get("idempotencyKey")
            holders = self.by_idempotency_key.get((key[0], idem))
            if holders is not None:
                holders.pop(key[1], None)
                if not holders:
                    del self.by_idempotency_key[(key[0], idem)]
        return key

    def _unindex(self, key: Key, raw: dict[str, Any]) -> None:
        ns, spec = key[0], raw.get("spec") or {}
        self.unfinished_by_queue.get((ns, spec.get("queue", "")), set()).discard(key)
        self.unfinished_by_handler.get((ns, spec.get("handler", "")), set()).discard(key)

    def upsert_pod(self, pod: dict[str, Any]) -> Key | None:
        """Store an attempt pod (unless a newer version is known); returns its job's key."""
        job = self.job_of_pod(pod)
        seen = observe(pod)
        if job is None or seen is None or not self._pod_versions.newer(key_of(pod), _rv(pod)):
            return None
        self.pods[job][seen.run] = seen
        return job

    def delete_pod(self, pod: dict[str, Any]) -> Key | None:
        job = self.job_of_pod(pod)
        self._pod_versions.forget(key_of(pod), _rv(pod))
        if job is None:
            return None
        runs = self.pods.get(job, {})
        for run, current in list(runs.items()):
            if current.name == pod["metadata"]["name"]:
                del runs[run]
        if not runs:
            self.pods.pop(job, None)
        return job

    def upsert_lease(self, lease: dict[str, Any]) -> Key | None:
        labels = lease["metadata"].get("labels") or {}
        job, run = labels.get(LABEL_JOB), labels.get(LABEL_RUN, "")
        renewed = parse_time((lease.get("spec") or {}).get("renewTime"))
        if not job or not run.isdigit() or renewed is None:
            return None
        key = (lease["metadata"].get("namespace", ""), job)
        self.leases[key][int(run)] = renewed
        return key

    def delete_lease(self, lease: dict[str, Any]) -> Key | None:
        labels = lease["metadata"].get("labels") or {}
        job, run = labels.get(LABEL_JOB), labels.get(LABEL_RUN, "")
        if not job or not run.isdigit():
            return None
        key = (lease["metadata"].get("namespace", ""), job)
        runs = self.leases.get(key, {})
        runs.pop(int(run), None)
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

    # --- reading -------------------------------------------------------------------------------------------
    def snapshot(self, key: Key) -> JobSnapshot | None:
        raw = self.jobs.get(key)
        if raw is None:
            return None
        meta = raw["metadata"]
        try:
            spec = JobSpec.model_validate(raw.get("spec") or {})
            status = JobStatus.model_validate(raw.get("status") or {})
        except ValidationError as exc:
            log.error("job %s/%s cannot be read: %s", key[0], key[1], exc)
            return None
        return JobSnapshot(name=meta["name"], uid=meta.get("uid", ""), generation=meta.get("generation", 1),
                           created_at=parse_time(meta.get("creationTimestamp")), spec=spec, status=status)

    def observations(self, key: Key, job: JobSnapshot) -> Observations:
        ns = key[0]
        handler = self.handlers.get((ns, job.spec.handler))
        pods = self.pods.get(key, {})
        return Observations(
            queue=self.queues.get((ns, job.spec.queue)),
            handler=handler,
            pods=tuple(pods.values()),
            lease_renewed_at=self._heartbeat(key, job.status.run, pods, handler),
            duplicate_of=self._duplicate_of(key, job) if job.status.state is None else None,
        )

    def _duplicate_of(self, key: Key, job: JobSnapshot) -> str | None:
        """The job that holds this job's idempotency key, when it is not this one (a kubectl-applied copy)."""
        if not job.spec.idempotency_key:
            return None
        holders = self.by_idempotency_key.get((key[0], job.spec.idempotency_key), {})
        if len(holders) < 2:
            return None
        return claimant(((created, name) for name, created in holders.items()), job.created_at, job.name)

    def _heartbeat(self, key: Key, run: int, pods: dict[int, PodObservation],
                   handler: HandlerSpec | None) -> datetime | None:
        """The last sign of life of the running attempt: its lease's renewal, or its container's start.

        The lease clock starts when the container starts (a pod still pulling its image is the timeout's
        business): a runner that crashes or hangs before its first renewal still expires.
        """
        if handler is not None and not handler.heartbeat:
            return None
        pod = pods.get(run)
        signs = [t for t in (self.leases.get(key, {}).get(run), pod.started_at if pod else None) if t is not None]
        return max(signs) if signs else None

    def holds_slot(self, key: Key) -> bool:
        raw = self.jobs.get(key)
        running = raw is not None and state_of(raw) == State.RUNNING
        return running or any(p.alive for p in self.pods.get(key, {}).values())
