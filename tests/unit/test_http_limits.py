"""The /v2 API's defences as pure bookkeeping: token caches with expiry and per-client token buckets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sextant.http.limits import ExpiringCache, TokenBuckets


def test_a_cached_entry_lives_until_its_deadline_and_the_cache_stays_bounded():
    cache: ExpiringCache[str, int] = ExpiringCache(ttl=10, size=3)
    cache.put("a", 1, now=0)
    assert cache.get("a", now=9.9) == 1 and cache.get("a", now=10) is None
    for i, key in enumerate("bcde"):
        cache.put(key, i, now=20)
    assert len(cache) == 3 and cache.get("b", now=21) is None  # the oldest stored went first
    assert [cache.get(k, now=21) for k in "cde"] == [1, 2, 3]


def test_a_bucket_allows_its_burst_then_its_rate_per_key():
    buckets = TokenBuckets(burst=3, rate=0.5)
    assert [buckets.take("10.0.0.1", now=0) for _ in range(4)] == [True, True, True, False]
    assert buckets.retry_after("10.0.0.1", now=0) == 2  # one token every 2 s
    assert buckets.take("10.0.0.2", now=0)  # another client has its own bucket
    assert not buckets.take("10.0.0.1", now=1.9) and buckets.take("10.0.0.1", now=2.0)
    assert [buckets.take("10.0.0.1", now=100) for _ in range(4)] == [True, True, True, False]  # refilled to burst


def test_a_token_given_back_can_be_taken_again_but_never_beyond_the_burst():
    buckets = TokenBuckets(burst=2, rate=0.001)
    assert buckets.take("c", 0) and buckets.take("c", 0) and not buckets.take("c", 0)
    buckets.give_back("c", 0)
    assert buckets.take("c", 0) and not buckets.take("c", 0)
    for _ in range(5):
        buckets.give_back("c", 0)
    assert [buckets.take("c", 0) for _ in range(3)] == [True, True, False]


def test_forgetting_a_key_only_ever_lets_more_through():
    buckets = TokenBuckets(burst=1, rate=0.001, size=2)
    assert buckets.take("a", 0) and not buckets.take("a", 0)
    buckets.take("b", 0)
    buckets.take("c", 0)  # "a" is forgotten: a full bucket again
    assert buckets.take("a", 0)


def test_nonsense_limits_are_refused():
    with pytest.raises(ValueError):
        TokenBuckets(burst=0, rate=1)
    with pytest.raises(ValueError):
        TokenBuckets(burst=1, rate=0)


@given(st.integers(1, 20), st.floats(0.1, 10), st.lists(st.floats(0, 0.5), min_size=1, max_size=200))
def test_takes_never_exceed_burst_plus_rate_times_elapsed(burst, rate, gaps):
    buckets, now, taken = TokenBuckets(burst, rate), 0.0, 0
    for gap in gaps:
        now += gap
        taken += buckets.take("k", now)
    assert taken <= burst + rate * now + 1e-9
