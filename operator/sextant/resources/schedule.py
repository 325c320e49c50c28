"""Schedule: creates jobs on a cron expression or a fixed interval (core-concepts: Schedules)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .common import Condition, Duration, Model, validations

KIND = "Schedule"
PLURAL = "schedules"
SHORT_NAMES = ["ssched"]

# Five fields, or one of the macros croniter knows.
CRON_PATTERN = r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|\S+(\s+\S+){4})$"


class JobTemplate(Model):
    queue: str = Field(min_length=1, description="The Queue of the jobs it creates.")
    handler: str = Field(min_length=1, description="The Handler of the jobs it creates.")
    payload: dict[str, Any] = Field(
        default_factory=dict,
        description="The payload of every job it creates.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    priority: int = Field(default=0, description="The jobs' priority.")


class ScheduleSpec(Model):
    cron: str | None = Field(
        default=None,
        max_length=256,
        pattern=CRON_PATTERN,
        description='Five cron fields ("0 2 * * *") or a macro (@hourly, @daily, ...). Exclusive with interval.',
    )
    interval: Duration | None = Field(default=None, description="Fire every interval. Exclusive with cron.")
    time_zone: str = Field(default="UTC", max_length=64, description="IANA time zone the cron expression is read in.")
    jitter: Duration | None = Field(default=None, description="A bounded random delay per fire, fixed per tick.")
    job_template: JobTemplate = Field(description="What each fire creates.")
    concurrency_policy: Literal["Allow", "Forbid", "Replace"] = Field(
        default="Allow", description="Allow overlapping jobs, Forbid (skip a tick) or Replace (cancel the running one)."
    )
    missed_run_policy: Literal["Skip", "Once", "All"] = Field(
        default="Once", description="After downtime: Skip missed ticks, run Once for all of them, or All of them."
    )
    starting_deadline: Duration = Field(default="1h", description="Missed ticks older than this are skipped.")
    suspend: bool = Field(default=False, description="Stop firing; missed ticks while suspended are skipped.")
    successful_jobs_history_limit: int = Field(default=3, ge=0, description="Finished jobs to keep.")
    failed_jobs_history_limit: int = Field(default=1, ge=0, description="Dead jobs to keep.")

    model_config = Model.model_config | {
        "json_schema_extra": validations(
            {"rule": "has(self.cron) != has(self.interval)", "message": "set exactly one of cron and interval"},
        )
    }


class ScheduleStatus(Model):
    last_schedule_time: str | None = Field(default=None, description="The tick of the last job created.")
    next_schedule_time: str | None = Field(default=None, description="The next tick.")
    active: list[str] = Field(default_factory=list, description="Jobs of this schedule not yet finished.")
    last_job: str | None = Field(default=None, description="The last job created.")
    conditions: list[Condition] = Field(default_factory=list, description="Ready, Suspended, Invalid.")
    observed_generation: int | None = Field(default=None, description="The spec generation last acted upon.")


class Schedule(Model):
    spec: ScheduleSpec
    status: ScheduleStatus = Field(default_factory=ScheduleStatus)
