"""Slots' rate limits (controller/slots.py): each rate-limited queue's window of starts, noted at each grant and derived
from the jobs' pods, assignments and timelines as they are seen, so that a restarted operator counts the starts of
its predecessor. What may start within it is lifecycle/admission.take's decision."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from ..kube.informer import Key
from ..lifecycle.admission import Limits, Line, StartLog, started_attempts
from ..resources.queue import QueueSpec
from .records import JobRecord, LiveJob
from .timers import Timers
from .view import View


class RateWindows:
    """The part of Slots that keeps the rate-limited queues' windows (state made in Slots.__init__)."""

    view: View
    timers: Timers
    now: Callable[[], datetime]
    _lines: dict[Key, Line]
    _limits: dict[Key, tuple[QueueSpec, Limits]]
    _starts: dict[Key, StartLog]

    pump: Callable[[Key], None]

    def rate(self, queue: Key) -> tuple[int, bool] | None:
        """A rate-limited queue's starts in its window now, and whether jobs wait for it (RateLimited); None
        without a rate limit."""
        spec = self.view.queues.get(queue)
        if spec is None or spec.rate_limit is None:
            return None
        starts = self._start_log(queue, self._limits_of(queue, spec))
        if starts is None:
            return None
        starts.prune(self.now())
        return len(starts), len(starts) >= spec.rate_limit.starts and bool(self._lines.get(queue))

    def _note_starts(self, job: Key, record: JobRecord, starts: StartLog) -> None:
        """The starts of job's attempts its objects show, into its rate-limited queue's window (only those not
        counted yet are read)."""
        now = self.now()
        assigned = [(sequence, placed.assignment.assigned_at) for sequence, placed in self.view.assignments_of(job).items()]
        pending = self.view.pending.get(job)
        if pending is not None:
            assigned.append((pending.assignment.sequence, pending.assignment.assigned_at))
        pods = [(pod.sequence, pod.created_at) for pod in self.view.pods_of(job).values()]
        raw, last = (record.raw, None) if isinstance(record, LiveJob) else ({}, (record.sequence, record.finished_at))
        for sequence, at in started_attempts(raw, pods, assigned, lambda sequence: starts.wanted(job, sequence), last):
            starts.note(job, sequence, at, now)

    def started(self, job: Key, at: datetime) -> None:
        """The reconcile acting on job's grant made its pod or its assignment at `at`: the start its queue's rate
        limit counts, from then (not from the reconcile's end: a slow status write after it would move it later)."""
        for starts in self._starts.values():
            starts.settle(job, at)

    def _rate_wake(self, timer: Any) -> None:
        """A rate-limited queue's window has room again."""
        self.pump((timer[1], timer[2]))

    def _limits_of(self, queue: Key, spec: QueueSpec) -> Limits:
        cached = self._limits.get(queue)
        if cached is not None and cached[0] is spec:
            return cached[1]
        limits = Limits.of(spec)
        self._limits[queue] = (spec, limits)
        return limits

    def _start_log(self, queue: Key, limits: Limits) -> StartLog | None:
        """The rate-limited queue's window of starts. Made when the queue gets its rate limit (or the operator
        starts): from every job of the queue in the view, once; then kept up to date as grants are made and jobs
        are seen."""
        if limits.per is None:
            self._starts.pop(queue, None)
            return None
        starts = self._starts.get(queue)
        if starts is not None:
            starts.per = limits.per
            return starts
        starts = self._starts[queue] = StartLog(limits.per)
        for job, record in self.view.jobs_of_queue(queue):
            self._note_starts(job, record, starts)
        return starts
