"""Slots: the one owner of admission. Which jobs hold a slot in which queue, who is next in line, whether a queue
may admit more, and which worker has room for a worker-mode job.

It is told about jobs and their pods as the watch delivers them (`update(key)`, reading the objects from the View,
which only stores them) and about what the reconciler does with a grant (`release`). Everything it knows is
re-derived from the objects, so the counts are rebuilt from the cluster on start and hold across operator restarts.

A slot holder is a job that is running, has a pod still alive, or has just been granted a slot (reserved) and is
starting its pod or being assigned to a worker. A reservation lasts from the grant until the reconcile that acts on
it ends (`release`, on every path): by then the pod or the assigning status write is in the View and holds the
slot by itself. Only the leader grants, and when it starts to lead it drops the reservations no running
reconcile of it holds (made before it was deposed). The worker-mode counterpart: a worker's slot is held from the
moment it is picked until the reconcile hands the assignment to the Worker status writer; from then on the
assignment holds the job's queue slot and the worker's slot (on its way, then landed in the Worker's status, until the
worker reports its result), so two reconciles at once never give one worker more jobs than it has slots.

The full-cluster gate (`pending_limit` per queue, `--max-pending-pods`): while the scheduler is behind, a queue
has at most `pending_limit` holders whose pod waits for a node (or is still being created). The scheduler is
behind when it reports one of the queue's pods Unschedulable, or when one of them stays unbound longer than
`UNBOUND_AFTER` (a timer on the operator's one heap looks again then: no polling). The backlog then stays in the
queue, in priority order, instead of as thousands of Pending pods that the scheduler retries over and over (each
retry a status patch and an Event) and that a later, more urgent job could not overtake. While pods find nodes
within that time, nothing is held back: a cluster with room pays neither latency nor extra writes.

What may start, and in which order (pause, concurrency, the rate limit, concurrency keys taking turns), is decided by
lifecycle/admission.take on each queue's Line; this class keeps the counts it needs: holders per queue and per key,
and the starts in each rate-limited queue's window (noted at each grant, and derived from the jobs' pods,
assignments and timelines as they are seen, so that a restarted operator counts the starts of its predecessor).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Collection
from datetime import datetime, timedelta
from typing import Any

from ..lifecycle import workers as W
from ..lifecycle.admission import NO_KEY, Limits, Line, StartLog, Wait, concurrency_key, take
from ..lifecycle.queueing import line_position
from ..resources.job import State
from ..resources.queue import QueueSpec
from ..kube.informer import Key
from .gate import UNBOUND_AFTER, Placement, Standing, behind, gate_closed, standing, unbound_since
from .ratewindows import RateWindows
from .timers import Timers
from .records import LiveJob
from .view import View
from .workerpicks import WorkerPicks

# Also read from here (tests, callers before the split by concern): the gate's names and the line's position.
__all__ = ["SKIP_LIMIT", "UNBOUND_AFTER", "Placement", "Slots", "Standing", "behind", "gate_closed", "line_position",
           "standing", "unbound_since"]

# How many jobs in line one take passes over that cannot start yet (a worker-mode job no worker has a free slot
# for), so that a pod-mode job behind them still starts, without scanning a long backlog on every change.
SKIP_LIMIT = 16


class Slots(RateWindows, WorkerPicks):
    """Holders, lines and grants; the rate limits' windows (controller/ratewindows.py), the worker picks
    (controller/workerpicks.py) and the gate's reading of a job (controller/gate.py) are their own modules."""

    def __init__(self, view: View, timers: Timers, now: Callable[[], datetime], *, pending_limit: int | None,
                 granted: Callable[[Key], None] = lambda job: None, active: Callable[[], bool] = lambda: True,
                 written: Callable[[Key], bool] = lambda job: False, unbound_after: timedelta = UNBOUND_AFTER) -> None:
        self.view, self.timers, self.now = view, timers, now
        self.pending_limit = pending_limit  # per queue; None: no limit
        self.unbound_after = unbound_after
        self.granted = granted  # told about every job granted a slot by a pump, to reconcile it
        # Pumps grant only while this is true: the View is complete and this replica leads (a standby's grants
        # would be reservations no reconcile of its own acts on).
        self.active = active
        # A job holds its slot by a write of ours the view does not show yet (controller/expectations.py).
        self.written = written
        # Holders: queue → jobs holding a slot there; job → its queue.
        self._holders: dict[Key, set[Key]] = defaultdict(set)
        self._holder_queue: dict[Key, Key] = {}
        # The gate: queue → holders whose pod waits for a node (or is being created), and those of them that show
        # the scheduler is behind (`behind`); job → when its pod began to wait for a node (`unbound_since`).
        self._waiting: dict[Key, set[Key]] = defaultdict(set)
        self._behind: dict[Key, set[Key]] = defaultdict(set)
        self._since: dict[Key, datetime] = {}
        # The line: queue → its waiting jobs (lifecycle/admission.Line); job → the queue it waits in.
        self._lines: dict[Key, Line] = defaultdict(Line)
        self._in_line: dict[Key, Key] = {}
        # Concurrency keys: queue → holders per key; job → its key (only jobs with a key).
        self._key_holders: dict[Key, Counter[str]] = defaultdict(Counter)
        self._holder_key: dict[Key, str] = {}
        # Rate-limited queues: their limits (read once per spec) and the starts in their window.
        self._limits: dict[Key, tuple[QueueSpec, Limits]] = {}
        self._starts: dict[Key, StartLog] = {}
        self._reserved: set[Key] = set()
        # Workers: job → the worker it was granted (picked, not yet assigned); (namespace, worker) → how many of those.
        self._picked: dict[Key, tuple[str, W.Believed]] = {}
        self._inflight: Counter[Key] = Counter()

    # --- answers --------------------------------------------------------------------------------------------
    def holders(self, queue: Key) -> int:
        return len(self._holders.get(queue, ()))

    def holds(self, job: Key) -> bool:
        """job holds a slot: it runs, a pod of it is alive, or it is reserved."""
        return job in self._holder_queue

    def waiting(self, queue: Key) -> int:
        """The queue's holders whose pod waits for a node (or is still being created)."""
        return len(self._waiting.get(queue, ()))

    def full(self, queue: Key) -> bool:
        """The full-cluster gate is closed for the queue (gate_closed)."""
        return gate_closed(self.pending_limit, self.waiting(queue), bool(self._behind.get(queue)))

    def in_line(self, job: Key) -> bool:
        """job waits in its queue's line for a slot."""
        return job in self._in_line

    def reserved(self, job: Key) -> bool:
        return job in self._reserved

    # --- being told -----------------------------------------------------------------------------------------
    def update(self, key: Key, pump: bool = True) -> None:
        """The job or its pods changed, or it is gone: re-derive its slot and its worker's; a freed slot (or a pod
        that got its node) is offered to the next in line at once (unless not `pump`)."""
        record = self.view.jobs.get(key)
        if record is None:
            if key not in self.view.pods and not self.view.holds_assignment(key) and not self.written(key):
                self.forget(key, pump)
        else:
            queue = (key[0], record.queue)
            held = record.state is State.RUNNING or self.view.holds_assignment(key) or self.written(key)
            starts = self._starts.get(queue)
            if starts is not None:
                self._note_starts(key, record, starts)
            concurrency = concurrency_key(record.raw) if isinstance(record, LiveJob) else NO_KEY
            if self._hold(key, queue, standing(held, self.view.pods_of(key).values()), concurrency) and pump:
                self.pump(queue)

    def _hold(self, job: Key, queue: Key, seen: Standing, key: str = NO_KEY) -> bool:
        """Record whether job holds a slot in queue (under its concurrency key) and whether its pod waits for a node.
        True when room was freed: a slot, a waiting pod that got its node, or the last sign of a backlog that went."""
        reserved = job in self._reserved
        holds = seen.holds or reserved
        waiting = holds and (seen.placement is not Placement.BOUND or reserved)
        unbound = holds and seen.placement is not Placement.BOUND
        previous = self._holder_queue.get(job)
        was_waiting = previous is not None and job in self._waiting[previous]
        was_behind = previous is not None and job in self._behind[previous]
        if previous is not None and (not holds or previous != queue):
            self._holders[previous].discard(job)
            self._waiting[previous].discard(job)
            self._behind[previous].discard(job)
            del self._holder_queue[job]
            self._unkey(job, previous)
        late = False
        if unbound and self.pending_limit is not None:  # without a limit there is no gate to close
            now = self.now()
            since = self._since.get(job)
            if since is None:
                since = self._since[job] = unbound_since(now, seen.waiting_since)
                if now < since + self.unbound_after:  # look again when it crosses the threshold
                    self.timers.schedule(("unbound", *job), since + self.unbound_after, self._recheck)
            late = behind(seen.placement, since, now, self.unbound_after)
        elif job in self._since:
            del self._since[job]
            self.timers.schedule(("unbound", *job), None, self._recheck)
        if holds:
            self._holders[queue].add(job)
            self._holder_queue[job] = queue
            if key != NO_KEY and job not in self._holder_key:
                self._holder_key[job] = key
                self._key_holders[queue][key] += 1
            (self._waiting[queue].add if waiting else self._waiting[queue].discard)(job)
            (self._behind[queue].add if late else self._behind[queue].discard)(job)
        return ((previous is not None and not holds) or (was_waiting and not waiting)
                or (was_behind and not late and previous is not None and not self._behind[previous]))

    def _unkey(self, job: Key, queue: Key) -> None:
        """job no longer holds a slot of its key: the key may take part in the round again."""
        key = self._holder_key.pop(job, None)
        if key is None:
            return
        holders = self._key_holders[queue]
        holders[key] -= 1
        if holders[key] <= 0:
            del holders[key]
            if not holders:
                del self._key_holders[queue]
        line = self._lines.get(queue)
        if line is not None:
            line.unpark(key)

    def _recheck(self, timer: Any) -> None:
        """A pod crossed UNBOUND_AFTER: judge it again (still unbound, it closes the gate; that frees nothing)."""
        job = (timer[1], timer[2])
        if job in self._since:
            self.update(job, pump=False)

    def line_up(self, key: Key) -> None:
        """Put a runnable job in its queue's line as soon as it is seen, before any reconcile takes a slot: jobs that
        become runnable together (a burst, a Handler that appears, a restart) are then admitted by priority and
        age, not in whatever order their reconciles happen to run. The reconcile confirms it (`request`)."""
        record = self.view.live_job(key)
        if record is None or record.state not in (None, State.QUEUED):
            return
        ns = key[0]
        if (ns, record.queue) not in self.view.queues or (ns, record.handler) not in self.view.handlers:
            return
        if any(p.alive for p in self.view.pods_of(key).values()) or self.view.holds_assignment(key):
            return
        position, priority = line_position(record.raw), (record.raw.get("spec") or {}).get("priority", 0)
        if position is None or not isinstance(priority, int):
            return  # unreadable: the reconcile says why, and never admits it
        self._offer(key, (ns, record.queue), priority, position.timestamp())

    def _offer(self, job: Key, queue: Key, priority: int, queued_at: float) -> None:
        """Put job in line (once; a changed position replaces the old one). Ties of queued_at (one-second resolution
        for new jobs) go by the order the watch delivered them, which is the order they were created in."""
        self._in_line[job] = queue
        record = self.view.live_job(job)
        key, seen = (concurrency_key(record.raw), record.seen) if record is not None else (NO_KEY, 0)
        self._lines[queue].offer(job, key, priority, queued_at, seen)

    def request(self, job: Key, queue: Key, priority: int, queued_at: datetime) -> bool:
        """The reconcile found job admissible: keep it in line and grant what is free (others granted are handed
        to `granted`); True when job itself holds a reservation now."""
        if job not in self._reserved:
            self._offer(job, queue, priority, queued_at.timestamp())
            for other in self._take(queue):
                if other != job:
                    self.granted(other)
        return job in self._reserved

    def withdraw(self, job: Key) -> None:
        """job no longer wants a slot (not runnable, or its pod alive)."""
        queue = self._in_line.pop(job, None)
        if queue is not None:
            self._lines[queue].withdraw(job)

    def release(self, job: Key) -> bool:
        """The reconcile that acted on a grant ends: job now holds its slot by its pod or status, or not at all, and
        its worker's slot by its status.worker. Called on every path of a reconcile. True when job had a grant
        (its slot must then be derived again: `update`)."""
        had = job in self._reserved
        if had:
            now = self.now()
            for starts in self._starts.values():  # a grant not acted on (it came during another reconcile of the job)
                starts.settle(job, now, started=False)
        self._reserved.discard(job)
        picked = self._picked.pop(job, None)
        if picked is not None:
            self._drop_inflight((picked[0], picked[1].name))
        return had or picked is not None

    def forget(self, job: Key, pump: bool = True) -> None:
        """job is gone, or will not run (invalid): it neither holds nor waits."""
        self.release(job)
        self.withdraw(job)
        for starts in self._starts.values():  # its starts still count in the window; only its floor goes
            starts.forget(job)
        queue = self._holder_queue.get(job)
        if queue is not None and self._hold(job, queue, Standing(False, Placement.BOUND)) and pump:
            self.pump(queue)

    def drop_reservations(self, keep: Collection[Key] = ()) -> None:
        """This replica starts to lead: grants made before it was deposed (by pumps, for reconciles that have not
        run) are dropped, so the line decides again; those of reconciles still running (`keep`) end with them."""
        for job in [job for job in self._reserved if job not in keep]:
            self.release(job)
            self.update(job, pump=False)

    # --- granting -------------------------------------------------------------------------------------------
    def pump(self, queue: Key) -> None:
        """Grant the queue's free slots (once the View is complete); each granted job goes to `granted`."""
        if self.active():
            for job in self._take(queue):
                self.granted(job)

    def _take(self, queue: Key) -> list[Key]:
        """Grant free slots to those whose turn it is and that can start (lifecycle/admission.take); those passed
        over keep their place. A rate-limited queue looks again when its window has room."""
        spec = self.view.queues.get(queue)
        line = self._lines.get(queue)
        if spec is None or not line:
            return []
        limits = self._limits_of(queue, spec)
        starts = self._start_log(queue, limits)
        room = None
        if self.pending_limit is not None and self._behind.get(queue):  # the full-cluster gate (gate_closed)
            room = max(0, self.pending_limit - self.waiting(queue))
        now = self.now()
        taken = take(line, limits, self.holders(queue), self._key_holders.get(queue, {}), starts, now,
                     self._startable_in(queue[0]), room, SKIP_LIMIT)
        for job, key in taken.granted:
            del self._in_line[job]
            self._reserved.add(job)
            self._hold(job, queue, Standing(True, Placement.BOUND), key)
            if starts is not None:  # the attempt the grant starts: the status' sequence + 1 (lifecycle.transitions.admit)
                record = self.view.jobs.get(job)
                starts.hold(job, (record.sequence if record is not None else 0) + 1)
        if taken.wait is Wait.RATE_LIMITED and taken.retry_at is not None:
            self.timers.schedule(("rate", *queue), taken.retry_at, self._rate_wake)
        return [job for job, _ in taken.granted]

