"""Ownership, not labels; disruptions are not handler errors (issue 16), on the real control plane.

- Pods someone else labels as a job's next run (sextant.dev/job, sextant.dev/sequence) are never adopted nor deleted,
  and a pod squatting on an attempt's name is waited out, never taken over.
- A Lease written by another job's service account, labelled as an attempt's, neither prolongs nor fails it.
- A node deleted under a running attempt, and an eviction: the attempt is PodLost, the next one runs.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from tests.harness import holds_for, wait_for

from .support import KWOK_TOLERATION, apply, get_json, handler, job, queue, status, timeline_of, wait_events, wait_state
from .test_runner import local_handler, sh

FOREVER = {"sextant.dev/test-outcome": "run-forever"}
FAST = {"backoff": {"policy": "fixed", "initial": "200ms"}}
RUNNER_SA = "job-runner"


def later(hours: float = 1) -> str:
    return (datetime.now(timezone.utc) + timedelta(hours=hours)).replace(microsecond=0).isoformat().replace(
        "+00:00", "Z")


def micro(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def uid_of(cluster, namespace: str, *what: str) -> str:
    return get_json(cluster, namespace, *what)["metadata"]["uid"]


def foreign_pod(name: str, job_name: str, sequence: int, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    """Someone else's pod on a kwok node, running for ever, carrying the labels of a job's attempt."""
    meta: dict[str, Any] = {"name": name, "annotations": dict(FOREVER),
                            "labels": {"sextant.dev/job": job_name, "sextant.dev/sequence": str(sequence),
                                       "sextant.dev/attempt": "1", "sextant.dev/queue": "q", "sextant.dev/handler": "h"}}
    if owner:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"restartPolicy": "Never", "tolerations": [KWOK_TOLERATION], "nodeSelector": {"type": "kwok"},
                     "containers": [{"name": "main", "image": "registry.example/other:1"}]}}


def pod_state(cluster, namespace: str, name: str) -> dict[str, Any] | None:
    found = json.loads(cluster.kubectl("get", "pod", "-n", namespace, name, "-o", "json", "--ignore-not-found").stdout
                       or "null")
    return found


def untouched(cluster, namespace: str, names: list[str]) -> bool:
    """Each pod exists, is not being deleted, and still has exactly the owners it was created with."""
    for name in names:
        pod = pod_state(cluster, namespace, name)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return False
    return True


def test_foreign_pods_labelled_as_a_jobs_next_run_are_never_adopted_nor_deleted(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", concurrency=1, cancelGrace="1s", **FAST), handler("h"),
          handler("forever", annotations=FOREVER), job("job-blocker", handler_name="forever"))
    wait_state(cluster, namespace, "job-blocker", "running")  # holds the queue's one slot
    apply(cluster, namespace, job("job-waiting"), job("job-later", runAt=later()))
    wait_state(cluster, namespace, "job-waiting", "queued")
    wait_state(cluster, namespace, "job-later", "scheduled")
    cluster.kubectl("create", "configmap", "-n", namespace, "someone-elses")
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "name": "someone-elses", "controller": True,
                 "uid": uid_of(cluster, namespace, "configmap", "someone-elses")}
    other_job = {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job", "name": "job-blocker", "controller": True,
                 "uid": uid_of(cluster, namespace, "jobs.sextant.dev", "job-blocker")}
    foreign = [
        foreign_pod("impostor-next", "job-waiting", 1),  # the queued job's next run: no owner at all
        foreign_pod("job-later-1", "job-later", 1, configmap),  # the attempt's very name, owned by something else
        foreign_pod("impostor-stray", "job-later", 2, other_job),  # controlled by another Job
    ]
    apply(cluster, namespace, *foreign)
    names = [p["metadata"]["name"] for p in foreign]
    wait_for(lambda: all((pod_state(cluster, namespace, n) or {}).get("status", {}).get("phase") == "Running"
                         for n in names), 30, message="the foreign pods to run")

    def unaffected() -> bool:
        waiting, scheduled = status(cluster, namespace, "job-waiting"), status(cluster, namespace, "job-later")
        return (waiting.get("state") == "queued" and not waiting.get("attempts")
                and scheduled.get("state") == "scheduled" and not scheduled.get("attempts")
                and untouched(cluster, namespace, names))

    holds_for(unaffected, 6, interval=0.5, message="the jobs unaffected by the foreign pods (not adopted, not deleted)")
    # The slot frees: the queued job runs its own pod, and still leaves the foreign ones alone.
    cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", "job-blocker", "--type=merge", "-p",
                    '{"spec":{"cancel":true}}')
    final = wait_state(cluster, namespace, "job-waiting", "succeeded", timeout=60)
    assert [(a["pod"], a["result"]) for a in final["attempts"]] == [("job-waiting-1", "succeeded")]
    own = get_json(cluster, namespace, "pod", "job-waiting-1")["metadata"]["ownerReferences"]
    assert [(o["kind"], o["uid"], o.get("controller")) for o in own] == [
        ("Job", uid_of(cluster, namespace, "jobs.sextant.dev", "job-waiting"), True)]
    assert untouched(cluster, namespace, names)
    assert status(cluster, namespace, "job-later")["state"] == "scheduled"


def test_a_pod_squatting_on_an_attempts_name_is_waited_out_never_taken_over(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", **FAST), handler("h"))
    apply(cluster, namespace, foreign_pod("job-squat-1", "job-squat", 1))
    wait_for(lambda: (pod_state(cluster, namespace, "job-squat-1") or {}).get("status", {}).get("phase") == "Running",
             30, message="the squatter to run")
    apply(cluster, namespace, job("job-squat"))

    def refused() -> list[dict]:
        events = get_json(cluster, namespace, "events", "--field-selector", "involvedObject.name=job-squat")["items"]
        return [e for e in events if e["reason"] == "PodNameTaken"]

    [event] = wait_for(refused, 30, message="a PodNameTaken Event on the job")[:1]
    assert event["type"] == "Warning" and "job-squat-1" in event["message"]
    holds_for(lambda: status(cluster, namespace, "job-squat").get("state") == "queued"
              and "exists but is not this job's" in status(cluster, namespace, "job-squat").get("message", "")
              and untouched(cluster, namespace, ["job-squat-1"]), 3, interval=0.5,
              message=lambda: f"the job to wait ({status(cluster, namespace, 'job-squat')}), the squatter to stay "
                              f"({pod_state(cluster, namespace, 'job-squat-1')})")
    cluster.kubectl("delete", "pod", "-n", namespace, "job-squat-1", "--grace-period=1")
    final = wait_state(cluster, namespace, "job-squat", "succeeded", timeout=60)
    assert timeline_of(final) == [("succeeded", None)] and final["attempts"][0]["pod"] == "job-squat-1"
    owner = get_json(cluster, namespace, "pod", "job-squat-1")["metadata"]["ownerReferences"][0]
    assert owner["uid"] == uid_of(cluster, namespace, "jobs.sextant.dev", "job-squat")


# ---------------------------------------------------------------------------------------------------- leases
def runner_account(cluster, namespace: str) -> str:
    """A service account with what the chart gives job pods (their Lease, chained jobs): the one another job's pod
    would write with. Returns kubectl's --as value."""
    cluster.kubectl("create", "serviceaccount", "-n", namespace, RUNNER_SA)
    cluster.kubectl("create", "role", "-n", namespace, RUNNER_SA, "--verb=create,get,patch",
                    "--resource=leases.coordination.k8s.io")
    cluster.kubectl("create", "rolebinding", "-n", namespace, RUNNER_SA, f"--role={RUNNER_SA}",
                    f"--serviceaccount={namespace}:{RUNNER_SA}")
    return f"--as=system:serviceaccount:{namespace}:{RUNNER_SA}"


def other_lease(name: str, job_name: str, sequence: int, renewed: datetime, owner_uid: str,
                owner_name: str = "job-other-1") -> dict[str, Any]:
    """A Lease another job's runner could write, labelled as `job_name`'s attempt `run`, owned by its pod (an
    existing one: the garbage collector deletes a Lease whose owner is gone)."""
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "labels": {"sextant.dev/job": job_name, "sextant.dev/sequence": str(sequence)},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": owner_name,
                                              "uid": owner_uid, "controller": True}]},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 3600, "renewTime": micro(renewed)}}


@contextmanager
def keep_writing(cluster, namespace: str, as_flag: str, leases: list[dict[str, Any]],
                 renewed: Any) -> Iterator[list[int]]:
    """Write the Leases as the runner's service account, again and again (renewTime from renewed(n)), until the
    block ends; yields the list of writes made."""
    writes: list[int] = []
    stop = threading.Event()

    def loop() -> None:
        n = 0
        while not stop.is_set():
            for lease in leases:
                lease["spec"]["renewTime"] = micro(renewed(n))
                cluster.kubectl("apply", "-n", namespace, as_flag, "--server-side", "--force-conflicts",
                                "--field-manager=other-job", "-f", "-", input=json.dumps(lease), check=False)
            writes.append(n)
            n += 1
            stop.wait(0.3)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield writes
    finally:
        stop.set()
        thread.join(30)


def test_a_lease_written_by_another_jobs_account_cannot_prolong_an_attempt(cluster, namespace, operator):
    """A hung attempt (a kwok pod: no runner renews its Lease) expires after leaseDuration although Leases labelled
    as its own, one even with its name and holder, are renewed with renewTimes in the future all along."""
    as_runner = runner_account(cluster, namespace)
    apply(cluster, namespace, queue("q", maxAttempts=1, leaseDuration="3s", timeout="10m"),
          handler("h", annotations=FOREVER), handler("no-lease", annotations=FOREVER, heartbeat=False),
          job("job-other", handler_name="no-lease"))  # the other job's pod lives on: it owns the Leases written
    wait_state(cluster, namespace, "job-other", "running")
    other_pod_uid = uid_of(cluster, namespace, "pod", "job-other-1")
    ahead = lambda n: datetime.now(timezone.utc) + timedelta(hours=1)  # noqa: E731
    leases = [other_lease("job-hung-1", "job-hung", 1, ahead(0), other_pod_uid),  # the attempt's name and holder
              other_lease("job-other-lease", "job-hung", 1, ahead(0), other_pod_uid)]
    with keep_writing(cluster, namespace, as_runner, leases, ahead) as writes:
        wait_for(lambda: len(writes) >= 2, 30, message="the other job's Leases to be written")
        assert get_json(cluster, namespace, "lease", "job-hung-1")["spec"]["holderIdentity"] == "job-hung-1"
        apply(cluster, namespace, job("job-hung"))  # its attempt starts with those Leases already there
        final = wait_state(cluster, namespace, "job-hung", "dead", timeout=90)
    assert timeline_of(final) == [("failed", "LeaseExpired")]
    attempt = final["attempts"][0]
    took = datetime.fromisoformat(attempt["finishedAt"].replace("Z", "+00:00")) - datetime.fromisoformat(
        attempt["startedAt"].replace("Z", "+00:00"))
    assert took < timedelta(minutes=2), "expired after its leaseDuration, long before its 10 min timeout"
    assert {lease["metadata"]["name"] for lease in get_json(cluster, namespace, "leases")["items"]} >= {
        "job-hung-1", "job-other-lease"}, "the other job's Leases were there all along"


def test_a_lease_written_by_another_jobs_account_cannot_fail_an_attempt(cluster, namespace, operator, local_node):
    """A live attempt (the real runner renews its Lease every 1 s) survives a stream of stale Leases labelled as
    its own (before, each one moved its last renewal back to 2000 and expired it at once), and a Lease another
    job's account put in its name beforehand (the runner takes it over: holder, owner)."""
    as_runner = runner_account(cluster, namespace)
    apply(cluster, namespace, foreign_pod("intruder", "nobody", 1))
    intruder = uid_of(cluster, namespace, "pod", "intruder")
    squatted = other_lease("job-alive-1", "job-alive", 1, datetime(2000, 1, 1, tzinfo=timezone.utc), intruder,
                           "intruder")
    squatted["spec"]["holderIdentity"] = "intruder"
    cluster.kubectl("create", "-n", namespace, as_runner, "-f", "-", input=json.dumps(squatted))
    assert get_json(cluster, namespace, "lease", "job-alive-1")["spec"]["holderIdentity"] == "intruder"
    apply(cluster, namespace, queue("q", maxAttempts=1, leaseDuration="3s"),
          local_handler("h", sh("cat >/dev/null; sleep 8")), job("job-alive"))
    wait_for(lambda: get_json(cluster, namespace, "lease", "job-alive-1")["spec"]["holderIdentity"] == "job-alive-1",
             90, message="the runner to take its Lease over")
    stale = lambda n: datetime(2000, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=n)  # noqa: E731
    leases = [other_lease("job-intruder-1", "job-alive", 1, stale(0), intruder, "intruder")]
    with keep_writing(cluster, namespace, as_runner, leases, stale) as writes:
        final = wait_state(cluster, namespace, "job-alive", "succeeded", "failed", "dead", timeout=90)
    assert timeline_of(final) == [("succeeded", None)]
    assert len(writes) >= 5, "the stale Lease was written again and again while the attempt ran"
    own = get_json(cluster, namespace, "lease", "job-alive-1")
    assert own["spec"]["holderIdentity"] == "job-alive-1"
    [owner] = own["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Pod", "job-alive-1")
    assert owner["uid"] == uid_of(cluster, namespace, "pod", "job-alive-1")


# ------------------------------------------------------------------------------------------------ disruptions
def kwok_node(name: str, pool: str) -> dict[str, Any]:
    """A node kwok simulates (it manages nodes with this annotation), in a pool of its own."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": name, "sextant.dev/test-pool": pool}},
            "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]}}


def node_ready(cluster, name: str) -> bool:
    node = json.loads(cluster.kubectl("get", "node", name, "-o", "json").stdout)
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])
    return ready and not [t for t in node["spec"].get("taints") or [] if t["key"] != "kwok.x-k8s.io/node"]


@contextmanager
def nodes(cluster, *names: str, pool: str) -> Iterator[None]:
    try:
        for name in names:
            cluster.kubectl("create", "-f", "-", input=json.dumps(kwok_node(name, pool)))
        for name in names:
            wait_for(lambda: node_ready(cluster, name), 60, message=f"node {name} Ready and schedulable")
        yield
    finally:
        for name in names:
            cluster.kubectl("delete", "node", name, "--ignore-not-found", "--wait=false", check=False)


def pool_handler(pool: str) -> dict[str, Any]:
    spec = handler("h", annotations=FOREVER, heartbeat=False)  # no runner on kwok: only the node's fate counts
    spec["spec"]["template"]["spec"]["nodeSelector"] = {"sextant.dev/test-pool": pool}
    return spec


def test_a_pod_the_api_server_refuses_is_named_on_the_job_which_runs_once_its_handler_is_fixed(
        cluster, namespace, operator):
    broken = handler("h")
    broken["spec"]["template"]["spec"]["nodeSelector"]["zone"] = 3  # the CRD keeps the pod spec open; a Pod refuses it
    apply(cluster, namespace, queue("q", **FAST), broken, job("job-refused"))

    def refused() -> dict | None:
        st = status(cluster, namespace, "job-refused")
        return st if "cannot create pod job-refused-1" in st.get("message", "") else None

    st = wait_for(refused, 30,
                  message=lambda: f"the refusal in the job's status: {status(cluster, namespace, 'job-refused')}")
    assert st["state"] == "queued" and st["message"].endswith("; trying again") and "nodeSelector" in st["message"]
    assert [c["message"] for c in st["conditions"] if c["type"] == "Reconciling"] == [st["message"]]
    wait_events(cluster, namespace, "--field-selector", "involvedObject.name=job-refused",
                until=lambda events: any(e["reason"] == "PodCreateFailed" and e["type"] == "Warning" for e in events),
                what="a Warning Event PodCreateFailed on the job")
    apply(cluster, namespace, handler("h"))  # fixed: the next try creates the pod
    final = wait_state(cluster, namespace, "job-refused", "succeeded", timeout=60)
    assert [a["pod"] for a in final["attempts"]] == ["job-refused-1"]


def test_a_node_deleted_under_a_running_attempt_loses_the_attempt_and_the_next_one_runs(cluster, namespace, operator):
    pool = namespace[-6:]
    first, second = f"doomed-{pool}", f"spare-{pool}"
    with nodes(cluster, first, pool=pool):
        apply(cluster, namespace, queue("q", maxAttempts=3, **FAST), handler("h"), pool_handler(pool), job("job-a"))
        wait_state(cluster, namespace, "job-a", "running")
        wait_for(lambda: get_json(cluster, namespace, "pod", "job-a-1")["status"].get("phase") == "Running", 30,
                 message="the first attempt's pod to run")
        assert get_json(cluster, namespace, "pod", "job-a-1")["spec"]["nodeName"] == first
        cluster.kubectl("delete", "node", first)
        deleted = time.monotonic()
        # PodGC finds the orphan within its period (20 s) plus quarantine (40 s): DisruptionTarget, Failed, deleted.
        with nodes(cluster, second, pool=pool):

            def second_attempt_runs() -> bool:
                st = status(cluster, namespace, "job-a")
                return len(st.get("attempts", [])) == 2 and st["state"] == "running"

            wait_for(second_attempt_runs, 180, interval=1,
                     message=lambda: f"the second attempt to run; status {status(cluster, namespace, 'job-a')}")
    st = status(cluster, namespace, "job-a")
    lost, current = st["attempts"]
    assert (lost["result"], lost["reason"], lost.get("node")) == ("failed", "PodLost", first), lost
    # Even when the reconcile sees only the deletion (PodGC deletes at once), the pod's last state says why.
    assert lost["message"].startswith("DeletionByPodGC: "), lost
    assert lost.get("exitCode") is None
    assert current["pod"] == "job-a-2" and get_json(cluster, namespace, "pod", "job-a-2")["spec"]["nodeName"] == second
    assert time.monotonic() - deleted > 5


def test_an_evicted_attempt_is_lost_with_the_disruption_in_its_message(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", maxAttempts=3, cancelGrace="2s", **FAST),
          handler("h", annotations=FOREVER, nonRetryableExitCodes=[137], heartbeat=False), job("job-evicted"))
    wait_for(lambda: get_json(cluster, namespace, "pod", "job-evicted-1")["status"].get("phase") == "Running", 60,
             message="the first attempt's pod to run")
    api = k8s_client.CoreV1Api(k8s_config.new_client_from_config(str(cluster.kubeconfig)))
    api.create_namespaced_pod_eviction("job-evicted-1", namespace, k8s_client.V1Eviction(
        metadata=k8s_client.V1ObjectMeta(name="job-evicted-1", namespace=namespace)))

    def lost() -> dict | None:
        attempts = status(cluster, namespace, "job-evicted").get("attempts", [])
        return attempts[0] if attempts and attempts[0]["result"] != "running" else None

    first = wait_for(lost, 60, message="the evicted attempt to end")
    # Killed after its grace period with 137, which nonRetryableExitCodes lists: still a lost attempt, retried.
    assert (first["reason"], first.get("exitCode")) == ("PodLost", 137), first
    assert first["message"].startswith("EvictionByEvictionAPI: "), first
    wait_for(lambda: len(status(cluster, namespace, "job-evicted").get("attempts", [])) == 2, 60,
             message="the next attempt to start")
    assert status(cluster, namespace, "job-evicted")["state"] in ("running", "queued")
