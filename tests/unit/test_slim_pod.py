"""The slim attempt pod: a heartbeat Handler's pod carries SEXTANT_ATTEMPT_REF and two downward-API fields, the
runner completes the identity from the Job (its one GET), and the handler gets the SEXTANT_* variables a pod with
all of them gave it; a `heartbeat: false` pod (no runner) still carries them all."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sextant.controller.pods import build_pod
from sextant.lifecycle.reading import read_job
from sextant.lifecycle.transitions import CreatePod
from sextant.resources.handler import HandlerSpec
from sextant.resources.job import PAYLOAD_ENV_MAX_BYTES, payload_json
from sextant.resources.queue import QueueSpec
from sextant.runner import run as runner
from sextant.runner.env import ATTEMPT_REF, IDENTITY_VARIABLES, AttemptEnv, attempt_variables, scheduled_at_of
from sextant.runner.payload import PayloadError, handler_environ, read_attempt

UID = "0b7e3c1a-5d2f-4c4e-9a8b-3f6d2e1c0a9b"
POD_FIELDS = {"metadata.uid": "pod-uid-7", "spec.nodeName": "node-3"}


def raw_job(name: str = "job-8f3k2m9q", payload: dict[str, Any] | None = None, run_at: str | None = None,
            scheduled: str | None = None, created: str = "2026-03-01T12:00:00Z") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "shop", "uid": UID, "creationTimestamp": created,
                            "generation": 1}
    if scheduled is not None:
        meta["annotations"] = {"sextant.dev/scheduled-at": scheduled}
    spec: dict[str, Any] = {"queue": "emails", "handler": "send-receipt", "payload": payload or {"orderId": 42}}
    if run_at is not None:
        spec["runAt"] = run_at
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job", "metadata": meta, "spec": spec}


def handler(heartbeat: bool = True, env: list[dict[str, Any]] | None = None) -> HandlerSpec:
    """A typical Handler: the runner image's command, the chart's service account."""
    container = {"name": "handler", "image": "registry.example/receipts:1.4.2", "env": env or [],
                 "command": ["sextant", "run", "--", "python", "-m", "receipts.send"]}
    return HandlerSpec.model_validate({"template": {"spec": {"serviceAccountName": "sextant-runner",
                                                             "containers": [container]}}, "heartbeat": heartbeat})


def pod_for(raw: dict[str, Any], h: HandlerSpec, q: QueueSpec | None = None, sequence: int = 1,
            attempt: int = 1) -> dict[str, Any]:
    name = raw["metadata"]["name"]
    return build_pod(raw, read_job(raw), h, q or QueueSpec(),
                     CreatePod(f"{name}-{sequence}", sequence, attempt))


def resolved(pod: dict[str, Any]) -> dict[str, str]:
    """The container's environment as the kubelet gives it (the downward API filled in; HOSTNAME is the pod's)."""
    env = {"PATH": "/usr/bin", "HOSTNAME": pod["metadata"]["name"]}
    for e in pod["spec"]["containers"][0]["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            env[e["name"]] = pod["metadata"]["name"] if path == "metadata.name" else POD_FIELDS[path]
    return env


def full_pod_environ(raw: dict[str, Any], q: QueueSpec, sequence: int, attempt: int) -> dict[str, str]:
    """What a heartbeat pod carried before it was slim (every variable but the payload) and the runner then gave
    its handler: the expected handler environment."""
    name = raw["metadata"]["name"]
    job = read_job(raw)
    from sextant.lifecycle.reading import job_scheduled_at as scheduled_at

    variables = attempt_variables(
        job_name=name, job_uid=UID, namespace="shop", queue=job.spec.queue, handler=job.spec.handler,
        attempt=attempt, sequence=sequence, scheduled_at=scheduled_at(job, raw), payload=job.spec.payload,
        lease_name=f"{name}-{sequence}", lease_duration=q.lease_duration, cancel_grace=q.cancel_grace, heartbeat=True)
    variables.pop("SEXTANT_PAYLOAD", None)
    pod = {"PATH": "/usr/bin", "HOSTNAME": f"{name}-{sequence}", **variables, "SEXTANT_NODE_NAME": "node-3",
           "SEXTANT_POD_NAME": f"{name}-{sequence}", "SEXTANT_POD_UID": "pod-uid-7"}
    return handler_environ(job.spec.payload, pod)


class FakeKube:
    """The runner's one GET, answered with a Job."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw, self.paths = raw, []

    async def get(self, path: str) -> dict[str, Any]:
        self.paths.append(path)
        return self.raw


def handler_env_from_slim(raw: dict[str, Any], pod: dict[str, Any]) -> tuple[AttemptEnv, dict[str, str]]:
    environ = resolved(pod)
    kube = FakeKube(raw)
    env = asyncio.run(read_attempt(kube, AttemptEnv.from_environ(environ)))
    assert kube.paths == [f"/apis/sextant.dev/v1alpha1/namespaces/shop/jobs/{raw['metadata']['name']}"]
    return env, handler_environ(env.payload or {}, env.expanded(environ))


# ------------------------------------------------------------------------------------------------ the pod
def test_a_heartbeat_pod_carries_one_reference_and_the_two_fields_only_the_pod_knows():
    pod = pod_for(raw_job(), handler(env=[{"name": "MINE", "value": "kept"}]), sequence=3, attempt=2)
    env = pod["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env] == ["MINE", "SEXTANT_ATTEMPT_REF", "SEXTANT_NODE_NAME", "SEXTANT_POD_UID"]
    assert json.loads(env[1]["value"]) == {"namespace": "shop", "job": "job-8f3k2m9q", "uid": UID, "sequence": 3,
                                           "attempt": 2, "pod": "job-8f3k2m9q-3", "leaseDuration": "30s",
                                           "cancelGrace": "10s"}
    assert env[2]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env[3]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.uid"}}


def test_a_pod_without_the_runner_carries_every_variable_and_a_small_payload_as_before():
    pod = pod_for(raw_job(), handler(heartbeat=False), QueueSpec(leaseDuration="1m"))
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert set(env) == IDENTITY_VARIABLES | {"SEXTANT_NODE_NAME", "SEXTANT_POD_NAME", "SEXTANT_POD_UID"}
    assert env["SEXTANT_PAYLOAD"]["value"] == '{"orderId":42}' and env["SEXTANT_HEARTBEAT"]["value"] == "false"
    assert env["SEXTANT_LEASE_DURATION"]["value"] == "1m" and env["SEXTANT_JOB_ID"]["value"] == "job_8f3k2m9q"
    assert env["SEXTANT_POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert ATTEMPT_REF not in env


def pod_bytes(pod: dict[str, Any]) -> int:
    return len(json.dumps(pod, separators=(",", ":")).encode())


@pytest.mark.parametrize("heartbeat", [True, False])
def test_pods_built_from_one_handler_share_nothing_with_it_or_with_each_other(heartbeat):
    # build_pod copies nothing on purpose (it is on every attempt's path): what it returns must be new all the way
    # down, or a change to one pod (the API client, the view) would reach the Handler's template or the next pod.
    h = handler(heartbeat, env=[{"name": "MODE", "value": "live"}])
    template_before = h.pod_spec()
    first, second = pod_for(raw_job("job-a"), h), pod_for(raw_job("job-b"), h)
    expected_second = json.loads(json.dumps(second))
    for container in first["spec"]["containers"]:
        for e in container["env"]:
            e["name"] = "CHANGED"
            e.get("valueFrom", {}).get("fieldRef", {})["fieldPath"] = "changed"
        container["securityContext"]["capabilities"]["drop"].append("CHANGED")
    first["spec"]["securityContext"]["seccompProfile"]["type"] = "Changed"
    first["metadata"]["labels"]["changed"] = "yes"
    assert second == expected_second
    assert h.pod_spec() == template_before


def test_the_slim_pod_is_a_quarter_smaller_than_one_with_every_variable():
    """A typical pod (the README's Handler, a small payload): 1342 bytes of JSON against 1859 with every variable
    (17 with SEXTANT_RUN, SEXTANT_SEQUENCE's deprecated alias; as the operator sends it; the API server adds its
    defaults to both)."""
    raw = raw_job()
    slim = pod_for(raw, handler())
    full = pod_for(raw, handler())
    full["spec"]["containers"][0]["env"] = [
        {"name": k, "value": v} for k, v in full_pod_environ(raw, QueueSpec(), 1, 1).items()
        if k.startswith("SEXTANT_") and k not in ("SEXTANT_PAYLOAD", "SEXTANT_NODE_NAME", "SEXTANT_POD_NAME",
                                                  "SEXTANT_POD_UID")] + [
        {"name": n, "valueFrom": {"fieldRef": {"fieldPath": p}}}
        for n, p in (("SEXTANT_NODE_NAME", "spec.nodeName"), ("SEXTANT_POD_NAME", "metadata.name"),
                     ("SEXTANT_POD_UID", "metadata.uid"))]
    assert len(full["spec"]["containers"][0]["env"]) == 17 and len(slim["spec"]["containers"][0]["env"]) == 3
    assert (pod_bytes(slim), pod_bytes(full)) == (1342, 1859)


# --------------------------------------------------------------------------------------------- the runner
JOB_NAMES = st.from_regex(r"job-[a-z0-9]{1,20}(\.[a-z0-9]{1,10})?", fullmatch=True)
TIMES = st.sampled_from(["2026-03-01T12:00:00Z", "2026-03-01T12:00:00.250+02:00", "2026-12-31T23:59:59"])
DURATIONS = st.sampled_from(["30s", "1m", "1m30s", "1500ms", "2h"])


@settings(max_examples=200, deadline=None)
@given(name=JOB_NAMES, run_at=st.none() | TIMES, scheduled=st.none() | TIMES, created=TIMES,
       size=st.sampled_from([0, PAYLOAD_ENV_MAX_BYTES - 20, PAYLOAD_ENV_MAX_BYTES + 1]),
       lease=DURATIONS, grace=DURATIONS, sequence=st.integers(1, 10**6), attempt=st.integers(1, 100))
def test_the_handler_gets_the_same_environment_from_a_slim_pod(name, run_at, scheduled, created, size, lease,
                                                               grace, sequence, attempt):
    raw = raw_job(name, {"x": "y" * size}, run_at, scheduled, created)
    q = QueueSpec(leaseDuration=lease, cancelGrace=grace)
    env, got = handler_env_from_slim(raw, pod_for(raw, handler(), q, sequence, attempt))
    assert got == full_pod_environ(raw, q, sequence, attempt)
    assert ("SEXTANT_PAYLOAD" in got) == (len(payload_json(raw["spec"]["payload"]).encode()) <= PAYLOAD_ENV_MAX_BYTES)
    assert (env.queue, env.handler, env.lease_name, env.pod_name, env.pod_uid) == (
        "emails", "send-receipt", f"{name}-{sequence}", f"{name}-{sequence}", "pod-uid-7")
    assert env.heartbeat and env.payload == raw["spec"]["payload"]


def test_the_scheduled_time_is_the_schedules_tick_else_run_at_else_the_creation():
    assert scheduled_at_of(raw_job(scheduled="2026-03-01T02:00:00Z", run_at="2027-01-01T00:00:00Z")) == \
        "2026-03-01T02:00:00Z"
    assert scheduled_at_of(raw_job(run_at="2027-01-01T01:00:00.5+01:00")) == "2027-01-01T00:00:00Z"
    assert scheduled_at_of(raw_job()) == "2026-03-01T12:00:00Z"


def test_a_job_deleted_and_created_again_is_not_this_attempts():
    raw = raw_job()
    environ = resolved(pod_for(raw, handler()))
    raw["metadata"]["uid"] = "another"
    with pytest.raises(PayloadError, match="deleted and created again"):
        asyncio.run(read_attempt(FakeKube(raw), AttemptEnv.from_environ(environ)))


@pytest.mark.parametrize("text,problem", [
    ("job-a", "not a JSON object"),
    ("[1]", "not a JSON object"),
    ('{"namespace":"shop","job":"job-a"}', "lacks uid, sequence, attempt, pod, leaseDuration, cancelGrace"),
    ('{"namespace":"shop","job":"j","uid":"u","sequence":"one","attempt":1,"pod":"p","leaseDuration":"30s",'
     '"cancelGrace":"10s"}', "one"),
    ('{"namespace":"shop","job":"j","uid":"u","sequence":1,"attempt":1,"pod":"p","leaseDuration":"soon",'
     '"cancelGrace":"10s"}', "soon"),
])
def test_a_bad_reference_is_refused_naming_what_is_wrong(text, problem):
    with pytest.raises(RuntimeError, match=problem):
        AttemptEnv.from_environ({ATTEMPT_REF: text})


def test_nothing_from_sextant_is_refused_naming_the_variables():
    with pytest.raises(RuntimeError, match="SEXTANT_ATTEMPT_REF .*SEXTANT_JOB_NAME"):
        AttemptEnv.from_environ({"PATH": "/bin"})


def test_a_full_environment_is_read_as_before_and_passed_on_unchanged():
    """A `heartbeat: false` pod whose image has the runner, or a pod of an older operator."""
    raw = raw_job()
    environ = resolved(pod_for(raw, handler(heartbeat=False)))
    env = AttemptEnv.from_environ(environ)
    assert not env.from_ref and env.payload == {"orderId": 42} and not env.heartbeat
    assert env.expanded(environ) == environ


def test_the_runner_puts_the_variables_in_its_own_environment_for_an_sdk_handler(monkeypatch):
    raw = raw_job()
    environ = resolved(pod_for(raw, handler()))
    for k, v in environ.items():
        monkeypatch.setenv(k, v)
    saved = dict(os.environ)
    try:
        env = asyncio.run(read_attempt(FakeKube(raw), AttemptEnv.from_environ()))
        runner._expand_environ(env)
        assert ATTEMPT_REF not in os.environ
        assert {k: os.environ[k] for k in ("SEXTANT_JOB_ID", "SEXTANT_QUEUE", "SEXTANT_HANDLER", "SEXTANT_ATTEMPT",
                                           "SEXTANT_SCHEDULED_AT", "SEXTANT_POD_NAME", "SEXTANT_POD_UID")} == {
            "SEXTANT_JOB_ID": "job_8f3k2m9q", "SEXTANT_QUEUE": "emails", "SEXTANT_HANDLER": "send-receipt",
            "SEXTANT_ATTEMPT": "1", "SEXTANT_SCHEDULED_AT": "2026-03-01T12:00:00Z",
            "SEXTANT_POD_NAME": "job-8f3k2m9q-1", "SEXTANT_POD_UID": "pod-uid-7"}
    finally:
        os.environ.clear()
        os.environ.update(saved)
