"""Worker mode's rules (docs/workers.md): which worker may take a job, and what the operator sees of an attempt
running on a worker. Pure: the leases and the clock come in as arguments."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..resources.common import parse_time
from ..resources.job import Attempt, JobStatus
from .attempts import PodObservation

# How long past its grace period a stopped attempt's worker may take to report before the operator records the
# outcome itself (the same allowance a stopping pod gets before it is force-deleted).
REPORT_AFTER_GRACE = timedelta(seconds=5)


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
    lease_duration: timedelta = timedelta(seconds=30)

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
    renewed = lease.renewed_at
    if started is not None:
        renewed = max(renewed, started)
    renewed = min(renewed, now)
    if now >= renewed + lease_duration:
        return None, renewed
    stop_at = parse_time(status.stop_requested_at)
    if stop_at is not None and now >= stop_at + cancel_grace + REPORT_AFTER_GRACE:
        return None, renewed
    return PodObservation(name=lease.name, sequence=entry.sequence, phase="Running", node=lease.name,
                          started_at=started), renewed
