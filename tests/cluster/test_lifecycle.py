"""The job lifecycle on the real control plane: kwok pods end as their annotations say
(sextant/dev/localcluster/kwok-stages.yaml)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from tests.harness import wait_for

from .support import (
    KWOK_TOLERATION, PodRecorder, apply, get_json, handler, job, queue, status, timeline_of, wait_all, wait_events,
    wait_state,
)

EXIT = "sextant.dev/test-exit-code"
FOREVER = {"sextant.dev/test-outcome": "run-forever"}


def exit_on_attempt(attempt: int, code: int) -> dict[str, str]:
    return {f"{EXIT}-attempt-{attempt}": str(code)}


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


FAST = {"backoff": {"policy": "fixed", "initial": "200ms"}}


def test_success(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", **FAST), handler("h"), job("job-ok", payload={"orderId": 42}))
    final = wait_state(cluster, namespace, "job-ok", "succeeded")
    assert final["attempt"] == 1
    assert timeline_of(final) == [("succeeded", None)]
    assert final["attempts"][0]["pod"] == "job-ok-1" and final["attempts"][0]["node"]
    assert {c["type"]: c["status"] for c in final["conditions"]}["Succeeded"] == "True"
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Succeeded", "jobs.sextant.dev/job-ok", "--timeout=5s")
    pod = get_json(cluster, namespace, "pod", "job-ok-1")
    labels = pod["metadata"]["labels"]
    assert labels["sextant.dev/job"] == "job-ok" and labels["sextant.dev/queue"] == "q"
    assert labels["sextant.dev/handler"] == "h" and labels["sextant.dev/attempt"] == "1"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Job"
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    # A slim pod: the runner reads the rest of the identity, and the payload, from the Job (never E2BIG).
    assert set(env) == {"SEXTANT_ATTEMPT_REF", "SEXTANT_NODE_NAME", "SEXTANT_POD_UID"}
    ref = json.loads(env["SEXTANT_ATTEMPT_REF"])
    assert (ref["job"], ref["sequence"], ref["pod"]) == ("job-ok", 1, "job-ok-1") and ref["uid"] == get_json(
        cluster, namespace, "jobs.sextant.dev", "job-ok")["metadata"]["uid"]
    wait_events(cluster, namespace, "--field-selector", "involvedObject.name=job-ok",
                until=lambda events: {"Started", "Succeeded"} <= {e["reason"] for e in events},
                what="Started and Succeeded Events on the job")


def test_fail_twice_then_succeed(cluster, namespace, operator):
    flaky = handler("h", annotations={**exit_on_attempt(1, 1), **exit_on_attempt(2, 1)})
    apply(cluster, namespace, queue("q", maxAttempts=5, **FAST), flaky, job("job-flaky"))
    final = wait_state(cluster, namespace, "job-flaky", "succeeded")
    assert final["attempt"] == 3
    assert timeline_of(final) == [("failed", "Error"), ("failed", "Error"), ("succeeded", None)]
    assert [a["exitCode"] for a in final["attempts"]] == [1, 1, 0]
    assert [a["pod"] for a in final["attempts"]] == ["job-flaky-1", "job-flaky-2", "job-flaky-3"]


def test_always_failing_ends_dead_with_backoff_between_attempts(cluster, namespace, operator):
    backoff = {"policy": "exponential", "initial": "1s", "factor": 2, "max": "10s", "jitter": 0}
    apply(cluster, namespace, queue("q", maxAttempts=3, backoff=backoff), handler("h", annotations={EXIT: "7"}),
          job("job-doomed"))
    final = wait_state(cluster, namespace, "job-doomed", "dead", timeout=60)
    assert final["attempt"] == 3
    assert timeline_of(final) == [("failed", "Error")] * 3
    assert {c["type"]: c["status"] for c in final["conditions"]}["Dead"] == "True"
    gaps = [ts(b["startedAt"]) - ts(a["finishedAt"]) for a, b in zip(final["attempts"], final["attempts"][1:])]
    # startedAt is the container's start, which Kubernetes keeps to the second: up to 1 s earlier than the truth.
    second = timedelta(seconds=1)
    assert gaps[0] >= timedelta(seconds=1) - second and gaps[1] >= timedelta(seconds=2) - second, gaps


def test_non_retryable_exit_code_is_dead_after_one_attempt(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", maxAttempts=5, **FAST),
          handler("h", annotations={EXIT: "2"}, nonRetryableExitCodes=[2]), job("job-bad-input"))
    final = wait_state(cluster, namespace, "job-bad-input", "dead")
    assert timeline_of(final) == [("failed", "NonRetryableExitCode")]
    assert final["attempts"][0]["exitCode"] == 2


def test_timeout_stops_the_pod_and_fails_the_attempt(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", maxAttempts=1, timeout="2s", cancelGrace="1s"),
          handler("h", annotations=FOREVER), job("job-slow"))
    final = wait_state(cluster, namespace, "job-slow", "dead", timeout=30)
    assert timeline_of(final) == [("failed", "Timeout")]
    started, finished = ts(final["attempts"][0]["startedAt"]), ts(final["attempts"][0]["finishedAt"])
    assert timedelta(seconds=2) <= finished - started < timedelta(seconds=15)
    wait_for(lambda: not get_json(cluster, namespace, "pods")["items"], 20, message="the timed-out pod to be gone")


def test_future_run_at_is_honoured(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", **FAST), handler("h"))
    # Computed just before the job's own apply, with room for a slow one (a loaded machine): still ahead when seen.
    run_at = (datetime.now(timezone.utc) + timedelta(seconds=8)).replace(microsecond=0)
    apply(cluster, namespace, job("job-later", runAt=run_at.isoformat().replace("+00:00", "Z")))
    assert ts(wait_state(cluster, namespace, "job-later", "scheduled")["nextAttemptAt"]) == run_at
    final = wait_state(cluster, namespace, "job-later", "succeeded", timeout=40)
    assert ts(final["attempts"][0]["startedAt"]) >= run_at


def test_cancel_scheduled_queued_and_running(cluster, namespace, operator):
    later = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    apply(cluster, namespace, queue("q", concurrency=1, cancelGrace="2s", **FAST), handler("h", annotations=FOREVER),
          job("job-running"), job("job-waiting"), job("job-scheduled", runAt=later))
    wait_state(cluster, namespace, "job-running", "running")
    wait_state(cluster, namespace, "job-waiting", "queued")
    wait_state(cluster, namespace, "job-scheduled", "scheduled")
    for name in ("job-scheduled", "job-waiting"):
        cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", name, "--type=merge", "-p",
                        '{"spec":{"cancel":true}}')
        final = wait_state(cluster, namespace, name, "cancelled", timeout=10)
        assert final["attempts"] == []
    cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", "job-running", "--type=merge", "-p",
                    '{"spec":{"cancel":true}}')
    final = wait_state(cluster, namespace, "job-running", "cancelled", timeout=30)
    assert timeline_of(final) == [("cancelled", "Cancelled")]
    assert {c["type"]: c["status"] for c in final["conditions"]}["Cancelled"] == "True"
    assert not get_json(cluster, namespace, "pods")["items"], "the cancelled pod is gone"
    # Applying the same request again changes nothing.
    cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", "job-running", "--type=merge", "-p",
                    '{"spec":{"cancel":true}}')
    assert status(cluster, namespace, "job-running")["attempts"] == final["attempts"]


def test_retry_from_failed_and_dead_but_not_from_succeeded(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", maxAttempts=1, **FAST), handler("fails", annotations=exit_on_attempt(1, 3)),
          handler("h"), job("job-dead", handler_name="fails"), job("job-done"))
    wait_state(cluster, namespace, "job-dead", "dead")
    wait_state(cluster, namespace, "job-done", "succeeded")
    apply(cluster, namespace, handler("fails"))  # the bug is fixed: attempts succeed from now on
    cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", "job-dead", "--type=merge", "-p",
                    '{"spec":{"retryToken":"first"}}')
    # After retry the attempt counter restarts (attempt 1 again); the sequence number, which names the pod, does
    # not (2).
    final = wait_state(cluster, namespace, "job-dead", "succeeded", timeout=30)
    assert final["attempt"] == 1 and final["sequence"] == 2
    assert [a["pod"] for a in final["attempts"]] == ["job-dead-1", "job-dead-2"]
    assert [a["attempt"] for a in final["attempts"]] == [1, 1]
    refused = cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", "job-done", "--type=merge", "-p",
                              '{"spec":{"retryToken":"again"}}', check=False)
    assert refused.returncode != 0
    assert "only failed or dead jobs can be retried" in refused.stderr
    assert status(cluster, namespace, "job-done")["state"] == "succeeded"


def test_retry_from_failed(cluster, namespace, operator):
    slow_backoff = {"policy": "fixed", "initial": "1h"}
    apply(cluster, namespace, queue("q", maxAttempts=3, backoff=slow_backoff),
          handler("h", annotations=exit_on_attempt(1, 3)), job("job-waiting-retry"))
    failed = wait_state(cluster, namespace, "job-waiting-retry", "failed")
    assert failed["nextAttemptAt"]
    apply(cluster, namespace, handler("h"))  # the bug is fixed: no need to wait an hour for the next attempt
    cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", "job-waiting-retry", "--type=merge", "-p",
                    '{"spec":{"retryToken":"now"}}')
    final = wait_state(cluster, namespace, "job-waiting-retry", "succeeded", timeout=30)
    assert final["sequence"] == 2 and final["attempt"] == 1


def test_missing_queue_and_handler_block_until_created(cluster, namespace, operator):
    apply(cluster, namespace, job("job-early", queue_name="later-q", handler_name="later-h"))

    def blocked_by(reason: str) -> bool:
        conds = {c["type"]: c for c in status(cluster, namespace, "job-early").get("conditions", [])}
        return conds.get("Blocked", {}).get("status") == "True" and conds["Blocked"]["reason"] == reason

    wait_for(lambda: blocked_by("QueueNotFound"), 15, message="Blocked QueueNotFound")
    assert "later-q" in {c["type"]: c for c in status(cluster, namespace, "job-early")["conditions"]}["Blocked"]["message"]
    assert status(cluster, namespace, "job-early")["state"] == "queued"
    apply(cluster, namespace, queue("later-q"))
    wait_for(lambda: blocked_by("HandlerNotFound"), 15, message="Blocked HandlerNotFound")
    apply(cluster, namespace, handler("later-h"))
    final = wait_state(cluster, namespace, "job-early", "succeeded", timeout=30)
    assert {c["type"]: c["status"] for c in final["conditions"]}["Blocked"] == "False"


def test_pod_deleted_by_hand_is_pod_lost_and_retried(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", maxAttempts=3, **FAST), handler("h", annotations={**FOREVER}), job("job-lost"))
    wait_state(cluster, namespace, "job-lost", "running")
    wait_for(lambda: get_json(cluster, namespace, "pods")["items"], 15, message="the pod to exist")
    cluster.kubectl("delete", "-n", namespace, "pod", "job-lost-1", "--grace-period=0", "--force")

    def retried() -> bool:
        st = status(cluster, namespace, "job-lost")
        return st.get("state") == "running" and st.get("sequence") == 2

    wait_for(retried, 30, message="a second attempt")
    assert timeline_of(status(cluster, namespace, "job-lost"))[0] == ("failed", "PodLost")


def test_an_in_flight_job_of_the_previous_version_goes_on_with_its_next_pod(cluster, namespace, operator):
    """The previous version called the sequence number `run` (status.run, attempts[].run, the pod label
    sextant.dev/run). It had the job running on its third pod when this version took over: that pod is still the
    attempt, and the retry after it fails is <job>-4, never <job>-1."""
    operator.stop()  # the previous version's operator, gone; what it wrote is written below with the raw API
    apply(cluster, namespace, queue("q", maxAttempts=5, **FAST), handler("h", annotations=exit_on_attempt(3, 1)),
          job("job-old"))
    uid = get_json(cluster, namespace, "jobs.sextant.dev", "job-old")["metadata"]["uid"]
    now = datetime.now(timezone.utc)

    def stamp(seconds_ago: float) -> str:
        return (now - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")

    failed = [{"attempt": a, "run": a, "pod": f"job-old-{a}", "node": "kwok-node-0", "result": "failed", "exitCode": 1,
               "reason": "Error", "startedAt": stamp(60 - 20 * a), "finishedAt": stamp(55 - 20 * a)} for a in (1, 2)]
    old_status = {"state": "running", "attempt": 3, "run": 3, "maxAttempts": 5, "queuedAt": stamp(60),
                  "timeoutAt": stamp(-300), "observedGeneration": 1,
                  "attempts": [*failed, {"attempt": 3, "run": 3, "pod": "job-old-3", "result": "running",
                                         "startedAt": stamp(1)}]}
    cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", "job-old", "--subresource=status",
                    "--type=merge", "-p", json.dumps({"status": old_status}))
    assert status(cluster, namespace, "job-old")["run"] == 3, "the CRD keeps the old field (not pruned)"
    ref = {"namespace": namespace, "job": "job-old", "uid": uid, "run": 3, "attempt": 3, "pod": "job-old-3",
           "leaseDuration": "30s", "cancelGrace": "10s"}
    old_pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "job-old-3", "namespace": namespace,
                     "labels": {"sextant.dev/job": "job-old", "sextant.dev/queue": "q", "sextant.dev/handler": "h",
                                "sextant.dev/attempt": "3", "sextant.dev/run": "3"},
                     "annotations": exit_on_attempt(3, 1),
                     "ownerReferences": [{"apiVersion": "sextant.dev/v1alpha1", "kind": "Job", "name": "job-old",
                                          "uid": uid, "controller": True}]},
        "spec": {"restartPolicy": "Never", "tolerations": [KWOK_TOLERATION], "nodeSelector": {"type": "kwok"},
                 "containers": [{"name": "handler", "image": "registry.example/handler:1", "command": ["run"],
                                 "env": [{"name": "SEXTANT_ATTEMPT_REF", "value": json.dumps(ref)}]}]},
    }
    with PodRecorder(cluster.kubeconfig, namespace) as pods:
        cluster.kubectl("create", "-f", "-", input=json.dumps(old_pod))
        operator.start()  # this version takes over
        wait_state(cluster, namespace, "job-old", "succeeded", "dead", timeout=60)
    final = status(cluster, namespace, "job-old")  # as stored now (wait_state merges every status it saw)
    assert final["state"] == "succeeded", final
    assert (final["sequence"], final["attempt"]) == (4, 4) and "run" not in final, "only `sequence` is written"
    assert [(a["sequence"], a["pod"], a["result"]) for a in final["attempts"]] == [
        (1, "job-old-1", "failed"), (2, "job-old-2", "failed"), (3, "job-old-3", "failed"),
        (4, "job-old-4", "succeeded")]
    assert pods.pods_created()["job-old"] == {"job-old-3", "job-old-4"}
    labels = get_json(cluster, namespace, "pod", "job-old-4")["metadata"]["labels"]
    assert (labels["sextant.dev/sequence"], labels["sextant.dev/attempt"]) == ("4", "4")


def test_changing_the_payload_is_rejected(cluster, namespace, operator):
    apply(cluster, namespace, queue("q"), handler("h"), job("job-fixed", payload={"a": 1}))
    result = cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", "job-fixed", "--type=merge", "-p",
                             '{"spec":{"payload":{"a":2}}}', check=False)
    assert result.returncode != 0 and "payload is immutable" in result.stderr
    assert get_json(cluster, namespace, "jobs.sextant.dev", "job-fixed")["spec"]["payload"] == {"a": 1}


def test_priority_order_within_a_queue(cluster, namespace, operator):
    # The handler appears last, so every job is waiting when admission starts.
    jobs_ = [job(f"job-p{prio}-{i}", priority=prio) for i, prio in enumerate([0, 5, 1, 5, 0, 9])]
    with PodRecorder(cluster.kubeconfig, namespace) as pods:
        apply(cluster, namespace, queue("q", concurrency=1, **FAST), *jobs_)
        wait_for(lambda: all(status(cluster, namespace, j["metadata"]["name"]).get("state") == "queued"
                             for j in jobs_), 20, message="all jobs queued")
        apply(cluster, namespace, handler("h"))
        wait_all(cluster, namespace, len(jobs_), {"succeeded"}, 60)
    assert pods.creation_order() == ["job-p9-5", "job-p5-1", "job-p5-3", "job-p1-2", "job-p0-0", "job-p0-4"]


def test_concurrency_limit_and_fifo(cluster, namespace, operator):
    names = [f"job-c{i:03d}" for i in range(50)]
    with PodRecorder(cluster.kubeconfig, namespace) as pods:
        apply(cluster, namespace, queue("q", concurrency=3, **FAST),
              handler("h", annotations={"sextant.dev/test-duration": "300ms"}))
        for batch in range(0, 50, 10):  # created in order, over several seconds
            apply(cluster, namespace, *(job(n) for n in names[batch:batch + 10]))
        final = wait_all(cluster, namespace, 50, {"succeeded", "dead"}, 120)
    assert {j["status"]["state"] for j in final.values()} == {"succeeded"}
    assert pods.max_unfinished("q") <= 3
    assert pods.max_unfinished("q") == 3, "the queue was used to its limit"
    order = pods.creation_order()
    assert sorted(order) == names
    # FIFO: jobs admitted in one round (up to 3 slots at once) may start in any order among themselves, but
    # none starts before a job created 3 places earlier.
    assert all(order.index(names[i]) < order.index(names[i + 3]) for i in range(len(names) - 3)), order


def test_500_jobs_one_pod_per_attempt_none_left_behind(cluster, namespace, operator):
    names = [f"job-m{i:04d}" for i in range(500)]
    with PodRecorder(cluster.kubeconfig, namespace) as pods:
        apply(cluster, namespace, queue("q", concurrency=100, **FAST), handler("h"))
        started = datetime.now(timezone.utc)
        for batch in range(0, 500, 100):
            apply(cluster, namespace, *(job(n) for n in names[batch:batch + 100]))
        final = wait_all(cluster, namespace, 500, {"succeeded", "dead"}, 300)
        elapsed = (datetime.now(timezone.utc) - started).total_seconds()
    print(f"\n500 jobs terminal in {elapsed:.1f}s ({500 / elapsed:.0f} jobs/s, including kubectl apply)")
    assert {j["status"]["state"] for j in final.values()} == {"succeeded"}
    created = pods.pods_created()
    assert all(len(created[n]) == 1 for n in names)
    assert all(len(final[n]["status"]["attempts"]) == 1 for n in names)
    assert pods.max_alive_per_job() == 1
    cluster.kubectl("delete", "-n", namespace, "jobs.sextant.dev", "--all", "--wait=false")
    wait_for(lambda: not get_json(cluster, namespace, "pods")["items"], 120, interval=1,
             message="pods to be garbage-collected with their jobs")


def test_kill_the_operator_repeatedly_loses_nothing(cluster, namespace, operator):
    names = [f"job-k{i:03d}" for i in range(300)]
    flaky = [n for i, n in enumerate(names) if i % 4 == 0]  # their first attempt fails
    with PodRecorder(cluster.kubeconfig, namespace) as pods:
        apply(cluster, namespace, queue("q", concurrency=20, maxAttempts=3, **FAST), handler("h"),
              handler("flaky", annotations=exit_on_attempt(1, 1)))
        for batch in range(0, 300, 50):
            apply(cluster, namespace, *(job(n, handler_name="flaky" if n in flaky else "h")
                                        for n in names[batch:batch + 50]))
            operator.kill()
            operator.start()
        for _ in range(3):  # and while it works through them
            seen = len(pods.records)
            wait_for(lambda: len(pods.records) >= seen + 40, 60, message="progress between kills")
            operator.kill()
            operator.start()
        final = wait_all(cluster, namespace, 300, {"succeeded", "dead", "cancelled"}, 300)
    assert operator.starts >= 9
    assert {j["status"]["state"] for j in final.values()} == {"succeeded"}
    created = pods.pods_created()
    for name in names:
        expected = [("failed", "Error"), ("succeeded", None)] if name in flaky else [("succeeded", None)]
        assert timeline_of(final[name]["status"]) == expected, name
        assert len(created[name]) == len(expected), (name, created[name])
    assert pods.max_alive_per_job() == 1


def test_a_kubectl_applied_job_reusing_a_claimed_key_does_not_run(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", **FAST), handler("h"), job("job-first", idempotencyKey="receipt-42"))
    wait_state(cluster, namespace, "job-first", "succeeded")
    apply(cluster, namespace, job("job-copy", idempotencyKey="receipt-42"))
    final = wait_state(cluster, namespace, "job-copy", "cancelled")
    assert final["duplicateOf"] == "job-first" and final["attempts"] == []
    assert "job-first" in final["message"]
    assert not any(p["metadata"]["name"].startswith("job-copy") for p in get_json(cluster, namespace, "pods")["items"])
