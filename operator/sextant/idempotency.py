"""Idempotency keys (core-concepts: Jobs): a second job with the same key within 24 hours is the first one.

Atomic without a lock: a job created with a key gets a name derived from (namespace, key, generation) (the pure
rule, lifecycle/idempotency.py, which names schedules' ticks too), so concurrent creates race for one name and the
API server lets exactly one win. After 24 hours the key may be used again: the next generation's name is free.
A job applied directly under another name that reuses a claimed key is caught by the operator with `duplicate_of`,
and found by every create path (CLI, HTTP API, SDK) before it creates anything: `spec.idempotencyKey` is a
selectable field of the Job CRD, so one field-selected list asks the API server for the jobs that carry a key
(`holder` picks the one that holds it now).

The window is 24 hours. The environment variable SEXTANT_IDEMPOTENCY_WINDOW (a duration, e.g. `10s`) shortens
or lengthens it for tests and experiments; the operator and every client must then be given the same value.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from .lifecycle.idempotency import ALPHABET, ID_LENGTH, keyed_name  # the pure naming rule; clients find it here too
from .resources.common import parse_duration, parse_time

WINDOW = timedelta(hours=24)
WINDOW_ENV = "SEXTANT_IDEMPOTENCY_WINDOW"
_window_cache: tuple[str | None, timedelta] = (None, WINDOW)


def random_name() -> str:
    return "job-" + "".join(secrets.choice(ALPHABET) for _ in range(ID_LENGTH))


def window(environ: Mapping[str, str] = os.environ) -> timedelta:
    """How long a key stays claimed: 24 hours, or SEXTANT_IDEMPOTENCY_WINDOW. ValueError naming the variable for a
    value that is not a positive duration."""
    global _window_cache
    text = environ.get(WINDOW_ENV) or None
    if text == _window_cache[0]:
        return _window_cache[1]
    if text is None:
        value = WINDOW
    else:
        try:
            value = parse_duration(text)
        except ValueError as exc:
            raise ValueError(f"{WINDOW_ENV}: {exc}") from None
        if value <= timedelta(0):
            raise ValueError(f"{WINDOW_ENV}: the idempotency window must be longer than 0s, got {text!r}")
    _window_cache = (text, value)
    return value


def still_claimed(claimed_at: datetime, now: datetime) -> bool:
    """A key claimed at claimed_at still returns that job now."""
    return now - claimed_at < window()


def claim_ends(job: Mapping[str, Any]) -> datetime | None:
    """When the key of this job (a raw Job object) stops being claimed by it: its creation plus the window; None
    without a key or a readable creation time. Retention keeps a keyed job at least until then."""
    if not (job.get("spec") or {}).get("idempotencyKey"):
        return None
    try:
        created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    except ValueError:
        return None
    return created + window() if created is not None else None


def claimant(candidates: Iterable[tuple[datetime, bool, str]], created_at: datetime, name: str) -> str | None:
    """Of the jobs holding the same key (creation time, undecided, name), the one this job duplicates, or None.

    The earliest job holds the key for 24 hours; a job created in that window duplicates it. Equal creation
    times (one-second resolution) are ordered first by the operator's earlier verdicts, which stand: a job it
    already let run (undecided False) comes before one it has not looked at; then by name, so that every
    observer picks the same one.
    """
    holder: tuple[datetime, bool, str] | None = None
    for other in sorted(candidates):
        if holder is None or not still_claimed(holder[0], other[0]):
            holder = other  # the first use, or the first use after the previous claim ran out
        if (other[0], other[2]) == (created_at, name):
            return None if holder == other else holder[2]
    return None


def holder(candidates: Iterable[tuple[datetime, bool, str]], now: datetime) -> str | None:
    """Of the jobs carrying one key (creation time, undecided, name, as for `claimant`), the name of the one that
    holds the key now, or None when no claim is running: the same walk as `claimant`, asked at `now`."""
    current: tuple[datetime, bool, str] | None = None
    for other in sorted(candidates):
        if current is None or not still_claimed(current[0], other[0]):
            current = other
    return current[2] if current is not None and still_claimed(current[0], now) else None


def undecided(job: Mapping[str, Any]) -> bool:
    """Not yet let run by the operator: no state yet, or itself a duplicate (the order `claimant` breaks ties by)."""
    status = job.get("status") or {}
    return not status.get("state") or bool(status.get("duplicateOf"))


def selector_value(text: str) -> str:
    """A field selector's value, escaped as the API server reads it (backslash, comma and equals sign)."""
    return text.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")
