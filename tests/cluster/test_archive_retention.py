"""Issue 42 in the operator, on the real control plane: the count cap on finished jobs kept as objects, and the
archive before delete (docs/archive.md, "The operator"), against a real PostgreSQL server (tests/harness/postgres.py)
and SQLite; with the database stopped, jobs still run and nothing unarchived is deleted; started again, every
record lands and the jobs go, none lost."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from sextant.archive.query import Filters
from sextant.archive.store import Archive
from tests.harness import wait_for

from .plugin_support import grant
from .support import Operator, apply, get_json, handler, job, jobs, queue, wait_events, wait_state
from .test_retention_metrics import scrape, value

LONG = {"succeeded": "24h", "dead": "24h", "cancelled": "24h"}
SHORT = {"succeeded": "1s", "dead": "1s", "cancelled": "1s"}



def migrated(dsn: str) -> str:
    async def go() -> None:
        await (await Archive.open(dsn, migrate=True)).close()

    asyncio.run(go())
    return dsn


def archived(dsn: str, namespace: str) -> dict[str, dict]:
    """The archive's records of the namespace: name → (state, uid)."""
    async def go() -> dict[str, dict]:
        archive = await Archive.open(dsn)
        try:
            out, cursor = {}, None
            while True:
                page = await archive.list(Filters(namespace=namespace), cursor, 1000)
                out.update({r.name: {"state": r.state, "uid": r.uid, "attempts": r.attempts} for r in page.records})
                cursor = page.cursor
                if cursor is None:
                    return out
        finally:
            await archive.close()

    return asyncio.run(go())


@pytest.fixture
def start_operator(cluster, namespace, crds, tmp_path_factory, request):
    started: list[Operator] = []

    def start(*extra: str, env: dict[str, str] | None = None) -> Operator:
        op = Operator(cluster.kubeconfig, namespace, tmp_path_factory.mktemp("operator"), *extra, env=env)
        request.node._sextant_operator = op
        op.start()
        started.append(op)
        return op

    yield start
    for op in started:
        op.stop()


def live_names(cluster, namespace) -> set[str]:
    return set(jobs(cluster, namespace))


def test_the_queues_cap_deletes_its_oldest_finished_jobs_with_an_event_and_a_metric(cluster, namespace,
                                                                                      start_operator):
    op = start_operator()
    apply(cluster, namespace, queue("q", retention={**LONG, "maxJobs": 3}), handler("h"))
    names = [f"job-cap{i}" for i in range(6)]
    for name in names:  # one after another: their finish order is their order here
        apply(cluster, namespace, job(name))
        wait_state(cluster, namespace, name, "succeeded")
    wait_for(lambda: live_names(cluster, namespace) == set(names[3:]), 60,
             message=lambda: f"the 3 newest kept: {sorted(live_names(cluster, namespace))}\n{op.log_tail()}")
    events = wait_events(cluster, namespace, "--field-selector", "involvedObject.kind=Queue,involvedObject.name=q",
                         until=lambda es: any(e["reason"] == "RetentionCapped" for e in es))
    capped = [e for e in events if e["reason"] == "RetentionCapped"]
    assert capped[0]["type"] == "Warning" and "spec.retention.maxJobs" in capped[0]["message"], capped
    samples = scrape(op.http_url)
    assert value(samples, "sextant_jobs_deleted_total", namespace=namespace, queue="q", reason="cap") == 3
    # A job not finished is never counted nor deleted by the cap.
    apply(cluster, namespace, handler("forever", annotations={"sextant.dev/test-outcome": "run-forever"},
                                      heartbeat=False), job("job-running", handler_name="forever"))
    wait_state(cluster, namespace, "job-running", "running")
    apply(cluster, namespace, job("job-cap6"))
    wait_state(cluster, namespace, "job-cap6", "succeeded")
    wait_for(lambda: live_names(cluster, namespace) == {"job-cap4", "job-cap5", "job-cap6", "job-running"}, 60,
             message=lambda: sorted(live_names(cluster, namespace)))


def test_the_cluster_wide_cap(cluster, namespace, start_operator):
    op = start_operator("--max-finished-jobs", "2")
    apply(cluster, namespace, queue("a", retention=LONG), queue("b", retention=LONG), handler("h"))
    order = [("job-a0", "a"), ("job-b0", "b"), ("job-a1", "a"), ("job-b1", "b")]
    for name, q in order:
        apply(cluster, namespace, job(name, queue_name=q))
        wait_state(cluster, namespace, name, "succeeded")
    wait_for(lambda: live_names(cluster, namespace) == {"job-a1", "job-b1"}, 60,
             message=lambda: f"{sorted(live_names(cluster, namespace))}\n{op.log_tail()}")
    wait_events(cluster, namespace, "--field-selector", "involvedObject.kind=Queue",
                until=lambda es: {e["involvedObject"]["name"] for e in es if e["reason"] == "RetentionCapped"}
                == {"a", "b"})


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_finished_jobs_are_archived_then_deleted(cluster, namespace, start_operator, tmp_path: Path, backend,
                                                 request):
    dsn = migrated(f"sqlite:///{tmp_path / 'archive.sqlite'}" if backend == "sqlite"
                   else request.getfixturevalue("postgres").create_database())
    op = start_operator(env={"SEXTANT_ARCHIVE_DSN": dsn})
    apply(cluster, namespace, queue("q", retention=SHORT), handler("h"),
          *(job(f"job-arch{i}") for i in range(5)))
    names = {f"job-arch{i}" for i in range(5)}
    wait_for(lambda: not live_names(cluster, namespace) & names, 90,
             message=lambda: f"deleted after their retention: {sorted(live_names(cluster, namespace))}\n"
                             f"{op.log_tail()}")
    records = archived(dsn, namespace)
    assert names <= records.keys()
    assert {records[n]["state"] for n in names} == {"succeeded"}
    assert all(records[n]["attempts"] for n in names), records
    samples = scrape(op.http_url)
    assert value(samples, "sextant_archive_records_written_total") >= 5
    assert value(samples, "sextant_archive_unavailable") == 0
    assert "archive:" in httpx.get(f"{op.http_url}/readyz", timeout=5).text
    # The operator's own HTTP API reads them back from the archive it writes: one, and in its list, marked archived.
    token = grant(cluster, namespace, "api-user")
    with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {token}"}) as http:
        one = http.get(f"{op.http_url}/v2/jobs/job_arch0", params={"namespace": namespace})
        assert one.status_code == 200, one.text
        assert (one.json()["state"], one.json()["archived"]) == ("succeeded", True)

        def archived_in_list() -> set[str]:
            shown, cursor = set(), None
            while True:  # the list's pages: the live jobs', then the archive's
                page = http.get(f"{op.http_url}/v2/jobs", params={"namespace": namespace, "queue": "q",
                                                                  **({"continue": cursor} if cursor else {})})
                assert page.status_code == 200, page.text
                shown |= {j["id"] for j in page.json()["items"] if j["archived"]}
                cursor = page.json().get("continue")
                if not cursor:
                    return shown

        # (the archive's part of a list holds what finished before its walk began, less a 2 s margin)
        wait_for(lambda: archived_in_list() >= {f"job_arch{i}" for i in range(5)}, 30,
                 message=lambda: f"the list to show the archived jobs: {sorted(archived_in_list())}")


def test_with_postgresql_stopped_jobs_run_and_nothing_unarchived_is_deleted(cluster, namespace, start_operator,
                                                                           postgres):
    dsn = migrated(postgres.create_database())
    op = start_operator(env={"SEXTANT_ARCHIVE_DSN": dsn})
    apply(cluster, namespace, queue("q", retention={**SHORT, "maxJobs": 2}), handler("h"))
    postgres.stop()
    try:
        names = [f"job-down{i}" for i in range(6)]
        apply(cluster, namespace, *(job(n) for n in names))
        for name in names:  # jobs keep running while the database is down
            wait_state(cluster, namespace, name, "succeeded")
        wait_for(lambda: value(scrape(op.http_url), "sextant_archive_write_failures_total") >= 1, 60,
                 message=lambda: op.log_tail())
        samples = scrape(op.http_url)
        assert value(samples, "sextant_archive_unavailable") == 1
        assert value(samples, "sextant_archive_pending") >= 1
        assert "ArchiveUnavailable" in httpx.get(f"{op.http_url}/readyz", timeout=5).text
        # Past their retention and past the cap, yet kept: none of their records landed.
        assert set(names) <= live_names(cluster, namespace)
        wait_for(lambda: value(scrape(op.http_url), "sextant_archive_write_failures_total") >= 2, 60)
        assert set(names) <= live_names(cluster, namespace)
        assert value(scrape(op.http_url), "sextant_jobs_deleted_total", namespace=namespace, queue="q",
                     reason="retention") == 0
    finally:
        postgres.start()
    # Back: every record lands, then every job goes; none lost, none twice (one row per uid).
    wait_for(lambda: not live_names(cluster, namespace) & set(names), 120,
             message=lambda: f"{sorted(live_names(cluster, namespace))}\n{op.log_tail()}")
    records = archived(dsn, namespace)
    assert set(names) <= records.keys()
    assert {records[n]["state"] for n in names} == {"succeeded"}
    wait_for(lambda: value(scrape(op.http_url), "sextant_archive_unavailable") == 0, 30)


def test_killed_between_write_and_delete_the_record_lands_once(cluster, namespace, start_operator, postgres):
    """The operator killed while jobs wait for deletion, started again: the new process (no landed set, a view of
    small records) reads each job again, writes its record (an upsert: still one row) and deletes it."""
    dsn = migrated(postgres.create_database())
    op = start_operator(env={"SEXTANT_ARCHIVE_DSN": dsn})
    apply(cluster, namespace, queue("q", retention={"succeeded": "20s"}), handler("h"),
          *(job(f"job-kill{i}") for i in range(4)))
    names = {f"job-kill{i}" for i in range(4)}
    for name in names:
        wait_state(cluster, namespace, name, "succeeded")
    wait_for(lambda: names <= archived(dsn, namespace).keys(), 30, message="written eagerly as they finished")
    op.kill()
    op.start()
    wait_for(lambda: not live_names(cluster, namespace) & names, 90,
             message=lambda: f"{sorted(live_names(cluster, namespace))}\n{op.log_tail()}")
    records = archived(dsn, namespace)
    assert names <= records.keys() and len([n for n in records if n in names]) == 4


def test_a_schema_older_than_the_code_is_refused_at_start_in_one_line(cluster, namespace, start_operator, postgres):
    dsn = postgres.create_database()  # empty: no schema at all
    op = start_operator(env={"SEXTANT_ARCHIVE_DSN": dsn})
    wait_for(lambda: op.proc.poll() is not None, 60, message=lambda: op.log_tail())
    assert op.proc.returncode != 0
    assert "sextant archive migrate" in op.log_tail(), op.log_tail()
    assert get_json(cluster, namespace, "jobs.sextant.dev")["items"] == []


def test_a_schedules_history_limit_archives_before_it_deletes(cluster, namespace, start_operator, tmp_path: Path):
    dsn = migrated(f"sqlite:///{tmp_path / 'archive.sqlite'}")
    op = start_operator(env={"SEXTANT_ARCHIVE_DSN": dsn})
    apply(cluster, namespace, queue("q", concurrency=20, retention=LONG), handler("h"),
          {"apiVersion": "sextant.dev/v1alpha1", "kind": "Schedule", "metadata": {"name": "every-second"},
           "spec": {"interval": "1s", "successfulJobsHistoryLimit": 1,
                    "jobTemplate": {"queue": "q", "handler": "h"}}})
    gone: set[str] = set()
    seen: set[str] = set()

    def some_deleted() -> bool:
        now = live_names(cluster, namespace)
        gone.update(seen - now)
        seen.update(now)
        return len(gone) >= 3

    wait_for(some_deleted, 60, interval=0.3, message=lambda: f"seen {sorted(seen)}\n{op.log_tail()}")
    cluster.kubectl("delete", "-n", namespace, "schedules.sextant.dev", "every-second", "--wait=false")
    records = archived(dsn, namespace)
    assert gone <= records.keys(), (sorted(gone), sorted(records))


def test_a_failover_the_new_leader_archives_and_deletes_what_the_old_one_left(cluster, namespace, crds, postgres,
                                                                              tmp_path_factory):
    """Two replicas on one PostgreSQL archive; the leader killed while its finished jobs wait for their retention:
    the new leader (its landed set empty) reads each job, writes its record again (one row still) and deletes it."""
    dsn = migrated(postgres.create_database())
    logs = tmp_path_factory.mktemp("replicas")
    timing = ("--leader-elect", "--leader-election-namespace", namespace, "--leader-election-lease-duration", "3s",
              "--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "500ms")
    ops = [Operator(cluster.kubeconfig, namespace, logs, *timing, env={"SEXTANT_ARCHIVE_DSN": dsn})
           for _ in range(2)]
    for i, op in enumerate(ops):
        op.log_path = logs / f"operator-{i}.log"
        op.start()
    try:
        apply(cluster, namespace, queue("q", retention={"succeeded": "15s"}), handler("h"),
              *(job(f"job-fo{i}") for i in range(6)))
        names = {f"job-fo{i}" for i in range(6)}
        for name in names:
            wait_state(cluster, namespace, name, "succeeded")
        identity = get_json(cluster, namespace, "lease", "sextant-operator")["spec"]["holderIdentity"]
        leader = next(op for op in ops if f"_{op.proc.pid}_" in identity)
        leader.kill()
        wait_for(lambda: not live_names(cluster, namespace) & names, 90,
                 message=lambda: f"{sorted(live_names(cluster, namespace))}\n"
                                 + "\n".join(op.log_tail(20) for op in ops))
        records = archived(dsn, namespace)
        assert names <= records.keys() and {records[n]["state"] for n in names} == {"succeeded"}
    finally:
        for op in ops:
            op.stop()
