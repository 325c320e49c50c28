"""Admission: which of a queue's waiting jobs start now, and why the others wait. The one decision of pause,
concurrency, the rate limit and concurrency keys; controller/slots.py keeps the counts and calls `take`.

The rules (docs: README "Queues"; DESIGN §3, §6):
- paused: nothing starts (Paused).
- concurrency: the queue's slot holders stay below spec.concurrency (AtConcurrency).
- rateLimit {starts, per}: at most `starts` attempts start in any window of length `per` (a sliding window over the
  admissions: an attempt starts when its pod is created or it is assigned to a worker), RateLimited until the oldest
  start of the window leaves it.
- perKeyConcurrency: a key's holders stay below it; a key at its limit steps out of the round (its jobs keep their
  place) until one of its holders ends. Jobs without a key are one group (NO_KEY) that the per-key limit ignores.
- order: the highest priority first across the whole queue (priority is the queue's contract: "higher runs first
  within its queue"); among the keys whose next job has that priority, keys take turns (round-robin: a key that
  just started a job goes to the back of the round, a key new to the line joins at the back), so one key's backlog
  delays another key's next job by at most one admission per other key. Within a key: priority, then FIFO.

Every admission costs O(log n) (heaps of keys and of each key's jobs, stale entries skipped lazily), never a scan of
the line. No I/O and no clock: `now` and every count are arguments; `take` changes only the Line it is given.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Hashable

from ..resources.common import time_or_none
from ..resources.queue import QueueSpec

NO_KEY = ""  # the group of the jobs without a concurrencyKey
# A pod's creationTimestamp is truncated to the second: its creation (and so its admission) was before this much
# later; a start read from it is counted that late (never too early: the window then holds it at least as long).
_TIMESTAMP_RESOLUTION = timedelta(seconds=1)

Job = Hashable  # the controller's (namespace, name)
Entry = tuple[int, float, int, Any]  # (-priority, queued_at, order first seen, job)


class Wait(str, Enum):
    """Why a queue's line does not move (the Queue's status says so; each waiting job is not written)."""

    PAUSED = "Paused"
    AT_CONCURRENCY = "AtConcurrency"
    RATE_LIMITED = "RateLimited"
    FULL = "Full"  # the full-cluster gate (controller/slots.py), or nothing in line can start (no worker with room)


@dataclass(frozen=True)
class Limits:
    """A Queue's admission settings, read once per spec."""

    paused: bool = False
    concurrency: int = 10
    per_key: int | None = None
    starts: int | None = None  # rateLimit.starts; None: no rate limit
    per: timedelta | None = None  # rateLimit.per

    @classmethod
    def of(cls, spec: QueueSpec) -> Limits:
        rate = spec.rate_limit
        return cls(spec.paused, spec.concurrency, spec.per_key_concurrency,
                   rate.starts if rate else None, rate.per_delta if rate else None)


def concurrency_key(raw: Mapping[str, Any]) -> str:
    """A raw Job's spec.concurrencyKey; NO_KEY without one (or one the API server would refuse: not a string)."""
    key = (raw.get("spec") or {}).get("concurrencyKey")
    return key if isinstance(key, str) else NO_KEY


def verdict(limits: Limits, holders: int, recent_starts: int) -> Wait | None:
    """Whether one more attempt of the queue may start now, holding `holders` slots with `recent_starts` starts in
    the rate limit's window: None, or why not."""
    if limits.paused:
        return Wait.PAUSED
    if holders >= limits.concurrency:
        return Wait.AT_CONCURRENCY
    if limits.starts is not None and recent_starts >= limits.starts:
        return Wait.RATE_LIMITED
    return None


def key_full(limits: Limits, key: str, key_holders: int) -> bool:
    """The key holds perKeyConcurrency slots already (never for NO_KEY)."""
    return key != NO_KEY and limits.per_key is not None and key_holders >= limits.per_key


class StartLog:
    """A queue's attempt starts within its rate limit's window, each by (job, sequence) so that a start seen again
    (its grant, then its pod or assignment, then its timeline entry) counts once. A time read from the objects
    (`started_attempts`) is never earlier than the admission; the first one noted stays, so after an operator restart
    a start may count a little later than it was: the window holds it longer, never less. Starts older than the
    window leave it; the job's highest such sequence is remembered so that a late sign of it (a timeline's
    finishedAt) does not bring it back.

    A grant is a start in progress (`hold`) until its reconcile has created the pod or the assignment (`settle`,
    at that moment): it counts without a time, so it never leaves the window before it started. Noted at the grant
    instead, a slow reconcile (a loaded API server) let the window move on under it: the next grants and the late
    ones then started together, over the limit."""

    def __init__(self, per: timedelta) -> None:
        self.per = per
        self._pending: dict[Job, int] = {}  # job → the sequence of its grant, not started yet
        self._at: dict[tuple[Job, int], datetime] = {}
        self._heap: list[tuple[datetime, int, Job, int]] = []
        self._order = itertools.count()  # ties of time: no comparison of jobs
        self._floor: dict[Job, int] = {}

    def __len__(self) -> int:
        return len(self._at) + len(self._pending)

    def hold(self, job: Job, sequence: int) -> None:
        """Attempt `sequence` of job was granted: it counts from now until it is settled."""
        if self.wanted(job, sequence):
            self._pending[job] = sequence

    def settle(self, job: Job, at: datetime, started: bool = True) -> None:
        """job's grant was acted on by `at`: its attempt started then (its pod or assignment made), or not at all (its
        reconcile ended without acting on it, and the job waits in line again). Both count as a start at `at` (the
        window holds too much a while, never too little), but only a real one stands for the attempt: one that did
        not start counts again when a later grant starts it."""
        sequence = self._pending.pop(job, None)
        if sequence is None:
            return
        if started:
            self.note(job, sequence, at, at)
        else:
            self._count(job, -next(self._order), at)  # a mark of its own, never the attempt's (job, sequence)

    def note(self, job: Job, sequence: int, at: datetime, now: datetime) -> None:
        """Attempt `sequence` of job started at `at` at the latest (a time ahead of now counts as now)."""
        if not self.wanted(job, sequence):
            return
        at = min(at, now)
        if at <= now - self.per:
            self._floor[job] = max(self._floor.get(job, 0), sequence)
            return
        self._count(job, sequence, at)

    def _count(self, job: Job, sequence: int, at: datetime) -> None:
        self._at[(job, sequence)] = at
        heapq.heappush(self._heap, (at, next(self._order), job, sequence))

    def prune(self, now: datetime) -> None:
        """Let the starts at or before now - per leave the window."""
        edge = now - self.per
        while self._heap and self._heap[0][0] <= edge:
            _, _, job, sequence = heapq.heappop(self._heap)
            del self._at[(job, sequence)]
            self._floor[job] = max(self._floor.get(job, 0), sequence)

    def wanted(self, job: Job, sequence: int) -> bool:
        """Whether a sign of this start would be noted (it is not counted yet, nor out of the window)."""
        return sequence > self._floor.get(job, 0) and (job, sequence) not in self._at \
            and self._pending.get(job) != sequence

    def forget(self, job: Job) -> None:
        """The job is gone: its starts still count until they leave the window; only its floor goes."""
        self._floor.pop(job, None)

    def free_at(self, starts: int, now: datetime) -> datetime | None:
        """When the window has room for one more start (after prune): None when it has room now. While grants in
        progress fill it, a look a window from now (each settles at the latest then, on a live operator)."""
        over = len(self._heap) + len(self._pending) - starts
        if over < 0:
            return None
        if over >= len(self._heap):
            return now + self.per
        return heapq.nsmallest(over + 1, self._heap)[-1][0] + self.per


def started_attempts(raw: Mapping[str, Any], pods: Iterable[tuple[int, datetime | None]],
                     assigned: Iterable[tuple[int, str | None]],
                     wanted: Callable[[int], bool] = lambda sequence: True,
                     last: tuple[int, datetime | None] | None = None) -> list[tuple[int, datetime]]:
    """The job's attempts that were admitted, by sequence, each with a time no earlier than its admission: its pods'
    creation (to the second, so a second later), its assignments' assignedAt, its timeline's startedAt (the handler
    starts after the admission) or finishedAt; a finished job whose timeline the operator's view left out gives its
    `last` sequence and finishedAt. What a restarted operator counts in a rate limit's window. Only the
    sequences `wanted` are read (the times of the others are not parsed: this runs on every change of the job)."""
    found: list[tuple[int, datetime | None]] = []
    found.extend((sequence, created + _TIMESTAMP_RESOLUTION) for sequence, created in pods
                 if created is not None and wanted(sequence))
    found.extend((sequence, time_or_none(at)) for sequence, at in assigned if wanted(sequence))
    if last is not None and last[0] > 0 and wanted(last[0]):
        found.append(last)
    status = raw.get("status") if isinstance(raw.get("status"), dict) else {}
    attempts = status.get("attempts")
    if isinstance(attempts, list) and attempts:
        for entry in attempts:
            sequence = entry.get("sequence") if isinstance(entry, dict) else None
            if isinstance(sequence, int) and wanted(sequence):
                found.append((sequence, time_or_none(entry.get("startedAt")) or time_or_none(entry.get("finishedAt"))))
    else:
        sequence = status.get("sequence")
        if isinstance(sequence, int) and sequence > 0 and wanted(sequence):
            found.append((sequence, time_or_none(status.get("finishedAt"))))
    return [(sequence, at) for sequence, at in found if at is not None]


class Line:
    """A queue's waiting jobs: a heap per concurrency key, and the round of keys (a heap by the priority of each
    key's next job, then by turn). Stale entries (withdrawn, re-offered, a key's next job gone) are skipped when met."""

    def __init__(self) -> None:
        self._jobs: dict[str, list[Entry]] = {}  # key → heap of its jobs
        self._entry: dict[Job, tuple[str, Entry]] = {}  # job → its key and live entry
        self._round: list[tuple[int, int, str]] = []  # (-priority of the key's next job, turn, key)
        self._place: dict[str, tuple[int, int]] = {}  # key → its live (-priority, turn) in the round
        self._parked: set[str] = set()  # keys at their perKeyConcurrency: out of the round until a holder ends
        self._turns = itertools.count()
        self.limits: Limits | None = None  # those of the last take (a change lets every parked key back)

    def __contains__(self, job: Job) -> bool:
        return job in self._entry

    def __len__(self) -> int:
        return len(self._entry)

    def offer(self, job: Job, key: str, priority: int, queued_at: float, order: int) -> None:
        """Put job in line under key (once; a changed position replaces the old one). Ties of queued_at go by
        `order` (the order the watch delivered them: creation order)."""
        entry: Entry = (-priority, queued_at, order, job)
        old = self._entry.get(job)
        if old == (key, entry):
            return
        self._entry[job] = (key, entry)
        heapq.heappush(self._jobs.setdefault(key, []), entry)
        if key not in self._parked:
            self._enter(key, -priority)

    def withdraw(self, job: Job) -> None:
        """job no longer waits (its entry is dropped when met)."""
        self._entry.pop(job, None)

    def unpark(self, key: str) -> None:
        """One of key's holders ended: it takes part in the round again (at the back)."""
        if key in self._parked:
            self._parked.discard(key)
            if key in self._jobs:
                self._enter(key, None)

    def _enter(self, key: str, priority: int | None, turn: int | None = None) -> None:
        """key takes part in the round: at the back when new to it (unless given its `turn` back); moved up when its
        next job is now more urgent."""
        heap = self._jobs.get(key)
        if not heap:
            return
        place = self._place.get(key)
        negp = heap[0][0] if priority is None else priority
        if place is not None and place[0] <= negp:
            return  # already there with its next job at least as urgent
        if place is not None:
            turn = place[1]
        elif turn is None:
            turn = next(self._turns)
        self._place[key] = (negp, turn)
        heapq.heappush(self._round, (negp, turn, key))

    def _head(self, key: str) -> Entry | None:
        """key's next job (its stale entries dropped); the key leaves the line when it has none."""
        heap = self._jobs.get(key, [])
        while heap:
            entry = heap[0]
            live = self._entry.get(entry[3])
            if live is not None and live[0] == key and live[1] is entry:
                return entry
            heapq.heappop(heap)
        self._jobs.pop(key, None)
        self._place.pop(key, None)
        self._parked.discard(key)
        return None

    def _next_key(self) -> tuple[str, Entry] | None:
        """The key whose turn it is and its next job: the most urgent next job, then the earliest turn."""
        while self._round:
            negp, turn, key = self._round[0]
            if self._place.get(key) != (negp, turn) or key in self._parked:
                heapq.heappop(self._round)  # stale
                continue
            head = self._head(key)
            if head is None:
                heapq.heappop(self._round)
                continue
            if head[0] != negp:  # its next job is less urgent than the round thought (an urgent one withdrawn)
                heapq.heappop(self._round)
                self._place[key] = (head[0], turn)
                heapq.heappush(self._round, (head[0], turn, key))
                continue
            return key, head
        return None

    def _leave_round(self, key: str) -> None:
        self._place.pop(key, None)  # its entry in the round is stale from now on


@dataclass
class Taken:
    """What one take granted (each job with its key, in order) and why it stopped, if the line did not empty: with
    RateLimited, `retry_at` is when the window has room again."""

    granted: list[tuple[Job, str]]
    wait: Wait | None = None
    retry_at: datetime | None = None


def take(line: Line, limits: Limits, holders: int, key_holders: Mapping[str, int], starts: StartLog | None,
         now: datetime, startable: Callable[[Job], bool] = lambda job: True, room: int | None = None,
         skip_limit: int = 16) -> Taken:
    """Grant the queue's free slots to the next in line, by the rules of this module; `holders` and `key_holders`
    are what hold slots now, `starts` the rate limit's window (pruned here), `room` how many more the full-cluster
    gate lets start (None: no gate). A job that cannot start yet (`startable` false: no worker has room for it) keeps
    its place; at most skip_limit of them are passed over, so a long backlog is never scanned."""
    if line.limits != limits:
        line.limits = limits
        for key in list(line._parked):  # the per-key limit may have risen: every key gets a look again
            line.unpark(key)
    if starts is not None:
        starts.prune(now)
    granted: list[tuple[Job, str]] = []
    per_key: dict[str, int] = {}
    skipped: list[tuple[str, Entry, int]] = []  # with the key's turn, given back with the job
    wait: Wait | None = None
    while True:
        wait = verdict(limits, holders + len(granted), (len(starts) if starts is not None else 0) + len(granted))
        if wait is not None:
            break
        if room is not None and len(granted) >= room:
            wait = Wait.FULL
            break
        found = line._next_key()
        if found is None:
            break
        key, entry = found
        job = entry[3]
        if key_full(limits, key, key_holders.get(key, 0) + per_key.get(key, 0)):
            heapq.heappop(line._round)
            line._leave_round(key)
            line._parked.add(key)
            continue
        heapq.heappop(line._jobs[key])
        if not startable(job):
            # Out of its key's heap for now: the key's next job gets the look, in the same turn.
            skipped.append((key, entry, line._round[0][1]))
            if line._head(key) is None:
                heapq.heappop(line._round)
            if len(skipped) >= skip_limit:
                wait = Wait.FULL
                break
            continue
        del line._entry[job]
        granted.append((job, key))
        per_key[key] = per_key.get(key, 0) + 1
        heapq.heappop(line._round)  # served: to the back of the round
        line._leave_round(key)
        if line._head(key) is not None:
            line._enter(key, None)
    for key, entry, turn in skipped:
        heapq.heappush(line._jobs.setdefault(key, []), entry)
        if key not in line._parked:
            line._enter(key, entry[0], turn)
    retry_at = None
    if wait is Wait.RATE_LIMITED and starts is not None and limits.starts is not None:
        # The starts of this take are not in the log yet (the caller holds them): count them too.
        retry_at = starts.free_at(limits.starts - len(granted), now) if len(granted) < limits.starts \
            else now + starts.per
    return Taken(granted, wait, retry_at)
