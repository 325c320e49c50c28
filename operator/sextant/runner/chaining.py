"""ctx.jobs: create the next job from a handler (job chaining), with idempotency keys."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from ..resources import inputs
from ..client import Client
from ..resources.job import job_id, object_name


class Jobs:
    def __init__(self, connect: Callable[[], Client], namespace: str) -> None:
        self._connect = connect
        self._client: Client | None = None
        self.namespace = namespace

    def create(self, *, queue: str, handler: str, payload: dict[str, Any] | None = None,
               idempotency_key: str | None = None, run_at: datetime | None = None, priority: int = 0,
               namespace: str | None = None) -> str:
        """Create a job and return its id; with a key used in the last 24 h, the id of that job.

        Raises sextant.resources.inputs.InputError (a ValueError) for a payload that is not a JSON object or is over the cap
        (256 KiB as JSON), before anything is sent; sextant.client.KeyConflict when the key is held by a job with
        another queue, handler or payload (nothing is created; its message names the fields)."""
        payload = inputs.payload("payload", payload or {})
        if self._client is None:
            self._client = self._connect()
        job, _ = self._client.create_job(namespace or self.namespace, queue=queue, handler=handler,
                                         payload=payload, idempotency_key=idempotency_key, run_at=run_at,
                                         priority=priority)
        return job_id(job["metadata"]["name"])

    def get(self, job: str, *, namespace: str | None = None) -> dict[str, Any]:
        """The job (job_8f3k2m9q or job-8f3k2m9q) as stored: its status has state, output, progress."""
        if self._client is None:
            self._client = self._connect()
        return self._client.get_job(namespace or self.namespace, object_name(job))

    def output(self, job: str, *, namespace: str | None = None) -> Any:
        """What the job's handler returned (status.output), None while it has not succeeded (or returned nothing)."""
        return (self.get(job, namespace=namespace).get("status") or {}).get("output")
