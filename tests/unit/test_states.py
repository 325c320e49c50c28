"""The seven states and the transitions between them."""

from __future__ import annotations

import pytest

from sextant.lifecycle import states as S
from sextant.resources.job import State

ALL = list(State)

# (source, target): every move the job lifecycle draws, and nothing else.
EXPECTED_MOVES = {
    (None, State.SCHEDULED): "created with a future runAt",
    (None, State.QUEUED): "created runnable",
    (None, State.CANCELLED): "created cancelled, or a duplicate idempotency key",
    (State.SCHEDULED, State.QUEUED): "runAt arrives",
    (State.SCHEDULED, State.CANCELLED): "cancel a scheduled job",
    (State.QUEUED, State.RUNNING): "a worker leases it",
    (State.QUEUED, State.CANCELLED): "cancel a queued job",
    (State.QUEUED, State.FAILED): "its attempt's pod did not start within startTimeout",
    (State.QUEUED, State.DEAD): "the same, on the last attempt",
    (State.RUNNING, State.SUCCEEDED): "the handler returns",
    (State.RUNNING, State.FAILED): "the handler throws, times out, or the lease expires",
    (State.RUNNING, State.DEAD): "the last attempt fails",
    (State.RUNNING, State.CANCELLED): "cancel a running job",
    (State.FAILED, State.QUEUED): "the backoff elapses, or retry",
    (State.FAILED, State.CANCELLED): "cancel stops the retries",
    (State.FAILED, State.DEAD): "the queue's maxAttempts was lowered to the attempts made",
    (State.DEAD, State.QUEUED): "retry a dead job",
}


def test_seven_states():
    assert [s.value for s in State] == ["scheduled", "queued", "running", "succeeded", "failed", "dead", "cancelled"]


def test_allowed_table_covers_every_state_and_a_new_job():
    assert set(S.ALLOWED) == {None, *State}


@pytest.mark.parametrize(
    "source,target",
    [(src, dst) for src in [None, *ALL] for dst in ALL if src != dst],
    ids=lambda v: getattr(v, "value", str(v)),
)
def test_allowed_table(source, target):
    assert S.allowed(source, target) == ((source, target) in EXPECTED_MOVES)


@pytest.mark.parametrize("state", ALL, ids=lambda s: s.value)
def test_staying_in_a_state_is_allowed(state):
    assert S.allowed(state, state)


@pytest.mark.parametrize("state", [State.SUCCEEDED, State.CANCELLED], ids=lambda s: s.value)
def test_terminal_states_are_never_left(state):
    assert state in S.TERMINAL
    assert S.ALLOWED[state] == frozenset()


def test_dead_is_left_only_by_retry_to_queued():
    assert State.DEAD not in S.TERMINAL
    assert S.ALLOWED[State.DEAD] == {State.QUEUED}


def test_terminal_and_finished_sets():
    assert S.TERMINAL == {State.SUCCEEDED, State.CANCELLED}
    assert S.FINISHED == {State.SUCCEEDED, State.DEAD, State.CANCELLED}


@pytest.mark.parametrize("state", [None, State.SCHEDULED, State.QUEUED, State.RUNNING, State.FAILED],
                         ids=lambda s: getattr(s, "value", "new"))
def test_cancel_allowed(state):
    assert S.cancel_refusal(state) is None


@pytest.mark.parametrize("state", [State.SUCCEEDED, State.DEAD, State.CANCELLED], ids=lambda s: s.value)
def test_cancel_refused_names_the_state(state):
    message = S.cancel_refusal(state)
    assert message is not None
    assert f"the job is {state.value}" in message
    assert "scheduled, queued, running" in message


@pytest.mark.parametrize("state", [State.FAILED, State.DEAD], ids=lambda s: s.value)
def test_retry_allowed(state):
    assert S.retry_refusal(state) is None


@pytest.mark.parametrize(
    "state", [State.SCHEDULED, State.QUEUED, State.RUNNING, State.SUCCEEDED, State.CANCELLED], ids=lambda s: s.value
)
def test_retry_refused_names_the_state(state):
    message = S.retry_refusal(state)
    assert message is not None
    assert f"the job is {state.value}" in message
    assert "failed or dead" in message


def test_retry_refused_for_a_job_not_seen_yet():
    assert S.retry_refusal(None) == "the job is new; only failed or dead jobs can be retried"


@pytest.mark.parametrize("state", sorted(S.CANCELLABLE, key=lambda s: s.value), ids=lambda s: s.value)
def test_every_cancellable_state_may_move_to_cancelled(state):
    assert S.allowed(state, State.CANCELLED)


@pytest.mark.parametrize("state", sorted(S.RETRYABLE, key=lambda s: s.value), ids=lambda s: s.value)
def test_every_retryable_state_may_move_to_queued(state):
    assert S.allowed(state, State.QUEUED)
