"""Snooze, output and progress on the real control plane (README, "Snooze, output and progress"), in both modes: SDK
functions and commands on `sextant worker` (real processes), and in attempt pods on the local node (`sextant run`
as a real process: the termination message and the attempt's Lease carry the report)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.harness import wait_for

from .plugin_support import ok, sextant
from .support import HANDLERS_DIR, apply, job, jobs, queue, status, timeline_of, wait_state
from .test_runner import local_handler, sh
from .test_worker import worker_handler, workers  # noqa: F401 - the fixture

FAST = {"backoff": {"policy": "fixed", "initial": "200ms"}, "leaseDuration": "3s", "cancelGrace": "1s"}
POD_ENV = {"PYTHONPATH": str(HANDLERS_DIR)}


def module_handlers() -> list[dict[str, Any]]:
    """A Handler for every function of the module (`sextant worker --module` refuses a function without one)."""
    return [worker_handler(name) for name in ("snoozer", "producer", "consumer", "progresser")]


def snooze_then_output(marker: Path) -> str:
    """A command that snoozes once (exit 85, the delay in its file), then succeeds with an output (its file)."""
    return (f'cat >/dev/null; if [ -e {marker} ]; then echo \'{{"rows": 2}}\' > "$SEXTANT_OUTPUT_FILE"; exit 0; '
            f'else touch {marker}; echo 1s > "$SEXTANT_SNOOZE_FILE"; exit 85; fi')


def assert_snoozed_once(final: dict[str, Any]) -> None:
    assert timeline_of(final) == [("snoozed", "Snoozed"), ("succeeded", None)]
    assert final["attempt"] == 1 and final["snoozes"] == 1, "the snoozed attempt is not counted"
    assert [a["attempt"] for a in final["attempts"]] == [1, 1]
    assert final["attempts"][0]["exitCode"] == 85 and "snoozed for 1s" in final["attempts"][0]["message"]


def progress_seen(cluster, namespace: str, name: str, fraction: float, message: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def shown() -> bool:
        seen.clear()
        seen.update(status(cluster, namespace, name))
        progress = seen.get("progress") or {}
        return seen.get("state") == "running" and (progress.get("fraction"), progress.get("message")) == (
            fraction, message)

    wait_for(shown, 30, message=lambda: f"progress {fraction} {message!r} on the running job; last status {seen}")
    return seen


def consumer_of(cluster, namespace: str) -> dict[str, Any] | None:
    found = [j for j in jobs(cluster, namespace).values() if j["spec"]["handler"] == "consumer"]
    return found[0] if found else None


# --- worker mode -------------------------------------------------------------------------------------------------
def test_a_worker_snoozes_sdk_functions_and_commands_without_counting_the_attempt(cluster, namespace, operator,
                                                                                 workers, tmp_path):
    apply(cluster, namespace, queue("q", maxAttempts=1, **FAST), *module_handlers(),
          worker_handler("cmd", ["sh", "-c", snooze_then_output(tmp_path / "cmd.snoozed")]),
          job("job-sdk", handler_name="snoozer", payload={"dir": str(tmp_path)}),
          job("job-cmd", handler_name="cmd"))
    workers("w", "--module", "reporting", "--allow-command", "cmd")
    sdk = wait_state(cluster, namespace, "job-sdk", "succeeded", "dead", timeout=60)
    assert_snoozed_once(sdk)  # maxAttempts 1: a counted snooze would have ended it dead
    assert sdk["output"] == {"ran": "after the snooze", "attempt": 1}
    cmd = wait_state(cluster, namespace, "job-cmd", "succeeded", "dead", timeout=60)
    assert_snoozed_once(cmd)
    assert cmd["output"] == {"rows": 2}


def test_a_workers_output_is_kept_shown_and_read_by_a_chained_job(cluster, namespace, operator, workers):
    apply(cluster, namespace, queue("q", maxAttempts=2, **FAST), *module_handlers(),
          job("job-producer", handler_name="producer"))
    workers("w", "--module", "reporting")
    produced = wait_state(cluster, namespace, "job-producer", "succeeded", timeout=60)
    assert produced["output"] == {"rows": 3, "by": "job_producer"}
    wait_for(lambda: ((consumer_of(cluster, namespace) or {}).get("status") or {}).get("state") == "succeeded", 60,
             message="the chained job to read the output and succeed")
    consumed = consumer_of(cluster, namespace)["status"]
    assert consumed["output"] == {"got": {"rows": 3, "by": "job_producer"}}
    assert consumed["attempt"] == 1  # however often it snoozed while the producer's end was being recorded
    shown = ok(sextant(cluster, "inspect", "job_producer", "-n", namespace))
    line = next(line for line in shown.splitlines() if line.startswith("Output:"))
    assert json.loads(line.removeprefix("Output:")) == {"rows": 3, "by": "job_producer"}
    as_json = json.loads(ok(sextant(cluster, "inspect", "job_producer", "-n", namespace, "-o", "json")))
    assert as_json["output"] == {"rows": 3, "by": "job_producer"}


def test_a_workers_progress_shows_while_it_runs(cluster, namespace, operator, workers, tmp_path):
    until = tmp_path / "go"
    apply(cluster, namespace, queue("q", maxAttempts=1, **FAST), *module_handlers(),
          worker_handler("cmd", ["sh", "-c", f'cat >/dev/null; echo "0.4 resized 4/10" > "$SEXTANT_PROGRESS_FILE"; '
                                             f'while [ ! -e {until} ]; do sleep 0.1; done']),
          job("job-sdk", handler_name="progresser", payload={"until": str(until)}), job("job-cmd", handler_name="cmd"))
    workers("w", "--module", "reporting", "--allow-command", "cmd")
    progress_seen(cluster, namespace, "job-sdk", 0.5, "half way")
    progress_seen(cluster, namespace, "job-cmd", 0.4, "resized 4/10")
    shown = ok(sextant(cluster, "inspect", "job_sdk", "-n", namespace))
    assert "Progress:" in shown and "50% half way" in shown
    until.touch()
    for name in ("job-sdk", "job-cmd"):
        final = wait_state(cluster, namespace, name, "succeeded", timeout=30)
        assert "progress" not in final, "the attempt's progress goes with it"
    assert status(cluster, namespace, "job-sdk")["output"] == "finished"


# --- pod mode (the local node runs `sextant run` as a real process) ------------------------------------------------
def test_an_attempt_pod_snoozes_a_command_and_keeps_its_output(cluster, namespace, operator, local_node, tmp_path):
    apply(cluster, namespace, queue("q", maxAttempts=1, backoff={"policy": "fixed", "initial": "200ms"}),
          local_handler("cmd", sh(snooze_then_output(tmp_path / "pod.snoozed"))),
          local_handler("snoozer", ["--module", "reporting"], env=POD_ENV),
          job("job-cmd", handler_name="cmd"), job("job-sdk", handler_name="snoozer", payload={"dir": str(tmp_path)}))
    cmd = wait_state(cluster, namespace, "job-cmd", "succeeded", "dead", timeout=90)
    assert_snoozed_once(cmd)
    assert cmd["output"] == {"rows": 2}
    assert [a["pod"] for a in cmd["attempts"]] == ["job-cmd-1", "job-cmd-2"]
    sdk = wait_state(cluster, namespace, "job-sdk", "succeeded", "dead", timeout=90)
    assert_snoozed_once(sdk)
    assert sdk["output"] == {"ran": "after the snooze", "attempt": 1}


def test_an_attempt_pods_output_is_read_by_a_chained_job(cluster, namespace, operator, local_node):
    apply(cluster, namespace, queue("q", maxAttempts=2, backoff={"policy": "fixed", "initial": "200ms"}),
          local_handler("producer", ["--module", "reporting"], env=POD_ENV),
          local_handler("consumer", ["--module", "reporting"], env=POD_ENV),
          job("job-producer", handler_name="producer"))
    produced = wait_state(cluster, namespace, "job-producer", "succeeded", timeout=90)
    assert produced["output"] == {"rows": 3, "by": "job_producer"}
    wait_for(lambda: ((consumer_of(cluster, namespace) or {}).get("status") or {}).get("state") == "succeeded", 90,
             message="the chained job to read the output and succeed")
    assert consumer_of(cluster, namespace)["status"]["output"] == {"got": {"rows": 3, "by": "job_producer"}}


def test_an_attempt_pods_progress_shows_while_it_runs(cluster, namespace, operator, local_node, tmp_path):
    until = tmp_path / "go"
    apply(cluster, namespace, queue("q", maxAttempts=1),
          local_handler("progresser", ["--module", "reporting"], env=POD_ENV),
          local_handler("cmd", sh(f'cat >/dev/null; echo "0.4 resized 4/10" > "$SEXTANT_PROGRESS_FILE"; '
                                  f'while [ ! -e {until} ]; do sleep 0.1; done')),
          job("job-sdk", handler_name="progresser", payload={"until": str(until)}), job("job-cmd", handler_name="cmd"))
    progress_seen(cluster, namespace, "job-sdk", 0.5, "half way")
    progress_seen(cluster, namespace, "job-cmd", 0.4, "resized 4/10")
    until.touch()
    final = wait_state(cluster, namespace, "job-sdk", "succeeded", timeout=60)
    assert "progress" not in final and final["output"] == "finished"
    wait_state(cluster, namespace, "job-cmd", "succeeded", timeout=60)
