"""Which jobs are this worker's (docs/workers.md §3): one list-and-watch of the namespace's jobs with
`fieldSelector=status.worker=NAME`, never a list of every job.

A job is this process's to run when it is `running`, assigned to this worker's name, and its last timeline entry
is the job's current attempt (the same sequence number) and names this process's incarnation
(<name>/<incarnation>). A job assigned to an earlier incarnation of the same name is not: the operator fails it
with LeaseExpired.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..kube.informer import Informer
from ..kube.client import Kube
from ..resources import contract
from ..resources.common import parse_time
from ..resources.job import sequence_of


@dataclass(frozen=True)
class Assignment:
    """One attempt given to this worker, as read from the job."""

    job: str  # the object's name
    sequence: int
    attempt: int
    queue: str
    handler: str
    started_at: datetime | None  # when the operator took the job for this worker (the timeline's startedAt)


def holder_of(raw: dict[str, Any]) -> tuple[str | None, int]:
    """(the last timeline entry's worker, its sequence number) of a running job; (None, 0) otherwise."""
    status = raw.get("status") or {}
    attempts = status.get("attempts") or []
    if status.get("state") != "running" or not attempts:
        return None, 0
    last = attempts[-1]
    if sequence_of(last) != sequence_of(status):  # either written by this version or the previous one (`run`)
        return None, 0
    return last.get("worker"), sequence_of(last)


def assignment(raw: dict[str, Any], worker: str, holder: str) -> Assignment | None:
    """The attempt this process (holder = <worker>/<incarnation>) is to run in this job now; None when the job
    holds none of its attempts."""
    status = raw.get("status") or {}
    if status.get("worker") != worker:
        return None
    who, sequence = holder_of(raw)
    if who != holder:
        return None
    spec = raw.get("spec") or {}
    last = status["attempts"][-1]
    try:
        started = parse_time(last.get("startedAt"))
    except ValueError:
        started = None
    return Assignment(job=raw["metadata"]["name"], sequence=sequence, attempt=int(status.get("attempt") or 0),
                      queue=spec.get("queue", ""), handler=spec.get("handler", ""), started_at=started)


def owns(raw: dict[str, Any] | None, worker: str, holder: str, sequence: int) -> bool:
    """This process still holds the attempt `sequence` of the job: its result may be recorded (docs/workers.md §4)."""
    if raw is None:
        return False
    found = assignment(raw, worker, holder)
    return found is not None and found.sequence == sequence


def watch(kube: Kube, namespace: str, worker: str,
          on_change: Callable[[str, dict[str, Any]], None]) -> Informer:
    """The one watch on jobs: only those assigned to `worker` (status.worker is a CRD selectable field)."""
    return Informer(kube, contract.jobs_path(namespace), on_change, field_selector=f"status.worker={worker}",
                    name="assigned jobs")
