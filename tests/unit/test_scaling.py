"""Worker pools' replicas (lifecycle/scaling.py): the demand counted in slots, the desired replicas, the scale-down
delay and the plan that removes only idle workers — by table, and by property over random pools."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from _builders import T0, at, queue
from sextant.lifecycle.scaling import (Demand, Member, Plan, desired_replicas, plan, queue_demand, stabilized,
                                       total)
from sextant.resources.workerpool import WorkerPoolSpec

LEAD = timedelta(seconds=30)


def job(state: str | None, *, handler: str = "h", run_at: str | None = None,
        next_attempt_at: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if state is not None:
        status["state"] = state
    if next_attempt_at:
        status["nextAttemptAt"] = next_attempt_at
    spec: dict[str, Any] = {"queue": "q", "handler": handler}
    if run_at:
        spec["runAt"] = run_at
    return {"metadata": {"name": "j", "creationTimestamp": "2026-03-01T11:00:00Z"}, "spec": spec, "status": status}


def kept_free_slots(members: list[Member], retire: tuple[str, ...], slots_per_worker: int) -> int:
    """The free slots of the workers not retired: what the queued jobs can start in."""
    return sum(max(0, slots_per_worker - m.busy) for m in members if m.name not in retire)


def every(_: dict[str, Any]) -> bool:
    return True


# --- demand ----------------------------------------------------------------------------------------------------
def test_each_job_counts_once_by_what_it_needs() -> None:
    jobs = [job("queued"), job(None), job("running"), job("running"),
            job("scheduled", next_attempt_at="2026-03-01T12:00:20Z"),  # due within the lead time
            job("scheduled", next_attempt_at="2026-03-01T12:05:00Z"),  # not yet
            job("failed", next_attempt_at="2026-03-01T12:00:10Z"),  # its backoff ends within the lead time
            job(None, run_at="2026-03-01T12:00:29Z"),  # new, runAt ahead but within the lead time
            job("succeeded"), job("dead"), job("cancelled")]
    assert queue_demand(jobs, queue(concurrency=100), every, T0, LEAD) == Demand(2, 2, 3, 7)


def test_only_the_pools_jobs_count() -> None:
    jobs = [job("queued", handler="mine"), job("queued", handler="pods"), job("running", handler="mine")]
    demand = queue_demand(jobs, queue(), lambda j: j["spec"]["handler"] == "mine", T0, LEAD)
    assert demand == Demand(1, 1, 0, 2)


def test_demand_is_capped_at_the_queues_concurrency() -> None:
    jobs = [job("queued")] * 200 + [job("running")] * 3
    assert queue_demand(jobs, queue(concurrency=10), every, T0, LEAD).slots == 10


def test_a_paused_queue_needs_only_its_running_slots() -> None:
    jobs = [job("queued")] * 50 + [job("running")] * 3
    assert queue_demand(jobs, queue(paused=True), every, T0, LEAD) == Demand(50, 3, 0, 3)


def test_a_missing_queue_is_not_capped() -> None:
    assert queue_demand([job("queued")] * 30, None, every, T0, LEAD).slots == 30


def test_total_adds_the_queues() -> None:
    assert total([Demand(1, 2, 3, 6), Demand(4, 0, 0, 4)]) == Demand(5, 2, 3, 10)


# --- desired ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("slots, per_worker, low, high, expected", [
    (0, 8, 0, 10, 0),      # nothing to do: scale to zero
    (1, 8, 0, 10, 1),      # one job wakes a worker
    (8, 8, 0, 10, 1),
    (9, 8, 0, 10, 2),
    (200, 8, 0, 10, 10),   # held at max
    (0, 8, 2, 10, 2),      # held at min
    (200, 16, 0, 100, 13),
])
def test_desired_replicas(slots: int, per_worker: int, low: int, high: int, expected: int) -> None:
    assert desired_replicas(slots, per_worker, low, high) == expected


# --- the scale-down delay ------------------------------------------------------------------------------------------
def test_up_at_once_down_only_after_the_window() -> None:
    window = timedelta(seconds=60)
    assert stabilized(2, 5, [], at(0), window) == 5
    recent = [(at(0), 5), (at(30), 1)]
    assert stabilized(5, 1, recent, at(50), window) == 5  # 5 was wanted 50 s ago
    assert stabilized(5, 1, recent, at(61), window) == 1  # ... and is out of the window now
    assert stabilized(3, 1, [(at(0), 9)], at(10), window) == 3  # never above current on the way down


# --- the plan --------------------------------------------------------------------------------------------------
def idle(name: str) -> Member:
    return Member(name)


def busy(name: str, n: int = 1) -> Member:
    return Member(name, busy=n)


@pytest.mark.parametrize("current, target, members, retiring, expected", [
    (0, 3, [], (), Plan(3)),
    (3, 3, [idle("a"), idle("b"), idle("c")], ("a",), Plan(3)),  # level: nothing retired any more
    # down by 2, both idle: removed now
    (3, 1, [busy("a"), idle("b"), idle("c")], (), Plan(1, ("b", "c"), ("b", "c"))),
    # down by 2, one busy: retired, removed once idle
    (3, 1, [busy("a", 2), busy("b"), idle("c")], (), Plan(2, ("b", "c"), ("c",))),
    # all busy: retired, nothing removed yet
    (2, 0, [busy("a"), busy("b")], (), Plan(2, ("a", "b"))),
    # replicas not created yet go first, with no pod deleted
    (5, 3, [busy("a"), busy("b"), busy("c")], (), Plan(3)),
    (5, 2, [busy("a"), busy("b", 3), busy("c")], (), Plan(3, ("a",))),
    # an unregistered pod (no Worker yet: no job can be on it) goes before a registered idle one
    (2, 1, [idle("a"), Member("b", registered=False)], (), Plan(1, ("b",), ("b",))),
    # those already retiring stay retired (no churn), even when busier
    (3, 2, [busy("a", 1), busy("b", 3), idle("c")], ("b",), Plan(3, ("b",))),
    # more pods than replicas (a surge, a deletion under way): retire, but remove nothing
    (2, 1, [idle("a"), idle("b"), idle("c")], (), Plan(2, ("a",))),
])
def test_plan(current: int, target: int, members: list[Member], retiring: tuple[str, ...], expected: Plan) -> None:
    assert plan(current, target, members, retiring) == expected


# --- properties ------------------------------------------------------------------------------------------------
@st.composite
def pools(draw: st.DrawFn) -> tuple[int, int, int, int, list[Member], int, tuple[str, ...]]:
    per_worker = draw(st.integers(1, 8))
    low = draw(st.integers(0, 3))
    high = draw(st.integers(max(low, 1), 12))
    n = draw(st.integers(0, 12))
    members = []
    for i in range(n):  # a pod with no Worker object yet cannot have been given a job
        registered = draw(st.booleans())
        members.append(Member(f"w{i}", busy=draw(st.integers(0, per_worker)) if registered else 0,
                              registered=registered))
    unborn = draw(st.integers(0, 3))
    queued = draw(st.integers(0, 100))
    retiring = tuple(m.name for m in members if draw(st.booleans()))
    return per_worker, low, high, n + unborn, members, queued, retiring


@settings(max_examples=500, deadline=None)
@given(pools())
def test_a_scale_down_takes_only_idle_workers_and_keeps_what_the_work_needs(
        pool: tuple[int, int, int, int, list[Member], int, tuple[str, ...]]) -> None:
    per_worker, low, high, current, members, queued, retiring = pool
    running = sum(m.busy for m in members)
    desired = desired_replicas(queued + running, per_worker, low, high)
    result = plan(current, desired, members, retiring)
    # within [min, max] when moving, never below the target, never past current on the way down
    assert low <= desired <= high
    assert result.replicas >= desired
    assert result.replicas == desired if desired >= current else result.replicas <= current
    # never below what running + queued need (up to max)
    assert result.replicas >= min(high, math.ceil((queued + running) / per_worker))
    # every pod the ReplicaSet deletes (the pods beyond the new replicas, lowest deletion cost first) is idle
    by_name = {m.name: m for m in members}
    deleted = max(0, len(members) - result.replicas)
    assert deleted <= len(result.remove)
    assert all(by_name[name].busy == 0 for name in result.remove)
    assert set(result.remove) <= set(result.retire)
    # on the way down, the workers kept have a free slot for every queued job, unless max holds the pool smaller
    # than the work
    if desired < current == len(members) and desired * per_worker >= queued + running:
        assert kept_free_slots(members, result.retire, per_worker) >= queued


# --- the resource ----------------------------------------------------------------------------------------------
def test_the_spec_names_the_field_and_the_rule() -> None:
    base = {"scaleTargetRef": {"name": "workers"}, "queues": ["q"]}
    spec = WorkerPoolSpec.model_validate(base)
    assert (spec.min_replicas, spec.max_replicas, spec.slots_per_worker, spec.lead, spec.window) == \
        (0, 10, 8, timedelta(seconds=30), timedelta(seconds=60))
    with pytest.raises(ValidationError, match="maxReplicas \\(2\\) must not be less than minReplicas \\(3\\)"):
        WorkerPoolSpec.model_validate({**base, "minReplicas": 3, "maxReplicas": 2})
    assert WorkerPoolSpec.model_validate({"scaleTargetRef": {"name": "w"}}).queues == []  # every Queue
    with pytest.raises(ValidationError, match="slotsPerWorker|slots_per_worker"):
        WorkerPoolSpec.model_validate({**base, "slotsPerWorker": 0})
    with pytest.raises(ValidationError, match="kind"):
        WorkerPoolSpec.model_validate({**base, "scaleTargetRef": {"name": "w", "kind": "StatefulSet"}})


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 20), st.lists(st.tuples(st.integers(0, 120), st.integers(0, 20)), max_size=12),
       st.integers(0, 20), st.integers(1, 90))
def test_no_flapping_a_scale_down_follows_the_highest_wanted_within_the_window(
        current: int, history: list[tuple[int, int]], desired: int, window_seconds: int) -> None:
    now, window = at(120), timedelta(seconds=window_seconds)
    recent = [(at(t), r) for t, r in history]
    target = stabilized(current, desired, recent, now, window)
    if desired >= current:
        assert target == desired  # up at once
    else:
        in_window = [r for t, r in recent if t > now - window]
        assert desired <= target <= current
        assert target == min(current, max([desired, *in_window]))
