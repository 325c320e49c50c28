"""Reading raw objects: a Job as the lifecycle's snapshot (or the one line that says why it cannot be read, and the
Invalid condition that shows it), and a job's scheduled time."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from .health import COND_INVALID, invalid_health
from .decision import Decision, JobSnapshot
from .step import set_condition
from ..resources.common import format_time, json_depth, parse_time, problems
from ..resources.contract import ANNOTATION_SCHEDULED_AT
from ..resources.job import MAX_PAYLOAD_DEPTH, JobSpec, JobStatus, payload_size, written_status

# The operator's view keeps no payload but a small one: a legal payload (256 KiB of small keys) is ~3 MiB as Python
# objects, so a backlog of a few hundred such jobs would fill the operator's memory. What the rules read of a payload
# left out is its size as compact JSON (lean_job).
# A payload this small as JSON stays in the view (a few KiB as Python objects, even for 10,000 queued jobs ~30 MiB):
# a pod without the runner gets it in its environment, which would otherwise cost a GET of the job per attempt.
KEPT_PAYLOAD_BYTES = 512
# A payload nested too deep, as read_job refuses it (check_payload), in a few hundred bytes.
_TOO_DEEP: dict[str, Any] = {}
_node = _TOO_DEEP
for _ in range(MAX_PAYLOAD_DEPTH):
    _node["x"] = {}
    _node = _node["x"]
del _node

class InvalidJob(ValueError):
    """A job object the lifecycle cannot read (a field out of range, malformed, or of the wrong type); the
    message names each field and its rule."""


def read_job(raw: dict[str, Any], payload_bytes: int | None = None) -> JobSnapshot:
    """The lifecycle's reading of a job object, whose payload of `payload_bytes` lean_job may have left out;
    InvalidJob naming the fields it cannot read."""
    meta = raw["metadata"]
    try:
        spec = JobSpec.model_validate(raw.get("spec") or {})
    except ValidationError as exc:
        raise InvalidJob(problems(exc, "spec.")) from None
    try:
        status = JobStatus.model_validate(written_status(raw.get("status")))
    except ValidationError as exc:
        raise InvalidJob(problems(exc, "status.")) from None
    try:
        created_at = parse_time(meta.get("creationTimestamp"))
    except ValueError as exc:
        raise InvalidJob(f"metadata.creationTimestamp: {exc}") from None
    if created_at is None:
        raise InvalidJob("metadata.creationTimestamp is missing")
    return JobSnapshot(name=meta["name"], uid=meta.get("uid", ""), generation=meta.get("generation", 1),
                       created_at=created_at, spec=spec, status=status, payload_bytes=payload_bytes)


def lean_job(raw: dict[str, Any], previous: tuple[dict[str, Any], int | None] | None = None
             ) -> tuple[dict[str, Any], int | None]:
    """The job as the operator's view keeps it: all of it but a spec.payload over KEPT_PAYLOAD_BYTES (a shallow copy;
    raw is not changed), and the size of the payload left out (None: none was).

    A payload that read_job accepts is left out and its size returned, which is all the rules read of it
    (PayloadTooLarge). One it refuses is replaced by a small stand-in it refuses in the same words (nested too
    deep; not a JSON object), so the job's Invalid condition says what it says today. An empty or small payload
    stays: it costs next to nothing, and such a job is still whole in the view. `previous`, the view's copy before
    and its size, lends its verdict while uid and generation are the same (the spec changes only with the
    generation, and the payload not at all): a job's payload is measured once, not on each of its watch events."""
    spec = raw.get("spec")
    if not isinstance(spec, dict) or "payload" not in spec:
        return raw, None
    payload = spec["payload"]
    if isinstance(payload, dict) and not payload:
        return raw, None
    same = previous is not None and _same_spec(raw, previous[0])
    kept = (previous[0].get("spec") or {}).get("payload") if same else None
    if isinstance(kept, dict) and kept is not _TOO_DEEP:
        return raw, None  # kept before (a payload left out has a size instead): small
    lean = {**raw, "spec": {k: v for k, v in spec.items() if k != "payload"}}
    size = previous[1] if same else None
    if size is not None:
        return lean, size
    if json_depth(payload, MAX_PAYLOAD_DEPTH) > MAX_PAYLOAD_DEPTH:
        lean["spec"]["payload"] = _TOO_DEEP
    elif not isinstance(payload, dict):
        lean["spec"]["payload"] = [] if isinstance(payload, list) else "" if isinstance(payload, str) else payload
    elif (size := payload_size(payload)) <= KEPT_PAYLOAD_BYTES:
        return raw, None
    else:
        return lean, size
    return lean, None


def _same_spec(raw: dict[str, Any], previous: dict[str, Any]) -> bool:
    meta, before = raw["metadata"], previous["metadata"]
    return bool(meta.get("uid")) and meta.get("uid") == before.get("uid") and \
        meta.get("generation") == before.get("generation")


def scheduled_at(annotations: Mapping[str, str], run_at: datetime | None, created_at: datetime) -> str:
    """The job's scheduled time: a Schedule's tick, else runAt, else its creation."""
    if ANNOTATION_SCHEDULED_AT in annotations:
        return annotations[ANNOTATION_SCHEDULED_AT]
    return format_time(run_at or created_at, precise=False)


def job_scheduled_at(job: JobSnapshot, raw: dict[str, Any]) -> str:
    """scheduled_at of a job already read (what the operator puts in the attempt's pod and a worker hands its
    handler, as the runner reads it from the Job: runner/env.py)."""
    return scheduled_at(raw["metadata"].get("annotations") or {}, job.spec.run_at, job.created_at)


def read_spec(model: Any, obj: dict[str, Any]) -> Any:
    """An object's spec as `model` (a Queue's, a Handler's); ValueError naming each field it cannot read."""
    try:
        return model.model_validate(obj.get("spec") or {})
    except ValidationError as exc:
        raise ValueError(problems(exc, "spec.")) from None


def invalid_conditions(conditions: Any, message: str, now: datetime, generation: Any) -> list[dict[str, Any]] | None:
    """A job's status.conditions with Invalid=True saying `message`; None when it already says so. Works on the
    raw list, since the status itself may be what cannot be read; conditions that are not well-formed are dropped."""
    kept = [c for c in conditions if isinstance(c, dict) and all(isinstance(c.get(f), str) for f in
                                                                  ("type", "status", "reason"))] \
        if isinstance(conditions, list) else []
    current = next((c for c in kept if c["type"] == COND_INVALID), None)
    if current is not None and current["status"] == "True" and current.get("message") == message:
        return None
    reason = "InvalidSpec" if message.startswith("spec.") else \
        "InvalidStatus" if message.startswith("status.") else "InvalidObject"
    wanted = [(COND_INVALID, True, reason, message)] + [tuple(h) for h in invalid_health(reason, message)]
    out = [c for c in kept if c["type"] not in {w[0] for w in wanted}]
    for type_, value, why, words in wanted:  # Invalid, and Stalled for GitOps tools (lifecycle/health.py)
        text = "True" if value else "False"
        before = next((c for c in kept if c["type"] == type_), None)
        moved = before.get("lastTransitionTime") if before is not None and before["status"] == text else None
        cond = {"type": type_, "status": text, "reason": why, "message": words,
                "lastTransitionTime": moved or format_time(now, precise=False)}
        if isinstance(generation, int):
            cond["observedGeneration"] = generation
        out.append(cond)
    return out


def valid_again(decision: Decision, now: datetime, generation: int) -> Decision:
    """A job that was Invalid and can be read now says so: its condition Invalid turns False."""
    if any(c.type == COND_INVALID and c.status == "True" for c in decision.status.conditions):
        set_condition(decision.status, COND_INVALID, False, "Valid", "the job can be read", now, generation)
    return decision
