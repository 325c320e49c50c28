"""The Worker objects (docs/workers.md) and their assignments, as the view keeps them: the part of View (controller/
view.py) that worker mode reads. Fed by the Workers' informer and by the answers of the operator's own status writes to
them (controller/workerstatus.py), ordered by their resourceVersion (Versions)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ..kube.informer import Key, key_of
from ..lifecycle import workers as W
from ..lifecycle.attempts import AssignmentObservation
from .records import Placed, WorkerChange, version_of
from .versions import Versions


class WorkerView:
    def __init__(self, now: Callable[[], datetime], max_worker_slots: int) -> None:
        self.now = now
        # The Worker objects as believed, per namespace; when the operator last observed each renew (its clock);
        # those it found expired (after a GET); assignments by job and sequence, those that landed (in a Worker's
        # status) and those on their way (in the status writer's outbox).
        self.max_worker_slots = max_worker_slots
        self.workers: dict[str, dict[str, W.Believed]] = defaultdict(dict)
        self.observed_at: dict[Key, datetime] = {}
        self.expired: dict[Key, datetime] = {}  # worker → when it was found expired
        self.assigned: dict[Key, dict[int, Placed]] = defaultdict(dict)
        self.pending: dict[Key, Placed] = {}
        # Per job, the sequences whose assignment's removal is being written (workerstatus.py): not strays to look
        # up again (has_strays), only on their way out.
        self.leaving: dict[Key, set[int]] = {}
        self._worker_versions = Versions()
        # WorkerPools (controller/pools.py): per pool, the workers it retires on a scale-down, given no new jobs.
        self.retiring: dict[Key, frozenset[str]] = {}

    # --- Worker objects (protocol v2) --------------------------------------------------------------------------
    def worker(self, key: Key) -> W.Believed | None:
        return self.workers.get(key[0], {}).get(key[1])

    def live(self, key: Key) -> bool:
        """Not found expired: the operator observed a renewal within its lease (expiry is decided by the job
        controller, after a GET)."""
        return key in self.observed_at and key not in self.expired

    def upsert_worker(self, obj: dict[str, Any]) -> WorkerChange | None:
        """Store a Worker object (unless a newer version is known). A new generation or object is a renewal: observed
        now, by the operator's clock. Its assignments are indexed by job."""
        key = key_of(obj)
        if not self._worker_versions.newer(key, version_of(obj)):
            return None
        before = self.worker(key)
        after = W.read_worker(obj, self.max_worker_slots)
        if W.renewed(before, after):
            self.observed_at[key] = self.now()
            self.expired.pop(key, None)
        self.workers[key[0]][key[1]] = after
        self._index_assignments(key, before, after)
        return WorkerChange(key, before, after)

    def delete_worker(self, obj: dict[str, Any]) -> WorkerChange:
        """A Worker object is gone. Its assignments stay indexed (their worker gone: their attempts lost) until their
        jobs have recorded them."""
        key = key_of(obj)
        self._worker_versions.forget(key, version_of(obj))
        before = self.workers.get(key[0], {}).pop(key[1], None)
        if not self.workers.get(key[0]):
            self.workers.pop(key[0], None)
        self.observed_at.pop(key, None)
        self.expired.pop(key, None)
        return WorkerChange(key, before, None)

    def _index_assignments(self, key: Key, before: W.Believed | None, after: W.Believed) -> None:
        ns, name = key
        landed: dict[tuple[str, int], datetime | None] = {}
        if before is not None and before.uid == after.uid:
            for a in before.assignments:
                runs = self.assigned.get((ns, a.job), {})
                placed = runs.get(a.sequence)
                if placed is not None and placed.worker == name and placed.worker_uid == before.uid:
                    landed[(a.job, a.sequence)] = placed.landed_at
                    del runs[a.sequence]
                    if not runs:
                        self.assigned.pop((ns, a.job), None)
        now = self.now()
        for a in after.assignments:
            self.assigned[(ns, a.job)][a.sequence] = Placed(name, after.uid, a, landed.get((a.job, a.sequence), now))

    def unindex_assignment(self, job: Key, sequence: int) -> Placed | None:
        """Forget an assignment whose Worker object is gone (its job has recorded it)."""
        runs = self.assigned.get(job, {})
        placed = runs.pop(sequence, None)
        if not runs:
            self.assigned.pop(job, None)
        return placed

    def assignments_of(self, job: Key) -> dict[int, Placed]:
        return self.assigned.get(job, {})

    def placed(self, job: Key, sequence: int) -> Placed | None:
        """The job's assignment of this sequence number, landed or on its way."""
        landed = self.assigned.get(job, {}).get(sequence)
        if landed is not None:
            return landed
        pending = self.pending.get(job)
        return pending if pending is not None and pending.assignment.sequence == sequence else None

    def live_workers(self, ns: str) -> list[tuple[W.Believed, bool]]:
        return [(w, self.live((ns, name))) for name, w in self.workers.get(ns, {}).items()]

    def assignable_workers(self, ns: str) -> list[tuple[W.Believed, bool]]:
        """live_workers without those a WorkerPool retires (they drain before their pods go): whom a job may be given.
        Whether a job is served (NoWorker) still counts them: they are live, and the pool keeps room elsewhere."""
        out = set().union(*(names for (namespace, _), names in self.retiring.items() if namespace == ns))
        return [(w, live) for w, live in self.live_workers(ns) if w.name not in out]

    def worker_busy(self, ns: str) -> dict[str, int]:
        """Per worker of the namespace: its assignments, landed and on their way (an assignment holds its worker's
        slot until it is removed, after its end is recorded)."""
        busy = {name: len(w.assignments) for name, w in self.workers.get(ns, {}).items()}
        for job, placed in self.pending.items():
            if job[0] == ns and placed.assignment.sequence not in self.assigned.get(job, {}):
                busy[placed.worker] = busy.get(placed.worker, 0) + 1
        return busy

    def holds_assignment(self, job: Key) -> bool:
        """The job holds its queue slot by an assignment: on its way or landed, until it is removed (after the
        attempt's end is recorded)."""
        return job in self.pending or bool(self.assigned.get(job))

    def worker_observations(self, key: Key, uid: str, now: datetime) -> list[AssignmentObservation]:
        """What the job's assignments tell of their attempts (lifecycle/workers.observe_assignment)."""
        ns = key[0]
        seen = []
        runs = self.assigned.get(key, {})
        for placed in runs.values():
            if placed.assignment.uid != uid:
                continue  # a job of the same name before this one: the worker's reconcile drops it
            w = self.worker((ns, placed.worker))
            believed = w if w is not None and w.uid == placed.worker_uid else None
            seen.append(W.observe_assignment(placed.assignment, placed.worker, believed,
                                             self.live((ns, placed.worker)), now, landed_at=placed.landed_at))
        pending = self.pending.get(key)
        if pending is not None and pending.assignment.uid == uid and pending.assignment.sequence not in runs:
            seen.append(W.observe_assignment(pending.assignment, pending.worker, None, True, now, durable=False))
        return seen

