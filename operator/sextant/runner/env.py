"""What the operator tells an attempt pod, through environment variables (controller/pods.py sets them).

The payload is not among them (one variable over 128 KiB makes exec fail with E2BIG): the runner reads it from the
Job (payload.py). Only a Handler with `heartbeat: false`, whose image may lack the runner, gets a small one as
SEXTANT_PAYLOAD."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..resources.common import parse_duration
from ..resources.job import PAYLOAD_ENV_MAX_BYTES, job_id, payload_json


def attempt_variables(*, job_name: str, job_uid: str, namespace: str, queue: str, handler: str, attempt: int,
                      run: int, scheduled_at: str, payload: dict[str, Any], lease_name: str, lease_duration: str,
                      cancel_grace: str, heartbeat: bool) -> dict[str, str]:
    """The SEXTANT_* variables a handler gets, in an attempt pod (controller/pods.py) and from `sextant worker`
    (worker/execution.py) alike: AttemptEnv.from_environ reads them back."""
    text = payload_json(payload)
    small = len(text.encode()) <= PAYLOAD_ENV_MAX_BYTES  # never one huge variable: over 128 KiB, exec fails (E2BIG)
    return {
        "SEXTANT_JOB_ID": job_id(job_name),
        "SEXTANT_JOB_NAME": job_name,
        "SEXTANT_JOB_UID": job_uid,
        "SEXTANT_NAMESPACE": namespace,
        "SEXTANT_QUEUE": queue,
        "SEXTANT_HANDLER": handler,
        "SEXTANT_ATTEMPT": str(attempt),
        "SEXTANT_RUN": str(run),
        "SEXTANT_SCHEDULED_AT": scheduled_at,
        **({"SEXTANT_PAYLOAD": text} if small else {}),
        "SEXTANT_LEASE_NAME": lease_name,
        "SEXTANT_LEASE_DURATION": lease_duration,
        "SEXTANT_CANCEL_GRACE": cancel_grace,
        "SEXTANT_HEARTBEAT": "true" if heartbeat else "false",
    }


@dataclass(frozen=True)
class AttemptEnv:
    job_id: str
    job_name: str
    job_uid: str
    namespace: str
    queue: str
    handler: str
    attempt: int
    run: int
    scheduled_at: str
    payload: dict[str, Any] | None  # None: read it from the Job
    lease_name: str | None
    lease_duration: timedelta
    cancel_grace: timedelta
    pod_name: str
    heartbeat: bool
    pod_uid: str = ""

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None) -> AttemptEnv:
        env = os.environ if environ is None else environ
        missing = [k for k in ("SEXTANT_JOB_NAME", "SEXTANT_NAMESPACE", "SEXTANT_HANDLER") if not env.get(k)]
        if missing:
            raise RuntimeError(f"not started by Sextant: {', '.join(missing)} not set (sextant run is the "
                               "entrypoint of attempt pods, which the operator creates)")
        name = env["SEXTANT_JOB_NAME"]
        return cls(
            job_id=env.get("SEXTANT_JOB_ID", name),
            job_name=name,
            job_uid=env.get("SEXTANT_JOB_UID", ""),
            namespace=env["SEXTANT_NAMESPACE"],
            queue=env.get("SEXTANT_QUEUE", ""),
            handler=env["SEXTANT_HANDLER"],
            attempt=int(env.get("SEXTANT_ATTEMPT", "1")),
            run=int(env.get("SEXTANT_RUN", "1")),
            scheduled_at=env.get("SEXTANT_SCHEDULED_AT", ""),
            payload=json.loads(env["SEXTANT_PAYLOAD"]) if env.get("SEXTANT_PAYLOAD") else None,
            lease_name=env.get("SEXTANT_LEASE_NAME") or None,
            lease_duration=parse_duration(env.get("SEXTANT_LEASE_DURATION", "30s")),
            cancel_grace=parse_duration(env.get("SEXTANT_CANCEL_GRACE", "10s")),
            pod_name=env.get("SEXTANT_POD_NAME") or env.get("HOSTNAME", ""),
            heartbeat=env.get("SEXTANT_HEARTBEAT", "true") != "false",
            pod_uid=env.get("SEXTANT_POD_UID", ""),
        )
