"""ctx.jobs: create the next job (or many) from a handler (job chaining), with idempotency keys."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, cast

from pydantic import ValidationError

from ..client import Client, CreateResult, JobRequest
from ..resources import inputs, request
from ..resources.job import job_id, object_name


class Jobs:
    def __init__(self, connect: Callable[[], Client], namespace: str) -> None:
        self._connect = connect
        self._client: Client | None = None
        self.namespace = namespace

    def create(self, *, queue: str, handler: str, payload: dict[str, Any] | None = None,
               idempotency_key: str | None = None, run_at: datetime | None = None, priority: int = 0,
               namespace: str | None = None, concurrency_key: str | None = None) -> str:
        """Create a job and return its id; with a key used in the last 24 h, the id of that job.

        Raises sextant.resources.inputs.InputError (a ValueError) for a payload that is not a JSON object or is over the cap
        (256 KiB as JSON) or an empty or over-long concurrency_key, before anything is sent; sextant.client.KeyConflict when the key is held by a job with
        another queue, handler or payload (nothing is created; its message names the fields)."""
        payload = inputs.payload("payload", payload or {})
        if concurrency_key is not None:
            inputs.concurrency_key("concurrency_key", concurrency_key)
        job, _ = self._connected().create_job(namespace or self.namespace, queue=queue, handler=handler,
                                              payload=payload, idempotency_key=idempotency_key, run_at=run_at,
                                              priority=priority, concurrency_key=concurrency_key)
        return job_id(job["metadata"]["name"])

    def create_many(self, jobs: Iterable[Mapping[str, Any]], *, namespace: str | None = None) -> list[CreateResult]:
        """Create many jobs in one call: each item has create()'s keyword arguments (queue, handler, payload,
        idempotency_key, run_at, priority, concurrency_key). Returns one sextant.client.CreateResult per item, in order: .id (the
        job's, or that of the job already holding its key), .created, .error (sextant.client.KeyConflict, or the
        API server's refusal) and .status (201, 200, 409, ...), as POST /v2/jobs:batch answers.

        Every item is checked first, as the HTTP API checks a body: InputError naming jobs[i].FIELD, and nothing
        is created."""
        wanted: list[JobRequest] = []
        for index, item in enumerate(jobs):
            try:
                spec = request.CreateJob.model_validate(dict(item))
            except ValidationError as exc:
                field, message = request.validation_problem(exc)
                raise inputs.InputError(f"jobs[{index}].{field}", message) from None
            wanted.append(cast(JobRequest, spec.model_dump()))
        return self._connected().create_many(namespace or self.namespace, wanted)

    def _connected(self) -> Client:
        if self._client is None:
            self._client = self._connect()
        return self._client

    def get(self, job: str, *, namespace: str | None = None) -> dict[str, Any]:
        """The job (job_8f3k2m9q or job-8f3k2m9q) as stored: its status has state, output, progress."""
        return self._connected().get_job(namespace or self.namespace, object_name(job))

    def output(self, job: str, *, namespace: str | None = None) -> Any:
        """What the job's handler returned (status.output), None while it has not succeeded (or returned nothing)."""
        return (self.get(job, namespace=namespace).get("status") or {}).get("output")
