"""A Queue's live numbers (queuestats.count_unfinished / status_body), as controller/queuestatus.py writes them."""

from __future__ import annotations

from sextant.queuestats import QueueNumbers, count_unfinished, same_status, status_body


def job(state: str | None, queued_at: str | None = None, created: str = "2026-03-01T12:00:00Z") -> dict:
    status = {"state": state} if state else {}
    if queued_at:
        status["queuedAt"] = queued_at
    return {"metadata": {"name": "j", "creationTimestamp": created}, "status": status}


def test_counts_each_unfinished_state_and_the_starting_pods():
    numbers = count_unfinished([
        (job("running"), False),
        (job("running"), False),
        (job("queued", "2026-03-01T12:00:30Z"), True),  # its pod is starting: queued, not running
        (job("queued", "2026-03-01T12:00:10Z"), False),
        (job("scheduled"), False),
        (job("failed"), False),
    ])
    assert numbers == QueueNumbers(running=2, queued=2, starting=1, scheduled=1, failed=1,
                                   oldest_queued_at=numbers.oldest_queued_at)
    assert numbers.oldest_queued_at.isoformat() == "2026-03-01T12:00:10+00:00"


def test_a_job_without_a_state_counts_as_queued_only_while_its_pod_starts():
    numbers = count_unfinished([(job(None, created="2026-03-01T11:00:00Z"), True), (job(None), False)])
    assert (numbers.queued, numbers.starting) == (1, 1)
    assert numbers.oldest_queued_at.isoformat() == "2026-03-01T11:00:00+00:00"


def test_an_empty_queue_has_zeros_and_no_oldest():
    body = status_body(count_unfinished([]), 3)
    assert body == {"observedGeneration": 3, "running": 0, "queued": 0, "starting": 0, "scheduled": 0, "failed": 0,
                    "oldestQueuedAt": None}


def test_only_a_change_is_written():
    body = status_body(count_unfinished([(job("running"), False)]), 1)
    assert not same_status({}, body)  # never written
    stored = {k: v for k, v in body.items() if v is not None}  # the API server drops the nulls of a merge patch
    assert same_status(stored, body)
    assert not same_status(stored, {**body, "running": 2})
    assert not same_status(stored, {**body, "observedGeneration": 2})
