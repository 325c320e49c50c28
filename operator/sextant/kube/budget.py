"""A budget of bytes in flight: at most `capacity` bytes' worth of requests at once, by the weight each declares.

Why: every answer to a write of a custom resource is the whole object. A Job with a 256 KiB payload of small keys
decodes to ~2.9 MiB of Python objects, so 64 reconciles writing such jobs at once lift the operator's resident
memory by ~190 MB that the allocator keeps (issue 28). Weighing each write by its object's size bounds that, while
writes of ordinary (small) jobs never wait on each other.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class ByteBudget:
    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, not {capacity}")
        self.capacity = capacity
        self.in_flight = 0
        self._changed = asyncio.Condition()

    @asynccontextmanager
    async def hold(self, weight: int) -> AsyncIterator[None]:
        """Wait until `weight` fits beside what is in flight, and hold it for the block. A weight larger than the
        whole capacity runs alone (it waits for an empty budget) instead of never."""
        weight = max(0, min(weight, self.capacity))
        if weight:
            async with self._changed:
                await self._changed.wait_for(lambda: self.in_flight + weight <= self.capacity)
                self.in_flight += weight
        try:
            yield
        finally:
            if weight:
                async with self._changed:
                    self.in_flight -= weight
                    self._changed.notify_all()
