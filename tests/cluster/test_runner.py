"""The in-pod runner on a node that really runs processes: payload on stdin, leases, signals, the SDK."""

from __future__ import annotations

import json
import os
from datetime import datetime
import signal
import sys
import threading
import time
from pathlib import Path

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from sextant.dev.localnode import AgentProcess
from tests.harness import wait_for

from .support import apply, follow, get_json, job, jobs, queue, status, timeline_of, wait_state

HANDLERS_DIR = Path(__file__).parent / "handlers"


def local_handler(name: str, command: list[str], *, env: dict[str, str] | None = None,
                  node: str | None = None, **spec) -> dict:
    """A Handler whose pods run on a local node: `sextant run -- <command>` (or the runner's own flags)."""
    node_selector = {"kubernetes.io/hostname": node} if node else {"type": "local"}
    env = dict(env or {})
    if "PYTHONPATH" in env and os.environ.get("PYTHONPATH"):  # the runner stays this checkout's, as the agent's is
        env["PYTHONPATH"] += os.pathsep + os.environ["PYTHONPATH"]
    container = {"name": "handler", "image": "ignored.example/runner:1", "command": ["sextant", "run", *command],
                 "env": [{"name": k, "value": v} for k, v in env.items()]}
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler", "metadata": {"name": name},
            "spec": {"template": {"spec": {
                "nodeSelector": node_selector,
                "tolerations": [{"key": "sextant.dev/local-node", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [container]}}, **spec}}


def sh(script: str) -> list[str]:
    return ["--", "sh", "-c", script]


def test_command_handler_gets_the_payload_on_stdin(cluster, namespace, operator, local_node, tmp_path):
    payload = {"orderId": 42, "items": ["a", "b"], "note": "ünïcode ✓", "nested": {"x": 1.5, "ok": True}}
    out = tmp_path / "payload.json"
    apply(cluster, namespace, queue("q", maxAttempts=1),
          local_handler("h", sh(f'cat > {out}; echo "attempt $SEXTANT_ATTEMPT of $SEXTANT_JOB_ID"; '
                                 'test "$SEXTANT_QUEUE" = q && exit 0 || exit 9')),
          local_handler("fails", sh("cat >/dev/null; exit 4")),
          job("job-stdin", payload=payload), job("job-exit4", handler_name="fails"))
    assert timeline_of(wait_state(cluster, namespace, "job-stdin", "succeeded", timeout=60)) == [("succeeded", None)]
    assert json.loads(out.read_text()) == payload
    assert "attempt 1 of job_stdin" in cluster.kubectl("logs", "-n", namespace, "job-stdin-1").stdout
    final = wait_state(cluster, namespace, "job-exit4", "dead", timeout=60)
    assert [(a["reason"], a["exitCode"]) for a in final["attempts"]] == [("Error", 4)]


def test_sdk_handler_chains_one_job_even_when_its_attempt_runs_twice(cluster, namespace, operator, local_node):
    env = {"PYTHONPATH": str(HANDLERS_DIR)}
    apply(cluster, namespace, queue("q", maxAttempts=3, backoff={"policy": "fixed", "initial": "200ms"}),
          local_handler("charge-card", ["--module", "chaining"], env=env),
          local_handler("send-receipt", ["--module", "chaining"], env=env),
          job("job-charge", handler_name="charge-card", payload={"orderId": 7}))
    final = wait_state(cluster, namespace, "job-charge", "succeeded", timeout=90)
    assert timeline_of(final) == [("failed", "Error"), ("succeeded", None)]
    assert "card network timed out" in (final["attempts"][0].get("message") or "")

    def receipts():
        return [j for j in jobs(cluster, namespace).values() if j["spec"]["handler"] == "send-receipt"]

    wait_for(lambda: receipts() and receipts()[0].get("status", {}).get("state") == "succeeded", 60,
             message="the chained job to succeed")
    assert len(receipts()) == 1
    receipt = receipts()[0]
    assert receipt["spec"]["idempotencyKey"] == "receipt-7"
    assert receipt["spec"]["payload"] == {"orderId": 7, "chargeId": "ch_7"}
    pod = receipt["status"]["attempts"][0]["pod"]
    assert "receipt for order 7" in cluster.kubectl("logs", "-n", namespace, pod).stdout


def test_non_retryable_error_from_the_sdk_ends_dead(cluster, namespace, operator, local_node):
    apply(cluster, namespace, queue("q", maxAttempts=5),
          local_handler("refuse", ["--module", "chaining"], env={"PYTHONPATH": str(HANDLERS_DIR)}),
          job("job-declined", handler_name="refuse"))
    final = wait_state(cluster, namespace, "job-declined", "dead", timeout=60)
    assert timeline_of(final) == [("failed", "NonRetryableExitCode")]


def test_crashing_handler_ends_dead_after_max_attempts(cluster, namespace, operator, local_node):
    crash = ["--", sys.executable, "-c", "import os; os.abort()"]
    apply(cluster, namespace, queue("q", maxAttempts=3, backoff={"policy": "fixed", "initial": "200ms"}),
          local_handler("h", crash), job("job-crash"))
    final = wait_state(cluster, namespace, "job-crash", "dead", timeout=90)
    assert [(a["reason"], a["exitCode"]) for a in final["attempts"]] == [("Error", 134)] * 3


def test_cancel_sends_sigterm_then_sigkill_after_the_grace(cluster, namespace, operator, local_node, tmp_path):
    mark, started = tmp_path / "got-term", tmp_path / "started"
    stubborn = sh(f'trap "date +%s.%N > {mark}; sleep 60" TERM; touch {started}; while true; do sleep 0.1; done')
    apply(cluster, namespace, queue("q", cancelGrace="2s"), local_handler("h", stubborn), job("job-stubborn"))
    wait_for(started.exists, 60, message="the handler to run")
    asked = time.time()
    cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", "job-stubborn", "--type=merge", "-p",
                    '{"spec":{"cancel":true}}')
    final = wait_state(cluster, namespace, "job-stubborn", "cancelled", timeout=30)
    ended = time.time()
    wait_for(mark.exists, 5, message="the handler to get SIGTERM")
    assert float(mark.read_text()) - asked < 2, "SIGTERM came at once"
    assert ended - asked >= 2, "SIGKILL only after cancelGrace"
    assert timeline_of(final) == [("cancelled", "Cancelled")]
    # 137 when the operator saw the pod's last status before it vanished (on a loaded machine it may see only
    # the deletion): never recorded as an ordinary Error either way.
    assert final["attempts"][0].get("exitCode") in (137, None)


def test_timeout_stops_a_running_command(cluster, namespace, operator, local_node):
    apply(cluster, namespace, queue("q", maxAttempts=1, timeout="2s", cancelGrace="1s"),
          local_handler("h", sh("sleep 300")), job("job-sleepy"))
    final = wait_state(cluster, namespace, "job-sleepy", "dead", timeout=60)
    assert timeline_of(final) == [("failed", "Timeout")]


class LeaseWrites:
    """Counts the writes to one Lease, from a watch."""

    def __init__(self, kubeconfig: Path, namespace: str, name: str) -> None:
        self.api = k8s_client.CoordinationV1Api(k8s_config.new_client_from_config(str(kubeconfig)))
        self.namespace, self.name = namespace, name
        self.versions: set[str] = set()
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        follow(self.api.list_namespaced_lease, self.namespace, field_selector=f"metadata.name={self.name}",
               on_event=lambda event: self.versions.add(event["object"].metadata.resource_version), stop=self._stop)

    def stop(self) -> None:
        self._stop.set()


def test_a_long_handler_keeps_its_lease_by_renewing_it(cluster, namespace, operator, local_node):
    # leaseDuration 4s: renewed every 4/3 s; the handler runs 10 s = 2.5 lease durations.
    writes = LeaseWrites(cluster.kubeconfig, namespace, "job-long-1")
    apply(cluster, namespace, queue("q", maxAttempts=1, leaseDuration="4s"), local_handler("h", sh("sleep 10")),
          job("job-long"))
    final = wait_state(cluster, namespace, "job-long", "succeeded", timeout=60)
    writes.stop()
    started = final["attempts"][0]["startedAt"]
    finished = final["attempts"][0]["finishedAt"]
    assert timeline_of(final) == [("succeeded", None)], (started, finished)
    # One create, then a renewal every leaseDuration/3 for as long as the runner ran (10 s of handler, plus the
    # runner's own start and stop, longer on a loaded machine): on a cadence, so a slow write does not push back
    # the ones after it.
    lease = get_json(cluster, namespace, "lease", "job-long-1")["spec"]
    held = (datetime.fromisoformat(lease["renewTime"].replace("Z", "+00:00"))
            - datetime.fromisoformat(lease["acquireTime"].replace("Z", "+00:00"))).total_seconds()
    assert held >= 9, "renewed for as long as the handler ran"
    expected = held / (4 / 3) + 1
    assert abs(len(writes.versions) - expected) <= 2, (len(writes.versions), held)


def _runner_pid(job_name: str) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"run" in cmdline and any(b"sextant" in part for part in cmdline[:2]) \
                and any(v.startswith(b"SEXTANT_ATTEMPT_REF=") and f'"job":"{job_name}"'.encode() in v
                        for v in environ):  # the runner's own environment: the slim pod's
            return int(entry.name)
    return None


def test_a_dead_worker_loses_its_lease_and_the_job_is_retried(cluster, namespace, operator, tmp_path):
    """kill -9 the runner and its node agent (the whole worker dies, nobody reports the pod): the lease
    expires after leaseDuration, the attempt fails with LeaseExpired, and a new agent runs the retry."""
    node = "local-node-crash"
    agent = AgentProcess(cluster.kubeconfig, node, tmp_path / "agent").start()
    agent.wait_ready()
    try:
        script = 'if [ "$SEXTANT_ATTEMPT" = 1 ]; then sleep 300; fi; echo second-attempt-done'
        apply(cluster, namespace, queue("q", maxAttempts=3, leaseDuration="3s", cancelGrace="1s",
                                        backoff={"policy": "fixed", "initial": "200ms"}),
              local_handler("h", sh(script), node=node), job("job-orphan"))
        pid = wait_for(lambda: _runner_pid("job-orphan"), 60, message="the runner to start")
        wait_for(lambda: get_json(cluster, namespace, "leases", "job-orphan-1"), 60, message="the lease")
        agent.kill()
        os.kill(pid, signal.SIGKILL)
        killed = time.time()

        def lease_expired():
            attempts = status(cluster, namespace, "job-orphan").get("attempts", [])
            return attempts and attempts[0].get("reason") == "LeaseExpired"

        wait_for(lease_expired, 60, message="the attempt to fail with LeaseExpired")
        assert time.time() - killed >= 2, "not before the lease could have expired"
        agent = AgentProcess(cluster.kubeconfig, node, tmp_path / "agent").start()
        agent.wait_ready()
        final = wait_state(cluster, namespace, "job-orphan", "succeeded", timeout=60)
        assert timeline_of(final) == [("failed", "LeaseExpired"), ("succeeded", None)]
    finally:
        agent.stop()
        cluster.kubectl("delete", "node", node, "--wait=false", check=False)
