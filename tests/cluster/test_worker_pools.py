"""WorkerPools (docs/workers.md, "Autoscaling") on the real control plane: a Deployment of `sextant worker` pods whose
pods really run (the local node), scaled by the operator through the Deployment's scale subresource — from zero as
jobs arrive, back to the minimum when they are done — and a scale-down that waits for busy workers to drain, so no
running attempt ends `Drained`. What the Deployment did is read from a watch of it, started before the test acts."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from tests.harness import wait_for

from .support import apply, follow, get_json, job, jobs, queue, wait_all, wait_events

DEPLOYMENT = "workers"
LABELS = {"app.kubernetes.io/name": "sextant-worker", "sextant.dev/worker-deployment": DEPLOYMENT}


def worker_deployment(namespace: str, local_node: Any, handlers: list[str], *, slots: int,
                      drain_grace: str = "25s") -> dict[str, Any]:
    """The shape the chart renders (charts/sextant/templates/workers.yaml), on the local node, starting at 0."""
    field_env = [{"name": n, "valueFrom": {"fieldRef": {"fieldPath": p}}}
                 for n, p in (("POD_NAME", "metadata.name"), ("POD_UID", "metadata.uid"),
                              ("POD_NAMESPACE", "metadata.namespace"))]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": DEPLOYMENT},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": LABELS},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": LABELS},
                "spec": {
                    "terminationGracePeriodSeconds": 40,
                    "nodeSelector": dict(local_node.node_selector),
                    "tolerations": [dict(local_node.toleration)],
                    "containers": [{
                        "name": "worker", "image": "registry.example/ignored:1",
                        "command": ["sextant", "worker"],
                        "args": ["--name=$(POD_NAME)", f"--namespace={namespace}", "--queue=q",
                                 *(f"--allow-command={h}" for h in handlers), f"--concurrency={slots}",
                                 f"--drain-grace={drain_grace}"],
                        "env": [*field_env, {"name": "PYTHONUNBUFFERED", "value": "1"}],
                    }],
                },
            },
        },
    }


def command_handler(name: str, seconds: float) -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler", "metadata": {"name": name},
            "spec": {"worker": {"command": ["sh", "-c", f"sleep {seconds}"]}}}


def pool(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "WorkerPool", "metadata": {"name": "workers"},
            "spec": {"scaleTargetRef": {"name": DEPLOYMENT}, "queues": ["q"], **spec}}


@dataclass
class ReplicaRecorder:
    """spec.replicas of the Deployment at every change, from one watch (time.monotonic(), replicas)."""

    kubeconfig: Path
    namespace: str
    seen: list[tuple[float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> ReplicaRecorder:
        api = k8s_client.AppsV1Api(k8s_config.new_client_from_config(str(self.kubeconfig)))

        def record(event: dict[str, Any]) -> None:
            replicas = event["object"].spec.replicas or 0
            if not self.seen or self.seen[-1][1] != replicas:
                self.seen.append((time.monotonic(), replicas))

        self._thread = threading.Thread(target=follow, args=(api.list_namespaced_deployment, self.namespace),
                                        kwargs={"on_event": record, "stop": self._stop}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    @property
    def peak(self) -> int:
        return max((r for _, r in self.seen), default=0)

    @property
    def now(self) -> int:
        return self.seen[-1][1] if self.seen else -1


def pool_status(cluster: Any, namespace: str) -> dict[str, Any]:
    return get_json(cluster, namespace, "workerpools.sextant.dev", "workers").get("status") or {}


def worker_pods(cluster: Any, namespace: str) -> list[dict[str, Any]]:
    return get_json(cluster, namespace, "pods", "-l", "sextant.dev/worker-deployment")["items"]


def one_attempt_each(found: dict[str, dict[str, Any]]) -> None:
    """Every job succeeded at its first attempt: no attempt was Drained, lost or retried."""
    odd = {name: [(a.get("result"), a.get("reason")) for a in j["status"].get("attempts", [])]
           for name, j in found.items() if len(j["status"].get("attempts", [])) != 1}
    assert not odd, f"jobs with other than one attempt: {odd}"


def test_from_zero_workers_200_jobs_scale_up_all_succeed_and_the_pool_returns_to_its_minimum(
        cluster, namespace, operator, local_node):
    apply(cluster, namespace, queue("q", concurrency=40), command_handler("h", 1),
          worker_deployment(namespace, local_node, ["h"], slots=4),
          pool(slotsPerWorker=4, minReplicas=0, maxReplicas=5, scaleDownDelay="3s"))
    wait_for(lambda: pool_status(cluster, namespace).get("replicas") == 0, 30,
             message=lambda: f"the pool at 0 replicas; status {pool_status(cluster, namespace)}")
    with ReplicaRecorder(cluster.kubeconfig, namespace) as replicas:
        apply(cluster, namespace, *(job(f"j-{i:03d}") for i in range(200)))
        # 200 queued, queue concurrency 40: 40 slots wanted, 10 workers of 4, held at maxReplicas 5
        wait_for(lambda: replicas.now == 5, 30, message=lambda: f"5 replicas; seen {replicas.seen}")
        found = wait_all(cluster, namespace, 200, {"succeeded"}, timeout=300)
        one_attempt_each(found)
        wait_for(lambda: replicas.now == 0 and not worker_pods(cluster, namespace), 120,
                 message=lambda: f"back to 0 replicas and no worker pod; seen {replicas.seen}")
    assert replicas.peak == 5
    status = pool_status(cluster, namespace)
    assert (status["replicas"], status["desiredReplicas"], status["queued"], status["running"]) == (0, 0, 0, 0)
    able = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert able["AbleToScale"][0] == "True"
    wait_events(cluster, namespace, "--field-selector", "involvedObject.kind=WorkerPool",
                until=lambda events: "SuccessfulRescale" in {e["reason"] for e in events},
                what="a SuccessfulRescale Event on the pool")
    # Every job ran on a pod of the Deployment: the workers were its pods, named after them.
    assert {a["worker"].split("/")[0].startswith(f"{DEPLOYMENT}-") for j in found.values()
            for a in j["status"]["attempts"]} == {True}


def test_a_scale_down_waits_for_busy_workers_to_drain_and_drains_no_running_attempt(
        cluster, namespace, operator, local_node):
    # A drain grace of 1 s: were a worker with a long job scaled away, its attempt would end Drained.
    apply(cluster, namespace, queue("q", concurrency=20), command_handler("long", 25), command_handler("short", 1),
          worker_deployment(namespace, local_node, ["long", "short"], slots=2, drain_grace="1s"),
          pool(slotsPerWorker=2, minReplicas=0, maxReplicas=3, scaleDownDelay="2s"))
    wait_for(lambda: pool_status(cluster, namespace).get("replicas") == 0, 30,
             message=lambda: f"the pool at 0 replicas; status {pool_status(cluster, namespace)}")
    with ReplicaRecorder(cluster.kubeconfig, namespace) as replicas:
        apply(cluster, namespace, *(job(f"long-{i}", handler_name="long") for i in range(2)),
              *(job(f"short-{i}", handler_name="short") for i in range(4)))
        wait_for(lambda: replicas.now == 3, 30, message=lambda: f"3 replicas; seen {replicas.seen}")
        # The short jobs end; the long ones run on: demand 2 slots, one worker wanted, and the pool comes down to the
        # workers that run them — never below — while they run.
        wait_for(lambda: all(jobs(cluster, namespace)[f"short-{i}"]["status"].get("state") == "succeeded"
                             for i in range(4)), 60, message="the short jobs to succeed")
        wait_for(lambda: replicas.now < 3, 30, message=lambda: f"a scale-down; seen {replicas.seen}")
        running = {n: j for n, j in jobs(cluster, namespace).items() if j["status"].get("state") == "running"}
        assert set(running) == {"long-0", "long-1"}, "the scale-down came while the long jobs ran"
        # Work queued meanwhile goes to the workers kept, not to those retired.
        apply(cluster, namespace, *(job(f"late-{i}", handler_name="short") for i in range(2)))
        found = wait_all(cluster, namespace, 8, {"succeeded"}, timeout=120)
        one_attempt_each(found)
        wait_for(lambda: replicas.now == 0 and not worker_pods(cluster, namespace), 120,
                 message=lambda: f"back to 0 replicas; seen {replicas.seen}")
