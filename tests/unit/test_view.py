"""The operator's in-memory view: which jobs it keeps as a small fixed record, and what that record still answers."""

from __future__ import annotations

import copy
import gc
import tracemalloc
import uuid
from datetime import datetime, timezone
from typing import Any

import pytest

from sextant.controller.slots import Placement, standing
from sextant.controller.records import FinishedJob, LiveJob, settled
from sextant.controller.view import View
from sextant.lifecycle.reading import read_job
from sextant.resources.contract import LABEL_JOB, LABEL_SEQUENCE
from sextant.resources.job import State

PER_FINISHED_JOB = 200  # bytes of Python objects per finished job in the view, at most (~182 measured: issue 41's target)


def job(state: str | None, *, generation: int = 1, observed: int | None = 1, rv: str = "10",
        name: str = "job-a") -> dict[str, Any]:
    raw: dict[str, Any] = {
        "apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": "shop", "uid": "u-1", "resourceVersion": rv,
                     "generation": generation, "creationTimestamp": "2026-03-01T12:00:00Z",
                     "labels": {"sextant.dev/schedule": "nightly"}},
        "spec": {"queue": "emails", "handler": "send", "payload": {"to": "a@example.com"},
                 "idempotencyKey": "k-1", "priority": 3},
        "status": {},
    }
    if state is not None:
        raw["status"] = {"state": state, "sequence": 2, "attempt": 2, "finishedAt": "2026-03-01T12:01:00Z",
                         "observedGeneration": observed, "message": "done",
                         "attempts": [{"attempt": 1, "sequence": 1, "pod": f"{name}-1", "result": "failed"},
                                      {"attempt": 2, "sequence": 2, "pod": f"{name}-2", "result": "succeeded"}],
                         "conditions": [{"type": "Succeeded", "status": "True"}]}
    return raw


def pod(job_name: str, sequence: int, *, owner: str | None = "u-1", name: str | None = None,
        phase: str = "Succeeded") -> dict[str, Any]:
    """An attempt pod as the operator creates it: owned (controller ownerReference) by the job with uid `owner`."""
    meta: dict[str, Any] = {"name": name or f"{job_name}-{sequence}", "namespace": "shop", "resourceVersion": "5",
                            "uid": f"pod-{job_name}-{sequence}",
                            "labels": {LABEL_JOB: job_name, LABEL_SEQUENCE: str(sequence)}}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "sextant.dev/v1alpha1", "kind": "Job", "name": job_name,
                                    "uid": owner, "controller": True}]
    return {"metadata": meta, "spec": {"containers": [{"name": "handler"}]}, "status": {"phase": phase}}


@pytest.mark.parametrize("state,generation,observed,expected", [
    ("succeeded", 1, 1, True),
    ("dead", 1, 1, True),
    ("cancelled", 3, 3, True),
    ("succeeded", 2, 1, False),  # a spec change (a retry) not yet acted upon
    ("failed", 1, 1, False),  # waits for its next attempt
    ("running", 1, 1, False),
    ("queued", 1, 1, False),
    ("scheduled", 1, 1, False),
    (None, 1, None, False),
])
def test_only_finished_jobs_whose_spec_was_acted_upon_are_settled(state, generation, observed, expected):
    assert settled(job(state, generation=generation, observed=observed)) is expected


def test_the_view_keeps_settled_jobs_as_a_small_record_and_the_rest_as_the_rules_read_them():
    view = View()
    running, done = job("running", name="job-r"), job("succeeded", name="job-s")
    view.upsert_job(copy.deepcopy(running))
    view.upsert_job(copy.deepcopy(done))
    live = view.jobs[("shop", "job-r")]
    assert isinstance(live, LiveJob) and live.raw == running and live.whole  # a small payload too
    assert isinstance(view.jobs[("shop", "job-s")], FinishedJob)
    assert view.whole_job(("shop", "job-s")) is None, "the HTTP API reads a finished job from the API server"


def test_a_finished_jobs_record_answers_what_retention_counting_idempotency_and_its_schedule_read():
    view = View()
    view.upsert_job(job("succeeded"))
    kept = view.jobs[("shop", "job-a")]
    assert isinstance(kept, FinishedJob) and kept.state == State.SUCCEEDED and not kept.unfinished
    assert (kept.queue, kept.sequence, kept.idempotency_key, kept.schedule) == ("emails", 2, "k-1", "nightly")
    assert kept.finished_at == datetime(2026, 3, 1, 12, 1, tzinfo=timezone.utc)
    assert kept.created_at == datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
    assert (kept.uid, kept.resource_version) == ("u-1", "10")
    uid = str(uuid.uuid4())
    view.upsert_job({**job("dead"), "metadata": {**job("dead")["metadata"], "name": "job-u", "uid": uid}})
    assert view.jobs[("shop", "job-u")].uid == uid


def test_a_retried_job_is_live_again():
    view = View()
    view.upsert_job(job("dead", rv="10"))
    retried = job("dead", generation=2, observed=1, rv="11")
    view.upsert_job(copy.deepcopy(retried))
    record = view.jobs[("shop", "job-a")]
    assert isinstance(record, LiveJob) and record.raw == retried and record.version == 11


@pytest.mark.parametrize("uid, version, sequence, queue", [
    ("123e4567-e89b-12d3-a456-426614174000", 10, 2, "emails"),  # packed: 39 bytes, nothing in the tail
    ("not-a-uuid", 2**70, 2**33, "emails"),  # what the fixed fields cannot hold goes in the tail
    ("123E4567-E89B-12D3-A456-426614174000", 0, -1, ""),  # a uid that would not read back the same: as is
])
def test_a_finished_jobs_packed_record_reads_back_what_it_was_given(uid, version, sequence, queue):
    rare = ("k-1", "nightly", "2026-03-01T12:00:00Z", "job-0", 1.7e9)
    for given in ((None,) * 5, rare):
        record = FinishedJob.pack(uid, version, State.FAILED, queue, sequence, 1.75e9, given)
        assert (record.uid, record.version, record.state, record.queue, record.sequence) == \
            (uid, version, State.FAILED, queue, sequence)
        assert (record.idempotency_key, record.schedule, record.tick, record.duplicate_of) == given[:4]
        assert record.finished_at == datetime.fromtimestamp(1.75e9, timezone.utc)
        assert record.created_at == (datetime.fromtimestamp(1.7e9, timezone.utc) if given[4] else None)
        assert record != FinishedJob(record) and record == record, "compared by identity, as records were"


def test_compacting_the_view_keeps_every_job_its_record_and_their_order():
    view = View()
    for n, state in enumerate(["succeeded", "running", "failed", "succeeded"]):
        raw = job(state, name=f"job-{n}", rv=str(20 + n))
        raw["metadata"]["uid"] = str(uuid.UUID(int=n + 1))
        raw["metadata"]["namespace"] = "shop" if n % 2 == 0 else "ops"
        view.upsert_job(raw)
    before = [(key, type(r), r.uid, r.resource_version, r.state, r.queue, r.sequence, r.idempotency_key, r.schedule,
               r.finished_at, r.created_at) for key, r in view.jobs.items()]
    live = view.jobs[("ops", "job-1")]
    view.compact()
    after = [(key, type(r), r.uid, r.resource_version, r.state, r.queue, r.sequence, r.idempotency_key, r.schedule,
              r.finished_at, r.created_at) for key, r in view.jobs.items()]
    assert after == before and view.jobs[("ops", "job-1")] is live
    assert view.by_idempotency_key[("shop", "k-1")] == {("shop", "job-0"), ("shop", "job-2")}


def test_a_finished_job_costs_the_view_a_few_hundred_bytes():
    """What 100k finished jobs cost the operator (issue 41: 3-4 KB each before): the Python allocations of the view
    taking them in, with names and uids as the API server makes them and a label no rule reads."""
    def finished(n: int) -> dict[str, Any]:
        raw = job("succeeded", name=f"job-{n:08d}", rv=str(1_000_000 + n))
        raw["metadata"]["uid"] = str(uuid.uuid4())
        raw["metadata"]["labels"] = {"team": "payments"}
        del raw["spec"]["idempotencyKey"]  # most jobs have neither a key nor a schedule (which cost a few bytes more)
        return raw

    count = 5000
    objects = [finished(n) for n in range(count)]
    view = View()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for raw in objects:
            view.upsert_job(raw)
        objects.clear()
        gc.collect()
        per_job = (tracemalloc.get_traced_memory()[0] - before) / count
    finally:
        tracemalloc.stop()
    assert per_job <= PER_FINISHED_JOB, f"{per_job:.0f} bytes per finished job"



def test_strays_are_pods_of_runs_the_status_does_not_know():
    view = View()
    view.upsert_job(job("succeeded"))
    key, kept = ("shop", "job-a"), view.jobs[("shop", "job-a")]
    view.upsert_pod(pod("job-a", 2))
    assert not view.has_strays(key, kept)  # the attempt the status recorded
    view.upsert_pod(pod("job-a", 3))
    assert view.has_strays(key, kept)


def test_an_assignment_whose_removal_is_being_written_is_no_stray():
    """A finished job's assignment stays in its Worker's status until the operator's removal lands: no reason to read
    the whole job again (a GET per job under load) in between; one the operator is not removing is a stray."""
    view = View()
    view.upsert_job(job("succeeded"))
    key = ("shop", "job-a")
    view.upsert_worker(worker_with_assignment("job-a", view.jobs[key].uid))
    assert view.has_strays(key, view.jobs[key])
    view.leaving[key] = {1}
    assert not view.has_strays(key, view.jobs[key])


def worker_with_assignment(name: str, uid: str) -> dict:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Worker",
            "metadata": {"name": "w1", "namespace": "shop", "uid": "w-1", "generation": 1, "resourceVersion": "5"},
            "spec": {"incarnation": "i1", "slots": 4, "leaseDurationSeconds": 30},
            "status": {"assignments": [{"job": name, "uid": uid, "queue": "q", "handler": "h", "sequence": 1,
                                        "attempt": 1, "incarnation": "i1", "assignedAt": "2026-03-01T12:00:00Z"}]}}


def test_the_idempotency_index_keeps_finished_jobs():
    view = View()
    view.upsert_job(job("succeeded", name="job-a"))
    assert view.by_idempotency_key[("shop", "k-1")] == {("shop", "job-a")}
    view.delete_job(job("succeeded", name="job-a"))
    assert ("shop", "k-1") not in view.by_idempotency_key


def scheduled(raw: dict[str, Any], node: str | None = None, unschedulable: bool = False) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    raw["status"] = {"phase": "Pending"}
    if node:
        raw["spec"]["nodeName"] = node
    if unschedulable:
        raw["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                        "message": "0/20 nodes are available: 20 Too many pods."}]
    return raw


@pytest.mark.parametrize("node,unschedulable,expected", [
    (None, False, Placement.PENDING),
    (None, True, Placement.UNSCHEDULABLE),
    ("node-1", False, Placement.BOUND),
    ("node-1", True, Placement.BOUND),  # bound after an unschedulable spell: the condition is stale
])
def test_placement_reads_the_schedulers_verdict(node, unschedulable, expected):
    view = View()
    view.upsert_job(job("running"))
    view.upsert_pod(scheduled(pod("job-a", 2), node, unschedulable))
    assert standing(True, view.pods_of(("shop", "job-a")).values()).placement is expected


def test_a_job_without_live_pods_waits_for_no_node():
    view = View()
    view.upsert_job(job("succeeded"))
    view.upsert_pod(pod("job-a", 2))  # Succeeded, never bound (as a pod can fail admission)
    seen = standing(False, view.pods_of(("shop", "job-a")).values())
    assert not seen.holds and seen.placement is Placement.BOUND


def test_of_two_jobs_created_in_the_same_second_the_one_already_run_keeps_its_key():
    view = View()
    first = job("succeeded", name="job-first")
    copy_ = job(None, name="job-copy", observed=None)
    view.upsert_job(first)
    view.upsert_job(copy_)
    snap = read_job(copy_)
    assert view._duplicate_of(("shop", "job-copy"), snap) == "job-first"


def test_of_two_undecided_jobs_created_in_the_same_second_the_first_name_holds_the_key():
    view = View()
    view.upsert_job(job(None, name="job-b", observed=None))
    view.upsert_job(job(None, name="job-a", observed=None))
    assert view._duplicate_of(("shop", "job-b"), View.snapshot(view.jobs[("shop", "job-b")])) \
        == "job-a"
    assert view._duplicate_of(("shop", "job-a"), View.snapshot(view.jobs[("shop", "job-a")])) \
        is None


def test_a_job_admitted_on_first_sight_holds_its_idempotency_key_before_its_state_is_written():
    """Its pod exists but its state is written only when the pod starts: it already runs, so it is no duplicate,
    and a job with the same key and creation second is the duplicate, whatever the names' order."""
    view = View()
    first, second = job(None, name="job-b"), job(None, name="job-a")
    second["metadata"]["uid"] = "u-2"
    view.upsert_job(first)
    view.upsert_job(second)
    view.upsert_pod(pod("job-b", 1, phase="Pending"))
    snap_b = read_job(first)
    snap_a = read_job(second)
    assert view.observations(("shop", "job-b"), snap_b).duplicate_of is None
    assert view.observations(("shop", "job-a"), snap_a).duplicate_of == "job-b"


def test_a_pod_event_that_changes_nothing_the_operator_reads_is_no_change():
    """upsert_pod names the job only when the pod's observation changed: the echo of the pod the operator created,
    a condition or an annotation cost no reconcile (kwok and kubelets patch a pod's status several times)."""
    view = View()
    created = pod("job-a", 1, phase="Pending")
    assert view.upsert_pod(created) == ("shop", "job-a")
    echo = {**created, "metadata": {**created["metadata"], "resourceVersion": "6", "annotations": {"a": "b"}},
            "status": {"phase": "Pending", "conditions": [{"type": "PodReadyToStartContainers", "status": "True"}]}}
    assert view.upsert_pod(echo) is None
    bound = {**echo, "metadata": {**echo["metadata"], "resourceVersion": "7"},
             "spec": {**echo["spec"], "nodeName": "node-1"}}
    assert view.upsert_pod(bound) == ("shop", "job-a") and view.pods_of(("shop", "job-a"), "u-1")[1].node == "node-1"


def test_finished_jobs_are_counted_per_queue_and_state_as_they_come_and_go():
    view = View()
    view.upsert_job(job("running", rv="1"))
    view.upsert_job(job("dead", rv="1", name="job-b"))
    assert view.finished_by_queue == {("shop", "emails"): {"dead": 1}}
    view.upsert_job(job("succeeded", rv="2"))  # the running one finished
    view.upsert_job(job("dead", rv="3", name="job-b"))  # the same state again: counted once
    assert view.finished_by_queue[("shop", "emails")] == {"dead": 1, "succeeded": 1}
    view.upsert_job(job("queued", rv="4", name="job-b", generation=2))  # retried: unfinished again
    assert view.finished_by_queue[("shop", "emails")] == {"succeeded": 1}
    view.delete_job(job("succeeded", rv="5"))
    assert view.finished_by_queue == {}
