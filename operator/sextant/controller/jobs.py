"""The job reconciler: one level-triggered reconcile per job key, fed by the view, acting through kube/client.py.

Order of writes, chosen so that a crash between any two of them is repaired by the next reconcile:
the attempt's pod is created before the status records it (a pod of sequence status.sequence+1 is the queued job's
starting attempt, recorded when its handler starts: lifecycle/transitions.py's docstring), and
a stop (cancel, timeout, lease expiry) is recorded before the pod is deleted (the rules re-derive it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from ..kube import metrics
from ..kube.budget import ByteBudget
from ..kube.client import Conflict, Kube, NotFound
from ..kube.clock import utcnow
from ..kube.events import EventRecorder
from ..kube.informer import Key, key_of
from ..lifecycle import retention, transitions as T
from ..lifecycle.reading import InvalidJob, invalid_conditions, read_spec, valid_again
from ..lifecycle.states import FINISHED, State
from ..resources import API_VERSION, contract
from ..resources.common import parse_time
from ..resources.handler import HandlerSpec
from ..resources.job import JobStatus
from ..resources.queue import QueueSpec
from .archiving import Archiver
from .capping import Capper, FinishedIndex
from .expectations import Expectations
from .podactuation import RETRY_AFTER_ERROR, PodActuation
from .queuestatus import QueueStatusWriter
from .records import FinishedJob, LiveJob, attempt_of, event_object, live_record, version_of
from .retention import Retention, earliest
from .runtime import Runtime
from .slots import Slots
from .timers import Timers
from .view import View
from .workeractuation import WorkerActuation
from .workerstatus import WorkerStatusWriter
from . import writes

log = logging.getLogger(__name__)


# Payload bytes whose status writes may be in flight at once: eight 256 KiB payloads (each write's answer decodes to
# ~2.9 MiB); a job with a payload of a few KiB weighs next to nothing, so ordinary writes never wait (kube/budget.py).
WRITE_PAYLOAD_BUDGET = 2 * 1024 * 1024


class _PodNotCreated(Exception):
    """The attempt's pod could not be created: nothing of the admission is recorded. Its message says why."""


class JobController(WorkerActuation, PodActuation, Retention):
    def __init__(self, kube: Kube, view: View, events: EventRecorder, timers: Timers, *,
                 workers: int, pending_pods: int, record_queued_after: timedelta | None = writes.RECORD_QUEUED_AFTER,
                 now: Callable[[], datetime] = utcnow, archiver: Archiver | None = None,
                 max_finished_jobs: int | None = retention.MAX_FINISHED_JOBS,
                 leading: asyncio.Event | None = None) -> None:
        self.kube = kube
        self.record_queued_after = record_queued_after
        self.view = view
        self.events = events
        self.now = now
        self.timers = timers
        # Our writes not yet seen from the watch: the job is not acted on again before (its answers are not stored).
        self.expectations = Expectations(now)
        self.runtime = Runtime("job", self.reconcile, workers=workers, log=log, leading=leading,
                               report=lambda key, message: self._report(key, T.Event(
                                   "ReconcileFailed", f"the operator failed to reconcile this job: {message}",
                                   "Warning")))
        self.queue, self.started = self.runtime.queue, self.runtime.started
        self.leading = self.runtime.leading  # only the leader reconciles; set at once without leader election
        # Admission: who holds a slot, who is next; pending_pods per queue limits pods waiting for a node while the
        # scheduler is behind (0: no limit). A job it grants a slot is reconciled to act on it.
        self.slots = Slots(view, timers, now, pending_limit=pending_pods or None, granted=self.queue.add,
                           active=lambda: self.started.is_set() and self.leading.is_set(),
                           written=self.expectations.holds)
        self._acting: set[Key] = set()  # jobs being reconciled now: their reservations are theirs to give back
        self._tasks: set[asyncio.Task[None]] = set()  # Worker checks and finalizer releases under way
        self._write_budget = ByteBudget(WRITE_PAYLOAD_BUDGET)
        # The Queues' status (their live numbers): the leader writes it, through the same fenced client.
        self.queue_status = QueueStatusWriter(kube, view, timers, now, self.leading, rate=self.slots.rate)
        # Finished jobs: archived before they are deleted (when there is an archive), and no more of them kept than
        # the caps allow (controller/capping.py).
        self.archiver = archiver
        self.finished = FinishedIndex(view)
        self.capper = Capper(view, self.finished, events, self.leading, now, max_finished_jobs, self._delete_capped)
        # The Workers' status (assignments, stops, removals, state): one batched writer per worker.
        self.worker_status = WorkerStatusWriter(kube, view, now, self.leading,
                                                landed=lambda obj: self.on_worker_object("update", obj),
                                                done=self._worker_written)

    # --- informer callbacks ---------------------------------------------------------------------------------
    def on_job(self, kind: str, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        if kind == "delete":
            self.view.delete_job(obj)
            self.expectations.forget(key)
            if self.started.is_set():
                self._unassign_all(key)
        else:
            before = self.view.jobs.get(key)
            record = self.view.upsert_job(obj)
            if self.finished.observe(key, before, record):
                self.capper.kick()
            if self.archiver is not None and not record.unfinished \
                    and (before is None or before.version != record.version):
                self.archiver.offer(obj)  # its record while the whole object is at hand (dropped when too many wait)
            echo = self.expectations.saw_job(key, version_of(obj))
            if not echo and key not in self._acting:
                # A change not of our making: into line at once. The echo of our own write (or a change that comes
                # while the job is reconciled) gets a look only, whose `request` puts a runnable job in line.
                self.slots.line_up(key)
        self._touch(key)

    def on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        job = self.view.delete_pod(obj) if kind == "delete" else self.view.upsert_pod(obj)
        attempt = attempt_of(obj)
        if attempt is not None:
            self.expectations.saw_pod((obj["metadata"].get("namespace", ""), attempt[0]), attempt[1])
        if job is not None:
            self._touch(job)

    def on_lease(self, kind: str, obj: dict[str, Any]) -> None:
        job = self.view.delete_lease(obj) if kind == "delete" else self.view.upsert_lease(obj)
        if job is not None and self.started.is_set():
            self.queue.add(job)

    def on_queue(self, kind: str, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        self.queue_status.on_queue(kind, obj)
        self.capper.on_queue(kind, obj)
        if kind == "delete":
            self.view.queues.pop(key, None)
        else:  # an unreadable spec raises: the informer reports it; the last readable one stays in force
            spec = read_spec(QueueSpec, obj)
            if self.view.queues.get(key) == spec:
                return  # only its status changed (our own numbers): nothing for its jobs
            self.view.queues[key] = spec
        for job in list(self.view.unfinished_by_queue.get(key, ())):
            self.slots.line_up(job)
            self._touch(job)
        if kind != "delete" and self.started.is_set():
            self.slots.pump(key)
            for job_key, _ in self.view.jobs_of_queue(key):  # retention may have changed (rare: a scan is fine)
                self.schedule_retention(job_key)

    def on_handler(self, kind: str, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        if kind == "delete":
            self.view.handlers.pop(key, None)
        else:
            self.view.handlers[key] = read_spec(HandlerSpec, obj)
        for job in list(self.view.unfinished_by_handler.get(key, ())):
            self.slots.line_up(job)
            self._touch(job)

    def _touch(self, key: Key) -> None:
        """A job or its pods changed: tell the slots, and reconcile it (once the view is complete)."""
        self.slots.update(key)
        if self.started.is_set():
            self.queue.add(key)

    # --- running --------------------------------------------------------------------------------------------
    async def run(self, synced: list[asyncio.Event]) -> None:
        """Wait for every informer's first list, then reconcile everything and keep going."""
        await self.runtime.run(synced, start=self._start)

    def _start(self) -> None:
        self.view.compact()  # before anything lasting is made per job (retention wake-ups)
        # The finished index filed each job's name as the list delivered it: filed again from the compacted view, it
        # shares the view's names instead of keeping a second, scattered copy of each alive.
        self.finished.heaps.clear()
        for key in list(self.view.jobs):
            self.finished.observe(key, None, self.view.jobs[key])
        self.resync()
        for ns, workers in list(self.view.workers.items()):
            for name in list(workers):
                self._schedule_worker((ns, name))
        self.queue_status.start()
        log.info("view complete: %d jobs, %d queues, %d handlers", len(self.view.jobs), len(self.view.queues),
                 len(self.view.handlers))

    def resync(self) -> None:
        """Start from the whole view: at start, and when this replica becomes the leader. A job that fails here is
        reconciled (and so reported, and retried with its backoff) instead of stopping the others."""
        self.slots.drop_reservations(keep=self._acting)
        for key in list(self.view.jobs):  # slots first: nothing is admitted before every holder is counted
            try:
                self.slots.update(key, pump=False)
                self.slots.line_up(key)
            except Exception:  # noqa: BLE001
                log.exception("job %s/%s: cannot line it up", *key)
                self.queue.add(key)
        for ns, workers in list(self.view.workers.items()):  # assignments of jobs that are gone; each state
            for name, believed in list(workers.items()):
                for a in believed.assignments:
                    record = self.view.jobs.get((ns, a.job))
                    if record is None or record.uid != a.uid:
                        self._unassign((ns, a.job), a.sequence)
                self.worker_status.sync((ns, name))
        for key in list(self.view.jobs):  # keys only: no 100k pairs made among the wake-ups set here
            record = self.view.jobs.get(key)
            if record is None:
                continue
            try:
                needs_look = self._needs_look(key, record)
                if not needs_look:
                    self.schedule_retention(key)
            except Exception:  # noqa: BLE001
                needs_look = True
            if needs_look:
                self.queue.add(key)

    def _needs_look(self, key: Key, record: LiveJob | FinishedJob) -> bool:
        """A finished job whose spec was already seen needs nothing at start (100k of them must be cheap)."""
        return isinstance(record, LiveJob) or self.view.has_strays(key, record)

    def _report(self, key: Key, event: T.Event) -> None:
        record = self.view.jobs.get(key)
        if record is not None:
            self.events.record(event_object(key, record), event)

    async def reconcile(self, key: Key) -> None:
        self._acting.add(key)
        try:
            await self._reconcile(key)
        finally:
            self._acting.discard(key)
            # Whatever the path (acted, refused, conflict, error, deposed): a slot or worker reserved for the job,
            # by this reconcile or a pump (by a standby, say), is given back; its pod or status holds it now. Without
            # a grant there is nothing to derive again: every change to the job or its pods reached the slots already.
            if self.slots.release(key):
                self.slots.update(key)

    async def _reconcile(self, key: Key) -> None:
        if not self.expectations.satisfied(key):
            return  # our last write is not in the view yet: its watch event brings the next look
        record = self.view.jobs.get(key)
        if isinstance(record, FinishedJob):
            if not self.view.has_strays(key, record):
                # Settled: the lifecycle rules have nothing left to decide (T.reconcile would change nothing);
                # only retention runs.
                self.slots.withdraw(key)
                self.timers.schedule(key, await self._retain(key, self.now()), self.queue.add)
                return
            record = await self._full(key, record)
        try:
            job = self.view.snapshot(record) if record is not None else None
        except InvalidJob as exc:
            return await self._hold_invalid(key, record, str(exc))
        if job is None:
            self.slots.forget(key)
            self.timers.schedule(key, None, self.queue.add)
            return
        now = self.now()
        obs = self.view.observations(key, job, now)
        decision = before = valid_again(T.reconcile(job, obs, now), now, job.generation)
        queue = (key[0], job.spec.queue)
        admissible = decision.wants_admission and obs.queue and obs.handler and not obs.alive_attempts
        waiting_since = None
        if admissible:
            granted = self.slots.request(key, queue, job.spec.priority, parse_time(decision.status.queued_at) or now)
            worker = self.slots.worker_of(key) if obs.handler.on_workers else None
            if granted and (worker is not None or not obs.handler.on_workers):
                snapshot = replace(job, status=decision.status)
                started = T.admit(snapshot, obs, now, worker=worker)
                started.events[:0] = decision.events
                # A job first seen now is not written queued while its pod starts, or while its assignment lands and
                # runs its first second (then 3 writes in all, 2 for a job that ends within that second).
                decision, waiting_since = started, now
            elif not granted:
                # In line for a slot: a job first seen now is not written queued if a slot comes soon (the take
                # is then its first write: create, take, finish).
                waiting_since = parse_time(decision.status.queued_at) or now
        else:
            self.slots.withdraw(key)
        decision = writes.scheduled(job, decision, obs, now, self.record_queued_after, waiting_since)
        retry = False
        try:
            applied = await self._apply(key, record, job, decision)
        except _PodNotCreated as exc:
            # Refused (quota, admission, a template the API server rejects) or its name taken by someone else's pod:
            # record what was decided without the slot (a new job is queued all the same), saying why, and try again
            # soon.
            decision, retry = T.pod_not_created(before, str(exc), now, job.generation), True
            applied = await self._apply(key, record, job, decision)
        wake = decision.wake_at
        if retry:
            wake = earliest(wake, now + RETRY_AFTER_ERROR)
        if applied and decision.status.state in FINISHED:
            wake = earliest(wake, await self._retain(key, now))
        self.timers.schedule(key, wake, self.queue.add)

    async def _hold_invalid(self, key: Key, record: LiveJob, message: str) -> None:
        """A job the lifecycle cannot read is never run: it holds (state unchanged, no slot, no wake-up) with the
        condition Invalid naming the fields, and a Warning Event when that is new. Only status.conditions is
        written, by a merge patch guarded by the resourceVersion, since the rest of the status may be unreadable."""
        self.slots.forget(key)
        self.timers.schedule(key, None, self.queue.add)
        raw = record.raw
        conditions = invalid_conditions(record.status.get("conditions"), message, self.now(),
                                        raw["metadata"].get("generation"))
        if conditions is None:
            return
        log.warning("job %s/%s is invalid and does not run: %s", *key, message)
        body = {"metadata": {"resourceVersion": record.resource_version}, "status": {"conditions": conditions}}
        try:
            updated = await self.kube.merge_patch(contract.jobs_path(*key, "status"), body, retry=False)
        except (NotFound, Conflict):
            return  # gone, or changed meanwhile: the watch brings another look
        self._report(key, T.Event("Invalid", f"the job does not run: {message}", "Warning"))
        self._expect_status(key, version_of(updated), record.state)

    async def _full(self, key: Key, record: FinishedJob) -> LiveJob | None:
        """The whole job behind a finished job's record (a status write needs all of it); None when it is gone."""
        try:
            full = await self.kube.get(contract.jobs_path(*key))
        except NotFound:
            return None  # the watch brings the delete
        if full["metadata"].get("resourceVersion") != record.resource_version:
            self.queue.add(key)  # it changed meanwhile: judge the newer version on the next look
        return live_record(full, None, 0)

    async def _apply(self, key: Key, record: LiveJob, job: T.JobSnapshot, decision: T.Decision) -> bool:
        """Act on a decision; False when it could not be recorded (a conflict: the watch brings another look)."""
        ns = key[0]
        for action in decision.actions:
            if isinstance(action, T.CreatePod):
                if why := await self._create_pod(key, record, job, action):
                    raise _PodNotCreated(why)
                self.slots.started(key, self.now())
            if isinstance(action, T.Assign):
                self.slots.started(key, self._assign(key, job, action))
        if decision.status != job.status:
            if not await self._write_status(key, record, decision.status):
                return False
            metrics.record_transition(ns, job.spec, job.status, decision.status, self.now())
        for event in decision.events:
            self.events.record(record.raw, event)
        for action in decision.actions:
            if isinstance(action, T.DeletePod):
                try:
                    await self.kube.delete(contract.pods_path(ns, action.name), action.grace_seconds)
                except NotFound:
                    pass  # gone already
            elif isinstance(action, T.StopAssignment):
                self.worker_status.stop((ns, action.worker), key, job.uid, action.sequence, action.reason,
                                        action.requested_at, action.grace_seconds)
            elif isinstance(action, T.Unassign):
                self._unassign(key, action.sequence)
        return True

    async def _write_status(self, key: Key, record: LiveJob, status: JobStatus) -> bool:
        """Write the job's status at the version the view shows; the write is then expected from the watch."""
        # The answer is the metadata alone, but its managedFields name every key of the payload: as heavy, nearly.
        async with self._write_budget.hold(record.payload_bytes or 0):
            updated = await self.kube.replace_status(contract.jobs_path(*key),
                                                     {"apiVersion": API_VERSION, "kind": "Job", **record.raw},
                                                     status.model_dump(by_alias=True, mode="json", exclude_none=True))
        if updated is None:
            return False
        self._expect_status(key, version_of(updated), status.state)
        return True

    def _expect_status(self, key: Key, version: int, state: State | None) -> None:
        """Our status write landed as `version`: awaited from the watch, unless the view shows it already (the watch
        and the write's answer race)."""
        record = self.view.jobs.get(key)
        if record is not None and record.version < version:
            self.expectations.wrote_status(key, version, state)
