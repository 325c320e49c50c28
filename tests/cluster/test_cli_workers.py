"""`kubectl sextant workers` on the real control plane, with no worker process: the test writes what workers and the
operator would — registration Leases (docs/workers.md §1) and jobs whose status assigns them to a worker — through
the API, and reads the plugin's table, wide table and JSON. The busy count goes through the CRD's selectable field
status.worker, so this also proves the API server answers that field selector. And `inspect` of a job a real
`sextant worker` ran."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import yaml

from sextant.resources.common import format_time

from .plugin_support import ok, sextant
from .support import WorkerProcess, apply, job, queue, wait_state


def worker_lease(name: str, renewed: datetime, *, duration: int = 600, slots: int = 2, queues: str = "emails",
                 handlers: str = "send-receipt", draining: bool = False) -> dict[str, Any]:
    notes = {"sextant.dev/queues": queues, "sextant.dev/handlers": handlers, "sextant.dev/slots": str(slots)}
    if draining:
        notes["sextant.dev/draining"] = "true"
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": f"sextant-worker-{name}", "labels": {"sextant.dev/worker": name},
                         "annotations": notes},
            "spec": {"holderIdentity": f"{name}/i{len(name)}", "leaseDurationSeconds": duration,
                     "renewTime": format_time(renewed)}}


def set_status(cluster: Any, namespace: str, name: str, status: dict[str, Any]) -> None:
    cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", name, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": status}))


def test_workers_lists_leases_with_busy_slots_and_state(cluster, namespace, crds):
    now = datetime.now(timezone.utc)
    leases = [
        worker_lease("alpha", now, slots=2, queues="emails,reports", handlers="send-receipt,build-report"),
        worker_lease("beta", now, slots=8, draining=True),
        worker_lease("gamma", now - timedelta(minutes=10), duration=30),  # not renewed: expired
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "not-a-worker"},
         "spec": {"holderIdentity": "someone", "leaseDurationSeconds": 15}},
    ]
    jobs = [job(f"job-{n}", "emails", "send-receipt") for n in ("a", "b", "c", "d", "e")]
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=yaml.safe_dump_all([*leases, *jobs]))
    started = format_time(now)
    for name, worker, state in (("job-a", "alpha", "running"), ("job-b", "alpha", "running"),
                                ("job-c", "beta", "running"), ("job-d", None, "succeeded"), ("job-e", None, "queued")):
        status: dict[str, Any] = {"state": state, "sequence": 1, "attempt": 1}
        if worker:
            status.update(worker=worker, attempts=[{"attempt": 1, "sequence": 1, "worker": f"{worker}/i{len(worker)}",
                                                    "node": worker, "startedAt": started, "result": "running"}])
        set_status(cluster, namespace, name, status)

    rows = [line.split() for line in ok(sextant(cluster, "workers", "-n", namespace)).splitlines()]
    assert rows[0] == ["NAME", "QUEUES", "HANDLERS", "SLOTS", "BUSY", "LAST-RENEWAL", "STATE"]
    by_name = {r[0]: r for r in rows[1:]}
    assert sorted(by_name) == ["alpha", "beta", "gamma"]  # the Lease without the worker label is not a worker
    assert by_name["alpha"][1:5] == ["emails,reports", "build-report,send-receipt", "2", "2"]
    assert by_name["alpha"][6] == "live"
    assert by_name["beta"][3:5] == ["8", "1"] and by_name["beta"][6] == "draining"
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

    # An attempt ends: the operator clears status.worker, and the slot is free again.
    set_status(cluster, namespace, "job-b", {"state": "succeeded", "worker": None})
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
