"""The controller layer without a cluster, on a fake clock: the timer heap, the work queue, the shared runtime, and
the schedule controller's ordering and adoption rules against an in-memory API double (only those rules: the
real control plane, in tests/cluster, stays the judge of behaviour)."""

from __future__ import annotations

import asyncio
import copy
import itertools
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from sextant import metrics
from sextant.controller.runtime import Runtime
from sextant.controller.schedules import ScheduleController
from sextant.controller.timers import Timers
from sextant.controller.view import View, is_slim
from sextant.controller.workqueue import Backoff, WorkQueue
from sextant.kube import ApiError, NotLeader
from sextant.lifecycle import schedule as S
from sextant.resources.common import format_time

UTC = timezone.utc
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)  # a multiple of 10 s since the epoch


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Clock:
    def __init__(self, moment: datetime = T0) -> None:
        self.moment = moment

    def __call__(self) -> datetime:
        return self.moment

    def to(self, seconds: float) -> None:
        self.moment = at(seconds)


# ================================================================ Timers
def test_timers_fire_in_time_order_and_equal_times_in_the_order_set():
    clock, fired = Clock(), []
    timers = Timers(clock)
    for key, seconds in (("c", 30), ("a", 10), ("b", 20), ("a2", 10)):
        timers.schedule(key, at(seconds), fired.append)
    clock.to(9)
    assert timers.fire_due() == at(10).timestamp() and fired == []
    clock.to(25)
    assert timers.fire_due() == at(30).timestamp()
    assert fired == ["a", "a2", "b"] and len(timers) == 1
    clock.to(30)
    assert timers.fire_due() is None and fired == ["a", "a2", "b", "c"] and len(timers) == 0


def test_a_cancelled_wake_up_never_fires():
    clock, fired = Clock(), []
    timers = Timers(clock)
    timers.schedule("k", at(10), fired.append)
    timers.schedule("k", None, fired.append)
    clock.to(60)
    timers.fire_due()
    assert fired == [] and len(timers) == 0


def test_setting_a_key_again_replaces_its_wake_up_earlier_or_later():
    clock, fired = Clock(), []
    timers = Timers(clock)
    timers.schedule("later", at(10), fired.append)
    timers.schedule("later", at(30), fired.append)  # re-armed later: 10 s is stale
    timers.schedule("sooner", at(30), fired.append)
    timers.schedule("sooner", at(5), fired.append)  # re-armed sooner
    clock.to(20)
    timers.fire_due()
    assert fired == ["sooner"]
    clock.to(30)
    timers.fire_due()
    assert fired == ["sooner", "later"]
    timers.schedule("later", at(40), fired.append)  # a fired key can be set again
    clock.to(40)
    timers.fire_due()
    assert fired == ["sooner", "later", "later"]


def test_a_wake_up_may_set_another_and_a_failing_one_stops_none():
    clock, fired = Clock(), []
    timers = Timers(clock)

    def chain(key: Any) -> None:
        fired.append(key)
        timers.schedule("next", at(0), fired.append)  # already due: fires in the same pass

    def boom(key: Any) -> None:
        raise RuntimeError("a defect")

    timers.schedule("bad", at(0), boom)
    timers.schedule("first", at(0), chain)
    timers.fire_due()
    assert fired == ["first", "next"]


def test_stale_entries_are_dropped_from_the_heap():
    clock = Clock()
    timers = Timers(clock)
    for i in range(3000):
        timers.schedule("k", at(100 + i), lambda key: None)
    timers.fire_due()
    assert len(timers) == 1 and len(timers._heap) < 1100


async def test_the_timer_loop_wakes_for_a_new_earliest_wake_up():
    fired: list[str] = []
    timers = Timers(lambda: datetime.now(UTC))
    timers.schedule("far", datetime.now(UTC) + timedelta(hours=1), fired.append)
    task = asyncio.create_task(timers.run())
    try:
        await asyncio.sleep(0.01)
        timers.schedule("near", datetime.now(UTC) + timedelta(milliseconds=20), fired.append)
        await asyncio.wait_for(_until(lambda: fired == ["near"]), 2)
    finally:
        task.cancel()


async def _until(predicate) -> None:
    while not predicate():
        await asyncio.sleep(0.005)


# ================================================================ WorkQueue
async def test_the_queue_dedupes_and_never_hands_one_key_to_two_workers():
    queue = WorkQueue()
    for key in ("a", "a", "b", "a"):
        queue.add(key)
    assert len(queue) == 2
    assert await queue.get() == "a"
    queue.add("a")  # changed while being processed: once more afterwards, not now
    assert await queue.get() == "b"
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(queue.get(), 0.05)
    queue.done("a")
    assert await asyncio.wait_for(queue.get(), 1) == "a"
    queue.done("a")
    queue.done("b")
    assert len(queue) == 0


async def test_the_backoff_doubles_per_key_up_to_the_cap_and_a_success_resets_it():
    queue = WorkQueue(Backoff(base=1, cap=8))
    assert [queue.add_rate_limited("k") for _ in range(6)] == [1, 2, 4, 8, 8, 8]
    assert queue.add_rate_limited("other") == 1
    queue.forget("k")
    assert queue.backoff.failures("k") == 0 and queue.add_rate_limited("k") == 1
    assert queue.retry_failed_now() == 2  # after an outage: both now, their streaks kept
    assert {await queue.get(), await queue.get()} == {"k", "other"} and queue.backoff.failures("other") == 1


# ================================================================ the shared runtime
async def test_not_leader_puts_the_key_back_without_counting_an_error_and_work_waits_for_leadership():
    calls: list[str] = []
    leading = asyncio.Event()
    leading.set()

    async def reconcile(key: Any) -> None:
        calls.append(key)
        if len(calls) == 1:
            leading.clear()  # deposed while reconciling: the fenced client refuses the write
            raise NotLeader("PUT", "/x")

    runtime = Runtime("job", reconcile, workers=1, leading=leading)
    errors = metrics.RECONCILE_ERRORS._value.get()
    runtime.queue.add("k")
    await runtime.process(await runtime.queue.get())
    assert calls == ["k"] and len(runtime.queue) == 1  # back in the queue for the next leader
    assert runtime.queue.backoff.failures("k") == 0 and runtime.queue.delayed == 0
    assert metrics.RECONCILE_ERRORS._value.get() == errors
    task = asyncio.create_task(runtime.run())
    try:
        await asyncio.sleep(0.05)
        assert calls == ["k"]  # a standby reconciles nothing
        leading.set()
        await asyncio.wait_for(_until(lambda: calls == ["k", "k"]), 1)
    finally:
        task.cancel()


async def test_errors_back_off_per_key_and_are_surfaced_once_per_streak():
    bad = {"bad"}
    surfaced: list[tuple[Any, str]] = []

    async def reconcile(key: Any) -> None:
        if key in bad:
            raise ValueError(f"cannot read {key}")

    runtime = Runtime("schedule", reconcile, workers=2, queue=WorkQueue(Backoff(base=60, cap=60)),
                      report=lambda key, message: surfaced.append((key, message)))
    errors = metrics.RECONCILE_ERRORS._value.get()
    for _ in range(3):
        runtime.queue.add("bad")
        runtime.queue.add("good")
        for _ in range(2):
            await runtime.process(await runtime.queue.get())
    assert runtime.queue.backoff.failures("bad") == 3 and runtime.queue.backoff.failures("good") == 0
    assert surfaced == [("bad", "ValueError: cannot read bad")]
    assert metrics.RECONCILE_ERRORS._value.get() == errors + 3
    assert runtime.queue.delayed == 1  # "bad" waits out its backoff; "good" is not held up by it
    bad.clear()
    runtime.queue.add("bad")
    await runtime.process(await runtime.queue.get())
    assert runtime.queue.backoff.failures("bad") == 0


async def test_run_waits_for_the_first_lists_then_starts_then_works():
    synced, seen = asyncio.Event(), []

    async def reconcile(key: Any) -> None:
        seen.append(key)

    runtime = Runtime("job", reconcile, workers=1)
    task = asyncio.create_task(runtime.run([synced], start=lambda: runtime.queue.add("first")))
    try:
        await asyncio.sleep(0.02)
        assert not runtime.started.is_set() and seen == []
        synced.set()
        await asyncio.wait_for(_until(lambda: seen == ["first"]), 1)
        assert runtime.started.is_set()
    finally:
        task.cancel()


# ================================================================ the schedule controller, on an API double
NS, NAME = "shop", "every-10s"
JOBS = f"/apis/sextant.dev/v1alpha1/namespaces/{NS}/jobs"


class FakeApi:
    """An in-memory API server for Jobs and one Schedule: names are unique (a second create answers 409),
    resourceVersions grow, a status PUT at an old resourceVersion answers 409."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.objects: dict[str, dict[str, Any]] = {}  # path → object
        self.rv = itertools.count(100)
        self.creates: list[str] = []  # names, in order, of every create that succeeded
        self.lose_status_writes = False

    def put(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        meta["resourceVersion"] = str(next(self.rv))
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("creationTimestamp", format_time(self.clock(), precise=False))
        meta.setdefault("generation", 1)
        self.objects[path] = obj
        return copy.deepcopy(obj)

    def _get(self, path: str) -> dict[str, Any]:
        if path not in self.objects:
            raise ApiError(404, {"reason": "NotFound", "message": f"{path} not found"}, "GET", path)
        return self.objects[path]

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        target = f"{path}/{body['metadata']['name']}"
        if target in self.objects:
            raise ApiError(409, {"reason": "AlreadyExists", "message": "already exists"}, "POST", path)
        self.creates.append(body["metadata"]["name"])
        return self.put(target, body)

    async def get(self, path: str) -> dict[str, Any]:
        return copy.deepcopy(self._get(path))

    async def merge_patch(self, path: str, body: dict[str, Any], *, retry: bool = True) -> dict[str, Any]:
        obj = self._get(path.removesuffix("/status"))
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != obj["metadata"]["resourceVersion"]:
            raise ApiError(409, {"reason": "Conflict", "message": "changed"}, "PATCH", path)
        obj = copy.deepcopy(obj)
        obj.setdefault("status", {}).update(body.get("status") or {})
        return self.put(path.removesuffix("/status"), obj)

    async def replace_status(self, path: str, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any] | None:
        stored = self.objects.get(path)
        if self.lose_status_writes or stored is None or \
                stored["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            return None
        return self.put(path, {**copy.deepcopy(stored), "status": status})

    async def delete(self, path: str, grace_seconds: int | None = None,
                     preconditions: dict[str, str] | None = None) -> dict[str, Any]:
        obj = self._get(path)
        if preconditions and preconditions.get("uid") not in (None, obj["metadata"]["uid"]):
            raise ApiError(409, {"reason": "Conflict", "message": "uid"}, "DELETE", path)
        return self.objects.pop(path)

    def jobs(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for p, o in self.objects.items() if p.startswith(JOBS + "/")]


class NoEvents:
    def __init__(self) -> None:
        self.recorded: list[Any] = []

    def record(self, obj: dict[str, Any], event: Any) -> None:
        self.recorded.append(event)


SCHEDULE_PATH = f"/apis/sextant.dev/v1alpha1/namespaces/{NS}/schedules/{NAME}"


def new_schedule(api: FakeApi, **spec: Any) -> None:
    api.put(SCHEDULE_PATH, {"apiVersion": "sextant.dev/v1alpha1", "kind": "Schedule",
                            "metadata": {"name": NAME, "namespace": NS},
                            "spec": {"interval": "10s", "jobTemplate": {"queue": "q", "handler": "h"}, **spec}})


def start(api: FakeApi, clock: Clock) -> ScheduleController:
    """A fresh operator: its view filled from the API double's lists, as the informers' first lists fill it."""
    view = View(now=clock)
    controller = ScheduleController(api, view, NoEvents(), Timers(clock), now=clock)
    for job in api.jobs():
        view.upsert_job(job)
    controller.on_schedule("upsert", copy.deepcopy(api.objects[SCHEDULE_PATH]))
    controller._start()
    controller.started.set()
    return controller


def status(api: FakeApi) -> dict[str, Any]:
    return api.objects[SCHEDULE_PATH].get("status") or {}


async def test_a_create_that_answers_already_exists_is_the_tick_fired_and_adopted():
    clock = Clock()
    api = FakeApi(clock)
    new_schedule(api)
    controller = start(api, clock)
    name = S.job_name(NS, NAME, at(10))
    # The previous leader created the tick's job and stopped before the status said so; the watch has not shown it.
    api.put(f"{JOBS}/{name}", {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
                               "metadata": {"name": name, "namespace": NS, "labels": {S.LABEL_SCHEDULE: NAME},
                                            "annotations": {S.ANNOTATION_SCHEDULED_AT: S.format_tick(at(10))}},
                               "spec": {"queue": "q", "handler": "h", "idempotencyKey": S.idempotency_key(NAME, at(10))}})
    clock.to(10.2)
    await controller.reconcile((NS, NAME))
    assert api.creates == [] and len(api.jobs()) == 1
    assert status(api)["lastJob"] == name and status(api)["evaluatedUntil"] == S.format_tick(at(10))
    assert (NS, name) in controller.view.jobs  # adopted into the one view
    clock.to(10.5)
    await controller.reconcile((NS, NAME))
    assert api.creates == []


async def test_a_name_taken_by_another_object_moves_the_tick_to_the_next_generation_of_its_name():
    clock = Clock()
    api = FakeApi(clock)
    new_schedule(api)
    controller = start(api, clock)
    taken = S.job_name(NS, NAME, at(10))
    api.put(f"{JOBS}/{taken}", {"metadata": {"name": taken, "namespace": NS}, "spec": {"queue": "q", "handler": "x"}})
    clock.to(10.1)
    await controller.reconcile((NS, NAME))
    assert api.creates == [S.job_name(NS, NAME, at(10), 1)]


async def test_a_restart_resumes_from_the_status_and_fires_no_tick_twice():
    clock = Clock()
    api = FakeApi(clock)
    new_schedule(api, missedRunPolicy="Skip")
    first = start(api, clock)
    for moment in (0.1, 10.1, 20.1):
        clock.to(moment)
        await first.reconcile((NS, NAME))
    assert api.creates == [S.job_name(NS, NAME, at(t)) for t in (10, 20)]
    assert status(api)["evaluatedUntil"] == S.format_tick(at(20))
    # The operator stops; ticks 30 and 40 pass while none runs; another starts at 45.
    clock.to(45)
    second = start(api, clock)
    await second.reconcile((NS, NAME))
    assert len(api.creates) == 2  # missedRunPolicy Skip: 30 and 40 are not made up, 10 and 20 not fired again
    assert status(api)["evaluatedUntil"] == S.format_tick(at(40))
    assert status(api)["nextScheduleTime"] == S.format_tick(at(50))
    clock.to(50.1)
    await second.reconcile((NS, NAME))
    assert api.creates[2:] == [S.job_name(NS, NAME, at(50))] and len(set(api.creates)) == 3


async def test_a_lost_status_write_is_repaired_by_the_next_operator_without_a_second_job():
    clock = Clock()
    api = FakeApi(clock)
    new_schedule(api)
    first = start(api, clock)
    clock.to(0.1)
    await first.reconcile((NS, NAME))
    api.lose_status_writes = True  # the job is created, the status write never lands (a crash in between)
    clock.to(10.1)
    await first.reconcile((NS, NAME))
    assert len(api.creates) == 1 and status(api)["evaluatedUntil"] == S.format_tick(at(0))
    api.lose_status_writes = False
    clock.to(11)
    second = start(api, clock)
    await second.reconcile((NS, NAME))
    assert len(api.creates) == 1 and status(api)["lastJob"] == api.creates[0]


async def test_the_schedule_wakes_when_one_of_its_jobs_finishes_or_goes_not_for_its_own_writes():
    clock = Clock()
    api = FakeApi(clock)
    new_schedule(api)
    controller = start(api, clock)
    key = (NS, NAME)
    assert await controller.queue.get() == key  # the start's look at every schedule
    controller.queue.done(key)
    clock.to(10.1)
    await controller.reconcile(key)
    assert len(controller.queue) == 0  # the create's response, stored by the controller itself, wakes nobody
    (job,) = api.jobs()
    job["status"] = {"state": "running"}
    job["metadata"]["resourceVersion"] = "900"
    controller.view.upsert_job(copy.deepcopy(job))
    assert len(controller.queue) == 0  # still active: nothing the schedule decides on changed
    job["status"] = {"state": "succeeded", "observedGeneration": 1, "finishedAt": format_time(clock())}
    job["metadata"]["resourceVersion"] = "901"
    controller.view.upsert_job(copy.deepcopy(job))
    assert len(controller.queue) == 1
    kept = controller.view.jobs[(NS, job["metadata"]["name"])]
    assert is_slim(kept) and S.JobRef.of(kept).scheduled_at == at(10)  # the tick survives slimming
    assert controller.jobs_of(key)[0].finished
    await controller.queue.get()
    controller.queue.done(key)
    controller.view.delete_job(job)
    assert len(controller.queue) == 1 and controller.jobs_of(key) == []
