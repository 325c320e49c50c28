"""`sextant config apply -f sextant.toml` on the real API server: the docs' TOML becomes a Queue and worker-mode
Handlers by server-side apply; --dry-run=client -o yaml prints what `kubectl apply` takes; a bad key, or a value the
API server refuses, applies nothing."""

from __future__ import annotations

import json

import yaml

from .plugin_support import ok, sextant

DOCS = """\
[queues.emails]
concurrency = 10
max_attempts = 5
backoff = { policy = "exponential", initial = "10s", max = "10m" }
timeout = "2m"

[handlers.send-receipt]
command = ["python", "-m", "receipts.send"]
"""


def sextant_objects(cluster, namespace: str) -> dict[str, dict]:
    items = json.loads(cluster.kubectl("get", "-n", namespace, "queues.sextant.dev,handlers.sextant.dev", "--show-managed-fields",
                                       "-o", "json").stdout)["items"]
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in items}


def test_the_docs_toml_is_applied_server_side_and_reapplied(cluster, namespace, crds, tmp_path):
    path = tmp_path / "sextant.toml"
    path.write_text(DOCS)
    out = ok(sextant(cluster, "-n", namespace, "config", "apply", "-f", str(path)))
    assert out.splitlines() == ["queue.sextant.dev/emails serverside-applied",
                                "handler.sextant.dev/send-receipt serverside-applied"]
    objects = sextant_objects(cluster, namespace)
    spec = objects["Queue/emails"]["spec"]
    assert (spec["concurrency"], spec["maxAttempts"], spec["timeout"]) == (10, 5, "2m")
    assert spec["backoff"]["initial"] == "10s" and spec["leaseDuration"] == "30s"  # the CRD's default fills in
    assert objects["Handler/send-receipt"]["spec"]["worker"] == {"command": ["python", "-m", "receipts.send"]}
    managers = {m["manager"] for m in objects["Queue/emails"]["metadata"]["managedFields"]}
    assert "sextant-config" in managers

    # Changed and applied again: the same objects, updated in place.
    path.write_text(DOCS.replace("concurrency = 10", "concurrency = 3"))
    ok(sextant(cluster, "-n", namespace, "config", "apply", "-f", str(path)))
    assert sextant_objects(cluster, namespace)["Queue/emails"]["spec"]["concurrency"] == 3


def test_dry_run_client_prints_what_kubectl_applies(cluster, namespace, crds, tmp_path):
    path = tmp_path / "sextant.toml"
    path.write_text(DOCS)
    printed = ok(sextant(cluster, "-n", namespace, "config", "apply", "-f", str(path), "--dry-run=client",
                         "-o", "yaml"))
    assert sextant_objects(cluster, namespace) == {}  # nothing sent
    assert [o["kind"] for o in yaml.safe_load(printed)["items"]] == ["Queue", "Handler"]
    applied = cluster.kubectl("apply", "-f", "-", input=printed)  # a GitOps repository's file, as printed
    assert "queue.sextant.dev/emails created" in applied.stdout
    assert set(sextant_objects(cluster, namespace)) == {"Queue/emails", "Handler/send-receipt"}


def test_bad_input_names_the_key_and_applies_nothing(cluster, namespace, crds, tmp_path):
    path = tmp_path / "sextant.toml"
    # A key in the YAML's camelCase: refused before anything is sent.
    path.write_text(DOCS + "\n[queues.sms]\nmaxAttempts = 3\n")
    proc = sextant(cluster, "-n", namespace, "config", "apply", "-f", str(path))
    assert proc.returncode == 2 and "queues.sms.maxAttempts: write 'max_attempts'" in proc.stderr, proc.stderr
    assert sextant_objects(cluster, namespace) == {}
    # A value only the API server's rules refuse (backoff.initial above backoff.max), in the last object: the dry
    # run of every object comes first, so the objects before it are not applied either.
    path.write_text(DOCS + '\n[queues.sms]\nbackoff = { initial = "1h", max = "1m" }\n')
    proc = sextant(cluster, "-n", namespace, "config", "apply", "-f", str(path))
    assert proc.returncode == 1, proc.stderr
    assert "queue.sextant.dev/sms" in proc.stderr and "backoff.initial must not be greater than backoff.max" \
        in proc.stderr and "nothing was applied" in proc.stderr, proc.stderr
    assert sextant_objects(cluster, namespace) == {}
