"""Per-queue numbers counted from the jobs, for GET /v2/queues and the dashboard (jobs per state, running vs
concurrency, the age of the oldest queued job), and the numbers of a Queue's status, which the operator writes from
its view and `sextant queues list` reads. Pure: raw Queue and Job objects in, numbers out."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from .resources.common import time_or_none
from .resources.job import State
from .resources.queue import QueueSpec

STATES = [s.value for s in State]


@dataclass
class QueueStats:
    namespace: str
    name: str
    exists: bool  # False: jobs name this queue, but no Queue object exists (they are Blocked)
    concurrency: int | None = None
    max_attempts: int | None = None
    created_at: datetime | None = None
    jobs: dict[str, int] = field(default_factory=lambda: {s: 0 for s in STATES})
    oldest_queued_at: datetime | None = None

    @property
    def running(self) -> int:
        return self.jobs["running"]


def _queued_since(job: dict[str, Any]) -> datetime | None:
    status = job.get("status") or {}
    return time_or_none(status.get("queuedAt")) or time_or_none(job["metadata"].get("creationTimestamp"))


def queue_stats(queues: Iterable[dict[str, Any]], jobs: Iterable[dict[str, Any]]) -> list[QueueStats]:
    """One entry per Queue object, plus one per queue that jobs name but that does not exist; sorted."""
    out: dict[tuple[str, str], QueueStats] = {}
    for raw in queues:
        meta = raw["metadata"]
        try:
            spec: QueueSpec | None = QueueSpec.model_validate(raw.get("spec") or {})
        except ValidationError:
            spec = None  # a Queue the operator cannot read either: listed, without its numbers
        out[(meta.get("namespace", ""), meta["name"])] = QueueStats(
            meta.get("namespace", ""), meta["name"], True, spec.concurrency if spec else None,
            spec.max_attempts if spec else None, time_or_none(meta.get("creationTimestamp")))
    for job in jobs:
        ns, queue = job["metadata"].get("namespace", ""), (job.get("spec") or {}).get("queue", "")
        stats = out.get((ns, queue))
        if stats is None:
            stats = out[(ns, queue)] = QueueStats(ns, queue, False)
        state = (job.get("status") or {}).get("state")
        if state not in stats.jobs:
            continue  # not yet looked at by the operator
        stats.jobs[state] += 1
        if state == "queued":
            since = _queued_since(job)
            if since is not None and (stats.oldest_queued_at is None or since < stats.oldest_queued_at):
                stats.oldest_queued_at = since
    return [out[k] for k in sorted(out)]


# --- the numbers a Queue's status shows (controller/queuestatus.py writes them from the operator's view) ---------


@dataclass(frozen=True)
class QueueNumbers:
    running: int = 0
    queued: int = 0
    starting: int = 0  # of the queued: their attempt's pod exists and has not started its handler yet
    scheduled: int = 0
    failed: int = 0
    oldest_queued_at: datetime | None = None


def count_unfinished(jobs: Iterable[tuple[dict[str, Any], bool, bool]]) -> QueueNumbers:
    """The numbers of one queue from its unfinished jobs, each with whether a pod of it is alive and unstarted, and
    whether the operator holds it queued without having written a state yet.

    A job with no state yet is queued while the operator holds it so (its pod is starting, or it waits in line for
    a slot: lifecycle.transitions.hold_first_write); one without any state otherwise is not counted (it is about to
    be looked at)."""
    counts = {"running": 0, "queued": 0, "starting": 0, "scheduled": 0, "failed": 0}
    oldest: datetime | None = None
    for job, starting, held in jobs:
        state = (job.get("status") or {}).get("state")
        if state is None and (starting or held):
            state = "queued"
        if state not in counts:
            continue
        counts[state] += 1
        if state == "queued":
            counts["starting"] += starting
            since = _queued_since(job)
            if since is not None and (oldest is None or since < oldest):
                oldest = since
    return QueueNumbers(**counts, oldest_queued_at=oldest)


def status_body(numbers: QueueNumbers, generation: int | None) -> dict[str, Any]:
    """A Queue's status as a JSON merge patch body (oldestQueuedAt null removes it when nothing is queued)."""
    from .resources.common import format_time

    oldest = numbers.oldest_queued_at
    return {
        "observedGeneration": generation,
        "running": numbers.running,
        "queued": numbers.queued,
        "starting": numbers.starting,
        "scheduled": numbers.scheduled,
        "failed": numbers.failed,
        "oldestQueuedAt": format_time(oldest, precise=False) if oldest is not None else None,
    }


def same_status(stored: dict[str, Any] | None, body: dict[str, Any]) -> bool:
    """Whether a Queue's stored status already says what body says (an absent field reads as null)."""
    stored = stored or {}
    return all(stored.get(k) == v for k, v in body.items())
