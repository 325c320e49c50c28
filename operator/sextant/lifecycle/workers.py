"""Worker mode's rules (docs/workers.md, protocol v2): what the operator believes of a Worker object (capped, validated),
when a worker is live (by the operator's own clock), which worker may take a job, what an assignment tells of its
attempt (as a pod tells it in pod mode), and when an assignment is done with. Pure: the objects and the clock come in
as arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from ..resources import contract
from ..resources.common import parse_duration, parse_time, time_or_none
from ..resources.job import Attempt, JobStatus
from ..resources.queue import QueueSpec
from ..resources.report import Progress, output_json
from ..resources.worker import DRAINING, EXPIRED, LIVE, Assignment, WorkerProgress, WorkerResult, WorkerSpec
from .attempts import LEASE_EXPIRED, AssignmentObservation, Report
from .states import QUEUED, RUNNING

# How long past its grace period a stopped attempt's worker may take to report before the operator records the
# outcome itself (the same allowance a stopping pod gets before it is force-deleted).
REPORT_AFTER_GRACE = timedelta(seconds=5)
# A worker's Lease without a (valid) leaseDurationSeconds, or a worker that serves no queue: the queues' default.
DEFAULT_LEASE_DURATION = parse_duration(QueueSpec.model_fields["lease_duration"].default)
# The most slots the operator believes a Worker has (`sextant operator --max-worker-slots`): a Worker announcing more
# gets this many, and a Warning Event SlotsCapped.
MAX_WORKER_SLOTS = 256
# The longest lease the operator grants a worker, whatever its spec.leaseDurationSeconds says: a dead worker's
# attempts fail LeaseExpired within this after its last renewal.
MAX_LEASE_DURATION = timedelta(minutes=5)
# An expired Worker with no assignments left is deleted this long after it expired (a laptop's worker that was
# killed: no pod takes its object with it).
DELETE_EXPIRED_AFTER = timedelta(minutes=5)


@dataclass(frozen=True)
class Believed:
    """A Worker object as the operator believes it: slots capped, lease capped, an invalid spec believed to offer
    nothing (0 slots, no queues) but still to report the results it carries."""

    namespace: str
    name: str
    uid: str
    generation: int
    incarnation: str
    queues: frozenset[str] = frozenset()
    handlers: frozenset[str] = frozenset()
    slots: int = 0
    lease_duration: timedelta = DEFAULT_LEASE_DURATION
    draining: bool = False
    deleting: bool = False
    finalizers: tuple[str, ...] = ()
    results: tuple[WorkerResult, ...] = ()
    progress: tuple[WorkerProgress, ...] = ()
    assignments: tuple[Assignment, ...] = ()  # its status, as last written (by the operator)
    status: dict[str, Any] = field(default_factory=dict, compare=False)  # the status as stored, raw
    invalid: str | None = None  # why its spec was not believed (names the field)
    capped_from: int | None = None  # the slots it announced, when more than the operator believes

    def __post_init__(self) -> None:
        index = {(r.job, r.uid, r.sequence, r.incarnation): r for r in self.results}
        object.__setattr__(self, "_by_attempt", index)  # frozen: set once, here
        object.__setattr__(self, "_progress", {(p.job, p.uid, p.sequence, p.incarnation): p for p in self.progress})

    @property
    def holder(self) -> str:
        return contract.holder_identity(self.name, self.incarnation)

    def result_for(self, assignment: Assignment) -> WorkerResult | None:
        """The worker's report of an assignment: the same job, uid, sequence and incarnation."""
        index: dict[tuple[str, str, int, str], WorkerResult] = getattr(self, "_by_attempt")
        return index.get((assignment.job, assignment.uid, assignment.sequence, assignment.incarnation))

    def progress_for(self, assignment: Assignment) -> WorkerProgress | None:
        """The latest progress the worker reported for an assignment (the same key as its result)."""
        index: dict[tuple[str, str, int, str], WorkerProgress] = getattr(self, "_progress")
        return index.get((assignment.job, assignment.uid, assignment.sequence, assignment.incarnation))

    def serves(self, queue: str, handler: str) -> bool:
        return queue in self.queues and handler in self.handlers


def _problem(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "spec"
    return f"spec.{where}: {first.get('msg', 'invalid')}"


def _valid_items(model: type[Any], items: Any) -> tuple[Any, ...]:
    """The entries of a list that validate on their own (one bad entry does not hide the others)."""
    out = []
    for item in items if isinstance(items, list) else ():
        try:
            out.append(model.model_validate(item))
        except ValidationError:
            continue
    return tuple(out)


def read_worker(obj: Mapping[str, Any], max_slots: int = MAX_WORKER_SLOTS,
                max_lease: timedelta = MAX_LEASE_DURATION) -> Believed:
    """What the operator believes of a Worker object. Never raises: a spec that fails resources.worker's validation
    (an older or loosened CRD) makes a worker of 0 slots and no queues, `invalid` naming the field; its valid
    results still count. Slots above max_slots are believed as max_slots (`capped_from` says what it announced)."""
    meta = obj.get("metadata") or {}
    raw_spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    raw_status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    common: dict[str, Any] = dict(
        namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")), uid=str(meta.get("uid", "")),
        generation=meta.get("generation") if isinstance(meta.get("generation"), int) else 0,
        deleting=bool(meta.get("deletionTimestamp")),
        finalizers=tuple(f for f in meta.get("finalizers") or () if isinstance(f, str)),
        assignments=_valid_items(Assignment, raw_status.get("assignments")), status=raw_status,
    )
    try:
        spec = WorkerSpec.model_validate(raw_spec)
    except ValidationError as exc:
        incarnation = raw_spec.get("incarnation")
        return Believed(**common, incarnation=incarnation if isinstance(incarnation, str) else "",
                        results=_valid_items(WorkerResult, raw_spec.get("results")),
                        progress=_valid_items(WorkerProgress, raw_spec.get("progress")), invalid=_problem(exc))
    slots = min(spec.slots, max_slots)
    return Believed(
        **common, incarnation=spec.incarnation, queues=frozenset(spec.queues), handlers=frozenset(spec.handlers),
        slots=slots, lease_duration=min(timedelta(seconds=spec.lease_duration_seconds), max_lease),
        draining=spec.draining, results=tuple(spec.results), progress=tuple(spec.progress),
        capped_from=spec.slots if spec.slots > slots else None,
    )


def changed_jobs(before: Believed | None, after: Believed | None, liveness_changed: bool = False) -> set[str]:
    """The jobs (names) a change of a Worker object concerns: those whose assignment or result changed, or all of
    its jobs when what decides their attempts' fate changed (another object or incarnation, deleting, liveness).
    Nothing for a renewal that changes nothing else: the jobs are not looked at."""
    old = before.assignments if before is not None else ()
    new = after.assignments if after is not None else ()
    if before is None or after is None or liveness_changed or before.uid != after.uid or \
            before.incarnation != after.incarnation or before.deleting != after.deleting:
        return {a.job for a in (*old, *new)}
    was = {(a.uid, a.sequence): a for a in old}
    out = set()
    for a in new:
        previous = was.pop((a.uid, a.sequence), None)
        if previous != a or before.result_for(a) != after.result_for(a) or \
                before.progress_for(a) != after.progress_for(a):
            out.add(a.job)
    out.update(a.job for a in was.values())
    return out


def offer_of(worker: Believed | None, live: bool) -> tuple[Any, ...]:
    """What decides whether the worker serves a queue and handler (its NoWorker): not its renewals nor its load."""
    if worker is None:
        return ()
    return (worker.queues, worker.handlers, worker.draining, worker.deleting, worker.slots > 0, live)


def renewed(before: Believed | None, after: Believed) -> bool:
    """The object shows a renewal the operator has not seen: a new metadata.generation, or a new object (uid).
    Only this moves the worker's liveness (observedAt, by the operator's clock); renewTime is never read."""
    return before is None or before.uid != after.uid or before.generation != after.generation


def expires_at(worker: Believed, observed_at: datetime) -> datetime:
    """When the worker counts as gone: its (capped) lease after the operator last observed a renewal."""
    return observed_at + worker.lease_duration


def state_of(worker: Believed, live: bool) -> str:
    """What the operator writes to status.state: expired wins over draining."""
    if not live:
        return EXPIRED
    return DRAINING if worker.draining else LIVE


def open_for(worker: Believed, queue: str, handler: str, live: bool) -> bool:
    """May be given new jobs of this queue and handler (slots apart): live, not draining nor being deleted."""
    return live and not worker.draining and not worker.deleting and worker.serves(queue, handler)


def pick_worker(workers: Iterable[tuple[Believed, bool]], queue: str, handler: str,
                busy: Mapping[str, int]) -> Believed | None:
    """The worker to take a job, from (worker, live) pairs: open for it, with a free slot; the one with the most
    free slots (spreads the load), then the name (deterministic)."""
    best: tuple[int, str] | None = None
    chosen = None
    for worker, live in workers:
        free = worker.slots - busy.get(worker.name, 0)
        if free <= 0 or not open_for(worker, queue, handler, live):
            continue
        rank = (-free, worker.name)
        if best is None or rank < best:
            best, chosen = rank, worker
    return chosen


def is_served(workers: Iterable[tuple[Believed, bool]], queue: str, handler: str) -> bool:
    """Some live worker, not draining, with slots, serves this queue and handler (busy or not): else a job of them
    is Blocked, NoWorker."""
    return any(open_for(w, queue, handler, live) and w.slots > 0 for w, live in workers)


def observe_assignment(assignment: Assignment, worker_name: str, worker: Believed | None, live: bool, now: datetime,
                       durable: bool = True, landed_at: datetime | None = None) -> AssignmentObservation:
    """What an assignment tells of its attempt (the rules read it as they read a pod in pod mode):
    - not durable yet (its status write has not landed): Pending — it holds the slot, has not started;
    - a result for it (same uid, sequence, incarnation): finished, as the result says (applied before anything the
      same write says of the worker, e.g. a new incarnation);
    - else lost with its worker — gone, being deleted, expired (by the operator's clock) or restarted (another
      incarnation): failed, LeaseExpired;
    - else a stop that was not reported within its cancelGrace + REPORT_AFTER_GRACE: ended (the stop decides how);
    - else running since it landed (landed_at: when the operator first saw it in the Worker's status; else since it
      was assigned), by the operator's clock."""
    assigned = parse_time(assignment.assigned_at)
    base: dict[str, Any] = dict(worker_name=worker_name, sequence=assignment.sequence,
                                worker=contract.holder_identity(worker_name, assignment.incarnation),
                                stop=assignment.stop)
    if not durable:
        return AssignmentObservation(**base, phase="Pending")
    result = worker.result_for(assignment) if worker is not None else None
    if result is not None:
        succeeded = result.exit_code == 0 and result.reason is None
        return AssignmentObservation(**base, phase="Succeeded" if succeeded else "Failed", exit_code=result.exit_code,
                                     reason=result.reason, message=result.message, report=report_of(result),
                                     started_at=time_or_none(result.started_at) or assigned, assigned_at=assigned,
                                     finished_at=time_or_none(result.finished_at) or now)
    lost = _lost(assignment, worker, live)
    if lost is not None:
        return AssignmentObservation(**base, phase="Failed", reason=LEASE_EXPIRED, message=lost, started_at=assigned,
                                     assigned_at=assigned)
    deadline = report_deadline(assignment)
    if deadline is not None and now >= deadline:
        return AssignmentObservation(**base, phase="Failed", started_at=assigned, assigned_at=assigned,
                                     message="the worker did not report the stopped attempt in time")
    since = max(assigned, landed_at) if landed_at is not None else assigned
    said = worker.progress_for(assignment) if worker is not None else None
    progress = Progress(fraction=said.fraction, message=said.message) if said is not None else None
    return AssignmentObservation(**base, phase="Running", started_at=since, assigned_at=assigned, progress=progress)


def report_of(result: WorkerResult) -> Report:
    """A worker's result as the lifecycle reads a report: its output checked again (any worker may write any JSON
    there: over the cap, or nested too deep, it is not kept and the note says why)."""
    output, note = output_json(result.output)
    return Report(snooze_seconds=result.snooze_seconds, output=output, output_note=note or result.output_note,
                  message=result.message)


def report_deadline(assignment: Assignment) -> datetime | None:
    """When a stopped assignment's worker must have reported (else the operator records the outcome itself)."""
    stop_at = parse_time(assignment.stop_requested_at)
    if stop_at is None:
        return None
    return stop_at + timedelta(seconds=assignment.cancel_grace_seconds or 0) + REPORT_AFTER_GRACE


def _lost(assignment: Assignment, worker: Believed | None, live: bool) -> str | None:
    if worker is None:
        return "its Worker object is gone"
    if worker.deleting:
        return f"worker {worker.name} is being deleted"
    if assignment.incarnation != worker.incarnation:
        return f"worker {worker.name} restarted (incarnation {worker.incarnation}, not {assignment.incarnation})"
    if not live:
        return f"worker {worker.name} stopped renewing its Worker object (leaseDuration over)"
    return None


def wanted(status: JobStatus, sequence: int) -> bool:
    """The job still needs its assignment of this sequence number: it is the queued job's starting attempt
    (status.sequence + 1) or its running one. Any other is done with (its end is recorded: the acknowledgement) or
    never to run: the operator removes it from the worker's status."""
    state = status.state
    if sequence == status.sequence + 1:
        return state is None or state == QUEUED
    return sequence == status.sequence and state == RUNNING


def status_summary(worker: Believed, live: bool, busy: int) -> dict[str, Any]:
    """The operator's word on the worker besides its assignments: state, believed slots, busy, and why when odd."""
    state = state_of(worker, live)
    if worker.invalid is not None:
        message = f"not believed: {worker.invalid}; it gets no jobs"
    elif worker.capped_from is not None:
        message = f"announces {worker.capped_from} slots; the operator believes at most {worker.slots}"
    else:
        message = {LIVE: "live", DRAINING: "draining: no new jobs", EXPIRED: "expired: no renewal observed "
                   "within its lease"}[state]
    return {"observedGeneration": worker.generation, "state": state, "slots": worker.slots, "busy": busy,
            "message": message}


def current_entry(status: JobStatus) -> Attempt | None:
    """The timeline entry of the running attempt (the job's current sequence number), if recorded."""
    if status.attempts and status.attempts[-1].sequence == status.sequence:
        return status.attempts[-1]
    return None


def on_worker(status: JobStatus) -> bool:
    entry = current_entry(status)
    return entry is not None and entry.worker is not None
