"""The schedule reconciler: the pure rules of lifecycle/schedule.py, fed by the Schedule informer and the jobs of
the one View (its index on the label sextant.dev/schedule), woken by the operator's one timer heap (a key per
schedule, at its next fire time), run on the shared controller runtime, acting through kube/client.py.

Order of writes, so that a crash between any two is repaired by the next evaluation: Replace's cancels, then
the tick's job (its name is derived from the tick: a second create answers AlreadyExists, never a second
job), then the Schedule's status (evaluatedUntil moves past the tick), then the history deletes (only of
ticks the stored status already covers, so a deleted job can never make its tick look unfired).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from ..kube import metrics
from ..kube.client import ApiError, Conflict, Kube, NotFound
from ..kube.clock import utcnow
from ..lifecycle import schedule as S
from ..lifecycle.decision import Event
from ..resources import API_VERSION, contract
from ..resources.common import time_or_none
from ..resources.schedule import KIND, ScheduleSpec, ScheduleStatus
from ..kube.events import EventRecorder
from ..kube.informer import Key, key_of
from .runtime import Runtime
from .archiving import Archiver
from .timers import Timers
from .expectations import TIMEOUT
from .records import JobRecord, LiveJob
from .versions import Versions
from .view import View

log = logging.getLogger(__name__)

RETRY_AFTER_ERROR = timedelta(seconds=5)
# A status change that only concerns `active` rides along with the next tick's write when that is this close.
COALESCE_ACTIVE = timedelta(seconds=2)
NAME_GENERATIONS = 4  # names tried per tick when another object already holds the derived one


def _rv(obj: dict[str, Any]) -> int:
    value = obj["metadata"].get("resourceVersion", "")
    return int(value) if value.isdigit() else 0


def _ref(name: str, record: JobRecord) -> S.JobRef:
    """What the schedule reads of one of its jobs."""
    if isinstance(record, LiveJob):
        return S.JobRef.of(record.raw)
    return S.JobRef(name=name, state=record.state, scheduled_at=time_or_none(record.tick), created_at=record.created_at,
                    resource_version=record.resource_version, uid=record.uid, idempotency_key=record.idempotency_key)


def _version(ref: S.JobRef) -> int:
    return int(ref.resource_version) if ref.resource_version.isdigit() else 0


class ScheduleController:
    def __init__(self, kube: Kube, view: View, events: EventRecorder, timers: Timers, *,
                 now: Callable[[], datetime] = utcnow, workers: int = 16, archiver: Archiver | None = None) -> None:
        self.kube = kube
        self.archiver = archiver  # a finished job past the history limits is archived before it is deleted
        self.view = view
        self.events = events
        self.timers = timers
        self.now = now
        self.runtime = Runtime("schedule", self.reconcile, workers=workers, log=log, report=lambda key, message:
                               self._report(key, Event("EvaluationFailed", "the operator failed to evaluate this "
                                                                           f"schedule: {message}", "Warning")))
        self.queue, self.started = self.runtime.queue, self.runtime.started
        self.leading = self.runtime.leading  # only the leader fires; set at once without leader election
        self.online_since: datetime | None = None
        self.schedules: dict[Key, dict[str, Any]] = {}
        self._schedule_versions = Versions()
        # The jobs we created or patched and the view does not show yet, per schedule: name → (when, its answer).
        # The next evaluation counts them (their answers are not stored in the view: its writer is the informers).
        self._written: dict[Key, dict[str, tuple[datetime, S.JobRef]]] = {}
        view.on_schedule_jobs = self._on_jobs

    # --- informer callbacks ---------------------------------------------------------------------------------
    def on_schedule(self, kind: str, obj: dict[str, Any]) -> None:
        """A malformed object raises: the informer isolates it (logged, counted, reported, tried again later)."""
        key = key_of(obj)
        if kind == "delete":
            self._schedule_versions.forget(key, _rv(obj))
            self.schedules.pop(key, None)
        elif self._schedule_versions.newer(key, _rv(obj)):
            if self.schedules.get(key, {}).get("metadata", {}).get("resourceVersion") == \
                    obj["metadata"].get("resourceVersion"):
                return  # our own write, already stored from its response
            obj.setdefault("apiVersion", API_VERSION)
            obj.setdefault("kind", KIND)
            self.schedules[key] = obj
        else:
            return
        self._wake(key)

    def _on_jobs(self, key: Key, name: str) -> None:
        """The view says one of the schedule's jobs appeared, went, finished or runs again: look again, unless it is
        the job we wrote as we wrote it (the evaluation that wrote it counted it already)."""
        written = self._written.get(key, {}).get(name)
        record = self.view.jobs.get((key[0], name))
        if written is None or record is None or written[1].finished != (not record.unfinished):
            self._wake(key)

    def _wake(self, key: Key) -> None:
        if self.started.is_set():
            self.queue.add(key)

    def _expect(self, job: dict[str, Any]) -> None:
        """A job we created or patched: counted by the next evaluations until the view shows it."""
        ref = S.JobRef.of(job)
        schedule = (job["metadata"].get("labels") or {}).get(S.LABEL_SCHEDULE)
        if schedule:
            self._written.setdefault((job["metadata"].get("namespace", ""), schedule), {})[ref.name] = (self.now(), ref)

    def _timer_key(self, key: Key) -> tuple[str, str, str]:
        return ("schedule", key[0], key[1])

    def _on_timer(self, timer_key: Any) -> None:
        self.queue.add((timer_key[1], timer_key[2]))

    # --- running --------------------------------------------------------------------------------------------
    async def run(self, synced: list[asyncio.Event]) -> None:
        """Wait for the informers' first lists (schedules and jobs), then evaluate every schedule and keep going."""
        await self.runtime.run(synced, start=self._start)

    def _start(self) -> None:
        self.online_since = self.now()  # fire times before this passed while no operator was watching
        for key in list(self.schedules):
            self.queue.add(key)
        log.info("schedules: view complete: %d schedules, %d with jobs; online since %s", len(self.schedules),
                 len(self.view.by_schedule), S.format_tick(self.online_since))

    def resume(self) -> None:
        """This replica has become the leader: fire times before now passed while it was not acting (missed runs
        unless the previous leader fired them), and every schedule is evaluated afresh."""
        self.online_since = self.now()
        for key in list(self.schedules):
            self.queue.add(key)

    def jobs_of(self, key: Key) -> list[S.JobRef]:
        """The schedule's jobs as the view shows them, and those we wrote that it does not show yet."""
        refs = {name: _ref(name, record) for name, record in self.view.jobs_of_schedule(key)}
        written = self._written.get(key, {})
        for name, (at, ref) in list(written.items()):
            seen = refs.get(name)
            if (seen is not None and _version(seen) >= _version(ref)) or self.now() - at >= TIMEOUT:
                del written[name]
            else:
                refs[name] = ref
        if not written:
            self._written.pop(key, None)
        return list(refs.values())

    def _report(self, key: Key, event: Event) -> None:
        raw = self.schedules.get(key)
        if raw is not None:
            self.events.record(raw, event)

    def snapshot(self, key: Key) -> S.ScheduleSnapshot | S.InvalidSchedule | None:
        raw = self.schedules.get(key)
        if raw is None:
            return None
        meta = raw["metadata"]
        try:
            spec = ScheduleSpec.model_validate(raw.get("spec") or {})
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            return S.InvalidSchedule("InvalidSpec", f"the spec cannot be read: {problems}")
        try:
            status = ScheduleStatus.model_validate(raw.get("status") or {})
        except ValidationError:
            status = ScheduleStatus()  # ours to write: start it afresh
        return S.ScheduleSnapshot(namespace=key[0], name=key[1], uid=meta.get("uid", ""),
                                  generation=meta.get("generation", 1),
                                  created_at=time_or_none(meta.get("creationTimestamp")) or self.now(),
                                  spec=spec, status=status)

    async def reconcile(self, key: Key) -> None:
        snapshot = self.snapshot(key)
        timer = self._timer_key(key)
        if snapshot is None:
            self.timers.schedule(timer, None, self._on_timer)
            return
        raw = self.schedules[key]
        now = self.now()
        jobs = self.jobs_of(key)
        if isinstance(snapshot, S.InvalidSchedule):
            try:
                status = ScheduleStatus.model_validate(raw.get("status") or {})
            except ValidationError:
                status = ScheduleStatus()
            decision = S.invalid(status, raw["metadata"].get("generation", 1), snapshot.reason, snapshot.message,
                                 now, jobs)
            stored = status
        else:
            decision = S.evaluate(snapshot, jobs, now, self.online_since or now)
            stored = snapshot.status

        if log.isEnabledFor(logging.DEBUG):
            log.debug("schedule %s/%s at %s: create %s, cancel %s, delete %s, events %s, wake %s, status %s", *key,
                      now, [S.format_tick(f.tick) for f in decision.create], decision.cancel, decision.delete,
                      [e.message for e in decision.events], decision.wake_at,
                      decision.status.model_dump(exclude={"conditions"}))
        for name, reason in decision.cancel:
            if not await self._request_cancel(key[0], name, reason):
                return self._retry(timer)
        for fire in decision.create:
            if not await self._create(key, raw, fire, now):
                return self._retry(timer)

        written = True
        if decision.status != stored and not self._can_wait(stored, decision, now):
            written = await self._write_status(key, raw, decision.status)
        if written:  # else the next evaluation (the watch brings the newer Schedule) decides and reports again
            for event in decision.events:
                self.events.record(raw, event)
            for name in decision.delete:
                await self._delete_job(key, name)
        self.timers.schedule(timer, decision.wake_at, self._on_timer)

    def _retry(self, timer: Any) -> None:
        self.timers.schedule(timer, self.now() + RETRY_AFTER_ERROR, self._on_timer)

    @staticmethod
    def _can_wait(stored: ScheduleStatus, decision: S.Decision, now: datetime) -> bool:
        """Only `active` changed and the next tick writes the status soon anyway: one write instead of two."""
        if decision.wake_at is None or decision.wake_at - now > COALESCE_ACTIVE or decision.create:
            return False
        return decision.status.model_copy(update={"active": stored.active}) == stored

    async def _create(self, key: Key, schedule: dict[str, Any], fire: S.Fire, evaluated: datetime) -> bool:
        """Create the tick's job; True once it exists (made now, or before: AlreadyExists is that tick fired)."""
        body = fire.job
        namespace = key[0]
        for generation in range(NAME_GENERATIONS):
            if generation:
                body = {**body, "metadata": {**body["metadata"],
                                             "name": S.job_name(namespace, key[1], fire.tick, generation)}}
            name = body["metadata"]["name"]
            try:
                created = await self.kube.create(contract.jobs_path(namespace), body)
            except Conflict:
                try:
                    existing = await self.kube.get(contract.jobs_path(namespace, name))
                except NotFound:  # it existed a moment ago and was deleted: the tick fired all the same
                    log.info("schedule %s/%s: tick %s already fired (job %s since deleted)", *key,
                             S.format_tick(fire.tick), name)
                    return True
                ref = S.JobRef.of(existing)
                label = (existing["metadata"].get("labels") or {}).get(S.LABEL_SCHEDULE)
                if label == key[1] and ref.scheduled_at == fire.tick:
                    log.info("schedule %s/%s: tick %s already fired as job %s", *key, S.format_tick(fire.tick), name)
                    self._expect(existing)
                    return True
                continue  # another object holds the derived name: the next generation's name
            except ApiError as exc:
                log.warning("schedule %s/%s: cannot create job %s for tick %s: %s", *key, name,
                            S.format_tick(fire.tick), exc)
                self.events.record(schedule, Event("JobCreateFailed", exc.message or str(exc), "Warning"))
                return False
            lag = (self.now() - fire.due).total_seconds()
            metrics.SCHEDULE_FIRE_LAG.labels(namespace, key[1]).observe(max(lag, 0.0))
            log.info("schedule %s/%s: tick %s fired as job %s, lag %.4f s (evaluated at +%.4f s)", *key,
                     S.format_tick(fire.tick), name, lag, (evaluated - fire.due).total_seconds())
            self._expect(created)
            return True
        log.error("schedule %s/%s: no free name for tick %s", *key, S.format_tick(fire.tick))
        return False

    async def _request_cancel(self, namespace: str, name: str, reason: str) -> bool:
        """Replace: ask the operator's job lifecycle to cancel the job, through status.cancelRequested (never its
        spec), guarded by the job's resourceVersion so that no concurrent status write is lost."""
        record = self.view.jobs.get((namespace, name))
        version = record.resource_version if record is not None else ""
        for _ in range(5):
            body: dict[str, Any] = {"status": {"cancelRequested": reason}}
            if version:
                body["metadata"] = {"resourceVersion": version}
            try:
                updated = await self.kube.merge_patch(contract.jobs_path(namespace, name, "status"), body, retry=False)
            except NotFound:
                return True  # gone: nothing to replace
            except Conflict:
                try:
                    current = await self.kube.get(contract.jobs_path(namespace, name))
                except NotFound:
                    return True
                fresh = S.JobRef.of(current)
                if fresh.finished or fresh.cancel_requested:
                    return True
                version = fresh.resource_version
                continue
            except ApiError as exc:
                log.warning("job %s/%s: cannot request cancel: %s", namespace, name, exc)
                return False
            self._expect(updated)
            return True
        return False

    async def _write_status(self, key: Key, raw: dict[str, Any], status: ScheduleStatus) -> bool:
        updated = await self.kube.replace_status(contract.schedules_path(*key),
                                                 {"apiVersion": API_VERSION, "kind": KIND, **raw},
                                                 status.model_dump(by_alias=True, mode="json", exclude_none=True))
        if updated is None:
            return False
        updated.setdefault("apiVersion", API_VERSION)
        updated.setdefault("kind", KIND)
        if self._schedule_versions.newer(key, _rv(updated)):
            self.schedules[key] = updated
        return True

    async def _delete_job(self, key: Key, name: str) -> None:
        record = self.view.jobs.get((key[0], name))
        uid = record.uid if record is not None else None
        preconditions = {"uid": uid} if uid else None
        if self.archiver is not None and record is not None and uid:
            if not self.archiver.landed(uid, record.version):
                # Its record first (controller/archiving.py); its landing brings this schedule another look.
                self.archiver.request((key[0], name), uid, record.version)
                return
            preconditions = {"uid": uid, "resourceVersion": record.resource_version}  # the version archived
        self._written.get(key, {}).pop(name, None)
        try:  # the uid guards against deleting a newer job that took the name meanwhile
            await self.kube.delete(contract.jobs_path(key[0], name), preconditions=preconditions)
        except (NotFound, Conflict):
            pass  # gone already, or a newer job holds the name
        except ApiError as exc:
            log.warning("schedule %s/%s: cannot delete old job %s: %s", *key, name, exc)
