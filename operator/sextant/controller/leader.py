"""Leader election on a coordination.k8s.io/v1 Lease, with kube-controller-manager's timing (lease 15 s,
renew deadline 10 s, retry 2 s).

Only the leader acts (admits jobs, creates pods, writes status); standbys keep their watches and view warm.
Fencing, so that a deposed leader (paused, partitioned, slow) cannot act twice — see docs/ha.md:
- is_leader() is true only while the last successful renewal is younger than the renew deadline, measured
  on this process's monotonic clock, so a process that was paused or cut off stops believing it leads
  before anyone else may take over (renew deadline < lease duration);
- every write of the controllers goes through a Kube client that checks is_leader() right before sending;
- status writes carry the resourceVersion they were computed from, and attempt pods have deterministic
  names: a write that slips through from a stale leader meets a 409 instead of acting twice.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from datetime import datetime

from ..kube.client import ApiError, Conflict, Kube, NotFound
from ..kube.clock import utcnow
from ..resources import contract
from ..resources.common import format_time, time_or_none
from .settings import ElectionSettings

log = logging.getLogger("sextant.leader")


def _seconds(value: object, configured: float) -> float:
    """How long a lease's holder may leave it unrenewed, as this replica believes it: its leaseDurationSeconds, but
    never more than this replica's own lease duration (docs/ha.md). The replicas of one release run with one
    setting, so only a lease written by something else asks for more, and a holder that wrote 999999999 must not
    lock the replicas out for good. What is not a positive number of seconds counts as the configured duration."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value:
        return configured
    return min(float(value), configured)


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:6]}"


class LeaderElector:
    def __init__(self, kube: Kube, settings: ElectionSettings, identity: str | None = None,
                 on_change: Callable[[bool], None] = lambda leading: None,
                 monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime] = utcnow) -> None:
        self.kube, self.settings = kube, settings
        self.identity = identity or default_identity()
        self.on_change = on_change
        self.monotonic, self.wall = monotonic, wall  # the clocks, passed in so that tests can move them
        self.leader_identity: str | None = None  # who leads, as last seen
        self._renewed_at: float | None = None  # monotonic time of our last successful acquire/renew
        self._observed: tuple[str, float] | None = None  # (the lease's resourceVersion, monotonic time seen)
        self._leading = False
        self._path = contract.leases_path(settings.namespace, settings.name)

    def is_leader(self) -> bool:
        leading = (self._renewed_at is not None
                   and self.monotonic() - self._renewed_at < self.settings.renew_deadline)
        if not leading and self._leading:
            # The fence noticed first (a leader resumed after a pause asks it before its election loop has run):
            # the controllers stop now. Otherwise their workers, still told to act, would take a key, be refused
            # and put it back without ever yielding to the event loop, which then never runs the election.
            self._set_leading(False)
        return leading

    async def run(self) -> None:
        try:
            while True:
                try:
                    wait = await self._try()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - an outage or an odd lease: try again, never exit
                    log.warning("leader election: %s: %s", type(exc).__name__, exc)
                    wait = self.settings.retry_period
                self._set_leading(self.is_leader())
                await asyncio.sleep(wait)
        finally:
            # Stop acting before handing over: once the lease is released a standby may lead at once, so this
            # replica's fence must already refuse writes while the release is on its way.
            held = self.leader_identity == self.identity
            self._renewed_at = None
            self._set_leading(False)
            if held:
                await self._release()

    def _set_leading(self, leading: bool) -> None:
        if leading != self._leading:
            self._leading = leading
            log.warning("%s %s", self.identity, "became the leader" if leading else "stopped leading")
            self.on_change(leading)

    async def _try(self) -> float:
        """One acquire-or-renew; returns how long to wait before the next."""
        s = self.settings
        now = self.monotonic()
        try:
            lease = await self.kube.get(self._path)
        except NotFound:
            return await self._write(None, now)
        except ApiError as exc:
            log.warning("leader election: %s", exc)
            return s.retry_period
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        rv = lease["metadata"]["resourceVersion"]
        if self._observed is None or self._observed[0] != rv:
            self._observed = (rv, now)  # expiry counts from when we saw it change: immune to clock skew
        self.leader_identity = holder or None
        duration = _seconds(spec.get("leaseDurationSeconds"), s.lease_duration)
        expires = self._observed[1] + duration
        renewed = time_or_none(spec.get("renewTime"))
        if renewed is not None:
            # The holder's own renewal time: we see the lease expire when it does, not up to a retry period
            # later. Safe while the replicas' clocks agree within lease duration − renew deadline (5 s by
            # default), as Kubernetes' node leases also assume; the observed time is the fallback.
            expires = min(expires, now + (renewed - self.wall()).total_seconds() + duration)
        if holder and holder != self.identity and now < expires:
            self._renewed_at = None
            return max(0.05, min(s.retry_period, expires - now))  # try again the moment it would expire
        return await self._write(lease, now)

    async def _write(self, lease: dict | None, now: float) -> float:
        s = self.settings
        stamp = format_time(self.wall())
        old = ((lease or {}).get("spec") or {})
        ours = old.get("holderIdentity") == self.identity
        transitions = old.get("leaseTransitions")
        if isinstance(transitions, bool) or not isinstance(transitions, int) or not 0 <= transitions < 2**31:
            transitions = 0  # an odd count is restarted rather than left to stop the election
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(s.lease_duration),
            "renewTime": stamp,
            "acquireTime": (old.get("acquireTime") if ours else stamp),
            "leaseTransitions": transitions + (0 if ours else 1),
        }
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": s.name, "namespace": s.namespace}, "spec": spec}
        try:
            if lease is None:
                await self.kube.create(contract.leases_path(s.namespace), body)
            else:
                body["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
                await self.kube.request("PUT", self._path, body=body, retry=False)
        except (Conflict, NotFound):
            return s.retry_period  # someone else wrote first: look again
        except ApiError as exc:
            log.warning("leader election: %s", exc)
            return s.retry_period
        self._renewed_at = now
        self.leader_identity = self.identity
        return s.retry_period

    async def _release(self) -> None:
        """On a clean stop, hand over at once instead of making the standby wait out the lease."""
        try:
            lease = await self.kube.get(self._path)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"].update(holderIdentity="", leaseDurationSeconds=1)
            await self.kube.request("PUT", self._path, body=lease, retry=False)
        except ApiError as exc:
            log.info("leader election: release: %s", exc)
        self.leader_identity = None
