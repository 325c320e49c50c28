"""The README's local worker example (examples/local/worker/), run as a user runs it: the objects applied with
kubectl, `.venv/bin/sextant worker --module examples.local.worker.handlers --allow-command shout` started from the
repository's root in another process (its kubeconfig from KUBECONFIG), `kubectl sextant workers` to see it, Ctrl-C
to stop it. The operator runs as in `make run`; no pod is created for any of the example's jobs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tests.harness import repo_root, wait_for

from .plugin_support import ok, sextant
from .support import get_json, jobs, wait_state

EXAMPLE = repo_root() / "examples" / "local" / "worker"
MODULE = "examples.local.worker.handlers"


def conditions(job: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in (job.get("status") or {}).get("conditions", [])}


def test_the_local_worker_example_runs_as_the_readme_says(cluster, namespace, operator):
    cluster.kubectl("apply", "-n", namespace, "-f", str(EXAMPLE))
    # No worker yet: the example's jobs wait, saying why.
    wait_for(lambda: all(conditions(jobs(cluster, namespace).get(n, {})).get("Blocked") == ("True", "NoWorker")
                         for n in ("job-welcome", "job-shout")), 30,
             message=lambda: f"both jobs Blocked with reason NoWorker: {jobs(cluster, namespace)}")

    command = [str(Path(sys.executable).parent / "sextant"), "worker", "-n", namespace, "--module", MODULE,
               "--allow-command", "shout"]
    worker = subprocess.Popen(command, cwd=repo_root(), env=cluster.env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    threading.Thread(target=lambda: output.extend(worker.stdout or ()), daemon=True).start()
    try:
        for name in ("job-welcome", "job-shout"):
            wait_state(cluster, namespace, name, "succeeded", timeout=90)
        # welcome chained exactly one shout job, which ran on the worker too.
        chained = [j for n, j in jobs(cluster, namespace).items() if n not in ("job-welcome", "job-shout")]
        assert len(chained) == 1, chained
        assert chained[0]["spec"]["handler"] == "shout" and chained[0]["spec"]["payload"] == {"text": "welcome, world"}
        wait_state(cluster, namespace, chained[0]["metadata"]["name"], "succeeded", timeout=60)
        text = lambda: "".join(output)  # noqa: E731
        wait_for(lambda: "welcome, world! (job_welcome, attempt 1)" in text() and "HELLO FROM A COMMAND!" in text()
                 and "WELCOME, WORLD!" in text(), 30, message=lambda: f"the handlers' output in:\n{text()}")

        # Every attempt was on this worker, none in a pod.
        welcome = get_json(cluster, namespace, "jobs.sextant.dev", "job-welcome")["status"]
        [attempt] = welcome["attempts"]
        assert attempt["result"] == "succeeded" and attempt.get("pod") is None and attempt["worker"]
        assert not get_json(cluster, namespace, "pods")["items"]
        shown = json.loads(ok(sextant(cluster, "inspect", "job-welcome", "-n", namespace, "-o", "json")))
        assert shown["attempts"][0]["worker"] == attempt["worker"] and shown["attempts"][0]["pod"] is None
        logs = sextant(cluster, "logs", "job-welcome", "-n", namespace)
        assert logs.returncode == 1 and f"ran on worker {attempt['worker']}, not in a pod" in logs.stderr

        # kubectl sextant workers shows it, live, with the example's queue and both handlers, its slots free.
        [row] = json.loads(ok(sextant(cluster, "workers", "-n", namespace, "-o", "json")))["items"]
        assert row["name"] == attempt["worker"].split("/")[0] == attempt["node"]
        assert row["state"] == "live" and "greetings" in row["queues"]
        assert {"welcome", "shout"} <= set(row["handlers"]) and row["busy"] == 0 and row["slots"] >= 1
        table = ok(sextant(cluster, "workers", "-n", namespace)).splitlines()
        assert table[0].split() == ["NAME", "QUEUES", "HANDLERS", "SLOTS", "BUSY", "LAST-RENEWAL", "STATE"]
        assert table[1].split()[0] == row["name"] and table[1].split()[-1] == "live"

        # Ctrl-C: the worker drains, deletes its Worker object and exits 0.
        worker.send_signal(signal.SIGINT)
        assert worker.wait(60) == 0, text()
        gone = sextant(cluster, "workers", "-n", namespace)
        assert gone.returncode == 0 and "No workers found" in gone.stderr
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
