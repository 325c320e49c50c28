"""Objects the operator cannot read: the one line that says why, and the Invalid condition that shows it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import ValidationError

from .health import invalid_health
from ..resources.common import format_time, problems

COND_INVALID = "Invalid"


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
