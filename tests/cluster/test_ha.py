"""High availability: two operator replicas, one leader, fenced failover (controller/leader.py, docs/ha.md)."""

from __future__ import annotations

import signal
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import wait_for

from .support import Operator, PodRecorder, apply, get_json, handler, job, queue, timeline_of, wait_all

FAST = {"backoff": {"policy": "fixed", "initial": "200ms"}}
FLAKY = {"sextant.dev/test-exit-code-attempt-1": "1"}
RUNS = {"sextant.dev/test-duration": "300ms"}  # long enough that the leader dies mid-run, not after it
WRITES = ("create", "patch", "update", "delete")


def replicas(cluster, namespace, tmp_path_factory, *timing: str) -> list[Operator]:
    logs = tmp_path_factory.mktemp("replicas")
    ops = [Operator(cluster.kubeconfig, namespace, logs / name, "--leader-elect", "--leader-election-namespace",
                    namespace, *timing) for name in ("a", "b")]
    for op in ops:
        op.log_path.parent.mkdir(parents=True, exist_ok=True)
        op.start()
    return ops


def holder(cluster, namespace) -> str:
    try:
        return get_json(cluster, namespace, "lease", "sextant-operator")["spec"].get("holderIdentity") or ""
    except Exception:
        return ""


def leader_of(ops: list[Operator], identity: str) -> Operator | None:
    return next((op for op in ops if op.proc and f"_{op.proc.pid}_" in identity), None)


def writes(op: Operator) -> float:
    text = httpx.get(op.http_url + "/metrics", timeout=5).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "sextant_api_requests_total" and s.labels.get("verb") in WRITES)


def jobs_of(prefix: str, count: int, flaky_every: int = 4) -> tuple[list[str], set[str], list[dict]]:
    names = [f"{prefix}{i:03d}" for i in range(count)]
    flaky = {n for i, n in enumerate(names) if i % flaky_every == 0}
    return names, flaky, [job(n, handler_name="flaky" if n in flaky else "h") for n in names]


def assert_exact(final: dict, names: list[str], flaky: set[str], pods: PodRecorder) -> None:
    created = pods.pods_created()
    for name in names:
        expected = [("failed", "Error"), ("succeeded", None)] if name in flaky else [("succeeded", None)]
        assert timeline_of(final[name]["status"]) == expected, name
        assert len(created[name]) == len(expected), (name, created[name])
    assert pods.max_alive_per_job() == 1


def test_kill_the_leader_during_a_run(cluster, namespace, crds, tmp_path_factory):
    ops = replicas(cluster, namespace, tmp_path_factory)  # kube-controller-manager's timing: 15s / 10s / 2s
    try:
        names, flaky, objects = jobs_of("job-h", 300)
        with PodRecorder(cluster.kubeconfig, namespace) as pods:
            apply(cluster, namespace, queue("q", concurrency=10, maxAttempts=3, **FAST), handler("h", annotations=RUNS),
                  handler("flaky", annotations={**FLAKY, **RUNS}))
            first = wait_for(lambda: holder(cluster, namespace), 30, message="a leader")
            for batch in range(0, 300, 100):
                apply(cluster, namespace, *objects[batch:batch + 100])
            wait_for(lambda: len(pods.records) >= 150, 60, message="the run to be under way")
            leader = leader_of(ops, first)
            leader.kill()
            killed = time.monotonic()
            standby = next(op for op in ops if op is not leader)
            wait_for(lambda: holder(cluster, namespace) not in ("", first), 30, message="the standby to lead")
            took_over = time.monotonic()
            first_pod = wait_for(lambda: next((r.at for r in pods.records if r.kind == "ADDED" and r.at > killed),
                                              None), 30, message="a first admission by the new leader")
            final = wait_all(cluster, namespace, 300, {"succeeded", "dead", "cancelled"}, 300)
        print(f"\nfailover: lease taken {took_over - killed:.1f}s, first admission {first_pod - killed:.1f}s "
              f"after the leader was killed")
        # The standby takes the lease once it has seen it unrenewed for its duration (15 s after its last observed
        # renewal, which it reads every retry period, 2 s), and admits on its next look: 15 + 2 × 2 s, then its
        # first pod within 3 s on a loaded machine.
        assert took_over - killed <= 19.5, "the standby leads once the lease has run out"
        assert first_pod - killed <= 22.5, "the standby admits at once once it leads"
        assert leader_of(ops, holder(cluster, namespace)) is standby
        assert pods.max_unfinished("q") <= 10
        assert_exact(final, names, flaky, pods)
    finally:
        for op in ops:
            op.stop()


def test_a_paused_leader_steps_down_and_writes_nothing(cluster, namespace, crds, tmp_path_factory):
    timing = ("--leader-election-lease-duration", "3s", "--leader-election-renew-deadline", "2s",
              "--leader-election-retry-period", "500ms")
    ops = replicas(cluster, namespace, tmp_path_factory, *timing)
    try:
        apply(cluster, namespace, queue("q", **FAST), handler("h"), job("job-before"))
        wait_all(cluster, namespace, 1, {"succeeded"}, 30)
        first = holder(cluster, namespace)
        old = leader_of(ops, first)
        new = next(op for op in ops if op is not old)
        wait_for(lambda: httpx.get(new.http_url + "/readyz").status_code == 200, 30, message="standby ready")
        before = writes(old)
        old.proc.send_signal(signal.SIGSTOP)
        try:
            wait_for(lambda: holder(cluster, namespace) not in ("", first), 30, message="the standby to lead")
            apply(cluster, namespace, *(job(f"job-after{i}") for i in range(20)))
            wait_all(cluster, namespace, 21, {"succeeded"}, 60)
        finally:
            old.proc.send_signal(signal.SIGCONT)
        # Once resumed it sees the new jobs in its view, and steps down without writing anything.
        wait_for(lambda: "standby" in httpx.get(old.http_url + "/readyz", timeout=5).text, 30,
                 message="the old leader to call itself a standby")

        def caught_up() -> bool:
            text = httpx.get(old.http_url + "/metrics", timeout=5).text
            return any(s.name == "sextant_jobs" and s.labels.get("state") == "succeeded" and s.value == 21
                       for f in text_string_to_metric_families(text) for s in f.samples)

        wait_for(caught_up, 30, message="the old leader's view to catch up")
        assert writes(old) == before
        assert "leader" in httpx.get(new.http_url + "/readyz").text
    finally:
        for op in ops:
            op.stop()


def test_rolling_restart_of_both_replicas_loses_nothing(cluster, namespace, crds, tmp_path_factory):
    ops = replicas(cluster, namespace, tmp_path_factory)
    try:
        names, flaky, objects = jobs_of("job-r", 200)
        with PodRecorder(cluster.kubeconfig, namespace) as pods:
            apply(cluster, namespace, queue("q", concurrency=10, maxAttempts=3, **FAST), handler("h"),
                  handler("flaky", annotations=FLAKY))
            wait_for(lambda: holder(cluster, namespace), 30, message="a leader")
            for op, batch in zip(ops, (objects[:100], objects[100:])):
                seen = len(pods.records)
                apply(cluster, namespace, *batch)
                wait_for(lambda: len(pods.records) >= seen + 30, 60, message="progress")
                op.stop()  # SIGTERM: a leader hands its lease over on the way out
                op.start()
            final = wait_all(cluster, namespace, 200, {"succeeded", "dead", "cancelled"}, 300)
        assert_exact(final, names, flaky, pods)
        assert pods.max_unfinished("q") <= 10
    finally:
        for op in ops:
            op.stop()
