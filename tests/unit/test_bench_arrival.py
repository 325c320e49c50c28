"""The benchmark's figures for issue 27 (bench/): completions while a burst still arrives, API writes per job by
client and request, requests attributed to each component's own service account, and those accounts' rights."""

from __future__ import annotations

from types import SimpleNamespace

from bench import identities, measure, report
from bench.api import JobRecord, _first_start
from bench.run import arrival


def job(created: float, terminal: float | None, outcome: str | None = "succeeded") -> JobRecord:
    return JobRecord(sent=created, created=created, terminal=terminal, outcome=outcome)


def test_completions_while_the_burst_arrives_against_after_it() -> None:
    # 10 creates over 10 s; 4 succeed by the last create (one fails), the other 5 in the 5 s after it
    jobs = {f"j{i}": job(100.0 + i + 1, 100.0 + 2 * (i + 1) if i < 4 else 110.0 + i - 3) for i in range(10)}
    jobs["j9"].outcome = "dead"
    figures = arrival(SimpleNamespace(jobs=jobs), 100.0)
    assert figures == {"last_create_s": 10.0, "creates_per_s": 1.0, "succeeded_by_last_create": 4,
                       "succeeded_by_last_create_fraction": 0.4, "completions_per_s_while_arriving": 0.4,
                       "completions_per_s_after": 1.0, "pace": 0.4}
    text = report.tables([{"config": "W", "workload": "burst-10", "jobs": 10, "terminal": 10, "arrival": figures}])
    assert "| succeeded by the last create (jobs) | 4 |" in text and "| pace: completions/s ÷ creates/s" in text


def test_writes_per_job_by_client_and_request_events_apart() -> None:
    per_job = {"operator": {"writes": 1.2, "event_writes": 0.1, "by_request": {
                   "update jobs.sextant.dev/status": 1.0, "patch workers.sextant.dev/status": 0.2,
                   "watch jobs.sextant.dev": 0.01, "create events": 0.1}},
               "worker": {"writes": 0.3, "event_writes": 0.0, "by_request": {
                   "patch workers.sextant.dev": 0.3, "get jobs.sextant.dev": 1.0,
                   "create selfsubjectreviews.authentication.k8s.io": 0.1}},
               "all": {"writes": 1.5}}  # fmt: skip
    text = report.writes_by_client({"W": {"api_per_job": per_job}}, ["W"])
    lines = text.splitlines()
    assert "| operator: update jobs.sextant.dev/status | 1 |" in lines
    assert "| operator: patch workers.sextant.dev/status | 0.2 |" in lines
    assert "| worker: patch workers.sextant.dev | 0.3 |" in lines
    assert "| operator: Event writes (apart) | 0.1 |" in lines and "| **all clients** | 1.5 |" in lines
    assert not [line for line in lines if "watch" in line or "get jobs" in line or "create events" in line
                or "selfsubjectreviews" in line]  # reads, Events and stateless reviews are no writes
    audit = {"requests": {"worker": {"patch workers.sextant.dev": 3, "create workers.sextant.dev": 1,
                                     "create selfsubjectreviews.authentication.k8s.io": 1, "create events": 2}}}
    assert measure.per_job(audit, 2)["worker"]["writes"] == 2.0


def test_requests_belong_to_the_components_service_account_whatever_the_user_agent() -> None:
    assert measure.client_of("kopf/1.37", identities.OPERATOR_USER) == "operator"
    assert measure.client_of("sextant-sdk", identities.WORKER_USER) == "worker"
    assert measure.client_of("sextant-bench", identities.LOADGEN_USER) == "loadgen"
    assert measure.client_of("sextant-bench-recorder", "kwok-admin") == "recorder"
    assert measure.client_of("kube-scheduler/v1.31", "system:kube-scheduler") == "scheduler"


def test_each_component_has_its_own_rights_and_the_workers_their_priority_level() -> None:
    def rules(baseline: bool, role: str) -> list[dict]:
        return next(o["rules"] for o in identities.objects(baseline)
                    if o["kind"] == "ClusterRole" and o["metadata"]["name"] == f"sextant-bench-{role}")

    def resources(baseline: bool) -> set[str]:
        return {r for rule in rules(baseline, "worker") for r in rule["resources"]}

    assert "jobs/status" not in resources(False) and "leases" not in resources(False) and "workers" in resources(False)
    assert {"jobs/status", "leases"} <= resources(True) and "workers" not in resources(True)
    assert rules(False, "loadgen") == [{"apiGroups": ["sextant.dev", "batch"], "resources": ["jobs"],
                                        "verbs": ["create"]}]
    schema = identities.workers_flow_schema()
    level = identities.workers_priority_level()
    # The workers' own level, as the chart's flowControl.workers: never the operator's seats.
    assert schema["spec"]["priorityLevelConfiguration"]["name"] == level["metadata"]["name"] != "sextant"
    assert level["spec"]["limited"]["nominalConcurrencyShares"] == 50
    assert level in identities.objects(False)
    assert schema["spec"]["rules"][0]["subjects"] == [
        {"kind": "ServiceAccount", "serviceAccount": {"name": "worker", "namespace": "sextant-bench"}}]


def test_the_handlers_start_from_the_final_status() -> None:
    obj = {"status": {"attempts": [{"startedAt": "2026-12-03T09:00:00.250000Z"},
                                   {"startedAt": "2026-12-03T09:00:05Z"}]}}
    assert _first_start(obj) == 1796288400.25
    assert _first_start({"status": {}}) is None
