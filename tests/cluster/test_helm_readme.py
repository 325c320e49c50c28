"""The README's Helm lines as written, on the real API server with the repository's helm (hack/build-tools.sh): the
`watchNamespaces={shop}` install on a cluster where `shop` does not exist yet (refused at once, nothing created; then
the README's `kubectl create namespace` and the install), and the chart's sextant-view / sextant-edit ClusterRoles,
aggregated into Kubernetes' view and edit: a namespace user bound to `edit` creates jobs, one bound to `view` lists
them and cannot create one."""

from __future__ import annotations

import re
import shlex

from tests.harness import namespace_name, repo_root, wait_for

from .test_helm import CHART, ON_KWOK, AsToken, Helm, tools  # noqa: F401  (tools: the session fixture)

README = (repo_root() / "README.md").read_text()


def readme_helm_lines() -> list[list[str]]:
    """The commands of the README's block that installs with watchNamespaces={shop}, as argv lists."""
    block = next(b for b in re.findall(r"```sh\n(.*?)```", README, re.S) if "watchNamespaces={shop}" in b)
    text = re.sub(r"\\\n\s*", " ", block)
    return [shlex.split(line, comments=True) for line in text.splitlines() if line.strip()]


def test_the_readme_install_watching_shop_works_on_a_fresh_cluster(cluster, tools, tmp_path):  # noqa: F811
    shop, home = namespace_name("readme-shop"), namespace_name("readme-system")
    lines = readme_helm_lines()
    assert [argv[:3] for argv in lines] == [["kubectl", "create", "namespace"], ["helm", "install", "sextant"]]

    def ours(argv: list[str]) -> list[str]:
        return [a.replace("shop", shop).replace("sextant-system", home) for a in argv]

    helm = Helm(tools, tmp_path, cluster.kubeconfig)
    install = [*ours(lines[1])[1:], "--values", "-"]
    install[install.index("charts/sextant")] = str(CHART)
    try:
        # Without the namespace: one clear line, and nothing installed.
        refused = helm(*install, values=ON_KWOK, check=False)
        assert refused.returncode != 0
        assert f'watchNamespaces: namespace "{shop}" does not exist; create it first' in refused.stderr, refused.stderr
        assert helm("status", "sextant", "--namespace", home, check=False).returncode != 0
        assert not cluster.kubectl("get", "clusterroles", "-l", "app.kubernetes.io/instance=sextant",
                                   "-o", "name").stdout.strip()
        # The README's lines in order: the namespace, then the install.
        cluster.kubectl(*ours(lines[0])[1:])
        done = helm(*install, values=ON_KWOK)
        assert "STATUS: deployed" in done.stdout and "Error" not in done.stderr, done.stderr
        roles = cluster.kubectl("get", "role", "-n", shop, "-o", "name").stdout
        assert "role.rbac.authorization.k8s.io/sextant" in roles
        users_get_sextant_rights_through_view_and_edit(cluster, shop)
    finally:
        helm("uninstall", "sextant", "--namespace", home, check=False)
        for ns in (shop, home):
            cluster.delete_namespace(ns)


def users_get_sextant_rights_through_view_and_edit(cluster, namespace: str) -> None:
    tokens = {}
    for who, role in (("editor", "edit"), ("viewer", "view")):
        cluster.kubectl("create", "serviceaccount", "-n", namespace, who)
        cluster.kubectl("create", "rolebinding", "-n", namespace, who, f"--clusterrole={role}",
                        f"--serviceaccount={namespace}:{who}")
        tokens[who] = cluster.kubectl("create", "token", "-n", namespace, who, "--duration=10m").stdout.strip()

    def can(who: str, verb: str, *subresource: str) -> bool:
        return cluster.kubectl("auth", "can-i", verb, "jobs.sextant.dev", *subresource, "-n", namespace,
                               f"--as=system:serviceaccount:{namespace}:{who}", check=False).stdout.strip() == "yes"

    # kube-controller-manager's aggregation controller fills view and edit in within moments of the install.
    wait_for(lambda: can("editor", "create") and can("viewer", "list"), 30,
             message="the aggregated rights to reach the edit and view roles")
    jobs = f"/apis/sextant.dev/v1alpha1/namespaces/{namespace}/jobs"
    job = {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job", "metadata": {"name": "job-from-editor"},
           "spec": {"queue": "q", "handler": "h"}}
    editor, viewer = AsToken(cluster, tokens["editor"]).http, AsToken(cluster, tokens["viewer"]).http
    created = editor.post(jobs, json=job)
    assert created.status_code == 201, created.text
    assert editor.patch(f"{jobs}/job-from-editor", json={"spec": {"cancel": True}},
                        headers={"Content-Type": "application/merge-patch+json"}).status_code == 200
    listed = viewer.get(jobs)
    assert listed.status_code == 200 and [j["metadata"]["name"] for j in listed.json()["items"]] == ["job-from-editor"]
    refused = viewer.post(jobs, json={**job, "metadata": {"name": "job-from-viewer"}})
    assert refused.status_code == 403, refused.text
    assert not can("editor", "update", "--subresource=status")  # a job's status stays the operator's
