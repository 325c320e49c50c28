"""`kubectl sextant workers` on the real control plane, with no worker process: the test writes what workers and the
operator would — Worker objects (docs/workers.md): the spec as a worker writes it, the status (subresource) as the
operator does — through the API, and reads the plugin's table, wide table and JSON. And `inspect` of a job a real
`sextant worker` ran."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import yaml

from sextant.resources.common import format_time

from .plugin_support import ok, sextant
from .support import WorkerProcess, apply, job, queue, wait_state


def worker_object(name: str, renewed: datetime, *, slots: int = 2, queues: tuple[str, ...] = ("emails",),
                  handlers: tuple[str, ...] = ("send-receipt",), draining: bool = False) -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Worker",
            "metadata": {"name": name, "labels": {"sextant.dev/worker": name}},
            "spec": {"incarnation": f"i{len(name)}", "queues": list(queues), "handlers": list(handlers),
                     "slots": slots, "leaseDurationSeconds": 600, "draining": draining,
                     "renewTime": format_time(renewed), "results": []}}


def assignment(job_name: str, worker: str) -> dict[str, Any]:
    return {"job": job_name, "uid": f"u-{job_name}", "queue": "emails", "handler": "send-receipt", "sequence": 1,
            "attempt": 1, "incarnation": f"i{len(worker)}", "assignedAt": format_time(datetime.now(timezone.utc))}


def set_status(cluster: Any, namespace: str, name: str, status: dict[str, Any]) -> None:
    cluster.kubectl("patch", "-n", namespace, "workers.sextant.dev", name, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": status}))


def test_workers_lists_worker_objects_with_the_operators_state_slots_and_busy(cluster, namespace, crds):
    now = datetime.now(timezone.utc)
    objects = [
        worker_object("alpha", now, slots=2, queues=("emails", "reports"), handlers=("send-receipt", "build-report")),
        worker_object("beta", now, slots=8000 // 2, draining=True),
        worker_object("gamma", now - timedelta(minutes=10)),
    ]
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(objects))
    set_status(cluster, namespace, "alpha", {"state": "live", "slots": 2, "busy": 2, "observedGeneration": 1,
                                             "assignments": [assignment("job-a", "alpha"),
                                                             assignment("job-b", "alpha")]})
    set_status(cluster, namespace, "beta", {"state": "draining", "slots": 256, "busy": 1,  # capped by the operator
                                            "assignments": [assignment("job-c", "beta")]})
    set_status(cluster, namespace, "gamma", {"state": "expired", "slots": 2, "busy": 0, "assignments": []})

    rows = [line.split() for line in ok(sextant(cluster, "workers", "-n", namespace)).splitlines()]
    assert rows[0] == ["NAME", "QUEUES", "HANDLERS", "SLOTS", "BUSY", "LAST-RENEWAL", "STATE"]
    by_name = {r[0]: r for r in rows[1:]}
    assert sorted(by_name) == ["alpha", "beta", "gamma"]
    assert by_name["alpha"][1:5] == ["emails,reports", "build-report,send-receipt", "2", "2"]
    assert by_name["alpha"][6] == "live"
    assert by_name["beta"][3:5] == ["256", "1"] and by_name["beta"][6] == "draining", "the slots it is believed"
    assert by_name["gamma"][4:7] == ["0", "10m", "expired"]

    wide = [line.split() for line in ok(sextant(cluster, "workers", "-n", namespace, "-o", "wide")).splitlines()]
    assert wide[0][7:] == ["HOLDER", "LEASE", "JOBS", "AGE"]
    alpha = next(r for r in wide if r[0] == "alpha")
    assert alpha[7:10] == ["alpha/i5", "10m", "job-a,job-b"]

    items = {i["name"]: i for i in json.loads(ok(sextant(cluster, "workers", "-n", namespace, "-o", "json")))["items"]}
    assert items["alpha"]["busy"] == 2 and items["alpha"]["jobs"] == ["job-a", "job-b"]
    assert items["alpha"]["slots"] == 2 and items["alpha"]["state"] == "live"
    assert items["beta"]["draining"] is True and items["gamma"]["lastRenewalSeconds"] >= 600

    everywhere = [line.split() for line in ok(sextant(cluster, "workers", "-A")).splitlines()]
    assert everywhere[0][:2] == ["NAMESPACE", "NAME"]
    assert [r[1] for r in everywhere if r[0] == namespace] == ["alpha", "beta", "gamma"]

    # An attempt is recorded: the operator drops its assignment, and the slot is free again.
    set_status(cluster, namespace, "alpha", {"busy": 1, "assignments": [assignment("job-a", "alpha")]})
    items = {i["name"]: i for i in json.loads(ok(sextant(cluster, "workers", "-n", namespace, "-o", "json")))["items"]}
    assert items["alpha"]["busy"] == 1 and items["alpha"]["jobs"] == ["job-a"]


def test_no_workers_says_so(cluster, namespace, crds):
    proc = sextant(cluster, "workers", "-n", namespace)
    assert proc.returncode == 0 and proc.stdout == ""
    assert proc.stderr.strip() == f"No workers found in namespace {namespace}."
    assert json.loads(ok(sextant(cluster, "workers", "-n", namespace, "-o", "json"))) == {"items": []}


def test_inspect_names_the_worker_that_ran_an_attempt(cluster, namespace, operator, tmp_path, request):
    apply(cluster, namespace, queue("q"),
          {"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler", "metadata": {"name": "nap"},
           "spec": {"worker": {}}},
          job("job-w", handler_name="nap", payload={"seconds": 0}))
    worker = WorkerProcess(cluster.kubeconfig, namespace, "wk", tmp_path, "--module", "napping", "--handler", "nap")
    request.node._sextant_workers = [worker]  # its log joins a failed test's report (conftest.py)
    worker.start()
    try:
        wait_state(cluster, namespace, "job-w", "succeeded")
    finally:
        worker.kill()
    text = ok(sextant(cluster, "inspect", "job-w", "-n", namespace))
    timeline = text.split("Timeline:\n", 1)[1].splitlines()
    assert timeline[0].split() == ["ATTEMPT", "POD", "NODE", "STARTED", "FINISHED", "DURATION", "RESULT", "ERROR"]
    assert timeline[1].split()[:3] == ["1", "worker/wk", "wk"] and timeline[1].split()[-2:] == ["succeeded", "<none>"]
    shown = json.loads(ok(sextant(cluster, "inspect", "job-w", "-n", namespace, "-o", "json")))["attempts"][0]
    assert shown["pod"] is None and shown["worker"].startswith("wk/") and shown["node"] == "wk"
