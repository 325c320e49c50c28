"""Leader election (controller/leader.py) on a fake clock against an in-memory Lease API: when a replica takes the
lease, keeps it, loses it and hands it over, and that its write fence follows. Only these rules: the real control
plane stays the judge of behaviour (tests/cluster/test_ha.py kills, pauses and restarts real replicas)."""

from __future__ import annotations

import asyncio
import copy
import itertools
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from sextant.kube import metrics
from sextant.controller.leader import LeaderElector
from sextant.controller.settings import ElectionSettings
from sextant.controller.runtime import Runtime
from sextant.kube.client import ApiError, Kube, NotLeader
from sextant.kube.kubeconfig import Connection
from sextant.resources.common import parse_time
from tests.harness import until

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
NS = "sextant-system"
SETTINGS = ElectionSettings(NS)  # kube-controller-manager's timing: lease 15 s, renew deadline 10 s, retry 2 s


class Clock:
    """One fake time for every replica: monotonic seconds, and the wall clock they stand for."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def monotonic(self) -> float:
        return self.seconds

    def wall(self) -> datetime:
        return T0 + timedelta(seconds=self.seconds)

    def to(self, seconds: float) -> None:
        self.seconds = seconds


def _error(status: int, method: str, path: str) -> ApiError:
    reason = {404: "NotFound", 409: "Conflict"}.get(status, "InternalError")
    return ApiError(status, {"reason": reason, "message": reason}, method, path)


class LeaseApi:
    """The API server's Leases, in memory: a create of an existing name and a PUT at an old resourceVersion answer
    409, a missing lease 404. Each answer yields to the event loop first, as a request does."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.rv = itertools.count(1)
        self.puts: list[tuple[str, dict[str, Any]]] = []  # (holder written, spec), every accepted PUT
        self.on_put: list[Any] = []  # called before each PUT is applied

    def store(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(next(self.rv))
        self.leases[path] = body
        return copy.deepcopy(body)

    def spec(self) -> dict[str, Any]:
        (lease,) = self.leases.values()
        return lease.get("spec") or {}

    def holder(self) -> str | None:
        return self.spec().get("holderIdentity") if self.leases else None

    def link(self) -> Link:
        return Link(self)


class Link:
    """One replica's connection to the LeaseApi; `down` makes every request fail as an outage does."""

    def __init__(self, api: LeaseApi) -> None:
        self.api, self.down = api, False
        self.refused = 0  # requests that met the outage

    async def _reach(self, method: str, path: str) -> None:
        await asyncio.sleep(0)
        if self.down:
            self.refused += 1
            raise ApiError(0, "ClientConnectorError: connection refused", method, path)

    async def get(self, path: str) -> dict[str, Any]:
        await self._reach("GET", path)
        if path not in self.api.leases:
            raise _error(404, "GET", path)
        return copy.deepcopy(self.api.leases[path])

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        await self._reach("POST", path)
        target = f"{path}/{body['metadata']['name']}"
        if target in self.api.leases:
            raise _error(409, "POST", path)
        return self.api.store(target, body)

    async def request(self, method: str, path: str, *, body: Any = None, retry: bool = True,
                      **kwargs: Any) -> dict[str, Any]:
        assert method == "PUT" and not retry  # a lease write is never retried blindly: the next round looks again
        await self._reach(method, path)
        for hook in self.api.on_put:
            hook(body)
        stored = self.api.leases.get(path)
        if stored is None:
            raise _error(404, method, path)
        if body["metadata"].get("resourceVersion") != stored["metadata"]["resourceVersion"]:
            raise _error(409, method, path)
        self.api.puts.append((body["spec"].get("holderIdentity"), copy.deepcopy(body["spec"])))
        return self.api.store(path, body)


def replica(api: LeaseApi, clock: Clock, identity: str, settings: ElectionSettings = SETTINGS,
            changes: list[bool] | None = None) -> LeaderElector:
    return LeaderElector(api.link(), settings, identity, on_change=(changes.append if changes is not None else
                                                                    lambda leading: None),
                         monotonic=clock.monotonic, wall=clock.wall)


def lease_of(holder: str, renewed: datetime, duration: object = 15, transitions: object = 3) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": SETTINGS.name, "namespace": NS},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                     "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                     "acquireTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "leaseTransitions": transitions}}


PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{SETTINGS.name}"


# ================================================================ acquire
async def test_a_replica_creates_the_lease_when_there_is_none_and_leads():
    api, clock = LeaseApi(), Clock()
    a = replica(api, clock, "a")
    assert not a.is_leader()
    assert await a._try() == SETTINGS.retry_period
    assert a.is_leader() and a.leader_identity == "a" and api.holder() == "a"
    spec = api.spec()
    assert spec["leaseDurationSeconds"] == 15 and spec["leaseTransitions"] == 1
    assert parse_time(spec["renewTime"]) == parse_time(spec["acquireTime"]) == T0


async def test_a_released_lease_is_taken_at_once():
    api, clock = LeaseApi(), Clock()
    api.store(PATH, lease_of("", T0, duration=1))
    clock.to(0.1)
    b = replica(api, clock, "b")
    await b._try()
    assert b.is_leader() and api.holder() == "b" and api.spec()["leaseTransitions"] == 4


async def test_another_replicas_lease_is_taken_only_when_it_has_expired():
    api, clock = LeaseApi(), Clock()
    api.store(PATH, lease_of("a", T0))
    b = replica(api, clock, "b")
    assert await b._try() == SETTINGS.retry_period and not b.is_leader() and b.leader_identity == "a"
    clock.to(14)
    assert await b._try() == pytest.approx(1.0)  # looks again the moment the lease would expire, not 2 s later
    assert not b.is_leader() and api.puts == []
    clock.to(15)
    await b._try()
    assert b.is_leader() and api.holder() == "b"
    spec = api.spec()
    assert spec["leaseTransitions"] == 4 and parse_time(spec["acquireTime"]) == T0 + timedelta(seconds=15)


async def test_a_holders_clock_far_ahead_does_not_keep_its_lease_forever():
    """Expiry counts from when this replica saw the lease change, on its own clock: a renewTime in the future (a
    holder whose clock is wrong, or a lease written by hand) expires a lease duration after it was seen."""
    api, clock = LeaseApi(), Clock()
    api.store(PATH, lease_of("a", T0 + timedelta(days=365)))
    clock.to(3)
    b = replica(api, clock, "b")
    await b._try()
    clock.to(17.9)
    await b._try()
    assert not b.is_leader()
    clock.to(18)
    await b._try()
    assert b.is_leader()


@pytest.mark.parametrize("duration,expires", [(999999999, 15), (10**12, 15), (16, 15), (3600.5, 15), (5, 5)])
async def test_a_lease_is_believed_for_its_duration_but_never_longer_than_the_configured_one(duration, expires):
    """A holder that wrote a longer leaseDurationSeconds than this replica's own (a lease written by something else:
    the replicas of a release share one setting) is believed only for the configured duration: a write of
    999999999 and silence do not lock the replicas out for good. A shorter one is believed as written."""
    api, clock = LeaseApi(), Clock()
    api.store(PATH, lease_of("intruder", T0, duration=duration))
    b = replica(api, clock, "b")
    await b._try()
    clock.to(expires - 0.1)
    await b._try()
    assert not b.is_leader() and api.holder() == "intruder"
    clock.to(expires)
    await b._try()
    assert b.is_leader() and api.holder() == "b" and api.spec()["leaseDurationSeconds"] == 15


@pytest.mark.parametrize("spec", [None, {}, {"holderIdentity": None, "leaseTransitions": "many"},
                                  {"holderIdentity": "", "leaseTransitions": -1, "acquireTime": 7},
                                  {"holderIdentity": "", "leaseTransitions": True}])
async def test_an_odd_lease_is_taken_over_rather_than_stopping_the_election(spec):
    api, clock = LeaseApi(), Clock()
    api.store(PATH, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": SETTINGS.name, "namespace": NS}, "spec": spec})
    a = replica(api, clock, "a")
    await a._try()
    assert a.is_leader() and api.holder() == "a" and api.spec()["leaseTransitions"] == 1


# ================================================================ a conflict: two replicas race for one lease
@pytest.mark.parametrize("existing", [None, "expired"])
async def test_of_two_replicas_racing_for_the_lease_exactly_one_leads(existing):
    """Both see the lease free (none yet, or expired) at once and write: the API server lets one write win, the
    other meets a 409 (AlreadyExists on the create, Conflict on the PUT at the old resourceVersion)."""
    api, clock = LeaseApi(), Clock()
    if existing:
        api.store(PATH, lease_of("old", T0 - timedelta(seconds=60)))
    a, b = replica(api, clock, "a"), replica(api, clock, "b")
    waits = await asyncio.gather(a._try(), b._try())
    assert waits == [SETTINGS.retry_period] * 2
    assert [a.is_leader(), b.is_leader()] == [True, False] and api.holder() == "a"
    clock.to(2)
    await b._try()  # the loser looks again: the winner's lease, fresh
    assert not b.is_leader() and b.leader_identity == "a"


# ================================================================ renew, and losing it
async def test_the_leader_renews_its_lease_keeping_its_acquire_time_and_transitions():
    api, clock = LeaseApi(), Clock()
    a = replica(api, clock, "a")
    await a._try()
    for moment in (2, 4, 6, 30):  # 30: a long gap, but nobody took it: renewed all the same
        clock.to(moment)
        await a._try()
        assert a.is_leader()
        spec = api.spec()
        assert parse_time(spec["renewTime"]) == T0 + timedelta(seconds=moment)
        assert parse_time(spec["acquireTime"]) == T0 and spec["leaseTransitions"] == 1


async def test_a_leader_that_cannot_renew_stops_leading_at_the_renew_deadline_before_anyone_may_take_over():
    api, clock = LeaseApi(), Clock()
    a, b = replica(api, clock, "a"), replica(api, clock, "b")
    await a._try()
    await b._try()
    a.kube.down = True  # partitioned from the API server; the standby is not
    leaders: list[tuple[float, list[str]]] = []
    for step in range(1, 41):
        clock.to(step * 0.5)
        await a._try()
        await b._try()
        leaders.append((clock.seconds, [e.identity for e in (a, b) if e.is_leader()]))
    assert all(len(names) <= 1 for _, names in leaders)  # never two leaders
    assert [names for t, names in leaders if t in (9.5, 10.0, 14.5, 15.0)] == [["a"], [], [], ["b"]]
    a.kube.down = False
    clock.to(20.5)
    await a._try()  # back: it sees b's lease and stays a standby
    assert not a.is_leader() and a.leader_identity == "b" and b.is_leader()


async def test_a_leader_that_finds_another_holder_stops_leading_at_once():
    api, clock = LeaseApi(), Clock()
    a = replica(api, clock, "a")
    await a._try()
    api.store(PATH, lease_of("b", T0 + timedelta(seconds=1)))  # a paused leader wakes to find b holding the lease
    clock.to(2)
    await a._try()
    assert not a.is_leader() and a.leader_identity == "b" and api.holder() == "b"


async def test_the_loop_reports_leadership_lost_when_renewals_fail_past_the_deadline():
    api, clock = LeaseApi(), Clock()
    changes: list[bool] = []
    a = replica(api, clock, "a", ElectionSettings(NS, retry_period=0.01), changes)
    task = asyncio.create_task(a.run())
    try:
        await until(lambda: changes == [True], 2)
        a.kube.down = True
        clock.to(9.9)
        await until(lambda: a.kube.refused >= 3, 2)  # renewals tried and failed, still before the deadline
        assert changes == [True] and a.is_leader()
        clock.to(10)
        await until(lambda: changes == [True, False], 2)
        a.kube.down = False
        await until(lambda: changes == [True, False, True], 2)  # its own lease: renewed again
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# ================================================================ the write fence
async def test_the_controllers_writes_are_refused_unless_this_replica_leads():
    """The controllers' client asks the elector before every write: a refused write raises NotLeader before
    anything is sent. Nothing listens on port 1, so a write that passes the fence fails to connect instead."""
    api, clock = LeaseApi(), Clock()
    a = replica(api, clock, "a")
    conn = Connection(server="http://127.0.0.1:1", ssl_context=False)
    async with Kube(conn, attempts=1, fence=a.is_leader) as kube:
        body = {"metadata": {"name": "j"}}
        with pytest.raises(NotLeader):
            await kube.create("/apis/sextant.dev/v1alpha1/namespaces/ns/jobs", body)
        with pytest.raises(ApiError) as read:
            await kube.get("/apis/sextant.dev/v1alpha1/namespaces/ns/jobs")  # reads are never fenced
        assert not isinstance(read.value, NotLeader) and read.value.status == 0
        await a._try()
        with pytest.raises(ApiError) as sent:
            await kube.merge_patch("/apis/sextant.dev/v1alpha1/namespaces/ns/jobs/j/status", {"status": {}})
        assert not isinstance(sent.value, NotLeader) and sent.value.status == 0
        a.kube.down = True
        clock.to(10)  # no renewal for the renew deadline
        with pytest.raises(NotLeader):
            await kube.request("DELETE", "/apis/sextant.dev/v1alpha1/namespaces/ns/jobs/j")
        assert kube.fenced == 2
    collector = metrics.ViewCollector(jobs=lambda: [], requests=lambda: kube.requests, depths=dict,
                                      leader=a.is_leader, fenced=lambda: kube.fenced)
    exposed = {m.name: m for m in collector.collect()}
    assert exposed["sextant_writes_fenced"].samples[0].value == 2  # scraped as sextant_writes_fenced_total
    assert exposed["sextant_leader"].samples[0].value == 0


async def test_a_resumed_leader_whose_fence_refuses_stops_its_controllers_before_its_election_loop_runs():
    """A leader paused past its renew deadline resumes with its workers told to act: the first refused write stops
    them (on_change(False)), so they wait for leadership instead of taking, refusing and putting back keys without
    ever yielding to the event loop (which would then never run the election again; test_ha found it)."""
    api, clock = LeaseApi(), Clock()
    leading = asyncio.Event()
    a = LeaderElector(api.link(), ElectionSettings(NS, retry_period=3600), "a", monotonic=clock.monotonic,
                      wall=clock.wall, on_change=lambda now: (leading.set if now else leading.clear)())
    task = asyncio.create_task(a.run())

    async def reconcile(key: object) -> None:
        if not a.is_leader():  # the fenced client's check, before anything is sent
            raise NotLeader("PUT", "/apis/sextant.dev/v1alpha1/namespaces/ns/jobs/j/status")

    runtime = Runtime("Job", reconcile, workers=1, leading=leading)
    try:
        await asyncio.wait_for(leading.wait(), 2)
        clock.to(SETTINGS.renew_deadline)  # paused: no renewal for the renew deadline, and the loop sleeps on
        runtime.queue.add("j")
        await runtime.process(await runtime.queue.get())
        assert not leading.is_set() and "j" in runtime.queue._dirty  # it waits; the key is kept for the next leader
        worker = asyncio.create_task(runtime.process(await runtime.queue.get()))
        for _ in range(20):  # turns of the loop: a spinning worker would take them all and finish nothing else
            await asyncio.sleep(0)
        assert not worker.done()  # held at leading.wait(), not spinning
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# ================================================================ release on stop
async def test_a_stopping_leader_stops_writing_then_hands_the_lease_over_at_once():
    api, clock = LeaseApi(), Clock()
    changes: list[bool] = []
    a = replica(api, clock, "a", ElectionSettings(NS, retry_period=0.01), changes)
    leading_at_release: list[bool] = []
    api.on_put.append(lambda body: leading_at_release.append(a.is_leader())
                      if body["spec"]["holderIdentity"] == "" else None)
    task = asyncio.create_task(a.run())
    await until(a.is_leader, 2)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert leading_at_release == [False]  # the fence refused writes before the lease was let go
    assert changes == [True, False] and not a.is_leader()
    assert api.holder() == "" and api.spec()["leaseDurationSeconds"] == 1
    b = replica(api, clock, "b")
    await b._try()  # no waiting out the lease: the clock has not moved
    assert b.is_leader()


async def test_a_stopping_standby_leaves_the_leaders_lease_alone():
    api, clock = LeaseApi(), Clock()
    a = replica(api, clock, "a")
    await a._try()
    b = replica(api, clock, "b", ElectionSettings(NS, retry_period=0.01))
    task = asyncio.create_task(b.run())
    await until(lambda: b.leader_identity == "a", 2)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert api.holder() == "a" and api.puts == [] and a.is_leader()


async def test_a_leader_deposed_before_it_stops_does_not_release_the_new_leaders_lease():
    api, clock = LeaseApi(), Clock()
    a = replica(api, clock, "a")
    await a._try()
    api.store(PATH, lease_of("b", T0))  # b took over; a has not looked since
    await a._release()
    assert api.holder() == "b" and api.puts == []
