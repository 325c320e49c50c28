"""Small builders shared by the unit tests: a fixed clock, resources with the models' defaults, pods.

Nothing here reads the clock or touches a cluster: every test passes its own `now`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from sextant.controller.writes import RECORD_QUEUED_AFTER, scheduled
from sextant.lifecycle import transitions as T
from sextant.lifecycle.attempts import PodObservation
from sextant.resources.common import parse_time
from sextant.resources.handler import HandlerSpec
from sextant.resources.job import JobSpec, JobStatus, State
from sextant.resources.queue import QueueSpec

UTC = timezone.utc
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
JOB = "job-8f3k2m9q"
UID = "0b7e3c1a-uid"


def at(seconds: float = 0) -> datetime:
    """T0 plus some seconds: the only clock the tests use."""
    return T0 + timedelta(seconds=seconds)


def queue(**fields: Any) -> QueueSpec:
    """A QueueSpec from camelCase or snake_case fields; jitter off unless asked, so delays are exact."""
    backoff = {"jitter": 0.0, **fields.pop("backoff", {})}
    return QueueSpec.model_validate({"backoff": backoff, **fields})


def handler(non_retryable: tuple[int, ...] | list[int] = ()) -> HandlerSpec:
    return HandlerSpec.model_validate(
        {
            "template": {"spec": {"containers": [{"name": "handler", "image": "registry.example/h:1"}]}},
            "nonRetryableExitCodes": list(non_retryable),
        }
    )


def spec(**fields: Any) -> JobSpec:
    return JobSpec.model_validate({"queue": "emails", "handler": "send-receipt", **fields})


def snapshot(status: JobStatus | None = None, job_spec: JobSpec | None = None, *, name: str = JOB, uid: str = UID,
             generation: int = 1, created_at: datetime = T0) -> T.JobSnapshot:
    return T.JobSnapshot(name, uid, generation, created_at, job_spec or spec(), status or JobStatus())


def pod(sequence: int, phase: str = "Running", *, name: str | None = None, **fields: Any) -> PodObservation:
    return PodObservation(name=name or T.pod_name(JOB, sequence), sequence=sequence, phase=phase, **fields)


_DEFAULT = object()


def obs(*pods: PodObservation, queue_spec: Any = _DEFAULT, handler_spec: Any = _DEFAULT,
        lease_renewed_at: datetime | None = None, duplicate_of: str | None = None) -> T.Observations:
    return T.Observations(
        queue=queue() if queue_spec is _DEFAULT else queue_spec,
        handler=handler() if handler_spec is _DEFAULT else handler_spec,
        attempts=tuple(pods),
        lease_renewed_at=lease_renewed_at,
        duplicate_of=duplicate_of,
    )


def decide(job: T.JobSnapshot, observed: T.Observations, now: datetime,
           record_queued_after: timedelta | None = RECORD_QUEUED_AFTER) -> T.Decision:
    """The rules' decision as the operator carries it out: its write policy may hold the status a moment
    (controller/writes.py)."""
    return scheduled(job, T.reconcile(job, observed, now), observed, now, record_queued_after)


def condition(status: JobStatus, type_: str):
    return next((c for c in status.conditions if c.type == type_), None)


def creates(decision: T.Decision) -> list[T.CreatePod]:
    return [a for a in decision.actions if isinstance(a, T.CreatePod)]


def deletes(decision: T.Decision) -> list[T.DeletePod]:
    return [a for a in decision.actions if isinstance(a, T.DeletePod)]


def event_reasons(decision: T.Decision) -> list[str]:
    return [e.reason for e in decision.events]


@dataclass
class Job:
    """One job driven step by step: the stored spec and status, the pods that exist, a fixed clock.

    reconcile/admit store the decision's status, as the controller would after a successful write.
    """

    spec: JobSpec = field(default_factory=spec)
    status: JobStatus = field(default_factory=JobStatus)
    pods: dict[int, PodObservation] = field(default_factory=dict)
    queue: QueueSpec | None = field(default_factory=queue)
    handler: HandlerSpec | None = field(default_factory=handler)
    now: datetime = T0
    lease_renewed_at: datetime | None = None
    generation: int = 1
    last: T.Decision | None = None

    def snap(self) -> T.JobSnapshot:
        return snapshot(self.status, self.spec, generation=self.generation)

    def observe(self) -> T.Observations:
        return T.Observations(self.queue, self.handler, tuple(self.pods[r] for r in sorted(self.pods)),
                              self.lease_renewed_at)

    def reconcile(self) -> T.Decision:
        """The rules' decision as the operator carries it out (its write policy may hold the status a moment)."""
        self.last = decide(self.snap(), self.observe(), self.now)
        self.status = self.last.status
        return self.last

    def admit(self) -> T.Decision:
        """Take a slot and create the pod the decision asks for (Pending, as a new pod is)."""
        self.last = T.admit(self.snap(), self.observe(), self.now)
        self.status = self.last.status
        for action in creates(self.last):
            self.pods[action.sequence] = PodObservation(action.name, action.sequence, "Pending", created_at=self.now)
        return self.last

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def advance_to(self, when: datetime | str | None) -> None:
        moment = parse_time(when) if isinstance(when, str) else when
        assert moment is not None and moment >= self.now
        self.now = moment

    @property
    def current(self) -> PodObservation | None:
        """The newest attempt pod: the running attempt's, or the queued job's starting one."""
        return self.pods[max(self.pods)] if self.pods else None

    def set_pod(self, phase: str, **fields: Any) -> None:
        """Change the newest pod (the one admit created, before the status records it)."""
        sequence = max(self.pods)
        self.pods[sequence] = replace(self.pods[sequence], phase=phase, **fields)

    def update_spec(self, **fields: Any) -> None:
        """Change spec fields (camelCase or snake_case), as kubectl patch would; bumps the generation."""
        self.spec = JobSpec.model_validate({**self.spec.model_dump(by_alias=True), **fields})
        self.generation += 1

    def run_attempt(self, phase: str = "Failed", exit_code: int | None = 1, **fields: Any) -> T.Decision:
        """queued → admitted (its pod created, the job still queued) → the handler starts (running) → the pod ends
        with this phase → reconciled."""
        assert self.status.state == State.QUEUED, self.status.state
        self.admit()
        self.set_pod("Running")
        self.reconcile()
        self.set_pod(phase, exit_code=exit_code, **fields)
        return self.reconcile()
