"""WorkerPool: a Deployment of workers whose replicas the operator sets from the slots its queues need (docs/workers.md,
"Autoscaling"). As a HorizontalPodAutoscaler does, the operator writes only the target's `scale` subresource; unlike
one, it counts exactly what a worker is for: queued, running and soon-due jobs, in slots."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from .common import NAME_MAX, NAME_PATTERN, Condition, Duration, Model, Timestamp, parse_duration, validations
from .worker import MAX_SLOTS

KIND = "WorkerPool"
PLURAL = "workerpools"
SHORT_NAMES = ["spool"]

# The pod annotation the ReplicaSet controller reads to choose which pods a scale-down deletes (lowest first); the
# operator sets it on the idle workers it retires, and on no other pod.
POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
RETIRE_COST = "-2147483648"  # int32's least: deleted before any pod the user gave a cost
MAX_REPLICAS = 1000


class ScaleTargetRef(Model):
    """The workload whose replicas the operator sets (its `scale` subresource only, as an HPA)."""

    api_version: Literal["apps/v1"] = Field(default="apps/v1", description="apps/v1.")
    kind: Literal["Deployment"] = Field(default="Deployment", description="Deployment.")
    name: str = Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN,
                      description="The Deployment's name, in the WorkerPool's namespace.")


class WorkerPoolSpec(Model):
    scale_target_ref: ScaleTargetRef = Field(description="The Deployment of `sextant worker` pods to scale.")
    queues: list[str] = Field(default_factory=list, max_length=256, description=(
        "The queues its workers serve (their --queue list): their jobs are the demand. Empty: every Queue of the "
        "namespace, as a worker without --queue serves."))
    handlers: list[str] = Field(default_factory=list, max_length=256, description=(
        "Only these handlers' jobs count (give the workers' --handler list when several pools share a queue); "
        "empty: every worker-mode Handler's."))
    slots_per_worker: int = Field(default=8, ge=1, le=MAX_SLOTS,
                                  description="Attempts one worker runs at once: its --concurrency (default 8).")
    min_replicas: int = Field(default=0, ge=0, le=MAX_REPLICAS,
                              description="The fewest workers; 0 scales to zero when nothing is queued, running or due.")
    max_replicas: int = Field(default=10, ge=1, le=MAX_REPLICAS, description="The most workers.")
    lead_time: Duration = Field(default="30s", description=(
        "Jobs due within this long (runAt, a retry's backoff) count as demand already, so that workers are up when "
        "they become runnable."))
    scale_down_delay: Duration = Field(default="60s", description=(
        "A scale-down follows the highest replica count wanted within this window (no flapping); a scale-up is "
        "immediate."))

    model_config = Model.model_config | {
        "json_schema_extra": validations(
            {
                "rule": "!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
                "message": "minReplicas must not be greater than maxReplicas",
                "fieldPath": ".minReplicas",
            },
        )
    }

    @field_validator("max_replicas")
    @classmethod
    def _max_not_below_min(cls, value: int, info: ValidationInfo) -> int:
        low = info.data.get("min_replicas", 0)
        if value < low:
            raise ValueError(f"maxReplicas ({value}) must not be less than minReplicas ({low})")
        return value

    @property
    def lead(self) -> timedelta:
        return parse_duration(self.lead_time)

    @property
    def window(self) -> timedelta:
        return parse_duration(self.scale_down_delay)


class WorkerPoolStatus(Model):
    """What the operator last saw and decided, written only on change."""

    observed_generation: int | None = Field(default=None, description="The spec generation last acted upon.")
    replicas: int | None = Field(default=None, description="The target's spec.replicas, as last read or written.")
    desired_replicas: int | None = Field(default=None, description=(
        "What the demand wants now: ceil((queued + running + due) / slotsPerWorker) within min and max."))
    queued: int | None = Field(default=None, description="Queued jobs of its queues and handlers.")
    running: int | None = Field(default=None, description="Running jobs of its queues and handlers.")
    due: int | None = Field(default=None, description="Scheduled or backing-off jobs due within leadTime.")
    retiring: list[str] = Field(default_factory=list, description=(
        "Workers given no new jobs, to be removed once idle (a scale-down waits for them to drain)."))
    last_scale_time: Timestamp | None = Field(default=None, description="When the operator last changed replicas.")
    conditions: list[Condition] = Field(default_factory=list, description=(
        "AbleToScale (False: the target cannot be read or written, or the spec is invalid) and ScalingLimited "
        "(True: desired is held at minReplicas or maxReplicas)."))
    message: str | None = Field(default=None, description="The latest decision, for a person.")


class WorkerPool(Model):
    spec: WorkerPoolSpec
    status: WorkerPoolStatus = Field(default_factory=WorkerPoolStatus)
