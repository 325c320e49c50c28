"""The attempt's lease: created when the runner starts, renewed every leaseDuration/3 while the handler runs.

If renewals fail, the keeper keeps trying until the lease would have expired, then reports it lost: by then
the operator has (or will have) failed the attempt with LeaseExpired, so the handler must stop.

The operator counts a Lease as the attempt's only if it proves so: named as the attempt's pod, held by it
(holderIdentity = the pod's name) and owned by it (an ownerReference to the pod's uid, which other pods do not
know). So a Lease written by another job's pod, labelled as this attempt's, can neither fail nor prolong it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable
from datetime import datetime

from ..kube.client import ApiError, Conflict, Kube
from ..kube.clock import utcnow
from ..resources import API_VERSION, contract
from ..resources.common import format_time
from ..resources.report import PROGRESS_INTERVAL
from .env import AttemptEnv

log = logging.getLogger("sextant.runner")
PROGRESS_STEP = 1.0  # seconds between looks at the handler's progress while waiting to renew


def owner_references(env: AttemptEnv) -> list[dict]:
    """Owned by the attempt's pod (so it goes with it, and the operator can tell it is that pod's); without the
    pod's uid (an operator older than this runner), by the Job."""
    if env.pod_uid and env.pod_name:
        return [{"apiVersion": "v1", "kind": "Pod", "name": env.pod_name, "uid": env.pod_uid, "controller": True}]
    if env.job_uid:
        return [{"apiVersion": API_VERSION, "kind": "Job", "name": env.job_name, "uid": env.job_uid}]
    return []


def lease_body(env: AttemptEnv, now: datetime) -> dict:
    # Also labelled with the previous version's name of the sequence label: images are rebuilt before the operator
    # is upgraded (README), and that operator reads only sextant.dev/run.
    labels = {contract.LABEL_JOB: env.job_name, contract.LABEL_QUEUE: env.queue, contract.LABEL_HANDLER: env.handler,
              contract.LABEL_ATTEMPT: str(env.attempt), contract.LABEL_SEQUENCE: str(env.sequence),
              contract.LEGACY_LABEL_SEQUENCE: str(env.sequence)}
    metadata: dict = {"name": env.lease_name, "namespace": env.namespace, "labels": labels}
    owners = owner_references(env)
    if owners:
        metadata["ownerReferences"] = owners
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": env.pod_name or env.lease_name,
            "leaseDurationSeconds": max(1, math.ceil(env.lease_duration.total_seconds())),
            "acquireTime": format_time(now),
            "renewTime": format_time(now),
        },
    }


class LeaseKeeper:
    def __init__(self, kube: Kube, env: AttemptEnv, now: Callable[[], datetime] = utcnow) -> None:
        self.kube, self.env, self.now = kube, env, now
        self.period = env.lease_duration.total_seconds() / 3
        self.renewed_at: datetime | None = None
        self.lost = asyncio.Event()
        self._path = contract.leases_path(env.namespace, env.lease_name)
        # The handler's latest progress, and what the Lease says: a change is written with the next renewal, or
        # sooner, but at most once per PROGRESS_INTERVAL (so a handler may report as often as it likes).
        self.progress: tuple[float, str | None] | None = None
        self._sent: tuple[float, str | None] | None = None
        self._sent_at = -math.inf

    def report(self, fraction: float, message: str | None) -> None:
        """The handler's progress (ctx.progress, a command's progress file); from its thread too: one assignment."""
        self.progress = (fraction, message)

    async def run(self) -> None:
        started = self.now()
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            if await self._renew():
                # Every period from the start of the last renewal: a slow API server delays one write, not all
                # that follow it (a cadence of period + latency drifts toward the lease's expiry under load).
                await self._wait(began + self.period - loop.time())
                continue
            deadline = (self.renewed_at or started) + self.env.lease_duration
            if self.now() >= deadline:
                log.error("sextant: lease %s not renewed for %s; stopping the handler", self.env.lease_name,
                          self.env.lease_duration)
                self.lost.set()
                return
            await asyncio.sleep(min(1.0, self.period))

    async def _wait(self, seconds: float) -> None:
        """Until the next renewal is due, or sooner for a progress change that may be written now."""
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        while (left := until - loop.time()) > 0:
            await asyncio.sleep(min(left, PROGRESS_STEP))
            if self.progress != self._sent and loop.time() >= self._sent_at + PROGRESS_INTERVAL.total_seconds():
                return

    def _progress_annotation(self) -> dict[str, str] | None:
        """The Lease's progress annotation, when it has changed since the last write."""
        if self.progress is None or self.progress == self._sent:
            return None
        fraction, message = self.progress
        value = {"fraction": fraction, **({"message": message} if message else {})}
        return {contract.ANNOTATION_PROGRESS: json.dumps(value, separators=(",", ":"))}

    async def _renew(self) -> bool:
        now = self.now()
        try:
            if self.renewed_at is None:
                try:
                    await self.kube.create(contract.leases_path(self.env.namespace), lease_body(self.env, now))
                except Conflict:
                    await self._take_over(now)  # already there: ours from a restarted runner, or a squatter's
            else:
                await self._patch(now)
        except ApiError as exc:
            log.warning("sextant: cannot renew lease %s: %s", self.env.lease_name, exc)
            return False
        self.renewed_at = now
        return True

    def _sending(self) -> dict[str, str] | None:
        annotations = self._progress_annotation()
        if annotations is not None:
            self._sent, self._sent_at = self.progress, asyncio.get_running_loop().time()
        return annotations

    async def _take_over(self, now: datetime) -> None:
        """Make the existing Lease of this name ours: holder, owner, labels and times (a merge patch replaces the
        ownerReferences list whole)."""
        body = lease_body(self.env, now)
        meta = {k: v for k, v in body["metadata"].items() if k in ("labels", "ownerReferences")}
        await self.kube.merge_patch(self._path, {"metadata": meta, "spec": body["spec"]}, retry=False)

    async def _patch(self, now: datetime) -> None:
        body: dict = {"spec": {"renewTime": format_time(now)}}
        sent = self._sent, self._sent_at
        annotations = self._sending()
        if annotations is not None:
            body["metadata"] = {"annotations": annotations}
        try:
            await self.kube.merge_patch(self._path, body, retry=False)
        except ApiError:
            self._sent, self._sent_at = sent  # not written: sent again with the next one
            raise
