"""Idempotency keys: a second job with the same key within 24 hours is the first one.

Atomic without a lock: a job created with a key gets a name derived from (namespace, key, generation) (`keyed_name`,
which names schedules' ticks too), so concurrent creates race for one name and the API server lets exactly one win.
After the window (24 hours) the key may be used again: the next generation's name is free. A job applied directly
under another name that reuses a claimed key is caught by the operator (`claimant`, recorded as `duplicateOf`), and
found by every create path (CLI, HTTP API, SDK) before it creates anything (`holder`): one rule for both, with the
same `undecided` tie-break, so that the client and the operator always name the same job. A create whose key is
held by a job that does something else (`differences`: another queue, handler or payload) is refused, not answered
with that job.

Pure: the window is passed in (resources/inputs.idempotency_window reads SEXTANT_IDEMPOTENCY_WINDOW once per
process, for tests and experiments; the operator and every client must then be given the same value).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from ..resources.common import parse_time
from ..resources.job import ID_ALPHABET as ALPHABET
from ..resources.job import ID_LENGTH, IDEMPOTENCY_WINDOW, written_status

WINDOW = IDEMPOTENCY_WINDOW

# (creation time, undecided, name): what the rule knows of each job carrying one key.
Candidate = tuple[datetime, bool, str]


# What makes a create with a held key "the same job" as its holder: what the job does. Not runAt, which says when: a
# repeated `--in 10m` (or run_at=now+delta) names another moment each time it is sent; not priority, which may be
# patched after creation (it is not immutable), so that a faithful replay would be refused after a bump.
SAME_JOB = ("queue", "handler", "payload")


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1 (Python says it is), while 1 is 1.0 (the API server may write 1.0 back as 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys()
                and all(_same_json(a[k], b[k]) for k in a))
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(map(_same_json, a, b))
    return a == b


def _field(spec: Mapping[str, Any], field: str) -> Any:
    """A spec's field; a missing payload is {}, as every create writes it."""
    return (spec.get(field) or {}) if field == "payload" else spec.get(field)


def differences(held: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    """The SAME_JOB fields (spec keys, in that order) in which the spec of a create (`wanted`) differs from the spec
    of the job holding its key (`held`); [] for a replay."""
    return [f for f in SAME_JOB if not _same_json(_field(held, f), _field(wanted, f))]


def _shown(value: Any, limit: int = 40) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def conflict_message(key: str, holder_id: str, held: Mapping[str, Any], wanted: Mapping[str, Any],
                     fields: list[str], prefix: str = "spec.") -> str:
    """Why a create is refused, in one line: "idempotency key 'k' is held by job job_x with another spec.queue
    (emails, not sms)": each differing field, named with `prefix`, with the holder's value, then the create's."""
    what = " and ".join(f"{prefix}{f} ({_shown(_field(held, f))}, not {_shown(_field(wanted, f))})" for f in fields)
    return (f"idempotency key {key!r} is held by job {holder_id} with another {what}: a key names one job within "
            "its window; give another job another key")


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
    try:
        created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    except ValueError:
        return None
    return claim_end((job.get("spec") or {}).get("idempotencyKey"), created, window)


def claim_end(key: str | None, created_at: datetime | None, window: timedelta = WINDOW) -> datetime | None:
    """claim_ends of a job read already: its key and its creation."""
    return created_at + window if key and created_at is not None else None


def undecided(status: Mapping[str, Any] | None, started: bool) -> bool:
    """Not yet let run by the operator: no state and no attempt started (a pod of it exists: admitted on first
    sight, its state is written when the pod starts), or itself a duplicate. The order `claimant` and `holder`
    break ties by; the operator and every client ask it with the same facts."""
    status = written_status(dict(status) if status else None)  # the CRD's default state is no decision
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
