"""The lifecycle as two pure functions: reconcile (everything but admission) and admit.

Both take the job as last stored plus what the cluster shows now, and return the status to store, the
actions to take and when to look again. Level-triggered: called again with the same inputs, they return
the same status and actions that are safe to repeat (pod names are deterministic). When the decided status is
written (now, or held a moment so that one write says more) is the operator's write policy, not a rule of the
lifecycle (controller/writes.py).

Pod mode, "running = taken by a worker" (README, "Running means taken"): admission creates the
attempt's pod, named <job>-<sequence+1>, and writes nothing; the job stays `queued` (its pod holds the slot). The pod
takes the job when its handler container starts: the reconcile that sees that records the attempt (sequence, attempt,
startedAt = the container's start, the timeout from there) and `running`; a pod seen only once it has finished is
recorded to its end at once. So a successful single-attempt job costs three operator writes: the pod's create,
`running`, and the terminal status (two when it ends before its start is written; four when it is written `queued`
first).
Dropping the admission's own status write is safe because the pod *is* the record: its name is deterministic
(status.sequence + 1), a second pod of that sequence number cannot be created (AlreadyExists, adopted), no other is
admitted while it lives, and a pod of sequence status.sequence + 1 is always read as the queued job's starting attempt
(the rule that a crash between "create pod" and "record it" never starts a second pod, now the normal path rather
than the repair one).
A pod that never started and is deleted meanwhile never ran: its sequence number is simply used again.
A pod that does not start within the queue's startTimeout fails the attempt (Unschedulable, the kubelet's waiting
reason such as ErrImagePull, or StartTimeout), which counts.

Worker mode (docs/workers.md) follows the same rules with an assignment in place of the pod: admission adds the
attempt (sequence status.sequence + 1) to a worker's status (`Assign`) and writes nothing on the job; the
assignment, once its write has landed, is the queued job's starting attempt (lifecycle/workers.observe_assignment:
running from its assignedAt, finished as the worker's result says, or failed LeaseExpired with its worker), recorded
`running`, or at its end. A stop sets `stop` on the assignment (`StopAssignment`); once the job records the
attempt's end, the assignment is removed (`Unassign`, after that status write: the acknowledgement).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

from ..resources.common import format_time, parse_duration, parse_time
from ..resources.job import Attempt, cancel_wanted, payload_refusal, size_refusal
from . import attempts as A
from .decision import (COND_BLOCKED, COND_DEAD, COND_RUNNING, Action, Assign, CreatePod, Decision, DeletePod, Event,
                       JobSnapshot, Observations, StopAssignment, Unassign, blocked, missing, pod_name)
from .endings import finish_attempt, stop, watch_running
from .queueing import runnable_since
from .states import CANCELLED, DEAD, FAILED, FINISHED, QUEUED, RUNNING, SCHEDULED, retry_refusal
from .step import (Step, bound_timeline, clear_condition, keep_transition_times, set_condition, set_health,
                   waiting_for_a_slot)
from .workers import wanted

# The step's entry points, and what they read and decide: what the operator imports of the lifecycle's step.
__all__ = ["reconcile", "admit", "pod_not_created", "JobSnapshot", "Observations", "Decision",
           "Action", "CreatePod", "DeletePod", "Assign", "StopAssignment", "Unassign", "Event", "pod_name",
           "set_condition"]


def reconcile(job: JobSnapshot, obs: Observations, now: datetime) -> Decision:
    """Everything that moves a job except taking a queue slot (see admit)."""
    s = Step(job, obs, now)
    if obs.queue is not None and s.status.state not in FINISHED:  # a finished job keeps the limit it ran under
        s.status.max_attempts = obs.queue.max_attempts
    if s.status.state is None:
        _first_sight(s)
    _take(s)
    _cancel(s)
    _retry(s)
    if s.status.state == RUNNING:
        watch_running(s)
        _cancel(s)  # the attempt may have ended on its own just now, with a cancel standing: stop the retries
    # After watch_running, so that a zero backoff is queued in this same call (level-triggered: a second call
    # on the output changes nothing).
    if s.status.state in (SCHEDULED, FAILED):
        _wait_until_runnable(s)
    _blocked(s)
    _remove_strays(s)
    s.status.observed_generation = job.generation
    keep_transition_times(job.status, s.status)
    _first_write_message(s)  # before the health conditions, which repeat the message
    set_health(s.status, now, job.generation)
    return s.decision


def admit(job: JobSnapshot, obs: Observations, now: datetime, worker: str | None = None) -> Decision:
    """Take a queue slot: start the next attempt, in a new pod, or on `worker` (<name>/<incarnation>: the worker
    that takes it, docs/workers.md). The caller holds the slot; the job must be queued.

    The status does not change: the job stays queued until its pod's handler starts, or its assignment has landed
    (see reconcile); the pod's deterministic name, or the assignment, is the admission's record."""
    s = Step(job, obs, now)
    st = s.status
    if st.state != QUEUED:
        raise ValueError(f"only a queued job can be admitted, not a {st.state} one")
    if obs.alive_attempts:
        raise ValueError("a previous attempt's pod still exists")
    st.observed_generation = job.generation
    sequence = st.sequence + 1
    if worker is None:
        s.decision.actions.append(CreatePod(pod_name(job.name, sequence), sequence, st.attempt + 1))
    else:
        s.decision.actions.append(Assign(worker, sequence, st.attempt + 1))
    s.decision.wake(now + parse_duration(s.queue.start_timeout))
    return s.decision


def pod_not_created(decision: Decision, why: str, now: datetime, generation: int) -> Decision:
    """The attempt's pod could not be created (the API server refused it, or its name is taken): the job stays as it
    was decided without the slot, and its message (and the health conditions') says why, not "waiting for a
    slot". The operator tries again soon."""
    decision.status.message = f"{why}; trying again"
    set_health(decision.status, now, generation)
    return decision


def blocked_message(reason: str, why: str) -> str:
    """A queued job's status.message while it is Blocked: the reason, not "waiting for a slot" (a slot would not
    help it)."""
    return f"blocked ({reason}): {why}"


def _first_sight(s: Step) -> None:
    job, st = s.job, s.status
    run_at = job.spec.run_at
    if run_at is not None and run_at.tzinfo is None:
        run_at = run_at.replace(tzinfo=timezone.utc)  # "2026-12-01T10:00:00" without an offset: read as UTC
    st.retry_token = job.spec.retry_token  # a token present at creation is not a request to retry
    too_large = (size_refusal(job.payload_bytes) if job.payload_bytes is not None
                 else payload_refusal(job.spec.payload))
    if too_large:  # a job applied with kubectl past the checks of the CLI, the HTTP API and the SDK: never run it
        s.finish(DEAD, "PayloadTooLarge", f"spec.payload: {too_large}; this job does not run", warning=True)
    elif s.obs.duplicate_of:
        st.duplicate_of = s.obs.duplicate_of
        s.finish(CANCELLED, "DuplicateIdempotencyKey",
                 f"idempotency key {job.spec.idempotency_key!r} already belongs to job {s.obs.duplicate_of}; "
                 "this job does not run", warning=True)
    elif cancel_wanted(job.spec, st) and not _taken_unrecorded(s):
        s.finish(CANCELLED, "Cancelled", "cancelled before it was queued")
    elif run_at is not None and run_at > s.now:
        st.next_attempt_at = format_time(run_at)
        s.move(SCHEDULED, "Scheduled", f"waiting for runAt {st.next_attempt_at}")
    else:
        s.queued(runnable_since(job.created_at, run_at), "Queued", waiting_for_a_slot(job.spec.queue))


def _taken_unrecorded(s: Step) -> bool:
    """A job with no state yet whose attempt already started (its first write was held): it was taken, so a cancel
    stops that attempt with its cancelGrace rather than ending the job before it ran."""
    seen = s.obs.attempt(s.status.sequence + 1)
    return seen is not None and seen.started and not seen.finished


def _take(s: Step) -> None:
    """A queued job's attempt (sequence status.sequence + 1) takes the job when its pod's handler starts, or its
    assignment has landed: the attempt is recorded from that start. Until then the job stays queued; past the queue's
    startTimeout a pod's attempt fails."""
    st = s.status
    seen = s.obs.attempt(st.sequence + 1) if st.state == QUEUED else None
    if seen is None:
        return
    if seen.started:
        _record_start(s, seen)
        return
    if not isinstance(seen, A.PodObservation):
        s.decision.wake(s.now + parse_duration(s.queue.start_timeout))  # its write lands, or is refused, before then
        return
    if seen.deleting:
        return  # going before it started (someone deleted it): it never ran; the slot frees once it is gone
    deadline = (seen.created_at or s.now) + parse_duration(s.queue.start_timeout)
    if s.now < deadline:
        s.decision.wake(deadline)
        return
    st.sequence, st.attempt = seen.sequence, st.attempt + 1
    st.attempts.append(Attempt(attempt=st.attempt, sequence=st.sequence, pod=seen.name, node=seen.node,
                               result="running"))
    bound_timeline(st)
    finish_attempt(s, A.start_failure(seen, s.queue.start_timeout))  # _remove_strays then deletes the pod


def _record_start(s: Step, seen: A.AttemptObservation) -> None:
    st = s.status
    st.sequence, st.attempt = seen.sequence, st.attempt + 1
    # The container's start; a pod that shows Running without it: now. A pod that finished without ever
    # starting its handler (refused by the kubelet) has no start.
    started = seen.started_at or (None if seen.finished else s.now)
    st.timeout_at = format_time((started or s.now) + parse_duration(s.queue.timeout))
    st.stop_reason = st.stop_requested_at = None
    on_worker = isinstance(seen, A.AssignmentObservation)
    # The worker it runs on, while it runs (a selectable field: `kubectl get sjob --field-selector status.worker=w1`).
    st.worker = seen.worker_name if on_worker else None
    st.attempts.append(Attempt(attempt=st.attempt, sequence=st.sequence, pod=None if on_worker else seen.name,
                               worker=seen.worker if on_worker else None, node=A.where(seen),
                               started_at=format_time(started) if started else None, result="running"))
    bound_timeline(st)
    limit = st.max_attempts or s.queue.max_attempts
    where = f"taken by worker {seen.worker_name}" if on_worker else f"started in pod {seen.name}"
    message = f"attempt {st.attempt} of {limit} {where}"
    s.move(RUNNING, "Started", message)
    if not seen.finished:  # an attempt seen only once it ended: its end is recorded in this same write
        s.cond(COND_RUNNING, True, "Started", message)
    clear_condition(st, COND_BLOCKED, "Admitted", s.now, s.job.generation)


def _remove_strays(s: Step) -> None:
    """Pods the job no longer wants: of sequence numbers the status does not know, except the queued job's starting
    attempt, and a pod left unfinished by an attempt already recorded as over (one that did not start in time)."""
    st = s.status
    for seen in s.obs.attempts:
        if isinstance(seen, A.AssignmentObservation):
            # Removed once done with (its end recorded: the acknowledgement).
            if not wanted(st, seen.sequence):
                s.decision.actions.append(Unassign(seen.worker_name, seen.sequence))
            continue
        if seen.deleting:
            continue
        if seen.sequence > st.sequence:
            if not (st.state == QUEUED and seen.sequence == st.sequence + 1):
                s.decision.actions.append(DeletePod(seen.name, 0))
        elif st.state != RUNNING and not seen.finished:
            s.decision.actions.append(DeletePod(seen.name, None))


def _first_write_message(s: Step) -> None:
    """A job whose first write says it waits for its attempt's pod to start (written when that wait is long, or its
    pod's status says it waits for something: a node, an image) says so, and why."""
    st = s.status
    seen = s.obs.attempt(st.sequence + 1) if st.state == QUEUED and s.job.status.state is None else None
    if not isinstance(seen, A.PodObservation) or seen.started or seen.deleting:
        return
    why = seen.waits_for
    st.message = f"runnable; its attempt's pod {seen.name} waits to start" + (f" ({why})" if why else "")


def _cancel(s: Step) -> None:
    st, spec = s.status, s.job.spec
    if not cancel_wanted(spec, st) or st.state is None or st.state in FINISHED:
        return
    if st.state == RUNNING:
        current = s.obs.attempt(st.sequence)
        if (current is not None and current.finished) or (current is None and st.stop_reason is not None):
            # The attempt already ended, on its own or by an earlier stop: its outcome stands (watch_running
            # records it), and the second _cancel in reconcile then stops the retries.
            return
        if st.stop_reason != A.CANCELLED:
            stop(s, A.CANCELLED)
            s.event("Cancelling", f"stopping the running attempt: SIGTERM, then SIGKILL after {s.queue.cancel_grace}")
        return
    s.finish(CANCELLED, "Cancelled", f"cancelled while {st.state.value}")


def _retry(s: Step) -> None:
    st, token = s.status, s.job.spec.retry_token
    if token is None or token == st.retry_token:
        return
    st.retry_token = token  # consumed either way: a refused request does not fire later
    refusal = retry_refusal(st.state)
    if refusal is None and cancel_wanted(s.job.spec, st):
        # Only a dead job gets here (cancel does not apply to dead): retried, the standing cancel would cancel it.
        refusal = f"the job is {st.state.value} and its cancel was requested (spec.cancel cannot be withdrawn)"
    if refusal:
        s.event("RetryRefused", refusal, warning=True)
        return
    st.attempt = 0
    st.snoozes = None  # a fresh start: its snoozes too
    st.finished_at = None
    clear_condition(st, COND_DEAD, "Retried", s.now, s.job.generation)
    s.queued(s.now, "Retried", "retry requested: the attempt counter is reset to 0")


def _blocked(s: Step) -> None:
    st = s.status
    if st.state not in (SCHEDULED, QUEUED, FAILED):
        return
    reason, spec = missing(s.obs), s.job.spec
    if reason is None:
        was_blocked = blocked(st)
        clear_condition(st, COND_BLOCKED, "Found", s.now, s.job.generation)
        if was_blocked and st.state == QUEUED:
            st.message = waiting_for_a_slot(spec.queue)
        return
    why = {"QueueNotFound": f"queue {spec.queue!r} does not exist in this namespace",
           "HandlerNotFound": f"handler {spec.handler!r} does not exist in this namespace",
           "NoWorker": f"no live worker serves handler {spec.handler!r} on queue {spec.queue!r}; the job runs when "
                       "one connects"}[reason]
    s.cond(COND_BLOCKED, True, reason, why)
    if st.state == QUEUED:
        waiting = waiting_for_a_slot(s.job.spec.queue)
        st.message = blocked_message(reason, why)
        # The Queued event of this same step says why it waits, too.
        s.decision.events = [replace(e, message=st.message) if e.message == waiting else e for e in s.decision.events]


def _wait_until_runnable(s: Step) -> None:
    st = s.status
    if st.state == FAILED and st.max_attempts is not None and st.attempt >= st.max_attempts:
        # The queue's maxAttempts was lowered during the backoff: the attempts are exhausted now.
        s.finish(DEAD, "Dead", f"attempt {st.attempt} of {st.max_attempts} failed; attempts exhausted "
                 "(the queue's maxAttempts was lowered)", warning=True)
        return
    due = parse_time(st.next_attempt_at)
    if due is None or due <= s.now:
        s.queued(due or s.now, "Queued", waiting_for_a_slot(s.job.spec.queue))
    else:
        s.decision.wake(due)
