"""The seven states and which transitions between them are allowed."""

from __future__ import annotations

from ..resources.job import CANCEL_ONLY, CANCELLABLE, FINISHED, RETRY_ONLY, RETRYABLE, State

SCHEDULED, QUEUED, RUNNING = State.SCHEDULED, State.QUEUED, State.RUNNING
SUCCEEDED, FAILED, DEAD, CANCELLED = State.SUCCEEDED, State.FAILED, State.DEAD, State.CANCELLED

# States a job never leaves (dead leaves only through retry).
TERMINAL = frozenset({SUCCEEDED, CANCELLED})
# FINISHED, CANCELLABLE and RETRYABLE are resources/job.py's: the CRDs' CEL rules are generated from them.
__all__ = ["ALLOWED", "CANCEL_ONLY", "CANCELLABLE", "CANCELLED", "DEAD", "FAILED", "FINISHED", "QUEUED", "RETRYABLE",
           "RETRY_ONLY", "RUNNING", "SCHEDULED", "SUCCEEDED", "TERMINAL", "allowed", "cancel_refusal",
           "retry_refusal"]

# None is a job the operator has not seen yet.
ALLOWED: dict[State | None, frozenset[State]] = {
    None: frozenset({SCHEDULED, QUEUED, CANCELLED}),
    SCHEDULED: frozenset({QUEUED, CANCELLED}),
    # failed/dead without running: the attempt's pod never started its handler (startTimeout: unschedulable, an
    # image that cannot be pulled). No worker took the job, yet the attempt counts, so that a pod that can never
    # start ends the job dead instead of holding a slot for ever.
    QUEUED: frozenset({RUNNING, CANCELLED, FAILED, DEAD}),
    RUNNING: frozenset({SUCCEEDED, FAILED, DEAD, CANCELLED}),
    FAILED: frozenset({QUEUED, DEAD, CANCELLED}),  # dead: the queue's maxAttempts was lowered meanwhile
    DEAD: frozenset({QUEUED}),
    SUCCEEDED: frozenset(),
    CANCELLED: frozenset(),
}


def allowed(source: State | None, target: State) -> bool:
    return source == target or target in ALLOWED[source]


def cancel_refusal(state: State | None) -> str | None:
    """Why a cancel is refused in this state, or None when it is allowed."""
    if state is None or state in CANCELLABLE:
        return None
    return f"the job is {state.value}; {CANCEL_ONLY}"


def retry_refusal(state: State | None) -> str | None:
    """Why a retry is refused in this state, or None when it is allowed."""
    if state in RETRYABLE:
        return None
    shown = state.value if state else "new"
    return f"the job is {shown}; {RETRY_ONLY}"
