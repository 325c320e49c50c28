"""An archived job as the readers show it: the Job object it was (metadata, spec, status, as the API server served
it), rebuilt from its record, with `archived: true` beside them. Every reader (HTTP API, CLI, dashboard) already
shows Job objects; handing them the same shape means one rendering for live and archived jobs, and the marker is
the one thing that tells them apart (no Job the API server serves has a top-level `archived`)."""

from __future__ import annotations

from typing import Any

from ..resources import API_VERSION
from ..resources.common import format_time
from ..resources.contract import ANNOTATION_SCHEDULED_AT
from .record import Record

# The top-level key that marks a Job object rebuilt from the archive.
ARCHIVED = "archived"


def is_archived(job: dict[str, Any]) -> bool:
    return job.get(ARCHIVED) is True


def object_of(record: Record) -> dict[str, Any]:
    """The Job object a record was made from, as far as the record keeps it (a payload over the archive's cap is
    {} with status.payloadNote saying why; status.queuedAt is not kept, only the wait it made), marked archived."""
    spec: dict[str, Any] = {"queue": record.queue, "handler": record.handler, "payload": record.payload or {},
                            "priority": record.priority}
    for key, value in (("idempotencyKey", record.idempotency_key), ("concurrencyKey", record.concurrency_key),
                       ("runAt", format_time(record.run_at, precise=False) if record.run_at else None)):
        if value is not None:
            spec[key] = value
    status: dict[str, Any] = {"state": record.state or None, "attempt": record.attempt, "sequence": record.sequence,
                              "attempts": record.attempts, "conditions": record.conditions}
    for key, value in (("finishedAt", format_time(record.finished_at, precise=False) if record.finished_at else None),
                       ("duplicateOf", record.duplicate_of), ("message", record.message), ("output", record.output),
                       ("outputNote", record.output_note), ("payloadNote", record.payload_note),
                       ("droppedAttempts", record.dropped_attempts or None)):
        if value is not None:
            status[key] = value
    meta: dict[str, Any] = {"name": record.name, "namespace": record.namespace, "uid": record.uid,
                            "creationTimestamp": format_time(record.created_at, precise=False),
                            "labels": dict(record.labels)}
    if record.scheduled_at:
        meta["annotations"] = {ANNOTATION_SCHEDULED_AT: record.scheduled_at}
    return {"apiVersion": API_VERSION, "kind": "Job", "metadata": meta, "spec": spec, "status": status,
            ARCHIVED: True}
