"""The operator's side of worker protocol v2 (docs/workers.md), on the real control plane.

The worker here is scripted (tests/harness/scripted_worker.py): its Worker object created with the finalizer,
renewed by one JSON patch that tests its incarnation, assignments read from status.assignments and results written
to spec.results, through the API only, as a worker in another language would. So each test decides exactly what the
worker does (or fails to do, or lies about) and checks what the operator makes of it. What was stored, and in which
order, is read from watches opened before the test acts (tests/harness/watching.py), never from the worker.
(tests/cluster/test_worker_conformance.py runs real worker processes.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from sextant.resources.common import parse_time
from tests.harness import holds_for, wait_for
from tests.harness.scripted_worker import ScriptedWorker, TakenOver, micro
from tests.harness.watching import Versions, most_at_once, most_in_total

from .support import Operator, apply, get_json, job, queue, status, timeline_of, wait_state

FAST = {"backoff": {"policy": "fixed", "initial": "200ms"}, "cancelGrace": "1s"}


def worker_handler(name: str = "h") -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler", "metadata": {"name": name},
            "spec": {"worker": {}}}


def conditions(st: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in st.get("conditions", [])}


@pytest.fixture
def workers(cluster, namespace) -> Iterator[Any]:
    made: list[ScriptedWorker] = []

    def make(name: str, **kw: Any) -> ScriptedWorker:
        worker = ScriptedWorker(cluster.kubeconfig, namespace, name, **kw)
        made.append(worker)
        return worker

    yield make
    for worker in made:
        worker.stop_renewing()


def assigned(worker: ScriptedWorker, job_name: str, timeout: float = 30) -> dict[str, Any]:
    return wait_for(lambda: worker.assignment(job_name), timeout,
                    message=lambda: f"{job_name} assigned to {worker.name}; its status {worker.status()}")


def job_uid(cluster, namespace: str, name: str) -> str:
    return get_json(cluster, namespace, "jobs.sextant.dev", name)["metadata"]["uid"]


def warning_events(cluster, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    found = get_json(cluster, namespace, "events", "--field-selector",
                     f"involvedObject.name={name},involvedObject.kind=Worker,reason={reason}")["items"]
    return [e for e in found if e.get("type") == "Warning"]


# ================================================================ taking jobs
def test_no_worker_blocks_then_a_worker_takes_the_job(cluster, namespace, operator, workers):
    apply(cluster, namespace, queue("q", **FAST), worker_handler(), job("job-w"))
    wait_for(lambda: conditions(status(cluster, namespace, "job-w")).get("Blocked") == ("True", "NoWorker"), 30,
             message="Blocked/NoWorker")
    assert status(cluster, namespace, "job-w")["state"] == "queued"
    w = workers("w1").start()
    a = assigned(w, "job-w")
    assert {k: a[k] for k in ("job", "uid", "queue", "handler", "sequence", "attempt", "incarnation")} == {
        "job": "job-w", "uid": job_uid(cluster, namespace, "job-w"), "queue": "q", "handler": "h", "sequence": 1,
        "attempt": 1, "incarnation": w.incarnation}
    w.report(a)
    final = wait_state(cluster, namespace, "job-w", "succeeded")
    assert timeline_of(final) == [("succeeded", None)]
    entry = final["attempts"][0]
    assert (entry["worker"], entry["node"], entry["sequence"]) == (f"w1/{w.incarnation}", "w1", 1)
    assert "pod" not in entry and conditions(final).get("Blocked", ("False",))[0] == "False"
    # Acknowledged: the assignment leaves status, and the worker's next write drops the result.
    wait_for(lambda: not w.assignments(mine=False), 15, message=lambda: f"the assignment to go: {w.status()}")
    assert w.renew()["spec"].get("results", []) == []
    assert cluster.kubectl("get", "pods", "-n", namespace, "-o", "name").stdout.strip() == ""  # no pod per attempt


def test_slots_and_queue_concurrency_hold_together_across_two_workers(cluster, namespace, operator, workers):
    w1, w2 = workers("w1", slots=2, lease_seconds=30).start(), workers("w2", slots=2, lease_seconds=30).start()
    with Versions(cluster.kubeconfig, namespace, "workers") as seen:
        apply(cluster, namespace, queue("q", concurrency=3, **FAST), worker_handler(),
              *(job(f"job-{i}") for i in range(6)))

        def busy() -> list[dict[str, Any]]:
            return w1.assignments() + w2.assignments()

        wait_for(lambda: len(busy()) == 3, 30, message=lambda: f"3 assigned, got {busy()}")
        holds_for(lambda: len(busy()) == 3, 2, message="3 assigned (the queue's concurrency)")
        first = busy()[0]
        owner = w1 if first in w1.assignments() else w2
        owner.report(first)
        wait_state(cluster, namespace, first["job"], "succeeded")
        wait_for(lambda: len(busy()) == 3 and first["job"] not in {a["job"] for a in busy()}, 30,
                 message=lambda: f"the freed slot to be taken: {busy()}")
        for a in busy():  # and the rest, so that every job has ended before the history is judged
            (w1 if a in w1.assignments() else w2).report(a)
        wait_for(lambda: sum(status(cluster, namespace, f"job-{i}").get("state") == "succeeded"
                             for i in range(6)) >= 4, 30, message="four jobs to succeed")
    per_job, per_worker = most_at_once(seen)
    assert most_in_total(seen) == 3, "never over the queue's concurrency, and it was reached"
    assert max(per_worker.values()) == 2 and set(per_worker) == {"w1", "w2"}, per_worker
    assert set(per_job.values()) == {1}, "never one job on two workers"


# ================================================================ writes on the Job
def test_a_job_that_ends_within_its_first_second_costs_two_job_writes(cluster, namespace, operator, workers):
    w = workers("w1", lease_seconds=30).start()
    apply(cluster, namespace, queue("q", **FAST), worker_handler())
    with Versions(cluster.kubeconfig, namespace, "jobs", name="job-fast") as seen:
        apply(cluster, namespace, job("job-fast"))
        a = wait_for(lambda: w.assignment("job-fast"), 10, interval=0.02, message="assigned")
        w.report(a)
        final = wait_state(cluster, namespace, "job-fast", "succeeded")
        seen.wait_seen("job-fast", "succeeded")
        wait_for(lambda: not w.assignments(mine=False), 15, message="the assignment to be acknowledged")
    assert timeline_of(final) == [("succeeded", None)]
    states = [v.status.get("state") for v in seen.versions("job-fast")]
    assert seen.writes("job-fast") == 2, f"create + final status only; versions seen: {states}"


def test_a_longer_job_is_written_running_after_its_first_second(cluster, namespace, operator, workers):
    w = workers("w1", lease_seconds=30).start()
    apply(cluster, namespace, queue("q", **FAST), worker_handler())
    with Versions(cluster.kubeconfig, namespace, "jobs", name="job-slow") as seen:
        apply(cluster, namespace, job("job-slow"))
        a = wait_for(lambda: w.assignment("job-slow"), 10, interval=0.02, message="assigned")
        got = time.monotonic()
        st = wait_state(cluster, namespace, "job-slow", "running", timeout=10)
        took = time.monotonic() - got
        assert 0.5 < took < 4, f"written running {took:.2f} s after the assignment (RECORD_RUNNING_AFTER is 1 s)"
        assert st["sequence"] == 1 and st["attempt"] == 1
        entry = st["attempts"][-1]
        assert (entry["result"], entry["worker"], entry["node"]) == ("running", f"w1/{w.incarnation}", "w1")
        holds_for(lambda: seen.writes("job-slow") == 2, 1.5, message="no write while it runs")
        w.report(a)
        wait_state(cluster, namespace, "job-slow", "succeeded")
        seen.wait_seen("job-slow", "succeeded")
    assert seen.writes("job-slow") == 3, "create + running + final"


# ================================================================ outcomes
def test_a_failed_attempt_is_retried_with_backoff_then_dead_at_max_attempts(cluster, namespace, operator, workers):
    w = workers("w1", lease_seconds=30).start()
    apply(cluster, namespace, queue("q", maxAttempts=3, backoff={"policy": "fixed", "initial": "2s"}),
          worker_handler(), job("job-f"))
    ended: datetime | None = None
    for attempt in (1, 2, 3):
        a = wait_for(lambda: w.assignment("job-f") if (w.assignment("job-f") or {}).get("attempt") == attempt
                     else None, 30, interval=0.05, message=f"attempt {attempt} assigned")
        assert a["sequence"] == attempt
        if ended is not None:
            gap = (parse_time(a["assignedAt"]) - ended).total_seconds()
            assert gap >= 1.8, f"attempt {attempt} came {gap:.2f} s after the last one ended (backoff 2 s)"
        finished = datetime.now(timezone.utc)
        w.report(a, 1, message=f"boom {attempt}", finished_at=micro(finished))
        ended = finished
        if attempt < 3:
            wait_for(lambda: (s := status(cluster, namespace, "job-f")).get("state") == "failed"
                     and s.get("attempt") == attempt, 30, message=f"attempt {attempt} recorded failed")
    final = wait_state(cluster, namespace, "job-f", "dead")
    assert [(e["result"], e["reason"], e["exitCode"], e["message"], e["attempt"]) for e in final["attempts"]] == [
        ("failed", "Error", 1, f"boom {n}", n) for n in (1, 2, 3)]
    assert final["attempt"] == 3 and conditions(final)["Dead"][0] == "True"


def test_cancel_sets_stop_on_the_assignment_and_is_recorded_with_or_without_the_worker(cluster, namespace, operator,
                                                                                      workers):
    w = workers("w1", slots=2, lease_seconds=30).start()
    apply(cluster, namespace, queue("q", **FAST), worker_handler(), job("job-c1"), job("job-c2"))
    for name in ("job-c1", "job-c2"):
        assigned(w, name)
        cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", name, "--type", "merge",
                        "-p", '{"spec":{"cancel":true}}')
    for name in ("job-c1", "job-c2"):
        a = wait_for(lambda: (w.assignment(name) or {}).get("stop") == "Cancelled" and w.assignment(name), 15,
                     message=f"stop Cancelled on {name}'s assignment")
        assert a["stopRequestedAt"] and a["cancelGraceSeconds"] == 1
        st = wait_state(cluster, namespace, name, "running")  # written running at once, with the stop
        assert st["stopReason"] == "Cancelled"
    w.report(w.assignment("job-c1"), 143)  # the worker stopped its handler and reports
    assert timeline_of(wait_state(cluster, namespace, "job-c1", "cancelled")) == [("cancelled", "Cancelled")]
    # No report within cancelGrace + 5 s: the operator records it itself and drops the assignment.
    assert timeline_of(wait_state(cluster, namespace, "job-c2", "cancelled", timeout=30)) == [("cancelled", "Cancelled")]
    wait_for(lambda: not w.assignments(mine=False), 15, message="both assignments to go")


def test_timeout_stops_the_attempt_on_the_worker(cluster, namespace, operator, workers):
    w = workers("w1", lease_seconds=30).start()
    apply(cluster, namespace, queue("q", timeout="1s", maxAttempts=1, **FAST), worker_handler(), job("job-t"))
    a = assigned(w, "job-t")
    assert (parse_time(a["timeoutAt"]) - parse_time(a["assignedAt"])).total_seconds() == pytest.approx(1, abs=0.05)
    a = wait_for(lambda: (w.assignment("job-t") or {}).get("stop") == "Timeout" and w.assignment("job-t"), 15,
                 message="stop Timeout on the assignment")
    w.report(a, 137)
    final = wait_state(cluster, namespace, "job-t", "dead")
    assert [(e["result"], e["reason"]) for e in final["attempts"]] == [("failed", "Timeout")]


# ================================================================ liveness
def test_a_lost_worker_fails_its_attempt_and_another_takes_the_retry(cluster, namespace, operator, workers):
    w1 = workers("w1").start()
    apply(cluster, namespace, queue("q", **FAST), worker_handler(), job("job-l"))
    assigned(w1, "job-l")
    w2 = workers("w2").start()
    w1.stop_renewing()  # SIGKILL, as the operator sees it
    a = assigned(w2, "job-l", timeout=30)
    assert (a["sequence"], a["attempt"]) == (2, 2)
    st = status(cluster, namespace, "job-l")
    assert timeline_of(st)[0] == ("failed", "LeaseExpired")
    w2.report(a)
    final = wait_state(cluster, namespace, "job-l", "succeeded")
    assert timeline_of(final) == [("failed", "LeaseExpired"), ("succeeded", None)] and final["attempt"] == 2
    wait_for(lambda: w1.status().get("state") == "expired" and not w1.status().get("assignments"), 15,
             message=lambda: f"w1 expired with nothing assigned: {w1.status()}")


def test_a_restarted_worker_expires_its_predecessors_attempt_at_once_and_a_late_result_is_refused(
        cluster, namespace, operator, workers):
    old = workers("w1", lease_seconds=60).start()
    apply(cluster, namespace, queue("q", **FAST), worker_handler(), job("job-r"))
    stale = assigned(old, "job-r")
    old.stop_renewing()
    new = workers("w1", lease_seconds=60).start()  # the same name, a new process: a new incarnation
    began = time.monotonic()
    a = assigned(new, "job-r", timeout=20)
    assert time.monotonic() - began < 15, "at once, not after the old lease's 60 s"
    assert (a["sequence"], a["attempt"]) == (2, 2)
    assert timeline_of(status(cluster, namespace, "job-r"))[0] == ("failed", "LeaseExpired")
    with pytest.raises(TakenOver):  # the old process's late result: its write tests an incarnation that is gone
        old.report(stale)
    new.report(a)
    final = wait_state(cluster, namespace, "job-r", "succeeded")
    assert timeline_of(final) == [("failed", "LeaseExpired"), ("succeeded", None)]


def test_a_renew_time_in_year_3000_does_not_keep_a_worker_alive(cluster, namespace, operator, workers):
    w = workers("w1", lease_seconds=3)
    w.extra = {"renewTime": "3000-01-01T00:00:00.000000Z"}
    w.start()
    apply(cluster, namespace, queue("q", **FAST), worker_handler(), job("job-y"))
    assigned(w, "job-y")
    w.stop_renewing()
    st = wait_for(lambda: (s := status(cluster, namespace, "job-y")).get("attempts") and
                  s["attempts"][0]["result"] != "running" and s, 30, message="the attempt to fail")
    assert timeline_of(st)[0] == ("failed", "LeaseExpired")
    assert w.status()["state"] == "expired"


@pytest.mark.parametrize("slots,field_problem", [(1_000_000_000, "spec.slots"), ("²", "spec.slots")])
def test_the_api_server_refuses_impossible_slots(cluster, namespace, crds, workers, slots, field_problem):
    w = workers("w1")
    w.slots = slots
    with pytest.raises(ApiException) as refused:
        w.register()
    assert refused.value.status == 422 and field_problem in refused.value.body, refused.value.body
    assert get_json(cluster, namespace, "workers.sextant.dev")["items"] == []  # nothing made


def test_slots_over_the_operators_cap_are_believed_as_the_cap_with_a_warning(cluster, namespace, crds, workers,
                                                                            tmp_path):
    op = Operator(cluster.kubeconfig, namespace, tmp_path, "--max-worker-slots", "8")
    op.start()
    try:
        w = workers("w1", slots=4000, lease_seconds=30).start()
        wait_for(lambda: w.status().get("slots") == 8, 30, message=lambda: f"slots capped at 8: {w.status()}")
        events = wait_for(lambda: warning_events(cluster, namespace, "w1", "SlotsCapped"), 15,
                          message="a Warning Event SlotsCapped on the Worker")
        assert "4000" in events[0]["message"] and "8" in events[0]["message"], events[0]["message"]
        apply(cluster, namespace, queue("q", **FAST), worker_handler(), *(job(f"job-{i}") for i in range(10)))
        wait_for(lambda: len(w.assignments()) == 8, 30, message=lambda: f"8 assigned: {w.assignments()}")
        holds_for(lambda: len(w.assignments()) == 8, 1.5, message="never more than the cap")
    finally:
        op.stop()


def test_a_worker_deleted_with_an_attempt_assigned_records_it_before_its_finalizer_goes(cluster, namespace, operator,
                                                                                      workers):
    w = workers("w1", lease_seconds=60).start()
    apply(cluster, namespace, queue("q", maxAttempts=1, **FAST), worker_handler(), job("job-d"))
    assigned(w, "job-d")
    with Versions(cluster.kubeconfig, namespace, "jobs", name="job-d") as job_seen, \
            Versions(cluster.kubeconfig, namespace, "workers", name="w1") as worker_seen:
        w.stop_renewing()
        w.delete()
        wait_for(lambda: any(v.kind == "DELETED" for v in worker_seen.versions()), 30,
                 message="the Worker to be gone once its attempt is recorded")
        final = wait_state(cluster, namespace, "job-d", "dead")
    assert timeline_of(final) == [("failed", "LeaseExpired")]
    # etcd's revisions order every write: the job's LeaseExpired landed before the Worker's finalizer was removed.
    recorded = min(int(v.obj["metadata"]["resourceVersion"]) for v in job_seen.versions()
                   if timeline_of(v.status)[:1] == [("failed", "LeaseExpired")])
    gone = next(int(v.obj["metadata"]["resourceVersion"]) for v in worker_seen.versions() if v.kind == "DELETED")
    assert recorded < gone


def test_a_skewed_worker_clock_neither_keeps_a_dead_worker_live_nor_fails_live_attempts(cluster, namespace, operator,
                                                                                       workers):
    hour = timedelta(hours=1)
    behind = workers("w-behind", lease_seconds=3)
    behind.skew = -hour
    ahead = workers("w-ahead", lease_seconds=3)
    ahead.skew = hour
    behind.start()
    ahead.start()
    # A timeout the worker's own clock would already be past: the operator's clock decides.
    apply(cluster, namespace, queue("q", timeout="10m", **FAST), worker_handler(), job("job-a"), job("job-b"))
    wait_for(lambda: len(behind.assignments()) == 1 and len(ahead.assignments()) == 1, 30,
             message="one job on each worker")
    # A live worker an hour behind: its attempt outlives several lease durations.
    a = behind.assignments()[0]
    wait_state(cluster, namespace, a["job"], "running", timeout=10)
    holds_for(lambda: behind.assignment(a["job"]) and status(cluster, namespace, a["job"]).get("state") == "running",
              8, interval=0.5, message=lambda: f"the live skewed worker's attempt to run on: {behind.read()}")
    now = datetime.now(timezone.utc)
    behind.report(a, started_at=micro(now - hour - timedelta(seconds=5)), finished_at=micro(now - hour))
    assert timeline_of(wait_state(cluster, namespace, a["job"], "succeeded")) == [("succeeded", None)]
    # A dead worker an hour ahead: it expires on the operator's clock all the same.
    b = ahead.assignments()[0]
    ahead.stop_renewing()
    st = wait_for(lambda: (s := status(cluster, namespace, b["job"])).get("attempts") and
                  s["attempts"][0]["result"] != "running" and s, 30, message="the dead worker's attempt to fail")
    assert timeline_of(st)[0] == ("failed", "LeaseExpired")


def test_a_result_for_another_uid_or_sequence_is_ignored(cluster, namespace, operator, workers):
    w = workers("w1", lease_seconds=60)
    w.register()
    apply(cluster, namespace, queue("q", **FAST), worker_handler(), job("job-x"))
    a = assigned(w, "job-x")
    wrong = [w.result(a, 0, uid="00000000-0000-0000-0000-000000000000"), w.result(a, 0, sequence=a["sequence"] + 1),
             w.result(a, 0, job="job-other")]
    w.raw_spec({"results": wrong})
    holds_for(lambda: status(cluster, namespace, "job-x").get("state") in (None, "queued", "running")
              and w.assignment("job-x"), 3, interval=0.3, message="the job unrecorded, the assignment kept")
    w.report(a)
    assert timeline_of(wait_state(cluster, namespace, "job-x", "succeeded")) == [("succeeded", None)]
