"""Job: one unit of work and its lifecycle status (README; the rules are lifecycle/'s)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from pydantic import Field, field_validator, model_validator

from .common import (ANY_JSON, MAX_TIME, MIN_TIME, NAME_MAX, NAME_PATTERN, TIME_RANGE_TEXT, Condition, Model,
                     Timestamp, format_time, json_depth, parse_time, validations)
from .contract import PROTOCOL
from .report import Progress

KIND = "Job"
PLURAL = "jobs"
SHORT_NAMES = ["sjob"]

_REPLACE = "cancel this job and create a new one with a fresh idempotency key"

# Deeper payloads are refused: JSON encoders stop at a few hundred levels (orjson at 255), and the API server
# takes up to 10,000. No real payload nests this deep.
MAX_PAYLOAD_DEPTH = PROTOCOL["maxPayloadDepth"]
CONCURRENCY_KEY_MAX = PROTOCOL["concurrencyKeyMax"]
# Priorities are 32-bit, as Kubernetes' own PriorityClass values.
MIN_PRIORITY, MAX_PRIORITY = PROTOCOL["priorityMin"], PROTOCOL["priorityMax"]

_RUN_AT_IN_RANGE = {
    "rule": f"self >= timestamp('{format_time(MIN_TIME, precise=False)}') && "
            f"self <= timestamp('{format_time(MAX_TIME, precise=False)}')",
    "message": f"runAt must lie from {TIME_RANGE_TEXT}",
}


def check_payload(value: Any) -> Any:
    """The payload's nesting, checked before anything walks it recursively."""
    if json_depth(value, MAX_PAYLOAD_DEPTH) > MAX_PAYLOAD_DEPTH:
        raise ValueError(f"the payload nests deeper than {MAX_PAYLOAD_DEPTH} levels")
    return value


def check_run_at(value: Any) -> Any:
    """runAt as an aware UTC datetime in range (a time without an offset is UTC), or a clear refusal."""
    if value is None or not isinstance(value, (str, datetime)):
        return value  # None, or a type pydantic refuses with its own message
    return parse_time(value)


# The payload's cap, as compact UTF-8 JSON: a job object stays far below etcd's 1.5 MB request limit, and the
# handler gets it on stdin (an environment variable over 128 KiB makes exec fail with E2BIG).
PAYLOAD_MAX_BYTES = PROTOCOL["payloadMaxBytes"]
# Up to this size the runner also hands the payload to the handler as SEXTANT_PAYLOAD (compatibility).
PAYLOAD_ENV_MAX_BYTES = PROTOCOL["payloadEnvMaxBytes"]


def payload_json(payload: Any) -> str:
    """The payload as the handler reads it, and as its size is measured: compact JSON, UTF-8."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def payload_size(payload: Any) -> int:
    return len(payload_json(payload).encode())


def payload_refusal(payload: Any) -> str | None:
    """Why a payload is refused (over the cap), or None. Every create path and the operator share this check."""
    return size_refusal(payload_size(payload))


def size_refusal(size: int) -> str | None:
    """payload_refusal of a payload measured already (the operator's view keeps the size, not the payload)."""
    if size <= PAYLOAD_MAX_BYTES:
        return None
    return (f"the payload is {size} bytes as JSON, over the limit of {PAYLOAD_MAX_BYTES} bytes (256 KiB); "
            "pass a reference (an object key, a URL) to larger data instead")


def _immutable(field: str) -> dict[str, str]:
    """A CEL rule on the spec: an optional field may not be added, removed or changed after creation."""
    return {
        "rule": f"has(self.{field}) == has(oldSelf.{field}) && (!has(self.{field}) || self.{field} == oldSelf.{field})",
        "message": f"{field} is immutable: {_REPLACE}",
        "fieldPath": f".{field}",
    }


class State(str, Enum):
    """The seven states of a job (README; lifecycle/states.py has the moves between them)."""

    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"


# Which states the users' verbs apply to. The API server's CEL rules (resources/crds.py) and the lifecycle
# (lifecycle/states.py) both read these, so the CRDs and the operator cannot disagree.
FINISHED = frozenset({State.SUCCEEDED, State.DEAD, State.CANCELLED})  # finished for now: retention counts from here
# A job that has not finished can be cancelled: scheduled, queued, running (README, "Cancel and retry"), and failed:
# a failed job waiting for its backoff has not started its next attempt, so cancelling it stops the retries.
CANCELLABLE = frozenset({State.SCHEDULED, State.QUEUED, State.RUNNING, State.FAILED})
RETRYABLE = frozenset({State.FAILED, State.DEAD})  # only failed or dead (README, "Cancel and retry")

# The status of a job nobody has written yet: the Job CRD's default (resources/crds.py), which the API server puts on
# every read, so that a reader sees `queued` from the moment a job exists and the operator need not write it (a
# runnable job is written first when it starts, or ends, or waits for something). observedGeneration 0 tells GitOps
# tools (kstatus) that the operator has not acted on the job yet: in progress, not "current". The operator reads this
# status as none at all (written_status): the lifecycle takes a job in from there.
UNWRITTEN_STATUS: dict[str, Any] = {"state": State.QUEUED.value, "observedGeneration": 0}

# What may be in a job's status that the lifecycle has never written: the defaults, a Schedule's cancel
# (cancelRequested), the Invalid condition of a job the operator cannot read. A lifecycle write says more (queuedAt,
# attempts, an observedGeneration ≥ 1...), in this version and the ones before it.
_NOT_THE_LIFECYCLES = frozenset({*UNWRITTEN_STATUS, "cancelRequested", "conditions"})


def written_status(status: dict[str, Any] | None) -> dict[str, Any]:
    """A job's status as the lifecycle wrote it: without the defaults while the lifecycle has never written it."""
    if not status:
        return {}
    if all(status.get(k, v) == v for k, v in UNWRITTEN_STATUS.items()) and status.keys() <= _NOT_THE_LIFECYCLES:
        return {k: v for k, v in status.items() if k not in UNWRITTEN_STATUS}
    return status


def _listed(states: frozenset[State]) -> str:
    names = [s.value for s in State if s in states]
    return ", ".join(names[:-1]) + " or " + names[-1]


CANCEL_ONLY = f"only {_listed(CANCELLABLE)} jobs can be cancelled"
RETRY_ONLY = f"only {_listed(RETRYABLE)} jobs can be retried"


def is_finished(state: Any) -> bool:
    """Whether a raw status.state (any JSON value) names a finished state."""
    return isinstance(state, str) and state in FINISHED


class JobSpec(Model):
    queue: str = Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN,
                       description="The Queue (in this namespace) the job runs on: an object name.")
    handler: str = Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN,
                         description="The Handler (in this namespace) that runs it: an object name.")
    payload: dict[str, Any] = Field(
        default_factory=dict,
        description="Any JSON object; handed to the handler on standard input.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    run_at: datetime | None = Field(
        default=None,
        description=f"Do not run before this time (RFC 3339, from {TIME_RANGE_TEXT}).",
        json_schema_extra=validations(_RUN_AT_IN_RANGE),
    )
    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description="A second job with the same key in this namespace within 24 h is not run; see status.duplicateOf.",
    )
    priority: int = Field(default=0, ge=MIN_PRIORITY, le=MAX_PRIORITY,
                          description="Higher runs first within its queue; FIFO among equals (32-bit).")
    concurrency_key: str | None = Field(
        default=None, min_length=1, max_length=CONCURRENCY_KEY_MAX,
        description="The job's concurrency key, e.g. a tenant or customer id: the queue's perKeyConcurrency limits "
        "running attempts per key, and the queue admits keys in turn (round-robin) among jobs of equal priority. "
        f"1 to {CONCURRENCY_KEY_MAX} characters; immutable.",
    )
    cancel: bool = Field(
        default=False,
        description="Set to true to cancel the job (scheduled/queued at once, running after cancelGrace).",
    )
    retry_token: str | None = Field(
        default=None,
        max_length=253,
        description="Set to a new value to retry a failed or dead job; re-applying the same value retries once.",
    )

    _payload_depth = field_validator("payload", mode="before")(check_payload)
    _run_at_range = field_validator("run_at", mode="before")(check_run_at)

    model_config = Model.model_config | {
        "json_schema_extra": validations(
            {"rule": "self.queue == oldSelf.queue", "message": f"queue is immutable: {_REPLACE}", "fieldPath": ".queue"},
            {
                "rule": "self.handler == oldSelf.handler",
                "message": f"handler is immutable: {_REPLACE}",
                "fieldPath": ".handler",
            },
            _immutable("payload"),
            _immutable("runAt"),
            _immutable("idempotencyKey"),
            _immutable("concurrencyKey"),
            {
                "rule": "!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel)",
                "message": "cancel cannot be withdrawn once requested",
                "fieldPath": ".cancel",
            },
        )
    }


# The previous version called the sequence number `run` (status.run, attempts[].run). Its jobs may still be in
# flight when this version takes over: `run` stays in the CRD's schema (else the API server prunes it, and such a
# job would start again at sequence 1, on its own pods' names) and is read as a fallback; only `sequence` is
# written. Drop with the version after next.
LEGACY_SEQUENCE = "run"
_LEGACY_SEQUENCE_SCHEMA = {"type": "integer", "description": "Deprecated: the previous version's name of sequence; "
                                                            "read, never written."}


def legacy_sequence(raw: Any) -> Any:
    """A status or timeline entry written by the previous version: its `run` read as `sequence` (the larger of the
    two when both are there)."""
    if isinstance(raw, dict) and LEGACY_SEQUENCE in raw:
        raw = dict(raw)
        old = raw.pop(LEGACY_SEQUENCE)
        if isinstance(old, int) and not isinstance(old, bool):
            new = raw.get("sequence")
            raw["sequence"] = max(old, new) if isinstance(new, int) and not isinstance(new, bool) else old
    return raw


def sequence_of(raw: dict[str, Any] | None) -> int:
    """The sequence number of a raw status or timeline entry (0 for none), whichever version wrote it."""
    value = legacy_sequence(raw or {}).get("sequence")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _with_legacy_sequence(schema: dict[str, Any]) -> None:
    """The CRD keeps `run` (deprecated) beside `sequence`, and requires neither: an operator of the previous version
    still writes only `run` until it is replaced (the CRDs are upgraded first)."""
    schema["properties"][LEGACY_SEQUENCE] = dict(_LEGACY_SEQUENCE_SCHEMA)
    if "required" in schema:
        schema["required"] = [r for r in schema["required"] if r != "sequence"]


class Attempt(Model):
    """One entry of the timeline: one attempt of the handler."""

    attempt: int = Field(description="The attempt number (1-based; retry starts again at 1).")
    sequence: int = Field(description="The attempt's sequence number over the job's life: never reset, never reused; "
                                      "names its pod.")
    pod: str | None = Field(default=None, description="The attempt's pod (pod mode).")
    worker: str | None = Field(
        default=None, description="The worker that ran it, as <name>/<incarnation> (worker mode, docs/workers.md)."
    )
    node: str | None = Field(default=None, description="The node, or the worker's name, that ran it.")
    started_at: Timestamp | None = Field(
        default=None, description="When the handler started: its container's start in pod mode (RFC 3339)."
    )
    finished_at: Timestamp | None = Field(default=None, description="When it ended (RFC 3339).")
    result: str = Field(description="running, succeeded, failed, cancelled or snoozed (run again later, not counted).")
    exit_code: int | None = Field(default=None, description="The handler's exit code, when it exited.")
    reason: str | None = Field(
        default=None,
        description="Error, Timeout, LeaseExpired, PodLost, Drained, NonRetryableExitCode, Cancelled, Snoozed, "
        "TooManySnoozes; a pod that "
        "did not start: Unschedulable, StartTimeout or the kubelet's waiting reason (ErrImagePull, ImagePullBackOff, ...).",
    )
    message: str | None = Field(default=None, description="What went wrong, for a person.")

    model_config = Model.model_config | {"json_schema_extra": _with_legacy_sequence}

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        return legacy_sequence(data)


class JobStatus(Model):
    state: State | None = Field(default=None, description="scheduled|queued|running|succeeded|failed|dead|cancelled")
    attempt: int = Field(default=0, ge=0, description="Attempts made since creation or the last retry.")
    max_attempts: int | None = Field(default=None, ge=1, description="The queue's maxAttempts when last evaluated.")
    sequence: int = Field(default=0, ge=0, description="The last attempt's sequence number over the job's life: "
                                                       "never reset, never reused; names its pod.")
    worker: str | None = Field(
        default=None, description="The worker the running attempt is assigned to (worker mode; a selectable field)."
    )
    next_attempt_at: Timestamp | None = Field(default=None, description="When a scheduled job becomes queued.")
    queued_at: Timestamp | None = Field(default=None, description="When the job last became runnable (FIFO order).")
    finished_at: Timestamp | None = Field(default=None, description="When the job reached a terminal state.")
    stop_reason: str | None = Field(
        default=None, description="Why the running attempt is being stopped: Cancelled, Timeout or LeaseExpired."
    )
    stop_requested_at: Timestamp | None = Field(default=None, description="When the running attempt was asked to stop.")
    timeout_at: Timestamp | None = Field(default=None, description="When the running attempt times out.")
    retry_token: str | None = Field(default=None, description="The last spec.retryToken acted upon.")
    cancel_requested: str | None = Field(
        default=None,
        description="A cancel requested by Sextant itself (a Schedule's Replace policy), and why; it acts like "
        "spec.cancel, so that the operator never writes a Job's spec.",
    )
    duplicate_of: str | None = Field(default=None, description="The job that already holds this idempotency key.")
    message: str | None = Field(default=None, description="The latest word on the job, for a person.")
    attempts: list[Attempt] = Field(
        default_factory=list,
        description="The timeline of attempts: the first and the most recent ones (see droppedAttempts).")
    dropped_attempts: int | None = Field(
        default=None, description="Attempts left out of the timeline between its first and its most recent ones, "
                                  "so that the object stays small.")
    conditions: list[Condition] = Field(default_factory=list, description=(
        "Succeeded, Dead, Cancelled, Running, Blocked, Invalid; Ready, Reconciling, Stalled for GitOps tools "
        "(docs/gitops.md)."))
    observed_generation: int | None = Field(default=None, description="The spec generation last acted upon.")
    snoozes: int | None = Field(default=None, ge=0, description="Snoozes since creation or the last retry (each one "
                                "an attempt not counted).")
    output: Any = Field(default=None, description="What the handler of the succeeded attempt returned (JSON, at most "
                        "32 KiB).", json_schema_extra={ANY_JSON: True})
    output_note: str | None = Field(default=None, description="Why the output is not kept (over the cap, not JSON).")
    progress: Progress | None = Field(default=None, description="How far the running attempt has come, as its "
                                      "handler said (written at most every 5 s).")

    model_config = Model.model_config | {"json_schema_extra": _with_legacy_sequence}

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        return legacy_sequence(data)

    def duplicate(self) -> JobStatus:
        """A copy that can be changed without touching this status: its lists and their entries are copied (their
        fields are all scalars). A deep copy costs 4 times as much, and every reconcile makes one."""
        return self.model_copy(update={"attempts": [a.model_copy() for a in self.attempts],
                                       "conditions": [c.model_copy() for c in self.conditions]})


def cancel_wanted(spec: JobSpec, status: JobStatus) -> bool:
    """Cancel requested by the user (spec.cancel) or by Sextant (status.cancelRequested)."""
    return spec.cancel or bool(status.cancel_requested)


class Job(Model):
    spec: JobSpec
    status: JobStatus = Field(default_factory=JobStatus)


# A job's name: job- and ID_LENGTH of these lower-case letters and digits that cannot be misread (no 0/o, 1/l/i),
# since people type them.
ID_ALPHABET = PROTOCOL["idAlphabet"]
ID_LENGTH = PROTOCOL["idLength"]
# How long an idempotency key stays claimed, unless SEXTANT_IDEMPOTENCY_WINDOW says otherwise.
IDEMPOTENCY_WINDOW = timedelta(hours=PROTOCOL["idempotencyWindowHours"])


def job_id(name: str) -> str:
    """The id users see (job_8f3k2m9q: the CLI, the /v2 API) for an object named job-8f3k2m9q."""
    return name.replace("job-", "job_", 1) if name.startswith("job-") else name


def object_name(job_or_id: str) -> str:
    """Accept both spellings: job_8f3k2m9q and job-8f3k2m9q name the object job-8f3k2m9q."""
    return job_or_id.replace("_", "-")
