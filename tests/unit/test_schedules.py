"""sextant.lifecycle.schedule on a fixed clock: ticks (cron, macros, intervals) in time zones and across DST changes,
jitter, missed runs after downtime, concurrency policies, suspend, history limits and the job a tick creates.

Nothing reads the clock: every test passes `now` (and `online_since`, when the operator's view became complete).
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from sextant.lifecycle import idempotency
from sextant.lifecycle import schedule as S
from sextant.resources.common import parse_time
from sextant.resources.job import State
from sextant.resources.schedule import ScheduleSpec, ScheduleStatus

UTC = timezone.utc
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)  # a multiple of 10 s since the epoch
NS, NAME, UID = "shop", "nightly", "5c1e0d2a-uid"
TEMPLATE = {"queue": "reports", "handler": "build-report", "payload": {"kind": "daily"}, "priority": 3}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def spec(**fields: Any) -> ScheduleSpec:
    return ScheduleSpec.model_validate({"jobTemplate": TEMPLATE, **fields})


def rule(cron: str, tz: str = "UTC") -> S.Rule:
    return S.compile_rule(spec(cron=cron, timeZone=tz))


def ticks(r: S.Rule, after: datetime, count: int) -> list[datetime]:
    out = []
    for _ in range(count):
        after = r.next_after(after)
        out.append(after)
    return out


def local(moment: datetime, tz: str) -> str:
    """'03:30+02:00' — the wall clock and offset at which a tick fires."""
    text = moment.astimezone(ZoneInfo(tz)).strftime("%H:%M%z")
    return text[:-2] + ":" + text[-2:]


# ================================================================================ cron in time zones, DST
BERLIN, NEW_YORK = "Europe/Berlin", "America/New_York"
# 2026: Berlin springs forward on 29 March 02:00 CET → 03:00 CEST and falls back on 25 October 03:00 → 02:00;
# New York on 8 March 02:00 EST → 03:00 EDT and on 1 November 02:00 EDT → 01:00 EST.


def test_berlin_spring_forward_a_time_in_the_skipped_hour_fires_shifted_by_the_gap():
    daily = ticks(rule("30 2 * * *", BERLIN), utc(2026, 3, 27, 12), 3)
    assert daily == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 30), utc(2026, 3, 30, 0, 30)]
    assert [local(t, BERLIN) for t in daily] == ["02:30+01:00", "03:30+02:00", "02:30+02:00"]
    assert ticks(rule("0 2 * * *", BERLIN), utc(2026, 3, 28, 12), 1) == [utc(2026, 3, 29, 1, 0)]  # 03:00 CEST


def test_berlin_spring_forward_hourly_fires_every_real_hour_and_never_twice_at_once():
    hourly = ticks(rule("@hourly", BERLIN), utc(2026, 3, 28, 23, 30), 4)
    assert hourly == [utc(2026, 3, 29, 0), utc(2026, 3, 29, 1), utc(2026, 3, 29, 2), utc(2026, 3, 29, 3)]
    assert [local(t, BERLIN) for t in hourly] == ["01:00+01:00", "03:00+02:00", "04:00+02:00", "05:00+02:00"]


def test_berlin_spring_forward_every_15_minutes_stays_15_minutes_apart():
    quarter = ticks(rule("*/15 * * * *", BERLIN), utc(2026, 3, 29, 0, 0), 8)
    assert all(b - a == timedelta(minutes=15) for a, b in zip(quarter, quarter[1:])), quarter
    assert local(quarter[3], BERLIN) == "03:00+02:00"


def test_a_schedule_created_just_after_the_gap_still_fires_the_shifted_tick_of_that_day():
    # 03:10 CEST: the day's 02:30 is shifted to 03:30, which is still ahead.
    assert rule("30 2 * * *", BERLIN).next_after(utc(2026, 3, 29, 1, 10)) == utc(2026, 3, 29, 1, 30)
    assert rule("30 2 * * *", BERLIN).next_after(utc(2026, 3, 29, 1, 30)) == utc(2026, 3, 30, 0, 30)


def test_berlin_fall_back_a_time_that_happens_twice_fires_once_at_its_first_occurrence():
    daily = ticks(rule("30 2 * * *", BERLIN), utc(2026, 10, 24, 12), 2)
    assert daily == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]
    assert [local(t, BERLIN) for t in daily] == ["02:30+02:00", "02:30+01:00"]


def test_berlin_fall_back_hourly_does_not_fire_the_repeated_hour_again():
    hourly = ticks(rule("0 * * * *", BERLIN), utc(2026, 10, 24, 22, 30), 4)
    assert hourly == [utc(2026, 10, 24, 23), utc(2026, 10, 25, 0), utc(2026, 10, 25, 2), utc(2026, 10, 25, 3)]
    assert [local(t, BERLIN) for t in hourly] == ["01:00+02:00", "02:00+02:00", "03:00+01:00", "04:00+01:00"]


def test_evaluating_from_inside_the_repeated_hour_skips_its_second_occurrence():
    # 01:10Z is 02:10 CET, the second 02:10 of the night: 02:30 already fired (at 00:30Z), next is 03:00 CET.
    assert rule("*/30 * * * *", BERLIN).next_after(utc(2026, 10, 25, 1, 10)) == utc(2026, 10, 25, 2, 0)


def test_new_york_spring_forward_and_fall_back():
    spring = ticks(rule("30 2 * * *", NEW_YORK), utc(2026, 3, 7, 12), 2)
    assert spring == [utc(2026, 3, 8, 7, 30), utc(2026, 3, 9, 6, 30)]
    assert local(utc(2026, 3, 8, 7, 30), NEW_YORK) == "03:30-04:00"
    fall = ticks(rule("30 1 * * *", NEW_YORK), utc(2026, 10, 31, 12), 2)
    assert fall == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]  # 01:30 EDT once, then 01:30 EST
    hourly = ticks(rule("@hourly", NEW_YORK), utc(2026, 11, 1, 4, 30), 3)
    assert [local(t, NEW_YORK) for t in hourly] == ["01:00-04:00", "02:00-05:00", "03:00-05:00"]
    assert hourly[1] - hourly[0] == timedelta(hours=2)  # the repeated 01:00 EST does not fire


def test_a_half_hour_dst_gap_and_a_midnight_gap():
    # Lord Howe moves its clocks by 30 minutes (02:00 → 02:30 on 4 October 2026).
    assert local(rule("15 2 * * *", "Australia/Lord_Howe").next_after(utc(2026, 10, 3, 0)),
                 "Australia/Lord_Howe") == "02:45+11:00"
    # Havana springs forward at midnight: @daily fires at 01:00, the first minute of that day.
    havana = ticks(rule("@daily", "America/Havana"), utc(2026, 3, 7, 12), 2)
    assert [local(t, "America/Havana") for t in havana] == ["01:00-04:00", "00:00-04:00"]


def test_macros_in_utc():
    after = utc(2026, 3, 4, 10, 15)  # a Wednesday
    assert rule("@hourly").next_after(after) == utc(2026, 3, 4, 11)
    assert rule("@daily").next_after(after) == rule("@midnight").next_after(after) == utc(2026, 3, 5)
    assert rule("@weekly").next_after(after) == utc(2026, 3, 8)  # Sunday 00:00
    assert rule("@monthly").next_after(after) == utc(2026, 4, 1)
    assert rule("@yearly").next_after(after) == rule("@annually").next_after(after) == utc(2027, 1, 1)


def test_cron_in_a_zone_without_dst_and_vixie_day_rules():
    assert rule("0 9 * * *", "Asia/Tokyo").next_after(utc(2026, 3, 4, 1)) == utc(2026, 3, 5, 0)
    # day-of-month OR day-of-week, as Vixie cron: the 13th or any Friday
    assert ticks(rule("0 0 13 * FRI"), utc(2026, 3, 1), 3) == [utc(2026, 3, 6), utc(2026, 3, 13), utc(2026, 3, 20)]
    assert rule("0 9 * * MON-FRI").next_after(utc(2026, 3, 7)) == utc(2026, 3, 9, 9)  # Saturday → Monday
    assert rule("0 0 1 MAR,APR *").next_after(utc(2026, 3, 2)) == utc(2026, 4, 1)
    assert rule("0 0 L * *").next_after(utc(2026, 2, 2)) == utc(2026, 2, 28)


def test_ticks_do_not_depend_on_the_operators_own_time_zone(monkeypatch):
    expected = ticks(rule("30 2 * * *", BERLIN), utc(2026, 3, 27), 4)
    for tz in ("America/Los_Angeles", "Europe/Berlin", "Asia/Kolkata"):
        monkeypatch.setenv("TZ", tz)
        time.tzset()
        assert ticks(rule("30 2 * * *", BERLIN), utc(2026, 3, 27), 4) == expected
    monkeypatch.delenv("TZ")
    time.tzset()


def test_tick_enumeration_over_a_range():
    r = rule("0 */6 * * *")
    expected = [utc(2026, 3, 1, h) for h in (6, 12, 18)] + [utc(2026, 3, 2)]
    assert list(r.ticks(utc(2026, 3, 1), utc(2026, 3, 2))) == expected


# ================================================================================ intervals
def test_interval_ticks_are_multiples_of_the_interval_since_the_epoch():
    r = S.compile_rule(spec(interval="30s"))
    assert ticks(r, utc(2026, 3, 1, 10, 0, 7), 3) == [utc(2026, 3, 1, 10, 0, 30), utc(2026, 3, 1, 10, 1),
                                                     utc(2026, 3, 1, 10, 1, 30)]
    assert S.compile_rule(spec(interval="1h")).next_after(utc(2026, 3, 1, 10, 0, 0)) == utc(2026, 3, 1, 11)
    seven = S.compile_rule(spec(interval="7s")).next_after(T0)
    assert (seven - S.EPOCH).total_seconds() % 7 == 0 and timedelta(0) < seven - T0 <= timedelta(seconds=7)


def test_interval_ignores_the_time_zone_and_dst():
    berlin = S.compile_rule(spec(interval="1h", timeZone=BERLIN))
    night = ticks(berlin, utc(2026, 3, 28, 23, 30), 4)
    assert all(b - a == timedelta(hours=1) for a, b in zip(night, night[1:]))
    assert night == ticks(S.compile_rule(spec(interval="1h")), utc(2026, 3, 28, 23, 30), 4)


def test_fractional_intervals_and_tick_format():
    r = S.compile_rule(spec(interval="1.5s"))
    first, second = ticks(r, T0, 2)
    assert second - first == timedelta(seconds=1.5)
    assert {S.format_tick(first), S.format_tick(second)} == {"2026-03-01T12:00:01.500000Z", "2026-03-01T12:00:03Z"}
    assert parse_time(S.format_tick(first)) == first


# ================================================================================ invalid schedules
@pytest.mark.parametrize("cron, words", [
    ("61 * * * *", "the minute field must be 0-59"),
    ("0 0 30 2 *", "matches no date"),
    ("R * * * *", "random (R) and hashed (H)"),
    ("H(0-29) * * * *", "random (R) and hashed (H)"),
    ("0 0 * * * *", "6 fields"),
    ("@every 5m", "unknown macro"),
    ("@reboot", "unknown macro"),
    ("0 0 * * FOO", "the day-of-week field must be 0-7 or sun-sat"),
])
def test_an_invalid_cron_says_what_is_wrong(cron, words):
    problem = S.check(ScheduleSpec.model_construct(cron=cron, interval=None, time_zone="UTC", jitter=None,
                                                   starting_deadline="1h", job_template=None))
    assert problem is not None and problem.reason == "InvalidCron"
    assert repr(cron) in problem.message and words in problem.message


@pytest.mark.parametrize("tz", ["Mars/Olympus", "Europe/Berln", "", "../../etc/passwd", "europe/berlin/x"])
def test_an_unknown_time_zone_says_so(tz):
    with pytest.raises(S.InvalidSchedule) as caught:
        S.zone_of(tz)
    assert caught.value.reason == "InvalidTimeZone" and "IANA time zone" in caught.value.message
    assert repr(tz) in caught.value.message


def test_invalid_interval_deadline_name():
    assert S.check(spec(interval="500ms")).reason == "InvalidInterval"
    assert S.check(spec(interval="1s", startingDeadline="0s")).reason == "InvalidSpec"
    too_long = "s" * 64
    assert S.check(spec(interval="1s"), too_long).reason == "InvalidName"
    assert S.check(spec(interval="1s"), "s" * 63) is None


def test_names_of_days_and_months_are_not_mistaken_for_random_fields():
    for cron in ("0 9 * * THU", "0 0 1 MAR *", "0 0 * APR FRI", "0 0 * * SAT,SUN"):
        assert S.check(spec(cron=cron)) is None, cron


def test_an_invalid_schedule_never_fires_and_reports_once():
    sim = Sim(cron="0 0 * * *", timeZone="Mars/Olympus")
    d = sim.step(at(0))
    assert d.create == [] and d.wake_at is None
    conds = sim.conditions()
    assert conds["Invalid"] == ("True", "InvalidTimeZone") and conds["Ready"] == ("False", "InvalidTimeZone")
    assert "Mars/Olympus" in sim.condition("Invalid").message
    assert [e.reason for e in d.events] == ["InvalidTimeZone"] and d.events[0].type == "Warning"
    again = sim.step(at(3600 * 24))
    assert again.create == [] and again.events == [] and again.status == sim.status


def test_fixing_an_invalid_schedule_counts_from_the_fix():
    sim = Sim(interval="10s", timeZone="Mars/Olympus")
    sim.step(at(0))
    sim.change(timeZone="UTC")
    d = sim.step(at(95))
    assert d.create == [] and sim.status.next_schedule_time == S.format_tick(at(100))
    assert sim.conditions()["Invalid"] == ("False", "Valid") and sim.conditions()["Ready"][0] == "True"


# ================================================================================ jitter
def test_jitter_is_bounded_deterministic_and_spread():
    jitter = timedelta(seconds=30)
    delays = [S.jitter_delay(UID, at(60 * i), jitter) for i in range(2000)]
    assert all(timedelta(0) <= d < jitter for d in delays)
    assert delays == [S.jitter_delay(UID, at(60 * i), jitter) for i in range(2000)]  # the same after a restart
    seconds = [d.total_seconds() for d in delays]
    assert 13 < sum(seconds) / len(seconds) < 17 and min(seconds) < 1 and max(seconds) > 29
    others = [S.jitter_delay("another-uid", at(60 * i), jitter) for i in range(2000)]
    assert sum(a != b for a, b in zip(delays, others)) > 1990  # fleets do not fire in the same second


def test_no_jitter_means_no_delay():
    assert S.jitter_delay(UID, T0, None) == S.jitter_delay(UID, T0, timedelta(0)) == timedelta(0)


def test_a_jittered_tick_fires_after_its_delay_and_keeps_its_tick_as_scheduled_time():
    sim = Sim(interval="60s", jitter="20s")
    delay = S.jitter_delay(UID, at(60), timedelta(seconds=20))
    assert timedelta(0) < delay < timedelta(seconds=20)
    d = sim.step(at(1))
    assert d.wake_at == at(60) + delay and sim.status.next_schedule_time == S.format_tick(at(60))
    assert sim.step(at(60)).create == []  # the tick has come, its delay has not
    d = sim.step(at(60) + delay)
    assert [f.tick for f in d.create] == [at(60)] and d.create[0].due == at(60) + delay
    assert d.create[0].job["metadata"]["annotations"][S.ANNOTATION_SCHEDULED_AT] == "2026-03-01T12:01:00Z"


# ================================================================================ the job a tick creates
def test_the_job_of_a_tick():
    sim = Sim(interval="10s")
    assert sim.step(at(0)).create == []
    d = sim.step(at(10))
    (fire,) = d.create
    job = fire.job
    key = "schedule/nightly/2026-03-01T12:00:10Z"
    assert job["metadata"]["name"] == idempotency.keyed_name(NS, key) == S.job_name(NS, NAME, at(10))
    assert re.fullmatch(r"job-[a-z0-9]{8}", job["metadata"]["name"])
    assert job["metadata"]["namespace"] == NS
    assert job["metadata"]["labels"] == {"sextant.dev/schedule": NAME}
    assert job["metadata"]["annotations"] == {"sextant.dev/scheduled-at": "2026-03-01T12:00:10Z"}
    assert job["metadata"]["ownerReferences"] == [{"apiVersion": "sextant.dev/v1alpha1", "kind": "Schedule",
                                                   "name": NAME, "uid": UID, "controller": True}]
    assert job["spec"] == {**TEMPLATE, "idempotencyKey": key}
    assert job["spec"]["payload"] is not sim.spec.job_template.payload  # a copy: the template is never shared
    st = sim.status
    assert st.last_schedule_time == "2026-03-01T12:00:10Z" and st.last_job == job["metadata"]["name"]
    assert st.active == [job["metadata"]["name"]] and st.next_schedule_time == "2026-03-01T12:00:20Z"
    assert st.evaluated_until == "2026-03-01T12:00:10Z" and st.observed_generation == 1
    assert d.wake_at == at(20)


def test_a_templates_concurrency_key_is_every_jobs_and_none_is_left_out():
    spec = ScheduleSpec.model_validate({"jobTemplate": {**TEMPLATE, "concurrencyKey": "tenant-7"}, "interval": "10s"})
    snapshot = S.ScheduleSnapshot(NS, NAME, UID, 1, T0, spec, ScheduleStatus())
    assert S.build_job(snapshot, at(10))["spec"]["concurrencyKey"] == "tenant-7"
    assert "concurrencyKey" not in S.build_job(Sim(interval="10s").snapshot(), at(10))["spec"]
    with pytest.raises(ValidationError, match="concurrencyKey"):
        ScheduleSpec.model_validate({"jobTemplate": {**TEMPLATE, "concurrencyKey": ""}, "interval": "10s"})


def test_job_names_differ_per_tick_schedule_and_namespace_and_are_stable():
    names = {S.job_name(NS, NAME, at(10 * i)) for i in range(1000)}
    assert len(names) == 1000
    assert S.job_name(NS, NAME, at(10)) == S.job_name(NS, NAME, at(10))
    assert S.job_name("other", NAME, at(10)) != S.job_name(NS, NAME, at(10))
    assert S.job_name(NS, "other", at(10)) != S.job_name(NS, NAME, at(10))
    assert S.job_name(NS, NAME, at(10), 1) != S.job_name(NS, NAME, at(10))


def test_evaluating_again_is_idempotent():
    sim = Sim(interval="10s")
    sim.step(at(0))
    first = sim.step(at(10))
    assert len(first.create) == 1
    again = sim.step(at(10.5))
    assert again.create == [] and again.status == sim.status and again.wake_at == at(20)


def test_a_crash_between_creating_the_job_and_storing_the_status_fires_nothing_twice():
    sim = Sim(interval="10s")
    sim.step(at(0))
    before = sim.status
    sim.step(at(10))
    sim.status = before  # the status write was lost; the job exists
    d = sim.step(at(12), online_since=at(11.5))  # a new operator, after the tick
    assert d.create == [] and d.events == []
    assert sim.status.last_schedule_time == sim.status.evaluated_until == S.format_tick(at(10))


def test_a_job_fired_by_hand_at_a_ticks_time_does_not_stand_for_the_tick():
    sim = Sim(interval="10s", concurrencyPolicy="Allow")
    sim.step(at(0))
    sim.jobs["job-manual"] = S.JobRef("job-manual", None, scheduled_at=at(10), idempotency_key="nightly/manual/x")
    d = sim.step(at(10))
    assert [f.tick for f in d.create] == [at(10)]
    assert sim.status.active == sorted(["job-manual", d.create[0].job["metadata"]["name"]])


def test_conditions_of_a_running_schedule_are_stable():
    sim = Sim(cron="*/5 * * * *", timeZone=BERLIN)
    sim.step(at(0))
    conds = sim.conditions()
    assert conds == {"Ready": ("True", "Scheduled"), "Invalid": ("False", "Valid"), "Suspended": ("False", "Active")}
    assert "Europe/Berlin" in sim.condition("Ready").message
    stamps = {c.type: c.last_transition_time for c in sim.status.conditions}
    sim.step(at(300))
    assert {c.type: c.last_transition_time for c in sim.status.conditions} == stamps


# ================================================================================ missed runs after downtime
# Interval 10 s; the operator is down from 5 s to 37 s: the ticks at 10, 20 and 30 s pass unseen.
def downtime(policy: str, **fields: Any) -> tuple[Sim, S.Decision]:
    sim = Sim(interval="10s", missedRunPolicy=policy, **fields)
    sim.step(at(0))
    return sim, sim.step(at(37), online_since=at(37))


def test_missed_skip_fires_none_of_them():
    sim, d = downtime("Skip")
    assert d.create == []
    assert [e.reason for e in d.events] == ["MissedTicks"] and "3 ticks" in d.events[0].message
    assert sim.status.evaluated_until == S.format_tick(at(30))
    assert sim.status.next_schedule_time == S.format_tick(at(40))
    assert sim.status.last_schedule_time is None
    assert [f.tick for f in sim.step(at(40)).create] == [at(40)]  # and goes on as usual


def test_missed_once_fires_the_latest_only():
    sim, d = downtime("Once")
    assert [f.tick for f in d.create] == [at(30)]
    assert "firing only the latest" in d.events[0].message
    assert sim.step(at(37.5), online_since=at(37)).create == []


def test_missed_all_fires_each_one():
    sim, d = downtime("All")
    assert [f.tick for f in d.create] == [at(10), at(20), at(30)]
    assert len({f.job["metadata"]["name"] for f in d.create}) == 3
    assert sim.status.last_schedule_time == S.format_tick(at(30))


def test_missed_all_is_bounded_by_the_starting_deadline():
    sim, d = downtime("All", startingDeadline="15s")  # at 37 s the ticks 10 and 20 are 27 and 17 s late
    assert [f.tick for f in d.create] == [at(30)]
    assert {e.reason for e in d.events} == {"MissedDeadline", "MissedTicks"}


def test_the_starting_deadline_binds_every_policy():
    for policy in ("Skip", "Once", "All"):
        sim, d = downtime(policy, startingDeadline="5s")
        assert d.create == [], policy
        assert at(30) <= parse_time(sim.status.evaluated_until) < at(40)
        assert sim.status.next_schedule_time == S.format_tick(at(40))


def test_a_tick_after_the_restart_is_on_time_whatever_the_policy():
    sim = Sim(interval="10s", missedRunPolicy="Skip")
    sim.step(at(0))
    d = sim.step(at(40.002), online_since=at(35))
    assert [f.tick for f in d.create] == [at(40)]


def test_a_tick_evaluated_long_after_its_time_is_missed_even_if_the_operator_ran():
    sim = Sim(interval="10s", missedRunPolicy="Once")
    sim.step(at(0))
    d = sim.step(at(45), online_since=at(0))  # a paused process: 10, 20, 30 are > 10 s late; 40 is 5 s late
    assert [f.tick for f in d.create] == [at(30), at(40)]


def test_a_long_downtime_catches_up_at_most_max_catch_up_and_stays_cheap():
    sim = Sim(interval="1s", missedRunPolicy="All", startingDeadline="24h")
    sim.step(at(0))
    started = time.perf_counter()
    d = sim.step(at(3000.5), online_since=at(3000.5))
    assert time.perf_counter() - started < 2
    assert len(d.create) == S.MAX_CATCH_UP and d.create[-1].tick == at(3000)
    year = Sim(interval="1s", missedRunPolicy="All")
    year.step(at(0))
    started = time.perf_counter()
    d = year.step(at(365 * 86400 + 0.5), online_since=at(365 * 86400 + 0.5))
    assert time.perf_counter() - started < 2
    assert len(d.create) == S.MAX_CATCH_UP and "MissedDeadline" in {e.reason for e in d.events}


def test_a_new_schedule_created_while_the_operator_was_down_follows_the_policy():
    sim = Sim(interval="10s", missedRunPolicy="All", created_at=at(2))
    d = sim.step(at(25), online_since=at(25))
    assert [f.tick for f in d.create] == [at(10), at(20)]


def test_cron_downtime_across_a_dst_change():
    sim = Sim(cron="@hourly", timeZone=BERLIN, missedRunPolicy="All", startingDeadline="6h",
              created_at=utc(2026, 3, 28, 22, 10))
    d = sim.step(utc(2026, 3, 29, 2, 30), online_since=utc(2026, 3, 29, 2, 30))
    assert [f.tick for f in d.create] == [utc(2026, 3, 28, 23), utc(2026, 3, 29, 0), utc(2026, 3, 29, 1),
                                          utc(2026, 3, 29, 2)]


# ================================================================================ concurrency policies
def test_concurrency_decisions():
    running = S.JobRef("job-a", State.RUNNING)
    cancelling = S.JobRef("job-b", State.RUNNING, cancel_requested=True)
    assert S.concurrency("Allow", [running]) == (True, [])
    assert S.concurrency("Forbid", []) == (True, [])
    assert S.concurrency("Forbid", [running]) == (False, [])
    assert S.concurrency("Forbid", [cancelling]) == (False, [])
    assert S.concurrency("Replace", [running, cancelling]) == (True, [running])
    assert S.concurrency("Replace", []) == (True, [])


def test_forbid_skips_a_tick_while_a_job_is_active_and_never_makes_it_up():
    sim = Sim(interval="10s", concurrencyPolicy="Forbid")
    sim.step(at(0))
    (first,) = sim.step(at(10)).create
    name = first.job["metadata"]["name"]
    sim.set_state(name, State.RUNNING)
    d = sim.step(at(20))
    assert d.create == [] and [e.reason for e in d.events] == ["TickSkipped"] and name in d.events[0].message
    assert sim.status.evaluated_until == S.format_tick(at(20)) and sim.status.active == [name]
    sim.set_state(name, State.FAILED)  # failed with retries left: still active
    d = sim.step(at(30))
    assert d.create == [] and d.events == []  # the same blocker is reported once, not at every tick
    sim.set_state(name, State.SUCCEEDED)
    assert sim.step(at(35)).create == []  # the skipped ticks are not made up
    assert [f.tick for f in sim.step(at(40)).create] == [at(40)]


def test_forbid_with_several_missed_ticks_fires_the_first_only():
    sim = Sim(interval="10s", concurrencyPolicy="Forbid", missedRunPolicy="All")
    sim.step(at(0))
    d = sim.step(at(37), online_since=at(37))
    assert [f.tick for f in d.create] == [at(10)]
    (skipped,) = [e for e in d.events if e.reason == "TickSkipped"]
    assert "2 ticks from 2026-03-01T12:00:20Z to 2026-03-01T12:00:30Z" in skipped.message


def test_replace_cancels_the_active_job_through_its_status_and_starts_the_new_one():
    sim = Sim(interval="10s", concurrencyPolicy="Replace")
    sim.step(at(0))
    (first,) = sim.step(at(10)).create
    old = first.job["metadata"]["name"]
    sim.set_state(old, State.RUNNING)
    d = sim.step(at(20))
    assert d.cancel == [(old, "replaced by schedule nightly's tick 2026-03-01T12:00:20Z")]
    assert [f.tick for f in d.create] == [at(20)]
    new = d.create[0].job["metadata"]["name"]
    assert sim.status.active == [old, new]  # the old one is active until it has stopped
    assert "Replacing" in [e.reason for e in d.events]
    d = sim.step(at(30))  # the old one is still stopping: not cancelled twice; the newer one is replaced
    assert [name for name, _ in d.cancel] == [new]


def test_replace_of_several_ticks_at_once_creates_only_the_last():
    sim = Sim(interval="10s", concurrencyPolicy="Replace", missedRunPolicy="All")
    sim.step(at(0))
    d = sim.step(at(37), online_since=at(37))
    assert [f.tick for f in d.create] == [at(30)] and d.cancel == []
    assert "Replaced" in [e.reason for e in d.events]


def test_allow_overlaps():
    sim = Sim(interval="10s")
    sim.step(at(0))
    (first,) = sim.step(at(10)).create
    sim.set_state(first.job["metadata"]["name"], State.RUNNING)
    d = sim.step(at(20))
    assert len(d.create) == 1 and d.cancel == [] and len(sim.status.active) == 2


# ================================================================================ suspend and spec changes
def test_suspend_stops_firing_and_resume_does_not_make_up_the_ticks():
    sim = Sim(interval="10s")
    sim.step(at(0))
    sim.step(at(10))
    sim.change(suspend=True)
    d = sim.step(at(15))
    assert d.create == [] and d.wake_at is None and sim.status.next_schedule_time is None
    assert sim.conditions()["Suspended"] == ("True", "Suspended")
    assert sim.conditions()["Ready"] == ("False", "Suspended")
    assert sim.step(at(100)).create == []
    sim.change(suspend=False)
    d = sim.step(at(101), online_since=at(0))
    assert d.create == [] and sim.status.next_schedule_time == S.format_tick(at(110))
    assert sim.conditions()["Suspended"] == ("False", "Active")
    assert [f.tick for f in sim.step(at(110)).create] == [at(110)]


def test_a_resume_seen_only_after_a_restart_does_not_make_up_ticks_either():
    sim = Sim(interval="10s", missedRunPolicy="All")
    sim.step(at(0))
    sim.change(suspend=True)
    sim.step(at(5))
    sim.change(suspend=False)  # while the operator is down
    d = sim.step(at(57), online_since=at(57))
    assert d.create == []


def test_a_changed_schedule_counts_from_when_the_change_is_seen():
    sim = Sim(interval="1h", missedRunPolicy="All")
    sim.step(at(0))
    sim.change(interval="10s")
    assert sim.step(at(35)).create == [] and sim.status.next_schedule_time == S.format_tick(at(40))


# ================================================================================ history limits
def refs(*states: State, start: int = 0) -> list[S.JobRef]:
    return [S.JobRef(f"job-{i}", s, scheduled_at=at(10 * (i + start))) for i, s in enumerate(states)]


def test_history_limits_delete_the_oldest_finished_jobs():
    jobs = refs(State.SUCCEEDED, State.DEAD, State.SUCCEEDED, State.CANCELLED, State.SUCCEEDED, State.RUNNING,
                State.SUCCEEDED, State.DEAD)
    assert S.history_to_delete(jobs, succeeded_limit=2, failed_limit=1) == ["job-0", "job-1", "job-2", "job-3"]
    assert S.history_to_delete(jobs, succeeded_limit=10, failed_limit=10) == []
    assert S.history_to_delete(jobs, succeeded_limit=0, failed_limit=0) == [
        "job-0", "job-1", "job-2", "job-3", "job-4", "job-6", "job-7"]  # never the running one


def test_history_limits_keep_jobs_of_ticks_the_status_does_not_cover_yet():
    jobs = refs(State.SUCCEEDED, State.SUCCEEDED, State.SUCCEEDED)
    assert S.history_to_delete(jobs, 0, 0, until=at(10)) == ["job-0", "job-1"]


def test_evaluate_applies_the_history_limits():
    sim = Sim(interval="10s", successfulJobsHistoryLimit=1, failedJobsHistoryLimit=0)
    sim.step(at(0))
    names, deleted = [], []
    for i in range(1, 4):
        d = sim.step(at(10 * i))
        deleted += d.delete
        names.append(d.create[0].job["metadata"]["name"])
        sim.set_state(names[-1], State.SUCCEEDED if i < 3 else State.DEAD)
    deleted += sim.step(at(35)).delete
    assert deleted == [names[0], names[2]] and list(sim.jobs) == [names[1]]


# ================================================================================ a fixed-clock simulation
class Sim:
    """One schedule and its jobs, evaluated as the adapter would: creates, cancels and deletes are applied."""

    def __init__(self, created_at: datetime = T0, **fields: Any) -> None:
        self.fields = fields
        self.spec = ScheduleSpec.model_validate({"jobTemplate": TEMPLATE, **fields})
        self.generation = 1
        self.created_at = created_at
        self.status = ScheduleStatus()
        self.jobs: dict[str, S.JobRef] = {}

    def snapshot(self) -> S.ScheduleSnapshot:
        return S.ScheduleSnapshot(NS, NAME, UID, self.generation, self.created_at, self.spec, self.status)

    def step(self, now: datetime, online_since: datetime = T0) -> S.Decision:
        d = S.evaluate(self.snapshot(), list(self.jobs.values()), now, online_since)
        for name, _ in d.cancel:
            self.jobs[name] = replace(self.jobs[name], cancel_requested=True)
        for fire in d.create:
            name = fire.job["metadata"]["name"]
            assert name not in self.jobs, f"tick {fire.tick} fired twice"
            self.jobs[name] = S.JobRef(name, None, scheduled_at=fire.tick, created_at=now,
                                       idempotency_key=fire.job["spec"]["idempotencyKey"])
        self.status = d.status
        for name in d.delete:
            del self.jobs[name]
        return d

    def change(self, **fields: Any) -> None:
        self.fields.update(fields)
        self.spec = ScheduleSpec.model_validate({"jobTemplate": TEMPLATE, **self.fields})
        self.generation += 1

    def set_state(self, name: str, state: State) -> None:
        self.jobs[name] = replace(self.jobs[name], state=state)

    def condition(self, type_: str):
        return next(c for c in self.status.conditions if c.type == type_)

    def conditions(self) -> dict[str, tuple[str, str]]:
        return {c.type: (c.status, c.reason) for c in self.status.conditions}


def test_a_day_of_a_simulated_schedule_fires_every_tick_exactly_once():
    sim = Sim(cron="*/7 * * * *", timeZone=BERLIN, created_at=utc(2026, 10, 24, 20))
    now, fired = utc(2026, 10, 24, 20), []
    while now < utc(2026, 10, 25, 8):
        d = sim.step(now)
        fired += [f.tick for f in d.create]
        for name, ref in list(sim.jobs.items()):
            sim.jobs[name] = replace(ref, state=State.SUCCEEDED)
        now = d.wake_at
    expected = list(rule("*/7 * * * *", BERLIN).ticks(utc(2026, 10, 24, 20), utc(2026, 10, 25, 8)))
    assert fired == expected[: len(fired)] and len(fired) >= len(expected) - 1
    assert len(set(fired)) == len(fired)


def test_rfc3339_ticks_round_trip_through_the_job_annotation():
    sim = Sim(interval="1.5s")
    sim.step(at(0))
    d = sim.step(at(1.6))
    raw = {**d.create[0].job, "status": {"state": "running"}}
    raw["metadata"] = {**raw["metadata"], "creationTimestamp": "2026-03-01T12:00:01Z", "resourceVersion": "7"}
    ref = S.JobRef.of(raw)
    assert ref.scheduled_at == at(1.5) and ref.state == State.RUNNING and ref.resource_version == "7"
