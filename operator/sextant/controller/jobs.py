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

from ..kube.clock import utcnow
from ..lifecycle import idempotency, retention
from ..kube import metrics
from ..lifecycle import transitions as T
from ..lifecycle import workers as W
from ..lifecycle.states import FINISHED
from ..resources import API_VERSION, contract
from ..resources.job import PAYLOAD_ENV_MAX_BYTES, JobStatus
from ..resources.queue import QueueSpec
from ..resources.worker import FINALIZER, Assignment
from ..lifecycle.states import State
from ..resources.common import format_time, parse_duration, parse_time
from ..kube.events import EventRecorder
from ..kube.informer import Key, key_of
from ..lifecycle.reading import COND_INVALID, invalid_conditions, read_spec
from ..kube.budget import ByteBudget
from ..kube.client import ApiError, Conflict, Kube, NotFound
from .pods import build_pod, controller_uid
from .queuestatus import QueueStatusWriter
from .workerstatus import WorkerStatusWriter
from .slots import Slots
from .timers import Timers
from ..lifecycle.reading import InvalidJob, payload_left_out
from .view import View, WorkerChange, is_slim, settled, state_of
from .runtime import Runtime

log = logging.getLogger(__name__)

RETRY_AFTER_ERROR = timedelta(seconds=5)  # a pod that could not be created: try again this soon


def _worker_ref(worker: W.Believed) -> dict[str, Any]:
    """A Worker as an Event's involved object."""
    return {"apiVersion": API_VERSION, "kind": "Worker",
            "metadata": {"namespace": worker.namespace, "name": worker.name, "uid": worker.uid}}


def _earliest(*moments: datetime | None) -> datetime | None:
    present = [m for m in moments if m is not None]
    return min(present) if present else None


# Payload bytes whose status writes may be in flight at once: eight 256 KiB payloads (each write's answer decodes to
# ~2.9 MiB); a job with a payload of a few KiB weighs next to nothing, so ordinary writes never wait (kube/budget.py).
WRITE_PAYLOAD_BUDGET = 2 * 1024 * 1024


class _PodNotCreated(Exception):
    """The attempt's pod could not be created: nothing of the admission is recorded. Its message says why."""


class JobController:
    def __init__(self, kube: Kube, view: View, events: EventRecorder, timers: Timers, *,
                 workers: int, pending_pods: int, record_queued_after: timedelta = T.RECORD_QUEUED_AFTER,
                 now: Callable[[], datetime] = utcnow) -> None:
        self.kube = kube
        self.record_queued_after = record_queued_after
        self.view = view
        self.events = events
        self.now = now
        self.timers = timers
        self.runtime = Runtime("job", self.reconcile, workers=workers, log=log, report=lambda key, message: self._report(
            key, T.Event("ReconcileFailed", f"the operator failed to reconcile this job: {message}", "Warning")))
        self.queue, self.started = self.runtime.queue, self.runtime.started
        self.leading = self.runtime.leading  # only the leader reconciles; set at once without leader election
        # Admission: who holds a slot, who is next; pending_pods per queue limits pods waiting for a node while the
        # scheduler is behind (0: no limit). A job it grants a slot is reconciled to act on it.
        self.slots = Slots(view, timers, now, pending_limit=pending_pods or None, granted=self.queue.add,
                           active=lambda: self.started.is_set() and self.leading.is_set())
        self._acting: set[Key] = set()  # jobs being reconciled now: their reservations are theirs to give back
        self._tasks: set[asyncio.Task[None]] = set()  # Worker checks and finalizer releases under way
        self._write_budget = ByteBudget(WRITE_PAYLOAD_BUDGET)
        # The Queues' status (their live numbers): the leader writes it, through the same fenced client.
        self.queue_status = QueueStatusWriter(kube, view, timers, now, self.leading, rate=self.slots.rate)
        # The Workers' status (assignments, stops, removals, state): one batched writer per worker.
        self.worker_status = WorkerStatusWriter(kube, view, now, self.leading,
                                                landed=lambda obj: self.on_worker_object("update", obj),
                                                done=self._worker_written)

    # --- informer callbacks ---------------------------------------------------------------------------------
    def on_job(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "delete":
            key = self.view.delete_job(obj)
            if self.started.is_set():
                self._unassign_all(key)
        elif self.view.has_version(obj):
            # The echo of our own write: its response is in the view and the slots already (`_store`); only the
            # look at it is due (the status written changes what the job's observations are, e.g. its lease).
            if self.started.is_set():
                self.queue.add(key_of(obj))
            return
        elif self.view.upsert_job(obj):
            key = key_of(obj)
            self.slots.line_up(key)
        else:
            return
        self._touch(key)

    def _store(self, raw: dict[str, Any]) -> None:
        """Our own write's response: into the view (unless the watch already brought newer), and to the slots. Its
        watch event then finds it there and only asks for a look (whose `request` puts a runnable job in line)."""
        if self.view.upsert_job(raw):
            self.slots.update(key_of(raw))

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
                raw = self.view.jobs.get(job)
                if raw is not None and (raw.get("spec") or {}).get("queue") == queue and \
                        state_of(raw) != State.RUNNING:
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

    def on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        job = self.view.delete_pod(obj) if kind == "delete" else self.view.upsert_pod(obj)
        if job is not None:
            self._touch(job)

    def on_lease(self, kind: str, obj: dict[str, Any]) -> None:
        job = self.view.delete_lease(obj) if kind == "delete" else self.view.upsert_lease(obj)
        if job is not None and self.started.is_set():
            self.queue.add(job)

    def on_queue(self, kind: str, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        self.queue_status.on_queue(kind, obj)
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
            for job_key, raw in self.view.jobs.items():  # retention may have changed (rare: a scan is fine)
                if job_key[0] == key[0] and (raw.get("spec") or {}).get("queue") == key[1]:
                    self.schedule_retention(job_key)

    def on_handler(self, kind: str, obj: dict[str, Any]) -> None:
        from ..resources.handler import HandlerSpec

        key = key_of(obj)
        if kind == "delete":
            self.view.handlers.pop(key, None)
        else:
            self.view.handlers[key] = read_spec(HandlerSpec, obj)
        for job in list(self.view.unfinished_by_handler.get(key, ())):
            self.slots.line_up(job)
            self._touch(job)

    def _unassign_all(self, key: Key, uid: str | None = None) -> None:
        """The job is gone (or is another one of that name): no assignment of the one before is wanted."""
        for sequence, placed in list(self.view.assignments_of(key).items()):
            if uid is None or placed.assignment.uid != uid:
                self._unassign(key, sequence)
        pending = self.view.pending.get(key)
        if pending is not None and (uid is None or pending.assignment.uid != uid):
            self.worker_status.remove((key[0], pending.worker), key, pending.assignment.uid,
                                      pending.assignment.sequence)

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
                    raw = self.view.jobs.get((ns, a.job))
                    if raw is None or raw["metadata"].get("uid") != a.uid:
                        self._unassign((ns, a.job), a.sequence)
                self.worker_status.sync((ns, name))
        for key, raw in list(self.view.jobs.items()):
            try:
                needs_look = self._needs_look(raw, key)
                if not needs_look:
                    self.schedule_retention(key)
            except Exception:  # noqa: BLE001
                needs_look = True
            if needs_look:
                self.queue.add(key)

    def _needs_look(self, raw: dict[str, Any], key: Key) -> bool:
        """A finished job whose spec was already seen needs nothing at start (100k of them must be cheap)."""
        return not settled(raw) or self.view.has_strays(key, raw)

    def _report(self, key: Key, event: T.Event) -> None:
        raw = self.view.jobs.get(key)
        if raw is not None:
            self.events.record({"apiVersion": API_VERSION, "kind": "Job", **raw}, event)

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
        raw = self.view.jobs.get(key)
        if raw is not None and is_slim(raw):
            if not self.view.has_strays(key, raw):
                # Settled: the lifecycle rules have nothing left to decide (T.reconcile would change nothing);
                # only retention runs.
                self.slots.withdraw(key)
                self.timers.schedule(key, await self._retain(key, self.now()), self.queue.add)
                return
            raw = await self._full(key, raw)
        try:
            job = self.view.snapshot(key, raw) if raw is not None else None
        except InvalidJob as exc:
            return await self._hold_invalid(key, raw, str(exc))
        if job is None:
            self.slots.forget(key)
            self.timers.schedule(key, None, self.queue.add)
            return
        now = self.now()
        obs = self.view.observations(key, job, now)
        decision = before = T.reconcile(job, obs, now, self.record_queued_after)
        if any(c.type == COND_INVALID and c.status == "True" for c in decision.status.conditions):
            T.set_condition(decision.status, COND_INVALID, False, "Valid", "the job can be read", now, job.generation)
        queue = (key[0], job.spec.queue)
        admissible = decision.wants_admission and obs.queue and obs.handler and not obs.alive_pods
        if admissible:
            granted = self.slots.request(key, queue, job.spec.priority, parse_time(decision.status.queued_at) or now)
            worker = self.slots.worker_of(key) if obs.handler.on_workers else None
            if granted and (worker is not None or not obs.handler.on_workers):
                snapshot = replace(job, status=decision.status)
                started = T.admit(snapshot, obs, now, worker=worker)
                started.events[:0] = decision.events
                # A job first seen now is not written queued while its pod starts, or while its assignment lands and
                # runs its first second (then 3 writes in all, 2 for a job that ends within that second).
                decision = T.hold_first_write(job, started, now, now, self.record_queued_after)
            elif not granted:
                # In line for a slot: a job first seen now is not written queued if a slot comes soon (the take
                # is then its first write: create, take, finish).
                decision = T.hold_first_write(job, decision, parse_time(decision.status.queued_at) or now, now,
                                              self.record_queued_after)
        else:
            self.slots.withdraw(key)
        retry = False
        try:
            applied = await self._apply(key, raw, job, decision)
        except _PodNotCreated as exc:
            # Refused (quota, admission, a template the API server rejects) or its name taken by someone else's pod:
            # record what was decided without the slot (a new job is queued all the same), saying why, and try again
            # soon.
            decision, retry = T.pod_not_created(before, str(exc), now, job.generation), True
            applied = await self._apply(key, raw, job, decision)
        wake = decision.wake_at
        if retry:
            wake = _earliest(wake, now + RETRY_AFTER_ERROR)
        if applied and decision.status.state in FINISHED:
            wake = _earliest(wake, await self._retain(key, now))
        self.timers.schedule(key, wake, self.queue.add)

    async def _hold_invalid(self, key: Key, raw: dict[str, Any], message: str) -> None:
        """A job the lifecycle cannot read is never run: it holds (state unchanged, no slot, no wake-up) with the
        condition Invalid naming the fields, and a Warning Event when that is new. Only status.conditions is
        written, by a merge patch guarded by the resourceVersion, since the rest of the status may be unreadable."""
        self.slots.forget(key)
        self.timers.schedule(key, None, self.queue.add)
        status = raw.get("status") if isinstance(raw.get("status"), dict) else {}
        conditions = invalid_conditions(status.get("conditions"), message, self.now(), raw["metadata"].get("generation"))
        if conditions is None:
            return
        log.warning("job %s/%s is invalid and does not run: %s", *key, message)
        body = {"metadata": {"resourceVersion": raw["metadata"]["resourceVersion"]}, "status": {"conditions": conditions}}
        try:
            updated = await self.kube.merge_patch(contract.jobs_path(*key, "status"), body, retry=False)
        except (NotFound, Conflict):
            return  # gone, or changed meanwhile: the watch brings another look
        self._report(key, T.Event("Invalid", f"the job does not run: {message}", "Warning"))
        updated.setdefault("apiVersion", API_VERSION)
        self._store(updated)

    async def _full(self, key: Key, raw: dict[str, Any]) -> dict[str, Any] | None:
        """The whole object behind a slim view copy (a status write needs all of it); None when it is gone."""
        try:
            full = await self.kube.get(contract.jobs_path(*key))
        except NotFound:
            return None  # the watch brings the delete
        self._store(full)
        if full["metadata"].get("resourceVersion") != raw["metadata"]["resourceVersion"]:
            self.queue.add(key)  # it changed meanwhile: judge the newer version on the next look
        return full

    # --- retention ------------------------------------------------------------------------------------------
    def _expiry(self, key: Key, raw: dict[str, Any]) -> retention.Expiry:
        status, spec = raw.get("status") or {}, raw.get("spec") or {}
        queue = self.view.queues.get((key[0], spec.get("queue", "")))
        return retention.expiry(state_of(raw), status.get("finishedAt"),
                                queue.retention if queue else QueueSpec().retention, idempotency.claim_ends(raw, self.view.idempotency_window))

    async def _retain(self, key: Key, now: datetime) -> datetime | None:
        """Delete a finished job, or its pods, once its retention is over; else when to look again."""
        raw = self.view.jobs.get(key)
        if raw is None:
            return None
        due = self._expiry(key, raw)
        if due.job_at is not None and now >= due.job_at:
            meta = raw["metadata"]
            try:  # only the version we judged: a job retried meanwhile is not deleted
                await self.kube.delete(contract.jobs_path(*key), None, {"uid": meta["uid"],
                                                             "resourceVersion": meta["resourceVersion"]})
                metrics.JOBS_DELETED.labels(key[0], (raw.get("spec") or {}).get("queue", "")).inc()
            except (NotFound, Conflict):
                pass  # gone, or changed since it was judged: the watch brings another look
            return None
        pods = self.view.pods_of(key)  # never someone else's pod that merely carries the job's labels
        if due.pods_at is not None and pods:
            if now < due.pods_at:
                return _earliest(due.pods_at, due.job_at)
            for pod in list(pods.values()):
                if not pod.deleting:
                    try:
                        await self.kube.delete(contract.pods_path(key[0], pod.name))
                    except NotFound:
                        pass  # gone already
        return due.job_at

    def schedule_retention(self, key: Key) -> None:
        """A finished job that needs no reconcile still needs its retention wake-up (cheap: no parsing)."""
        raw = self.view.jobs.get(key)
        if raw is not None and state_of(raw) in FINISHED:
            due = self._expiry(key, raw)
            when = due.job_at if not self.view.pods_of(key) else _earliest(due.pods_at, due.job_at)
            self.timers.schedule(key, when, self.queue.add)

    async def _apply(self, key: Key, raw: dict[str, Any], job: T.JobSnapshot, decision: T.Decision) -> bool:
        """Act on a decision; False when it could not be recorded (a conflict: the watch brings another look)."""
        ns = key[0]
        for action in decision.actions:
            if isinstance(action, T.CreatePod):
                if why := await self._create_pod(key, raw, job, action):
                    raise _PodNotCreated(why)
                self.slots.started(key, self.now())
            if isinstance(action, T.Assign):
                self.slots.started(key, self._assign(key, job, action))
        if decision.status != job.status:
            if not await self._write_status(key, raw, decision.status):
                return False
            metrics.record_transition(ns, job.spec, job.status, decision.status, self.now())
        for event in decision.events:
            self.events.record(raw, event)
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

    async def _create_pod(self, key: Key, raw: dict[str, Any], job: T.JobSnapshot, action: T.CreatePod) -> str:
        """Create (or adopt) the attempt's pod; "" when it exists now, else why not."""
        ns = key[0]
        handler = self.view.handlers.get((ns, job.spec.handler))
        queue = self.view.queues.get((ns, job.spec.queue))
        if handler is None or queue is None:
            return "its Queue or Handler is gone"
        left_out = payload_left_out(raw)
        if not handler.heartbeat and left_out is not None and left_out <= PAYLOAD_ENV_MAX_BYTES:
            # A pod without the runner gets a small payload in SEXTANT_PAYLOAD, and the view keeps none: read it.
            # (The runner of any other pod reads it from the Job itself: runner/payload.py.)
            payload = await self._payload(key, job)
            if payload is None:
                return "the job is gone (deleted, or created again under its name)"
            job = replace(job, spec=job.spec.model_copy(update={"payload": payload}))
        try:
            pod = build_pod(raw, job, handler, queue, action)
            created = await self.kube.create_as_sent(contract.pods_path(ns), pod)
        except Conflict:
            created = await self.kube.get(contract.pods_path(ns, action.name))
            if controller_uid(created) != job.uid:
                # Not ours (no controller ownerReference to this job): never adopted. The attempt waits until its name
                # is free again, and says why.
                message = (f"pod {action.name} exists but is not this job's (its controller ownerReference is not "
                           f"this Job); attempt {action.attempt} starts once that pod is gone")
                log.warning("job %s/%s: %s", ns, key[1], message)
                self.events.record(raw, T.Event("PodNameTaken", message, "Warning"))
                return message
            # Ours (from before a crash, or a create whose answer was lost): adopt it. It may have run meanwhile, and
            # its watch events then bring nothing new to the view: judge the pod as it is on the next look.
            self.queue.add(key)
        except ApiError as exc:
            log.warning("job %s/%s: cannot create pod %s: %s", ns, key[1], action.name, exc)
            self.events.record(raw, T.Event("PodCreateFailed", exc.message or str(exc), "Warning"))
            return f"cannot create pod {action.name}: {exc.message or exc}"
        self.view.upsert_pod(created)
        return ""

    async def _payload(self, key: Key, job: T.JobSnapshot) -> dict[str, Any] | None:
        """The job's payload, from the API server (immutable: any version of this job has it); None when the job
        of that name is gone or another one."""
        try:
            full = await self.kube.get(contract.jobs_path(*key))
        except NotFound:
            return None
        if full["metadata"].get("uid") != job.uid:
            return None
        payload = (full.get("spec") or {}).get("payload") or {}
        return payload if isinstance(payload, dict) else {}

    async def _write_status(self, key: Key, raw: dict[str, Any], status: JobStatus) -> bool:
        # The answer is the metadata alone, but its managedFields name every key of the payload: as heavy, nearly.
        async with self._write_budget.hold(payload_left_out(raw) or 0):
            updated = await self.kube.replace_status(contract.jobs_path(*key),
                                                     {"apiVersion": API_VERSION, "kind": "Job", **raw},
                                                     status.model_dump(by_alias=True, mode="json", exclude_none=True))
        if updated is None:
            return False
        updated.setdefault("apiVersion", API_VERSION)
        self._store(updated)
        return True
