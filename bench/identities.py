"""Who each measured component is to the API server: its own service account, as in production.

The local control plane's admin (kwok-admin) is in group system:masters, which API Priority and Fairness exempts
altogether: run as the admin, the load generator's create flood and the lifecycle would both skip flow control, and
the priority level the chart gives the operator and the workers could change nothing. So:

  - the operator: `sextant dev`'s service account (sextant.dev.flowcontrol: sextant-system/sextant, cluster-admin),
    in the chart's priority level through `sextant dev`'s FlowSchema;
  - the workers: sextant-bench/worker, with a worker's rights (the chart's worker Role for this protocol; for the
    baseline's workers, the previous protocol's: jobs/status and Leases), in a priority level of their own through a
    workers FlowSchema, as the chart's `<release>-workers`;
  - the load generator: sextant-bench/loadgen, which may only create jobs, matched by no FlowSchema of ours: the
    defaults' `service-accounts` (workload-low), where any other service account's flood would land.

The bench's own recorder (watches, final lists) and setup stay the admin: they are the observer, not the load.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sextant.dev import flowcontrol

NAMESPACE = "sextant-bench"
WORKER = "worker"
LOADGEN = "loadgen"
WORKERS_FLOW_SCHEMA = "sextant-bench-workers"
WORKERS_PRIORITY_LEVEL = "sextant-bench-workers"
WORKERS_NOMINAL_CONCURRENCY_SHARES = 50  # the chart's flowControl.workers default
TOKEN_DURATION = "24h"  # longer than any run (--timeout at most 30 min per workload, the scale run included)
LABELS = {"app.kubernetes.io/part-of": "sextant-bench"}

_READ = ["get", "list", "watch"]
# The chart's worker Role (charts/sextant/templates/_helpers.tpl, sextant.workerRules), cluster-wide here: the bench
# runs one namespace per workload on a cluster.
WORKER_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["sextant.dev"], "resources": ["jobs"], "verbs": [*_READ, "create"]},
    {"apiGroups": ["sextant.dev"], "resources": ["queues", "handlers"], "verbs": _READ},
    {"apiGroups": ["sextant.dev"], "resources": ["workers"], "verbs": [*_READ, "create", "patch", "delete"]},
]
# The previous protocol's worker Role (the chart before protocol v2): the job's status written by the worker, its
# registration Lease, Events on the Job.
BASELINE_WORKER_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["sextant.dev"], "resources": ["jobs"], "verbs": [*_READ, "create"]},
    {"apiGroups": ["sextant.dev"], "resources": ["jobs/status"], "verbs": ["update"]},
    {"apiGroups": ["sextant.dev"], "resources": ["queues", "handlers"], "verbs": _READ},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update", "delete"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
]
LOADGEN_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["sextant.dev", "batch"], "resources": ["jobs"], "verbs": ["create"]},
]


def user(namespace: str, account: str) -> str:
    """The audit log's user.username of a service account."""
    return f"system:serviceaccount:{namespace}:{account}"


OPERATOR_USER = user(flowcontrol.NAMESPACE, flowcontrol.SERVICE_ACCOUNT)
WORKER_USER = user(NAMESPACE, WORKER)
LOADGEN_USER = user(NAMESPACE, LOADGEN)


def workers_priority_level() -> dict[str, Any]:
    """`sextant dev`'s operator level, for the workers alone: the chart's `<release>-workers` (half the shares)."""
    level = copy.deepcopy(flowcontrol.priority_level())
    level["metadata"] = {"name": WORKERS_PRIORITY_LEVEL, "labels": LABELS}
    level["spec"]["limited"]["nominalConcurrencyShares"] = WORKERS_NOMINAL_CONCURRENCY_SHARES
    return level


def workers_flow_schema() -> dict[str, Any]:
    """`sextant dev`'s operator FlowSchema, for the workers' service account in their own level: the chart's
    `<release>-workers`."""
    schema = copy.deepcopy(flowcontrol.operator_flow_schema())
    schema["metadata"] = {"name": WORKERS_FLOW_SCHEMA, "labels": LABELS}
    schema["spec"]["priorityLevelConfiguration"] = {"name": WORKERS_PRIORITY_LEVEL}
    schema["spec"]["rules"][0]["subjects"] = [{"kind": "ServiceAccount",
                                               "serviceAccount": {"name": WORKER, "namespace": NAMESPACE}}]
    return schema


def _account(name: str, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    role = f"sextant-bench-{name}"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": NAMESPACE,
                                                                    "labels": LABELS}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": role, "labels": LABELS}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": role, "labels": LABELS},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]},
    ]  # fmt: skip


def objects(baseline_workers: bool) -> list[dict[str, Any]]:
    """Everything applied: the operator's identity, level and FlowSchema (as `sextant dev`), the workers' and the
    load generator's accounts, the workers' FlowSchema."""
    return [
        *(body for _, body in flowcontrol.objects()),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": LABELS}},
        *_account(WORKER, BASELINE_WORKER_RULES if baseline_workers else WORKER_RULES),
        *_account(LOADGEN, LOADGEN_RULES),
        workers_priority_level(),
        workers_flow_schema(),
    ]


@dataclass(frozen=True)
class Kubeconfigs:
    operator: Path
    worker: Path
    loadgen_token: str


def write_kubeconfig(admin: Path, token: str, target: Path, name: str) -> Path:
    """The admin kubeconfig's cluster (CA paths made absolute: the file moves), authenticated by `token`."""
    data = yaml.safe_load(admin.read_text())
    ctx = next(c["context"] for c in data["contexts"] if c["name"] == data["current-context"])
    cluster = dict(next(c["cluster"] for c in data["clusters"] if c["name"] == ctx["cluster"]))
    if cluster.get("certificate-authority"):
        cluster["certificate-authority"] = str((admin.parent / cluster["certificate-authority"]).resolve())
    target.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
    }))
    target.chmod(0o600)
    return target


def setup(cluster: Any, out: Path, label: str, baseline_workers: bool = False) -> Kubeconfigs:
    """Apply the identities (server-side, idempotent), wait until the API server has digested the FlowSchemas, and
    write a kubeconfig each for the operator and the workers; the load generator's token is returned."""
    items = objects(baseline_workers)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager", "sextant-bench", "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    # Dangling=False: the API server found the level each FlowSchema names and classifies by it
    for schema in (flowcontrol.OPERATOR_FLOW_SCHEMA, WORKERS_FLOW_SCHEMA):
        cluster.kubectl("wait", "--for=condition=Dangling=False", f"flowschema/{schema}", "--timeout=60s", timeout=70)

    def token(namespace: str, account: str) -> str:
        return cluster.kubectl("create", "token", account, "-n", namespace, "--duration", TOKEN_DURATION).stdout.strip()

    admin = Path(cluster.kubeconfig)
    return Kubeconfigs(
        operator=write_kubeconfig(admin, token(flowcontrol.NAMESPACE, flowcontrol.SERVICE_ACCOUNT),
                                  out / f"kubeconfig-operator-{label}", "operator"),
        worker=write_kubeconfig(admin, token(NAMESPACE, WORKER), out / f"kubeconfig-worker-{label}", "worker"),
        loadgen_token=token(NAMESPACE, LOADGEN),
    )
