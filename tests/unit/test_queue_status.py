"""A Queue's live numbers (queueing.count_unfinished / status_body), as controller/queuestatus.py writes them."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

from sextant.lifecycle.queueing import (QueueNumbers, count_unfinished, numbers_of_status, queue_stats, same_status,
                                       status_body)


def job(state: str | None, queued_at: str | None = None, created: str = "2026-03-01T12:00:00Z") -> dict:
    status = {"state": state} if state else {}
    if queued_at:
        status["queuedAt"] = queued_at
    return {"metadata": {"name": "j", "creationTimestamp": created}, "status": status}


NOW = datetime(2026, 3, 1, 13, 0, tzinfo=timezone.utc)


def test_counts_each_unfinished_state_and_the_starting_pods():
    numbers = count_unfinished([
        (job("running"), False),
        (job("running"), False),
        (job("queued", "2026-03-01T12:00:30Z"), True),  # its pod is starting: queued, not running
        (job("queued", "2026-03-01T12:00:10Z"), False),
        (job("scheduled"), False),
        (job("failed"), False),
    ], NOW)
    assert numbers == QueueNumbers(running=2, queued=2, starting=1, scheduled=1, failed=1,
                                   oldest_queued_at=numbers.oldest_queued_at)
    assert numbers.oldest_queued_at.isoformat() == "2026-03-01T12:00:10+00:00"


def test_a_job_without_a_state_counts_as_queued_and_starting_while_its_pod_starts():
    numbers = count_unfinished([(job(None, created="2026-03-01T11:00:00Z"), True), (job(None), False)], NOW)
    assert (numbers.queued, numbers.starting) == (2, 1)
    assert numbers.oldest_queued_at.isoformat() == "2026-03-01T11:00:00+00:00"


def test_a_job_without_a_state_whose_run_at_is_ahead_counts_as_scheduled_and_an_invalid_one_not_at_all():
    ahead = {**job(None), "spec": {"runAt": "2026-03-01T14:00:00Z"}}
    invalid = {**job(None), "status": {"conditions": [{"type": "Invalid", "status": "True", "reason": "InvalidSpec"}]}}
    numbers = count_unfinished([(ahead, False), (invalid, False)], NOW)
    assert (numbers.queued, numbers.scheduled) == (0, 1)


def test_the_queue_status_and_the_v2_api_count_a_new_job_alike():
    # One rule (queueing.counted_state) for `kubectl get squeue` and GET /v2/queues and the dashboard: a job the
    # operator holds without a state (hold_first_write) is queued in both. On the main before the layout change the
    # Queue's status said queued 1 and /v2/queues said 0.
    new = {**job(None), "metadata": {"name": "j", "namespace": "ns", "creationTimestamp": "2026-03-01T12:00:00Z"},
           "spec": {"queue": "emails"}}
    queue = {"metadata": {"name": "emails", "namespace": "ns"}, "spec": {}}
    (stats,) = queue_stats([queue], [new], NOW)
    assert stats.jobs["queued"] == count_unfinished([(new, False)], NOW).queued == 1


def test_an_empty_queue_has_zeros_and_no_oldest():
    body = status_body(count_unfinished([], NOW), 3)
    assert body == {"observedGeneration": 3, "paused": False, "running": 0, "queued": 0, "starting": 0,
                    "scheduled": 0, "failed": 0, "oldestQueuedAt": None, "recentStarts": None, "rateLimited": None,
                    "keys": None}


def test_a_paused_queue_says_so_and_starts_nothing():
    from sextant.lifecycle.admission import Limits, Wait, verdict
    from sextant.resources.queue import QueueSpec

    assert status_body(count_unfinished([], NOW), 3, paused=True)["paused"] is True
    for concurrency in (1, 3):
        for holders in range(5):
            running = Limits.of(QueueSpec(concurrency=concurrency))
            assert (verdict(running, holders, 0) is None) is (holders < concurrency)
            assert verdict(Limits.of(QueueSpec(concurrency=concurrency, paused=True)), holders, 0) is Wait.PAUSED


def test_a_rate_limited_queue_shows_its_window_and_keys_are_counted():
    keyed = [({"metadata": {"name": f"j{n}", "creationTimestamp": "2026-05-01T09:00:00Z"},
               "spec": {"concurrencyKey": key}, "status": {"state": state}}, False)
             for n, (key, state) in enumerate([("a", "queued"), ("a", "running"), ("b", "queued"), ("c", "succeeded")])]
    keyed.append(({"metadata": {"name": "j9", "creationTimestamp": "2026-05-01T09:00:00Z"}, "spec": {},
                   "status": {"state": "queued"}}, False))
    numbers = count_unfinished(keyed, NOW)
    assert numbers.keys == 2  # a and b: c finished, and a job without a key has none
    body = status_body(replace(numbers, recent_starts=100, rate_limited=True), 1)
    assert (body["recentStarts"], body["rateLimited"], body["keys"]) == (100, True, 2)
    assert numbers_of_status(body) == replace(numbers, recent_starts=100, rate_limited=True)


def test_only_a_change_is_written():
    body = status_body(count_unfinished([(job("running"), False)], NOW), 1)
    assert not same_status({}, body)  # never written
    stored = {k: v for k, v in body.items() if v is not None}  # the API server drops the nulls of a merge patch
    assert same_status(stored, body)
    assert not same_status(stored, {**body, "running": 2})
    assert not same_status(stored, {**body, "observedGeneration": 2})


def test_the_writer_counts_from_the_view_a_starting_pod_as_queued():
    """QueueStatusWriter.body reads only the view: the queue's unfinished jobs and whether their pod is starting."""
    import asyncio

    from sextant.controller.queuestatus import QueueStatusWriter
    from sextant.controller.timers import Timers
    from sextant.controller.view import View

    def raw(name: str, uid: str, state: str | None, sequence: int = 0) -> dict:
        return {"metadata": {"name": name, "namespace": "shop", "uid": uid, "resourceVersion": "1",
                             "generation": 1, "creationTimestamp": "2026-03-01T12:00:00Z"},
                "spec": {"queue": "emails", "handler": "send"},
                "status": {"state": state, "sequence": sequence} if state else {}}

    def pod(job: str, uid: str, sequence: int, phase: str) -> dict:
        return {"metadata": {"name": f"{job}-{sequence}", "namespace": "shop", "resourceVersion": "2",
                             "labels": {"sextant.dev/job": job, "sextant.dev/sequence": str(sequence)},
                             "ownerReferences": [{"apiVersion": "sextant.dev/v1alpha1", "kind": "Job", "name": job,
                                                  "uid": uid, "controller": True}]},
                "spec": {"containers": [{"name": "handler"}]}, "status": {"phase": phase}}

    view = View()
    for name, uid, state, sequence in [("job-a", "a", "running", 1), ("job-b", "b", "queued", 0),
                                  ("job-c", "c", None, 0), ("job-d", "d", "queued", 0), ("job-e", "e", "dead", 1)]:
        view.upsert_job(raw(name, uid, state, sequence))
    view.upsert_pod(pod("job-a", "a", 1, "Running"))
    view.upsert_pod(pod("job-b", "b", 1, "Pending"))  # admitted, its handler not started: queued, starting
    view.upsert_pod(pod("job-c", "c", 1, "Pending"))  # admitted on first sight, no state written yet
    writer = QueueStatusWriter(None, view, Timers(lambda: None), lambda: None, asyncio.Event())  # type: ignore[arg-type]
    writer.on_queue("add", {"metadata": {"name": "emails", "namespace": "shop", "generation": 4}, "status": {}})
    body = writer.body(("shop", "emails"))
    assert {k: body[k] for k in ("running", "queued", "starting", "scheduled", "failed", "observedGeneration")} == {
        "running": 1, "queued": 3, "starting": 2, "scheduled": 0, "failed": 0, "observedGeneration": 4}


def test_rounds_are_spaced_by_the_backlog_they_count():
    """A round counts every unfinished job: with a backlog, rounds come less often, at most LOOKS_PER_SECOND looks
    per second, and never more often than the interval."""
    from datetime import timedelta

    from sextant.controller.queuestatus import INTERVAL, LOOKS_PER_SECOND, next_round_after

    assert next_round_after(0, INTERVAL) == INTERVAL
    assert next_round_after(LOOKS_PER_SECOND * 3, INTERVAL) == INTERVAL
    assert next_round_after(LOOKS_PER_SECOND * 5, INTERVAL) == timedelta(seconds=5)
    assert next_round_after(10_000, INTERVAL) == timedelta(seconds=20)  # a 10k backlog: numbers 20 s old at most
    assert next_round_after(100_000, INTERVAL) == timedelta(seconds=100_000 / LOOKS_PER_SECOND)
