"""Admission per queue (controller/slots.py): concurrency, priority-then-FIFO order, worker slots, and the full-cluster
gate on pods waiting for a node (Unschedulable, or unbound past UNBOUND_AFTER), on a fake clock without a cluster."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from sextant.controller.slots import (SKIP_LIMIT, UNBOUND_AFTER, Placement, Slots, behind, gate_closed, line_position,
                                      standing, unbound_since)
from sextant.controller.timers import Timers
from sextant.controller.view import View
from sextant.lifecycle.attempts import PodObservation
from sextant.lifecycle.transitions import pod_name
from sextant.controller.records import Placed
from sextant.resources.worker import Assignment
from sextant.resources.common import format_time
from sextant.resources.handler import HandlerSpec
from sextant.resources.queue import QueueSpec

UTC = timezone.utc
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
NS = "shop"
Q = (NS, "emails")
BOUND, PENDING, UNSCHEDULABLE = Placement.BOUND, Placement.PENDING, Placement.UNSCHEDULABLE
POD_HANDLER = HandlerSpec.model_validate({"template": {"spec": {"containers": [{"name": "h", "image": "i"}]}}})
WORKER_HANDLER = HandlerSpec.model_validate({"worker": {}})


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def job(n: int | str) -> tuple[str, str]:
    return (NS, f"job-{n}")


class Cluster:
    """A View filled by hand, a fake clock, the one timer heap, and the Slots under test."""

    def __init__(self, concurrency: int = 100, pending_limit: int | None = 2) -> None:
        self.moment = T0
        self.view = View(now=self.now)
        self.timers = Timers(self.now)
        self.granted: list[tuple[str, str]] = []
        self.slots = Slots(self.view, self.timers, self.now, pending_limit=pending_limit, granted=self.granted.append)
        self.view.queues[Q] = QueueSpec.model_validate({"concurrency": concurrency})
        self.view.handlers[(NS, "pods")] = POD_HANDLER
        self.view.handlers[(NS, "work")] = WORKER_HANDLER
        self.rv = itertools.count(10)

    def now(self) -> datetime:
        return self.moment

    def to(self, seconds: float) -> None:
        self.moment = at(seconds)
        self.timers.fire_due()

    def job(self, n: int | str, *, priority: int = 0, handler: str = "pods", state: str | None = None,
            worker: str | None = None, created: float = 0, tenant: str | None = None) -> tuple[str, str]:
        """A job as the watch brings it: stored, lined up, told to the slots (as JobController.on_job does)."""
        key = job(n)
        status: dict[str, Any] = {"state": state} if state else {}
        if worker:
            status["worker"] = worker
        self.view.upsert_job({"apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
                              "metadata": {"name": key[1], "namespace": NS, "uid": f"uid-{key[1]}",
                                           "resourceVersion": str(next(self.rv)),
                                           "creationTimestamp": format_time(at(created), precise=False)},
                              "spec": {"queue": Q[1], "handler": handler, "priority": priority,
                                       **({"concurrencyKey": tenant} if tenant else {})},
                              "status": status})
        self.slots.line_up(key)
        self.slots.update(key)
        return key

    def line(self, count: int, **fields: Any) -> list[tuple[str, str]]:
        return [self.job(n, **fields) for n in range(count)]

    def pod(self, key: tuple[str, str], *, node: str | None = None, unschedulable: bool = False,
            phase: str = "Pending", created: float | None = None) -> None:
        """The job's attempt pod (run 1) as the watch shows it now."""
        self.view.pods[key][1] = PodObservation(
            name=pod_name(key[1], 1), sequence=1, phase=phase, node=node, unschedulable=unschedulable,
            owner_uid=f"uid-{key[1]}", created_at=at(created if created is not None else
                                                      (self.moment - T0).total_seconds() // 1))
        self.slots.update(key)

    def started(self, key: tuple[str, str], **pod: Any) -> None:
        """The reconcile that acted on key's grant created its pod and ends (JobController.reconcile's finally)."""
        self.pod(key, **pod)
        self.slots.release(key)
        self.slots.update(key)

    def take(self, key: tuple[str, str]) -> bool:
        """key's reconcile asks for a slot; True when granted."""
        raw = self.view.jobs[key].raw
        return self.slots.request(key, Q, raw["spec"]["priority"], line_position(raw))

    def worker(self, name: str, slots: int, queues: tuple[str, ...] = ("emails",),
               assignments: tuple[Assignment, ...] = ()) -> None:
        """A Worker object as its watch brings it (incarnation "1"), with these assignments in its status."""
        self.view.upsert_worker({
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": 1,
                         "resourceVersion": str(next(self.rv))},
            "spec": {"incarnation": "1", "queues": list(queues), "handlers": ["work"], "slots": slots,
                     "leaseDurationSeconds": 30},
            "status": {"assignments": [a.wire() for a in assignments]}})

    def assignment(self, key: tuple[str, str], sequence: int = 1) -> Assignment:
        return Assignment(job=key[1], uid=f"uid-{key[1]}", queue=Q[1], handler="work", sequence=sequence, attempt=1,
                          incarnation="1", assigned_at=format_time(self.moment))

    def assigned(self, key: tuple[str, str], worker: str) -> None:
        """The reconcile that acted on key's grant handed its assignment to the Worker status writer, and ends."""
        self.view.pending[key] = Placed(worker, f"uid-{worker}", self.assignment(key))
        self.slots.release(key)
        self.slots.update(key)


# ================================================================ the rules, as tables
@pytest.mark.parametrize("placement,waited,expected", [
    (BOUND, None, False),
    (BOUND, 60, False),  # bound: the scheduler kept up, however long ago the pod was made
    (PENDING, None, False),  # its creation unknown: only the timer's own clock tells
    (PENDING, 0, False),
    (PENDING, 1.99, False),
    (PENDING, 2, True),  # UNBOUND_AFTER reached
    (PENDING, 30, True),
    (UNSCHEDULABLE, None, True),  # the scheduler said so: no need to wait
    (UNSCHEDULABLE, 0, True),
])
def test_the_scheduler_is_behind_when_a_pod_is_unschedulable_or_unbound_past_the_threshold(placement, waited,
                                                                                            expected):
    since = None if waited is None else at(0)
    assert behind(placement, since, at(waited or 0), UNBOUND_AFTER) is expected


@pytest.mark.parametrize("limit,waiting,scheduler_behind,closed", [
    (None, 0, False, False),
    (None, 10_000, True, False),  # no limit (--max-pending-pods 0)
    (2, 0, False, False),
    (2, 5, False, False),  # pods wait, but the scheduler keeps up: nothing held back
    (2, 0, True, False),
    (2, 1, True, False),
    (2, 2, True, True),
    (2, 3, True, True),
    (0, 0, True, True),
    (200, 199, True, False),
    (200, 200, True, True),
])
def test_the_gate_closes_only_while_the_scheduler_is_behind_and_enough_pods_wait(limit, waiting, scheduler_behind,
                                                                                   closed):
    assert gate_closed(limit, waiting, scheduler_behind) is closed


@pytest.mark.parametrize("first_seen,created,expected", [
    (5.0, None, 5.0),  # creation unknown: when the operator saw it
    (5.0, 4.0, 5.0),  # creationTimestamp 4 s: created before 5 s, seen at 5: as late as possible
    (5.0, 1.0, 2.0),  # seen late (after a restart): its creation second + 1 counts
    (5.0, 9.0, 5.0),  # a clock ahead of ours never makes a pod younger than when we saw it
])
def test_a_pods_wait_counts_from_the_latest_moment_it_can_have_begun(first_seen, created, expected):
    assert unbound_since(at(first_seen), None if created is None else at(created)) == at(expected)


def _pod(**fields: Any) -> PodObservation:
    return PodObservation(name="p", sequence=1, **fields)


@pytest.mark.parametrize("running,pods,holds,placement", [
    (False, (), False, BOUND),
    (True, (), True, BOUND),  # a worker's job: running by its status
    (False, (_pod(phase="Pending"),), True, PENDING),
    (False, (_pod(phase="Pending", unschedulable=True),), True, UNSCHEDULABLE),
    (False, (_pod(phase="Running", node="n1"),), True, BOUND),
    (False, (_pod(phase="Succeeded"),), False, BOUND),  # finished: holds nothing
    (False, (_pod(phase="Succeeded", deleting=True),), True, BOUND),  # still terminating: holds, waits for no node
    (False, (_pod(phase="Pending", deleting=True),), True, BOUND),  # deleted before bound: waits for no node
    (False, (_pod(phase="Failed"), _pod(phase="Pending")), True, PENDING),
    (False, (_pod(phase="Pending"), _pod(phase="Pending", unschedulable=True)), True, UNSCHEDULABLE),
])
def test_what_a_jobs_own_objects_say_about_its_slot(running, pods, holds, placement):
    seen = standing(running, pods)
    assert (seen.holds, seen.placement) == (holds, placement)


# ================================================================ concurrency and order
def test_concurrency_bounds_the_holders_and_order_is_priority_then_fifo():
    c = Cluster(concurrency=2)
    c.line(3)
    urgent = c.job("urgent", priority=5, created=60)
    assert c.take(urgent)
    assert c.granted == [job(0)]  # the second free slot goes to the oldest of equal priority
    assert not c.take(job(1)) and c.slots.in_line(job(1)) and c.slots.holders(Q) == 2


def test_same_second_ties_go_by_the_order_the_watch_delivered_them():
    c = Cluster(concurrency=1)
    for name in ("z", "a", "m"):  # created in this order within one second
        c.job(name)
    c.slots.pump(Q)
    assert c.granted == [job("z")]


def test_holders_are_rebuilt_from_the_objects_after_a_restart():
    """A fresh operator counts running jobs and live pods before it grants anything: concurrency holds."""
    c = Cluster(concurrency=3)
    c.job("r", state="running", handler="work", worker="w")  # a worker's job
    c.job("p", state="queued")
    c.pod(job("p"), node="n1", phase="Running")  # a pod's job, its pod started
    c.job("s", state="queued")
    c.pod(job("s"))  # a pod still waiting for a node
    c.line(5)
    c.slots.pump(Q)
    assert c.slots.holders(Q) == 3 and c.granted == []


def test_a_finished_pod_gives_its_slot_to_the_next_in_line_at_once():
    c = Cluster(concurrency=1)
    first, second = c.line(2)
    assert c.take(first) and not c.take(second)
    c.started(first, node="n1", phase="Running")
    c.pod(first, node="n1", phase="Succeeded")
    assert c.granted == [second]


# ================================================================ the full-cluster gate
def test_while_pods_find_nodes_the_pending_limit_holds_nothing_back():
    c = Cluster(pending_limit=2)
    c.line(5)
    c.slots.pump(Q)
    assert len(c.granted) == 5
    for key in c.granted:
        c.started(key)  # all five wait for a node, none for long
    c.to(1.9)
    assert c.slots.waiting(Q) == 5 and not c.slots.full(Q)
    for key in c.granted:
        c.pod(key, node="n1")  # bound within the threshold
    c.to(60)
    assert not c.slots.full(Q) and len(c.timers) == 0  # no wake-up left behind


def test_an_unschedulable_pod_holds_the_line_until_the_scheduler_places_one():
    c = Cluster(concurrency=5, pending_limit=2)
    c.line(8)
    c.slots.pump(Q)
    g = list(c.granted)
    assert len(g) == 5  # nothing unschedulable yet: the limit does not apply
    for key in g:
        c.started(key)
    c.pod(g[0], unschedulable=True)  # the scheduler found no node: the cluster is full
    assert c.slots.full(Q) and not gate_closed(None, 5, True)
    c.granted.clear()
    for key in g[1:4]:
        c.pod(key, node="n1")  # placed: 2 still wait (one unschedulable): full
    c.pod(g[1], node="n1", phase="Succeeded")
    c.pod(g[2], node="n1", phase="Succeeded")  # two slots free, but the gate holds them
    assert c.granted == [] and c.slots.full(Q) and c.slots.holders(Q) == 3
    c.pod(g[4], node="n1")  # one waits now: below the limit
    assert c.granted == [job(5)]  # then 1 unschedulable + 1 reserved: full again, with a slot still free
    assert c.slots.full(Q) and c.slots.holders(Q) == 4
    c.pod(g[0], node="n1")  # the scheduler placed it: the gate opens
    assert c.granted == [job(5), job(6)] and c.slots.holders(Q) == 5


def test_pods_unbound_past_the_threshold_close_the_gate_without_unschedulable():
    """The scheduler is behind (a burst): no Unschedulable yet, but pods stay unbound; at most pending_limit wait."""
    c = Cluster(pending_limit=3)
    c.line(10)
    c.slots.pump(Q)
    first = list(c.granted)
    for key in first:
        c.started(key)
    assert len(first) == 10 and not c.slots.full(Q)  # nobody was late yet: all granted
    c.to(1.5)
    c.pod(first[0], node="n1")
    c.to(2.1)  # the others crossed UNBOUND_AFTER unbound: the timer marks them
    assert c.slots.full(Q) and c.slots.waiting(Q) == 9
    c.granted.clear()
    for n in range(10, 14):
        c.job(n)
    c.slots.pump(Q)
    assert c.granted == []  # held in line (in priority order) instead of as pods the scheduler churns through
    for key in first[1:8]:  # the scheduler catches up: 2 still wait
        c.pod(key, node="n1")
    assert c.granted == [job(10)]  # 3 waiting again, 2 of them late: closed
    assert c.slots.full(Q)
    for key in first[8:]:
        c.pod(key, node="n1")
    assert c.granted == [job(10), job(11), job(12), job(13)]  # only fresh pods wait now: open


def test_a_pod_bound_before_the_threshold_never_closes_the_gate():
    c = Cluster(pending_limit=1)
    [key] = c.line(1)
    c.slots.pump(Q)
    c.started(key)
    c.to(1.0)
    c.pod(key, node="n1")
    c.to(10)
    assert not c.slots.full(Q) and len(c.timers) == 0


def test_a_pod_unbound_since_before_a_restart_counts_at_once():
    c = Cluster(pending_limit=1)
    c.moment = at(30)
    c.job("old", state="queued")
    c.pod(job("old"), created=10)  # created 20 s before this operator saw it, still unbound
    assert c.slots.full(Q)
    c.line(2)
    c.slots.pump(Q)
    assert c.granted == []


def test_a_reservation_alone_is_never_late():
    """A granted job whose pod is still being created (or a worker's job being assigned) waits, but says nothing
    about the scheduler."""
    c = Cluster(pending_limit=1)
    [key] = c.line(1)
    c.slots.pump(Q)
    c.to(30)
    assert c.slots.waiting(Q) == 1 and not c.slots.full(Q) and len(c.timers) == 0


def test_a_finished_waiting_pod_frees_its_slot_and_its_place_and_forget_drops_every_count():
    c = Cluster(concurrency=1, pending_limit=1)
    first, second, third = c.line(3)
    c.slots.pump(Q)
    c.started(first, unschedulable=True)
    c.pod(first, phase="Failed")
    assert c.granted == [first, second]
    c.started(second, unschedulable=True)
    c.slots.forget(second)  # gone: its slot and its waiting place go to the next
    assert c.granted[-1] == third and len(c.timers) == 0
    assert (c.slots.holders(Q), c.slots.waiting(Q), c.slots.full(Q)) == (1, 1, False)  # third, reserved


def test_no_pending_limit_grants_up_to_the_concurrency():
    c = Cluster(concurrency=4, pending_limit=None)
    c.line(6)
    c.slots.pump(Q)
    for key in c.granted:
        c.started(key, unschedulable=True)
    assert len(c.granted) == 4 and c.slots.holders(Q) == 4 and not c.slots.full(Q)
    assert len(c.timers) == 0  # no gate: no wake-ups either


# ================================================================ worker slots
def test_a_worker_mode_job_waits_for_a_worker_with_room_and_a_pod_job_behind_it_still_starts():
    c = Cluster()
    c.worker("w1", slots=1)
    a, b = c.job("a", handler="work"), c.job("b", handler="work")
    pod_job = c.job("c")
    c.slots.pump(Q)
    assert c.granted == [a, pod_job]  # b: no worker has room; passed over, keeps its place
    assert c.slots.worker_of(a) == "w1/1" and c.slots.busy(NS) == {"w1": 1}
    assert c.slots.in_line(b)


def test_a_workers_slot_is_held_from_the_pick_through_the_assignment_until_it_is_removed():
    c = Cluster(concurrency=1)
    c.worker("w1", slots=1)
    a, b = c.job("a", handler="work"), c.job("b", handler="work")
    c.slots.pump(Q)
    assert c.granted == [a] and c.slots.busy(NS) == {"w1": 1}  # picked
    c.assigned(a, "w1")  # on its way: the pick's hold gives way to the assignment's
    assert c.slots.busy(NS) == {"w1": 1} and c.slots.holds(a)
    c.slots.pump(Q)
    assert c.granted == [a]
    c.worker("w1", slots=1, assignments=(c.assignment(a),))  # landed
    del c.view.pending[a]
    c.slots.update(a)
    assert c.slots.busy(NS) == {"w1": 1} and c.slots.holds(a)
    c.job("a", handler="work", state="succeeded")  # its end recorded: the assignment still holds until removed
    assert c.granted == [a] and c.slots.holds(a)
    c.worker("w1", slots=1)  # removed (the acknowledgement landed)
    c.slots.update(a)
    assert c.granted == [a, b] and c.slots.busy(NS) == {"w1": 1}


def test_skip_limit_bounds_how_far_one_take_looks_past_jobs_no_worker_can_start():
    c = Cluster()
    for n in range(SKIP_LIMIT):
        c.job(n, handler="work")  # no worker at all
    behind_them = c.job("pod")
    c.slots.pump(Q)
    assert c.granted == [] and c.slots.in_line(behind_them)
    c.slots.withdraw(job(0))
    c.slots.pump(Q)
    assert c.granted == [behind_them]


def test_release_gives_back_both_the_queues_and_the_workers_slot_of_a_grant_never_acted_on():
    c = Cluster(concurrency=1)
    c.worker("w1", slots=1)
    a, b = c.job("a", handler="work"), c.job("b", handler="work")
    c.slots.pump(Q)
    assert c.granted == [a]
    c.slots.withdraw(a)  # its reconcile found it cancelled meanwhile: nothing was written
    c.slots.release(a)
    c.slots.update(a)
    assert c.granted == [a, b] and c.slots.busy(NS) == {"w1": 1} and c.slots.worker_of(a) is None


# ================================================================ rate limits and concurrency keys
def rate_limited(starts: int, per: str, **spec: Any) -> Cluster:
    c = Cluster()
    c.view.queues[Q] = QueueSpec.model_validate({"concurrency": 100, "rateLimit": {"starts": starts, "per": per},
                                                 **spec})
    return c


def test_a_rate_limited_queue_grants_a_windows_worth_and_wakes_when_the_window_has_room():
    c = rate_limited(2, "10s")
    jobs = c.line(5)
    c.slots.pump(Q)
    assert c.granted == jobs[:2] and c.slots.rate(Q) == (2, True)
    for key in jobs[:2]:
        c.started(key, node="n1", phase="Running")
    c.to(9.9)
    assert c.granted == jobs[:2]
    c.to(10)  # the timer the take set: no other change is needed
    assert c.granted == jobs[:4]


def test_a_restarted_operator_counts_its_predecessors_starts_from_the_pods_and_assignments():
    c = rate_limited(3, "10s", perKeyConcurrency=5)
    c.worker("w1", slots=5)
    pods = [c.job("p1", state="running"), c.job("p2", state="running")]
    for key in pods:
        c.pod(key, node="n1", phase="Running", created=0)  # created at 0 s, by the second: counted as 1 s
    worked = c.job("w", handler="work", state="running", worker="w1")
    c.view.assigned[worked][1] = Placed("w1", "uid-w1", c.assignment(worked))  # assigned at 0 s
    c.slots.update(worked)
    waiting = c.line(3)
    c.to(5)
    c.slots.pump(Q)
    assert c.granted == [] and c.slots.rate(Q) == (3, True)
    c.to(10)  # the assignment's start left the window; the pods' count until 11 s
    c.slots.pump(Q)
    assert c.granted == waiting[:1]
    c.to(11)
    assert c.granted == waiting


def test_a_finished_job_seen_slim_counts_its_last_start_until_the_window_passes_its_end():
    c = rate_limited(1, "10s")
    c.view.upsert_job({"metadata": {"name": "done", "namespace": NS, "uid": "uid-done", "resourceVersion": "1",
                                    "generation": 1, "creationTimestamp": format_time(at(0), precise=False)},
                       "spec": {"queue": Q[1], "handler": "pods"},
                       "status": {"state": "succeeded", "sequence": 1, "observedGeneration": 1,
                                  "finishedAt": format_time(at(2))}})
    c.slots.update(job("done"))
    waiting = c.job("next")
    c.slots.pump(Q)
    assert c.granted == []
    c.to(12)
    assert c.granted == [waiting]


def test_per_key_concurrency_holds_and_keys_take_turns():
    c = Cluster(concurrency=4)
    c.view.queues[Q] = QueueSpec.model_validate({"concurrency": 4, "perKeyConcurrency": 2})
    big = [c.job(f"big-{n}", tenant="big") for n in range(6)]
    small = [c.job(f"small-{n}", tenant="small") for n in range(3)]
    c.slots.pump(Q)
    assert c.granted == [big[0], small[0], big[1], small[1]]
    for key in c.granted:
        c.started(key, node="n1", phase="Running")
    c.pod(small[0], node="n1", phase="Succeeded")  # ends: its key has room again
    assert c.granted[4:] == [small[2]]
    c.pod(big[0], node="n1", phase="Succeeded")
    assert c.granted[5:] == [big[2]]
    assert c.slots.holders(Q) == 4
