"""The /v2 API's defences against load and abuse, as pure bookkeeping (the clock is passed in, nothing here does I/O):
a bounded cache with expiry (for token reviews, accepted and refused) and per-client token buckets (failed
authentications)."""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class ExpiringCache(Generic[K, V]):
    """At most `size` entries, each until its own deadline; the least recently stored goes first when full."""

    def __init__(self, ttl: float, size: int = 10_000) -> None:
        self.ttl, self.size = ttl, size
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K, now: float) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] <= now:
            del self._entries[key]
            return None
        return entry[1]

    def put(self, key: K, value: V, now: float) -> None:
        self._entries[key] = (now + self.ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class TokenBuckets:
    """One token bucket per key (a client address): `burst` tokens, refilled at `rate` per second.

    take() spends a token when there is one; give_back() returns it (a review that succeeded, or that failed for
    want of the API server, is not the client's failure). Spending before the work, not after it, bounds the work
    in flight too: concurrent requests cannot all pass the check before the first failure is counted. At most
    `size` keys are remembered; the least recently used is forgotten first (it then starts again with a full
    bucket, which only ever lets more through, never less).
    """

    def __init__(self, burst: float, rate: float, size: int = 10_000) -> None:
        if burst < 1 or rate <= 0:
            raise ValueError("a token bucket needs burst >= 1 and rate > 0")
        self.burst, self.rate, self.size = float(burst), float(rate), size
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key → (tokens, as of when)

    def _level(self, key: str, now: float) -> float:
        tokens, since = self._buckets.get(key, (self.burst, now))
        return min(self.burst, tokens + max(0.0, now - since) * self.rate)

    def _store(self, key: str, tokens: float, now: float) -> None:
        self._buckets[key] = (tokens, now)
        self._buckets.move_to_end(key)
        while len(self._buckets) > self.size:
            self._buckets.popitem(last=False)

    def take(self, key: str, now: float) -> bool:
        tokens = self._level(key, now)
        if tokens < 1:
            return False
        self._store(key, tokens - 1, now)
        return True

    def give_back(self, key: str, now: float) -> None:
        self._store(key, min(self.burst, self._level(key, now) + 1), now)

    def retry_after(self, key: str, now: float) -> int:
        """Whole seconds until the key has a token again (at least 1: an answer to retry at once is no answer)."""
        missing = 1 - self._level(key, now)
        return max(1, math.ceil(missing / self.rate)) if missing > 0 else 1
