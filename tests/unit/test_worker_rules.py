"""Worker protocol v2's rules on the operator's side, pure and on a fixed clock (docs/workers.md): what the operator
believes of a Worker object (caps, an invalid spec), liveness by its own clock, what an assignment tells of its
attempt, when an assignment is done with (the acknowledgement), what a Worker change concerns, the batched status
write, and the job's lifecycle with an assignment in place of a pod."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from _builders import JOB, T0, UID, at, decide, handler, queue, snapshot, spec
from sextant.controller.view import View
from sextant.controller.workerstatus import Outbox, build_status, unchanged
from sextant.lifecycle import attempts as A
from sextant.lifecycle import transitions as T
from sextant.lifecycle import workers as W
from sextant.resources.common import format_time
from sextant.resources.job import JobStatus, State
from sextant.resources.worker import Assignment

INC = "i1"


def worker_obj(*, spec_fields: dict[str, Any] | None = None, generation: int = 1, uid: str = "w-uid",
               assignments: list[dict[str, Any]] | None = None, **meta: Any) -> dict[str, Any]:
    body = {"incarnation": INC, "queues": ["emails"], "handlers": ["send-receipt"], "slots": 4,
            "leaseDurationSeconds": 30, **(spec_fields or {})}
    return {"metadata": {"name": "w1", "namespace": "shop", "uid": uid, "generation": generation,
                         "resourceVersion": str(10 + generation), **meta},
            "spec": body, "status": {"assignments": assignments or []}}


def assignment(sequence: int = 1, **fields: Any) -> Assignment:
    return Assignment.model_validate({"job": JOB, "uid": UID, "queue": "emails", "handler": "send-receipt",
                                      "sequence": sequence, "attempt": sequence, "incarnation": INC,
                                      "assignedAt": format_time(T0), **fields})


def result(sequence: int = 1, **fields: Any) -> dict[str, Any]:
    return {"job": JOB, "uid": UID, "sequence": sequence, "incarnation": INC, "startedAt": format_time(at(0.2)),
            "finishedAt": format_time(at(0.5)), **fields}


def believed(**kw: Any) -> W.Believed:
    return W.read_worker(worker_obj(**kw))


# ================================================================ what the operator believes
@pytest.mark.parametrize("fields,slots,capped_from,invalid", [
    ({}, 4, None, None),
    ({"slots": 256}, 256, None, None),
    ({"slots": 257}, 256, 257, None),  # over --max-worker-slots: believed as the cap
    ({"slots": 4096}, 256, 4096, None),
    ({"slots": 10**9}, 0, None, "spec.slots"),  # past the schema's bound (a loosened CRD): not believed at all
    ({"slots": "²"}, 0, None, "spec.slots"),
    ({"slots": 2.5}, 0, None, "spec.slots"),
    ({"incarnation": "NOT VALID"}, 0, None, "spec.incarnation"),
    ({"leaseDurationSeconds": "30s"}, 0, None, "spec.leaseDurationSeconds"),
])
def test_slots_are_capped_and_an_invalid_spec_is_believed_to_offer_nothing(fields, slots, capped_from, invalid):
    seen = believed(spec_fields=fields)
    assert (seen.slots, seen.capped_from) == (slots, capped_from)
    if invalid is None:
        assert seen.invalid is None and seen.queues == {"emails"}
    else:
        assert seen.invalid.startswith(invalid) and seen.queues == frozenset() and seen.handlers == frozenset()
        assert not W.is_served([(seen, True)], "emails", "send-receipt")


def test_an_invalid_worker_still_reports_its_valid_results_and_its_cap_is_the_operators_flag():
    seen = believed(spec_fields={"slots": "²", "results": [result(exitCode=0), {"job": "broken"}]})
    assert seen.invalid and seen.result_for(assignment()) is not None
    assert W.read_worker(worker_obj(spec_fields={"slots": 64}), max_slots=8).slots == 8


def test_the_lease_is_capped_by_the_operator():
    assert believed(spec_fields={"leaseDurationSeconds": 3600}).lease_duration == W.MAX_LEASE_DURATION
    assert believed(spec_fields={"leaseDurationSeconds": 7}).lease_duration == timedelta(seconds=7)


# ================================================================ liveness: the operator's clock
class Clock:
    def __init__(self) -> None:
        self.moment = T0

    def __call__(self):
        return self.moment


def test_expiry_counts_from_when_the_operator_observed_a_new_generation_never_from_renew_time():
    clock = Clock()
    view = View(now=clock)
    key = ("shop", "w1")
    year_3000 = {"renewTime": "3000-01-01T00:00:00.000000Z", "leaseDurationSeconds": 10}
    view.upsert_worker(worker_obj(spec_fields=year_3000))
    assert view.observed_at[key] == T0 and W.expires_at(view.worker(key), view.observed_at[key]) == at(10)
    clock.moment = at(8)
    view.upsert_worker(worker_obj(spec_fields=year_3000))  # the same generation again (a watch's echo)
    assert view.observed_at[key] == T0, "no new generation: no renewal"
    clock.moment = at(9)
    view.upsert_worker(worker_obj(spec_fields={**year_3000, "renewTime": "1999-01-01T00:00:00Z"}, generation=2))
    assert view.observed_at[key] == at(9), "a new generation: observed now, whatever renewTime says"
    assert W.expires_at(view.worker(key), view.observed_at[key]) == at(19)
    view.expired[key] = at(19)
    assert not view.live(key)
    clock.moment = at(20)
    view.upsert_worker(worker_obj(generation=2, uid="another"))  # a new object of that name: observed, live again
    assert view.observed_at[key] == at(20) and view.live(key)


# ================================================================ what an assignment tells
LIVE, GONE = True, False


@pytest.mark.parametrize("case,results,incarnation,live,deleting,stop,now,phase,outcome", [
    ("running", [], INC, LIVE, False, None, 0.5, "Running", None),
    ("succeeded", [result(exitCode=0)], INC, LIVE, False, None, 1, "Succeeded", ("succeeded", None)),
    ("failed", [result(exitCode=3)], INC, LIVE, False, None, 1, "Failed", ("failed", A.ERROR)),
    ("drained", [result(exitCode=143, reason="Drained")], INC, LIVE, False, None, 1, "Failed",
     ("failed", A.DRAINED)),
    ("not found", [result(reason="NotFound")], INC, LIVE, False, None, 1, "Failed", ("failed", "NotFound")),
    ("its own timeout", [result(exitCode=143, reason="Timeout")], INC, LIVE, False, None, 1, "Failed",
     ("failed", A.TIMEOUT)),
    ("expired", [], INC, GONE, False, None, 40, "Failed", ("failed", A.LEASE_EXPIRED)),
    ("restarted", [], "i2", LIVE, False, None, 1, "Failed", ("failed", A.LEASE_EXPIRED)),
    ("result before the restart", [result(exitCode=0)], "i2", LIVE, False, None, 1, "Succeeded",
     ("succeeded", None)),
    ("deleting", [], INC, LIVE, True, None, 1, "Failed", ("failed", A.LEASE_EXPIRED)),
    ("expired, with a result", [result(exitCode=0)], INC, GONE, False, None, 40, "Succeeded", ("succeeded", None)),
    ("stopped, within its grace", [], INC, LIVE, False, "Cancelled", 9.9, "Running", None),  # 4 + 1 + 5 s
    ("stopped, not reported", [], INC, LIVE, False, "Cancelled", 10, "Failed", ("cancelled", A.CANCELLED)),
])
def test_what_an_assignment_tells_of_its_attempt(case, results, incarnation, live, deleting, stop, now, phase,
                                                 outcome):
    stopped = {"stop": stop, "stopRequestedAt": format_time(at(4)), "cancelGraceSeconds": 1} if stop else {}
    worker = W.read_worker(worker_obj(spec_fields={"incarnation": incarnation, "results": results},
                                      **({"deletionTimestamp": format_time(T0)} if deleting else {})))
    seen = W.observe_assignment(assignment(**stopped), "w1", worker, live, at(now))
    assert seen.phase == phase and seen.worker == f"w1/{INC}" and seen.worker_name == "w1"
    got = A.outcome_of(seen, stop)
    assert (got.result, got.reason) == outcome if outcome else got is None


def test_an_assignment_on_its_way_is_a_pod_being_created_and_one_whose_worker_is_gone_is_lost():
    pending = W.observe_assignment(assignment(), "w1", None, True, at(1), durable=False)
    assert pending.phase == "Pending" and not pending.started and pending.alive and pending.assigned_at is None
    lost = W.observe_assignment(assignment(), "w1", None, False, at(1))
    assert A.outcome_of(lost, None).reason == A.LEASE_EXPIRED


@pytest.mark.parametrize("state,sequence,assigned,wanted", [
    (None, 0, 1, True),  # the starting attempt of a job not written yet
    (State.QUEUED, 0, 1, True),
    (State.QUEUED, 2, 3, True),
    (State.RUNNING, 1, 1, True),  # the running attempt
    (State.SUCCEEDED, 1, 1, False),  # its end recorded: the acknowledgement removes it
    (State.FAILED, 1, 1, False),
    (State.QUEUED, 1, 1, False),  # ended and retried, waiting for the next slot
    (State.RUNNING, 2, 1, False),  # an older attempt's
    (State.CANCELLED, 0, 1, False),  # cancelled before its start was recorded: never to run
    (State.QUEUED, 0, 2, False),
])
def test_an_assignment_is_wanted_only_as_the_starting_or_the_running_attempt(state, sequence, assigned, wanted):
    assert W.wanted(JobStatus(state=state, sequence=sequence), assigned) is wanted


# ================================================================ what a Worker change concerns
def test_a_renewal_concerns_no_job_and_a_result_or_restart_concerns_only_its_jobs():
    a1, a2 = assignment(1).wire(), {**assignment(1).wire(), "job": "other", "uid": "u2"}
    before = believed(assignments=[a1, a2])
    assert W.changed_jobs(before, believed(assignments=[a1, a2], generation=2)) == set()
    assert W.changed_jobs(before, believed(assignments=[a1, a2], generation=2,
                                           spec_fields={"results": [result(exitCode=0)]})) == {JOB}
    assert W.changed_jobs(before, believed(assignments=[a2])) == {JOB}
    assert W.changed_jobs(before, believed(assignments=[a1, a2], spec_fields={"incarnation": "i2"})) == {JOB, "other"}
    assert W.changed_jobs(before, before, liveness_changed=True) == {JOB, "other"}
    assert W.offer_of(before, True) == W.offer_of(believed(generation=5), True)
    assert W.offer_of(before, True) != W.offer_of(believed(spec_fields={"draining": True}), True)


def test_pick_takes_the_live_open_worker_with_the_most_free_slots():
    w1, w2 = believed(), W.read_worker({**worker_obj(), "metadata": {**worker_obj()["metadata"], "name": "w2"}})
    draining = W.read_worker({**worker_obj(spec_fields={"draining": True}),
                              "metadata": {**worker_obj()["metadata"], "name": "w0"}})
    pairs = [(w1, True), (w2, True), (draining, True)]
    assert W.pick_worker(pairs, "emails", "send-receipt", {"w1": 3}).name == "w2"
    assert W.pick_worker(pairs, "emails", "send-receipt", {"w1": 4, "w2": 4}) is None
    assert W.pick_worker([(w1, False)], "emails", "send-receipt", {}) is None, "expired"
    assert W.pick_worker(pairs, "other", "send-receipt", {}) is None
    assert W.is_served([(w1, True)], "emails", "send-receipt") and not W.is_served([(w1, False)], "emails",
                                                                                    "send-receipt")


# ================================================================ the batched status write
def test_one_status_write_carries_every_add_stop_and_removal_and_a_renewal_alone_writes_nothing():
    kept, done, stopping = assignment(1), {**assignment(1).wire(), "job": "j2", "uid": "u2"}, \
        {**assignment(1).wire(), "job": "j3", "uid": "u3"}
    worker = believed(assignments=[kept.wire(), done, stopping])
    box = Outbox()
    box.removes[("u2", 1)] = ("shop", "j2")
    box.stops[("u3", 1)] = {"stop": "Cancelled", "stopRequestedAt": format_time(at(1)), "cancelGraceSeconds": 10.0}
    new = Assignment.model_validate({**assignment(1).wire(), "job": "j4", "uid": "u4"})
    box.adds[("u4", 1)] = (("shop", "j4"), new)
    body = build_status(worker, box, True, at(2))
    assert [a["job"] for a in body["assignments"]] == [JOB, "j3", "j4"]
    assert body["assignments"][1]["stop"] == "Cancelled" and body["busy"] == 3
    assert (body["state"], body["slots"], body["observedGeneration"]) == ("live", 4, 1)
    stored = W.read_worker({**worker_obj(assignments=body["assignments"]), "status": body})
    assert unchanged(stored, build_status(stored, Outbox(), True, at(3)))
    renewed = W.read_worker({**worker_obj(assignments=body["assignments"], generation=7), "status": body})
    assert unchanged(renewed, build_status(renewed, Outbox(), True, at(4))), "observedGeneration rides along only"
    assert not unchanged(renewed, build_status(renewed, Outbox(), False, at(4))), "expired: state changes"


# ================================================================ the lifecycle, with an assignment for a pod
WORKER_HANDLER = handler().model_copy(update={"template": None})


class OnWorker:
    """One worker-mode job driven step by step: its stored status and its assignment's observation."""

    def __init__(self, **spec_fields: Any) -> None:
        self.spec = spec(**spec_fields)
        self.status = JobStatus()
        self.seen: list[A.AssignmentObservation] = []
        self.now = T0
        self.queue = queue(cancelGrace="2s")

    def obs(self) -> T.Observations:
        return T.Observations(queue=self.queue, handler=handler(), attempts=tuple(self.seen))

    def reconcile(self) -> T.Decision:
        decision = decide(snapshot(self.status, self.spec), self.obs(), self.now)
        self.status = decision.status
        return decision

    def assign(self) -> T.Decision:
        decision = T.admit(snapshot(self.status, self.spec), self.obs(), self.now, worker=f"w1/{INC}")
        self.status = decision.status
        return decision

    def observe(self, *results: dict[str, Any], live: bool = True, **fields: Any) -> None:
        worker = believed(spec_fields={"results": list(results)})
        self.seen = [W.observe_assignment(assignment(**fields), "w1", worker, live, self.now)]


def actions(decision: T.Decision, kind: type) -> list[Any]:
    return [a for a in decision.actions if isinstance(a, kind)]


def test_admission_assigns_and_writes_nothing_then_running_after_a_second_then_the_end_in_one_write():
    job = OnWorker()
    job.reconcile()
    stored = job.status.duplicate()
    admitted = job.assign()
    assert actions(admitted, T.Assign) == [T.Assign(f"w1/{INC}", 1, 1)] and admitted.status == stored
    job.observe()
    job.now = at(0.5)
    assert job.reconcile().status == stored, "held: its first second"
    job.now = at(1)
    running = job.reconcile()
    entry = running.status.attempts[-1]
    assert running.status.state == State.RUNNING and running.status.worker == "w1"
    assert (entry.worker, entry.node, entry.pod, entry.started_at) == (f"w1/{INC}", "w1", None, format_time(T0))
    assert not actions(running, T.Unassign)
    job.now = at(3)
    job.observe(result(exitCode=0, startedAt=format_time(at(0.2)), finishedAt=format_time(at(2.5))))
    done = job.reconcile()
    assert done.status.state == State.SUCCEEDED
    assert (done.status.attempts[-1].started_at, done.status.attempts[-1].finished_at) == (
        format_time(at(0.2)), format_time(at(2.5))), "the worker's times"
    assert actions(done, T.Unassign) == [T.Unassign("w1", 1)], "acknowledged after that write"
    assert actions(job.reconcile(), T.Unassign) == [T.Unassign("w1", 1)], "idempotent: a crash in between"


def test_the_first_second_counts_from_when_the_assignment_landed_not_from_the_decision():
    """Under load the Worker status write that carries an assignment takes longer than a second to land: counted
    from the decision, every attempt would be written `running` at once, a third write for a job of a few ms."""
    job = OnWorker()
    job.reconcile()
    job.assign()
    landed = at(2.5)  # the write landed 2.5 s after the decision
    job.now = at(3)
    job.seen = [W.observe_assignment(assignment(), "w1", believed(), True, job.now, landed_at=landed)]
    assert job.seen[0].started_at == landed
    held = job.reconcile()
    assert held.status.state != State.RUNNING and held.wake_at == at(3.5), "held until its first second is over"
    job.now = at(3.5)
    job.seen = [W.observe_assignment(assignment(), "w1", believed(), True, job.now, landed_at=landed)]
    assert job.reconcile().status.state == State.RUNNING


def test_a_job_that_ends_within_its_first_second_is_recorded_once():
    job = OnWorker()
    job.reconcile()
    job.assign()
    job.now = at(0.6)
    job.observe(result(exitCode=1, message="boom"))
    failed = job.reconcile()
    assert failed.status.state == State.FAILED and failed.status.attempt == 1
    assert [(e.result, e.reason, e.worker) for e in failed.status.attempts] == [("failed", "Error", f"w1/{INC}")]
    assert actions(failed, T.Unassign) == [T.Unassign("w1", 1)]


def test_a_lost_worker_fails_the_attempt_lease_expired_and_it_counts():
    job = OnWorker()
    job.reconcile()
    job.assign()
    job.now = at(0.3)
    job.observe(live=False)  # before its start was even recorded
    lost = job.reconcile()
    assert (lost.status.state, lost.status.attempt, lost.status.attempts[-1].reason) == (
        State.FAILED, 1, A.LEASE_EXPIRED)
    assert actions(lost, T.Unassign) == [T.Unassign("w1", 1)]


def test_a_cancel_records_running_at_once_sets_the_stop_and_sets_it_again_until_it_is_on_the_assignment():
    job = OnWorker()
    job.reconcile()
    job.assign()
    job.observe()
    job.spec = spec(cancel=True)
    job.now = at(0.2)
    stopping = job.reconcile()
    assert stopping.status.state == State.RUNNING and stopping.status.stop_reason == A.CANCELLED
    stop = T.StopAssignment("w1", 1, A.CANCELLED, format_time(at(0.2)), 2.0)
    assert actions(stopping, T.StopAssignment) == [stop]
    job.now = at(1)
    assert actions(job.reconcile(), T.StopAssignment) == [stop], "not on the assignment yet: asked again"
    job.observe(stop="Cancelled", stopRequestedAt=format_time(at(0.2)), cancelGraceSeconds=2)
    assert actions(job.reconcile(), T.StopAssignment) == []
    job.now = at(7.3)  # 0.2 + 2 s grace + 5 s allowance: no report, the operator records it
    job.observe(stop="Cancelled", stopRequestedAt=format_time(at(0.2)), cancelGraceSeconds=2)
    ended = job.reconcile()
    assert ended.status.state == State.CANCELLED and actions(ended, T.Unassign) == [T.Unassign("w1", 1)]


def test_a_timeout_stops_the_assignment_and_the_workers_report_decides():
    job = OnWorker()
    job.queue = queue(timeout="10s")
    job.reconcile()
    job.assign()
    job.observe()
    job.now = at(2)
    job.reconcile()
    job.now = at(10)
    timing_out = job.reconcile()
    assert actions(timing_out, T.StopAssignment)[0].reason == A.TIMEOUT
    job.observe(result(exitCode=143, reason="Timeout"), stop="Timeout", stopRequestedAt=format_time(at(10)))
    ended = job.reconcile()
    assert ended.status.state == State.FAILED and ended.status.attempts[-1].reason == A.TIMEOUT


def test_a_cancel_of_a_job_whose_assignment_is_still_on_its_way_removes_it_and_cancels():
    job = OnWorker()
    job.reconcile()
    job.assign()
    job.seen = [W.observe_assignment(assignment(), "w1", None, True, job.now, durable=False)]
    job.spec = spec(cancel=True)
    cancelled = job.reconcile()
    assert cancelled.status.state == State.CANCELLED and actions(cancelled, T.Unassign) == [T.Unassign("w1", 1)]
