"""A queue's numbers over a window for the dashboard's charts: jobs per minute by outcome, and percentiles of how
long its jobs waited and ran."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

# The percentiles the charts draw.
FRACTIONS = (0.5, 0.95, 0.99)


@dataclass(frozen=True)
class Percentiles:
    p50: float
    p95: float
    p99: float


@dataclass(frozen=True)
class QueueStats:
    """`per_minute`: (the minute, a state, how many jobs finished in it in that state), oldest first; wait_ms: the
    last attempt's time from queued to started; run_ms: from its start to its end (None: no job in the window)."""

    namespace: str
    queue: str
    since: datetime
    until: datetime
    per_minute: list[tuple[datetime, str, int]] = field(default_factory=list)
    wait_ms: Percentiles | None = None
    run_ms: Percentiles | None = None


def percentile_cont(ordered: Sequence[float], fraction: float) -> float:
    """PostgreSQL's percentile_cont of ascending values: interpolated linearly between the two nearest ranks."""
    place = fraction * (len(ordered) - 1)
    low = int(place)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (place - low)


def percentiles(values: Sequence[float]) -> Percentiles | None:
    ordered = sorted(values)
    return Percentiles(*(percentile_cont(ordered, f) for f in FRACTIONS)) if ordered else None
