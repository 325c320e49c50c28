"""Queue: a named line of jobs with its own settings."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import Field, field_validator

from .common import Duration, Model, Timestamp, parse_duration, validations

KIND = "Queue"
PLURAL = "queues"
SHORT_NAMES = ["squeue"]
MAX_ATTEMPTS = 1000
MIN_LEASE_DURATION = timedelta(seconds=1)
# No timeout, "0s", means nothing: not "no limit" (unlike retention's "0s"), an attempt that times out at once.
# Checked here in microseconds and by the CRD in nanoseconds: whatever the CRD admits, the model reads.
MIN_TIMEOUT = timedelta(milliseconds=1)
# A rate limit's window: at least a second (finer would be a promise the operator's timers cannot keep), at most a
# day; at most MAX_RATE_STARTS starts per window, since the operator remembers each start of the window.
MIN_RATE_PER, MAX_RATE_PER = timedelta(seconds=1), timedelta(hours=24)
MAX_RATE_STARTS = 100_000
# retention.maxJobs: beyond a million finished objects of one queue etcd is past its quota anyway (~3.1 KB each).
MAX_KEPT_JOBS = 1_000_000


class Backoff(Model):
    """How long a failed job waits before its next attempt."""

    policy: Literal["exponential", "fixed"] = Field(
        default="exponential",
        description="exponential: initial × factor^(attempt−1), capped at max; fixed: always initial.",
    )
    initial: Duration = Field(default="10s", description="The delay after the first failed attempt.")
    factor: float = Field(default=2.0, ge=1.0, le=100.0, description="Growth per attempt (exponential only).")
    max: Duration = Field(default="10m", description="The longest delay (exponential only).")
    jitter: float = Field(
        default=0.1, ge=0.0, le=1.0, description="Random spread, as a fraction of the delay (0.1 = ±10%)."
    )

    model_config = Model.model_config | {
        "json_schema_extra": validations(
            {
                "rule": "self.policy == 'fixed' || duration(self.initial) <= duration(self.max)",
                "message": "backoff.initial must not be greater than backoff.max (exponential policy)",
                "fieldPath": ".initial",
            }
        )
    }

    @property
    def initial_delta(self) -> timedelta:
        return parse_duration(self.initial)

    @property
    def max_delta(self) -> timedelta:
        return parse_duration(self.max)


class Retention(Model):
    """How long finished jobs stay visible, per terminal state; "0s" keeps them forever."""

    succeeded: Duration = Field(default="24h", description="How long a succeeded job is kept.")
    cancelled: Duration = Field(default="24h", description="How long a cancelled job is kept.")
    dead: Duration = Field(default="168h", description="How long a dead job is kept.")
    pods: Duration | None = Field(
        default=None,
        description="Delete a finished job's pods this long after it finished, before the job itself goes "
        "(the timeline stays in the job's status; `kubectl logs` needs the pod). Unset: they go with the job.",
    )
    max_jobs: int | None = Field(
        default=None, ge=0, le=MAX_KEPT_JOBS,
        description="The most finished jobs of this queue kept as objects: past it the oldest finished ones are "
        "deleted before their time (archived first when the operator has an archive), with a Warning Event "
        "RetentionCapped on the queue. Unset: only the operator's cluster-wide cap (--max-finished-jobs) applies. "
        f"0 keeps none; at most {MAX_KEPT_JOBS}.",
    )


class RateLimit(Model):
    """At most `starts` attempts start in any window of length `per`, across every worker and pod of the queue."""

    starts: int = Field(ge=1, le=MAX_RATE_STARTS,
                        description=f"How many attempts may start in any window of length per (1 to {MAX_RATE_STARTS}).")
    per: Duration = Field(description="The window: a duration from 1s to 24h, e.g. 1m.")

    model_config = Model.model_config | {
        "json_schema_extra": validations(
            {
                "rule": "duration(self.per) >= duration('1s') && duration(self.per) <= duration('24h')",
                "message": "rateLimit.per must be from 1s to 24h",
                "fieldPath": ".per",
            },
        )
    }

    @field_validator("per")
    @classmethod
    def _per_in_range(cls, value: str) -> str:
        if not MIN_RATE_PER <= parse_duration(value) <= MAX_RATE_PER:
            raise ValueError(f"{value!r}: rateLimit.per must be from 1s to 24h")
        return value

    @property
    def per_delta(self) -> timedelta:
        return parse_duration(self.per)


class QueueSpec(Model):
    concurrency: int = Field(default=10, ge=1, description="Running attempts at once, across the whole queue.")
    max_attempts: int = Field(
        default=5, ge=1, le=MAX_ATTEMPTS,
        description=f"Attempts before a job is dead (the first attempt is attempt 1; a retry starts again from 1; at most {MAX_ATTEMPTS}).",
    )
    backoff: Backoff = Field(default_factory=Backoff, description="The delay between attempts.",
                             json_schema_extra={"default": Backoff().wire()})
    timeout: Duration = Field(
        default="5m",
        description="How long one attempt may run, from its handler's start, before it fails with Timeout "
        "(at least 1ms).",
    )
    start_timeout: Duration = Field(
        default="10m",
        description="How long an attempt's pod may take to start its handler (waiting for a node, pulling its image) "
        "before the attempt fails with Unschedulable, the image pull's reason (ErrImagePull, ImagePullBackOff, ...) "
        "or StartTimeout; it counts as an attempt and is retried. The job stays queued meanwhile.",
    )
    lease_duration: Duration = Field(
        default="30s", description="How long a running attempt's lease lasts without a heartbeat (at least 1s)."
    )
    cancel_grace: Duration = Field(
        default="10s", description="How long a cancelled handler gets between SIGTERM and SIGKILL."
    )
    retention: Retention = Field(
        default_factory=Retention,
        description="How long finished jobs stay visible.",
        json_schema_extra={"default": Retention().wire()},  # so that `kubectl get -o yaml` shows them
    )
    paused: bool = Field(
        default=False,
        description="No attempt starts while true: running attempts finish, new jobs arrive queued and keep their "
        "place in line; set back to false (resume), the queue starts them in order. `sextant queues pause|resume`.",
    )
    rate_limit: RateLimit | None = Field(
        default=None,
        description="At most rateLimit.starts attempts start in any window of length rateLimit.per (a sliding "
        "window), across every worker and pod of the queue; an attempt starts when the operator admits it (creates "
        "its pod, or assigns it to a worker). Jobs past it stay queued; status.rateLimited says so. Unset: no limit.",
    )
    per_key_concurrency: int | None = Field(
        default=None, ge=1,
        description="Running attempts at once per concurrency key (a Job's spec.concurrencyKey), within the "
        "queue's concurrency. Jobs without a key are not limited by it. Whether set or not, the queue admits keys "
        "in turn (round-robin) among jobs of equal priority, so that one key's backlog does not delay another's jobs.",
    )

    model_config = Model.model_config | {
        "json_schema_extra": validations(
            {
                "rule": "!has(self.leaseDuration) || duration(self.leaseDuration) >= duration('1s')",
                "message": "leaseDuration must be at least 1s",
                "fieldPath": ".leaseDuration",
            },
            {
                "rule": "!has(self.timeout) || duration(self.timeout) >= duration('1ms')",
                "message": "timeout must be at least 1ms: an attempt with no time to run would always time out",
                "fieldPath": ".timeout",
            },
        )
    }

    @field_validator("timeout")
    @classmethod
    def _timeout_positive(cls, value: str) -> str:
        if parse_duration(value) < MIN_TIMEOUT:
            raise ValueError(f"{value!r}: timeout must be at least 1ms: an attempt with no time to run would always "
                             "time out")
        return value

    @field_validator("lease_duration")
    @classmethod
    def _lease_at_least_a_second(cls, value: str) -> str:
        if parse_duration(value) < MIN_LEASE_DURATION:
            raise ValueError(f"{value!r} is shorter than the minimum leaseDuration, 1s")
        return value


class QueueStatus(Model):
    """The queue's live numbers, written by the operator from its view: only on change, at most once every few
    seconds per queue (controller/queuestatus.py)."""

    observed_generation: int | None = Field(default=None, description="The spec generation last seen.")
    running: int | None = Field(default=None, description="Attempts running now (their handler has started).")
    queued: int | None = Field(
        default=None, description="Jobs runnable and not yet taken, including those whose pod is starting."
    )
    starting: int | None = Field(default=None, description="Of the queued jobs, those whose attempt's pod is starting.")
    scheduled: int | None = Field(default=None, description="Jobs waiting for runAt.")
    failed: int | None = Field(default=None, description="Jobs whose last attempt failed, waiting for their backoff.")
    oldest_queued_at: Timestamp | None = Field(
        default=None, description="When the longest-waiting queued job became runnable (RFC 3339)."
    )
    paused: bool | None = Field(
        default=None, description="The operator starts no attempt of the queue (it saw spec.paused)."
    )
    recent_starts: int | None = Field(
        default=None, description="Attempts started in the last rateLimit.per (only with a rateLimit)."
    )
    rate_limited: bool | None = Field(
        default=None, description="Queued jobs wait for the rate limit (RateLimited): the window's starts are used up."
    )
    keys: int | None = Field(
        default=None, description="Concurrency keys with jobs queued or running (only when some job has a key)."
    )


class Queue(Model):
    spec: QueueSpec = Field(default_factory=QueueSpec)
    status: QueueStatus | None = None
