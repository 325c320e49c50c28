"""The operator's write policy (controller/writes.py), a pure table: whether a status the rules decided is written
now or held, and until when. What the rules decide is tested in test_transitions.py; that a held job is written at
the end of its hold, by the look it wakes, there too (the builders' Job carries decisions out through this policy)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from _builders import at, pod, queue, handler, snapshot
from sextant.controller.writes import RECORD_QUEUED_AFTER, RECORD_RUNNING_AFTER, UNTIL_CHANGED, hold_until, scheduled
from sextant.lifecycle.attempts import AssignmentObservation
from sextant.lifecycle.decision import Decision, DeletePod, Event, Observations
from sextant.resources.job import JobStatus, State

NOW = at(100)
NEW, QUEUED, RUNNING = None, State.QUEUED, State.RUNNING


def started(seconds_ago: float | None, **fields: Any):
    """The starting attempt's pod, its handler started that long ago (None: no start time known)."""
    return pod(1, "Running", started_at=None if seconds_ago is None else NOW - timedelta(seconds=seconds_ago),
               created_at=at(0), **fields)


def pending(created_ago: float | None, **fields: Any):
    return pod(1, "Pending", created_at=None if created_ago is None else NOW - timedelta(seconds=created_ago),
               **fields)


def assignment(phase: str, landed_ago: float | None = None):
    landed = None if landed_ago is None else NOW - timedelta(seconds=landed_ago)
    return AssignmentObservation("w1", "w1/i1", 1, phase, started_at=landed, assigned_at=landed)


def after(seconds: float):
    return NOW + timedelta(seconds=seconds)


# (what the job's status was, what the rules decided, its starting attempt, where it waits in line) → hold until
CASES = {
    # A start is written a second after it, unless waiting would be wrong.
    "start, half a second old": (QUEUED, RUNNING, started(0.5), None, after(0.5)),
    "start of a new job": (NEW, RUNNING, started(0.5), None, after(0.5)),
    "start, a second old": (QUEUED, RUNNING, started(1), None, None),
    "start ahead of our clock": (QUEUED, RUNNING, started(-2), None, None),
    "start without a start time": (QUEUED, RUNNING, started(None), None, None),
    "start of a pod being deleted": (QUEUED, RUNNING, started(0.5, deleting=True), None, None),
    "start of a pod being taken away": (QUEUED, RUNNING, started(0.5, disruption="PreemptionByScheduler"), None,
                                        None),
    "start and end at once": (QUEUED, State.SUCCEEDED, pod(1, "Succeeded", started_at=NOW), None, None),
    "assignment landed half a second ago": (QUEUED, RUNNING, assignment("Running", 0.5), None, after(0.5)),
    "assignment landed a second ago": (QUEUED, RUNNING, assignment("Running", 1), None, None),
    "running, written already": (RUNNING, RUNNING, started(0.5), None, None),
    # A new job's first write waits while its pod starts quietly, or while it waits in line for a slot: it reads
    # `queued` without it (the CRD's default), so until something else is to be said.
    "new, its pod created 3 s ago": (NEW, QUEUED, pending(3), None, UNTIL_CHANGED),
    "new, its pod created an hour ago": (NEW, QUEUED, pending(3600), None, UNTIL_CHANGED),
    "new, its pod's creation unknown": (NEW, QUEUED, pending(None), None, UNTIL_CHANGED),
    "new, its pod creating its container": (NEW, QUEUED, pending(1, waiting_reason="ContainerCreating"), None,
                                            UNTIL_CHANGED),
    "new, its pod unschedulable": (NEW, QUEUED, pending(1, unschedulable=True), None, None),
    "new, its pod's image not pulled": (NEW, QUEUED, pending(1, waiting_reason="ErrImagePull"), None, None),
    "new, its pod being deleted": (NEW, QUEUED, pending(1, deleting=True), None, None),
    "new, its assignment on its way": (NEW, QUEUED, assignment("Pending"), None, UNTIL_CHANGED),
    "new, admitted now": (NEW, QUEUED, None, NOW, UNTIL_CHANGED),
    "new, in line for an hour": (NEW, QUEUED, None, NOW - timedelta(hours=1), UNTIL_CHANGED),
    "new, waiting for nothing": (NEW, QUEUED, None, None, None),
    "new, scheduled": (NEW, State.SCHEDULED, None, NOW, None),
    "new, cancelled": (NEW, State.CANCELLED, None, NOW, None),
    "queued, written already": (QUEUED, QUEUED, pending(1), NOW, None),
}


@pytest.mark.parametrize("stored, decided, starting, waiting_since, until", CASES.values(), ids=CASES.keys())
def test_when_a_decided_status_is_written(stored, decided, starting, waiting_since, until):
    decided_status = JobStatus(state=decided, sequence=1 if decided in (RUNNING, State.SUCCEEDED) else 0)
    obs = Observations(queue(), handler(), (starting,) if starting is not None else ())
    assert hold_until(JobStatus(state=stored), decided_status, obs, NOW, waiting_since=waiting_since) == until


@pytest.mark.parametrize("stored, decided, starting", [(QUEUED, RUNNING, started(0.5)), (NEW, QUEUED, pending(1))])
@pytest.mark.parametrize("lacking", ["queue", "handler", "worker"])
def test_a_job_that_lacks_what_it_needs_to_run_is_written_at_once(stored, decided, starting, lacking):
    """Blocked says why at once; a start while the Queue vanished says that it runs."""
    obs = Observations(None if lacking == "queue" else queue(), None if lacking == "handler" else handler(),
                       (starting,), no_worker=lacking == "worker")
    assert hold_until(JobStatus(state=stored), JobStatus(state=decided, sequence=starting.sequence if decided ==
                                                         RUNNING else 0), obs, NOW, waiting_since=NOW) is None


def test_a_decided_stop_is_written_at_once():
    """A cancel standing when the attempt starts stops it with its cancelGrace: that needs the attempt recorded."""
    decided = JobStatus(state=RUNNING, sequence=1, stop_reason="Cancelled")
    obs = Observations(queue(), handler(), (started(0.5),))
    assert hold_until(JobStatus(state=QUEUED), decided, obs, NOW) is None


# With --record-queued-after: the same cases, the first write held that long.
TIMED = {
    "new, its pod created 3 s ago": (pending(3), None, after(2)),
    "new, its pod created 5 s ago": (pending(5), None, None),
    "new, its pod's creation unknown": (pending(None), None, after(5)),
    "new, its pod creating its container": (pending(1, waiting_reason="ContainerCreating"), None, after(4)),
    "new, its pod unschedulable": (pending(1, unschedulable=True), None, None),
    "new, its assignment on its way": (assignment("Pending"), None, after(5)),
    "new, admitted now": (None, NOW, after(5)),
    "new, in line for 2 s": (None, NOW - timedelta(seconds=2), after(3)),
    "new, in line for 5 s": (None, NOW - timedelta(seconds=5), None),
    "new, waiting for nothing": (None, None, None),
}


@pytest.mark.parametrize("starting, waiting_since, until", TIMED.values(), ids=TIMED.keys())
def test_record_queued_after_writes_a_waiting_new_job_queued_once_it_has_waited_that_long(starting, waiting_since,
                                                                                         until):
    obs = Observations(queue(), handler(), (starting,) if starting is not None else ())
    assert hold_until(JobStatus(), JobStatus(state=QUEUED), obs, NOW, timedelta(seconds=5), waiting_since) == until


def test_record_queued_after_sets_the_first_writes_hold_never_the_starts():
    hour = timedelta(hours=1)
    obs = Observations(queue(), handler(), (pending(300),))
    assert hold_until(JobStatus(), JobStatus(state=QUEUED), obs, NOW, hour) == NOW - timedelta(seconds=300) + hour
    running = Observations(queue(), handler(), (started(0.5),))
    assert hold_until(JobStatus(state=QUEUED), JobStatus(state=RUNNING, sequence=1), running, NOW, hour) == after(0.5)
    assert (RECORD_QUEUED_AFTER, RECORD_RUNNING_AFTER) == (None, timedelta(seconds=1))


def test_a_new_job_held_until_something_changes_has_no_wake_up_of_its_own():
    """Its other wake-ups stay (the start timeout); the look that writes it comes with the change (a start, a
    grant, a Blocked)."""
    decided = Decision(JobStatus(state=QUEUED), [], [Event("Queued", "...")], after(30))
    held = scheduled(snapshot(JobStatus()), decided, Observations(queue(), handler(), (pending(1),)), NOW)
    assert (held.status, held.events, held.wake_at) == (JobStatus(), [], after(30))


def test_a_held_decision_keeps_the_stored_status_and_the_actions_and_wakes_at_the_end_of_the_hold():
    stored = JobStatus(state=QUEUED)
    decided = Decision(JobStatus(state=RUNNING, sequence=1), [DeletePod("stray-2", 0)], [Event("Started", "...")],
                       after(30))
    obs = Observations(queue(), handler(), (started(0.5),))
    held = scheduled(snapshot(stored), decided, obs, NOW)
    assert (held.status, held.actions, held.events, held.wake_at) == (stored, decided.actions, [], after(0.5))
    assert scheduled(snapshot(stored), decided, obs, after(0.5)) is decided
