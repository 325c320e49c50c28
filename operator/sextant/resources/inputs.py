"""Checks of what people type, shared by the CLI and the HTTP API: ids, names, payloads, times, keys.

Pure functions; each raises InputError naming the field and saying what a valid value looks like, so that
bad input is refused before anything is sent to the API server (and nothing changes). At the end, the argparse
types that every command's flags share (the CLI's, the worker's, the operator's): bad usage, exit 2.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from .common import NAME_MAX, NAME_PATTERN, parse_duration
from .contract import ENV_IDEMPOTENCY_WINDOW, PROTOCOL
from .job import (CONCURRENCY_KEY_MAX, ID_ALPHABET, ID_LENGTH, IDEMPOTENCY_WINDOW, MAX_PRIORITY, MIN_PRIORITY, State,
                  payload_refusal)

_NAME_RE = re.compile(NAME_PATTERN)
# A namespace is a DNS-1123 label (no dots).
NAMESPACE_PATTERN = PROTOCOL["namespacePattern"]
_NAMESPACE_RE = re.compile(NAMESPACE_PATTERN)
# A job id in either spelling: job_8f3k2m9q or job-8f3k2m9q (any object name is accepted too).
JOB_ID_PATTERN = PROTOCOL["jobIdPattern"]
_JOB_ID_RE = re.compile(JOB_ID_PATTERN)
KEY_MAX = PROTOCOL["keyMax"]
STATES = [s.value for s in State]
PRIORITY_MIN, PRIORITY_MAX = MIN_PRIORITY, MAX_PRIORITY


class InputError(ValueError):
    """Invalid input; `field` names what was wrong (a CLI flag or an API field)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def job_name(field: str, value: str) -> str:
    """A job id in either spelling → the object name (job_8f3k2m9q → job-8f3k2m9q)."""
    if not isinstance(value, str) or not value:
        raise InputError(field, "a job id is required, e.g. job_8f3k2m9q")
    if len(value) > NAME_MAX or not _JOB_ID_RE.match(value):
        raise InputError(field, f"{value!r} is not a job id: ids look like job_8f3k2m9q (lower-case letters, "
                                f"digits, '-', '_' or '.', at most {NAME_MAX} characters)")
    return value.replace("_", "-")


def object_name(field: str, value: str, what: str = "name") -> str:
    """A queue, handler or schedule name: a DNS-1123 label."""
    if not isinstance(value, str) or not value:
        raise InputError(field, f"a {what} is required")
    if len(value) > NAME_MAX or not _NAME_RE.match(value):
        raise InputError(field, f"{value!r} is not a valid {what}: use lower-case letters, digits, '-' and '.', "
                                f"starting and ending with a letter or digit, at most {NAME_MAX} characters")
    return value


def namespace(field: str, value: str) -> str:
    if not isinstance(value, str) or not value:
        raise InputError(field, "a namespace is required")
    if len(value) > NAME_MAX or not _NAMESPACE_RE.match(value):
        raise InputError(field, f"{value!r} is not a valid namespace: use lower-case letters, digits and '-', "
                                f"starting and ending with a letter or digit, at most {NAME_MAX} characters")
    return value


def payload_text(field: str, text: str) -> dict[str, Any]:
    """A payload given as JSON text: it must be a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(field, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    return payload(field, value)


def payload(field: str, value: Any) -> dict[str, Any]:
    """A JSON object within the size cap (resources.job.PAYLOAD_MAX_BYTES): the one check of every create path."""
    if not isinstance(value, dict):
        kind = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
                type(None): "null"}.get(type(value), type(value).__name__)
        raise InputError(field, f"the payload must be a JSON object ({{...}}), got {kind}")
    too_large = payload_refusal(value)
    if too_large:
        raise InputError(field, too_large)
    return value


def _key(field: str, value: str, what: str, limit: int) -> str:
    if not isinstance(value, str) or not value:
        raise InputError(field, f"{what} must not be empty")
    if len(value) > limit:
        raise InputError(field, f"{what} has at most {limit} characters, got {len(value)}")
    return value


def idempotency_key(field: str, value: str) -> str:
    return _key(field, value, "an idempotency key", KEY_MAX)


def concurrency_key(field: str, value: str) -> str:
    """A job's concurrency key (spec.concurrencyKey): a tenant, a customer id."""
    return _key(field, value, "a concurrency key", CONCURRENCY_KEY_MAX)


def priority(field: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(field, f"the priority must be an integer, got {value!r}")
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise InputError(field, f"the priority must be between {PRIORITY_MIN} and {PRIORITY_MAX}")
    return value


def state(field: str, value: str) -> str:
    if value not in STATES:
        raise InputError(field, f"{value!r} is not a state; use one of {', '.join(STATES)}")
    return value


def run_at(field: str, text: str) -> datetime:
    """An RFC 3339 time with a time zone ("2026-12-01T10:00:00Z", "2026-12-01T11:00:00+01:00")."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise InputError(field, f"{text!r} is not a time: use RFC 3339, e.g. 2026-12-01T10:00:00Z") from None
    if moment.tzinfo is None:
        raise InputError(field, f"{text!r} has no time zone: add Z (UTC) or an offset such as +01:00")
    return moment.astimezone(timezone.utc)


def delay(field: str, text: str, now: datetime) -> datetime:
    """--in 10m → now + 10 minutes."""
    try:
        return now + parse_duration(text)
    except ValueError:
        raise InputError(field, f"{text!r} is not a duration: use a number and a unit (ms, s, m, h), "
                                "e.g. 30s, 10m or 1h30m") from None


def timeout(field: str, text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError:
        raise InputError(field, f"{text!r} is not a duration: use e.g. 30s, 10m or 1h") from None


def idempotency_window(environ: Mapping[str, str]) -> timedelta:
    """How long an idempotency key stays claimed: 24 hours, or SEXTANT_IDEMPOTENCY_WINDOW (a positive duration).
    ValueError naming the variable for anything else."""
    text = environ.get(ENV_IDEMPOTENCY_WINDOW) or None
    if text is None:
        return IDEMPOTENCY_WINDOW
    try:
        value = parse_duration(text)
    except ValueError as exc:
        raise ValueError(f"{ENV_IDEMPOTENCY_WINDOW}: {exc}") from None
    if value <= timedelta(0):
        raise ValueError(f"{ENV_IDEMPOTENCY_WINDOW}: the idempotency window must be longer than 0s, got {text!r}")
    return value


def random_name() -> str:
    """The name of a job created without an idempotency key: job- and eight unambiguous characters."""
    return "job-" + "".join(secrets.choice(ID_ALPHABET) for _ in range(ID_LENGTH))


def selector_value(text: str) -> str:
    """A field selector's value, escaped as the API server reads it (backslash, comma and equals sign)."""
    return text.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def command_env(field: str, text: str) -> tuple[str, str | None]:
    """`sextant worker --command-env`: NAME (passed from the worker's own environment) or NAME=VALUE (set) →
    (NAME, VALUE or None). The SEXTANT_* variables are the attempt's own, and the worker's KUBECONFIG is never
    passed on (docs/workers.md, "A command's environment")."""
    if not isinstance(text, str):
        raise InputError(field, f"{text!r} is not NAME or NAME=VALUE")
    name, equals, value = text.partition("=")
    if not _ENV_NAME_RE.match(name):
        raise InputError(field, f"{text!r} is not NAME or NAME=VALUE: a variable's name is letters, digits and '_', "
                                "not starting with a digit")
    if name.startswith("SEXTANT_"):
        raise InputError(field, f"{name}: the SEXTANT_* variables are the attempt's own, set by the worker")
    if name == "KUBECONFIG" and not equals:
        raise InputError(field, "KUBECONFIG: the worker's own credentials are never passed to a command (give "
                                "KUBECONFIG=PATH for a kubeconfig of the command's own)")
    return name, (value if equals else None)


# --- argparse types ---------------------------------------------------------------------------------------------
def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def port(text: str, *, zero: bool = False) -> int:
    """A TCP port, 1-65535; with zero=True also 0 (the system picks a free one)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    low = 0 if zero else 1
    if not low <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port ({low} to 65535" + ("; 0 picks a free one)" if zero else ")"))
    return value


def port_or_zero(text: str) -> int:
    return port(text, zero=True)
