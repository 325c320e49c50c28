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

from tests.harness import repo_root

from .support import apply, get_json, handler, job, queue, wait_state

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


def test_argo_cd_health_of_jobs_in_every_state(cluster, namespace, operator, argocd_lua, tmp_path):
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
    expected = {
        "job-ok": ("succeeded", "Healthy"),
        "job-dead": ("dead", "Degraded"),
        "job-cancelled": ("cancelled", "Degraded"),
        "job-later": ("scheduled", "Progressing"),
        "job-running": ("running", "Progressing"),
        "job-retrying": ("failed", "Progressing"),
        "job-blocked": ("queued", "Progressing"),
    }
    for name, (state, _) in expected.items():
        wait_state(cluster, namespace, name, state, timeout=60)
    objects = [get_json(cluster, namespace, "jobs.sextant.dev", name) for name in expected]
    results = dict(zip(expected, health(argocd_lua, *objects, tmp_path=tmp_path)))

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
