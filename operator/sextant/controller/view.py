"""The in-memory view of everything Sextant owns, fed by the informers; the reconciler reads only this."""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from pydantic import ValidationError

from ..lifecycle.attempts import PodObservation
from ..lifecycle.states import FINISHED
from ..lifecycle.transitions import JobSnapshot, Observations
from ..resources.common import parse_time
from ..resources.handler import HandlerSpec
from ..resources.job import JobSpec, JobStatus, State
from ..resources.queue import QueueSpec
from .informer import Key, key_of
from .pods import LABEL_JOB, observe

log = logging.getLogger(__name__)


def _rv(obj: dict[str, Any]) -> int:
    value = obj["metadata"].get("resourceVersion", "")
    return int(value) if value.isdigit() else 0


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
        # Unfinished jobs per queue and handler, to wake when those appear or change.
        self.unfinished_by_queue: dict[Key, set[Key]] = defaultdict(set)
        self.unfinished_by_handler: dict[Key, set[Key]] = defaultdict(set)
        self._written: dict[Key, int] = {}  # resourceVersion of our own last write, newer than the watch may be

    # --- feeding -------------------------------------------------------------------------------------------
    def upsert_job(self, raw: dict[str, Any], *, ours: bool = False) -> bool:
        """Store a job; False when it is older than our own write (the watch lagging behind)."""
        key = key_of(raw)
        rv = _rv(raw)
        if not ours and rv and rv < self._written.get(key, 0):
            return False
        if ours:
            self._written[key] = rv
        elif key in self._written and rv >= self._written[key]:
            del self._written[key]
        previous = self.jobs.get(key)
        if previous is not None:
            self._unindex(key, previous)
        self.jobs[key] = raw
        if state_of(raw) not in FINISHED:
            ns = key[0]
            spec = raw.get("spec") or {}
            self.unfinished_by_queue[(ns, spec.get("queue", ""))].add(key)
            self.unfinished_by_handler[(ns, spec.get("handler", ""))].add(key)
        return True

    def delete_job(self, key: Key) -> None:
        raw = self.jobs.pop(key, None)
        self._written.pop(key, None)
        if raw is not None:
            self._unindex(key, raw)

    def _unindex(self, key: Key, raw: dict[str, Any]) -> None:
        ns, spec = key[0], raw.get("spec") or {}
        self.unfinished_by_queue.get((ns, spec.get("queue", "")), set()).discard(key)
        self.unfinished_by_handler.get((ns, spec.get("handler", "")), set()).discard(key)

    def upsert_pod(self, pod: dict[str, Any]) -> Key | None:
        """Store an attempt pod; returns its job's key."""
        job = self.job_of_pod(pod)
        seen = observe(pod)
        if job is None or seen is None:
            return None
        self.pods[job][seen.run] = seen
        return job

    def delete_pod(self, pod: dict[str, Any]) -> Key | None:
        job = self.job_of_pod(pod)
        seen = observe(pod) if pod.get("spec") else None
        if job is None:
            return None
        runs = self.pods.get(job, {})
        for run, current in list(runs.items()):
            if current.name == pod["metadata"]["name"] and (seen is None or seen.run == run):
                del runs[run]
        if not runs:
            self.pods.pop(job, None)
        return job

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
        return Observations(
            queue=self.queues.get((ns, job.spec.queue)),
            handler=self.handlers.get((ns, job.spec.handler)),
            pods=tuple(self.pods.get(key, {}).values()),
        )

    def holds_slot(self, key: Key) -> bool:
        raw = self.jobs.get(key)
        running = raw is not None and state_of(raw) == State.RUNNING
        return running or any(p.alive for p in self.pods.get(key, {}).values())
