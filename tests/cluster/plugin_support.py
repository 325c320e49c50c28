"""What the CLI and HTTP API tests share: `kubectl sextant …` through the real kubectl binary, service accounts
with a Role on sextant.dev in one namespace, their tokens and kubeconfigs, and a snapshot of a namespace's jobs
(to prove that refused input changed nothing)."""

from __future__ import annotations

import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from sextant.lifecycle.idempotency import ALPHABET

ID_RE = re.compile(rf"^job_[{ALPHABET}]{{8}}$")


def sextant(cluster: Any, *args: str, input: str | None = None, env: dict[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`kubectl sextant ARGS`: kubectl finds the plugin kubectl-sextant on PATH (cluster.env puts the venv's bin
    first) and hands it KUBECONFIG. Never a stack trace, whatever happens."""
    proc = subprocess.run([cluster.local.kubectl_binary, "sextant", *args], input=input, capture_output=True,
                          text=True, env=env or cluster.env, timeout=timeout)
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    return proc


def sextant_many(cluster: Any, calls: list[list[str]], workers: int = 4) -> list[subprocess.CompletedProcess[str]]:
    """Independent `kubectl sextant` calls, a few at a time (each is a process start: mostly CPU)."""
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda args: sextant(cluster, *args), calls))


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr}"
    return proc.stdout


def job_json(cluster: Any, namespace: str, name: str) -> dict[str, Any]:
    return json.loads(cluster.kubectl("get", "-n", namespace, "jobs.sextant.dev", name.replace("_", "-"),
                                      "-o", "json").stdout)


def snapshot(cluster: Any, namespace: str) -> dict[str, str]:
    """name → resourceVersion of every job in the namespace."""
    items = json.loads(cluster.kubectl("get", "-n", namespace, "jobs.sextant.dev", "-o", "json").stdout)["items"]
    return {j["metadata"]["name"]: j["metadata"]["resourceVersion"] for j in items}


def grant(cluster: Any, namespace: str, sa: str, verbs: str = "get,list,watch,create,update,patch") -> str:
    """A service account with a Role on jobs, queues and schedules of sextant.dev in `namespace` only; its token."""
    cluster.kubectl("create", "serviceaccount", "-n", namespace, sa)
    cluster.kubectl("create", "role", "-n", namespace, f"{sa}-sextant", f"--verb={verbs}",
                    "--resource=jobs.sextant.dev,queues.sextant.dev,schedules.sextant.dev")
    cluster.kubectl("create", "rolebinding", "-n", namespace, f"{sa}-sextant", f"--role={sa}-sextant",
                    f"--serviceaccount={namespace}:{sa}")
    return cluster.kubectl("create", "token", "-n", namespace, sa, "--duration=1h").stdout.strip()


def token_kubeconfig(cluster: Any, token: str, namespace: str, path: Path) -> Path:
    """A kubeconfig for a bearer token: the cluster of the admin kubeconfig, the token as its user."""
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": admin["clusters"],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": admin["clusters"][0]["name"], "user": "sa",
                                                "namespace": namespace}}],
        "current-context": "sa",
    }))
    return path
