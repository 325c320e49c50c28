"""The Helm chart (charts/sextant): `helm lint`, `helm template` with default and non-default values, kube-score on
what it renders, `helm install` into the real API server (which validates every object; PodSecurity "restricted"
admits the operator's pods), the operator's RBAC as the API server's authorizer sees it (`kubectl auth can-i`:
what it can do and, as important, what it cannot), and `helm uninstall` leaving nothing behind but the CRDs.

helm and kube-score come from hack/build-tools.sh (built once from the Go module proxy, cached in ~/.cache/sextant).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.harness import Cluster, namespace_name, repo_root, wait_for
from tests.harness.tools import Tools, ToolsUnavailable, build_tools

from .support import (KWOK_TOLERATION, Operator, WorkerProcess, apply, handler, job, queue, token_kubeconfig,
                      wait_state)

CHART = repo_root() / "charts" / "sextant"
CRDS = repo_root() / "crds"
APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
# The operator's pods land on kwok nodes (simulated: they are scheduled and admitted, no process runs).
ON_KWOK = {"tolerations": [KWOK_TOLERATION], "nodeSelector": {"type": "kwok"}}
TLS_ARGS = ["--http-tls-cert=/etc/sextant/tls/tls.crt", "--http-tls-key=/etc/sextant/tls/tls.key"]
LEADER_ELECTION = ["--leader-elect", "--leader-election-namespace=sextant-system", "--leader-election-name=sx-sextant",
                   "--leader-election-lease-duration=15s", "--leader-election-renew-deadline=10s",
                   "--leader-election-retry-period=2s"]
RESTRICTED = ("pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/warn=restricted")

# Non-default values: two watched namespaces, one replica, a ServiceMonitor, declared Queues and Handlers, no Events.
CUSTOM = {
    "replicas": 1,
    "watchNamespaces": ["shop", "billing"],
    "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
    "operator": {"events": False, "logLevel": "info"},
    "queues": [
        {"name": "emails", "namespace": "shop", "spec": {"concurrency": 10, "maxAttempts": 5}},
        {"name": "reports", "namespace": "billing"},
    ],
    "handlers": [
        {"name": "send-receipt", "namespace": "shop", "spec": {
            "template": {"spec": {"containers": [{"name": "handler", "command": ["sextant", "run", "--", "true"]}]}},
            "nonRetryableExitCodes": [2]}},
        {"name": "custom", "namespace": "billing", "spec": {"template": {"spec": {
            "serviceAccountName": "mine", "containers": [{"name": "handler", "image": "registry.example/r:2"}]}}}},
    ],
}  # fmt: skip

# Workers (docs/workers.md) on top of CUSTOM: worker-mode Handlers and two worker Deployments, one with every default.
WORKER_HANDLERS = [
    {"name": "charge-card", "namespace": "shop", "spec": {"worker": {}}},
    {"name": "resize-image", "namespace": "billing", "spec": {"worker": {"command": ["python", "-m", "images.resize"]},
                                                             "nonRetryableExitCodes": [2]}},
]
WORKERS = [
    {"name": "payments", "namespace": "shop", "image": "registry.example/payments:2.3", "queues": ["emails"],
     "modules": ["payments.handlers"], "concurrency": 16, "replicas": 2, "metricsPort": 9090,
     "env": [{"name": "SMTP_HOST", "value": "smtp.example"}]},
    {"name": "images", "namespace": "billing", "events": False, "drainGrace": "1m", "handlers": ["resize-image"],
     "allowCommands": ["resize-image"], "commandEnv": ["IMAGES_BUCKET", "MODE=prod"]},
]
WITH_WORKERS = {**CUSTOM, "handlers": CUSTOM["handlers"] + WORKER_HANDLERS, "workers": WORKERS}
EXAMPLE_VALUES = repo_root() / "examples" / "helm" / "workers-values.yaml"


# ---- helpers ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def tools() -> Tools:
    try:
        return build_tools()
    except ToolsUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


class Helm:
    """helm with its own config, cache and data folders (nothing from the user's ~/.config/helm), and a kubeconfig."""

    def __init__(self, tools: Tools, home: Path, kubeconfig: Path | None = None) -> None:
        self.tools, self.home, self.kubeconfig = tools, home, kubeconfig

    def __call__(self, *args: str, values: dict[str, Any] | None = None, check: bool = True,
                 timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **{f"HELM_{k}_HOME": str(self.home / k.lower()) for k in ("CACHE", "CONFIG", "DATA")}}
        if self.kubeconfig:
            env["KUBECONFIG"] = str(self.kubeconfig)
        cmd = [self.tools.helm, *args]
        if values is not None:
            cmd += ["--values", "-"]
        proc = subprocess.run(cmd, input=json.dumps(values) if values is not None else None, capture_output=True,
                              text=True, env=env, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}{proc.stdout}")
        return proc

    def template(self, values: dict[str, Any] | None = None, *args: str) -> list[dict[str, Any]]:
        out = self("template", "sx", str(CHART), "--namespace", "sextant-system", *args, values=values).stdout
        return [d for d in yaml.safe_load_all(out) if d]


@pytest.fixture(scope="module")
def helm(tools: Tools, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(tools, tmp_path_factory.mktemp("helm"))


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None, namespace: str | None = None) -> list[dict]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
            and (namespace is None or d["metadata"].get("namespace") == namespace)]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None, namespace: str | None = None) -> dict:
    found = find(docs, kind, name, namespace)
    assert len(found) == 1, f"expected one {kind} {name or ''} in {namespace or 'any namespace'}, found {len(found)}"
    return found[0]


def rules_of(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) → verbs, over every rule of a Role or ClusterRole."""
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


OPERATOR_RULES = {
    ("sextant.dev", "jobs"): {"get", "list", "watch", "create", "delete"},
    ("sextant.dev", "queues"): {"get", "list", "watch"},
    ("sextant.dev", "handlers"): {"get", "list", "watch"},
    ("sextant.dev", "schedules"): {"get", "list", "watch"},
    ("sextant.dev", "jobs/status"): {"update", "patch"},
    ("sextant.dev", "schedules/status"): {"update"},
    ("sextant.dev", "queues/status"): {"patch"},
    ("sextant.dev", "workers"): {"get", "list", "watch", "patch", "delete"},
    ("sextant.dev", "workers/status"): {"patch"},
    ("sextant.dev", "workerpools"): {"get", "list", "watch"},
    ("sextant.dev", "workerpools/status"): {"patch"},
    ("", "pods"): {"get", "list", "watch", "create", "delete"},
    ("coordination.k8s.io", "leases"): {"get", "list", "watch"},
    ("", "events"): {"create"},
}

# docs/workers.md, "Permissions": since protocol v2 no Job's status, no Leases, no Events; its own Worker object.
WORKER_RULES = {
    ("sextant.dev", "jobs"): {"get", "list", "watch", "create"},
    ("sextant.dev", "queues"): {"get", "list", "watch"},
    ("sextant.dev", "handlers"): {"get", "list", "watch"},
    ("sextant.dev", "workers"): {"get", "list", "watch", "create", "patch", "delete"},
}


def assert_least_privilege(docs: list[dict[str, Any]]) -> None:
    """No role of the chart grants a wildcard, Secrets or ConfigMaps, or writes to a Job's spec (but the users' edit
    role, aggregated into Kubernetes' edit and bound to no account of the chart: a user's cancel and retry patch it)."""
    for role in find(docs, "Role") + find(docs, "ClusterRole"):
        users = role["metadata"]["labels"].get("rbac.authorization.k8s.io/aggregate-to-edit") == "true"
        for rule in role["rules"]:
            where = f"{role['kind']} {role['metadata']['name']}: {rule}"
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], where
            assert not {"secrets", "configmaps"} & set(rule["resources"]), where
            if "sextant.dev" in rule["apiGroups"] and "jobs" in rule["resources"] and not users:
                assert not {"update", "patch"} & set(rule["verbs"]), where


def assert_every_rule_commented(rendered: str) -> None:
    """In the rendered RBAC objects, each rule is preceded by the comment that says why it exists."""
    for text in rendered.split("\n---"):
        if not any(f"\nkind: {k}\n" in text for k in ("Role", "ClusterRole")):
            continue
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith("- apiGroups:"):
                assert lines[i - 1].strip().startswith("#"), f"rule without a comment:\n{chr(10).join(lines[i-2:i+4])}"


# ---- lint, template, kube-score (no cluster) ------------------------------------------------------------------------


def test_helm_lint_is_clean_with_default_and_custom_values(helm):
    for values in (None, CUSTOM, {**CUSTOM, "watchNamespaces": [], "replicas": 3}, WITH_WORKERS,
                   yaml.safe_load(EXAMPLE_VALUES.read_text())):
        out = helm("lint", "--strict", str(CHART), values=values).stdout
        assert "0 chart(s) failed" in out and "[WARNING]" not in out and "[ERROR]" not in out, out


def test_default_values_render_a_two_replica_restricted_operator_with_cluster_wide_least_privilege(helm):
    docs = helm.template()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(["ServiceAccount", *["ClusterRole"] * 5, "ClusterRoleBinding",
                            "ClusterRoleBinding", "Role", "RoleBinding", "Service", "Deployment",
                            "PodDisruptionBudget", "NetworkPolicy", "Secret",
                            *["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 4,  # handler
                            # pod security, leases, workers, jobs
                            "PriorityLevelConfiguration", "FlowSchema"]), kinds  # fmt: skip
    # The users' roles, aggregated into Kubernetes' view / edit / admin; no status rights, nothing but sextant.dev.
    view, edit = one(docs, "ClusterRole", "sx-sextant-view"), one(docs, "ClusterRole", "sx-sextant-edit")
    aggregate = "rbac.authorization.k8s.io/aggregate-to-"
    assert {k for k, v in view["metadata"]["labels"].items() if k.startswith(aggregate) and v == "true"} == \
        {aggregate + r for r in ("view", "edit", "admin")}
    assert {k for k, v in edit["metadata"]["labels"].items() if k.startswith(aggregate) and v == "true"} == \
        {aggregate + r for r in ("edit", "admin")}
    assert view["rules"] == [{"apiGroups": ["sextant.dev"],
                              "resources": ["jobs", "queues", "handlers", "schedules", "workers", "workerpools"],
                              "verbs": ["get", "list", "watch"]}]
    assert [r["apiGroups"] for r in edit["rules"]] == [["sextant.dev"]] and "get" not in edit["rules"][0]["verbs"]
    assert not any("/" in res for role in (view, edit) for r in role["rules"] for res in r["resources"])
    assert not find(helm.template({"userRoles": {"aggregate": False}}), "ClusterRole", "sx-sextant-view")
    deployment = one(docs, "Deployment", "sx-sextant", "sextant-system")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] == 2
    (container,) = pod["containers"]
    assert container["image"] == f"ghcr.io/sextant-dev/sextant:{APP_VERSION}"
    assert container["args"] == ["--http-host=0.0.0.0", "--http-port=8080", "--log-level=warning", "--workers=64",
                                 "--max-finished-jobs=50000", *TLS_ARGS,
                                 *LEADER_ELECTION]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http", "scheme": "HTTPS"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http", "scheme": "HTTPS"}
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert {"cpu", "memory"} <= set(container["resources"]["requests"]) | set(container["resources"]["limits"])
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["serviceAccountName"] == one(docs, "ServiceAccount")["metadata"]["name"] == "sx-sextant"
    assert pod["affinity"]["podAntiAffinity"], "two replicas prefer two nodes"
    selector = spec["selector"]["matchLabels"]
    assert selector.items() <= spec["template"]["metadata"]["labels"].items()

    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": selector},
                           "unhealthyPodEvictionPolicy": "AlwaysAllow"}
    service = one(docs, "Service")
    assert service["spec"]["selector"] == selector
    assert service["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]
    policy = one(docs, "NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"] == selector
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]

    # RBAC: the operator's rules cluster-wide (it watches every namespace), auth reviews, its leader Lease.
    assert rules_of(one(docs, "ClusterRole", "sx-sextant")) == OPERATOR_RULES
    binding = one(docs, "ClusterRoleBinding", "sx-sextant")
    assert binding["roleRef"]["name"] == "sx-sextant"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sx-sextant", "namespace": "sextant-system"}]
    assert rules_of(one(docs, "ClusterRole", "sx-sextant-auth")) == {
        ("authentication.k8s.io", "tokenreviews"): {"create"},
        ("authorization.k8s.io", "subjectaccessreviews"): {"create"},
    }
    leader = one(docs, "Role", "sx-sextant-leader-election", "sextant-system")
    assert [(r["verbs"], r.get("resourceNames")) for r in leader["rules"]] == [
        (["create"], None), (["get", "update"], ["sx-sextant"])]  # only its own Lease, by name
    assert {g for r in leader["rules"] for g in r["apiGroups"]} == {"coordination.k8s.io"}
    assert rules_of(one(docs, "ClusterRole", "sx-sextant-runner")) == {
        ("coordination.k8s.io", "leases"): {"create", "get", "patch"},
        ("sextant.dev", "jobs"): {"create", "get", "list"},
    }
    assert not find(docs, "ServiceAccount", "sextant-runner"), "no namespace named: the runner's SA is bound by hand"
    assert_least_privilege(docs)
    rendered = helm("template", "sx", str(CHART), "--namespace", "sextant-system").stdout
    assert_every_rule_commented(rendered)


def test_custom_values_render_roles_per_watched_namespace_a_service_monitor_and_declared_objects(helm):
    docs = helm.template(CUSTOM)
    assert not find(docs, "ClusterRole", "sx-sextant") and not find(docs, "ClusterRoleBinding", "sx-sextant")
    for ns in ("shop", "billing"):
        role = one(docs, "Role", "sx-sextant", ns)
        expected = {k: v for k, v in OPERATOR_RULES.items() if k != ("", "events")}  # events: false
        assert rules_of(role) == expected
        binding = one(docs, "RoleBinding", "sx-sextant", ns)
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sx-sextant"}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sx-sextant", "namespace": "sextant-system"}]
        # The runner's ServiceAccount, bound to the runner's ClusterRole in this namespace only.
        one(docs, "ServiceAccount", "sextant-runner", ns)
        runner = one(docs, "RoleBinding", "sx-sextant-runner", ns)
        assert runner["roleRef"]["kind"] == "ClusterRole" and runner["roleRef"]["name"] == "sx-sextant-runner"
    assert not find(docs, "Role", "sx-sextant", "sextant-system"), "the release namespace is not watched"
    one(docs, "ClusterRole", "sx-sextant-auth")
    one(docs, "Role", "sx-sextant-leader-election", "sextant-system")

    deployment = one(docs, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert deployment["spec"]["replicas"] == 1
    assert container["args"] == ["--http-host=0.0.0.0", "--http-port=8080", "--log-level=info", "--workers=64",
                                 "--max-finished-jobs=50000", *TLS_ARGS,
                                 "--watch-namespace=shop", "--watch-namespace=billing", "--no-events",
                                 *LEADER_ELECTION]
    assert "affinity" not in deployment["spec"]["template"]["spec"]
    assert not find(docs, "PodDisruptionBudget"), "one replica: a PDB with minAvailable 1 would block every drain"

    monitor = one(docs, "ServiceMonitor", "sx-sextant", "sextant-system")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["selector"]["matchLabels"] == one(docs, "Service")["spec"]["selector"]
    assert monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s",
                                             "scrapeTimeout": "10s", "scheme": "https", "tlsConfig": {
                                                 "ca": {"secret": {"name": "sx-sextant-tls", "key": "ca.crt"}},
                                                 "serverName": "sx-sextant.sextant-system.svc"}}]

    emails = one(docs, "Queue", "emails", "shop")
    assert emails["apiVersion"] == "sextant.dev/v1alpha1" and emails["spec"] == {"concurrency": 10, "maxAttempts": 5}
    assert one(docs, "Queue", "reports", "billing")["spec"] == {}
    receipt = one(docs, "Handler", "send-receipt", "shop")["spec"]
    assert receipt["nonRetryableExitCodes"] == [2]
    pod = receipt["template"]["spec"]
    assert pod["serviceAccountName"] == "sextant-runner"  # defaulted: the runner needs its Lease
    assert pod["containers"][0]["image"] == f"ghcr.io/sextant-dev/sextant-runner:{APP_VERSION}"  # defaulted
    custom = one(docs, "Handler", "custom", "billing")["spec"]["template"]["spec"]
    assert custom["serviceAccountName"] == "mine" and custom["containers"][0]["image"] == "registry.example/r:2"
    assert_least_privilege(docs)


def tls_of(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str], str | None]:
    """The operator container, its TLS flags, and the Secret its tls volume mounts (None: no such volume)."""
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    volume = next((v for v in pod["volumes"] if v["name"] == "tls"), None)
    return container, [a for a in container["args"] if a.startswith("--http-tls")], (
        volume["secret"]["secretName"] if volume else None)


def handshake(certificate: str, key: str, ca: str, server_name: str, tmp_path: Path) -> str:
    """A TLS handshake over a socket pair: a server with this certificate and key, a client that trusts only `ca`
    and checks `server_name`. The name of the certificate's subject, or the client's error."""
    (tmp_path / "tls.crt").write_text(certificate)
    (tmp_path / "tls.key").write_text(key)
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_side = ssl.create_default_context(cadata=ca)
    a, b = socket.socketpair()
    with a, b, ThreadPoolExecutor(1) as pool:
        served = pool.submit(lambda: server_side.wrap_socket(a, server_side=True).close())
        try:
            with client_side.wrap_socket(b, server_hostname=server_name) as tls:
                subject = dict(item[0] for item in tls.getpeercert()["subject"])["commonName"]
        except ssl.SSLError as exc:
            a.close()
            return f"refused: {exc}"
        served.result(timeout=10)
    return subject


def test_the_http_port_is_https_by_default_with_a_certificate_the_chart_makes(helm, tmp_path):
    docs = helm.template()
    container, flags, secret_name = tls_of(docs)
    assert flags == TLS_ARGS and secret_name == "sx-sextant-tls"
    assert {"name": "tls", "mountPath": "/etc/sextant/tls", "readOnly": True} in container["volumeMounts"]
    secret = one(docs, "Secret", "sx-sextant-tls", "sextant-system")
    assert secret["type"] == "kubernetes.io/tls" and sorted(secret["data"]) == ["ca.crt", "tls.crt", "tls.key"]
    pem = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    # Signed by the Secret's CA for the Service's names (and localhost, for port-forwarding); no other name.
    for name in ("sx-sextant.sextant-system.svc", "sx-sextant.sextant-system.svc.cluster.local", "sx-sextant",
                 "localhost"):
        assert handshake(pem["tls.crt"], pem["tls.key"], pem["ca.crt"], name, tmp_path) == "sx-sextant", name
    assert "certificate verify failed" in handshake(pem["tls.crt"], pem["tls.key"], pem["ca.crt"],
                                                     "sextant.example", tmp_path)
    other = one(helm.template(), "Secret")["data"]  # without a cluster (helm template) a new pair each time
    assert base64.b64decode(other["ca.crt"]).decode() != pem["ca.crt"]
    assert "certificate verify failed" in handshake(pem["tls.crt"], pem["tls.key"],
                                                     base64.b64decode(other["ca.crt"]).decode(), "localhost", tmp_path)


def test_a_tls_secret_of_ones_own_cert_manager_or_plain_http_only_when_asked_for(helm):
    docs = helm.template({"operator": {"tlsSecretName": "sextant-tls"},
                          "serviceMonitor": {"enabled": True, "tlsConfig": {"serverName": "sextant.example"}}})
    container, flags, secret_name = tls_of(docs)
    assert flags == TLS_ARGS and secret_name == "sextant-tls" and not find(docs, "Secret")
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    [endpoint] = one(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"] == {"serverName": "sextant.example"}

    # cert-manager: a Certificate for the Service's names; without issuerRef a CA of the release's own.
    manager = {"operator": {"tls": {"mode": "cert-manager"}}}
    docs = helm.template(manager, "--api-versions", "cert-manager.io/v1")
    assert tls_of(docs)[1:] == (TLS_ARGS, "sx-sextant-tls") and not find(docs, "Secret")
    certificate = one(docs, "Certificate", "sx-sextant", "sextant-system")["spec"]
    assert certificate["secretName"] == "sx-sextant-tls" and certificate["issuerRef"] == {"name": "sx-sextant-ca",
                                                                                         "kind": "Issuer"}
    assert "sx-sextant.sextant-system.svc" in certificate["dnsNames"]
    assert one(docs, "Certificate", "sx-sextant-ca")["spec"]["isCA"] is True
    assert one(docs, "Issuer", "sx-sextant-ca")["spec"] == {"ca": {"secretName": "sx-sextant-ca"}}
    issuer = {"name": "corp-ca", "kind": "ClusterIssuer"}
    docs = helm.template({"operator": {"tls": {"mode": "cert-manager", "certManager": {"issuerRef": issuer}}}},
                         "--api-versions", "cert-manager.io/v1")
    assert one(docs, "Certificate")["spec"]["issuerRef"] == issuer and not find(docs, "Issuer")
    missing = helm("template", "sx", str(CHART), values=manager, check=False)
    assert missing.returncode != 0 and "needs cert-manager (the API cert-manager.io/v1)" in missing.stderr

    # Plain HTTP: refused, unless asked for in so many words.
    refused = helm("template", "sx", str(CHART), values={"operator": {"tls": {"mode": "none"}}}, check=False)
    assert refused.returncode != 0
    assert "operator.tls.mode none would serve the /v2 API and its callers' bearer tokens over plain HTTP" in \
        refused.stderr and "allowPlainHTTP=true" in refused.stderr
    docs = helm.template({"operator": {"tls": {"mode": "none", "allowPlainHTTP": True}}})
    container, flags, secret_name = tls_of(docs)
    assert flags == [] and secret_name is None and not find(docs, "Secret")
    assert "scheme" not in container["livenessProbe"]["httpGet"]


def test_tls_under_gitops_an_existing_secret_or_cert_manager_renders_the_same_every_time(helm):
    """`helm template` (Argo CD) cannot look a Secret up: the self-signed certificate is new at every render. With
    operator.tls.existingSecret (a Secret the user, cert-manager or secrets tooling keeps) or cert-manager, the output
    is the same at every render and every consumer of the certificate names the one Secret."""
    def render(values: dict[str, Any], *args: str) -> str:
        return helm("template", "sx", str(CHART), "--namespace", "sextant-system", *args, values=values).stdout

    ca = {"ca": {"secret": {"name": "corp-tls", "key": "ca.crt"}}, "serverName": "sx-sextant.sextant-system.svc"}
    existing = {"operator": {"tls": {"existingSecret": "corp-tls"}},
                "serviceMonitor": {"enabled": True, "tlsConfig": ca}}
    first = render(existing)
    assert render(existing) == first
    docs = [d for d in yaml.safe_load_all(first) if d]
    container, flags, secret_name = tls_of(docs)
    assert flags == TLS_ARGS and secret_name == "corp-tls"
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert not find(docs, "Secret") and not find(docs, "Certificate") and not find(docs, "Issuer")
    [endpoint] = one(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"] == ca
    # It wins over mode (cert-manager need not be there), and over the older name of the same value.
    both = {"operator": {"tls": {"existingSecret": "corp-tls", "mode": "cert-manager"}, "tlsSecretName": "old"}}
    docs = helm.template(both)
    assert tls_of(docs)[1:] == (TLS_ARGS, "corp-tls") and not find(docs, "Certificate")
    assert tls_of(helm.template({"operator": {"tlsSecretName": "old"}}))[2] == "old"

    # cert-manager: the Certificate writes the Secret the pods mount and the ServiceMonitor trusts; nothing random.
    manager = {"operator": {"tls": {"mode": "cert-manager"}}, "serviceMonitor": {"enabled": True}}
    first = render(manager, "--api-versions", "cert-manager.io/v1")
    assert render(manager, "--api-versions", "cert-manager.io/v1") == first
    docs = [d for d in yaml.safe_load_all(first) if d]
    certificate = one(docs, "Certificate", "sx-sextant")["spec"]
    [endpoint] = one(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert certificate["secretName"] == tls_of(docs)[2] == endpoint["tlsConfig"]["ca"]["secret"]["name"]
    assert not find(docs, "Secret")
    missing = helm("template", "sx", str(CHART), values=manager, check=False)
    assert missing.returncode != 0 and "--api-versions cert-manager.io/v1" in missing.stderr

    # The default, self-signed: a new CA at every render without a cluster, and the rendered Secret says so.
    default = render({})
    assert render({}) != default
    assert "# Rendered without a cluster (helm template, Argo CD): a new CA and certificate at every render" in default
    assert "operator.tls.existingSecret" in default


def test_images_are_pinned_by_digest_in_every_template_that_renders_one(helm):
    operator, runner = "sha256:" + "b" * 64, "sha256:" + "a" * 64
    values = {**WITH_WORKERS, "image": {"digest": operator}, "runner": {"image": {"digest": runner}}}
    docs = helm.template(values)
    images: dict[str, str] = {}
    for d in docs:
        pod = {"Deployment": lambda: d["spec"]["template"]["spec"],
               "Handler": lambda: d["spec"].get("template", {}).get("spec")}.get(d["kind"], lambda: None)()
        for c in (pod or {}).get("containers", []) + (pod or {}).get("initContainers", []):
            images[f"{d['kind']}/{d['metadata']['name']}/{c['name']}"] = c["image"]
    assert images == {
        "Deployment/sx-sextant/operator": f"ghcr.io/sextant-dev/sextant@{operator}",
        "Handler/send-receipt/handler": f"ghcr.io/sextant-dev/sextant-runner@{runner}",  # the runner's, defaulted
        "Handler/custom/handler": "registry.example/r:2",  # as written
        "Deployment/sx-sextant-worker-payments/worker": "registry.example/payments:2.3",  # as written
        "Deployment/sx-sextant-worker-images/worker": f"ghcr.io/sextant-dev/sextant-runner@{runner}",
    }, images
    assert f"ghcr.io/sextant-dev/sextant-runner:{APP_VERSION}" in helm("template", "sx", str(CHART),
                                                                       values=WITH_WORKERS).stdout  # unpinned: the tag
    bad = helm("template", "sx", str(CHART), values={"runner": {"image": {"digest": "latest"}}}, check=False)
    assert bad.returncode != 0 and "/runner/image/digest" in bad.stderr


API_PORTS = [{"port": p, "protocol": "TCP"} for p in (443, 6443, 8443)]


def test_the_operators_network_policy_lets_it_reach_the_api_server_alone(helm):
    # Rendered without a cluster and without the API server's addresses: its ports only, no DNS, nothing else.
    policy = one(helm.template(), "NetworkPolicy", "sx-sextant")["spec"]
    assert policy["egress"] == [{"ports": API_PORTS}]
    assert policy["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}]}]
    # The API server's addresses given (GitOps): those, on its ports, and nothing else.
    values = {"networkPolicy": {"apiServerCIDRs": ["10.0.0.0/28", "fd00:10::/120"], "apiServerPorts": [6443]}}
    policy = one(helm.template(values), "NetworkPolicy", "sx-sextant")["spec"]
    assert policy["egress"] == [{"to": [{"ipBlock": {"cidr": "10.0.0.0/28"}}, {"ipBlock": {"cidr": "fd00:10::/120"}}],
                                 "ports": [{"port": 6443, "protocol": "TCP"}]}]
    # DNS only when asked for (a kubeconfig naming the API server by host name); in a pod the operator resolves none.
    values["networkPolicy"]["dns"] = True
    policy = one(helm.template(values), "NetworkPolicy", "sx-sextant")["spec"]
    assert policy["egress"][1:] == [{"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}]
    bad = helm("template", "sx", str(CHART), values={"networkPolicy": {"apiServerCIDRs": ["kubernetes.default"]}},
               check=False)
    assert bad.returncode != 0 and "/networkPolicy/apiServerCIDRs/0" in bad.stderr


def test_values_are_checked(helm):
    bad = helm("template", "sx", str(CHART), values={**CUSTOM, "queues": [{"name": "q", "namespace": "elsewhere"}]},
               check=False)
    assert bad.returncode != 0
    assert 'Queue "q" is in namespace "elsewhere", which the operator does not watch' in bad.stderr
    typo = helm("template", "sx", str(CHART), values={"watchNamespace": ["shop"]}, check=False)
    assert typo.returncode != 0 and "watchNamespace" in typo.stderr  # values.schema.json: no unknown keys
    alone = helm("template", "sx", str(CHART), values={"leaderElection": {"enabled": False}}, check=False)
    assert alone.returncode != 0 and "replicas > 1 needs leaderElection.enabled" in alone.stderr
    zero = helm("template", "sx", str(CHART), values={"replicas": 0}, check=False)
    assert zero.returncode != 0 and "replicas" in zero.stderr
    off = helm("template", "sx", str(CHART), values={"operator": {"tls": {"mode": "off"}}}, check=False)
    assert off.returncode != 0 and "/operator/tls/mode" in off.stderr
    assert "'self-signed', 'cert-manager', 'none'" in off.stderr
    restricted = {**CUSTOM, "handlerAdmission": {"restrict": {"enabled": True}}}
    borrowed = helm("template", "sx", str(CHART), values=restricted, check=False)  # CUSTOM's "custom" runs as "mine"
    assert borrowed.returncode != 0
    assert 'Handler "custom" names the service account "mine", which handlerAdmission.restrict.serviceAccounts does ' \
           "not allow" in borrowed.stderr


@pytest.mark.parametrize("values,namespace", [
    ({"runner": {"namespaces": ["sextant-system"]}}, "sextant-system"),
    ({"watchNamespaces": ["shop", "sextant-system"]}, "sextant-system"),
    ({"handlers": [{"name": "h", "spec": {"template": {"spec": {"containers": [{"name": "handler"}]}}}}]},
     "sextant-system"),  # a Handler without a namespace is in the release's
    ({"runner": {"namespaces": ["kube-system"]}}, "kube-system"),
    ({"watchNamespaces": ["kube-node-lease"]}, "kube-node-lease"),
])
def test_the_runner_is_never_bound_where_a_leader_lease_lives(helm, values, namespace):
    """The runner may patch every Lease where it is bound; the chart refuses to bind it beside a leader's Lease."""
    bad = helm("template", "sx", str(CHART), "--namespace", "sextant-system", values=values, check=False)
    assert bad.returncode != 0 and f"runner's ServiceAccount would be bound in namespace \"{namespace}\"" in bad.stderr
    if namespace == "sextant-system":  # fine without leader election, or without the chart's runner RBAC
        single = {**values, "replicas": 1, "leaderElection": {"enabled": False}}
        assert find(helm.template(single), "RoleBinding", "sx-sextant-runner", namespace)
        assert not find(helm.template({**values, "runner": {**values.get("runner", {}), "rbac": {"create": False}}}),
                        "RoleBinding", "sx-sextant-runner")


def lease_policy(docs: list[dict[str, Any]]) -> tuple[list[str], dict[str, str], list[str]]:
    """The lease admission policy's namespaces, its variables (name → CEL) and its validations' expressions."""
    spec = one(docs, "ValidatingAdmissionPolicy", "sx-sextant-leases")["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [{"apiGroups": ["coordination.k8s.io"], "apiVersions": ["*"],
                                                          "operations": ["CREATE", "UPDATE", "DELETE"],
                                                          "resources": ["leases"]}]
    (selector,) = spec["matchConstraints"]["namespaceSelector"]["matchExpressions"]
    assert selector["key"] == "kubernetes.io/metadata.name" and selector["operator"] == "In"
    binding = one(docs, "ValidatingAdmissionPolicyBinding", "sx-sextant-leases")["spec"]
    assert binding == {"policyName": "sx-sextant-leases", "validationActions": ["Deny"]}
    return (selector["values"], {v["name"]: v["expression"] for v in spec["variables"]},
            [v["expression"] for v in spec["validations"]])


def test_the_lease_admission_policy_keeps_the_leader_lease_the_operators_and_the_runner_to_its_own(helm):
    """On by default: the leader Lease's namespace and the runner's, with its service accounts. Workers write no
    Lease since protocol v2 (their Role has no Lease rights), so the policy names none."""
    namespaces, variables, rules = lease_policy(helm.template())
    assert namespaces == ["sextant-system"] and variables["runners"] == "[]" and "workers" not in variables
    leader = rules[0]
    assert "request.namespace != 'sextant-system' || variables.name != 'sx-sextant'" in leader
    assert "variables.user == 'system:serviceaccount:sextant-system:sx-sextant'" in leader
    assert leader.startswith("request.operation == 'DELETE' ||")  # deleting it takes no leadership; see below

    namespaces, variables, rules = lease_policy(helm.template({**WITH_WORKERS, "leaderElection": {"leaseName": "elected"}}))
    assert sorted(namespaces) == ["billing", "sextant-system", "shop"]  # the runner's (watched) and the leader's
    assert json.loads(variables["runners"]) == ["system:serviceaccount:shop:sextant-runner",
                                                "system:serviceaccount:billing:sextant-runner"]
    assert len(rules) == 2 and "variables.name != 'elected'" in rules[0]
    assert "variables.name == variables.pod" in rules[1]
    assert "worker" not in json.dumps(one(helm.template(WITH_WORKERS), "ValidatingAdmissionPolicy",
                                          "sx-sextant-leases")["spec"])

    # Without leader election there is no leader Lease to guard; the runner is still held to its own.
    _, _, rules = lease_policy(helm.template({**CUSTOM, "leaderElection": {"enabled": False}}))
    assert len(rules) == 1 and "sx-sextant'" not in " ".join(rules)
    off = helm.template({**WITH_WORKERS, "leaseAdmission": {"enabled": False}})
    assert not find(off, "ValidatingAdmissionPolicy", "sx-sextant-leases")
    assert not find(off, "ValidatingAdmissionPolicyBinding", "sx-sextant-leases")


def test_the_job_admission_policy_is_on_by_default_for_every_jobs_create_and_update(helm):
    """sextant.dev/requested-by names the requester itself or nobody (tests/cluster/test_worker_admission.py runs
    it against the API server)."""
    spec = one(helm.template(), "ValidatingAdmissionPolicy", "sx-sextant-jobs")["spec"]
    assert spec["failurePolicy"] == "Fail" and "namespaceSelector" not in spec["matchConstraints"]
    assert spec["matchConstraints"]["resourceRules"] == [{"apiGroups": ["sextant.dev"], "apiVersions": ["*"],
                                                          "operations": ["CREATE", "UPDATE"], "resources": ["jobs"]}]
    assert one(helm.template(), "ValidatingAdmissionPolicyBinding", "sx-sextant-jobs")["spec"] == {
        "policyName": "sx-sextant-jobs", "validationActions": ["Deny"]}
    off = helm.template({"jobAdmission": {"enabled": False}})
    assert not find(off, "ValidatingAdmissionPolicy", "sx-sextant-jobs")
    assert not find(off, "ValidatingAdmissionPolicyBinding", "sx-sextant-jobs")


def test_the_worker_admission_policy_holds_a_pod_to_the_worker_named_after_it(helm):
    """On by default, in every namespace: requests with a pod-bound token other than the operator's may write only
    the Worker named after their pod, in its namespace (tests/cluster/test_worker_admission.py runs it)."""
    spec = one(helm.template(), "ValidatingAdmissionPolicy", "sx-sextant-workers")["spec"]
    assert spec["failurePolicy"] == "Fail" and "namespaceSelector" not in spec["matchConstraints"]
    assert spec["matchConstraints"]["resourceRules"] == [{"apiGroups": ["sextant.dev"], "apiVersions": ["*"],
                                                          "operations": ["CREATE", "UPDATE", "DELETE"],
                                                          "resources": ["workers"]}]
    conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
    assert "'authentication.kubernetes.io/pod-name' in request.userInfo.extra" in conditions["pod-bound-token"]
    assert conditions["not-the-operator"] == "request.userInfo.username != 'system:serviceaccount:sextant-system:sx-sextant'"
    assert one(helm.template(), "ValidatingAdmissionPolicyBinding", "sx-sextant-workers")["spec"] == {
        "policyName": "sx-sextant-workers", "validationActions": ["Deny"]}
    off = helm.template({"workerAdmission": {"enabled": False}})
    assert not find(off, "ValidatingAdmissionPolicy", "sx-sextant-workers")
    assert not find(off, "ValidatingAdmissionPolicyBinding", "sx-sextant-workers")


def test_the_operator_and_the_workers_get_a_priority_level_each(helm):
    """API Priority and Fairness: a limited level for the operator's service account and another for the chart's
    workers' accounts (a busy or hostile worker cannot take the operator's seats), each with its FlowSchema, matched
    before the defaults' service-accounts (9000) and global-default (9900) (tests/cluster/test_flow_control.py sees
    the API server classify them)."""
    docs = helm.template(WITH_WORKERS)
    for name, shares in (("sx-sextant", 100), ("sx-sextant-workers", 50)):
        level = one(docs, "PriorityLevelConfiguration", name)["spec"]
        assert level["type"] == "Limited" and level["limited"]["nominalConcurrencyShares"] == shares
        assert level["limited"]["limitResponse"]["type"] == "Queue"
    operator = one(docs, "FlowSchema", "sx-sextant-operator")["spec"]
    workers = one(docs, "FlowSchema", "sx-sextant-workers")["spec"]
    for schema, level in ((operator, "sx-sextant"), (workers, "sx-sextant-workers")):
        assert schema["priorityLevelConfiguration"] == {"name": level}
        assert 1000 <= schema["matchingPrecedence"] < 9000 and schema["distinguisherMethod"] == {"type": "ByUser"}
    assert operator["rules"][0]["subjects"] == [{"kind": "ServiceAccount", "serviceAccount": {
        "name": "sx-sextant", "namespace": "sextant-system"}}]
    assert workers["rules"][0]["subjects"] == [
        {"kind": "ServiceAccount", "serviceAccount": {"name": "sx-sextant-worker-payments", "namespace": "shop"}},
        {"kind": "ServiceAccount", "serviceAccount": {"name": "sx-sextant-worker-images", "namespace": "billing"}}]
    assert not find(helm.template(), "FlowSchema", "sx-sextant-workers"), "no workers, no workers' FlowSchema"
    assert not find(helm.template(), "PriorityLevelConfiguration", "sx-sextant-workers"), "nor their level"
    tuned = helm.template({**WITH_WORKERS, "flowControl": {
        "nominalConcurrencyShares": 40, "lendablePercent": 0, "workers": {"nominalConcurrencyShares": 7,
                                                                          "lendablePercent": 10}}})
    for name, want in (("sx-sextant", (40, 0)), ("sx-sextant-workers", (7, 10))):
        limited = one(tuned, "PriorityLevelConfiguration", name)["spec"]["limited"]
        assert (limited["nominalConcurrencyShares"], limited["lendablePercent"]) == want
    off = helm.template({**WITH_WORKERS, "flowControl": {"enabled": False}})
    assert not find(off, "PriorityLevelConfiguration") and not find(off, "FlowSchema")
    bad = helm("template", "sx", str(CHART), values={"flowControl": {"matchingPrecedence": 9500}}, check=False)
    assert bad.returncode != 0 and "matchingPrecedence" in bad.stderr, bad.stderr


def test_the_charts_crds_are_the_generated_ones(helm):
    shown = [d for d in yaml.safe_load_all(helm("show", "crds", str(CHART)).stdout) if d]
    generated = [yaml.safe_load(p.read_text()) for p in sorted(CRDS.glob("*.yaml"))]
    key = lambda d: d["metadata"]["name"]  # noqa: E731
    assert sorted(shown, key=key) == sorted(generated, key=key)


def test_kube_score_finds_nothing_critical(helm, tools, tmp_path):
    # No check is ignored: every one of kube-score's default checks applies to the chart and passes, at least at
    # WARNING level (the one-replica render is warned about having few replicas).
    for name, values in (("default", None), ("custom", CUSTOM), ("workers", WITH_WORKERS)):
        manifest = tmp_path / f"{name}.yaml"
        manifest.write_text(helm("template", "sx", str(CHART), "--namespace", "sextant-system", values=values).stdout)
        proc = subprocess.run([tools.kube_score, "score", "--kubernetes-version", "v1.36", "--output-format", "ci",
                               str(manifest)], capture_output=True, text=True, timeout=60)
        critical = [ln for ln in proc.stdout.splitlines() if ln.startswith("[CRITICAL]")]
        assert not critical and proc.returncode == 0, f"{name} values:\n{proc.stdout}{proc.stderr}"
        assert "[OK]" in proc.stdout  # it did score the objects


def worker_parts(docs: list[dict[str, Any]], name: str, namespace: str) -> tuple[dict, dict, list[str]]:
    """A worker's Deployment, its pod spec and its container's args."""
    deployment = one(docs, "Deployment", f"sx-sextant-worker-{name}", namespace)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return deployment, pod, container["args"]


def test_workers_render_a_deployment_each_with_exactly_a_workers_rights(helm):
    docs = helm.template(WITH_WORKERS)
    deployment, pod, args = worker_parts(docs, "payments", "shop")
    container = pod["containers"][0]
    assert deployment["spec"]["replicas"] == 2
    assert container["image"] == "registry.example/payments:2.3" and container["command"] == ["sextant", "worker"]
    assert args == ["--name=$(POD_NAME)", "--namespace=shop", "--queue=emails", "--module=payments.handlers",
                    "--concurrency=16", "--drain-grace=25s", "--metrics-port=9090", "--metrics-host=0.0.0.0"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}  # the worker's name
    assert env["POD_UID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.uid"}}  # its Worker's ownerReference
    assert env["SMTP_HOST"]["value"] == "smtp.example"
    assert container["ports"] == [{"name": "metrics", "containerPort": 9090, "protocol": "TCP"}]
    # SIGTERM drains for drainGrace; the kubelet's SIGKILL comes later, after what is left is stopped and recorded.
    assert pod["terminationGracePeriodSeconds"] == 25 + 15
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"] and sc["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert pod["affinity"]["podAntiAffinity"], "two replicas prefer two nodes"
    assert {"cpu", "memory"} <= set(container["resources"]["limits"])

    # Its own ServiceAccount, bound to a Role in its namespace with the worker's rights and nothing more.
    assert pod["serviceAccountName"] == "sx-sextant-worker-payments"
    one(docs, "ServiceAccount", "sx-sextant-worker-payments", "shop")
    assert rules_of(one(docs, "Role", "sx-sextant-worker-payments", "shop")) == WORKER_RULES
    binding = one(docs, "RoleBinding", "sx-sextant-worker-payments", "shop")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "sx-sextant-worker-payments"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sx-sextant-worker-payments",
                                    "namespace": "shop"}]
    assert not find(docs, "ClusterRoleBinding", "sx-sextant-worker-payments"), "a worker's rights end at its namespace"

    # Two replicas: drained one at a time. Its NetworkPolicy opens only the metrics port; egress is open by default.
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert one(docs, "PodDisruptionBudget", "sx-sextant-worker-payments", "shop")["spec"] == {
        "maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow", "selector": {"matchLabels": selector}}
    policy = one(docs, "NetworkPolicy", "sx-sextant-worker-payments", "shop")["spec"]
    assert policy["podSelector"]["matchLabels"] == selector and policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}]}] and policy["egress"] == [{}]
    # The operator's Service, PDB and NetworkPolicy never select a worker's pods (nor the other way round).
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    op_spec = one(docs, "Deployment", "sx-sextant")["spec"]
    assert not op_spec["selector"]["matchLabels"].items() <= pod_labels.items()
    assert not selector.items() <= op_spec["template"]["metadata"]["labels"].items()

    # Every default: the runner image, all queues and modules unsaid, one replica (no PDB), no ingress. `events:
    # false` is still accepted and changes nothing: since protocol v2 a worker posts no Events.
    _, pod, args = worker_parts(docs, "images", "billing")
    assert pod["containers"][0]["image"] == f"ghcr.io/sextant-dev/sextant-runner:{APP_VERSION}"
    assert args == ["--name=$(POD_NAME)", "--namespace=billing", "--handler=resize-image",
                    "--allow-command=resize-image", "--command-env=IMAGES_BUCKET", "--command-env=MODE=prod",
                    "--drain-grace=1m"]
    assert pod["terminationGracePeriodSeconds"] == 60 + 15
    assert "affinity" not in pod and not find(docs, "PodDisruptionBudget", "sx-sextant-worker-images")
    assert rules_of(one(docs, "Role", "sx-sextant-worker-images", "billing")) == WORKER_RULES
    assert one(docs, "NetworkPolicy", "sx-sextant-worker-images", "billing")["spec"]["ingress"] == []

    # Worker-mode Handlers are rendered as written: no pod template, image or runner ServiceAccount added.
    assert one(docs, "Handler", "charge-card", "shop")["spec"] == {"worker": {}}
    assert one(docs, "Handler", "resize-image", "billing")["spec"] == WORKER_HANDLERS[1]["spec"]
    assert_least_privilege(docs)
    assert_every_rule_commented(helm("template", "sx", str(CHART), "--namespace", "sextant-system",
                                     values=WITH_WORKERS).stdout)


def test_a_workers_pods_run_a_handlers_command_only_when_its_values_allow_it(helm):
    """Issue 28: by default a chart worker runs no Handler's command (whoever may write a Handler could run any in
    its pods); allowCommands true or a list of Handlers opts in, commandEnv passes variables to those commands."""
    def args_of(**worker: Any) -> list[str]:
        return worker_parts(helm.template({"workers": [{"name": "w", **worker}]}), "w", "sextant-system")[2]

    assert not [a for a in args_of() if a.startswith(("--allow-command", "--command-env"))]
    assert not [a for a in args_of(allowCommands=False) if a.startswith("--allow-command")]
    assert "--allow-commands" in args_of(allowCommands=True)
    assert [a for a in args_of(allowCommands=["a", "b"], commandEnv=["SMTP_PASSWORD"])
            if a.startswith(("--allow-command", "--command-env"))] == [
        "--allow-command=a", "--allow-command=b", "--command-env=SMTP_PASSWORD"]


def test_a_worker_can_use_an_existing_service_account_and_a_narrower_network_policy(helm):
    docs = helm.template({"workers": [{"name": "w", "serviceAccount": {"create": False, "name": "mine"},
                                       "terminationGracePeriodSeconds": 26, "replicas": 0,
                                       "networkPolicy": {"egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]}}]})
    _, pod, _ = worker_parts(docs, "w", "sextant-system")
    assert pod["serviceAccountName"] == "mine" and pod["terminationGracePeriodSeconds"] == 26
    assert one(docs, "Deployment", "sx-sextant-worker-w")["spec"]["replicas"] == 0  # scaled to zero stays zero
    assert not find(docs, "ServiceAccount", "mine")
    assert one(docs, "RoleBinding", "sx-sextant-worker-w")["subjects"][0]["name"] == "mine"
    assert one(docs, "NetworkPolicy", "sx-sextant-worker-w")["spec"]["egress"] == [
        {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]
    off = helm.template({"workers": [{"name": "w", "networkPolicy": {"enabled": False}}]})
    assert not find(off, "NetworkPolicy", "sx-sextant-worker-w")


@pytest.mark.parametrize("values,words", [
    ({"workers": [{"name": "w", "drainGrace": "30s", "terminationGracePeriodSeconds": 30}]},
     "workers[w].terminationGracePeriodSeconds (30) must be above drainGrace (30s)"),
    ({"workers": [{"name": "w", "drainGrace": "soon"}]}, "drainGrace"),
    ({"workers": [{"name": "w", "concurrency": 0}]}, "concurrency"),
    ({"workers": [{"name": "W_1"}]}, "name"),
    ({"workers": [{"name": "w", "module": ["x"]}]}, "module"),  # a typo of modules: no unknown keys
    ({"workers": [{"image": "x:1"}]}, "name"),
    ({"watchNamespaces": ["shop"], "workers": [{"name": "w", "namespace": "elsewhere"}]},
     'Worker "w" is in namespace "elsewhere", which the operator does not watch'),
    ({"watchNamespaces": ["shop"], "workers": [{"name": "w"}]},
     'Worker "w" is in namespace "default", which the operator does not watch'),
    ({"handlers": [{"name": "h", "namespace": "jobs",  # not the release's (where the runner may not be bound)
                    "spec": {"worker": {}, "template": {"spec": {"containers": [{"name": "c"}]}}}}]},
     "handlers[h].spec: set exactly one of template (a pod per attempt) and worker"),
    ({"handlers": [{"name": "h", "spec": {"nonRetryableExitCodes": [2]}}]},
     "handlers[h].spec: set exactly one of template (a pod per attempt) and worker"),
    ({"handlers": [{"name": "h", "spec": {"worker": {"command": []}}}]}, "command"),
    ({"workers": [{"name": "w", "allowCommands": "yes"}]}, "allowCommands"),
    ({"workers": [{"name": "w", "allowCommands": ["Not_A_Handler"]}]}, "allowCommands"),
    ({"workers": [{"name": "w", "commandEnv": ["2BAD"]}]}, "commandEnv"),
])  # fmt: skip
def test_worker_values_are_checked(helm, values, words):
    bad = helm("template", "sx", str(CHART), values=values, check=False)
    assert bad.returncode != 0 and words in bad.stderr, bad.stderr


def test_an_autoscaled_worker_gets_a_worker_pool_and_the_operator_may_scale_that_deployment_alone(helm):
    """docs/workers.md, Autoscaling: autoscaling.enabled renders a WorkerPool for the worker's Deployment (its queues,
    handlers and concurrency as the pool's), no replicas in the Deployment (the operator's to set), and a Role that
    lets the operator read and set that Deployment's scale subresource, and mark pods for removal — nothing else."""
    docs = helm.template({"workers": [{"name": "w", "namespace": "shop", "queues": ["emails"], "handlers": ["send"],
                                       "concurrency": 4, "autoscaling": {"enabled": True, "maxReplicas": 6,
                                                                         "scaleDownDelay": "2m"}}],
                          "watchNamespaces": ["shop"]})
    deployment, _, _ = worker_parts(docs, "w", "shop")
    assert "replicas" not in deployment["spec"]
    assert one(docs, "WorkerPool", "sx-sextant-worker-w", "shop")["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "sx-sextant-worker-w"},
        "queues": ["emails"], "handlers": ["send"], "slotsPerWorker": 4, "minReplicas": 0, "maxReplicas": 6,
        "leadTime": "30s", "scaleDownDelay": "2m"}
    role = one(docs, "Role", "sx-sextant-worker-w-scale", "shop")
    assert role["rules"][0] == {"apiGroups": ["apps"], "resources": ["deployments/scale"],
                                "resourceNames": ["sx-sextant-worker-w"], "verbs": ["get", "patch"]}
    assert rules_of(role) == {("apps", "deployments/scale"): {"get", "patch"}, ("", "pods"): {"patch"}}
    binding = one(docs, "RoleBinding", "sx-sextant-worker-w-scale", "shop")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sx-sextant", "namespace": "sextant-system"}]
    assert one(docs, "PodDisruptionBudget", "sx-sextant-worker-w", "shop"), "up to 6 replicas: drained one at a time"
    # Without autoscaling: no WorkerPool, no rights on the Deployment.
    plain = helm.template({"workers": [{"name": "w"}]})
    assert not find(plain, "WorkerPool") and not find(plain, "Role", "sx-sextant-worker-w-scale")
    assert_least_privilege(docs)


@pytest.mark.parametrize("values,words", [
    ({"workers": [{"name": "w", "replicas": 2, "autoscaling": {"enabled": True}}]},
     "workers[w].replicas: not with autoscaling.enabled"),
    ({"workers": [{"name": "w", "autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 2}}]},
     "workers[w].autoscaling.minReplicas (3) must not be greater than maxReplicas (2)"),
    ({"workers": [{"name": "w", "autoscaling": {"enabled": True, "leadTime": "soon"}}]}, "leadTime"),
    ({"workers": [{"name": "w", "autoscaling": {"enabled": True, "max": 3}}]}, "max"),
])  # fmt: skip
def test_autoscaling_values_are_checked(helm, values, words):
    bad = helm("template", "sx", str(CHART), values=values, check=False)
    assert bad.returncode != 0 and words in bad.stderr, bad.stderr


def test_workers_may_run_beside_the_leader_lease_they_cannot_write(helm):
    """Since protocol v2 a worker's Role has no Lease rights: the release's namespace (the leader-election Lease's)
    is fine with or without the lease admission policy, and so are the control plane's namespaces."""
    for values in ({"leaseAdmission": {"enabled": False}, "workers": [{"name": "w"}]},
                   {"workers": [{"name": "w", "namespace": "kube-system"}]}):
        (role,) = find(helm.template(values), "Role", "sx-sextant-worker-w")
        assert ("coordination.k8s.io", "leases") not in rules_of(role)


# ---- install into the real API server -------------------------------------------------------------------------------


def can_i(cluster: Cluster, who: str, verb: str, resource: str, namespace: str | None = None) -> bool:
    """`kubectl auth can-i` as `who`; resource may name a subresource (`jobs.sextant.dev/status`) or one object
    (`leases.coordination.k8s.io:NAME`)."""
    resource, _, name = resource.partition(":")
    resource, _, sub = resource.partition("/")
    args = ["auth", "can-i", verb, f"{resource}/{name}" if name else resource, f"--as={who}"]
    args += ["--subresource", sub] if sub else []
    args += ["-n", namespace] if namespace else ["--all-namespaces"]
    proc = cluster.kubectl(*args, check=False)
    answer = proc.stdout.strip()
    assert answer in ("yes", "no"), f"kubectl {' '.join(args)}: {proc.stdout}{proc.stderr}"
    return answer == "yes"


def check_matrix(cluster: Cluster, who: str, rows: list[tuple[bool, str, str, str | None]]) -> None:
    """Each row: (expected answer, verb, resource, namespace or None for all namespaces); asked in parallel."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda row: can_i(cluster, who, *row[1:]), rows))
    wrong = [f"{'can' if want else 'cannot'} {verb} {res} in {ns or 'all namespaces'}"
             for (want, verb, res, ns), answer in zip(rows, answers) if answer != want]
    assert not wrong, f"{who} should but does not: " + "; ".join(wrong)


@pytest.fixture(scope="module")
def release_namespaces(cluster: Cluster) -> Iterator[dict[str, str]]:
    """The release's namespace (PodSecurity: restricted), two watched namespaces, one the operator must not touch."""
    names = {role: cluster.create_namespace(namespace_name(f"helm-{role}"), wait_service_account=False)
             for role in ("release", "shop", "billing", "other")}
    cluster.kubectl("label", "namespace", names["release"], *RESTRICTED)
    yield names
    for name in names.values():
        cluster.delete_namespace(name)


def installed_objects(cluster: Cluster, manifest: str) -> list[tuple[str, str, str | None]]:
    """(kind, name, namespace) of every object of a release's manifest that the API server has (one kubectl get)."""
    out = cluster.kubectl("get", "-f", "-", "-o", "json", "--ignore-not-found", input=manifest).stdout
    parsed = json.loads(out) if out.strip() else {"items": []}
    items = parsed["items"] if "items" in parsed else [parsed]
    return [(i["kind"], i["metadata"]["name"], i["metadata"].get("namespace")) for i in items]


def test_install_watching_two_namespaces_then_uninstall(cluster, helm, tools, release_namespaces, tmp_path):
    ns = release_namespaces
    # No ServiceMonitor (this cluster has no Prometheus Operator CRDs); a short grace period, so that kwok removes
    # the operator's pods soon after the uninstall.
    values = {**CUSTOM, **ON_KWOK, "replicas": 2, "serviceMonitor": {"enabled": False},
              "terminationGracePeriodSeconds": 1, "watchNamespaces": [ns["shop"], ns["billing"]],
              "queues": [{**q, "namespace": ns[q["namespace"]]} for q in CUSTOM["queues"]],
              "handlers": [{**h, "namespace": ns[h["namespace"]]} for h in WITH_WORKERS["handlers"]],
              "workers": [{**w, **ON_KWOK, "namespace": ns[w["namespace"]], "drainGrace": "1s",
                           "terminationGracePeriodSeconds": 2}
                          for w in WORKERS]}
    on_cluster = Helm(tools, tmp_path, cluster.kubeconfig)
    release, sa = "sxns", f"system:serviceaccount:{ns['release']}:sxns-sextant"
    lease = "leases.coordination.k8s.io:sxns-sextant"  # the leader-election Lease: named after the release
    # PodSecurity "restricted" warns about the workers' Deployments in the watched namespaces, if they fall short.
    for n in (ns["shop"], ns["billing"]):
        cluster.kubectl("label", "--overwrite", "namespace", n, "pod-security.kubernetes.io/warn=restricted")
    install = on_cluster("install", release, str(CHART), "--namespace", ns["release"], values=values)
    assert "Warning" not in install.stderr and "PodSecurity" not in install.stderr, install.stderr
    assert "It watches the namespaces" in install.stdout  # NOTES.txt
    manifest = on_cluster("get", "manifest", release, "--namespace", ns["release"]).stdout
    expected = [(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace"))
                for d in yaml.safe_load_all(manifest) if d]
    assert len(expected) > 20
    assert sorted(installed_objects(cluster, manifest)) == sorted(expected)  # every object validated and stored

    # The operator's pods are admitted in a namespace enforcing PodSecurity "restricted" (kwok runs none of them).
    def pods() -> list[dict]:
        out = cluster.kubectl("get", "pods", "-n", ns["release"], "-l", "app.kubernetes.io/instance=sxns",
                              "-o", "json").stdout
        return json.loads(out)["items"]

    wait_for(lambda: len(pods()) == 2, 30, message="the Deployment's two pods to be created and admitted")

    def worker_pods(namespace: str) -> list[dict]:
        out = cluster.kubectl("get", "pods", "-n", namespace, "-l", "app.kubernetes.io/name=sextant-worker",
                              "-o", "json").stdout
        return json.loads(out)["items"]

    wait_for(lambda: len(worker_pods(ns["shop"])) == 2 and len(worker_pods(ns["billing"])) == 1, 30,
             message="the workers' pods (2 in shop, 1 in billing) to be created")

    # What the operator's service account can do, and what it cannot.
    shop, billing, other, home = ns["shop"], ns["billing"], ns["other"], ns["release"]
    check_matrix(cluster, sa, [
        # its work, in each watched namespace
        *[(True, verb, "jobs.sextant.dev", n) for verb in ("get", "list", "watch", "create", "delete")
          for n in (shop, billing)],
        *[(True, verb, f"{kind}.sextant.dev", shop) for verb in ("list", "watch")
          for kind in ("queues", "handlers", "schedules")],
        *[(True, verb, "jobs.sextant.dev/status", shop) for verb in ("update", "patch")],
        (True, "update", "schedules.sextant.dev/status", billing),
        (True, "patch", "queues.sextant.dev/status", shop),  # the queue's live numbers (controller/queuestatus.py)
        # Workers: read, their status (assignments), the finalizer (a patch), expired ones deleted; never a create
        *[(True, verb, "workers.sextant.dev", n) for verb in ("get", "list", "watch", "patch", "delete")
          for n in (shop, billing)],
        (True, "patch", "workers.sextant.dev/status", shop),
        (False, "create", "workers.sextant.dev", shop),
        (False, "update", "workers.sextant.dev/status", shop),
        *[(True, verb, "pods", n) for verb in ("create", "delete", "list", "watch") for n in (shop, billing)],
        (True, "list", "leases.coordination.k8s.io", shop),
        (True, "watch", "leases.coordination.k8s.io", billing),
        # leader election in its own namespace; the HTTP API's auth reviews
        (True, "create", "leases.coordination.k8s.io", home),
        *[(True, verb, lease, home) for verb in ("get", "update")],
        (True, "create", "tokenreviews.authentication.k8s.io", None),
        (True, "create", "subjectaccessreviews.authorization.k8s.io", None),
        # never Secrets (nor ConfigMaps), anywhere
        *[(False, verb, "secrets", n) for verb in ("get", "list", "watch") for n in (shop, home, other, None)],
        (False, "get", "configmaps", shop),
        # never a Job's spec: only its status
        *[(False, verb, "jobs.sextant.dev", n) for verb in ("update", "patch") for n in (shop, billing)],
        (False, "patch", "schedules.sextant.dev/status", shop),
        (False, "update", "queues.sextant.dev", shop),
        (False, "update", "queues.sextant.dev/status", shop),
        # pods: no changing them, no exec
        (False, "patch", "pods", shop),
        (False, "create", "pods/exec", shop),
        # nothing in a namespace it does not watch, nor cluster-wide
        *[(False, verb, "pods", n) for verb in ("create", "delete", "list") for n in (other, home)],
        (False, "list", "jobs.sextant.dev", other),
        (False, "create", "jobs.sextant.dev", other),
        (False, "create", "events", other),
        (False, "list", "pods", None),
        (False, "list", "jobs.sextant.dev", None),
        # leader election is confined: its one Lease (no other, no listing, no deleting), its namespace only
        (False, "get", "leases.coordination.k8s.io:kube-scheduler", home),
        (False, "update", "leases.coordination.k8s.io:someone-else", home),
        (False, "list", "leases.coordination.k8s.io", home),
        (False, "delete", lease, home),
        (False, "create", "leases.coordination.k8s.io", other),
        # no escalation
        (False, "create", "rolebindings.rbac.authorization.k8s.io", shop),
        (False, "bind", "clusterroles.rbac.authorization.k8s.io", None),
        (False, "impersonate", "serviceaccounts", shop),
        (False, "create", "serviceaccounts/token", shop),
    ])  # fmt: skip
    # The runner's service account (job pods): its attempt's Lease and chained jobs, in its own namespace only.
    check_matrix(cluster, f"system:serviceaccount:{shop}:sextant-runner", [
        *[(True, verb, "leases.coordination.k8s.io", shop) for verb in ("create", "get", "patch")],
        (True, "create", "jobs.sextant.dev", shop),
        (True, "get", "jobs.sextant.dev", shop),
        (True, "list", "jobs.sextant.dev", shop),  # chaining finds the job holding an idempotency key by any name
        (False, "watch", "jobs.sextant.dev", shop),
        (False, "delete", "leases.coordination.k8s.io", shop),
        (False, "patch", "jobs.sextant.dev", shop),
        (False, "create", "pods", shop),
        (False, "get", "secrets", shop),
        (False, "create", "leases.coordination.k8s.io", billing),
        # never the operator's leader-election Lease: not bound in the release's namespace (the chart refuses that)
        *[(False, verb, lease, home) for verb in ("get", "patch", "update")],
    ])  # fmt: skip

    # A worker's service account (protocol v2): its namespace's jobs (read, create), Queues and Handlers, Workers
    # (its own, by the worker admission policy: tests/cluster/test_worker_admission.py); nothing else, nowhere else.
    worker_sa = f"system:serviceaccount:{shop}:sxns-sextant-worker-payments"
    check_matrix(cluster, worker_sa, [
        *[(True, verb, "jobs.sextant.dev", shop) for verb in ("get", "list", "watch", "create")],
        *[(True, verb, f"{kind}.sextant.dev", shop) for verb in ("get", "list", "watch")
          for kind in ("queues", "handlers")],
        *[(True, verb, "workers.sextant.dev", shop) for verb in ("get", "list", "watch", "create", "patch", "delete")],
        # never a Job's spec or status (the operator records every attempt), nor deleting jobs; never a Worker's status
        *[(False, verb, "jobs.sextant.dev", shop) for verb in ("update", "patch", "delete")],
        *[(False, verb, "jobs.sextant.dev/status", shop) for verb in ("update", "patch")],
        *[(False, verb, "workers.sextant.dev/status", shop) for verb in ("update", "patch")],
        # no Leases at all (not the leader's, not another worker's), no Events
        *[(False, verb, "leases.coordination.k8s.io", shop) for verb in ("get", "create", "update", "delete")],
        (False, "create", "events", shop),
        (False, "update", "queues.sextant.dev", shop),
        (False, "list", "schedules.sextant.dev", shop),
        # no pods, no Secrets or ConfigMaps, no listing Leases (its own is named), no escalation
        *[(False, verb, "pods", shop) for verb in ("create", "delete", "list")],
        (False, "create", "pods/exec", shop),
        *[(False, verb, "secrets", shop) for verb in ("get", "list")],
        (False, "get", "configmaps", shop),
        (False, "create", "rolebindings.rbac.authorization.k8s.io", shop),
        (False, "create", "serviceaccounts/token", shop),
        # nothing in another namespace, nor cluster-wide
        *[(False, verb, "jobs.sextant.dev", n) for verb in ("list", "create") for n in (billing, home, other)],
        *[(False, "create", "workers.sextant.dev", n) for n in (billing, home)],
        (False, "update", lease, home),  # never the operator's leader-election Lease
        (False, "list", "jobs.sextant.dev", None),
    ])  # fmt: skip
    check_matrix(cluster, f"system:serviceaccount:{billing}:sxns-sextant-worker-images", [
        (True, "create", "workers.sextant.dev", billing),
        (False, "create", "workers.sextant.dev", shop),
    ])  # fmt: skip

    # The operator itself as that service account (run here; kwok runs none of its pods): the chart's RBAC is all it
    # needs to take a job from the first list to the last status write, with leader election on the chart's Lease.
    token = cluster.kubectl("create", "token", "sxns-sextant", "-n", home).stdout.strip()
    op = Operator(token_kubeconfig(cluster, token, tmp_path / "sa-kubeconfig"), shop, tmp_path / "op", "--no-events",
                  "--leader-elect", "--leader-election-namespace", home, "--leader-election-name", "sxns-sextant")
    op.log_path.parent.mkdir(parents=True, exist_ok=True)
    apply(cluster, shop, queue("q"), handler("h"), job("job-as-the-chart-sa"))
    op.start()
    # ... and a real `sextant worker` as the chart's worker account: registering its Worker, running a job of a
    # command handler, reporting its result, and deleting its Worker when it stops. Its token is bound to one of the
    # Deployment's pods and it is named after that pod, as in that pod: the worker admission policy lets a pod's
    # token write only the Worker named after that pod.
    worker_name = worker_pods(shop)[0]["metadata"]["name"]
    worker_token = cluster.kubectl("create", "token", "sxns-sextant-worker-payments", "-n", shop,
                                   "--bound-object-kind=Pod", f"--bound-object-name={worker_name}").stdout.strip()
    worker = WorkerProcess(token_kubeconfig(cluster, worker_token, tmp_path / "worker-kubeconfig"), shop,
                           worker_name, tmp_path, "--queue", "q", "--allow-command", "echo")
    apply(cluster, shop, {"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler", "metadata": {"name": "echo"},
                          "spec": {"worker": {"command": ["cat"]}}},
          job("job-on-the-chart-worker", "q", "echo", payload={"orderId": 7}))
    worker.start()
    try:
        wait_state(cluster, shop, "job-as-the-chart-sa", "succeeded", timeout=90)
        assert "Forbidden" not in op.log_tail(200) and " 403 " not in op.log_tail(200), op.log_tail()
        done = wait_state(cluster, shop, "job-on-the-chart-worker", "succeeded", timeout=90)
        assert done["attempts"][-1]["worker"].startswith(f"{worker_name}/")
        worker.stop()
        assert worker.proc is not None and worker.proc.returncode == 0, worker.log()[-3000:]
        assert "Forbidden" not in worker.log() and " 403 " not in worker.log(), worker.log()[-3000:]
        wait_for(lambda: not cluster.kubectl("get", "workers.sextant.dev", "-n", shop, worker_name,
                                             "--ignore-not-found", "-o", "name").stdout.strip(), 30,
                 message="a stopped worker deletes its Worker (the operator then drops the finalizer)")
    finally:
        worker.kill()
        op.stop()

    # Uninstall: every object goes (the Deployment's ReplicaSet and pods with it), the CRDs stay.
    on_cluster("uninstall", release, "--namespace", ns["release"])
    wait_for(lambda: not installed_objects(cluster, manifest), 30, message="the release's objects to be deleted")
    wait_for(lambda: not pods(), 30, message="the operator's pods to be deleted")
    wait_for(lambda: not worker_pods(ns["shop"]) and not worker_pods(ns["billing"]), 30,
             message="the workers' pods to be deleted")
    for kind in ("deployments", "replicasets", "services", "serviceaccounts", "roles", "rolebindings",
                 "networkpolicies", "poddisruptionbudgets", "queues.sextant.dev", "handlers.sextant.dev"):
        for n in (home, shop, billing):
            left = cluster.kubectl("get", kind, "-n", n, "-l", "app.kubernetes.io/instance=sxns", "-o", "name").stdout
            assert not left.strip(), f"left behind in {n}: {left}"
    for kind in ("clusterroles", "clusterrolebindings"):
        left = cluster.kubectl("get", kind, "-l", "app.kubernetes.io/instance=sxns", "-o", "name").stdout
        assert not left.strip(), f"left behind: {left}"
    assert not cluster.kubectl("get", "secrets", "-n", home, "-l", "owner=helm", "-o", "name").stdout.strip()
    crds = cluster.kubectl("get", "crd", "-o", "name").stdout.split()
    assert {f"customresourcedefinition.apiextensions.k8s.io/{p.stem}" for p in CRDS.glob("*.yaml")} <= set(crds)


def test_install_watching_every_namespace(cluster, helm, tools, release_namespaces, tmp_path):
    ns = release_namespaces
    on_cluster = Helm(tools, tmp_path, cluster.kubeconfig)
    release, sa = "sxall", f"system:serviceaccount:{ns['release']}:sxall-sextant"
    on_cluster("install", release, str(CHART), "--namespace", ns["release"], values=ON_KWOK)
    try:
        assert "It watches every namespace" in on_cluster("get", "notes", release, "-n", ns["release"]).stdout
        # The NetworkPolicy's egress, looked up at install: the kubernetes Service's endpoints and its own address,
        # on their ports; nothing else (no DNS, no other address).
        out = cluster.kubectl("get", "endpointslice", "-n", "default", "kubernetes", "-o", "json").stdout
        endpoints = json.loads(out)
        service = json.loads(cluster.kubectl("get", "service", "-n", "default", "kubernetes", "-o", "json").stdout)
        addresses = [a for e in endpoints["endpoints"] for a in e["addresses"]] + [service["spec"]["clusterIP"]]
        ports = [p["port"] for p in endpoints["ports"]] + [p["port"] for p in service["spec"]["ports"]]
        policy = json.loads(cluster.kubectl("get", "networkpolicy", "-n", ns["release"], "sxall-sextant", "-o",
                                            "json").stdout)["spec"]
        assert policy["egress"] == [{"to": [{"ipBlock": {"cidr": f"{a}/32"}} for a in dict.fromkeys(addresses)],
                                     "ports": [{"port": p, "protocol": "TCP"} for p in dict.fromkeys(ports)]}], policy
        check_matrix(cluster, sa, [
            (True, "list", "jobs.sextant.dev", None),
            (True, "watch", "pods", None),
            *[(True, "create", "pods", n) for n in (ns["other"], ns["shop"])],
            (True, "update", "jobs.sextant.dev/status", ns["other"]),
            (True, "create", "events", ns["other"]),
            *[(False, verb, "secrets", n) for verb in ("get", "list") for n in (ns["other"], None)],
            *[(False, verb, "jobs.sextant.dev", n) for verb in ("update", "patch") for n in (ns["other"], None)],
            (False, "patch", "pods", None),
            (False, "create", "leases.coordination.k8s.io", ns["other"]),  # leader election: its namespace only
            (True, "create", "leases.coordination.k8s.io", ns["release"]),
        ])  # fmt: skip
    finally:
        on_cluster("uninstall", release, "--namespace", ns["release"], check=False)


class AsToken:
    """The API server's Lease API as the holder of one bearer token (a service account's), nothing of the admin's:
    each call returns the response, refusals included."""

    def __init__(self, cluster: Cluster, token: str) -> None:
        server = yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]
        ca = server.get("certificate-authority-data")
        trust = ssl.create_default_context(cafile=server.get("certificate-authority"),
                                           cadata=base64.b64decode(ca).decode() if ca else None)
        self.http = httpx.Client(base_url=server["server"], verify=trust, timeout=10,
                                 headers={"Authorization": f"Bearer {token}"})

    @staticmethod
    def leases(namespace: str) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    def create(self, namespace: str, name: str, holder: str, seconds: int = 15,
               dry_run: bool = False) -> httpx.Response:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
                "spec": {"holderIdentity": holder, "leaseDurationSeconds": seconds}}
        return self.http.post(self.leases(namespace), params={"dryRun": "All"} if dry_run else None, json=body)

    def replace(self, namespace: str, name: str, holder: str, seconds: int = 15) -> httpx.Response:
        """A PUT at the resourceVersion just read (the caller may read every Lease), as the operator renews."""
        got = self.http.get(f"{self.leases(namespace)}/{name}")
        assert got.status_code == 200, got.text
        lease = got.json()
        lease["spec"].update(holderIdentity=holder, leaseDurationSeconds=seconds)
        return self.http.put(f"{self.leases(namespace)}/{name}", json=lease)

    def patch(self, namespace: str, name: str, holder: str) -> httpx.Response:
        return self.http.patch(f"{self.leases(namespace)}/{name}", json={"spec": {"holderIdentity": holder}},
                               headers={"Content-Type": "application/merge-patch+json"})

    def delete(self, namespace: str, name: str) -> httpx.Response:
        return self.http.delete(f"{self.leases(namespace)}/{name}")


def assert_refused(response: httpx.Response, message: str) -> None:
    """A 403 from the lease admission policy, saying `message`."""
    assert response.status_code == 403, f"{response.status_code}: {response.text}"
    text = response.json()["message"]
    assert "ValidatingAdmissionPolicy 'sxlease-sextant-leases'" in text and message in text, text


def assert_forbidden_by_rbac(response: httpx.Response) -> None:
    """A 403 from RBAC (no rule allows it), not from an admission policy."""
    assert response.status_code == 403, f"{response.status_code}: {response.text}"
    text = response.json()["message"]
    assert "cannot" in text and "ValidatingAdmissionPolicy" not in text, text


def test_no_token_but_the_operators_writes_the_leader_lease_and_a_worker_writes_no_lease(cluster, tools,
                                                                                          release_namespaces, tmp_path):
    """A worker's handler has its pod's service account token; by default that pod runs in the release's namespace,
    where the operator's leader-election Lease lives. Since protocol v2 a worker's Role has no Lease rights at all:
    every Lease write of its token is refused (403), the leader's and its own old sextant-worker-<pod> alike. An
    account that does have Lease rights there (one of the user's, here `intruder`) is still refused the leader Lease
    by the lease admission policy; the operator's account writes it as before. The runner's account writes only its
    attempt's Lease. And the namespace can still be deleted with the release in it (the namespace controller deletes
    the guarded Lease)."""
    shop = release_namespaces["shop"]
    home = cluster.create_namespace(namespace_name("helm-lease"))
    on_cluster = Helm(tools, tmp_path, cluster.kubeconfig)
    release, leader = "sxlease", "sxlease-sextant"
    operator_user = f"system:serviceaccount:{home}:{release}-sextant"
    worker_sa = f"{release}-sextant-worker-w"
    worker_user = f"system:serviceaccount:{home}:{worker_sa}"
    values = {**ON_KWOK, "replicas": 1, "terminationGracePeriodSeconds": 1, "runner": {"namespaces": [shop]},
              "workers": [{"name": "w", **ON_KWOK, "drainGrace": "1s", "terminationGracePeriodSeconds": 2}]}
    on_cluster("install", release, str(CHART), "--namespace", home, values=values)
    runner_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "job-a-1"},
                  "spec": {"serviceAccountName": "sextant-runner", **ON_KWOK,
                           "containers": [{"name": "handler", "image": "registry.example/h:1"}]}}
    try:
        # The worker's pod (kwok runs no process in it) and a token bound to it, as the kubelet mounts one.
        def worker_pods() -> list[str]:
            out = cluster.kubectl("get", "pods", "-n", home, "-l", "sextant.dev/worker-deployment=w,"
                                  f"app.kubernetes.io/instance={release}", "-o", "json").stdout
            return [p["metadata"]["name"] for p in json.loads(out)["items"]]

        (pod,) = wait_for(worker_pods, 30, message="the worker's pod to be created")
        worker = AsToken(cluster, cluster.kubectl("create", "token", worker_sa, "-n", home, "--bound-object-kind=Pod",
                                                  f"--bound-object-name={pod}").stdout.strip())
        operator = AsToken(cluster, cluster.kubectl("create", "token", f"{release}-sextant", "-n", home).stdout.strip())
        # An account of the user's with every Lease right in the release's namespace.
        cluster.kubectl("create", "serviceaccount", "intruder", "-n", home)
        cluster.kubectl("create", "role", "leases", "-n", home, "--verb=get,create,update,delete",
                        "--resource=leases.coordination.k8s.io")
        cluster.kubectl("create", "rolebinding", "intruder", "-n", home, "--role=leases",
                        f"--serviceaccount={home}:intruder")
        intruder = AsToken(cluster, cluster.kubectl("create", "token", "intruder", "-n", home).stdout.strip())
        wait_for(lambda: can_i(cluster, f"system:serviceaccount:{home}:intruder", "create",
                               "leases.coordination.k8s.io", home), 30, message="the intruder's Role to be in force")
        only_operator = (f"Lease {home}/{leader} is the operator's leader-election Lease: only {operator_user} may "
                         f"write it, not system:serviceaccount:{home}:intruder")
        wait_for(lambda: intruder.create(home, leader, "intruder", 999999999, dry_run=True).status_code == 403, 30,
                 message="the lease admission policy to be in force")
        assert_refused(intruder.create(home, leader, "intruder", 999999999), only_operator)
        assert cluster.kubectl("get", "lease", "-n", home, leader, check=False).returncode != 0
        assert operator.create(home, leader, "sxlease-op").status_code == 201
        assert_refused(intruder.replace(home, leader, "intruder", 999999999), only_operator)
        assert operator.replace(home, leader, "sxlease-op").status_code == 200  # the operator renews it as before

        # The worker's token: no Lease at all, by RBAC (no policy needed), whichever Lease it names.
        assert not can_i(cluster, worker_user, "create", "leases.coordination.k8s.io", home)
        assert_forbidden_by_rbac(worker.create(home, leader, "intruder", 999999999))
        assert_forbidden_by_rbac(worker.patch(home, leader, "intruder"))
        assert_forbidden_by_rbac(worker.delete(home, leader))
        assert_forbidden_by_rbac(worker.create(home, f"sextant-worker-{pod}", f"{pod}/1"))
        spec = json.loads(cluster.kubectl("get", "lease", "-n", home, leader, "-o", "json").stdout)["spec"]
        assert spec["holderIdentity"] == "sxlease-op" and spec["leaseDurationSeconds"] == 15

        # The runner's account in a job pod: its attempt's Lease (named as the pod), created and renewed by patch.
        apply(cluster, shop, runner_pod)
        runner = AsToken(cluster, cluster.kubectl("create", "token", "sextant-runner", "-n", shop,
                                                  "--bound-object-kind=Pod", "--bound-object-name=job-a-1").stdout.strip())
        assert runner.create(shop, "job-a-1", "job-a-1").status_code == 201
        assert runner.patch(shop, "job-a-1", "job-a-1").status_code == 200
        assert_refused(runner.create(shop, "job-b-1", "job-b-1"),
                       f"system:serviceaccount:{shop}:sextant-runner is the Sextant runner's service account: it may "
                       "write only its attempt's Lease, job-a-1, not job-b-1")
        unbound = AsToken(cluster, cluster.kubectl("create", "token", "sextant-runner", "-n", shop).stdout.strip())
        assert_refused(unbound.create(shop, "job-a-2", "job-a-2"), "and its token is bound to no pod")

        # Deleting the release's namespace, policy in force: the namespace controller (whatever its user: here the
        # cluster's admin) deletes the leader Lease with it.
        cluster.kubectl("delete", "namespace", home, "--wait=false")
        wait_for(lambda: cluster.kubectl("get", "namespace", home, check=False).returncode != 0, 90,
                 message=lambda: "the release's namespace to be deleted: "
                 + cluster.kubectl("get", "namespace", home, "-o", "jsonpath={.status.conditions}", check=False).stdout)
    finally:
        # The release's record went with its namespace: what it made elsewhere is deleted by its labels.
        cluster.kubectl("delete", "-n", shop, "pod,lease", "job-a-1", "--ignore-not-found", "--wait=false", check=False)
        cluster.kubectl("delete", "-n", shop, "serviceaccount,rolebinding", "-l", f"app.kubernetes.io/instance={release}",
                        check=False)
        cluster.kubectl("delete", "clusterrole,clusterrolebinding,validatingadmissionpolicy,"
                        "validatingadmissionpolicybinding,flowschema,prioritylevelconfiguration", "-l",
                        f"app.kubernetes.io/instance={release}", check=False)
        cluster.delete_namespace(home)


def test_the_restricting_policy_admits_worker_mode_handlers_and_still_checks_pod_templates(cluster, tools,
                                                                                          release_namespaces,
                                                                                          tmp_path):
    """Issue 28: handlerAdmission.restrict read object.spec.template.spec with failurePolicy Fail, so once enabled it
    refused every worker-mode Handler. A worker-mode Handler makes no pod: it passes (from an author who may not
    create pods too, with or without a command, in a namespace enforcing "restricted" without a warning), while a
    pod template is still held to the policy's rules."""
    ns = release_namespaces
    on_cluster = Helm(tools, tmp_path, cluster.kubeconfig)
    release = "sxwpol"
    values = {**ON_KWOK, "replicas": 1, "watchNamespaces": [ns["shop"]], "flowControl": {"enabled": False},
              "handlerAdmission": {"restrict": {"enabled": True}}}
    handlers = cluster.create_namespace(namespace_name("helm-worker-handlers"))
    cluster.kubectl("label", "namespace", handlers, "pod-security.kubernetes.io/enforce=restricted")
    on_cluster("install", release, str(CHART), "--namespace", ns["release"], values=values)
    try:
        cluster.kubectl("create", "serviceaccount", "-n", handlers, "no-pods")
        cluster.kubectl("create", "role", "-n", handlers, "no-pods", "--verb=create,get,update,patch",
                        "--resource=handlers.sextant.dev")
        cluster.kubectl("create", "rolebinding", "-n", handlers, "no-pods", "--role=no-pods",
                        f"--serviceaccount={handlers}:no-pods")
        no_pods = f"system:serviceaccount:{handlers}:no-pods"
        wait_for(lambda: can_i(cluster, no_pods, "create", "handlers.sextant.dev", handlers), 30,
                 message=f"{no_pods} to be allowed to create Handlers")

        def handler_of(name: str, spec: dict[str, Any]) -> str:
            return yaml.safe_dump({"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler",
                                   "metadata": {"name": name}, "spec": spec})

        def create(text: str, who: str | None = None, dry_run: bool = False) -> subprocess.CompletedProcess[str]:
            return cluster.kubectl("create", "-n", handlers, "-f", "-", *(["--as", who] if who else []),
                                   *(["--dry-run=server"] if dry_run else []), input=text, check=False)

        pod_mode = handler_of("pod-mode", {"template": {"spec": {"containers": [
            {"name": "handler", "image": "registry.example/h:1", "securityContext": {"privileged": True}}]}}})
        # The policy is in force: a pod template from an author who may not create pods is refused ...
        refused = wait_for(lambda: "ValidatingAdmissionPolicy" in (p := create(pod_mode, no_pods, True)).stderr
                           and p, 30, message="the restricting policy to take effect")
        assert refused.returncode != 0 and f"{no_pods} may not create pods in namespace {handlers}" in refused.stderr
        warned = create(pod_mode, dry_run=True)  # ... and a privileged one warned about, from an admin
        assert warned.returncode == 0 and "PodSecurity" in warned.stderr, warned.stderr
        # ... while worker-mode Handlers pass, whoever writes them, and warn of nothing.
        by_admin = create(handler_of("by-admin", {"worker": {"command": ["true"]}}), dry_run=True)
        assert by_admin.returncode == 0 and "Warning" not in by_admin.stderr, by_admin.stderr
        for name, worker in (("sdk-function", {}), ("a-command", {"command": ["python", "-m", "images.resize"]})):
            made = create(handler_of(name, {"worker": worker}), no_pods)
            assert made.returncode == 0, made.stderr
            assert "Warning" not in made.stderr and "ValidatingAdmissionPolicy" not in made.stderr, made.stderr
        changed = cluster.kubectl("patch", "-n", handlers, "handlers.sextant.dev", "sdk-function", "--as", no_pods,
                                  "--type=merge", "-p", '{"spec":{"worker":{"command":["true"]}}}', check=False)
        assert changed.returncode == 0, changed.stderr
        # A worker Handler turned into a pod template is a pod template: refused for this author.
        to_pods = cluster.kubectl("patch", "-n", handlers, "handlers.sextant.dev", "a-command", "--as", no_pods,
                                  "--type=json", "-p", json.dumps([
                                      {"op": "remove", "path": "/spec/worker"},
                                      {"op": "add", "path": "/spec/template", "value": {"spec": {"containers": [
                                          {"name": "handler", "image": "registry.example/h:1"}]}}}]), check=False)
        assert to_pods.returncode != 0 and "may not create pods" in to_pods.stderr, to_pods.stderr
        names = cluster.kubectl("get", "-n", handlers, "handlers.sextant.dev", "-o", "name").stdout.split()
        assert sorted(n.rsplit("/", 1)[1] for n in names) == ["a-command", "sdk-function"]
    finally:
        on_cluster("uninstall", release, "--namespace", ns["release"], check=False)
        cluster.delete_namespace(handlers)


def test_handler_admission_policies_and_a_certificate_kept_across_upgrades(cluster, tools, release_namespaces,
                                                                          tmp_path):
    ns = release_namespaces
    on_cluster = Helm(tools, tmp_path, cluster.kubeconfig)
    release = "sxpol"
    values = {**ON_KWOK, "replicas": 1, "watchNamespaces": [ns["shop"]],
              "handlerAdmission": {"restrict": {"enabled": True, "serviceAccounts": ["default", "reports"]}}}
    handlers = cluster.create_namespace(namespace_name("helm-handlers"))
    cluster.kubectl("label", "namespace", handlers, "pod-security.kubernetes.io/enforce=restricted")
    on_cluster("install", release, str(CHART), "--namespace", ns["release"], values=values)
    try:
        # The certificate the chart made serves a real operator's port, trusted through the Secret's ca.crt ...
        def tls_secret() -> dict[str, str]:
            out = cluster.kubectl("get", "secret", "-n", ns["release"], f"{release}-sextant-tls", "-o", "json").stdout
            return {k: base64.b64decode(v).decode() for k, v in json.loads(out)["data"].items()}

        pem = tls_secret()
        for name in ("tls.crt", "tls.key", "ca.crt"):
            (tmp_path / name).write_text(pem[name])
        op = Operator(cluster.kubeconfig, ns["shop"], tmp_path / "op", "--http-tls-cert", str(tmp_path / "tls.crt"),
                      "--http-tls-key", str(tmp_path / "tls.key"))
        op.log_path.parent.mkdir(parents=True, exist_ok=True)
        op.start()
        try:
            trust = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
            url = f"https://127.0.0.1:{op.http_port}"
            wait_for(lambda: httpx.get(f"{url}/readyz", verify=trust, timeout=2).status_code == 200, 60,
                     message=lambda: f"the operator to be ready on its HTTPS port; log:\n{op.log_tail()}")
            assert httpx.get(f"{url}/v2/openapi.json", verify=trust, timeout=10).json()["openapi"].startswith("3.")
        finally:
            op.stop()
        # ... and an upgrade keeps it (clients keep trusting its CA).
        on_cluster("upgrade", release, str(CHART), "--namespace", ns["release"], values=values)
        assert tls_secret() == pem

        def handler_yaml(name: str, pod: dict[str, Any] | None = None, container: dict[str, Any] | None = None) -> str:
            spec = {"containers": [{"name": "handler", "image": "registry.example/h:1", **(container or {})}],
                    **(pod or {})}
            return yaml.safe_dump({"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler",
                                   "metadata": {"name": name}, "spec": {"template": {"spec": spec}}})

        def create(text: str, namespace: str = handlers, who: str | None = None,
                   dry_run: bool = False) -> subprocess.CompletedProcess[str]:
            args = ["create", "-n", namespace, "-f", "-", *(["--as", who] if who else []),
                    *(["--dry-run=server"] if dry_run else [])]
            return cluster.kubectl(*args, input=text, check=False)

        # Warn: a privileged template in a namespace enforcing "restricted" (its pods would be refused).
        privileged = handler_yaml("privileged", {"hostNetwork": True}, {"securityContext": {"privileged": True}})
        warned = wait_for(lambda: (p := create(privileged, dry_run=True)).returncode == 0 and "Warning" in p.stderr
                          and p, 30, message="the Pod Security warning policy to take effect")
        assert 'its pods would violate PodSecurity "restricted:latest"' in warned.stderr
        assert 'privileged (container "handler" must not set securityContext.privileged=true)' in warned.stderr
        assert "host namespaces (hostNetwork=true)" in warned.stderr
        made = create(privileged)
        assert made.returncode == 0 and "PodSecurity" in made.stderr  # a warning, never a refusal
        quiet = create(handler_yaml("plain"))  # the operator's defaults meet "restricted": nothing to say
        assert quiet.returncode == 0 and "Warning" not in quiet.stderr, quiet.stderr
        elsewhere = create(privileged, namespace=ns["shop"])  # enforces nothing
        assert elsewhere.returncode == 0 and "Warning" not in elsewhere.stderr, elsewhere.stderr

        # Restrict: a Handler needs its author to be allowed pods, and a service account on the allow-list.
        for sa, resources in (("no-pods", "handlers.sextant.dev"), ("pod-author", "handlers.sextant.dev,pods")):
            cluster.kubectl("create", "serviceaccount", "-n", handlers, sa)
            cluster.kubectl("create", "role", "-n", handlers, sa, "--verb=create,get,update,patch",
                            f"--resource={resources}")
            cluster.kubectl("create", "rolebinding", "-n", handlers, sa, f"--role={sa}",
                            f"--serviceaccount={handlers}:{sa}")
        no_pods, author = (f"system:serviceaccount:{handlers}:{sa}" for sa in ("no-pods", "pod-author"))
        for who in (no_pods, author):  # RBAC first (the authorizer's cache), so that a refusal below is the policy's
            wait_for(lambda: can_i(cluster, who, "create", "handlers.sextant.dev", handlers), 30,
                     message=f"{who} to be allowed to create Handlers")
        refused = wait_for(lambda: "ValidatingAdmissionPolicy" in (p := create(handler_yaml("mine"), who=no_pods,
                                                                                dry_run=True)).stderr and p, 30,
                           message="the restricting policy to take effect")
        assert f"{no_pods} may not create pods in namespace {handlers}, so may not create or change a Handler " \
               "there: a Handler is a pod template" in refused.stderr
        assert create(handler_yaml("mine"), who=no_pods).returncode != 0
        for field in ("serviceAccountName", "serviceAccount"):  # the deprecated alias is the same service account
            borrowed = create(handler_yaml("borrowed", {field: "admin"}), who=author)
            assert borrowed.returncode != 0
            assert "admin is not a service account Handlers may use (allowed: default, reports, sextant-runner)" \
                in borrowed.stderr
        for name, pod in (("reports", {"serviceAccountName": "reports"}), ("runner", {"serviceAccountName":
                          "sextant-runner"}), ("no-account", None)):
            good = create(handler_yaml(name, pod), who=author)
            assert good.returncode == 0, good.stderr
        changed = cluster.kubectl("patch", "-n", handlers, "handlers.sextant.dev", "reports", "--as", author,
                                  "--type=merge", "-p", '{"spec":{"template":{"spec":{"serviceAccountName":"admin"}}}}',
                                  check=False)
        assert changed.returncode != 0 and "admin is not a service account Handlers may use" in changed.stderr
        names = cluster.kubectl("get", "-n", handlers, "handlers.sextant.dev", "-o", "name").stdout.split()
        assert sorted(n.rsplit("/", 1)[1] for n in names) == ["no-account", "plain", "privileged", "reports", "runner"]
    finally:
        on_cluster("uninstall", release, "--namespace", ns["release"], check=False)
        cluster.delete_namespace(handlers)
    for kind in ("validatingadmissionpolicies", "validatingadmissionpolicybindings"):
        left = cluster.kubectl("get", kind, "-l", f"app.kubernetes.io/instance={release}", "-o", "name").stdout
        assert not left.strip(), f"left behind: {left}"


def test_a_node_worker_takes_its_image_and_command_and_understands_every_argument_the_chart_gives(helm):
    """Issue 30: a `workers` entry runs the Node SDK's worker (values.yaml's example): the image and command as
    given, the same arguments as `sextant worker` gets, which the Node worker's own parser accepts as they are."""
    node_worker = {"name": "payments", "namespace": "shop", "image": "registry.example/shop-node:3.1",
                   "command": ["tini", "--", "/app/node_modules/.bin/sextant-worker"],
                   "modules": ["./handlers/charge-card.js"], "queues": ["payments"], "concurrency": 32,
                   "allowCommands": ["resize"], "commandEnv": ["MODE=prod"], "logLevel": "debug", "metricsPort": 9090}
    _, pod, args = worker_parts(helm.template({"watchNamespaces": ["shop"], "workers": [node_worker]}),
                                "payments", "shop")
    (container,) = pod["containers"]
    assert container["image"] == "registry.example/shop-node:3.1"
    assert container["command"] == ["tini", "--", "/app/node_modules/.bin/sextant-worker"]
    expanded = [a.replace("$(POD_NAME)", "payments-7c9f-x2k4q") for a in args]  # as the kubelet expands it
    script = ("import(process.argv[1]).then((cli) => { const p = cli.parse(JSON.parse(process.argv[2]));"
              " console.log(JSON.stringify({...p.settings, wantQueues: [...p.settings.wantQueues],"
              " allowCommands: [...p.settings.allowCommands], modules: p.modules, logLevel: p.logLevel,"
              " metrics: [p.metricsHost, p.metricsPort]})); })")
    cli = repo_root() / "sdk" / "node" / "dist" / "cli.js"
    parsed = json.loads(subprocess.run(["node", "-e", script, cli.as_uri(), json.dumps(expanded)], check=True,
                                       capture_output=True, text=True, timeout=60).stdout)
    assert parsed == {"namespace": "shop", "name": "payments-7c9f-x2k4q", "concurrency": 32, "drainGraceSeconds": 25,
                      "wantQueues": ["payments"], "allowCommands": ["resize"], "commandEnv": {"MODE": "prod"},
                      "modules": ["./handlers/charge-card.js"], "logLevel": "debug", "metrics": ["0.0.0.0", 9090]}


def test_the_archive_dsn_comes_from_a_secret_and_the_notes_say_history_ends_without_one(helm, cluster,
                                                                                      tmp_path: Path):
    """docs/archive.md: archive.dsnSecret (name, key) → SEXTANT_ARCHIVE_DSN from that Secret; the cluster-wide cap is
    --max-finished-jobs; without an archive NOTES.txt says plainly that history ends with retention."""
    def operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
        return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]

    default = operator_container(helm.template())
    assert "--max-finished-jobs=50000" in default["args"]
    assert "SEXTANT_ARCHIVE_DSN" not in {e["name"] for e in default["env"]}
    archived = operator_container(helm.template({"archive": {"dsnSecret": {"name": "sextant-archive"}},
                                                 "operator": {"maxFinishedJobs": 20000}}))
    assert "--max-finished-jobs=20000" in archived["args"]
    env = {e["name"]: e for e in archived["env"]}
    assert env["SEXTANT_ARCHIVE_DSN"]["valueFrom"] == {"secretKeyRef": {"name": "sextant-archive", "key": "dsn"}}
    assert env["SEXTANT_ARCHIVE_RETENTION"]["value"] == "720h"
    assert env["SEXTANT_ARCHIVE_PAYLOAD_MAX_BYTES"]["value"] == "65536"
    # Bad input names the field.
    refused = helm("template", "sx", str(CHART), values={"operator": {"maxFinishedJobs": 0}}, check=False)
    assert refused.returncode != 0 and "maxFinishedJobs" in refused.stderr
    on_cluster = Helm(helm.tools, tmp_path, cluster.kubeconfig)  # NOTES.txt renders only in an install (dry run)
    notes = on_cluster("install", "sx", str(CHART), "--namespace", "sextant-system", "--dry-run=client").stdout
    assert "NO ARCHIVE is configured" in notes and "history ends with its retention" in notes
    notes = on_cluster("install", "sx", str(CHART), "--namespace", "sextant-system", "--dry-run=client",
                       values={"archive": {"dsnSecret": {"name": "sextant-archive"}}}).stdout
    assert "NO ARCHIVE" not in notes and "Secret sextant-archive" in notes
