"""A small synchronous client for Sextant's resources, shared by the CLI and the SDK (httpx)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import httpx

from . import idempotency
from .kubeconfig import Connection
from .resources import API_VERSION, GROUP, VERSION
from .resources.common import format_time, parse_time
from .resources.job import object_name


class ClientError(Exception):
    """An API answer that is not a success; str() is the API server's own message."""

    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.status, self.reason = status, reason


def _raise_for(resp: httpx.Response) -> None:
    if resp.status_code < 300:
        return
    try:
        body = resp.json()
        message, reason = body.get("message", resp.text), body.get("reason", "")
    except ValueError:
        message, reason = resp.text, ""
    raise ClientError(resp.status_code, message, reason)


class Client:
    def __init__(self, conn: Connection, user_agent: str = "sextant-cli", timeout: float = 30) -> None:
        self.conn = conn
        self.http = httpx.Client(base_url=conn.server, verify=conn.ssl_context, timeout=timeout,
                                 headers={"User-Agent": user_agent, "Accept": "application/json"})

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        headers = {**self.conn.headers(), **kwargs.pop("headers", {})}
        resp = self.http.request(method, path, headers=headers, **kwargs)
        _raise_for(resp)
        return resp.json() if resp.content else {}

    # --- jobs ----------------------------------------------------------------------------------------------
    @staticmethod
    def jobs_path(namespace: str | None, name: str = "") -> str:
        base = f"/apis/{GROUP}/{VERSION}" + (f"/namespaces/{namespace}" if namespace else "") + "/jobs"
        return f"{base}/{name}" if name else base

    def get_job(self, namespace: str, job: str) -> dict[str, Any]:
        return self.request("GET", self.jobs_path(namespace, object_name(job)))

    def create_job(self, namespace: str, *, queue: str, handler: str, payload: dict[str, Any] | None = None,
                   run_at: datetime | None = None, idempotency_key: str | None = None, priority: int = 0,
                   labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
                   now: datetime | None = None) -> tuple[dict[str, Any], bool]:
        """Create a job; returns (job, created). With a key already used within 24 h: (that job, False)."""
        spec: dict[str, Any] = {"queue": queue, "handler": handler, "payload": payload or {}, "priority": priority}
        if run_at is not None:
            spec["runAt"] = format_time(run_at, precise=False)
        if idempotency_key is not None:
            spec["idempotencyKey"] = idempotency_key
        for generation in range(1000):
            name = (idempotency.keyed_name(namespace, idempotency_key, generation) if idempotency_key
                    else idempotency.random_name())
            body = {"apiVersion": API_VERSION, "kind": "Job",
                    "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
                    "spec": spec}
            try:
                return self.request("POST", self.jobs_path(namespace), json=body), True
            except ClientError as exc:
                if exc.status != 409:
                    raise
            if idempotency_key is None:
                continue  # a random name collided: draw another
            existing = self.get_job(namespace, name)
            created = parse_time(existing["metadata"]["creationTimestamp"])
            if (existing["spec"].get("idempotencyKey") == idempotency_key
                    and idempotency.still_claimed(created, now or datetime.now(timezone.utc))):
                return existing, False
            # The key's claim ran out (or, rarely, another key hashed to this name): the next generation.
        raise ClientError(409, f"no free name for idempotency key {idempotency_key!r}")
