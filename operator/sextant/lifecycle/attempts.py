"""What an attempt's pod or assignment tells: still running, or the attempt's outcome (what counts as a failed
attempt)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import datetime

from ..resources.common import format_time, parse_time
from ..resources.report import MAX_SNOOZES, PROGRESS_INTERVAL, SNOOZE_EXIT_CODE, Progress

# Timeline reasons: a contract (README, "Timeline reasons").
ERROR = "Error"
TIMEOUT = "Timeout"
LEASE_EXPIRED = "LeaseExpired"
POD_LOST = "PodLost"
NON_RETRYABLE = "NonRetryableExitCode"
CANCELLED = "Cancelled"
DRAINED = "Drained"  # a worker stopped (SIGTERM) before the handler finished: docs/workers.md §6
SNOOZED = "Snoozed"  # the handler asked to run again later: the attempt is not counted (README, "Snooze, output and progress")
TOO_MANY_SNOOZES = "TooManySnoozes"  # a snooze past MAX_SNOOZES: an ordinary failed attempt
# A pod that did not start its handler within the queue's startTimeout: the scheduler found no node for it
# (Unschedulable), its container waits with a reason (the kubelet's: ErrImagePull, ImagePullBackOff,
# InvalidImageName, CreateContainerConfigError, ...: named as is), or neither (StartTimeout).
UNSCHEDULABLE = "Unschedulable"
START_TIMEOUT = "StartTimeout"
# Waiting reasons of a container that is simply on its way: not named as the cause of a start timeout.
STARTING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})

# Pod-level reasons for a pod the cluster took away rather than one whose handler failed.
LOST_POD_REASONS = frozenset(
    {"Evicted", "Preempted", "NodeLost", "NodeAffinity", "NodeShutdown", "Shutdown", "Terminated",
     "UnexpectedAdmissionError", "OutOfcpu", "OutOfmemory", "OutOfpods"}
)

# Kubernetes marks a pod it is about to take away with the condition DisruptionTarget=True; its reason says who,
# and any reason is a loss: DeletionByPodGC (its node was deleted, or it was orphaned), EvictionByEvictionAPI
# (drained, or evicted through the Eviction API), PreemptionByScheduler (room for a higher-priority pod),
# DeletionByTaintManager (a NoExecute taint of its node it does not tolerate), TerminationByKubelet (node-pressure
# eviction or graceful node shutdown).
DISRUPTION_TARGET = "DisruptionTarget"

# The runner's exit code for the SDK's NonRetryableError (sextant.sdk.NON_RETRYABLE_EXIT_CODE).
RUNNER_NON_RETRYABLE = 86

SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED_RESULT = "cancelled"
SNOOZED_RESULT = "snoozed"


@dataclass(frozen=True)
class Report:
    """What a handler said besides its exit code (resources/report.py), as its pod's termination message or its
    worker's result carries it; checked already (output as compact JSON, within the cap)."""

    snooze_seconds: float | None = None  # with SNOOZE_EXIT_CODE: run again after this long
    output: str | None = None  # compact JSON
    output_note: str | None = None  # why the output was not kept
    message: str | None = None  # a failure's message, when the report carries it


class _Phases:
    """What a pod's phase and an assignment's alike tell of their attempt."""

    phase: str
    started_at: datetime | None

    @property
    def started(self) -> bool:
        """The attempt's worker has taken the job: the pod's handler container started (the runner is up), or the
        assignment landed; or it already ended."""
        return self.started_at is not None or self.phase == "Running" or self.finished

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True)
class PodObservation(_Phases):
    """The few facts of an attempt pod that the lifecycle needs (controller/pods.observe reads them)."""

    name: str
    sequence: int
    phase: str = "Pending"  # Pending | Running | Succeeded | Failed | Unknown
    node: str | None = None
    exit_code: int | None = None
    reason: str | None = None  # pod-level status.reason (Evicted, ...)
    message: str | None = None
    deleting: bool = False
    started_at: datetime | None = None  # when the handler container started
    unschedulable: bool = False  # the scheduler found no node for it (PodScheduled False, Unschedulable)
    disruption: str | None = None  # the DisruptionTarget condition's reason, when Kubernetes is taking it away
    disruption_message: str | None = None
    uid: str | None = None
    owner_uid: str | None = None  # the uid of its controller ownerReference (its Job's, when it is ours)
    created_at: datetime | None = None  # its creationTimestamp: the start timeout counts from here
    waiting_reason: str | None = None  # the handler container's waiting reason (ErrImagePull, ...), if it waits
    report: Report | None = None  # its termination message's snooze and output (README, "Snooze, output and progress")
    progress: Progress | None = None  # the latest the running attempt reported (its fraction and message)

    @property
    def alive(self) -> bool:
        """Still running or still terminating: a replacement must wait for it."""
        return not self.finished or self.deleting

    @property
    def leaving(self) -> bool:
        """On its way out (deleted, or Kubernetes taking it away): it may vanish at any moment."""
        return self.deleting or self.disruption is not None

    @property
    def waits_for(self) -> str | None:
        """What its status says it waits for, not yet started: a node (Unschedulable), or the kubelet's waiting reason
        (ErrImagePull, ...) unless it is simply on its way (STARTING_REASONS)."""
        if self.unschedulable:
            return UNSCHEDULABLE
        return self.waiting_reason if self.waiting_reason and self.waiting_reason not in STARTING_REASONS else None


@dataclass(frozen=True)
class AssignmentObservation(_Phases):
    """What an attempt assigned to a worker tells (docs/workers.md): its assignment in the Worker's status and the
    worker's result for it, read by lifecycle/workers.observe_assignment. Its phase is the attempt's: Pending while
    the assignment's write has not landed, Running once it has, Succeeded or Failed once it ended (as the worker's
    result says, or lost with its worker)."""

    worker_name: str  # the Worker object's name
    worker: str  # the worker it is assigned to, as <name>/<incarnation> (the timeline's `worker`)
    sequence: int
    phase: str = "Pending"  # Pending | Running | Succeeded | Failed
    stop: str | None = None  # the stop the assignment carries (Cancelled, Timeout), if any
    assigned_at: datetime | None = None  # once its write has landed: when it was assigned
    started_at: datetime | None = None  # when its handler ran from (the worker's result; else since it landed)
    finished_at: datetime | None = None  # when the worker reported it ended (its clock)
    exit_code: int | None = None
    reason: str | None = None  # the worker's result's reason (Drained, NotFound, ...), or LeaseExpired
    message: str | None = None
    report: Report | None = None  # snooze, output (README, "Snooze, output and progress")
    progress: Progress | None = None  # the latest the running attempt reported (its fraction and message)

    @property
    def alive(self) -> bool:
        """It holds its worker's slot until it ended: a replacement must wait for it."""
        return not self.finished

    @property
    def leaving(self) -> bool:
        return False  # nothing takes an assignment away but its end (or its worker's: LeaseExpired)


# What the lifecycle reads of an attempt: its pod's facts, or its assignment's.
AttemptObservation = PodObservation | AssignmentObservation


def where(seen: AttemptObservation) -> str | None:
    """Where the attempt runs, as its timeline entry's `node` says: the pod's node, or the worker's name."""
    return seen.node if isinstance(seen, PodObservation) else seen.worker_name


@dataclass(frozen=True)
class Outcome:
    result: str  # succeeded | failed | cancelled
    reason: str | None = None
    exit_code: int | None = None
    message: str | None = None
    node: str | None = None
    # A worker's report: when its handler ran (the worker's clock), for the timeline entry.
    started_at: datetime | None = None
    finished_at: datetime | None = None
    snooze_seconds: float | None = None  # a snoozed attempt's delay
    output: str | None = None  # a succeeded attempt's output (compact JSON)
    output_note: str | None = None


def outcome_of(
    seen: AttemptObservation | None, stop_reason: str | None, non_retryable: Collection[int] = (),
    gone: PodObservation | None = None,
) -> Outcome | None:
    """The outcome of the current attempt, or None while it still runs.

    seen is the attempt's pod or assignment, None once it no longer exists; gone is then how its pod was last seen,
    when it was disrupted (PodGC marks a pod of a deleted node and force-deletes it at once: often only its deletion
    is seen). stop_reason is set when the operator asked the attempt to stop (cancel, timeout, lease expiry): that
    reason wins over whatever the attempt then reports, and its exit code (137 after SIGKILL) is recorded but not
    read as an ordinary Error.
    """
    if isinstance(seen, AssignmentObservation):
        return _assignment_outcome(seen, stop_reason, non_retryable)
    pod = seen
    node = pod.node if pod else None
    if stop_reason is not None:
        if pod is not None and not pod.finished:
            return None
        result = CANCELLED_RESULT if stop_reason == CANCELLED else FAILED
        return Outcome(result, stop_reason, pod.exit_code if pod else None, _stop_message(stop_reason), node)
    vanished = pod is None
    if vanished and gone is not None and gone.disruption is not None:
        pod = gone  # its last state says why it went
    if pod is None:
        return Outcome(FAILED, POD_LOST, None, "the attempt's pod was deleted before it finished")
    if pod.phase == "Succeeded":
        return with_output(Outcome(SUCCEEDED, None, 0 if pod.exit_code is None else pod.exit_code, pod.message,
                                   pod.node), pod.report)
    if pod.disruption is not None and (pod.phase == "Failed" or vanished):
        # The cluster took it away (node deleted, eviction, preemption): not the handler's failure, whatever its
        # exit code says (137 after the eviction's SIGKILL).
        detail = pod.disruption_message or "the pod was disrupted"
        return Outcome(FAILED, POD_LOST, pod.exit_code, f"{pod.disruption}: {detail}", pod.node)
    if pod.phase != "Failed":
        return None  # running, or terminating after someone else's delete: wait until it is gone
    if pod.reason == DRAINED:
        return Outcome(FAILED, DRAINED, pod.exit_code, pod.message or "the worker stopped before the handler finished",
                       node)
    if pod.reason in LOST_POD_REASONS:
        return Outcome(FAILED, POD_LOST, pod.exit_code, f"{pod.reason}: {pod.message or 'the pod was lost'}", node)
    if pod.deleting:  # killed by someone else's delete (137 after SIGKILL): not the handler's own failure
        return Outcome(FAILED, POD_LOST, pod.exit_code, "the attempt's pod was deleted before it finished", node)
    if pod.exit_code == SNOOZE_EXIT_CODE:
        return snoozed(pod.exit_code, pod.report, pod.message, node)
    if pod.exit_code == RUNNER_NON_RETRYABLE:
        return Outcome(FAILED, NON_RETRYABLE, pod.exit_code, pod.message or "the handler raised NonRetryableError", node)
    if pod.exit_code is not None and pod.exit_code in non_retryable:
        return Outcome(
            FAILED, NON_RETRYABLE, pod.exit_code, f"exit code {pod.exit_code} is listed in nonRetryableExitCodes", node
        )
    message = pod.message or (f"exit code {pod.exit_code}" if pod.exit_code is not None else "the pod failed")
    return Outcome(FAILED, ERROR, pod.exit_code, message, node)


def _assignment_outcome(seen: AssignmentObservation, stop_reason: str | None,
                        non_retryable: Collection[int]) -> Outcome | None:
    """A worker's attempt: None while it runs; once it ended, its outcome with the worker's own start and end (its
    result: the timeline shows them)."""
    if not seen.finished:
        return None
    if stop_reason is None and seen.reason in (CANCELLED, TIMEOUT):
        stop_reason = seen.reason  # the worker applied the stop itself (its own timeoutAt timer, the operator away)
    if stop_reason is not None:
        result = CANCELLED_RESULT if stop_reason == CANCELLED else FAILED
        outcome = Outcome(result, stop_reason, seen.exit_code, _stop_message(stop_reason), seen.worker_name)
    else:
        outcome = _ended_on_a_worker(seen, non_retryable)
    if seen.finished_at is None:
        return outcome
    return replace(outcome, started_at=seen.started_at, finished_at=seen.finished_at)


def _ended_on_a_worker(seen: AssignmentObservation, non_retryable: Collection[int]) -> Outcome:
    """A worker's attempt that ended: as its result says (lifecycle/workers.observe_assignment), or lost with its
    worker (LeaseExpired)."""
    node = seen.worker_name
    if seen.phase == "Succeeded":
        return with_output(Outcome(SUCCEEDED, None, 0 if seen.exit_code is None else seen.exit_code, None, node),
                           seen.report)
    if seen.reason in (DRAINED, LEASE_EXPIRED):
        default = "the worker stopped before the handler finished" if seen.reason == DRAINED else \
            _stop_message(LEASE_EXPIRED)
        return Outcome(FAILED, seen.reason, seen.exit_code, seen.message or default, node)
    if seen.exit_code == SNOOZE_EXIT_CODE:
        return snoozed(seen.exit_code, seen.report, seen.message, node)
    if seen.exit_code == RUNNER_NON_RETRYABLE:
        return Outcome(FAILED, NON_RETRYABLE, seen.exit_code, seen.message or "the handler raised NonRetryableError",
                       node)
    if seen.exit_code is not None and seen.exit_code in non_retryable:
        return Outcome(FAILED, NON_RETRYABLE, seen.exit_code,
                       f"exit code {seen.exit_code} is listed in nonRetryableExitCodes", node)
    if seen.exit_code is None and seen.reason:  # it did not run: NotFound, or a reason of a newer worker
        return Outcome(FAILED, seen.reason, None, seen.message or f"the worker did not run it ({seen.reason})", node)
    message = seen.message or (f"exit code {seen.exit_code}" if seen.exit_code is not None else "the attempt failed")
    return Outcome(FAILED, ERROR, seen.exit_code, message, node)


def with_output(outcome: Outcome, report: Report | None) -> Outcome:
    """A succeeded attempt keeps its handler's output (or the note that says why not)."""
    if report is None:
        return outcome
    return replace(outcome, output=report.output, output_note=report.output_note)


def snoozed(exit_code: int, report: Report | None, message: str | None, node: str | None) -> Outcome:
    """An attempt that exited SNOOZE_EXIT_CODE: snoozed for the delay its report says. Without one (a command that
    wrote no delay, an image without the runner) it is an ordinary failure, saying what was missing."""
    if report is not None and report.snooze_seconds is not None:
        return Outcome(SNOOZED_RESULT, SNOOZED, exit_code, None, node, snooze_seconds=report.snooze_seconds)
    why = (report.message if report is not None else None) or message
    return Outcome(FAILED, ERROR, exit_code, f"exit code {SNOOZE_EXIT_CODE} asks for a snooze, but no delay was given"
                   + (f": {why}" if why else ""), node)


def snooze_allowed(snoozes: int) -> bool:
    """Whether one more snooze is not counted: the job has snoozed fewer than MAX_SNOOZES times since its creation
    or last retry. Past that, a snooze is an ordinary failed attempt (TooManySnoozes), so that a handler that always
    snoozes ends dead after maxAttempts instead of running for ever."""
    return snoozes < MAX_SNOOZES


def start_failure(pod: PodObservation, start_timeout: str) -> Outcome:
    """The outcome of an attempt whose pod did not start its handler within the queue's startTimeout: the reason
    says why, as the pod's status tells it."""
    reason = pod.waits_for or START_TIMEOUT
    detail = f": {pod.message}" if pod.message else ""
    return Outcome(FAILED, reason, None, f"pod {pod.name} did not start within startTimeout {start_timeout}{detail}",
                   pod.node)


def heartbeat(renewed_at: datetime | None, attempt_started_at: datetime | None, now: datetime) -> datetime | None:
    """The attempt's last sign of life, clamped to [attempt start, now]: a renewal stamped in the future cannot
    stretch the lease, nor one from before the attempt began cut it short (the clock writing it is not ours)."""
    if renewed_at is None:
        return None
    if attempt_started_at is not None and renewed_at < attempt_started_at:
        renewed_at = attempt_started_at
    return min(renewed_at, now)


def _stop_message(stop_reason: str) -> str:
    return {
        CANCELLED: "cancelled while running",
        TIMEOUT: "ran longer than the queue's timeout",
        LEASE_EXPIRED: "the lease expired: the worker stopped renewing it",
    }[stop_reason]


def progress_to_write(stored: Progress | None, reported: Progress | None, sequence: int,
                      now: datetime) -> tuple[Progress | None, datetime | None]:
    """The running attempt's progress to store on the job now (None: nothing to write), and when to look again
    (None: no need). At most one write per PROGRESS_INTERVAL per job: a change reported sooner waits for the
    interval's end (only the latest then is written); a report that changes nothing writes nothing."""
    if reported is None:
        return None, None
    same_attempt = stored is not None and stored.sequence == sequence
    if same_attempt and stored is not None and (stored.fraction, stored.message) == (reported.fraction,
                                                                                     reported.message):
        return None, None
    last = parse_time(stored.updated_at) if same_attempt and stored is not None else None
    if last is not None and last <= now < last + PROGRESS_INTERVAL:  # a stored time ahead of ours: no waiting on it
        return None, last + PROGRESS_INTERVAL
    return Progress(fraction=reported.fraction, message=reported.message, sequence=sequence,
                    updated_at=format_time(now)), None
