"""Snooze, output and progress (README, "Snooze, output and progress"): the pure rules and checks, table-tested.

The rules are lifecycle/'s (attempts.snoozed, snooze_allowed, progress_to_write; transitions._snooze); the limits and
input checks resources/report.py's, shared by the SDK, the runner, the worker and the operator.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from datetime import timedelta

import pytest

from _builders import JOB, Job, at, handler, queue
from sextant import sdk
from sextant.controller.pods import report_in
from sextant.lifecycle import attempts as A
from sextant.lifecycle.workers import report_of
from sextant.resources.common import format_time, parse_time
from sextant.resources.job import JobStatus, State
from sextant.resources.report import (MAX_SNOOZES, OUTPUT_MAX_BYTES, POD_REPORT_MAX_BYTES, PROGRESS_INTERVAL,
                                      SNOOZE_EXIT_CODE, Progress, check_fraction, output_json, parse_progress_line,
                                      pod_report, read_pod_report, snooze_seconds)
from sextant.resources.worker import WorkerResult
from sextant.runner.execution import Ended


def queued(**kw) -> Job:
    job = Job(**kw)
    job.reconcile()
    assert job.status.state == State.QUEUED
    return job


def snooze_report(seconds: float | None) -> A.Report:
    return A.Report(snooze_seconds=seconds)


# --- the snooze's delay ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("given, seconds", [
    ("30s", 30), ("5m", 300), ("1h30m", 5400), ("0s", 0), ("0", 0), (" 12.5 ", 12.5), (30, 30), (0.25, 0.25),
    (timedelta(minutes=2), 120), ("168h", 7 * 86400),
])
def test_a_snooze_delay_is_a_duration_or_seconds(given, seconds):
    assert snooze_seconds(given) == seconds


@pytest.mark.parametrize("given, words", [
    (-1, "from 0s to 7 days"), ("-3s", "not a duration"), ("169h", "from 0s to 7 days"), (math.nan, "from 0s"),
    (math.inf, "from 0s"), ("soon", "not a duration"), (True, "not bool"), (None, "not NoneType"),
    (timedelta(seconds=-1), "from 0s"),
])
def test_a_bad_snooze_delay_is_refused_naming_the_rule(given, words):
    with pytest.raises(ValueError, match="snooze|duration") as err:
        snooze_seconds(given)
    assert words in str(err.value)


def test_ctx_snooze_raises_snooze_and_a_bad_delay_fails_at_the_call():
    ctx = sdk.Context(jobs=None)
    with pytest.raises(sdk.Snooze) as err:
        ctx.snooze("30s")
    assert err.value.seconds == 30
    with pytest.raises(ValueError, match="from 0s to 7 days"):
        ctx.snooze(-5)
    assert sdk.SNOOZE_EXIT_CODE == SNOOZE_EXIT_CODE == 85


# --- snoozing: the lifecycle ---------------------------------------------------------------------------------------
def test_a_snoozed_attempt_is_scheduled_for_its_delay_and_not_counted():
    job = queued()
    d = job.run_attempt("Failed", SNOOZE_EXIT_CODE, report=snooze_report(30))
    st = d.status
    assert st.state == State.SCHEDULED
    assert (st.attempt, st.sequence, st.snoozes) == (0, 1, 1)
    assert st.next_attempt_at == format_time(job.now + timedelta(seconds=30)) and d.wake_at == parse_time(
        st.next_attempt_at)
    entry = st.attempts[-1]
    assert (entry.result, entry.reason, entry.exit_code) == ("snoozed", "Snoozed", SNOOZE_EXIT_CODE)
    assert "snoozed for 30s" in entry.message and st.finished_at is None
    assert [e.reason for e in d.events] == ["Snoozed"]
    job.advance(29)
    assert job.reconcile().status.state == State.SCHEDULED
    job.advance(1)
    assert job.reconcile().status.state == State.QUEUED
    d = job.run_attempt("Succeeded", 0)
    assert (d.status.state, d.status.attempt, d.status.sequence) == (State.SUCCEEDED, 1, 2)
    assert [a.attempt for a in d.status.attempts] == [1, 1]  # the snoozed one did not count


def test_a_snooze_of_zero_is_queued_at_once():
    job = queued()
    d = job.run_attempt("Failed", SNOOZE_EXIT_CODE, report=snooze_report(0))
    assert (d.status.state, d.status.attempt, d.status.snoozes) == (State.QUEUED, 0, 1)


@pytest.mark.parametrize("max_attempts", [1, 3])
def test_snoozes_never_use_up_max_attempts(max_attempts):
    job = queued(queue=queue(maxAttempts=max_attempts))
    for n in range(1, 6):
        d = job.run_attempt("Failed", SNOOZE_EXIT_CODE, report=snooze_report(1))
        assert (d.status.state, d.status.attempt, d.status.snoozes) == (State.SCHEDULED, 0, n)
        job.advance(1)
        job.reconcile()
    assert job.run_attempt("Failed", 1).status.state == (State.DEAD if max_attempts == 1 else State.FAILED)


@pytest.mark.parametrize("snoozes, allowed", [(0, True), (1, True), (MAX_SNOOZES - 1, True), (MAX_SNOOZES, False),
                                              (MAX_SNOOZES + 5, False)])
def test_snooze_allowed_below_the_maximum(snoozes, allowed):
    assert A.snooze_allowed(snoozes) is allowed


@pytest.mark.parametrize("max_attempts, state", [(1, State.DEAD), (3, State.FAILED)])
def test_a_snooze_past_the_maximum_is_a_counted_failed_attempt(max_attempts, state):
    job = queued(queue=queue(maxAttempts=max_attempts))
    job.status = job.status.model_copy(update={"snoozes": MAX_SNOOZES})
    d = job.run_attempt("Failed", SNOOZE_EXIT_CODE, report=snooze_report(30))
    st = d.status
    assert (st.state, st.attempt, st.snoozes) == (state, 1, MAX_SNOOZES)
    entry = st.attempts[-1]
    assert (entry.result, entry.reason) == ("failed", "TooManySnoozes")
    assert f"snoozed {MAX_SNOOZES} times" in entry.message


def test_exit_85_without_a_delay_is_an_ordinary_failure_that_says_so():
    job = queued()
    d = job.run_attempt("Failed", SNOOZE_EXIT_CODE, message="SEXTANT_SNOOZE_FILE was not written")
    entry = d.status.attempts[-1]
    assert (d.status.state, entry.result, entry.reason, d.status.attempt) == (State.FAILED, "failed", "Error", 1)
    assert "asks for a snooze, but no delay was given: SEXTANT_SNOOZE_FILE was not written" in entry.message


def test_a_snooze_wins_over_non_retryable_exit_codes_listing_85():
    job = queued(handler=handler([SNOOZE_EXIT_CODE]))
    assert job.run_attempt("Failed", SNOOZE_EXIT_CODE, report=snooze_report(5)).status.state == State.SCHEDULED


def test_a_cancel_standing_when_it_snoozes_cancels_the_job():
    job = queued()
    job.admit()
    job.set_pod("Running")
    job.reconcile()
    job.spec = job.spec.model_copy(update={"cancel": True})
    job.reconcile()
    job.set_pod("Failed", exit_code=SNOOZE_EXIT_CODE, report=snooze_report(30))
    assert job.reconcile().status.state == State.CANCELLED


def test_retry_resets_the_snoozes():
    job = queued(queue=queue(maxAttempts=1))
    job.status = job.status.model_copy(update={"snoozes": 7})
    job.run_attempt("Failed", 1)
    assert job.status.state == State.DEAD
    job.spec = job.spec.model_copy(update={"retry_token": "again"})
    d = job.reconcile()
    assert (d.status.state, d.status.attempt, d.status.snoozes) == (State.QUEUED, 0, None)


def test_a_worker_attempt_snoozes_the_same_way():
    seen = A.AssignmentObservation("w1", "w1/abc", 1, "Failed", exit_code=SNOOZE_EXIT_CODE,
                                   report=report_of(WorkerResult(job=JOB, uid="u", sequence=1, incarnation="abc",
                                                                 exit_code=SNOOZE_EXIT_CODE, snooze_seconds=12)))
    outcome = A.outcome_of(seen, None)
    assert (outcome.result, outcome.reason, outcome.snooze_seconds) == ("snoozed", "Snoozed", 12)


# --- output ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, kept", [
    ({"url": "s3://b/k"}, '{"url":"s3://b/k"}'), ([1, 2], "[1,2]"), ("done", '"done"'), (3, "3"), (False, "false"),
    ({"é": "ü"}, '{"é":"ü"}'), (None, None),
])
def test_output_is_kept_as_compact_json(value, kept):
    assert output_json(value) == (kept, None)


@pytest.mark.parametrize("value, words", [
    ("x" * OUTPUT_MAX_BYTES, f"over the cap of {OUTPUT_MAX_BYTES} bytes"), ({"f": object()}, "not JSON"),
    (math.nan, "not JSON"), ({"n": math.inf}, "not JSON"),
])
def test_output_that_cannot_be_kept_gets_a_note(value, words):
    output, note = output_json(value)
    assert output is None and words in note and "not kept" in note


def _nest(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def test_output_nested_too_deep_gets_a_note():
    assert output_json(_nest(100))[0] is not None
    output, note = output_json(_nest(101))
    assert output is None and "deeper than 100 levels" in note


def test_the_output_of_a_succeeded_attempt_is_kept_in_the_status():
    job = queued()
    d = job.run_attempt("Succeeded", 0, report=A.Report(output='{"rows":3}'))
    assert (d.status.state, d.status.output, d.status.output_note) == (State.SUCCEEDED, {"rows": 3}, None)
    assert d.status.wire()["output"] == {"rows": 3}


def test_a_note_instead_of_the_output_never_fails_the_attempt():
    job = queued()
    d = job.run_attempt("Succeeded", 0, report=A.Report(output_note="the output is 40000 bytes; not kept"))
    assert (d.status.state, d.status.output, d.status.output_note) == (State.SUCCEEDED, None,
                                                                         "the output is 40000 bytes; not kept")


def test_a_hostile_workers_huge_or_deep_output_is_not_kept():
    huge = WorkerResult(job=JOB, uid="u", sequence=1, incarnation="abc", exit_code=0, output="x" * 100_000)
    assert report_of(huge).output is None and "over the cap" in report_of(huge).output_note
    deep = WorkerResult(job=JOB, uid="u", sequence=1, incarnation="abc", exit_code=0, output=_nest(5000))
    assert report_of(deep).output is None and "deeper" in report_of(deep).output_note


@pytest.mark.parametrize("bad", [{"snoozeSeconds": -1}, {"snoozeSeconds": 10 ** 9}])
def test_a_worker_result_with_a_bad_snooze_is_refused_naming_the_field(bad):
    with pytest.raises(ValueError, match="snooze_seconds|snoozeSeconds"):
        WorkerResult.model_validate({"job": JOB, "uid": "u", "sequence": 1, "incarnation": "abc", **bad})


# --- pod mode's report: the termination message ----------------------------------------------------------------
def test_the_pod_report_round_trips_through_the_termination_message():
    text = pod_report(snooze_seconds=None, output='{"a":[1,2]}', output_note=None, message=None)
    assert read_pod_report(text) == {"output": {"a": [1, 2]}}
    report = report_in(text)
    assert (report.output, report.snooze_seconds) == ('{"a":[1,2]}', None)
    snoozed = report_in(pod_report(snooze_seconds=30, output=None, output_note=None, message="snoozed for 30s"))
    assert (snoozed.snooze_seconds, snoozed.message) == (30, "snoozed for 30s")
    assert pod_report(snooze_seconds=None, output=None, output_note=None, message=None) is None


def test_an_output_too_large_for_a_termination_message_becomes_a_note():
    big = json.dumps("y" * POD_REPORT_MAX_BYTES)
    text = pod_report(snooze_seconds=None, output=big, output_note=None, message=None)
    assert len(text.encode()) <= POD_REPORT_MAX_BYTES
    report = report_in(text)
    assert report.output is None and "termination message" in report.output_note


@pytest.mark.parametrize("message", [None, "", "Traceback: boom", '{"other": 1}', '{"sextant.dev/report": [1]}',
                                     '{"sextant.dev/report": {"snoozeSeconds": "soon"'])
def test_a_plain_or_odd_termination_message_is_no_report(message):
    assert read_pod_report(message) is None


def test_a_pod_report_with_a_bad_snooze_has_no_delay():
    report = report_in('{"sextant.dev/report":{"snoozeSeconds":-4}}')
    assert report is not None and report.snooze_seconds is None


# --- progress ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fraction", [0, 0.4, 1, 1.0])
def test_a_progress_fraction_lies_from_0_to_1(fraction):
    assert check_fraction(fraction) == fraction


@pytest.mark.parametrize("fraction", [-0.1, 1.01, math.nan, "0.5", None, True])
def test_a_bad_progress_fraction_is_refused_naming_the_rule(fraction):
    with pytest.raises(ValueError, match="fraction must be a number from 0 to 1"):
        check_fraction(fraction)


def test_ctx_progress_reports_and_clips_the_message():
    seen = []
    ctx = sdk.Context(jobs=None, on_progress=lambda f, m: seen.append((f, m)))
    ctx.progress(0.4, "resized 4/10")
    ctx.progress(1, "x" * 500)
    assert seen[0] == (0.4, "resized 4/10") and len(seen[1][1]) == 200
    with pytest.raises(ValueError):
        ctx.progress(2)
    sdk.Context(jobs=None).progress(0.5)  # nobody listening: nothing happens


@pytest.mark.parametrize("line, parsed", [("0.4 resized 4/10", (0.4, "resized 4/10")), ("1", (1.0, None)),
                                          ("  0.25   a b \n", (0.25, "a b"))])
def test_a_commands_progress_line(line, parsed):
    assert parse_progress_line(line) == parsed


@pytest.mark.parametrize("line", ["half", "1.5 too far", ""])
def test_a_bad_progress_line_is_refused(line):
    with pytest.raises(ValueError, match="progress"):
        parse_progress_line(line)


def P(fraction: float, message: str | None = None, sequence: int | None = None, updated: float | None = None):
    return Progress(fraction=fraction, message=message, sequence=sequence,
                    updated_at=format_time(at(updated)) if updated is not None else None)


INTERVAL = PROGRESS_INTERVAL.total_seconds()


@pytest.mark.parametrize("stored, reported, now, written, later", [
    (None, None, 0, None, None),  # nothing reported
    (None, P(0.1), 0, (0.1, None), None),  # the first report: at once
    (P(0.1, sequence=1, updated=0), P(0.1), 1, None, None),  # the same again: nothing
    (P(0.1, sequence=1, updated=0), P(0.2), 1, None, INTERVAL),  # too soon: wait for the interval's end
    (P(0.1, sequence=1, updated=0), P(0.2), INTERVAL, (0.2, None), None),  # the interval is over
    (P(0.1, "a", sequence=1, updated=0), P(0.1, "b"), INTERVAL + 1, (0.1, "b"), None),  # a new message counts
    (P(0.9, sequence=2, updated=0), P(0.1), 1, (0.1, None), None),  # another attempt's: not throttled by it
    (P(0.1, sequence=1, updated=10), P(0.2), 1, (0.2, None), None),  # stored time ahead of ours: no waiting on it
])
def test_progress_is_written_at_most_once_per_interval(stored, reported, now, written, later):
    progress, wake = A.progress_to_write(stored, reported, 1, at(now))
    if written is None:
        assert progress is None
    else:
        assert (progress.fraction, progress.message, progress.sequence, progress.updated_at) == (
            *written, 1, format_time(at(now)))
    assert wake == (at(later) if later is not None else None)


def test_progress_rides_on_the_running_job_and_is_throttled():
    job = queued()
    job.admit()
    job.set_pod("Running", progress=P(0.3, "a"))
    d = job.reconcile()
    assert d.status.state == State.RUNNING and (d.status.progress.fraction, d.status.progress.message) == (0.3, "a")
    job.advance(1)
    job.set_pod("Running", progress=P(0.6, "b"))
    d = job.reconcile()
    assert d.status.progress.fraction == 0.3 and d.wake_at == at(INTERVAL)
    job.advance_to(at(INTERVAL))
    assert job.reconcile().status.progress.fraction == 0.6
    job.set_pod("Succeeded", exit_code=0)
    assert job.reconcile().status.progress is None  # the attempt's own: gone with it


def test_no_progress_write_before_the_job_is_recorded_running():
    """A job that ends within its first second costs two Job writes, progress or not: progress is written only on a
    job already recorded running."""
    job = queued()
    job.admit()
    job.set_pod("Running", started_at=job.now, progress=P(0.5))
    d = job.reconcile()
    assert d.status.state == State.QUEUED and d.status.progress is None


def test_the_timeline_result_is_documented():
    assert "snoozed" in JobStatus.model_json_schema(by_alias=True)["$defs"]["Attempt"]["properties"]["result"][
        "description"]


# --- running a handler: what it reports, as real threads and processes ------------------------------------------
def _run(work):
    from sextant.runner.execution import Execution

    return asyncio.run(Execution(work, 5.0).run())


SDK_JOB = sdk.Job(id="job_a", name="job-a", namespace="shop", queue="q", handler="h", attempt=1, payload={},
                  scheduled_at="2026-03-01T12:00:00Z")


def _function(fn, seen: list | None = None):
    from concurrent.futures import ThreadPoolExecutor

    from sextant.runner.execution import FunctionWork

    ctx = sdk.Context(jobs=None, on_progress=(lambda f, m: seen.append((f, m))) if seen is not None else None)
    return FunctionWork(fn, SDK_JOB, ctx, ThreadPoolExecutor(1), None)


def test_an_sdk_handlers_return_value_snooze_and_progress():
    async def returns(job, ctx):
        return {"rows": 3}

    def snoozes(job, ctx):
        ctx.snooze("2m")

    seen: list = []

    def reports(job, ctx):
        ctx.progress(0.5, "half")

    assert _run(_function(returns)) == Ended(0, output='{"rows":3}')
    assert _run(_function(snoozes)) == Ended(SNOOZE_EXIT_CODE, "snoozed for 120s", snooze_seconds=120)
    assert _run(_function(reports, seen)) == Ended(0) and seen == [(0.5, "half")]
    big = _run(_function(lambda job, ctx: "x" * OUTPUT_MAX_BYTES))
    assert (big.exit_code, big.output) == (0, None) and "over the cap" in big.output_note


def _command(script: str, seen: list | None = None):
    from sextant.runner.execution import CommandWork

    work = CommandWork(["sh", "-c", script], {"PATH": os.environ["PATH"]}, {}, "[job-a#1]")
    if seen is not None:
        work.on_progress = lambda f, m: seen.append((f, m))
    return work


@pytest.mark.parametrize("script, want", [
    ('echo \'{"a": [1]}\' > "$SEXTANT_OUTPUT_FILE"', Ended(0, output='{"a":[1]}')),
    ("exit 0", Ended(0)),
    ('echo 30s > "$SEXTANT_SNOOZE_FILE"; exit 85', Ended(85, "snoozed for 30s", snooze_seconds=30)),
    ('echo 2.5 > "$SEXTANT_SNOOZE_FILE"; exit 85', Ended(85, "snoozed for 2.5s", snooze_seconds=2.5)),
])
def test_a_commands_files(script, want):
    assert _run(_command(script)) == want


@pytest.mark.parametrize("script, words", [
    ("exit 85", "SEXTANT_SNOOZE_FILE was not written"),
    ('echo -3s > "$SEXTANT_SNOOZE_FILE"; exit 85', "SEXTANT_SNOOZE_FILE: "),
    ('echo 9999h > "$SEXTANT_SNOOZE_FILE"; exit 85', "from 0s to 7 days"),
])
def test_a_commands_bad_snooze_says_what_is_wrong(script, words):
    ended = _run(_command(script))
    assert ended.exit_code == 85 and ended.snooze_seconds is None and words in ended.message


@pytest.mark.parametrize("script, words", [
    ('echo "{not json" > "$SEXTANT_OUTPUT_FILE"', "does not hold JSON"),
    (f'head -c {OUTPUT_MAX_BYTES + 10} /dev/zero | tr "\\0" a > "$SEXTANT_OUTPUT_FILE"', "the output's cap"),
])
def test_a_commands_bad_output_is_a_note_and_still_a_success(script, words):
    ended = _run(_command(script))
    assert (ended.exit_code, ended.output) == (0, None) and words in ended.output_note


def test_a_commands_progress_file_is_read_while_it_runs():
    seen: list = []
    ended = _run(_command('echo "0.4 resized 4/10" > "$SEXTANT_PROGRESS_FILE"; sleep 1.5', seen))
    assert ended == Ended(0) and seen == [(0.4, "resized 4/10")]


def test_inspect_the_dashboard_and_the_api_show_what_was_reported():
    from sextant.http.models import job_out
    from sextant.resources.report import report_facts

    status = {"state": "running", "snoozes": 2, "output": {"rows": 3},
              "progress": {"fraction": 0.4, "message": "resized 4/10", "updatedAt": "2026-03-01T12:00:05Z"}}
    assert report_facts(status) == [("Progress", "40% resized 4/10 (at 2026-03-01T12:00:05Z)"), ("Snoozes", "2"),
                                    ("Output", '{"rows": 3}')]
    assert report_facts({"outputNote": "over the cap"}) == [("Output note", "over the cap")]
    assert report_facts({"progress": {"fraction": "odd"}}) == []
    raw = {"metadata": {"name": "job-a", "namespace": "shop"}, "spec": {"queue": "q", "handler": "h"},
           "status": status}
    out = job_out(raw).model_dump(mode="json", by_alias=True)
    assert (out["output"], out["snoozes"], out["progress"]["fraction"], out["progress"]["message"]) == (
        {"rows": 3}, 2, 0.4, "resized 4/10")
