"""Worker pools' replicas (resources/workerpool.py): how many workers the jobs of a pool's queues need, counted in
slots, and which workers a scale-down may take away. Pure: jobs, specs, the workers' load and the clock come in as
arguments; controller/pools.py reads the scale, lists the pods and writes.

The rule, in three steps:
1. demand: per queue, queued + running + due within leadTime (its worker-mode jobs the pool counts), capped at the
   queue's concurrency (more can never run at once) and at its running jobs while it is paused (nothing starts);
2. desired = ceil(demand / slotsPerWorker), within [minReplicas, maxReplicas];
3. a scale-up is applied at once; a scale-down follows the highest desired of the last scaleDownDelay (no flapping),
   and removes only idle workers: the surplus is first *retired* (the operator gives it no new jobs), and the
   replicas drop as retired workers become idle, their pods marked for the ReplicaSet to delete first.
So a scale-down never stops a running attempt (no `Drained`), and the workers kept always have free slots for every
queued job (retiring workers' running jobs are still counted in the demand)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..resources.common import time_or_none
from ..resources.queue import QueueSpec
from .queueing import counted_state


@dataclass(frozen=True)
class Demand:
    """One pool's jobs by what they need: a slot now (queued, running) or soon (due within the lead time), and the
    slots all of them can use at once (`slots`: per queue capped at its concurrency)."""

    queued: int = 0
    running: int = 0
    due: int = 0
    slots: int = 0


def due_at(job: dict[str, Any]) -> datetime | None:
    """When a scheduled or backing-off job becomes runnable: status.nextAttemptAt, else spec.runAt."""
    status = job.get("status") if isinstance(job.get("status"), dict) else {}
    spec = job.get("spec") if isinstance(job.get("spec"), dict) else {}
    return time_or_none(status.get("nextAttemptAt")) or time_or_none(spec.get("runAt"))


def queue_demand(jobs: Iterable[dict[str, Any]], spec: QueueSpec | None, counts: Callable[[dict[str, Any]], bool],
                 now: datetime, lead_time: timedelta) -> Demand:
    """One queue's demand from its unfinished jobs; `counts` says whether a job is the pool's (worker mode, a handler
    it serves). A job is one of queued, running or due (counted_state, the queues' own rule), never two."""
    queued = running = due = 0
    for job in jobs:
        if not counts(job):
            continue
        state = counted_state(job, now)
        if state == "queued":
            queued += 1
        elif state == "running":
            running += 1
        elif state in ("scheduled", "failed"):
            when = due_at(job)
            due += when is not None and when <= now + lead_time
    usable = running if spec is not None and spec.paused else queued + running + due
    if spec is not None:
        usable = min(usable, max(spec.concurrency, running))
    return Demand(queued, running, due, usable)


def total(demands: Iterable[Demand]) -> Demand:
    out = Demand()
    for d in demands:
        out = Demand(out.queued + d.queued, out.running + d.running, out.due + d.due, out.slots + d.slots)
    return out


def desired_replicas(slots: int, slots_per_worker: int, min_replicas: int, max_replicas: int) -> int:
    """ceil(slots / slotsPerWorker) within [min, max]."""
    need = math.ceil(max(slots, 0) / max(slots_per_worker, 1))
    return max(min_replicas, min(need, max_replicas))


def stabilized(current: int, desired: int, recent: Sequence[tuple[datetime, int]], now: datetime,
               window: timedelta) -> int:
    """The replicas to aim for: desired when it is at least current (up at once); else the highest desired seen
    within the window (including now), never above current (down only after the window)."""
    if desired >= current:
        return desired
    highest = max([desired, *(r for t, r in recent if t > now - window)])
    return min(current, highest)


@dataclass(frozen=True)
class Member:
    """One pod of the pool's target, not terminating: its worker's name (the pod's) and load."""

    name: str
    busy: int = 0  # assignments not yet recorded, landed or on their way
    registered: bool = True  # a Worker object of that name exists (else it cannot have been given a job)


@dataclass(frozen=True)
class Plan:
    replicas: int  # the target's spec.replicas to write (== current: no write)
    retire: tuple[str, ...] = ()  # workers to give no new jobs
    remove: tuple[str, ...] = ()  # of those, the idle ones whose pods go now (the lowest deletion cost)


def plan(current: int, target: int, members: Sequence[Member], retiring: Iterable[str] = ()) -> Plan:
    """How to move from `current` replicas toward `target` without taking away a busy worker.

    Up (or level): replicas = target, nothing retired. Down: replicas the ReplicaSet has not created yet go first
    (no pod deleted); then the surplus workers are retired — unregistered ones first, then those already retiring
    (no churn), then the least busy, then by name — and only the idle ones among them are removed now. While the
    pods outnumber the replicas (a rollout's surge, a deletion in progress) nothing is removed: which pod the
    ReplicaSet would delete is not ours to know then."""
    if target >= current:
        return Plan(max(target, 0))
    surplus = current - target
    unborn = min(surplus, max(0, current - len(members)))
    left = surplus - unborn
    before = set(retiring)
    ranked = sorted(members, key=lambda m: (m.registered, m.name not in before, m.busy, m.name))
    retire = tuple(sorted(m.name for m in ranked[:left]))
    if len(members) > current:
        return Plan(current - unborn, retire)
    remove = tuple(sorted(m.name for m in ranked[:left] if m.busy == 0))
    return Plan(current - unborn - len(remove), retire, remove)


def describe(demand: Demand, desired: int, current: int, target: int, result: Plan,
             bounds: Mapping[str, int]) -> str:
    """The decision in words, for the status message and the scale Event."""
    words = (f"{demand.queued} queued + {demand.running} running + {demand.due} due = {demand.slots} slots → "
             f"desired {desired} (min {bounds['min']}, max {bounds['max']})")
    if result.replicas > current:
        return f"{words}; scaled up from {current} to {result.replicas}"
    if result.replicas < current:
        return f"{words}; scaled down from {current} to {result.replicas} (removed idle {', '.join(result.remove) or 'unstarted replicas'})"
    if target < current and result.retire:
        return f"{words}; retiring {', '.join(result.retire)}: removed once idle"
    if target < current:
        return f"{words}; holding {current} within the scale-down delay"
    return f"{words}; {current} replicas"
