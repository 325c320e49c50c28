"""Retention: which finished job (and which pods) may be deleted, and when."""

from datetime import datetime, timedelta, timezone

import pytest

from sextant.resources.job import State
from sextant.resources.queue import Retention
from sextant.lifecycle.retention import expiry

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
FINISHED = "2026-11-30T12:00:00.000000Z"


@pytest.mark.parametrize(
    "state, retention, job_after, pods_after",
    [
        (State.SUCCEEDED, Retention(), timedelta(hours=24), None),
        (State.CANCELLED, Retention(), timedelta(hours=24), None),
        (State.DEAD, Retention(), timedelta(hours=168), None),
        (State.SUCCEEDED, Retention(succeeded="90s"), timedelta(seconds=90), None),
        (State.SUCCEEDED, Retention(succeeded="0s"), None, None),  # 0 keeps forever
        (State.DEAD, Retention(dead="0s", pods="1h"), None, timedelta(hours=1)),
        (State.SUCCEEDED, Retention(succeeded="2h", pods="10m"), timedelta(hours=2), timedelta(minutes=10)),
        (State.SUCCEEDED, Retention(succeeded="10m", pods="2h"), timedelta(minutes=10), None),  # job goes first
    ],
    ids=["succeeded-default", "cancelled-default", "dead-default", "custom", "zero-keeps", "pods-only",
         "pods-before-job", "pods-after-job"],
)
def test_finished_jobs_expire_after_their_states_retention(state, retention, job_after, pods_after):
    due = expiry(state, FINISHED, retention)
    assert due.job_at == (T0 + job_after if job_after else None)
    assert due.pods_at == (T0 + pods_after if pods_after else None)


@pytest.mark.parametrize("state", [None, State.SCHEDULED, State.QUEUED, State.RUNNING, State.FAILED])
def test_a_job_that_is_not_finished_never_expires(state):
    assert expiry(state, FINISHED, Retention(succeeded="1s", dead="1s", cancelled="1s", pods="1s")) == \
        expiry(None, None, Retention())
    assert expiry(state, FINISHED, Retention(pods="1s")).job_at is None


def test_no_finish_time_no_expiry():
    # A retried job has no finishedAt until it finishes again: its clock starts over then.
    assert expiry(State.SUCCEEDED, None, Retention(succeeded="1s")).job_at is None


# A keyed job is kept until its key's claim ends (sextant/lifecycle/idempotency.py), so a second create with the key finds it.
CREATED = T0 - timedelta(hours=1)  # created an hour before it finished


@pytest.mark.parametrize(
    "retention, job_after, pods_after",
    [
        (Retention(succeeded="1h"), timedelta(hours=23), timedelta(hours=1)),  # kept for the key; pods go at 1h
        (Retention(succeeded="1h", pods="10m"), timedelta(hours=23), timedelta(minutes=10)),  # pods' own is sooner
        (Retention(succeeded="1h", pods="5h"), timedelta(hours=23), timedelta(hours=1)),  # ... or capped at the job's
        (Retention(succeeded="48h"), timedelta(hours=48), None),  # retention outlasts the key: unchanged
        (Retention(succeeded="23h"), timedelta(hours=23), None),  # exactly at the claim's end: unchanged
        (Retention(succeeded="0s"), None, None),  # kept forever anyway
    ],
    ids=["short", "short-pods", "long-pods", "longer-than-key", "equal", "forever"],
)
def test_a_keyed_job_is_kept_until_its_key_expires(retention, job_after, pods_after):
    claim_ends = CREATED + timedelta(hours=24)
    due = expiry(State.SUCCEEDED, FINISHED, retention, claim_ends)
    assert due.job_at == (T0 + job_after if job_after else None)
    assert due.pods_at == (T0 + pods_after if pods_after else None)


def test_a_claim_that_ended_before_the_job_finished_changes_nothing():
    long_ago = T0 - timedelta(hours=30)
    for retention in (Retention(succeeded="1h"), Retention(succeeded="1h", pods="10m"), Retention()):
        assert expiry(State.SUCCEEDED, FINISHED, retention, long_ago) == expiry(State.SUCCEEDED, FINISHED, retention)
    assert expiry(State.RUNNING, FINISHED, Retention(succeeded="1s"), T0 + timedelta(days=1)).job_at is None
