"""`sextant workers` without a cluster: reading registration Leases (docs/workers.md §1), the state of a worker,
its busy slots, and the table / JSON it prints."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from sextant.cli import output
from sextant.cli import workers as W
from sextant.cli.main import build_parser
from sextant.lifecycle import workers as LW
from sextant.resources.common import format_time

T0 = datetime(2026, 5, 1, 10, 0, 0, tzinfo=timezone.utc)


def lease(name: str, *, ns: str = "shop", queues: str = "emails", handlers: str = "send-receipt", slots: str = "4",
          renewed: datetime | None = T0, duration: int | None = 30, draining: bool = False,
          holder: str | None = None) -> dict[str, Any]:
    notes = {"sextant.dev/queues": queues, "sextant.dev/handlers": handlers, "sextant.dev/slots": slots}
    if draining:
        notes["sextant.dev/draining"] = "true"
    spec: dict[str, Any] = {"holderIdentity": holder or f"{name}/abc123"}
    if renewed is not None:
        spec["renewTime"] = format_time(renewed)
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    return {"metadata": {"name": f"sextant-worker-{name}", "namespace": ns, "labels": {"sextant.dev/worker": name},
                         "annotations": notes, "creationTimestamp": "2026-05-01T09:00:00Z"}, "spec": spec}


def job(name: str, worker: str | None, state: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"state": state, **({"worker": worker} if worker else {})}}


def test_a_lease_reads_as_the_worker_it_announces():
    w = LW.read_lease(lease("w1", queues="emails, reports,emails", handlers="b,a", slots="8"))
    assert w is not None
    assert (w.namespace, w.name, w.holder) == ("shop", "w1", "w1/abc123")
    assert w.queues == ("emails", "reports") and w.handlers == ("a", "b")  # sorted, deduplicated, trimmed
    assert w.slots == 8 and w.renewed_at == T0 and w.lease_duration == timedelta(seconds=30)
    assert w.created_at == datetime(2026, 5, 1, 9, tzinfo=timezone.utc) and not w.draining


def test_leases_that_are_not_workers_are_skipped_and_odd_values_do_not_fail():
    other = lease("x")
    del other["metadata"]["labels"]
    assert LW.read_lease(other) is None  # e.g. an attempt's or the leader-election Lease
    odd = LW.read_lease(lease("w", slots="many", renewed=None, duration=None, queues="", handlers=""))
    assert odd is not None and odd.slots is None and odd.renewed_at is None and odd.queues == ()
    assert odd.lease_duration == LW.DEFAULT_LEASE_DURATION
    assert odd.state(T0) == LW.EXPIRED  # never renewed: nothing vouches for it


@pytest.mark.parametrize("age,draining,want", [
    (0, False, "live"), (29.9, False, "live"), (30, False, "expired"), (400, False, "expired"),
    (5, True, "draining"), (31, True, "expired"),  # an expired worker's attempts fail, whatever it last said
])
def test_state_is_live_draining_or_expired_by_the_lease_duration(age, draining, want):
    w = LW.read_lease(lease("w", draining=draining))
    assert w is not None and w.state(T0 + timedelta(seconds=age)) == want


def test_busy_counts_only_running_jobs_assigned_to_that_worker():
    jobs = [job("job-a", "w1", "running"), job("job-b", "w1", "running"), job("job-c", "w2", "running"),
            job("job-d", "w1", "succeeded"), job("job-e", None, "queued")]
    assert LW.running_jobs(jobs, "w1") == ("job-a", "job-b")
    assert LW.running_jobs(jobs, "w3") == ()


def workers_at(now: datetime) -> list[LW.Worker]:
    from dataclasses import replace

    a = LW.read_lease(lease("alpha", queues="emails,reports", handlers="send-receipt,build-report", slots="2",
                           renewed=now - timedelta(seconds=4)))
    b = LW.read_lease(lease("beta", slots="64", renewed=now - timedelta(seconds=2), draining=True))
    c = LW.read_lease(lease("gamma", ns="billing", renewed=now - timedelta(minutes=5)))
    assert a and b and c
    return [replace(b, jobs=()), replace(a, jobs=("job-1", "job-2")), c]


def test_the_table_has_one_row_per_worker_with_busy_slots_renewal_and_state():
    text = W.render(workers_at(T0)[:2], T0, all_namespaces=False, wide=False)
    rows = [line.split() for line in text.splitlines()]
    assert rows == [
        ["NAME", "QUEUES", "HANDLERS", "SLOTS", "BUSY", "LAST-RENEWAL", "STATE"],
        ["alpha", "emails,reports", "build-report,send-receipt", "2", "2", "4s", "live"],
        ["beta", "emails", "send-receipt", "64", "0", "2s", "draining"],
    ]


def test_all_namespaces_and_wide_add_their_columns():
    rows = [line.split() for line in W.render(workers_at(T0), T0, all_namespaces=True, wide=True).splitlines()]
    assert rows[0] == ["NAMESPACE", "NAME", "QUEUES", "HANDLERS", "SLOTS", "BUSY", "LAST-RENEWAL", "STATE",
                       "HOLDER", "LEASE", "JOBS", "AGE"]
    assert [r[:2] for r in rows[1:]] == [["billing", "gamma"], ["shop", "alpha"], ["shop", "beta"]]
    assert rows[1][6:] == ["5m", "expired", "gamma/abc123", "30s", "<none>", "60m"]
    assert rows[2][5:6] == ["2"] and rows[2][10] == "job-1,job-2"


def test_json_speaks_the_same_numbers():
    out = io.StringIO()
    output.dump({"items": [LW.as_dict(w, T0) for w in workers_at(T0)]}, "json", out)
    items = {i["name"]: i for i in json.loads(out.getvalue())["items"]}
    assert items["alpha"] == {
        "namespace": "shop", "name": "alpha", "holder": "alpha/abc123", "queues": ["emails", "reports"],
        "handlers": ["build-report", "send-receipt"], "slots": 2, "busy": 2, "jobs": ["job-1", "job-2"],
        "state": "live", "draining": False, "renewTime": format_time(T0 - timedelta(seconds=4)),
        "lastRenewalSeconds": 4.0, "leaseDurationSeconds": 30,
    }
    assert items["beta"]["state"] == "draining" and items["gamma"]["state"] == "expired"


@pytest.mark.parametrize("argv", [["workers"], ["workers", "list"], ["-n", "shop", "workers", "-o", "wide"],
                                  ["workers", "-A", "-o", "json"]])
def test_the_command_line(argv):
    args = build_parser().parse_args(argv)
    assert args.func is W.list_cmd and args.cli


def test_a_bad_output_format_is_refused_before_any_request(capsys, monkeypatch, tmp_path):
    from sextant.cli.main import main

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(SystemExit) as exc:
        main(["workers", "-o", "xml"])
    assert exc.value.code == 2 and "invalid choice: 'xml'" in capsys.readouterr().err
