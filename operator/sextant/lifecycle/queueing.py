"""Queueing: a job's place in its queue's line, what counts as queued, and the per-queue numbers built on them.

- `runnable_since`/`line_position`: when a job became runnable (its creation, or its runAt): the FIFO order among
  equal priorities, recorded as status.queuedAt when the job is written queued.
- `counted_state`: the one rule of what a job counts as in a queue's numbers. A job the operator has not written a
  state for yet is new and runnable (queued is "runnable, no worker has taken it"), so it counts as
  queued (scheduled while its runAt is ahead), unless it is Invalid; the operator holds many jobs so on purpose
  (controller/writes.hold_until). The Queue's status (`count_unfinished`, written by the operator; GET
  /v2/queues serves it back, `numbers_of_status`), the dashboard (`queue_stats`) and a new job's `state` in the
  /v2 API all count with it, so `kubectl get squeue`, /v2/queues and a create's answer agree.

Pure: raw Queue and Job objects in, numbers out."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from ..resources.common import parse_time, time_or_none
from ..resources.job import State, written_status
from ..resources.queue import QueueSpec
from .admission import NO_KEY, concurrency_key
from .health import COND_INVALID

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
    paused: bool = False
    rate_limit: str | None = None  # spec.rateLimit as "100/1m"
    per_key_concurrency: int | None = None
    rate_limited: bool = False  # status.rateLimited: queued jobs wait for the rate limit

    @property
    def running(self) -> int:
        return self.jobs["running"]


def runnable_since(created_at: datetime, run_at: datetime | None) -> datetime:
    """When a new job became runnable: its creation, or its runAt when that is later."""
    return max(created_at, run_at) if run_at is not None else created_at


def line_position(raw: dict[str, Any]) -> datetime | None:
    """When the job became runnable, as lifecycle.transitions records it in status.queuedAt; None when a time
    cannot be read (the reconcile then holds the job as Invalid)."""
    status, spec = raw.get("status") or {}, raw.get("spec") or {}
    try:
        if status.get("state") == "queued" and status.get("queuedAt"):
            return parse_time(status["queuedAt"])
        created = parse_time(raw["metadata"]["creationTimestamp"])
        run_at = parse_time(spec.get("runAt"))
    except (ValueError, KeyError):
        return None
    return runnable_since(created, run_at) if created is not None else None


def counted_state(job: dict[str, Any], now: datetime) -> str | None:
    """What a job counts as in its queue's numbers: its state; with none written yet, queued (scheduled while its
    runAt is ahead); None for a job that is Invalid (it does not run) or unreadable."""
    status = written_status(job.get("status") if isinstance(job.get("status"), dict) else None)
    state = status.get("state")
    if state is not None:
        return state if state in STATES else None
    if any(isinstance(c, dict) and c.get("type") == COND_INVALID and c.get("status") == "True"
           for c in status.get("conditions") or () if isinstance(status.get("conditions"), list)):
        return None
    try:
        run_at = parse_time((job.get("spec") or {}).get("runAt"))
    except ValueError:
        return None
    if run_at is not None and run_at.tzinfo is None:
        run_at = run_at.replace(tzinfo=timezone.utc)
    return "scheduled" if run_at is not None and run_at > now else "queued"


def _queued_since(job: dict[str, Any]) -> datetime | None:
    status = job.get("status") or {}
    return time_or_none(status.get("queuedAt")) or time_or_none(job["metadata"].get("creationTimestamp"))


def queue_stats(queues: Iterable[dict[str, Any]], jobs: Iterable[dict[str, Any]], now: datetime) -> list[QueueStats]:
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
            spec.max_attempts if spec else None, time_or_none(meta.get("creationTimestamp")),
            paused=bool(spec and spec.paused),
            rate_limit=f"{spec.rate_limit.starts}/{spec.rate_limit.per}" if spec and spec.rate_limit else None,
            per_key_concurrency=spec.per_key_concurrency if spec else None,
            rate_limited=bool(spec and spec.rate_limit and isinstance(raw.get("status"), dict)
                              and raw["status"].get("rateLimited") is True))
    for job in jobs:
        ns, queue = job["metadata"].get("namespace", ""), (job.get("spec") or {}).get("queue", "")
        stats = out.get((ns, queue))
        if stats is None:
            stats = out[(ns, queue)] = QueueStats(ns, queue, False)
        state = counted_state(job, now)
        if state is None:
            continue
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
    keys: int = 0  # distinct concurrency keys of the queued and running jobs
    # A rate-limited queue's starts in its window and whether jobs wait for it (controller/slots.Slots.rate tells
    # them); None and False without a rate limit.
    recent_starts: int | None = None
    rate_limited: bool = False


def count_unfinished(jobs: Iterable[tuple[dict[str, Any], bool]], now: datetime) -> QueueNumbers:
    """The numbers of one queue from its unfinished jobs, each with whether a pod of it is alive and unstarted
    (counted as `starting` among the queued). What each job counts as: `counted_state`."""
    counts = {"running": 0, "queued": 0, "starting": 0, "scheduled": 0, "failed": 0}
    oldest: datetime | None = None
    keys: set[str] = set()
    for job, starting in jobs:
        state = counted_state(job, now)
        if state not in counts:
            continue
        counts[state] += 1
        if state in ("queued", "running"):
            keys.add(concurrency_key(job))
        if state == "queued":
            counts["starting"] += starting
            since = _queued_since(job)
            if since is not None and (oldest is None or since < oldest):
                oldest = since
    keys.discard(NO_KEY)
    return QueueNumbers(**counts, oldest_queued_at=oldest, keys=len(keys))


def status_body(numbers: QueueNumbers, generation: int | None, paused: bool = False) -> dict[str, Any]:
    """A Queue's status as a JSON merge patch body (oldestQueuedAt null removes it when nothing is queued; so do
    the rate limit's numbers without a rate limit, and keys when no job has a key)."""
    from ..resources.common import format_time

    oldest = numbers.oldest_queued_at
    return {
        "recentStarts": numbers.recent_starts,
        "rateLimited": numbers.rate_limited if numbers.recent_starts is not None else None,
        "keys": numbers.keys or None,
        "observedGeneration": generation,
        "paused": paused,
        "running": numbers.running,
        "queued": numbers.queued,
        "starting": numbers.starting,
        "scheduled": numbers.scheduled,
        "failed": numbers.failed,
        "oldestQueuedAt": format_time(oldest, precise=False) if oldest is not None else None,
    }


def numbers_of_status(status: Any) -> QueueNumbers:
    """A Queue's status back into its numbers (what status_body wrote; absent or unreadable fields read as 0)."""
    status = status if isinstance(status, dict) else {}

    def count(key: str) -> int:
        value = status.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    return QueueNumbers(running=count("running"), queued=count("queued"), starting=count("starting"),
                        scheduled=count("scheduled"), failed=count("failed"), keys=count("keys"),
                        recent_starts=count("recentStarts") if status.get("recentStarts") is not None else None,
                        rate_limited=status.get("rateLimited") is True,
                        oldest_queued_at=time_or_none(status.get("oldestQueuedAt")))


def same_status(stored: dict[str, Any] | None, body: dict[str, Any]) -> bool:
    """Whether a Queue's stored status already says what body says (an absent field reads as null)."""
    stored = stored or {}
    return all(stored.get(k) == v for k, v in body.items())
