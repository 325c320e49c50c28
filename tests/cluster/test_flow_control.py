"""API Priority and Fairness for the operator and the workers (issue: a create flood must not starve the lifecycle):
the chart's PriorityLevelConfiguration and FlowSchemas, and `sextant dev`'s, are accepted by the real API server, and
the API server classifies the operator's and the workers' requests into them. It says so on every response: the
headers X-Kubernetes-PF-FlowSchema-UID and X-Kubernetes-PF-PriorityLevel-UID name the FlowSchema that matched and
the priority level that served the request, so each check makes a request with that identity's own credentials."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import yaml

from sextant.dev import flowcontrol
from sextant.kube import kubeconfig
from tests.harness import Cluster, namespace_name, wait_for

from .test_helm import CHART, ON_KWOK, AsToken, Helm, find, one, tools  # noqa: F401 - tools: the fixture

RELEASE = "sxapf"


def uid(cluster: Cluster, kind: str, name: str) -> str:
    return cluster.kubectl("get", kind, name, "-o", "jsonpath={.metadata.uid}").stdout


def classified(http: httpx.Client, path: str) -> tuple[str, str]:
    """(FlowSchema uid, priority level uid) the API server classified one request of this client into (a refusal,
    or a 429 while a new resource's storage initializes, is classified all the same: flow control comes first)."""
    response = http.get(path)
    return (response.headers.get("X-Kubernetes-PF-FlowSchema-UID", ""),
            response.headers.get("X-Kubernetes-PF-PriorityLevel-UID", ""))


def test_the_charts_priority_levels_serve_the_operator_and_the_workers_apart(cluster, tools, tmp_path):  # noqa: F811
    home = cluster.create_namespace(namespace_name("apf"))
    helm = Helm(tools, tmp_path, cluster.kubeconfig)
    jobs = f"/apis/sextant.dev/v1alpha1/namespaces/{home}/jobs"
    operator_sa, worker_sa = f"{RELEASE}-sextant", f"{RELEASE}-sextant-worker-w"
    values = {**ON_KWOK, "replicas": 1, "leaderElection": {"enabled": False}, "runner": {"rbac": {"create": False}},
              "workers": [{"name": "w", **ON_KWOK, "replicas": 0}]}
    # Before: the chart's service accounts (any, here the namespace's default) fall to the defaults' catch-all for
    # service accounts, workload-low, which a flood of creates by other service accounts fills.
    default = AsToken(cluster, cluster.kubectl("create", "token", "default", "-n", home).stdout.strip()).http
    default.get(jobs)  # 403: it may not list jobs; a refusal is classified all the same
    assert default.get(jobs).headers["X-Kubernetes-PF-FlowSchema-UID"] == uid(cluster, "flowschema", "service-accounts")
    helm("install", RELEASE, str(CHART), "--namespace", home, values=values)
    try:
        level = uid(cluster, "prioritylevelconfiguration", f"{RELEASE}-sextant")
        for schema in (f"{RELEASE}-sextant-operator", f"{RELEASE}-sextant-workers"):
            # Accepted: the API server found the level it names (a FlowSchema naming none is "Dangling").
            conditions = lambda: json.loads(cluster.kubectl(  # noqa: E731
                "get", "flowschema", schema, "-o", "jsonpath={.status.conditions}").stdout or "[]")
            wait_for(lambda: {c["type"]: c["status"] for c in conditions()}.get("Dangling") == "False", 30,
                     message=lambda: f"{schema} to be digested: {conditions()}")
        operator = AsToken(cluster, cluster.kubectl("create", "token", operator_sa, "-n", home).stdout.strip()).http
        worker = AsToken(cluster, cluster.kubectl("create", "token", worker_sa, "-n", home).stdout.strip()).http
        want_operator = (uid(cluster, "flowschema", f"{RELEASE}-sextant-operator"), level)
        wait_for(lambda: classified(operator, jobs) == want_operator, 30,
                 message=lambda: f"the operator's requests in {want_operator}: {classified(operator, jobs)}")
        assert classified(operator, "/apis/sextant.dev/v1alpha1/jobs") == want_operator  # cluster-wide lists too
        # The workers' own level: a busy or hostile worker takes its own seats, never the operator's.
        workers_level = uid(cluster, "prioritylevelconfiguration", f"{RELEASE}-sextant-workers")
        assert workers_level != level
        want_worker = (uid(cluster, "flowschema", f"{RELEASE}-sextant-workers"), workers_level)
        wait_for(lambda: classified(worker, f"/apis/sextant.dev/v1alpha1/namespaces/{home}/queues") == want_worker,
                 30, message="the workers' requests in their FlowSchema and level")
        # Anyone else stays where they were.
        assert default.get(jobs).headers["X-Kubernetes-PF-FlowSchema-UID"] == uid(cluster, "flowschema",
                                                                                  "service-accounts")
    finally:
        helm("uninstall", RELEASE, "--namespace", home, check=False)
        cluster.delete_namespace(home)
    assert not cluster.kubectl("get", "flowschema,prioritylevelconfiguration", "-l",
                               f"app.kubernetes.io/instance={RELEASE}", "-o", "name").stdout.strip()


@pytest.fixture
def dev_objects(cluster: Cluster):
    """What sextant.dev.flowcontrol applies is cluster-scoped (and one namespace): removed afterwards."""
    yield
    cluster.kubectl("delete", "--ignore-not-found", "--wait=false",
                    f"flowschema/{flowcontrol.OPERATOR_FLOW_SCHEMA}",
                    f"prioritylevelconfiguration/{flowcontrol.PRIORITY_LEVEL}",
                    f"clusterrolebinding/{flowcontrol.BINDING}", f"namespace/{flowcontrol.NAMESPACE}", check=False)


def test_sextant_dev_runs_the_operator_in_a_priority_level_of_its_own(cluster, dev_objects):
    """`sextant dev`'s local control plane has one user, the admin (group system:masters), whose requests the API
    server exempts from flow control before any FlowSchema is consulted; so dev runs the operator as a service
    account of its own, and its FlowSchema puts that account's requests in the level."""
    admin = kubeconfig.load(str(cluster.kubeconfig))
    conn = asyncio.run(flowcontrol.operator_connection(admin))
    asyncio.run(flowcontrol.operator_connection(admin))  # again, as on a reused cluster: idempotent
    as_operator = httpx.Client(base_url=conn.server, verify=conn.ssl_context, headers=conn.headers(), timeout=10)
    want = (uid(cluster, "flowschema", flowcontrol.OPERATOR_FLOW_SCHEMA),
            uid(cluster, "prioritylevelconfiguration", flowcontrol.PRIORITY_LEVEL))
    wait_for(lambda: classified(as_operator, "/apis/sextant.dev/v1alpha1/jobs") == want, 30,
             message=lambda: f"dev's operator in {want}: {classified(as_operator, '/apis/sextant.dev/v1alpha1/jobs')}")
    # It may do what the admin did (cluster-admin), e.g. create pods anywhere.
    review = as_operator.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json={
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "create", "resource": "pods", "namespace": "anywhere"}}})
    assert review.status_code == 201 and review.json()["status"]["allowed"], review.text
    # The admin itself: exempt, whatever FlowSchema names it.
    as_admin = httpx.Client(base_url=admin.server, verify=admin.ssl_context, headers=admin.headers(), timeout=10)
    assert classified(as_admin, "/apis/sextant.dev/v1alpha1/jobs")[0] == uid(cluster, "flowschema", "exempt")


def test_sextant_devs_priority_level_is_the_charts(tools, tmp_path):  # noqa: F811
    """dev sets up what the chart does with its defaults (release `sextant` in `sextant-system`)."""
    docs = Helm(tools, tmp_path)("template", "sextant", str(CHART), "--namespace", "sextant-system").stdout
    rendered = [d for d in yaml.safe_load_all(docs) if d]
    assert one(rendered, "PriorityLevelConfiguration", "sextant")["spec"] == flowcontrol.priority_level()["spec"]
    assert one(rendered, "FlowSchema", "sextant-operator")["spec"] == flowcontrol.operator_flow_schema()["spec"]
    assert len(find(rendered, "FlowSchema")) == 1  # no workers declared: no workers' FlowSchema
