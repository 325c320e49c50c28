"""The worker's own Worker object (docs/workers.md): its spec is the worker's alone — registration, renewals and
results — and every write of it is ONE JSON patch `[test /spec/incarnation = mine, replace /spec]`, with no
resourceVersion, so the operator's status writes never conflict with it. The `test` makes a takeover (another
process started under the same name wrote its own incarnation) a 422: the worker is then no longer itself and stops
(TakenOver). A 404 means the object was deleted: the worker registers again, with a new incarnation.

Each write is a renewal (a new metadata.generation, which the operator observes by its own clock); the worker writes
at least every leaseDuration/3, and at once when results are ready and no write is in flight (one write in flight;
everything that became ready meanwhile goes in the next).

The worker fences itself: when no write has been acknowledged within its renew deadline (2/3 of the leaseDuration,
on a monotonic clock, from when the last acknowledged write was sent), its attempts are no longer its own — a third
of the leaseDuration before the operator can see it expire — and it registers again with a new incarnation
(retrying until the API answers); each write's request may take only the time left.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..kube.client import ApiError, Conflict, Kube, NotFound
from ..kube.clock import utcnow
from ..resources import API_VERSION, contract
from ..resources.common import format_time
from ..resources.worker import FINALIZER, KIND, PLURAL

log = logging.getLogger("sextant.worker")

DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
MAX_NAME = 63  # a label value
# 2/3 of the leaseDuration: renewals at 1/3, retried until 2/3, then the worker fences itself
RENEW_DEADLINE = contract.PROTOCOL["renewDeadline"]
JSON_PATCH = "application/json-patch+json"
REGISTER_TIMEOUT = 10.0  # seconds per request while (re-)registering: no attempt runs then, nothing is at stake
REGISTER_BACKOFF_MAX = 5.0


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


def pod_owner(environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The ownerReference to the worker's pod (POD_NAME and POD_UID from the downward API), so that its object goes
    with the pod; None outside a pod."""
    env = os.environ if environ is None else environ
    if env.get("POD_NAME") and env.get("POD_UID"):
        return {"apiVersion": "v1", "kind": "Pod", "name": env["POD_NAME"], "uid": env["POD_UID"]}
    return None


def new_incarnation() -> str:
    return secrets.token_hex(4)


@dataclass(frozen=True)
class Offer:
    """What the worker announces in its spec; the operator assigns jobs by it."""

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


def worker_spec(offer: Offer, incarnation: str, now: datetime, results: list[dict[str, Any]],
                user: str | None = None, progress: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The whole spec, as every write replaces it."""
    spec: dict[str, Any] = {
        "incarnation": incarnation, "queues": sorted(offer.queues), "handlers": sorted(offer.handlers),
        "slots": max(0, offer.slots), "leaseDurationSeconds": offer.lease_seconds, "draining": offer.draining,
        "renewTime": format_time(now), "results": results,
    }
    if user:
        spec["user"] = user
    if progress:
        spec["progress"] = progress
    return spec


def worker_body(namespace: str, name: str, spec: dict[str, Any], owner: dict[str, str] | None) -> dict[str, Any]:
    """The object a worker creates: its finalizer (the operator removes it once every attempt assigned to the worker
    is recorded), its label, and in a pod an ownerReference to the pod."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {contract.LABEL_WORKER: name},
                                "finalizers": [FINALIZER]}
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def spec_patch(expected: str, spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"op": "test", "path": "/spec/incarnation", "value": expected},
            {"op": "replace", "path": "/spec", "value": spec}]


def workers_path(namespace: str, name: str | None = None) -> str:
    return contract.path(API_VERSION, PLURAL, namespace, name)


class TakenOver(Exception):
    """Another process wrote its own incarnation into this worker's object: this one is no longer that worker."""


class Registration:
    """Writes the worker's spec: register() once, then run() renews it, carrying results, until cancelled. A fence
    or a deletion calls on_lost(why) (stop every handler, report none of them) and registers again; a takeover sets
    `taken_over` and run() returns."""

    def __init__(self, kube: Kube, namespace: str, name: str, offer: Callable[[], Offer],
                 results: Callable[[], list[dict[str, Any]]], on_lost: Callable[[str], None] = lambda why: None,
                 owner: dict[str, str] | None = None, user: str | None = None, now: Callable[[], datetime] = utcnow,
                 monotonic: Callable[[], float] = time.monotonic,
                 progress: Callable[[], list[dict[str, Any]]] = list) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.offer, self.results, self.on_lost = offer, results, on_lost
        self.progress = progress  # rides on whatever write comes next: a progress report never makes one
        self.owner, self.user = owner, user
        self.now, self.monotonic = now, monotonic
        self.path = workers_path(namespace, name)
        self.incarnation = new_incarnation()
        self.incarnations = {self.incarnation}  # every one this process wrote: any other in its object is a takeover
        self.taken_over = asyncio.Event()
        self.taken_over_reason = ""
        self.writes = 0  # acknowledged writes (renewals included)
        # When the last acknowledged write was sent (monotonic), and the leaseDurationSeconds it wrote: the renew
        # deadline counts from there.
        self._acked_at = 0.0
        self._acked_seconds = 0
        self._nudge = asyncio.Event()
        self._written = asyncio.Event()  # set after each acknowledged write

    @property
    def holder(self) -> str:
        return contract.holder_identity(self.name, self.incarnation)

    # --- registering -----------------------------------------------------------------------------------------
    async def register(self) -> None:
        """Create the object, or take it over from an earlier process of the same name (a restart: the operator
        then fails that process's attempts). ApiError when the API refuses; TakenOver when another process took
        it meanwhile."""
        await self._register(None, timeout=60.0)

    async def _register(self, expected: str | None, timeout: float) -> None:
        """expected: the incarnation this process last wrote (re-registering), None at start (any earlier one)."""
        for _ in range(20):
            offer, sent = self.offer(), self.monotonic()
            spec = worker_spec(offer, self.incarnation, self.now(), self.results(), self.user, self.progress())
            if expected is None:
                try:
                    await self.kube.request("POST", workers_path(self.namespace),
                                            body=worker_body(self.namespace, self.name, spec, self.owner),
                                            retry=False, timeout=timeout)
                    return self._acked(sent, offer)
                except Conflict:
                    pass
                existing = await self._get(timeout)
                if existing is None:
                    continue  # gone meanwhile: create it
                if (existing.get("metadata") or {}).get("deletionTimestamp"):
                    # Deleting (a drained predecessor): its attempts are being settled; create anew once it is gone.
                    await asyncio.sleep(0.5)
                    continue
                previous = str((existing.get("spec") or {}).get("incarnation") or "")
                log.warning("worker %s: taking over the name from incarnation %s; if that process still runs, it "
                            "stops", self.name, previous or "<none>")
                expected = previous
            try:
                await self.kube.request("PATCH", self.path, body=spec_patch(expected, spec),
                                        content_type=JSON_PATCH, retry=False, timeout=timeout)
                return self._acked(sent, offer)
            except NotFound:
                expected = None
            except ApiError as exc:
                if exc.status != 422:
                    raise
                current = await self._get(timeout)
                theirs = str(((current or {}).get("spec") or {}).get("incarnation") or "")
                if current is None:
                    expected = None
                elif theirs == self.incarnation:
                    return self._acked(sent, offer)  # an earlier try of this write landed, its answer lost
                elif theirs == expected:
                    raise  # the test held: the API refused the spec itself
                elif theirs in self.incarnations:
                    expected = theirs
                elif expected in self.incarnations:
                    raise TakenOver(f"its Worker object was taken over by incarnation {theirs or '<none>'}") from None
                else:
                    expected = None  # another process wrote meanwhile (at start): read it again
        raise ApiError(0, f"worker {self.name}: could not register (its object kept changing)", "PATCH", self.path)

    async def _get(self, timeout: float) -> dict[str, Any] | None:
        try:
            return await self.kube.request("GET", self.path, timeout=timeout)
        except NotFound:
            return None

    async def _check_taken_over(self, timeout: float, refused: ApiError) -> None:
        """After a 422: TakenOver when the object names another incarnation; else the API refused the spec itself
        (a bug here, or a schema stricter than this worker): ApiError."""
        current = await self._get(max(0.001, timeout))
        theirs = str(((current or {}).get("spec") or {}).get("incarnation") or "")
        if current is not None and theirs not in self.incarnations:
            raise TakenOver(f"its Worker object was taken over by incarnation {theirs or '<none>'}")
        raise refused

    def _acked(self, sent: float, offer: Offer) -> None:
        self._acked_at, self._acked_seconds = sent, offer.lease_seconds
        self.writes += 1
        self._written.set()

    def seen(self, incarnation: str | None) -> None:
        """The object as watched names this incarnation: another process's means a takeover."""
        if incarnation and incarnation not in self.incarnations and not self.taken_over.is_set():
            self._taken(f"its Worker object was taken over by incarnation {incarnation}")

    def _taken(self, why: str) -> None:
        self.taken_over_reason = why
        log.error("worker %s: %s; its attempts are no longer its own", self.name, why)
        self.taken_over.set()

    # --- renewing ----------------------------------------------------------------------------------------------
    def changed(self) -> None:
        """Something to write (a result, the offer): at once if no write is in flight, else right after it."""
        self._nudge.set()

    async def written(self) -> None:
        """Until the next acknowledged write."""
        self._written.clear()
        await self._written.wait()

    async def run(self) -> None:
        """Write until cancelled or taken over."""
        while not self.taken_over.is_set():
            try:
                await asyncio.wait_for(self._nudge.wait(), self.offer().renew_every)
            except asyncio.TimeoutError:
                pass
            self._nudge.clear()
            try:
                lost = await self._write_until_acked()
                if lost:
                    await self._register_again(lost)
            except TakenOver as exc:
                self._taken(str(exc))

    async def _write_until_acked(self) -> str | None:
        """One write, retried until it lands (None) or the worker has lost its attempts (why): deleted, or not
        acknowledged within the renew deadline. No request outlives that deadline. TakenOver on a takeover."""
        delay = 0.2
        problem = "no answer"
        while True:
            offer = self.offer()
            renew_deadline = min(offer.lease_seconds, self._acked_seconds) * RENEW_DEADLINE
            deadline = self._acked_at + renew_deadline
            sent = self.monotonic()
            if sent >= deadline:
                return (f"no write acknowledged within its renew deadline ({renew_deadline:g}s, of a leaseDuration "
                        f"of {self._acked_seconds}s): {problem}")
            spec = worker_spec(offer, self.incarnation, self.now(), self.results(), self.user, self.progress())
            try:
                await self.kube.request("PATCH", self.path, body=spec_patch(self.incarnation, spec),
                                        content_type=JSON_PATCH, retry=False, timeout=deadline - sent)
                self._acked(sent, offer)
                return None
            except NotFound:
                return "its Worker object was deleted"
            except ApiError as exc:
                if exc.status == 422:
                    try:
                        await self._check_taken_over(deadline - self.monotonic(), exc)
                    except TakenOver:
                        raise
                    except ApiError as again:
                        exc = again
                problem = str(exc)
            log.warning("worker %s: cannot write its Worker object: %s", self.name, problem)
            await asyncio.sleep(max(0.0, min(delay, deadline - self.monotonic())))
            delay = min(delay * 2, max(0.2, offer.renew_every / 2))

    async def _register_again(self, why: str) -> None:
        """Its attempts are lost: stop them, then register with a new incarnation, retrying until the API answers
        (never exit: a worker that outlived an outage serves again)."""
        log.error("worker %s: %s; its attempts are no longer its own: registering again", self.name, why)
        self.on_lost(why)
        expected = None if why == "its Worker object was deleted" else self.incarnation
        self.incarnation = new_incarnation()
        self.incarnations.add(self.incarnation)
        delay = 0.5
        while True:
            try:
                await self._register(expected, REGISTER_TIMEOUT)
                log.info("worker %s registered again as %s", self.name, self.holder)
                return
            except ApiError as exc:
                log.warning("worker %s: cannot register again yet: %s", self.name, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, REGISTER_BACKOFF_MAX)

    # --- leaving -----------------------------------------------------------------------------------------------
    async def delete(self) -> None:
        """At the end of a drain: delete the object unless another process holds it by now (the operator removes
        its finalizer once every attempt assigned to it is recorded)."""
        if self.taken_over.is_set():
            return
        for _ in range(3):
            try:
                current = await self.kube.get(self.path)
                if str((current.get("spec") or {}).get("incarnation")) not in self.incarnations:
                    return
                await self.kube.delete(self.path,
                                       preconditions={"resourceVersion": current["metadata"]["resourceVersion"]})
                return
            except NotFound:
                return
            except Conflict:
                continue  # the operator wrote its status meanwhile: read it again
            except ApiError as exc:
                log.warning("worker %s: cannot delete its Worker object: %s", self.name, exc)
                return
