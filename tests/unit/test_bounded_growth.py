"""Bounded growth: the payload's cap at every create path and in the operator, the payload's way to the handler
(stdin, never one huge environment variable), and a timeline that stays small however often a job is retried."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from _builders import Job, queue, snapshot, spec
from sextant.resources import inputs, request
from sextant.controller.pods import build_pod
from sextant.http import api
from sextant.lifecycle import step
from sextant.lifecycle import transitions as T
from sextant.resources.handler import HandlerSpec
from sextant.resources.job import PAYLOAD_ENV_MAX_BYTES, PAYLOAD_MAX_BYTES, State, payload_json, payload_size
from sextant.runner.chaining import Jobs
from sextant.runner.payload import handler_environ

CAP = 256 * 1024


def sized(size: int) -> dict[str, str]:
    """A payload of exactly `size` bytes as compact JSON (its 'x' string padded; non-ASCII counts as UTF-8)."""
    base = payload_size({"x": ""})
    return {"x": "é" * ((size - base) // 2) + "a" * ((size - base) % 2)}


def test_the_cap_is_256_kib_of_json():
    assert PAYLOAD_MAX_BYTES == CAP
    assert payload_size(sized(CAP)) == CAP and payload_size(sized(CAP + 1)) == CAP + 1
    assert payload_size({"a": "ü"}) == len('{"a":"ü"}'.encode())  # UTF-8 bytes, not characters


def test_the_shared_check_refuses_one_byte_over_and_names_the_field_and_the_cap():
    assert inputs.payload("--payload", sized(CAP)) == sized(CAP)
    with pytest.raises(inputs.InputError) as err:
        inputs.payload("--payload", sized(CAP + 1))
    assert err.value.field == "--payload"
    assert f"{CAP + 1} bytes" in err.value.message and f"{CAP} bytes (256 KiB)" in err.value.message


def test_the_cli_refuses_a_payload_over_the_cap_before_any_request(tmp_path, monkeypatch, capsys):
    from sextant.cli.main import main

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))  # a request would fail differently
    big = tmp_path / "big.json"
    big.write_text(json.dumps(sized(CAP + 1)))
    code = main(["-n", "ns", "jobs", "create", "--queue", "q", "--handler", "h", "--payload", f"@{big}"])
    err = capsys.readouterr().err
    assert code == 2 and "--payload" in err and "over the limit of 262144 bytes" in err and "Traceback" not in err


def test_the_http_api_refuses_a_payload_over_the_cap_naming_the_field():
    ok = request.CreateJob.model_validate_json(json.dumps({"queue": "q", "handler": "h", "payload": sized(CAP)}))
    assert payload_size(ok.payload) == CAP
    with pytest.raises(ValidationError) as err:
        request.CreateJob.model_validate_json(json.dumps({"queue": "q", "handler": "h", "payload": sized(CAP + 1)}))
    refused = api._from_validation(err.value)
    assert (refused.status, refused.field) == (422, "payload") and "over the limit" in refused.message


def test_the_sdk_refuses_a_payload_over_the_cap_before_connecting():
    def connect():
        raise AssertionError("no connection for a refused payload")

    with pytest.raises(inputs.InputError) as err:
        Jobs(connect, "shop").create(queue="q", handler="h", payload=sized(CAP + 1))
    assert err.value.field == "payload"


def test_the_operator_ends_a_kubectl_applied_job_over_the_cap_dead_without_running_it():
    job = Job(spec=spec(payload=sized(CAP + 1)))
    d = job.reconcile()
    assert d.status.state == State.DEAD and d.status.attempt == 0 and d.actions == []
    dead = next(c for c in d.status.conditions if c.type == "Dead")
    assert (dead.status, dead.reason) == ("True", "PayloadTooLarge")
    assert "spec.payload" in dead.message and "262144 bytes (256 KiB)" in dead.message
    assert "PayloadTooLarge" in [e.reason for e in d.events]
    assert job.reconcile().status == d.status  # settled: nothing more happens


def test_a_job_at_the_cap_is_queued():
    assert Job(spec=spec(payload=sized(CAP))).reconcile().status.state == State.QUEUED


def handler(heartbeat: bool = True, env: list[dict] | None = None) -> HandlerSpec:
    container = {"name": "handler", "image": "registry.example/h:1", "env": env or []}
    return HandlerSpec.model_validate({"template": {"spec": {"containers": [container]}}, "heartbeat": heartbeat})


def pod_env(payload: dict, handler_spec: HandlerSpec) -> dict[str, dict]:
    raw = {"metadata": {"name": "job-8f3k2m9q", "namespace": "shop"}}
    pod = build_pod(raw, snapshot(job_spec=spec(payload=payload)), handler_spec, queue(),
                    T.CreatePod("job-8f3k2m9q-1", 1, 1))
    return {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}


def test_the_pod_carries_no_payload_the_runner_reads_it_from_the_job():
    env = pod_env({"orderId": 42}, handler())
    assert "SEXTANT_PAYLOAD" not in env
    assert env["SEXTANT_POD_UID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    assert json.loads(env["SEXTANT_ATTEMPT_REF"]["value"])["uid"] == snapshot().uid


def test_a_template_cannot_smuggle_a_payload_or_the_pods_identity():
    names = ("SEXTANT_PAYLOAD", "SEXTANT_POD_UID", "SEXTANT_POD_NAME", "SEXTANT_ATTEMPT_REF", "SEXTANT_QUEUE")
    forged = [{"name": n, "value": "forged"} for n in names]
    for heartbeat in (True, False):
        env = pod_env({"orderId": 42}, handler(heartbeat, env=forged + [{"name": "MINE", "value": "kept"}]))
        assert "value" not in env["SEXTANT_POD_UID"] and env["MINE"]["value"] == "kept"
        assert all(e.get("value") != "forged" for e in env.values())
        assert ("SEXTANT_PAYLOAD" in env) == (not heartbeat)  # only without the runner: a small one


def test_without_the_runner_a_small_payload_stays_in_the_environment_and_a_large_one_does_not():
    small, large = sized(PAYLOAD_ENV_MAX_BYTES), sized(PAYLOAD_ENV_MAX_BYTES + 1)
    assert json.loads(pod_env(small, handler(heartbeat=False))["SEXTANT_PAYLOAD"]["value"]) == small
    assert "SEXTANT_PAYLOAD" not in pod_env(large, handler(heartbeat=False))


def test_the_handler_process_gets_sextant_payload_only_while_small():
    small, large = sized(PAYLOAD_ENV_MAX_BYTES), sized(PAYLOAD_ENV_MAX_BYTES + 1)
    assert handler_environ(small, {"PATH": "/bin"}) == {"PATH": "/bin", "SEXTANT_PAYLOAD": payload_json(small)}
    assert handler_environ(large, {"PATH": "/bin", "SEXTANT_PAYLOAD": "{}"}) == {"PATH": "/bin"}


# ---------------------------------------------------------------------------------------------- the timeline
def retried_for_ever(failures: int, message: str = "boom") -> Job:
    """A job whose every attempt fails, retried again and again (retry resets the attempt counter, not the run)."""
    job = Job(queue=queue(maxAttempts=3, backoff={"policy": "fixed", "initial": "1s"}))
    job.reconcile()
    for n in range(failures):
        if job.status.state == State.DEAD:
            job.update_spec(retryToken=f"r{n}")
            job.reconcile()
        job.run_attempt("Failed", 1, message=message)
        if job.status.state == State.FAILED:
            job.advance_to(job.status.next_attempt_at)
            job.reconcile()
    return job


def test_the_timeline_keeps_the_first_attempt_and_the_most_recent_ones():
    job = retried_for_ever(50)
    st = job.status
    assert st.sequence == 50 and len(st.attempts) == step.TIMELINE_MAX == 20
    assert [a.sequence for a in st.attempts] == [1, *range(32, 51)]
    assert st.dropped_attempts == 30
    assert st.attempts[-1].result == "failed" and st.attempts[-1].reason == "Error"


def test_a_short_timeline_is_whole_and_counts_nothing():
    st = retried_for_ever(step.TIMELINE_MAX).status
    assert [a.sequence for a in st.attempts] == list(range(1, 21)) and st.dropped_attempts is None


def test_a_long_message_is_cut_to_1_kib_keeping_its_start_and_its_end():
    message = "Traceback (most recent call last):\n" + "  frame ✓\n" * 2000 + "ValueError: the last line"
    st = retried_for_ever(1, message).status
    kept = st.attempts[-1].message
    assert len(kept.encode()) <= step.MESSAGE_MAX_BYTES
    assert kept.startswith("Traceback") and kept.endswith("ValueError: the last line") and "[…]" in kept
    assert len(st.message.encode()) < 2 * step.MESSAGE_MAX_BYTES  # the job's message quotes the cut one


@pytest.mark.parametrize("text", ["", "short", "é" * 512, "x" * 1024])
def test_a_message_within_the_limit_is_kept_whole(text):
    assert step.clip(text) == text


@pytest.mark.parametrize("size", [1025, 1026, 4000, 100_000])
def test_clip_never_exceeds_the_limit_and_never_splits_a_character(size):
    text = ("ü€𝄞" * size)[:size]
    kept = step.clip(text)
    assert len(kept.encode()) <= step.MESSAGE_MAX_BYTES
    kept.encode().decode()  # valid UTF-8


def test_the_worst_case_status_stays_far_below_etcds_limit():
    """Every attempt with a long message, retried for ever: the status stays a few tens of KiB."""
    st = retried_for_ever(200, "é" * 100_000).status
    size = len(json.dumps(st.model_dump(by_alias=True, mode="json", exclude_none=True), ensure_ascii=False).encode())
    assert size < 48 * 1024, size
    assert st.dropped_attempts == 180 and len(st.attempts) == 20


def test_a_schedule_whose_jobs_would_be_over_the_cap_is_invalid_and_fires_none():
    from sextant.resources.schedule import ScheduleSpec
    from sextant.lifecycle.schedule import InvalidSchedule, compile_rule

    def schedule(payload: dict) -> ScheduleSpec:
        return ScheduleSpec.model_validate({"interval": "1m", "jobTemplate": {"queue": "q", "handler": "h",
                                                                              "payload": payload}})

    compile_rule(schedule(sized(CAP)))
    with pytest.raises(InvalidSchedule) as err:
        compile_rule(schedule(sized(CAP + 1)))
    assert err.value.reason == "PayloadTooLarge" and "spec.jobTemplate.payload" in str(err.value)
