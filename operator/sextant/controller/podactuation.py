"""The job controller's pod mode: creating (or adopting) an attempt's pod. A part of JobController
(controller/jobs.py), which holds the state."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta
from typing import Any

from ..kube.client import ApiError, Conflict, NotFound
from ..kube.informer import Key
from ..lifecycle import transitions as T
from ..resources import contract
from ..resources.job import PAYLOAD_ENV_MAX_BYTES
from .pods import build_pod, controller_uid
from .records import LiveJob

log = logging.getLogger("sextant.controller.jobs")

RETRY_AFTER_ERROR = timedelta(seconds=5)  # a pod that could not be created (or a Worker not read): try again this soon


class PodActuation:
    async def _create_pod(self, key: Key, record: LiveJob, job: T.JobSnapshot,
                          action: T.CreatePod) -> str:
        """Create (or adopt) the attempt's pod; "" when it exists now, else why not. Its creation is expected (the
        watch brings the pod to the view)."""
        raw = record.raw
        ns = key[0]
        handler = self.view.handlers.get((ns, job.spec.handler))
        queue = self.view.queues.get((ns, job.spec.queue))
        if handler is None or queue is None:
            return "its Queue or Handler is gone"
        left_out = record.payload_bytes
        if not handler.heartbeat and left_out is not None and left_out <= PAYLOAD_ENV_MAX_BYTES:
            # A pod without the runner gets a small payload in SEXTANT_PAYLOAD, and the view keeps none: read it.
            # (The runner of any other pod reads it from the Job itself: runner/payload.py.)
            payload = await self._payload(key, job)
            if payload is None:
                return "the job is gone (deleted, or created again under its name)"
            job = replace(job, spec=job.spec.model_copy(update={"payload": payload}))
        try:
            pod = build_pod(raw, job, handler, queue, action)
            await self.kube.create_as_sent(contract.pods_path(ns), pod)
        except Conflict:
            created = await self.kube.get(contract.pods_path(ns, action.name))
            if controller_uid(created) != job.uid:
                # Not ours (no controller ownerReference to this job): never adopted. The attempt waits until its name
                # is free again, and says why.
                message = (f"pod {action.name} exists but is not this job's (its controller ownerReference is not "
                           f"this Job); attempt {action.attempt} starts once that pod is gone")
                log.warning("job %s/%s: %s", ns, key[1], message)
                self.events.record(raw, T.Event("PodNameTaken", message, "Warning"))
                return message
            # Ours (from before a crash, or a create whose answer was lost): adopt it. It may have run meanwhile: judge
            # the pod as its watch shows it on the next look.
            self.queue.add(key)
        except ApiError as exc:
            log.warning("job %s/%s: cannot create pod %s: %s", ns, key[1], action.name, exc)
            self.events.record(raw, T.Event("PodCreateFailed", exc.message or str(exc), "Warning"))
            return f"cannot create pod {action.name}: {exc.message or exc}"
        if action.sequence not in self.view.pods.get(key, {}):
            self.expectations.created_pod(key, action.sequence)
        return ""

    async def _payload(self, key: Key, job: T.JobSnapshot) -> dict[str, Any] | None:
        """The job's payload, from the API server (immutable: any version of this job has it); None when the job
        of that name is gone or another one."""
        try:
            full = await self.kube.get(contract.jobs_path(*key))
        except NotFound:
            return None
        if full["metadata"].get("uid") != job.uid:
            return None
        payload = (full.get("spec") or {}).get("payload") or {}
        return payload if isinstance(payload, dict) else {}
