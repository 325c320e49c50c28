"""Each Worker's status, the operator's half of the worker protocol (docs/workers.md): one outbox per worker.

Everything the operator tells a worker — a new assignment, a stop, the removal of an assignment whose end is
recorded, what it believes of the worker (state, slots, busy) — goes through here. At most one write is in flight
per worker: one merge patch of /status carrying the whole assignment list (no resourceVersion: the worker writes only
spec, and only the leader writes status, one write at a time, so the list it sends is always built on the last one
it wrote). Whatever becomes ready while a write is in flight goes in the next one, sent as soon as that write
returns: under load one write serves many jobs.

An assignment is handed here on admission and is "on its way" (View.pending: it holds the job's queue slot and the
worker's slot, and is no starting attempt yet) until its write has landed; the response goes into the View (the
assignment is then the job's starting attempt) and the jobs concerned are looked at again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..kube.client import ApiError, Kube, NotFound, NotLeader
from ..kube.informer import Key
from ..lifecycle import workers as W
from ..resources import contract
from ..resources.common import Condition, format_time
from ..resources.worker import Assignment
from .records import Placed
from .view import View

log = logging.getLogger(__name__)

RETRY_AFTER = timedelta(seconds=1)  # a write that failed (not 404): the next one this soon, with what is pending
Attempt = tuple[str, int]  # (job uid, sequence)


@dataclass
class Outbox:
    """What one worker's next status write carries besides its current assignments."""

    adds: dict[Attempt, tuple[Key, Assignment]] = field(default_factory=dict)  # with its job
    stops: dict[Attempt, dict[str, Any]] = field(default_factory=dict)
    removes: dict[Attempt, Key] = field(default_factory=dict)  # with its job
    jobs: set[Key] = field(default_factory=set)  # to look at again once it has landed (or failed)
    summary: bool = False  # the worker's state, slots or busy may have changed

    def __bool__(self) -> bool:
        return bool(self.adds or self.stops or self.removes or self.summary)

    def merge(self, later: Outbox) -> None:
        """Put a failed write's content back before what came after it."""
        for attempt, added in later.adds.items():
            self.adds.setdefault(attempt, added)
        for attempt, stop in later.stops.items():
            self.stops.setdefault(attempt, stop)
        self.removes |= later.removes
        self.jobs |= later.jobs
        self.summary = self.summary or later.summary


def build_status(worker: W.Believed, box: Outbox, live: bool, now: datetime) -> dict[str, Any]:
    """The whole status to write: the worker's assignments with the outbox applied (stops set, removals gone, new
    ones appended), and the operator's word on it. Pure."""
    assignments = []
    for a in worker.assignments:
        attempt = (a.uid, a.sequence)
        if attempt in box.removes:
            continue
        stop = box.stops.get(attempt)
        assignments.append({**a.wire(), **stop} if stop else a.wire())
    present = {(a.uid, a.sequence) for a in worker.assignments}
    for attempt, (_, a) in box.adds.items():
        if attempt not in present and attempt not in box.removes:
            stop = box.stops.get(attempt)
            assignments.append({**a.wire(), **stop} if stop else a.wire())
    summary = W.status_summary(worker, live, len(assignments))
    return {**summary, "assignments": assignments,
            "conditions": [c.wire() for c in _ready(worker, summary["state"], worker.status.get("conditions"), now)]}


def _ready(worker: W.Believed, state: str, stored: Any, now: datetime) -> list[Condition]:
    """The Ready condition: True while the worker may be given jobs; lastTransitionTime moves only when it flips."""
    value = "True" if state == W.LIVE and worker.invalid is None else "False"
    reason = "Invalid" if worker.invalid is not None else {W.LIVE: "Live", W.DRAINING: "Draining",
                                                             W.EXPIRED: "Expired"}[state]
    since = format_time(now, precise=False)
    for cond in stored if isinstance(stored, list) else ():
        if isinstance(cond, dict) and cond.get("type") == "Ready" and cond.get("status") == value and \
                isinstance(cond.get("lastTransitionTime"), str):
            since = cond["lastTransitionTime"]
    return [Condition(type="Ready", status=value, reason=reason, message="", last_transition_time=since)]


def unchanged(worker: W.Believed, body: dict[str, Any]) -> bool:
    """The body says nothing the stored status does not (observedGeneration apart: it rides along with another
    change, never a write of its own, since every renewal bumps the generation)."""
    stored = worker.status
    return all(stored.get(k) == v for k, v in body.items() if k != "observedGeneration")


class WorkerStatusWriter:
    def __init__(self, kube: Kube, view: View, now: Callable[[], datetime], leading: asyncio.Event,
                 landed: Callable[[dict[str, Any]], None], done: Callable[[Key, set[Key]], None]) -> None:
        """landed: a write's response (the Worker object), to store in the View as a watch event would be.
        done: the worker and the jobs a write concerned, after it landed or failed for good."""
        self.kube, self.view, self.now, self.leading = kube, view, now, leading
        self.landed, self.done = landed, done
        self._boxes: dict[Key, Outbox] = {}
        self._flushing: dict[Key, asyncio.Task[None]] = {}

    def _box(self, worker: Key) -> Outbox:
        box = self._boxes.get(worker)
        if box is None:
            box = self._boxes[worker] = Outbox()
        return box

    # --- what the job controller asks for ---------------------------------------------------------------------
    def assign(self, worker: Key, job: Key, assignment: Assignment) -> None:
        """A new assignment: on its way (it holds its slots) until its write lands."""
        believed = self.view.worker(worker)
        self.view.pending[job] = Placed(worker[1], believed.uid if believed else "", assignment)
        box = self._box(worker)
        box.adds[(assignment.uid, assignment.sequence)] = (job, assignment)
        box.jobs.add(job)
        self._kick(worker)

    def stop(self, worker: Key, job: Key, uid: str, sequence: int, reason: str, requested_at: str,
             grace_seconds: float) -> None:
        box = self._box(worker)
        box.stops[(uid, sequence)] = {"stop": reason, "stopRequestedAt": requested_at,
                                      "cancelGraceSeconds": grace_seconds}
        box.jobs.add(job)
        self._kick(worker)

    def remove(self, worker: Key, job: Key, uid: str, sequence: int) -> None:
        """The assignment is done with. One still on its way is simply not sent."""
        box = self._box(worker)
        attempt = (uid, sequence)
        if box.adds.pop(attempt, None) is not None:
            self._drop_pending(job, attempt)
        believed = self.view.worker(worker)
        if believed is not None and any((a.uid, a.sequence) == attempt for a in believed.assignments):
            box.removes[attempt] = job
            self.view.leaving.setdefault(job, set()).add(sequence)
        box.jobs.add(job)
        self._kick(worker)

    def sync(self, worker: Key) -> None:
        """The worker's state, slots or busy may have changed: write them if they did."""
        self._box(worker).summary = True
        self._kick(worker)

    def forget(self, worker: Key) -> None:
        """The Worker object is gone: nothing more to write to it. Assignments on their way never landed."""
        box = self._boxes.pop(worker, None)
        if box is not None:
            self._settle(worker, box)

    def drop_all(self) -> None:
        """This replica no longer leads: what it had not written is the new leader's to decide again."""
        for worker in list(self._boxes):
            self.forget(worker)

    def busy(self) -> bool:
        return any(not t.done() for t in self._flushing.values())

    # --- writing ------------------------------------------------------------------------------------------------
    def _drop_pending(self, job: Key, attempt: Attempt) -> None:
        placed = self.view.pending.get(job)
        if placed is not None and (placed.assignment.uid, placed.assignment.sequence) == attempt:
            del self.view.pending[job]

    def _kick(self, worker: Key) -> None:
        task = self._flushing.get(worker)
        if task is None or task.done():
            self._flushing[worker] = asyncio.get_running_loop().create_task(self._flush(worker))

    async def _flush(self, worker: Key) -> None:
        """Write the worker's outbox, then again while more became ready meanwhile."""
        while True:
            box = self._boxes.pop(worker, None)
            if not box:
                if box is not None and box.jobs:
                    self.done(worker, box.jobs)
                return
            believed = self.view.worker(worker)
            if believed is None or not self.leading.is_set():
                self._boxes[worker] = box
                self.forget(worker)
                return
            body = build_status(believed, box, self.view.live(worker), self.now())
            if unchanged(believed, body):
                self._settle(worker, box)
                continue
            try:
                response = await self.kube.merge_patch(contract.workers_path(*worker, "status"), {"status": body})
            except (NotFound, NotLeader):  # gone (the watch brings the delete), or no longer ours to write
                self._settle(worker, box)
                self.forget(worker)
                return
            except ApiError as exc:
                if exc.status in (400, 422):  # refused as it is: trying it again would not help
                    log.error("worker %s/%s: its status write was refused: %s", *worker, exc)
                    self._settle(worker, box)
                    continue
                log.warning("worker %s/%s: cannot write its status: %s; trying again", *worker, exc)
                later = self._boxes.pop(worker, None)
                if later is not None:
                    box.merge(later)
                self._boxes[worker] = box
                await asyncio.sleep(RETRY_AFTER.total_seconds())
                continue
            self.landed(response)
            self._settle(worker, box)

    def _settle(self, worker: Key, box: Outbox) -> None:
        """A write landed, had nothing to say, or failed for good: its assignments are no longer on their way."""
        for attempt, (job, _) in box.adds.items():
            self._drop_pending(job, attempt)
        for (_, sequence), job in box.removes.items():
            leaving = self.view.leaving.get(job)
            if leaving is not None:
                leaving.discard(sequence)
                if not leaving:
                    del self.view.leaving[job]
        self.done(worker, box.jobs)
