"""The simulated nodes behave as sextant/dev/localcluster/kwok-stages.yaml promises: pods end as their annotations say."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from datetime import datetime
from typing import Any

import pytest

from sextant.dev.localcluster import KWOK_NODE_LABELS
from tests.harness import Cluster, external_cluster, holds_for, wait_for

DURATION = "sextant.dev/test-duration"
EXIT_CODE = "sextant.dev/test-exit-code"
OUTCOME = "sextant.dev/test-outcome"
FINISHED = ("Succeeded", "Failed")

pytestmark = pytest.mark.skipif(external_cluster(), reason="needs the local cluster's kwok nodes and Stages")


def pod(
    name: str,
    annotations: dict[str, str] | None = None,
    *,
    restart_policy: str = "Never",
    containers: int = 1,
    node_name: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "containers": [{"name": f"c{i}", "image": "registry.example/none:1"} for i in range(containers)],
        # kwokctl's default node has no taint today; tolerate the one kwok documents, should it appear.
        "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
    }
    if node_name:
        spec["nodeName"] = node_name
    else:
        spec["nodeSelector"] = dict(KWOK_NODE_LABELS)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": spec,
    }


def create(cluster: Cluster, namespace: str, *objects: dict[str, Any]) -> None:
    items = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(items))


def pods(cluster: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    listed = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)
    return {p["metadata"]["name"]: p for p in listed["items"]}


def get_pod(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    out = cluster.kubectl("get", "pod", name, "-n", namespace, "-o", "json", "--ignore-not-found").stdout
    return json.loads(out) if out.strip() else None


def phase(p: dict[str, Any] | None) -> str | None:
    return (p or {}).get("status", {}).get("phase")


def terminated(p: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return p["status"]["containerStatuses"][index]["state"].get("terminated") or {}


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def kwok_nodes(cluster: Cluster) -> set[str]:
    selector = ",".join(f"{k}={v}" for k, v in KWOK_NODE_LABELS.items())
    return set(cluster.kubectl("get", "nodes", "-l", selector, "-o", "name").stdout.replace("node/", "").split())


class PodWatch:
    """Every event of one pod, from `kubectl get --watch` started before the test acts."""

    def __init__(self, cluster: Cluster, namespace: str, name: str) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._proc = subprocess.Popen(
            [cluster.local.kubectl_binary, f"--kubeconfig={cluster.kubeconfig}", "get", "pod", name, "-n", namespace,
             "--watch", "--output-watch-events", "-o", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        decoder, buffer = json.JSONDecoder(), ""
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            buffer += line
            try:
                event, end = decoder.raw_decode(buffer.lstrip())
            except ValueError:
                continue
            buffer = buffer.lstrip()[end:]
            self.events.append((event["type"], event["object"]))

    def types(self) -> list[str]:
        return [t for t, _ in self.events]

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(5)


def test_kwok_nodes_are_ready_and_marked_for_kwok(cluster):
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    kwok = [n for n in nodes if n["metadata"].get("annotations", {}).get("kwok.x-k8s.io/node") == "fake"]
    assert len(kwok) >= 2
    for node in kwok:
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True", node["metadata"]["name"]
        assert node["metadata"]["labels"]["type"] == "kwok"


def test_pods_end_as_their_annotations_say(cluster, namespace):
    expected = {  # pod → (phase, exit code of container 0, reason, exit codes of the others)
        "plain": ("Succeeded", 0, "Completed", []),
        "exit-0": ("Succeeded", 0, "Completed", []),
        "exit-3": ("Failed", 3, "Error", []),
        "exit-42-two-containers": ("Failed", 42, "Error", [0]),
    }
    create(
        cluster, namespace,
        pod("plain"),
        pod("exit-0", {EXIT_CODE: "0"}),
        pod("exit-3", {EXIT_CODE: "3"}),
        pod("exit-42-two-containers", {EXIT_CODE: "42"}, containers=2),
    )  # fmt: skip
    done = wait_for(
        lambda: (found := pods(cluster, namespace)) and all(phase(p) in FINISHED for p in found.values()) and found,
        timeout=15,
        message=lambda: f"every pod to finish; phases {({n: phase(p) for n, p in pods(cluster, namespace).items()})}",
    )
    nodes = kwok_nodes(cluster)
    for name, (want_phase, code, reason, others) in expected.items():
        p = done[name]
        assert phase(p) == want_phase, name
        assert terminated(p)["exitCode"] == code, name
        assert terminated(p)["reason"] == reason, name
        assert [terminated(p, i + 1)["exitCode"] for i in range(len(others))] == others, name
        assert ts(terminated(p)["startedAt"]) <= ts(terminated(p)["finishedAt"]), name
        assert p["spec"]["nodeName"] in nodes, name
        assert p["status"]["podIP"] and p["status"]["hostIP"], name


def test_a_pod_runs_for_its_test_duration(cluster, namespace):
    create(cluster, namespace, pod("two-seconds", {DURATION: "2s"}))

    def running() -> dict[str, Any] | None:
        p = get_pod(cluster, namespace, "two-seconds")
        return p if phase(p) == "Running" else None

    p = wait_for(running, timeout=10, message="the pod to run")
    became_running = time.monotonic()
    status = p["status"]
    container = status["containerStatuses"][0]
    assert container["ready"] is True and container["state"]["running"]["startedAt"]
    assert status["podIP"] and status["hostIP"] and status["startTime"]
    assert p["spec"]["nodeName"] in kwok_nodes(cluster)
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"

    p = wait_for(
        lambda: (q := get_pod(cluster, namespace, "two-seconds")) and phase(q) in FINISHED and q,
        timeout=10,
        message="the pod to finish",
    )
    ran = time.monotonic() - became_running
    assert phase(p) == "Succeeded"
    assert 1.6 <= ran <= 3.5, f"ran {ran:.2f} s, expected about 2 s"
    end = terminated(p)
    assert end["startedAt"] == container["state"]["running"]["startedAt"]
    # timestamps have second precision
    assert 1 <= (ts(end["finishedAt"]) - ts(end["startedAt"])).total_seconds() <= 3


def test_run_forever_and_restart_always_pods_keep_running(cluster, namespace):
    create(
        cluster, namespace,
        pod("forever", {OUTCOME: "run-forever", EXIT_CODE: "1"}),
        pod("always", restart_policy="Always"),
        pod("control", {DURATION: "1500ms"}),
    )  # fmt: skip
    wait_for(lambda: phase(get_pod(cluster, namespace, "control")) == "Succeeded", timeout=10,
             message="the control pod to finish after 1.5 s")  # fmt: skip
    now = pods(cluster, namespace)
    for name in ("forever", "always"):
        assert phase(now[name]) == "Running", name
        assert "running" in now[name]["status"]["containerStatuses"][0]["state"], name


def test_a_running_pod_deleted_with_a_grace_period_is_killed_when_it_ends(cluster, namespace):
    create(cluster, namespace, pod("victim", {OUTCOME: "run-forever"}))
    wait_for(lambda: phase(get_pod(cluster, namespace, "victim")) == "Running", timeout=10, message="the pod to run")
    watch = PodWatch(cluster, namespace, "victim")
    try:
        wait_for(lambda: watch.events, timeout=5, message="the watch to start")
        deleted_at = time.monotonic()
        cluster.kubectl("delete", "pod", "victim", "-n", namespace, "--grace-period=3", "--wait=false")
        # deletionTimestamp = now + 3 s, truncated to the second: the pod lives at least 2 s more.
        holds_for(lambda: phase(get_pod(cluster, namespace, "victim")) == "Running",
                  duration=max(0.0, deleted_at + 1.5 - time.monotonic()), message="the pod to keep running")  # fmt: skip
        wait_for(lambda: get_pod(cluster, namespace, "victim") is None, timeout=8, message="the pod to go away")
        gone_after = time.monotonic() - deleted_at
        assert 1.9 <= gone_after <= 5.5, f"gone {gone_after:.2f} s after a delete with a 3 s grace period"
        wait_for(lambda: "DELETED" in watch.types(), timeout=5, message="the DELETED event")
    finally:
        watch.stop()
    before_removal = [obj for kind, obj in watch.events if kind == "MODIFIED"][-1]
    assert phase(before_removal) == "Failed"
    assert terminated(before_removal)["exitCode"] == 137
    assert terminated(before_removal)["reason"] == "Error"


def test_a_finished_pod_is_removed_at_once_when_deleted(cluster, namespace):
    create(cluster, namespace, pod("done"))
    wait_for(lambda: phase(get_pod(cluster, namespace, "done")) == "Succeeded", timeout=10, message="the pod to end")
    deleted_at = time.monotonic()
    cluster.kubectl("delete", "pod", "done", "-n", namespace, "--wait=false")  # default grace period: 30 s
    wait_for(lambda: get_pod(cluster, namespace, "done") is None, timeout=5, message="the finished pod to go away")
    assert time.monotonic() - deleted_at < 5


def test_pods_on_nodes_kwok_does_not_manage_are_left_alone(cluster, namespace):
    node = f"real-{namespace[-6:]}"
    cluster.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {"type": "real"}},
    }))  # fmt: skip
    try:
        create(cluster, namespace, pod("elsewhere", node_name=node), pod("control", {DURATION: "1s"}))
        wait_for(lambda: phase(get_pod(cluster, namespace, "control")) == "Succeeded", timeout=10,
                 message="the control pod on a kwok node to finish")  # fmt: skip
        elsewhere = get_pod(cluster, namespace, "elsewhere")
        assert elsewhere is not None
        assert phase(elsewhere) == "Pending"
        assert not elsewhere["status"].get("containerStatuses")
        assert not elsewhere["status"].get("podIP")
    finally:
        cluster.kubectl("delete", "pod", "elsewhere", "-n", namespace, "--grace-period=0", "--force",
                        "--ignore-not-found", check=False)  # fmt: skip
        cluster.kubectl("delete", "node", node, "--ignore-not-found", "--wait=false", check=False)
