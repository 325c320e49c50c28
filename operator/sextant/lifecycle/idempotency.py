"""The idempotency key's naming rule (core-concepts: Jobs): the name a keyed job gets, derived from (namespace, key,
generation), so that concurrent creates with one key race for one name and the API server lets exactly one win.
Pure: the window, the lookups and the random names of unkeyed jobs are in sextant/idempotency.py."""

from __future__ import annotations

import hashlib

# Lower-case letters and digits that cannot be misread (no 0/o, 1/l/i): names are typed by people.
ALPHABET = "23456789abcdefghjkmnpqrstuvwxyz"
ID_LENGTH = 8


def keyed_name(namespace: str, key: str, generation: int = 0) -> str:
    """The name a job with this key gets in this namespace, for the n-th 24-hour use of the key."""
    digest = int.from_bytes(hashlib.sha256(f"{namespace}\0{key}\0{generation}".encode()).digest()[:8], "big")
    chars = []
    for _ in range(ID_LENGTH):
        digest, index = divmod(digest, len(ALPHABET))
        chars.append(ALPHABET[index])
    return "job-" + "".join(chars)
