"""`sextant worker`'s pure parts (docs/workers.md): what it serves, its name and Worker object (the spec it writes,
as one JSON patch tested against its incarnation), its assignments, the results it reports, and the in-app API's
input."""

from __future__ import annotations

import argparse
import re
from datetime import timedelta
from typing import Any

import pytest

from _builders import UID, at
from sextant.cli.main import build_parser
from sextant.lifecycle import attempts as A
from sextant.resources import contract
from sextant.resources.common import format_time
from sextant.resources.handler import HandlerSpec
from sextant.worker import main as worker_main
from sextant.worker.main import BadInput, apply_config
from sextant.lifecycle.attempts import DRAINED
from sextant.resources.worker import MESSAGE_MAX_LENGTH, Assignment, WorkerResult, WorkerSpec
from sextant.runner.execution import Ended
from sextant.worker.plan import PlanError, plan, serving
from sextant.worker.registration import (Offer, default_name, name_problem, pod_owner, sanitise, spec_patch,
                                         worker_body, worker_spec)
from sextant.worker.results import NOT_FOUND, Results, result_of
from sextant.worker.service import read_assignments, timeout_after

NS, WORKER, HOLDER = "shop", "w1", "w1/abc123"


def sdk_handler() -> HandlerSpec:
    return HandlerSpec.model_validate({"worker": {}})


def command_handler(*command: str) -> HandlerSpec:
    return HandlerSpec.model_validate({"worker": {"command": list(command)}})


def pod_handler() -> HandlerSpec:
    return HandlerSpec.model_validate({"template": {"spec": {"containers": [{"name": "h", "image": "x"}]}}})


# --- what it serves -------------------------------------------------------------------------------------------

HANDLERS = {"charge": sdk_handler(), "send": command_handler("python", "-m", "send"), "resize": pod_handler(),
            "unclaimed": sdk_handler()}


def test_serves_registered_functions_and_allowed_commands_on_every_queue_by_default() -> None:
    served = plan(NS, {"emails", "payments"}, HANDLERS, {"charge"}, allow_commands=True)
    assert served.queues == {"emails", "payments"}
    assert served.functions == {"charge"} and dict(served.commands) == {"send": ("python", "-m", "send")}
    assert served.handlers == {"charge", "send"}  # never the pod-mode one, nor an SDK Handler nobody registered
    assert served.how("send") == ("python", "-m", "send") and served.how("charge") is None


def test_chosen_queues_and_handlers_narrow_what_it_serves() -> None:
    served = plan(NS, {"emails", "payments"}, HANDLERS, {"charge"}, want_queues={"emails"}, want_handlers={"send"},
                  allow_commands={"send"})
    assert served.queues == {"emails"} and served.handlers == {"send"}


def test_a_handlers_command_runs_only_on_a_worker_told_to_run_it() -> None:
    """Issue 28: whoever may write a Handler must not thereby run any command on every worker. Without
    --allow-commands / --allow-command a command handler is not served (not offered to the operator), only named."""
    served = plan(NS, {"emails"}, HANDLERS, {"charge"})
    assert served.handlers == {"charge"} and not served.commands and served.how("send") is None
    assert served.refused == {"send"}
    named = plan(NS, {"emails"}, {**HANDLERS, "other": command_handler("rm", "-rf", "/")}, {"charge"},
                 allow_commands={"send"})
    assert named.handlers == {"charge", "send"} and named.refused == {"other"}
    # A Handler that becomes a command later is dropped from what the worker offers, not run.
    later = serving({"emails"}, {"charge": command_handler("charge-cli")}, {"charge"})
    assert later.handlers == frozenset() and later.refused == {"charge"}
    # Module handlers registered in-process are unaffected.
    assert serving({"emails"}, {"charge": sdk_handler()}, {"charge"}).handlers == {"charge"}


@pytest.mark.parametrize("kwargs, words", [
    ({"want_queues": {"nope"}}, ["--queue nope", "no Queue 'nope'", "namespace shop"]),
    ({"queues": set()}, ["no Queue in namespace shop"]),
    ({"functions": {"ghost"}}, ["'ghost' is registered by --module", "no Handler 'ghost'", "worker: {}"]),
    ({"functions": {"resize"}}, ["'resize'", "runs its jobs in pods (spec.template)"]),
    ({"functions": {"send"}}, ["'send'", "command ['python', '-m', 'send']", "keep one"]),
    ({"want_handlers": {"nope"}}, ["--handler nope", "no Handler 'nope'"]),
    ({"want_handlers": {"resize"}}, ["--handler resize", "pods"]),
    ({"want_handlers": {"unclaimed"}}, ["--handler unclaimed", "no --module registers it"]),
    ({"handlers": {"charge": sdk_handler()}, "functions": set()}, ["nothing to serve"]),
    ({"want_handlers": {"send"}}, ["--handler send", "Handler 'send' runs the command ['python', '-m', 'send']",
                                   "--allow-command send", "--allow-commands"]),
    ({"functions": set()}, ["nothing to serve", "(send) run commands", "--allow-command NAME"]),
    ({"allow_commands": {"nope"}}, ["--allow-command nope: there is no Handler 'nope' in namespace shop"]),
    ({"allow_commands": {"resize"}}, ["--allow-command resize", "runs its jobs in pods"]),
])
def test_bad_input_at_start_names_what_is_wrong(kwargs: dict[str, Any], words: list[str]) -> None:
    args = {"namespace": NS, "queues": {"emails"}, "handlers": HANDLERS, "functions": {"charge"}, **kwargs}
    with pytest.raises(PlanError) as refused:
        plan(**args)
    for word in words:
        assert word in str(refused.value)


def test_later_changes_are_served_without_complaint() -> None:
    """After start the same rules apply to Handlers and Queues as they change, and a Handler's command wins."""
    served = serving({"emails"}, {"charge": command_handler("charge-cli"), "resize": pod_handler()}, {"charge"},
                     allow_commands=True)
    assert served.handlers == {"charge"} and served.how("charge") == ("charge-cli",)


# --- its name and Worker object ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, label", [
    ("Laptop.Local", "laptop-local"), ("--x__y--", "x-y"), ("ÅÄÖ", "worker"), ("a" * 80, "a" * 63),
    ("workers-7d9f-x2", "workers-7d9f-x2"),
])
def test_names_are_sanitised_to_dns_labels(text: str, label: str) -> None:
    assert sanitise(text) == label
    assert name_problem(label) is None


def test_default_name_is_the_pod_else_host_and_pid() -> None:
    assert default_name({"POD_NAME": "workers-7d9f-x2"}) == "workers-7d9f-x2"
    assert default_name({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "workers-abc"}) == "workers-abc"
    assert default_name({}, hostname="My_Laptop.example.com", pid=4242) == "my-laptop-4242"
    long = default_name({}, hostname="h" * 100, pid=12345)
    assert long.endswith("-12345") and len(long) == 63 and name_problem(long) is None


@pytest.mark.parametrize("bad", ["Worker", "-w", "w-", "w_1", "a" * 64, ""])
def test_an_explicit_name_must_be_a_dns_label(bad: str) -> None:
    assert "--name" in (name_problem(bad) or "") and "DNS label" in name_problem(bad)


def test_the_spec_says_queues_handlers_slots_lease_draining_and_results() -> None:
    offer = Offer(queues=frozenset({"payments", "emails"}), handlers=frozenset({"send", "charge"}), slots=4,
                  lease_duration=timedelta(seconds=3.5), draining=True)
    result = {"job": "job-a", "uid": UID, "sequence": 1, "incarnation": "abc123", "exitCode": 0}
    spec = worker_spec(offer, "abc123", at(10), [result], user="alice")
    assert spec == {"incarnation": "abc123", "queues": ["emails", "payments"], "handlers": ["charge", "send"],
                    "slots": 4, "leaseDurationSeconds": 3,  # the shortest lease, never longer
                    "draining": True, "renewTime": "2026-03-01T12:00:10.000000Z", "results": [result],
                    "user": "alice"}
    WorkerSpec.model_validate(spec)  # what the CRD's model accepts
    assert offer.renew_every == 1.0 and offer.renew_deadline == 2.0
    assert worker_spec(Offer(frozenset(), frozenset(), 0, timedelta(milliseconds=200)), "x", at(0),
                       [])["leaseDurationSeconds"] == 1


def test_every_write_is_one_json_patch_tested_against_its_incarnation() -> None:
    assert spec_patch("abc123", {"incarnation": "abc123"}) == [
        {"op": "test", "path": "/spec/incarnation", "value": "abc123"},
        {"op": "replace", "path": "/spec", "value": {"incarnation": "abc123"}}]


def test_it_is_created_with_the_finalizer_its_label_and_in_a_pod_owned_by_the_pod() -> None:
    owner = pod_owner({"POD_NAME": "workers-7d9f-x2", "POD_UID": "u-pod"})
    assert owner == {"apiVersion": "v1", "kind": "Pod", "name": "workers-7d9f-x2", "uid": "u-pod"}
    assert pod_owner({"POD_NAME": "workers-7d9f-x2"}) is None and pod_owner({}) is None
    body = worker_body(NS, "workers-7d9f-x2", {"incarnation": "abc123"}, owner)
    assert body["apiVersion"] == "sextant.dev/v1alpha1" and body["kind"] == "Worker"
    assert body["metadata"] == {"name": "workers-7d9f-x2", "namespace": NS,
                                "labels": {contract.LABEL_WORKER: "workers-7d9f-x2"},
                                "finalizers": ["sextant.dev/attempts"], "ownerReferences": [owner]}
    assert "ownerReferences" not in worker_body(NS, "laptop-1", {}, None)["metadata"]


# --- its assignments and results ------------------------------------------------------------------------------

def assignment(**fields: Any) -> Assignment:
    return Assignment.model_validate({"job": "job-a", "uid": UID, "queue": "emails", "handler": "charge",
                                      "sequence": 2, "attempt": 2, "incarnation": "abc123",
                                      "assignedAt": format_time(at(0)), **fields})


def test_assignments_are_read_by_job_uid_sequence_and_incarnation_skipping_odd_ones() -> None:
    good = assignment().wire()
    found = read_assignments({"assignments": [good, {"job": "job-b"}, "nonsense"]})
    assert list(found) == [(UID, 2, "abc123")] and found[(UID, 2, "abc123")].job == "job-a"
    assert read_assignments(None) == {} and read_assignments({"assignments": "x"}) == {}


def test_the_timeout_is_a_duration_by_the_operators_clock_alone() -> None:
    """A worker clock an hour off neither kills a live attempt nor lets it run on: timeoutAt − assignedAt, counted
    from when the worker saw the assignment."""
    assert timeout_after(assignment(timeoutAt=format_time(at(90)))) == 90.0
    assert timeout_after(assignment(timeoutAt=format_time(at(-5)))) == 0.0
    assert timeout_after(assignment()) is None


def test_a_result_says_what_the_handler_did_and_why_the_worker_stopped_it() -> None:
    a = assignment()
    assert result_of(a, Ended(0), None, at(1), at(3)) == {
        "job": "job-a", "uid": UID, "sequence": 2, "incarnation": "abc123", "exitCode": 0,
        "startedAt": format_time(at(1)), "finishedAt": format_time(at(3))}
    failed = result_of(a, Ended(1, "KeyError: 'orderId'"), None, at(1), at(3))
    assert (failed["exitCode"], failed["message"], "reason" in failed) == (1, "KeyError: 'orderId'", False)
    timed_out = result_of(a, Ended(143, "cancelled"), A.TIMEOUT, at(1), at(3))
    assert (timed_out["exitCode"], timed_out["reason"]) == (143, "Timeout")
    never_ran = result_of(a, Ended(None, "the job is gone"), NOT_FOUND, None, at(3))
    assert "exitCode" not in never_ran and "startedAt" not in never_ran and never_ran["reason"] == "NotFound"
    drained = result_of(a, Ended(None, "the worker was draining"), DRAINED, None, at(3))
    assert drained["reason"] == "Drained" and "exitCode" not in drained
    long = result_of(a, Ended(1, "x" * 10_000), None, at(1), at(3))
    assert len(long["message"]) == MESSAGE_MAX_LENGTH
    WorkerResult.model_validate(long)


def test_results_stay_until_their_assignment_has_left_status() -> None:
    results = Results()
    mine, other = (UID, 2, "abc123"), ("u-2", 1, "abc123")
    results.add(mine, {"job": "job-a"})
    results.add(other, {"job": "job-b"})
    results.keep({mine: assignment()})
    assert results.to_write() == [{"job": "job-a"}] and other not in results
    results.keep({})
    assert results.to_write() == [] and len(results) == 0


def test_an_app_serves_the_functions_it_is_given_by_their_registered_names() -> None:
    from sextant import sdk
    from sextant.worker.app import _functions

    @sdk.handler("unit-app-greet")
    def greet(job: Any, ctx: Any) -> None:
        pass

    assert _functions([greet]) == {"unit-app-greet": greet}
    assert _functions({"other": greet}) == {"other": greet}
    assert _functions(None)["unit-app-greet"] is greet

    def stray(job: Any, ctx: Any) -> None:
        pass

    with pytest.raises(ValueError, match="is not registered with @sextant.sdk.handler"):
        _functions([stray])


@pytest.mark.parametrize("kwargs, words", [
    ({"name": "Bad_Name"}, "name 'Bad_Name': a worker's name must be a DNS label"),
    ({"concurrency": 0}, "concurrency: must be a whole number of at least 1"),
    ({"namespace": "Not A Namespace"}, "namespace: 'Not A Namespace' is not a valid namespace"),
])
def test_an_apps_bad_input_is_a_value_error_naming_it(kwargs: dict[str, Any], words: str) -> None:
    from sextant.kube.kubeconfig import Connection
    import sextant.worker

    with pytest.raises(ValueError) as refused:
        sextant.worker.Worker(**{"namespace": NS, "handlers": {}, "connection": Connection(server="http://x", ssl_context=False),
                                 **kwargs})
    assert words in str(refused.value)


# --- the command line -----------------------------------------------------------------------------------------

def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["worker", *argv])


def test_arguments_and_their_defaults() -> None:
    args = parse("--module", "app.handlers", "--module", "app.more", "--queue", "emails", "--queue", "payments",
                 "-n", "shop", "--concurrency", "32", "--drain-grace", "1m", "--metrics-port", "9100")
    assert args.modules == ["app.handlers", "app.more"] and args.queues == ["emails", "payments"]
    assert (args.namespace, args.concurrency, args.drain_grace, args.metrics_port) == ("shop", 32, 60.0, 9100)
    defaults = parse()
    assert (defaults.queues, defaults.modules, defaults.handlers, defaults.name) == (None, None, None, None)
    assert parse("--no-events").no_events, "still accepted (it does nothing now): scripts that pass it keep working"
    # Unset, so that a --config file's [worker] may set them; the worker then takes Settings' defaults (8, 25 s).
    assert (defaults.concurrency, defaults.drain_grace, defaults.metrics_port) == (None, None, None)


def test_a_config_file_fills_the_flags_not_given(tmp_path) -> None:
    path = tmp_path / "sextant.toml"
    path.write_text('[queues.emails]\n[queues.slow]\n[handlers.send]\ncommand = ["true"]\n'
                    '[worker]\nconcurrency = 16\ndrain_grace = "1m"\nmodules = ["app.handlers"]\n')
    args = parse("--config", str(path), "--concurrency", "4")
    apply_config(args)
    assert (args.concurrency, args.drain_grace, args.modules) == (4, 60.0, ["app.handlers"]), "the flag wins"
    assert (args.queues, args.handlers) == (["emails", "slow"], ["send"]), "what the file declares, not the namespace"
    args = parse("--config", str(path), "--queue", "emails")
    apply_config(args)
    assert args.queues == ["emails"]


@pytest.mark.parametrize("text, words", [
    ("[worker]\nconcurency = 3\n", "sextant.toml: worker.concurency: unknown key; it takes queues, handlers"),
    ("[worker]\ndrain-grace = \"1m\"\n", "worker.drain-grace: write 'drain_grace'"),
    ("[worker]\nconcurrency = \"3\"\n", "worker.concurrency: Input should be a valid integer"),
    ("[worker]\nconcurrency = 0\n", "worker.concurrency: Input should be greater than or equal to 1"),
    ("[queues.e]\nmax_attempts = 0\n", "queues.e.max_attempts"),
])
def test_a_bad_config_file_is_bad_input_naming_the_key(tmp_path, text: str, words: str) -> None:
    path = tmp_path / "sextant.toml"
    path.write_text(text)
    with pytest.raises(BadInput, match=re.escape(words)):
        apply_config(parse("--config", str(path)))
    with pytest.raises(BadInput, match="--config .*missing.toml: No such file"):
        apply_config(parse("--config", str(tmp_path / "missing.toml")))


def test_commands_are_allowed_and_given_variables_by_flag_or_by_the_config_file(tmp_path) -> None:
    args = parse()
    assert worker_main.allowed_commands(args) == frozenset() and worker_main.command_env(args, {}) == ()
    assert worker_main.allowed_commands(parse("--allow-commands")) is True
    assert worker_main.allowed_commands(parse("--allow-command", "a", "--allow-command", "b")) == {"a", "b"}
    environ = {"SMTP_PASSWORD": "s3cret", "OTHER": "x"}
    assert worker_main.command_env(parse("--command-env", "SMTP_PASSWORD", "--command-env", "MODE=prod=1"),
                                   environ) == (("SMTP_PASSWORD", "s3cret"), ("MODE", "prod=1"))
    path = tmp_path / "sextant.toml"
    path.write_text('[handlers.send]\ncommand = ["true"]\n'
                    '[worker]\nallow_commands = ["send"]\ncommand_env = ["SMTP_PASSWORD", "MODE=prod"]\n')
    args = parse("--config", str(path))
    apply_config(args)
    assert worker_main.allowed_commands(args) == {"send"}
    assert worker_main.command_env(args, environ) == (("SMTP_PASSWORD", "s3cret"), ("MODE", "prod"))
    args = parse("--config", str(path), "--allow-commands")
    apply_config(args)
    assert worker_main.allowed_commands(args) is True, "the flag wins"
    path.write_text('[worker]\nallow_commands = true\n')
    args = parse("--config", str(path))
    apply_config(args)
    assert worker_main.allowed_commands(args) is True


@pytest.mark.parametrize("argv, words", [
    (["--allow-commands", "--allow-command", "send"], "--allow-commands runs every command handler; "
                                                      "--allow-command send names some: give one of the two"),
    (["--allow-command", "Not_A_Name"], "--allow-command: 'Not_A_Name' is not a valid handler name"),
    (["--command-env", "NO_SUCH_VARIABLE_HERE"], "--command-env NO_SUCH_VARIABLE_HERE: the worker's environment "
                                                 "has no NO_SUCH_VARIABLE_HERE (give NO_SUCH_VARIABLE_HERE=VALUE"),
    (["--command-env", "2X=1"], "--command-env: '2X=1' is not NAME or NAME=VALUE"),
    (["--command-env", "SEXTANT_JOB_ID=x"], "--command-env: SEXTANT_JOB_ID: the SEXTANT_* variables are the "
                                            "attempt's own"),
    (["--command-env", "KUBECONFIG"], "--command-env: KUBECONFIG: the worker's own credentials are never passed"),
])
def test_bad_command_flags_exit_2_naming_the_flag(argv: list[str], words: str, monkeypatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KUBECONFIG", "/nowhere/config")
    assert worker_main.main(parse(*argv)) == 2
    assert words in capsys.readouterr().err


def test_a_commands_environment_is_the_base_what_is_passed_and_sextant_never_the_workers() -> None:
    """Issue 28: never the worker's whole environment (its envFrom Secrets, KUBECONFIG, the pod's Kubernetes
    variables); the SEXTANT_* variables win over anything passed."""
    from sextant.worker.environment import DEFAULT_PATH, command_environment

    worker_env = {"PATH": "/opt/sextant/bin:/usr/bin", "HOME": "/home/w", "LANG": "C.UTF-8", "LC_TIME": "de_DE",
                  "TZ": "UTC", "DB_PASSWORD": "s3cret", "KUBECONFIG": "/home/w/.kube/config",
                  "KUBERNETES_SERVICE_HOST": "10.0.0.1", "POD_NAME": "w-1", "SMTP_HOST": "smtp.example"}
    env = command_environment(worker_env, {"SMTP_HOST": "smtp.example"}, {"SEXTANT_JOB_ID": "job_a"})
    assert env == {"PATH": "/opt/sextant/bin:/usr/bin", "HOME": "/home/w", "LANG": "C.UTF-8", "LC_TIME": "de_DE",
                   "TZ": "UTC", "SMTP_HOST": "smtp.example", "SEXTANT_JOB_ID": "job_a"}
    assert command_environment({}, {}, {})["PATH"] == DEFAULT_PATH
    assert command_environment({}, {"SEXTANT_JOB_ID": "forged"}, {"SEXTANT_JOB_ID": "job_a"})["SEXTANT_JOB_ID"] == \
        "job_a"


@pytest.mark.parametrize("argv, words", [
    (["--concurrency", "0"], "argument --concurrency: 0 is not at least 1"),
    (["--drain-grace", "soon"], "argument --drain-grace: 'soon' is not a duration"),
    (["--metrics-port", "70000"], "argument --metrics-port: 70000 is not a port"),
])
def test_bad_arguments_are_usage_errors(argv: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(*argv)
    assert exited.value.code == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["--name", "Bad_Name"], "--name 'Bad_Name': a worker's name must be a DNS label"),
    (["--module", "sextant_no_such_module"], "--module sextant_no_such_module: no such module"),
    (["-n", "Not A Namespace"], "--namespace: 'Not A Namespace' is not a valid namespace"),
    (["-A"], "-A/--all-namespaces"),
])
def test_bad_input_exits_2_before_anything_starts(argv: list[str], words: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert worker_main.main(parse(*argv)) == 2
    assert words in capsys.readouterr().err


def test_a_module_that_fails_to_import_shows_its_error(tmp_path, monkeypatch, capsys) -> None:
    (tmp_path / "broken_handlers.py").write_text("import json\nraise RuntimeError('no database URL set')\n")
    (tmp_path / "twice_handlers.py").write_text(
        "from sextant.sdk import handler\n"
        "@handler('dup')\ndef a(job, ctx): pass\n@handler('dup')\ndef b(job, ctx): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert worker_main.main(parse("--module", "broken_handlers")) == 2
    err = capsys.readouterr().err
    assert "--module broken_handlers does not import: RuntimeError: no database URL set" in err
    assert "broken_handlers.py" in err  # the traceback shows where
    assert worker_main.main(parse("--module", "twice_handlers")) == 2
    assert "ValueError: handler 'dup' is registered twice" in capsys.readouterr().err
