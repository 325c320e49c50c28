"""GitOps health (lifecycle/health.py): for every state, the conditions Ready/Reconciling/Stalled read by kstatus'
rules (tests/harness/kstatus.py, as Flux judges a Job) give the same verdict as the Argo CD check of docs/gitops.md
(Healthy ↔ Current, Progressing ↔ InProgress, Degraded ↔ Failed), and they add no status write of their own."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from sextant.lifecycle.reading import invalid_conditions
from sextant.lifecycle import transitions as T
from sextant.lifecycle.step import set_health
from sextant.lifecycle.health import COND_READY, COND_RECONCILING, COND_STALLED, health
from sextant.resources.common import Condition
from sextant.resources.job import JobStatus, State
from tests.harness import kstatus

from _builders import T0, at, obs, snapshot, spec

ARGO = {"Healthy": kstatus.CURRENT, "Progressing": kstatus.IN_PROGRESS, "Degraded": kstatus.FAILED}


def job_object(status: JobStatus, generation: int = 1) -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
            "metadata": {"name": "job-a", "generation": generation},
            "status": status.model_dump(by_alias=True, exclude_none=True, mode="json")}


def cond(type_: str, reason: str, message: str = "m") -> Condition:
    return Condition(type=type_, status="True", reason=reason, message=message)


def with_health(state: State, *conditions: Condition, message: str = "words") -> JobStatus:
    status = JobStatus(state=state, message=message, conditions=list(conditions), observed_generation=1)
    set_health(status, T0, 1)
    return status


CASES = [  # state, other conditions, Argo CD's verdict, the reason the health conditions give
    (State.SCHEDULED, (), "Progressing", "Scheduled"),
    (State.QUEUED, (), "Progressing", "Queued"),
    (State.RUNNING, (cond("Running", "Started"),), "Progressing", "Running"),
    (State.FAILED, (), "Progressing", "BackingOff"),
    (State.QUEUED, (cond("Blocked", "QueueNotFound", "queue 'q' does not exist"),), "Progressing", "QueueNotFound"),
    (State.SCHEDULED, (cond("Blocked", "HandlerNotFound"),), "Progressing", "HandlerNotFound"),
    (State.FAILED, (cond("Blocked", "NoWorker"),), "Progressing", "NoWorker"),
    (State.SUCCEEDED, (cond("Succeeded", "Succeeded"),), "Healthy", "Succeeded"),
    (State.DEAD, (cond("Dead", "Dead"),), "Degraded", "Dead"),
    (State.DEAD, (cond("Dead", "PayloadTooLarge"),), "Degraded", "PayloadTooLarge"),
    (State.CANCELLED, (cond("Cancelled", "Cancelled"),), "Degraded", "Cancelled"),
    (State.CANCELLED, (cond("Cancelled", "DuplicateIdempotencyKey"),), "Degraded", "DuplicateIdempotencyKey"),
]


@pytest.mark.parametrize("state, others, argo, reason", CASES,
                         ids=[f"{c[0].value}-{c[3]}" for c in CASES])
def test_kstatus_and_argo_cd_agree_for_every_state(state, others, argo, reason):
    status = with_health(state, *others)
    by_type = {c.type: c for c in status.conditions}
    assert {t: by_type[t].reason for t in (COND_READY, COND_RECONCILING, COND_STALLED)} == dict.fromkeys(
        (COND_READY, COND_RECONCILING, COND_STALLED), reason)
    assert all(by_type[t].observed_generation == 1 for t in (COND_READY, COND_RECONCILING, COND_STALLED))
    verdict = kstatus.compute(job_object(status))
    assert verdict.status == ARGO[argo]
    # Exactly one of the three is True: kstatus never sees a contradiction, whatever its order of reading.
    assert sum(by_type[t].status == "True" for t in (COND_READY, COND_RECONCILING, COND_STALLED)) == 1
    if state == State.SUCCEEDED:
        assert by_type[COND_READY].status == "True"
    if argo != "Healthy":  # the message says why, in the job's own words
        assert verdict.message.startswith(state.value + ", blocked: " if reason in ("QueueNotFound", "HandlerNotFound",
                                                                                   "NoWorker") else "words")


def test_an_unobserved_spec_change_or_a_deletion_wins_over_the_conditions():
    done = with_health(State.SUCCEEDED, cond("Succeeded", "Succeeded"))
    assert kstatus.compute(job_object(done, generation=2)).status == kstatus.IN_PROGRESS
    deleting = job_object(done)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    assert kstatus.compute(deleting).status == kstatus.TERMINATING


def test_an_invalid_job_is_failed_for_kstatus():
    conditions = invalid_conditions([], "spec.runAt: out of range", T0, 1)
    assert kstatus.compute({"metadata": {"generation": 1}, "status": {"conditions": conditions}}) == \
        kstatus.Result(kstatus.FAILED, "spec.runAt: out of range")
    # ... and readable again: the next reconcile's health says what the state says (Invalid is cleared beside it).
    status = JobStatus.model_validate({"state": "queued", "message": "m", "conditions": conditions,
                                       "observedGeneration": 1})
    set_health(status, at(5), 1)
    assert kstatus.compute(job_object(status)).status == kstatus.IN_PROGRESS


def test_transitions_move_the_health_conditions_only_with_the_value():
    status = with_health(State.QUEUED)
    first = {c.type: c.last_transition_time for c in status.conditions}
    status.state, status.message = State.RUNNING, "attempt 1 of 5 started"
    set_health(status, at(30), 1)
    assert {c.type: c.last_transition_time for c in status.conditions} == first  # still reconciling
    status.state = State.SUCCEEDED
    status.conditions.append(cond("Succeeded", "Succeeded"))
    set_health(status, at(60), 1)
    moved = {c.type: c.last_transition_time for c in status.conditions}
    assert moved[COND_READY] != first[COND_READY] and moved[COND_RECONCILING] != first[COND_RECONCILING]
    assert moved[COND_STALLED] == first[COND_STALLED]  # False before and after


@pytest.mark.parametrize("job_spec, observations, state", [
    (spec(), obs(), State.QUEUED),
    (spec(runAt="2026-03-02T00:00:00Z"), obs(), State.SCHEDULED),
    (spec(cancel=True), obs(), State.CANCELLED),
    (spec(idempotencyKey="k"), obs(duplicate_of="job-first"), State.CANCELLED),
    (spec(), obs(queue_spec=None), State.QUEUED),
])
def test_reconcile_sets_the_health_and_a_second_look_writes_nothing(job_spec, observations, state):
    decision = T.reconcile(snapshot(job_spec=job_spec), observations, T0)
    assert decision.status.state == state
    types = {c.type for c in decision.status.conditions}
    assert {COND_READY, COND_RECONCILING, COND_STALLED} <= types
    assert [tuple(h) for h in health(decision.status)] == [
        (c.type, c.status == "True", c.reason, c.message) for t in (COND_READY, COND_RECONCILING, COND_STALLED)
        for c in decision.status.conditions if c.type == t]
    # Level-triggered: the same job a minute later gives the same status, so no write follows from the health.
    again = T.reconcile(snapshot(decision.status, job_spec), observations, T0 + timedelta(minutes=1))
    assert again.status == decision.status
