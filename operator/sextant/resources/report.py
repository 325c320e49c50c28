"""What a handler reports besides its exit code (README, "Snooze, output and progress"): a snooze (run again later,
the attempt not counted), its output (JSON, kept in the job's status) and its progress (shown while it runs).

The names and limits here are a contract shared by the SDK, the runner (pod mode), `sextant worker` and any other
worker (docs/workers.md), and the operator, which checks everything again: a hostile report is cut or refused with
a note, never a failed write.
"""

from __future__ import annotations

import json
import math
from datetime import timedelta
from typing import Any

from pydantic import Field

from .common import Model, Timestamp, json_depth, parse_duration
from .contract import PROTOCOL

# A command asks for a snooze by exiting with this code, the delay in the file SNOOZE_FILE_ENV names. (The SDK's
# Snooze exits the same way in an attempt pod.) Next to NonRetryableError's 86.
SNOOZE_EXIT_CODE = PROTOCOL["snoozeExitCode"]
# Snoozes per job (reset by retry): past this, a snooze is an ordinary failed attempt (reason TooManySnoozes).
MAX_SNOOZES = 100
# The longest single snooze.
MAX_SNOOZE = timedelta(days=PROTOCOL["maxSnoozeDays"])
MAX_SNOOZE_TEXT = f"{PROTOCOL['maxSnoozeDays']} days"

# The output's cap, as compact UTF-8 JSON: over it the output is not kept and status.outputNote says why.
OUTPUT_MAX_BYTES = PROTOCOL["outputMaxBytes"]
OUTPUT_MAX_DEPTH = PROTOCOL["outputMaxDepth"]
# A pod's termination message (the kubelet keeps 4096 bytes of it) carries pod mode's report: the output it can hold.
POD_REPORT_MAX_BYTES = 4000

# Progress: a fraction in [0, 1] and a short message, written to the job at most once per PROGRESS_INTERVAL.
PROGRESS_MESSAGE_MAX = PROTOCOL["progressMessageMax"]
PROGRESS_INTERVAL = timedelta(seconds=5)

# A command handler's files (paths in its environment; each in a directory of the attempt's own).
OUTPUT_FILE_ENV = PROTOCOL["outputFileEnv"]  # JSON written there is the output (read when it exits 0)
SNOOZE_FILE_ENV = PROTOCOL["snoozeFileEnv"]  # the delay ("30s", or seconds) when it exits SNOOZE_EXIT_CODE
PROGRESS_FILE_ENV = PROTOCOL["progressFileEnv"]  # "0.4 resized 4/10": read every few seconds while it runs


def snooze_seconds(delay: Any) -> float:
    """A snooze's delay in seconds: a duration ("30s", "5m"), a number of seconds or a timedelta, from 0 to
    MAX_SNOOZE. ValueError naming the rule otherwise."""
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, (int, float)) and not isinstance(delay, bool):
        seconds = float(delay)
    elif isinstance(delay, str):
        text = delay.strip()
        try:
            seconds = float(text)
        except ValueError:
            seconds = parse_duration(text).total_seconds()
    else:
        raise ValueError(f"snooze: the delay must be a duration such as \"30s\" or a number of seconds, not "
                         f"{type(delay).__name__}")
    if not math.isfinite(seconds) or seconds < 0 or seconds > MAX_SNOOZE.total_seconds():
        raise ValueError(f"snooze: the delay must lie from 0s to {MAX_SNOOZE_TEXT}, not {delay!r}")
    return seconds


def output_json(value: Any, limit: int = OUTPUT_MAX_BYTES) -> tuple[str | None, str | None]:
    """The output as compact JSON, or why it is not kept: (json, None) or (None, note). None is no output."""
    if value is None:
        return None, None
    if json_depth(value, OUTPUT_MAX_DEPTH) > OUTPUT_MAX_DEPTH:
        return None, f"the output nests deeper than {OUTPUT_MAX_DEPTH} levels; not kept"
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return None, f"the output is not JSON ({exc}); not kept"
    size = len(text.encode())
    if size > limit:
        return None, f"the output is {size} bytes as JSON, over the cap of {limit} bytes; not kept"
    return text, None


def clip_progress_message(message: Any) -> str | None:
    if message is None:
        return None
    text = str(message)
    return text if len(text) <= PROGRESS_MESSAGE_MAX else text[:PROGRESS_MESSAGE_MAX - 1] + "…"


def check_fraction(fraction: Any) -> float:
    """A progress fraction: a number from 0 to 1. ValueError naming the rule otherwise."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not math.isfinite(fraction) or \
            not 0 <= fraction <= 1:
        raise ValueError(f"progress: the fraction must be a number from 0 to 1, not {fraction!r}")
    return float(fraction)


def parse_progress_line(text: str) -> tuple[float, str | None]:
    """A command's progress file: "0.4 resized 4/10" (the fraction, then an optional message)."""
    head, _, rest = text.strip().partition(" ")
    try:
        fraction = float(head)
    except ValueError:
        raise ValueError(f"progress: {PROGRESS_FILE_ENV} must start with a fraction from 0 to 1, not {head[:40]!r}")
    return check_fraction(fraction), clip_progress_message(rest.strip() or None)


class Progress(Model):
    """How far the running attempt has come, as its handler last said."""

    fraction: float = Field(ge=0, le=1, description="From 0 to 1.")
    message: str | None = Field(default=None, max_length=PROGRESS_MESSAGE_MAX, description="For a person.")
    sequence: int | None = Field(default=None, ge=1, description="The attempt (sequence number) that said it.")
    updated_at: Timestamp | None = Field(default=None, description="When the operator wrote it (its clock).")


# Pod mode: the runner's report rides on its container's termination message (the kubelet's ≤ 4096 bytes, in the
# pod's status: no write of its own), as one JSON object under this key; the operator reads it with the pod's end.
POD_REPORT_KEY = "sextant.dev/report"


def pod_report(*, snooze_seconds: float | None, output: str | None, output_note: str | None,
               message: str | None) -> str | None:
    """The termination message of an attempt pod whose handler snoozed or returned an output (None: nothing to
    report). An output that does not fit the message is left out, and its note says so."""
    body: dict[str, Any] = {}
    if snooze_seconds is not None:
        body["snoozeSeconds"] = snooze_seconds
    if output_note:
        body["outputNote"] = output_note[:1000]
    if message:
        body["message"] = message[-1000:]
    if output is not None:
        text = json.dumps({POD_REPORT_KEY: {**body, "output": json.loads(output)}}, separators=(",", ":"))
        if len(text.encode()) <= POD_REPORT_MAX_BYTES:
            return text
        body["outputNote"] = (f"the output is {len(output.encode())} bytes as JSON, over what a pod's termination "
                              f"message carries (about {POD_REPORT_MAX_BYTES - 200} bytes); not kept")
    return json.dumps({POD_REPORT_KEY: body}, separators=(",", ":")) if body else None


def read_pod_report(text: str | None) -> dict[str, Any] | None:
    """The runner's report in a termination message, or None when the message is not one (plain text: a failure's
    message, a log's tail)."""
    if not text or not text.startswith('{"' + POD_REPORT_KEY):
        return None
    try:
        body = json.loads(text)
    except ValueError:
        return None
    report = body.get(POD_REPORT_KEY) if isinstance(body, dict) else None
    return report if isinstance(report, dict) else None


def report_facts(status: dict[str, Any]) -> list[tuple[str, str]]:
    """For people (`sextant inspect`, the dashboard's job page): a raw Job status's progress (while it runs), snoozes
    and output, each as (label, text); what is absent or unreadable is left out."""
    facts = []
    progress = status.get("progress")
    if isinstance(progress, dict) and isinstance(progress.get("fraction"), (int, float)):
        text = f"{progress['fraction']:.0%}" + (f" {progress['message']}" if progress.get("message") else "")
        facts.append(("Progress", text + (f" (at {progress['updatedAt']})" if progress.get("updatedAt") else "")))
    if status.get("snoozes"):
        facts.append(("Snoozes", str(status["snoozes"])))
    if "output" in status:
        facts.append(("Output", json.dumps(status["output"], ensure_ascii=False)))
    if status.get("outputNote"):
        facts.append(("Output note", str(status["outputNote"])))
    return facts
