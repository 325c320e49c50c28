"""The one heap of wake-ups of the whole operator (a job's next look: runAt, backoff, timeout, lease expiry, a
stopping pod's grace, retention; a schedule's next tick): no timer or daemon per object. Each key says whom to
wake; a key has at most one wake-up, and setting it again replaces it."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable, Hashable
from datetime import datetime

log = logging.getLogger(__name__)


class Timers:
    def __init__(self, now: Callable[[], datetime]) -> None:
        self._now = now
        self._heap: list[tuple[float, int, Hashable]] = []
        self._due: dict[Hashable, float] = {}  # the one live wake-up per key; older heap entries are stale
        self._fire: dict[Hashable, Callable[[Hashable], None]] = {}
        self._seq = itertools.count()
        self._changed = asyncio.Event()

    def schedule(self, key: Hashable, when: datetime | None, fire: Callable[[Hashable], None]) -> None:
        """Replace key's wake-up with `when` (None: no wake-up); at that time fire(key) is called."""
        if when is None:
            self._due.pop(key, None)
            self._fire.pop(key, None)
            return
        self._fire[key] = fire
        stamp = when.timestamp()
        if self._due.get(key) == stamp:
            return
        self._due[key] = stamp
        heapq.heappush(self._heap, (stamp, next(self._seq), key))
        if self._heap[0][0] == stamp:  # the new earliest: the sleeper must wake sooner
            self._changed.set()

    def __len__(self) -> int:
        return len(self._due)

    def fire_due(self) -> float | None:
        """Call every wake-up that is due by now, earliest first (equal times in the order they were set); the
        time (a timestamp) to look again, None when nothing is set."""
        now = self._now().timestamp()
        while self._heap and self._heap[0][0] <= now:
            stamp, _, key = heapq.heappop(self._heap)
            if self._due.get(key) == stamp:
                del self._due[key]
                try:
                    self._fire.pop(key)(key)
                except Exception:  # noqa: BLE001 - one wake-up must not stop every other
                    log.exception("wake-up of %s failed", key)
        if len(self._heap) > 2 * len(self._due) + 1024:  # drop stale entries now and then
            self._heap = [(s, n, k) for s, n, k in self._heap if self._due.get(k) == s]
            heapq.heapify(self._heap)
        return self._heap[0][0] if self._heap else None

    async def run(self) -> None:
        while True:
            next_at = self.fire_due()
            self._changed.clear()
            timeout = None if next_at is None else max(next_at - self._now().timestamp(), 0.0)
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except asyncio.TimeoutError:
                pass
