"""The Python SDK: register handlers, receive the job, chain the next one.

    from sextant.sdk import handler, NonRetryableError

    @handler("charge-card")
    def charge(job, ctx):
        charge = billing.charge(job.payload["orderId"])
        ctx.jobs.create(queue="emails", handler="send-receipt",
                        payload={"orderId": job.payload["orderId"], "chargeId": charge.id},
                        idempotency_key=f"receipt-{job.payload['orderId']}")

Run it in the attempt pod with `sextant run --module myapp.handlers`, on a worker with `sextant worker --module
myapp.handlers`, or inside your own asyncio program with `sextant.worker.Worker(handlers=[charge])` (README). A
handler may be `def` (it runs in a thread, so the lease keeps being renewed) or `async def`. Raising fails the attempt with the exception's
message; raising NonRetryableError ends the job dead at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# The runner exits with this code for NonRetryableError; the operator always treats it as non-retryable.
from .lifecycle.attempts import RUNNER_NON_RETRYABLE
from .resources import report
from .resources.report import check_fraction, clip_progress_message, snooze_seconds

NON_RETRYABLE_EXIT_CODE = RUNNER_NON_RETRYABLE
# A command handler snoozes by exiting with this code (the delay in $SEXTANT_SNOOZE_FILE); Snooze does the same.
SNOOZE_EXIT_CODE = report.SNOOZE_EXIT_CODE


_HANDLERS: dict[str, Callable[..., Any]] = {}


class NonRetryableError(Exception):
    """The attempt failed and retrying cannot help (bad input, a refused card): the job ends dead."""


class Snooze(Exception):
    """Run the job again after `delay` ("30s", seconds, a timedelta; at most 7 days): the job goes `scheduled`, this
    attempt is not counted against maxAttempts (at most 100 snoozes per job; past that a snooze counts as a failed
    attempt)."""

    def __init__(self, delay: Any) -> None:
        self.seconds = snooze_seconds(delay)  # a bad delay is the handler's ValueError, at the call
        super().__init__(f"snoozed for {self.seconds:g}s")


def handler(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a function as the handler `name` (the Handler resource's name)."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in _HANDLERS and _HANDLERS[name] is not fn:
            raise ValueError(f"handler {name!r} is registered twice")
        _HANDLERS[name] = fn
        return fn

    return register


def registered() -> dict[str, Callable[..., Any]]:
    return dict(_HANDLERS)


@dataclass(frozen=True)
class Job:
    id: str  # job_8f3k2m9q
    name: str  # job-8f3k2m9q, the object's name
    namespace: str
    queue: str
    handler: str
    attempt: int
    payload: dict[str, Any]
    scheduled_at: str


@dataclass
class Context:
    jobs: Any  # sextant.runner.chaining.Jobs: create() the next job
    cancelled: threading.Event = field(default_factory=threading.Event)  # set on SIGTERM (cancel, timeout)
    # Told of each progress report (the runner's lease keeper, or the worker's next write): it must not block.
    on_progress: Callable[[float, str | None], None] | None = None

    def snooze(self, delay: Any) -> None:
        """Run the job again after `delay` without counting this attempt: raises Snooze (nothing after it runs)."""
        raise Snooze(delay)

    def progress(self, fraction: float, message: str | None = None) -> None:
        """How far the handler has come: a fraction from 0 to 1 and a short message (at most 200 characters).
        Cheap to call often: the job shows the latest, written at most once every 5 seconds."""
        value = check_fraction(fraction)
        if self.on_progress is not None:
            self.on_progress(value, clip_progress_message(message))
