"""Retention (how long finished jobs stay visible): when a finished job, and earlier its pods, may be deleted.
Pure; the operator's central timer acts on it."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from ..resources.common import parse_duration, parse_time
from ..resources.job import State
from ..resources.queue import Retention

K = TypeVar("K", bound=Hashable)
Q = TypeVar("Q", bound=Hashable)


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


# The finished Job objects kept across the cluster when the operator is told no other number (`--max-finished-jobs`):
# measured, each costs etcd ~3.1 KB and the API server ~40 KB of memory (docs/archive.md, "How many finished jobs
# stay objects"); 50,000 is ~155 MB of etcd's 2 GiB quota and the API server's RSS measured with them (2.3 GB).
MAX_FINISHED_JOBS = 50_000


def over_cap(oldest: Iterable[tuple[K, Q]], counts: Mapping[Q, int], caps: Mapping[Q, int | None],
             cluster_cap: int | None, limit: int) -> list[tuple[K, Q]]:
    """Which finished jobs go because there are too many, not because their time is over: oldest first (`oldest`
    walks every finished job oldest first, with its queue), until each queue holds at most its cap and the cluster
    at most cluster_cap; at most `limit` of them (the caller comes back for the rest). A cap of None is no cap.

    A job of a queue over its cap goes; so does any job while the cluster is over its cap. The walk stops as soon
    as nothing is over: with only the cluster's cap passed it costs what it deletes, not what is kept."""
    excess = {q: n - cap for q, n in counts.items() if (cap := caps.get(q)) is not None and n > cap}
    cluster_excess = sum(counts.values()) - cluster_cap if cluster_cap is not None else 0
    chosen: list[tuple[K, Q]] = []
    if limit <= 0:
        return chosen
    for key, queue in oldest:
        if cluster_excess <= 0 and not excess:
            break
        if cluster_excess > 0 or excess.get(queue, 0) > 0:
            chosen.append((key, queue))
            cluster_excess -= 1
            if queue in excess:
                excess[queue] -= 1
                if excess[queue] <= 0:
                    del excess[queue]
            if len(chosen) >= limit:
                break
    return chosen
