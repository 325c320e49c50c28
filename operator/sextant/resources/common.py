"""Types shared by every resource: durations (and how people read them), the camelCase model base, conditions."""

from __future__ import annotations

import functools
import re
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from .contract import PROTOCOL

# A queue, handler or schedule: a Kubernetes object name (DNS-1123 subdomain) that also fits a label value
# (pods carry it), so at most 63 characters. A namespace is a DNS-1123 label (no dots).
NAME_PATTERN = PROTOCOL["namePattern"]
NAME_MAX = PROTOCOL["nameMax"]

# Go-style durations as CEL's duration() reads them ("30s", "1h30m", "500ms"); no sign, so never negative.
DURATION_PATTERN = PROTOCOL["durationPattern"]
_DURATION_RE = re.compile(DURATION_PATTERN)
_PART_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

# The longest duration any field takes: ten years. Far beyond any sane timeout, lease or retention, and small
# enough that a time plus a duration never leaves what datetime (and CEL) can hold.
MAX_DURATION = timedelta(hours=PROTOCOL["maxDurationHours"])
MAX_DURATION_TEXT = f"{PROTOCOL['maxDurationHours']}h"
# The times Sextant reads from objects: anything outside is refused (an RFC 3339 time the API server accepts can
# say year 0 or 9999-12-31T23:59:59-01:00, which is year 10000 in UTC and overflows datetime). With MAX_DURATION,
# a time plus a duration stays far below datetime.max.
MIN_TIME = datetime(1970, 1, 1, tzinfo=timezone.utc)
MAX_TIME = datetime(9000, 1, 1, tzinfo=timezone.utc)
TIME_RANGE_TEXT = "1970-01-01T00:00:00Z to 9000-01-01T00:00:00Z"

DURATION_DESCRIPTION = (f'A duration such as "30s", "10m", "24h" or "1h30m" (units ms, s, m, h; at most '
                        f'{MAX_DURATION_TEXT}).')


def parse_duration(text: str) -> timedelta:
    """'1h30m' → timedelta(hours=1, minutes=30). Total: ValueError naming the rule for anything else (never an
    OverflowError, whatever the digits)."""
    if not isinstance(text, str):
        raise _not_a_duration(text)
    return _parse_duration(text)


def _not_a_duration(shown: object) -> ValueError:
    return ValueError(f'{shown!r} is not a duration: use a number and a unit (ms, s, m, h), e.g. "30s" or "1h30m"')


@functools.lru_cache(maxsize=1024)
def _parse_duration(text: str) -> timedelta:
    """Cached: the operator reads the same few durations of its Queues on every look at a job."""
    if len(text) > 64 or not _DURATION_RE.match(text):
        raise _not_a_duration(text[:40])
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART_RE.findall(text))
    if not seconds <= MAX_DURATION.total_seconds():  # also false for inf and nan
        raise ValueError(f"{text!r} is longer than the maximum duration, {MAX_DURATION_TEXT}")
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta) -> str:
    """The shortest duration string for a timedelta ('90s' → '1m30s')."""
    total_ms = round(delta.total_seconds() * 1000)
    if total_ms == 0:
        return "0s"
    parts = []
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, total_ms = divmod(total_ms, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


# --- durations and ages for people, as kubectl writes them (the CLI's columns, the dashboard) -----------------
def human_duration(delta: timedelta) -> str:
    """kubectl's duration.HumanDuration: 45s, 5m30s, 47m, 5h12m, 2d3h, 400d, 3y20d."""
    seconds = int(delta.total_seconds())
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(moment: datetime | None, now: datetime) -> str:
    """How long ago, kubectl-style; '<none>' when unknown."""
    return "<none>" if moment is None else human_duration(now - moment)


def until(moment: datetime | None, now: datetime) -> str:
    """A future time as 'in 4m' (or '4m ago' when it has passed)."""
    if moment is None:
        return "<none>"
    if moment >= now:
        return f"in {human_duration(moment - now)}"
    return f"{human_duration(now - moment)} ago"


def precise_duration(delta: timedelta) -> str:
    """A duration for a timeline: 850ms, 12.3s, 4m05s, 2h03m."""
    seconds = delta.total_seconds()
    if seconds < 0:
        return "<invalid>"
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _check_duration(value: str) -> str:
    parse_duration(value)
    return value


_DURATION_RULE = {
    "rule": f"duration(self) <= duration('{MAX_DURATION_TEXT}')",
    "message": f"the duration must be at most {MAX_DURATION_TEXT} (10 years)",
}

Duration = Annotated[
    str,
    Field(pattern=DURATION_PATTERN, max_length=32, description=DURATION_DESCRIPTION,
          json_schema_extra={"x-kubernetes-validations": [_DURATION_RULE]}),
    AfterValidator(_check_duration),
]


# Marks a field of any JSON value (object, array, string, number, boolean) in the CRDs: no type, unknown fields kept.
ANY_JSON = "x-sextant-any-json"


def validations(*rules: dict[str, str]) -> dict[str, Any]:
    """json_schema_extra for CEL rules the schema cannot express (copied into the CRD)."""
    return {"x-kubernetes-validations": list(rules)}


class Model(BaseModel):
    """camelCase on the wire, snake_case in Python. Unknown fields are dropped, as a structural CRD prunes them."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class Condition(Model):
    """A Kubernetes-style condition (metav1.Condition)."""

    type: str = Field(description="Succeeded, Dead, Cancelled, Running or Blocked.")
    status: str = Field(description='"True", "False" or "Unknown".')
    reason: str = Field(description="A one-word CamelCase reason for the last transition.")
    message: str = Field(default="", description="What happened, for a person.")
    last_transition_time: str | None = Field(default=None, description="When the status last changed (RFC 3339).")
    observed_generation: int | None = Field(default=None, description="The spec generation this was computed from.")


def format_time(moment: datetime, *, precise: bool = True) -> str:
    """RFC 3339 in UTC; microseconds unless precise=False (Kubernetes' own second resolution). With microseconds it
    is a metav1.MicroTime, as a coordination.k8s.io Lease's acquireTime and renewTime carry it; parse_time reads it."""
    moment = moment.astimezone(timezone.utc)
    if not precise:
        moment = moment.replace(microsecond=0)
    return moment.isoformat(timespec="microseconds" if precise else "seconds").replace("+00:00", "Z")


def parse_time(text: str | datetime | None) -> datetime | None:
    """An RFC 3339 timestamp (as Kubernetes or format_time writes it) → an aware datetime in UTC; None for nothing.

    Total: anything else (malformed, or outside MIN_TIME..MAX_TIME) is a ValueError that says so, never an
    OverflowError or TypeError. A time without an offset is read as UTC; "t" and "z" may be lower case.
    """
    if text is None or text == "":
        return None
    if isinstance(text, datetime):
        return _in_range(text, text)
    if isinstance(text, str) and len(text) <= 64:
        return _parse_text(text)
    shown = text[:40] if isinstance(text, str) else text
    raise ValueError(f"{shown!r} is not a time: use RFC 3339, e.g. 2026-12-01T10:00:00Z")


@functools.lru_cache(maxsize=1 << 14)
def _parse_text(text: str) -> datetime:
    """parse_time of a string, remembered (the latest 16k, a few MB): a job's times are read again on every look at
    it, and datetimes are immutable. What does not parse raises, and is not remembered."""
    try:
        moment = datetime.fromisoformat(text.strip().upper().replace("Z", "+00:00"))
    except ValueError as exc:
        if "out of range" in str(exc):  # year 0
            raise ValueError(f"{text} is out of range: times must lie from {TIME_RANGE_TEXT}") from None
        raise ValueError(f"{text!r} is not a time: use RFC 3339, e.g. 2026-12-01T10:00:00Z") from None
    return _in_range(moment, text)


def _in_range(moment: datetime, text: object) -> datetime:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    try:
        utc: datetime | None = moment.astimezone(timezone.utc)
    except (OverflowError, ValueError):
        utc = None
    if utc is None or not MIN_TIME <= utc <= MAX_TIME:
        raise ValueError(f"{text!s} is out of range: times must lie from {TIME_RANGE_TEXT}")
    return utc


def time_or_none(text: Any) -> datetime | None:
    """parse_time for a value that is only a hint (a lease's renewal, a container's start): unreadable is absent."""
    try:
        return parse_time(text)
    except ValueError:
        return None


def _check_time(value: str | None) -> str | None:
    parse_time(value)
    return value


# A time kept as the string it was written as (statuses): checked when the object is read, so that the rules
# never meet a time they cannot compute with.
Timestamp = Annotated[str, AfterValidator(_check_time)]


def json_depth(value: Any, limit: int) -> int:
    """How deeply a JSON value nests (a scalar 0, [] or {} 1), counted without recursion and only up to limit + 1:
    a payload 10,000 levels deep is answered in a few steps, and never overflows the stack."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        depth += 1
        if depth > limit:
            return depth
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in children if isinstance(child, (dict, list)))
    return deepest


def problems(exc: Any, prefix: str = "") -> str:
    """A pydantic ValidationError as one line naming each field (camelCase, as in the YAML) and its rule."""
    out = []
    for error in exc.errors():
        where = ".".join(to_camel(str(p)) if isinstance(p, str) else f"[{p}]" for p in error.get("loc", ()))
        message = str(error.get("msg", "")).removeprefix("Value error, ")
        where = where.replace(".[", "[")
        out.append(f"{prefix}{where}: {message}" if where else f"{prefix.rstrip('.')}: {message}" if prefix
                   else message)
    return "; ".join(out)
