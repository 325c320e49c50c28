"""The WorkerPool controller's own pieces (controller/pools.py, View.assignable_workers): a retired worker is given no
job, an unreadable spec names its field, and a condition's lastTransitionTime moves only when its status flips."""

from __future__ import annotations

from typing import Any

from _builders import T0, at
from sextant.controller.pools import conditions, read_spec
from sextant.controller.view import View
from sextant.lifecycle import workers as W


def worker(name: str, slots: int = 4) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "generation": 1,
                         "resourceVersion": "1"},
            "spec": {"incarnation": "abc", "queues": ["q"], "handlers": ["h"], "slots": slots,
                     "leaseDurationSeconds": 15}}


def test_a_retired_worker_gets_no_job_but_still_serves_its_queue() -> None:
    view = View(now=lambda: T0)
    for name in ("a", "b"):
        view.upsert_worker(worker(name, slots=8 if name == "a" else 2))
    assert W.pick_worker(view.assignable_workers("ns"), "q", "h", {}).name == "a"  # the most free slots
    view.retiring[("ns", "pool")] = frozenset({"a"})
    assert [w.name for w, _ in view.assignable_workers("ns")] == ["b"]
    assert W.pick_worker(view.assignable_workers("ns"), "q", "h", {}).name == "b"
    assert W.pick_worker(view.assignable_workers("ns"), "q", "h", {"b": 2}) is None  # b full: wait, not a
    assert W.is_served(view.live_workers("ns"), "q", "h")  # no NoWorker for the jobs meanwhile
    view.retiring[("other", "pool")] = frozenset({"b"})  # another namespace's pool retires its own workers only
    assert [w.name for w, _ in view.assignable_workers("ns")] == ["b"]


def test_an_unreadable_spec_names_the_field_and_the_rule() -> None:
    spec, problem = read_spec({"spec": {"scaleTargetRef": {"name": "w"}, "minReplicas": 4, "maxReplicas": 2}})
    assert spec is None and problem == "spec.maxReplicas: maxReplicas (2) must not be less than minReplicas (4)"
    spec, problem = read_spec({"spec": {"scaleTargetRef": {"name": "w"}, "slotsPerWorker": "many"}})
    assert spec is None and problem is not None and problem.startswith("spec.slotsPerWorker:")
    spec, problem = read_spec({"spec": {}})
    assert spec is None and problem is not None and "spec.scaleTargetRef" in problem
    spec, problem = read_spec({"spec": {"scaleTargetRef": {"name": "w"}}})
    assert spec is not None and problem is None


def test_a_condition_keeps_its_transition_time_until_its_status_flips() -> None:
    first = conditions(None, at(0), ("AbleToScale", "True", "ReadyForNewScale", ""))
    assert first[0]["lastTransitionTime"] == "2026-03-01T12:00:00Z"
    same = conditions(first, at(60), ("AbleToScale", "True", "WaitingForDrain", "retiring w-1"))
    assert same[0]["lastTransitionTime"] == "2026-03-01T12:00:00Z" and same[0]["reason"] == "WaitingForDrain"
    flipped = conditions(same, at(120), ("AbleToScale", "False", "FailedGetScale", "gone"))
    assert flipped[0]["lastTransitionTime"] == "2026-03-01T12:02:00Z"
