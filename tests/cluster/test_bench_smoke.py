"""The benchmark (bench/, issue 10) in miniature, so that it never rots: every configuration's code path, every
workload kind, the audit-log accounting, the report and the JSON, on a few jobs. The real run is `make bench`."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from bench.__main__ import main

pytestmark = pytest.mark.skipif(bool(os.environ.get("SEXTANT_TEST_KUBECONFIG")),
                                reason="the benchmark starts its own control planes (audit log, component flags)")


def test_bench_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = importlib.util.find_spec("matplotlib") is not None
    args = ["--configs", "W,S,A1", "--worker-processes", "2", "--worker-slots", "16", "--workloads", "burst,fail,rate,scale", "--sizes", "20", "--rates", "10",
            "--rate-seconds", "1", "--scale-jobs", "60", "--scale-unfinished", "10", "--same-cluster",
            "--no-profile", "--nodes", "2", "--timeout", "120", "--out", str(tmp_path), "-q"]
    assert main(args if plot else [*args, "--no-plot"]) == 0
    table = capsys.readouterr().out
    assert "| figure | W | S | A1 | W/A1 | W/S | S/A1 |" in table and "sustained arrivals" in table

    doc = json.loads(next(tmp_path.glob("*.json")).read_text())
    runs = {(r["config"], r["workload"]): r for r in doc["results"]}
    assert set(runs) == {(c, w) for c in ("W", "S", "A1") for w in ("burst-20", "fail-20")} | {("S", "rate-10")}
    for key, r in runs.items():
        assert not r["timed_out"] and r["terminal"] == r["jobs"], key
        assert r["duplicate_pods"] == 0, (key, r["duplicates"])
        assert r["api_per_job"]["loadgen"]["writes"] >= 1, key  # the audit log names the load generator
        assert r["usage"]["cpu_seconds"].get("kube-apiserver") is not None, key
    # the retry path: 10% of first attempts fail, and both job systems retry them once
    for config in ("W", "S", "A1"):
        r = runs[(config, "fail-20")]
        assert r["outcomes"] == {"succeeded": 20} and r["attempts"] == 22, (config, r["outcomes"], r["attempts"])
    assert runs[("S", "burst-20")]["api_per_job"]["operator"]["writes"] > 0
    assert runs[("A1", "burst-20")]["api_per_job"]["controller-manager"]["writes"] > 0
    # worker mode (protocol v2): no pods; the operator alone writes the Job (its final status, `running` too for an
    # attempt past its first second), assignments in the Worker's status; a worker writes only its Worker's spec
    w = runs[("W", "burst-20")]
    assert w["pods"] == 0 and w["latency_ms"]["create_to_running"]["n"] == 20, w["latency_ms"]
    operator, worker = w["api_per_job"]["operator"]["by_request"], w["api_per_job"]["worker"]["by_request"]
    assert 1.0 <= operator["update jobs.sextant.dev/status"] <= 2.0, operator
    assert operator["patch workers.sextant.dev/status"] > 0 and worker["patch workers.sextant.dev"] > 0, \
        w["api_per_job"]
    assert not [k for k in worker if "jobs.sextant.dev/status" in k or "leases" in k], worker
    assert w["usage"]["cpu_seconds"].get("worker-1") is not None and w["workers"]["processes"] == 2
    # each component as its own service account: the load generator's requests are its creates alone (the
    # recorder's watches are the admin's), attributed by the audit log's user
    for key, r in runs.items():
        assert set(r["api_per_job"]["loadgen"]["by_request"]) <= {"create jobs.sextant.dev", "create jobs.batch"}, key
    # completions while the burst still arrives (issue 27): in the JSON and in the report
    for key, r in runs.items():
        arrival = r["arrival"]
        assert 0 < arrival["last_create_s"] and 0 <= arrival["succeeded_by_last_create"] <= r["jobs"], (key, arrival)
        assert arrival["completions_per_s_while_arriving"] is not None and "pace" in arrival, (key, arrival)
    assert "| succeeded by the last create (jobs) |" in table and "| completions/s while creates arrive |" in table
    # API writes per job by client and request, the Worker's spec and status writes among them
    assert "API writes per job by client" in table and "| worker: patch workers.sextant.dev |" in table
    assert "| operator: patch workers.sextant.dev/status |" in table and "| CPU ms / job: etcd |" in table
    scale = doc["scale"]
    assert scale["start_to_ready_s"] > 0 and scale["memory_mb_at_ready"]["VmRSS"] > 0
    assert [r["start_to_ready_s"] > 0 for r in scale["restarts"]] == [True, True]  # --scale-restarts 2
    assert scale["start_to_all_terminal_s"] is not None
    if plot:
        assert list(tmp_path.glob("*.png"))
