"""Objects the operator cannot read: the one line that says why, and the Invalid condition that shows it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import ValidationError

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
    invalid = {"type": COND_INVALID, "status": "True", "reason": reason, "message": message,
               "lastTransitionTime": format_time(now, precise=False)}
    if isinstance(generation, int):
        invalid["observedGeneration"] = generation
    return [c for c in kept if c["type"] != COND_INVALID] + [invalid]
