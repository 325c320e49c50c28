"""The Event recorder's budgets: Warnings queue for their turn, Normal Events beyond their budget are dropped."""

from __future__ import annotations

from typing import Any

from sextant.kube.events import EventRecorder, TokenBucket
from sextant.lifecycle.transitions import Event

JOB: dict[str, Any] = {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
                       "metadata": {"name": "job-a", "namespace": "shop", "uid": "u-1"}}


def recorder(**kw: Any) -> EventRecorder:
    return EventRecorder(kube=None, now=None, **kw)  # type: ignore[arg-type]  # record() never posts


def test_normal_events_beyond_their_burst_are_dropped_and_counted():
    events = recorder(normal_qps=0.001, normal_burst=3)
    for n in range(10):
        events.record(JOB, Event("Started", f"attempt {n}"))
    assert (events.pending, events.dropped) == (3, 7)


def test_warnings_are_queued_even_when_the_normal_budget_is_spent():
    events = recorder(normal_qps=0.001, normal_burst=1)
    events.record(JOB, Event("Started", "attempt 1"))
    events.record(JOB, Event("Started", "attempt 2"))
    for n in range(5):
        events.record(JOB, Event("Failed", f"attempt {n} failed", "Warning"))
    assert (events.pending, events.dropped) == (6, 1)


def test_the_backlog_bounds_warnings_too():
    events = recorder(backlog=4)
    for n in range(6):
        events.record(JOB, Event("Failed", f"attempt {n} failed", "Warning"))
    assert (events.pending, events.dropped) == (4, 2)


def test_disabled_records_nothing():
    events = recorder(enabled=False)
    events.record(JOB, Event("Failed", "x", "Warning"))
    assert (events.pending, events.dropped) == (0, 0)


def test_a_token_bucket_refills_at_its_rate(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("sextant.kube.events.time.monotonic", lambda: clock[0])
    bucket = TokenBucket(qps=2.0, burst=2)
    assert [bucket.try_take() for _ in range(3)] == [True, True, False]
    clock[0] += 0.5  # one token
    assert [bucket.try_take() for _ in range(2)] == [True, False]
    clock[0] += 60  # never more than the burst
    assert [bucket.try_take() for _ in range(3)] == [True, True, False]
