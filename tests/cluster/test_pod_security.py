"""Sextant's job pods in a namespace that enforces the Pod Security Standard "restricted", on the real API server:
admitted without a warning by default, refused when a Handler's template opts out (proving the namespace enforces),
and a job run end to end by a real operator there."""

from __future__ import annotations

from typing import Any

import yaml

from sextant.controller.pods import build_pod
from sextant.lifecycle.transitions import CreatePod, JobSnapshot
from sextant.resources.common import parse_time
from sextant.resources.handler import HandlerSpec
from sextant.resources.job import JobSpec, JobStatus
from sextant.resources.queue import QueueSpec

from .support import apply, handler, job, queue, wait_state

LEVELS = ("enforce", "warn", "audit")


def restrict(cluster, namespace: str) -> None:
    cluster.kubectl("label", "namespace", namespace, "--overwrite",
                    *(f"pod-security.kubernetes.io/{level}=restricted" for level in LEVELS))


def attempt_pod(namespace: str, handler_obj: dict[str, Any], number: int) -> dict[str, Any]:
    """The pod the operator would create for the first attempt of a job of this Handler."""
    name = f"job-pss{number}"
    raw = {"metadata": {"name": name, "namespace": namespace, "creationTimestamp": "2026-01-01T00:00:00Z"}}
    snapshot = JobSnapshot(name, f"uid-{number}", 1, parse_time("2026-01-01T00:00:00Z"),
                           JobSpec(queue="q", handler="h"), JobStatus())
    pod = build_pod(raw, snapshot, HandlerSpec.model_validate(handler_obj["spec"]), QueueSpec(),
                    CreatePod(f"{name}-1", 1, 1))
    del pod["metadata"]["ownerReferences"]  # no Job object behind it here
    return pod


def test_attempt_pods_are_admitted_by_a_restricted_namespace_without_warnings(cluster, namespace):
    restrict(cluster, namespace)
    plain = attempt_pod(namespace, handler("h"), 1)
    created = cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(plain), check=False)
    assert created.returncode == 0, created.stderr
    assert "Warning" not in created.stderr and "PodSecurity" not in created.stderr, created.stderr

    # A Handler whose template opts out (the override wins) is refused: the namespace does enforce.
    root = handler("h")
    root["spec"]["template"]["spec"]["securityContext"] = {"runAsNonRoot": False}
    refused = cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(attempt_pod(namespace, root, 2)),
                              check=False)
    assert refused.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr and "runAsNonRoot" in refused.stderr


def test_a_job_runs_to_success_in_a_restricted_namespace(cluster, namespace, operator):
    restrict(cluster, namespace)
    apply(cluster, namespace, queue("q"), handler("h", heartbeat=False), job("job-restricted"))
    final = wait_state(cluster, namespace, "job-restricted", "succeeded", "failed", "dead", timeout=60)
    assert final["state"] == "succeeded", final
