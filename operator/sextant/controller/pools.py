"""WorkerPools (resources/workerpool.py): the operator sets a Deployment of workers' replicas from the slots its queues
need, as a HorizontalPodAutoscaler would but counting exactly (lifecycle/scaling.py holds the rule).

A thin adapter, one look per pool every INTERVAL on the timer heap (longer with a large backlog, as the Queues' status):
read the target's `scale` subresource, count the pool's jobs in the view, decide, and write — the `scale` subresource
of the Deployment and nothing else of it; on a scale-down first the deletion cost of the idle pods to remove (so the
ReplicaSet deletes those and no busy one), and meanwhile the retired workers get no new jobs (View.retiring). The
WorkerPool's status only on change; an Event on each scale change and on the first of a streak of failures. Only the
leader acts; a look that fails leaves everything as it was and is tried again at the next interval.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from ..kube.client import ApiError, Kube, NotLeader
from ..kube.clock import utcnow
from ..kube.events import EventRecorder
from ..kube.informer import Key, key_of
from ..lifecycle.scaling import Demand, Member, Plan, desired_replicas, describe, plan, queue_demand, stabilized, total
from ..lifecycle.decision import Event
from ..resources import API_VERSION, contract
from ..resources.common import Condition, format_time, problems
from ..resources.workerpool import KIND, POD_DELETION_COST, RETIRE_COST, WorkerPoolSpec
from .queuestatus import next_round_after
from .timers import Timers
from .view import View

log = logging.getLogger(__name__)

INTERVAL = timedelta(seconds=5)


@dataclass
class Pool:
    raw: dict[str, Any]
    spec: WorkerPoolSpec | None
    problem: str | None = None  # why the spec is not believed (names the field)
    recent: list[tuple[datetime, int]] = field(default_factory=list)  # desired replicas within the scale-down delay
    marked: set[str] = field(default_factory=set)  # pods given the retire deletion cost by this operator
    failing: str | None = None  # the reason of the failure streak under way (one Warning Event per streak)
    running: asyncio.Task[None] | None = None


def read_spec(raw: dict[str, Any]) -> tuple[WorkerPoolSpec | None, str | None]:
    """The spec, or why it cannot be believed (an older or loosened CRD): never raises."""
    try:
        return WorkerPoolSpec.model_validate(raw.get("spec") or {}), None
    except ValidationError as exc:
        return None, problems(exc, "spec.")


def conditions(stored: Any, now: datetime, *wanted: tuple[str, str, str, str]) -> list[dict[str, Any]]:
    """(type, status, reason, message) as conditions; lastTransitionTime moves only when a status flips."""
    before = {c.get("type"): c for c in stored if isinstance(c, dict)} if isinstance(stored, list) else {}
    out = []
    for kind, status, reason, message in wanted:
        old = before.get(kind) or {}
        since = old.get("lastTransitionTime") if old.get("status") == status else None
        out.append(Condition(type=kind, status=status, reason=reason, message=message,
                             last_transition_time=since if isinstance(since, str) else format_time(now, precise=False)
                             ).wire())
    return out


class PoolController:
    def __init__(self, kube: Kube, view: View, events: EventRecorder, timers: Timers, leading: asyncio.Event, *,
                 busy: Callable[[str], Mapping[str, int]], reopen: Callable[[Key], None],
                 now: Callable[[], datetime] = utcnow, interval: timedelta = INTERVAL) -> None:
        """busy: per worker of a namespace, the jobs it holds (assigned or granted); reopen: a worker that may take
        jobs again."""
        self.kube, self.view, self.events, self.timers, self.leading = kube, view, events, timers, leading
        self.busy, self.reopen, self.now, self.interval = busy, reopen, now, interval
        self.pools: dict[Key, Pool] = {}
        self.started = asyncio.Event()

    # --- informer ---------------------------------------------------------------------------------------------
    def on_pool(self, kind: str, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        if kind == "delete":
            pool = self.pools.pop(key, None)
            if pool is not None and pool.running is not None:
                pool.running.cancel()
            self._retire(key, ())
            self.timers.schedule(("pool", *key), None, self._tick)
            return
        spec, problem = read_spec(obj)
        pool = self.pools.get(key)
        if pool is None:
            self.pools[key] = pool = Pool(obj, spec, problem)
            if self.started.is_set():
                self.timers.schedule(("pool", *key), self.now(), self._tick)  # a new pool: a look at once
        else:
            changed = obj["metadata"].get("generation") != pool.raw["metadata"].get("generation")
            pool.raw, pool.spec, pool.problem = obj, spec, problem
            if changed and self.started.is_set():
                self.timers.schedule(("pool", *key), self.now(), self._tick)

    async def run(self, synced: Iterable[asyncio.Event] = ()) -> None:
        """Once the view is complete, a first look at every pool; then the timer heap drives the looks."""
        await asyncio.gather(*(event.wait() for event in synced))
        self.started.set()
        for key in self.pools:
            self.timers.schedule(("pool", *key), self.now(), self._tick)
        await asyncio.Event().wait()

    def _tick(self, timer: Hashable) -> None:
        key: Key = tuple(timer)[1:]  # type: ignore[assignment]
        pool = self.pools.get(key)
        if pool is None:
            return
        if pool.running is None or pool.running.done():
            pool.running = asyncio.get_running_loop().create_task(self._look(key, pool))
        else:
            self.timers.schedule(timer, self.now() + self.interval, self._tick)

    async def _look(self, key: Key, pool: Pool) -> None:
        looks = 0
        try:
            if self.leading.is_set():
                looks = await self.reconcile(key, pool)
        except NotLeader:
            pass
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - one pool must not stop the others, nor this one's next look
            log.exception("worker pool %s/%s: the look failed", *key)
        finally:
            if self.pools.get(key) is pool:
                self.timers.schedule(("pool", *key), self.now() + next_round_after(looks, self.interval), self._tick)

    # --- deciding -------------------------------------------------------------------------------------------------
    def demand(self, ns: str, spec: WorkerPoolSpec, now: datetime) -> tuple[Demand, int]:
        """The pool's demand from the view (its queues' unfinished worker-mode jobs), and how many jobs it looked at."""
        only = set(spec.handlers)

        def counts(raw: dict[str, Any]) -> bool:
            name = (raw.get("spec") or {}).get("handler", "")
            handler = self.view.handlers.get((ns, name))
            return handler is not None and handler.on_workers and (not only or name in only)

        demands, looks = [], 0
        queues = spec.queues or [q for namespace, q in self.view.queues if namespace == ns]
        for queue in dict.fromkeys(queues):
            keys = self.view.unfinished_by_queue.get((ns, queue), ())
            looks += len(keys)
            jobs = self.view.unfinished_raw((ns, queue))
            demands.append(queue_demand(jobs, self.view.queues.get((ns, queue)), counts, now, spec.lead))
        return total(demands), looks

    def _retire(self, key: Key, names: Iterable[str]) -> None:
        """The pool's retired workers get no new jobs (View.assignable_workers); those no longer retired may again."""
        now = frozenset(names)
        before = self.view.retiring.get(key, frozenset())
        if now:
            self.view.retiring[key] = now
        else:
            self.view.retiring.pop(key, None)
        for name in before - now:
            self.reopen((key[0], name))

    async def reconcile(self, key: Key, pool: Pool) -> int:
        """One look at a pool; returns the jobs it counted."""
        ns, _ = key
        now = self.now()
        if pool.spec is None:
            self._retire(key, ())
            await self._status(key, pool, {}, conditions(
                _stored(pool).get("conditions"), now,
                ("AbleToScale", "False", "InvalidSpec", pool.problem or "invalid"),
            ), f"not acted upon: {pool.problem}", failure=("InvalidSpec", pool.problem or "invalid"))
            return 0
        spec = pool.spec
        target_name = spec.scale_target_ref.name
        try:
            scale = await self.kube.get(contract.deployments_path(ns, target_name, "scale"))
        except ApiError as exc:
            self._retire(key, ())
            why = f"cannot read Deployment {target_name}'s scale: {exc.message or exc}"
            await self._status(key, pool, {}, conditions(
                _stored(pool).get("conditions"), now, ("AbleToScale", "False", "FailedGetScale", why)),
                why, failure=("FailedGetScale", why))
            return 0
        current = _int((scale.get("spec") or {}).get("replicas"))
        selector = (scale.get("status") or {}).get("selector") or ""
        demand, looks = self.demand(ns, spec, now)
        desired = desired_replicas(demand.slots, spec.slots_per_worker, spec.min_replicas, spec.max_replicas)
        window = spec.window
        if not pool.recent:
            pool.recent.append((now, current))  # after a (re)start or takeover: hold one window before a scale-down
        pool.recent = [(t, r) for t, r in pool.recent if t > now - window] + [(now, desired)]
        target = stabilized(current, desired, pool.recent, now, window)
        if not selector:
            target = max(target, current)  # no selector to find its pods by: which would go is unknown, so none does
        result = Plan(target)
        marked: set[str] = set()
        if selector and (target < current or pool.marked):
            pods, _ = await self.kube.list(contract.pods_path(ns), {"labelSelector": selector})
            members, marked = self._members(ns, pods)
            result = plan(current, target, members, self.view.retiring.get(key, ()))
        self._retire(key, result.retire)  # at once, with the load just read: no job reaches them from now on
        result = await self._mark(ns, pool, marked, result)
        bounds = {"min": spec.min_replicas, "max": spec.max_replicas}
        message = describe(demand, desired, current, target, result, bounds)
        replicas, scaled, failure = current, None, None
        if result.replicas != current:
            try:
                await self.kube.merge_patch(contract.deployments_path(ns, target_name, "scale"),
                                            {"spec": {"replicas": result.replicas}})
                replicas, scaled = result.replicas, format_time(now, precise=False)
            except NotLeader:
                raise
            except ApiError as exc:
                failure = ("FailedUpdateScale", f"cannot set Deployment {target_name}'s replicas to "
                                                f"{result.replicas}: {exc.message or exc}")
        if scaled is not None:
            self.events.record(self._ref(pool), Event("SuccessfulRescale", f"New size: {replicas}; {message}"))
            log.info("worker pool %s/%s: %s", *key, message)
        raw_need = -(-demand.slots // spec.slots_per_worker)
        limited = ("ScalingLimited", "True", "TooFewReplicas", f"held at minReplicas {spec.min_replicas}") \
            if raw_need < spec.min_replicas else \
            ("ScalingLimited", "True", "TooManyReplicas", f"held at maxReplicas {spec.max_replicas}: "
             f"{demand.slots} slots wanted") if raw_need > spec.max_replicas else \
            ("ScalingLimited", "False", "DesiredWithinRange", "")
        able = ("AbleToScale", "False", *failure) if failure else \
            ("AbleToScale", "True", "WaitingForDrain", f"retiring {', '.join(result.retire)}: removed once idle") \
            if result.retire and result.replicas > target else \
            ("AbleToScale", "True", "ScaleDownStabilized", "holding within scaleDownDelay") \
            if target > desired else ("AbleToScale", "True", "ReadyForNewScale", "")
        body = {"replicas": replicas, "desiredReplicas": desired, "queued": demand.queued, "running": demand.running,
                "due": demand.due, "retiring": list(result.retire)}
        if scaled is not None:
            body["lastScaleTime"] = scaled
        await self._status(key, pool, body, conditions(_stored(pool).get("conditions"), now, able,
                                                       limited), message, failure=failure)
        return looks

    def _members(self, ns: str, pods: list[dict[str, Any]]) -> tuple[list[Member], set[str]]:
        """The target's pods the ReplicaSet counts (not terminating, not ended) with their workers' load, and those
        carrying the retire deletion cost. Read after the list returned, with no wait before the plan."""
        busy = self.busy(ns)
        workers = self.view.workers.get(ns, {})
        members, marked = [], set()
        for pod in pods:
            meta = pod.get("metadata") or {}
            name = meta.get("name", "")
            if meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue  # on its way out: neither counted by the ReplicaSet nor worth unmarking
            if (meta.get("annotations") or {}).get(POD_DELETION_COST) == RETIRE_COST:
                marked.add(name)
            members.append(Member(name, busy.get(name, 0), name in workers))
        return members, marked

    async def _mark(self, ns: str, pool: Pool, marked: set[str], result: Plan) -> Plan:
        """Give the pods to remove the lowest deletion cost (the ReplicaSet deletes those first), and take it back
        from those no longer to be removed. A pod that cannot be marked is not removed this time."""
        for name in marked - set(result.remove):
            try:
                await self.kube.merge_patch(contract.pods_path(ns, name),
                                            {"metadata": {"annotations": {POD_DELETION_COST: None}}})
            except NotLeader:
                raise
            except ApiError as exc:
                log.warning("pod %s/%s: cannot take back its deletion cost: %s", ns, name, exc)
        removed = []
        for name in result.remove:
            try:
                await self.kube.merge_patch(contract.pods_path(ns, name),
                                            {"metadata": {"annotations": {POD_DELETION_COST: RETIRE_COST}}})
                removed.append(name)
            except NotLeader:
                raise
            except ApiError as exc:
                log.warning("pod %s/%s: cannot mark it for removal: %s", ns, name, exc)
        pool.marked = set(removed)
        kept = len(result.remove) - len(removed)
        return Plan(result.replicas + kept, result.retire, tuple(removed))

    # --- writing ------------------------------------------------------------------------------------------------
    def _ref(self, pool: Pool) -> dict[str, Any]:
        return {**pool.raw, "apiVersion": API_VERSION, "kind": KIND}

    async def _status(self, key: Key, pool: Pool, body: dict[str, Any], conds: list[dict[str, Any]], message: str,
                      failure: tuple[str, str] | None) -> None:
        """Write the status when it says something new; a Warning Event on the first failure of a streak."""
        if failure is not None and pool.failing != failure[0]:
            self.events.record(self._ref(pool), Event(failure[0], failure[1], "Warning"))
            log.warning("worker pool %s/%s: %s", *key, failure[1])
        pool.failing = failure[0] if failure is not None else None
        full = {"observedGeneration": pool.raw["metadata"].get("generation"), **body, "conditions": conds,
                "message": message}
        stored = _stored(pool)
        if all(stored.get(k) == v for k, v in full.items()):
            return
        try:
            updated = await self.kube.merge_patch(contract.workerpools_path(*key, "status"), {"status": full},
                                                  retry=False)
        except NotLeader:
            raise
        except ApiError as exc:
            log.warning("worker pool %s/%s: cannot write its status: %s", *key, exc)
            return
        if self.pools.get(key) is pool and isinstance(updated.get("status"), dict):
            pool.raw = {**pool.raw, "status": updated["status"]}


def _stored(pool: Pool) -> dict[str, Any]:
    status = pool.raw.get("status")
    return status if isinstance(status, dict) else {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
