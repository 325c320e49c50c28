"""A worker's token after worker protocol v2 (docs/workers.md, "Permissions"), against the real API server with the
chart installed: the worker admission policy holds a token bound to a pod (as every token the kubelet mounts is) to
the Worker named after that pod, and RBAC refuses it every Job's status and every Lease. The tokens are real
service-account tokens made by TokenRequest with a boundObjectRef to a real pod (`kubectl create token
--bound-object-kind=Pod`), so the API server itself puts the pod's name in the user's extra."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.harness import Cluster, namespace_name, wait_for

from .support import apply, job
from .test_helm import CHART, ON_KWOK, AsToken, Helm, can_i, tools  # noqa: F401 - tools: the fixture

RELEASE = "sxwadm"
WORKERS = "/apis/sextant.dev/v1alpha1/namespaces/{ns}/workers"
JSON_PATCH = {"Content-Type": "application/json-patch+json"}


def worker_body(name: str, incarnation: str = "a1") -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Worker",
            "metadata": {"name": name, "labels": {"sextant.dev/worker": name}},
            "spec": {"incarnation": incarnation, "queues": ["q"], "slots": 4, "leaseDurationSeconds": 15}}


def renewal(incarnation: str, slots: int) -> list[dict[str, Any]]:
    """A worker's spec write as the protocol makes it: one JSON patch, its incarnation tested."""
    return [{"op": "test", "path": "/spec/incarnation", "value": incarnation},
            {"op": "replace", "path": "/spec", "value": {"incarnation": incarnation, "queues": ["q"], "slots": slots,
                                                        "leaseDurationSeconds": 15}}]


def refused_by_policy(response: httpx.Response, words: str) -> None:
    assert response.status_code == 403, f"{response.status_code}: {response.text}"
    text = response.json()["message"]
    assert f"ValidatingAdmissionPolicy '{RELEASE}-sextant-workers'" in text and words in text, text


def refused_by_rbac(response: httpx.Response) -> None:
    assert response.status_code == 403, f"{response.status_code}: {response.text}"
    text = response.json()["message"]
    assert "cannot" in text and "ValidatingAdmissionPolicy" not in text, text


@pytest.fixture(scope="module")
def release(cluster: Cluster, tools, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:  # noqa: F811
    """The chart with one worker Deployment (its pod on kwok: admitted and scheduled, no process runs), in a
    namespace of its own that the release's operator watches."""
    home = cluster.create_namespace(namespace_name("wadm"))
    helm = Helm(tools, tmp_path_factory.mktemp("helm"), cluster.kubeconfig)
    values = {**ON_KWOK, "replicas": 1, "terminationGracePeriodSeconds": 1, "leaderElection": {"enabled": False},
              "runner": {"rbac": {"create": False}},
              "workers": [{"name": "w", **ON_KWOK, "replicas": 2, "drainGrace": "1s",
                           "terminationGracePeriodSeconds": 2}]}
    helm("install", RELEASE, str(CHART), "--namespace", home, values=values)

    def pods(selector: str) -> list[str]:
        out = cluster.kubectl("get", "pods", "-n", home, "-l", f"{selector},app.kubernetes.io/instance={RELEASE}",
                              "-o", "json").stdout
        return sorted(p["metadata"]["name"] for p in json.loads(out)["items"])

    workers = wait_for(lambda: len(pods("sextant.dev/worker-deployment=w")) == 2
                       and pods("sextant.dev/worker-deployment=w"), 30, message="the worker's two pods")
    (operator_pod,) = wait_for(lambda: pods("app.kubernetes.io/name=sextant"), 30, message="the operator's pod")
    try:
        yield {"namespace": home, "pod": workers[0], "other_pod": workers[1], "operator_pod": operator_pod,
               "worker_sa": f"{RELEASE}-sextant-worker-w", "operator_sa": f"{RELEASE}-sextant"}
    finally:
        helm("uninstall", RELEASE, "--namespace", home, check=False)
        cluster.delete_namespace(home)


def token(cluster: Cluster, namespace: str, account: str, pod: str | None = None) -> AsToken:
    bound = ["--bound-object-kind=Pod", f"--bound-object-name={pod}"] if pod else []
    return AsToken(cluster, cluster.kubectl("create", "token", account, "-n", namespace, *bound).stdout.strip())


def test_a_worker_pods_token_writes_only_the_worker_named_after_its_pod(cluster, release):
    ns, pod, other = release["namespace"], release["pod"], release["other_pod"]
    workers = WORKERS.format(ns=ns)
    worker = token(cluster, ns, release["worker_sa"], pod).http
    user = f"system:serviceaccount:{ns}:{release['worker_sa']}"
    # The other replica's Worker, as that replica registered it (here by the admin).
    apply(cluster, ns, worker_body(other, "b1"))
    wait_for(lambda: worker.post(workers, json=worker_body("probe"), params={"dryRun": "All"}).status_code == 403,
             30, message="the worker admission policy to be in force")

    # Its own Worker, through its whole life: created, renewed by JSON patch (incarnation tested), deleted.
    created = worker.post(workers, json=worker_body(pod))
    assert created.status_code == 201, created.text
    renewed = worker.patch(f"{workers}/{pod}", content=json.dumps(renewal("a1", 8)), headers=JSON_PATCH)
    assert renewed.status_code == 200 and renewed.json()["spec"]["slots"] == 8, renewed.text
    assert renewed.json()["metadata"]["generation"] == 2  # each renewal a new generation, the operator's signal
    # Another process under its name (a new incarnation) makes its `test` fail: 422, read as "taken over".
    taken = worker.patch(f"{workers}/{pod}", content=json.dumps(renewal("zz", 8)), headers=JSON_PATCH)
    assert taken.status_code == 422, taken.text

    # Any other Worker: refused, whatever the write.
    words = f"{user}'s token is bound to pod {ns}/{pod}: it may write only the Worker of that pod, {ns}/{pod}, not"
    refused_by_policy(worker.post(workers, json=worker_body("forged")), f"{words} {ns}/forged")
    refused_by_policy(worker.patch(f"{workers}/{other}", content=json.dumps(renewal("b1", 4096)), headers=JSON_PATCH),
                      f"{words} {ns}/{other}")
    # (A PUT is not even RBAC's to allow: the protocol writes by patch, so the Role has no `update`.)
    refused_by_rbac(worker.put(f"{workers}/{other}", json={
        **worker.get(f"{workers}/{other}").json(), "spec": worker_body(other, "b1")["spec"] | {"slots": 4096}}))
    refused_by_policy(worker.delete(f"{workers}/{other}"), f"{words} {ns}/{other}")
    got = json.loads(cluster.kubectl("get", "workers.sextant.dev", "-n", ns, other, "-o", "json").stdout)
    assert got["spec"]["slots"] == 4 and got["metadata"]["generation"] == 1  # untouched

    # Its Worker's status is the operator's: no worker's Role may write it (RBAC, before any policy).
    refused_by_rbac(worker.patch(f"{workers}/{pod}/status", json={"status": {"slots": 4096}},
                                 headers={"Content-Type": "application/merge-patch+json"}))
    assert worker.delete(f"{workers}/{pod}").status_code == 200

    # The operator's account (its token bound to its own pod) is not restricted: it writes every Worker's status and
    # deletes expired ones.
    operator = token(cluster, ns, release["operator_sa"], release["operator_pod"]).http
    status = operator.patch(f"{workers}/{other}/status", json={"status": {"state": "expired", "slots": 4}},
                            headers={"Content-Type": "application/merge-patch+json"})
    assert status.status_code == 200 and status.json()["status"]["state"] == "expired", status.text
    assert operator.delete(f"{workers}/{other}").status_code == 200


def test_a_worker_pods_token_writes_no_jobs_status_and_no_lease(cluster, release):
    """The operator records every attempt: a worker (or handler code in it) cannot write `succeeded` on any job,
    take another's, reset its attempt, or touch a Lease (the leader's included)."""
    ns, pod = release["namespace"], release["pod"]
    worker = token(cluster, ns, release["worker_sa"], pod).http
    apply(cluster, ns, job("job-not-its-own"))
    path = f"/apis/sextant.dev/v1alpha1/namespaces/{ns}/jobs/job-not-its-own"
    current = worker.get(path)
    assert current.status_code == 200, current.text  # it may read jobs (an assignment's payload)
    forged = {**current.json(), "status": {"state": "succeeded", "attempt": 1}}
    refused_by_rbac(worker.put(f"{path}/status", json=forged))
    refused_by_rbac(worker.patch(f"{path}/status", json={"status": {"state": "succeeded"}},
                                 headers={"Content-Type": "application/merge-patch+json"}))
    refused_by_rbac(worker.patch(path, json={"spec": {"cancel": True}},
                                 headers={"Content-Type": "application/merge-patch+json"}))
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
    refused_by_rbac(worker.post(leases, json={"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                              "metadata": {"name": f"sextant-worker-{pod}"},
                                              "spec": {"holderIdentity": pod, "leaseDurationSeconds": 15}}))
    refused_by_rbac(worker.get(leases))
    events = f"/api/v1/namespaces/{ns}/events"
    refused_by_rbac(worker.post(events, json={"metadata": {"generateName": "x-"}, "involvedObject": {"name": "x"}}))
    assert cluster.kubectl("get", "sjob", "-n", ns, "job-not-its-own", "-o",
                           "jsonpath={.status.state}").stdout in ("", "queued")


def test_a_token_bound_to_no_pod_is_left_to_rbac(cluster, release):
    """Outside a pod (a laptop's kubeconfig, a token made by hand) the policy does not apply: the Worker names its
    user (spec.user) and RBAC alone decides; docs/workers.md says what that trusts."""
    ns = release["namespace"]
    workers = WORKERS.format(ns=ns)
    unbound = token(cluster, ns, release["worker_sa"]).http
    assert can_i(cluster, f"system:serviceaccount:{ns}:{release['worker_sa']}", "create", "workers.sextant.dev", ns)
    laptop = worker_body("laptop-1234")
    laptop["spec"]["user"] = f"system:serviceaccount:{ns}:{release['worker_sa']}"
    created = unbound.post(workers, json=laptop)
    assert created.status_code == 201, created.text
    assert unbound.delete(f"{workers}/laptop-1234").status_code == 200


def test_a_job_names_who_asked_for_it_only_as_the_api_server_authenticated_them(cluster, release):
    """The chart's job admission policy: sextant.dev/requested-by may name the requester itself, or be left out;
    naming anyone else (on a create, or by changing it later) is refused, so what `inspect` and the HTTP API show
    of it is a fact. Here with the worker's token (handler code chaining jobs), which may create jobs."""
    ns = release["namespace"]
    jobs = f"/apis/sextant.dev/v1alpha1/namespaces/{ns}/jobs"
    asker = token(cluster, ns, release["worker_sa"]).http
    me = f"system:serviceaccount:{ns}:{release['worker_sa']}"

    def body(name: str, requested_by: str | None) -> dict[str, Any]:
        made = job(name)
        if requested_by is not None:
            made["metadata"]["annotations"] = {"sextant.dev/requested-by": requested_by}
        return made

    def refused(response: httpx.Response, said: str) -> None:
        assert response.status_code == 403, f"{response.status_code}: {response.text}"
        text = response.json()["message"]
        assert f"ValidatingAdmissionPolicy '{RELEASE}-sextant-jobs'" in text, text
        assert (f"metadata.annotations[sextant.dev/requested-by] must name the requester itself, {me}, or be left "
                f"out; not {said}") in text, text

    wait_for(lambda: asker.post(jobs, json=body("job-probe", "root"), params={"dryRun": "All"}).status_code == 403,
             30, message="the job admission policy to be in force")
    refused(asker.post(jobs, json=body("job-forged", "system:admin")), "system:admin")
    assert asker.post(jobs, json=body("job-mine", me)).status_code == 201
    assert asker.post(jobs, json=body("job-unsaid", None)).status_code == 201
    # Changed later to anyone but the one who changes it (here the admin, with kubectl): refused; a change that
    # leaves it as it was passes.
    changed = cluster.kubectl("annotate", "--overwrite", "-n", ns, "jobs.sextant.dev/job-unsaid",
                              "sextant.dev/requested-by=alice", check=False)
    assert changed.returncode != 0 and "must name the requester itself" in changed.stderr, changed.stderr
    assert changed.stderr.rstrip().endswith("not alice"), changed.stderr
    cluster.kubectl("label", "-n", ns, "jobs.sextant.dev/job-mine", "team=a")
    shown = json.loads(cluster.kubectl("get", "jobs.sextant.dev", "-n", ns, "job-mine", "-o", "json").stdout)
    assert shown["metadata"]["annotations"]["sextant.dev/requested-by"] == me
