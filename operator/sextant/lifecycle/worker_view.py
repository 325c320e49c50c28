"""What a user sees of a worker (`sextant workers`, the dashboard), read from its Worker object (docs/workers.md):
queues, handlers and the last renewal from its spec (the worker's), state, slots and busy from its status (the
operator's judgement: its own clock, slots capped). Pure; odd values show as what they are, never failing the list."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..resources.common import format_time, parse_time

UNKNOWN = "unknown"  # the operator has not judged the worker yet (no status.state)


@dataclass(frozen=True)
class WorkerView:
    namespace: str
    name: str
    incarnation: str
    queues: tuple[str, ...]
    handlers: tuple[str, ...]
    slots: int | None  # as the operator believes them
    busy: int
    state: str
    draining: bool
    renewed_at: datetime | None  # the worker's own clock: for people only
    lease_duration: timedelta | None
    created_at: datetime | None
    jobs: tuple[str, ...] = ()  # the jobs of its assignments
    user: str | None = None
    message: str | None = None

    @property
    def holder(self) -> str:
        return f"{self.name}/{self.incarnation}" if self.incarnation else self.name


def _names(values: Any) -> tuple[str, ...]:
    return tuple(sorted({str(v) for v in values if isinstance(v, str)})) if isinstance(values, list) else ()


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _time(value: Any) -> datetime | None:
    try:
        return parse_time(value) if isinstance(value, str) else None
    except ValueError:
        return None


def read_worker_object(obj: Mapping[str, Any]) -> WorkerView:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    assignments = [a for a in status.get("assignments") or () if isinstance(a, dict)] \
        if isinstance(status.get("assignments"), list) else []
    busy = _int(status.get("busy"))
    seconds = _int(spec.get("leaseDurationSeconds"))
    incarnation = spec.get("incarnation")
    return WorkerView(
        namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
        incarnation=incarnation if isinstance(incarnation, str) else "",
        queues=_names(spec.get("queues")), handlers=_names(spec.get("handlers")),
        slots=_int(status.get("slots")), busy=busy if busy is not None else len(assignments),
        state=str(status.get("state") or UNKNOWN), draining=spec.get("draining") is True,
        renewed_at=_time(spec.get("renewTime")),
        lease_duration=timedelta(seconds=seconds) if seconds and seconds > 0 else None,
        created_at=_time(meta.get("creationTimestamp")),
        jobs=tuple(sorted({str(a.get("job")) for a in assignments if a.get("job")})),
        user=spec.get("user") if isinstance(spec.get("user"), str) else None,
        message=status.get("message") if isinstance(status.get("message"), str) else None,
    )


def as_dict(worker: WorkerView, now: datetime) -> dict[str, Any]:
    """The worker as `sextant workers -o json` prints it and the dashboard shows it."""
    renewed = worker.renewed_at
    return {
        "namespace": worker.namespace, "name": worker.name, "holder": worker.holder,
        "incarnation": worker.incarnation, "queues": list(worker.queues), "handlers": list(worker.handlers),
        "slots": worker.slots, "busy": worker.busy, "jobs": list(worker.jobs), "state": worker.state,
        "draining": worker.draining, "renewTime": format_time(renewed) if renewed else None,
        "lastRenewalSeconds": round((now - renewed).total_seconds(), 3) if renewed else None,
        "leaseDurationSeconds": int(worker.lease_duration.total_seconds()) if worker.lease_duration else None,
        "user": worker.user, "message": worker.message,
    }
