"""A request to create a job: the one shape every create path checks before anything is sent — the HTTP API's
POST /v2/jobs body (and each item of /v2/jobs:batch), the SDK's create_many items, the CLI's --from-file lines.
Its refusals name the field as a person writes it (queue, items[3].payload)."""

from __future__ import annotations

from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator

from . import inputs
from .job import CONCURRENCY_KEY_MAX


class CreateJob(BaseModel):
    """POST /v2/jobs: a new job. Unknown fields are refused (422), so a typo is not silently dropped; types are
    strict (no 'priority: false' read as 0, no number read as a time)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    queue: str = Field(min_length=1, max_length=inputs.NAME_MAX, pattern=inputs.NAME_PATTERN,
                       description="The Queue (in the namespace) the job runs on.")
    handler: str = Field(min_length=1, max_length=inputs.NAME_MAX, pattern=inputs.NAME_PATTERN,
                         description="The Handler (in the namespace) that runs it.")
    payload: dict[str, Any] = Field(default_factory=dict, description="Any JSON object, at most 256 KiB as "
                                                                      "JSON; handed to the handler.")
    run_at: AwareDatetime | None = Field(default=None, description="Do not run before this time (RFC 3339, "
                                                                   "with a time zone).")
    idempotency_key: str | None = Field(
        default=None, min_length=1, max_length=inputs.KEY_MAX,
        description="A second create with the same key in the namespace within 24 hours returns the first job "
                    "(200) instead of creating another (201).")
    priority: int = Field(default=0, ge=inputs.PRIORITY_MIN, le=inputs.PRIORITY_MAX,
                          description="Higher runs first within its queue; FIFO among equals.")
    concurrency_key: str | None = Field(
        default=None, min_length=1, max_length=CONCURRENCY_KEY_MAX,
        description="Its concurrency key (spec.concurrencyKey), e.g. a tenant: the queue's per_key_concurrency "
                    "limits running attempts per key, and keys take turns.")

    @field_validator("payload")
    @classmethod
    def _payload(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            return inputs.payload("payload", value)  # the size cap every create path shares
        except inputs.InputError as exc:
            raise ValueError(exc.message) from None

    @field_validator("queue", "handler", mode="before")
    @classmethod
    def _name(cls, value: Any, info: Any) -> Any:
        if isinstance(value, str):
            try:
                inputs.object_name(info.field_name, value, f"{info.field_name} name")
            except inputs.InputError as exc:
                raise ValueError(exc.message) from None
        return value


CREATE_FIELDS = "queue, handler, payload, run_at, idempotency_key, priority, concurrency_key"


def validation_problem(exc: ValidationError, fields: str = CREATE_FIELDS) -> tuple[str, str]:
    """A pydantic refusal as (field, message), the field as a person writes it: queue, items[3].payload. `fields`
    lists the body's own fields (for an unknown one); an item's are CREATE_FIELDS."""
    first = exc.errors()[0]
    field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".") or "body"
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = f"unknown field (the fields are {fields if len(first['loc']) == 1 else CREATE_FIELDS})"
    if first["type"] == "missing":
        message = "this field is required"
    return field, message
