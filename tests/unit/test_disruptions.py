"""Disruptions are not handler errors: a pod Kubernetes takes away (node deleted, eviction, preemption) is lost.

Kubernetes marks such a pod with the condition DisruptionTarget=True and a reason saying who took it; the
attempt is recorded as PodLost with that reason in its message, never as Error, never as a non-retryable exit.
"""

from __future__ import annotations

import pytest

from _builders import Job
from sextant.controller.pods import observe
from sextant.lifecycle import attempts as A
from sextant.lifecycle.attempts import PodObservation, outcome_of
from sextant.resources.job import State

# The reasons Kubernetes gives the DisruptionTarget condition (any reason is a loss).
REASONS = ["DeletionByPodGC", "EvictionByEvictionAPI", "PreemptionByScheduler", "DeletionByTaintManager",
           "TerminationByKubelet"]


def disrupted(reason: str, phase: str = "Failed", **fields) -> PodObservation:
    return PodObservation(name="job-x-1", sequence=1, phase=phase, node="node-a", disruption=reason,
                          disruption_message=f"{reason} took it", **fields)


@pytest.mark.parametrize("reason", REASONS)
def test_a_disrupted_pod_is_lost_with_the_disruption_in_the_message(reason):
    got = outcome_of(disrupted(reason, exit_code=137), None)
    assert (got.result, got.reason, got.exit_code, got.node) == ("failed", "PodLost", 137, "node-a")
    assert got.message == f"{reason}: {reason} took it"


@pytest.mark.parametrize("reason", REASONS)
@pytest.mark.parametrize("code", [2, A.RUNNER_NON_RETRYABLE, 1])
def test_a_disruption_never_matches_non_retryable_exit_codes(reason, code):
    got = outcome_of(disrupted(reason, exit_code=code), None, non_retryable=[2, 1])
    assert got.reason == "PodLost"


@pytest.mark.parametrize("reason", REASONS)
def test_a_disrupted_pod_still_terminating_has_no_outcome_yet(reason):
    assert outcome_of(disrupted(reason, phase="Running", deleting=True), None) is None


def test_a_disrupted_pod_that_finished_its_work_succeeded():
    assert outcome_of(disrupted("EvictionByEvictionAPI", phase="Succeeded", exit_code=0), None).result == "succeeded"


def test_the_operators_own_stop_wins_over_a_disruption():
    assert outcome_of(disrupted("DeletionByPodGC"), "Cancelled").reason == "Cancelled"


def test_without_a_message_the_reason_is_enough():
    got = outcome_of(PodObservation("job-x-1", 1, "Failed", disruption="DeletionByPodGC"), None)
    assert got.message == "DeletionByPodGC: the pod was disrupted"


def pod_object(conditions: list[dict], phase: str = "Failed") -> dict:
    return {"metadata": {"name": "job-x-1", "uid": "p-1", "labels": {"sextant.dev/sequence": "1"}},
            "spec": {"nodeName": "gone", "containers": [{"name": "handler"}]},
            "status": {"phase": phase, "conditions": conditions}}


@pytest.mark.parametrize("reason", REASONS)
def test_observe_reads_the_disruption_target_condition(reason):
    seen = observe(pod_object([{"type": "Ready", "status": "False"},
                               {"type": "DisruptionTarget", "status": "True", "reason": reason,
                                "message": "PodGC: node no longer exists"}]))
    assert (seen.disruption, seen.disruption_message) == (reason, "PodGC: node no longer exists")


def test_a_false_disruption_target_is_no_disruption():
    seen = observe(pod_object([{"type": "DisruptionTarget", "status": "False", "reason": "EvictionByEvictionAPI"}]))
    assert seen.disruption is None


def test_a_node_deleted_under_a_running_attempt_is_lost_and_the_next_attempt_runs():
    job = Job()
    job.reconcile()
    job.admit()
    job.set_pod("Running", node="node-gone")
    job.reconcile()
    # PodGC: DisruptionTarget, phase Failed, no exit code (nobody saw the container end). Listed codes do not matter.
    job.set_pod("Failed", disruption="DeletionByPodGC", disruption_message="PodGC: node no longer exists")
    d = job.reconcile()
    entry = d.status.attempts[-1]
    assert (d.status.state, entry.reason, entry.node) == (State.FAILED, "PodLost", "node-gone")
    assert entry.message == "DeletionByPodGC: PodGC: node no longer exists"
    job.advance_to(d.status.next_attempt_at)
    assert job.reconcile().status.state == State.QUEUED
    job.admit()
    job.set_pod("Running")
    job.reconcile()
    assert job.status.attempts[-1].sequence == 2


def test_a_disrupted_pod_seen_only_once_deleted_is_lost_with_its_last_state():
    """PodGC marks the pod of a deleted node and force-deletes it at once: the reconcile may see only the
    deletion; the watch's last state of the pod still says why it went."""
    gone = disrupted("DeletionByPodGC", phase="Running")
    got = outcome_of(None, None, non_retryable=[1], gone=gone)
    assert (got.reason, got.node, got.message) == ("PodLost", "node-a", "DeletionByPodGC: DeletionByPodGC took it")
    assert outcome_of(None, None, gone=PodObservation("job-x-1", 1, "Running")).message == \
        "the attempt's pod was deleted before it finished"


def test_the_view_keeps_the_last_state_of_a_disrupted_pod_of_the_job():
    from sextant.controller.view import View
    from sextant.lifecycle.reading import read_job
    from sextant.lifecycle.transitions import JobSnapshot

    view = View()
    raw = {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
           "metadata": {"name": "job-x", "namespace": "shop", "uid": "u-1", "resourceVersion": "3",
                        "creationTimestamp": "2026-03-01T12:00:00Z"},
           "spec": {"queue": "q", "handler": "h"}, "status": {"state": "running", "sequence": 1, "attempt": 1}}
    view.upsert_job(raw)
    final = pod_object([{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
                         "message": "PodGC: node no longer exists"}])
    final["metadata"].update(namespace="shop", labels={"sextant.dev/job": "job-x", "sextant.dev/sequence": "1"},
                             ownerReferences=[{"apiVersion": "sextant.dev/v1alpha1", "kind": "Job", "name": "job-x",
                                               "uid": "u-1", "controller": True}])
    view.upsert_pod(final)
    view.delete_pod(final)
    snap = read_job(raw)
    assert isinstance(snap, JobSnapshot)
    seen = view.observations(("shop", "job-x"), snap)
    assert seen.attempts == () and seen.gone_pod(1).disruption == "DeletionByPodGC"
    view.delete_pod({"metadata": {"namespace": "shop", "name": "job-x-1"}})  # a relist's notice changes nothing
    assert view.observations(("shop", "job-x"), snap).gone_pod(1) is not None
