"""What the lifecycle's step reads and what it decides: the job as last stored (JobSnapshot), what the cluster shows
now (Observations), and the Decision — the status to store, the actions to take, the Events, when to look again."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ..resources.handler import HandlerSpec
from ..resources.job import JobSpec, JobStatus
from ..resources.queue import QueueSpec
from .attempts import AttemptObservation, PodObservation
from .states import QUEUED

COND_SUCCEEDED, COND_DEAD, COND_CANCELLED, COND_RUNNING, COND_BLOCKED = (
    "Succeeded", "Dead", "Cancelled", "Running", "Blocked",
)


@dataclass(frozen=True)
class JobSnapshot:
    name: str
    uid: str
    generation: int
    created_at: datetime
    spec: JobSpec
    status: JobStatus
    # The payload's size as compact JSON when the payload itself was left out (the operator's view keeps none:
    # lifecycle/reading.lean_job); spec.payload is then {}. None: spec.payload is the payload.
    payload_bytes: int | None = None


@dataclass(frozen=True)
class Observations:
    queue: QueueSpec | None
    handler: HandlerSpec | None
    attempts: tuple[AttemptObservation, ...] = ()  # the job's attempts that exist now: pods, or assignments
    lease_renewed_at: datetime | None = None  # the current attempt's last heartbeat, if it has a lease
    duplicate_of: str | None = None  # another job already holds this idempotency key
    no_worker: bool = False  # a worker-mode handler that no live worker serves on this queue (docs/workers.md)
    gone: tuple[PodObservation, ...] = ()  # the last state of the job's pods deleted after a disruption

    def attempt(self, sequence: int) -> AttemptObservation | None:
        return next((a for a in self.attempts if a.sequence == sequence), None)

    def gone_pod(self, sequence: int) -> PodObservation | None:
        return next((p for p in self.gone if p.sequence == sequence), None)

    @property
    def alive_attempts(self) -> list[AttemptObservation]:
        return [a for a in self.attempts if a.alive]


@dataclass(frozen=True)
class CreatePod:
    name: str
    sequence: int
    attempt: int


@dataclass(frozen=True)
class DeletePod:
    name: str
    grace_seconds: int | None  # None: the pod's own; 0: force


@dataclass(frozen=True)
class Event:
    reason: str
    message: str
    type: str = "Normal"


@dataclass(frozen=True)
class Assign:
    """Worker mode's CreatePod: give the attempt to the worker (<name>/<incarnation>)."""

    worker: str
    sequence: int
    attempt: int


@dataclass(frozen=True)
class StopAssignment:
    """Ask the worker running the attempt to stop it (set `stop` on its assignment)."""

    worker: str  # its name
    sequence: int
    reason: str
    requested_at: str
    grace_seconds: float


@dataclass(frozen=True)
class Unassign:
    """Worker mode's DeletePod: the assignment is done with (its end recorded, or it is never to run)."""

    worker: str  # its name
    sequence: int


Action = CreatePod | DeletePod | Assign | StopAssignment | Unassign


@dataclass
class Decision:
    status: JobStatus
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    wake_at: datetime | None = None

    @property
    def wants_admission(self) -> bool:
        """Queued, and not Blocked: without its Queue or Handler there is nothing to run."""
        return self.status.state == QUEUED and not blocked(self.status)

    def wake(self, when: datetime | None) -> None:
        if when is not None and (self.wake_at is None or when < self.wake_at):
            self.wake_at = when


def blocked(status: JobStatus) -> bool:
    """The job says it cannot run (the condition Blocked): its Queue, Handler or worker is missing."""
    return any(c.type == COND_BLOCKED and c.status == "True" for c in status.conditions)


def missing(obs: Observations) -> str | None:
    """What the job lacks to run, as its condition Blocked names it (QueueNotFound, HandlerNotFound, NoWorker: a
    worker-mode handler that no live worker serves on its queue); None: nothing."""
    if obs.queue is None:
        return "QueueNotFound"
    if obs.handler is None:
        return "HandlerNotFound"
    return "NoWorker" if obs.no_worker else None


def pod_name(job_name: str, sequence: int) -> str:
    return f"{job_name}-{sequence}"


def effective_queue(obs: Observations) -> QueueSpec:
    """The queue's settings, or the defaults while it is missing (a running job keeps running)."""
    return obs.queue if obs.queue is not None else QueueSpec()
