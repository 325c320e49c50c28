"""Raw Job objects as the API server serves them, for tests (and bench/archive.py) that archive them without a
cluster: every field the archive reads, set from a few arguments."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from sextant.resources import API_VERSION
from sextant.resources.common import format_time

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)


def raw_job(n: int, *, namespace: str = "ns", state: str = "succeeded", finished: datetime | None = None,
            queue: str = "q", handler: str = "h", labels: dict[str, str] | None = None, payload: Any = None,
            attempts: int = 1, error: str | None = None, key: str | None = None, duplicate_of: str | None = None,
            created: datetime | None = None, wait: float = 1.0, run: float = 2.0, sequence: int | None = None,
            annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """Job number n (name job-<n>, uid uid-<n>), created at `created` (default T0 + n s), finished `wait + run`
    seconds later (or at `finished`) in `state` after `attempts` attempts, the last one failing with `error`."""
    created = created or T0 + timedelta(seconds=n)
    end = finished or created + timedelta(seconds=wait + run)
    start = end - timedelta(seconds=run)
    timeline = [{"attempt": i, "sequence": i, "result": "failed", "reason": "Error", "exitCode": 1,
                 "startedAt": format_time(start), "finishedAt": format_time(end), "message": f"attempt {i} failed"}
                for i in range(1, attempts + 1)]
    if timeline:
        timeline[-1]["result"] = "succeeded" if state == "succeeded" else "failed"
        timeline[-1]["message"] = error
    status: dict[str, Any] = {
        "state": state, "attempt": attempts, "sequence": sequence if sequence is not None else attempts,
        "queuedAt": format_time(start - timedelta(seconds=wait)), "attempts": timeline,
        "conditions": [{"type": "Succeeded" if state == "succeeded" else "Dead", "status": "True", "reason": "Done",
                        "message": "", "lastTransitionTime": format_time(end, precise=False)}]}
    if state in ("succeeded", "dead", "cancelled"):
        status["finishedAt"] = format_time(end)
    if state == "succeeded":
        status["output"] = {"n": n}
    if duplicate_of:
        status["duplicateOf"] = duplicate_of
    spec: dict[str, Any] = {"queue": queue, "handler": handler, "payload": {"n": n} if payload is None else payload,
                            "priority": n % 3}
    if key:
        spec["idempotencyKey"] = key
    return {"apiVersion": API_VERSION, "kind": "Job",
            "metadata": {"name": f"job-{n:08d}", "namespace": namespace, "uid": f"uid-{n:08d}",
                         "creationTimestamp": format_time(created, precise=False), "generation": 1,
                         "labels": labels or {}, "annotations": annotations or {}},
            "spec": spec, "status": status}
