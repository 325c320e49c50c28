"""`sextant worker` as real processes against the real control plane and operator (docs/workers.md): sharing a
queue's concurrency, SIGKILL and lease expiry, the drain, cancel, timeout, commands, chaining, NoWorker, and pod
mode and worker mode in one queue. What ran where and when is read from the API (a watch), not from the workers."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from tests.harness import holds_for, wait_for

from .support import (JobRecorder, WorkerProcess, apply, free_port, get_json, handler, job, jobs, queue, status,
                      timeline_of, wait_all, wait_state)

FAST = {"backoff": {"policy": "fixed", "initial": "200ms"}, "leaseDuration": "3s", "cancelGrace": "1s"}


def worker_handler(name: str, command: list[str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler", "metadata": {"name": name},
            "spec": {"worker": {"command": command} if command else {}}}


def conditions(st: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in st.get("conditions", [])}


def lease(cluster, namespace: str, worker: str) -> dict[str, Any] | None:
    found = get_json(cluster, namespace, "leases", "-l", f"sextant.dev/worker={worker}")["items"]
    return found[0] if found else None


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
    wait_for(lambda: all(lease(cluster, namespace, n) for n in names), timeout,
             message=f"workers {', '.join(names)} to register")


def test_three_workers_share_a_queue_and_its_concurrency_holds(cluster, namespace, operator, workers):
    # Every 7th job has a higher priority; all are waiting (Blocked, NoWorker) before the first worker connects.
    names = [f"job-{i:02d}" for i in range(30)]
    urgent = set(names[3::7])
    with JobRecorder(cluster.kubeconfig, namespace) as recorder:
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
    assert recorder.max_running() == 4, "never more than the queue's concurrency, and used to its limit"
    per_worker = recorder.max_running_per_worker()
    assert set(per_worker) <= {"w0", "w1", "w2"} and max(per_worker.values()) <= 2, per_worker  # slots hold
    assert {j["status"]["attempts"][0]["node"] for j in final.values()} == set(per_worker)
    # Priority, then FIFO: none starts before a job 4 places ahead of it in line (one round admits up to 4).
    line = sorted(names, key=lambda n: (n not in urgent, n))
    order = recorder.start_order()
    assert sorted(order) == sorted(names)
    assert all(order.index(line[i]) < order.index(line[i + 4]) for i in range(len(line) - 4)), order
    scraped = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'sextant_worker_attempts_total{handler="nap",queue="q",result="succeeded",worker="w0"}' in scraped
    assert 'sextant_worker_slots{state="free",worker="w0"} 2.0' in scraped
    assert 'sextant_worker_claim_to_start_seconds_count{worker="w0"}' in scraped
