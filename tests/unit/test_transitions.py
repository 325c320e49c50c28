"""reconcile/admit on a fixed clock: every rule of the job lifecycle, pod mode's running = taken, and the timeline.

Each test drives one job (see _builders.Job) through the pure core and checks one rule.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from _builders import (
    JOB,
    T0,
    UID,
    Job,
    at,
    condition,
    creates,
    decide,
    deletes,
    event_reasons,
    handler,
    obs,
    pod,
    queue,
    snapshot,
    spec,
)
from sextant.controller import writes
from sextant.lifecycle import transitions as T
from sextant.lifecycle.decision import COND_BLOCKED
from sextant.lifecycle.backoff import backoff_delay, jitter_sample
from sextant.resources.common import format_time, parse_time
from sextant.resources.job import JobStatus, State

Q, R, S, F, D, C, SCH = (State.QUEUED, State.RUNNING, State.SUCCEEDED, State.FAILED, State.DEAD, State.CANCELLED,
                         State.SCHEDULED)


def queued_job(**kw) -> Job:
    job = Job(**kw)
    job.reconcile()
    assert job.status.state == Q
    return job


def running_job(**kw) -> Job:
    job = queued_job(**kw)
    job.admit()
    job.set_pod("Running", node="node-a")
    job.reconcile()
    assert job.status.state == R
    return job


def failed_job(**kw) -> Job:
    job = queued_job(**kw)
    job.run_attempt("Failed", 1)
    assert job.status.state == F
    return job


def dead_job(**kw) -> Job:
    job = queued_job(queue=queue(maxAttempts=1), **kw)
    job.run_attempt("Failed", 1)
    assert job.status.state == D
    return job


def succeeded_job(**kw) -> Job:
    job = queued_job(**kw)
    job.run_attempt("Succeeded", 0)
    assert job.status.state == S
    return job


def scheduled_job(**kw) -> Job:
    job = Job(spec=spec(runAt=format_time(at(3600))), **kw)
    job.reconcile()
    assert job.status.state == SCH
    return job


def cancelled_job(**kw) -> Job:
    job = queued_job(**kw)
    job.update_spec(cancel=True)
    job.reconcile()
    assert job.status.state == C
    return job


BUILD = {SCH: scheduled_job, Q: queued_job, R: running_job, S: succeeded_job, F: failed_job, D: dead_job,
         C: cancelled_job}


def ids(value):
    return getattr(value, "value", None)


# ================================================================ creation: scheduled or queued


def test_a_new_job_without_run_at_is_queued():
    job = Job(now=at(2))
    d = job.reconcile()
    assert d.status.state == Q
    assert d.status.queued_at == format_time(T0)  # FIFO by the time it became runnable: its creation
    assert d.wants_admission
    assert d.actions == [] and d.wake_at is None
    assert event_reasons(d) == ["Queued"]


def test_a_run_at_in_the_past_is_queued_from_run_at():
    job = Job(spec=spec(runAt=format_time(at(60))), now=at(120))
    d = job.reconcile()
    assert (d.status.state, d.status.queued_at) == (Q, format_time(at(60)))


def test_a_run_at_before_creation_is_queued_from_creation():
    job = Job(spec=spec(runAt=format_time(at(-3600))))
    assert job.reconcile().status.queued_at == format_time(T0)


def test_a_run_at_of_now_is_queued():
    job = Job(spec=spec(runAt=format_time(at(0))))
    assert job.reconcile().status.state == Q


def test_a_future_run_at_is_scheduled_until_then():
    run_at = at(3600)
    job = Job(spec=spec(runAt=format_time(run_at)))
    d = job.reconcile()
    assert d.status.state == SCH
    assert d.status.next_attempt_at == format_time(run_at)
    assert d.wake_at == run_at
    assert not d.wants_admission
    assert event_reasons(d) == ["Scheduled"]


def test_a_scheduled_job_waits_before_run_at():
    job = scheduled_job()
    job.advance(3599)
    d = job.reconcile()
    assert d.status.state == SCH
    assert d.wake_at == at(3600)
    assert d.events == []


@pytest.mark.parametrize("late", [0, 1, 86400], ids=["on time", "1s late", "a day late"])
def test_a_scheduled_job_is_queued_when_run_at_passes(late):
    job = scheduled_job()
    job.advance(3600 + late)
    d = job.reconcile()
    assert d.status.state == Q
    assert d.status.queued_at == format_time(at(3600))  # FIFO position: when it became runnable
    assert d.status.next_attempt_at is None
    assert d.wants_admission


def test_a_run_at_without_time_zone_is_read_as_utc():
    job = Job(spec=spec(runAt="2026-03-01T13:00:00"))
    d = job.reconcile()
    assert (d.status.state, d.status.next_attempt_at) == (SCH, format_time(at(3600)))
    job.advance(3600)
    assert job.reconcile().status.state == Q


def test_first_reconcile_records_max_attempts_and_generation():
    job = Job(queue=queue(maxAttempts=7), generation=4)
    d = job.reconcile()
    assert (d.status.max_attempts, d.status.observed_generation) == (7, 4)


def test_a_job_created_cancelled_is_cancelled():
    job = Job(spec=spec(cancel=True))
    d = job.reconcile()
    assert d.status.state == C
    assert condition(d.status, "Cancelled").status == "True"
    assert d.status.finished_at == format_time(T0)


def test_a_retry_token_present_at_creation_is_not_a_retry():
    job = Job(spec=spec(retryToken="r1"))
    d = job.reconcile()
    assert (d.status.state, d.status.retry_token) == (Q, "r1")
    assert "RetryRefused" not in event_reasons(d)


def test_a_duplicate_idempotency_key_cancels_the_job():
    job = Job(spec=spec(idempotencyKey="receipt-42"))
    d = T.reconcile(job.snap(), obs(duplicate_of="job-first"), T0)
    assert d.status.state == C
    assert d.status.duplicate_of == "job-first"
    cond = condition(d.status, "Cancelled")
    assert (cond.status, cond.reason) == ("True", "DuplicateIdempotencyKey")
    assert "receipt-42" in d.status.message and "job-first" in d.status.message
    assert [(e.reason, e.type) for e in d.events] == [("DuplicateIdempotencyKey", "Warning")]
    assert d.actions == []


def test_a_duplicate_is_only_judged_at_first_sight():
    job = queued_job()
    d = T.reconcile(job.snap(), obs(duplicate_of="job-first"), T0)
    assert d.status.state == Q and d.status.duplicate_of is None


# ================================================================ admission


def test_pod_name_is_job_and_run():
    assert T.pod_name("job-8f3k2m9q", 3) == "job-8f3k2m9q-3"


def test_admit_creates_the_pod_and_the_job_stays_queued():
    """Admission writes nothing: the pod (named for run 1) holds the slot, the job is queued until it starts."""
    job = queued_job(now=at(5))
    before = job.status.model_copy(deep=True)
    d = job.admit()
    assert d.actions == [T.CreatePod(f"{JOB}-1", 1, 1)]
    assert d.status == before  # state queued, run 0, no timeline entry: nothing to write
    assert d.events == []
    assert d.wake_at == at(5 + 600)  # the queue's startTimeout (10m)


def test_a_pending_pod_keeps_the_job_queued():
    job = queued_job(now=at(5))
    job.admit()
    for step in (10, 60, 300):
        job.advance(step)
        d = job.reconcile()
        assert (d.status.state, d.status.sequence, d.status.attempts) == (Q, 0, [])
        assert d.actions == [] and d.events == []
        assert d.wake_at == at(5 + 600)
        assert not d.wants_admission or True  # the controller never admits it again: its pod is alive
        assert job.observe().alive_attempts


def test_the_container_start_takes_the_job():
    job = queued_job(now=at(5))
    job.admit()
    job.advance(40)  # scheduled, image pulled: the container started at 42, the operator sees it at 45
    job.set_pod("Running", node="node-a", started_at=at(42))
    job.lease_renewed_at = at(42)  # the view's heartbeat: the container's start until the first renewal
    d = job.reconcile()
    st = d.status
    assert (st.state, st.sequence, st.attempt) == (R, 1, 1)
    assert [(a.attempt, a.sequence, a.pod, a.node, a.result, a.started_at) for a in st.attempts] == [
        (1, 1, f"{JOB}-1", "node-a", "running", format_time(at(42)))
    ]
    assert st.timeout_at == format_time(at(42 + 300))  # the timeout counts from the container's start
    assert d.wake_at == at(42 + 30)  # the lease: from the container's start too
    assert condition(st, "Running").status == "True"
    assert event_reasons(d) == ["Started"]
    assert st.message == f"attempt 1 of 5 started in pod {JOB}-1"
    assert d.actions == []


def test_a_pod_seen_only_once_finished_is_recorded_in_one_write():
    job = queued_job(now=at(5))
    job.admit()
    job.advance(20)
    job.set_pod("Succeeded", node="node-a", exit_code=0, started_at=at(12))
    d = job.reconcile()
    entry = d.status.attempts[-1]
    assert (d.status.state, d.status.sequence, d.status.attempt) == (S, 1, 1)
    assert (entry.started_at, entry.finished_at, entry.result) == (format_time(at(12)), format_time(at(25)),
                                                                   "succeeded")
    assert event_reasons(d) == ["Started", "Succeeded"]
    assert condition(d.status, "Running").status == "False"


@pytest.mark.parametrize("seen_after, recorded", [(0, False), (0.5, False), (0.999, False), (1, True), (30, True)])
def test_a_start_is_recorded_once_it_is_a_second_old(seen_after, recorded):
    """RECORD_RUNNING_AFTER: a pod that started less than a second ago leaves the status as it is and wakes the
    operator at start + 1 s; the start itself (startedAt, the timeout) is the container's either way."""
    job = queued_job(now=at(5))
    job.admit()
    job.advance(5)
    job.set_pod("Running", node="node-a", started_at=at(10))
    job.advance(seen_after)
    before = job.status.duplicate()
    d = job.reconcile()
    if recorded:
        assert (d.status.state, d.status.attempts[-1].started_at) == (R, format_time(at(10)))
        assert event_reasons(d) == ["Started"]
    else:
        assert d.status == before and d.events == [] and d.actions == []
        assert d.wake_at == at(11)


def test_a_pod_that_ends_within_a_second_of_its_start_is_written_once_to_its_end():
    job = queued_job(now=at(5))
    job.admit()
    job.advance(5)
    job.set_pod("Running", node="node-a", started_at=at(10))
    assert job.reconcile().status.state == Q  # held: no write
    job.advance(0.4)
    job.set_pod("Succeeded", node="node-a", exit_code=0, started_at=at(10))
    d = job.reconcile()
    assert (d.status.state, d.status.attempts[-1].started_at) == (S, format_time(at(10)))
    assert event_reasons(d) == ["Started", "Succeeded"]


@pytest.mark.parametrize("case", ["cancel", "deleting", "disruption", "node clock ahead", "no start time"])
def test_a_start_is_recorded_at_once_when_waiting_would_be_wrong(case):
    """A standing cancel stops the attempt with its cancelGrace, which needs it recorded; a pod on its way out may
    vanish before the second is over; a start time ahead of the operator's clock (a node's skew) or missing gives no
    second to count from."""
    job = queued_job(now=at(5))
    job.admit()
    job.advance(5)
    started = {"node clock ahead": at(12), "no start time": None}.get(case, at(10))
    job.set_pod("Running", node="node-a", started_at=started, deleting=case == "deleting",
                disruption="PreemptionByScheduler" if case == "disruption" else None)
    if case == "cancel":
        job.update_spec(cancel=True)
    d = job.reconcile()
    assert d.status.state == R
    if case == "cancel":
        assert d.status.stop_reason == "Cancelled" and deletes(d)


def test_a_new_job_whose_pod_started_unrecorded_is_stopped_with_its_grace_when_cancelled():
    """Admitted on first sight (no state written yet) and its handler started within the second: a cancel records the
    attempt and stops it with SIGTERM and the cancelGrace, instead of "cancelled before it was queued" (which deletes
    the pod at once)."""
    job = Job(now=at(1))
    decided = T.reconcile(job.snap(), job.observe(), job.now)
    assert creates(T.admit(snapshot(decided.status), job.observe(), job.now))
    job.pods[1] = pod(1, "Running", node="node-a", created_at=at(1), started_at=at(2))
    job.advance(1.5)
    assert decide(job.snap(), job.observe(), job.now).status == JobStatus()  # both writes held
    job.update_spec(cancel=True)
    d = job.reconcile()
    assert (d.status.state, d.status.stop_reason, d.status.attempts[-1].started_at) == (R, "Cancelled",
                                                                                        format_time(at(2)))
    assert deletes(d) and deletes(d)[0].grace_seconds != 0


def test_the_queue_timeout_counts_from_the_container_start():
    job = queued_job(queue=queue(timeout="45s", leaseDuration="10m"))
    job.admit()
    job.advance(100)  # 100 s waiting for a node: no timeout yet
    job.set_pod("Running", started_at=at(100))
    job.advance(1)  # seen a second after it started (before that, see RECORD_RUNNING_AFTER below)
    d = job.reconcile()
    assert (d.status.state, d.status.timeout_at, d.wake_at) == (R, format_time(at(145)), at(145))
    job.advance_to(at(145))
    d = job.reconcile()
    assert d.status.stop_reason == "Timeout" and deletes(d)


@pytest.mark.parametrize("pod_fields, reason", [
    ({"unschedulable": True, "message": "0/2 nodes are available: 2 Insufficient cpu."}, "Unschedulable"),
    ({"node": "node-a", "waiting_reason": "ErrImagePull", "message": "pull access denied"}, "ErrImagePull"),
    ({"node": "node-a", "waiting_reason": "ImagePullBackOff", "message": "Back-off pulling image"}, "ImagePullBackOff"),
    ({"node": "node-a", "waiting_reason": "ContainerCreating"}, "StartTimeout"),
    ({}, "StartTimeout"),
])
def test_a_pod_that_does_not_start_in_time_fails_the_attempt(pod_fields, reason):
    job = queued_job(queue=queue(startTimeout="2m"))
    job.admit()
    job.set_pod("Pending", **pod_fields)
    job.advance(119)
    assert job.reconcile().status.state == Q
    job.advance(1)
    d = job.reconcile()
    entry = d.status.attempts[-1]
    assert (d.status.state, d.status.sequence, d.status.attempt) == (F, 1, 1)  # counts as an attempt, retried
    assert (entry.result, entry.reason, entry.started_at, entry.pod) == ("failed", reason, None, f"{JOB}-1")
    assert entry.message.startswith(f"pod {JOB}-1 did not start within startTimeout 2m")
    if pod_fields.get("message"):
        assert entry.message.endswith(pod_fields["message"])
    assert deletes(d) == [T.DeletePod(f"{JOB}-1", None)]
    assert d.wake_at == parse_time(d.status.next_attempt_at)
    # The pod goes; after the backoff the next attempt gets a new pod.
    del job.pods[1]
    job.advance_to(d.status.next_attempt_at)
    assert job.reconcile().status.state == Q
    assert creates(job.admit()) == [T.CreatePod(f"{JOB}-2", 2, 2)]


def test_a_start_timeout_on_the_last_attempt_is_dead():
    job = queued_job(queue=queue(startTimeout="1m", maxAttempts=1))
    job.admit()
    job.set_pod("Pending", unschedulable=True)
    job.advance(60)
    d = job.reconcile()
    assert (d.status.state, d.status.attempts[-1].reason) == (D, "Unschedulable")
    assert deletes(d) == [T.DeletePod(f"{JOB}-1", None)]


def test_a_start_timed_out_pod_left_behind_is_deleted_again():
    """The status was written, the delete lost (a crash): the next reconcile deletes it, and nothing else moves."""
    job = queued_job(queue=queue(startTimeout="1m"))
    job.admit()
    job.advance(60)
    first = job.reconcile()
    again = job.reconcile()
    assert again.status == first.status and again.events == []
    assert deletes(again) == [T.DeletePod(f"{JOB}-1", None)]


def test_a_queued_job_cancelled_while_its_pod_starts():
    job = queued_job()
    job.admit()
    job.update_spec(cancel=True)
    d = job.reconcile()
    assert (d.status.state, d.status.attempts) == (C, [])
    assert deletes(d) == [T.DeletePod(f"{JOB}-1", 0)]


def test_a_pod_deleted_before_it_started_never_ran():
    """Someone deleted the starting pod: nothing is recorded; once it is gone the same run starts again."""
    job = queued_job()
    job.admit()
    job.set_pod("Pending", deleting=True)
    d = job.reconcile()
    assert (d.status.state, d.status.sequence, d.actions) == (Q, 0, [])
    del job.pods[1]
    assert creates(job.admit()) == [T.CreatePod(f"{JOB}-1", 1, 1)]


def test_a_new_job_admitted_at_once_is_not_written_while_its_pod_starts():
    """First sight and admission in one reconcile: the status stays unwritten (it reads `queued`, the CRD's
    default) while the pod starts quietly, however long; the start is its first write."""
    job = Job(now=at(1))
    decided = T.reconcile(job.snap(), job.observe(), job.now)
    assert decided.status.state == Q
    started = T.admit(snapshot(decided.status), job.observe(), job.now)
    held = writes.scheduled(job.snap(), started, job.observe(), job.now, waiting_since=job.now)
    assert held.status == JobStatus() and held.events == [] and creates(held) == creates(started)
    assert held.wake_at == started.wake_at  # the start timeout; no wake-up to write `queued`
    # Later reconciles keep holding while the pod starts quietly ...
    job.pods[1] = pod(1, "Pending", created_at=at(1))
    job.advance(300)
    d = decide(job.snap(), job.observe(), job.now)
    assert d.status == JobStatus() and d.wake_at == at(1) + timedelta(minutes=10)  # the queue's startTimeout
    # ... and a start is the job's first write: running.
    job.pods[1] = pod(1, "Running", created_at=at(1), started_at=at(3))
    assert decide(job.snap(), job.observe(), job.now).status.state == R


def test_a_new_job_in_line_for_a_slot_is_not_written_queued():
    """No free slot yet: no write while it waits in line (it reads `queued`), so the take is its first write
    (create, take, finish)."""
    job = Job(now=at(1))
    decided = T.reconcile(job.snap(), job.observe(), job.now)
    held = writes.scheduled(job.snap(), decided, job.observe(), job.now, waiting_since=at(1))
    assert held.status == JobStatus() and held.events == [] and held.wake_at == decided.wake_at
    job.advance(3600)
    later = T.reconcile(job.snap(), job.observe(), job.now)
    assert writes.scheduled(job.snap(), later, job.observe(), job.now, waiting_since=at(1)).status == JobStatus()


def test_record_queued_after_writes_a_waiting_new_job_queued_after_that_long_but_never_holds_a_stuck_pod():
    """`sextant operator --record-queued-after`: a pod starting quietly keeps its new job unwritten for that long
    (5 s: written queued after; 1 h: the start is the first write); a pod that says it is stuck is written at once."""
    hour, five = timedelta(hours=1), timedelta(seconds=5)
    job = Job(now=at(1))
    job.pods[1] = pod(1, "Pending", created_at=at(1))
    job.advance(300)
    d = decide(job.snap(), job.observe(), job.now, hour)
    assert d.status == JobStatus() and d.actions == []
    assert d.wake_at == at(1) + timedelta(minutes=10)  # the queue's startTimeout ends before the hold
    assert decide(job.snap(), job.observe(), job.now, five).status.state == Q
    job.pods[1] = pod(1, "Pending", created_at=at(1), unschedulable=True)
    assert decide(job.snap(), job.observe(), job.now, hour).status.state == Q
    assert decide(job.snap(), job.observe(), job.now).status.state == Q  # by default too
    # In line for a slot: the same hold, from when the job became runnable.
    fresh = Job(now=at(1))
    decided = T.reconcile(fresh.snap(), fresh.observe(), fresh.now)
    assert writes.scheduled(fresh.snap(), decided, fresh.observe(), at(301), hour, at(1)).status == JobStatus()
    assert writes.scheduled(fresh.snap(), decided, fresh.observe(), at(1) + hour, hour, at(1)) is decided


def test_a_blocked_new_job_is_written_at_once():
    job = Job(now=at(1))
    nothing = T.Observations(None, None)  # no Queue, no Handler
    decided = T.reconcile(job.snap(), nothing, job.now)
    assert any(c.type == COND_BLOCKED and c.status == "True" for c in decided.status.conditions)
    assert writes.scheduled(job.snap(), decided, nothing, job.now, waiting_since=at(1)) is decided


@pytest.mark.parametrize("pod_fields, later, message", [
    ({}, 5, f"runnable; its attempt's pod {JOB}-1 waits to start"),
    ({"unschedulable": True}, 0, f"runnable; its attempt's pod {JOB}-1 waits to start (Unschedulable)"),
    ({"node": "n", "waiting_reason": "ErrImagePull"}, 0, f"runnable; its attempt's pod {JOB}-1 waits to start (ErrImagePull)"),
])
def test_a_new_job_whose_pod_is_slow_or_stuck_is_written_queued(pod_fields, later, message):
    job = Job(now=at(1))
    job.pods[1] = pod(1, "Pending", created_at=at(1), **pod_fields)
    job.advance(later)
    d = T.reconcile(job.snap(), job.observe(), job.now)
    assert (d.status.state, d.status.sequence, d.status.message) == (Q, 0, message)
    assert event_reasons(d) == ["Queued"]


@pytest.mark.parametrize("state", [SCH, R, S, F, D, C], ids=ids)
def test_only_a_queued_job_is_admitted(state):
    job = BUILD[state]()
    with pytest.raises(ValueError, match="only a queued job"):
        T.admit(job.snap(), job.observe(), job.now)


@pytest.mark.parametrize(
    "previous",
    [
        pytest.param(pod(1, "Running", deleting=True), id="terminating"),
        pytest.param(pod(1, "Failed", exit_code=137, deleting=True), id="finished but still deleting"),
    ],
)
def test_no_replacement_while_the_previous_pod_is_alive(previous):
    job = failed_job()
    job.pods[1] = previous
    job.advance(10)
    assert job.reconcile().status.state == Q
    with pytest.raises(ValueError, match="still exists"):
        T.admit(job.snap(), job.observe(), job.now)


def test_a_finished_previous_pod_does_not_block_admission():
    job = failed_job()
    job.advance(10)
    job.reconcile()
    assert job.pods[1].phase == "Failed"
    assert creates(job.admit()) == [T.CreatePod(f"{JOB}-2", 2, 2)]


# ================================================================ running: outcomes


@pytest.mark.parametrize("phase", ["Pending", "Running", "Unknown"])
def test_a_running_attempt_waits(phase):
    job = running_job()
    job.set_pod(phase)
    job.advance(30)
    d = job.reconcile()
    assert d.status == job.status and d.status.state == R
    assert d.actions == [] and d.events == []
    assert d.wake_at == at(300)  # the timeout


def test_a_pod_deleted_by_someone_else_is_waited_for():
    job = running_job()
    job.set_pod("Running", deleting=True)
    d = job.reconcile()
    assert d.status.state == R and d.actions == []


def test_success():
    job = running_job()
    job.advance(42)
    job.set_pod("Succeeded", exit_code=0)
    d = job.reconcile()
    st = d.status
    assert st.state == S
    cond = condition(st, "Succeeded")
    assert (cond.status, cond.reason) == ("True", "Succeeded")
    assert condition(st, "Running").status == "False"
    assert st.finished_at == format_time(at(42))
    entry = st.attempts[-1]
    assert (entry.result, entry.exit_code, entry.reason, entry.node, entry.finished_at) == (
        "succeeded", 0, None, "node-a", format_time(at(42)))
    assert (st.timeout_at, st.stop_reason, st.next_attempt_at) == (None, None, None)
    assert not d.wants_admission and d.wake_at is None


def test_a_failed_attempt_waits_for_its_backoff():
    job = running_job()
    job.advance(7)
    job.set_pod("Failed", exit_code=1)
    d = job.reconcile()
    st = d.status
    assert st.state == F
    assert st.next_attempt_at == format_time(at(17))  # 10s, the default initial backoff
    assert d.wake_at == at(17)
    assert (st.attempts[-1].result, st.attempts[-1].reason, st.attempts[-1].exit_code) == ("failed", "Error", 1)
    assert [(e.reason, e.type) for e in d.events] == [("Failed", "Warning")]
    assert st.finished_at is None
    assert not d.wants_admission


def test_a_failed_job_is_queued_when_the_backoff_elapses():
    job = failed_job()
    due = parse_time(job.status.next_attempt_at)
    job.advance_to(due - timedelta(seconds=1))
    assert job.reconcile().status.state == F
    job.advance_to(due)
    d = job.reconcile()
    assert (d.status.state, d.status.queued_at, d.status.next_attempt_at) == (Q, format_time(due), None)
    assert d.status.attempt == 1  # the failed attempt stays counted


def test_the_backoff_delay_is_jittered_per_job_and_run():
    job = queued_job(queue=queue(backoff={"jitter": 0.5}))
    job.run_attempt("Failed", 1)
    want = backoff_delay(queue(backoff={"jitter": 0.5}).backoff, 1, jitter_sample(UID, 1))
    assert parse_time(job.status.next_attempt_at) == job.now + want


def test_fail_twice_then_succeed():
    job = queued_job()
    delays = []
    for _ in range(2):
        job.run_attempt("Failed", 1)
        assert job.status.state == F
        delays.append(parse_time(job.status.next_attempt_at) - job.now)
        job.advance_to(job.status.next_attempt_at)
        job.reconcile()
    d = job.run_attempt("Succeeded", 0)
    st = d.status
    assert st.state == S
    assert (st.attempt, st.sequence) == (3, 3)
    assert delays == [timedelta(seconds=10), timedelta(seconds=20)]  # initial, initial × factor
    assert [(a.attempt, a.sequence, a.pod, a.result, a.reason) for a in st.attempts] == [
        (1, 1, f"{JOB}-1", "failed", "Error"),
        (2, 2, f"{JOB}-2", "failed", "Error"),
        (3, 3, f"{JOB}-3", "succeeded", None),
    ]


@pytest.mark.parametrize("max_attempts", [1, 2, 3, 5])
def test_always_failing_ends_dead_at_max_attempts(max_attempts):
    job = queued_job(queue=queue(maxAttempts=max_attempts))
    for n in range(1, max_attempts + 1):
        d = job.run_attempt("Failed", 1)
        if n < max_attempts:
            assert d.status.state == F
            job.advance_to(d.status.next_attempt_at)
            job.reconcile()
    st = job.status
    assert st.state == D
    assert st.attempt == max_attempts == len(st.attempts)
    cond = condition(st, "Dead")
    assert (cond.status, cond.reason) == ("True", "Dead")
    assert "attempts exhausted" in st.message
    assert st.next_attempt_at is None and st.finished_at == format_time(job.now)
    assert d.wake_at is None and not d.wants_admission


def test_a_non_retryable_exit_code_is_dead_after_one_attempt():
    job = queued_job(handler=handler([2]))
    d = job.run_attempt("Failed", 2)
    st = d.status
    assert (st.state, st.attempt) == (D, 1)
    entry = st.attempts[-1]
    assert (entry.result, entry.reason, entry.exit_code) == ("failed", "NonRetryableExitCode", 2)
    assert condition(st, "Dead").status == "True"


@pytest.mark.parametrize(
    "phase,fields,reason",
    [
        pytest.param("Failed", {"exit_code": 1}, "Error", id="exit 1"),
        pytest.param("Failed", {"reason": "Evicted"}, "PodLost", id="evicted"),
        pytest.param("Failed", {"reason": "Preempted"}, "PodLost", id="preempted"),
        pytest.param("Failed", {"reason": "NodeShutdown"}, "PodLost", id="node shutdown"),
    ],
)
def test_failures_that_count_as_an_attempt(phase, fields, reason):
    job = running_job()
    job.set_pod(phase, **fields)
    st = job.reconcile().status
    assert (st.state, st.attempt, st.attempts[-1].reason) == (F, 1, reason)


def test_a_pod_that_vanished_is_a_lost_attempt():
    job = running_job()
    del job.pods[1]
    st = job.reconcile().status
    assert (st.state, st.attempts[-1].result, st.attempts[-1].reason) == (F, "failed", "PodLost")


# ================================================================ timeout


def test_before_the_timeout_nothing_happens():
    job = running_job()
    job.advance(299)
    d = job.reconcile()
    assert d.actions == [] and d.status.stop_reason is None and d.wake_at == at(300)


@pytest.mark.parametrize("grace,seconds", [("10s", 10), ("3s", 3), ("1m", 60), ("0s", 0)])
def test_timeout_stops_the_pod_with_the_cancel_grace(grace, seconds):
    job = running_job(queue=queue(cancelGrace=grace))
    job.advance(300)
    d = job.reconcile()
    assert d.status.state == R
    assert (d.status.stop_reason, d.status.stop_requested_at) == ("Timeout", format_time(at(300)))
    assert d.actions == [T.DeletePod(f"{JOB}-1", seconds)]
    assert ("Timeout", "Warning") in [(e.reason, e.type) for e in d.events]
    assert d.wake_at == at(300 + seconds + 5)  # the force-delete deadline


def test_a_timed_out_pod_that_is_gone_fails_with_timeout():
    job = running_job()
    job.advance(300)
    job.reconcile()
    job.set_pod("Running", deleting=True)
    assert job.reconcile().status.state == R
    del job.pods[1]
    job.advance(3)
    st = job.reconcile().status
    assert st.state == F
    entry = st.attempts[-1]
    assert (entry.result, entry.reason, entry.finished_at) == ("failed", "Timeout", format_time(at(303)))
    assert (st.stop_reason, st.stop_requested_at, st.timeout_at) == (None, None, None)


def test_a_timed_out_pod_killed_with_137_is_a_timeout_not_an_error():
    job = running_job()
    job.advance(300)
    job.reconcile()
    job.set_pod("Failed", exit_code=137, deleting=True)
    entry = job.reconcile().status.attempts[-1]
    assert (entry.reason, entry.exit_code) == ("Timeout", 137)


def test_a_timeout_on_the_last_attempt_is_dead():
    job = running_job(queue=queue(maxAttempts=1))
    job.advance(300)
    job.reconcile()
    del job.pods[1]
    assert job.reconcile().status.state == D


def test_force_delete_after_grace_plus_five_seconds():
    job = running_job()
    job.advance(300)
    job.reconcile()
    job.set_pod("Running", deleting=True)
    job.advance(14)
    d = job.reconcile()
    assert deletes(d) == [] and d.wake_at == at(315)
    job.advance(1)
    d = job.reconcile()
    assert deletes(d) == [T.DeletePod(f"{JOB}-1", 0)]
    assert d.wake_at == at(320)  # look again if the force delete did not take
    assert d.status.state == R


def test_a_pod_that_finished_before_the_timeout_was_seen_keeps_its_result():
    """The operator was away when the timeout passed; the pod had already succeeded."""
    job = running_job()
    job.set_pod("Succeeded", exit_code=0)
    job.advance(600)
    d = job.reconcile()
    assert d.status.state == S and d.actions == []


def test_a_pod_that_failed_before_the_timeout_was_seen_is_an_error():
    job = running_job()
    job.set_pod("Failed", exit_code=3)
    job.advance(600)
    assert job.reconcile().status.attempts[-1].reason == "Error"


# ================================================================ lease


def test_a_fresh_lease_sets_the_next_look():
    job = running_job()
    job.lease_renewed_at = at(10)
    job.advance(20)
    d = job.reconcile()
    assert d.actions == [] and d.wake_at == at(40)  # renewed + leaseDuration 30s


@pytest.mark.parametrize("lease,age,expired", [("30s", 29, False), ("30s", 30, True), ("30s", 31, True),
                                               ("1m", 45, False), ("1m", 60, True)])
def test_lease_expiry(lease, age, expired):
    job = running_job(queue=queue(leaseDuration=lease))
    job.lease_renewed_at = at(10)
    job.advance(10 + age)
    d = job.reconcile()
    assert (d.status.stop_reason == "LeaseExpired") is expired
    assert (d.actions == [T.DeletePod(f"{JOB}-1", 10)]) is expired


def test_without_a_lease_yet_nothing_expires():
    job = running_job()
    job.advance(200)
    assert job.reconcile().status.stop_reason is None


def test_an_expired_lease_counts_as_an_attempt():
    job = running_job(queue=queue(maxAttempts=2))
    job.lease_renewed_at = at(0)
    job.advance(31)
    job.reconcile()
    del job.pods[1]
    st = job.reconcile().status
    assert (st.state, st.attempt, st.attempts[-1].reason) == (F, 1, "LeaseExpired")


def test_a_crash_looping_handler_ends_dead():
    job = queued_job(queue=queue(maxAttempts=3))
    for _ in range(3):
        job.admit()
        job.set_pod("Running")
        job.reconcile()
        job.lease_renewed_at = job.now
        job.advance(30)
        job.reconcile()
        del job.pods[job.status.sequence]
        job.lease_renewed_at = None
        d = job.reconcile()
        if d.status.state == F:
            job.advance_to(d.status.next_attempt_at)
            job.reconcile()
    assert job.status.state == D
    assert [a.reason for a in job.status.attempts] == ["LeaseExpired"] * 3


def test_a_stale_lease_of_a_pod_that_already_succeeded_is_not_a_failure():
    """The runner stops renewing once the handler returned; the operator may see it late (restart)."""
    job = running_job()
    job.lease_renewed_at = at(10)
    job.set_pod("Succeeded", exit_code=0)
    job.advance(120)
    d = job.reconcile()
    assert d.status.state == S and d.actions == []


# ================================================================ cancel


@pytest.mark.parametrize("state", [SCH, Q, F], ids=ids)
def test_cancel_before_running_is_immediate(state):
    job = BUILD[state]()
    job.update_spec(cancel=True)
    d = job.reconcile()
    st = d.status
    assert st.state == C
    assert d.actions == []
    cond = condition(st, "Cancelled")
    assert (cond.status, cond.reason) == ("True", "Cancelled")
    assert st.finished_at == format_time(job.now) and st.next_attempt_at is None
    assert f"cancelled while {state.value}" == st.message
    assert not d.wants_admission and d.wake_at is None


def test_cancel_running_sends_sigterm_with_the_grace():
    job = running_job(queue=queue(cancelGrace="7s"))
    job.update_spec(cancel=True)
    d = job.reconcile()
    assert d.status.state == R
    assert (d.status.stop_reason, d.status.stop_requested_at) == ("Cancelled", format_time(job.now))
    assert d.actions == [T.DeletePod(f"{JOB}-1", 7)]
    assert "Cancelling" in event_reasons(d)
    assert d.wake_at == job.now + timedelta(seconds=12)


def test_cancel_running_waits_for_the_pod():
    job = running_job()
    job.update_spec(cancel=True)
    job.reconcile()
    job.set_pod("Running", deleting=True)
    job.advance(5)
    d = job.reconcile()
    assert d.status.state == R and d.actions == []


@pytest.mark.parametrize(
    "gone,exit_code",
    [pytest.param(True, None, id="pod gone"), pytest.param(False, 137, id="killed, 137"),
     pytest.param(False, 0, id="exited 0 on SIGTERM")],
)
def test_cancel_running_ends_cancelled(gone, exit_code):
    job = running_job()
    job.update_spec(cancel=True)
    job.reconcile()
    if gone:
        del job.pods[1]
    else:
        job.set_pod("Failed" if exit_code else "Succeeded", exit_code=exit_code, deleting=True)
    job.advance(3)
    st = job.reconcile().status
    assert st.state == C
    entry = st.attempts[-1]
    assert (entry.result, entry.reason, entry.exit_code) == ("cancelled", "Cancelled", exit_code)
    assert condition(st, "Cancelled").status == "True"
    assert condition(st, "Running").status == "False"


def test_cancel_is_requested_once():
    job = running_job()
    job.update_spec(cancel=True)
    job.reconcile()
    d = job.reconcile()
    assert d.actions == [] and d.events == []


@pytest.mark.parametrize("state", [S, D, C], ids=ids)
def test_cancel_of_a_finished_job_does_nothing(state):
    job = BUILD[state]()
    before = job.status.model_copy(deep=True)
    job.update_spec(cancel=True)
    job.advance(60)
    d = job.reconcile()
    assert d.status.model_dump(exclude={"observed_generation"}) == before.model_dump(exclude={"observed_generation"})
    assert d.actions == [] and d.events == []


def test_cancel_after_the_pod_already_succeeded_keeps_the_success():
    job = running_job()
    job.set_pod("Succeeded", exit_code=0)
    job.update_spec(cancel=True)
    d = job.reconcile()
    assert d.status.state == S
    assert d.actions == []


def test_cancel_after_the_pod_already_failed_cancels_the_retries():
    job = running_job()
    job.set_pod("Failed", exit_code=1)
    job.update_spec(cancel=True)
    st = job.reconcile().status
    assert st.state == C
    assert (st.attempts[-1].result, st.attempts[-1].reason) == ("failed", "Error")


def test_cancel_while_a_timeout_stop_is_under_way_ends_cancelled():
    job = running_job()
    job.advance(300)
    job.reconcile()
    job.update_spec(cancel=True)
    job.reconcile()
    del job.pods[1]
    assert job.reconcile().status.state == C


def test_cancel_after_a_timeout_already_killed_the_pod_keeps_the_timeout():
    job = running_job()
    job.advance(300)
    job.reconcile()
    job.set_pod("Failed", exit_code=137, deleting=True)
    job.update_spec(cancel=True)
    st = job.reconcile().status
    assert st.state == C
    assert (st.attempts[-1].result, st.attempts[-1].reason, st.attempts[-1].exit_code) == ("failed", "Timeout", 137)


# ================================================================ retry


@pytest.mark.parametrize("state", [F, D], ids=ids)
def test_retry_requeues_with_attempt_zero(state):
    job = BUILD[state]()
    sequence = job.status.sequence
    job.advance(5)
    job.update_spec(retryToken="r1")
    d = job.reconcile()
    st = d.status
    assert (st.state, st.attempt, st.sequence, st.retry_token) == (Q, 0, sequence, "r1")
    assert (st.queued_at, st.finished_at, st.next_attempt_at) == (format_time(job.now), None, None)
    assert event_reasons(d) == ["Retried"]
    assert d.wants_admission


def test_retry_of_dead_clears_the_dead_condition():
    job = dead_job()
    job.advance(5)
    job.update_spec(retryToken="r1")
    cond = condition(job.reconcile().status, "Dead")
    assert (cond.status, cond.reason) == ("False", "Retried")


def test_after_retry_the_run_keeps_counting():
    job = dead_job()
    job.update_spec(retryToken="r1")
    job.reconcile()
    d = job.admit()
    assert d.actions == [T.CreatePod(f"{JOB}-2", 2, 1)]  # attempt 1 again, a new pod name
    job.set_pod("Running")
    assert [(a.attempt, a.sequence) for a in job.reconcile().status.attempts] == [(1, 1), (1, 2)]


def test_after_retry_a_job_gets_max_attempts_again():
    job = queued_job(queue=queue(maxAttempts=2))
    for _ in range(2):
        job.run_attempt("Failed", 1)
        if job.status.state == F:
            job.advance_to(job.status.next_attempt_at)
            job.reconcile()
    assert job.status.state == D
    job.update_spec(retryToken="again")
    job.reconcile()
    job.run_attempt("Failed", 1)
    assert (job.status.state, job.status.attempt, job.status.sequence) == (F, 1, 3)


def test_the_same_token_retries_once():
    job = dead_job()
    job.update_spec(retryToken="r1")
    job.reconcile()
    job.run_attempt("Failed", 1)
    assert job.status.state == D
    job.advance(60)
    d = job.reconcile()
    assert d.status.state == D and d.events == []


def test_a_new_token_retries_again():
    job = dead_job()
    job.update_spec(retryToken="r1")
    job.reconcile()
    job.run_attempt("Failed", 1)
    job.update_spec(retryToken="r2")
    assert job.reconcile().status.state == Q


@pytest.mark.parametrize("state", [SCH, Q, R, S, C], ids=ids)
def test_retry_refused_is_reported_and_consumed(state):
    job = BUILD[state]()
    before = job.status.state
    job.update_spec(retryToken="r1")
    d = job.reconcile()
    assert d.status.state == before
    assert d.status.retry_token == "r1"
    assert [(e.reason, e.type) for e in d.events] == [("RetryRefused", "Warning")]
    assert f"the job is {state.value}" in d.events[0].message
    assert creates(d) == []


def test_a_refused_retry_does_not_fire_later():
    job = running_job(queue=queue(maxAttempts=1))
    job.update_spec(retryToken="r1")
    job.reconcile()
    job.set_pod("Failed", exit_code=1)
    assert job.reconcile().status.state == D
    d = job.reconcile()
    assert d.status.state == D and d.events == []


def test_retry_of_a_dead_job_whose_cancel_was_requested_is_refused():
    """cancel cannot be withdrawn, so a retried job would only be cancelled on the next look."""
    job = dead_job()
    job.update_spec(cancel=True)
    job.reconcile()
    job.update_spec(retryToken="r1")
    d = job.reconcile()
    assert d.status.state == D
    assert event_reasons(d) == ["RetryRefused"]
    assert "cancel" in d.events[0].message
    assert job.reconcile().status.state == D


# ================================================================ blocked: queue or handler missing


@pytest.mark.parametrize(
    "missing,reason,name",
    [("queue", "QueueNotFound", "emails"), ("handler", "HandlerNotFound", "send-receipt"),
     ("both", "QueueNotFound", "emails")],
)
@pytest.mark.parametrize("start", ["new", "scheduled"])
def test_blocked_names_what_is_missing(missing, reason, name, start):
    job = Job(spec=spec(runAt=format_time(at(60))) if start == "scheduled" else spec())
    if missing in ("queue", "both"):
        job.queue = None
    if missing in ("handler", "both"):
        job.handler = None
    d = job.reconcile()
    assert d.status.state == (SCH if start == "scheduled" else Q)
    cond = condition(d.status, "Blocked")
    assert (cond.status, cond.reason) == ("True", reason)
    assert repr(name) in cond.message
    assert not d.wants_admission


@pytest.mark.parametrize("missing,reason", [("queue", "QueueNotFound"), ("handler", "HandlerNotFound")])
def test_a_blocked_queued_job_says_why_in_its_message_and_its_event(missing, reason):
    """`kubectl get sjob -o wide`, `sextant jobs list` and the Queued event say what the job waits for, not "a
    slot"; once the missing object exists it waits for a slot again."""
    job = Job(**{missing: None})
    d = job.reconcile()
    name = repr(job.spec.queue if missing == "queue" else job.spec.handler)
    assert d.status.message.startswith(f"blocked ({reason}): ") and name in d.status.message
    assert "waiting for a slot" not in d.status.message
    assert [e.message for e in d.events if e.reason == "Queued"] == [d.status.message]
    assert job.reconcile().status.message == d.status.message  # level-triggered: the same again
    setattr(job, missing, queue() if missing == "queue" else handler())
    d = job.reconcile()
    assert d.status.message == f"runnable, waiting for a slot in queue {job.spec.queue}"
    assert d.wants_admission


def test_a_job_no_worker_serves_says_so_in_its_message():
    job = Job()
    d = T.reconcile(job.snap(), replace(job.observe(), no_worker=True), job.now)
    assert d.status.message.startswith("blocked (NoWorker): no live worker serves handler")


def test_blocked_is_lifted_once_both_exist():
    job = Job(queue=None, handler=None)
    job.reconcile()
    blocked_at = condition(job.status, "Blocked").last_transition_time
    job.queue = queue()
    job.advance(10)
    cond = condition(job.reconcile().status, "Blocked")
    assert (cond.status, cond.reason, cond.last_transition_time) == ("True", "HandlerNotFound", blocked_at)
    job.handler = handler()
    job.advance(10)
    d = job.reconcile()
    cond = condition(d.status, "Blocked")
    assert (cond.status, cond.reason) == ("False", "Found")
    assert cond.last_transition_time == format_time(at(20), precise=False)
    assert d.wants_admission


def test_a_blocked_scheduled_job_still_becomes_queued_and_stays_blocked():
    job = Job(spec=spec(runAt=format_time(at(60))), queue=None)
    job.reconcile()
    job.advance(60)
    d = job.reconcile()
    assert d.status.state == Q and condition(d.status, "Blocked").status == "True"
    assert not d.wants_admission


def test_a_running_job_keeps_running_when_its_queue_disappears():
    job = running_job()
    job.queue = None
    d = job.reconcile()
    assert d.status.state == R and condition(d.status, "Blocked") is None
    job.set_pod("Succeeded", exit_code=0)
    assert job.reconcile().status.state == S


def test_cancel_clears_blocked():
    job = Job(handler=None)
    job.reconcile()
    job.update_spec(cancel=True)
    cond = condition(job.reconcile().status, "Blocked")
    assert (cond.status, cond.reason) == ("False", "Finished")


# ================================================================ stray pods: a crash between create and record


def test_a_stray_pod_of_the_next_run_is_adopted():
    job = queued_job()
    job.advance(3)
    job.pods[1] = pod(1, "Running")  # admit created it, the status write was lost
    d = job.reconcile()
    st = d.status
    assert (st.state, st.sequence, st.attempt) == (R, 1, 1)
    assert [(a.sequence, a.pod, a.result) for a in st.attempts] == [(1, f"{JOB}-1", "running")]
    assert d.actions == []  # no second pod, no delete
    assert d.wake_at == at(303)


def test_an_adopted_pod_that_already_finished_is_read_at_once():
    job = queued_job()
    job.pods[1] = pod(1, "Succeeded", exit_code=0)
    d = job.reconcile()
    assert d.status.state == S
    assert [(a.sequence, a.result) for a in d.status.attempts] == [(1, "succeeded")]


def test_an_adopted_pod_is_then_admitted_no_twice():
    job = queued_job()
    job.pods[1] = pod(1, "Running")
    job.reconcile()
    job.reconcile()
    assert (job.status.sequence, len(job.status.attempts)) == (1, 1)


def test_a_stray_pod_of_a_cancelled_queued_job_is_recorded_and_stopped_gracefully():
    job = queued_job()
    job.pods[1] = pod(1, "Running")
    job.update_spec(cancel=True)
    d = job.reconcile()
    assert d.status.state == R and d.status.stop_reason == "Cancelled"
    assert d.actions == [T.DeletePod(f"{JOB}-1", 10)]
    del job.pods[1]
    st = job.reconcile().status
    assert st.state == C and [(a.sequence, a.result) for a in st.attempts] == [(1, "cancelled")]


@pytest.mark.parametrize("state", [SCH, R, S, F, D, C], ids=ids)
def test_a_stray_pod_while_not_queued_is_deleted(state):
    job = BUILD[state]()
    stray = job.status.sequence + 1
    job.pods[stray] = pod(stray, "Running")
    d = job.reconcile()
    assert T.DeletePod(f"{JOB}-{stray}", 0) in d.actions
    assert creates(d) == []
    assert d.status.sequence == job.status.sequence == stray - 1


def test_a_stray_pod_already_being_deleted_is_left_alone():
    job = succeeded_job()
    job.pods[2] = pod(2, "Running", deleting=True)
    assert job.reconcile().actions == []


def test_only_the_next_run_is_adopted():
    job = queued_job()
    job.pods[2] = pod(2, "Running")
    d = job.reconcile()
    assert d.status.state == Q and d.actions == [T.DeletePod(f"{JOB}-2", 0)]


def test_of_two_strays_the_next_run_is_adopted_and_the_other_deleted():
    job = queued_job()
    job.pods[1] = pod(1, "Running")
    job.pods[2] = pod(2, "Running")
    d = job.reconcile()
    assert (d.status.state, d.status.sequence) == (R, 1)
    assert d.actions == [T.DeletePod(f"{JOB}-2", 0)]


# ================================================================ conditions


def test_set_condition_adds_a_new_one():
    st = JobStatus()
    T.set_condition(st, "Running", True, "Started", "go", at(1.5), 3)
    cond = st.conditions[0]
    assert (cond.type, cond.status, cond.reason, cond.message, cond.last_transition_time, cond.observed_generation) == (
        "Running", "True", "Started", "go", "2026-03-01T12:00:01Z", 3)


def test_set_condition_false_without_a_reason_adds_nothing():
    st = JobStatus()
    T.set_condition(st, "Blocked", False, "", "", at(0), 1)
    assert st.conditions == []


@pytest.mark.parametrize(
    "value,reason,message,moved",
    [
        pytest.param(True, "Started", "go", False, id="identical"),
        pytest.param(True, "Adopted", "go", False, id="same value, new reason"),
        pytest.param(True, "Started", "again", False, id="same value, new message"),
        pytest.param(False, "AttemptFinished", "done", True, id="value changes"),
    ],
)
def test_last_transition_time_moves_only_when_the_value_changes(value, reason, message, moved):
    st = JobStatus()
    T.set_condition(st, "Running", True, "Started", "go", at(0), 1)
    T.set_condition(st, "Running", value, reason, message, at(60), 2)
    [cond] = st.conditions
    assert cond.last_transition_time == format_time(at(60 if moved else 0), precise=False)
    assert (cond.status, cond.reason, cond.message) == ("True" if value else "False", reason, message)


def test_an_identical_condition_is_left_as_it_was():
    st = JobStatus()
    T.set_condition(st, "Running", True, "Started", "go", at(0), 1)
    before = st.conditions[0]
    T.set_condition(st, "Running", True, "Started", "go", at(60), 2)
    assert st.conditions[0] is before


def test_running_condition_follows_each_attempt():
    job = queued_job()
    job.run_attempt("Failed", 1)
    cond = condition(job.status, "Running")
    assert (cond.status, cond.reason) == ("False", "AttemptFinished")
    job.advance_to(job.status.next_attempt_at)
    job.reconcile()
    job.admit()
    assert condition(job.status, "Running").status == "False"  # its pod is starting: not running yet
    job.set_pod("Running")
    job.reconcile()
    cond = condition(job.status, "Running")
    assert (cond.status, cond.last_transition_time) == ("True", format_time(job.now, precise=False))


def test_conditions_do_not_move_while_nothing_changes():
    job = Job(queue=None)
    job.reconcile()
    before = [c.model_copy() for c in job.status.conditions]
    for step in range(5):
        job.advance(17)
        job.reconcile()
    assert job.status.conditions == before


# ================================================================ level-triggered: reconcile is idempotent


def _stopping(state_builder, pod_phase, **fields):
    def build():
        job = state_builder()
        job.set_pod(pod_phase, **fields)
        return job
    return build


def _timed_out():
    job = running_job()
    job.advance(300)
    job.reconcile()
    job.set_pod("Running", deleting=True)
    job.advance(20)
    return job


def _with(builder, **changes):
    def build():
        job = builder()
        for key, value in changes.items():
            if key == "spec":
                job.update_spec(**value)
            elif key == "advance":
                job.advance(value)
            elif key == "stray":
                job.pods[job.status.sequence + 1] = pod(job.status.sequence + 1, value)
            else:
                setattr(job, key, value)
        return job
    return build


IDEMPOTENCY_CASES = {
    "new": lambda: Job(),
    "new, future runAt": lambda: Job(spec=spec(runAt=format_time(at(60)))),
    "new, cancelled": lambda: Job(spec=spec(cancel=True)),
    "new, queue missing": lambda: Job(queue=None),
    "scheduled, due": _with(scheduled_job, advance=3600),
    "queued": queued_job,
    "queued, stray pod": _with(queued_job, stray="Running"),
    "queued, stray pod already succeeded": _with(queued_job, stray="Succeeded"),
    "queued, stray pod, cancel": _with(queued_job, stray="Running", spec={"cancel": True}),
    "running": running_job,
    "running, succeeded": _stopping(running_job, "Succeeded", exit_code=0),
    "running, failed": _stopping(running_job, "Failed", exit_code=1),
    "running, evicted": _stopping(running_job, "Failed", reason="Evicted"),
    "running, timeout due": _with(running_job, advance=300),
    "running, stale lease": _with(running_job, lease_renewed_at=at(0), advance=30),
    "running, cancel": _with(running_job, spec={"cancel": True}),
    "running, cancel after success": _with(_stopping(running_job, "Succeeded"), spec={"cancel": True}),
    "running, cancel after failure": _with(_stopping(running_job, "Failed", exit_code=1), spec={"cancel": True}),
    "running, force delete due": _timed_out,
    "running, retry token": _with(running_job, spec={"retryToken": "x"}),
    "failed, due": _with(failed_job, advance=10),
    "failed, zero backoff": lambda: _zero_backoff_failure(),
    "failed, retry": _with(failed_job, spec={"retryToken": "x"}),
    "failed, cancel": _with(failed_job, spec={"cancel": True}),
    "dead, retry": _with(dead_job, spec={"retryToken": "x"}),
    "dead, cancel then retry": _with(dead_job, spec={"cancel": True, "retryToken": "x"}),
    "succeeded, stray pod": _with(succeeded_job, stray="Running"),
    "succeeded, cancel and retry": _with(succeeded_job, spec={"cancel": True, "retryToken": "x"}),
    "cancelled, retry": _with(cancelled_job, spec={"retryToken": "x"}),
    "queued, handler appears": _with(lambda: queued_job(handler=None), handler=handler()),
}


def _zero_backoff_failure():
    job = running_job(queue=queue(backoff={"policy": "fixed", "initial": "0s"}))
    job.set_pod("Failed", exit_code=1)
    return job


@pytest.mark.parametrize("build", list(IDEMPOTENCY_CASES.values()), ids=list(IDEMPOTENCY_CASES))
def test_reconcile_is_idempotent(build):
    job = build()
    observed, now = job.observe(), job.now
    first = T.reconcile(job.snap(), observed, now)
    again = T.reconcile(snapshot(first.status, job.spec, generation=job.generation), observed, now)
    assert again.status == first.status
    assert creates(again) == [] and creates(first) == []
    assert [e.reason for e in again.events] == []
    assert again.wants_admission == first.wants_admission


def test_reconcile_does_not_change_its_input():
    job = running_job()
    job.set_pod("Succeeded", exit_code=0)
    before = job.status.model_copy(deep=True)
    T.reconcile(job.snap(), job.observe(), job.now)
    assert job.status == before


def test_admit_does_not_change_its_input():
    job = queued_job()
    before = job.status.model_copy(deep=True)
    T.admit(job.snap(), job.observe(), job.now)
    assert job.status == before


def test_wake_keeps_the_earliest_time():
    d = T.Decision(JobStatus())
    for when in (at(30), None, at(10), at(20)):
        d.wake(when)
    assert d.wake_at == at(10)


# --- the queue's maxAttempts changing under a job ---------------------------------------------------------------
def test_lowering_max_attempts_during_the_backoff_ends_the_job_dead():
    job = queued_job(queue=queue(maxAttempts=3))
    job.run_attempt("Failed", 1)
    assert (job.status.state, job.status.attempt) == (F, 1)
    job.queue = queue(maxAttempts=1)
    d = job.reconcile()
    assert (d.status.state, d.status.max_attempts, d.status.attempt) == (D, 1, 1)
    assert not creates(d) and d.status.finished_at is not None
    assert "Dead" in event_reasons(d) and "lowered" in d.status.message


def test_lowering_max_attempts_below_the_next_attempt_still_allows_it_when_not_reached():
    job = queued_job(queue=queue(maxAttempts=5))
    job.run_attempt("Failed", 1)
    job.queue = queue(maxAttempts=2)
    job.advance_to(job.status.next_attempt_at)
    d = job.reconcile()
    assert (d.status.state, d.status.max_attempts) == (Q, 2)


def test_a_finished_job_keeps_the_max_attempts_it_ran_under():
    job = dead_job()
    assert job.status.max_attempts == 1
    job.queue = queue(maxAttempts=9)
    d = job.reconcile()
    assert d.status == job.status and d.status.max_attempts == 1
