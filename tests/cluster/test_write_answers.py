"""The operator's writes ask for their answer as metadata alone (a PartialObjectMetadata: the API server does not
encode the object again, nor the operator decode it) and rebuild the object from what they sent. What they rebuild
must be what the API server stores: the operator's view takes it for the stored object, and skips the watch's echo
of the same version. Checked against the real API server, for any status the models can write (hypothesis), and for
an attempt pod as the operator builds it."""

from __future__ import annotations

import asyncio
import copy
from datetime import datetime, timedelta, timezone
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sextant.controller.pods import observe
from sextant.kube import kubeconfig
from sextant.kube.client import Kube
from sextant.resources import API_VERSION, contract
from sextant.resources.common import format_time
from sextant.resources.job import JobStatus, State

BASE = datetime(2026, 12, 5, 12, 0, tzinfo=timezone.utc)
times = st.builds(lambda s, us, precise: format_time(BASE + timedelta(seconds=s, microseconds=us), precise=precise),
                  st.integers(-10**6, 10**6), st.integers(0, 999_999), st.booleans())
words = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.floats(allow_nan=False, allow_infinity=False,
                                                                      width=64) | words,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(words, inner, max_size=4), max_leaves=20)
attempts = st.fixed_dictionaries(
    {"attempt": st.integers(1, 9), "sequence": st.integers(1, 99), "result": st.sampled_from(
        ["running", "succeeded", "failed", "cancelled", "snoozed"])},
    optional={"pod": st.just("job-a-1"), "node": words, "startedAt": times, "finishedAt": times,
              "exitCode": st.integers(-255, 255), "reason": st.sampled_from(["Error", "Timeout", "PodLost"]),
              "message": words})
conditions = st.fixed_dictionaries(
    {"type": st.sampled_from(["Succeeded", "Running", "Ready", "Blocked"]),
     "status": st.sampled_from(["True", "False", "Unknown"]), "reason": st.sampled_from(["Started", "Waiting"])},
    optional={"message": words, "lastTransitionTime": times, "observedGeneration": st.integers(1, 5)})
# Every status the operator writes says its state and the generation it acted on (transitions.reconcile), so the
# CRD's status defaults (state queued, observedGeneration 0: resources/job.py UNWRITTEN_STATUS) never fill one in.
statuses = st.fixed_dictionaries(
    {"state": st.sampled_from([s.value for s in State]), "attempt": st.integers(0, 9),
     "sequence": st.integers(0, 99), "observedGeneration": st.integers(1, 5)},
    optional={"maxAttempts": st.integers(1, 25), "queuedAt": times, "finishedAt": times, "nextAttemptAt": times,
              "message": words, "attempts": st.lists(attempts, max_size=3),
              "conditions": st.lists(conditions, max_size=3, unique_by=lambda c: c["type"]),
              "output": json_values, "outputNote": words,
              "progress": st.fixed_dictionaries({"fraction": st.floats(0, 1)},
                                                optional={"message": words, "sequence": st.integers(1, 99),
                                                          "updatedAt": times})})


def _differences(a: Any, b: Any, path: str = "") -> Iterator[str]:
    """Where a and b differ, as JSON."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a.keys() | b.keys():
            yield from _differences(a.get(k, "<missing>"), b.get(k, "<missing>"), f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from _differences(x, y, f"{path}[{i}]")
    elif _number(a) and _number(b):
        # The same JSON number: the API server writes a float of 1e16 and over back as an integer literal
        # (4.181355359364509e+16 as 41813553593645090), which reads as the same double.
        if float(a) != float(b):
            yield f"{path}: {a!r} != {b!r}"
    elif a != b or type(a) is not type(b):
        yield f"{path}: {a!r} != {b!r}"


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def test_a_status_write_gives_back_the_job_as_stored(cluster, namespace, crds):
    conn = kubeconfig.load(str(cluster.kubeconfig))
    path = contract.jobs_path(namespace, "job-a")
    job = {"apiVersion": API_VERSION, "kind": "Job", "metadata": {"name": "job-a", "namespace": namespace},
           "spec": {"queue": "q", "handler": "h", "payload": {"to": "a@example.com", "n": [1, 2.5]}}}
    written = 0

    async def write(status: dict[str, Any]) -> None:
        nonlocal written
        async with Kube(conn) as kube:
            current = await kube.get(path)
            # As the operator sends it: the model's own dump of what it decided.
            sent = JobStatus.model_validate(status).model_dump(by_alias=True, mode="json", exclude_none=True)
            given_back = await kube.replace_status(path, current, copy.deepcopy(sent))
            stored = await kube.get(path)
        assert given_back is not None
        assert not (differences := list(_differences(given_back, stored))), differences
        if sent != current.get("status"):  # (the same status again is no change: the version stays)
            assert given_back["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]
        written += 1

    async def create() -> None:
        async with Kube(conn) as kube:
            await kube.create(contract.jobs_path(namespace), job)

    asyncio.run(create())

    @settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(statuses)
    def check(status: dict[str, Any]) -> None:
        asyncio.run(write(status))

    check()
    assert written >= 60


def test_a_pod_create_gives_back_the_pod_as_the_operator_reads_it(cluster, namespace):
    conn = kubeconfig.load(str(cluster.kubeconfig))
    # No scheduler takes it (its schedulerName is nobody's): it stays as created while it is read back.
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "job-a-1", "namespace": namespace,
                        "labels": {"sextant.dev/job": "job-a", "sextant.dev/sequence": "1",
                                   "sextant.dev/attempt": "1"},
                        "ownerReferences": [{"apiVersion": API_VERSION, "kind": "Job", "name": "job-a",
                                             "uid": "7d2b7f8e-0000-4000-8000-000000000001", "controller": True}]},
           "spec": {"schedulerName": "nobody", "restartPolicy": "Never",
                    "containers": [{"name": "handler", "image": "registry.example/handler:1",
                                    "env": [{"name": "SEXTANT_JOB_NAME", "value": "job-a"}]}]}}

    async def create() -> tuple[dict[str, Any], dict[str, Any]]:
        async with Kube(conn) as kube:
            given_back = await kube.create_as_sent(contract.pods_path(namespace), pod)
            return given_back, await kube.get(contract.pods_path(namespace, "job-a-1"))

    given_back, stored = asyncio.run(create())
    assert given_back["metadata"] == stored["metadata"]
    assert given_back["spec"] == pod["spec"] and "status" not in given_back  # as sent: the caller's own fields
    assert observe(given_back) == observe(stored) is not None
