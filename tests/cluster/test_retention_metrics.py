"""Retention, Prometheus metrics and readiness of the operator, on the real control plane."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Any

import httpx
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import wait_for

from .support import Operator, apply, follow, get_json, handler, job, jobs, queue, status, token_kubeconfig, wait_state

FAST = {"backoff": {"policy": "fixed", "initial": "200ms"}}
EXIT = "sextant.dev/test-exit-code"


class Deletions:
    """When each job of the namespace was deleted, from a watch (local clock)."""

    def __init__(self, kubeconfig, namespace: str) -> None:
        self.api = k8s_client.CustomObjectsApi(k8s_config.new_client_from_config(str(kubeconfig)))
        self.namespace = namespace
        self.at: dict[str, float] = {}
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        def record(event: dict[str, Any]) -> None:
            if event["type"] == "DELETED":
                self.at.setdefault(event["object"]["metadata"]["name"], time.time())

        follow(self.api.list_namespaced_custom_object, "sextant.dev", "v1alpha1", self.namespace, "jobs",
               on_event=record, stop=self._stop)

    def stop(self) -> None:
        self._stop.set()


def finished_at(st: dict) -> float:
    return datetime.fromisoformat(st["finishedAt"].replace("Z", "+00:00")).timestamp()


def test_retention_deletes_finished_jobs_at_their_time_and_never_unfinished_ones(cluster, namespace, operator):
    deleted = Deletions(cluster.kubeconfig, namespace)
    retention = {"succeeded": "2s", "dead": "3s", "cancelled": "2s"}
    apply(cluster, namespace, queue("q", maxAttempts=1, retention=retention, **FAST), handler("ok"),
          handler("fails", annotations={EXIT: "1"}), handler("forever", annotations={"sextant.dev/test-outcome": "run-forever"},
                                                       heartbeat=False),
          job("job-ok", handler_name="ok"), job("job-dead", handler_name="fails"),
          job("job-running", handler_name="forever"))
    ok = wait_state(cluster, namespace, "job-ok", "succeeded")
    dead = wait_state(cluster, namespace, "job-dead", "dead")
    wait_for(lambda: {"job-ok", "job-dead"} <= deleted.at.keys(), 30, message=lambda: f"deletions {deleted.at}")
    # Not before their retention (the deletion is seen a little after it happens, never before).
    assert deleted.at["job-ok"] - finished_at(ok) >= 2 - 0.5
    assert deleted.at["job-dead"] - finished_at(dead) >= 3 - 0.5
    assert deleted.at["job-ok"] - finished_at(ok) < 10
    assert status(cluster, namespace, "job-running")["state"] == "running"
    assert "job-running" not in deleted.at
    # The garbage collector removes their pods (it may need up to its 30 s discovery resync after the CRDs
    # were installed, on a fresh control plane).
    wait_for(lambda: not [p for p in get_json(cluster, namespace, "pods")["items"]
                          if p["metadata"]["name"].startswith(("job-ok", "job-dead"))], 90, interval=1,
             message="their pods gone with them")
    deleted.stop()


def test_a_retried_job_starts_its_retention_clock_again(cluster, namespace, operator):
    deleted = Deletions(cluster.kubeconfig, namespace)
    apply(cluster, namespace, queue("q", maxAttempts=1, retention={"succeeded": "2s", "dead": "4s"}, **FAST),
          handler("h", annotations={EXIT: "1"}), job("job-again"))
    wait_state(cluster, namespace, "job-again", "dead")
    apply(cluster, namespace, handler("h"))  # fixed
    cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", "job-again", "--type=merge", "-p",
                    '{"spec":{"retryToken":"1"}}')
    final = wait_state(cluster, namespace, "job-again", "succeeded", timeout=20)
    wait_for(lambda: "job-again" in deleted.at, 30, message="the retried job to be deleted")
    assert deleted.at["job-again"] - finished_at(final) >= 2 - 0.5
    deleted.stop()


def test_finished_pods_can_go_before_their_job(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", retention={"succeeded": "1h", "pods": "1s"}, **FAST), handler("h"),
          job("job-keep"))
    final = wait_state(cluster, namespace, "job-keep", "succeeded")
    wait_for(lambda: not get_json(cluster, namespace, "pods")["items"], 30, message="the finished pod to go")
    assert status(cluster, namespace, "job-keep")["attempts"] == final["attempts"], "the timeline stays"


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metric_values_after_a_known_run(cluster, namespace, operator):
    # 10 jobs: 8 succeed at once, 1 fails once then succeeds, 1 fails twice and is dead → 3 failed attempts.
    apply(cluster, namespace, queue("q", maxAttempts=2, **FAST), handler("ok"),
          handler("flaky", annotations={f"{EXIT}-attempt-1": "1"}), handler("bad", annotations={EXIT: "1"}),
          *(job(f"job-ok{i}", handler_name="ok") for i in range(8)),
          job("job-flaky", handler_name="flaky"), job("job-bad", handler_name="bad"))
    wait_for(lambda: sorted((j.get("status") or {}).get("state", "") for j in jobs(cluster, namespace).values())
             == ["dead"] + ["succeeded"] * 9, 60, message="the run to finish")
    ns = namespace
    samples = wait_for(lambda: (s := scrape(operator.http_url)) and
                       value(s, "sextant_attempts_total", namespace=ns, queue="q", handler="bad", result="failed")
                       == 2 and s, 10, message="the counters to settle")
    assert value(samples, "sextant_attempts_total", namespace=ns, queue="q", handler="ok", result="succeeded") == 8
    assert value(samples, "sextant_attempts_total", namespace=ns, queue="q", handler="flaky", result="failed") == 1
    assert value(samples, "sextant_attempts_total", namespace=ns, queue="q", handler="flaky", result="succeeded") == 1
    assert value(samples, "sextant_attempts_total", namespace=ns, queue="q", handler="bad", result="failed") == 2
    assert value(samples, "sextant_jobs", namespace=ns, queue="q", state="succeeded") == 9
    assert value(samples, "sextant_jobs", namespace=ns, queue="q", state="dead") == 1
    assert value(samples, "sextant_queue_wait_seconds_count", namespace=ns, queue="q") == 12  # 12 attempts started
    assert value(samples, "sextant_attempt_duration_seconds_count", namespace=ns, queue="q", handler="bad") == 2
    assert value(samples, "sextant_lease_expirations_total", namespace=ns, queue="q") == 0
    assert value(samples, "sextant_api_requests_total", verb="create", resource="pods", code="201") == 12
    assert value(samples, "sextant_reconcile_errors_total") == 0


def test_readiness_waits_for_the_watches(cluster, namespace, crds, tmp_path_factory):
    """An operator whose account may not list pods is alive but not ready; once it may, it becomes ready."""
    rules = [{"apiGroups": ["sextant.dev"], "resources": ["*"], "verbs": ["*"]},
             {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "watch"]},
             {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    objects = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "op"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "op"}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "op"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "op"},
         "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": namespace}]},
    ]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(objects))
    token = cluster.kubectl("create", "token", "op", "-n", namespace).stdout.strip()
    kubeconfig = token_kubeconfig(cluster, token, tmp_path_factory.mktemp("sa") / "kubeconfig")
    op = Operator(kubeconfig, namespace, tmp_path_factory.mktemp("oplog"))
    op.start()
    try:
        def answer(path: str) -> int | None:
            try:
                return httpx.get(op.http_url + path, timeout=2).status_code
            except httpx.HTTPError:
                return None

        wait_for(lambda: answer("/healthz") == 200, 30, message="the operator to be alive")
        assert answer("/readyz") == 503
        cluster.kubectl("patch", "-n", namespace, "role", "op", "--type=json", "-p",
                        '[{"op":"add","path":"/rules/-","value":{"apiGroups":[""],"resources":["pods"],'
                        '"verbs":["get","list","watch","create","delete"]}}]')
        wait_for(lambda: answer("/readyz") == 200, 30, message=lambda: "ready once pods can be listed\n" + op.log_tail())
    finally:
        op.stop()
