"""A deduplicating work queue: a key is never processed by two workers at once, and a key marked dirty
while it is being processed is processed again afterwards (client-go's workqueue semantics).

Plus client-go's rate limiting: a key whose processing failed comes back after a per-key exponential delay
(1 s, doubling up to 5 min), and a success forgets its failures. One object that always fails costs a
retry every 5 minutes, never a hot loop, and never holds up any other key."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable

from . import metrics

RETRY_BASE = 1.0  # seconds, after the first failure
RETRY_CAP = 300.0  # seconds: 5 minutes


class Backoff:
    """Per-key exponential backoff: the n-th failure in a row waits base × 2^(n−1), at most cap. Pure."""

    def __init__(self, base: float = RETRY_BASE, cap: float = RETRY_CAP) -> None:
        self.base, self.cap = base, cap
        self._failures: dict[Hashable, int] = {}

    def when(self, key: Hashable) -> float:
        """Count a failure of key; the delay before trying it again."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        if failures >= 64:  # 2**64 seconds is past any cap; no float overflow for a key that fails for ever
            return self.cap
        return min(self.base * 2**failures, self.cap)

    def failures(self, key: Hashable) -> int:
        return self._failures.get(key, 0)

    def forget(self, key: Hashable) -> None:
        """key succeeded: its next failure starts from base again."""
        self._failures.pop(key, None)


class WorkQueue:
    def __init__(self, backoff: Backoff | None = None) -> None:
        self._queue: asyncio.Queue[Hashable] = asyncio.Queue()
        self._dirty: set[Hashable] = set()
        self._processing: set[Hashable] = set()
        self.backoff = backoff if backoff is not None else Backoff()
        self._delayed: dict[Hashable, tuple[float, asyncio.TimerHandle]] = {}  # key → (due, its timer)

    def add(self, key: Hashable) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.put_nowait(key)

    def add_after(self, key: Hashable, delay: float) -> None:
        """add(key) in `delay` seconds; of several pending delays per key the earliest stands."""
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        pending = self._delayed.get(key)
        if pending is not None:
            if pending[0] <= due:
                return
            pending[1].cancel()
        self._delayed[key] = (due, loop.call_at(due, self._due, key))

    def _due(self, key: Hashable) -> None:
        self._delayed.pop(key, None)
        self.add(key)

    def add_rate_limited(self, key: Hashable) -> float:
        """key failed: add it again after its backoff; the delay."""
        delay = self.backoff.when(key)
        self.add_after(key, delay)
        return delay

    def forget(self, key: Hashable) -> None:
        """key succeeded: reset its backoff."""
        self.backoff.forget(key)

    def retry_failed_now(self) -> int:
        """Every key waiting out a failure's backoff is added now (its count of failures stays): the API server is
        back after an outage that made them fail, and they must not wait minutes for their next try."""
        keys = [key for key in self._delayed if self.backoff.failures(key)]
        for key in keys:
            self._delayed.pop(key)[1].cancel()
            self.add(key)
        return len(keys)

    async def get(self) -> Hashable:
        key = await self._queue.get()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: Hashable) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.put_nowait(key)

    @property
    def delayed(self) -> int:
        return len(self._delayed)

    def __len__(self) -> int:
        return len(self._dirty)


def failed(queue: WorkQueue, key: Hashable, exc: BaseException, *, kind: str, log: logging.Logger,
           surface: Callable[[str], None] | None = None) -> float:
    """One failed attempt at key: counted, retried after its backoff, logged (with the traceback) and surfaced on
    the object (surface(message), e.g. a Warning Event) at the first failure of a streak only. The delay."""
    first = queue.backoff.failures(key) == 0
    delay = queue.add_rate_limited(key)
    metrics.OBJECT_ERRORS.labels(kind, "reconcile").inc()
    message = describe(exc)
    name = "/".join(map(str, key)) if isinstance(key, tuple) else str(key)
    if first:
        log.error("%s %s: %s; retrying in %.0f s, then less often (up to every %.0f s) until it succeeds", kind,
                  name, message, delay, queue.backoff.cap, exc_info=exc)
        if surface is not None:
            try:
                surface(message)
            except Exception:  # noqa: BLE001 - reporting must not add a failure of its own
                log.debug("could not report the failure of %s", name, exc_info=True)
    else:
        log.debug("%s %s failed again (%s); retrying in %.0f s", kind, name, message, delay)
    return delay


def describe(exc: BaseException, limit: int = 500) -> str:
    """An exception as one line for a person: its type and message, cut to `limit` characters."""
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 3] + "..."
