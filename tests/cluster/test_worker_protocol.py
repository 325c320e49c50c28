"""The operator's side of the worker protocol (docs/workers.md), on the real control plane.

The worker here is scripted: a Lease and status writes made through the API exactly as the protocol says, as a
worker in another language would make them. (tests/cluster/test_worker.py runs real `sextant worker` processes.)
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Any

import pytest
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from sextant.controller.view import View
from sextant.lifecycle import transitions as T
from sextant.lifecycle.attempts import PodObservation
from sextant.resources import contract
from sextant.resources.handler import HandlerSpec
from sextant.resources.queue import QueueSpec
from tests.harness import holds_for, wait_for

from .support import apply, job, queue, status, timeline_of, wait_state

GROUP, VERSION = "sextant.dev", "v1alpha1"
FAST = {"backoff": {"policy": "fixed", "initial": "200ms"}, "leaseDuration": "3s", "cancelGrace": "1s"}


def micro(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def worker_handler(name: str = "h") -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler", "metadata": {"name": name},
            "spec": {"worker": {}}}


class ScriptedWorker:
    """A worker made of API calls: its Lease, renewed by a thread, and results written by the lifecycle rules."""

    def __init__(self, kubeconfig, namespace: str, name: str, *, queues=("q",), handlers=("h",), slots: int = 1,
                 incarnation: str = "i1") -> None:
        api = k8s_config.new_client_from_config(str(kubeconfig))
        self.leases = k8s_client.CoordinationV1Api(api)
        self.objects = k8s_client.CustomObjectsApi(api)
        self.namespace, self.name, self.incarnation = namespace, name, incarnation
        self.queues, self.handlers, self.slots = queues, handlers, slots
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def holder(self) -> str:
        return contract.holder_identity(self.name, self.incarnation)

    def body(self) -> dict[str, Any]:
        now = micro(datetime.now(timezone.utc))
        return {
            "metadata": {"name": contract.worker_lease_name(self.name), "labels": {contract.LABEL_WORKER: self.name},
                         "annotations": {contract.ANNOTATION_QUEUES: ",".join(self.queues),
                                         contract.ANNOTATION_HANDLERS: ",".join(self.handlers),
                                         contract.ANNOTATION_SLOTS: str(self.slots)}},
            "spec": {"holderIdentity": self.holder, "leaseDurationSeconds": 3, "renewTime": now, "acquireTime": now},
        }

    def renew(self) -> None:
        """An update at the version read (the API server refuses a Lease update without one)."""
        name, body = contract.worker_lease_name(self.name), self.body()
        try:
            current = self.leases.read_namespaced_lease(name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.leases.create_namespaced_lease(self.namespace, body)
            return
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        self.leases.replace_namespaced_lease(name, self.namespace, body)

    def start(self) -> ScriptedWorker:
        self.renew()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.renew()
            except Exception:  # noqa: BLE001 - a missed renewal is what leases are for
                pass

    def stop_renewing(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(5)

    def assigned(self) -> list[dict[str, Any]]:
        """The jobs assigned to this worker: the protocol's field selector, not a list of every job."""
        found = self.objects.list_namespaced_custom_object(GROUP, VERSION, self.namespace, "jobs",
                                                           field_selector=f"status.worker={self.name}")
        return [j for j in found["items"] if (j["status"].get("attempts") or [{}])[-1].get("worker") == self.holder]

    def report(self, name: str, exit_code: int = 0, message: str | None = None,
               obj: dict[str, Any] | None = None) -> dict[str, Any]:
        """Record the attempt's end with the lifecycle rules, at the version read (or the one given)."""
        obj = obj or self.objects.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "jobs", name)
        snapshot = View.snapshot((self.namespace, name), obj)
        spec = snapshot.spec
        q = self.objects.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "queues", spec.queue)
        h = self.objects.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "handlers", spec.handler)
        now = datetime.now(timezone.utc)
        seen = PodObservation(name=self.name, sequence=snapshot.status.sequence,
                              phase="Succeeded" if exit_code == 0 else "Failed", node=self.name, exit_code=exit_code,
                              message=message)
        obs = T.Observations(queue=QueueSpec.model_validate(q["spec"]), handler=HandlerSpec.model_validate(h["spec"]),
                             pods=(seen,), lease_renewed_at=now)
        decision = T.reconcile(snapshot, obs, now)
        body = {**obj, "status": decision.status.model_dump(by_alias=True, mode="json", exclude_none=True)}
        return self.objects.replace_namespaced_custom_object_status(GROUP, VERSION, self.namespace, "jobs", name, body)


@pytest.fixture
def workers(cluster, namespace):
    made: list[ScriptedWorker] = []

    def make(name: str, **kw: Any) -> ScriptedWorker:
        worker = ScriptedWorker(cluster.kubeconfig, namespace, name, **kw)
        made.append(worker)
        return worker

    yield make
    for worker in made:
        worker.stop_renewing()


def conditions(st: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in st.get("conditions", [])}


def test_no_worker_blocks_then_a_worker_takes_the_job(cluster, namespace, operator, workers):
    apply(cluster, namespace, queue("q", **FAST), worker_handler(), job("job-w"))
    wait_for(lambda: conditions(status(cluster, namespace, "job-w")).get("Blocked") == ("True", "NoWorker"), 30,
             message="Blocked/NoWorker")
    assert status(cluster, namespace, "job-w")["state"] == "queued"
    w = workers("w1").start()
    st = wait_state(cluster, namespace, "job-w", "running")
    assert st["worker"] == "w1" and st["attempts"][-1]["worker"] == w.holder and "pod" not in st["attempts"][-1]
    assert conditions(st)["Blocked"][0] == "False"
    assert [j["metadata"]["name"] for j in w.assigned()] == ["job-w"]
    w.report("job-w")
    final = wait_state(cluster, namespace, "job-w", "succeeded")
    assert timeline_of(final) == [("succeeded", None)] and "worker" not in final
    assert cluster.kubectl("get", "pods", "-n", namespace, "-o", "name").stdout.strip() == ""  # no pod per attempt


def test_slots_and_queue_concurrency_hold_together(cluster, namespace, operator, workers):
    w1, w2 = workers("w1", slots=2).start(), workers("w2", slots=2).start()
    apply(cluster, namespace, queue("q", concurrency=3, **FAST), worker_handler(),
          *(job(f"job-{i}") for i in range(6)))

    def running() -> dict[str, list[str]]:
        return {w.name: [j["metadata"]["name"] for j in w.assigned()] for w in (w1, w2)}

    wait_for(lambda: sum(map(len, running().values())) == 3, 30, message=lambda: f"3 running, got {running()}")
    holds_for(lambda: sum(map(len, running().values())) == 3 and all(len(v) <= 2 for v in running().values()), 2)
    first = next(iter(running()["w1"] or running()["w2"]))
    owner = w1 if first in running()["w1"] else w2
    owner.report(first)
    wait_state(cluster, namespace, first, "succeeded")
    wait_for(lambda: sum(map(len, running().values())) == 3, 30, message="the freed slot to be taken")


def test_a_lost_worker_fails_its_attempt_and_another_takes_the_retry(cluster, namespace, operator, workers):
    w1 = workers("w1").start()
    apply(cluster, namespace, queue("q", **FAST), worker_handler(), job("job-l"))
    wait_for(lambda: status(cluster, namespace, "job-l").get("worker") == "w1", 30, message="assigned to w1")
    w2 = workers("w2").start()
    w1.stop_renewing()  # SIGKILL, as the operator sees it
    wait_for(lambda: status(cluster, namespace, "job-l").get("worker") == "w2", 30,
             message=lambda: f"retry on w2; status {status(cluster, namespace, 'job-l')}")
    st = status(cluster, namespace, "job-l")
    assert timeline_of(st)[0] == ("failed", "LeaseExpired") and st["attempt"] == 2
    w2.report("job-l")
    assert timeline_of(wait_state(cluster, namespace, "job-l", "succeeded"))[-1] == ("succeeded", None)


def test_a_restarted_worker_does_not_inherit_its_predecessors_attempt_and_a_late_result_is_refused(
        cluster, namespace, operator, workers):
    old = workers("w1").start()
    apply(cluster, namespace, queue("q", **FAST), worker_handler(), job("job-r"))
    wait_for(lambda: status(cluster, namespace, "job-r").get("worker") == "w1", 30, message="assigned")
    stale = old.objects.get_namespaced_custom_object(GROUP, VERSION, namespace, "jobs", "job-r")
    old.stop_renewing()
    new = workers("w1", incarnation="i2").start()  # the same name, a new process
    wait_for(lambda: len(status(cluster, namespace, "job-r").get("attempts", [])) == 2, 30, message="a second attempt")
    st = status(cluster, namespace, "job-r")
    assert timeline_of(st)[0] == ("failed", "LeaseExpired")
    assert st["attempts"][1]["worker"] == new.holder
    with pytest.raises(ApiException) as refused:  # the old incarnation's result, at the version it read
        old.report("job-r", obj=stale)
    assert refused.value.status == 409
    new.report("job-r")
    assert wait_state(cluster, namespace, "job-r", "succeeded")["attempt"] == 2


def test_cancel_reaches_the_worker_and_is_recorded_without_it(cluster, namespace, operator, workers):
    w = workers("w1", slots=2).start()
    apply(cluster, namespace, queue("q", **FAST), worker_handler(), job("job-c1"), job("job-c2"))
    for name in ("job-c1", "job-c2"):
        wait_state(cluster, namespace, name, "running")
        cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", name, "--type", "merge",
                        "-p", '{"spec":{"cancel":true}}')
    for name in ("job-c1", "job-c2"):
        wait_for(lambda: status(cluster, namespace, name).get("stopReason") == "Cancelled", 30, message="stop asked")
    w.report("job-c1", exit_code=143)  # the worker stopped its handler and reports
    assert timeline_of(wait_state(cluster, namespace, "job-c1", "cancelled")) == [("cancelled", "Cancelled")]
    # No report from the worker within cancelGrace + 5 s: the operator records it.
    assert timeline_of(wait_state(cluster, namespace, "job-c2", "cancelled", timeout=30)) == [("cancelled", "Cancelled")]


def test_timeout_on_a_worker(cluster, namespace, operator, workers):
    w = workers("w1").start()
    apply(cluster, namespace, queue("q", timeout="1s", maxAttempts=1, **FAST), worker_handler(), job("job-t"))
    wait_for(lambda: status(cluster, namespace, "job-t").get("stopReason") == "Timeout", 30, message="timeout asked")
    w.report("job-t", exit_code=137)
    final = wait_state(cluster, namespace, "job-t", "dead")
    assert timeline_of(final) == [("failed", "Timeout")]
