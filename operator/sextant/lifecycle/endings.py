"""A running attempt's rules: its stops (cancel, timeout, lease expiry) and how it ends — succeeded, snoozed,
cancelled, failed and retried after the backoff, or dead."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

from ..resources.common import format_duration, format_time, parse_duration, parse_time
from ..resources.job import Attempt, JobStatus
from ..resources.report import MAX_SNOOZES
from . import attempts as A
from .backoff import backoff_delay, jitter_sample
from .decision import COND_RUNNING, DeletePod, StopAssignment
from .states import CANCELLED, DEAD, FAILED, SCHEDULED, SUCCEEDED
from .step import Step, clip
from .workers import REPORT_AFTER_GRACE, on_worker

# How long past its grace period a stopping pod may linger before it is force-deleted.
FORCE_DELETE_AFTER = timedelta(seconds=5)


def stop(s: Step, reason: str) -> None:
    """Stop the running attempt: its pod deleted with the queue's cancelGrace, or its worker told."""
    st = s.status
    st.stop_reason = reason
    st.stop_requested_at = format_time(s.now)
    current = s.obs.attempt(st.sequence)
    if current is not None and not current.finished:
        if isinstance(current, A.AssignmentObservation):  # the worker stops its own handler, told by its assignment
            _stop_assignment(s, current)
        elif not on_worker(st):
            grace = int(parse_duration(s.queue.cancel_grace).total_seconds())
            s.decision.actions.append(DeletePod(current.name, grace))


def _stop_assignment(s: Step, current: A.AssignmentObservation) -> None:
    st = s.status
    if st.stop_reason is None or st.stop_requested_at is None or current.stop == st.stop_reason:
        return
    action = StopAssignment(current.worker_name, current.sequence, st.stop_reason, st.stop_requested_at,
                            parse_duration(s.queue.cancel_grace).total_seconds())
    if action not in s.decision.actions:
        s.decision.actions.append(action)


def watch_running(s: Step) -> None:
    st, now = s.status, s.now
    seen = s.obs.attempt(st.sequence)
    lease_duration = parse_duration(s.queue.lease_duration)
    worker = on_worker(st) or isinstance(seen, A.AssignmentObservation)
    if worker and seen is None and st.stop_reason is None:
        # The worker's Lease expired, is gone, or names another incarnation: its attempts are lost with it.
        stop(s, A.LEASE_EXPIRED)
        s.event("LeaseExpired", f"attempt {st.attempt}'s worker {st.worker} stopped renewing its lease", warning=True)
    if st.stop_reason is None and not (seen is not None and seen.finished):
        # A pod that already finished keeps its result even when the operator sees it only after the timeout or
        # after its lease went stale (the runner stops renewing once the handler returned).
        timeout_at = parse_time(st.timeout_at)
        entry = st.attempts[-1] if st.attempts and st.attempts[-1].sequence == st.sequence else None
        renewed = A.heartbeat(s.obs.lease_renewed_at, parse_time(entry.started_at) if entry else None, now)
        lease_expires = renewed + lease_duration if renewed else None
        if timeout_at is not None and now >= timeout_at:
            stop(s, A.TIMEOUT)
            s.event("Timeout", f"attempt {st.attempt} ran longer than {s.queue.timeout}; stopping it", warning=True)
        elif lease_expires is not None and now >= lease_expires:
            stop(s, A.LEASE_EXPIRED)
            s.event("LeaseExpired", f"attempt {st.attempt}'s lease was not renewed for {s.queue.lease_duration}",
                    warning=True)
        else:
            s.decision.wake(timeout_at)
            s.decision.wake(lease_expires)
    if worker and st.stop_reason is not None and seen is not None and not seen.finished:
        # The worker stops its handler and reports; the operator records the outcome itself once the worker's
        # allowance is over (observe_assignment then shows the attempt ended). A stop recorded on the job but not yet
        # on its assignment (the operator stopped in between) is set again: level-triggered.
        if isinstance(seen, A.AssignmentObservation):
            _stop_assignment(s, seen)
        s.decision.wake(parse_time(st.stop_requested_at) + parse_duration(s.queue.cancel_grace) + REPORT_AFTER_GRACE)
    elif st.stop_reason is not None and isinstance(seen, A.PodObservation) and not seen.finished:
        force_at = parse_time(st.stop_requested_at) + parse_duration(s.queue.cancel_grace) + FORCE_DELETE_AFTER
        if now >= force_at:
            s.decision.actions.append(DeletePod(seen.name, 0))
        s.decision.wake(force_at if now < force_at else now + FORCE_DELETE_AFTER)
    if seen is not None and not seen.finished and st.stop_reason is None:
        progress, later = A.progress_to_write(st.progress, seen.progress, st.sequence, now)
        if progress is not None:
            st.progress = progress
        s.decision.wake(later)
    non_retryable = s.obs.handler.non_retryable_exit_codes if s.obs.handler else ()
    outcome = A.outcome_of(seen, st.stop_reason, non_retryable, s.obs.gone_pod(st.sequence) if seen is None else None)
    if outcome is not None:
        finish_attempt(s, outcome)


def _snooze(s: Step, outcome: A.Outcome, label: str) -> A.Outcome:
    """A snoozed attempt (README, "Snooze, output and progress"): not counted, the job `scheduled` for the delay its handler asked for,
    recorded in the timeline as `snoozed`. Past MAX_SNOOZES: the failed attempt TooManySnoozes (returned, for the
    rules of an ordinary failure)."""
    st = s.status
    snoozes = st.snoozes or 0
    if not A.snooze_allowed(snoozes):
        failed = replace(outcome, result=A.FAILED, reason=A.TOO_MANY_SNOOZES,
                         message=f"the job snoozed {snoozes} times, the most allowed ({MAX_SNOOZES}); this snooze "
                                 "counts as a failed attempt")
        _set_result(st, failed)
        return failed
    delay = timedelta(seconds=outcome.snooze_seconds or 0)
    due = s.now + delay
    st.snoozes = snoozes + 1
    st.attempt = max(0, st.attempt - 1)  # not counted against maxAttempts
    st.next_attempt_at = format_time(due)
    _set_result(st, replace(outcome, message=f"snoozed for {format_duration(delay)} "
                                             f"(snooze {st.snoozes} of at most {MAX_SNOOZES})"))
    s.cond(COND_RUNNING, False, "AttemptFinished", f"{label} snoozed")
    s.move(SCHEDULED, "Snoozed", f"{label} snoozed for {format_duration(delay)}, until {st.next_attempt_at}; not "
           f"counted (snooze {st.snoozes} of at most {MAX_SNOOZES})")
    s.decision.wake(due)
    return outcome


def _set_result(st: JobStatus, outcome: A.Outcome) -> Attempt | None:
    """The current timeline entry's result, as the outcome says."""
    if not (st.attempts and st.attempts[-1].sequence == st.sequence):
        return None
    entry = st.attempts[-1]
    entry.result, entry.reason, entry.message = outcome.result, outcome.reason, outcome.message
    return entry


def finish_attempt(s: Step, outcome: A.Outcome) -> None:
    st, now = s.status, s.now
    outcome = replace(outcome, message=clip(outcome.message))
    if st.attempts and st.attempts[-1].sequence == st.sequence:
        entry = st.attempts[-1]
        entry.finished_at = format_time(outcome.finished_at or now)
        if outcome.started_at is not None:
            entry.started_at = format_time(outcome.started_at)
        entry.result = outcome.result
        entry.exit_code = outcome.exit_code
        entry.reason = outcome.reason
        entry.message = outcome.message
        entry.node = outcome.node or entry.node
    st.stop_reason = st.stop_requested_at = st.timeout_at = None
    st.worker = None  # no longer assigned: the worker's watch lets go of it
    s.decision.wake_at = None  # the attempt's timeout, lease and force-delete deadlines are moot now
    st.progress = None  # the attempt's; the next one reports its own
    max_attempts = st.max_attempts or s.queue.max_attempts
    label = f"attempt {st.attempt} of {max_attempts}"
    if outcome.result == A.SNOOZED_RESULT:
        outcome = _snooze(s, outcome, label)
        if outcome.result == A.SNOOZED_RESULT:
            return
    s.cond(COND_RUNNING, False, "AttemptFinished", f"{label} {outcome.result}")
    if outcome.result == A.SUCCEEDED:
        st.output = json.loads(outcome.output) if outcome.output is not None else None
        st.output_note = outcome.output_note
        s.finish(SUCCEEDED, "Succeeded", f"{label} succeeded" + (f": {outcome.message}" if outcome.message else ""))
    elif outcome.result == A.CANCELLED_RESULT:
        s.finish(CANCELLED, "Cancelled", f"{label} was stopped by cancel")
    elif outcome.reason == A.NON_RETRYABLE:
        s.finish(DEAD, "Dead", f"{label} failed: {outcome.message}", warning=True)
    elif st.attempt >= max_attempts:
        s.finish(DEAD, "Dead", f"{label} failed ({outcome.reason}: {outcome.message}); attempts exhausted",
                 warning=True)
    else:
        # max(…, 1): a status whose attempt someone else set to 0 still waits the first backoff
        delay = backoff_delay(s.queue.backoff, max(st.attempt, 1), jitter_sample(s.job.uid, st.sequence))
        due = now + delay
        st.next_attempt_at = format_time(due)
        s.move(FAILED, "Failed", f"{label} failed ({outcome.reason}: {outcome.message}); "
               f"next attempt at {st.next_attempt_at}", warning=True)
        s.decision.wake(due)
