"""What every SDK's worker must do, whatever its language: the worker side of protocol v2 (docs/workers.md), judged
on the real control plane and the real operator, from what the API server stored (never from what the worker says).

Each scenario runs against every implementation in IMPLEMENTATIONS. The handlers are commands (`sh -c …`, a Handler's
spec.worker.command: payload on stdin, exit code = the outcome), so no scenario needs handler code in the SDK's
language; an implementation only has to serve command handlers.

Implemented by the Python worker and the Node SDK's (`sextant-worker`, sdk/node: `make node-sdk` builds it).
Adding an implementation: append one `Implementation` whose `argv` turns a `WorkerArgs` into the
command line that starts that SDK's worker process, serving exactly `args.queues` and `args.handlers` with
`args.slots` slots, named `args.name`, in `args.namespace`, talking to the API server of `args.kubeconfig`, e.g.

    Implementation("node", lambda a: ["node", str(repo_root() / "sdk/node/bin/sextant-worker.js"),
                                      "--kubeconfig", str(a.kubeconfig), "--namespace", a.namespace,
                                      "--name", a.name, "--concurrency", str(a.slots),
                                      *(f"--queue={q}" for q in a.queues), *(f"--handler={h}" for h in a.handlers)])

The process must drain and exit 0 on SIGTERM (deleting its Worker object), and must be killable with SIGKILL; its
standard output and error go to a log file that a failing test shows. Run only one implementation with
`-k python` or `-k node` (the parameter's id).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness import repo_root, wait_for
from tests.harness.scripted_worker import GROUP, VERSION
from tests.harness.watching import Versions

from .support import apply, get_json, job, queue, status, wait_state

FAST = {"backoff": {"policy": "fixed", "initial": "200ms"}, "leaseDuration": "5s", "cancelGrace": "2s"}
OPERATOR_MANAGER = "sextant-operator"


@dataclass(frozen=True)
class WorkerArgs:
    kubeconfig: Path
    namespace: str
    name: str
    queues: tuple[str, ...]
    handlers: tuple[str, ...]
    slots: int


@dataclass(frozen=True)
class Implementation:
    id: str
    argv: Callable[[WorkerArgs], list[str]]


def python_argv(a: WorkerArgs) -> list[str]:
    return [sys.executable, "-m", "sextant", "--kubeconfig", str(a.kubeconfig), "worker", "-n", a.namespace,
            "--name", a.name, "--concurrency", str(a.slots), "--drain-grace", "10s", "--allow-commands",
            *(f"--queue={q}" for q in a.queues), *(f"--handler={h}" for h in a.handlers)]


def node_argv(a: WorkerArgs) -> list[str]:
    """The Node SDK's worker (sdk/node, built by `make node-sdk`) with the same flags."""
    return ["node", str(repo_root() / "sdk" / "node" / "dist" / "bin" / "sextant-worker.js"),
            "--kubeconfig", str(a.kubeconfig), "-n", a.namespace, "--name", a.name, "--concurrency", str(a.slots),
            "--drain-grace", "10s", "--allow-commands", *(f"--queue={q}" for q in a.queues),
            *(f"--handler={h}" for h in a.handlers)]


IMPLEMENTATIONS = [Implementation("python", python_argv), Implementation("node", node_argv)]


class RunningWorker:
    """One worker process of some implementation."""

    def __init__(self, argv: list[str], log_path: Path, name: str) -> None:
        self.name, self.log_path = name, log_path
        self.proc = subprocess.Popen(argv, stdout=log_path.open("ab"), stderr=subprocess.STDOUT)

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@pytest.fixture(params=IMPLEMENTATIONS, ids=lambda impl: impl.id)
def start_worker(request, cluster, namespace, tmp_path_factory) -> Iterator[Callable[..., RunningWorker]]:
    """start_worker(name, handlers, until, queues=("q",), slots=2): a worker of the implementation under test,
    returned once `until(its Worker object)` holds; killed at the end of the test."""
    impl: Implementation = request.param
    logs = tmp_path_factory.mktemp(f"workers-{impl.id}")
    made: list[RunningWorker] = []
    request.node._sextant_workers = made  # their logs join a failed test's report (conftest.py)

    def start(name: str, handlers: tuple[str, ...], until: Callable[[dict[str, Any]], bool],
              queues: tuple[str, ...] = ("q",), slots: int = 2) -> RunningWorker:
        args = WorkerArgs(cluster.kubeconfig, namespace, name, queues, handlers, slots)
        worker = RunningWorker(impl.argv(args), logs / f"worker-{name}.log", name)
        made.append(worker)
        wait_for(lambda: until(worker_object(cluster, namespace, name)) or worker.proc.poll() is not None, 60,
                 message=f"worker {name} to start")
        assert worker.proc.poll() is None, f"worker {name} exited: {worker.log()[-2000:]}"
        return worker

    yield start
    for worker in made:
        worker.kill()


@pytest.fixture
def serve(start_worker, operator) -> Callable[..., RunningWorker]:
    """serve(name, handlers, queues=("q",), slots=2): a worker live (the operator believes it) before it returns."""
    def start(name: str, handlers: tuple[str, ...], queues: tuple[str, ...] = ("q",), slots: int = 2) -> RunningWorker:
        return start_worker(name, handlers, lambda w: (w.get("status") or {}).get("state") == "live", queues, slots)
    return start


def worker_object(cluster, namespace: str, name: str) -> dict[str, Any]:
    found = get_json(cluster, namespace, "workers.sextant.dev")["items"]
    return next((w for w in found if w["metadata"]["name"] == name), {})


def command(name: str, script: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Handler", "metadata": {"name": name},
            "spec": {"worker": {"command": ["sh", "-c", script]}}}


def attempts(st: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(a["attempt"], a["result"], a.get("reason"), a.get("exitCode")) for a in st.get("attempts", [])]


def status_managers(cluster, namespace: str, name: str) -> set[str]:
    obj = get_json(cluster, namespace, "jobs.sextant.dev", name, "--show-managed-fields")
    return {m["manager"] for m in obj["metadata"].get("managedFields", []) if m.get("subresource") == "status"}


# ================================================================ outcomes
def test_success(cluster, namespace, serve):
    apply(cluster, namespace, queue("q", **FAST), command("ok", "cat >/dev/null; echo fine"), job("job-ok",
                                                                                                 handler_name="ok"))
    serve("w", ("ok",))
    final = wait_state(cluster, namespace, "job-ok", "succeeded")
    assert attempts(final) == [(1, "succeeded", None, 0)]
    entry = final["attempts"][0]
    incarnation = worker_object(cluster, namespace, "w")["spec"]["incarnation"]
    assert (entry["worker"], entry["node"]) == (f"w/{incarnation}", "w")
    assert entry["startedAt"] <= entry["finishedAt"]
    assert status_managers(cluster, namespace, "job-ok") == {OPERATOR_MANAGER}


def test_failure_with_its_message(cluster, namespace, serve):
    apply(cluster, namespace, queue("q", maxAttempts=1, **FAST),
          command("fails", "cat >/dev/null; echo 'no such order' >&2; exit 4"), job("job-4", handler_name="fails"))
    serve("w", ("fails",))
    final = wait_state(cluster, namespace, "job-4", "dead")
    assert attempts(final) == [(1, "failed", "Error", 4)]
    assert "no such order" in final["attempts"][0]["message"]


def test_retried_until_dead(cluster, namespace, serve):
    apply(cluster, namespace, queue("q", maxAttempts=3, **FAST), command("fails", "exit 1"),
          job("job-r", handler_name="fails"))
    serve("w", ("fails",))
    final = wait_state(cluster, namespace, "job-r", "dead")
    assert attempts(final) == [(n, "failed", "Error", 1) for n in (1, 2, 3)]
    assert [a["sequence"] for a in final["attempts"]] == [1, 2, 3] and final["attempt"] == 3


def test_cancel_sends_sigterm_and_is_recorded_cancelled(cluster, namespace, serve, tmp_path):
    started, term = tmp_path / "started", tmp_path / "term"
    apply(cluster, namespace, queue("q", **FAST),
          command("stubborn", f'trap "touch {term}; exit 143" TERM; touch {started}; while true; do sleep 0.1; done'),
          job("job-c", handler_name="stubborn"))
    serve("w", ("stubborn",))
    wait_for(started.exists, 30, message="the command to start")
    cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", "job-c", "--type=merge", "-p",
                    '{"spec":{"cancel":true}}')
    final = wait_state(cluster, namespace, "job-c", "cancelled", timeout=30)
    assert term.exists(), "the command saw SIGTERM"
    assert [(a["result"], a["reason"]) for a in final["attempts"]] == [("cancelled", "Cancelled")]


def test_timeout(cluster, namespace, serve):
    apply(cluster, namespace, queue("q", timeout="2s", maxAttempts=1, **FAST),
          command("forever", 'trap "exit 143" TERM; while true; do sleep 0.1; done'),
          job("job-t", handler_name="forever"))
    serve("w", ("forever",))
    final = wait_state(cluster, namespace, "job-t", "dead", timeout=30)
    assert [(a["result"], a["reason"]) for a in final["attempts"]] == [("failed", "Timeout")]


def test_the_payload_on_stdin(cluster, namespace, serve, tmp_path):
    payload = {"orderId": 42, "items": ["a", "b"], "note": "ünïcode ✓", "nested": {"x": 1.5, "ok": True}}
    out = tmp_path / "payload.json"
    apply(cluster, namespace, queue("q", **FAST), command("read", f"cat > {out}"),
          job("job-p", handler_name="read", payload=payload))
    serve("w", ("read",))
    wait_state(cluster, namespace, "job-p", "succeeded")
    assert json.loads(out.read_text()) == payload


def test_an_output_line_of_100_kib_does_not_hang_it(cluster, namespace, serve):
    script = "cat >/dev/null; head -c 102400 /dev/zero | tr '\\0' x; echo; echo 'the last word' >&2; exit 2"
    apply(cluster, namespace, queue("q", maxAttempts=1, **FAST), command("loud", script),
          job("job-loud", handler_name="loud"))
    serve("w", ("loud",))
    final = wait_state(cluster, namespace, "job-loud", "dead", timeout=30)
    assert attempts(final) == [(1, "failed", "Error", 2)]
    assert "the last word" in final["attempts"][0]["message"]


# ================================================================ the worker's lifecycle
def test_drain_on_sigterm_finishes_the_attempt_and_deletes_the_worker_object(cluster, namespace, serve, tmp_path):
    started = tmp_path / "started"
    apply(cluster, namespace, queue("q", **FAST), command("nap", f"touch {started}; sleep 2"),
          job("job-d", handler_name="nap"))
    with Versions(cluster.kubeconfig, namespace, "workers", name="w") as seen:
        worker = serve("w", ("nap",))
        wait_for(started.exists, 30, message="the command to start")
        worker.terminate()
        assert worker.wait(30) == 0, worker.log()[-2000:]
        wait_for(lambda: any(v.kind == "DELETED" for v in seen.versions()), 15, message="its Worker object deleted")
    assert [a["result"] for a in status(cluster, namespace, "job-d")["attempts"]] == ["succeeded"]
    assert any(v.obj["spec"].get("draining") for v in seen.versions()), "it said it was draining"


# ================================================================ what it writes
def test_a_sub_second_job_costs_two_job_writes_and_the_worker_never_writes_job_status(cluster, namespace, serve):
    apply(cluster, namespace, queue("q", **FAST), command("quick", "cat >/dev/null"))
    serve("w", ("quick",))
    with Versions(cluster.kubeconfig, namespace, "jobs") as seen:
        apply(cluster, namespace, *(job(f"job-{i}", handler_name="quick") for i in range(3)))
        for i in range(3):
            wait_state(cluster, namespace, f"job-{i}", "succeeded")
            seen.wait_seen(f"job-{i}", "succeeded")
    for i in range(3):
        name = f"job-{i}"
        states = [v.status.get("state") for v in seen.versions(name)]
        assert seen.writes(name) == 2, f"{name}: create + final status only; versions seen: {states}"
        assert status_managers(cluster, namespace, name) == {OPERATOR_MANAGER}


# ================================================================ fencing and what it believes
def test_a_worker_taken_over_stops_its_handler_and_exits_1(cluster, namespace, serve, tmp_path):
    started, term = tmp_path / "started", tmp_path / "term"
    apply(cluster, namespace, queue("q", maxAttempts=1, **FAST),
          command("nap", f'trap "touch {term}; exit 143" TERM; touch {started}; while true; do sleep 0.1; done'),
          job("job-l", handler_name="nap"))
    worker = serve("w", ("nap",))
    wait_for(started.exists, 30, message="the command to start")
    # Another process took the name: its own incarnation in the object's spec.
    cluster.kubectl("patch", "-n", namespace, "workers.sextant.dev", "w", "--type=json", "-p",
                    '[{"op": "replace", "path": "/spec/incarnation", "value": "someoneelse"}]')
    assert worker.wait(30) == 1, worker.log()[-2000:]
    assert term.exists(), "its handler was stopped"
    final = wait_state(cluster, namespace, "job-l", "dead", timeout=30)
    assert [(a["result"], a["reason"]) for a in final["attempts"]] == [("failed", "LeaseExpired")]  # nothing reported
    assert worker_object(cluster, namespace, "w")["spec"]["incarnation"] == "someoneelse", "its write stands"


def test_what_the_worker_does_with_assignments_as_the_operator_writes_them(cluster, namespace, crds, start_worker,
                                                                           tmp_path):
    """No operator: the test writes the Worker's status as the operator would. The worker runs an assignment of its
    own incarnation (once), reports NotFound for a job that is gone or has another uid, ignores one for another
    incarnation, drops each result once its assignment has left status, and never runs a stale one again."""
    runs = tmp_path / "runs"
    apply(cluster, namespace, queue("q", leaseDuration="3s"), command("say", f"cat >/dev/null; echo ran >> {runs}"),
          job("job-run", handler_name="say"), job("job-other", handler_name="say"))
    worker = start_worker("w", ("say",), bool)  # registered: its object exists
    mine = worker_object(cluster, namespace, "w")["spec"]["incarnation"]
    uid = {n: get_json(cluster, namespace, "jobs.sextant.dev", n)["metadata"]["uid"] for n in ("job-run", "job-other")}

    def assignment(job_name: str, job_uid: str, incarnation: str = mine) -> dict[str, Any]:
        return {"job": job_name, "uid": job_uid, "queue": "q", "handler": "say", "sequence": 1, "attempt": 1,
                "incarnation": incarnation, "assignedAt": "2026-01-01T00:00:00Z"}

    def set_assignments(*items: dict[str, Any]) -> None:
        cluster.kubectl("patch", "-n", namespace, "workers.sextant.dev", "w", "--subresource=status",
                        "--type=merge", "-p", json.dumps({"status": {"assignments": list(items)}}))

    def results() -> dict[str, dict[str, Any]]:
        spec = (worker_object(cluster, namespace, "w") or {}).get("spec") or {}
        return {r["job"]: r for r in spec.get("results") or []}

    assigned = [assignment("job-run", uid["job-run"]), assignment("job-gone", "u-gone"),
                assignment("job-other", "not-its-uid"), assignment("job-old", uid["job-run"], "0ld")]
    set_assignments(*assigned)
    wait_for(lambda: set(results()) == {"job-run", "job-gone", "job-other"}, 30, message=lambda: results())
    got = results()
    assert got["job-run"]["exitCode"] == 0 and got["job-run"]["incarnation"] == mine
    assert {"startedAt", "finishedAt"} <= set(got["job-run"]) and "reason" not in got["job-run"]
    assert [(got[n].get("reason"), got[n].get("exitCode")) for n in ("job-gone", "job-other")] == \
        [("NotFound", None), ("NotFound", None)]
    set_assignments(*assigned[2:])  # the operator recorded two of them
    wait_for(lambda: set(results()) == {"job-other"}, 10, message=lambda: f"the recorded results dropped: {results()}")
    set_assignments(*assigned)  # an assignment seen again (a stale status) never runs twice
    set_assignments()
    wait_for(lambda: results() == {}, 10, message="every result dropped")
    assert runs.read_text().splitlines() == ["ran"] and worker.proc.poll() is None, worker.log()[-2000:]
