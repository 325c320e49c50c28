"""Recording an attempt's end (docs/workers.md §4): the job's new status comes from the lifecycle's own rules
(`lifecycle.transitions.reconcile`) fed with what the worker observed, in the shape of a pod observation, so the
timeline entry, the backoff, failed/dead/succeeded and the conditions are exactly those of pod mode.

The status is written with one PUT at the resourceVersion read. On a conflict the job is read again and the
result written again only while this process still holds the attempt (running, the same sequence number, its own
<name>/<incarnation> in the last timeline entry); otherwise it is refused, never recorded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ..lifecycle.reading import read_job
from ..kube.client import ApiError, Kube, NotFound
from ..lifecycle import attempts as A
from ..lifecycle.states import RUNNING
from ..lifecycle.transitions import Decision, Event, JobSnapshot, Observations, reconcile
from ..resources import API_VERSION, contract
from ..resources.handler import HandlerSpec
from ..resources.queue import QueueSpec
from .assignments import owns

log = logging.getLogger("sextant.worker")

# Why the worker itself stops a handler whose job it still holds, and then records: the lifecycle's stop reasons,
# and its drain. (A handler stopped because the job is no longer this worker's is not recorded at all.)
RECORDED_STOPS = frozenset({A.CANCELLED, A.TIMEOUT, A.DRAINED})
WRITE_ATTEMPTS = 8  # conflicts in a row before giving up (each means another writer moved the job meanwhile)
RETRY_FOR_SECONDS = 60.0  # an unreachable API server: how long a result keeps being retried


@dataclass(frozen=True)
class Report:
    """What the worker saw of one attempt: the handler's exit, and whether and why the worker stopped it."""

    sequence: int
    exit_code: int | None
    message: str | None = None
    stop_reason: str | None = None  # Cancelled, Timeout or Drained: the worker stopped the handler
    stopped_at: datetime | None = None

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0 and self.stop_reason is None


Specs = tuple[QueueSpec | None, HandlerSpec | None]


def running(worker: str, sequence: int) -> A.PodObservation:
    """The attempt as the worker sees it while the handler runs."""
    return A.PodObservation(name=worker, sequence=sequence, phase="Running", node=worker)


def finished(worker: str, report: Report) -> A.PodObservation:
    """The attempt as the worker saw it end: a pod observation, so outcome_of reads it as it reads a pod."""
    return A.PodObservation(name=worker, sequence=report.sequence,
                            phase="Succeeded" if report.succeeded else "Failed",
                            node=worker, exit_code=report.exit_code,
                            reason=A.DRAINED if report.stop_reason == A.DRAINED else None,
                            message=report.message if not report.succeeded else None)


def stop_wanted(job: JobSnapshot, specs: Specs, worker: str, now: datetime) -> tuple[str | None, datetime | None]:
    """Should the handler of the job's running attempt stop now, and if not, when to look again: the lifecycle's
    rules with the attempt still running — a stop the operator wrote, a cancel asked for in the spec, or the
    queue's timeout reached (the worker applies it itself, also while the operator is away)."""
    queue, handler = specs
    decision = reconcile(job, Observations(queue, handler, pods=(running(worker, job.status.sequence),)), now)
    status = decision.status
    if status.state == RUNNING and status.stop_reason is not None:
        return status.stop_reason, None
    return None, decision.wake_at


def compute(raw: dict[str, Any], worker: str, holder: str, report: Report, specs: Specs,
            now: datetime) -> Decision | None:
    """The job's new status with this attempt recorded; None when this process no longer holds the attempt (the
    result is refused) or the job cannot be read."""
    if not owns(raw, worker, holder, report.sequence):
        return None
    job = read_job(raw)
    queue, handler = specs
    if report.stop_reason in (A.CANCELLED, A.TIMEOUT) and job.status.stop_reason is None and report.stopped_at:
        # The worker stopped the handler by the rules (a cancel in the spec, the timeout) before the operator wrote
        # the stop: apply the same rules as of that moment, so the outcome reads as it would in pod mode.
        stopping = reconcile(job, Observations(queue, handler, pods=(running(worker, report.sequence),)),
                             report.stopped_at)
        job = replace(job, status=stopping.status)
    return reconcile(job, Observations(queue, handler, pods=(finished(worker, report),)), now)


class Recorder:
    """Writes attempts' results; refused ones are logged (and counted by the worker's metrics), never recorded."""

    def __init__(self, kube: Kube, namespace: str, worker: str, holder: str, specs: Callable[[str, str], Specs],
                 now: Callable[[], datetime], on_event: Callable[[dict[str, Any], Event], None] | None = None) -> None:
        self.kube, self.namespace, self.worker, self.holder = kube, namespace, worker, holder
        self.specs, self.now, self.on_event = specs, now, on_event

    async def record(self, raw: dict[str, Any], report: Report) -> Decision | None:
        """Record the attempt at raw's version (re-read on conflict). The decision written, or None if refused."""
        name = raw["metadata"]["name"]
        path = contract.jobs_path(self.namespace, name)
        delay, deadline = 0.1, asyncio.get_running_loop().time() + RETRY_FOR_SECONDS
        conflicts = 0
        while conflicts < WRITE_ATTEMPTS:
            spec = raw.get("spec") or {}
            decision = compute(raw, self.worker, self.holder, report, self.specs(spec.get("queue", ""),
                                                                                 spec.get("handler", "")), self.now())
            if decision is None:
                return self._refuse(name, report, "the job is no longer this worker's attempt")
            body = decision.status.model_dump(by_alias=True, mode="json", exclude_none=True)
            try:
                written = await self.kube.replace_status(path, {"apiVersion": API_VERSION, "kind": "Job", **raw}, body)
                if written is None:  # changed meanwhile (or gone): read it again and judge again
                    conflicts += 1
                    raw = await self.kube.get(path)
                    continue
            except NotFound:
                return self._refuse(name, report, "the job was deleted")
            except ApiError as exc:
                if asyncio.get_running_loop().time() >= deadline:
                    log.error("job %s: cannot record attempt #%d: %s", name, report.sequence, exc)
                    return None
                log.warning("job %s: cannot record attempt #%d yet: %s", name, report.sequence, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            if self.on_event is not None:
                for event in decision.events:
                    self.on_event({"apiVersion": API_VERSION, "kind": "Job", **written}, event)
            return decision
        return self._refuse(name, report, f"{WRITE_ATTEMPTS} conflicting writes in a row")

    def _refuse(self, name: str, report: Report, why: str) -> None:
        log.warning("job %s: the result of attempt #%d is refused: %s", name, report.sequence, why)
        return None
