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


# How many distinct wake-up callables are shared (one object for every key they wake): `self.queue.add` is a new
# bound method at each call, 48 bytes kept per key (100k finished jobs' retention wake-ups) unless shared.
_SHARED_CALLABLES = 256

_Entry = tuple[float, int, Hashable, Callable[[Hashable], None]]  # (timestamp, order set in, key, whom to call)


class Timers:
    def __init__(self, now: Callable[[], datetime]) -> None:
        self._now = now
        self._heap: list[_Entry] = []
        # The one live wake-up per key: its heap entry (older entries of the key are stale). One tuple per key holds
        # all of it: with 100k finished jobs each waiting for its retention, ~180 bytes a key, not ~290.
        self._due: dict[Hashable, _Entry] = {}
        self._callables: dict[Callable[[Hashable], None], Callable[[Hashable], None]] = {}
        self._seq = itertools.count()
        self._changed = asyncio.Event()

    def schedule(self, key: Hashable, when: datetime | None, fire: Callable[[Hashable], None]) -> None:
        """Replace key's wake-up with `when` (None: no wake-up); at that time fire(key) is called."""
        if when is None:
            self._due.pop(key, None)
            return
        stamp = when.timestamp()
        current = self._due.get(key)
        if current is not None and current[0] == stamp and current[3] == fire:
            return
        shared = self._callables.get(fire)
        if shared is None and len(self._callables) < _SHARED_CALLABLES:
            shared = self._callables[fire] = fire
        entry = (stamp, next(self._seq), key, shared or fire)
        self._due[key] = entry
        heapq.heappush(self._heap, entry)
        if self._heap[0] is entry:  # the new earliest: the sleeper must wake sooner
            self._changed.set()

    def __len__(self) -> int:
        return len(self._due)

    def due(self, key: Hashable) -> float | None:
        """When key's wake-up is set for (a timestamp), None when it has none."""
        entry = self._due.get(key)
        return entry[0] if entry is not None else None

    def fire_due(self) -> float | None:
        """Call every wake-up that is due by now, earliest first (equal times in the order they were set); the
        time (a timestamp) to look again, None when nothing is set."""
        now = self._now().timestamp()
        while self._heap and self._heap[0][0] <= now:
            entry = heapq.heappop(self._heap)
            key = entry[2]
            if self._due.get(key) is entry:
                del self._due[key]
                try:
                    entry[3](key)
                except Exception:  # noqa: BLE001 - one wake-up must not stop every other
                    log.exception("wake-up of %s failed", key)
        if len(self._heap) > 2 * len(self._due) + 1024:  # drop stale entries now and then
            self._heap = [entry for entry in self._heap if self._due.get(entry[2]) is entry]
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
