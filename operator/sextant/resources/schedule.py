"""Schedule: creates jobs on a cron expression or a fixed interval (README, "Schedules")."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator

from .common import NAME_MAX, NAME_PATTERN, Condition, Duration, Model, Timestamp, validations
from .job import CONCURRENCY_KEY_MAX, MAX_PRIORITY, MIN_PRIORITY, check_payload

KIND = "Schedule"
PLURAL = "schedules"
SHORT_NAMES = ["ssched"]

# --- cron: the grammar the CRD (CEL), the models and the operator (lifecycle/schedule.py) all accept -------------
MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
# Five fields separated by spaces or tabs, or a macro: the shape, as the schema's pattern (RE2 and Python agree on
# every construct used here). Each field's values are checked by a rule of its own (CRON_FIELDS).
CRON_PATTERN = rf"^({'|'.join(MACROS)}|[^ \t]+([ \t]+[^ \t]+){{4}})$"
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


@dataclass(frozen=True)
class CronField:
    """One of the five fields: its values (numbers lowest..highest, with an optional leading zero below 10, or
    names in any case), as * (every), ? (day fields only: every), L (day of month only: the last day), a value,
    a range a-b (a > b wraps around), a step */n, a-b/n or a/n (from a to the highest), or a comma-separated list
    of values, ranges and steps. croniter takes more (W, #, L in day-of-week, * in lists), which no rule here
    accepts: Sextant's cron is this, in the CRD, the models and the operator alike."""

    name: str
    lowest: int
    highest: int
    names: tuple[str, ...] = ()
    question_mark: bool = False
    last: bool = False  # day-of-month: L, the month's last day, alone or ending a range (15-L, 1-L/2)

    @property
    def pattern(self) -> str:
        """The field's regular expression, unanchored (the same in RE2, for CEL, and in Python)."""
        numbers = [f"0?{n}" if n < 10 else str(n) for n in range(self.highest, self.lowest - 1, -1)]
        value = "|".join(numbers + ([f"(?i:{'|'.join(self.names)})"] if self.names else []))
        value, step = f"({value})", "/[1-9][0-9]*"
        high = f"({value}|(?i:l))" if self.last else value
        item = rf"(\*{step}|{value}(-{high})?({step})?{'|(?i:l)' if self.last else ''})"
        whole = r"\*|\?" if self.question_mark else r"\*"
        return f"({whole}|{item}(,{item})*)"

    @property
    def rule(self) -> str:
        names = f" or {self.names[0]}-{self.names[-1]}" if self.names else ""
        question = (", ?" if self.question_mark else "") + (", L (the last day)" if self.last else "")
        return (f"the {self.name} field must be {self.lowest}-{self.highest}{names}, *{question}, a range (a-b), "
                "a step (*/n, a-b/n, a/n), or a list of these (a,b-c)")


CRON_FIELDS = (
    CronField("minute", 0, 59),
    CronField("hour", 0, 23),
    CronField("day-of-month", 1, 31, question_mark=True, last=True),
    CronField("month", 1, 12, _MONTHS),
    CronField("day-of-week", 0, 7, _DAYS, question_mark=True),  # 0 and 7 are both Sunday
)
_CRON_FIELD_RES = tuple(re.compile(f.pattern) for f in CRON_FIELDS)


def _cron_field_rule(index: int) -> dict[str, str]:
    """The CEL rule for one field (a macro has none; a wrong shape is the pattern's to report): the API server
    names spec.cron and the field's rule. Raw strings (r'...'): CEL passes the regular expression as written."""
    before, after = r"[^ \t]+[ \t]+" * index, r"[ \t]+[^ \t]+" * (4 - index)
    regex = f"^{before}{CRON_FIELDS[index].pattern}{after}$"
    return {"rule": f"self.startsWith('@') || !self.matches(r'{CRON_PATTERN}') || self.matches(r'{regex}')",
            "message": f"cron: {CRON_FIELDS[index].rule}"}


def cron_problem(expression: str) -> str | None:
    """What is wrong with a cron expression's shape or its fields' values, or None. Whether it ever matches a date
    (February 30) is the operator's to find (lifecycle/schedule.py, the Invalid condition)."""
    if expression.startswith("@"):
        return None if expression in MACROS else f"unknown macro; use one of {', '.join(MACROS)}"
    if not re.fullmatch(CRON_PATTERN, expression):
        count = len(expression.split())
        if expression.strip() != expression and (count == 5 or expression.strip() in MACROS):
            return "remove the spaces before or after it"
        if count == 5:
            return "separate the five fields by spaces or tabs"
        return (f"it has {count} field{'' if count == 1 else 's'}; use five (minute hour day-of-month month "
                "day-of-week) or a macro")
    for field, value, regex in zip(CRON_FIELDS, re.split(r"[ \t]+", expression), _CRON_FIELD_RES):
        if not regex.fullmatch(value):
            return f"{value!r}: {field.rule}"
    return None


# The shape of an IANA time zone name ("UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+1").
# Whether the zone exists cannot be checked at admission: the operator reports it in the Invalid condition.
TIME_ZONE_PATTERN = r"^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*$"


class JobTemplate(Model):
    queue: str = Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN,
                       description="The Queue of the jobs it creates: an object name.")
    handler: str = Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN,
                         description="The Handler of the jobs it creates: an object name.")
    payload: dict[str, Any] = Field(
        default_factory=dict,
        description="The payload of every job it creates.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    priority: int = Field(default=0, ge=MIN_PRIORITY, le=MAX_PRIORITY, description="The jobs' priority.")
    concurrency_key: str | None = Field(
        default=None, min_length=1, max_length=CONCURRENCY_KEY_MAX,
        description="The concurrency key of every job it creates (the Job's spec.concurrencyKey).")

    _payload_depth = field_validator("payload", mode="before")(check_payload)


class ScheduleSpec(Model):
    cron: str | None = Field(
        default=None,
        max_length=256,
        description='Five cron fields ("0 2 * * *": minute 0-59, hour 0-23, day-of-month 1-31 or L (the last), '
        'month 1-12 or jan-dec, '
        'day-of-week 0-7 or sun-sat; each *, a value, a range a-b, a step */n, a-b/n or a/n, or a list) or a macro '
        '(@hourly, @daily, ...). Exclusive with interval.',
        # The pattern in the schema only: the model's own check (cron_problem) says what is wrong in words.
        json_schema_extra={"pattern": CRON_PATTERN,
                           **validations(*(_cron_field_rule(i) for i in range(len(CRON_FIELDS))))},
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

    @field_validator("cron")
    @classmethod
    def _cron_fields(cls, value: str | None) -> str | None:
        problem = None if value is None else cron_problem(value)
        if problem:
            raise ValueError(problem)
        return value


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
