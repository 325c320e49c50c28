"""The /v2 HTTP API's request and response bodies (pydantic; the OpenAPI document is generated from them).

The API speaks the resources' words in snake_case (`idempotency_key`, `run_at`, `max_attempts`); a job's id is
`job_8f3k2m9q` (its Kubernetes object is named `job-8f3k2m9q`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..resources import inputs
from ..archive.objects import is_archived
from ..kube.clock import utcnow
from ..lifecycle.queueing import QueueNumbers, counted_state
from ..lifecycle.selection import BULK_MAX, LABEL_SELECTOR_MAX
from ..resources import contract
from ..resources.common import format_time
from ..resources.queue import QueueSpec
from ..resources.request import CreateJob
from ..resources.job import job_id, sequence_of, written_status

DEFAULT_LIMIT, MAX_LIMIT = 100, 1000  # GET /v2/jobs: page sizes
# POST /v2/jobs:batch: jobs at most per call. Each costs the API server a create (and a list, with a key), made
# CONCURRENCY at a time with the caller's token: 100 end well within the request deadline (30 s) even on a loaded
# 2-core machine (~20-30 creates/s there), and 100 jobs of up to ~10 KiB fit the body's cap (1 MiB, the server's).
BATCH_MAX = 100
# The API server's continue tokens are unpadded base64url; anything else (or longer) is refused before it is sent.
CONTINUE_PATTERN, CONTINUE_MAX = r"^[A-Za-z0-9_-]*$", 4096

StateName = Literal["scheduled", "queued", "running", "succeeded", "failed", "dead", "cancelled"]


class Out(BaseModel):
    model_config = ConfigDict(populate_by_name=True)


class CreateJobs(BaseModel):
    """POST /v2/jobs:batch: many jobs, each as the body of POST /v2/jobs. Every item is checked before any is
    created: one invalid item refuses the whole call (422, error.field items[i].FIELD), and nothing is created."""

    model_config = ConfigDict(extra="forbid", strict=True)

    items: list[CreateJob] = Field(min_length=1, max_length=BATCH_MAX,
                                   description=f"The jobs, at most {BATCH_MAX}; answered in this order.")


class JobSelection(BaseModel):
    """POST /v2/jobs:cancel and /v2/jobs:retry: which jobs of the namespace to act on. Every given field must
    match; at least one is required (an empty selection would act on the whole namespace by accident)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    queue: str | None = Field(default=None, min_length=1, max_length=inputs.NAME_MAX, pattern=inputs.NAME_PATTERN,
                              description="Only jobs of this queue.")
    state: StateName | None = Field(default=None, description="Only jobs in this state (one the action applies "
                                                              "to: cancel scheduled, queued, running or failed "
                                                              "jobs; retry failed or dead ones).")
    handler: str | None = Field(default=None, min_length=1, max_length=inputs.NAME_MAX,
                                pattern=inputs.NAME_PATTERN, description="Only jobs of this handler.")
    label_selector: str | None = Field(default=None, min_length=1, max_length=LABEL_SELECTOR_MAX,
                                       description="A Kubernetes label selector (team=mail,tier!=batch), evaluated "
                                                   "by the API server.")
    dry_run: bool = Field(default=False, description="Count and name the jobs, change nothing: the "
                                                     "confirmation step.")


class Attempt(Out):
    attempt: int = Field(description="The attempt number (1-based; a retry starts again at 1).")
    sequence: int = Field(description="The attempt's sequence number over the job's life: never reset, never "
                                      "reused; names its pod.")
    pod: str = Field(description="The attempt's pod (the worker).")
    node: str | None = Field(default=None, description="The node the pod ran on.")
    started_at: str | None = Field(default=None, description="RFC 3339.")
    finished_at: str | None = Field(default=None, description="RFC 3339.")
    result: str = Field(description="running, succeeded, failed or cancelled.")
    exit_code: int | None = None
    reason: str | None = Field(default=None, description="Error, Timeout, LeaseExpired, PodLost, "
                                                         "NonRetryableExitCode or Cancelled.")
    message: str | None = None


class Progress(Out):
    fraction: float = Field(description="From 0 to 1.")
    message: str | None = None
    updated_at: str | None = Field(default=None, description="When it was written (at most every 5 s).")


class Job(Out):
    id: str = Field(description="The job's id, e.g. job_8f3k2m9q.")
    name: str = Field(description="The Kubernetes object name, e.g. job-8f3k2m9q.")
    namespace: str
    queue: str
    handler: str
    payload: dict[str, Any]
    run_at: str | None = None
    idempotency_key: str | None = None
    priority: int = 0
    concurrency_key: str | None = None
    state: StateName | None = Field(default=None, description=(
        "The job's state. Before the operator has written one (a job just created), its first state as its queue "
        "counts it: queued, or scheduled while run_at is ahead. null only for a job the operator holds as "
        "Invalid (its status says why)."))
    attempt: int = Field(default=0, description="Attempts made since creation or the last retry.")
    max_attempts: int | None = None
    cancel_requested: bool = False
    created_at: str | None = None
    next_attempt_at: str | None = None
    finished_at: str | None = None
    duplicate_of: str | None = Field(default=None, description="The id of the job that holds this job's "
                                                               "idempotency key; this one does not run.")
    schedule: str | None = Field(default=None, description="The Schedule that created the job.")
    message: str | None = None
    attempts: list[Attempt] = Field(default_factory=list, description="The timeline.")
    snoozes: int = Field(default=0, description="Snoozes since creation or the last retry (attempts not counted).")
    output: Any = Field(default=None, description="What the handler of the succeeded attempt returned (JSON).")
    output_note: str | None = Field(default=None, description="Why the output is not kept (over 32 KiB, not JSON).")
    progress: Progress | None = Field(default=None, description="How far the running attempt has come.")
    archived: bool = Field(default=False, description=(
        "true: read from the archive (docs/archive.md), not from the job's live object: the job finished and its "
        "record is what is shown; its object may since have been deleted from Kubernetes (cancel and retry then "
        "answer 404). false: the live Job object."))
    payload_note: str | None = Field(default=None, description="Why an archived job's payload is {}: it was over "
                                                               "the archive's cap, or the archive keeps none.")


class CreatedJob(Job):
    warnings: list[str] = Field(default_factory=list, description=(
        "Why the job will wait, as seen at creation: its queue or its handler does not exist in the namespace "
        "(the job is created all the same and runs once they exist). Each is also a `Warning: 299 - \"...\"` "
        "header."))


class JobList(Out):
    items: list[Job]
    continue_: str | None = Field(default=None, alias="continue",
                                  description="Pass as ?continue= for the next page; null on the last page.")


class JobCounts(Out):
    """Unfinished jobs as the Queue's status counts them (written by the operator every few seconds: the numbers
    of `kubectl get squeue`); finished ones as the operator's view counts them, live."""

    scheduled: int = 0
    queued: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    cancelled: int = 0


class RateLimit(Out):
    starts: int
    per: str


class Queue(Out):
    name: str
    namespace: str
    exists: bool = Field(description="false: jobs name this queue but no Queue exists (they wait, Blocked).")
    concurrency: int | None = None
    max_attempts: int | None = None
    paused: bool = Field(default=False, description="Paused (spec.paused): running attempts finish, nothing new "
                                                    "starts (POST /v2/queues/{queue}/pause, /resume).")
    running: int = Field(description="Running attempts now (compare with concurrency).")
    starting: int = Field(default=0, description="Of the queued jobs, those whose attempt's pod is starting.")
    jobs: JobCounts = Field(description="Jobs per state.")
    oldest_queued_at: str | None = Field(default=None, description="When the longest-waiting queued job "
                                                                   "became runnable.")
    oldest_queued_seconds: float | None = Field(default=None, description="How long it has waited.")
    rate_limit: RateLimit | None = Field(default=None, description="spec.rateLimit: at most `starts` attempts "
                                                                   "start in any window of length `per`.")
    recent_starts: int | None = Field(default=None, description="Attempts started in the rate limit's window.")
    rate_limited: bool = Field(default=False, description="Queued jobs wait for the rate limit (RateLimited).")
    per_key_concurrency: int | None = Field(default=None, description="spec.perKeyConcurrency: running attempts "
                                                                      "at once per concurrency key.")
    keys: int = Field(default=0, description="Concurrency keys of the queued and running jobs.")


class QueueList(Out):
    items: list[Queue]


class ErrorDetail(Out):
    status: int = Field(description="The HTTP status.")
    reason: str = Field(description="Unauthorized, Forbidden, NotFound, Conflict, Invalid, ...")
    message: str = Field(description="What went wrong, for a person.")
    field: str | None = Field(default=None, description="The invalid field (422); for a create whose idempotency_key "
                                                        "is held by another job (409), the first field in which "
                                                        "that job differs (queue, handler or payload).")


class Error(Out):
    error: ErrorDetail


class BatchItem(Out):
    status: int = Field(description="As POST /v2/jobs answers this item alone: 201 created, 200 the job already "
                                    "holding its idempotency_key, 409 that job has another queue, handler or "
                                    "payload, else the Kubernetes API's refusal (403, 422, 502).")
    job: CreatedJob | None = Field(default=None, description="The job (201, 200); null on an error.")
    error: ErrorDetail | None = Field(default=None, description="Why not (409, ...); null on success.")


class BatchResult(Out):
    items: list[BatchItem] = Field(description="One per item of the request, in its order.")
    created: int = Field(description="How many items were created (201).")
    replayed: int = Field(description="How many returned the job already holding their key (200).")
    failed: int = Field(description="How many were not created (any other status).")


class Refusal(Out):
    id: str
    message: str = Field(description="Why: its state changed since it was selected, or it is gone.")


class BulkResult(Out):
    action: Literal["cancel", "retry"]
    dry_run: bool
    matched: int = Field(description="Jobs the selection matches whose state allows the action, in all.")
    ids: list[str] = Field(description=f"The jobs this call acted on (dry_run: would act on), oldest first, at most "
                                       f"{BULK_MAX}.")
    requested: int = Field(description="Of ids, those the action was requested for (0 with dry_run).")
    refused: list[Refusal] = Field(default_factory=list, description="Of ids, those the API server refused.")
    remaining: int = Field(description="Matched jobs beyond the cap, not acted on: call again until 0.")


def dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True)


def job_out(raw: dict[str, Any], now: datetime | None = None) -> Job:
    """A Kubernetes Job object → the API's Job (a job without a state yet: its first state, `counted_state`)."""
    meta, spec, status = raw["metadata"], raw.get("spec") or {}, raw.get("status") or {}
    written = written_status(status).get("state")  # unwritten (the CRD's default): its first state, as counted
    state = written if written else counted_state(raw, now or utcnow())
    state = state if state in inputs.STATES else None
    return Job(**_job_fields(raw, meta, spec, status, state))


def created_job_out(raw: dict[str, Any], warnings: list[str], now: datetime | None = None) -> CreatedJob:
    return CreatedJob(**job_out(raw, now).model_dump(by_alias=False), warnings=warnings)


def _job_fields(raw: dict[str, Any], meta: dict[str, Any], spec: dict[str, Any], status: dict[str, Any],
                state: str | None) -> dict[str, Any]:
    return dict(
        id=job_id(meta["name"]), name=meta["name"], namespace=meta.get("namespace", ""),
        queue=spec.get("queue", ""), handler=spec.get("handler", ""), payload=spec.get("payload") or {},
        run_at=spec.get("runAt"), idempotency_key=spec.get("idempotencyKey"), priority=spec.get("priority", 0),
        concurrency_key=spec.get("concurrencyKey"),
        state=state, attempt=status.get("attempt", 0), max_attempts=status.get("maxAttempts"),
        cancel_requested=bool(spec.get("cancel") or status.get("cancelRequested")),
        created_at=meta.get("creationTimestamp"), next_attempt_at=status.get("nextAttemptAt"),
        finished_at=status.get("finishedAt"),
        duplicate_of=job_id(status["duplicateOf"]) if status.get("duplicateOf") else None,
        schedule=(meta.get("labels") or {}).get(contract.LABEL_SCHEDULE), message=status.get("message"),
        attempts=[Attempt(attempt=a.get("attempt", 0), sequence=sequence_of(a), pod=a.get("pod", ""),
                          node=a.get("node"), started_at=a.get("startedAt"), finished_at=a.get("finishedAt"),
                          result=a.get("result", ""), exit_code=a.get("exitCode"), reason=a.get("reason"),
                          message=a.get("message"))
                  for a in status.get("attempts") or []],
        snoozes=status.get("snoozes") or 0, output=status.get("output"), output_note=status.get("outputNote"),
        progress=_progress(status.get("progress")), archived=is_archived(raw), payload_note=status.get("payloadNote"),
    )


def _progress(raw: Any) -> Progress | None:
    """status.progress while its attempt runs; None when absent or unreadable."""
    if not isinstance(raw, dict) or not isinstance(raw.get("fraction"), (int, float)):
        return None
    message = raw.get("message")
    return Progress(fraction=raw["fraction"], message=message if isinstance(message, str) else None,
                    updated_at=raw.get("updatedAt") if isinstance(raw.get("updatedAt"), str) else None)


def queue_out(key: tuple[str, str], queue: dict[str, Any] | None, numbers: QueueNumbers,
              finished: Mapping[str, int], now: datetime) -> Queue:
    """One queue's entry: its Queue object's spec (None: jobs name the queue, but no Queue exists), the numbers of
    its unfinished jobs and those of its finished ones."""
    spec: QueueSpec | None = None
    if queue is not None:
        try:
            spec = QueueSpec.model_validate(queue.get("spec") or {})
        except ValidationError:
            spec = None  # a Queue the operator cannot read either: listed, without its settings
    oldest = numbers.oldest_queued_at
    counts = JobCounts(scheduled=numbers.scheduled, queued=numbers.queued, running=numbers.running,
                       failed=numbers.failed, **{k: finished.get(k, 0) for k in ("succeeded", "dead", "cancelled")})
    return Queue(name=key[1], namespace=key[0], exists=queue is not None,
                 concurrency=spec.concurrency if spec else None, max_attempts=spec.max_attempts if spec else None,
                 paused=bool(spec and spec.paused), running=numbers.running, starting=numbers.starting, jobs=counts,
                 oldest_queued_at=format_time(oldest, precise=False) if oldest else None,
                 oldest_queued_seconds=round((now - oldest).total_seconds(), 3) if oldest else None,
                 rate_limit=RateLimit(starts=spec.rate_limit.starts, per=spec.rate_limit.per)
                 if spec and spec.rate_limit else None,
                 recent_starts=numbers.recent_starts if spec and spec.rate_limit else None,
                 rate_limited=bool(spec and spec.rate_limit and numbers.rate_limited),
                 per_key_concurrency=spec.per_key_concurrency if spec else None, keys=numbers.keys)
