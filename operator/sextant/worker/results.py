"""A worker's results (docs/workers.md): how an attempt ended, as the worker saw it, written into its own spec
(spec.results) for the operator to record on the job with the lifecycle's rules. The worker decides no job state.

A result is keyed by its assignment (job uid, sequence, incarnation) and stays in spec until that assignment has left
status (the operator recorded it); it is dropped from the next write after that. Results travel in batches: every
write carries all the results held (registration.py keeps one write in flight).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..resources.common import format_time
from ..resources.worker import MESSAGE_MAX_LENGTH, Assignment
from ..runner.execution import Ended

Key = tuple[str, int, str]  # (job uid, sequence, incarnation)
NOT_FOUND = "NotFound"  # the job is gone, or is another job of the same name: not run
# Why the worker stopped a handler, as its result says (the operator's rules decide the outcome from it).
REPORTED_STOPS = frozenset({"Cancelled", "Timeout", "Drained"})


def key_of(assignment: Assignment) -> Key:
    return assignment.uid, assignment.sequence, assignment.incarnation


def result_of(assignment: Assignment, ended: Ended, stop: str | None, started_at: datetime | None,
              finished_at: datetime) -> dict[str, Any]:
    """The result as spec.results carries it: exitCode when the handler ran; reason when the worker stopped it
    (Cancelled, Timeout, Drained) or could not run it (NotFound, Drained); the message of a failure; a snooze's
    snoozeSeconds; the output (or outputNote)."""
    result: dict[str, Any] = {"job": assignment.job, "uid": assignment.uid, "sequence": assignment.sequence,
                              "incarnation": assignment.incarnation}
    if ended.exit_code is not None:
        result["exitCode"] = max(0, min(255, ended.exit_code))
    if stop is not None:
        result["reason"] = stop
    if ended.message and ended.exit_code != 0:
        result["message"] = ended.message[-MESSAGE_MAX_LENGTH:]
    if ended.snooze_seconds is not None:
        result["snoozeSeconds"] = ended.snooze_seconds
    if ended.output is not None:
        result["output"] = json.loads(ended.output)  # within the cap: execution.returned checked it
    if ended.output_note:
        result["outputNote"] = ended.output_note[:MESSAGE_MAX_LENGTH]
    if started_at is not None:
        result["startedAt"] = format_time(started_at)
    result["finishedAt"] = format_time(finished_at)
    return result


class Results:
    """The results held, in the order they became ready."""

    def __init__(self) -> None:
        self._held: dict[Key, dict[str, Any]] = {}

    def add(self, key: Key, result: dict[str, Any]) -> None:
        self._held[key] = result

    def keep(self, assigned: Mapping[Key, Assignment]) -> None:
        """Drop the results whose assignments have left status: they are recorded."""
        for key in [k for k in self._held if k not in assigned]:
            del self._held[key]

    def to_write(self) -> list[dict[str, Any]]:
        return list(self._held.values())

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, key: object) -> bool:
        return key in self._held


def progress_of(assignment: Assignment, fraction: float, message: str | None) -> dict[str, Any]:
    """A running attempt's progress as spec.progress carries it (the latest only; it rides on the next write)."""
    entry: dict[str, Any] = {"job": assignment.job, "uid": assignment.uid, "sequence": assignment.sequence,
                             "incarnation": assignment.incarnation, "fraction": fraction}
    if message:
        entry["message"] = message
    return entry
