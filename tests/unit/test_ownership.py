"""Ownership, not labels: a pod or Lease counts as a job's attempt only if it really is that job's.

A pod: named as the attempt (<job>-<run>) and controlled (ownerReference, controller: true) by the job's uid.
A Lease: named as the attempt's pod, held by it (holderIdentity) and owned by it (the pod's uid). Anyone can put
the labels sextant.dev/job and sextant.dev/sequence on an object; such an object is never adopted, waited for,
deleted, or read as a heartbeat. The renewal of a Lease counts within [attempt start, now].
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

import pytest

from _builders import at, handler, queue
from sextant.controller.slots import Placement, standing
from sextant.controller.view import View
from sextant.lifecycle import transitions as T
from sextant.lifecycle.attempts import heartbeat
from sextant.resources.contract import LABEL_JOB, LABEL_SEQUENCE
from sextant.resources.job import State
from sextant.runner.env import AttemptEnv
from sextant.runner.lease import lease_body

KEY = ("shop", "job-a")


def job(state: str = "queued", sequence: int = 0, uid: str = "u-1") -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
            "metadata": {"name": "job-a", "namespace": "shop", "uid": uid, "resourceVersion": "10", "generation": 1,
                         "creationTimestamp": "2026-03-01T12:00:00Z"},
            "spec": {"queue": "emails", "handler": "send", "payload": {}},
            "status": {"state": state, "sequence": sequence, "attempt": sequence, "observedGeneration": 1,
                       "attempts": [{"attempt": sequence, "sequence": sequence, "pod": f"job-a-{sequence}",
                                     "result": "running", "startedAt": "2026-03-01T12:00:00Z"}] if sequence else []}}


def pod(sequence: int, *, name: str | None = None, owner: dict[str, Any] | None | str = "job", phase: str = "Running",
        rv: str = "5") -> dict[str, Any]:
    refs = {"job": [{"apiVersion": "sextant.dev/v1alpha1", "kind": "Job", "name": "job-a", "uid": "u-1",
                     "controller": True}],
            None: []}.get(owner, [owner]) if not isinstance(owner, dict) else [owner]
    return {"metadata": {"name": name or f"job-a-{sequence}", "namespace": "shop", "uid": f"pod-uid-{name or sequence}",
                         "resourceVersion": rv, "labels": {LABEL_JOB: "job-a", LABEL_SEQUENCE: str(sequence)},
                         "ownerReferences": refs},
            "spec": {"nodeName": "node-1", "containers": [{"name": "handler"}]},
            "status": {"phase": phase, "containerStatuses": [
                {"name": "handler", "state": {"running": {"startedAt": "2026-03-01T12:00:01Z"}}}]}}


def lease(sequence: int, renewed: str, *, name: str | None = None, holder: str | None = None,
          pod_uid: str | None = None) -> dict[str, Any]:
    name = name or f"job-a-{sequence}"
    return {"metadata": {"name": name, "namespace": "shop",
                         "labels": {LABEL_JOB: "job-a", LABEL_SEQUENCE: str(sequence)},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": f"job-a-{sequence}",
                                              "uid": pod_uid or f"pod-uid-{sequence}", "controller": True}]},
            "spec": {"holderIdentity": holder or name, "leaseDurationSeconds": 30, "renewTime": renewed}}


def view_at(now: datetime = at(20)) -> View:
    return View(now=lambda: now)


# ------------------------------------------------------------------------------------------------------ pods
@pytest.mark.parametrize("foreign", [
    pytest.param(pod(1, name="impostor"), id="labelled as the next run, another name, no owner"),
    pytest.param(pod(1, name="impostor", owner="job"), id="another name, even with the job as owner"),
    pytest.param(pod(1, owner=None), id="the attempt's name, no owner"),
    pytest.param(pod(1, owner={"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u-1",
                               "controller": True}), id="the attempt's name, another kind of owner"),
    pytest.param(pod(1, owner={"apiVersion": "sextant.dev/v1alpha1", "kind": "Job", "name": "job-a",
                               "uid": "u-1"}), id="the job as owner, but not as controller"),
    pytest.param(pod(1, owner={"apiVersion": "sextant.dev/v1alpha1", "kind": "Job", "name": "job-a",
                               "uid": "u-old", "controller": True}), id="an earlier job of the same name"),
])
def test_a_pod_that_is_not_the_jobs_is_not_its_attempt(foreign):
    view = view_at()
    view.upsert_job(job("queued"))
    view.upsert_pod(foreign)
    record = view.jobs[KEY]
    assert view.pods_of(KEY) == {}
    assert not view.has_strays(KEY, record)  # so never adopted, nor force-deleted as a stray
    seen = standing(False, view.pods_of(KEY).values())
    assert not seen.holds and seen.placement is Placement.BOUND  # nor holding the queue's slot
    assert view.observations(KEY, View.snapshot(record)).attempts == ()


def test_the_jobs_own_pod_counts_even_when_seen_before_the_job():
    view = view_at()
    view.upsert_pod(pod(1))  # a relist may deliver pods first
    assert view.pods_of(KEY) == {}
    view.upsert_job(job("queued"))
    assert list(view.pods_of(KEY)) == [1] and view.has_strays(KEY, view.jobs[KEY])
    assert standing(False, view.pods_of(KEY).values()).holds


def test_a_foreign_pod_never_replaces_the_attempts_own_pod():
    view = view_at()
    view.upsert_job(job("running", sequence=1))
    view.upsert_pod(pod(1))
    view.upsert_pod(pod(1, name="impostor", phase="Failed", rv="9"))
    view.delete_pod(pod(1, name="impostor", rv="10"))
    assert view.pods_of(KEY)[1].phase == "Running"


# ---------------------------------------------------------------------------------------------------- leases
def running_view() -> tuple[View, Any]:
    view = view_at(at(20))
    view.upsert_job(job("running", sequence=1))
    view.upsert_pod(pod(1))
    return view, View.snapshot(view.jobs[KEY])


def test_the_attempts_own_lease_is_its_heartbeat():
    view, snap = running_view()
    view.upsert_lease(lease(1, "2026-03-01T12:00:15Z"))
    assert view.observations(KEY, snap).lease_renewed_at == at(15)


@pytest.mark.parametrize("foreign", [
    pytest.param(lease(1, "2026-03-01T12:00:19Z", name="job-b-1"), id="another name"),
    pytest.param(lease(1, "2026-03-01T12:00:19Z", holder="job-b-1"), id="held by another pod"),
    pytest.param(lease(1, "2026-03-01T12:00:19Z", pod_uid="pod-uid-of-job-b"), id="owned by another pod"),
])
def test_a_lease_that_is_not_the_attempts_pods_cannot_prolong_it(foreign):
    view, snap = running_view()
    view.upsert_lease(foreign)
    # the container's start (12:00:01) is the only sign of life: the foreign renewal at 12:00:19 does not count
    assert view.observations(KEY, snap).lease_renewed_at == at(1)


def test_a_stale_foreign_lease_cannot_fail_the_attempt_nor_its_delete_remove_the_real_one():
    view, snap = running_view()
    view.upsert_lease(lease(1, "2026-03-01T12:00:15Z"))
    view.upsert_lease(lease(1, "2000-01-01T00:00:00Z", name="evil"))
    view.delete_lease(lease(1, "2000-01-01T00:00:00Z", name="evil"))
    assert view.observations(KEY, snap).lease_renewed_at == at(15)


def test_a_renewal_in_the_future_counts_from_when_it_was_seen():
    view, snap = running_view()  # the operator's clock: 12:00:20
    view.upsert_lease(lease(1, "2099-01-01T00:00:00Z"))
    assert view.observations(KEY, snap).lease_renewed_at == at(20)


def test_the_lifecycle_clamps_the_renewal_to_the_attempt():
    assert heartbeat(at(500), at(10), at(100)) == at(100)  # not after now
    assert heartbeat(at(-500), at(10), at(100)) == at(10)  # not before the attempt started
    assert heartbeat(at(50), at(10), at(100)) == at(50)
    assert heartbeat(None, at(10), at(100)) is None


def test_a_lease_stamped_in_the_future_does_not_keep_the_attempt_alive():
    """Seen at 12:00:20 with a renewTime in 2099 and never renewed since: expired at 12:00:50 (leaseDuration 30s)."""
    view, _ = running_view()
    view.queues[("shop", "emails")] = queue()
    view.handlers[("shop", "send")] = handler()
    view.upsert_lease(lease(1, "2099-01-01T00:00:00Z"))
    snap = View.snapshot(view.jobs[KEY])
    assert T.reconcile(snap, view.observations(KEY, snap), at(49)).status.stop_reason is None
    d = T.reconcile(snap, view.observations(KEY, snap), at(50))
    assert d.status.stop_reason == "LeaseExpired" and d.status.state == State.RUNNING


# ---------------------------------------------------------------------------------------------------- runner
def attempt_env(**fields: Any) -> AttemptEnv:
    base = dict(job_id="job_a", job_name="job-a", job_uid="u-1", namespace="shop", queue="emails", handler="send",
                attempt=1, sequence=1, scheduled_at="", payload=None, lease_name="job-a-1",
                lease_duration=timedelta(seconds=1.5), cancel_grace=timedelta(seconds=10), pod_name="job-a-1",
                heartbeat=True, pod_uid="pod-uid-1")
    return AttemptEnv(**{**base, **fields})


def test_the_runners_lease_proves_whose_it_is():
    body = lease_body(attempt_env(), at(12))
    assert body["metadata"]["name"] == body["spec"]["holderIdentity"] == "job-a-1"
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "job-a-1", "uid": "pod-uid-1", "controller": True}]
    assert body["spec"]["leaseDurationSeconds"] == 2  # the queue's leaseDuration, rounded up
    view, snap = running_view()
    view.upsert_lease(copy.deepcopy(body))
    assert view.observations(KEY, snap).lease_renewed_at == at(12)
