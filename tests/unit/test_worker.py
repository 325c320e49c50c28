"""`sextant worker`'s pure parts (docs/workers.md): what it serves, its name and Lease, which jobs are its own,
and the status a result writes — computed by the lifecycle's own rules."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

import pytest

from _builders import T0, UID, at, queue
from sextant.cli.main import build_parser
from sextant.lifecycle import attempts as A
from sextant.resources import contract
from sextant.resources.common import format_time
from sextant.resources.handler import HandlerSpec
from sextant.worker import main as worker_main
from sextant.worker.assignments import assignment, owns
from sextant.worker.plan import PlanError, plan, serving
from sextant.worker.registration import Offer, default_name, lease_body, name_problem, sanitise
from sextant.lifecycle.attempts import DRAINED
from sextant.worker.results import Report, compute, stop_wanted

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


def test_serves_registered_functions_and_commands_on_every_queue_by_default() -> None:
    served = plan(NS, {"emails", "payments"}, HANDLERS, {"charge"})
    assert served.queues == {"emails", "payments"}
    assert served.functions == {"charge"} and dict(served.commands) == {"send": ("python", "-m", "send")}
    assert served.handlers == {"charge", "send"}  # never the pod-mode one, nor an SDK Handler nobody registered
    assert served.how("send") == ("python", "-m", "send") and served.how("charge") is None


def test_chosen_queues_and_handlers_narrow_what_it_serves() -> None:
    served = plan(NS, {"emails", "payments"}, HANDLERS, {"charge"}, want_queues={"emails"}, want_handlers={"send"})
    assert served.queues == {"emails"} and served.handlers == {"send"}


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
])
def test_bad_input_at_start_names_what_is_wrong(kwargs: dict[str, Any], words: list[str]) -> None:
    args = {"namespace": NS, "queues": {"emails"}, "handlers": HANDLERS, "functions": {"charge"}, **kwargs}
    with pytest.raises(PlanError) as refused:
        plan(**args)
    for word in words:
        assert word in str(refused.value)


def test_later_changes_are_served_without_complaint() -> None:
    """After start the same rules apply to Handlers and Queues as they change, and a Handler's command wins."""
    served = serving({"emails"}, {"charge": command_handler("charge-cli"), "resize": pod_handler()}, {"charge"})
    assert served.handlers == {"charge"} and served.how("charge") == ("charge-cli",)


# --- its name and Lease ---------------------------------------------------------------------------------------

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


def test_the_lease_says_queues_handlers_slots_draining_and_incarnation() -> None:
    offer = Offer(queues=frozenset({"payments", "emails"}), handlers=frozenset({"send", "charge"}), slots=4,
                  lease_duration=timedelta(seconds=3.5), draining=True)
    body = lease_body(NS, WORKER, HOLDER, offer, at(10), acquired=at(0))
    meta, spec = body["metadata"], body["spec"]
    assert meta["name"] == "sextant-worker-w1" and meta["labels"] == {contract.LABEL_WORKER: "w1"}
    assert meta["annotations"] == {contract.ANNOTATION_QUEUES: "emails,payments",
                                   contract.ANNOTATION_HANDLERS: "charge,send", contract.ANNOTATION_SLOTS: "4",
                                   contract.ANNOTATION_DRAINING: "true"}
    assert spec["holderIdentity"] == HOLDER and spec["leaseDurationSeconds"] == 3  # the shortest, never longer
    assert spec["renewTime"] == "2026-03-01T12:00:10.000000Z" and spec["acquireTime"] == "2026-03-01T12:00:00.000000Z"
    assert offer.renew_every == 1.0
    quiet = lease_body(NS, WORKER, HOLDER, Offer(frozenset(), frozenset(), 0, timedelta(milliseconds=200)), at(0))
    assert contract.ANNOTATION_DRAINING not in quiet["metadata"]["annotations"]
    assert quiet["spec"]["leaseDurationSeconds"] == 1


# --- which jobs are its own -----------------------------------------------------------------------------------

def running_job(*, worker: str = WORKER, holder: str = HOLDER, sequence: int = 1, attempt: int = 1, started: float = 0,
                timeout: str = "5m", **status: Any) -> dict[str, Any]:
    timeout_at = at(started) + timedelta(seconds=_seconds(timeout))
    return {
        "apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
        "metadata": {"name": "job-a", "namespace": NS, "uid": UID, "generation": 1, "resourceVersion": "7",
                     "creationTimestamp": format_time(T0, precise=False)},
        "spec": {"queue": "emails", "handler": "charge", "payload": {"orderId": 7}, **status.pop("spec", {})},
        "status": {"state": "running", "worker": worker, "sequence": sequence, "attempt": attempt, "maxAttempts": 3,
                   "queuedAt": format_time(T0), "timeoutAt": format_time(timeout_at),
                   "attempts": [{"attempt": attempt, "sequence": sequence, "worker": holder, "node": worker,
                                 "startedAt": format_time(at(started)), "result": "running"}], **status},
    }


def _seconds(text: str) -> float:
    from sextant.resources.common import parse_duration

    return parse_duration(text).total_seconds()


def test_a_job_is_its_own_only_when_running_its_run_and_its_incarnation() -> None:
    mine = running_job()
    found = assignment(mine, WORKER, HOLDER)
    assert found is not None and (found.job, found.sequence, found.attempt, found.queue, found.handler) == \
        ("job-a", 1, 1, "emails", "charge")
    assert found.started_at == T0
    assert owns(mine, WORKER, HOLDER, 1) and not owns(mine, WORKER, HOLDER, 2)
    assert assignment(running_job(holder="w1/earlier"), WORKER, HOLDER) is None  # a restarted worker's predecessor
    assert assignment(running_job(worker="w2", holder="w2/x"), WORKER, HOLDER) is None
    assert assignment(running_job(state="failed"), WORKER, HOLDER) is None
    stale = running_job()
    stale["status"]["sequence"] = 2  # the timeline's last entry is not the current run
    assert assignment(stale, WORKER, HOLDER) is None
    assert not owns(None, WORKER, HOLDER, 1)


# --- the result ------------------------------------------------------------------------------------------------

SPECS = (queue(maxAttempts=3, backoff={"policy": "fixed", "initial": "10s"}, cancelGrace="2s"), sdk_handler())


def recorded(raw: dict[str, Any], report: Report, when: float = 5):
    decision = compute(raw, WORKER, HOLDER, report, SPECS, at(when))
    assert decision is not None
    return decision.status, decision.status.attempts[-1]


def test_a_success_is_recorded_as_in_pod_mode() -> None:
    status, entry = recorded(running_job(), Report(sequence=1, exit_code=0))
    assert status.state.value == "succeeded" and status.worker is None
    assert (entry.result, entry.exit_code, entry.reason, entry.worker, entry.node) == \
        ("succeeded", 0, None, HOLDER, WORKER)
    assert entry.finished_at == format_time(at(5))
    assert any(c.type == "Succeeded" and c.status == "True" for c in status.conditions)


def test_a_failure_backs_off_and_the_last_one_is_dead() -> None:
    status, entry = recorded(running_job(), Report(sequence=1, exit_code=1, message="KeyError: 'orderId'"))
    assert status.state.value == "failed" and status.next_attempt_at == format_time(at(15))
    assert (entry.result, entry.reason, entry.exit_code, entry.message) == \
        ("failed", "Error", 1, "KeyError: 'orderId'")
    status, entry = recorded(running_job(sequence=3, attempt=3), Report(sequence=3, exit_code=1, message="boom"))
    assert status.state.value == "dead"


def test_non_retryable_error_ends_dead_at_once() -> None:
    status, entry = recorded(running_job(), Report(sequence=1, exit_code=86, message="NonRetryableError: declined"))
    assert status.state.value == "dead" and (entry.reason, entry.message) == \
        (A.NON_RETRYABLE, "NonRetryableError: declined")


def test_a_result_is_refused_when_the_attempt_is_no_longer_its_own() -> None:
    first = Report(sequence=1, exit_code=0)
    assert compute(running_job(holder="w1/earlier"), WORKER, HOLDER, first, SPECS, at(5)) is None
    assert compute(running_job(sequence=2, attempt=2), WORKER, HOLDER, first, SPECS, at(5)) is None
    assert compute(running_job(state="failed"), WORKER, HOLDER, first, SPECS, at(5)) is None


def test_the_worker_applies_the_timeout_itself() -> None:
    from sextant.controller.view import View

    raw = running_job(timeout="10s")
    job = View.snapshot((NS, "job-a"), raw)
    assert stop_wanted(job, SPECS, WORKER, at(3)) == (None, at(10))  # look again at timeoutAt
    assert stop_wanted(job, SPECS, WORKER, at(10))[0] == A.TIMEOUT
    # It stopped the handler at 10 s (143 after SIGTERM) before the operator wrote the stop: recorded as Timeout.
    status, entry = recorded(raw, Report(sequence=1, exit_code=143, stop_reason=A.TIMEOUT, stopped_at=at(10)), when=11)
    assert (status.state.value, entry.result, entry.reason, entry.exit_code) == ("failed", "failed", "Timeout", 143)


def test_a_cancel_reaches_the_handler_and_is_recorded_cancelled() -> None:
    from sextant.controller.view import View

    asked = running_job(spec={"cancel": True})
    assert stop_wanted(View.snapshot((NS, "job-a"), asked), SPECS, WORKER, at(2))[0] == A.CANCELLED
    status, entry = recorded(asked, Report(sequence=1, exit_code=143, stop_reason=A.CANCELLED, stopped_at=at(2)))
    assert (status.state.value, entry.result, entry.reason) == ("cancelled", "cancelled", "Cancelled")
    # The operator wrote the stop first: the same outcome.
    written = running_job(spec={"cancel": True}, stopReason="Cancelled", stopRequestedAt=format_time(at(1)))
    assert stop_wanted(View.snapshot((NS, "job-a"), written), SPECS, WORKER, at(2))[0] == A.CANCELLED
    status, entry = recorded(written, Report(sequence=1, exit_code=137, stop_reason=A.CANCELLED, stopped_at=at(2)))
    assert (status.state.value, entry.reason, entry.exit_code) == ("cancelled", "Cancelled", 137)


def test_a_drained_attempt_counts_and_is_retried() -> None:
    status, entry = recorded(running_job(), Report(sequence=1, exit_code=143, stop_reason=DRAINED, stopped_at=at(4)))
    assert status.state.value == "failed" and status.attempt == 1
    assert (entry.result, entry.reason, entry.exit_code) == ("failed", "Drained", 143)
    status, entry = recorded(running_job(), Report(sequence=1, exit_code=None, message="stopped before the handler "
                                                   "started", stop_reason=DRAINED, stopped_at=at(4)))
    assert (entry.reason, entry.exit_code) == ("Drained", None)


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
    assert (defaults.concurrency, defaults.drain_grace, defaults.metrics_port) == (8, 25.0, None)


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
