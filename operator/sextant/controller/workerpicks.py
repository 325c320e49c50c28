"""Slots' worker picks (controller/slots.py): a worker-mode job granted a slot is also given a worker with room,
held from the pick until the reconcile hands the assignment to the Worker status writer, so that two reconciles at
once never give one worker more jobs than it has slots."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from ..kube.informer import Key
from ..lifecycle import workers as W
from .view import View


class WorkerPicks:
    """The part of Slots that picks workers (state made in Slots.__init__)."""

    view: View
    _picked: dict[Key, tuple[str, W.Believed]]
    _inflight: Counter[Key]

    pump: Callable[[Key], None]

    def worker_of(self, job: Key) -> str | None:
        """The worker (<name>/<incarnation>) picked for a granted worker-mode job, if any."""
        picked = self._picked.get(job)
        return picked[1].holder if picked else None

    def busy(self, ns: str) -> dict[str, int]:
        """Per worker of the namespace: its assignments not yet reported, and the jobs granted to it not yet
        assigned."""
        busy = self.view.worker_busy(ns)
        for (namespace, worker), count in self._inflight.items():
            if namespace == ns:
                busy[worker] = busy.get(worker, 0) + count
        return busy

    def _drop_inflight(self, worker: Key) -> None:
        self._inflight[worker] -= 1
        if self._inflight[worker] <= 0:
            del self._inflight[worker]

    def pump_worker(self, worker: Key) -> None:
        """A worker may have room: offer it to every queue it serves."""
        believed = self.view.worker(worker)
        if believed is not None:
            for queue in believed.queues:
                self.pump((worker[0], queue))

    def _startable_in(self, ns: str) -> Callable[[Key], bool]:
        """Whether a job of the namespace can start now, as admission.take asks of each job it looks at: a pod-mode
        job can once it has a slot; a worker-mode job needs a worker with room (picked now, held until release).
        The workers and their load are read once per take, not once per job looked at: take runs without a pause,
        so only its own picks change them (counted here too), and a queue and handler no worker had room for is not
        looked for again in the same take (a full pool would otherwise cost SKIP_LIMIT reads per take)."""
        workers: list[tuple[W.Believed, bool]] | None = None
        busy: dict[str, int] = {}
        full: set[tuple[str, str]] = set()

        def startable(job: Key) -> bool:
            nonlocal workers, busy
            record = self.view.live_job(job)
            queue, name = (record.queue, record.handler) if record is not None else ("", "")
            handler = self.view.handlers.get((ns, name))
            if handler is None or not handler.on_workers or job in self._picked:
                return True
            if (queue, name) in full:
                return False
            if workers is None:
                workers, busy = self.view.assignable_workers(ns), self.busy(ns)
            chosen = W.pick_worker(workers, queue, name, busy)
            if chosen is None:
                full.add((queue, name))
                return False
            self._picked[job] = (ns, chosen)
            self._inflight[(ns, chosen.name)] += 1
            busy[chosen.name] = busy.get(chosen.name, 0) + 1
            return True

        return startable
