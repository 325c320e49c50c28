"""Types shared by every resource: durations, the camelCase model base, conditions."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# Go-style durations as CEL's duration() reads them ("30s", "1h30m", "500ms"); no sign, so never negative.
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_DURATION_RE = re.compile(DURATION_PATTERN)
_PART_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

DURATION_DESCRIPTION = 'A duration such as "30s", "10m", "24h" or "1h30m" (units ms, s, m, h).'


def parse_duration(text: str) -> timedelta:
    """'1h30m' → timedelta(hours=1, minutes=30). Raises ValueError naming the rule."""
    if not isinstance(text, str) or not _DURATION_RE.match(text):
        raise ValueError(f'{text!r} is not a duration: use a number and a unit (ms, s, m, h), e.g. "30s" or "1h30m"')
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART_RE.findall(text))
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


def _check_duration(value: str) -> str:
    parse_duration(value)
    return value


Duration = Annotated[
    str,
    Field(pattern=DURATION_PATTERN, max_length=32, description=DURATION_DESCRIPTION),
]


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
    """RFC 3339 in UTC; microseconds unless precise=False (Kubernetes' own second resolution)."""
    moment = moment.astimezone(timezone.utc)
    if not precise:
        moment = moment.replace(microsecond=0)
    return moment.isoformat(timespec="microseconds" if precise else "seconds").replace("+00:00", "Z")


def parse_time(text: str | None) -> datetime | None:
    """An RFC 3339 timestamp (as Kubernetes or format_time writes it) → an aware datetime."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)
