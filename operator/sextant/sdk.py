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

NON_RETRYABLE_EXIT_CODE = RUNNER_NON_RETRYABLE


_HANDLERS: dict[str, Callable[..., Any]] = {}


class NonRetryableError(Exception):
    """The attempt failed and retrying cannot help (bad input, a refused card): the job ends dead."""


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
