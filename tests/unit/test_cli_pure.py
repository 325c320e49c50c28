"""The pure parts of the CLI and the HTTP API: ages, tables, input checks, queue numbers (`queues list` from the
Queues' status; the HTTP API's from the jobs), pagination, the
OpenAPI document, flag placement. No cluster."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from sextant.resources import inputs, request
from sextant.cli import output
from sextant.cli import queues as Q
from sextant.cli.main import build_parser, with_default_command
from sextant.client import refusal_message
from sextant.resources import common
from sextant.archive import merged
from sextant.http import api, models
from sextant.http.openapi import document
from sextant.lifecycle.idempotency import ALPHABET, keyed_name
from sextant.resources.inputs import random_name
from sextant.lifecycle.queueing import queue_stats

T0 = datetime(2026, 5, 1, 10, 0, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("seconds,want", [
    (-5, "<invalid>"), (-1, "0s"), (0, "0s"), (45, "45s"), (119, "119s"), (120, "2m"), (150, "2m30s"),
    (599, "9m59s"), (600, "10m"), (179 * 60, "179m"), (3 * 3600, "3h"), (5 * 3600 + 12 * 60, "5h12m"),
    (8 * 3600, "8h"), (47 * 3600, "47h"), (2 * 86400 + 3 * 3600, "2d3h"), (7 * 86400, "7d"), (400 * 86400, "400d"),
    (3 * 365 * 86400 + 20 * 86400, "3y20d"), (9 * 365 * 86400, "9y"),
])
def test_human_duration_is_kubectls(seconds, want):
    assert common.human_duration(timedelta(seconds=seconds)) == want


def test_precise_duration_and_until():
    assert common.precise_duration(timedelta(milliseconds=43)) == "43ms"
    assert common.precise_duration(timedelta(seconds=12.34)) == "12.3s"
    assert common.precise_duration(timedelta(seconds=245)) == "4m05s"
    assert common.precise_duration(timedelta(hours=2, minutes=3)) == "2h03m"
    assert common.until(T0 + timedelta(minutes=4), T0) == "in 4m"
    assert common.until(T0 - timedelta(seconds=30), T0) == "30s ago"
    assert common.age(None, T0) == "<none>"


def test_table_aligns_columns_and_marks_empty_cells():
    text = output.table(["id", "state"], [["job_a", "queued"], ["job_longer", None]])
    assert text.splitlines() == ["ID           STATE", "job_a        queued", "job_longer   <none>"]


def test_dump_hides_managed_fields():
    out = io.StringIO()
    output.dump({"items": [{"metadata": {"name": "x", "managedFields": [1]}}]}, "json", out)
    assert "managedFields" not in out.getvalue() and json.loads(out.getvalue())["items"][0]["metadata"] == {"name": "x"}


@pytest.mark.parametrize("text,want", [("job_8f3k2m9q", "job-8f3k2m9q"), ("job-8f3k2m9q", "job-8f3k2m9q"),
                                       ("my.job", "my.job")])
def test_job_ids_in_both_spellings(text, want):
    assert inputs.job_name("ID", text) == want


@pytest.mark.parametrize("bad", ["", "JOB_1", "job x", "job_", "-job", "a" * 64, "job/1", "../etc"])
def test_bad_job_ids_are_refused_naming_the_field(bad):
    with pytest.raises(inputs.InputError) as err:
        inputs.job_name("ID", bad)
    assert err.value.field == "ID" and str(err.value).startswith("ID: ")


def test_input_checks_say_what_is_wrong():
    with pytest.raises(inputs.InputError, match="must be a JSON object.*an array"):
        inputs.payload_text("--payload", "[1, 2]")
    with pytest.raises(inputs.InputError, match="not valid JSON"):
        inputs.payload_text("--payload", "{oops")
    with pytest.raises(inputs.InputError, match="no time zone"):
        inputs.run_at("--run-at", "2026-12-01T10:00:00")
    assert inputs.run_at("--run-at", "2026-12-01T11:00:00+01:00") == datetime(2026, 12, 1, 10, tzinfo=timezone.utc)
    assert inputs.delay("--in", "10m", T0) == T0 + timedelta(minutes=10)
    with pytest.raises(inputs.InputError, match="not a duration"):
        inputs.delay("--in", "ten minutes", T0)
    with pytest.raises(inputs.InputError, match="not a state; use one of scheduled"):
        inputs.state("--state", "done")
    with pytest.raises(inputs.InputError, match="at most 253"):
        inputs.idempotency_key("--idempotency-key", "k" * 254)
    with pytest.raises(inputs.InputError, match="between"):
        inputs.priority("--priority", 2**40)
    with pytest.raises(inputs.InputError, match="not a valid namespace"):
        inputs.namespace("namespace", "Bad_NS")
    assert inputs.object_name("--queue", "emails.v2") == "emails.v2"


def test_created_ids_have_the_documented_shape():
    for name in (random_name(), keyed_name("ns", "key")):
        ident = name.replace("-", "_", 1)
        assert ident.startswith("job_") and len(ident) == 12 and set(ident[4:]) <= set(ALPHABET)
        assert inputs.job_name("ID", ident) == name


def test_cel_refusals_are_found_in_the_api_servers_message():
    message = ('Job.sextant.dev "job-x" is invalid: spec.cancel: Forbidden: cannot cancel: the job is succeeded; '
               'only scheduled, queued, running or failed jobs can be cancelled')
    assert refusal_message(message) == ("cannot cancel: the job is succeeded; only scheduled, queued, running or "
                                        "failed jobs can be cancelled")
    assert refusal_message('Job.sextant.dev "x" is invalid: spec.queue: Invalid value: "": queue is immutable') is None


def _job(name: str, queue: str, state: str | None, created: datetime, queued_at: datetime | None = None) -> dict:
    status = {"state": state} if state else {}
    if queued_at:
        status["queuedAt"] = queued_at.isoformat().replace("+00:00", "Z")
    return {"metadata": {"name": name, "namespace": "ns", "creationTimestamp": created.isoformat().replace("+00:00", "Z")},
            "spec": {"queue": queue, "handler": "h"}, "status": status}


def test_queue_stats_count_states_running_and_oldest_queued():
    queues = [{"metadata": {"name": "emails", "namespace": "ns", "creationTimestamp": "2026-05-01T09:00:00Z"},
               "spec": {"concurrency": 2}}]
    jobs = [
        _job("a", "emails", "running", T0), _job("b", "emails", "queued", T0, queued_at=T0 + timedelta(seconds=5)),
        _job("c", "emails", "queued", T0 + timedelta(seconds=1)), _job("d", "emails", "succeeded", T0),
        _job("e", "emails", None, T0 + timedelta(seconds=2)), _job("f", "missing", "queued", T0),
    ]
    emails, missing = queue_stats(queues, jobs, T0 + timedelta(minutes=1))
    assert (emails.name, emails.exists, emails.concurrency, emails.running) == ("emails", True, 2, 1)
    # e has no state yet: new and runnable, it counts as queued (as in the Queue's status: lifecycle/queueing.py)
    assert emails.jobs == {"scheduled": 0, "queued": 3, "running": 1, "succeeded": 1, "failed": 0, "dead": 0,
                           "cancelled": 0}
    assert emails.oldest_queued_at == T0 + timedelta(seconds=1)  # c (created later, but queued earlier than b)
    assert (missing.name, missing.exists, missing.concurrency, missing.jobs["queued"]) == ("missing", False, None, 1)


def squeue(name: str, status: object = None, *, ns: str = "ns", generation: int = 1, **spec: object) -> dict:
    raw = {"metadata": {"name": name, "namespace": ns, "generation": generation,
                        "creationTimestamp": "2026-05-01T09:00:00Z"}, "spec": spec}
    if status is not None:
        raw["status"] = status
    return raw


LIVE = {"observedGeneration": 1, "running": 2, "queued": 5, "starting": 1, "scheduled": 3, "failed": 0,
        "oldestQueuedAt": "2026-05-01T09:59:30Z"}


def test_queues_list_reads_each_queues_status_and_says_which_cannot_be_believed():
    rows = Q.read_queues([
        squeue("live", LIVE, concurrency=4),
        squeue("edited", LIVE, generation=2, paused=True),  # its spec changed after the operator last counted
        squeue("new"),  # never counted: no operator, or one that does not watch this namespace
        squeue("odd", {"running": True, "queued": -1, "observedGeneration": "1"}, concurrency=0),
        squeue("limited", {**LIVE, "recentStarts": 100, "rateLimited": True, "keys": 7},
               rateLimit={"starts": 100, "per": "1m"}, perKeyConcurrency=2),
    ])
    by_name = {q.name: q for q in rows}
    assert [q.name for q in rows] == ["edited", "limited", "live", "new", "odd"]
    assert {n: q.freshness for n, q in by_name.items()} == {"live": Q.CURRENT, "edited": Q.STALE, "new": Q.ABSENT,
                                                            "odd": Q.ABSENT, "limited": Q.CURRENT}
    assert by_name["odd"].concurrency is None  # a spec the API server would refuse: no number rather than a guess
    table = [line.split() for line in Q.render(rows, T0, all_namespaces=False).splitlines()]
    assert table[0] == ["NAME", "RUNNING", "QUEUED", "STARTING", "SCHEDULED", "FAILED", "OLDEST-QUEUED", "PAUSED",
                        "STARTS", "RATE-LIMITED", "KEYS", "AGE"]
    assert table[1] == ["edited", "2/10", "5", "1", "3", "0", "30s", "yes", "-", "-", "-", "60m"]
    assert table[2] == ["limited", "2/10", "5", "1", "3", "0", "30s", "no", "100/100/1m", "yes", "7/2", "60m"]
    assert table[3] == ["live", "2/4", "5", "1", "3", "0", "30s", "no", "-", "-", "-", "60m"]
    # no zeros for numbers nobody counted
    assert table[4] == ["new", "-/10", "-", "-", "-", "-", "-", "no", "-", "-", "-", "60m"]
    assert table[5][-5] == "-"  # a spec nobody can read: paused or not is not known
    assert Q.warnings(rows, all_namespaces=False) == [
        "No numbers for new, odd: the operator has not written this queue's status yet (is the operator running, "
        "and does it watch this namespace?).",
        "Numbers for edited were counted for an older spec of the queue: the operator has not caught up with its "
        "last change (is the operator running?).",
    ]
    assert Q.warnings([by_name["live"]], all_namespaces=False) == []
    wide = [line.split() for line in Q.render(rows, T0, all_namespaces=True).splitlines()]
    assert wide[0][:2] == ["NAMESPACE", "NAME"] and wide[3][:3] == ["ns", "live", "2/4"]
    assert Q.as_dict(by_name["live"], T0) == {
        "namespace": "ns", "name": "live", "concurrency": 4, "maxAttempts": 5, "running": 2, "queued": 5,
        "starting": 1, "scheduled": 3, "failed": 0, "oldestQueuedAt": "2026-05-01T09:59:30Z",
        "oldestQueuedSeconds": 30.0, "generation": 1, "observedGeneration": 1, "status": "current",
        "paused": False, "rateLimit": None, "perKeyConcurrency": None, "recentStarts": None, "rateLimited": None,
        "keys": None}
    assert {k: v for k, v in Q.as_dict(by_name["limited"], T0).items() if k in (
        "rateLimit", "perKeyConcurrency", "recentStarts", "rateLimited", "keys")} == {
        "rateLimit": {"starts": 100, "per": "1m"}, "perKeyConcurrency": 2, "recentStarts": 100, "rateLimited": True,
        "keys": 7}
    assert Q.as_dict(by_name["new"], T0)["status"] == "absent" and Q.as_dict(by_name["new"], T0)["running"] is None


class QueuesOnly:
    """A client that can list Queues and nothing else: `queues list` must not list jobs."""

    def __init__(self, queues: list[dict]) -> None:
        self.queues, self.asked = queues, []

    def list_queues(self, namespace: str | None) -> list[dict]:
        self.asked.append(namespace)
        return self.queues


def test_inspect_of_a_queued_job_says_what_its_queue_holds_it_back_for():
    paused = Q.read_queue(squeue("emails", LIVE, paused=True))
    limited = Q.read_queue(squeue("emails", {**LIVE, "recentStarts": 100, "rateLimited": True},
                                  rateLimit={"starts": 100, "per": "1m"}))
    idle = Q.read_queue(squeue("emails", {**LIVE, "recentStarts": 3, "rateLimited": False},
                               rateLimit={"starts": 100, "per": "1m"}))
    assert Q.holding_back(paused) == "paused (sextant queues resume emails)"
    assert Q.holding_back(limited) == "rate limited (RateLimited): 100 of 100 starts in the last 1m"
    assert Q.holding_back(idle) is None and Q.holding_back(Q.read_queue(squeue("emails", LIVE))) is None


@pytest.mark.parametrize("argv", [["queues", "list", "-n", "ns"], ["queues", "list", "-A", "-o", "json"],
                                  ["queues", "-n", "ns"], ["-A", "queues", "-o", "json"]])
def test_queues_list_makes_one_list_of_queues(argv):
    from sextant.cli.context import Context

    out, err = io.StringIO(), io.StringIO()
    ctx = Context(build_parser().parse_args(with_default_command(argv)), out, err)
    client = ctx.__dict__["client"] = QueuesOnly([squeue("live", LIVE), squeue("new")])
    assert ctx.args.func(ctx) == 0
    assert client.asked == (["ns"] if "-n" in argv else [None])
    if "json" in argv:
        assert [i["status"] for i in json.loads(out.getvalue())["items"]] == ["current", "absent"]
    else:
        assert out.getvalue().splitlines()[1].split()[:3] == ["live", "2/10", "5"]
        assert "No numbers for new" in err.getvalue()


@pytest.mark.parametrize("status, token, expected", [
    (410, "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ", (410, "Expired", "continue")),  # the list's snapshot was compacted
    (400, "nonsense", (422, "Invalid", "continue")),  # the API server cannot decode it
    (400, "", None),  # without a token, a 400 is not the caller's continue: a bad gateway, said elsewhere
    (500, "abc", None),
])
def test_the_api_servers_refusals_of_a_page_name_the_continue_token(status, token, expected):
    error = api.list_error(api.ApiError(status, {"reason": "x", "message": "m"}), token)
    assert (error.status, error.reason, error.field) == expected if expected else error is None


def test_list_filters_read_the_fields_the_crd_makes_selectable():
    from sextant.resources.crds import RESOURCES, crd

    jobs_crd = next(crd(e) for e in RESOURCES if e["model"].__name__ == "Job")
    selectable = [f["jsonPath"] for f in jobs_crd["spec"]["versions"][0]["selectableFields"]]
    # the HTTP API's filters, status.worker: what a worker watches its own jobs by (docs/workers.md), and
    # spec.idempotencyKey: what every create path finds a key's holder by (sextant/lifecycle/idempotency.py)
    assert sorted(selectable) == sorted([*(f".{path}" for path in api.FIELD_SELECTORS.values()), ".status.worker",
                                         ".spec.idempotencyKey"])
    job = _job("job-a", "emails", "failed", T0)
    # what the API server selects by, the list checks again on each page (old CRDs): the same fields
    assert merged.live_matches(job, merged.ListFilters(queue="emails", handler="h", state="failed"))
    assert not merged.live_matches(job, merged.ListFilters(state="dead"))
    assert not merged.live_matches({"metadata": {"name": "job-b"}}, merged.ListFilters(state="failed"))


def test_create_request_validation_names_the_field():
    ok = request.CreateJob.model_validate_json('{"queue": "q", "handler": "h", "run_at": "2026-01-01T00:00:00Z"}')
    assert ok.payload == {} and ok.priority == 0
    for body, field in [({"handler": "h"}, "queue"), ({"queue": "Q!", "handler": "h"}, "queue"),
                        ({"queue": "q", "handler": "h", "payload": [1]}, "payload"),
                        ({"queue": "q", "handler": "h", "run_at": "2026-01-01T00:00:00"}, "run_at"),
                        ({"queue": "q", "handler": "h", "idempotency_key": ""}, "idempotency_key"),
                        ({"queue": "q", "handler": "h", "priorty": 1}, "priorty"),
                        ({"queue": "q", "handler": "h", "priority": False}, "priority"),
                        ({"queue": "q", "handler": "h", "run_at": 1700000000}, "run_at")]:
        with pytest.raises(ValidationError) as err:
            request.CreateJob.model_validate_json(json.dumps(body))
        assert api._from_validation(err.value).field == field


def test_job_out_speaks_the_docs_words():
    raw = {"metadata": {"name": "job-8f3k2m9q", "namespace": "shop", "creationTimestamp": "2026-05-01T10:00:00Z",
                        "labels": {"sextant.dev/schedule": "nightly"}},
           "spec": {"queue": "emails", "handler": "send", "payload": {"orderId": 42}, "idempotencyKey": "k"},
           "status": {"state": "dead", "attempt": 1, "duplicateOf": "job-aaaaaaaa",
                      "attempts": [{"attempt": 1, "sequence": 1, "pod": "job-8f3k2m9q-1", "node": "n",
                                    "result": "failed", "exitCode": 3, "reason": "Error"}]}}
    out = models.dump(models.job_out(raw))
    assert out["id"] == "job_8f3k2m9q" and out["idempotency_key"] == "k" and out["schedule"] == "nightly"
    assert out["duplicate_of"] == "job_aaaaaaaa" and out["attempts"][0]["exit_code"] == 3


def test_openapi_document_covers_every_route_and_error():
    doc = document()
    assert doc["openapi"].startswith("3.")
    ops = {(path, method) for path, item in doc["paths"].items() for method in item}
    assert ops == {("/v2/jobs", "post"), ("/v2/jobs", "get"), ("/v2/jobs/{job_id}", "get"),
                   ("/v2/jobs:batch", "post"), ("/v2/jobs:cancel", "post"), ("/v2/jobs:retry", "post"),
                   ("/v2/jobs/{job_id}/cancel", "post"), ("/v2/jobs/{job_id}/retry", "post"), ("/v2/queues", "get"),
                   ("/v2/queues/{queue}/pause", "post"), ("/v2/queues/{queue}/resume", "post")}
    create = doc["paths"]["/v2/jobs"]["post"]["responses"]
    assert {"201", "200", "401", "403", "409", "422"} <= set(create)
    assert "idempotency_key is held by a job with another queue" in create["409"]["description"]
    assert "409" in doc["paths"]["/v2/jobs/{job_id}/cancel"]["post"]["responses"]
    assert "410" in doc["paths"]["/v2/jobs"]["get"]["responses"]
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            for code in ("429", "503"):  # every operation may be refused under load, always with Retry-After
                assert operation["responses"][code]["headers"]["Retry-After"]["required"] is True, (path, method)
    for verb in ("cancel", "retry"):
        assert "Authorized as `patch`" in doc["paths"][f"/v2/jobs/{{job_id}}/{verb}"]["post"]["description"]
    for verb in ("pause", "resume"):
        assert "Authorized as `patch` on queues" in doc["paths"][f"/v2/queues/{{queue}}/{verb}"]["post"]["description"]
    refs = json.dumps(doc).split('"$ref": "#/components/schemas/')[1:]
    assert {r.split('"')[0] for r in refs} <= set(doc["components"]["schemas"])
    assert doc["components"]["schemas"]["CreateJob"]["additionalProperties"] is False


@pytest.mark.parametrize("argv", [
    ["-n", "shop", "-A", "jobs", "list"],
    ["jobs", "-n", "shop", "list", "-A"],
    ["jobs", "list", "--namespace", "shop", "--all-namespaces"],
    ["--kubeconfig", "/k", "--context", "c", "jobs", "list", "-n", "shop", "-A"],
])
def test_global_flags_before_or_after_the_subcommand(argv):
    args = build_parser().parse_args(argv)
    assert args.namespace == "shop" and args.all_namespaces is True


@pytest.mark.parametrize("argv,want", [
    (["jobs"], ["jobs", "list"]),
    (["queues"], ["queues", "list"]),
    (["schedules", "-A"], ["schedules", "list", "-A"]),
    (["-n", "shop", "jobs", "--state", "failed"], ["-n", "shop", "jobs", "list", "--state", "failed"]),
    (["jobs", "-n", "shop", "-o", "json"], ["jobs", "list", "-n", "shop", "-o", "json"]),
    (["--kubeconfig", "/k", "queues", "--context", "c"], ["--kubeconfig", "/k", "queues", "list", "--context", "c"]),
    (["jobs", "--state", "failed", "--help"], ["jobs", "list", "--state", "failed", "--help"]),  # list's help
    # A COMMAND given, or the group's own help, or another command: as they are.
    (["jobs", "-n", "shop", "get", "job_x"], None), (["jobs", "--namespace=shop", "wait", "job_x"], None),
    (["schedules", "-A", "trigger", "nightly"], None), (["jobs", "--help"], None), (["queues", "-n", "x", "-h"], None),
    (["jobs", "frobnicate"], None), (["workers"], None), (["inspect", "job_x"], None), (["run", "--", "jobs"], None),
])
def test_jobs_queues_and_schedules_list_when_no_command_is_given(argv, want):
    assert with_default_command(argv) == (argv if want is None else want)
    if want is not None and "--help" not in argv:
        args = build_parser().parse_args(want)
        group = next(a for a in argv if a in ("jobs", "queues", "schedules"))
        assert (args.func.__module__, args.func.__name__) == (f"sextant.cli.{group}", "list_cmd")


def test_a_flag_before_the_subcommand_is_not_reset_by_it():
    args = build_parser().parse_args(["--kubeconfig", "/k", "--context", "c", "-n", "a", "jobs", "get", "job_x"])
    assert (args.kubeconfig, args.context, args.namespace, args.all_namespaces) == ("/k", "c", "a", False)
    args = build_parser().parse_args(["jobs", "get", "job_x", "--kubeconfig", "/j"])
    assert args.kubeconfig == "/j" and args.namespace is None


@pytest.mark.parametrize("argv,words,code", [
    (["jobs", "create", "--queue", "q", "--handler", "h", "--run-at", "2026-12-01T10:00:00Z", "--in", "1m"],
     "argument --in: not allowed with argument --run-at", 2),
    (["jobs", "create", "--queue", "q", "--handler", "h", "--priority", "high"], "invalid int value: 'high'", 2),
    (["jobs", "create", "--queue", "q", "--handler", "h", "--idempotency-key", "k" * 254], "at most 253", 2),
    (["jobs", "create", "--queue", "q", "--handler", "h", "--payload", '"text"'], "got a string", 2),
    (["jobs", "wait", "job_x", "--timeout", "soon"], "--timeout: 'soon' is not a duration", 2),
    (["logs", "job_x", "--attempt", "0"], "attempts are numbered from 1", 2),
    (["jobs", "get", "job_x", "-o", "xml"], "invalid choice: 'xml'", 2),
    (["jobs", "frobnicate"], "invalid choice: 'frobnicate'", 2),
    (["jobs", "--frobnicate"], "unrecognized arguments: --frobnicate", 2),
    (["schedules", "-o", "xml"], "invalid choice: 'xml'", 2),
    (["jobs", "list", "-w", "-o", "json"], "cannot be combined with -o", 2),
    (["inspect", "job_x", "-A"], "-A/--all-namespaces cannot be used with `inspect`", 2),
])
def test_bad_command_lines_fail_before_any_request(argv, words, code, capsys, monkeypatch, tmp_path):
    """Refused before a connection is even made (KUBECONFIG points nowhere; a request would say so instead)."""
    from sextant.cli.main import main

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    try:
        got = main(["-n", "ns", *argv])
    except SystemExit as exc:  # argparse's own usage errors
        got = exc.code
    err = capsys.readouterr().err
    assert got == code and words in err and "Traceback" not in err


@pytest.mark.parametrize("flags,expected", [
    (["--http-tls-cert", "/x/tls.crt"], "--http-tls-cert and --http-tls-key go together"),
    (["--http-tls-key", "/x/tls.key"], "--http-tls-cert and --http-tls-key go together"),
    (["--http-tls-cert", "/nonexistent/tls.crt", "--http-tls-key", "/nonexistent/tls.key"],
     "--http-tls-cert/--http-tls-key: cannot use /nonexistent/tls.crt and /nonexistent/tls.key"),
])
def test_bad_tls_flags_stop_the_operator_before_it_starts(flags, expected, capsys):
    from sextant.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["operator", *flags])
    assert exit_.value.code == 2 and expected in capsys.readouterr().err


def test_a_key_that_does_not_match_is_refused(tmp_path, capsys):
    from sextant.__main__ import main

    not_a_pair = tmp_path / "tls.crt"
    not_a_pair.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    with pytest.raises(SystemExit) as exit_:
        main(["operator", "--http-tls-cert", str(not_a_pair), "--http-tls-key", str(not_a_pair)])
    assert exit_.value.code == 2 and f"cannot use {not_a_pair}" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["71e265", "1e5", "-2E-3", "0o17", "0x1F", "3.5", ".5", "1_000", ".inf", "-.Inf",
                                  ".nan"])
def test_yaml_output_quotes_strings_that_kubectl_would_read_as_numbers(text):
    """PyYAML writes 71e265 bare (a string in YAML 1.1); kubectl's YAML reads it as a number, so `-o yaml | kubectl
    apply -f -` would turn a payload string or a label value into a number."""
    import yaml

    out = io.StringIO()
    output.dump({"value": text, "plain": "emails", "number": 7}, "yaml", out)
    assert out.getvalue() == f"value: '{text}'\nplain: emails\nnumber: 7\n"
    assert yaml.safe_load(out.getvalue()) == {"value": text, "plain": "emails", "number": 7}


def test_jobs_list_shows_when_a_scheduled_job_runs():
    from sextant.cli import jobs

    def job(name: str, **spec: object) -> dict:
        return {"metadata": {"name": name, "creationTimestamp": "2026-05-01T09:00:00Z"},
                "spec": {"queue": "q", "handler": "h", **spec}, "status": {"state": "scheduled"}}

    rows = [jobs.row(job("job-later", runAt="2026-05-01T12:30:00Z"), T0, False),
            jobs.row(job("job-past", runAt="2026-05-01T09:55:00Z"), T0, False), jobs.row(job("job-now"), T0, False)]
    lines = output.table(jobs.headers(False), rows).splitlines()
    assert lines[0].split() == ["ID", "STATE", "ATTEMPT", "QUEUE", "HANDLER", "PRIORITY", "RUN-AT", "AGE"]
    run_at = lines[0].index("RUN-AT")
    assert [line[run_at:].split("   ")[0].strip() for line in lines[1:]] == ["in 150m", "5m ago", "<none>"]
    assert [line.split()[-1] for line in lines[1:]] == ["60m"] * 3  # AGE stays the last column
    assert jobs.headers(True)[:2] == ["NAMESPACE", "ID"] and len(jobs.row(job("job-a"), T0, True)) == 9


def test_inspect_names_the_worker_of_a_workers_attempt():
    from sextant.cli.inspect import ran_in

    assert ran_in({"pod": "job-a-1", "node": "node-a"}) == "job-a-1"
    assert ran_in({"worker": "payments-7c9f/1a2b3c4d", "node": "payments-7c9f"}) == "worker/payments-7c9f"
    assert ran_in({"result": "failed"}) is None  # neither: the table says <none>
