"""The worker: registration, the watch of its jobs, one Execution per attempt, results, stops and the drain
(docs/workers.md). Everything runs on one event loop; sync SDK functions in a thread pool of --concurrency threads.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from .. import sdk
from ..kube.events import EventRecorder
from ..kube.informer import Informer
from ..lifecycle import attempts as A
from ..lifecycle.reading import job_scheduled_at, read_job
from ..kube.client import Kube
from ..kube.clock import utcnow
from ..lifecycle.workers import DEFAULT_LEASE_DURATION
from ..resources import contract
from ..resources.common import parse_duration
from ..resources.handler import HandlerSpec
from ..resources.job import job_id
from ..resources.queue import QueueSpec
from ..runner.env import attempt_variables
from . import assignments as S
from ..runner.execution import CommandWork, Ended, Execution, FunctionWork, Work
from .metrics import WorkerMetrics
from .plan import Served, serving
from .registration import Offer, Registration
from .results import RECORDED_STOPS, Recorder, Report, stop_wanted
from .settings import Settings

log = logging.getLogger("sextant.worker")

LOST = "Lost"  # the handler's job is no longer this worker's: stopped, and its result not recorded
DRAIN_SETTLE = 1.0  # seconds a drain waits for assignments already on their way, even when nothing runs
DRAIN_POLL = 0.05


@dataclass
class Running:
    """One attempt this worker runs now."""

    assignment: S.Assignment
    execution: Execution
    recording: bool = False
    timer: asyncio.TimerHandle | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)


def _specs(kind: type[QueueSpec] | type[HandlerSpec], obj: dict[str, Any]) -> Any:
    try:
        return kind.model_validate(obj.get("spec") or {})
    except ValidationError as exc:
        log.warning("%s %s cannot be read: %s", kind.__name__, obj["metadata"].get("name"), exc)
        return None


class Worker:
    def __init__(self, kube: Kube, settings: Settings, functions: dict[str, Callable[..., Any]],
                 queues: dict[str, QueueSpec], handlers: dict[str, HandlerSpec],
                 jobs_client: Callable[[], Any], metrics: WorkerMetrics | None = None,
                 now: Callable[[], datetime] = utcnow) -> None:
        self.kube, self.settings, self.functions, self.now = kube, settings, functions, now
        self.namespace, self.name = settings.namespace, settings.name
        self.incarnation = secrets.token_hex(4)
        self.holder = contract.holder_identity(self.name, self.incarnation)
        self.queues, self.handlers = dict(queues), dict(handlers)
        self.served = self._serving()
        self.jobs_client = jobs_client
        self.metrics = metrics
        self.latest: dict[str, dict[str, Any]] = {}  # job → the newest version seen of a job assigned to this worker
        self.running: dict[str, Running] = {}  # job → the attempt running here
        self.started: dict[str, int] = {}  # job → the sequence number last started here (an attempt starts once)
        self.tasks: set[asyncio.Task[None]] = set()
        self.lingering = 0  # handlers given up on whose threads run on: slots not offered
        self.draining = False
        self.drain_expired = False
        self.executor = ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="handler")
        self.registration = Registration(kube, self.namespace, self.name, self.holder, self.offer, now)
        self.events = EventRecorder(kube, now, enabled=settings.events, qps=5.0, burst=20, normal_qps=1.0,
                                    normal_burst=20, component="sextant-worker")
        self.recorder = Recorder(kube, self.namespace, self.name, self.holder, self.specs, now, self.events.record)
        self.informers = [
            Informer(kube, contract.queues_path(self.namespace), self._on_queue, name="queues"),
            Informer(kube, contract.handlers_path(self.namespace), self._on_handler, name="handlers"),
            S.watch(kube, self.namespace, self.name, self._on_job),
        ]
        self._hurry = asyncio.Event()
        self._drained = asyncio.Event()
        self._drain_task: asyncio.Task[None] | None = None

    # --- what it offers ------------------------------------------------------------------------------------
    def _serving(self) -> Served:
        return serving(self.queues, self.handlers, self.functions, self.settings.want_queues,
                       self.settings.want_handlers)

    def offer(self) -> Offer:
        durations = [parse_duration(q.lease_duration) for name, q in self.queues.items() if name in self.served.queues]
        return Offer(queues=self.served.queues, handlers=self.served.handlers,
                     slots=max(0, self.settings.concurrency - self.lingering),
                     lease_duration=min(durations, default=DEFAULT_LEASE_DURATION), draining=self.draining)

    def specs(self, queue: str, handler: str) -> tuple[QueueSpec | None, HandlerSpec | None]:
        return self.queues.get(queue), self.handlers.get(handler)

    def slots(self) -> tuple[int, int]:
        return len(self.running), self.settings.concurrency

    def _reconsider(self) -> None:
        served = self._serving()
        before = self.offer()
        self.served = served
        if self.offer() != before:
            log.info("worker %s now serves queues %s, handlers %s", self.name, ",".join(sorted(served.queues)),
                     ",".join(sorted(served.handlers)))
            self.registration.changed()

    def _on_queue(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        spec = _specs(QueueSpec, obj) if kind == "upsert" else None
        if spec is None:
            self.queues.pop(name, None)
        else:
            self.queues[name] = spec
        self._reconsider()

    def _on_handler(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        spec = _specs(HandlerSpec, obj) if kind == "upsert" else None
        if spec is None:
            self.handlers.pop(name, None)
        else:
            self.handlers[name] = spec
        self._reconsider()

    # --- its jobs ------------------------------------------------------------------------------------------
    def _on_job(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        current = self.running.get(name)
        if kind == "delete":  # deleted, or no longer assigned to this worker (the field selector let go of it)
            self.latest.pop(name, None)
            self.started.pop(name, None)
            if current is not None and not current.recording:
                current.execution.stop(LOST, self.now())
            return
        self.latest[name] = obj
        found = S.assignment(obj, self.name, self.holder)
        if (current is not None and (found is None or found.sequence != current.assignment.sequence)
                and not current.recording):
            current.execution.stop(LOST, self.now())
        if found is not None and found.sequence > self.started.get(name, 0):
            self.started[name] = found.sequence
            self._spawn(self._attempt(obj, found, current))
        elif current is not None and found is not None and found.sequence == current.assignment.sequence:
            self._check(name)

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("worker %s: an attempt failed unexpectedly", self.name, exc_info=task.exception())

    def _check(self, name: str) -> None:
        """Apply the lifecycle's rules to a running attempt: stop it (cancel, timeout, a stop the operator wrote),
        or look again when its timeout falls due."""
        current, raw = self.running.get(name), self.latest.get(name)
        if current is None or raw is None or current.recording:
            return
        if current.timer is not None:
            current.timer.cancel()
            current.timer = None
        job = read_job(raw)
        now = self.now()
        reason, wake = stop_wanted(job, self.specs(job.spec.queue, job.spec.handler), self.name, now)
        if reason is not None:
            log.info("job %s: stopping attempt #%d (%s)", name, current.assignment.sequence, reason)
            current.execution.stop(reason, now)
        elif wake is not None:
            delay = max(0.0, (wake - now).total_seconds())
            current.timer = asyncio.get_running_loop().call_later(delay + 0.001, self._check, name)

    def _work(self, raw: dict[str, Any], found: S.Assignment, job: Any) -> Work | Ended:
        """How to run the job's handler here; Ended when it cannot run here at all."""
        label = f"[{found.job}#{found.sequence}]"
        queue, handler = self.specs(found.queue, found.handler)
        command = self.served.how(found.handler)
        if command is not None:
            settings = queue or QueueSpec()
            env = {**os.environ, **attempt_variables(
                job_name=found.job, job_uid=raw["metadata"].get("uid", ""), namespace=self.namespace,
                queue=found.queue, handler=found.handler, attempt=found.attempt, sequence=found.sequence,
                scheduled_at=job_scheduled_at(job, raw), payload=job.spec.payload,
                lease_name=contract.worker_lease_name(self.name), lease_duration=settings.lease_duration,
                cancel_grace=settings.cancel_grace, heartbeat=False),  # the worker's Lease covers it
                "SEXTANT_NODE_NAME": self.name, "SEXTANT_POD_NAME": os.environ.get("POD_NAME") or self.name,
                "SEXTANT_WORKER": self.holder}
            return CommandWork(list(command), env, job.spec.payload, label)
        fn = self.functions.get(found.handler) if found.handler in self.served.functions else None
        if fn is None:
            return Ended(1, f"worker {self.name} does not serve handler {found.handler!r} (any more): its Handler "
                            "is not a worker-mode one this worker can run")
        sdk_job = sdk.Job(id=job_id(found.job), name=found.job, namespace=self.namespace, queue=found.queue,
                          handler=found.handler, attempt=found.attempt, payload=job.spec.payload,
                          scheduled_at=job_scheduled_at(job, raw))
        from ..runner.chaining import Jobs

        ctx = sdk.Context(jobs=Jobs(self.jobs_client, self.namespace))
        return FunctionWork(fn, sdk_job, ctx, self.executor, label)

    async def _attempt(self, raw: dict[str, Any], found: S.Assignment, previous: Running | None) -> None:
        name = found.job
        if previous is not None:  # never two attempts of one job at once: the earlier one is stopping
            await previous.ended.wait()
        job = read_job(raw)
        queue, _ = self.specs(found.queue, found.handler)
        grace = parse_duration((queue or QueueSpec()).cancel_grace).total_seconds()
        work = self._work(raw, found, job)
        execution = Execution(work if not isinstance(work, Ended) else _Done(work), grace)
        current = Running(found, execution)
        self.running[name] = current
        try:
            if self.drain_expired:
                execution.stop(A.DRAINED, self.now())
            self._check(name)
            if self.metrics is not None and found.started_at is not None and execution.stop_reason is None:
                self.metrics.claim_to_start.labels(self.name).observe(
                    max(0.0, (self.now() - found.started_at).total_seconds()))
            ended = await execution.run()
            if execution.lingering:
                self._linger(execution)
            current.recording = True
            if current.timer is not None:
                current.timer.cancel()
            reason = execution.stop_reason
            if reason is not None and reason not in RECORDED_STOPS:
                self._refuse(name, found.sequence, f"stopped: {reason}")
                return
            report = Report(found.sequence, ended.exit_code, ended.message, reason, execution.stopped_at)
            decision = await self.recorder.record(self.latest.get(name, raw), report)
            if decision is None:
                if self.metrics is not None:
                    self.metrics.refused.labels(self.name).inc()
            elif self.metrics is not None:
                entry = next((a for a in decision.status.attempts if a.sequence == found.sequence), None)
                if entry is not None:
                    self.metrics.attempts.labels(self.name, found.queue, found.handler, entry.result).inc()
        finally:
            if self.running.get(name) is current:
                del self.running[name]
            current.ended.set()

    def _refuse(self, name: str, sequence: int, why: str) -> None:
        log.info("job %s: attempt #%d not recorded (%s)", name, sequence, why)
        if self.metrics is not None:
            self.metrics.refused.labels(self.name).inc()

    def _linger(self, execution: Execution) -> None:
        """A handler given up on runs on in its thread: its slot is not offered until it returns."""
        self.lingering += 1
        self.registration.changed()

        def returned(_: object) -> None:
            self.lingering -= 1
            self.registration.changed()

        assert execution.task is not None
        execution.task.add_done_callback(returned)

    # --- running and stopping ------------------------------------------------------------------------------
    def drain(self) -> None:
        """SIGTERM: take nothing new, let running handlers finish within the drain grace, then stop the rest.
        A second SIGTERM skips what is left of the grace."""
        if self._drain_task is None:
            self._drain_task = asyncio.ensure_future(self._drain())
        else:
            self._hurry.set()

    async def _drain(self) -> None:
        log.info("worker %s: draining (%d running; grace %gs)", self.name, len(self.running),
                 self.settings.drain_grace)
        self.draining = True
        self.registration.changed()
        loop = asyncio.get_running_loop()
        began = loop.time()
        deadline = began + self.settings.drain_grace
        # Jobs the operator assigned before it saw the draining mark may still be on their way: wait a moment for
        # them even when nothing runs, and run them within the same grace.
        settle = began + min(DRAIN_SETTLE, self.settings.drain_grace)
        while not self._hurry.is_set() and loop.time() < deadline and (self.running or loop.time() < settle):
            try:
                await asyncio.wait_for(self._hurry.wait(), DRAIN_POLL)
            except asyncio.TimeoutError:
                pass
        self.drain_expired = True
        now = self.now()
        for current in list(self.running.values()):
            current.execution.stop(A.DRAINED, now)
        await self._settle()
        self._drained.set()

    async def _settle(self) -> None:
        """Wait for every attempt to end and be recorded (each is bounded by its cancelGrace and a kill)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    def _fence(self) -> None:
        """The Lease is lost: stop every handler, SIGKILL (a command) halfway to when others may see the Lease
        expire if the queue's cancelGrace is longer, so that no attempt of this worker runs on once it may run
        elsewhere (the other half: for the kill to land, on a loaded machine)."""
        now, left = self.now(), max(0.0, self.registration.expires_in() / 2)
        for current in list(self.running.values()):
            current.execution.stop(LOST, now, min(current.execution.cancel_grace, left))

    async def run(self) -> int:
        """Register, serve until drained (0) or the Lease is lost (1)."""
        await self.registration.register()
        log.info("worker %s (%s) serves queues %s, handlers %s with %d slots", self.name, self.holder,
                    ",".join(sorted(self.served.queues)) or "-", ",".join(sorted(self.served.handlers)) or "-",
                    self.settings.concurrency)
        background = [asyncio.create_task(i.run(), name=f"informer {i.name}") for i in self.informers]
        background.append(asyncio.create_task(self.events.run(), name="events"))
        renewing = asyncio.create_task(self.registration.run(), name="lease")
        drained = asyncio.create_task(self._drained.wait())
        lost = asyncio.create_task(self.registration.lost.wait())
        code = 0
        try:
            done, _ = await asyncio.wait([*background, drained, lost], return_when=asyncio.FIRST_COMPLETED)
            for task in done & set(background):
                task.result()  # a crash: raise it
            if lost in done:
                code = 1
                self._fence()
                await self._settle()
        finally:
            for task in [*background, renewing, drained, lost]:
                task.cancel()
            await asyncio.gather(*background, renewing, drained, lost, return_exceptions=True)
            if code == 0:
                await self.registration.delete()
            self.executor.shutdown(wait=False, cancel_futures=True)
        return code


class _Done:
    """Work that is over before it starts (the worker cannot run this handler): its outcome at once."""

    def __init__(self, ended: Ended) -> None:
        self.ended = ended

    async def run(self) -> Ended:
        return self.ended

    def terminate(self) -> None:
        pass

    def kill(self) -> None:
        pass
