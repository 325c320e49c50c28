"""The delay before the next attempt: exponential with factor, cap and jitter, or fixed."""

from __future__ import annotations

import hashlib
import math
from datetime import timedelta

from ..resources.queue import Backoff


def jitter_sample(uid: str, sequence: int) -> float:
    """A number in [0, 1) fixed per (job, sequence), so a re-evaluated decision never changes its delay."""
    digest = hashlib.sha256(f"{uid}/{sequence}".encode()).digest()
    # 53 bits, exactly what a float holds: 64 bits divided by 2**64 can round up to 1.0.
    return (int.from_bytes(digest[:8], "big") >> 11) / 2**53


def backoff_delay(backoff: Backoff, failed_attempt: int, sample: float) -> timedelta:
    """The delay after attempt number `failed_attempt` (1-based) failed.

    exponential: initial × factor^(n−1), capped at max; fixed: initial. Jitter spreads the delay by
    ±jitter (sample 0 → −jitter, sample → 1 → +jitter) and never pushes an exponential delay past max.
    """
    if failed_attempt < 1:
        raise ValueError("failed_attempt counts from 1")
    initial = backoff.initial_delta.total_seconds()
    if backoff.policy == "fixed":
        base, cap = initial, None
    else:
        cap = backoff.max_delta.total_seconds()
        # Closed form, not a loop: a job that fails for a long time has a huge attempt number, factor**n
        # overflows, and multiplying n times hangs when the cap is never reached (factor 1, initial 0s).
        n = failed_attempt - 1
        if initial >= cap:
            base = cap
        elif n == 0 or initial == 0 or backoff.factor == 1:
            base = initial
        elif n * math.log(backoff.factor) >= math.log(cap / initial):
            base = cap
        else:
            base = min(initial * backoff.factor**n, cap)
    spread = base * backoff.jitter * (2 * sample - 1)
    delay = max(0.0, base + spread)
    if cap is not None:
        delay = min(delay, cap)
    return timedelta(seconds=delay)
