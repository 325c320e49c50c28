"""Idempotency keys (core-concepts: Jobs): a second job with the same key within 24 hours is the first one.

Atomic without a lock: a job created with a key gets a name derived from (namespace, key, generation), so
concurrent creates race for one name and the API server lets exactly one win. After 24 hours the key may be
used again: the next generation's name is free. A job applied directly under another name that reuses a
claimed key is caught by the operator with `duplicate_of`.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta

WINDOW = timedelta(hours=24)
# Lower-case letters and digits that cannot be misread (no 0/o, 1/l/i): names are typed by people.
ALPHABET = "23456789abcdefghjkmnpqrstuvwxyz"
ID_LENGTH = 8


def random_name() -> str:
    return "job-" + "".join(secrets.choice(ALPHABET) for _ in range(ID_LENGTH))


def keyed_name(namespace: str, key: str, generation: int = 0) -> str:
    """The name a job with this key gets in this namespace, for the n-th 24-hour use of the key."""
    digest = int.from_bytes(hashlib.sha256(f"{namespace}\0{key}\0{generation}".encode()).digest()[:8], "big")
    chars = []
    for _ in range(ID_LENGTH):
        digest, index = divmod(digest, len(ALPHABET))
        chars.append(ALPHABET[index])
    return "job-" + "".join(chars)


def still_claimed(claimed_at: datetime, now: datetime) -> bool:
    """A key claimed at claimed_at still returns that job now."""
    return now - claimed_at < WINDOW


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
