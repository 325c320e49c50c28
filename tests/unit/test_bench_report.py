"""The benchmark's report (bench/report.py): ratios per job system, the write budget of worker mode, and what
"sustains a rate" means for pods (create → pod p99 < 1 s) and for workers (create → running p99 < 250 ms)."""

from __future__ import annotations

from typing import Any

from bench import report


def result(config: str, jobs: int = 1000, wall: float = 10.0, **extra: Any) -> dict[str, Any]:
    return {"config": config, "workload": "burst-1k", "jobs": jobs, "terminal": jobs, "wall_s": wall,
            "jobs_per_s": round(jobs / wall, 2), **extra}


def test_ratios_of_workers_against_the_job_controller_and_pod_mode() -> None:
    text = report.tables([result("W", wall=5), result("S", wall=20), result("A1", wall=25)])
    assert "| figure | W | S | A1 | W/A1 | W/S | S/A1 |" in text
    row = next(line for line in text.splitlines() if line.startswith("| jobs/s overall"))
    assert row.split(" | ")[-3:] == ["5.00", "4.00", "1.25 |"]


def test_worker_mode_writes_count_the_operator_and_its_workers() -> None:
    per_job = {"operator": {"writes": 1.0, "event_writes": 0.1}, "worker": {"writes": 1.02, "event_writes": 0.0},
               "loadgen": {"writes": 1.0}}
    assert report._controller_writes(result("W", api_per_job=per_job)) == 2.02
    assert report._controller_events(result("W", api_per_job=per_job)) == 0.1
    batch = {"controller-manager": {"writes": 5.1, "event_writes": 1.0}}
    assert report._controller_writes(result("A1", api_per_job=batch)) == 5.1


def test_cpu_per_job_adds_every_worker_process() -> None:
    r = result("W", jobs=2000, usage={"cpu_seconds": {"operator": 3.0, "worker-0": 1.0, "worker-1": 1.5,
                                                      "kube-apiserver": 20.0}})
    assert report._workers_cpu(r) == 2.5
    assert report._per_job_ms(report._workers_cpu(r), r) == 1.25
    assert report._system_cpu(r) == 25.5


def rate(config: str, running_p99: float | None, pod_p99: float | None, terminal: int = 100) -> dict[str, Any]:
    return {"config": config, "workload": "rate-100", "rate": 100.0, "jobs": 100, "terminal": terminal,
            "latency_ms": {"create_to_running": {"p50": 10, "p99": running_p99},
                           "create_to_pod_created": {"p50": 10, "p99": pod_p99},
                           "create_to_job_terminal": {"p50": 20, "p99": 40}}}


def test_a_rate_is_sustained_by_its_own_criterion() -> None:
    assert report._sustains(rate("W", 249, None))
    assert not report._sustains(rate("W", 250, None))
    assert not report._sustains(rate("W", 100, None, terminal=99))  # a job never finished
    assert report._sustains(rate("S", 5000, 999))
    assert not report._sustains(rate("S", 10, 1000))
    text = report.rate_table([rate("W", 120, None), rate("S", 900, 1500)])
    assert "highest rate W sustains" in text and "highest rate S sustains" not in text
    assert "| W | 100 | – | 10 / 120 | 20 / 40 |" in text
