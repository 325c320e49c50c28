"""The /v2 API's answers that are pure functions: a new job's first state, the Warning header, and the queue numbers
read back from a Queue's status."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from sextant.http.api import warning_header
from sextant.http.models import created_job_out, dump, job_out
from sextant.lifecycle.queueing import QueueNumbers, numbers_of_status, status_body

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)


def new_job(**spec) -> dict:
    return {"metadata": {"name": "job-abcdefgh", "namespace": "shop", "creationTimestamp": "2026-12-01T11:59:59Z"},
            "spec": {"queue": "q", "handler": "h", **spec}}


@pytest.mark.parametrize("spec, status, state", [
    ({}, None, "queued"),  # just created: what its queue counts it as
    ({"runAt": "2026-12-01T13:00:00Z"}, None, "scheduled"),
    ({"runAt": "2026-12-01T11:00:00Z"}, None, "queued"),
    ({}, {"state": "running"}, "running"),  # the operator's word, once written
    ({}, {"conditions": [{"type": "Invalid", "status": "True", "reason": "InvalidSpec"}]}, None),
])
def test_a_job_without_a_state_answers_its_first_state(spec, status, state):
    raw = new_job(**spec)
    if status is not None:
        raw["status"] = status
    assert job_out(raw, NOW).state == state


def test_a_create_answers_its_warnings_beside_the_job():
    out = dump(created_job_out(new_job(), ["queue q does not exist in namespace shop"], NOW))
    assert out["state"] == "queued" and out["warnings"] == ["queue q does not exist in namespace shop"]
    assert out["id"] == "job_abcdefgh"


def test_the_warning_header_is_rfc_7234s_299_with_the_text_quoted():
    assert warning_header('queue "q" is \\ missing') == '299 - "queue \\"q\\" is \\\\ missing"'


def test_a_queues_status_reads_back_as_the_numbers_that_were_written():
    numbers = QueueNumbers(running=2, queued=5, starting=1, scheduled=3, failed=4,
                           oldest_queued_at=datetime(2026, 12, 1, 11, 0, tzinfo=timezone.utc))
    assert numbers_of_status(status_body(numbers, 7)) == numbers
    assert numbers_of_status(None) == QueueNumbers()
    assert numbers_of_status({"running": "x", "queued": -1, "failed": True}) == QueueNumbers()


def test_get_v2_queues_shows_the_rate_limit_and_the_keys():
    from sextant.http.models import queue_out

    now = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    raw = {"metadata": {"name": "q", "namespace": "ns"},
           "spec": {"rateLimit": {"starts": 100, "per": "1m"}, "perKeyConcurrency": 2},
           "status": {"recentStarts": 100, "rateLimited": True, "keys": 3}}
    out = queue_out(("ns", "q"), raw, numbers_of_status(raw["status"]), {}, now).model_dump(mode="json")
    assert {k: out[k] for k in ("rate_limit", "recent_starts", "rate_limited", "per_key_concurrency", "keys")} == {
        "rate_limit": {"starts": 100, "per": "1m"}, "recent_starts": 100, "rate_limited": True,
        "per_key_concurrency": 2, "keys": 3}
    plain = queue_out(("ns", "p"), {"metadata": {"name": "p"}, "spec": {}, "status": {"rateLimited": True}},
                      numbers_of_status({"rateLimited": True}), {}, now).model_dump(mode="json")
    assert (plain["rate_limit"], plain["rate_limited"], plain["keys"]) == (None, False, 0)
