"""Schedule: creates jobs on a cron expression or a fixed interval (README, "Schedules")."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from .common import Condition, Duration, Model, Timestamp, validations
from .job import MAX_PRIORITY, MIN_PRIORITY, check_payload

KIND = "Schedule"
PLURAL = "schedules"
SHORT_NAMES = ["ssched"]

# Five fields, or one of the macros croniter knows.
CRON_PATTERN = r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|\S+(\s+\S+){4})$"
# The shape of an IANA time zone name ("UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+1").
# Whether the zone exists cannot be checked at admission: the operator reports it in the Invalid condition.
TIME_ZONE_PATTERN = r"^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*$"


class JobTemplate(Model):
    queue: str = Field(min_length=1, max_length=63, description="The Queue of the jobs it creates.")
    handler: str = Field(min_length=1, max_length=63, description="The Handler of the jobs it creates.")
    payload: dict[str, Any] = Field(
        default_factory=dict,
        description="The payload of every job it creates.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    priority: int = Field(default=0, ge=MIN_PRIORITY, le=MAX_PRIORITY, description="The jobs' priority.")

    _payload_depth = field_validator("payload", mode="before")(check_payload)


class ScheduleSpec(Model):
    cron: str | None = Field(
        default=None,
        max_length=256,
        pattern=CRON_PATTERN,
        description='Five cron fields ("0 2 * * *") or a macro (@hourly, @daily, ...). Exclusive with interval.',
    )
    interval: Duration | None = Field(
        default=None,
        description="Fire every interval (at least 1s), at multiples of it since the Unix epoch (UTC). "
        "Exclusive with cron.",
    )
    time_zone: str = Field(
        default="UTC",
        max_length=64,
        pattern=TIME_ZONE_PATTERN,
        description="IANA time zone the cron expression is read in (not used by interval). A wall-clock time "
        "skipped by a daylight-saving change fires shifted forward by the gap; one that happens twice fires once.",
    )
    jitter: Duration | None = Field(
        default=None,
        description="Create each tick's job up to this much later: a delay in [0, jitter) fixed per tick (a hash "
        "of the schedule's uid and the tick), so a fleet of schedules does not fire in the same second.",
    )
    job_template: JobTemplate = Field(description="What each fire creates.")
    concurrency_policy: Literal["Allow", "Forbid", "Replace"] = Field(
        default="Allow", description="Allow overlapping jobs, Forbid (skip a tick) or Replace (cancel the running one)."
    )
    missed_run_policy: Literal["Skip", "Once", "All"] = Field(
        default="Once", description="After downtime: Skip missed ticks, run Once for all of them, or All of them."
    )
    starting_deadline: Duration = Field(
        default="1h", description="A tick more than this late (at least 1s) is skipped, whatever missedRunPolicy."
    )
    suspend: bool = Field(default=False, description="Stop firing; missed ticks while suspended are skipped.")
    successful_jobs_history_limit: int = Field(default=3, ge=0, description="Succeeded jobs to keep.")
    failed_jobs_history_limit: int = Field(default=1, ge=0, description="Dead or cancelled jobs to keep.")

    model_config = Model.model_config | {
        "json_schema_extra": validations(
            {"rule": "has(self.cron) != has(self.interval)", "message": "set exactly one of cron and interval"},
            {
                "rule": "!has(self.interval) || duration(self.interval) >= duration('1s')",
                "message": "interval must be at least 1s",
                "fieldPath": ".interval",
            },
            {
                "rule": "!has(self.startingDeadline) || duration(self.startingDeadline) >= duration('1s')",
                "message": "startingDeadline must be at least 1s",
                "fieldPath": ".startingDeadline",
            },
        )
    }


class ScheduleStatus(Model):
    last_schedule_time: Timestamp | None = Field(default=None, description="The tick of the last job created.")
    next_schedule_time: Timestamp | None = Field(default=None, description="The next tick.")
    active: list[str] = Field(default_factory=list, description="Jobs of this schedule not yet finished.")
    last_job: str | None = Field(default=None, description="The last job created.")
    evaluated_until: Timestamp | None = Field(
        default=None,
        description="Every tick up to this time has been handled (fired or skipped) and never fires again.",
    )
    conditions: list[Condition] = Field(default_factory=list, description="Ready, Suspended, Invalid.")
    observed_generation: int | None = Field(default=None, description="The spec generation last acted upon.")


class Schedule(Model):
    spec: ScheduleSpec
    status: ScheduleStatus = Field(default_factory=ScheduleStatus)
