"""`sextant worker` as real processes against the real control plane and operator (docs/workers.md): sharing a
queue's concurrency, SIGKILL and expiry, a restart under its name, the drain, cancel, timeout (the operator away),
commands, chaining, NoWorker, pod mode and worker mode in one queue, a takeover, bad input — and the same worker
inside a program (sextant.worker.Worker). What ran where and when is read from the API (watches of the Worker objects
and the jobs), not from the workers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections import defaultdict
from datetime import timedelta
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.harness import wait_for
from tests.harness.watching import Versions, live_assignments

from .support import (HANDLERS_DIR, JobRecorder, WorkerProcess, apply, free_port, get_json, handler, job, jobs,
                      queue, status, timeline_of, wait_all, wait_state)

FAST = {"backoff": {"policy": "fixed", "initial": "200ms"}, "leaseDuration": "3s", "cancelGrace": "1s"}


def worker_handler(name: str, command: list[str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler", "metadata": {"name": name},
            "spec": {"worker": {"command": command} if command else {}}}


def conditions(st: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in st.get("conditions", [])}


def worker_object(cluster, namespace: str, worker: str) -> dict[str, Any] | None:
    found = get_json(cluster, namespace, "workers.sextant.dev", "--field-selector", f"metadata.name={worker}")["items"]
    return found[0] if found else None


def unreported(worker: dict[str, Any]) -> list[dict[str, Any]]:
    """The attempts a Worker runs at that version, as the API shows it: assigned to its current incarnation while
    live, no result in its spec yet (an assignment stays in status a moment after its result is recorded)."""
    reported = {(r["uid"], r["sequence"], r["incarnation"]) for r in (worker.get("spec") or {}).get("results") or []}
    return [a for a in live_assignments(worker) if (a["uid"], a["sequence"], a["incarnation"]) not in reported]


def running_at_once(workers: Versions) -> tuple[int, dict[str, int], dict[str, int]]:
    """The most attempts running at one moment: over all workers, per worker, per job uid."""
    total, per_worker, per_job = 0, defaultdict(int), defaultdict(int)
    for moment in workers.replay():
        jobs: dict[str, int] = defaultdict(int)
        for name, v in moment.items():
            running = unreported(v.obj)
            per_worker[name] = max(per_worker[name], len(running))
            for a in running:
                jobs[a["uid"]] += 1
        total = max(total, sum(jobs.values()))
        for uid, n in jobs.items():
            per_job[uid] = max(per_job[uid], n)
    return total, dict(per_worker), dict(per_job)


def start_order(workers: Versions) -> list[str]:
    """Jobs in the order their first assignment appeared (an assignment is the attempt's start)."""
    order: list[str] = []
    for v in workers.versions():
        for a in live_assignments(v.obj):
            if a["job"] not in order:
                order.append(a["job"])
    return order


@pytest.fixture
def workers(cluster, namespace, tmp_path_factory, request):
    made: list[WorkerProcess] = []
    request.node._sextant_workers = made  # their logs join a failed test's report (conftest.py)
    logs = tmp_path_factory.mktemp("workers")

    def start(name: str, *args: str) -> WorkerProcess:
        worker = WorkerProcess(cluster.kubeconfig, namespace, name, logs, *args).start()
        made.append(worker)
        return worker

    yield start
    for worker in made:
        worker.kill()


def wait_registered(cluster, namespace: str, *names: str, timeout: float = 30) -> None:
    """Registered, and judged live by the operator (it may assign to them)."""
    wait_for(lambda: all(((worker_object(cluster, namespace, n) or {}).get("status") or {}).get("state") == "live"
                         for n in names), timeout, message=f"workers {', '.join(names)} to register")


def test_three_workers_share_a_queue_and_its_concurrency_holds(cluster, namespace, operator, workers):
    # Every 7th job has a higher priority; all are waiting (Blocked, NoWorker) before the first worker connects.
    names = [f"job-{i:02d}" for i in range(30)]
    urgent = set(names[3::7])
    with Versions(cluster.kubeconfig, namespace, "workers") as seen:
        apply(cluster, namespace, queue("q", concurrency=4, **FAST), worker_handler("nap"),
              *(job(n, handler_name="nap", payload={"seconds": 0.4}, priority=5 if n in urgent else 0)
                for n in names))
        wait_for(lambda: all(conditions(j.get("status") or {}).get("Blocked") == ("True", "NoWorker")
                             for j in jobs(cluster, namespace).values()) and len(jobs(cluster, namespace)) == 30,
                 30, message="every job Blocked with reason NoWorker")
        port = free_port()
        for i in range(3):
            workers(f"w{i}", "--module", "napping", "--handler", "nap", "--concurrency", "2",
                    *(("--metrics-port", str(port)) if i == 0 else ()))
        final = wait_all(cluster, namespace, 30, {"succeeded", "failed", "dead"}, 120)
    assert {j["status"]["state"] for j in final.values()} == {"succeeded"}
    assert all(timeline_of(j["status"]) == [("succeeded", None)] for j in final.values())
    most, per_worker, per_job = running_at_once(seen)
    assert most == 4, "never more than the queue's concurrency, and used to its limit"
    assert set(per_worker) <= {"w0", "w1", "w2"} and max(per_worker.values()) <= 2, per_worker  # slots hold
    assert set(per_job.values()) == {1}, "never two attempts of one job at once"
    assert {j["status"]["attempts"][0]["node"] for j in final.values()} == {w for w, n in per_worker.items() if n}
    # Priority, then FIFO: none starts before a job 4 places ahead of it in line (one round admits up to 4).
    line = sorted(names, key=lambda n: (n not in urgent, n))
    order = start_order(seen)
    assert sorted(order) == sorted(names)
    assert all(order.index(line[i]) < order.index(line[i + 4]) for i in range(len(line) - 4)), order
    scraped = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'sextant_worker_attempts_total{handler="nap",queue="q",result="succeeded",worker="w0"}' in scraped
    assert 'sextant_worker_slots{state="free",worker="w0"} 2.0' in scraped
    assert 'sextant_worker_claim_to_start_seconds_count{worker="w0"}' in scraped


def marks(where: Path, name: str) -> list[str]:
    path = where / name
    return path.read_text().splitlines() if path.exists() else []


def serve_nap(workers, name: str, *args: str):
    return workers(name, "--module", "napping", "--handler", "nap", *args)


def test_a_killed_worker_loses_its_attempt_and_another_worker_runs_the_retry(cluster, namespace, operator, workers,
                                                                            tmp_path):
    apply(cluster, namespace, queue("q", maxAttempts=3, **FAST), worker_handler("nap"),
          job("job-k", handler_name="nap", payload={"seconds": 120, "dir": str(tmp_path)}))
    first = serve_nap(workers, "wa")
    wait_for(lambda: marks(tmp_path, "job-k.1.started"), 60, message="the handler to run on wa")
    stale = get_json(cluster, namespace, "jobs.sextant.dev", "job-k")
    serve_nap(workers, "wb")
    wait_registered(cluster, namespace, "wb")
    killed = time.monotonic()
    first.kill()
    wait_for(lambda: timeline_of(status(cluster, namespace, "job-k"))[:1] == [("failed", "LeaseExpired")], 30,
             message="the attempt to fail with LeaseExpired")
    assert time.monotonic() - killed < 3 + 5, "within leaseDuration and a few seconds"
    final = wait_state(cluster, namespace, "job-k", "succeeded")
    assert timeline_of(final) == [("failed", "LeaseExpired"), ("succeeded", None)]
    assert [a["node"] for a in final["attempts"]] == ["wa", "wb"]
    # The killed incarnation's late result (a write of its own object, as it would have sent it): refused, nothing
    # recorded, once the operator has read it.
    killed = final["attempts"][0]["worker"].split("/", 1)[1]
    late = {"job": "job-k", "uid": stale["metadata"]["uid"], "sequence": 1, "incarnation": killed, "exitCode": 0}
    cluster.kubectl("patch", "-n", namespace, "workers.sextant.dev", "wa", "--type=json", "-p", json.dumps(
        [{"op": "test", "path": "/spec/incarnation", "value": killed},
         {"op": "add", "path": "/spec/results/-", "value": late}]))
    generation = worker_object(cluster, namespace, "wa")["metadata"]["generation"]
    wait_for(lambda: ((worker_object(cluster, namespace, "wa") or {}).get("status") or {})
             .get("observedGeneration", 0) >= generation, 30, message="the operator to read the late result")
    assert status(cluster, namespace, "job-k") == final, "nothing recorded"


def test_a_worker_restarted_under_its_name_does_not_run_its_predecessors_attempt(cluster, namespace, operator,
                                                                                 workers, tmp_path):
    apply(cluster, namespace, queue("q", maxAttempts=3, **FAST), worker_handler("nap"),
          job("job-r", handler_name="nap", payload={"seconds": 120, "dir": str(tmp_path)}))
    before = serve_nap(workers, "wa")
    wait_for(lambda: marks(tmp_path, "job-r.1.started"), 60, message="the handler to run")
    before.kill()
    after = serve_nap(workers, "wa")  # the same name: a new incarnation, before the old Lease expired
    final = wait_state(cluster, namespace, "job-r", "succeeded", timeout=60)
    assert timeline_of(final) == [("failed", "LeaseExpired"), ("succeeded", None)]
    old, new = (a["worker"] for a in final["attempts"])
    assert old.startswith("wa/") and new.startswith("wa/") and old != new
    assert len(marks(tmp_path, "job-r.1.started")) == 1, "the restarted worker never ran the earlier attempt"
    assert after.proc.poll() is None


def test_sigterm_drains_finishing_what_runs_and_retrying_the_rest_elsewhere(cluster, namespace, operator, workers,
                                                                           tmp_path):
    def nap_job(name: str, seconds: float) -> dict[str, Any]:
        return job(name, handler_name="nap", payload={"seconds": seconds, "dir": str(tmp_path)})

    apply(cluster, namespace, queue("q", concurrency=10, maxAttempts=3, **FAST), worker_handler("nap"))
    draining = serve_nap(workers, "wa", "--concurrency", "3", "--drain-grace", "4s")
    wait_registered(cluster, namespace, "wa")
    apply(cluster, namespace, nap_job("short-1", 1.5), nap_job("short-2", 1.5), nap_job("long", 120))
    wait_for(lambda: all(marks(tmp_path, f"{n}.1.started") for n in ("short-1", "short-2", "long")), 60,
             message="three handlers running on wa")
    serve_nap(workers, "wb")
    wait_registered(cluster, namespace, "wb")
    draining.signal(signal.SIGTERM)
    wait_for(lambda: ((worker_object(cluster, namespace, "wa") or {}).get("status") or {}).get("state") == "draining",
             10, message="the operator to see wa draining")
    apply(cluster, namespace, nap_job("after-1", 0.1), nap_job("after-2", 0.1))
    assert draining.wait(60) == 0
    wait_for(lambda: worker_object(cluster, namespace, "wa") is None, 30,
             message="a drained worker's object to be gone (it deletes it; the operator lets it go)")
    final = wait_all(cluster, namespace, 5, {"succeeded", "dead"}, 60)
    nodes = {n: [a["node"] for a in j["status"]["attempts"]] for n, j in final.items()}
    assert {n: timeline_of(j["status"]) for n, j in final.items()} == {
        "short-1": [("succeeded", None)], "short-2": [("succeeded", None)],
        "long": [("failed", "Drained"), ("succeeded", None)],
        "after-1": [("succeeded", None)], "after-2": [("succeeded", None)]}, nodes
    assert nodes == {"short-1": ["wa"], "short-2": ["wa"], "long": ["wa", "wb"], "after-1": ["wb"],
                     "after-2": ["wb"]}
    assert marks(tmp_path, "long.1.cancelled"), "the unfinished handler was stopped"


def test_at_exit_a_worker_deletes_its_object_but_not_one_taken_over(cluster, namespace, crds):
    """No operator here: the object stays, deleting, behind its finalizer; the taken-over one is not deleted. Every
    write is one JSON patch tested against the incarnation, so the takeover's own write stands."""
    from sextant.kube import kubeconfig
    from sextant.kube.client import Kube
    from sextant.worker.registration import Offer, Registration, TakenOver

    offer = Offer(frozenset({"q"}), frozenset({"nap"}), 2, timedelta(seconds=3))

    async def exit_after(taken: bool) -> str:
        async with Kube(kubeconfig.load(str(cluster.kubeconfig))) as kube:
            registration = Registration(kube, namespace, f"w-{'taken' if taken else 'self'}", lambda: offer,
                                        lambda: [])
            await registration.register()
            await registration._write_until_acked()  # a renewal
            if taken:
                cluster.kubectl("patch", "-n", namespace, "workers.sextant.dev", registration.name, "--type=json",
                                "-p", '[{"op": "replace", "path": "/spec/incarnation", "value": "someoneelse"}]')
                try:
                    await registration._write_until_acked()
                except TakenOver as exc:
                    outcome = str(exc)
                else:
                    outcome = "written"
            else:
                outcome = "own"
            await registration.delete()
            return outcome

    assert asyncio.run(exit_after(False)) == "own"
    own = worker_object(cluster, namespace, "w-self")
    assert own is not None and own["metadata"].get("deletionTimestamp"), "deleted, held by its finalizer"
    assert own["metadata"]["finalizers"] == ["sextant.dev/attempts"]
    assert asyncio.run(exit_after(True)) == "its Worker object was taken over by incarnation someoneelse"
    taken = worker_object(cluster, namespace, "w-taken")
    assert taken is not None and not taken["metadata"].get("deletionTimestamp"), "one taken over is left alone"
    assert taken["spec"]["incarnation"] == "someoneelse"


def test_cancel_stops_a_running_handler_sigterm_then_sigkill_after_the_grace(cluster, namespace, operator, workers,
                                                                            tmp_path):
    term, started = tmp_path / "got-term", tmp_path / "started"
    stubborn = ["sh", "-c", f'trap "date +%s.%N >> {term}; sleep 60" TERM; touch {started}; '
                            "while true; do sleep 0.1; done"]
    apply(cluster, namespace, queue("q", cancelGrace="2s", leaseDuration="3s"), worker_handler("stubborn", stubborn),
          worker_handler("nap"), job("job-cmd", handler_name="stubborn"),
          job("job-sdk", handler_name="nap", payload={"seconds": 120, "dir": str(tmp_path)}))
    workers("w", "--module", "napping", "--handler", "nap", "--handler", "stubborn", "--concurrency", "2",
            "--allow-command", "stubborn")
    wait_for(lambda: started.exists() and marks(tmp_path, "job-sdk.1.started"), 60, message="both handlers to run")
    asked = time.time()
    for name in ("job-cmd", "job-sdk"):
        cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", name, "--type=merge", "-p",
                        '{"spec":{"cancel":true}}')
    sdk_final = wait_state(cluster, namespace, "job-sdk", "cancelled", timeout=30)
    cmd_final = wait_state(cluster, namespace, "job-cmd", "cancelled", timeout=30)
    ended = time.time()
    assert float(term.read_text().split()[0]) - asked < 2, "SIGTERM came at once"
    assert ended - asked >= 2, "SIGKILL only after cancelGrace"
    assert [(a["result"], a["reason"], a.get("exitCode")) for a in cmd_final["attempts"]] == \
        [("cancelled", "Cancelled", 137)]
    assert [(a["result"], a["reason"], a.get("exitCode")) for a in sdk_final["attempts"]] == \
        [("cancelled", "Cancelled", 143)]
    assert marks(tmp_path, "job-sdk.1.cancelled"), "the async handler's task was cancelled"
    assert conditions(cmd_final)["Cancelled"] == ("True", "Cancelled")


def test_the_worker_applies_the_timeout_itself_even_with_the_operator_away(cluster, namespace, operator, workers,
                                                                          tmp_path):
    apply(cluster, namespace, queue("q", timeout="3s", maxAttempts=1, cancelGrace="1s", leaseDuration="3s"),
          worker_handler("nap"), job("job-t", handler_name="nap", payload={"seconds": 120, "dir": str(tmp_path)}))
    serve_nap(workers, "w")
    wait_for(lambda: marks(tmp_path, "job-t.1.started"), 60, message="the handler to run")
    operator.kill()
    # The worker stops the handler at the timeout by itself, and holds its result until the operator is back.
    wait_for(lambda: marks(tmp_path, "job-t.1.cancelled"), 15, message="the worker to stop the handler itself")
    wait_for(lambda: [(r.get("reason"), r.get("exitCode")) for r in
                      (worker_object(cluster, namespace, "w") or {}).get("spec", {}).get("results", [])]
             == [("Timeout", 143)], 10, message="its result in the worker's spec")
    assert status(cluster, namespace, "job-t").get("state") != "dead", "only the operator writes the job"
    operator.start()
    final = wait_state(cluster, namespace, "job-t", "dead", timeout=30)
    assert [(a["result"], a["reason"], a.get("exitCode")) for a in final["attempts"]] == [("failed", "Timeout", 143)]
    assert conditions(final)["Dead"][0] == "True"


def test_a_command_handler_gets_the_payload_on_stdin_and_the_sextant_environment(cluster, namespace, operator,
                                                                                workers, tmp_path):
    payload = {"orderId": 42, "items": ["a", "b"], "note": "ünïcode ✓", "nested": {"x": 1.5, "ok": True}}
    out, env = tmp_path / "payload.json", tmp_path / "env"
    script = f'cat > {out}; env | grep ^SEXTANT_ > {env}; echo "attempt $SEXTANT_ATTEMPT of $SEXTANT_JOB_ID"'
    apply(cluster, namespace, queue("q", maxAttempts=1),
          worker_handler("h", ["sh", "-c", script]),
          worker_handler("fails", ["sh", "-c", "cat >/dev/null; echo 'no such order' >&2; exit 4"]),
          job("job-stdin", handler_name="h", payload=payload), job("job-exit4", handler_name="fails"))
    worker = workers("w", "--allow-commands")  # command handlers need no --module, but the opt-in
    assert timeline_of(wait_state(cluster, namespace, "job-stdin", "succeeded")) == [("succeeded", None)]
    assert json.loads(out.read_text()) == payload
    seen = dict(line.split("=", 1) for line in env.read_text().splitlines())
    assert {k: seen[k] for k in ("SEXTANT_JOB_ID", "SEXTANT_JOB_NAME", "SEXTANT_NAMESPACE", "SEXTANT_QUEUE",
                                 "SEXTANT_HANDLER", "SEXTANT_ATTEMPT", "SEXTANT_SEQUENCE", "SEXTANT_RUN",
                                 "SEXTANT_NODE_NAME")} == {
        "SEXTANT_JOB_ID": "job_stdin", "SEXTANT_JOB_NAME": "job-stdin", "SEXTANT_NAMESPACE": namespace,
        "SEXTANT_QUEUE": "q", "SEXTANT_HANDLER": "h", "SEXTANT_ATTEMPT": "1", "SEXTANT_SEQUENCE": "1",
        "SEXTANT_RUN": "1",  # the deprecated alias of SEXTANT_SEQUENCE, for one more version
        "SEXTANT_NODE_NAME": "w"}
    assert json.loads(seen["SEXTANT_PAYLOAD"]) == payload
    from sextant.runner.env import AttemptEnv  # what `sextant run` reads in a pod reads the same here

    assert AttemptEnv.from_environ(seen).payload == payload
    final = wait_state(cluster, namespace, "job-exit4", "dead")
    assert [(a["reason"], a["exitCode"], a["message"]) for a in final["attempts"]] == [("Error", 4, "no such order")]
    wait_for(lambda: "[job-stdin#1] attempt 1 of job_stdin" in worker.log(), 10, message="the output in its log")


def test_a_worker_not_told_to_run_commands_runs_no_handlers_command(cluster, namespace, operator, workers, tmp_path):
    """Issue 28: creating a Handler must not run its command in every worker. A worker without --allow-commands /
    --allow-command does not offer a command handler (its jobs wait, Blocked NoWorker), drops a Handler that becomes a
    command later, refuses a --handler naming one at start (exit 2, naming the handler and the flag); SDK functions
    of its --module run as before; a worker told to runs the command."""
    ran, later = tmp_path / "evil-ran", tmp_path / "later-ran"
    apply(cluster, namespace, queue("q", maxAttempts=1, **FAST), worker_handler("nap"), worker_handler("nap-sync"),
          worker_handler("evil", ["sh", "-c", f"cat >/dev/null; touch {ran}"]),
          job("job-evil", handler_name="evil"), job("job-nap", handler_name="nap", payload={"seconds": 0.1}))
    worker = workers("w", "--module", "napping")  # every Handler it can run: nap, nap-sync; evil is a command
    wait_state(cluster, namespace, "job-nap", "succeeded")
    wait_registered(cluster, namespace, "w")
    assert worker_object(cluster, namespace, "w")["spec"]["handlers"] == ["nap", "nap-sync"]
    wait_for(lambda: conditions(status(cluster, namespace, "job-evil")).get("Blocked") == ("True", "NoWorker"), 30,
             message="the command handler's job to wait for a worker that may run it")
    assert not ran.exists()
    wait_for(lambda: "does not serve the command handlers evil" in worker.log(), 10, message="the worker to say so")

    # A Handler that becomes a command later: no longer offered, its jobs wait; the command never runs here.
    apply(cluster, namespace, worker_handler("nap-sync", ["sh", "-c", f"cat >/dev/null; touch {later}"]))
    wait_for(lambda: worker_object(cluster, namespace, "w")["spec"]["handlers"] == ["nap"], 30,
             message="the worker to stop offering the Handler that became a command")
    apply(cluster, namespace, job("job-later", handler_name="nap-sync"))
    wait_for(lambda: conditions(status(cluster, namespace, "job-later")).get("Blocked") == ("True", "NoWorker"), 30,
             message="the new command handler's job to wait")
    assert not later.exists() and not ran.exists()

    # Asked by name without the opt-in: an error at start that names the handler and the flag.
    proc = WorkerProcess(cluster.kubeconfig, namespace, "bad", tmp_path, "--handler", "evil")
    result = subprocess.run(proc.command(), capture_output=True, text=True, timeout=60, env=proc_env())
    assert result.returncode == 2, result.stderr
    assert "--handler evil: Handler 'evil' runs the command" in result.stderr
    assert "--allow-command evil" in result.stderr and "--allow-commands" in result.stderr

    # A worker told to run it does.
    workers("w-commands", "--allow-command", "evil")
    wait_state(cluster, namespace, "job-evil", "succeeded")
    assert ran.exists() and not later.exists(), "only the command it was told to run"
    assert status(cluster, namespace, "job-evil")["attempts"][0]["node"] == "w-commands"


def test_a_command_gets_the_sextant_variables_a_base_and_what_is_passed_never_the_workers_secrets(
        cluster, namespace, operator, workers, tmp_path, monkeypatch):
    """Issue 28: a command's environment is SEXTANT_*, PATH/HOME/LANG-like base variables and what --command-env
    passes: not a Secret the worker has in its environment (envFrom in a pod), not its KUBECONFIG, not the pod's
    Kubernetes variables."""
    out = tmp_path / "env"
    monkeypatch.setenv("DB_PASSWORD", "s3cret-from-a-secret")
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("SMTP_HOST", "smtp.example")
    monkeypatch.setenv("LANG", "C.UTF-8")
    apply(cluster, namespace, queue("q", maxAttempts=1), worker_handler("show-env", ["sh", "-c", f"env > {out}"]),
          job("job-env", handler_name="show-env"))
    workers("w", "--allow-command", "show-env", "--command-env", "SMTP_HOST", "--command-env", "MODE=prod")
    wait_state(cluster, namespace, "job-env", "succeeded")
    seen = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    assert "s3cret-from-a-secret" not in out.read_text()
    assert not {"DB_PASSWORD", "KUBECONFIG", "KUBERNETES_SERVICE_HOST", "PYTHONPATH"} & set(seen), sorted(seen)
    assert (seen["SMTP_HOST"], seen["MODE"], seen["LANG"]) == ("smtp.example", "prod", "C.UTF-8")
    assert seen["PATH"] == os.environ["PATH"] and seen["SEXTANT_JOB_NAME"] == "job-env"
    from sextant.worker.environment import BASE_VARIABLES

    shell = {"PWD", "SHLVL", "_", "OLDPWD"}  # what sh itself adds
    others = {k for k in seen if not k.startswith(("SEXTANT_", "LC_"))} - set(BASE_VARIABLES) - shell
    assert others == {"SMTP_HOST", "MODE"}, sorted(others)


def test_sdk_chaining_makes_one_child_even_when_the_attempt_runs_twice(cluster, namespace, operator, workers):
    apply(cluster, namespace, queue("q", maxAttempts=3, **FAST), worker_handler("charge-card"),
          worker_handler("send-receipt"), job("job-charge", handler_name="charge-card", payload={"orderId": 7}))
    worker = workers("w", "--module", "chaining", "--handler", "charge-card", "--handler", "send-receipt")
    final = wait_state(cluster, namespace, "job-charge", "succeeded", timeout=60)
    assert timeline_of(final) == [("failed", "Error"), ("succeeded", None)]
    assert "card network timed out" in final["attempts"][0]["message"]

    def receipts() -> list[dict[str, Any]]:
        return [j for j in jobs(cluster, namespace).values() if j["spec"]["handler"] == "send-receipt"]

    wait_for(lambda: receipts() and receipts()[0].get("status", {}).get("state") == "succeeded", 60,
             message="the chained job to succeed")
    assert len(receipts()) == 1
    assert receipts()[0]["spec"]["payload"] == {"orderId": 7, "chargeId": "ch_7"}
    assert receipts()[0]["status"]["attempts"][0]["node"] == "w"
    wait_for(lambda: "receipt for order 7 (charge ch_7)" in worker.log(), 10, message="the receipt's output")


def test_pod_mode_and_worker_mode_in_one_queue_share_its_concurrency(cluster, namespace, operator, workers):
    # Each attempt lasts 2.5 s, so that the job is recorded running (after its first second) while it runs.
    names = [f"job-{i:02d}" for i in range(12)]
    with JobRecorder(cluster.kubeconfig, namespace) as recorder, Versions(cluster.kubeconfig, namespace,
                                                                          "workers") as seen:
        apply(cluster, namespace, queue("q", concurrency=3, **FAST), worker_handler("nap"),
              handler("h-pod", annotations={"sextant.dev/test-duration": "2500ms"}),
              *(job(n, handler_name="nap" if i % 2 else "h-pod", payload={"seconds": 2.5})
                for i, n in enumerate(names)))
        serve_nap(workers, "w", "--concurrency", "4")
        final = wait_all(cluster, namespace, 12, {"succeeded", "dead"}, 120)
    assert {j["status"]["state"] for j in final.values()} == {"succeeded"}
    assert recorder.max_running() == 3, "pods and workers together never exceed the queue's concurrency"
    assert running_at_once(seen)[0] <= 3
    ran = {n: ("pod" if "pod" in j["status"]["attempts"][0] else "worker") for n, j in final.items()}
    assert sorted(ran.values()) == ["pod"] * 6 + ["worker"] * 6


def test_bad_input_is_an_error_at_start_that_names_it(cluster, namespace, crds, tmp_path):
    (tmp_path / "pod_mode_handlers.py").write_text(
        "from sextant.sdk import handler\n@handler('resize')\ndef resize(job, ctx): pass\n")
    apply(cluster, namespace, queue("q"), worker_handler("nap"), handler("resize"))
    cases = {
        ("--queue", "nope", "--module", "napping", "--handler", "nap"): f"--queue nope: there is no Queue 'nope' in "
                                                                       f"namespace {namespace}",
        ("--module", "napping"): "handler 'nap-sync' is registered by --module, but there is no Handler 'nap-sync'",
        ("--module", "pod_mode_handlers"): "Handler 'resize' runs its jobs in pods (spec.template)",
        ("--module", "no_such_module_here"): "--module no_such_module_here: no such module",
        (): "nothing to serve: no --module registers a handler",
    }
    for args, words in cases.items():
        proc = WorkerProcess(cluster.kubeconfig, namespace, "bad", tmp_path, *args)
        result = subprocess.run(proc.command(), capture_output=True, text=True, timeout=60, cwd=tmp_path,
                                env=proc_env())
        assert (result.returncode, words in result.stderr) == (2, True), (args, result.stderr)
    assert worker_object(cluster, namespace, "bad") is None, "nothing was registered"


def proc_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(HANDLERS_DIR), os.environ.get("PYTHONPATH", ""))
                                                         if p)}


def test_a_worker_runs_inside_an_asyncio_program_beside_a_client_that_enqueues(cluster, namespace, operator):
    """README, "A worker in your own program": sextant.worker.Worker in this very process, on its event loop,
    serving a function registered here; sextant.client.Client enqueues; stop() drains and deregisters."""
    import sextant.worker
    from sextant import sdk
    from sextant.client import Client
    from sextant.kube import kubeconfig
    from sextant.resources.job import job_id

    ran: list[tuple[str, dict[str, Any], str]] = []

    @sdk.handler("in-app-greet")
    async def greet(job: sdk.Job, ctx: sdk.Context) -> None:
        ran.append((job.id, job.payload, asyncio.current_task().get_name()))

    apply(cluster, namespace, queue("q"), worker_handler("in-app-greet"))

    async def program() -> tuple[str, dict[str, Any]]:
        worker = sextant.worker.Worker(namespace=namespace, handlers=[greet], concurrency=2, name="in-app",
                                       kubeconfig=str(cluster.kubeconfig))
        serving = asyncio.create_task(worker.run(), name="the app's worker")
        client = Client(kubeconfig.load(str(cluster.kubeconfig)))
        try:
            created, _ = await asyncio.to_thread(client.create_job, namespace, queue="q", handler="in-app-greet",
                                                 payload={"to": "world"})
            name = created["metadata"]["name"]
            final = await asyncio.to_thread(wait_state, cluster, namespace, name, "succeeded")
            assert not serving.done()
        finally:
            client.close()
            worker.stop()
            await asyncio.wait_for(serving, 30)  # drained: run() returns
        return name, final

    name, final = asyncio.run(program())
    assert [(i, p) for i, p, _ in ran] == [(job_id(name), {"to": "world"})]
    assert final["attempts"][0]["node"] == "in-app" and final["attempts"][0]["worker"].startswith("in-app/")
    wait_for(lambda: worker_object(cluster, namespace, "in-app") is None, 30, message="its object to be gone")


def test_a_worker_whose_object_is_deleted_stops_its_handlers_and_registers_again(cluster, namespace, operator,
                                                                                 workers, tmp_path):
    apply(cluster, namespace, queue("q", maxAttempts=3, **FAST), worker_handler("nap"),
          job("job-d", handler_name="nap", payload={"seconds": 120, "dir": str(tmp_path)}))
    worker = serve_nap(workers, "w")
    wait_for(lambda: marks(tmp_path, "job-d.1.started"), 60, message="the handler to run")
    first = worker_object(cluster, namespace, "w")
    cluster.kubectl("delete", "-n", namespace, "workers.sextant.dev", "w", "--wait=false")
    final = wait_state(cluster, namespace, "job-d", "succeeded", timeout=60)
    assert timeline_of(final) == [("failed", "LeaseExpired"), ("succeeded", None)]
    old, new = (a["worker"] for a in final["attempts"])
    assert old == f"w/{first['spec']['incarnation']}" and new.startswith("w/") and new != old
    assert marks(tmp_path, "job-d.1.cancelled"), "its handler was stopped"
    again = worker_object(cluster, namespace, "w")
    assert again is not None and again["metadata"]["uid"] != first["metadata"]["uid"], "a new object"
    assert worker.proc.poll() is None, "it did not exit"
    assert "its Worker object was deleted" in worker.log()


def test_results_that_are_ready_together_travel_in_one_write(cluster, namespace, operator, workers):
    """At most one write of its object in flight; every result ready meanwhile goes in the next: 16 attempts assigned
    together, ending together, cost a few spec writes (generations), not 16."""
    names = [f"job-{i:02d}" for i in range(16)]
    apply(cluster, namespace, queue("q", concurrency=16, leaseDuration="30s"), worker_handler("nap"),
          *(job(n, handler_name="nap", payload={"seconds": 1.5}) for n in names))
    wait_for(lambda: len(jobs(cluster, namespace)) == 16 and all(
        conditions(j.get("status") or {}).get("Blocked") == ("True", "NoWorker")
        for j in jobs(cluster, namespace).values()), 30, message="every job waiting for a worker")
    with Versions(cluster.kubeconfig, namespace, "workers", "w") as seen:
        serve_nap(workers, "w", "--concurrency", "16")
        wait_all(cluster, namespace, 16, {"succeeded"}, 60)
    generations = sorted({v.obj["metadata"]["generation"] for v in seen.versions()})
    carried = [len(v.obj["spec"].get("results") or []) for v in seen.versions()]
    assert max(carried) >= 4, f"results batched: at most {max(carried)} in one write"
    assert generations[-1] - generations[0] <= 8, f"{generations[-1] - generations[0]} writes for 16 results"


def test_a_worker_started_from_the_config_file_serves_what_it_declares(cluster, namespace, operator, workers,
                                                                      tmp_path):
    """README: `sextant config apply -f sextant.toml`, then `sextant worker --config sextant.toml`."""
    from .plugin_support import ok, sextant

    path = tmp_path / "sextant.toml"
    path.write_text('[queues.emails]\nmax_attempts = 1\n\n[queues.other]\n\n'
                    '[handlers.send-receipt]\ncommand = ["sh", "-c", "cat >/dev/null; echo sent"]\n\n'
                    '[worker]\nconcurrency = 3\nqueues = ["emails"]\nallow_commands = ["send-receipt"]\n')
    ok(sextant(cluster, "-n", namespace, "config", "apply", "-f", str(path)))
    apply(cluster, namespace, job("job-1", queue_name="emails", handler_name="send-receipt"))
    worker = workers("w", "--config", str(path))
    wait_state(cluster, namespace, "job-1", "succeeded")
    spec = worker_object(cluster, namespace, "w")["spec"]
    assert (spec["queues"], spec["handlers"], spec["slots"]) == (["emails"], ["send-receipt"], 3)
    wait_for(lambda: "[job-1#1] sent" in worker.log(), 10, message="the command's output in the worker's log")
