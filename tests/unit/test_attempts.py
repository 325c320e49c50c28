"""What an attempt's pod tells: still running, or the outcome (what counts as a failed attempt)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sextant.lifecycle import attempts as A
from sextant.lifecycle.attempts import Outcome, PodObservation, outcome_of
from sextant.lifecycle.workers import Believed, observe_assignment
from sextant.resources.common import parse_time
from sextant.resources.worker import Assignment, WorkerResult


def pod(phase: str, **fields) -> PodObservation:
    return PodObservation(name="job-x-1", sequence=1, phase=phase, node=fields.pop("node", "node-a"), **fields)


def test_timeline_reasons_are_the_documented_names():
    assert (A.ERROR, A.TIMEOUT, A.LEASE_EXPIRED, A.POD_LOST, A.NON_RETRYABLE, A.CANCELLED) == (
        "Error", "Timeout", "LeaseExpired", "PodLost", "NonRetryableExitCode", "Cancelled",
    )


@pytest.mark.parametrize(
    "observed,want",
    [
        pytest.param(pod("Succeeded", exit_code=0), Outcome("succeeded", None, 0, None, "node-a"), id="exit 0"),
        pytest.param(pod("Succeeded"), Outcome("succeeded", None, 0, None, "node-a"), id="succeeded, no exit code"),
        pytest.param(pod("Succeeded", exit_code=0, message="simulated: nothing ran"),
                     Outcome("succeeded", None, 0, "simulated: nothing ran", "node-a"),
                     id="succeeded with a termination message: the timeline shows it"),
        pytest.param(pod("Failed", exit_code=1), Outcome("failed", "Error", 1, "exit code 1", "node-a"), id="exit 1"),
        pytest.param(pod("Failed", exit_code=137), Outcome("failed", "Error", 137, "exit code 137", "node-a"),
                     id="137 without a stop request is an Error"),
        pytest.param(pod("Failed", exit_code=3, message="OOMKilled"), Outcome("failed", "Error", 3, "OOMKilled", "node-a"),
                     id="the pod's message wins"),
        pytest.param(pod("Failed"), Outcome("failed", "Error", None, "the pod failed", "node-a"), id="no exit code"),
    ],
)
def test_handler_outcome(observed, want):
    assert outcome_of(observed, None) == want


@pytest.mark.parametrize("code", [2, 64], ids=lambda c: f"exit {c}")
def test_non_retryable_exit_code(code):
    got = outcome_of(pod("Failed", exit_code=code), None, non_retryable=[2, 64])
    assert (got.result, got.reason, got.exit_code) == ("failed", "NonRetryableExitCode", code)
    assert str(code) in got.message and "nonRetryableExitCodes" in got.message


@pytest.mark.parametrize("code", [1, 3, 137], ids=lambda c: f"exit {c}")
def test_other_exit_codes_stay_retryable(code):
    assert outcome_of(pod("Failed", exit_code=code), None, non_retryable=[2]).reason == "Error"


def test_the_runners_non_retryable_exit_code_needs_no_listing():
    """The SDK's NonRetryableError makes the runner exit with RUNNER_NON_RETRYABLE."""
    got = outcome_of(pod("Failed", exit_code=A.RUNNER_NON_RETRYABLE, message="bad payload"), None, non_retryable=[])
    assert (got.result, got.reason, got.exit_code, got.message) == (
        "failed", "NonRetryableExitCode", A.RUNNER_NON_RETRYABLE, "bad payload")


def test_success_is_not_read_as_non_retryable():
    assert outcome_of(pod("Succeeded", exit_code=0), None, non_retryable=[0]).result == "succeeded"


@pytest.mark.parametrize("reason", sorted(A.LOST_POD_REASONS))
def test_pods_taken_by_the_cluster_are_lost(reason):
    got = outcome_of(pod("Failed", reason=reason, message="the node was low on memory"), None)
    assert (got.result, got.reason) == ("failed", "PodLost")
    assert got.message == f"{reason}: the node was low on memory"
    assert got.node == "node-a"


def test_lost_wins_over_a_non_retryable_exit_code():
    assert outcome_of(pod("Failed", reason="Evicted", exit_code=2), None, non_retryable=[2]).reason == "PodLost"


def test_lost_pod_without_message():
    assert outcome_of(pod("Failed", reason="Preempted"), None).message == "Preempted: the pod was lost"


@pytest.mark.parametrize("code", [137, 1, 2], ids=lambda c: f"exit {c}")
def test_a_pod_killed_by_someone_elses_delete_is_lost_not_an_error(code):
    got = outcome_of(pod("Failed", exit_code=code, deleting=True), None, non_retryable=[2])
    assert (got.result, got.reason, got.exit_code) == ("failed", "PodLost", code)


def test_pod_gone_is_lost():
    got = outcome_of(None, None)
    assert (got.result, got.reason, got.exit_code) == ("failed", "PodLost", None)


@pytest.mark.parametrize(
    "stop,result",
    [("Cancelled", "cancelled"), ("Timeout", "failed"), ("LeaseExpired", "failed")],
)
@pytest.mark.parametrize(
    "observed,exit_code",
    [
        pytest.param(pod("Failed", exit_code=137), 137, id="SIGKILL 137"),
        pytest.param(pod("Failed", exit_code=143), 143, id="SIGTERM 143"),
        pytest.param(pod("Succeeded", exit_code=0), 0, id="exited 0 after the signal"),
        pytest.param(pod("Failed", reason="Evicted"), None, id="evicted meanwhile"),
        pytest.param(None, None, id="pod gone"),
    ],
)
def test_stop_reason_wins_and_records_the_exit_code(stop, result, observed, exit_code):
    got = outcome_of(observed, stop, non_retryable=[137, 143])
    assert (got.result, got.reason, got.exit_code) == (result, stop, exit_code)
    assert got.reason != "Error"


@pytest.mark.parametrize(
    "stop,words",
    [("Cancelled", "cancelled"), ("Timeout", "timeout"), ("LeaseExpired", "lease expired")],
)
def test_stop_messages(stop, words):
    assert words in outcome_of(None, stop).message


@pytest.mark.parametrize("stop", [None, "Cancelled", "Timeout", "LeaseExpired"])
@pytest.mark.parametrize(
    "observed",
    [
        pytest.param(pod("Pending"), id="pending"),
        pytest.param(pod("Running"), id="running"),
        pytest.param(pod("Unknown"), id="unknown"),
        pytest.param(pod("Running", deleting=True), id="terminating"),
    ],
)
def test_a_pod_that_has_not_finished_has_no_outcome(observed, stop):
    assert outcome_of(observed, stop) is None


def test_node_is_recorded():
    assert outcome_of(pod("Failed", exit_code=1, node="node-7"), None).node == "node-7"
    assert outcome_of(pod("Failed", exit_code=137, node="node-7"), "Timeout").node == "node-7"


@pytest.mark.parametrize(
    "phase,deleting,finished,alive",
    [
        ("Pending", False, False, True),
        ("Running", False, False, True),
        ("Unknown", False, False, True),
        ("Running", True, False, True),
        ("Succeeded", False, True, False),
        ("Failed", False, True, False),
        ("Failed", True, True, True),
    ],
    ids=lambda v: str(v),
)
def test_pod_finished_and_alive(phase, deleting, finished, alive):
    observed = pod(phase, deleting=deleting)
    assert (observed.finished, observed.alive) == (finished, alive)


def test_a_handler_that_cannot_start_is_an_ordinary_error_in_a_pod_and_on_a_worker_alike():
    """Exit 127 (a command or --module not there): retried like any Error, unless the Handler lists 127 in
    nonRetryableExitCodes; a worker's result reads exactly as a pod's."""
    message = "cannot start 'send': No such file or directory"
    assignment = Assignment(job="job-x", uid="u1", queue="q", handler="h", sequence=1, attempt=1, incarnation="i1",
                            assigned_at="2026-03-01T12:00:00Z")
    result = WorkerResult(job="job-x", uid="u1", sequence=1, incarnation="i1", exit_code=127, message=message,
                          started_at="2026-03-01T12:00:01Z", finished_at="2026-03-01T12:00:02Z")
    worker = Believed(namespace="ns", name="w1", uid="w", generation=2, incarnation="i1", results=(result,))
    seen = observe_assignment(assignment, "w1", worker, True, parse_time("2026-03-01T12:00:03Z"))
    in_a_pod = outcome_of(pod("Failed", exit_code=127, message=message, node="w1"), None)
    on_a_worker = outcome_of(seen, None)
    assert in_a_pod == replace(on_a_worker, started_at=None, finished_at=None) == \
        Outcome("failed", "Error", 127, message, "w1")
    assert on_a_worker.finished_at == parse_time("2026-03-01T12:00:02Z"), "the worker's own times, for the timeline"
    assert outcome_of(seen, None, non_retryable=[127]).reason == A.NON_RETRYABLE


def _pod_object(terminated: dict) -> dict:
    return {"metadata": {"name": "job-x-1", "labels": {"sextant.dev/job": "job-x", "sextant.dev/sequence": "1"}},
            "spec": {"nodeName": "node-a", "containers": [{"name": "handler"}]},
            "status": {"phase": "Succeeded", "containerStatuses": [{"name": "handler",
                                                                     "state": {"terminated": terminated}}]}}


def test_a_succeeded_pods_message_is_its_termination_message_never_its_reason():
    """"Completed" would only repeat `succeeded`; a termination message of its own (the local control plane's
    kwok nodes write "simulated: … nothing ran") is what a user must read."""
    from sextant.controller.pods import observe

    assert observe(_pod_object({"exitCode": 0, "reason": "Completed"})).message is None
    said = observe(_pod_object({"exitCode": 0, "reason": "Completed", "message": "simulated: nothing ran"}))
    assert said.message == "simulated: nothing ran"
    failed = _pod_object({"exitCode": 2, "reason": "Error"})
    failed["status"]["phase"] = "Failed"
    assert observe(failed).message == "Error"
