"""Schedules (README, "Schedules"): when a Schedule fires and what each fire does. Pure: no I/O, no clock.

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
- A tick's job is named `keyed_name(namespace, "schedule/<name>/<tick>")` (`job-` and 8
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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterError

from ..resources import API_VERSION, contract
from ..resources.common import Condition, format_duration, format_time, parse_duration, parse_time, time_or_none
from ..resources.job import State, payload_refusal
from ..resources.schedule import KIND, MACROS, ScheduleSpec, ScheduleStatus, cron_problem
from .idempotency import keyed_name
from .states import FINISHED
from .decision import Event

LABEL_SCHEDULE, ANNOTATION_SCHEDULED_AT = contract.LABEL_SCHEDULE, contract.ANNOTATION_SCHEDULED_AT

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
MAX_NAME = 63  # the name is the value of the label sextant.dev/schedule on every job

_UNSTABLE_FIELD = re.compile(r"(^|[,/\-(])[HRhr]($|[,/\-(])")


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
    """Raise InvalidSchedule unless `expression` is five cron fields or a macro that can fire: the grammar of the
    CRD and the models (resources/schedule.py; croniter alone takes more, e.g. W and #), then a date it matches."""
    for value in expression.split():
        if _UNSTABLE_FIELD.search(value):
            raise InvalidSchedule(
                "InvalidCron",
                f"cron {expression!r}: random (R) and hashed (H) fields are not supported; a tick must be the "
                "same on every replica and after every restart",
            )
    problem = cron_problem(expression)
    if problem:
        raise InvalidSchedule("InvalidCron", f"cron {expression!r}: {problem}")
    if expression in MACROS:
        return
    try:
        croniter(expression, datetime(2000, 1, 1)).get_next(datetime)
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
            return f"fires every {format_duration(self.interval)} (at multiples of it since the Unix epoch, UTC)"
        return f"fires on cron {self.cron!r} in {self.zone.key}"


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
        return self.state in FINISHED

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


def build_job(schedule: ScheduleSnapshot, tick: datetime) -> dict[str, Any]:
    """The Job a tick creates."""
    template = schedule.spec.job_template
    key = idempotency_key(schedule.name, tick)
    return {
        "apiVersion": API_VERSION,
        "kind": "Job",
        "metadata": {
            "name": keyed_name(schedule.namespace, key),
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
            **({"concurrencyKey": template.concurrency_key} if template.concurrency_key is not None else {}),
        },
    }


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


# ============================================================================================ the steps
# One evaluation is these steps, each a pure function: the window (which ticks are due since the last evaluation),
# their lateness (fired, missed, expired or on time) and the missed-run policy, the concurrency policy, history.

@dataclass(frozen=True)
class Window:
    """The ticks from the cursor (status.evaluatedUntil) to now."""

    due: tuple[datetime, ...]  # ticks whose job is due by now (tick plus jitter), oldest first; the latest KEEP_DUE
    upcoming: datetime  # the first tick that is not due yet
    # Ticks from jumped_from to jumped_to were jumped over unseen: more than startingDeadline late whatever their
    # jitter. Ticks from dropped_from to just before due[0] were due but beyond KEEP_DUE: dropped unseen.
    jumped_from: datetime | None = None
    jumped_to: datetime | None = None
    dropped_from: datetime | None = None

    def until(self, cursor: datetime) -> datetime:
        """status.evaluatedUntil after this window: every tick up to it has been handled."""
        if self.due:
            return max(cursor, self.due[-1])
        if self.jumped_to is not None:
            return max(cursor, self.jumped_to)
        return cursor


# At most this many of the latest due ticks are looked at one by one; older ones are skipped (MissedDeadline).
KEEP_DUE = 10 * MAX_CATCH_UP


def window(rule: Rule, cursor: datetime, now: datetime, deadline: timedelta, max_jitter: timedelta,
           due_at: Callable[[datetime], datetime]) -> Window:
    """The ticks after `cursor` that are due by `now`, and the next one. Ticks so far back that they are more than
    `deadline` late whatever their jitter are jumped over at once, so a year of downtime costs no year of ticks."""
    start, jumped_from, jumped_to = cursor, None, None
    horizon = now - deadline - max_jitter - timedelta(seconds=1)
    if cursor < horizon and rule.next_after(cursor) <= horizon:
        jumped_from, start = rule.next_after(cursor), horizon
        jumped_to = horizon
    due: deque[datetime] = deque(maxlen=KEEP_DUE)
    dropped_from: datetime | None = None
    tick = rule.next_after(start)
    while due_at(tick) <= now:
        if len(due) == KEEP_DUE and dropped_from is None:
            dropped_from = due[0]
        due.append(tick)
        tick = rule.next_after(tick)
    return Window(tuple(due), tick, jumped_from, jumped_to, dropped_from)


@dataclass(frozen=True)
class Lateness:
    """The due ticks of a window, sorted by what happens to them."""

    fired: tuple[tuple[datetime, str], ...] = ()  # (tick, its job): fired before, its job exists
    expired: tuple[datetime, ...] = ()  # more than startingDeadline late: skipped whatever the policy
    missed: tuple[datetime, ...] = ()  # passed while no operator acted, or evaluated more than LATE after
    on_time: tuple[datetime, ...] = ()


def lateness(due: Iterable[datetime], fired: dict[datetime, str], now: datetime, deadline: timedelta,
             online_since: datetime, due_at: Callable[[datetime], datetime]) -> Lateness:
    """Sort due ticks: `fired` maps a tick to the job it created (a tick whose job exists counts as fired)."""
    done, expired, missed, on_time = [], [], [], []
    for tick in due:
        if tick in fired:
            done.append((tick, fired[tick]))
            continue
        late = now - due_at(tick)
        if late > deadline:
            expired.append(tick)
        elif due_at(tick) < online_since or late > LATE:
            missed.append(tick)
        else:
            on_time.append(tick)
    return Lateness(tuple(done), tuple(expired), tuple(missed), tuple(on_time))


def deadline_event(win: Window, expired: tuple[datetime, ...], starting_deadline: str) -> Event | None:
    """One Warning for every tick skipped as more than startingDeadline late: jumped over, dropped or expired."""
    if win.jumped_from is None and not expired and win.dropped_from is None:
        return None
    first = min(t for t in (win.jumped_from, win.dropped_from, *expired[:1]) if t is not None)
    if expired:
        last = expired[-1]
    elif win.dropped_from is not None:
        last = win.due[0] - timedelta(microseconds=1)
    else:
        last = win.jumped_to
    return Event("MissedDeadline", f"ticks from {format_tick(first)} to {format_tick(last)} were more than "
                                   f"startingDeadline ({starting_deadline}) late and were skipped", "Warning")


def missed_runs(missed: tuple[datetime, ...], policy: str) -> tuple[list[datetime], Event | None]:
    """missedRunPolicy: the missed ticks to fire after all, and the event that says so."""
    if not missed:
        return [], None
    chosen: list[datetime] = []
    if policy == "All":
        chosen = list(missed[-MAX_CATCH_UP:])
        what = f"firing {'each' if len(missed) <= MAX_CATCH_UP else f'the latest {MAX_CATCH_UP}'}"
    elif policy == "Once":
        chosen = list(missed[-1:])
        what = f"firing only the latest ({format_tick(missed[-1])})"
    else:
        what = "skipping them"
    return chosen, Event("MissedTicks", f"{_span(list(missed))} missed (operator down or late); missedRunPolicy "
                                        f"{policy}: {what}")


def concurrency(policy: str, active: Iterable[JobRef]) -> tuple[bool, list[JobRef]]:
    """For a tick: (create its job?, the active jobs to cancel first)."""
    active = list(active)
    if policy == "Forbid":
        return not active, []
    if policy == "Replace":
        return True, [j for j in active if not j.cancel_requested]
    return True, []


@dataclass
class Admitted:
    """The concurrency policy applied to the ticks to fire."""

    fire: list[JobRef] = field(default_factory=list)  # the ticks' jobs to create, oldest first
    cancel: list[tuple[JobRef, JobRef]] = field(default_factory=list)  # (active job, the tick's job replacing it)
    replaced: list[datetime] = field(default_factory=list)  # ticks dropped for a later one (Replace)
    forbidden: list[datetime] = field(default_factory=list)  # ticks skipped while a job is active (Forbid)
    blockers: list[JobRef] = field(default_factory=list)  # the active jobs that made them skip
    active: list[JobRef] = field(default_factory=list)  # active afterwards, with the new jobs


def admit(policy: str, ticks: list[datetime], active: list[JobRef], job_of: Callable[[datetime], JobRef]) -> Admitted:
    """Allow, Forbid or Replace over `ticks` (oldest first) given the schedule's `active` jobs. Replace of several
    ticks at once creates only the last; Forbid creates the first and skips the rest while its job is active."""
    out = Admitted(active=list(active))
    if policy == "Replace" and len(ticks) > 1:
        out.replaced, ticks = ticks[:-1], ticks[-1:]
    for tick in ticks:
        create, cancel = concurrency(policy, out.active)
        if not create:
            out.forbidden.append(tick)
            out.blockers = out.active
            continue
        job = job_of(tick)
        out.cancel += [(old, job) for old in cancel]
        out.fire.append(job)
        out.active = [*out.active, job]
    return out


def history_to_delete(jobs: Iterable[JobRef], succeeded_limit: int, failed_limit: int,
                      until: datetime | None = None) -> list[str]:
    """Finished jobs beyond the history limits, oldest first; only jobs of ticks up to `until` (if given)."""
    jobs = [j for j in jobs if until is None or j.scheduled_at is None or j.scheduled_at <= until]
    succeeded = sorted((j for j in jobs if j.state == State.SUCCEEDED), key=_order, reverse=True)
    failed = sorted((j for j in jobs if j.state in (State.DEAD, State.CANCELLED)), key=_order, reverse=True)
    doomed = succeeded[max(succeeded_limit, 0):] + failed[max(failed_limit, 0):]
    return [j.name for j in sorted(doomed, key=_order)]


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
    spec, gen = schedule.spec, schedule.generation
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

    def due_at(tick: datetime) -> datetime:
        return tick + jitter_delay(schedule.uid, tick, jitter)

    # 1. the window
    win = window(rule, cursor, now, deadline, jitter or timedelta(0), due_at)
    # 2. lateness and missed runs (a job fired by hand, e.g. `sextant schedules trigger`, has its own key)
    by_tick = {j.scheduled_at: j.name for j in jobs
               if j.scheduled_at is not None and j.idempotency_key == idempotency_key(schedule.name, j.scheduled_at)}
    late = lateness(win.due, by_tick, now, deadline, online_since, due_at)
    chosen, missed_event = missed_runs(late.missed, spec.missed_run_policy)
    decision.events += [e for e in (deadline_event(win, late.expired, spec.starting_deadline), missed_event) if e]
    # 3. the concurrency policy
    admitted = admit(spec.concurrency_policy, sorted(chosen + list(late.on_time)), [j for j in jobs if not j.finished],
                     lambda tick: JobRef(name=job_name(schedule.namespace, schedule.name, tick), scheduled_at=tick,
                                         created_at=now, idempotency_key=idempotency_key(schedule.name, tick)))
    if admitted.replaced:
        decision.events.append(Event("Replaced", f"{_span(admitted.replaced)} replaced by the later tick "
                                                 f"{format_tick(admitted.fire[-1].scheduled_at)} before starting "
                                                 "(concurrencyPolicy Replace)"))
    for old, new in admitted.cancel:
        reason = f"replaced by schedule {schedule.name}'s tick {format_tick(new.scheduled_at)}"
        decision.cancel.append((old.name, reason))
        decision.events.append(Event("Replacing", f"cancelling job {old.name}: {reason} (concurrencyPolicy Replace)"))
    for job in admitted.fire:
        decision.create.append(Fire(job.scheduled_at, due_at(job.scheduled_at), build_job(schedule, job.scheduled_at)))
    # One event per blocking job, not one per tick: a job that was already active at the previous tick was reported.
    previous = parse_time(schedule.status.evaluated_until)
    if admitted.forbidden and (previous is None or any(j.scheduled_at is None or j.scheduled_at >= previous
                                                       for j in admitted.blockers)):
        decision.events.append(Event(
            "TickSkipped", f"{_span(admitted.forbidden)} skipped while job "
                           f"{', '.join(j.name for j in admitted.blockers)} is still active (concurrencyPolicy "
                           "Forbid); later ticks are skipped until it finishes"))

    fired = [*late.fired, *((j.scheduled_at, j.name) for j in admitted.fire)]
    if fired:
        tick, name = max(fired)
        last = parse_time(st.last_schedule_time)
        if last is None or tick >= last:
            st.last_schedule_time = format_tick(tick)
            st.last_job = name
    cursor = win.until(cursor)
    st.evaluated_until = format_tick(cursor)
    st.next_schedule_time = format_tick(win.upcoming)
    st.active = _active_names(admitted.active)  # a job being cancelled (Replace) stays active until it finishes
    decision.wake_at = due_at(win.upcoming)
    # 4. history
    decision.delete = history_to_delete(jobs, spec.successful_jobs_history_limit, spec.failed_jobs_history_limit,
                                        cursor)
    return decision
