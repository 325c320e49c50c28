"""The worker (docs/workers.md): its Worker object (registration.py), the watch of that one object (its
assignments, in status), one Execution per assignment, results batched into its spec (results.py), stops, the fence
and the drain. Everything runs on one event loop; sync SDK functions in a thread pool of --concurrency threads.

An assignment runs once, and only for the incarnation it names when that is this process's current one. The job is
read (GET) for its payload, again while the API server fails to answer; a job that is gone or has another uid is
reported NotFound without running. An
assignment that leaves status while its handler runs (the operator recorded the attempt otherwise: the worker
expired, was taken over) is stopped and reported nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from .. import sdk
from ..kube.client import ApiError, Kube, NotFound
from ..kube.clock import utcnow
from ..kube.informer import Informer
from ..lifecycle import attempts as A
from ..lifecycle.workers import DEFAULT_LEASE_DURATION
from ..resources import contract
from ..resources.common import parse_duration, parse_time
from ..resources.handler import HandlerSpec
from ..resources.job import job_id
from ..resources.queue import QueueSpec
from ..resources.worker import Assignment
from ..runner.env import attempt_variables, scheduled_at_of
from ..runner.execution import CommandWork, Ended, Execution, FunctionWork, Work
from ..runner.process import GroupReaper
from .metrics import WorkerMetrics
from .environment import command_environment
from .plan import Served, serving
from .registration import Offer, Registration, workers_path
from .results import NOT_FOUND, Key, Results, key_of, progress_of, result_of
from .settings import Settings

log = logging.getLogger("sextant.worker")

LOST = "Lost"  # the attempt is no longer this worker's: stopped, and reported nothing
# Seconds a drain waits for its assignments to leave status (their results recorded).
DRAIN_LEAVE_WAIT = float(contract.PROTOCOL["drainLeaveWaitSeconds"])
DRAIN_POLL = 0.05
READ_RETRY_FIRST, READ_RETRY_MAX = 0.2, 2.0  # seconds between reads of a job the API server did not give
# Assignments that left status, remembered so that one seen again (a stale status) never runs twice: the most recent
# this many (bounded, as a worker runs for months).
REMEMBERED = contract.PROTOCOL["rememberedAssignments"]


@dataclass
class Running:
    """One assignment this worker runs now."""

    assignment: Assignment
    seen_at: float  # monotonic: when the worker first saw it (its timeout counts from here)
    execution: Execution | None = None
    stop: tuple[str, float | None] | None = None  # a stop asked before the execution exists: (reason, grace)
    timer: asyncio.TimerHandle | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)


def _specs(kind: type[QueueSpec] | type[HandlerSpec], obj: dict[str, Any]) -> Any:
    try:
        return kind.model_validate(obj.get("spec") or {})
    except ValidationError as exc:
        log.warning("%s %s cannot be read: %s", kind.__name__, obj["metadata"].get("name"), exc)
        return None


def read_assignments(status: Any) -> dict[Key, Assignment]:
    """status.assignments by (uid, sequence, incarnation); an entry that cannot be read is skipped."""
    found: dict[Key, Assignment] = {}
    items = status.get("assignments") if isinstance(status, dict) else None
    for item in items if isinstance(items, list) else ():
        try:
            assignment = Assignment.model_validate(item)
        except ValidationError as exc:
            log.warning("an assignment cannot be read (%s): %.200r", exc.errors()[0].get("msg"), item)
            continue
        found[key_of(assignment)] = assignment
    return found


def timeout_after(assignment: Assignment) -> float | None:
    """Seconds from assignment to timeout, both by the operator's clock: applied from when the worker saw it, so a
    skewed worker clock neither kills live attempts nor lets them run on."""
    try:
        due, assigned = parse_time(assignment.timeout_at), parse_time(assignment.assigned_at)
    except ValueError:
        return None
    if due is None or assigned is None:
        return None
    return max(0.0, (due - assigned).total_seconds())


class Worker:
    def __init__(self, kube: Kube, settings: Settings, functions: dict[str, Callable[..., Any]],
                 queues: dict[str, QueueSpec], handlers: dict[str, HandlerSpec],
                 jobs_client: Callable[[], Any], metrics: WorkerMetrics | None = None,
                 now: Callable[[], datetime] = utcnow, owner: dict[str, str] | None = None,
                 user: str | None = None, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.settings, self.functions, self.now = kube, settings, functions, now
        self.monotonic = monotonic
        self.namespace, self.name = settings.namespace, settings.name
        self.queues, self.handlers = dict(queues), dict(handlers)
        self.served = self._serving()
        self.jobs_client = jobs_client
        self.metrics = metrics
        self.results = Results()
        self.assigned: dict[Key, Assignment] = {}  # status.assignments, as last seen
        self.running: dict[Key, Running] = {}
        # Started (or reported without running), in order: each assignment runs once.
        self.handled: OrderedDict[Key, None] = OrderedDict()
        self.tasks: set[asyncio.Task[None]] = set()
        self.lingering = 0  # handlers given up on whose threads run on: slots not offered
        self.draining = False
        self.executor = ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="handler")
        self.reaper: GroupReaper | None = None  # for its commands' process groups (runner/process.py)
        # The latest progress of each running attempt that reported some: sent with the next write.
        self.progress: dict[Key, dict[str, Any]] = {}
        self.registration = Registration(kube, self.namespace, self.name, self.offer, self.results.to_write,
                                         self._lost, owner, user, now, monotonic,
                                         progress=lambda: list(self.progress.values()))
        self.informers = [
            Informer(kube, contract.queues_path(self.namespace), self._on_queue, name="queues"),
            Informer(kube, contract.handlers_path(self.namespace), self._on_handler, name="handlers"),
            Informer(kube, workers_path(self.namespace), self._on_worker,
                     field_selector=f"metadata.name={self.name}", name="its Worker"),
        ]
        self._hurry = asyncio.Event()
        self._status_changed = asyncio.Event()
        self._drained = asyncio.Event()
        self._drain_task: asyncio.Task[None] | None = None

    @property
    def incarnation(self) -> str:
        return self.registration.incarnation

    @property
    def holder(self) -> str:
        return self.registration.holder

    # --- what it offers ------------------------------------------------------------------------------------
    def _serving(self) -> Served:
        return serving(self.queues, self.handlers, self.functions, self.settings.want_queues,
                       self.settings.want_handlers, self.settings.allow_commands)

    def offer(self) -> Offer:
        durations = [parse_duration(q.lease_duration) for name, q in self.queues.items() if name in self.served.queues]
        return Offer(queues=self.served.queues, handlers=self.served.handlers,
                     slots=max(0, self.settings.concurrency - self.lingering),
                     lease_duration=min(durations, default=DEFAULT_LEASE_DURATION), draining=self.draining)

    def slots(self) -> tuple[int, int]:
        return len(self.running), self.settings.concurrency

    def _reconsider(self) -> None:
        served = self._serving()
        before = self.offer()
        if served.refused - self.served.refused:
            self._say_refused(served.refused - self.served.refused)
        self.served = served
        if self.offer() != before:
            log.info("worker %s now serves queues %s, handlers %s", self.name, ",".join(sorted(served.queues)),
                     ",".join(sorted(served.handlers)))
            self.registration.changed()

    def _say_refused(self, names: frozenset[str]) -> None:
        """Command handlers it will not serve, named once as they appear (their jobs wait for another worker)."""
        log.warning("worker %s does not serve the command handlers %s: it runs a Handler's command only when told "
                    "to (--allow-commands, or --allow-command NAME); their jobs wait (Blocked, NoWorker) for a "
                    "worker that does", self.name, ", ".join(sorted(names)))

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

    # --- its assignments -----------------------------------------------------------------------------------
    def _on_worker(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "delete":
            self.registration.changed()  # its next write meets the 404, and registers again
            return
        self.registration.seen((obj.get("spec") or {}).get("incarnation"))
        if self.registration.taken_over.is_set():
            return
        current = read_assignments(obj.get("status"))
        self.assigned = current
        self.results.keep(current)
        for key, running in list(self.running.items()):
            if key not in current:  # recorded without this worker's word: it may run elsewhere now
                self._stop(running, LOST, self._fence_grace(running))
        for key, assignment in current.items():
            running = self.running.get(key)
            if running is not None:
                running.assignment = assignment
                if assignment.stop:
                    self._stop(running, assignment.stop, assignment.cancel_grace_seconds)
            elif key not in self.handled and assignment.incarnation == self.incarnation:
                self.handled[key] = None
                self._start(key, assignment)
        while len(self.handled) > REMEMBERED:
            self.handled.popitem(last=False)
        self._status_changed.set()

    def _start(self, key: Key, assignment: Assignment) -> None:
        if self.draining:  # assigned before the operator saw the drain: reported without running
            self._report(key, result_of(assignment, Ended(None, "the worker was draining"), A.DRAINED, None, self.now()))
            return
        running = Running(assignment, self.monotonic())
        self.running[key] = running
        task = asyncio.ensure_future(self._attempt(key, running))
        self.tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("worker %s: an attempt failed unexpectedly", self.name, exc_info=task.exception())

    def _stop(self, running: Running, reason: str, grace: float | None = None) -> None:
        if running.execution is not None:
            if running.execution.stop_reason is None:
                log.info("job %s: stopping attempt #%d (%s)", running.assignment.job, running.assignment.sequence,
                         reason)
            running.execution.stop(reason, self.now(), grace)
        elif running.stop is None:
            running.stop = (reason, grace)

    def _fence_grace(self, running: Running) -> float:
        """SIGTERM to SIGKILL for an attempt that is no longer this worker's: the queue's cancelGrace, at most a
        sixth of the leaseDuration (it may run elsewhere soon)."""
        grace = running.execution.cancel_grace if running.execution is not None else 0.0
        return min(grace, self.offer().lease_seconds / 6)

    async def _job(self, running: Running) -> dict[str, Any] | Ended | None:
        """The job, for its payload; None when it is gone or is another job of the same name (another uid). A read
        that fails otherwise (an outage, a 429) says nothing about the job: it is tried again until it answers or the
        attempt is stopped (the worker fenced, a cancel, its timeout), and then it is an Ended that ran nothing.
        Reporting it NotFound would burn a counted attempt on the API server's trouble."""
        assignment = running.assignment
        pause = READ_RETRY_FIRST
        while True:
            try:
                raw = await self.kube.get(contract.jobs_path(self.namespace, assignment.job))
            except NotFound:
                return None
            except ApiError as exc:
                if running.stop is not None:
                    return Ended(None, f"stopped before the job could be read: {exc}")
                log.warning("job %s: cannot read it (trying again in %.1f s): %s", assignment.job, pause, exc)
                await asyncio.sleep(pause)
                pause = min(READ_RETRY_MAX, pause * 2)
                continue
            return raw if (raw.get("metadata") or {}).get("uid") == assignment.uid else None

    def _work(self, raw: dict[str, Any], assignment: Assignment) -> Work | Ended:
        """How to run the job's handler here; Ended when it cannot run here at all."""
        label = f"[{assignment.job}#{assignment.sequence}]"
        payload = (raw.get("spec") or {}).get("payload") or {}
        command = self.served.how(assignment.handler)
        if command is not None:
            queue = self.queues.get(assignment.queue) or QueueSpec()
            variables = {**attempt_variables(
                job_name=assignment.job, job_uid=assignment.uid, namespace=self.namespace, queue=assignment.queue,
                handler=assignment.handler, attempt=assignment.attempt, sequence=assignment.sequence,
                scheduled_at=scheduled_at_of(raw), payload=payload, lease_name=self.name,
                lease_duration=queue.lease_duration, cancel_grace=queue.cancel_grace,
                heartbeat=False),  # the worker's own renewals cover it
                "SEXTANT_NODE_NAME": self.name, "SEXTANT_POD_NAME": os.environ.get("POD_NAME") or self.name,
                "SEXTANT_WORKER": self.holder}
            # Never the worker's whole environment (its Secrets, KUBECONFIG): docs/workers.md.
            env = command_environment(os.environ, dict(self.settings.command_env), variables)
            if self.reaper is None:
                self.reaper = GroupReaper()
            work = CommandWork(list(command), env, payload, label, self.reaper)
            work.on_progress = self._progress_of(assignment)
            return work
        fn = self.functions.get(assignment.handler) if assignment.handler in self.served.functions else None
        if fn is None and assignment.handler in self.served.refused:  # assigned as its Handler became a command
            return Ended(1, f"worker {self.name} does not run Handler {assignment.handler!r}: it is a command, and "
                            "this worker runs a Handler's command only when told to (--allow-commands or "
                            f"--allow-command {assignment.handler}); retried on a worker that does")
        if fn is None:
            return Ended(1, f"worker {self.name} does not serve handler {assignment.handler!r} (any more): its "
                            "Handler is not a worker-mode one this worker can run")
        sdk_job = sdk.Job(id=job_id(assignment.job), name=assignment.job, namespace=self.namespace,
                          queue=assignment.queue, handler=assignment.handler, attempt=assignment.attempt,
                          payload=payload, scheduled_at=scheduled_at_of(raw))
        from ..runner.chaining import Jobs

        ctx = sdk.Context(jobs=Jobs(self.jobs_client, self.namespace), on_progress=self._progress_of(assignment))
        return FunctionWork(fn, sdk_job, ctx, self.executor, label)

    def _progress_of(self, assignment: Assignment) -> Callable[[float, str | None], None]:
        """Keeps an attempt's latest progress for the next write (called from a handler's thread too: one dict
        assignment, no loop call)."""
        key = key_of(assignment)

        def report(fraction: float, message: str | None) -> None:
            if key in self.running:
                self.progress[key] = progress_of(assignment, fraction, message)
        return report

    def _cancel_grace(self, assignment: Assignment) -> float:
        if assignment.cancel_grace_seconds is not None:
            return max(0.0, assignment.cancel_grace_seconds)
        queue = self.queues.get(assignment.queue) or QueueSpec()
        return parse_duration(queue.cancel_grace).total_seconds()

    async def _attempt(self, key: Key, running: Running) -> None:
        assignment = running.assignment
        try:
            raw = await self._job(running)
            if running.stop is not None and running.stop[0] == LOST:
                return self._refused(assignment, "no longer this worker's")
            if raw is None:
                gone = Ended(None, "the job is gone, or is another job of the same name")
                return self._report(key, result_of(assignment, gone, NOT_FOUND, None, self.now()))
            work = raw if isinstance(raw, Ended) else self._work(raw, assignment)
            execution = Execution(work if not isinstance(work, Ended) else _Done(work), self._cancel_grace(assignment))
            running.execution = execution
            if running.stop is not None:
                execution.stop(running.stop[0], self.now(), running.stop[1])
            elif assignment.stop:
                execution.stop(assignment.stop, self.now(), assignment.cancel_grace_seconds)
            self._arm_timeout(running)
            started = self.now()
            if self.metrics is not None and execution.stop_reason is None:
                assigned = parse_time(assignment.assigned_at)
                if assigned is not None:
                    self.metrics.claim_to_start.labels(self.name).observe(max(0.0, (started - assigned).total_seconds()))
            try:
                ended = await execution.run()
            except Exception as exc:  # noqa: BLE001 - a fault of the worker's own: still a result, never a hang
                log.error("job %s: attempt #%d failed in the worker", assignment.job, assignment.sequence,
                          exc_info=exc)
                ended = Ended(1, f"the worker could not run it: {type(exc).__name__}: {exc}")
            if execution.lingering:
                self._linger(execution)
            reason = execution.stop_reason
            if reason == LOST:
                return self._refused(assignment, "stopped: no longer this worker's")
            result = result_of(assignment, ended, reason, started if execution.task is not None else None,
                               self.now())
            if self.metrics is not None:
                self.metrics.attempts.labels(self.name, assignment.queue, assignment.handler,
                                             _result_label(ended, reason)).inc()
            self._report(key, result)
        finally:
            if running.timer is not None:
                running.timer.cancel()
            self.progress.pop(key, None)
            if self.running.get(key) is running:
                del self.running[key]
            running.ended.set()

    def _arm_timeout(self, running: Running) -> None:
        after = timeout_after(running.assignment)
        if after is None:
            return
        delay = max(0.0, after - (self.monotonic() - running.seen_at))
        running.timer = asyncio.get_running_loop().call_later(delay, self._stop, running, A.TIMEOUT)

    def _report(self, key: Key, result: dict[str, Any]) -> None:
        """A result to write: in the next spec write (at once when none is in flight)."""
        if key not in self.assigned:
            self._refused_key(key, "its assignment has left status meanwhile")
            return
        self.results.add(key, result)
        self.registration.changed()

    def _refused(self, assignment: Assignment, why: str) -> None:
        self._refused_key(key_of(assignment), why)

    def _refused_key(self, key: Key, why: str) -> None:
        log.info("attempt %s#%d (%s) not reported (%s)", key[0], key[1], key[2], why)
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

    # --- losing its attempts, draining ---------------------------------------------------------------------
    def _lost(self, why: str) -> None:
        """Fenced, or its object deleted: every running attempt is no longer its own. Stopped (SIGKILL within a
        sixth of the leaseDuration), reported nothing; results of attempts that ended before stay."""
        for running in list(self.running.values()):
            self._stop(running, LOST, self._fence_grace(running))

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
        deadline = loop.time() + self.settings.drain_grace
        while self.running and not self._hurry.is_set() and loop.time() < deadline:
            try:
                await asyncio.wait_for(self._hurry.wait(), DRAIN_POLL)
            except asyncio.TimeoutError:
                pass
        for running in list(self.running.values()):
            self._stop(running, A.DRAINED)
        await self._settle()
        # Until its results are recorded (their assignments leave status), briefly: then its object goes.
        leave_by = loop.time() + DRAIN_LEAVE_WAIT
        while self._mine_assigned() and loop.time() < leave_by:
            self._status_changed.clear()
            try:
                await asyncio.wait_for(self._status_changed.wait(), max(0.0, leave_by - loop.time()))
            except asyncio.TimeoutError:
                pass
        self._drained.set()

    def _mine_assigned(self) -> bool:
        return any(key[2] in self.registration.incarnations for key in self.assigned)

    async def _settle(self) -> None:
        """Wait for every attempt to end (each is bounded by its cancelGrace and a kill)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    async def run(self) -> int:
        """Register, serve until drained (0) or taken over (1). ApiError when it cannot register at start."""
        if self.served.commands:  # ready before the first command: a SIGKILL right after it starts is covered
            self.reaper = GroupReaper()
        await self.registration.register()
        log.info("worker %s (%s) serves queues %s, handlers %s with %d slots", self.name, self.holder,
                 ",".join(sorted(self.served.queues)) or "-", ",".join(sorted(self.served.handlers)) or "-",
                 self.settings.concurrency)
        if self.served.refused:
            self._say_refused(self.served.refused)
        background = [asyncio.create_task(i.run(), name=f"informer {i.name}") for i in self.informers]
        renewing = asyncio.create_task(self.registration.run(), name="renewals")
        drained = asyncio.create_task(self._drained.wait())
        taken = asyncio.create_task(self.registration.taken_over.wait())
        code = 0
        try:
            done, _ = await asyncio.wait([*background, renewing, drained, taken], return_when=asyncio.FIRST_COMPLETED)
            for task in done & {*background, renewing}:
                task.result()  # a crash: raise it
            if taken in done:
                code = 1
                self._lost("taken over")
                await self._settle()
        finally:
            for task in [*background, renewing, drained, taken]:
                task.cancel()
            await asyncio.gather(*background, renewing, drained, taken, return_exceptions=True)
            if code == 0 and self._drained.is_set():
                await self.registration.delete()
            self.executor.shutdown(wait=False, cancel_futures=True)
            if self.reaper is not None:
                self.reaper.close()
        return code


def _result_label(ended: Ended, reason: str | None) -> str:
    """The metric's result, as the worker saw the attempt end (the operator's rules record it on the job)."""
    if reason == A.CANCELLED:
        return "cancelled"
    return "succeeded" if ended.exit_code == 0 and reason is None else "failed"


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

