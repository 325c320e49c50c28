"""The attempt's payload: read from its Job (one GET) and written to the handler's stdin, never passed through one
environment variable of the pod (over 128 KiB, exec fails with E2BIG). The same GET completes a slim pod's
identity (env.py: SEXTANT_ATTEMPT_REF)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..kube.client import ApiError, Kube
from ..resources import contract
from ..resources.job import PAYLOAD_ENV_MAX_BYTES, payload_json
from .env import AttemptEnv


class PayloadError(Exception):
    """The payload cannot be read: the attempt cannot start (not the handler's fault)."""


async def read_attempt(kube: Kube, env: AttemptEnv) -> AttemptEnv:
    """The attempt completed by its Job (payload; for a slim pod also queue, handler and scheduled time); refused
    if the Job of that name is another one (deleted and re-created)."""
    try:
        job = await kube.get(contract.jobs_path(env.namespace, env.job_name))
    except ApiError as exc:
        hint = (" (the pod's service account needs `get` on jobs.sextant.dev in its namespace)"
                if exc.status in (401, 403) else "")
        raise PayloadError(f"cannot read job {env.namespace}/{env.job_name} for its payload: {exc}{hint}") from None
    uid = job["metadata"].get("uid")
    if env.job_uid and uid != env.job_uid:
        raise PayloadError(f"job {env.namespace}/{env.job_name} is not this attempt's any more (uid {uid}, "
                           f"expected {env.job_uid}): it was deleted and created again")
    payload = (job.get("spec") or {}).get("payload") or {}
    if not isinstance(payload, dict):
        raise PayloadError(f"job {env.namespace}/{env.job_name}: spec.payload is not a JSON object")
    try:
        return env.from_job(job, payload)
    except ValueError as exc:
        raise PayloadError(f"job {env.namespace}/{env.job_name}: {exc}") from None


def handler_environ(payload: dict[str, Any], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The handler process's environment: the runner's (expanded from a slim pod's, AttemptEnv.expanded), with
    SEXTANT_PAYLOAD only while the payload is small (for handlers written against it; stdin always has it)."""
    env = dict(os.environ if base is None else base)
    text = payload_json(payload)
    if len(text.encode()) <= PAYLOAD_ENV_MAX_BYTES:
        env["SEXTANT_PAYLOAD"] = text
    else:
        env.pop("SEXTANT_PAYLOAD", None)
    return env
