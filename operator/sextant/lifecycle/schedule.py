"""Schedules (core-concepts: Schedules): when a Schedule fires and what each fire does. Pure: no I/O, no clock.

The rules, as users see them:

Ticks
- `cron`: five fields or a macro (@yearly @annually @monthly @weekly @daily @midnight @hourly), read as
  wall-clock time in `timeZone` (IANA, default UTC), with Vixie cron's day-of-month OR day-of-week rule.
  Random and hashed fields (croniter's R and H) are refused: a tick must be the same on every replica and
  after every restart.
- Daylight saving time. A wall-clock time that does not exist (the hour skipped in spring) fires shifted
  forward by the length of the gap: "30 2 * * *" in Europe/Berlin fires at 03:30 CEST on the last Sunday of
  March. This is what Go's time package (so Kubernetes CronJob) and PEP 495 do, and it means a daily job is
  never silently skipped. A wall-clock time that happens twice (the hour repeated in autumn) fires once, at
  its first occurrence: "30 2 * * *" fires at 02:30 CEST, not again at 02:30 CET, and "@hourly" fires at
  02:00 CEST, then at 03:00 CET. Two wall-clock times that land on one instant (02:00 shifted to 03:00
  meets 03:00 itself) fire once. For a steady period in real time, use `interval` (or timeZone UTC).
- `interval`: ticks at whole multiples of the interval since the Unix epoch, in UTC: "30s" fires at :00 and
  :30 of every minute, "1h" on every hour. No time zone applies. The minimum is 1s.
- `jitter`: the job of a tick is created up to `jitter` later: a delay in [0, jitter) from a hash of the
  Schedule's uid and the tick, so it is the same after a restart and on every replica, and differs between
  schedules (a fleet does not fire in the same second). The job's scheduled time stays the tick. Ticks fire
  in order: a tick whose delay ends first waits for the one before it.

Counting
- `status.evaluatedUntil`: every tick up to this time has been handled, fired or skipped, and never fires
  again. A new Schedule counts from its creation. A changed spec (including suspend and resume) counts from
  when the operator sees the change: ticks before it are not made up.
- `suspend`: no tick fires. Ticks while suspended are skipped, since resuming is a spec change.

Missed runs
- A tick is missed when its fire time passed while no operator was running (before `online_since`, the
  moment the operator's view became complete), or when it is evaluated more than LATE after its fire time
  (a paused process, an unreachable API server). Missed ticks follow `missedRunPolicy`: Skip (fire none of
  them), Once (fire only the latest), All (fire each one, the latest MAX_CATCH_UP at most). A tick whose fire
  time is more than `startingDeadline` ago is skipped whatever the policy.

Concurrency (the schedule's active jobs are its jobs that are not succeeded, dead or cancelled)
- Allow: every tick creates a job. Forbid: a tick is skipped while any job is active. Replace: every active
  job is cancelled through `status.cancelRequested` (so the operator never writes a Job's spec), and the
  tick's job is created at once; of several ticks fired in one evaluation only the last is created.

History
- Finished jobs beyond `successfulJobsHistoryLimit` (succeeded) and `failedJobsHistoryLimit` (dead or
  cancelled) are deleted, oldest tick first. Only jobs of ticks up to `evaluatedUntil` are deleted: the job
  is the proof that its tick fired until the status says so.

Identity
- A tick's job is named `idempotency.keyed_name(namespace, "schedule/<name>/<tick>")` (`job-` and 8
  characters, like every keyed job), carries that key as spec.idempotencyKey, the label sextant.dev/schedule
  and the annotation sextant.dev/scheduled-at (the tick, RFC 3339 in UTC), and is owned by the Schedule (so
  deleting the Schedule deletes its jobs). Two replicas, or one operator before and after a crash, race for
  one name; the API server lets exactly one create win.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterError

from .idempotency import keyed_name
from .lifecycle.transitions import Event
from .resources import API_VERSION
from .resources.common import Condition, format_time, parse_duration, parse_time, time_or_none
from .resources.job import State, payload_refusal
from .resources.schedule import KIND, ScheduleSpec, ScheduleStatus

LABEL_SCHEDULE = "sextant.dev/schedule"
ANNOTATION_SCHEDULED_AT = "sextant.dev/scheduled-at"

COND_READY, COND_INVALID, COND_SUSPENDED = "Ready", "Invalid", "Suspended"

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MIN_INTERVAL = timedelta(seconds=1)
MIN_STARTING_DEADLINE = timedelta(seconds=1)
# A tick evaluated this long after its fire time was missed, even though the operator was running.
LATE = timedelta(seconds=10)
# At most this many missed ticks are fired by one evaluation (policy All); older ones are skipped.
MAX_CATCH_UP = 100
# No time zone moves its clocks by more than this at once (the largest, 2 h, is historical double summer time).
MAX_SHIFT = timedelta(hours=3)
MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
MAX_NAME = 63  # the name is the value of the label sextant.dev/schedule on every job

_UNSTABLE_FIELD = re.compile(r"(^|[,/\-(])[HRhr]($|[,/\-(])")
_FINISHED = frozenset({State.SUCCEEDED, State.DEAD, State.CANCELLED})


class InvalidSchedule(ValueError):
    """A schedule that cannot fire: `reason` is the condition's reason, the message says why and what to do."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


# ============================================================================================ ticks
def zone_of(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidSchedule(
            "InvalidTimeZone",
            f"timeZone {name!r} is not an IANA time zone (e.g. UTC, Europe/Berlin, America/New_York)",
        ) from None


def check_cron(expression: str) -> None:
    """Raise InvalidSchedule unless `expression` is five cron fields or a macro that can fire."""
    text = expression.strip()
    if text.startswith("@"):
        if text not in MACROS:
            raise InvalidSchedule("InvalidCron", f"cron {expression!r}: unknown macro; use one of {', '.join(MACROS)}")
        return
    fields = text.split()
    if len(fields) != 5:
        raise InvalidSchedule(
            "InvalidCron",
            f"cron {expression!r} has {len(fields)} fields; use five (minute hour day-of-month month day-of-week)",
        )
    for value in fields:
        if _UNSTABLE_FIELD.search(value):
            raise InvalidSchedule(
                "InvalidCron",
                f"cron {expression!r}: random (R) and hashed (H) fields are not supported; a tick must be the "
                "same on every replica and after every restart",
            )
    try:
        croniter(text, datetime(2000, 1, 1)).get_next(datetime)
    except CroniterError as exc:
        detail = str(exc) or type(exc).__name__
        if "failed to find next date" in detail:
            detail = "it matches no date (e.g. February 30)"
        raise InvalidSchedule("InvalidCron", f"cron {expression!r} is not valid: {detail}") from None


def _instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """A wall-clock time → the instant it fires: the first occurrence of a repeated time (fold=0), and a time
    in a gap shifted forward by the gap (fold=0 reads it with the offset from before the change)."""
    return wall.replace(tzinfo=zone, fold=0).astimezone(timezone.utc)


def _wall(moment: datetime, zone: ZoneInfo) -> datetime:
    return moment.astimezone(zone).replace(tzinfo=None)


def _cron_next(expression: str, zone: ZoneInfo, after: datetime) -> datetime:
    """The first instant after `after` at which the expression fires in `zone`.

    croniter walks naive wall-clock times (plain calendar arithmetic); _instant maps each to its instant.
    That map only runs backwards for times in a gap (shifted forward past times after the gap), so the walk
    starts up to one shift earlier when a change is near, and looks one shift beyond a shifted candidate.
    """
    start = after
    if (after - MAX_SHIFT).astimezone(zone).utcoffset() != after.astimezone(zone).utcoffset():
        start = after - MAX_SHIFT  # a gap just before `after` may have shifted a time past it
    walls = croniter(expression, _wall(start, zone))
    best: datetime | None = None
    horizon: datetime | None = None
    while True:
        wall = walls.get_next(datetime)
        if horizon is not None and wall >= horizon:
            return best  # type: ignore[return-value]
        moment = _instant(wall, zone)
        if moment <= after:
            continue
        if best is None or moment < best:
            best = moment
        if horizon is None:
            shift = _wall(moment, zone) - wall  # > 0 only for a time in a gap
            if shift <= timedelta(0):
                return best
            horizon = wall + shift


def _interval_next(interval: timedelta, after: datetime) -> datetime:
    step = interval // timedelta(microseconds=1)
    elapsed = (after - EPOCH) // timedelta(microseconds=1)
    return EPOCH + timedelta(microseconds=(elapsed // step + 1) * step)


@dataclass(frozen=True)
class Rule:
    """When a valid schedule ticks."""

    cron: str | None
    interval: timedelta | None
    zone: ZoneInfo

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after `moment` (an aware datetime); always in UTC."""
        if self.interval is not None:
            return _interval_next(self.interval, moment)
        try:
            return _cron_next(self.cron.strip(), self.zone, moment)
        except CroniterError as exc:  # e.g. no match within croniter's search window
            raise InvalidSchedule("InvalidCron", f"cron {self.cron!r} cannot be evaluated: {exc}") from None

    def ticks(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """The ticks in (after, until]."""
        tick = self.next_after(after)
        while tick <= until:
            yield tick
            tick = self.next_after(tick)

    def describe(self) -> str:
        if self.interval is not None:
            return f"fires every {_duration_text(self.interval)} (at multiples of it since the Unix epoch, UTC)"
        return f"fires on cron {self.cron!r} in {self.zone.key}"


def _duration_text(delta: timedelta) -> str:
    from .resources.common import format_duration

    return format_duration(delta)


def compile_rule(spec: ScheduleSpec, name: str = "") -> Rule:
    """The Rule of a spec, or InvalidSchedule saying what is wrong (the Invalid condition's reason and message)."""
    if name and len(name) > MAX_NAME:
        raise InvalidSchedule("InvalidName", f"a Schedule's name must be at most {MAX_NAME} characters: it is the "
                                             f"value of the label {LABEL_SCHEDULE} on its jobs")
    if (spec.cron is None) == (spec.interval is None):
        raise InvalidSchedule("InvalidSpec", "set exactly one of cron and interval")
    template = spec.job_template
    too_large = payload_refusal(template.payload) if template is not None else None  # each job would be refused
    if too_large:
        raise InvalidSchedule("PayloadTooLarge", f"spec.jobTemplate.payload: {too_large}")
    zone = zone_of(spec.time_zone)
    durations = {}
    for field_name, value in (("interval", spec.interval), ("jitter", spec.jitter),
                              ("startingDeadline", spec.starting_deadline)):
        if value is not None:
            try:
                durations[field_name] = parse_duration(value)
            except ValueError as exc:
                raise InvalidSchedule("InvalidSpec", f"{field_name}: {exc}") from None
    if spec.interval is not None and durations["interval"] < MIN_INTERVAL:
        raise InvalidSchedule("InvalidInterval", f"interval {spec.interval!r} is shorter than the minimum, 1s")
    if durations["startingDeadline"] < MIN_STARTING_DEADLINE:
        raise InvalidSchedule("InvalidSpec", f"startingDeadline {spec.starting_deadline!r} is shorter than the "
                                             "minimum, 1s")
    if spec.cron is not None:
        check_cron(spec.cron)
    return Rule(spec.cron, durations.get("interval"), zone)


def check(spec: ScheduleSpec, name: str = "") -> InvalidSchedule | None:
    """None for a spec that can fire, else what is wrong with it."""
    try:
        compile_rule(spec, name)
    except InvalidSchedule as exc:
        return exc
    return None


def jitter_delay(uid: str, tick: datetime, jitter: timedelta | None) -> timedelta:
    """The delay in [0, jitter) of this tick's job: a hash of the schedule's uid and the tick."""
    if not jitter or jitter <= timedelta(0):
        return timedelta(0)
    digest = hashlib.sha256(f"{uid}\0{format_tick(tick)}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return timedelta(microseconds=int(fraction * (jitter // timedelta(microseconds=1))))


def format_tick(tick: datetime) -> str:
    """RFC 3339 in UTC, in whole seconds unless the tick has a fraction."""
    return format_time(tick, precise=bool(tick.microsecond))


# ============================================================================================ jobs
@dataclass(frozen=True)
class JobRef:
    """What the schedule needs to know of one of its jobs (the ones labelled sextant.dev/schedule=NAME)."""

    name: str
    state: State | None = None
    scheduled_at: datetime | None = None
    created_at: datetime | None = None
    cancel_requested: bool = False
    resource_version: str = ""
    uid: str = ""
    idempotency_key: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in _FINISHED

    @staticmethod
    def of(raw: dict[str, Any]) -> JobRef:
        meta, status, spec = raw["metadata"], raw.get("status") or {}, raw.get("spec") or {}
        try:
            state = State(status["state"]) if status.get("state") else None
        except ValueError:
            state = None
        try:
            scheduled = parse_time((meta.get("annotations") or {}).get(ANNOTATION_SCHEDULED_AT))
        except ValueError:
            scheduled = None
        return JobRef(
            name=meta["name"],
            state=state,
            scheduled_at=scheduled,
            created_at=time_or_none(meta.get("creationTimestamp")),
            cancel_requested=bool(status.get("cancelRequested")) or bool(spec.get("cancel")),
            resource_version=meta.get("resourceVersion", ""),
            uid=meta.get("uid", ""),
            idempotency_key=spec.get("idempotencyKey"),
        )


def _order(job: JobRef) -> tuple[datetime, str]:
    return (job.scheduled_at or job.created_at or EPOCH, job.name)


def idempotency_key(schedule: str, tick: datetime) -> str:
    return f"schedule/{schedule}/{format_tick(tick)}"


def job_name(namespace: str, schedule: str, tick: datetime, generation: int = 0) -> str:
    """The name of the tick's job; `generation` > 0 only if another object already holds the name."""
    return keyed_name(namespace, idempotency_key(schedule, tick), generation)


@dataclass(frozen=True)
class ScheduleSnapshot:
    namespace: str
    name: str
    uid: str
    generation: int
    created_at: datetime
    spec: ScheduleSpec
    status: ScheduleStatus


def build_job(schedule: ScheduleSnapshot, tick: datetime, *, key: str | None = None,
              generation: int = 0) -> dict[str, Any]:
    """The Job a tick creates (or, with another `key`, a job fired by hand for the schedule at `tick`)."""
    template = schedule.spec.job_template
    key = key or idempotency_key(schedule.name, tick)
    return {
        "apiVersion": API_VERSION,
        "kind": "Job",
        "metadata": {
            "name": keyed_name(schedule.namespace, key, generation),
            "namespace": schedule.namespace,
            "labels": {LABEL_SCHEDULE: schedule.name},
            "annotations": {ANNOTATION_SCHEDULED_AT: format_tick(tick)},
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": KIND, "name": schedule.name,
                                 "uid": schedule.uid, "controller": True}],
        },
        "spec": {
            "queue": template.queue,
            "handler": template.handler,
            "payload": copy.deepcopy(template.payload),
            "priority": template.priority,
            "idempotencyKey": key,
        },
    }


def concurrency(policy: str, active: Iterable[JobRef]) -> tuple[bool, list[JobRef]]:
    """For a tick: (create its job?, the active jobs to cancel first)."""
    active = list(active)
    if policy == "Forbid":
        return not active, []
    if policy == "Replace":
        return True, [j for j in active if not j.cancel_requested]
    return True, []


def history_to_delete(jobs: Iterable[JobRef], succeeded_limit: int, failed_limit: int,
                      until: datetime | None = None) -> list[str]:
    """Finished jobs beyond the history limits, oldest first; only jobs of ticks up to `until` (if given)."""
    jobs = [j for j in jobs if until is None or j.scheduled_at is None or j.scheduled_at <= until]
    succeeded = sorted((j for j in jobs if j.state == State.SUCCEEDED), key=_order, reverse=True)
    failed = sorted((j for j in jobs if j.state in (State.DEAD, State.CANCELLED)), key=_order, reverse=True)
    doomed = succeeded[max(succeeded_limit, 0):] + failed[max(failed_limit, 0):]
    return [j.name for j in sorted(doomed, key=_order)]


# ============================================================================================ evaluation
@dataclass(frozen=True)
class Fire:
    tick: datetime
    due: datetime  # the tick plus its jitter: when the job should appear
    job: dict[str, Any]


@dataclass
class Decision:
    status: ScheduleStatus
    create: list[Fire] = field(default_factory=list)  # oldest tick first
    cancel: list[tuple[str, str]] = field(default_factory=list)  # (job, status.cancelRequested text)
    delete: list[str] = field(default_factory=list)  # after the status is stored
    events: list[Event] = field(default_factory=list)
    wake_at: datetime | None = None


def set_condition(conditions: list[Condition], type_: str, status: bool, reason: str, message: str,
                  now: datetime, generation: int | None) -> None:
    value = "True" if status else "False"
    for i, cond in enumerate(conditions):
        if cond.type == type_:
            since = cond.last_transition_time if cond.status == value else format_time(now, precise=False)
            conditions[i] = Condition(type=type_, status=value, reason=reason, message=message,
                                      last_transition_time=since, observed_generation=generation)
            return
    conditions.append(Condition(type=type_, status=value, reason=reason, message=message,
                                last_transition_time=format_time(now, precise=False), observed_generation=generation))


def _condition(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def _span(ticks: list[datetime]) -> str:
    if len(ticks) == 1:
        return f"tick {format_tick(ticks[0])}"
    return f"{len(ticks)} ticks from {format_tick(ticks[0])} to {format_tick(ticks[-1])}"


def _active_names(jobs: Iterable[JobRef]) -> list[str]:
    return [j.name for j in sorted((j for j in jobs if not j.finished), key=_order)]


def invalid(status: ScheduleStatus, generation: int, reason: str, message: str, now: datetime,
            jobs: Iterable[JobRef] = (), suspended: bool = False) -> Decision:
    """The decision for a schedule that cannot fire: conditions say why, nothing fires, no wake-up."""
    jobs = list(jobs)
    st = status.model_copy(deep=True)
    before = _condition(st.conditions, COND_INVALID)
    set_condition(st.conditions, COND_INVALID, True, reason, message, now, generation)
    set_condition(st.conditions, COND_READY, False, reason, message, now, generation)
    set_condition(st.conditions, COND_SUSPENDED, suspended, "Suspended" if suspended else "Active",
                  "spec.suspend is true" if suspended else "spec.suspend is false", now, generation)
    st.next_schedule_time = None
    st.active = _active_names(jobs)
    st.observed_generation = generation
    decision = Decision(st)
    if before is None or before.status != "True" or before.message != message:
        decision.events.append(Event(reason, message, "Warning"))
    return decision


def evaluate(schedule: ScheduleSnapshot, jobs: Iterable[JobRef], now: datetime, online_since: datetime) -> Decision:
    """Everything a schedule should do now, given its jobs: level-triggered, so evaluating again with the same
    inputs decides the same (a tick whose job exists counts as fired; creating it again answers AlreadyExists).

    `online_since`: when this operator's view became complete; fire times before it passed while no operator
    was watching, so those ticks are missed runs.
    """
    jobs = list(jobs)
    spec = schedule.spec
    try:
        return _evaluate(schedule, jobs, now, online_since)
    except InvalidSchedule as exc:
        decision = invalid(schedule.status, schedule.generation, exc.reason, exc.message, now, jobs, spec.suspend)
        cursor = parse_time(schedule.status.evaluated_until)
        decision.delete = history_to_delete(jobs, spec.successful_jobs_history_limit, spec.failed_jobs_history_limit,
                                            cursor or schedule.created_at)
        return decision


def _evaluate(schedule: ScheduleSnapshot, jobs: list[JobRef], now: datetime, online_since: datetime) -> Decision:
    spec = schedule.spec
    gen = schedule.generation
    rule = compile_rule(spec, schedule.name)
    st = schedule.status.model_copy(deep=True)
    decision = Decision(st)
    cursor = parse_time(st.evaluated_until) or schedule.created_at
    if st.observed_generation is not None and st.observed_generation != gen:
        cursor = max(cursor, now)  # a changed spec counts from now: no tick before the change is made up
    set_condition(st.conditions, COND_INVALID, False, "Valid", "the schedule is valid", now, gen)
    st.observed_generation = gen

    if spec.suspend:
        set_condition(st.conditions, COND_SUSPENDED, True, "Suspended",
                      "spec.suspend is true: no tick fires; ticks while suspended are skipped", now, gen)
        set_condition(st.conditions, COND_READY, False, "Suspended", "suspended", now, gen)
        st.next_schedule_time = None
        st.evaluated_until = format_tick(cursor)
        st.active = _active_names(jobs)
        decision.delete = history_to_delete(jobs, spec.successful_jobs_history_limit, spec.failed_jobs_history_limit,
                                            cursor)
        return decision
    set_condition(st.conditions, COND_SUSPENDED, False, "Active", "spec.suspend is false", now, gen)
    set_condition(st.conditions, COND_READY, True, "Scheduled", rule.describe(), now, gen)

    deadline = parse_duration(spec.starting_deadline)
    jitter = parse_duration(spec.jitter) if spec.jitter else None
    max_jitter = jitter or timedelta(0)

    def due_at(tick: datetime) -> datetime:
        return tick + jitter_delay(schedule.uid, tick, jitter)

    # Ticks this far back are more than startingDeadline late whatever their jitter: jump over them at once.
    start = cursor
    horizon = now - deadline - max_jitter - timedelta(seconds=1)
    expired: list[datetime] = []
    if cursor < horizon and rule.next_after(cursor) <= horizon:
        expired_from = rule.next_after(cursor)
        start = horizon
    else:
        expired_from = None

    due: deque[datetime] = deque(maxlen=10 * MAX_CATCH_UP)  # the latest due ticks; older ones are skipped
    first_dropped: datetime | None = None
    tick = rule.next_after(start)
    while due_at(tick) <= now:
        if len(due) == due.maxlen and first_dropped is None:
            first_dropped = due[0]
        due.append(tick)
        tick = rule.next_after(tick)
    upcoming = tick

    # The jobs ticks created (a job fired by hand, e.g. `sextant schedules trigger`, has its own key).
    by_tick = {j.scheduled_at: j for j in jobs
               if j.scheduled_at is not None and j.idempotency_key == idempotency_key(schedule.name, j.scheduled_at)}
    fired: list[tuple[datetime, str]] = []  # (tick, job) of ticks that have a job
    missed: list[datetime] = []
    on_time: list[datetime] = []
    for tick in due:
        existing = by_tick.get(tick)
        if existing is not None:
            fired.append((tick, existing.name))
            continue
        lateness = now - due_at(tick)
        if lateness > deadline:
            expired.append(tick)
        elif due_at(tick) < online_since or lateness > LATE:
            missed.append(tick)
        else:
            on_time.append(tick)

    if expired_from is not None or expired or first_dropped is not None:
        first = min(t for t in (expired_from, first_dropped, *expired[:1]) if t is not None)
        last = expired[-1] if expired else (due[0] - timedelta(microseconds=1) if first_dropped else horizon)
        decision.events.append(Event(
            "MissedDeadline",
            f"ticks from {format_tick(first)} to {format_tick(last)} were more than startingDeadline "
            f"({spec.starting_deadline}) late and were skipped", "Warning"))

    chosen: list[datetime] = []
    if missed:
        policy = spec.missed_run_policy
        if policy == "All":
            chosen = missed[-MAX_CATCH_UP:]
            skipped = missed[:-MAX_CATCH_UP]
            what = f"firing {'each' if not skipped else f'the latest {MAX_CATCH_UP}'}"
        elif policy == "Once":
            chosen = missed[-1:]
            what = f"firing only the latest ({format_tick(missed[-1])})"
        else:
            what = "skipping them"
        decision.events.append(Event(
            "MissedTicks", f"{_span(missed)} missed (operator down or late); missedRunPolicy {policy}: {what}"))
    to_fire = sorted(chosen + on_time)

    active = [j for j in jobs if not j.finished]
    policy = spec.concurrency_policy
    if policy == "Replace" and len(to_fire) > 1:
        decision.events.append(Event("Replaced", f"{_span(to_fire[:-1])} replaced by the later tick "
                                                 f"{format_tick(to_fire[-1])} before starting "
                                                 "(concurrencyPolicy Replace)"))
        to_fire = to_fire[-1:]
    forbidden: list[datetime] = []
    blockers: list[JobRef] = []
    for tick in to_fire:
        create, cancel = concurrency(policy, active)
        if not create:
            forbidden.append(tick)
            blockers = active
            continue
        for job in cancel:
            reason = f"replaced by schedule {schedule.name}'s tick {format_tick(tick)}"
            decision.cancel.append((job.name, reason))
            decision.events.append(Event("Replacing", f"cancelling job {job.name}: {reason} (concurrencyPolicy "
                                                      "Replace)"))
        body = build_job(schedule, tick)
        name = body["metadata"]["name"]
        decision.create.append(Fire(tick, due_at(tick), body))
        fired.append((tick, name))
        active.append(JobRef(name=name, scheduled_at=tick, created_at=now,
                             idempotency_key=body["spec"]["idempotencyKey"]))

    # One event per blocking job, not one per tick: a job that was already active at the previous tick was reported.
    previous = parse_time(schedule.status.evaluated_until)
    if forbidden and (previous is None or any(j.scheduled_at is None or j.scheduled_at >= previous for j in blockers)):
        decision.events.append(Event(
            "TickSkipped", f"{_span(forbidden)} skipped while job {', '.join(j.name for j in blockers)} is still "
                           "active (concurrencyPolicy Forbid); later ticks are skipped until it finishes"))

    if fired:
        tick, name = max(fired)
        last = parse_time(st.last_schedule_time)
        if last is None or tick >= last:
            st.last_schedule_time = format_tick(tick)
            st.last_job = name
    if due:
        cursor = max(cursor, due[-1])
    elif expired_from is not None:
        cursor = max(cursor, start)
    st.evaluated_until = format_tick(cursor)
    st.next_schedule_time = format_tick(upcoming)
    st.active = _active_names(active)  # a job being cancelled (Replace) stays active until it finishes
    decision.wake_at = due_at(upcoming)
    decision.delete = history_to_delete(jobs, spec.successful_jobs_history_limit, spec.failed_jobs_history_limit,
                                        cursor)
    return decision
