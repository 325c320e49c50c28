"""The local node agent (sextant.dev.localnode) against the real control plane: pods run as local processes."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import yaml

from sextant.dev.localnode import LocalNode
from tests.harness import wait_for

from .localnode_fixture import LocalNodeHandle

HOLD = "sextant.dev/test-hold"  # a finalizer that keeps a deleted pod visible until the test has looked
# Kubernetes expands $(VAR) in command and args and turns $$ into $: a shell script writes $$$$ for its own pid.


def create(cluster: Any, namespace: str, manifest: dict[str, Any]) -> None:
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))


def get_pod(cluster: Any, namespace: str, name: str) -> dict[str, Any]:
    return json.loads(cluster.kubectl("get", "pod", "-n", namespace, name, "-o", "json").stdout)


def pod_gone(cluster: Any, namespace: str, name: str) -> bool:
    proc = cluster.kubectl("get", "pod", "-n", namespace, name, "-o", "name", check=False)
    return proc.returncode != 0 and "NotFound" in proc.stderr


def wait_pod(cluster: Any, namespace: str, name: str, predicate: Any, what: str, timeout: float = 30) -> dict:
    seen: dict[str, Any] = {}

    def check() -> bool:
        seen.clear()
        seen.update(get_pod(cluster, namespace, name))
        return bool(predicate(seen))

    wait_for(check, timeout, interval=0.1,
             message=lambda: f"pod {name} {what}; last status {json.dumps(seen.get('status'))}")
    return seen


def phase_is(*phases: str) -> Any:
    return lambda pod: pod.get("status", {}).get("phase") in phases


def terminated(pod: dict[str, Any]) -> dict[str, Any] | None:
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    return statuses[0].get("state", {}).get("terminated")


def release(cluster: Any, namespace: str, name: str) -> None:
    """Drop the test's finalizer, and see the pod go: proof the agent deleted it with grace 0."""
    cluster.kubectl("patch", "pod", "-n", namespace, name, "--type=json",
                    "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]')
    wait_for(lambda: pod_gone(cluster, namespace, name), 20, message=f"pod {name} to be gone")


def pid_alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for its parent to reap it counts as dead)."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_node_registered_ready_and_lease_renewed(cluster, local_node: LocalNodeHandle):
    node = json.loads(cluster.kubectl("get", "node", local_node.name, "-o", "json").stdout)
    labels = node["metadata"]["labels"]
    assert labels["type"] == "local"
    assert labels["sextant.dev/local-node"] == "true"
    assert labels["kubernetes.io/hostname"] == local_node.name
    assert "kwok.x-k8s.io/node" not in (node["metadata"].get("annotations") or {})
    assert {"key": "sextant.dev/local-node", "value": "true", "effect": "NoSchedule"} in node["spec"]["taints"]
    conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert conditions["Ready"] == "True"
    assert node["status"]["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.36.3"
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] > 0

    def lease() -> dict[str, Any]:
        return json.loads(cluster.kubectl("get", "lease", "-n", "kube-node-lease", local_node.name, "-o",
                                          "json").stdout)

    first = lease()
    assert first["spec"]["holderIdentity"] == local_node.name
    assert first["spec"]["leaseDurationSeconds"] == 40
    assert first["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
    # kwokctl runs kube-controller-manager with --node-monitor-grace-period=3m20s, so watching the node
    # stay Ready would take minutes to prove anything; a renewed lease is what keeps it Ready.
    renewed = wait_for(lambda: lease()["spec"]["renewTime"] > first["spec"]["renewTime"], 25, interval=0.5,
                       message="the node lease to be renewed")
    assert renewed
    node = json.loads(cluster.kubectl("get", "node", local_node.name, "-o", "json").stdout)
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"


def test_failing_pod_reports_exit_code_and_output(cluster, namespace, local_node: LocalNodeHandle):
    create(cluster, namespace, local_node.pod(
        "fails", 'echo "got-$GREETING"; echo to-stderr >&2; exit 3', env={"GREETING": "hello"}))
    pod = wait_pod(cluster, namespace, "fails", phase_is("Failed"), "to fail")
    state = terminated(pod)
    assert state is not None and state["exitCode"] == 3 and state["reason"] == "Error"
    assert state["startedAt"] <= state["finishedAt"]
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    assert pod["spec"]["nodeName"] == local_node.name
    logs = cluster.kubectl("logs", "-n", namespace, "fails").stdout
    assert "got-hello" in logs and "to-stderr" in logs
    assert local_node.logs(namespace, "fails", "main") == logs
    assert (local_node.workdir / "logs" / namespace / "fails" / "main.log").is_file()


def test_pod_runs_then_succeeds(cluster, namespace, local_node: LocalNodeHandle, tmp_path: Path):
    go = tmp_path / "go"
    create(cluster, namespace, local_node.pod(
        "succeeds", 'echo waiting; while [ ! -e "$GO" ]; do sleep 0.05; done; echo done', env={"GO": str(go)}))
    pod = wait_pod(cluster, namespace, "succeeds", phase_is("Running"), "to run")
    status = pod["status"]
    assert status["podIP"] == "127.0.0.1" and status["hostIP"] == "127.0.0.1" and status["startTime"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    for ctype in ("Ready", "ContainersReady", "Initialized", "PodScheduled"):
        assert conditions[ctype] == "True", ctype
    container = status["containerStatuses"][0]
    assert container["ready"] is True and container["restartCount"] == 0
    assert container["image"] == "registry.example/ignored:1" and container["imageID"]
    assert container["state"]["running"]["startedAt"]
    wait_for(lambda: "waiting" in local_node.logs(namespace, "succeeds"), 10, message="the pod's first output")

    go.touch()
    pod = wait_pod(cluster, namespace, "succeeds", phase_is("Succeeded"), "to succeed")
    state = terminated(pod)
    assert state is not None and state["exitCode"] == 0 and state["reason"] == "Completed"
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "False"
    assert cluster.kubectl("logs", "-n", namespace, "succeeds").stdout == "waiting\ndone\n"


def test_env_values_field_refs_and_expansion(cluster, namespace, local_node: LocalNodeHandle):
    env = [
        {"name": "GREETING", "value": "hello"},
        {"name": "COMPOSED", "value": "$(GREETING)-world"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}},  # skipped, warned
    ]
    script = ('echo "greeting=$GREETING composed=$COMPOSED pod=$POD_NAME ns=$POD_NAMESPACE node=$NODE_NAME '
              'ip=$POD_IP app=$APP secret=${SECRET-unset} host=$HOSTNAME"; echo "arg=$0 $1"; pwd')
    create(cluster, namespace, local_node.pod("env", script, env=env, args=["$(GREETING)", "$$(GREETING)"],
                                              labels={"app": "demo"}))
    wait_pod(cluster, namespace, "env", phase_is("Succeeded"), "to succeed")
    lines = cluster.kubectl("logs", "-n", namespace, "env").stdout.splitlines()
    assert lines[0] == (f"greeting=hello composed=hello-world pod=env ns={namespace} node={local_node.name} "
                        f"ip=127.0.0.1 app=demo secret=unset host=env")
    assert lines[1] == "arg=hello $(GREETING)"  # $(VAR) expands in args, $$ escapes it
    assert Path(lines[2]).resolve() == (local_node.workdir / "pods" / namespace / "env").resolve()


def test_graceful_delete_sends_sigterm_then_deletes(cluster, namespace, local_node: LocalNodeHandle,
                                                    tmp_path: Path):
    marker, pidfile = tmp_path / "got-term", tmp_path / "pid"
    script = ('echo $$$$ > "$PIDFILE"; trap \'echo TERM > "$MARKER"; exit 0\' TERM; echo started; '
              'sleep 60 & wait $!')
    create(cluster, namespace, local_node.pod("trapper", script, env={"MARKER": str(marker), "PIDFILE": str(pidfile)},
                                              finalizers=[HOLD]))
    wait_pod(cluster, namespace, "trapper", phase_is("Running"), "to run")
    wait_for(lambda: "started" in local_node.logs(namespace, "trapper"), 10, message="the trap to be set")
    pid = int(pidfile.read_text())

    cluster.kubectl("delete", "pod", "-n", namespace, "trapper", "--grace-period=2", "--wait=false")
    pod = wait_pod(cluster, namespace, "trapper", terminated, "to report its end")
    assert marker.read_text().strip() == "TERM"
    state = terminated(pod)
    assert state is not None and state["exitCode"] == 0 and state["reason"] == "Completed"
    assert pod["status"]["phase"] == "Succeeded"
    wait_for(lambda: get_pod(cluster, namespace, "trapper")["metadata"]["deletionGracePeriodSeconds"] == 0, 10,
             message="the agent to finish the deletion with grace 0")
    assert not pid_alive(pid)
    release(cluster, namespace, "trapper")


def test_process_ignoring_sigterm_is_killed_after_the_grace(cluster, namespace, local_node: LocalNodeHandle,
                                                           tmp_path: Path):
    pidfile = tmp_path / "pid"
    create(cluster, namespace, local_node.pod(
        "stubborn", 'echo $$$$ > "$PIDFILE"; trap "" TERM; echo started; sleep 60', env={"PIDFILE": str(pidfile)},
        finalizers=[HOLD]))
    wait_pod(cluster, namespace, "stubborn", phase_is("Running"), "to run")
    wait_for(lambda: "started" in local_node.logs(namespace, "stubborn"), 10, message="the trap to be set")
    pid = int(pidfile.read_text())

    deleted_at = time.monotonic()
    cluster.kubectl("delete", "pod", "-n", namespace, "stubborn", "--grace-period=2", "--wait=false")
    pod = wait_pod(cluster, namespace, "stubborn", terminated, "to be killed")
    elapsed = time.monotonic() - deleted_at
    state = terminated(pod)
    assert state is not None and state["exitCode"] == 137 and state["reason"] == "Error"
    assert pod["status"]["phase"] == "Failed"
    assert elapsed >= 1.8, f"SIGKILL came {elapsed:.1f} s after the delete, before the 2 s grace"
    assert not pid_alive(pid)
    release(cluster, namespace, "stubborn")


def test_process_ending_on_sigterm_reports_143_without_waiting_the_grace(cluster, namespace,
                                                                          local_node: LocalNodeHandle):
    create(cluster, namespace, local_node.pod("sleeper", "echo started; sleep 60", finalizers=[HOLD]))
    wait_pod(cluster, namespace, "sleeper", phase_is("Running"), "to run")
    wait_for(lambda: "started" in local_node.logs(namespace, "sleeper"), 10, message="the pod's output")
    deleted_at = time.monotonic()
    cluster.kubectl("delete", "pod", "-n", namespace, "sleeper", "--grace-period=60", "--wait=false")
    pod = wait_pod(cluster, namespace, "sleeper", terminated, "to end on SIGTERM", timeout=20)
    assert time.monotonic() - deleted_at < 20
    assert terminated(pod)["exitCode"] == 143
    release(cluster, namespace, "sleeper")


def test_finished_pod_is_deleted_at_once(cluster, namespace, local_node: LocalNodeHandle):
    create(cluster, namespace, local_node.pod("done", "exit 0"))
    wait_pod(cluster, namespace, "done", phase_is("Succeeded"), "to succeed")
    cluster.kubectl("delete", "pod", "-n", namespace, "done", "--grace-period=300", "--wait=false")
    wait_for(lambda: pod_gone(cluster, namespace, "done"), 15, message="the finished pod to be gone")


def test_kubectl_logs_follow(cluster, namespace, local_node: LocalNodeHandle):
    create(cluster, namespace, local_node.pod("talker", "for i in 1 2 3 4; do echo line-$i; sleep 0.3; done"))
    wait_pod(cluster, namespace, "talker", phase_is("Running", "Succeeded"), "to start")
    followed = cluster.kubectl("logs", "-f", "-n", namespace, "talker", timeout=30).stdout
    assert followed == "line-1\nline-2\nline-3\nline-4\n"
    assert cluster.kubectl("logs", "-n", namespace, "talker", "--tail=1").stdout == "line-4\n"


def test_local_node_in_a_thread(cluster, namespace, tmp_path: Path):
    """The importable agent: in a thread, with its own labels so that no other test's pod lands on it."""
    name = "local-node-thread"
    node = LocalNode(cluster.kubeconfig, name=name, workdir=tmp_path, labels={"type": "local-thread"})
    node.start_in_thread()
    try:
        node.wait_ready(30)
        manifest = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "threaded"},
            "spec": {"restartPolicy": "Never", "nodeSelector": {"type": "local-thread"},
                     "tolerations": [{"key": "sextant.dev/local-node", "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [{"name": "c", "image": "none", "command": ["sh", "-c", "echo from-thread"]}]},
        }
        create(cluster, namespace, manifest)
        pod = wait_pod(cluster, namespace, "threaded", phase_is("Succeeded"), "to succeed")
        assert pod["spec"]["nodeName"] == name
        assert cluster.kubectl("logs", "-n", namespace, "threaded").stdout == "from-thread\n"
    finally:
        node.stop_thread()
        cluster.kubectl("delete", "node", name, "--ignore-not-found", check=False)
    assert node.error is None


def test_agent_stop_kills_its_processes(cluster, namespace, local_node: LocalNodeHandle, tmp_path: Path):
    """A second agent in its own process, stopped with SIGTERM: its pod's process dies and is reported."""
    from sextant.dev.localnode import AgentProcess

    name = "local-node-stopper"
    agent = AgentProcess(cluster.kubeconfig, name, tmp_path / "agent", "--label", "type=local-stopper",
                         log_file=tmp_path / "agent.log")
    try:
        agent.start().wait_ready(30)
        pidfile = tmp_path / "pid"
        manifest = local_node.pod("orphan", 'echo $$$$ > "$PIDFILE"; sleep 60', env={"PIDFILE": str(pidfile)})
        manifest["spec"]["nodeSelector"] = {"type": "local-stopper"}
        create(cluster, namespace, manifest)
        wait_pod(cluster, namespace, "orphan", phase_is("Running"), "to run")
        wait_for(pidfile.exists, 10, message="the pod's pid file")
        pid = int(pidfile.read_text())
        assert agent.stop() == 0
        assert not pid_alive(pid)
        pod = get_pod(cluster, namespace, "orphan")
        assert pod["status"]["phase"] == "Failed" and terminated(pod)["exitCode"] == 137
        node = json.loads(cluster.kubectl("get", "node", name, "-o", "json").stdout)
        assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "False"
    finally:
        agent.kill()
        cluster.kubectl("delete", "pod", "-n", namespace, "orphan", "--grace-period=0", "--force",
                        "--ignore-not-found", check=False)
        cluster.kubectl("delete", "node", name, "--ignore-not-found", check=False)


def test_active_deadline_stops_the_pod(cluster, namespace, local_node: LocalNodeHandle):
    manifest = local_node.pod("slow", "echo started; sleep 60", grace=5)
    manifest["spec"]["activeDeadlineSeconds"] = 1
    create(cluster, namespace, manifest)
    pod = wait_pod(cluster, namespace, "slow", phase_is("Failed"), "to fail on its deadline", timeout=20)
    assert pod["status"]["reason"] == "DeadlineExceeded"
    assert terminated(pod)["exitCode"] == 143  # SIGTERM ends `sleep` before the 5 s grace


def test_agent_killed_then_restarted_reaps_its_processes(cluster, namespace, local_node: LocalNodeHandle,
                                                         tmp_path: Path):
    """kill -9 leaves the pod's process running (as a dead kubelet leaves its containers); the next agent of
    the same workdir kills it and reports the pod Failed, since it cannot know how the process ended."""
    from sextant.dev.localnode import AgentProcess

    name = "local-node-restarted"
    workdir = tmp_path / "agent"
    first = AgentProcess(cluster.kubeconfig, name, workdir, "--label", "type=local-restarted",
                         log_file=tmp_path / "agent.log")
    second = AgentProcess(cluster.kubeconfig, name, workdir, "--label", "type=local-restarted",
                          log_file=tmp_path / "agent.log")
    try:
        first.start().wait_ready(30)
        pidfile = tmp_path / "pid"
        manifest = local_node.pod("survivor", 'echo $$$$ > "$PIDFILE"; sleep 60', env={"PIDFILE": str(pidfile)})
        manifest["spec"]["nodeSelector"] = {"type": "local-restarted"}
        create(cluster, namespace, manifest)
        wait_pod(cluster, namespace, "survivor", phase_is("Running"), "to run")
        wait_for(pidfile.exists, 10, message="the pod's pid file")
        pid = int(pidfile.read_text())
        first.kill()
        assert pid_alive(pid)

        second.start().wait_ready(30)
        wait_for(lambda: not pid_alive(pid), 10, message=f"the leftover process {pid} to be killed")
        pod = wait_pod(cluster, namespace, "survivor", phase_is("Failed"), "to be reported lost")
        assert terminated(pod)["exitCode"] == 137
        assert "restarted" in terminated(pod)["message"]
    finally:
        first.kill()
        second.stop()
        cluster.kubectl("delete", "pod", "-n", namespace, "survivor", "--grace-period=0", "--force",
                        "--ignore-not-found", check=False)
        cluster.kubectl("delete", "node", name, "--ignore-not-found", check=False)
