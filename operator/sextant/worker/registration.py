"""The worker's registration Lease (docs/workers.md §1): one `coordination.k8s.io/v1` Lease per worker, named
after it, saying which queues and handlers it serves and with how many slots; renewed every leaseDuration/3. One
renewal covers every attempt the worker runs.

Every write is a PUT at the resourceVersion last written, so a worker notices at once when its Lease was taken
over (a process started under the same name) or deleted: then, as when it cannot renew it in time (below), the
Lease is lost and the worker's attempts are no longer its own.

The worker fences itself: when no renewal has been acknowledged within its renew deadline (2/3 of the
leaseDuration, on a monotonic clock, from when the last acknowledged write was sent), the Lease is lost too, a
third of the leaseDuration before others can see it expire; each renewal's request may take only the time left.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..kube.client import ApiError, Conflict, Kube, NotFound
from ..kube.clock import utcnow
from ..resources import contract
from ..resources.common import format_time, parse_time

log = logging.getLogger("sextant.worker")

DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
MAX_NAME = 63  # a label value, and the lease's name stays well within 253
RENEW_DEADLINE = 2 / 3  # of the leaseDuration: renewals at 1/3, retried until 2/3, then the worker fences itself


def sanitise(text: str) -> str:
    """Any text → a DNS label: lower case, [a-z0-9-], at most 63 characters, alphanumeric at both ends."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return label[:MAX_NAME].rstrip("-") or "worker"


def name_problem(name: str) -> str | None:
    """Why an explicit --name cannot name a worker; None when it can."""
    if DNS_LABEL.match(name):
        return None
    return (f"--name {name!r}: a worker's name must be a DNS label (lower-case letters, digits and '-', at most "
            f"{MAX_NAME} characters, starting and ending with a letter or digit), e.g. {sanitise(name)!r}")


def default_name(environ: Mapping[str, str] | None = None, hostname: str | None = None, pid: int | None = None) -> str:
    """In a pod: the pod's name (POD_NAME from the downward API, else HOSTNAME, which Kubernetes sets to it).
    Elsewhere: <host>-<pid>, so that two workers on one laptop differ."""
    env = os.environ if environ is None else environ
    if env.get("POD_NAME"):
        return sanitise(env["POD_NAME"])
    if env.get("KUBERNETES_SERVICE_HOST") and env.get("HOSTNAME"):
        return sanitise(env["HOSTNAME"])
    suffix = f"-{os.getpid() if pid is None else pid}"
    host = sanitise((hostname or socket.gethostname()).split(".")[0])
    return host[: MAX_NAME - len(suffix)].rstrip("-") + suffix


@dataclass(frozen=True)
class Offer:
    """What the Lease announces; the operator assigns jobs by it."""

    queues: frozenset[str]
    handlers: frozenset[str]
    slots: int
    lease_duration: timedelta  # the shortest leaseDuration of the queues served
    draining: bool = False

    @property
    def lease_seconds(self) -> int:
        return max(1, math.floor(self.lease_duration.total_seconds()))

    @property
    def renew_every(self) -> float:
        return self.lease_seconds / 3

    @property
    def renew_deadline(self) -> float:
        return self.lease_seconds * RENEW_DEADLINE


def lease_body(namespace: str, name: str, holder: str, offer: Offer, now: datetime,
               acquired: datetime | None = None) -> dict[str, Any]:
    annotations = {
        contract.ANNOTATION_QUEUES: ",".join(sorted(offer.queues)),
        contract.ANNOTATION_HANDLERS: ",".join(sorted(offer.handlers)),
        contract.ANNOTATION_SLOTS: str(max(0, offer.slots)),
    }
    if offer.draining:
        annotations[contract.ANNOTATION_DRAINING] = "true"
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": contract.worker_lease_name(name), "namespace": namespace,
                     "labels": {contract.LABEL_WORKER: name}, "annotations": annotations},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": offer.lease_seconds,
            "acquireTime": format_time(acquired or now),
            "renewTime": format_time(now),
        },
    }


class Registration:
    """Holds the Lease: register() once, then run() renews it until the worker stops or the Lease is lost."""

    def __init__(self, kube: Kube, namespace: str, name: str, holder: str, offer: Callable[[], Offer],
                 now: Callable[[], datetime] = utcnow, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.namespace, self.name, self.holder = kube, namespace, name, holder
        self.offer = offer
        self.now, self.monotonic = now, monotonic
        self.path = contract.leases_path(namespace, contract.worker_lease_name(name))
        self.lost = asyncio.Event()
        self.lost_reason = ""
        self._acquired: datetime | None = None
        self._version: str | None = None
        # When the last acknowledged write was sent (monotonic), and the leaseDurationSeconds it wrote: others see
        # the Lease expire no sooner than that much later.
        self._acked_at = 0.0
        self._acked_seconds = 0
        self._nudge = asyncio.Event()

    async def register(self) -> None:
        """Create the Lease, or take it over from an earlier process of the same name (a restart: its attempts
        are then lost, as the protocol says). ApiError when the API refuses."""
        now, sent = self.now(), self.monotonic()
        self._acquired = now
        offer = self.offer()
        body = lease_body(self.namespace, self.name, self.holder, offer, now)
        try:
            created = await self.kube.create(contract.leases_path(self.namespace), body)
        except Conflict:
            existing = await self.kube.get(self.path)
            spec = existing.get("spec") or {}
            renewed = parse_time(spec.get("renewTime"))
            seconds = spec.get("leaseDurationSeconds") or 0
            if renewed is not None and now < renewed + timedelta(seconds=seconds):
                log.warning("worker %s: taking over the name from %s, which renewed its lease %.1fs ago; if that "
                            "process still runs, it stops", self.name, spec.get("holderIdentity"),
                            (now - renewed).total_seconds())
            body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            created = await self.kube.request("PUT", self.path, body=body, retry=False)
        self._stored(created, sent, offer)

    def changed(self) -> None:
        """The offer changed (draining, slots, queues, handlers): write it now rather than at the next renewal."""
        self._nudge.set()

    async def run(self) -> None:
        """Renew until cancelled; sets `lost` and returns when the Lease is lost."""
        while True:
            offer = self.offer()
            try:
                await asyncio.wait_for(self._nudge.wait(), offer.renew_every)
            except asyncio.TimeoutError:
                pass
            self._nudge.clear()
            if not await self._renew_until_lost():
                return

    def expires_in(self) -> float:
        """Seconds until others may see the Lease expire (negative: they may already)."""
        return self._acked_at + self._acked_seconds - self.monotonic()

    async def _renew_until_lost(self) -> bool:
        """One renewal, retried until it lands (True) or the Lease is lost (False): taken over, deleted, or not
        renewed within the renew deadline. No request outlives that deadline."""
        delay = 0.2
        problem = "no answer"
        while True:
            offer = self.offer()
            renew_deadline = min(offer.lease_seconds, self._acked_seconds) * RENEW_DEADLINE
            deadline = self._acked_at + renew_deadline
            if self.monotonic() >= deadline:
                return self._lose(f"no renewal acknowledged within its renew deadline ({renew_deadline:g}s, "
                                  f"of a leaseDuration of {self._acked_seconds}s): {problem}")
            problem = await self._renew(offer, self.now(), deadline) or ""
            if not problem:
                return True
            if problem.startswith("!"):  # taken over or deleted: no retry can bring it back
                return self._lose(problem[1:])
            log.warning("worker %s: cannot renew its lease: %s", self.name, problem)
            await asyncio.sleep(min(delay, max(0.0, deadline - self.monotonic())))
            delay = min(delay * 2, max(0.2, offer.renew_every / 2))

    async def _renew(self, offer: Offer, now: datetime, deadline: float) -> str | None:
        """None when written; else what went wrong ('!…' when the Lease is no longer this worker's). Each request
        may take until the deadline (monotonic), no longer."""
        body = lease_body(self.namespace, self.name, self.holder, offer, now, self._acquired)
        body["metadata"]["resourceVersion"] = self._version
        sent = self.monotonic()
        try:
            stored = await self.kube.request("PUT", self.path, body=body, retry=False, timeout=deadline - sent)
        except NotFound:
            return "!its Lease was deleted"
        except Conflict:
            try:
                holder, version = await self._holder(max(0.001, deadline - self.monotonic()))
            except NotFound:
                return "!its Lease was deleted"
            except ApiError as again:
                return str(again)
            if holder != self.holder:
                return f"!its Lease was taken over by {holder}"
            self._version = version  # changed by someone else: write over it
            return "changed meanwhile"
        except ApiError as exc:
            return str(exc)
        self._stored(stored, sent, offer)
        return None

    async def _holder(self, timeout: float = 60.0) -> tuple[str | None, str]:
        """After a conflict: who holds the Lease now, and its resourceVersion. NotFound: deleted."""
        current = await self.kube.request("GET", self.path, timeout=timeout)
        return (current.get("spec") or {}).get("holderIdentity"), current["metadata"]["resourceVersion"]

    def _stored(self, lease: dict[str, Any], sent: float, offer: Offer) -> None:
        self._version = lease["metadata"]["resourceVersion"]
        self._acked_at, self._acked_seconds = sent, offer.lease_seconds

    def _lose(self, why: str) -> bool:
        self.lost_reason = why
        log.error("worker %s: lease lost: %s; its attempts are no longer its own", self.name, why)
        self.lost.set()
        return False

    async def delete(self) -> None:
        """At exit: remove the Lease, unless it is someone else's by now. A renewal cancelled at exit may have landed
        without its answer being read: a 409 on a Lease still held by this worker is that renewal, not a takeover."""
        if self._version is None or self.lost.is_set():
            return
        version = self._version
        for _ in range(3):
            try:
                await self.kube.delete(self.path, preconditions={"resourceVersion": version})
                return
            except NotFound:
                return
            except Conflict:
                pass  # written meanwhile: by this worker's own renewal, or by a new holder
            except ApiError as exc:
                log.warning("worker %s: cannot delete its lease: %s", self.name, exc)
                return
            try:
                holder, version = await self._holder()
            except NotFound:
                return
            except ApiError as exc:
                log.warning("worker %s: cannot delete its lease: %s", self.name, exc)
                return
            if holder != self.holder:
                return  # taken over: the Lease is the new holder's
