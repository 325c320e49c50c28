"""`sextant workers` without a cluster: reading Worker objects (docs/workers.md) — spec for what a worker serves,
status for the operator's judgement — and the table / JSON it prints."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from sextant.cli import output
from sextant.cli import workers as W
from sextant.cli.main import build_parser
from sextant.lifecycle import worker_view as V
from sextant.resources.common import format_time

T0 = datetime(2026, 5, 1, 10, 0, 0, tzinfo=timezone.utc)


def worker(name: str, *, ns: str = "shop", queues: Any = ("emails",), handlers: Any = ("send-receipt",),
           slots: Any = 4, renewed: datetime | None = T0, duration: Any = 30, draining: bool = False,
           state: str | None = "live", jobs: tuple[str, ...] = (), busy: Any = None) -> dict[str, Any]:
    """A Worker object: spec as its worker writes it, status as the operator does."""
    spec: dict[str, Any] = {"incarnation": "abc123", "queues": queues if isinstance(queues, str) else list(queues),
                            "handlers": list(handlers),
                            "slots": 99, "leaseDurationSeconds": duration, "draining": draining, "results": []}
    if renewed is not None:
        spec["renewTime"] = format_time(renewed)
    status: dict[str, Any] = {"slots": slots, "assignments": [
        {"job": j, "uid": f"u-{j}", "queue": "emails", "handler": "send-receipt", "sequence": 1, "attempt": 1,
         "incarnation": "abc123", "assignedAt": format_time(T0)} for j in jobs]}
    if state is not None:
        status["state"] = state
    if busy is not None:
        status["busy"] = busy
    return {"metadata": {"name": name, "namespace": ns, "labels": {"sextant.dev/worker": name},
                         "creationTimestamp": "2026-05-01T09:00:00Z"}, "spec": spec, "status": status}


def test_a_worker_object_reads_as_spec_and_status_say():
    w = V.read_worker_object(worker("w1", queues=["reports", "emails", "emails"], handlers=["b", "a"], slots=8,
                                    jobs=("job-b", "job-a"), busy=2))
    assert (w.namespace, w.name, w.holder) == ("shop", "w1", "w1/abc123")
    assert w.queues == ("emails", "reports") and w.handlers == ("a", "b")  # sorted, deduplicated
    assert w.slots == 8, "the slots the operator believes (status), not the 99 the worker announced"
    assert w.busy == 2 and w.jobs == ("job-a", "job-b") and w.state == "live"
    assert w.renewed_at == T0 and w.lease_duration == timedelta(seconds=30)
    assert w.created_at == datetime(2026, 5, 1, 9, tzinfo=timezone.utc) and not w.draining


def test_odd_values_do_not_fail_and_a_worker_not_judged_yet_says_so():
    odd = V.read_worker_object(worker("w", slots="many", renewed=None, duration="x", queues="emails", state=None,
                                      jobs=("job-a",)))
    assert odd.slots is None and odd.renewed_at is None and odd.queues == () and odd.lease_duration is None
    assert odd.state == V.UNKNOWN and odd.busy == 1  # no status.busy yet: its assignments
    assert V.read_worker_object({"metadata": {"name": "bare"}}).state == V.UNKNOWN


def workers_at(now: datetime) -> list[V.WorkerView]:
    return [V.read_worker_object(o) for o in (
        worker("beta", slots=64, renewed=now - timedelta(seconds=2), draining=True, state="draining", busy=0),
        worker("alpha", queues=["emails", "reports"], handlers=["send-receipt", "build-report"], slots=2,
               renewed=now - timedelta(seconds=4), jobs=("job-1", "job-2"), busy=2),
        worker("gamma", ns="billing", renewed=now - timedelta(minutes=5), state="expired", busy=0))]


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
    output.dump({"items": [V.as_dict(w, T0) for w in workers_at(T0)]}, "json", out)
    items = {i["name"]: i for i in json.loads(out.getvalue())["items"]}
    assert items["alpha"] == {
        "namespace": "shop", "name": "alpha", "holder": "alpha/abc123", "queues": ["emails", "reports"],
        "handlers": ["build-report", "send-receipt"], "slots": 2, "busy": 2, "jobs": ["job-1", "job-2"],
        "state": "live", "draining": False, "renewTime": format_time(T0 - timedelta(seconds=4)),
        "lastRenewalSeconds": 4.0, "leaseDurationSeconds": 30, "incarnation": "abc123", "user": None,
        "message": None,
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
