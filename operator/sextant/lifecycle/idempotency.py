"""Idempotency keys: a second job with the same key within 24 hours is the first one.

Atomic without a lock: a job created with a key gets a name derived from (namespace, key, generation) (`keyed_name`,
which names schedules' ticks too), so concurrent creates race for one name and the API server lets exactly one win.
After the window (24 hours) the key may be used again: the next generation's name is free. A job applied directly
under another name that reuses a claimed key is caught by the operator (`claimant`, recorded as `duplicateOf`), and
found by every create path (CLI, HTTP API, SDK) before it creates anything (`holder`): one rule for both, with the
same `undecided` tie-break, so that the client and the operator always name the same job.

Pure: the window is passed in (resources/inputs.idempotency_window reads SEXTANT_IDEMPOTENCY_WINDOW once per
process, for tests and experiments; the operator and every client must then be given the same value).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from ..resources.common import parse_time
from ..resources.job import ID_ALPHABET as ALPHABET
from ..resources.job import ID_LENGTH, IDEMPOTENCY_WINDOW

WINDOW = IDEMPOTENCY_WINDOW

# (creation time, undecided, name): what the rule knows of each job carrying one key.
Candidate = tuple[datetime, bool, str]


def keyed_name(namespace: str, key: str, generation: int = 0) -> str:
    """The name a job with this key gets in this namespace, for the n-th use of the key (one use per window)."""
    digest = int.from_bytes(hashlib.sha256(f"{namespace}\0{key}\0{generation}".encode()).digest()[:8], "big")
    chars = []
    for _ in range(ID_LENGTH):
        digest, index = divmod(digest, len(ALPHABET))
        chars.append(ALPHABET[index])
    return "job-" + "".join(chars)


def still_claimed(claimed_at: datetime, now: datetime, window: timedelta = WINDOW) -> bool:
    """A key claimed at claimed_at still returns that job now."""
    return now - claimed_at < window


def claim_ends(job: Mapping[str, Any], window: timedelta = WINDOW) -> datetime | None:
    """When the key of this job (a raw Job object) stops being claimed by it: its creation plus the window; None
    without a key or a readable creation time. Retention keeps a keyed job at least until then."""
    if not (job.get("spec") or {}).get("idempotencyKey"):
        return None
    try:
        created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    except ValueError:
        return None
    return created + window if created is not None else None


def undecided(status: Mapping[str, Any] | None, started: bool) -> bool:
    """Not yet let run by the operator: no state and no attempt started (a pod of it exists: admitted on first
    sight, its state is written when the pod starts), or itself a duplicate. The order `claimant` and `holder`
    break ties by; the operator and every client ask it with the same facts."""
    status = status or {}
    return (not status.get("state") and not started) or bool(status.get("duplicateOf"))


def claimant(candidates: Iterable[Candidate], created_at: datetime, name: str,
             window: timedelta = WINDOW) -> str | None:
    """Of the jobs holding the same key, the one this job duplicates, or None.

    The earliest job holds the key for the window; a job created in that window duplicates it. Equal creation
    times (one-second resolution) are ordered first by the operator's earlier verdicts, which stand: a job it
    already let run (undecided False) comes before one it has not looked at; then by name, so that every
    observer picks the same one.
    """
    holder_: Candidate | None = None
    for other in sorted(candidates):
        if holder_ is None or not still_claimed(holder_[0], other[0], window):
            holder_ = other  # the first use, or the first use after the previous claim ran out
        if (other[0], other[2]) == (created_at, name):
            return None if holder_ == other else holder_[2]
    return None


def holder(candidates: Iterable[Candidate], now: datetime, window: timedelta = WINDOW) -> str | None:
    """Of the jobs carrying one key, the name of the one that holds the key now, or None when no claim is running:
    the same walk as `claimant`, asked at `now`."""
    current: Candidate | None = None
    for other in sorted(candidates):
        if current is None or not still_claimed(current[0], other[0], window):
            current = other
    return current[2] if current is not None and still_claimed(current[0], now, window) else None
