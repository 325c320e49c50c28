"""API Priority and Fairness on `sextant dev`'s local control plane, as the chart sets it up (charts/sextant/templates/
flowcontrol.yaml, release `sextant` in `sextant-system`): a priority level of the operator's own, so that a flood of
creates does not hold every seat of the API server while the lifecycle waits.

The local control plane has one user, kwokctl's admin (kwok-admin, group system:masters), shared by the control
plane's components and the user's kubectl; the API server exempts system:masters from flow control altogether (the
mandatory FlowSchema `exempt`), so no FlowSchema can classify that user's requests. The operator therefore runs here
as a service account of its own, sextant-system/sextant (bound to cluster-admin: it may do what the admin did), whose
requests the FlowSchema below puts in the priority level. Workers started with the dev kubeconfig are the admin, and
stay exempt.
"""

from __future__ import annotations

from typing import Any

from ..kube import kubeconfig

NAMESPACE = "sextant-system"
SERVICE_ACCOUNT = "sextant"
PRIORITY_LEVEL = "sextant"
OPERATOR_FLOW_SCHEMA = "sextant-operator"
BINDING = "sextant-dev-operator"
# The chart's defaults (values.yaml, flowControl): the same level as in a cluster the chart installs into.
NOMINAL_CONCURRENCY_SHARES = 100
LENDABLE_PERCENT = 50
MATCHING_PRECEDENCE = 1000
# The operator's token lives as long as a dev session may: a year (the local API server sets no maximum).
TOKEN_SECONDS = 365 * 24 * 3600
FIELD_MANAGER = "sextant-dev"
LABELS = {"app.kubernetes.io/managed-by": "sextant-dev", "app.kubernetes.io/part-of": "sextant"}

FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"


def priority_level() -> dict[str, Any]:
    return {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
        "metadata": {"name": PRIORITY_LEVEL, "labels": LABELS},
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": NOMINAL_CONCURRENCY_SHARES, "lendablePercent": LENDABLE_PERCENT,
            "limitResponse": {"type": "Queue", "queuing": {"queues": 64, "handSize": 6, "queueLengthLimit": 50}}}},
    }  # fmt: skip


def operator_flow_schema() -> dict[str, Any]:
    return {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
        "metadata": {"name": OPERATOR_FLOW_SCHEMA, "labels": LABELS},
        "spec": {
            "priorityLevelConfiguration": {"name": PRIORITY_LEVEL},
            "matchingPrecedence": MATCHING_PRECEDENCE,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{
                "subjects": [{"kind": "ServiceAccount",
                              "serviceAccount": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}}],
                "resourceRules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"], "namespaces": ["*"],
                                   "clusterScope": True}],
                "nonResourceRules": [{"nonResourceURLs": ["*"], "verbs": ["*"]}],
            }],
        },
    }  # fmt: skip


def _identity_objects() -> list[tuple[str, dict[str, Any]]]:
    """(path, object) of the operator's service account and its binding, applied in this order."""
    return [
        (f"/api/v1/namespaces/{NAMESPACE}",
         {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": LABELS}}),
        (f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}",
         {"apiVersion": "v1", "kind": "ServiceAccount",
          "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE, "labels": LABELS}}),
        (f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{BINDING}",
         {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
          "metadata": {"name": BINDING, "labels": LABELS},
          "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
          "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]}),
    ]  # fmt: skip


def objects() -> list[tuple[str, dict[str, Any]]]:
    """(path, object) of everything `sextant dev` applies: the identity, then the level, then its FlowSchema."""
    return [*_identity_objects(),
            (f"{FLOWCONTROL}/prioritylevelconfigurations/{PRIORITY_LEVEL}", priority_level()),
            (f"{FLOWCONTROL}/flowschemas/{OPERATOR_FLOW_SCHEMA}", operator_flow_schema())]


async def operator_connection(conn: kubeconfig.Connection) -> kubeconfig.Connection:
    """Apply the objects (server-side, idempotent: a reused cluster gets them again) with the admin's conn, and
    return a connection to the same API server as the operator's service account."""
    from ..kube.client import Kube

    async with Kube(conn, user_agent="sextant-dev") as kube:
        for path, body in objects():
            await kube.request("PATCH", path, params={"fieldManager": FIELD_MANAGER, "force": "true"}, body=body,
                               content_type="application/apply-patch+yaml")
        token = await kube.request(
            "POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}/token",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                  "spec": {"expirationSeconds": TOKEN_SECONDS}})
    return conn.with_token(token["status"]["token"])
