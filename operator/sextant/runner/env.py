"""What the operator tells an attempt pod, through environment variables (controller/pods.py sets them), and what
the runner makes of them for the handler.

A pod of a Handler with `heartbeat: true` (the default; its image runs `sextant run`) carries ONE variable from
the operator, SEXTANT_ATTEMPT_REF: compact JSON naming the attempt (namespace, job, job uid, sequence, attempt,
pod, leaseDuration, cancelGrace), plus two from the downward API that cannot be known before the pod exists
(SEXTANT_POD_UID, SEXTANT_NODE_NAME). The runner reads the rest from the Job with the one GET it does for the
payload anyway, and gives the handler the same SEXTANT_* variables a pod with all of them would have
(`expanded`). Every variable of an attempt pod costs kwok and the API server on every pod; 16 of them made a
Sextant pod ~30 % dearer to simulate than a batch/v1 Job's.

A pod of a Handler with `heartbeat: false` (an image that may lack the runner) carries every variable itself, and
a payload of at most 32 KiB as SEXTANT_PAYLOAD. The payload is never passed in one large variable (over 128 KiB,
exec fails with E2BIG): the runner reads it from the Job (payload.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from ..lifecycle.reading import scheduled_at
from ..resources.common import parse_duration, parse_time
from ..resources.job import PAYLOAD_ENV_MAX_BYTES, job_id, payload_json
from ..resources.queue import QueueSpec

ATTEMPT_REF = "SEXTANT_ATTEMPT_REF"
# Where the runner writes its termination message instead of /dev/termination-log: set by the local node only
# (dev/localnode), whose processes cannot write there.
TERMINATION_LOG_ENV = "SEXTANT_TERMINATION_LOG"
# The pod's own fields (downward API in an attempt pod; the worker sets them for its processes).
POD_VARIABLES = ("SEXTANT_NODE_NAME", "SEXTANT_POD_NAME", "SEXTANT_POD_UID")
# The keys of SEXTANT_ATTEMPT_REF, all required. The previous version's operator wrote `run` for `sequence`: read too.
REF_KEYS = ("namespace", "job", "uid", "sequence", "attempt", "pod", "leaseDuration", "cancelGrace")
LEGACY_REF_SEQUENCE = "run"
QUEUE_DEFAULTS = QueueSpec()  # what a pod without SEXTANT_LEASE_DURATION or SEXTANT_CANCEL_GRACE gets


def attempt_variables(*, job_name: str, job_uid: str, namespace: str, queue: str, handler: str, attempt: int,
                      sequence: int, scheduled_at: str, payload: dict[str, Any], lease_name: str,
                      lease_duration: str, cancel_grace: str, heartbeat: bool) -> dict[str, str]:
    """The SEXTANT_* variables a handler gets (with POD_VARIABLES), from a `heartbeat: false` attempt pod
    (controller/pods.py), from the runner in any other (AttemptEnv.expanded) and from `sextant worker`
    (worker/service.py) alike: AttemptEnv.from_environ reads them back."""
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
        "SEXTANT_SEQUENCE": str(sequence),
        "SEXTANT_RUN": str(sequence),  # deprecated: SEXTANT_SEQUENCE's name in the previous version; goes in the next
        "SEXTANT_SCHEDULED_AT": scheduled_at,
        **({"SEXTANT_PAYLOAD": text} if small else {}),
        "SEXTANT_LEASE_NAME": lease_name,
        "SEXTANT_LEASE_DURATION": lease_duration,
        "SEXTANT_CANCEL_GRACE": cancel_grace,
        "SEXTANT_HEARTBEAT": "true" if heartbeat else "false",
    }


# Every name attempt_variables may set.
IDENTITY_VARIABLES = frozenset(attempt_variables(
    job_name="j", job_uid="", namespace="", queue="", handler="", attempt=1, sequence=1, scheduled_at="",
    payload={}, lease_name="", lease_duration="", cancel_grace="", heartbeat=True))


def attempt_ref(*, namespace: str, job_name: str, job_uid: str, sequence: int, attempt: int, pod_name: str,
                lease_duration: str, cancel_grace: str) -> str:
    """SEXTANT_ATTEMPT_REF: what the runner cannot read from the Job (which attempt this pod is: its sequence and
    number, and the Queue's settings it needs: its service account may read Jobs only), as compact JSON."""
    return json.dumps({"namespace": namespace, "job": job_name, "uid": job_uid, "sequence": sequence,
                       "attempt": attempt, "pod": pod_name, "leaseDuration": lease_duration,
                       "cancelGrace": cancel_grace},
                      separators=(",", ":"))


def scheduled_at_of(raw: Mapping[str, Any]) -> str:
    """scheduled_at, from a Job object as the API server returns it."""
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    created_at = parse_time(meta.get("creationTimestamp"))
    if created_at is None:
        raise ValueError("metadata.creationTimestamp is missing")
    return scheduled_at(meta.get("annotations") or {}, parse_time(spec.get("runAt")), created_at)


@dataclass(frozen=True)
class AttemptEnv:
    job_id: str
    job_name: str
    job_uid: str
    namespace: str
    queue: str  # "" until from_job, in a pod with SEXTANT_ATTEMPT_REF
    handler: str  # likewise
    attempt: int
    sequence: int
    scheduled_at: str  # likewise
    payload: dict[str, Any] | None  # None: read it from the Job
    lease_name: str | None
    lease_duration: timedelta
    cancel_grace: timedelta
    pod_name: str
    heartbeat: bool
    pod_uid: str = ""
    from_ref: bool = False  # read from SEXTANT_ATTEMPT_REF: the Job completes it (from_job)
    # The Queue's durations as the operator wrote them ("1m" stays "1m" in the handler's environment).
    lease_duration_text: str = ""
    cancel_grace_text: str = ""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> AttemptEnv:
        env = os.environ if environ is None else environ
        if env.get(ATTEMPT_REF):
            return cls.from_reference(env[ATTEMPT_REF], env)
        missing = [k for k in ("SEXTANT_JOB_NAME", "SEXTANT_NAMESPACE", "SEXTANT_HANDLER") if not env.get(k)]
        if missing:
            raise RuntimeError(f"not started by Sextant: {ATTEMPT_REF} (or {', '.join(missing)}) not set (sextant "
                               "run is the entrypoint of attempt pods, which the operator creates)")
        name = env["SEXTANT_JOB_NAME"]
        return cls(
            job_id=env.get("SEXTANT_JOB_ID", name),
            job_name=name,
            job_uid=env.get("SEXTANT_JOB_UID", ""),
            namespace=env["SEXTANT_NAMESPACE"],
            queue=env.get("SEXTANT_QUEUE", ""),
            handler=env["SEXTANT_HANDLER"],
            attempt=int(env.get("SEXTANT_ATTEMPT", "1")),
            sequence=int(env.get("SEXTANT_SEQUENCE") or env.get("SEXTANT_RUN") or "1"),
            scheduled_at=env.get("SEXTANT_SCHEDULED_AT", ""),
            payload=json.loads(env["SEXTANT_PAYLOAD"]) if env.get("SEXTANT_PAYLOAD") else None,
            lease_name=env.get("SEXTANT_LEASE_NAME") or None,
            lease_duration=parse_duration(env.get("SEXTANT_LEASE_DURATION", QUEUE_DEFAULTS.lease_duration)),
            cancel_grace=parse_duration(env.get("SEXTANT_CANCEL_GRACE", QUEUE_DEFAULTS.cancel_grace)),
            pod_name=env.get("SEXTANT_POD_NAME") or env.get("HOSTNAME", ""),
            heartbeat=env.get("SEXTANT_HEARTBEAT", "true") != "false",
            pod_uid=env.get("SEXTANT_POD_UID", ""),
        )

    @classmethod
    def from_reference(cls, text: str, environ: Mapping[str, str]) -> AttemptEnv:
        """A pod of a heartbeat Handler: the attempt from SEXTANT_ATTEMPT_REF, the pod's uid from the downward API;
        queue, handler, scheduled time and payload follow from the Job (from_job)."""
        try:
            ref = json.loads(text)
        except ValueError:
            ref = None
        if not isinstance(ref, dict):
            raise RuntimeError(f"{ATTEMPT_REF} is not a JSON object: {text[:200]!r}")
        if "sequence" not in ref and LEGACY_REF_SEQUENCE in ref:
            ref["sequence"] = ref[LEGACY_REF_SEQUENCE]  # a pod of the previous version's operator
        missing = [k for k in REF_KEYS if k not in ref]
        if missing:
            raise RuntimeError(f"{ATTEMPT_REF} lacks {', '.join(missing)}: {text[:200]!r} (an operator newer than "
                               "this runner? rebuild the image with the operator's version)")
        try:
            name, pod = str(ref["job"]), str(ref["pod"])
            lease, grace = str(ref["leaseDuration"]), str(ref["cancelGrace"])
            return cls(job_id=job_id(name), job_name=name, job_uid=str(ref["uid"]), namespace=str(ref["namespace"]),
                       queue="", handler="", attempt=int(ref["attempt"]), sequence=int(ref["sequence"]),
                       scheduled_at="", payload=None, lease_name=pod, lease_duration=parse_duration(lease),
                       cancel_grace=parse_duration(grace), pod_name=pod, heartbeat=True,
                       pod_uid=environ.get("SEXTANT_POD_UID", ""), from_ref=True, lease_duration_text=lease,
                       cancel_grace_text=grace)
        except (TypeError, ValueError) as exc:
            raise RuntimeError(f"{ATTEMPT_REF} {text[:200]!r}: {exc}") from None

    def from_job(self, raw: Mapping[str, Any], payload: dict[str, Any]) -> AttemptEnv:
        """Completed by its Job: the payload, and where the pod did not say them, queue, handler and scheduled time
        (queue, handler and runAt are immutable)."""
        if not self.from_ref:
            return replace(self, payload=payload)
        spec = raw.get("spec") or {}
        return replace(self, payload=payload, queue=str(spec.get("queue", "")), handler=str(spec.get("handler", "")),
                       scheduled_at=scheduled_at_of(raw))

    def variables(self) -> dict[str, str]:
        """The SEXTANT_* variables of the handler, but for SEXTANT_NODE_NAME and SEXTANT_POD_UID (the pod's own)."""
        return {**attempt_variables(
            job_name=self.job_name, job_uid=self.job_uid, namespace=self.namespace, queue=self.queue,
            handler=self.handler, attempt=self.attempt, sequence=self.sequence, scheduled_at=self.scheduled_at,
            payload=self.payload or {}, lease_name=self.lease_name or "",
            lease_duration=self.lease_duration_text, cancel_grace=self.cancel_grace_text,
            heartbeat=self.heartbeat), "SEXTANT_POD_NAME": self.pod_name}

    def expanded(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The handler's environment: from a pod with SEXTANT_ATTEMPT_REF, the same SEXTANT_* variables a pod with
        all of them has (the reference itself is not passed on); any other is kept as it is."""
        if not self.from_ref:
            return dict(environ)
        env = {k: v for k, v in environ.items() if k != ATTEMPT_REF}
        env.update(self.variables())
        return env
