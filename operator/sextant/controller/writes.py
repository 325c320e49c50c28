"""The operator's write policy: whether a status the lifecycle decided is written now, or held until a later look
(the Kubernetes Job controller batches its pod updates the same way, with syncJobBatchPeriod, in its controller and
not in its rules). Pure, like the rules: a status held is decided again at the look it wakes, from what is then
stored and seen, so holding loses nothing.

Two holds, each sparing a write that the next one would soon make moot:
- a start (`running`) is written RECORD_RUNNING_AFTER after it, so that a job that ends within that second is
  written once, at its end;
- a new job's first write (`queued`) is not made while its attempt's pod starts or it waits in line for a slot: a
  reader already sees `queued` (the CRD's default, resources/job.py UNWRITTEN_STATUS), so the start is its first
  write. `sextant operator --record-queued-after` writes it after that long all the same (its queuedAt and message).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from ..lifecycle.attempts import PodObservation
from ..lifecycle.decision import Decision, JobSnapshot, Observations, missing
from ..lifecycle.states import QUEUED, RUNNING
from ..resources.job import JobStatus

# How long a job first seen and runnable may go unwritten while its pod starts, or while it waits in line for a slot
# (the default of `sextant operator --record-queued-after`): None, for as long as that lasts. It reads `queued`.
RECORD_QUEUED_AFTER: timedelta | None = None

# How long after its handler started a pod's start may wait to be recorded: a short job is then written once, at its
# end, instead of `running` and then its end (the Job controller batches pod updates for 1 s the same way).
RECORD_RUNNING_AFTER = timedelta(seconds=1)


# hold_until's answer for a status held until something else changes (a later look decides again).
UNTIL_CHANGED = datetime.max.replace(tzinfo=timezone.utc)


def hold_until(stored: JobStatus, decided: JobStatus, obs: Observations, now: datetime,
               record_queued_after: timedelta | None = RECORD_QUEUED_AFTER,
               waiting_since: datetime | None = None) -> datetime | None:
    """Until when the decided status is held (UNTIL_CHANGED: no time of its own); None: write it now.

    obs is what the status was decided from; waiting_since, for a job without a starting attempt, is when its wait
    for a slot began (the caller's: its admission now, or its place in line), None when it waits for nothing."""
    if missing(obs) is not None:
        return None  # a job that lacks its Queue, Handler or a worker says so (or, started, that it runs) at once
    starting = obs.attempt(stored.sequence + 1)
    if decided.state == RUNNING and stored.state in (None, QUEUED):  # the decision records the attempt's start
        # Not held: a stop, which needs the attempt recorded (a standing cancel: SIGTERM with its cancelGrace); an
        # attempt on its way out, which may vanish before the second is over; a start ahead of our clock (a node's
        # skew) or unknown, which gives no second to count from.
        if starting is None or decided.stop_reason is not None or starting.finished or starting.leaving:
            return None
        started = starting.started_at
        if started is None:
            return None
        until = started + RECORD_RUNNING_AFTER
        return until if started <= now < until else None
    if stored.state is not None or decided.state != QUEUED:
        return None  # only a new job's first write waits
    if isinstance(starting, PodObservation) and (starting.deleting or starting.waits_for is not None):
        return None  # its pod goes, or waits for something (a node, an image): the job is written saying so
    if starting is not None:
        since = (starting.created_at if isinstance(starting, PodObservation) else starting.assigned_at) or now
    elif waiting_since is not None:
        since = waiting_since
    else:
        return None
    if record_queued_after is None:
        return UNTIL_CHANGED
    until = since + record_queued_after
    return until if now < until else None


def scheduled(job: JobSnapshot, decision: Decision, obs: Observations, now: datetime,
              record_queued_after: timedelta | None = RECORD_QUEUED_AFTER,
              waiting_since: datetime | None = None) -> Decision:
    """The decision as the operator carries it out now: as decided, or held — the stored status kept, its Events
    left to the look that writes it, its actions taken, and a look at the end of the hold."""
    until = hold_until(job.status, decision.status, obs, now, record_queued_after, waiting_since)
    if until is None:
        return decision
    held = Decision(job.status.duplicate(), list(decision.actions), [], decision.wake_at)
    if until is not UNTIL_CHANGED:
        held.wake(until)
    return held
