"""What is archived of a job: a record built by a pure function from the raw Job object (as the API server serves
it), with the payload capped (settings.PAYLOAD_MAX_BYTES) and the times a reader sorts, filters and charts by."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..resources.common import time_or_none
from ..resources.contract import ANNOTATION_SCHEDULED_AT, LABEL_SCHEDULE
from ..resources.job import job_id, payload_size, sequence_of


@dataclass(frozen=True)
class Record:
    """One job as the archive keeps it. `recorded_at` orders, filters and prunes the archive: when the job finished,
    or, for a job archived before it finished (deleted while it waited), the latest time it shows."""

    uid: str
    id: str
    name: str
    namespace: str
    queue: str
    handler: str
    state: str
    recorded_at: datetime
    created_at: datetime
    finished_at: datetime | None = None
    labels: dict[str, str] = field(default_factory=dict)
    idempotency_key: str | None = None
    duplicate_of: str | None = None
    priority: int = 0
    concurrency_key: str | None = None
    run_at: datetime | None = None
    payload: Any = None
    payload_bytes: int = 0
    payload_note: str | None = None
    attempt: int = 0
    sequence: int = 0
    attempts: list[dict[str, Any]] = field(default_factory=list)
    dropped_attempts: int = 0
    output: Any = None
    output_note: str | None = None
    error: str | None = None
    message: str | None = None
    conditions: list[dict[str, Any]] = field(default_factory=list)
    schedule: str | None = None
    scheduled_at: str | None = None
    wait_ms: int | None = None
    run_ms: int | None = None


def payload_note(size: int, cap: int) -> str:
    if cap == 0:
        return f"the payload ({size} bytes as JSON) is not archived: the archive keeps no payloads"
    return f"the payload is {size} bytes as JSON, over the archive's cap of {cap} bytes: not archived"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _ms(start: datetime | None, end: datetime | None) -> int | None:
    if start is None or end is None or end < start:
        return None
    return round((end - start).total_seconds() * 1000)


def record_of(raw: dict[str, Any], payload_max_bytes: int) -> Record:
    """The record of a raw Job object. Total over every Job the API server accepts: a field that is missing or
    unreadable is left empty, never a failure, since the archive must take every job retention is about to delete.
    A payload over payload_max_bytes (as compact JSON; 0 keeps none) is left out, with a note saying so."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if isinstance(v, str)}
    annotations = meta.get("annotations") or {}
    created_at = time_or_none(meta.get("creationTimestamp"))
    if created_at is None:
        raise ValueError(f"job {meta.get('namespace')}/{meta.get('name')} has no creationTimestamp")
    attempts = [a for a in status.get("attempts") or [] if isinstance(a, dict)]
    last = attempts[-1] if attempts else {}
    finished_at = time_or_none(status.get("finishedAt"))
    started = time_or_none(last.get("startedAt"))
    ended = time_or_none(last.get("finishedAt"))
    shown = [t for t in (created_at, started, ended, time_or_none(status.get("queuedAt"))) if t is not None]

    payload = spec.get("payload")
    size = payload_size(payload) if payload is not None else 0
    kept = payload is not None and size <= payload_max_bytes
    run_at = time_or_none(spec.get("runAt"))
    return Record(
        uid=str(meta.get("uid") or ""), id=job_id(meta.get("name", "")), name=meta.get("name", ""),
        namespace=meta.get("namespace", ""), queue=str(spec.get("queue", "")), handler=str(spec.get("handler", "")),
        state=_text(status.get("state")) or "", recorded_at=finished_at or max(shown), created_at=created_at,
        finished_at=finished_at, labels=labels, idempotency_key=_text(spec.get("idempotencyKey")),
        duplicate_of=_text(status.get("duplicateOf")), priority=_int(spec.get("priority")),
        concurrency_key=_text(spec.get("concurrencyKey")), run_at=run_at,
        payload=payload if kept else None, payload_bytes=size,
        payload_note=None if kept or payload is None else payload_note(size, payload_max_bytes),
        attempt=_int(status.get("attempt")), sequence=sequence_of(status), attempts=attempts,
        dropped_attempts=_int(status.get("droppedAttempts")), output=status.get("output"),
        output_note=_text(status.get("outputNote")), error=_text(last.get("message")),
        message=_text(status.get("message")),
        conditions=[c for c in status.get("conditions") or [] if isinstance(c, dict)],
        schedule=_text(labels.get(LABEL_SCHEDULE)),
        scheduled_at=_text(annotations.get(ANNOTATION_SCHEDULED_AT)),
        wait_ms=_ms(time_or_none(status.get("queuedAt")), started), run_ms=_ms(started, ended))
