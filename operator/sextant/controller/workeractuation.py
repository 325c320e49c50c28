"""The job controller's worker mode (docs/workers.md): what it does when a Worker object changes, expires or goes,
and how it hands an attempt to a worker and takes it back (through the Workers' status writer,
controller/workerstatus.py). A part of JobController (controller/jobs.py), which holds the state."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

from ..kube.client import ApiError, Conflict, NotFound
from ..kube.informer import Key, key_of
from ..lifecycle import transitions as T
from ..lifecycle import workers as W
from ..resources import API_VERSION, contract
from ..resources.common import format_time, parse_duration
from ..resources.job import State
from ..resources.queue import QueueSpec
from ..resources.worker import FINALIZER, Assignment
from .podactuation import RETRY_AFTER_ERROR
from .records import WorkerChange

log = logging.getLogger("sextant.controller.jobs")

def _worker_ref(worker: W.Believed) -> dict[str, Any]:
    """A Worker as an Event's involved object."""
    return {"apiVersion": API_VERSION, "kind": "Worker",
            "metadata": {"namespace": worker.namespace, "name": worker.name, "uid": worker.uid}}


class WorkerActuation:
    def on_worker_object(self, kind: str, obj: dict[str, Any]) -> None:
        """A Worker object changed (its watch, or our own status write's response)."""
        key = key_of(obj)
        was_live = self.view.live(key)
        change = self.view.delete_worker(obj) if kind == "delete" else self.view.upsert_worker(obj)
        if change is not None:
            self._worker_changed(change, was_live)

    def _worker_changed(self, change: WorkerChange, was_live: bool) -> None:
        """Look again at what the change concerns, and only that: the jobs whose assignment or result changed (all
        of the worker's when its fate changed), and the jobs whose NoWorker flips."""
        key, before, after = change.key, change.before, change.after
        ns = key[0]
        live = self.view.live(key)
        for name in W.changed_jobs(before, after, was_live != live):
            self._touch((ns, name))
        if W.offer_of(before, was_live) != W.offer_of(after, live):
            self._served_flips(ns, key, before, was_live)
        if after is None:
            self.worker_status.forget(key)
            self.timers.schedule(("worker", *key), None, self._worker_due)
            return
        self._warn(before, after, _worker_ref(after))
        if self.started.is_set():
            if after.deleting and not after.assignments and FINALIZER in after.finalizers and \
                    not self._pending_on(key):
                self._spawn(self._release_finalizer(key, after))
            summary = W.status_summary(after, live, len(after.assignments))
            if any(after.status.get(k) != v for k, v in summary.items() if k != "observedGeneration"):
                self.worker_status.sync(key)
            self.slots.pump_worker(key)
        self._schedule_worker(key)

    def _served_flips(self, ns: str, key: Key, before: W.Believed | None, was_live: bool) -> None:
        """The worker's offer changed: the queued jobs of each (queue, handler) it offered or offers now, for which
        whether some worker serves it flipped (NoWorker comes or goes)."""
        after = self.view.worker(key)
        now_workers = self.view.live_workers(ns)
        old_workers = [(w, live) for w, live in now_workers if w.name != key[1]]
        if before is not None:
            old_workers.append((before, was_live))
        pairs = {(q, h) for w in (before, after) if w is not None for q in w.queues for h in w.handlers}
        for queue, handler in pairs:
            if W.is_served(old_workers, queue, handler) == W.is_served(now_workers, queue, handler):
                continue
            for job in list(self.view.unfinished_by_handler.get((ns, handler), ())):
                record = self.view.jobs.get(job)
                if record is not None and record.queue == queue and record.state != State.RUNNING:
                    self.slots.line_up(job)
                    self._touch(job)

    def _warn(self, before: W.Believed | None, after: W.Believed, obj: dict[str, Any]) -> None:
        """A Warning Event when a Worker starts to announce something the operator does not believe."""
        if after.invalid is not None and (before is None or before.invalid != after.invalid):
            log.warning("worker %s/%s is not believed: %s", after.namespace, after.name, after.invalid)
            self.events.record(obj, T.Event("InvalidWorker", f"{after.invalid}; the operator believes it has 0 "
                                            "slots and serves no queue", "Warning"))
        if after.capped_from is not None and (before is None or before.capped_from != after.capped_from):
            self.events.record(obj, T.Event("SlotsCapped", f"spec.slots is {after.capped_from}; the operator "
                                            f"believes at most {after.slots} (--max-worker-slots)", "Warning"))

    def _pending_on(self, key: Key) -> bool:
        return any(p.worker == key[1] and job[0] == key[0] for job, p in self.view.pending.items())

    def _worker_written(self, key: Key, jobs: set[Key]) -> None:
        """A status write of the worker landed (or failed for good): its jobs are looked at again, and slots it
        freed offered."""
        for job in jobs:
            self._touch(job)
        if self.started.is_set():
            self.slots.pump_worker(key)
            after = self.view.worker(key)
            if after is not None and after.deleting and not after.assignments and \
                    FINALIZER in after.finalizers and not self._pending_on(key):
                self._spawn(self._release_finalizer(key, after))

    def _schedule_worker(self, key: Key) -> None:
        """Wake when the worker would expire (by the operator's clock), or, expired, when it may be deleted."""
        after, observed = self.view.worker(key), self.view.observed_at.get(key)
        when = None
        if after is not None and observed is not None:
            expired = self.view.expired.get(key)
            when = W.expires_at(after, observed) if expired is None else expired + W.DELETE_EXPIRED_AFTER
        self.timers.schedule(("worker", *key), when, self._worker_due)

    def _worker_due(self, timer: Any) -> None:
        self._spawn(self._check_worker((timer[1], timer[2])))

    async def _check_worker(self, key: Key) -> None:
        """The worker's lease is over by the operator's clock: GET it once first (a renewal missed while the watch
        was away counts, observed now); still the same generation, it is expired, and its unreported attempts fail
        LeaseExpired. Expired for DELETE_EXPIRED_AFTER with no assignments left: deleted."""
        believed, observed = self.view.worker(key), self.view.observed_at.get(key)
        if believed is None or observed is None:
            return
        now = self.now()
        expired = self.view.expired.get(key)
        if expired is not None:
            if now >= expired + W.DELETE_EXPIRED_AFTER and not believed.assignments and not self._pending_on(key) \
                    and self.leading.is_set():
                try:
                    await self.kube.delete(contract.workers_path(*key), None, {"uid": believed.uid})
                except (NotFound, Conflict):
                    pass
                except ApiError as exc:
                    log.warning("worker %s/%s: cannot delete it: %s", *key, exc)
            return
        if now < W.expires_at(believed, observed):
            return self._schedule_worker(key)
        try:
            obj = await self.kube.get(contract.workers_path(*key))
        except NotFound:
            return self.on_worker_object("delete", {"metadata": {"namespace": key[0], "name": key[1]}})
        except ApiError as exc:  # the API server is away: no verdict without a look
            log.warning("worker %s/%s: cannot read it before expiring it: %s", *key, exc)
            self.timers.schedule(("worker", *key), now + RETRY_AFTER_ERROR, self._worker_due)
            return
        was_live = self.view.live(key)
        change = self.view.upsert_worker(obj) or WorkerChange(key, believed, self.view.worker(key))
        observed = self.view.observed_at.get(key)
        current = self.view.worker(key)
        if current is not None and observed is not None and self.now() >= W.expires_at(current, observed):
            log.info("worker %s/%s expired: no renewal observed within its lease", *key)
            self.view.expired[key] = self.now()
        self._worker_changed(change, was_live)

    async def _release_finalizer(self, key: Key, believed: W.Believed) -> None:
        """The Worker is being deleted and none of its attempts is unrecorded: let it go."""
        rest = [f for f in believed.finalizers if f != FINALIZER]
        try:
            await self.kube.merge_patch(contract.workers_path(*key), {"metadata": {"finalizers": rest or None}})
        except NotFound:
            pass
        except ApiError as exc:
            log.warning("worker %s/%s: cannot remove its finalizer: %s", *key, exc)

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _assign(self, key: Key, job: T.JobSnapshot, action: T.Assign) -> datetime:
        """Hand the attempt to its worker's status writer: it holds its slots from now, and is the job's starting
        attempt once its write has landed. Returns its assignedAt."""
        now = self.now()
        name, incarnation = action.worker.split("/", 1)
        queue = self.view.queues.get((key[0], job.spec.queue)) or QueueSpec()
        assignment = Assignment(job=job.name, uid=job.uid, queue=job.spec.queue, handler=job.spec.handler,
                                sequence=action.sequence, attempt=action.attempt, incarnation=incarnation,
                                assigned_at=format_time(now), timeout_at=format_time(now + parse_duration(queue.timeout)))
        self.worker_status.assign((key[0], name), key, assignment)
        return now

    def _unassign(self, key: Key, sequence: int) -> None:
        """The job is done with its assignment of this sequence: removed from its worker's status (an assignment
        of a Worker object that is gone is only forgotten)."""
        placed = self.view.placed(key, sequence)
        if placed is None:
            return
        worker = (key[0], placed.worker)
        believed = self.view.worker(worker)
        if believed is None or believed.uid != placed.worker_uid:
            if self.view.pending.get(key) is not placed:
                self.view.unindex_assignment(key, sequence)
                self.slots.update(key)
                return
        self.worker_status.remove(worker, key, placed.assignment.uid, sequence)

    def _unassign_all(self, key: Key, uid: str | None = None) -> None:
        """The job is gone (or is another one of that name): no assignment of the one before is wanted."""
        for sequence, placed in list(self.view.assignments_of(key).items()):
            if uid is None or placed.assignment.uid != uid:
                self._unassign(key, sequence)
        pending = self.view.pending.get(key)
        if pending is not None and (uid is None or pending.assignment.uid != uid):
            self.worker_status.remove((key[0], pending.worker), key, pending.assignment.uid,
                                      pending.assignment.sequence)
