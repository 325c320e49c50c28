"""The Argo CD health check of docs/gitops.md, run as Argo CD runs it (gopher-lua, base/table/package libraries only,
the object as `obj`; tests/harness/argocd_lua) on Jobs that a real operator moved into each state."""

from __future__ import annotations

import json
import os
import re
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import kstatus, repo_root, wait_for

from .support import apply, get_json, handler, job, queue, status, wait_state

DOC = repo_root() / "docs" / "gitops.md"
HARNESS = repo_root() / "tests" / "harness" / "argocd_lua"
HEALTH_KEY = "resource.customizations.health.sextant.dev_Job"
FOREVER = {"sextant.dev/test-outcome": "run-forever"}
FAIL = {"sextant.dev/test-exit-code": "1"}


@pytest.fixture(scope="session")
def argocd_lua(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The harness binary, built by Go (its module and build caches make a second build a link step)."""
    binary = tmp_path_factory.mktemp("argocd-lua") / "argocd-lua"
    env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    try:
        proc = subprocess.run(["go", "build", "-o", str(binary), "."], cwd=HARNESS, env=env, capture_output=True,
                              text=True, timeout=300)
    except FileNotFoundError:
        pytest.fail("Go is not installed (need Go >= 1.26 to build tests/harness/argocd_lua)", pytrace=False)
    if proc.returncode != 0:
        pytest.fail(f"go build tests/harness/argocd_lua failed: {proc.stderr.strip().splitlines()[-1:]}", pytrace=False)
    return str(binary)


def documented_check() -> str:
    """The Lua script exactly as the documented argocd-cm ConfigMap hands it to Argo CD."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    configmaps = [d for b in blocks for d in yaml.safe_load_all(b) if d and d.get("kind") == "ConfigMap"]
    assert len(configmaps) == 1, "docs/gitops.md shows one argocd-cm ConfigMap"
    return configmaps[0]["data"][HEALTH_KEY]


def health(binary: str, *objects: dict[str, Any], tmp_path: Path) -> list[dict[str, str]]:
    script = tmp_path / "health.lua"
    script.write_text(documented_check())
    proc = subprocess.run([binary, str(script)], input="".join(json.dumps(o) + "\n" for o in objects),
                          capture_output=True, text=True, timeout=30, check=True)
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert all("error" not in r for r in results), results
    return results


# Each job of jobs_in_every_state: its state, Argo CD's verdict (the documented check), kstatus' (Flux).
EVERY_STATE = {
    "job-ok": ("succeeded", "Healthy", kstatus.CURRENT),
    "job-dead": ("dead", "Degraded", kstatus.FAILED),
    "job-cancelled": ("cancelled", "Degraded", kstatus.FAILED),
    "job-later": ("scheduled", "Progressing", kstatus.IN_PROGRESS),
    "job-running": ("running", "Progressing", kstatus.IN_PROGRESS),
    "job-retrying": ("failed", "Progressing", kstatus.IN_PROGRESS),
    "job-blocked": ("queued", "Progressing", kstatus.IN_PROGRESS),
}


def jobs_in_every_state(cluster: Any, namespace: str) -> dict[str, dict[str, Any]]:
    """Jobs that a real operator moved into each state of EVERY_STATE, as the API server returns them."""
    later = (datetime.now(timezone.utc) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    fast = {"backoff": {"policy": "fixed", "initial": "200ms"}}
    apply(cluster, namespace,
          queue("q", **fast), queue("once", maxAttempts=1, **fast),
          queue("slow", maxAttempts=3, backoff={"policy": "fixed", "initial": "1h"}),
          handler("ok"), handler("fail", annotations=FAIL), handler("forever", annotations=FOREVER, heartbeat=False),
          job("job-ok", "q", "ok"),
          job("job-dead", "once", "fail"),
          job("job-cancelled", "q", "ok", runAt=later, cancel=True),
          job("job-later", "q", "ok", runAt=later),
          job("job-running", "q", "forever"),
          job("job-retrying", "slow", "fail"),
          job("job-blocked", "missing", "ok"))  # fmt: skip
    for name, (state, _, _) in EVERY_STATE.items():
        wait_state(cluster, namespace, name, state, timeout=60)
    return {name: get_json(cluster, namespace, "jobs.sextant.dev", name) for name in EVERY_STATE}


def test_argo_cd_health_of_jobs_in_every_state(cluster, namespace, operator, argocd_lua, tmp_path):
    expected = {name: (state, argo) for name, (state, argo, _) in EVERY_STATE.items()}
    found = jobs_in_every_state(cluster, namespace)
    results = dict(zip(expected, health(argocd_lua, *found.values(), tmp_path=tmp_path)))

    assert {name: r["status"] for name, r in results.items()} == {n: h for n, (_, h) in expected.items()}, results
    # The state, then the job's latest message (which says the attempt).
    assert results["job-running"]["message"].startswith("running: attempt 1 of 5"), results["job-running"]
    assert results["job-retrying"]["message"].startswith("failed: attempt 1 of 3 failed"), results["job-retrying"]
    blocked = results["job-blocked"]["message"]
    assert "blocked (QueueNotFound)" in blocked and "missing" in blocked, blocked
    assert results["job-ok"]["message"].startswith("succeeded")


def test_argo_cd_health_before_the_operator_and_after_a_spec_change(argocd_lua, tmp_path):
    fresh = {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job", "metadata": {"name": "job-a", "generation": 1},
             "spec": {"queue": "q", "handler": "h"}}
    changed = {**fresh, "metadata": {"name": "job-a", "generation": 2},
               "status": {"state": "succeeded", "observedGeneration": 1,
                          "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded"}]}}
    odd = {**fresh, "status": {"state": "paused", "observedGeneration": 1}}
    invalid = {**fresh, "status": {"conditions": [{"type": "Invalid", "status": "True", "reason": "InvalidSpec",
                                                   "message": "spec.runAt: out of range"}]}}
    first, second, third, fourth = health(argocd_lua, fresh, changed, odd, invalid, tmp_path=tmp_path)
    assert fourth == {"status": "Degraded", "message": "invalid, does not run: spec.runAt: out of range"}
    assert first == {"status": "Progressing", "message": "waiting for the Sextant operator"}
    assert second["status"] == "Progressing" and "not acted on the latest change" in second["message"]
    assert third["status"] == "Unknown"


def test_flux_kstatus_reads_jobs_in_every_state(cluster, namespace, operator):
    """kstatus' rules (tests/harness/kstatus.py, re-stated from its documentation) on the real objects: the same
    verdict as Argo CD's for every state, Failed for a job the operator cannot read, InProgress for a spec change
    the operator has not acted on yet."""
    found = jobs_in_every_state(cluster, namespace)
    verdicts = {name: kstatus.compute(obj) for name, obj in found.items()}
    assert {n: v.status for n, v in verdicts.items()} == {n: k for n, (_, _, k) in EVERY_STATE.items()}, verdicts
    for name, obj in found.items():  # every health condition says which generation it was computed for
        health_conditions = [c for c in obj["status"]["conditions"]
                             if c["type"] in ("Ready", "Reconciling", "Stalled")]
        assert len(health_conditions) == 3, (name, obj["status"]["conditions"])
        assert {c["observedGeneration"] for c in health_conditions} == {obj["metadata"]["generation"]}
    assert "blocked" in verdicts["job-blocked"].message and "missing" in verdicts["job-blocked"].message
    assert verdicts["job-running"].message.startswith("attempt 1 of 5")

    # A status the operator cannot read (written past it, straight to the status subresource): Failed.
    cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", "job-later", "--subresource=status",
                    "--type=merge", "-p", '{"status": {"queuedAt": "soon"}}')

    def verdict(name: str) -> kstatus.Result:
        return kstatus.compute(get_json(cluster, namespace, "jobs.sextant.dev", name))

    wait_for(lambda: verdict("job-later").status == kstatus.FAILED, 30,
             message=lambda: f"the invalid job to be Failed for kstatus: {verdict('job-later')}")
    assert "status.queuedAt" in verdict("job-later").message

    # A spec change with the operator away: InProgress until it has acted on it, then the new state's verdict.
    operator.stop()
    cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", "job-running", "--type=merge",
                    "-p", '{"spec": {"cancel": true}}')
    assert verdict("job-running").status == kstatus.IN_PROGRESS
    assert "latest observed generation is 1" in verdict("job-running").message
    operator.start()
    wait_state(cluster, namespace, "job-running", "cancelled", timeout=60)
    assert verdict("job-running").status == kstatus.FAILED
    assert status(cluster, namespace, "job-running")["observedGeneration"] == 2
