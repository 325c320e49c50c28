"""The steps of one schedule evaluation (lifecycle/schedule.py), each on its own, as tables: the window of due
ticks, their lateness and the missed-run policy, the concurrency policy, and history. test_schedules.py checks
the whole evaluation; these pin each rule where it lives."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from sextant.lifecycle import schedule as S
from sextant.resources.job import State
from sextant.resources.schedule import ScheduleSpec

UTC = timezone.utc
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)  # a multiple of 10 s since the epoch
TEN_SECONDS = S.compile_rule(ScheduleSpec.model_validate({"interval": "10s",
                                                          "jobTemplate": {"queue": "q", "handler": "h"}}))


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def no_jitter(tick: datetime) -> datetime:
    return tick


def seconds(ticks) -> list[float]:
    return [(t - T0).total_seconds() for t in ticks]


# ================================================================ the window
@pytest.mark.parametrize("cursor, now, deadline, jitter, due, upcoming, jumped, dropped", [
    (0, 5, 3600, 0, [], 10, None, False),  # nothing due yet
    (0, 10, 3600, 0, [10], 20, None, False),  # a tick is due at its time exactly
    (0, 37, 3600, 0, [10, 20, 30], 40, None, False),
    (10, 37, 3600, 0, [20, 30], 40, None, False),  # the cursor's own tick was handled
    (0, 37, 5, 0, [], 40, (10, 31), False),  # 10, 20 and 30 are late whatever their jitter: jumped over
    (0, 37, 5, 2, [30], 40, (10, 29), False),  # jitter widens what might still be due
    (0, 20_010, 100_000, 0, None, 20_020, None, True),  # more due ticks than KEEP_DUE: the oldest are dropped
])
def test_the_window(cursor, now, deadline, jitter, due, upcoming, jumped, dropped):
    win = S.window(TEN_SECONDS, at(cursor), at(now), timedelta(seconds=deadline), timedelta(seconds=jitter),
                   no_jitter)
    if due is not None:
        assert seconds(win.due) == due
    else:
        assert len(win.due) == S.KEEP_DUE and seconds(win.due[-1:]) == [20_010]
    assert win.upcoming == at(upcoming)
    if jumped is None:
        assert win.jumped_from is None and win.jumped_to is None
    else:
        assert (seconds([win.jumped_from])[0], seconds([win.jumped_to])[0]) == jumped
    assert (win.dropped_from is not None) == dropped
    if dropped:
        assert win.dropped_from == at(10)


def test_a_jittered_tick_is_due_only_once_its_delay_has_passed():
    late_by_3 = lambda tick: tick + timedelta(seconds=3)  # noqa: E731
    assert seconds(S.window(TEN_SECONDS, at(0), at(12), timedelta(hours=1), timedelta(seconds=5), late_by_3).due) == []
    win = S.window(TEN_SECONDS, at(0), at(13), timedelta(hours=1), timedelta(seconds=5), late_by_3)
    assert seconds(win.due) == [10] and win.upcoming == at(20)


@pytest.mark.parametrize("due, jumped_to, cursor, until", [
    ((), None, 5, 5),
    ((at(10), at(20)), None, 5, 20),
    ((), at(31), 0, 31),  # everything jumped over: counted as handled up to there
    ((at(30),), at(31), 0, 30),
])
def test_evaluated_until_after_a_window(due, jumped_to, cursor, until):
    win = S.Window(due, at(40), at(10) if jumped_to else None, jumped_to)
    assert win.until(at(cursor)) == at(until)


# ================================================================ lateness and missed runs
DEADLINE = timedelta(seconds=30)


@pytest.mark.parametrize("tick, now, online_since, fired, expected", [
    (10, 10.5, 0, {}, "on_time"),
    (10, 19.9, 0, {}, "on_time"),  # within LATE
    (10, 20.5, 0, {}, "missed"),  # evaluated more than LATE after its time: a paused process
    (10, 12, 11, {}, "missed"),  # its time passed before this operator's view was complete
    (10, 41, 0, {}, "expired"),  # more than startingDeadline late, whatever the policy
    (10, 41, 0, {10: "job-x"}, "fired"),  # its job exists: fired, however late
    (10, 10.5, 0, {20: "job-x"}, "on_time"),
])
def test_lateness_of_one_tick(tick, now, online_since, fired, expected):
    sorted_ = S.lateness([at(tick)], {at(t): n for t, n in fired.items()}, at(now), DEADLINE, at(online_since),
                         no_jitter)
    groups = {"fired": [t for t, _ in sorted_.fired], "expired": list(sorted_.expired),
              "missed": list(sorted_.missed), "on_time": list(sorted_.on_time)}
    assert {k: v for k, v in groups.items() if v} == {expected: [at(tick)]}


def test_lateness_counts_from_the_jittered_due_time():
    late = S.lateness([at(10)], {}, at(22), DEADLINE, at(0), lambda t: t + timedelta(seconds=5))
    assert late.on_time == (at(10),)  # 7 s after its due time, 12 s after its tick


@pytest.mark.parametrize("policy, count, fired, words", [
    ("Skip", 3, [], "skipping them"),
    ("Once", 3, [30], "firing only the latest (2026-03-01T12:00:30Z)"),
    ("All", 3, [10, 20, 30], "firing each"),
    ("All", S.MAX_CATCH_UP + 5, None, f"firing the latest {S.MAX_CATCH_UP}"),
])
def test_the_missed_run_policy(policy, count, fired, words):
    missed = tuple(at(10 * (i + 1)) for i in range(count))
    chosen, event = S.missed_runs(missed, policy)
    if fired is not None:
        assert seconds(chosen) == fired
    else:
        assert chosen == list(missed[-S.MAX_CATCH_UP:])
    assert event.reason == "MissedTicks" and words in event.message and f"missedRunPolicy {policy}" in event.message


def test_no_missed_ticks_no_event():
    assert S.missed_runs((), "All") == ([], None)


@pytest.mark.parametrize("win, expired, span", [
    (S.Window((), at(40)), (), None),
    (S.Window((), at(40)), (at(10), at(20)), ("12:00:10Z", "12:00:20Z")),
    (S.Window((), at(40), at(10), at(31)), (), ("12:00:10Z", "12:00:31Z")),
    (S.Window((at(30),), at(40), at(10), at(25)), (at(30),), ("12:00:10Z", "12:00:30Z")),
    (S.Window((at(30),), at(40), None, None, at(10)), (), ("12:00:10Z", "12:00:29.999999Z")),
])
def test_one_event_names_every_tick_skipped_for_the_deadline(win, expired, span):
    event = S.deadline_event(win, expired, "30s")
    if span is None:
        assert event is None
    else:
        assert event.reason == "MissedDeadline" and event.type == "Warning" and "startingDeadline (30s)" in event.message
        assert f"from 2026-03-01T{span[0]} to 2026-03-01T{span[1]}" in event.message


# ================================================================ the concurrency policy
def job_of(tick: datetime) -> S.JobRef:
    return S.JobRef(f"job-{int((tick - T0).total_seconds())}", scheduled_at=tick)


RUNNING = S.JobRef("job-old", State.RUNNING, scheduled_at=at(0))
STOPPING = S.JobRef("job-stopping", State.RUNNING, scheduled_at=at(-10), cancel_requested=True)


@pytest.mark.parametrize("policy, ticks, active, fire, cancel, replaced, forbidden", [
    ("Allow", [10], [], ["job-10"], [], [], []),
    ("Allow", [10, 20], [RUNNING], ["job-10", "job-20"], [], [], []),
    ("Forbid", [10], [], ["job-10"], [], [], []),
    ("Forbid", [10], [RUNNING], [], [], [], [10]),
    ("Forbid", [10, 20, 30], [], ["job-10"], [], [], [20, 30]),  # the first tick's job blocks the rest
    ("Replace", [10], [], ["job-10"], [], [], []),
    ("Replace", [10], [RUNNING, STOPPING], ["job-10"], [("job-old", "job-10")], [], []),  # never cancelled twice
    ("Replace", [10, 20, 30], [RUNNING], ["job-30"], [("job-old", "job-30")], [10, 20], []),
])
def test_the_concurrency_policy(policy, ticks, active, fire, cancel, replaced, forbidden):
    out = S.admit(policy, [at(t) for t in ticks], active, job_of)
    assert [j.name for j in out.fire] == fire
    assert [(old.name, new.name) for old, new in out.cancel] == cancel
    assert seconds(out.replaced) == replaced and seconds(out.forbidden) == forbidden
    assert [j.name for j in out.active] == [j.name for j in active] + fire  # cancelled ones stay until they stop
    if forbidden:
        assert out.blockers == out.active


# ================================================================ history
@pytest.mark.parametrize("succeeded, failed, until, deleted", [
    (3, 2, None, []),
    (3, 1, None, ["job-1"]),  # dead and cancelled both count against failedJobsHistoryLimit
    (1, 1, None, ["job-0", "job-1"]),  # the oldest succeeded beyond 1 (job-2 is newer), the older dead
    (0, 0, None, ["job-0", "job-1", "job-2", "job-3"]),
    (0, 0, 20, ["job-0", "job-1", "job-2"]),  # only ticks the status covers
    (-1, -1, None, ["job-0", "job-1", "job-2", "job-3"]),  # a negative limit keeps none
])
def test_history(succeeded, failed, until, deleted):
    jobs = [S.JobRef("job-0", State.SUCCEEDED, scheduled_at=at(0)), S.JobRef("job-1", State.DEAD, scheduled_at=at(10)),
            S.JobRef("job-2", State.SUCCEEDED, scheduled_at=at(20)),
            S.JobRef("job-3", State.CANCELLED, scheduled_at=at(30)), S.JobRef("job-4", State.RUNNING, scheduled_at=at(40))]
    assert S.history_to_delete(jobs, succeeded, failed, at(until) if until is not None else None) == deleted
