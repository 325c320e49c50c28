"""The public API models: durations, ids, the defaults, validation."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sextant.resources import API_VERSION, CATEGORY, GROUP
from sextant.resources import handler as handler_mod
from sextant.resources import job as job_mod
from sextant.resources import queue as queue_mod
from sextant.resources.common import Condition, format_duration, format_time, parse_duration, parse_time
from sextant.resources.handler import Handler, HandlerSpec
from sextant.resources.job import Attempt, Job, JobSpec, JobStatus, State, job_id, object_name
from sextant.resources.queue import Backoff, Queue, QueueSpec

# ---------------------------------------------------------------- durations


@pytest.mark.parametrize(
    "text,want",
    [
        ("30s", timedelta(seconds=30)),
        ("10m", timedelta(minutes=10)),
        ("24h", timedelta(hours=24)),
        ("168h", timedelta(days=7)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("500ms", timedelta(milliseconds=500)),
        ("1.5h", timedelta(minutes=90)),
        ("2m3s", timedelta(seconds=123)),
        ("0s", timedelta(0)),
        ("1h1m1s1ms", timedelta(hours=1, minutes=1, seconds=1, milliseconds=1)),
    ],
)
def test_parse_duration(text, want):
    assert parse_duration(text) == want


@pytest.mark.parametrize(
    "text",
    ["", "30", "s", "-5s", "+5s", "1d", "1 h", "1h 30m", "5sec", "1.s", ".5s", "1e3s", "thirty seconds"],
    ids=lambda t: repr(t),
)
def test_parse_duration_refuses(text):
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)


@pytest.mark.parametrize("value", [None, 30, 1.5], ids=repr)
def test_parse_duration_refuses_non_strings(value):
    with pytest.raises(ValueError):
        parse_duration(value)


@pytest.mark.parametrize(
    "delta,want",
    [
        (timedelta(seconds=30), "30s"),
        (timedelta(seconds=90), "1m30s"),
        (timedelta(minutes=10), "10m"),
        (timedelta(hours=24), "24h"),
        (timedelta(days=7), "168h"),
        (timedelta(milliseconds=1500), "1s500ms"),
        (timedelta(0), "0s"),
        (timedelta(hours=1, seconds=1), "1h1s"),
    ],
    ids=lambda v: str(v),
)
def test_format_duration(delta, want):
    assert format_duration(delta) == want


@pytest.mark.parametrize("text", ["30s", "10m", "24h", "1h30m", "500ms", "1h1m1s1ms", "0s"])
def test_canonical_durations_round_trip(text):
    assert format_duration(parse_duration(text)) == text


@pytest.mark.parametrize("text,canonical", [("90s", "1m30s"), ("1.5h", "1h30m"), ("60m", "1h"), ("1000ms", "1s")])
def test_format_gives_the_shortest_spelling(text, canonical):
    assert format_duration(parse_duration(text)) == canonical


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**10))
def test_duration_round_trip_to_the_millisecond(ms):
    delta = timedelta(milliseconds=ms)
    assert parse_duration(format_duration(delta)) == delta


# ---------------------------------------------------------------- times


def test_format_time_is_rfc3339_utc():
    moment = datetime(2026, 12, 1, 11, 0, 0, 123456, tzinfo=timezone(timedelta(hours=1)))
    assert format_time(moment) == "2026-12-01T10:00:00.123456Z"
    assert format_time(moment, precise=False) == "2026-12-01T10:00:00Z"


@pytest.mark.parametrize("text", ["2026-12-01T10:00:00Z", "2026-12-01T10:00:00.123456Z", "2026-12-01T11:00:00+01:00"])
def test_parse_time_gives_aware_utc(text):
    moment = parse_time(text)
    assert moment.tzinfo is not None and moment.utcoffset() == timedelta(0)
    assert moment.replace(microsecond=0) == datetime(2026, 12, 1, 10, tzinfo=timezone.utc)


@pytest.mark.parametrize("text", [None, ""])
def test_parse_time_of_nothing(text):
    assert parse_time(text) is None


@settings(max_examples=200, deadline=None)
@given(st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(8999, 1, 1), timezones=st.just(timezone.utc)))
def test_time_round_trip(moment):
    assert parse_time(format_time(moment)) == moment


# ---------------------------------------------------------------- ids and names


def test_api_group():
    assert (GROUP, API_VERSION, CATEGORY) == ("sextant.dev", "sextant.dev/v1alpha1", "sextant")


@pytest.mark.parametrize(
    "module,kind,plural,short",
    [
        (job_mod, "Job", "jobs", ["sjob"]),
        (queue_mod, "Queue", "queues", ["squeue"]),
        (handler_mod, "Handler", "handlers", ["shandler"]),
    ],
    ids=["job", "queue", "handler"],
)
def test_kinds(module, kind, plural, short):
    assert (module.KIND, module.PLURAL, module.SHORT_NAMES) == (kind, plural, short)


@pytest.mark.parametrize(
    "given_id,name",
    [
        ("job_8f3k2m9q", "job-8f3k2m9q"),
        ("job-8f3k2m9q", "job-8f3k2m9q"),
        ("nightly", "nightly"),
    ],
)
def test_object_name_accepts_both_spellings(given_id, name):
    assert object_name(given_id) == name


@pytest.mark.parametrize(
    "name,shown",
    [
        ("job-8f3k2m9q", "job_8f3k2m9q"),
        ("job-a-b", "job_a-b"),
        ("nightly-report-1", "nightly-report-1"),
        ("myjob-1", "myjob-1"),
    ],
)
def test_job_id_is_the_docs_spelling(name, shown):
    assert job_id(name) == shown


@settings(max_examples=200, deadline=None)
@given(st.from_regex(r"\Ajob-[a-z0-9]{8}\Z"))
def test_id_and_name_round_trip(name):
    assert object_name(job_id(name)) == name
    assert job_id(object_name(job_id(name))) == job_id(name)


# ---------------------------------------------------------------- Queue: its defaults


def test_queue_defaults_are_the_documented_ones():
    spec = QueueSpec()
    assert spec.lease_duration == "30s"  # an attempt's lease: 30 seconds by default
    assert spec.cancel_grace == "10s"  # SIGTERM to SIGKILL on a cancel: 10 seconds by default
    assert parse_duration(spec.lease_duration) == timedelta(seconds=30)
    assert parse_duration(spec.cancel_grace) == timedelta(seconds=10)
    assert (spec.concurrency, spec.max_attempts, spec.timeout) == (10, 5, "5m")
    assert spec.backoff == Backoff()
    assert (spec.retention.succeeded, spec.retention.cancelled, spec.retention.dead) == ("24h", "24h", "168h")


def test_queue_from_yaml_of_design_section_6():
    queue = Queue.model_validate(
        {
            "spec": {
                "concurrency": 10,
                "maxAttempts": 5,
                "backoff": {"policy": "exponential", "initial": "10s", "factor": 2, "max": "10m", "jitter": 0.1},
                "timeout": "5m",
                "leaseDuration": "30s",
                "cancelGrace": "10s",
                "retention": {"succeeded": "24h", "cancelled": "24h", "dead": "168h"},
            }
        }
    )
    assert queue.spec == QueueSpec()


def test_queue_with_empty_spec_gets_defaults():
    assert Queue.model_validate({"spec": {}}).spec == QueueSpec()
    assert Queue.model_validate({}).spec == QueueSpec()


def test_fixed_backoff_from_yaml():
    backoff = QueueSpec.model_validate({"backoff": {"policy": "fixed", "initial": "30s"}}).backoff
    assert (backoff.policy, backoff.initial_delta) == ("fixed", timedelta(seconds=30))


def test_queue_wire_is_camel_case():
    wire = QueueSpec().wire()
    assert {"maxAttempts", "leaseDuration", "cancelGrace", "backoff", "timeout", "retention"} <= set(wire)
    assert "max_attempts" not in wire


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"concurrency": 0}, id="concurrency 0"),
        pytest.param({"maxAttempts": 0}, id="maxAttempts 0"),
        pytest.param({"timeout": "5 minutes"}, id="timeout not a duration"),
        pytest.param({"leaseDuration": "-30s"}, id="negative lease"),
        pytest.param({"cancelGrace": "10"}, id="grace without unit"),
        pytest.param({"backoff": {"policy": "linear"}}, id="unknown policy"),
        pytest.param({"backoff": {"factor": 0.5}}, id="factor below 1"),
        pytest.param({"backoff": {"jitter": 1.5}}, id="jitter above 1"),
        pytest.param({"backoff": {"jitter": -0.1}}, id="negative jitter"),
        pytest.param({"retention": {"dead": "1w"}}, id="retention in weeks"),
    ],
)
def test_queue_validation(fields):
    with pytest.raises(ValidationError):
        QueueSpec.model_validate(fields)


def test_unknown_fields_are_pruned_as_a_structural_crd_does():
    assert QueueSpec.model_validate({"maxAttempt": 3}) == QueueSpec()
    assert "maxAttempt" not in QueueSpec.model_validate({"maxAttempt": 3}).wire()


# ---------------------------------------------------------------- Handler


def test_handler_from_yaml_of_design_section_6():
    h = Handler.model_validate(
        {
            "spec": {
                "template": {
                    "metadata": {"annotations": {}, "labels": {}},
                    "spec": {
                        "containers": [
                            {"name": "handler", "image": "registry.example/receipts:1.4",
                             "command": ["python", "-m", "receipts.send"]}
                        ]
                    },
                },
                "nonRetryableExitCodes": [2],
            }
        }
    )
    assert h.spec.non_retryable_exit_codes == [2]
    assert h.spec.pod_spec()["containers"][0]["command"] == ["python", "-m", "receipts.send"]


def test_handler_keeps_any_pod_spec_field():
    spec = HandlerSpec.model_validate(
        {"template": {"spec": {"containers": [{"name": "h", "image": "i", "env": [{"name": "A", "value": "1"}]}],
                               "serviceAccountName": "robot"}}}
    )
    assert spec.pod_spec()["serviceAccountName"] == "robot"
    assert spec.pod_spec()["containers"][0]["env"] == [{"name": "A", "value": "1"}]
    assert spec.non_retryable_exit_codes == []


@pytest.mark.parametrize(
    "template",
    [
        pytest.param({"spec": {"containers": []}}, id="no container"),
        pytest.param({"spec": {}}, id="no containers field"),
        pytest.param({"spec": {"containers": [{"name": "h"}]}}, id="no image"),
    ],
)
def test_handler_validation(template):
    with pytest.raises(ValidationError):
        HandlerSpec.model_validate({"template": template})


# ---------------------------------------------------------------- Job


def test_job_from_yaml_of_design_section_6():
    job = Job.model_validate(
        {
            "spec": {
                "queue": "emails",
                "handler": "send-receipt",
                "payload": {"orderId": 42},
                "runAt": "2026-12-01T10:00:00Z",
                "idempotencyKey": "receipt-42",
                "priority": 0,
            },
            "status": {"state": "queued", "attempt": 0, "attempts": [], "conditions": []},
        }
    )
    assert job.spec.run_at == datetime(2026, 12, 1, 10, tzinfo=timezone.utc)
    assert job.spec.idempotency_key == "receipt-42"
    assert job.status.state is State.QUEUED


def test_job_spec_defaults():
    spec = JobSpec(queue="emails", handler="send-receipt")
    assert spec.payload == {}
    assert (spec.run_at, spec.idempotency_key, spec.priority, spec.cancel, spec.retry_token) == (
        None, None, 0, False, None,
    )


def test_job_status_defaults():
    status = JobStatus()
    assert (status.state, status.attempt, status.sequence, status.attempts, status.conditions) == (None, 0, 0, [], [])


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"handler": "h"}, id="no queue"),
        pytest.param({"queue": "q"}, id="no handler"),
        pytest.param({"queue": "", "handler": "h"}, id="empty queue"),
        pytest.param({"queue": "q", "handler": "h", "idempotencyKey": ""}, id="empty idempotency key"),
        pytest.param({"queue": "q", "handler": "h", "payload": [1, 2]}, id="payload not an object"),
        pytest.param({"queue": "q", "handler": "h", "runAt": "tomorrow"}, id="runAt not a time"),
    ],
)
def test_job_spec_validation(fields):
    with pytest.raises(ValidationError):
        JobSpec.model_validate(fields)


def test_job_status_round_trips_through_the_wire():
    status = JobStatus(
        state=State.RUNNING,
        attempt=2,
        sequence=3,
        attempts=[Attempt(attempt=2, sequence=3, pod="job-a-3", result="running", started_at="2026-01-01T00:00:00Z")],
        conditions=[Condition(type="Running", status="True", reason="Started")],
    )
    wire = status.wire()
    assert wire["state"] == "running"
    assert wire["attempts"][0] == {"attempt": 2, "sequence": 3, "pod": "job-a-3", "result": "running",
                                   "startedAt": "2026-01-01T00:00:00Z"}
    assert JobStatus.model_validate(wire) == status


@pytest.mark.parametrize("state", [s.value for s in State])
def test_every_state_parses(state):
    assert JobStatus.model_validate({"state": state}).state.value == state


def test_unknown_state_is_refused():
    with pytest.raises(ValidationError):
        JobStatus.model_validate({"state": "paused"})


def test_a_duplicated_status_equals_its_original_and_changes_to_it_never_reach_the_original():
    """JobStatus.duplicate (every reconcile's working copy) copies the lists and their entries; that is enough only
    while the entries hold scalars, which this test also pins."""
    from typing import Annotated, get_args, get_origin

    scalars = (str, int, bool, float, type(None))
    for model in (Attempt, Condition):
        for name, field in model.model_fields.items():
            args = [get_args(a)[0] if get_origin(a) is Annotated else a
                    for a in (get_args(field.annotation) or (field.annotation,))]
            assert all(a in scalars or isinstance(a, type) and issubclass(a, (str, int)) for a in args), (model, name)
    status = JobStatus.model_validate({
        "state": "running", "attempt": 1, "sequence": 1,
        "attempts": [{"attempt": 1, "sequence": 1, "pod": "job-a-1", "result": "running"}],
        "conditions": [{"type": "Ready", "status": "False", "reason": "Running", "message": "m"}]})
    copy = status.duplicate()
    assert copy == status and copy.attempts[0] is not status.attempts[0]
    copy.attempts[0].result = "succeeded"
    copy.conditions[0].status = "True"
    copy.attempts.append(Attempt(attempt=2, sequence=2, result="running"))
    copy.state = "succeeded"
    assert status.attempts == [Attempt(attempt=1, sequence=1, pod="job-a-1", result="running")]
    assert status.conditions[0].status == "False" and status.state == "running"
