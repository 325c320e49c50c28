"""Bulk, the pure parts: an ndjson file's lines checked as POST /v2/jobs checks a body (errors naming the line and
the field, nothing created), the batch's order of creation for repeated keys, the per-item result shapes of the
client and the HTTP API, a selector's checks and what a bulk cancel or retry acts on, the one confirmation, and the
command lines that refuse before any request."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone

import pytest
from pydantic import ValidationError

from sextant.cli.bulk import BadLines, confirm, job_line, line_numbers, parse_ndjson
from sextant.cli.context import CliError
from sextant.client import BulkOutcome, CreateResult, KeyConflict, first_uses
from sextant.http import models
from sextant.kube.client import ApiError
from sextant.lifecycle import selection
from sextant.resources import inputs, request
from sextant.runner.chaining import Jobs


# --- ndjson lines --------------------------------------------------------------------------------------------
def test_lines_are_the_bodies_of_post_v2_jobs_with_the_flags_as_defaults():
    text = ('{"queue": "emails", "handler": "send", "payload": {"orderId": 1}, "idempotency_key": "r-1"}\n'
            "\n"
            '{"handler": "other", "run_at": "2026-12-01T11:00:00+01:00", "priority": 5}\n'
            "   \n"
            '{"queue": "sms"}\n')
    jobs = parse_ndjson(text, "jobs.ndjson", {"queue": "default-q", "handler": "default-h"})
    assert jobs == [
        {"queue": "emails", "handler": "send", "payload": {"orderId": 1}, "run_at": None, "idempotency_key": "r-1",
         "priority": 0, "concurrency_key": None},
        {"queue": "default-q", "handler": "other", "payload": {},
         "run_at": datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc), "idempotency_key": None, "priority": 5,
         "concurrency_key": None},
        {"queue": "sms", "handler": "default-h", "payload": {}, "run_at": None, "idempotency_key": None,
         "priority": 0, "concurrency_key": None}]
    assert line_numbers(text) == [1, 3, 5]  # the output's n-th id is the n-th job: blank lines hold none


@pytest.mark.parametrize("line,field,words", [
    ('{"queue": "Emails", "handler": "h"}', "queue", "'Emails' is not a valid queue name"),
    ('{"queue": "q"}', "handler", "this field is required"),
    ('{"queue": "q", "handler": "h", "payload": [1]}', "payload", "Input should be an object"),
    ('{"queue": "q", "handler": "h", "idempotencyKey": "k"}', "idempotencyKey",
     "unknown field (the fields are queue, handler, payload, run_at, idempotency_key, priority, concurrency_key)"),
    ('{"queue": "q", "handler": "h", "run_at": "2026-12-01T10:00:00"}', "run_at", "timezone"),
    ('{"queue": "q", "handler": "h", "priority": "5"}', "priority", "valid integer"),
    ('{"queue": "q", "handler": "h", "payload": {"big": "' + "x" * 300_000 + '"}}', "payload", "256 KiB"),
    ('{"queue": "q", "handler": "h"', "line", "not valid JSON"),
    ('["q", "h"]', "line", "a JSON object is required"),
    ('{"queue": "q", "handler": "h", "payload": ' + "[" * 200 + "]" * 200 + "}", "payload", "nests deeper"),
])
def test_a_bad_line_names_its_field_and_the_rule(line, field, words):
    with pytest.raises(inputs.InputError) as caught:
        job_line(line, {})
    assert caught.value.field == field and words in caught.value.message, str(caught.value)


def test_every_bad_line_is_named_by_number_and_nothing_is_returned():
    good = '{"queue": "q", "handler": "h"}'
    text = "\n".join([good, '{"queue": "Q", "handler": "h"}', good, "", '{"handler": "h"}', "not json"])
    with pytest.raises(BadLines) as caught:
        parse_ndjson(text, "jobs.ndjson")
    assert caught.value.problems == [
        "jobs.ndjson line 2: queue: 'Q' is not a valid queue name: use lower-case letters, digits, '-' and '.', "
        "starting and ending with a letter or digit, at most 63 characters",
        "jobs.ndjson line 5: queue: this field is required",
        "jobs.ndjson line 6: line: not valid JSON"]
    assert caught.value.code == 2
    assert str(caught.value).endswith("3 of 5 lines are not valid jobs: nothing was created")
    many = "\n".join(['{"queue": "q"}'] * 30)
    with pytest.raises(BadLines, match=r"\.\.\. and 10 more\nerror: 30 of 30 lines"):
        parse_ndjson(many, "stdin")
    with pytest.raises(inputs.InputError, match="--from-file: stdin holds no jobs"):
        parse_ndjson("\n \n", "stdin")


# --- creating a batch ------------------------------------------------------------------------------------------
def test_later_uses_of_a_key_are_created_after_the_first():
    assert first_uses([None, "a", "b", "a", None, "b", "a", "c"]) == ([0, 1, 2, 4, 7], [3, 5, 6])
    assert first_uses([]) == ([], [])


def test_each_items_result_says_what_one_create_would_answer():
    job = {"metadata": {"name": "job-8f3k2m9q"}, "spec": {"queue": "q", "handler": "h"}}
    conflict = KeyConflict("k", "job_aaaaaaaa", {"queue": "q", "handler": "h", "payload": {}},
                           {"queue": "other", "handler": "h", "payload": {}})
    results = [CreateResult(job, True), CreateResult(job, False), CreateResult(None, error=conflict),
               CreateResult(None, error=ApiError(403, {"message": "forbidden"}, "POST", "/x"))]
    assert [(r.id, r.status) for r in results] == [("job_8f3k2m9q", 201), ("job_8f3k2m9q", 200), (None, 409),
                                                   (None, 403)]


def test_the_batch_body_is_checked_whole_naming_the_item_and_its_field():
    item = {"queue": "q", "handler": "h"}
    ok = models.CreateJobs.model_validate_json(json.dumps({"items": [item, {**item, "priority": 3}]}))
    assert [i.priority for i in ok.items] == [0, 3]
    for body, field, words in [
        ({"items": [item, {**item, "queue": "Bad"}]}, "items[1].queue", "not a valid queue name"),
        ({"items": [item, {"queue": "q"}]}, "items[1].handler", "this field is required"),
        ({"items": [{**item, "extra": 1}]}, "items[0].extra", "the fields are queue, handler, payload"),
        ({"items": [item], "dry_run": True}, "dry_run", "unknown field (the fields are items)"),
        ({"items": []}, "items", "at least 1 item"),
        ({"items": [item] * (models.BATCH_MAX + 1)}, "items", f"at most {models.BATCH_MAX} items"),
    ]:
        with pytest.raises(ValidationError) as caught:
            models.CreateJobs.model_validate_json(json.dumps(body))
        got_field, message = request.validation_problem(caught.value, "items")
        assert got_field == field and words in message, (got_field, message)


def test_a_batch_answer_has_one_item_per_job_with_its_status():
    raw = {"metadata": {"name": "job-8f3k2m9q", "namespace": "shop"}, "spec": {"queue": "q", "handler": "h"}}
    answer = models.BatchResult(
        items=[models.BatchItem(status=201, job=models.created_job_out(raw, [])),
               models.BatchItem(status=409, error=models.ErrorDetail(status=409, reason="Conflict", message="m",
                                                                     field="payload"))],
        created=1, replayed=0, failed=1)
    out = models.dump(answer)
    assert [(i["status"], (i["job"] or {}).get("id"), (i["error"] or {}).get("field")) for i in out["items"]] == [
        (201, "job_8f3k2m9q", None), (409, None, "payload")]


def test_the_sdk_checks_every_item_before_connecting():
    def never() -> None:
        raise AssertionError("connected before every item was checked")

    sdk = Jobs(never, "shop")  # type: ignore[arg-type]
    with pytest.raises(inputs.InputError) as caught:
        sdk.create_many([{"queue": "q", "handler": "h"}, {"queue": "q", "handler": "h", "payload": "x"}])
    assert caught.value.field == "jobs[1].payload"
    with pytest.raises(inputs.InputError, match=r"jobs\[0\]\.run_at"):
        sdk.create_many([{"queue": "q", "handler": "h", "run_at": datetime(2026, 12, 1)}])  # no time zone


# --- selecting jobs ------------------------------------------------------------------------------------------
FLAGS = {"queue": "--queue", "state": "--state", "handler": "--handler", "labels": "--selector"}


def test_a_selector_is_the_api_servers_field_and_label_selectors():
    chosen = selection.selector("retry", queue="emails", state="dead", labels="team=mail")
    assert chosen.field_selector() == "spec.queue=emails,status.state=dead"
    assert chosen.labels == "team=mail" and chosen.words() == "queue emails, state dead, labels team=mail"
    assert selection.selector("cancel", handler="send").field_selector() == "spec.handler=send"
    assert selection.selector("cancel", labels="a=b").field_selector() is None
    job = {"spec": {"queue": "emails", "handler": "h"}, "status": {"state": "dead"}}
    assert chosen.matches_fields(job) and not selection.Selector(handler="x").matches_fields(job)


@pytest.mark.parametrize("verb,given,field,words", [
    ("retry", {}, "--queue", "at least one of --queue, --state, --handler or --selector"),
    ("retry", {"state": "queued"}, "--state", "queued jobs cannot be retried: only failed or dead jobs"),
    ("cancel", {"state": "succeeded"}, "--state", "succeeded jobs cannot be cancelled: only scheduled, queued"),
    ("cancel", {"state": "lost"}, "--state", "'lost' is not a state"),
    ("cancel", {"queue": "Emails"}, "--queue", "not a valid queue name"),
    ("cancel", {"handler": "a_b"}, "--handler", "not a valid handler name"),
    ("cancel", {"labels": " "}, "--selector", "not a label selector"),
])
def test_a_bad_selector_is_refused_naming_the_field(verb, given, field, words):
    with pytest.raises(inputs.InputError) as caught:
        selection.selector(verb, names=FLAGS, **given)
    assert caught.value.field == field and words in caught.value.message, str(caught.value)


def _job(name: str, state: str, created: str, cancel: bool = False) -> dict:
    return {"metadata": {"name": name, "creationTimestamp": created}, "spec": {"cancel": cancel} if cancel else {},
            "status": {"state": state}}


def test_a_bulk_action_takes_what_the_state_allows_oldest_first():
    jobs = [_job("job-c", "dead", "2026-12-01T10:00:03Z"), _job("job-a", "failed", "2026-12-01T10:00:01Z"),
            _job("job-b", "queued", "2026-12-01T10:00:02Z"), _job("job-d", "running", "2026-12-01T10:00:00Z",
                                                                  cancel=True),
            _job("job-e", "succeeded", "2026-12-01T09:00:00Z")]
    assert [j["metadata"]["name"] for j in selection.targets(jobs, "retry")] == ["job-a", "job-c"]
    # a job whose cancel is requested already is not asked again
    assert [j["metadata"]["name"] for j in selection.targets(jobs, "cancel")] == ["job-a", "job-b"]
    assert [j["metadata"]["name"] for j in selection.targets(jobs, "cancel", limit=1)] == ["job-a"]


def test_one_question_and_one_summary_for_the_cli_and_the_dashboard():
    assert selection.question("retry", 3, "queue q, state dead") == \
        "Retry the 3 failed or dead jobs that match (queue q, state dead)?"
    assert selection.question("cancel", 1, "queue q") == \
        "Cancel the 1 scheduled, queued, running or failed job that match (queue q)?"
    outcome = BulkOutcome("retry", ["job_a", "job_b"], [("job_c", "job job_c: cannot retry: the job is queued")])
    assert outcome.words("queue q") == ("retry requested for 2 of 3 jobs (queue q); 1 refused, e.g. job job_c: "
                                        "cannot retry: the job is queued")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_confirmation_asks_once_on_a_terminal_and_refuses_without_one():
    err = io.StringIO()
    confirm("Retry the 2 ...?", yes=False, stdin=Terminal("y\n"), err=err)
    assert err.getvalue() == "Retry the 2 ...? [y/N] "
    with pytest.raises(CliError, match="not confirmed: nothing changed"):
        confirm("Retry?", yes=False, stdin=Terminal("\n"), err=io.StringIO())
    with pytest.raises(CliError, match="not a terminal; add --yes"):
        confirm("Retry?", yes=False, stdin=io.StringIO("y\n"), err=io.StringIO())
    confirm("Retry?", yes=True, stdin=io.StringIO(""), err=err)  # a script that says so


@pytest.mark.parametrize("argv,words", [
    (["jobs", "retry"], "name what to retry: a job ID, or --queue, --state, --handler or -l"),
    (["jobs", "cancel", "job_x", "--queue", "q"], "give a job ID or select jobs"),
    (["jobs", "retry", "--state", "queued", "-q", "emails"], "--state: queued jobs cannot be retried"),
    (["jobs", "create"], "--queue and --handler are required (or --from-file FILE)"),
    (["jobs", "create", "--from-file", "x.ndjson", "--payload", "{}"], "--payload cannot be used with --from-file"),
    (["jobs", "create", "--from-file", "/nonexistent/jobs.ndjson"], "--from-file: cannot read"),
])
def test_bulk_command_lines_fail_before_any_request(argv, words, capsys, monkeypatch, tmp_path):
    from sextant.cli.main import main

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    got = main(["-n", "ns", *argv])
    err = capsys.readouterr().err
    assert got == 2 and words in err and "Traceback" not in err, err


def test_bad_lines_from_stdin_fail_before_any_request(capsys, monkeypatch, tmp_path):
    from sextant.cli.main import main

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setattr("sys.stdin", io.StringIO('{"queue": "q", "handler": "h"}\n{"queue": "q", "handler": 7}\n'))
    assert main(["-n", "ns", "jobs", "create", "--from-file", "-"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == ["error: stdin line 2: handler: Input should be a valid string",
                                "error: 1 of 2 lines are not valid jobs: nothing was created"], err


def test_a_busy_api_server_is_asked_again_after_its_retry_after():
    from sextant.client import retry_after

    busy = {"message": "storage is (re)initializing", "details": {"retryAfterSeconds": 2}}
    assert retry_after(ApiError(429, busy)) == 2.0
    assert retry_after(ApiError(429, {"message": "x"})) == 1.0
    assert retry_after(ApiError(429, {"details": {"retryAfterSeconds": 60}})) == 5.0  # bounded
