"""Admission's one decision (lifecycle/admission.py): pause, concurrency, the rate limit and concurrency keys taking
turns. Tables for each rule, and properties over random histories: the queue's concurrency, the per-key concurrency
and the rate limit are never exceeded, and no key waits while another is served twice."""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sextant.lifecycle.admission import (NO_KEY, Limits, Line, StartLog, Wait, concurrency_key, key_full,
                                         started_attempts, take, verdict)
from sextant.resources.queue import QueueSpec

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Queue:
    """A Line and the counts a caller keeps (controller/slots.py's part), on a fake clock."""

    def __init__(self, **limits: Any) -> None:
        self.limits = Limits(**limits)
        self.line = Line()
        self.starts = StartLog(self.limits.per) if self.limits.per else None
        self.holders: dict[str, str] = {}  # job → key
        self.order = itertools.count()
        self.moment = T0
        self.grants: list[tuple[datetime, str, str]] = []  # (when, job, key)
        # A grant's reconcile makes the pod or the assignment: at once, or (slow) when `settle` is called.
        self.slow = False
        self.unsettled: list[str] = []
        self.started: list[tuple[datetime, str]] = []  # (when its pod/assignment was made, job)

    def add(self, job: str, key: str = NO_KEY, priority: int = 0) -> None:
        self.line.offer(job, key, priority, self.moment.timestamp(), next(self.order))

    def key_holders(self) -> Counter[str]:
        return Counter(k for k in self.holders.values() if k != NO_KEY)

    def take(self, **kwargs: Any) -> Any:
        taken = take(self.line, self.limits, len(self.holders), self.key_holders(), self.starts, self.moment, **kwargs)
        for job, key in taken.granted:
            self.holders[job] = key
            self.grants.append((self.moment, job, key))
            if self.starts is not None:
                self.starts.hold(job, 1)
            self.unsettled.append(job)
        if not self.slow:
            self.settle()
        return taken

    def settle(self) -> None:
        """The reconciles of the grants so far make their pods or assignments now (the slots' release)."""
        for job in self.unsettled:
            if self.starts is not None:
                self.starts.settle(job, self.moment)
            self.started.append((self.moment, job))
        self.unsettled.clear()

    def end(self, job: str) -> None:
        key = self.holders.pop(job)
        self.line.unpark(key)

    def give_back(self, job: str, priority: int = 0) -> None:
        """The grant's reconcile ends without acting on it (the grant came while another reconcile of the job ran):
        the slot goes back and the job waits in line again (the slots' release of a grant that started nothing)."""
        self.unsettled.remove(job)
        key = self.holders.pop(job)
        # It started nothing: no longer one of the grants the rate limit is checked over (a restarted operator cannot
        # know of it), though the live window keeps counting it a while.
        self.grants = [g for g in self.grants if g[1] != job]
        if self.starts is not None:
            self.starts.settle(job, self.moment, started=False)
        self.line.unpark(key)
        self.add(job, key, priority)

    def jobs(self, taken: Any) -> list[str]:
        return [job for job, _ in taken.granted]


# --- tables ---------------------------------------------------------------------------------------------------------


def test_limits_are_read_from_the_queue_spec():
    spec = QueueSpec.model_validate({"concurrency": 4, "perKeyConcurrency": 2, "paused": True,
                                     "rateLimit": {"starts": 100, "per": "1m"}})
    assert Limits.of(spec) == Limits(True, 4, 2, 100, timedelta(minutes=1))
    assert Limits.of(QueueSpec()) == Limits(False, 10, None, None, None)


@pytest.mark.parametrize("limits,holders,recent,wait", [
    (Limits(concurrency=2), 1, 0, None),
    (Limits(concurrency=2), 2, 0, Wait.AT_CONCURRENCY),
    (Limits(paused=True), 0, 0, Wait.PAUSED),
    (Limits(starts=3, per=timedelta(seconds=1)), 0, 2, None),
    (Limits(starts=3, per=timedelta(seconds=1)), 0, 3, Wait.RATE_LIMITED),
    (Limits(concurrency=1, starts=3, per=timedelta(seconds=1)), 1, 3, Wait.AT_CONCURRENCY),  # the first that holds
])
def test_verdict_says_why_the_queue_waits(limits, holders, recent, wait):
    assert verdict(limits, holders, recent) is wait


def test_per_key_limit_applies_to_keyed_jobs_only():
    limits = Limits(per_key=1)
    assert key_full(limits, "a", 1) and not key_full(limits, "a", 0)
    assert not key_full(limits, NO_KEY, 50)
    assert not key_full(Limits(), "a", 50)
    assert concurrency_key({"spec": {"concurrencyKey": "t1"}}) == "t1"
    assert concurrency_key({"spec": {"concurrencyKey": 7}}) == NO_KEY == concurrency_key({})


def test_a_small_tenant_is_not_delayed_by_a_large_one():
    """The issue's test: 1,000 jobs of one tenant, then 10 of another, concurrency 4: the small tenant's jobs all
    start within its first turns (every other admission), not after the large tenant's backlog."""
    q = Queue(concurrency=4)
    for n in range(1000):
        q.add(f"big-{n}", "big")
    for n in range(10):
        q.add(f"small-{n}", "small")
    started = q.jobs(q.take())
    while len(started) < 40:
        q.end(started[len(started) - 4])  # the oldest running one ends
        started += q.jobs(q.take())
    assert started[:4] == ["big-0", "small-0", "big-1", "small-1"]
    assert [j for j in started[:20] if j.startswith("small")] == [f"small-{n}" for n in range(10)]
    assert [j for j in started if j.startswith("big")][:5] == [f"big-{n}" for n in range(5)]  # FIFO within a key


def test_priority_comes_first_across_keys_then_keys_take_turns():
    q = Queue(concurrency=10)
    q.add("a1", "a")
    q.add("a2", "a")
    q.add("b1", "b")
    q.add("b-urgent", "b", priority=5)
    q.add("c-urgent", "c", priority=5)
    q.add("n1")  # no key: one more group in the round
    # b's urgent job was its turn: b then waits behind the keys not served yet (n)
    assert q.jobs(q.take()) == ["b-urgent", "c-urgent", "a1", "n1", "b1", "a2"]


def test_a_key_at_its_limit_steps_aside_until_one_of_its_attempts_ends():
    q = Queue(concurrency=10, per_key=2)
    for n in range(5):
        q.add(f"a{n}", "a")
    q.add("b0", "b")
    q.add("n0")
    q.add("n1")
    assert q.jobs(q.take()) == ["a0", "b0", "n0", "a1", "n1"]  # jobs without a key are not limited per key
    q.add("a9", "a", priority=9)
    assert q.jobs(q.take()) == []  # a is at its limit, even for its urgent job
    q.end("a0")
    assert q.jobs(q.take()) == ["a9"]
    q.end("b0")
    assert q.jobs(q.take()) == []


def test_a_raised_per_key_limit_lets_a_waiting_key_in_at_once():
    q = Queue(concurrency=10, per_key=1)
    for n in range(3):
        q.add(f"a{n}", "a")
    assert q.jobs(q.take()) == ["a0"]
    q.limits = Limits(concurrency=10, per_key=3)
    assert q.jobs(q.take()) == ["a1", "a2"]


def test_the_rate_limit_holds_a_sliding_window_and_says_when_it_has_room():
    q = Queue(concurrency=100, starts=3, per=timedelta(seconds=10))
    for n in range(10):
        q.add(f"j{n}")
    taken = q.take()
    assert q.jobs(taken) == ["j0", "j1", "j2"]
    assert taken.wait is Wait.RATE_LIMITED and taken.retry_at == at(10)
    q.moment = at(9.9)
    assert q.jobs(q.take()) == []
    q.moment = at(10)
    taken = q.take()
    assert q.jobs(taken) == ["j3", "j4", "j5"] and taken.retry_at == at(20)
    for job in list(q.holders):
        q.end(job)  # ending frees slots, not the window
    q.moment = at(15)
    assert q.jobs(q.take()) == [] and q.take().retry_at == at(20)


def test_the_retry_time_counts_the_starts_of_the_same_take():
    q = Queue(concurrency=100, starts=3, per=timedelta(seconds=10))
    q.add("j0")
    q.take()
    q.moment = at(4)
    q.add("j1")
    q.add("j2")
    q.add("j3")
    taken = q.take()
    assert q.jobs(taken) == ["j1", "j2"] and taken.retry_at == at(10)  # j0 leaves the window first


def test_paused_starts_nothing_and_resumed_starts_in_order():
    q = Queue(concurrency=2, paused=True)
    for n in range(3):
        q.add(f"j{n}")
    assert q.take().wait is Wait.PAUSED and not q.holders
    q.limits = Limits(concurrency=2)
    taken = q.take()
    assert q.jobs(taken) == ["j0", "j1"] and taken.wait is Wait.AT_CONCURRENCY


def test_a_job_that_cannot_start_keeps_its_place_and_its_key_keeps_its_turn():
    q = Queue(concurrency=10)
    q.add("a-worker", "a")
    q.add("a-pod", "a")
    q.add("b-pod", "b")
    assert q.jobs(q.take(startable=lambda job: job != "a-worker")) == ["a-pod", "b-pod"]
    assert "a-worker" in q.line
    assert q.jobs(q.take()) == ["a-worker"]


def test_skipping_is_bounded_and_the_gate_limits_a_take():
    q = Queue(concurrency=100)
    for n in range(50):
        q.add(f"j{n}")
    taken = q.take(startable=lambda job: False, skip_limit=16)
    assert taken.granted == [] and taken.wait is Wait.FULL and len(q.line) == 50
    taken = q.take(room=3)
    assert q.jobs(taken) == ["j0", "j1", "j2"] and taken.wait is Wait.FULL


def test_withdrawn_and_reoffered_jobs_are_skipped_when_met():
    q = Queue(concurrency=10)
    q.add("a1", "a", priority=9)
    q.add("a2", "a")
    q.add("b1", "b")
    q.line.withdraw("a1")  # the round still thinks a's next job is urgent
    q.add("b2", "b", priority=1)  # re-offered would move it; a new one ranks by priority
    assert q.jobs(q.take()) == ["b2", "a2", "b1"]
    assert len(q.line) == 0 and not q.line._jobs and not q.line._place  # the keys left the line with their jobs


def test_started_attempts_reads_each_sign_no_earlier_than_the_admission():
    raw = {"status": {"sequence": 2, "attempts": [
        {"sequence": 1, "startedAt": "2026-03-01T12:00:03Z", "finishedAt": "2026-03-01T12:00:04Z"},
        {"sequence": 2, "finishedAt": "2026-03-01T12:00:09Z"}]}}  # never started: when it ended
    pods = [(3, at(10)), (4, None)]
    assigned = [(5, "2026-03-01T12:00:11.500000Z"), (6, "not a time")]
    found = started_attempts(raw, pods, assigned)
    assert sorted(found) == [(1, at(3)), (2, at(9)), (3, at(11)), (5, at(11.5))]  # a pod's second: +1s
    assert started_attempts(raw, pods, assigned, wanted=lambda sequence: sequence == 3) == [(3, at(11))]
    slim = {"status": {"state": "succeeded", "sequence": 4, "finishedAt": "2026-03-01T12:00:20Z"}}
    assert started_attempts(slim, [], []) == [(4, at(20))]
    assert started_attempts({"status": "odd"}, [], []) == []


def test_a_start_that_left_the_window_does_not_come_back():
    log = StartLog(timedelta(seconds=10))
    log.note("j", 1, at(0), at(0))
    log.note("j", 1, at(5), at(5))  # the same start seen again: counted once
    assert len(log) == 1
    log.prune(at(10))
    assert len(log) == 0
    log.note("j", 1, at(12), at(12))  # its finishedAt, read later: not a new start
    log.note("k", 1, at(30), at(12))  # a time ahead of now counts as now
    assert len(log) == 1 and log.free_at(1, at(12)) == at(22)
    log.forget("j")
    log.note("j", 2, at(1), at(12))  # already out of the window when seen
    assert len(log) == 1


def test_a_grant_counts_until_its_pod_or_assignment_is_made_and_from_then():
    """A reconcile that lags its grant (a loaded API server) does not let the window move on under it: the grant
    counts until it is settled, and from the moment it settled; then the window frees at that moment + per."""
    q = Queue(concurrency=10, starts=2, per=timedelta(seconds=3))
    q.slow = True
    for n in range(6):
        q.add(f"j{n}")
    assert q.jobs(q.take()) == ["j0", "j1"]
    q.moment = at(5)  # the window would have room by the grants' time: the starts have not happened yet
    taken = q.take()
    assert q.jobs(taken) == [] and taken.wait is Wait.RATE_LIMITED and taken.retry_at == at(8)
    q.settle()  # made at 5: they leave the window at 8
    q.moment = at(7.9)
    assert q.jobs(q.take()) == []
    q.moment = at(8)
    assert q.jobs(q.take()) == ["j2", "j3"]
    log = StartLog(timedelta(seconds=3))
    log.hold("j", 1)
    log.note("j", 1, at(0), at(0))  # its assignment seen before the reconcile ended: counted once
    assert len(log) == 1 and log.free_at(1, at(0)) == at(3)
    log.settle("j", at(1))
    assert len(log) == 1 and log.free_at(1, at(1)) == at(4)


def test_a_grant_given_back_still_counts_and_the_attempt_counts_again_when_a_later_grant_starts_it():
    """A grant whose reconcile did not act on it holds the window as a start would; the attempt is still to start,
    and when a later grant starts it, that start counts from its own moment (not from the given-back one's, which
    would let the next grant follow it too closely)."""
    q = Queue(concurrency=10, starts=1, per=timedelta(seconds=3))
    q.slow = True
    q.add("j0")
    assert q.jobs(q.take()) == ["j0"]
    q.give_back("j0")  # at 0: counts until 3
    q.moment = at(2.9)
    assert q.jobs(q.take()) == []
    q.moment = at(3)
    assert q.jobs(q.take()) == ["j0"]
    q.moment = at(4)
    q.settle()  # j0 starts at 4: the window is full until 7
    q.add("j1")
    q.moment = at(6.9)
    assert q.jobs(q.take()) == []
    q.moment = at(7)
    assert q.jobs(q.take()) == ["j1"]


# --- properties -----------------------------------------------------------------------------------------------------

KEYS = ["a", "b", "c", NO_KEY]

step = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(KEYS), st.sampled_from([0, 0, 0, 1]), st.integers(1, 30)),
    st.tuples(st.just("end"), st.integers(0, 1000)),
    st.tuples(st.just("withdraw"), st.integers(0, 1000)),
    st.tuples(st.just("wait"), st.sampled_from([0.1, 0.5, 1.0, 3.0])),
    st.tuples(st.just("pause"), st.booleans()),
    st.tuples(st.just("restart"), st.floats(0, 1)),
    st.tuples(st.just("settle")),  # the grants' reconciles, when they lag (a loaded API server), make their starts
    st.tuples(st.just("give back"), st.integers(0, 1000)),  # a grant's reconcile ends without acting on it
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(concurrency=st.integers(1, 6), per_key=st.one_of(st.none(), st.integers(1, 3)),
       rate=st.one_of(st.none(), st.tuples(st.integers(1, 6), st.sampled_from([1.0, 2.0, 5.0]))),
       slow=st.booleans(), steps=st.lists(step, max_size=80))
def test_no_limit_is_ever_exceeded_and_no_key_is_starved(concurrency, per_key, rate, slow, steps):
    """Random arrivals, ends, withdrawals, time, pauses, operator restarts (a new Line and a window rebuilt from
    the objects' late signs), reconciles that lag their grants and grants given back: every take keeps the queue's concurrency, each
    key's limit and the rate limit (over the grants and over the starts); and
    while a key waits below its limit, no other key is served twice (same priority)."""
    limits = Limits(False, concurrency, per_key, *(rate[0], timedelta(seconds=rate[1])) if rate else (None, None))
    q = Queue(**limits.__dict__)
    q.slow = slow
    waiting: dict[str, tuple[str, int]] = {}  # job → (key, priority)
    priorities: dict[str, int] = {}
    passed: dict[str, Counter[str]] = {k: Counter() for k in KEYS}
    names = itertools.count()
    for action, *args in steps:
        if action == "add":
            key, priority, count = args
            for _ in range(count):
                job = f"j{next(names)}"
                waiting[job] = (key, priority)
                priorities[job] = priority
                q.add(job, key, priority)
        elif action == "end" and q.holders:
            q.end(sorted(q.holders)[args[0] % len(q.holders)])
        elif action == "withdraw" and waiting:
            job = sorted(waiting)[args[0] % len(waiting)]
            del waiting[job]
            q.line.withdraw(job)
        elif action == "wait":
            q.moment += timedelta(seconds=args[0])
        elif action == "pause":
            q.limits = Limits(args[0], concurrency, per_key, limits.starts, limits.per)
        elif action == "restart":
            # A new operator: the line from the objects (FIFO by their order), the window from late signs.
            q.line = Line()
            passed = {k: Counter() for k in KEYS}  # the round starts afresh, in the order the jobs came
            for job, (key, priority) in sorted(waiting.items(), key=lambda item: int(item[0][1:])):
                q.add(job, key, priority)
            q.settle()  # the old one's grants in progress made their pods just before it went (or never did)
            if q.starts is not None:
                q.starts = StartLog(q.limits.per)
                for when, job in q.started:
                    late = min(when + timedelta(seconds=args[0]), q.moment)
                    q.starts.note(job, 1, late, q.moment)
        elif action == "settle":
            q.settle()
        elif action == "give back" and (given := [job for job in q.unsettled if job in q.holders]):
            job = given[args[0] % len(given)]
            waiting[job] = (q.holders[job], priorities[job])
            q.give_back(job, priorities[job])
        before = len(q.grants)
        held = q.key_holders()  # as each grant of this take finds them
        q.take()
        for _, job, key in q.grants[before:]:
            assert job in waiting, "only a waiting job is granted"

            def open_(k: str) -> bool:
                return not key_full(q.limits, k, held[k])

            top = max(p for k, p in waiting.values() if open_(k))
            assert open_(key) and waiting.pop(job)[1] == top, "the most urgent job of a key below its limit goes first"
            if top == 0 and all(p == 0 for _, p in waiting.values()):
                for other in KEYS:
                    if other != key and open_(other) and any(k == other for k, _ in waiting.values()):
                        passed[other][key] += 1
                        assert passed[other][key] <= 1, f"{key!r} served twice while {other!r} waited"
            passed[key].clear()
            if key != NO_KEY:
                held[key] += 1
        for other in KEYS:  # not waiting, or at its limit: no turn is owed to it
            if not any(k == other for k, _ in waiting.values()) or key_full(q.limits, other, q.key_holders()[other]):
                passed[other].clear()
        assert len(q.holders) <= concurrency
        if per_key is not None:
            assert all(n <= per_key for n in q.key_holders().values())
        if rate is not None:  # over the grants, and over the starts (later, when reconciles lag)
            window = timedelta(seconds=rate[1])
            times = [when for when, _, _ in q.grants]
            for when in times:
                assert sum(1 for t in times if when - window < t <= when) <= rate[0]
            times = [when for when, _ in q.started]
            for when in times:
                assert sum(1 for t in times if when - window < t <= when) <= rate[0]


@settings(max_examples=100, deadline=None)
@given(keys=st.integers(1, 8), jobs=st.lists(st.integers(0, 7), min_size=1, max_size=60), concurrency=st.integers(1, 4))
def test_every_key_is_served_within_one_round(keys, jobs, concurrency):
    """Whatever the backlog per key: a key with jobs waiting starts one within as many admissions as there are keys."""
    q = Queue(concurrency=concurrency)
    for n, k in enumerate(jobs):
        q.add(f"j{n}", f"k{k % keys}")
    served: list[str] = []
    while len(q.line):
        for job, key in q.take().granted:
            served.append(key)
            q.end(job)
    distinct = len(set(served))
    for key in set(served):
        indexes = [i for i, k in enumerate(served) if k == key]
        remaining = [i for i in range(len(served)) if served[i] == key]
        assert indexes[0] < distinct  # its first job within the first round
        gaps = [b - a for a, b in zip(remaining, remaining[1:])]
        # between two of its jobs, each other key that still had jobs started at most one
        assert all(gap <= distinct for gap in gaps)


# --- the fields' checks ---------------------------------------------------------------------------------------------


def test_bad_settings_and_keys_are_refused_naming_the_field_and_the_rule():
    from pydantic import ValidationError

    from sextant.resources.request import CreateJob
    from sextant.resources import inputs
    from sextant.resources.job import JobSpec

    for bad, words in (({"starts": 0, "per": "1m"}, "greater than or equal to 1"),
                       ({"starts": 5, "per": "500ms"}, "rateLimit.per must be from 1s to 24h"),
                       ({"starts": 5, "per": "25h"}, "rateLimit.per must be from 1s to 24h"),
                       ({"starts": 5}, "Field required")):
        with pytest.raises(ValidationError) as refused:
            QueueSpec.model_validate({"rateLimit": bad})
        assert "rateLimit" in str(refused.value) and words in str(refused.value)
    with pytest.raises(ValidationError, match="perKeyConcurrency"):
        QueueSpec.model_validate({"perKeyConcurrency": 0})
    with pytest.raises(ValidationError, match="concurrencyKey"):
        JobSpec.model_validate({"queue": "q", "handler": "h", "concurrencyKey": "x" * 254})
    with pytest.raises(inputs.InputError, match="--concurrency-key: a concurrency key must not be empty"):
        inputs.concurrency_key("--concurrency-key", "")
    with pytest.raises(inputs.InputError, match="at most 253 characters, got 300"):
        inputs.concurrency_key("concurrency_key", "k" * 300)
    with pytest.raises(ValidationError) as refused:
        CreateJob.model_validate_json('{"queue": "q", "handler": "h", "concurrency_key": ""}')
    assert refused.value.errors()[0]["loc"] == ("concurrency_key",)
    assert CreateJob.model_validate_json('{"queue": "q", "handler": "h", "concurrency_key": "t1"}').concurrency_key == "t1"
