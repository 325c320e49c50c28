"""The controller layer without a cluster, on a fake clock: the timer heap, the work queue, the shared runtime, and
the schedule controller's ordering and adoption rules against an in-memory API double (only those rules: the
real control plane, in tests/cluster, stays the judge of behaviour)."""

from __future__ import annotations

import asyncio
import copy
import itertools
from datetime import datetime, timedelta, timezone
from collections.abc import Callable
from typing import Any

import pytest

from sextant.kube import metrics
from sextant.controller.runtime import Runtime
from sextant.controller.schedules import ScheduleController
from sextant.controller.timers import Timers
from sextant.controller.records import FinishedJob
from sextant.controller.view import View
from sextant.kube.workqueue import Backoff, WorkQueue
from sextant.kube.client import ApiError, NotLeader
from sextant.lifecycle import schedule as S
from sextant.resources.common import format_time
from tests.harness import until

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
        for _ in range(3):  # turns of the loop: the timer task now sleeps until the far wake-up
            await asyncio.sleep(0)
        timers.schedule("near", datetime.now(UTC) + timedelta(milliseconds=20), fired.append)
        await until(lambda: fired == ["near"], 2)
    finally:
        task.cancel()


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
        for _ in range(20):  # turns of the loop for its workers
            await asyncio.sleep(0)
        assert calls == ["k"]  # a standby reconciles nothing
        leading.set()
        await until(lambda: calls == ["k", "k"], 1)
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
        for _ in range(5):  # turns of the loop: nothing starts before the first lists are in
            await asyncio.sleep(0)
        assert not runtime.started.is_set() and seen == []
        synced.set()
        await until(lambda: seen == ["first"], 1)
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
        # The operator's informers: told of every change before the write's answer (the watch may be faster).
        self.watch: Callable[[str, str, dict[str, Any]], None] = lambda kind, path, obj: None

    def put(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        meta["resourceVersion"] = str(next(self.rv))
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("creationTimestamp", format_time(self.clock(), precise=False))
        meta.setdefault("generation", 1)
        self.objects[path] = obj
        self.watch("upsert", path, copy.deepcopy(obj))
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

    async def create_as_sent(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Kube.create_as_sent: what was sent, with the new metadata (the server sends back only that)."""
        created = await self.create(path, body)
        return {**copy.deepcopy(body), "metadata": created["metadata"]}

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
        gone = self.objects.pop(path)
        self.watch("delete", path, copy.deepcopy(gone))
        return gone

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
    assert [j.name for j in controller.jobs_of((NS, NAME))] == [name]  # adopted: counted until the watch shows it
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
    assert isinstance(kept, FinishedJob) and controller.jobs_of(key)[0].scheduled_at == at(10)  # its tick is kept
    assert controller.jobs_of(key)[0].finished
    await controller.queue.get()
    controller.queue.done(key)
    controller.view.delete_job(job)
    assert len(controller.queue) == 1 and controller.jobs_of(key) == []


# ================================================================ the job controller, on an API double
# Only its ordering, adoption and fencing rules, and that a slot reserved for a job is given back on every path.
QUEUE, POD_HANDLER, WORK_HANDLER = "emails", "send", "work"
PODS = f"/api/v1/namespaces/{NS}/pods"
WORKERS = f"/apis/sextant.dev/v1alpha1/namespaces/{NS}/workers"


class JobsApi(FakeApi):
    """FakeApi with pods, a log of writes in order, refusals on demand, and the write fence: while `leader` is False
    every write raises NotLeader before it is sent, as the fenced client does (controller/leader.py)."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.leader = True
        self.writes: list[tuple[str, str]] = []  # (verb, name) of every write that landed, in order
        self.refuse_pods: int | None = None  # answer pod creates with this status
        self.refuse_worker_status: int | None = None  # answer Worker status writes with this status
        self.fail_pods: Exception | None = None  # or raise this (a defect, a dropped connection)

    def _fence(self, verb: str, path: str) -> None:
        if not self.leader:
            raise NotLeader(verb, path)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self._fence("POST", path)
        if path == PODS and self.fail_pods is not None:
            raise self.fail_pods
        if path == PODS and self.refuse_pods is not None:
            raise ApiError(self.refuse_pods, {"reason": "Forbidden", "message": "exceeded quota"}, "POST", path)
        created = await super().create(path, body)
        self.writes.append(("create", body["metadata"]["name"]))
        return created

    async def replace_status(self, path: str, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any] | None:
        self._fence("PUT", path)
        updated = await super().replace_status(path, obj, status)
        if updated is not None:
            self.writes.append(("status", obj["metadata"]["name"]))
        return updated

    async def merge_patch(self, path: str, body: dict[str, Any], *, retry: bool = True) -> dict[str, Any]:
        self._fence("PATCH", path)
        if path.startswith(WORKERS) and self.refuse_worker_status is not None:
            raise ApiError(self.refuse_worker_status, {"reason": "NotFound", "message": "gone"}, "PATCH", path)
        patched = await super().merge_patch(path, body, retry=retry)
        self.writes.append(("patch", patched["metadata"]["name"]))
        return patched

    def worker(self, name: str, slots: int = 1) -> dict[str, Any]:
        return self.put(f"{WORKERS}/{name}", {
            "apiVersion": "sextant.dev/v1alpha1", "kind": "Worker", "metadata": {"name": name, "namespace": NS},
            "spec": {"incarnation": "i1", "queues": [QUEUE], "handlers": [WORK_HANDLER], "slots": slots,
                     "leaseDurationSeconds": 30}})

    async def delete(self, path: str, grace_seconds: int | None = None,
                     preconditions: dict[str, str] | None = None) -> dict[str, Any]:
        self._fence("DELETE", path)
        return await super().delete(path, grace_seconds, preconditions)

    def job(self, name: str, handler: str = POD_HANDLER, **status: Any) -> dict[str, Any]:
        return self.put(f"{JOBS}/{name}", {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
                                           "metadata": {"name": name, "namespace": NS},
                                           "spec": {"queue": QUEUE, "handler": handler}, "status": status})

    def pod(self, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get(f"{PODS}/{name}"))

    def start_pod(self, name: str) -> dict[str, Any]:
        """The kubelet started the pod's handler container."""
        pod = self.objects[f"{PODS}/{name}"]
        pod["spec"]["nodeName"] = "node-1"
        pod["status"] = {"phase": "Running", "containerStatuses": [
            {"name": "handler", "state": {"running": {"startedAt": format_time(self.clock())}}}]}
        return self.put(f"{PODS}/{name}", pod)


def job_controller(api: JobsApi, clock: Clock, concurrency: int = 1, **settings: Any) -> Any:
    """A fresh operator over the API double's objects (as its informers' first lists fill its view), started."""
    from sextant.controller.jobs import JobController

    controller = JobController(api, View(now=clock), NoEvents(), Timers(clock), workers=1, pending_pods=200,
                               now=clock, **settings)
    controller.on_queue("upsert", {"metadata": {"name": QUEUE, "namespace": NS, "generation": 1},
                                   "spec": {"concurrency": concurrency}})
    controller.on_handler("upsert", {"metadata": {"name": POD_HANDLER, "namespace": NS}, "spec": {"template": {
        "spec": {"containers": [{"name": "handler", "image": "registry.example/h:1"}]}}}})
    controller.on_handler("upsert", {"metadata": {"name": WORK_HANDLER, "namespace": NS}, "spec": {"worker": {}}})
    for path, obj in list(api.objects.items()):
        (controller.on_pod if path.startswith(PODS) else controller.on_job)("upsert", copy.deepcopy(obj))
    api.watch = lambda kind, path, obj: (controller.on_pod if path.startswith(PODS) else controller.on_job)(kind, obj) \
        if path.startswith((PODS, JOBS + "/")) else None
    controller._start()
    controller.started.set()
    return controller


async def drain(queue: Any) -> list[Any]:
    """The keys waiting in a work queue, taken out."""
    keys = []
    while len(queue):
        keys.append(await queue.get())
        queue.done(keys[-1])
    return keys


def pod_of(name: str) -> str:
    from sextant.lifecycle.transitions import pod_name

    return pod_name(name, 1)


async def test_the_attempts_pod_is_created_before_the_status_records_it():
    clock = Clock()
    api = JobsApi(clock)
    api.job("job-a")
    controller = job_controller(api, clock)
    clock.to(0.1)
    await controller.reconcile((NS, "job-a"))
    assert api.writes == [("create", pod_of("job-a"))]  # admission writes nothing: the pod is its record
    clock.to(1)
    controller.on_pod("modify", api.start_pod(pod_of("job-a")))
    await controller.reconcile((NS, "job-a"))
    assert api.writes == [("create", pod_of("job-a"))]  # its start is recorded once it is a second old ...
    clock.to(2)
    await controller.reconcile((NS, "job-a"))  # ... (the wake-up the reconcile set)
    assert api.writes == [("create", pod_of("job-a")), ("status", "job-a")]
    assert api.objects[f"{JOBS}/job-a"]["status"]["state"] == "running"


async def new_job_admitted(**settings: Any) -> tuple[Clock, JobsApi, tuple[str, str], Any]:
    """job-a created at T0 and first reconciled 0.1 s later (its pod created): the clock, the API, its key, the
    controller."""
    clock = Clock()
    api = JobsApi(clock)
    api.job("job-a")
    key = (NS, "job-a")
    controller = job_controller(api, clock, **settings)
    clock.to(0.1)
    await controller.reconcile(key)
    return clock, api, key, controller


@pytest.mark.parametrize("settings, queued_at", [({"record_queued_after": timedelta(seconds=5)}, 5.1),
                                                ({"record_queued_after": timedelta(minutes=5)}, 300.1)])
async def test_a_new_job_whose_pod_is_slow_to_start_is_written_queued_after_record_queued_after(settings, queued_at):
    """`--record-queued-after`: how long a new job whose pod is starting goes unwritten before `queued` is."""
    clock, api, key, controller = await new_job_admitted(**settings)
    assert api.writes == [("create", pod_of("job-a"))]
    clock.to(queued_at - 0.2)
    await controller.reconcile(key)
    assert api.writes == [("create", pod_of("job-a"))], "no state yet while the pod starts"
    assert controller.timers.due(key) == pytest.approx(T0.timestamp() + queued_at)
    clock.to(queued_at)
    await controller.reconcile(key)  # (the wake-up the reconcile set)
    assert api.writes == [("create", pod_of("job-a")), ("status", "job-a")]
    assert api.objects[f"{JOBS}/job-a"]["status"]["state"] == "queued"


async def test_a_new_job_whose_pod_is_slow_to_start_is_not_written_until_it_starts():
    """By default a new job whose pod is starting is not written queued at all (the API server shows the CRD's
    default, `queued`); no wake-up is set for it but the start timeout's."""
    clock, api, key, controller = await new_job_admitted()
    clock.to(300)
    await controller.reconcile(key)
    assert api.writes == [("create", pod_of("job-a"))], "no status write while the pod starts"
    assert controller.timers.due(key) == pytest.approx(T0.timestamp() + 0.1 + 600)  # the queue's startTimeout


async def test_the_echo_of_its_own_status_write_is_looked_at_and_the_look_sets_the_lease_wake_up():
    """The watch event of a status the operator wrote (the write's answer is not stored: the informers are the view's
    only writer) is looked at, since the status written changes the observations (the recorded attempt's lease,
    whose expiry wakes the job)."""
    from sextant.lifecycle.transitions import pod_name

    clock, api, key, controller = await new_job_admitted()
    clock.to(1)
    controller.on_pod("modify", api.start_pod(pod_name("job-a", 1)))
    clock.to(2.5)
    await drain(controller.queue)
    await controller.reconcile(key)  # records the start: `running`
    written = api.objects[f"{JOBS}/job-a"]
    assert written["status"]["state"] == "running"
    assert controller.view.jobs[key].resource_version == written["metadata"]["resourceVersion"]  # its echo
    assert await drain(controller.queue) == [key], "the echo is looked at"
    before_echo = controller.timers.due(key)
    await controller.reconcile(key)
    wake = controller.timers.due(key)
    assert wake - T0.timestamp() == 1 + 30, "the lease (30 s by default) runs from the container's start"
    assert wake < before_echo
    clock.moment = datetime.fromtimestamp(wake, timezone.utc)
    await controller.reconcile(key)  # no heartbeat since the start: the attempt is lost, its pod stopped
    assert api.objects[f"{JOBS}/job-a"]["status"]["stopReason"] == "LeaseExpired"


async def test_a_restarted_operator_adopts_its_own_pod_on_already_exists_and_never_makes_a_second():
    clock = Clock()
    api = JobsApi(clock)
    api.job("job-a")
    first = job_controller(api, clock)
    clock.to(0.1)
    await first.reconcile((NS, "job-a"))
    # The operator stops before the watch showed the pod; the next starts from a list that misses it (a relist
    # racing the create): its reconcile tries the same name again.
    mine = api.objects.pop(f"{PODS}/{pod_of('job-a')}")
    second = job_controller(api, clock)
    api.objects[f"{PODS}/{pod_of('job-a')}"] = mine
    clock.to(1)
    await second.reconcile((NS, "job-a"))
    assert [w for w in api.writes if w[0] == "create"] == [("create", pod_of("job-a"))]  # 409, then adopted
    # Until the watch shows the pod, the adoption is expected: the slot stays held, and the job is not acted on.
    assert second.slots.holders((NS, QUEUE)) == 1 and not second.slots.reserved((NS, "job-a"))
    assert not second.expectations.satisfied((NS, "job-a"))
    second.on_pod("upsert", api.pod(pod_of("job-a")))
    assert list(second.view.pods_of((NS, "job-a"))) == [1] and second.expectations.satisfied((NS, "job-a"))
    assert second.slots.holders((NS, QUEUE)) == 1


async def test_an_adopted_pod_that_ran_meanwhile_is_judged_on_the_next_look():
    """A create whose answer was lost is tried again, answered 409 and adopted; by then its pod may have run to the
    end, and the watch's events for it bring nothing the view does not hold already: the adoption itself asks for
    the next look, which records the result."""
    clock = Clock()
    api = JobsApi(clock)
    api.job("job-a")
    key = (NS, "job-a")
    await job_controller(api, clock).reconcile(key)  # the create landed; its answer never came
    mine = api.objects.pop(f"{PODS}/{pod_of('job-a')}")
    api.job("job-b")  # next in line: the slot job-a's pod frees goes to it
    controller = job_controller(api, clock)
    clock.to(1)
    mine = api.put(f"{PODS}/{pod_of('job-a')}", {**mine, "spec": {**mine["spec"], "nodeName": "node-1"}, "status": {
        "phase": "Succeeded", "containerStatuses": [{"name": "handler", "state": {"terminated": {
            "exitCode": 0, "startedAt": format_time(clock()), "finishedAt": format_time(clock())}}}]}})
    await drain(controller.queue)  # the start's looks at every job
    await controller.reconcile(key)  # creates, meets 409, adopts the finished pod
    controller.on_pod("modify", copy.deepcopy(mine))  # its watch event: nothing new
    assert key in await drain(controller.queue), "the adoption asks for another look"
    await controller.reconcile(key)
    assert api.objects[f"{JOBS}/job-a"]["status"]["state"] == "succeeded"


async def test_a_pod_of_that_name_that_is_not_the_jobs_is_never_adopted():
    clock = Clock()
    api = JobsApi(clock)
    api.job("job-a")
    api.put(f"{PODS}/{pod_of('job-a')}", {"metadata": {"name": pod_of("job-a"), "namespace": NS}, "spec": {}})
    controller = job_controller(api, clock)
    controller.view.pods.clear()  # not an attempt's pod by its labels: the view never shows it anyway
    clock.to(0.1)
    await controller.reconcile((NS, "job-a"))
    assert controller.view.pods_of((NS, "job-a")) == {}
    assert "PodNameTaken" in [e.reason for e in controller.events.recorded]
    assert not controller.slots.holds((NS, "job-a"))


async def test_a_refused_pod_is_named_in_the_jobs_status_and_tried_again_until_it_is_created():
    """A pod the API server refuses (a quota, an admission webhook, a template it cannot read) keeps the job queued
    with the reason in its message and health conditions, not "waiting for a slot"; retries make no further writes
    while the reason stands, and the job goes on once a pod is accepted."""
    clock = Clock()
    api = JobsApi(clock)
    api.job("job-a")
    controller = job_controller(api, clock)
    api.refuse_pods = 403
    clock.to(0.1)
    await controller.reconcile((NS, "job-a"))
    status = api.objects[f"{JOBS}/job-a"]["status"]
    assert status["state"] == "queued"
    assert status["message"] == f"cannot create pod {pod_of('job-a')}: exceeded quota; trying again"
    assert {c["type"]: c["message"] for c in status["conditions"]}["Reconciling"] == status["message"]
    writes = len(api.writes)
    clock.to(5.1)
    await controller.reconcile((NS, "job-a"))
    assert len(api.writes) == writes  # the same reason again: nothing to write
    api.refuse_pods = None
    clock.to(10.1)
    await controller.reconcile((NS, "job-a"))
    assert api.pod(pod_of("job-a")) is not None and api.writes[-1] == ("create", pod_of("job-a"))


async def test_a_deposed_leaders_writes_are_refused_and_its_key_waits_for_the_next_leader():
    clock = Clock()
    api = JobsApi(clock)
    api.job("job-a")
    api.job("job-b")
    controller = job_controller(api, clock)
    api.leader = False  # another replica took the Lease; this one has not noticed yet
    clock.to(0.1)
    key = await controller.queue.get()
    await controller.runtime.process(key)
    assert api.writes == [] and api.pod(pod_of(key[1])) is None
    assert key in controller.queue._dirty  # put back for the next leader (maybe this replica again)
    assert not controller.slots.holds(key)
    controller.leading.clear()  # it notices: a standby now, it grants nothing
    controller.on_job("modify", api.put(f"{JOBS}/job-c", {"metadata": {"name": "job-c", "namespace": NS},
                                                          "spec": {"queue": QUEUE, "handler": POD_HANDLER}}))
    assert not controller.slots.reserved((NS, "job-c"))
    api.leader = True  # and later leads again (controller/operator.py: leading set, then resync)
    controller.leading.set()
    controller.resync()
    while len(controller.queue):
        key = await controller.queue.get()
        await controller.runtime.process(key)
    assert [w for w in api.writes if w[0] == "create"] == [("create", pod_of("job-a"))]  # concurrency 1, in order


class Boom(Exception):
    pass


@pytest.mark.parametrize("path", ["created", "refused", "name taken", "deposed", "defect", "gone", "cancelled",
                                  "settled", "invalid"])
async def test_a_slot_reserved_for_a_job_is_given_back_on_every_path(path):
    clock = Clock()
    api = JobsApi(clock)
    api.job("job-a")
    api.job("job-b")
    controller = job_controller(api, clock)
    key, queue = (NS, "job-a"), (NS, QUEUE)
    controller.slots.pump(queue)  # a pump (another job's event, or a standby's) granted job-a its slot
    assert controller.slots.reserved(key) and controller.slots.holders(queue) == 1
    raw = copy.deepcopy(api.objects[f"{JOBS}/job-a"])
    if path == "refused":
        api.refuse_pods = 403
    elif path == "name taken":
        api.put(f"{PODS}/{pod_of('job-a')}", {"metadata": {"name": pod_of("job-a"), "namespace": NS}, "spec": {}})
    elif path == "deposed":
        api.leader = False
    elif path == "defect":
        api.fail_pods = Boom("a defect")
    elif path == "gone":
        controller.on_job("delete", raw)
    elif path in ("cancelled", "settled", "invalid"):
        status = {"cancelled": {"state": "queued"}, "settled": {"state": "cancelled", "observedGeneration": 1},
                  "invalid": {"state": "queued"}}[path]
        spec = {"queue": QUEUE, "handler": POD_HANDLER, **({"cancel": True} if path == "cancelled" else {}),
                **({"priority": "high"} if path == "invalid" else {})}
        changed = api.put(f"{JOBS}/job-a", {**copy.deepcopy(api.objects[f"{JOBS}/job-a"]), "spec": spec,
                                            "status": status})
        controller.on_job("modify", changed)
    clock.to(0.1)
    try:
        await controller.reconcile(key)
    except (NotLeader, Boom):
        assert path in ("deposed", "defect")
    assert not controller.slots.reserved(key)
    stored = api.objects.get(f"{JOBS}/job-a", {}).get("status", {})
    if path == "cancelled":
        assert stored["state"] == "cancelled"
    if path == "invalid":
        assert [c["status"] for c in stored["conditions"] if c["type"] == "Invalid"] == ["True"]
    holds = path == "created"  # its pod holds the slot now; on every other path nothing does
    assert controller.slots.holds(key) == holds and controller.slots.holders(queue) == 1
    assert (api.pod(pod_of("job-a")) is not None) == (path in ("created", "name taken"))
    if not holds:  # the slot went to the next in line at once, to be reconciled
        assert controller.slots.reserved((NS, "job-b")) and (NS, "job-b") in controller.queue._dirty


async def test_an_assignment_holds_the_workers_slot_from_the_pick_until_its_write_lands_and_writes_no_job():
    clock = Clock()
    api = JobsApi(clock)
    api.job("job-w", handler=WORK_HANDLER)
    api.job("job-x", handler=WORK_HANDLER)
    controller = job_controller(api, clock, concurrency=5)
    controller.on_worker_object("upsert", api.worker("w1", slots=1))
    clock.to(0.1)
    await controller.reconcile((NS, "job-w"))
    assert controller.slots.busy(NS) == {"w1": 1} and (NS, "job-w") in controller.view.pending  # on its way
    await controller.reconcile((NS, "job-x"))
    assert (NS, "job-x") not in controller.view.pending, "the worker's one slot is taken"
    await until(lambda: not controller.view.pending)
    assigned = api.objects[f"{WORKERS}/w1"]["status"]["assignments"]
    assert [(a["job"], a["sequence"], a["attempt"], a["incarnation"]) for a in assigned] == [("job-w", 1, 1, "i1")]
    assert ("status", "job-w") not in api.writes, "the assignment is the record: the job is not written"
    assert controller.slots.busy(NS) == {"w1": 1} and controller.view.assignments_of((NS, "job-w"))


async def test_a_workers_slot_is_given_back_when_the_assigning_write_is_refused():
    clock = Clock()
    api = JobsApi(clock)
    api.job("job-w", handler=WORK_HANDLER)
    controller = job_controller(api, clock, concurrency=5)
    controller.on_worker_object("upsert", api.worker("w1", slots=1))
    clock.to(0.1)
    api.refuse_worker_status = 404  # deleted meanwhile: the watch has not told yet
    await controller.reconcile((NS, "job-w"))
    await until(lambda: not controller.view.pending)
    assert controller.slots.busy(NS) == {"w1": 0} and controller.slots.worker_of((NS, "job-w")) is None
    assert not controller.view.assignments_of((NS, "job-w"))
    assert (NS, "job-w") in controller.queue._dirty, "looked at again, to be admitted anew"


async def test_regaining_leadership_keeps_the_reservation_of_a_reconcile_still_running():
    """Deposed and leading again while a reconcile waits on its pod create: that grant stays counted until the
    reconcile ends, so no second job gets the queue's only slot meanwhile."""
    clock = Clock()
    api = JobsApi(clock)
    api.job("job-a")
    controller = job_controller(api, clock)
    answer, create = asyncio.Event(), api.create

    async def slow_create(path: str, body: dict[str, Any]) -> dict[str, Any]:
        await answer.wait()
        return await create(path, body)

    api.create = slow_create
    clock.to(0.1)
    running = asyncio.create_task(controller.reconcile((NS, "job-a")))
    await until(lambda: controller.slots.reserved((NS, "job-a")))
    urgent = copy.deepcopy(api.job("job-b"))  # more urgent: first in line, were the slot free
    urgent["spec"]["priority"] = 9
    controller.on_job("add", urgent)
    controller.leading.clear()
    controller.leading.set()
    controller.resync()
    controller.slots.pump((NS, QUEUE))
    assert controller.slots.reserved((NS, "job-a")) and not controller.slots.reserved((NS, "job-b"))
    answer.set()
    await running
    assert controller.slots.holds((NS, "job-a")) and controller.slots.holders((NS, QUEUE)) == 1


# ================================================================ expectations: our writes, awaited from the watch
async def test_a_write_the_watch_has_not_shown_yet_is_not_acted_on_twice_and_holds_its_slot():
    """The informers are the view's only writer: until the watch shows the pod and the status the reconcile wrote,
    another look at the job (a pump, a timer) does nothing on the stale view, and the slot stays held."""
    clock = Clock()
    api = JobsApi(clock)
    api.job("job-a")
    api.job("job-b")
    key, queue = (NS, "job-a"), (NS, QUEUE)
    controller = job_controller(api, clock)
    late: list[tuple[str, str, dict[str, Any]]] = []
    api.watch = lambda kind, path, obj: late.append((kind, path, obj))  # the watch lags behind the answers
    clock.to(0.1)
    await controller.reconcile(key)
    assert api.writes == [("create", pod_of("job-a"))]
    assert not controller.expectations.satisfied(key) and controller.slots.holds(key)
    await controller.reconcile(key)  # a look on the stale view: it would create the same pod again
    assert len(api.writes) == 1, "nothing acted on twice"
    assert controller.slots.holders(queue) == 1 and not controller.slots.reserved((NS, "job-b"))
    for kind, path, obj in late:  # the watch catches up
        (controller.on_pod if path.startswith(PODS) else controller.on_job)(kind, obj)
    assert controller.expectations.satisfied(key) and controller.slots.holds(key)
    assert list(controller.view.pods_of(key)) == [1]


async def test_a_late_write_answer_never_brings_a_deleted_job_back():
    """A job deleted while our status write was on its way: its answer is never stored, so nothing of it comes back
    into the view, and nothing is awaited of it any more."""
    clock = Clock()
    api = JobsApi(clock)
    api.job("job-a")
    key = (NS, "job-a")
    controller = job_controller(api, clock)
    api.watch = lambda kind, path, obj: None  # the watch shows nothing of the write
    clock.to(0.1)
    await controller.reconcile(key)  # the pod is created; its answer came back
    assert not controller.expectations.satisfied(key)
    controller.on_job("delete", copy.deepcopy(api.objects[f"{JOBS}/job-a"]))  # the watch: deleted
    assert key not in controller.view.jobs and controller.expectations.satisfied(key)
    await controller.reconcile(key)
    assert key not in controller.view.jobs and not controller.slots.holds(key)
