"""Retention (how long finished jobs stay visible): when a finished job, and earlier its pods, may be deleted.
Pure; the operator's central timer acts on it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..resources.common import parse_duration, parse_time
from ..resources.job import State
from ..resources.queue import Retention


@dataclass(frozen=True)
class Expiry:
    pods_at: datetime | None  # the finished job's pods may go (its timeline stays in status)
    job_at: datetime | None  # the job itself may go (its pods and leases with it, by owner reference)


def expiry(state: State | None, finished_at: str | datetime | None, retention: Retention,
           claim_ends: datetime | None = None) -> Expiry:
    """Only a finished job expires, counted from when it finished; a retried job's clock starts again when it
    next finishes. A retention of 0 keeps the job forever.

    A job with an idempotency key is kept at least until its key's claim ends (`claim_ends`: its creation plus
    the 24-hour window, sextant/lifecycle/idempotency.py), so that a second create with that key still finds it and returns
    it; its pods still go when the job alone would have."""
    try:
        finished = parse_time(finished_at)
    except ValueError:
        finished = None  # unreadable: kept, never deleted on a guess
    keep = {State.SUCCEEDED: retention.succeeded, State.CANCELLED: retention.cancelled,
            State.DEAD: retention.dead}.get(state) if state else None
    if finished is None or keep is None:
        return Expiry(None, None)
    job_keep = parse_duration(keep)
    job_at = finished + job_keep if job_keep.total_seconds() > 0 else None
    pods_at = finished + parse_duration(retention.pods) if retention.pods is not None else None
    if job_at is not None and claim_ends is not None and claim_ends > job_at:
        if pods_at is None or pods_at > job_at:
            pods_at = job_at  # without the key the job, and its pods with it, would go now
        job_at = claim_ends
    if job_at is not None and pods_at is not None and pods_at >= job_at:
        pods_at = None  # the job's deletion takes them anyway
    return Expiry(pods_at, job_at)
