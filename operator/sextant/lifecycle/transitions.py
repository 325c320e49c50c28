"""The lifecycle as two pure functions: reconcile (everything but admission) and admit.

Both take the job as last stored plus what the cluster shows now, and return the status to store, the
actions to take and when to look again. Level-triggered: called again with the same inputs, they return
the same status and actions that are safe to repeat (pod names are deterministic).

Pod mode, "running = taken by a worker" (README, "Running means taken"): admission creates the
attempt's pod, named <job>-<sequence+1>, and writes nothing; the job stays `queued` (its pod holds the slot). The pod
takes the job when its handler container starts: the reconcile that sees that records the attempt (sequence, attempt,
startedAt = the container's start, the timeout from there) and `running`, in one write, at most RECORD_RUNNING_AFTER
after the start; a pod seen only once it has finished (or that finishes within that second) is recorded in one write
to its end. So a successful single-attempt job costs three operator writes: the pod's create, `running`, and the
terminal status (two when it ends within RECORD_RUNNING_AFTER; four when it is written `queued` first, below).
Dropping the admission's own status write is safe because the pod *is* the record: its name is deterministic
(status.sequence + 1), a second pod of that sequence number cannot be created (AlreadyExists, adopted), no other is
admitted while it lives, and a pod of sequence status.sequence + 1 is always read as the queued job's starting attempt
(the rule that a crash between "create pod" and "record it" never starts a second pod, now the normal path rather
than the repair one).
A pod that never started and is deleted meanwhile never ran: its sequence number is simply used again.

A job seen for the first time and admitted at once keeps no state in the API for at most RECORD_QUEUED_AFTER (the
operator's --record-queued-after) while its pod starts (the running write says all); a pod slower than that,
unschedulable, or waiting with a reason makes the job written `queued`. A pod that does not start within the queue's
startTimeout fails the attempt (Unschedulable, the kubelet's waiting reason such as ErrImagePull, or StartTimeout),
which counts.

Worker mode (docs/workers.md) follows the same rules with an assignment in place of the pod: admission adds the
attempt (sequence status.sequence + 1) to a worker's status (`Assign`) and writes nothing on the job; the
assignment, once its write has landed, is the queued job's starting attempt (lifecycle/workers.observe_assignment
makes it a PodObservation: running from its assignedAt, finished as the worker's result says, or failed LeaseExpired
with its worker), recorded `running` after RECORD_RUNNING_AFTER or once at its end. A stop sets `stop` on the
assignment (`StopAssignment`); once the job records the attempt's end, the assignment is removed (`Unassign`, after
that status write: the acknowledgement).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

from ..resources.common import Condition, format_duration, format_time, parse_duration, parse_time
from ..resources.handler import HandlerSpec
from ..resources.job import Attempt, JobSpec, JobStatus, State, cancel_wanted, payload_refusal, size_refusal
from ..resources.queue import QueueSpec
from ..resources.report import MAX_SNOOZES
from . import attempts as A
from .health import health
from .workers import REPORT_AFTER_GRACE, on_worker, wanted
from .backoff import backoff_delay, jitter_sample
from .queueing import runnable_since
from .states import (CANCELLED, DEAD, FAILED, FINISHED, QUEUED, RUNNING, SCHEDULED, SUCCEEDED, retry_refusal)

# How long past its grace period a stopping pod may linger before it is force-deleted.
FORCE_DELETE_AFTER = timedelta(seconds=5)

# How long a job first seen and admitted at once may go without a state in the API while its pod starts, or while it
# waits in line for a slot (the default of `sextant operator --record-queued-after`).
RECORD_QUEUED_AFTER = timedelta(seconds=5)

# How long after its handler started a pod's start may wait to be recorded: a short job is then written once, at its
# end, instead of `running` and then its end (the Job controller batches pod updates for 1 s the same way).
RECORD_RUNNING_AFTER = timedelta(seconds=1)

# The timeline's bounds, so that a job retried for ever never nears etcd's 1.5 MB object limit: the first attempt
# and the most recent ones (TIMELINE_MAX in all, the rest counted in droppedAttempts), each message at most
# MESSAGE_MAX_BYTES of UTF-8.
TIMELINE_MAX = 20
MESSAGE_MAX_BYTES = 1024
_CUT = " […] "

COND_SUCCEEDED, COND_DEAD, COND_CANCELLED, COND_RUNNING, COND_BLOCKED = (
    "Succeeded", "Dead", "Cancelled", "Running", "Blocked",
)


@dataclass(frozen=True)
class JobSnapshot:
    name: str
    uid: str
    generation: int
    created_at: datetime
    spec: JobSpec
    status: JobStatus
    # The payload's size as compact JSON when the payload itself was left out (the operator's view keeps none:
    # lifecycle/reading.lean_job); spec.payload is then {}. None: spec.payload is the payload.
    payload_bytes: int | None = None


@dataclass(frozen=True)
class Observations:
    queue: QueueSpec | None
    handler: HandlerSpec | None
    pods: tuple[A.PodObservation, ...] = ()  # the job's pods that exist now
    lease_renewed_at: datetime | None = None  # the current attempt's last heartbeat, if it has a lease
    duplicate_of: str | None = None  # another job already holds this idempotency key
    no_worker: bool = False  # a worker-mode handler that no live worker serves on this queue (docs/workers.md)
    gone: tuple[A.PodObservation, ...] = ()  # the last state of the job's pods deleted after a disruption

    def pod(self, sequence: int) -> A.PodObservation | None:
        return next((p for p in self.pods if p.sequence == sequence), None)

    def gone_pod(self, sequence: int) -> A.PodObservation | None:
        return next((p for p in self.gone if p.sequence == sequence), None)

    @property
    def alive_pods(self) -> list[A.PodObservation]:
        return [p for p in self.pods if p.alive]


@dataclass(frozen=True)
class CreatePod:
    name: str
    sequence: int
    attempt: int


@dataclass(frozen=True)
class DeletePod:
    name: str
    grace_seconds: int | None  # None: the pod's own; 0: force


@dataclass(frozen=True)
class Event:
    reason: str
    message: str
    type: str = "Normal"


@dataclass(frozen=True)
class Assign:
    """Worker mode's CreatePod: give the attempt to the worker (<name>/<incarnation>)."""

    worker: str
    sequence: int
    attempt: int


@dataclass(frozen=True)
class StopAssignment:
    """Ask the worker running the attempt to stop it (set `stop` on its assignment)."""

    worker: str  # its name
    sequence: int
    reason: str
    requested_at: str
    grace_seconds: float


@dataclass(frozen=True)
class Unassign:
    """Worker mode's DeletePod: the assignment is done with (its end recorded, or it is never to run)."""

    worker: str  # its name
    sequence: int


Action = CreatePod | DeletePod | Assign | StopAssignment | Unassign


@dataclass
class Decision:
    status: JobStatus
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    wake_at: datetime | None = None

    @property
    def wants_admission(self) -> bool:
        """Queued, and not Blocked: without its Queue or Handler there is nothing to run."""
        return self.status.state == QUEUED and not any(
            c.type == COND_BLOCKED and c.status == "True" for c in self.status.conditions
        )

    def wake(self, when: datetime | None) -> None:
        if when is not None and (self.wake_at is None or when < self.wake_at):
            self.wake_at = when


def pod_name(job_name: str, sequence: int) -> str:
    return f"{job_name}-{sequence}"


def effective_queue(obs: Observations) -> QueueSpec:
    """The queue's settings, or the defaults while it is missing (a running job keeps running)."""
    return obs.queue if obs.queue is not None else QueueSpec()


def set_condition(status: JobStatus, type_: str, value: bool, reason: str, message: str, now: datetime,
                  generation: int) -> None:
    """Sets one condition; lastTransitionTime moves only when the value changes."""
    text = "True" if value else "False"
    for i, cond in enumerate(status.conditions):
        if cond.type == type_:
            if cond.status == text and cond.reason == reason and cond.message == message:
                return
            moved = cond.last_transition_time if cond.status == text else format_time(now, precise=False)
            status.conditions[i] = Condition(type=type_, status=text, reason=reason, message=message,
                                             last_transition_time=moved, observed_generation=generation)
            return
    if not value and reason == "":
        return
    status.conditions.append(Condition(type=type_, status=text, reason=reason, message=message,
                                       last_transition_time=format_time(now, precise=False),
                                       observed_generation=generation))


def _keep_transition_times(stored: JobStatus, status: JobStatus) -> None:
    """A condition cleared and set again within one reconcile (an attempt that started and ended at once while its
    queue is missing: Blocked) has not changed: its lastTransitionTime stays the stored one."""
    old = {c.type: c for c in stored.conditions}
    for i, cond in enumerate(status.conditions):
        before = old.get(cond.type)
        if before is not None and before.status == cond.status and before.last_transition_time != cond.last_transition_time:
            status.conditions[i] = cond.model_copy(update={"last_transition_time": before.last_transition_time})


def set_health(status: JobStatus, now: datetime, generation: int) -> None:
    """Ready, Reconciling and Stalled for GitOps tools (lifecycle/health.py), from the rest of the status."""
    for h in health(status):
        set_condition(status, h.type, h.value, h.reason, h.message, now, generation)


def _clear_condition(status: JobStatus, type_: str, reason: str, now: datetime, generation: int) -> None:
    if any(c.type == type_ and c.status == "True" for c in status.conditions):
        set_condition(status, type_, False, reason, "", now, generation)


def pod_not_created(decision: Decision, why: str, now: datetime, generation: int) -> Decision:
    """The attempt's pod could not be created (the API server refused it, or its name is taken): the job stays as it
    was decided without the slot, and its message (and the health conditions') says why, not "waiting for a
    slot". The operator tries again soon."""
    decision.status.message = f"{why}; trying again"
    set_health(decision.status, now, generation)
    return decision


class _Step:
    """One reconcile's working state: the status being built, and what it decided."""

    def __init__(self, job: JobSnapshot, obs: Observations, now: datetime) -> None:
        self.job, self.obs, self.now = job, obs, now
        self.queue = effective_queue(obs)
        self.status = job.status.duplicate()
        self.decision = Decision(self.status)

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        self.decision.events.append(Event(reason, message, "Warning" if warning else "Normal"))

    def cond(self, type_: str, value: bool, reason: str, message: str = "") -> None:
        set_condition(self.status, type_, value, reason, message, self.now, self.job.generation)

    def move(self, state: State, reason: str, message: str, warning: bool = False) -> None:
        self.status.state = state
        self.status.message = message
        self.event(reason, message, warning)

    def finish(self, state: State, reason: str, message: str, warning: bool = False) -> None:
        self.move(state, reason, message, warning)
        self.status.finished_at = format_time(self.now)
        self.status.next_attempt_at = None
        _clear_condition(self.status, COND_BLOCKED, "Finished", self.now, self.job.generation)
        cond = {SUCCEEDED: COND_SUCCEEDED, DEAD: COND_DEAD, CANCELLED: COND_CANCELLED}.get(state)
        if cond:
            self.cond(cond, True, reason, message)

    def queued(self, since: datetime, reason: str, message: str) -> None:
        self.move(QUEUED, reason, message)
        self.status.queued_at = format_time(since)
        self.status.next_attempt_at = None


def reconcile(job: JobSnapshot, obs: Observations, now: datetime,
              record_queued_after: timedelta = RECORD_QUEUED_AFTER) -> Decision:
    """Everything that moves a job except taking a queue slot (see admit). record_queued_after: see hold_first_write."""
    s = _Step(job, obs, now)
    if obs.queue is not None and s.status.state not in FINISHED:  # a finished job keeps the limit it ran under
        s.status.max_attempts = obs.queue.max_attempts
    if s.status.state is None:
        _first_sight(s)
    _take(s)
    _cancel(s)
    _retry(s)
    if s.status.state == RUNNING:
        _watch_running(s)
        _cancel(s)  # the attempt may have ended on its own just now, with a cancel standing: stop the retries
    # After _watch_running, so that a zero backoff is queued in this same call (level-triggered: a second call
    # on the output changes nothing).
    if s.status.state in (SCHEDULED, FAILED):
        _wait_until_runnable(s)
    _blocked(s)
    _remove_strays(s)
    s.status.observed_generation = job.generation
    _keep_transition_times(job.status, s.status)
    # _starting may set the message of a first write, which the health conditions repeat
    decision = _starting(s, record_queued_after)
    if decision is s.decision:
        set_health(decision.status, now, job.generation)
    return decision


def admit(job: JobSnapshot, obs: Observations, now: datetime, worker: str | None = None) -> Decision:
    """Take a queue slot: start the next attempt, in a new pod, or on `worker` (<name>/<incarnation>: the worker
    that takes it, docs/workers.md). The caller holds the slot; the job must be queued.

    The status does not change: the job stays queued until its pod's handler starts, or its assignment has landed
    and is a second old (see reconcile); the pod's deterministic name, or the assignment, is the admission's record."""
    s = _Step(job, obs, now)
    st = s.status
    if st.state != QUEUED:
        raise ValueError(f"only a queued job can be admitted, not a {st.state} one")
    if obs.alive_pods:
        raise ValueError("a previous attempt's pod still exists")
    st.observed_generation = job.generation
    sequence = st.sequence + 1
    if worker is None:
        s.decision.actions.append(CreatePod(pod_name(job.name, sequence), sequence, st.attempt + 1))
    else:
        s.decision.actions.append(Assign(worker, sequence, st.attempt + 1))
    s.decision.wake(now + parse_duration(s.queue.start_timeout))
    return s.decision


def hold_first_write(job: JobSnapshot, decision: Decision, since: datetime, now: datetime,
                     record_queued_after: timedelta = RECORD_QUEUED_AFTER) -> Decision:
    """A job without a state yet that is about to start (its attempt's pod is starting, or it waits in line for a
    slot): the decision without its status write (the stored status, no events), for at most record_queued_after
    after `since` (the pod's creation, or when it became runnable). The write that records the start says all; a
    longer wait gets the `queued` write when this wakes. A job that is Blocked is written at once: it says why."""
    until = since + record_queued_after
    blocked = any(c.type == COND_BLOCKED and c.status == "True" for c in decision.status.conditions)
    if job.status.state is not None or decision.status.state != QUEUED or now >= until or blocked:
        return decision
    held = Decision(job.status.duplicate(), list(decision.actions), [], decision.wake_at)
    held.wake(until)
    return held


def bound_timeline(status: JobStatus) -> None:
    """Keep the first attempt and the most recent ones, TIMELINE_MAX in all; count the ones left out."""
    extra = len(status.attempts) - TIMELINE_MAX
    if extra > 0:
        del status.attempts[1:1 + extra]
        status.dropped_attempts = (status.dropped_attempts or 0) + extra


def clip(text: str | None, limit: int = MESSAGE_MAX_BYTES) -> str | None:
    """At most `limit` bytes of UTF-8: the start (what failed) and the end (a traceback's last line) of a long text."""
    if text is None:
        return None
    data = text.encode()
    if len(data) <= limit:
        return text
    room = limit - len(_CUT.encode())
    head = data[: room // 4].decode(errors="ignore")
    tail = data[len(data) - (room - len(head.encode())):].decode(errors="ignore")
    return head + _CUT + tail


def _first_sight(s: _Step) -> None:
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
        s.queued(runnable_since(job.created_at, run_at), "Queued", _waiting_for_a_slot(job.spec.queue))


def _taken_unrecorded(s: _Step) -> bool:
    """A job with no state yet whose pod already started its handler (its first write was held): it was taken, so a
    cancel stops that attempt with its cancelGrace rather than ending the job before it ran."""
    pod = s.obs.pod(s.status.sequence + 1)
    return pod is not None and pod.started and not pod.finished


def _starting_pod(s: _Step) -> A.PodObservation | None:
    """The queued job's attempt pod that has not started its handler yet, or whose start is not recorded yet
    (sequence status.sequence + 1), if any."""
    st = s.status
    pod = s.obs.pod(st.sequence + 1) if st.state == QUEUED else None
    return pod if pod is not None and (not pod.started or _record_start_at(s, pod)) else None


def _take(s: _Step) -> None:
    """A queued job's pod (sequence status.sequence + 1) takes the job when its handler starts: the attempt is
    recorded from the container's start. Until then the job stays queued; past the queue's startTimeout the attempt
    fails."""
    st = s.status
    pod = s.obs.pod(st.sequence + 1) if st.state == QUEUED else None
    if pod is None:
        return
    if pod.started:
        later = _record_start_at(s, pod)
        if later is None:
            _record_start(s, pod)
        else:
            s.decision.wake(later)
    elif pod.deleting:
        return  # going before it started (someone deleted it): it never ran; the slot frees once it is gone
    else:
        deadline = (pod.created_at or s.now) + parse_duration(s.queue.start_timeout)
        if s.now < deadline:
            s.decision.wake(deadline)
            return
        st.sequence, st.attempt = pod.sequence, st.attempt + 1
        st.attempts.append(Attempt(attempt=st.attempt, sequence=st.sequence, pod=pod.name, node=pod.node,
                                   result="running"))
        bound_timeline(st)
        _finish_attempt(s, A.start_failure(pod, s.queue.start_timeout))  # _remove_strays then deletes the pod


def _record_start_at(s: _Step, pod: A.PodObservation) -> datetime | None:
    """When to record the start of a pod whose handler started less than RECORD_RUNNING_AFTER ago (by its
    container's start) and still runs; None: now. Its end, if it comes first, is recorded instead, in one write. Not
    held when a cancel stands (the attempt is recorded at once and stopped with its cancelGrace), nor for a pod on
    its way out (deleted, or Kubernetes taking it away): the attempt it ran is recorded before the pod can vanish."""
    started = pod.started_at
    if started is None or pod.finished or pod.deleting or pod.disruption is not None or \
            cancel_wanted(s.job.spec, s.status):
        return None
    until = started + RECORD_RUNNING_AFTER
    return until if started <= s.now < until else None  # a node clock ahead of ours: no waiting on it


def _record_start(s: _Step, pod: A.PodObservation) -> None:
    st = s.status
    st.sequence, st.attempt = pod.sequence, st.attempt + 1
    # The container's start; a pod that shows Running without it: now. A pod that finished without ever
    # starting its handler (refused by the kubelet) has no start.
    started = pod.started_at or (None if pod.finished else s.now)
    st.timeout_at = format_time((started or s.now) + parse_duration(s.queue.timeout))
    st.stop_reason = st.stop_requested_at = None
    # The worker it runs on, while it runs (a selectable field: `kubectl get sjob --field-selector status.worker=w1`).
    st.worker = pod.node if pod.worker else None
    st.attempts.append(Attempt(attempt=st.attempt, sequence=st.sequence, pod=None if pod.worker else pod.name,
                               worker=pod.worker, node=pod.node,
                               started_at=format_time(started) if started else None, result="running"))
    bound_timeline(st)
    limit = st.max_attempts or s.queue.max_attempts
    where = f"taken by worker {pod.node}" if pod.worker else f"started in pod {pod.name}"
    message = f"attempt {st.attempt} of {limit} {where}"
    s.move(RUNNING, "Started", message)
    if not pod.finished:  # a pod seen only once it ended: its end is recorded in this same write
        s.cond(COND_RUNNING, True, "Started", message)
    _clear_condition(st, COND_BLOCKED, "Admitted", s.now, s.job.generation)


def _remove_strays(s: _Step) -> None:
    """Pods the job no longer wants: of sequence numbers the status does not know, except the queued job's starting
    attempt, and a pod left unfinished by an attempt already recorded as over (one that did not start in time)."""
    st = s.status
    for pod in s.obs.pods:
        if pod.worker is not None:  # an assignment: removed once done with (its end recorded: the acknowledgement)
            if not wanted(st, pod.sequence):
                s.decision.actions.append(Unassign(pod.node or pod.name, pod.sequence))
            continue
        if pod.deleting:
            continue
        if pod.sequence > st.sequence:
            if not (st.state == QUEUED and pod.sequence == st.sequence + 1):
                s.decision.actions.append(DeletePod(pod.name, 0))
        elif st.state != RUNNING and not pod.finished:
            s.decision.actions.append(DeletePod(pod.name, None))


def _starting(s: _Step, record_queued_after: timedelta) -> Decision:
    """The decision, with the first write of a job whose pod is starting held back (hold_first_write), unless
    the pod's status already says it waits for something (a node, an image): then the job is written queued,
    its message saying so."""
    pod = _starting_pod(s)
    if pod is None or pod.deleting:
        return s.decision
    blocked = pod.unschedulable or (pod.waiting_reason is not None and pod.waiting_reason not in A.STARTING_REASONS)
    if not blocked:
        held = hold_first_write(s.job, s.decision, pod.created_at or s.now, s.now, record_queued_after)
        if held is not s.decision:
            return held
    if s.job.status.state is None:  # this write is the job's first: say where it is
        why = A.UNSCHEDULABLE if pod.unschedulable else pod.waiting_reason if blocked else None
        s.status.message = f"runnable; its attempt's pod {pod.name} waits to start" + (f" ({why})" if why else "")
    return s.decision


def _cancel(s: _Step) -> None:
    st, spec = s.status, s.job.spec
    if not cancel_wanted(spec, st) or st.state is None or st.state in FINISHED:
        return
    if st.state == RUNNING:
        current = s.obs.pod(st.sequence)
        if (current is not None and current.finished) or (current is None and st.stop_reason is not None):
            # The attempt already ended, on its own or by an earlier stop: its outcome stands (_watch_running
            # records it), and the second _cancel in reconcile then stops the retries.
            return
        if st.stop_reason != A.CANCELLED:
            _stop(s, A.CANCELLED)
            s.event("Cancelling", f"stopping the running attempt: SIGTERM, then SIGKILL after {s.queue.cancel_grace}")
        return
    s.finish(CANCELLED, "Cancelled", f"cancelled while {st.state.value}")


def _retry(s: _Step) -> None:
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
    _clear_condition(st, COND_DEAD, "Retried", s.now, s.job.generation)
    s.queued(s.now, "Retried", "retry requested: the attempt counter is reset to 0")


def _waiting_for_a_slot(queue: str) -> str:
    return "runnable, waiting for a slot in queue " + queue


def blocked_message(reason: str, why: str) -> str:
    """A queued job's status.message while it is Blocked: the reason, not "waiting for a slot" (a slot would not
    help it)."""
    return f"blocked ({reason}): {why}"


def _blocked(s: _Step) -> None:
    st = s.status
    if st.state not in (SCHEDULED, QUEUED, FAILED):
        return
    if s.obs.queue is None:
        reason, why = "QueueNotFound", f"queue {s.job.spec.queue!r} does not exist in this namespace"
    elif s.obs.handler is None:
        reason, why = "HandlerNotFound", f"handler {s.job.spec.handler!r} does not exist in this namespace"
    elif s.obs.no_worker:
        reason, why = "NoWorker", (f"no live worker serves handler {s.job.spec.handler!r} on queue "
                                   f"{s.job.spec.queue!r}; the job runs when one connects")
    else:
        was_blocked = any(c.type == COND_BLOCKED and c.status == "True" for c in st.conditions)
        _clear_condition(st, COND_BLOCKED, "Found", s.now, s.job.generation)
        if was_blocked and st.state == QUEUED:
            st.message = _waiting_for_a_slot(s.job.spec.queue)
        return
    s.cond(COND_BLOCKED, True, reason, why)
    if st.state == QUEUED:
        waiting = _waiting_for_a_slot(s.job.spec.queue)
        st.message = blocked_message(reason, why)
        # The Queued event of this same step says why it waits, too.
        s.decision.events = [replace(e, message=st.message) if e.message == waiting else e for e in s.decision.events]


def _wait_until_runnable(s: _Step) -> None:
    st = s.status
    if st.state == FAILED and st.max_attempts is not None and st.attempt >= st.max_attempts:
        # The queue's maxAttempts was lowered during the backoff: the attempts are exhausted now.
        s.finish(DEAD, "Dead", f"attempt {st.attempt} of {st.max_attempts} failed; attempts exhausted "
                 "(the queue's maxAttempts was lowered)", warning=True)
        return
    due = parse_time(st.next_attempt_at)
    if due is None or due <= s.now:
        s.queued(due or s.now, "Queued", _waiting_for_a_slot(s.job.spec.queue))
    else:
        s.decision.wake(due)


def _stop(s: _Step, reason: str) -> None:
    st = s.status
    st.stop_reason = reason
    st.stop_requested_at = format_time(s.now)
    current = s.obs.pod(st.sequence)
    if current is not None and not current.finished:
        if current.worker is not None:  # the worker stops its own handler, told by its assignment
            _stop_assignment(s, current)
        elif not on_worker(st):
            grace = int(parse_duration(s.queue.cancel_grace).total_seconds())
            s.decision.actions.append(DeletePod(current.name, grace))


def _stop_assignment(s: _Step, current: A.PodObservation) -> None:
    st = s.status
    if st.stop_reason is None or st.stop_requested_at is None or current.stop == st.stop_reason:
        return
    stop = StopAssignment(current.node or current.name, current.sequence, st.stop_reason, st.stop_requested_at,
                          parse_duration(s.queue.cancel_grace).total_seconds())
    if stop not in s.decision.actions:
        s.decision.actions.append(stop)


def _watch_running(s: _Step) -> None:
    st, now = s.status, s.now
    pod = s.obs.pod(st.sequence)
    lease_duration = parse_duration(s.queue.lease_duration)
    worker = on_worker(st) or (pod is not None and pod.worker is not None)
    if worker and pod is None and st.stop_reason is None:
        # The worker's Lease expired, is gone, or names another incarnation: its attempts are lost with it.
        _stop(s, A.LEASE_EXPIRED)
        s.event("LeaseExpired", f"attempt {st.attempt}'s worker {st.worker} stopped renewing its lease", warning=True)
    if st.stop_reason is None and not (pod is not None and pod.finished):
        # A pod that already finished keeps its result even when the operator sees it only after the timeout or
        # after its lease went stale (the runner stops renewing once the handler returned).
        timeout_at = parse_time(st.timeout_at)
        entry = st.attempts[-1] if st.attempts and st.attempts[-1].sequence == st.sequence else None
        renewed = A.heartbeat(s.obs.lease_renewed_at, parse_time(entry.started_at) if entry else None, now)
        lease_expires = renewed + lease_duration if renewed else None
        if timeout_at is not None and now >= timeout_at:
            _stop(s, A.TIMEOUT)
            s.event("Timeout", f"attempt {st.attempt} ran longer than {s.queue.timeout}; stopping it", warning=True)
        elif lease_expires is not None and now >= lease_expires:
            _stop(s, A.LEASE_EXPIRED)
            s.event("LeaseExpired", f"attempt {st.attempt}'s lease was not renewed for {s.queue.lease_duration}",
                    warning=True)
        else:
            s.decision.wake(timeout_at)
            s.decision.wake(lease_expires)
    if worker and st.stop_reason is not None and pod is not None and not pod.finished:
        # The worker stops its handler and reports; the operator records the outcome itself once the worker's
        # allowance is over (observe_assignment then shows the attempt ended). A stop recorded on the job but not yet
        # on its assignment (the operator stopped in between) is set again: level-triggered.
        if pod.worker is not None:
            _stop_assignment(s, pod)
        s.decision.wake(parse_time(st.stop_requested_at) + parse_duration(s.queue.cancel_grace) + REPORT_AFTER_GRACE)
    elif st.stop_reason is not None and pod is not None and not pod.finished:
        force_at = parse_time(st.stop_requested_at) + parse_duration(s.queue.cancel_grace) + FORCE_DELETE_AFTER
        if now >= force_at:
            s.decision.actions.append(DeletePod(pod.name, 0))
        s.decision.wake(force_at if now < force_at else now + FORCE_DELETE_AFTER)
    if pod is not None and not pod.finished and st.stop_reason is None:
        progress, later = A.progress_to_write(st.progress, pod.progress, st.sequence, now)
        if progress is not None:
            st.progress = progress
        s.decision.wake(later)
    non_retryable = s.obs.handler.non_retryable_exit_codes if s.obs.handler else ()
    outcome = A.outcome_of(pod, st.stop_reason, non_retryable, s.obs.gone_pod(st.sequence) if pod is None else None)
    if outcome is not None:
        _finish_attempt(s, outcome)


def _snooze(s: _Step, outcome: A.Outcome, label: str) -> A.Outcome:
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


def _finish_attempt(s: _Step, outcome: A.Outcome) -> None:
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
