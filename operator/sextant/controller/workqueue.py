"""A deduplicating work queue: a key is never processed by two workers at once, and a key marked dirty
while it is being processed is processed again afterwards (client-go's workqueue semantics)."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable


class WorkQueue:
    def __init__(self) -> None:
        self._queue: asyncio.Queue[Hashable] = asyncio.Queue()
        self._dirty: set[Hashable] = set()
        self._processing: set[Hashable] = set()

    def add(self, key: Hashable) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.put_nowait(key)

    async def get(self) -> Hashable:
        key = await self._queue.get()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: Hashable) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.put_nowait(key)

    def __len__(self) -> int:
        return len(self._dirty)
