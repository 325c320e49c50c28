"""The full-cluster gate's reading of a job (controller/slots.py): whether its own objects hold a slot, and whether its
pod waits for a node, which tells whether the scheduler is behind.

While the scheduler is behind (it reports one of a queue's pods Unschedulable, or one stays unbound longer than
`UNBOUND_AFTER`), a queue has at most `pending_limit` holders whose pod waits for a node (`gate_closed`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import NamedTuple

from ..lifecycle.attempts import PodObservation

# A pod unbound this long means the scheduler is behind (a cluster with room binds a pod in well under a second,
# even in a burst); creationTimestamp has one-second resolution, so a pod's age is never overestimated (`since`).
UNBOUND_AFTER = timedelta(seconds=2)
_TIMESTAMP_RESOLUTION = timedelta(seconds=1)


class Placement(enum.Enum):
    BOUND = "bound"  # on a node, or no live pod
    PENDING = "pending"  # waiting for the scheduler
    UNSCHEDULABLE = "unschedulable"  # the scheduler found no node for it (yet)


class Standing(NamedTuple):  # a tuple: made on every watch event of a job or its pods
    """What a job's own objects say about its slot."""

    holds: bool  # running, or a pod of it is alive
    placement: Placement
    waiting_since: datetime | None = None  # the earliest creation of its pods waiting for a node, if known


def standing(running: bool, pods: Iterable[PodObservation]) -> Standing:
    """A job holds a slot while it runs or a pod of it is alive; its pod waits for a node while alive and unbound."""
    holds, placement, since = running, Placement.BOUND, None
    for pod in pods:
        if not pod.alive:
            continue
        holds = True
        if pod.node is None and not pod.finished and not pod.deleting:
            if pod.unschedulable:
                placement = Placement.UNSCHEDULABLE
            elif placement is Placement.BOUND:
                placement = Placement.PENDING
            if pod.created_at is not None and (since is None or pod.created_at < since):
                since = pod.created_at
    return Standing(holds, placement, since)


def unbound_since(first_seen: datetime, created_at: datetime | None) -> datetime:
    """When a pod began to wait for a node, as late as it can have been: it was created before the operator first
    saw it unbound, and within a second of its (truncated) creationTimestamp. After a restart the latter counts."""
    return first_seen if created_at is None else min(first_seen, created_at + _TIMESTAMP_RESOLUTION)


def behind(placement: Placement, since: datetime | None, now: datetime, unbound_after: timedelta) -> bool:
    """A holder's pod shows the scheduler is behind: it reported the pod Unschedulable, or the pod has waited for a
    node (since `since`) for unbound_after or longer."""
    if placement is Placement.UNSCHEDULABLE:
        return True
    return placement is Placement.PENDING and since is not None and now - since >= unbound_after


def gate_closed(pending_limit: int | None, waiting: int, scheduler_behind: bool) -> bool:
    """The full-cluster gate: while the scheduler is behind (for one of the queue's pods), at most pending_limit of
    the queue's holders wait for a node. None: no limit."""
    return pending_limit is not None and scheduler_behind and waiting >= pending_limit
