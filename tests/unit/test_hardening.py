"""Hardening, the pure parts (issue 16): total parsing of every time, duration and number read from an object,
JSON of any depth, the per-key backoff of the work queues, and the informer's per-object isolation.

"Total" means: for any input, a value in range or a ValueError that names the rule; never an OverflowError,
TypeError or RecursionError from deep inside the operator.
"""

from __future__ import annotations

import asyncio
import json
import math
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sextant.kube import jsontext
from sextant.kube.informer import Informer
from sextant.lifecycle.reading import COND_INVALID, invalid_conditions
from sextant.controller.slots import line_position
from sextant.controller.operator import supervise
from sextant.controller.view import View
from sextant.lifecycle.reading import InvalidJob, read_job
from sextant.kube.workqueue import RETRY_CAP, Backoff, WorkQueue, describe, failed
from sextant.kube.client import MAX_RETRY_AFTER, ApiError, Gone, _event, retry_after
from sextant.lifecycle import transitions as T
from sextant.lifecycle.backoff import backoff_delay
from sextant.resources.common import (MAX_DURATION, MAX_TIME, MIN_TIME, json_depth, parse_duration,
                                      parse_time, time_or_none)
from sextant.resources.handler import HandlerSpec
from sextant.resources.job import MAX_PAYLOAD_DEPTH, JobSpec, JobStatus, State
from sextant.resources.queue import Backoff as QueueBackoff
from sextant.resources.queue import QueueSpec
from sextant.resources.schedule import ScheduleSpec, ScheduleStatus
from sextant.lifecycle.retention import Expiry, expiry
from tests.harness import until

from _builders import T0, Job, at, queue, spec

UTC = timezone.utc
# Anything JSON can say, nested a little.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def nested(depth: int, leaf: Any = None) -> Any:
    value: Any = leaf
    for i in range(depth):
        value = {"a": value} if i % 2 else [value]
    return value


# ================================================================ times
@pytest.mark.parametrize("text,want", [
    ("2026-12-01T10:00:00Z", datetime(2026, 12, 1, 10, tzinfo=UTC)),
    ("2026-12-01t10:00:00z", datetime(2026, 12, 1, 10, tzinfo=UTC)),  # RFC 3339 allows lower case
    ("2026-12-01T10:00:00", datetime(2026, 12, 1, 10, tzinfo=UTC)),  # no offset: UTC, as transitions read it
    ("2026-12-01T10:00:00.123456789Z", datetime(2026, 12, 1, 10, 0, 0, 123456, tzinfo=UTC)),  # Go's nanoseconds
    ("2026-12-01T10:00:00+23:59", datetime(2026, 11, 30, 10, 1, tzinfo=UTC)),
    ("1970-01-01T00:00:00Z", MIN_TIME),
    ("9000-01-01T00:00:00Z", MAX_TIME),
])
def test_parse_time_reads_what_the_api_server_accepts(text, want):
    assert parse_time(text) == want


@pytest.mark.parametrize("text", [
    "9999-12-31T23:59:59-01:00",  # the reported crash: year 10000 in UTC
    "9999-12-31T23:59:59Z", "9000-01-01T00:00:00.000001Z", "0000-01-01T00:00:00Z", "0001-01-01T00:00:00Z",
    "1969-12-31T23:59:59Z", "1970-01-01T00:00:00+00:01",
])
def test_parse_time_refuses_times_out_of_range(text):
    with pytest.raises(ValueError, match="out of range"):
        parse_time(text)


@pytest.mark.parametrize("value", ["yesterday", "2026-13-01T00:00:00Z", "2026-12-01T25:00:00Z", "10000-01-01T00:00:00Z",
                                   "-0001-01-01T00:00:00Z", "2026-12-01T10:00:00+24:00", "x" * 10_000, "\x00", 12, 1.5,
                                   [], {}, True])
def test_parse_time_refuses_what_is_not_a_time(value):
    with pytest.raises(ValueError, match="time"):
        parse_time(value)
    assert time_or_none(value) is None


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=40), st.from_regex(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9:.]{5,20}([Zz]|[+-][0-9]{2}:?[0-9]{2})?\Z")))
def test_parse_time_is_total_on_any_text(text):
    try:
        moment = parse_time(text)
    except ValueError:
        return
    assert moment is None or (moment.utcoffset() == timedelta(0) and MIN_TIME <= moment <= MAX_TIME)


@settings(max_examples=300, deadline=None)
@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
       st.integers(-(24 * 60 - 1), 24 * 60 - 1))
def test_parse_time_is_total_on_any_offset(moment, offset_minutes):
    """Every RFC 3339 time Go's parser accepts (offsets up to ±23:59, years 1..9999) reads or is refused."""
    aware = moment.replace(tzinfo=timezone(timedelta(minutes=offset_minutes)))
    try:
        utc = parse_time(aware.isoformat())
    except ValueError as exc:
        assert "out of range" in str(exc)
        return
    assert MIN_TIME <= utc <= MAX_TIME and utc == aware


def test_the_farthest_run_at_is_only_scheduled():
    job = Job(spec=spec(runAt="9000-01-01T00:00:00Z"))
    job.reconcile()
    assert job.status.state == State.SCHEDULED and parse_time(job.status.next_attempt_at) == MAX_TIME


def test_a_time_plus_any_duration_stays_representable():
    assert MAX_TIME + MAX_DURATION * 100 < datetime.max.replace(tzinfo=UTC)
    assert MIN_TIME - MAX_DURATION * 100 > datetime.min.replace(tzinfo=UTC)


# ================================================================ durations
@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=40), st.from_regex(r"\A([0-9]{1,30}(\.[0-9]{1,10})?(ms|s|m|h)){1,4}\Z")))
def test_parse_duration_is_total(text):
    try:
        delta = parse_duration(text)
    except ValueError:
        return
    assert timedelta(0) <= delta <= MAX_DURATION


@pytest.mark.parametrize("text", ["87600h1ms", "99999999999999999999999h", "9" * 31 + "s", "1" * 300 + "h"])
def test_parse_duration_refuses_durations_beyond_the_maximum(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_the_maximum_duration_is_accepted():
    assert parse_duration("87600h") == MAX_DURATION


# ================================================================ the models
def errors_of(exc: ValidationError) -> str:
    return " ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())


@pytest.mark.parametrize("run_at", ["9999-12-31T23:59:59-01:00", "0000-01-01T00:00:00Z", "1969-07-20T20:17:00Z"])
def test_a_job_with_run_at_out_of_range_is_refused_naming_the_field(run_at):
    with pytest.raises(ValidationError) as caught:
        spec(runAt=run_at)
    assert "runAt" in errors_of(caught.value) and "out of range" in errors_of(caught.value)


def test_run_at_is_read_as_utc():
    assert spec(runAt="2026-12-01T11:00:00+01:00").run_at == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert spec(runAt="2026-12-01T10:00:00").run_at == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert spec(runAt=datetime(2026, 12, 1, 10)).run_at == datetime(2026, 12, 1, 10, tzinfo=UTC)


@pytest.mark.parametrize("depth", [MAX_PAYLOAD_DEPTH + 1, 1000, 9_990])
def test_a_payload_nested_too_deeply_is_refused(depth):
    with pytest.raises(ValidationError, match=f"nests deeper than {MAX_PAYLOAD_DEPTH}"):
        spec(payload={"x": nested(depth - 1)})
    with pytest.raises(ValidationError, match="nests deeper"):
        ScheduleSpec.model_validate({"interval": "1m", "jobTemplate": {"queue": "q", "handler": "h",
                                                                        "payload": {"x": nested(depth - 1)}}})


def test_a_payload_just_deep_enough_is_taken():
    assert json_depth(spec(payload={"x": nested(MAX_PAYLOAD_DEPTH - 1)}).payload, 10_000) == MAX_PAYLOAD_DEPTH


@pytest.mark.parametrize("value,depth", [(1, 0), ("x", 0), ({}, 1), ([], 1), ({"a": [1]}, 2), (nested(50), 50)])
def test_json_depth(value, depth):
    assert json_depth(value, 100) == depth


def test_json_depth_stops_counting_past_its_limit():
    assert json_depth(nested(100_000), 10) == 11


@pytest.mark.parametrize("priority", [2**31, -(2**31) - 1, 2**63])
def test_priority_is_32_bit(priority):
    with pytest.raises(ValidationError, match="priority"):
        spec(priority=priority)
    assert spec(priority=2**31 - 1).priority == 2**31 - 1


@pytest.mark.parametrize("fields,field", [
    ({"maxAttempts": 1001}, "maxAttempts"),
    ({"leaseDuration": "999ms"}, "leaseDuration"),
    ({"timeout": "87601h"}, "timeout"),
    ({"cancelGrace": "99999999999999999999h"}, "cancelGrace"),
    ({"retention": {"dead": "100000h"}}, "retention.dead"),
    ({"backoff": {"initial": "100000h", "max": "100000h"}}, "backoff.initial"),
    ({"backoff": {"factor": 1e308}}, "backoff.factor"),
    ({"backoff": {"jitter": float("nan")}}, "backoff.jitter"),
])
def test_queue_values_out_of_range_are_refused_naming_the_field(fields, field):
    with pytest.raises(ValidationError) as caught:
        QueueSpec.model_validate(fields)
    assert field in errors_of(caught.value)


@pytest.mark.parametrize("field", ["nextAttemptAt", "queuedAt", "finishedAt", "timeoutAt", "stopRequestedAt"])
def test_a_status_time_that_cannot_be_read_is_refused_naming_it(field):
    with pytest.raises(ValidationError) as caught:
        JobStatus.model_validate({field: "9999-12-31T23:59:59-01:00"})
    assert "out of range" in errors_of(caught.value)
    with pytest.raises(ValidationError):
        ScheduleStatus.model_validate({"evaluatedUntil": "soon"})


MODEL_FIELDS = {
    JobSpec: ["queue", "handler", "payload", "runAt", "idempotencyKey", "priority", "cancel", "retryToken"],
    QueueSpec: ["concurrency", "maxAttempts", "backoff", "timeout", "leaseDuration", "cancelGrace", "retention"],
    HandlerSpec: ["template", "heartbeat", "nonRetryableExitCodes"],
    ScheduleSpec: ["cron", "interval", "timeZone", "jitter", "jobTemplate", "startingDeadline", "suspend"],
    JobStatus: ["state", "attempt", "sequence", "run", "nextAttemptAt", "queuedAt", "attempts", "conditions"],
}
ODD = st.one_of(JSON, st.sampled_from(["9999-12-31T23:59:59-01:00", "0000-01-01T00:00:00Z", "99999999999h",
                                       "1e400", 2**64, -2**63, 1e308, "\ud7ff\U0001f600", nested(300)]))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(MODEL_FIELDS, key=lambda m: m.__name__)).flatmap(
    lambda model: st.tuples(st.just(model), st.dictionaries(st.sampled_from(MODEL_FIELDS[model]), ODD, max_size=5))))
def test_reading_any_object_is_a_model_or_a_validation_error(case):
    model, data = case
    try:
        model.model_validate(data)
    except ValidationError:
        pass


# ================================================================ the rules with extreme values
EXTREME_DURATIONS = st.sampled_from(["0s", "1ms", "1s", "87600h", "0.0001ms", "87599h59m59s999ms"])


@settings(max_examples=150, deadline=None)
@given(timeout=EXTREME_DURATIONS.filter(lambda d: d not in ("0s", "0.0001ms")),  # a timeout is at least 1ms
       lease=st.sampled_from(["1s", "87600h"]), grace=EXTREME_DURATIONS,
       initial=EXTREME_DURATIONS, factor=st.floats(1.0, 100.0), attempts=st.integers(1, 1000),
       run_at=st.sampled_from([None, "1970-01-01T00:00:00Z", "2026-03-01T12:00:00Z", "2026-03-01T12:00:00.5Z"]),
       priority=st.sampled_from([0, 2**31 - 1, -(2**31)]))
def test_the_lifecycle_computes_with_any_accepted_values(timeout, lease, grace, initial, factor, attempts, run_at,
                                                         priority):
    """Every delay, deadline and time the rules compute from accepted values stays representable."""
    job = Job(spec=spec(runAt=run_at, priority=priority),
              queue=queue(timeout=timeout, leaseDuration=lease, cancelGrace=grace, maxAttempts=attempts,
                          backoff={"policy": "exponential", "initial": initial, "max": "87600h", "factor": factor}))
    job.reconcile()
    if job.status.state == State.SCHEDULED:
        job.advance_to(job.status.next_attempt_at)
        job.reconcile()
    assert job.status.state == State.QUEUED
    job.run_attempt(exit_code=1)
    assert job.status.state in (State.FAILED, State.DEAD, State.QUEUED)  # queued again at once after a 0s backoff
    if job.status.state == State.FAILED:
        assert parse_time(job.status.next_attempt_at) <= MAX_TIME + MAX_DURATION


@settings(max_examples=300, deadline=None)
@given(initial=st.sampled_from(["0s", "1ms", "10s", "87600h"]), max_=st.sampled_from(["1ms", "10m", "87600h"]),
       factor=st.floats(1.0, 100.0), jitter=st.floats(0.0, 1.0), attempt=st.integers(1, 2**64),
       sample=st.floats(0.0, 1.0, exclude_max=True), policy=st.sampled_from(["exponential", "fixed"]))
def test_backoff_delay_is_total(initial, max_, factor, jitter, attempt, sample, policy):
    backoff = QueueBackoff(policy=policy, initial=initial, factor=factor, jitter=jitter,
                           max=max_ if policy == "fixed" or parse_duration(max_) >= parse_duration(initial) else initial)
    delay = backoff_delay(backoff, attempt, sample)
    assert timedelta(0) <= delay <= 2 * MAX_DURATION


def test_retention_keeps_a_job_whose_finish_time_cannot_be_read():
    assert expiry(State.SUCCEEDED, "9999-12-31T23:59:59-01:00", QueueSpec().retention) == Expiry(None, None)
    assert expiry(State.SUCCEEDED, "garbage", QueueSpec().retention) == Expiry(None, None)


# ================================================================ what the controller reads
def raw_job(spec_: dict[str, Any] | None = None, status: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
            "metadata": {"name": "job-a", "namespace": "ns", "uid": "u", "resourceVersion": "7", "generation": 1,
                         "creationTimestamp": "2026-03-01T12:00:00Z", **meta},
            "spec": {"queue": "q", "handler": "h", **(spec_ or {})}, "status": status or {}}


@pytest.mark.parametrize("spec_,status,field", [
    ({"runAt": "9999-12-31T23:59:59-01:00"}, {}, "spec.runAt"),
    ({"runAt": "0000-01-01T00:00:00Z"}, {}, "spec.runAt"),
    ({"payload": {"x": nested(500)}}, {}, "spec.payload"),
    ({"priority": 2**40}, {}, "spec.priority"),
    ({}, {"state": "queued", "queuedAt": "soon"}, "status.queuedAt"),
    ({}, {"state": "running", "attempts": [{"attempt": 1}]}, "status.attempts[0]"),
])
def test_a_job_that_cannot_be_read_is_invalid_naming_the_field(spec_, status, field):
    raw = raw_job(spec_, status)
    with pytest.raises(InvalidJob) as caught:
        read_job(raw)
    assert str(caught.value).startswith(field), str(caught.value)
    view = View()
    view.upsert_job(raw)  # taking it in never fails
    assert ("ns", raw["metadata"]["name"]) in view.jobs
    assert line_position(raw) is None or spec_.get("runAt") is None


def test_the_invalid_condition_is_written_once_and_keeps_the_others():
    others = [{"type": "Blocked", "status": "True", "reason": "QueueNotFound", "message": "m"}, "junk", {"type": 3}]
    conditions = invalid_conditions(others, "spec.runAt: out of range", T0, 1)
    # Invalid, and for GitOps tools (lifecycle/health.py) Stalled: kstatus reads it as Failed
    assert [c["type"] for c in conditions] == ["Blocked", COND_INVALID, "Ready", "Reconciling", "Stalled"]
    by_type = {c["type"]: c for c in conditions}
    invalid = by_type[COND_INVALID]
    assert (invalid["status"], invalid["reason"], invalid["message"]) == ("True", "InvalidSpec",
                                                                          "spec.runAt: out of range")
    assert [by_type[t]["status"] for t in ("Ready", "Reconciling", "Stalled")] == ["False", "False", "True"]
    assert by_type["Stalled"]["message"] == "spec.runAt: out of range" and by_type["Stalled"]["observedGeneration"] == 1
    assert invalid_conditions(conditions, "spec.runAt: out of range", at(60), 1) is None
    changed = {c["type"]: c for c in invalid_conditions(conditions, "status.queuedAt: bad", at(60), 1)}
    assert changed[COND_INVALID]["reason"] == changed["Stalled"]["reason"] == "InvalidStatus"
    assert changed["Stalled"]["lastTransitionTime"] == by_type["Stalled"]["lastTransitionTime"]  # still True
    assert invalid_conditions("not a list", "spec.x: y", T0, None)[0]["type"] == COND_INVALID


@pytest.mark.parametrize("renew", ["10000-01-01T00:59:59.000000Z", "0000-01-01T00:00:00.000000Z", "garbage", 17, None])
def test_a_lease_with_an_odd_renewal_is_no_sign_of_life(renew):
    view = View()
    lease = {"metadata": {"name": "job-a-1", "namespace": "ns", "labels": {"sextant.dev/job": "job-a",
                                                                          "sextant.dev/sequence": "1"}},
             "spec": {"renewTime": renew, "leaseDurationSeconds": 2**31 - 1}}
    assert view.upsert_lease(lease) is None
    assert not view.leases


# ================================================================ JSON of any depth
@settings(max_examples=500, deadline=None)
@given(JSON)
def test_deep_loads_reads_json_as_the_standard_library_does(value):
    text = json.dumps(value)
    assert jsontext.deep_loads(text) == json.loads(text)
    assert jsontext.deep_loads(json.dumps(value, indent=2)) == value


@pytest.mark.parametrize("text", ["", "{", "[1,]", '{"a" 1}', '{"a":1,}', "[1 2]", "nul", '"open', "01", "1.",
                                  "{}{}", '{1:2}', "[-]"])
def test_deep_loads_refuses_what_is_not_json(text):
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        jsontext.deep_loads(text)
    with pytest.raises(ValueError):
        jsontext.loads(text.encode())


@pytest.mark.parametrize("depth", [1_025, 9_990, 100_000])
def test_loads_reads_documents_deeper_than_orjson_does(depth):
    text = '{"metadata":{"name":"job-a"},"spec":{"payload":' + '{"a":' * depth + '1' + '}' * depth + '}}'
    obj = jsontext.loads(text.encode())
    assert obj["metadata"]["name"] == "job-a"
    assert json_depth(obj, 10**6) == depth + 2


# ================================================================ the Kubernetes client's parsing
@pytest.mark.parametrize("header,want", [(None, 0.0), ("", 0.0), ("3", 3.0), ("0.5", 0.5), ("-4", 0.0),
                                         ("1e9", MAX_RETRY_AFTER), ("nan", 0.0), ("inf", MAX_RETRY_AFTER),
                                         ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0)])
def test_retry_after_is_total_and_bounded(header, want):
    assert retry_after(header) == want


@pytest.mark.parametrize("line", [b"{", b"[]", b'{"type":"ADDED"}', b'{"type":1,"object":{}}', b'{"object":{}}',
                                  b'{"type":"ADDED","object":[]}', b"\xff\xfe"])
def test_a_malformed_watch_line_ends_the_watch_with_an_api_error(line):
    with pytest.raises(ApiError) as caught:
        _event(line, "/x")
    assert caught.value.status == 0


def test_watch_error_events():
    with pytest.raises(Gone):
        _event(b'{"type":"ERROR","object":{"code":410}}', "/x")
    with pytest.raises(ApiError) as caught:
        _event(b'{"type":"ERROR","object":{"code":"five hundred"}}', "/x")
    assert caught.value.status == 500
    deep = b'{"type":"ADDED","object":{"metadata":{"name":"n"},"spec":' + b'[' * 5000 + b']' * 5000 + b"}}"
    assert _event(deep, "/x")[1]["metadata"]["name"] == "n"


# ================================================================ per-key backoff
def test_backoff_doubles_from_a_second_to_five_minutes_per_key():
    backoff = Backoff()
    delays = [backoff.when("a") for _ in range(12)]
    assert delays == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]
    assert backoff.when("b") == 1  # keys are independent
    assert backoff.failures("a") == 12
    backoff.forget("a")
    assert backoff.failures("a") == 0 and backoff.when("a") == 1


def test_backoff_of_a_key_that_fails_for_ever_stays_at_the_cap():
    backoff = Backoff()
    for _ in range(10_000):
        delay = backoff.when("k")
    assert delay == RETRY_CAP and math.isfinite(delay)


async def test_a_failed_key_comes_back_after_its_backoff_and_success_forgets():
    queue = WorkQueue(Backoff(base=0.05, cap=0.2))
    queue.add("k")
    key = await queue.get()
    assert failed(queue, key, ValueError("boom"), kind="job", log=_log()) == 0.05
    queue.done(key)
    assert len(queue) == 0 and queue.delayed == 1
    assert await asyncio.wait_for(queue.get(), 2) == "k"
    assert failed(queue, "k", ValueError("again"), kind="job", log=_log()) == 0.1
    queue.done("k")
    assert await asyncio.wait_for(queue.get(), 2) == "k"
    queue.forget("k")
    queue.done("k")
    assert queue.backoff.failures("k") == 0


async def test_the_first_failure_of_a_streak_is_surfaced_once():
    queue, surfaced = WorkQueue(Backoff(base=10, cap=10)), []
    for _ in range(3):
        failed(queue, ("ns", "job-a"), ValueError("boom"), kind="job", log=_log(), surface=surfaced.append)
    failed(queue, ("ns", "job-b"), KeyError("spec"), kind="job", log=_log(), surface=surfaced.append)
    assert surfaced == ["ValueError: boom", "KeyError: 'spec'"]
    assert queue.delayed == 2


async def test_retry_failed_now_skips_the_backoff_of_every_failed_key():
    queue = WorkQueue(Backoff(base=60, cap=60))
    for key in ("a", "b"):
        queue.add_rate_limited(key)
    queue.add_after("c", 60)  # not a failure: stays delayed
    assert queue.retry_failed_now() == 2
    assert {await queue.get(), await queue.get()} == {"a", "b"}
    assert queue.delayed == 1 and queue.backoff.failures("a") == 1


async def test_add_after_keeps_the_earliest_of_several_delays():
    queue = WorkQueue()
    queue.add_after("k", 60)
    queue.add_after("k", 0.01)
    queue.add_after("k", 30)
    assert await asyncio.wait_for(queue.get(), 2) == "k"
    assert queue.delayed == 0


def test_describe_is_one_bounded_line():
    assert describe(ValueError("a\nb")) == "ValueError: a b"
    assert len(describe(ValueError("x" * 10_000))) == 500


# ================================================================ the informer, with a scripted API
class ScriptedKube:
    """Stands in for the API server's list and watch: each call plays the next entry of a script."""

    def __init__(self, lists: list[Any], watches: list[Any]) -> None:
        self.lists, self.watches = lists, watches
        self.watched_from: list[str] = []

    async def pages(self, path: str, params: dict[str, Any], page: int = 500, page_bytes: int | None = None):
        step = self.lists.pop(0) if self.lists else ([], "1")
        if isinstance(step, Exception):
            raise step
        yield step

    async def watch(self, path, resource_version, params, opened=None):
        self.watched_from.append(resource_version)
        step = self.watches.pop(0) if self.watches else None
        if step is None:
            await asyncio.sleep(3600)
            return
        if opened:
            opened()
        for event in step:
            if isinstance(event, Exception):
                raise event
            yield event


def obj(name: str, rv: str, **fields: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}, **fields}


async def test_one_bad_object_neither_stops_the_first_list_nor_the_informer():
    seen: list[tuple[str, str]] = []
    reported: list[str] = []
    failures = {"bad": 2}

    def on_change(kind: str, o: dict[str, Any]) -> None:
        name = o["metadata"]["name"]
        if failures.get(name):
            failures[name] -= 1
            raise OverflowError("date value out of range")
        seen.append((kind, name))

    kube = ScriptedKube([([obj("a", "1"), obj("bad", "2"), {"no": "metadata"}, obj("c", "3")], "3")],
                        [[("ADDED", obj("d", "4"))]])
    informer = Informer(kube, "/jobs", on_change, name="jobs", backoff=Backoff(base=0.05, cap=0.05),
                        on_error=lambda o, message: reported.append(message))
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 2)
        assert informer.healthy
        await until(lambda: ("upsert", "bad") in seen and ("upsert", "d") in seen)
    finally:
        task.cancel()
    assert [n for _, n in seen if n != "d"] == ["a", "c", "bad"]
    assert len(reported) == 1 and "OverflowError" in reported[0]  # once per streak, not per retry


async def test_a_newer_version_replaces_the_one_waiting_for_its_retry():
    seen: list[str] = []

    def on_change(kind: str, o: dict[str, Any]) -> None:
        if o["metadata"]["resourceVersion"] == "1":
            raise ValueError("unreadable")
        seen.append(o["metadata"]["resourceVersion"])

    kube = ScriptedKube([([obj("a", "1")], "1")], [[("MODIFIED", obj("a", "2"))]])
    informer = Informer(kube, "/jobs", on_change, backoff=Backoff(base=0.05, cap=0.05))
    task = asyncio.create_task(informer.run())
    try:
        await until(lambda: seen == ["2"])
        # The informer has gone on to its next watch: whatever it was going to deliver of the first list, it has.
        await until(lambda: len(kube.watched_from) == 2)
    finally:
        task.cancel()
    assert seen == ["2"]


async def test_a_broken_watch_drops_readiness_and_resumes_where_it_was():
    seen: list[str] = []
    reconnects: list[bool] = []
    cut = ApiError(0, "ClientPayloadError: Response payload is not completed")
    kube = ScriptedKube([([obj("a", "1")], "10")],
                        [[("ADDED", obj("b", "11")), cut], [cut], [("ADDED", obj("c", "12"))]])
    informer = Informer(kube, "/jobs", lambda kind, o: seen.append(o["metadata"]["name"]),
                        on_reconnect=lambda: reconnects.append(True))
    task = asyncio.create_task(informer.run())
    try:
        await until(lambda: "c" in seen)
        assert informer.healthy
    finally:
        task.cancel()
    assert seen == ["a", "b", "c"]
    assert kube.watched_from == ["10", "11", "11", "12"]  # resumed from the last version seen, never listed again
    assert informer.connection_errors == 2 and reconnects


async def test_any_error_of_the_list_is_retried():
    kube = ScriptedKube([OSError("connection reset"), ValueError("malformed"), ([obj("a", "1")], "1")], [])
    seen: list[str] = []
    informer = Informer(kube, "/jobs", lambda kind, o: seen.append(o["metadata"]["name"]))
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 5)
    finally:
        task.cancel()
    assert seen == ["a"] and informer.connection_errors == 2


async def test_gone_lists_again_and_delivers_deletes():
    seen: list[tuple[str, str]] = []
    kube = ScriptedKube([([obj("a", "1"), obj("b", "2")], "2"), ([obj("b", "2")], "5")],
                        [[Gone(410, "too old resource version")]])
    informer = Informer(kube, "/jobs", lambda kind, o: seen.append((kind, o["metadata"]["name"])))
    task = asyncio.create_task(informer.run())
    try:
        await until(lambda: ("delete", "a") in seen)
    finally:
        task.cancel()
    assert seen == [("upsert", "a"), ("upsert", "b"), ("delete", "a")]  # b unchanged: not delivered again


async def test_a_relist_is_diffed_against_the_store_the_callback_keeps():
    """With `known` (the view's jobs), the informer remembers no version per object: a relist delivers what the
    store lacks or holds at another version, and a delete for what the store holds and the list does not."""
    store: dict[tuple[str, str], str] = {}
    seen: list[tuple[str, str]] = []

    def on_change(kind: str, o: dict[str, Any]) -> None:
        key = (o["metadata"]["namespace"], o["metadata"]["name"])
        seen.append((kind, key[1]))
        if kind == "delete":
            store.pop(key, None)
        else:
            store[key] = o["metadata"]["resourceVersion"]

    kube = ScriptedKube([([obj("a", "1"), obj("b", "2")], "2"), ([obj("b", "2"), obj("c", "4")], "5")],
                        [[Gone(410, "too old resource version")]])
    informer = Informer(kube, "/jobs", on_change, known=lambda: store)
    task = asyncio.create_task(informer.run())
    try:
        await until(lambda: ("delete", "a") in seen)
    finally:
        task.cancel()
    assert seen == [("upsert", "a"), ("upsert", "b"), ("upsert", "c"), ("delete", "a")]
    assert informer._versions == {}, "nothing remembered per object"


async def test_supervise_restarts_a_loop_that_raises():
    runs: list[int] = []

    async def loop() -> None:
        runs.append(1)
        if len(runs) < 3:
            raise RuntimeError("a defect")
        await asyncio.sleep(3600)

    task = asyncio.create_task(supervise("test loop", loop, first_delay=0.01))
    try:
        await until(lambda: len(runs) == 3)
    finally:
        task.cancel()


# ---------------------------------------------------------------- helpers
def _log():
    import logging

    return logging.getLogger("test")


# ================================================================ handler templates the operator fills in
def handler_spec(container: dict[str, Any], **pod: Any) -> dict[str, Any]:
    return {"template": {"spec": {"containers": [{"name": "handler", "image": "x", **container}], **pod}}}


@pytest.mark.parametrize("container,pod,problem", [
    ({"env": True}, {}, r"containers\[0\].env must be a list"),
    ({"env": "A=1"}, {}, r"containers\[0\].env must be a list"),
    ({"env": [["A", "1"]]}, {}, r"containers\[0\].env must be a list"),
    ({"env": [{"value": "1"}]}, {}, r"containers\[0\].env must be a list of objects with a name"),
    ({"securityContext": "privileged"}, {}, r"containers\[0\].securityContext must be an object"),
    ({"securityContext": {"capabilities": {"add": "NET_ADMIN"}}}, {}, r"capabilities.add must be a list of strings"),
    ({"terminationMessagePolicy": 1}, {}, "terminationMessagePolicy must be a string"),
    ({}, {"os": "linux"}, "template.spec.os must be an object"),
    ({}, {"securityContext": [1]}, "template.spec.securityContext must be an object"),
    ({}, {"initContainers": {"name": "x"}}, "initContainers must be a list"),
    ({}, {"initContainers": ["x"]}, r"initContainers\[0\] must be an object"),
])
def test_a_handler_whose_template_the_operator_cannot_fill_in_is_refused(container, pod, problem):
    with pytest.raises(ValidationError, match=problem):
        HandlerSpec.model_validate(handler_spec(container, **pod))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(container=st.dictionaries(st.sampled_from(["env", "securityContext", "terminationMessagePolicy"]),
                                 JSON | st.just([{"name": "A", "value": "1"}]) |
                                 st.just({"capabilities": {"add": ["NET_ADMIN"], "drop": JSON}})),
       pod=st.dictionaries(st.sampled_from(["os", "securityContext", "initContainers"]), JSON))
def test_every_handler_that_is_read_builds_a_pod(container, pod):
    """Found by the adversarial cluster test: a Handler whose env was `true` failed every pod build. Now a
    template either is refused when read (naming the field), or builds its pods."""
    from sextant.controller.pods import build_pod
    from sextant.lifecycle.transitions import CreatePod

    try:
        spec_ = HandlerSpec.model_validate(handler_spec(container, **pod))
    except ValidationError:
        return
    raw = raw_job()
    pod_ = build_pod(raw, read_job(raw), spec_, QueueSpec(), CreatePod("job-a-1", 1, 1))
    assert {"SEXTANT_ATTEMPT_REF", "SEXTANT_POD_UID"} <= {e["name"] for e in pod_["spec"]["containers"][0]["env"][-3:]}


@pytest.mark.parametrize("field,value", [("attempt", -1), ("sequence", -5), ("maxAttempts", 0)])
def test_status_counters_are_not_negative(field, value):
    with pytest.raises(ValidationError, match=field):
        JobStatus.model_validate({field: value})


def test_a_running_status_whose_attempt_was_set_to_zero_still_backs_off():
    job = Job(queue=queue(maxAttempts=5, backoff={"policy": "fixed", "initial": "10s"}))
    job.reconcile()
    job.admit()
    job.status.attempt = 0  # someone else's status write
    job.set_pod("Failed", exit_code=1)
    job.reconcile()
    assert job.status.state == State.FAILED and parse_time(job.status.next_attempt_at) == job.now + timedelta(seconds=10)


# ================================================================ the other loops survive
class RecordingKube:
    """Answers the leader elector's and the event poster's calls from a script; raises what it is told to."""

    def __init__(self, lease: Any = None, failures: list[BaseException] | None = None) -> None:
        self.lease, self.failures, self.calls = lease, list(failures or []), []

    async def _maybe_fail(self) -> None:
        if self.failures:
            raise self.failures.pop(0)

    async def get(self, path: str) -> dict[str, Any]:
        await self._maybe_fail()
        return self.lease

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("create", body))
        await self._maybe_fail()
        return body

    async def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append((method, kwargs.get("body")))
        await self._maybe_fail()
        return kwargs.get("body") or {}


@pytest.mark.parametrize("renew,duration", [("10000-01-01T00:59:59.000000Z", 15), ("garbage", 15), (None, "15"),
                                            ("2026-03-01T12:00:00.000000Z", -5), (17, 2**40), ("", None)])
async def test_leader_election_reads_any_lease(renew, duration):
    from sextant.controller.leader import LeaderElector
    from sextant.controller.settings import ElectionSettings

    lease = {"metadata": {"resourceVersion": "1"},
             "spec": {"holderIdentity": "someone-else", "renewTime": renew, "leaseDurationSeconds": duration}}
    elector = LeaderElector(RecordingKube(lease), ElectionSettings("ns", retry_period=0.01), "me")
    wait = await elector._try()
    assert 0 < wait <= 2.0


async def test_leader_election_survives_any_error():
    from sextant.controller.leader import LeaderElector
    from sextant.controller.settings import ElectionSettings

    kube = RecordingKube({"metadata": {"resourceVersion": "1"}, "spec": {}},
                         [RuntimeError("a defect"), KeyError("metadata"), ApiError(0, "refused")])
    elector = LeaderElector(kube, ElectionSettings("ns", retry_period=0.01), "me")
    task = asyncio.create_task(elector.run())
    try:
        await until(elector.is_leader)
    finally:
        task.cancel()


async def test_the_event_poster_survives_any_error():
    from sextant.kube.events import EventRecorder

    kube = RecordingKube(failures=[RuntimeError("odd"), ApiError(500, "down")])
    recorder = EventRecorder(kube, lambda: T0, parallel=1)
    job_ = {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns"}}
    for reason in ("One", "Two", "Three"):
        recorder.record(job_, T.Event(reason, "m", "Warning"))
    task = asyncio.create_task(recorder.run())
    try:
        await until(lambda: len(kube.calls) == 3)
    finally:
        task.cancel()


async def test_a_failing_wake_up_does_not_stop_the_timers():
    from sextant.controller.timers import Timers

    fired: list[str] = []
    timers = Timers(lambda: datetime.now(UTC))

    def boom(key: Any) -> None:
        raise RuntimeError("a defect")

    timers.schedule("bad", datetime.now(UTC), boom)
    timers.schedule("good", datetime.now(UTC) + timedelta(milliseconds=20), fired.append)
    task = asyncio.create_task(timers.run())
    try:
        await until(lambda: fired == ["good"])
    finally:
        task.cancel()
