"""The one controller runtime every reconciler runs on: N workers taking keys off its WorkQueue, acting only while
this replica leads, and retrying a key that failed with that key's own backoff (workqueue.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable

from ..kube import metrics
from ..kube.client import NotLeader
from ..kube.workqueue import WorkQueue, failed


class Runtime:
    """`reconcile(key)` per key, `workers` at once, never two for one key.

    - Leadership: a worker holds its key until `leading` is set; a reconcile that finds this replica deposed
      (NotLeader from the fenced client) puts its key back for the next leader, maybe this replica again.
    - Errors: any other exception is counted, logged and surfaced once per streak (`report(key, message)`, e.g. a
      Warning Event on the object), and the key is retried after its backoff; a success resets the backoff. One
      object that always fails never stops the others.
    """

    def __init__(self, kind: str, reconcile: Callable[[Hashable], Awaitable[None]], *, workers: int,
                 queue: WorkQueue | None = None, leading: asyncio.Event | None = None,
                 report: Callable[[Hashable, str], None] | None = None, log: logging.Logger | None = None) -> None:
        self.kind = kind
        self.reconcile = reconcile
        self.workers = workers
        self.queue = queue if queue is not None else WorkQueue()
        if leading is None:
            leading = asyncio.Event()
            leading.set()  # without leader election this replica acts alone
        self.leading = leading
        self.report = report
        self.log = log or logging.getLogger(__name__)
        self.started = asyncio.Event()  # the view was complete and `start` ran: events may enqueue keys now

    async def run(self, synced: Iterable[asyncio.Event] = (), start: Callable[[], None] | None = None) -> None:
        """Wait for the informers' first lists, then `start` (enqueue what needs a look), then work for ever."""
        await asyncio.gather(*(event.wait() for event in synced))
        if start is not None:
            start()
        self.started.set()
        await asyncio.gather(*(self._worker() for _ in range(self.workers)))

    async def _worker(self) -> None:
        while True:
            await self.process(await self.queue.get())

    async def process(self, key: Hashable) -> None:
        """One key taken off the queue: reconciled once the replica leads, then given back to the queue."""
        try:
            await self.leading.wait()
            await self.reconcile(key)
        except NotLeader:
            self.queue.add(key)  # deposed mid-reconcile: the next leader (maybe us again) looks again
            await asyncio.sleep(0)  # a refusal sends nothing: yield, or a worker could spin on its key unawaited
        except Exception as exc:  # noqa: BLE001 - one bad object must not stop the operator
            metrics.RECONCILE_ERRORS.inc()
            report = self.report
            failed(self.queue, key, exc, kind=self.kind, log=self.log,
                   surface=(lambda message: report(key, message)) if report is not None else None)
        else:
            self.queue.forget(key)
        finally:
            self.queue.done(key)
