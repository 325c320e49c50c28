"""The delay between attempts: exponential (initial × factor^(n−1), capped at max) or fixed, with jitter.

Table-driven in the manner of kubernetes' pkg/controller/job backoff_utils_test.go.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sextant.lifecycle.backoff import backoff_delay, jitter_sample
from sextant.resources.queue import Backoff

MIDDLE = 0.5  # the jitter sample that spreads by exactly 0


def seconds(delta: timedelta) -> float:
    return delta.total_seconds()


@pytest.mark.parametrize(
    "initial,factor,max_,attempt,want",
    [
        pytest.param("10s", 2, "10m", 1, 10, id="defaults: first failure waits initial"),
        pytest.param("10s", 2, "10m", 2, 20, id="defaults: second failure doubles"),
        pytest.param("10s", 2, "10m", 3, 40, id="defaults: third"),
        pytest.param("10s", 2, "10m", 6, 320, id="defaults: sixth, just under the cap"),
        pytest.param("10s", 2, "10m", 7, 600, id="defaults: seventh would be 640s, capped at 10m"),
        pytest.param("10s", 2, "10m", 50, 600, id="defaults: stays at the cap"),
        pytest.param("1s", 3, "1m", 4, 27, id="factor 3"),
        pytest.param("1s", 3, "1m", 5, 60, id="factor 3 capped"),
        pytest.param("500ms", 1.5, "1h", 3, 1.125, id="sub-second initial, fractional factor"),
        pytest.param("30s", 1, "10m", 9, 30, id="factor 1 is constant"),
        pytest.param("5m", 2, "5m", 1, 300, id="initial equal to max"),
        pytest.param("5m", 2, "5m", 4, 300, id="initial equal to max, later attempt"),
        pytest.param("10s", 2, "640s", 7, 640, id="exactly reaching the cap"),
        pytest.param("0s", 2, "10m", 5, 0, id="zero initial stays zero"),
        pytest.param("1h", 2, "1m", 1, 60, id="initial above max is capped"),
    ],
)
def test_exponential(initial, factor, max_, attempt, want):
    backoff = Backoff(policy="exponential", initial=initial, factor=factor, max=max_, jitter=0)
    assert seconds(backoff_delay(backoff, attempt, MIDDLE)) == pytest.approx(want)


@pytest.mark.parametrize("attempt", [1, 2, 3, 10, 1000], ids=lambda n: f"attempt {n}")
def test_fixed_is_always_initial(attempt):
    backoff = Backoff(policy="fixed", initial="30s", factor=5, max="40s", jitter=0)
    assert backoff_delay(backoff, attempt, MIDDLE) == timedelta(seconds=30)


def test_default_backoff_is_the_documented_one():
    backoff = Backoff()
    assert (backoff.policy, backoff.initial, backoff.factor, backoff.max, backoff.jitter) == (
        "exponential", "10s", 2.0, "10m", 0.1,
    )


@pytest.mark.parametrize("attempt", [0, -1], ids=["zero", "negative"])
def test_attempts_count_from_one(attempt):
    with pytest.raises(ValueError, match="counts from 1"):
        backoff_delay(Backoff(), attempt, MIDDLE)


@pytest.mark.parametrize(
    "policy,attempt,jitter,sample,want",
    [
        pytest.param("exponential", 1, 0.1, 0.0, 9.0, id="sample 0 is -jitter"),
        pytest.param("exponential", 1, 0.1, 0.5, 10.0, id="sample 0.5 is no spread"),
        pytest.param("exponential", 1, 0.1, 0.75, 10.5, id="sample 0.75 is +jitter/2"),
        pytest.param("exponential", 3, 0.25, 0.0, 30.0, id="spread scales with the delay"),
        pytest.param("exponential", 1, 1.0, 0.0, 0.0, id="full jitter can reach zero, never below"),
        pytest.param("exponential", 7, 0.1, 0.999, 600.0, id="never past max at the cap"),
        pytest.param("exponential", 7, 0.1, 0.0, 540.0, id="below max at the cap"),
        pytest.param("fixed", 4, 0.2, 0.0, 8.0, id="fixed -jitter"),
        pytest.param("fixed", 4, 0.2, 0.75, 11.0, id="fixed +jitter/2"),
    ],
)
def test_jitter(policy, attempt, jitter, sample, want):
    backoff = Backoff(policy=policy, initial="10s", factor=2, max="10m", jitter=jitter)
    assert seconds(backoff_delay(backoff, attempt, sample)) == pytest.approx(want)


@settings(max_examples=300, deadline=None)
@given(
    initial_ms=st.integers(0, 3_600_000),
    extra_ms=st.integers(0, 3_600_000),
    factor=st.floats(1.0, 100.0),
    jitter=st.floats(0.0, 1.0),
    attempt=st.integers(1, 10_000),
    sample=st.floats(0.0, 1.0, exclude_max=True),
)
def test_jitter_bounds(initial_ms, extra_ms, factor, jitter, attempt, sample):
    """Within ±jitter of the unjittered delay, never negative, never past max."""
    backoff = Backoff(initial=f"{initial_ms}ms", max=f"{initial_ms + extra_ms}ms", factor=factor, jitter=jitter)
    plain = seconds(backoff_delay(backoff.model_copy(update={"jitter": 0.0}), attempt, sample))
    delay = seconds(backoff_delay(backoff, attempt, sample))
    slack = 1e-5  # timedelta keeps microseconds
    assert 0 <= delay <= seconds(backoff.max_delta) + slack
    assert plain * (1 - jitter) - slack <= delay <= plain * (1 + jitter) + slack


@settings(max_examples=200, deadline=None)
@given(factor=st.floats(1.0, 100.0), attempt=st.integers(1, 200))
def test_exponential_never_shrinks(factor, attempt):
    backoff = Backoff(initial="1s", max="24h", factor=factor, jitter=0)
    assert backoff_delay(backoff, attempt + 1, MIDDLE) >= backoff_delay(backoff, attempt, MIDDLE)


@pytest.mark.parametrize(
    "initial,factor,max_,want",
    [
        pytest.param("10s", 2, "10m", 600, id="factor 2"),
        pytest.param("10s", 100, "10m", 600, id="factor 100"),
        pytest.param("30s", 1, "10m", 30, id="factor 1"),
        pytest.param("1ms", 1.0001, "87600h", 315_360_000, id="factor barely above 1, far cap"),
        pytest.param("0s", 2, "10m", 0, id="zero initial"),
    ],
)
@pytest.mark.parametrize("attempt", [10**6, 10**12, 2**64], ids=["1e6", "1e12", "2^64"])
def test_huge_attempt_numbers_neither_overflow_nor_hang(initial, factor, max_, want, attempt):
    backoff = Backoff(initial=initial, factor=factor, max=max_, jitter=0)
    started = time.perf_counter()
    delay = backoff_delay(backoff, attempt, MIDDLE)
    assert time.perf_counter() - started < 0.5
    assert seconds(delay) == pytest.approx(want)


@pytest.mark.parametrize("uid,sequence", [("uid-1", 1), ("uid-1", 2), ("another", 1), ("", 0)])
def test_jitter_sample_is_fixed_per_job_and_sequence(uid, sequence):
    assert jitter_sample(uid, sequence) == jitter_sample(uid, sequence)


def test_jitter_sample_differs_between_runs_and_jobs():
    samples = {jitter_sample(uid, sequence) for uid in ("a", "b", "c") for sequence in range(1, 11)}
    assert len(samples) == 30


@settings(max_examples=500, deadline=None)
@given(uid=st.text(max_size=40), sequence=st.integers(0, 2**40))
def test_jitter_sample_in_unit_interval(uid, sequence):
    assert 0.0 <= jitter_sample(uid, sequence) < 1.0


def test_jitter_samples_spread_over_the_interval():
    samples = [jitter_sample("uid", sequence) for sequence in range(1, 1001)]
    assert min(samples) < 0.05 and max(samples) > 0.95
    assert 0.4 < sum(samples) / len(samples) < 0.6
