"""Worker: one worker process's own object, the whole worker protocol (docs/workers.md).

Each side is the only writer of its half, so neither ever conflicts with the other:
- `spec` is the worker's: its registration (incarnation, queues, handlers, slots, lease duration, draining), its
  renewals (each one a new `metadata.generation`) and the results of the attempts it ran;
- `status` is the operator's: the attempts it assigned to the worker (with a stop, when one is asked for), and what it
  believes of the worker (state, slots, busy).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .common import ANY_JSON, NAME_MAX, NAME_PATTERN, Condition, Model, Timestamp
from .contract import PROTOCOL
from .report import MAX_SNOOZE, PROGRESS_MESSAGE_MAX

KIND = "Worker"
PLURAL = "workers"
SHORT_NAMES = ["sworker"]

# The most slots a Worker may announce (the schema refuses more); the operator believes at most its own
# --max-worker-slots of them.
MAX_SLOTS = 4096
# A result's message, as the timeline keeps it (lifecycle/transitions.py cuts it to MESSAGE_MAX_BYTES again).
MESSAGE_MAX_LENGTH = PROTOCOL["messageMaxLength"]
INCARNATION_PATTERN = r"^[a-z0-9]{1,32}$"
# The finalizer a worker creates its object with: the operator removes it once every attempt assigned to the worker
# is recorded on its job, so that deleting the object (its pod's garbage collection, a user) loses no attempt.
FINALIZER = PROTOCOL["workerFinalizer"]

LIVE, DRAINING, EXPIRED = "live", "draining", "expired"


class WorkerResult(Model):
    """An attempt this worker ran (or could not run) and how it ended; kept in spec until the operator drops its
    assignment (then it is recorded on the job)."""

    job: str = Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN, description="The job's name.")
    uid: str = Field(min_length=1, max_length=64, description="The job's metadata.uid, as assigned.")
    sequence: int = Field(ge=1, description="The assignment's sequence number.")
    incarnation: str = Field(pattern=INCARNATION_PATTERN, description="The incarnation that ran it.")
    exit_code: int | None = Field(default=None, ge=0, le=255,
                                  description="The handler's exit code; unset when it did not run (see reason).")
    reason: str | None = Field(default=None, max_length=64, pattern=r"^[A-Za-z]+$",
                               description="Why it ended without an exit code, or a refinement of one: Drained "
                               "(stopped by the worker's drain), NotFound (the job is gone or has another uid), "
                               "Cancelled or Timeout (the worker stopped it for that stop: the assignment's, or its "
                               "own timeoutAt).")
    message: str | None = Field(default=None, max_length=MESSAGE_MAX_LENGTH,
                                description="What went wrong, for a person (the output's last lines, the exception).")
    started_at: Timestamp | None = Field(default=None, description="When the handler started (the worker's clock).")
    finished_at: Timestamp | None = Field(default=None, description="When it ended (the worker's clock).")
    snooze_seconds: float | None = Field(default=None, ge=0, le=MAX_SNOOZE.total_seconds(), description=(
        "With exitCode 85: the handler snoozed; run it again after this many seconds (not counted)."))
    output: Any = Field(default=None, description="What the handler returned (JSON; the operator keeps at most "
                        "32 KiB of it, else outputNote).", json_schema_extra={ANY_JSON: True})
    output_note: str | None = Field(default=None, max_length=MESSAGE_MAX_LENGTH,
                                    description="Why the output is not reported (over the cap, not JSON).")


class WorkerProgress(Model):
    """How far a running attempt has come, as its handler last said (rides on the worker's next write)."""

    job: str = Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN, description="The job's name.")
    uid: str = Field(min_length=1, max_length=64, description="The job's metadata.uid, as assigned.")
    sequence: int = Field(ge=1, description="The assignment's sequence number.")
    incarnation: str = Field(pattern=INCARNATION_PATTERN, description="The incarnation that runs it.")
    fraction: float = Field(ge=0, le=1, description="From 0 to 1.")
    message: str | None = Field(default=None, max_length=PROGRESS_MESSAGE_MAX, description="For a person.")


class WorkerSpec(Model):
    incarnation: str = Field(pattern=INCARNATION_PATTERN,
                             description="A fresh random value per process start: assignments name it.")
    queues: list[str] = Field(default_factory=list, max_length=256, description="The queues it serves.")
    handlers: list[str] = Field(default_factory=list, max_length=256, description="The handlers it serves.")
    slots: int = Field(ge=0, le=MAX_SLOTS, description="How many attempts it runs at once.")
    lease_duration_seconds: int = Field(ge=1, le=3600, description=(
        "How long after the operator last observed a renewal (a new metadata.generation) the worker counts as gone "
        "and its attempts fail LeaseExpired."))
    draining: bool = Field(default=False, description="It takes no new jobs (SIGTERM).")
    renew_time: Timestamp | None = Field(default=None, description=(
        "Its last renewal, by its own clock: for people only; the operator judges liveness by its own clock."))
    user: str | None = Field(default=None, max_length=256, description=(
        "Outside a pod: the user its credentials authenticate as (for people; admission checks pods by name)."))
    results: list[WorkerResult] = Field(default_factory=list, max_length=2 * MAX_SLOTS,
                                        description="Attempts that ended, until their assignments are dropped.")
    progress: list[WorkerProgress] = Field(default_factory=list, max_length=MAX_SLOTS, description=(
        "The latest progress of running attempts that reported some."))


class Assignment(Model):
    """An attempt the operator gave this worker: durable before the worker starts its handler."""

    job: str = Field(description="The job's name.")
    uid: str = Field(description="The job's metadata.uid.")
    queue: str = Field(description="The job's queue.")
    handler: str = Field(description="The job's handler.")
    sequence: int = Field(ge=1, description="The attempt's sequence number over the job's life.")
    attempt: int = Field(ge=1, description="The attempt number.")
    incarnation: str = Field(description="The worker incarnation it is for: another one must not run it.")
    assigned_at: Timestamp = Field(description="When the operator assigned it (its clock).")
    timeout_at: Timestamp | None = Field(default=None, description="When the attempt times out.")
    stop: str | None = Field(default=None, description="Cancelled or Timeout: stop the handler, then report.")
    stop_requested_at: Timestamp | None = Field(default=None, description="When the stop was asked for.")
    cancel_grace_seconds: float | None = Field(default=None, description="SIGTERM to SIGKILL, for a stop.")


class WorkerStatus(Model):
    observed_generation: int | None = Field(default=None, description="The spec generation last read.")
    state: str | None = Field(default=None, description="live, draining or expired, as the operator judges it.")
    slots: int | None = Field(default=None, description="The slots the operator believes (capped).")
    busy: int | None = Field(default=None, description="Attempts assigned and not yet recorded.")
    assignments: list[Assignment] = Field(default_factory=list, description="Attempts assigned to it.")
    conditions: list[Condition] = Field(default_factory=list, description="Ready, with a reason.")
    message: str | None = Field(default=None, description="The latest word on the worker, for a person.")


class Worker(Model):
    spec: WorkerSpec
    status: WorkerStatus = Field(default_factory=WorkerStatus)
