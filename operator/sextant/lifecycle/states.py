"""The seven states and which transitions between them are allowed."""

from __future__ import annotations

from ..resources.job import State

SCHEDULED, QUEUED, RUNNING = State.SCHEDULED, State.QUEUED, State.RUNNING
SUCCEEDED, FAILED, DEAD, CANCELLED = State.SUCCEEDED, State.FAILED, State.DEAD, State.CANCELLED

# States a job never leaves (dead leaves only through retry).
TERMINAL = frozenset({SUCCEEDED, CANCELLED})
# States in which the job is finished for now: retention counts from here.
FINISHED = frozenset({SUCCEEDED, DEAD, CANCELLED})
# A job that has not finished can be cancelled: scheduled, queued, running (README, "Cancel and retry"), and failed:
# a failed job waiting for its backoff has not started its next attempt, so cancelling it stops the retries.
CANCELLABLE = frozenset({SCHEDULED, QUEUED, RUNNING, FAILED})
# Only a failed or dead job can be retried (README, "Cancel and retry").
RETRYABLE = frozenset({FAILED, DEAD})

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
    return f"the job is {state.value}; only scheduled, queued, running or failed jobs can be cancelled"


def retry_refusal(state: State | None) -> str | None:
    """Why a retry is refused in this state, or None when it is allowed."""
    if state in RETRYABLE:
        return None
    shown = state.value if state else "new"
    return f"the job is {shown}; only failed or dead jobs can be retried"
