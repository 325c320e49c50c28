"""Admission per queue: concurrency, priority-then-FIFO order, and the limit on pods waiting for a node."""

from __future__ import annotations

from sextant.controller.admission import Admission, Placement

BOUND, PENDING, UNSCHEDULABLE = Placement.BOUND, Placement.PENDING, Placement.UNSCHEDULABLE

Q = ("shop", "emails")


def job(n: int) -> tuple[str, str]:
    return ("shop", f"job-{n}")


def line_up(admission: Admission, count: int, priority: int = 0) -> None:
    for n in range(count):
        admission.offer(job(n), Q, priority, 1000.0 + n, n)


def started(admission: Admission, key: tuple[str, str], placement: Placement) -> None:
    """The granted job's pod now exists: the reservation ends, and the pod's placement counts."""
    admission.release(key)
    admission.hold(key, Q, True, placement)


def test_concurrency_bounds_the_holders_and_order_is_priority_then_fifo():
    admission = Admission()
    line_up(admission, 3)
    admission.offer(("shop", "urgent"), Q, 5, 2000.0, 99)
    assert admission.take(Q, 2) == [("shop", "urgent"), job(0)]
    assert admission.take(Q, 2) == []


def test_while_pods_find_nodes_the_pending_limit_holds_nothing_back():
    admission = Admission()
    line_up(admission, 5)
    granted = admission.take(Q, 100, pending_limit=2)
    assert len(granted) == 5
    for key in granted:
        started(admission, key, PENDING)
    assert admission.pending(Q) == 5


def test_a_full_cluster_holds_the_line_until_the_scheduler_places_a_pod():
    admission = Admission()
    line_up(admission, 6)
    granted = admission.take(Q, 3, pending_limit=2)
    assert len(granted) == 3  # nothing unschedulable yet: the limit does not apply
    for key in granted:
        started(admission, key, PENDING)
    admission.hold(granted[0], Q, True, UNSCHEDULABLE)  # the scheduler found no node: the cluster is full
    assert admission.full(Q, 2) and not admission.full(Q, None)
    assert admission.take(Q, 100, pending_limit=2) == []
    assert not admission.hold(granted[1], Q, True, UNSCHEDULABLE)
    assert admission.hold(granted[1], Q, True, BOUND)  # placed: one pending fewer, but still >= 2 and full
    assert admission.take(Q, 100, pending_limit=2) == []
    assert admission.hold(granted[2], Q, True, BOUND)
    assert admission.take(Q, 100, pending_limit=2) == [job(3)]  # 1 unschedulable + 1 reserved: full again
    assert admission.take(Q, 100, pending_limit=2) == []


def test_once_no_pod_is_unschedulable_the_gate_opens():
    admission = Admission()
    line_up(admission, 4)
    [first] = admission.take(Q, 1)
    started(admission, first, UNSCHEDULABLE)
    assert admission.full(Q, 1)
    assert admission.hold(first, Q, True, BOUND)
    assert not admission.full(Q, 1)
    assert admission.take(Q, 100, pending_limit=1) == [job(1), job(2), job(3)]


def test_a_finished_pending_pod_frees_both_its_slot_and_its_pending_place():
    admission = Admission()
    line_up(admission, 2)
    [first] = admission.take(Q, 1, pending_limit=1)
    started(admission, first, UNSCHEDULABLE)
    assert admission.hold(first, Q, False)
    assert (admission.running(Q), admission.pending(Q), admission.full(Q, 1)) == (0, 0, False)
    assert admission.take(Q, 1, pending_limit=1) == [job(1)]


def test_no_pending_limit_grants_up_to_the_concurrency():
    admission = Admission()
    line_up(admission, 5)
    assert len(admission.take(Q, 4, pending_limit=None)) == 4


def test_forget_drops_a_job_from_every_count():
    admission = Admission()
    line_up(admission, 1)
    [first] = admission.take(Q, 1, pending_limit=1)
    started(admission, first, UNSCHEDULABLE)
    admission.forget(first)
    assert (admission.running(Q), admission.pending(Q), admission.full(Q, 0)) == (0, 0, False)
