"""Worker mode's rules (docs/workers.md): which worker may take a job, what the operator sees of an attempt
running on a worker, and what a user sees of a worker (`sextant workers`, the dashboard: its state read from its
registration Lease). Pure: the leases and the clock come in as arguments."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..resources import contract
from ..resources.common import format_time, parse_duration, parse_time
from ..resources.job import Attempt, JobStatus
from ..resources.queue import QueueSpec
from .attempts import PodObservation, heartbeat

# How long past its grace period a stopped attempt's worker may take to report before the operator records the
# outcome itself (the same allowance a stopping pod gets before it is force-deleted).
REPORT_AFTER_GRACE = timedelta(seconds=5)
# A worker's Lease without a (valid) leaseDurationSeconds, or a worker that serves no queue: the queues' default.
DEFAULT_LEASE_DURATION = parse_duration(QueueSpec.model_fields["lease_duration"].default)
LIVE, DRAINING, EXPIRED = "live", "draining", "expired"


@dataclass(frozen=True)
class WorkerLease:
    """A worker's registration Lease, as read (docs/workers.md §1)."""

    name: str
    holder: str  # <name>/<incarnation>
    renewed_at: datetime | None
    queues: frozenset[str]
    handlers: frozenset[str]
    slots: int
    draining: bool = False
    lease_duration: timedelta = DEFAULT_LEASE_DURATION

    def live(self, now: datetime) -> bool:
        return self.renewed_at is not None and now < self.renewed_at + self.lease_duration

    def serves(self, queue: str, handler: str) -> bool:
        return queue in self.queues and handler in self.handlers

    def open_for(self, queue: str, handler: str, now: datetime) -> bool:
        """May be given new jobs of this queue and handler (slots apart)."""
        return not self.draining and self.live(now) and self.serves(queue, handler)


def pick(leases: Iterable[WorkerLease], queue: str, handler: str, now: datetime,
         busy: dict[str, int]) -> WorkerLease | None:
    """The worker to take a job: open for it, with a free slot; the one with the most free slots (spreads the
    load), then the name (deterministic)."""
    best: tuple[int, str] | None = None
    chosen = None
    for lease in leases:
        free = lease.slots - busy.get(lease.name, 0)
        if free <= 0 or not lease.open_for(queue, handler, now):
            continue
        rank = (-free, lease.name)
        if best is None or rank < best:
            best, chosen = rank, lease
    return chosen


def served(leases: Iterable[WorkerLease], queue: str, handler: str, now: datetime) -> bool:
    """Some live worker, not draining, serves this queue and handler (busy or not): else the job is Blocked,
    NoWorker."""
    return any(lease.open_for(queue, handler, now) for lease in leases)


def current_entry(status: JobStatus) -> Attempt | None:
    """The timeline entry of the running attempt (the job's current sequence number), if recorded."""
    if status.attempts and status.attempts[-1].sequence == status.sequence:
        return status.attempts[-1]
    return None


def on_worker(status: JobStatus) -> bool:
    entry = current_entry(status)
    return entry is not None and entry.worker is not None


def observe_attempt(entry: Attempt, lease: WorkerLease | None, status: JobStatus, lease_duration: timedelta,
                    cancel_grace: timedelta, now: datetime) -> tuple[PodObservation | None, datetime | None]:
    """What the operator sees of a running worker attempt: (still running, its last heartbeat), or (None, …) when
    it is gone — its worker's Lease is missing, names another incarnation (the worker restarted) or expired, or
    a stop was asked for and the worker has not reported within cancelGrace + REPORT_AFTER_GRACE.

    The worker itself records the attempt's end (docs/workers.md §4); the operator only decides that it is lost.
    The renewal is clamped to [attempt start, now]: a clock ahead of ours cannot prolong an attempt."""
    started = parse_time(entry.started_at)
    if lease is None or lease.holder != entry.worker or lease.renewed_at is None:
        return None, None
    renewed = heartbeat(lease.renewed_at, started, now)
    if now >= renewed + lease_duration:
        return None, renewed
    stop_at = parse_time(status.stop_requested_at)
    if stop_at is not None and now >= stop_at + cancel_grace + REPORT_AFTER_GRACE:
        return None, renewed
    return PodObservation(name=lease.name, sequence=entry.sequence, phase="Running", node=lease.name,
                          started_at=started), renewed


# --- what a user sees of a worker ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Worker:
    """One worker as its registration Lease announces it."""

    namespace: str
    name: str
    holder: str
    queues: tuple[str, ...]
    handlers: tuple[str, ...]
    slots: int | None
    draining: bool
    renewed_at: datetime | None
    lease_duration: timedelta
    created_at: datetime | None
    jobs: tuple[str, ...] = field(default=())  # running jobs assigned to it (object names)

    def state(self, now: datetime) -> str:
        """expired wins over draining: an expired worker's attempts are being failed, whatever it last said."""
        if self.renewed_at is None or now >= self.renewed_at + self.lease_duration:
            return EXPIRED
        return DRAINING if self.draining else LIVE


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(sorted({part.strip() for part in (text or "").split(",") if part.strip()}))


def read_lease(lease: Mapping[str, Any]) -> Worker | None:
    """A worker from its registration Lease; None for a Lease that is not one (no sextant.dev/worker label).
    Odd values show as what they are (no slots, no renewal: expired) rather than failing the whole list."""
    meta = lease.get("metadata") or {}
    name = (meta.get("labels") or {}).get(contract.LABEL_WORKER)
    if not name:
        return None
    notes = meta.get("annotations") or {}
    spec = lease.get("spec") or {}
    try:
        slots: int | None = int(notes[contract.ANNOTATION_SLOTS])
    except (KeyError, ValueError):
        slots = None
    try:
        renewed = parse_time(spec.get("renewTime") or spec.get("acquireTime"))
    except ValueError:
        renewed = None
    seconds = spec.get("leaseDurationSeconds")
    return Worker(
        namespace=meta.get("namespace", ""), name=name, holder=spec.get("holderIdentity") or "",
        queues=_names(notes.get(contract.ANNOTATION_QUEUES)), handlers=_names(notes.get(contract.ANNOTATION_HANDLERS)),
        slots=slots, draining=notes.get(contract.ANNOTATION_DRAINING) == "true", renewed_at=renewed,
        lease_duration=(timedelta(seconds=seconds) if isinstance(seconds, int) and seconds > 0
                        else DEFAULT_LEASE_DURATION),
        created_at=parse_time(meta.get("creationTimestamp")),
    )


def running_jobs(jobs: Iterable[Mapping[str, Any]], worker: str) -> tuple[str, ...]:
    """The jobs that hold a slot of `worker`: assigned to it (status.worker) and running."""
    out = []
    for job in jobs:
        status = job.get("status") or {}
        if status.get("worker") == worker and status.get("state") == "running":
            out.append(job["metadata"]["name"])
    return tuple(sorted(out))


def as_dict(worker: Worker, now: datetime) -> dict[str, Any]:
    """The worker as `sextant workers -o json` prints it and the dashboard shows it."""
    renewed = worker.renewed_at
    return {
        "namespace": worker.namespace, "name": worker.name, "holder": worker.holder,
        "queues": list(worker.queues), "handlers": list(worker.handlers), "slots": worker.slots,
        "busy": len(worker.jobs), "jobs": list(worker.jobs), "state": worker.state(now),
        "draining": worker.draining, "renewTime": format_time(renewed) if renewed else None,
        "lastRenewalSeconds": round((now - renewed).total_seconds(), 3) if renewed else None,
        "leaseDurationSeconds": int(worker.lease_duration.total_seconds()),
    }
