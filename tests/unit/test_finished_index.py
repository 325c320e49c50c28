"""controller/capping.py without a cluster: the finished jobs by finish time, fed as the informers feed the view, and
one pass of the cap (its delete is the controller's own callable, here one that records what it was asked)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from sextant.controller.capping import Capper, FinishedIndex
from sextant.controller.view import View
from sextant.kube.events import EventRecorder
from sextant.resources.queue import QueueSpec, Retention

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def raw(name: str, queue: str, finished: float | None, *, rv: int = 10, ns: str = "shop") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "uid": f"u-{name}", "resourceVersion": str(rv), "generation": 1,
                     "creationTimestamp": "2026-03-01T11:00:00Z"},
        "spec": {"queue": queue, "handler": "h"}, "status": {"state": "running", "observedGeneration": 1}}
    if finished is not None:
        at = (T0 + timedelta(seconds=finished)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        obj["status"] = {"state": "succeeded", "finishedAt": at, "observedGeneration": 1, "sequence": 1}
    return obj


class Fed:
    """A view and its index, fed the way JobController.on_job feeds them."""

    def __init__(self) -> None:
        self.view = View()
        self.index = FinishedIndex(self.view)

    def upsert(self, obj: dict[str, Any]) -> bool:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        before = self.view.jobs.get(key)
        return self.index.observe(key, before, self.view.upsert_job(obj))

    def delete(self, obj: dict[str, Any]) -> None:
        self.view.delete_job(obj)

    def counts(self) -> dict:
        return {q: sum(s.values()) for q, s in self.view.finished_by_queue.items()}

    def over(self, caps: dict, cluster_cap: int | None, limit: int = 100) -> list[str]:
        return [k[1] for k, _ in self.index.over_cap(self.counts(), caps, cluster_cap, limit)]


def test_oldest_first_across_queues_whatever_the_order_they_arrived_in():
    fed = Fed()
    for name, q, t in [("j3", "a", 3), ("j1", "b", 1), ("j2", "a", 2), ("j0", "a", 0), ("j4", "b", 4)]:
        assert fed.upsert(raw(name, q, t))
    assert fed.over({}, 2) == ["j0", "j1", "j2"]
    assert fed.over({("shop", "b"): 1}, None) == ["j1"]
    assert fed.over({}, 2) == ["j0", "j1", "j2"]  # a walk leaves the index as it found it


def test_an_unfinished_job_is_never_filed_nor_chosen():
    fed = Fed()
    assert not fed.upsert(raw("run", "a", None))
    fed.upsert(raw("done", "a", 5))
    assert fed.over({}, 0) == ["done"]


def test_a_deleted_job_and_a_retried_one_are_dropped_or_refiled():
    fed = Fed()
    fed.upsert(raw("j0", "a", 0))
    fed.upsert(raw("j1", "a", 1))
    fed.upsert(raw("j2", "a", 2))
    fed.delete(raw("j0", "a", 0))
    fed.upsert(raw("j1", "a", None, rv=11))  # retried: running again
    assert fed.over({}, 0) == ["j2"]
    fed.upsert(raw("j1", "a", 10, rv=12))  # finished again, later
    assert fed.over({}, 0) == ["j2", "j1"]
    assert fed.over({}, 1) == ["j2"]


def test_the_same_finish_seen_again_is_filed_once():
    fed = Fed()
    assert fed.upsert(raw("j0", "a", 0, rv=10))
    assert not fed.upsert(raw("j0", "a", 0, rv=11))  # another write, same finish
    assert fed.over({}, 0) == ["j0"]


def test_stale_entries_are_compacted_away():
    fed = Fed()
    for i in range(3000):
        fed.upsert(raw(f"j{i}", "a", i))
    for i in range(2990):
        fed.delete(raw(f"j{i}", "a", i))
    fed.index.compact(fed.counts())
    assert len(fed.index.heaps[("shop", "a")]) == 10
    for i in range(2990, 3000):
        fed.delete(raw(f"j{i}", "a", i))
    fed.index.compact(fed.counts())
    assert ("shop", "a") not in fed.index.heaps


class RecordedEvents(EventRecorder):
    """The real recorder, holding its Events instead of posting them (no API server in a unit test)."""

    def __init__(self) -> None:
        super().__init__(kube=None, now=lambda: T0)  # type: ignore[arg-type]
        self.recorded: list[tuple[dict, Any]] = []

    def record(self, obj, event) -> None:
        self.recorded.append((obj, event))


@pytest.mark.parametrize("waits_for_archive", [False, True])
def test_a_pass_deletes_whats_over_and_warns_once_a_minute(waits_for_archive):
    async def go() -> None:
        fed = Fed()
        fed.view.queues[("shop", "a")] = QueueSpec(retention=Retention(max_jobs=2))
        for i in range(5):
            fed.upsert(raw(f"j{i}", "a", i))
        asked: list[str] = []

        async def delete(key, record):
            asked.append(key[1])
            if waits_for_archive:
                return None
            fed.delete(raw(key[1], "a", 0))
            return "cap"

        now = [T0]
        events = RecordedEvents()
        capper = Capper(fed.view, fed.index, events, asyncio.Event(), lambda: now[0], None, delete)
        capper.queue_uids[("shop", "a")] = "uid-a"
        assert await capper.pass_once() == 3
        assert asked == ["j0", "j1", "j2"]
        if waits_for_archive:
            assert events.recorded == []  # nothing went: nothing to say
            assert await capper.pass_once() == 3  # the same oldest, until their records land
            return
        assert [(o["metadata"], e.reason, e.type) for o, e in events.recorded] == [
            ({"namespace": "shop", "name": "a", "uid": "uid-a"}, "RetentionCapped", "Warning")]
        assert "at most 2" in events.recorded[0][1].message and "spec.retention.maxJobs" in events.recorded[0][1].message
        assert await capper.pass_once() == 0
        fed.upsert(raw("j5", "a", 5))
        now[0] = T0 + timedelta(seconds=30)
        assert await capper.pass_once() == 1 and len(events.recorded) == 1  # within the minute: no second Event
        fed.upsert(raw("j6", "a", 6))
        now[0] = T0 + timedelta(seconds=61)
        assert await capper.pass_once() == 1 and len(events.recorded) == 2

    asyncio.run(go())
