"""The operator's machinery: lean informers → view → reconcilers, plus the central timers, the event poster, leader
election and the HTTP server. `Operator.start`/`stop` run it inside kopf's start-up and clean-up (kopfapp.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..kube import metrics
from ..kube.kubeconfig import Connection
from ..resources import contract
from ..kube.events import EventRecorder
from ..kube.informer import Informer
from .archiving import Archiver
from .leader import LeaderElector, default_identity
from .jobs import JobController
from ..kube.client import Kube
from ..kube.clock import utcnow
from ..lifecycle.decision import Event
from ..resources import API_VERSION
from .pools import PoolController
from .schedules import ScheduleController
from .settings import Settings
from .timers import Timers
from .view import View

if TYPE_CHECKING:  # loaded only with an archive configured (archive/errors.py)
    from ..archive.store import Archive

log = logging.getLogger("sextant.operator")


def _paths(collection: Callable[[str | None], str], namespaces: list[str]) -> list[str]:
    """A kind's collection (a path builder of resources/contract) in each watched namespace, or across all."""
    return [collection(ns) for ns in namespaces] if namespaces else [collection(None)]


class Operator:
    def __init__(self, conn: Connection, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        election = self.settings.leader_election
        self.identity = default_identity()
        # The controllers' client: with leader election, every write is fenced by leadership.
        self.kube = Kube(conn, user_agent=f"sextant-operator/{self.identity}" if election else "sextant-operator")
        # The HTTP API's writes are the callers' requests: any replica may pass them on.
        self.api_kube = Kube(conn, user_agent="sextant-api")
        self.elector: LeaderElector | None = None
        if election is not None:
            self.elector = LeaderElector(Kube(conn, user_agent=f"sextant-leader-election/{self.identity}"),
                                         election, self.identity, on_change=self._on_leadership)
            self.kube.fence = self.elector.is_leader
        self.view = View(idempotency_window=self.settings.idempotency_window,
                         max_worker_slots=self.settings.max_worker_slots)
        self.events = EventRecorder(self.kube, utcnow, enabled=self.settings.events)
        self.timers = Timers(utcnow)
        leading = asyncio.Event()
        leading.set()  # cleared below under leader election, until this replica leads
        # The archive: every finished job's record written before retention deletes its object (archiving.py).
        self.archiver = Archiver(self.settings.archive, self.kube, leading, landed=self._landed,
                                 migrate=self.settings.archive_migrate) if self.settings.archive else None
        self.jobs = JobController(self.kube, self.view, self.events, self.timers, workers=self.settings.workers,
                                  pending_pods=self.settings.pending_pods,
                                  record_queued_after=self.settings.record_queued_after, archiver=self.archiver,
                                  max_finished_jobs=self.settings.max_finished_jobs, leading=leading)
        self.schedules = ScheduleController(self.kube, self.view, self.events, self.timers, archiver=self.archiver)
        # WorkerPools: the replicas of Deployments of workers, from the slots their queues need (pools.py).
        self.pools = PoolController(self.kube, self.view, self.events, self.timers, self.jobs.leading,
                                    busy=self.jobs.slots.busy, reopen=self.jobs.slots.pump_worker)
        if self.elector is not None:
            self.jobs.leading.clear()
            self.schedules.leading.clear()
        self.collector = self._collector()
        self._tasks: list[asyncio.Task[None]] = []
        self._web_runner: Any = None
        self._registered = False
        ns = self.settings.namespaces
        c = self.jobs

        def informer(path: str, on_change: Callable[[str, dict], None], name: str, kind: str, api_version: str,
                     label_selector: str | None = None, known: Any = None) -> Informer:
            return Informer(self.kube, path, on_change, name=name, label_selector=label_selector,
                            on_error=self._reporter(kind, api_version), on_reconnect=self._reconnected, known=known)

        # One watch per kind, the informer's (kopf watches none: docs/operator.md); each first list opens the gate.
        self.informers = [
            *(informer(p, c.on_queue, "queues", "Queue", API_VERSION)
              for p in _paths(contract.queues_path, ns)),
            *(informer(p, c.on_handler, "handlers", "Handler", API_VERSION)
              for p in _paths(contract.handlers_path, ns)),
            # The view's jobs are the informer's store: a relist is diffed against their versions (100k of them).
            *(informer(contract.jobs_path(n), self._on_job, "jobs", "Job", API_VERSION,
                       known=lambda n=n: self.view.job_versions(n)) for n in (ns or [None])),
            *(informer(p, self.schedules.on_schedule, "schedules", "Schedule", API_VERSION)
              for p in _paths(contract.schedules_path, ns)),
            # Only Sextant's own pods: a server-side label selector, never every pod of the cluster.
            *(informer(p, c.on_pod, "pods", "Pod", "v1", label_selector=contract.LABEL_JOB)
              for p in _paths(contract.pods_path, ns)),
            *(informer(p, c.on_lease, "leases", "Lease", "coordination.k8s.io/v1", label_selector=contract.LABEL_JOB)
              for p in _paths(contract.leases_path, ns)),
            # Worker objects (docs/workers.md): one per worker process, not per job.
            *(informer(p, c.on_worker_object, "workers", "Worker", API_VERSION)
              for p in _paths(contract.workers_path, ns)),
            *(informer(p, self.pools.on_pool, "workerpools", "WorkerPool", API_VERSION)
              for p in _paths(contract.workerpools_path, ns)),
        ]

    @property
    def leading(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def role(self) -> str:
        """Who this replica is, and (with an archive) whether records land: /readyz's detail."""
        if self.elector is None:
            role = "leader (no leader election)"
        elif self.elector.is_leader():
            role = f"leader ({self.identity})"
        else:
            role = f"standby ({self.identity}; the leader is {self.elector.leader_identity or 'unknown'})"
        return f"{role}; {self.archiver.status()}" if self.archiver is not None else role

    def _landed(self, key: tuple[str, str]) -> None:
        """A job's record landed in the archive: retention (and its schedule's history limits) may look again now."""
        if self.jobs.started.is_set():
            self.jobs.queue.add(key)
        record = self.view.jobs.get(key)
        if record is not None and record.schedule and self.schedules.started.is_set():
            self.schedules.queue.add((key[0], record.schedule))

    def _on_leadership(self, leading: bool) -> None:
        for controller in (self.jobs, self.schedules):
            (controller.leading.set if leading else controller.leading.clear)()
        if not leading:
            self.jobs.worker_status.drop_all()
        if leading and self.jobs.started.is_set():
            self.jobs.resync()  # start from the warm view: no cold list on takeover
        if leading and self.schedules.started.is_set():
            self.schedules.resume()  # ticks due while no replica led were missed runs

    def _on_job(self, kind: str, obj: dict) -> None:
        self.jobs.on_job(kind, obj)  # the view tells the schedules when one of their jobs changes

    def _reporter(self, kind: str, api_version: str) -> Callable[[dict[str, Any], str], None]:
        """A Warning Event on an object an informer could not take in (where it has a namespace to post in)."""
        def report(obj: dict[str, Any], message: str) -> None:
            if obj.get("metadata", {}).get("namespace"):
                self.events.record({**obj, "apiVersion": api_version, "kind": kind},
                                   Event("Invalid", message, "Warning"))
        return report

    def _reconnected(self) -> None:
        """The API server answers again: what failed while it was away is tried now, not after its backoff."""
        retried = self.jobs.queue.retry_failed_now() + self.schedules.queue.retry_failed_now()
        if retried:
            log.info("connected again: retrying %d objects at once", retried)

    async def _cap(self) -> None:
        """The count cap acts on a complete view only: before, a queue's count is partial."""
        await self.jobs.started.wait()
        await self.jobs.capper.run()

    @property
    def ready(self) -> bool:
        return (self.jobs.started.is_set() and self.schedules.started.is_set()
                and all(i.healthy for i in self.informers))

    def metrics(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(metrics.REGISTRY), CONTENT_TYPE_LATEST

    def _collector(self) -> metrics.ViewCollector:
        return metrics.ViewCollector(
            jobs=lambda: ((key[0], r.queue, r.state.value if r.state else "new")
                          for key, r in list(self.view.jobs.items())),
            requests=lambda: self.kube.requests,
            depths=lambda: {"timers": len(self.timers), "reconcile": len(self.jobs.queue),
                            "events": self.events.pending},
            leader=lambda: self.leading,
            api_requests=lambda: self.api_kube.requests,
            fenced=lambda: self.kube.fenced,
        )

    def _archive(self) -> Archive | None:
        """The archive the HTTP API reads: the writer's, once it has opened it."""
        return self.archiver.archive if self.archiver is not None else None

    async def start(self) -> None:
        """Start the HTTP server and every loop as tasks of the running event loop (kopf's start-up calls this)."""
        if self.archiver is not None:
            await self.archiver.check()  # a schema this code cannot use ends the start here, in one line
        metrics.REGISTRY.register(self.collector)
        self._registered = True
        if self.settings.http_port is not None:
            from ..http.api import routes
            from ..http.server import ServingCertificate, build_app, serve

            tls = ServingCertificate(*self.settings.http_tls) if self.settings.http_tls else None
            self._web_runner = await serve(build_app(lambda: self.ready, self.metrics, routes(self, self._archive),
                                           self.role),
                                           self.settings.http_host, self.settings.http_port, tls)
        loops: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            *((f"informer {i.name}", i.run) for i in self.informers),
            ("events", self.events.run),
            ("timers", self.timers.run),
            *((("leader election", self.elector.run),) if self.elector is not None else ()),
            ("jobs", lambda: self.jobs.run([i.synced for i in self.informers])),
            ("schedules", lambda: self.schedules.run([i.synced for i in self.informers])),
            ("worker pools", lambda: self.pools.run([i.synced for i in self.informers])),
            ("retention cap", self._cap),
            *((("archive", self.archiver.run), ("archive prune", lambda: self.archiver.prune(utcnow)))
              if self.archiver is not None else ()),
        ]
        self._tasks = [asyncio.create_task(supervise(name, loop), name=name) for name, loop in loops]

    async def stop(self) -> None:
        """Cancel the loops, close the HTTP server and the API clients (kopf's clean-up calls this)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.archiver is not None:
            await self.archiver.close()
        if self._web_runner is not None:
            await self._web_runner.cleanup()
            self._web_runner = None
        if self._registered:
            metrics.REGISTRY.unregister(self.collector)
            self._registered = False
        for kube in (self.kube, self.api_kube, self.elector.kube if self.elector else None):
            if kube is not None:
                await kube.close()


async def supervise(name: str, loop: Callable[[], Awaitable[None]], first_delay: float = 1.0,
                    max_delay: float = 60.0) -> None:
    """Run a loop that should run for ever; if it raises anyway (a defect no per-object guard caught), log it,
    count it and start it again after a growing delay, instead of ending the process. Cancellation stops it."""
    delay = first_delay
    while True:
        started = time.monotonic()
        try:
            await loop()
            log.error("%s ended; starting it again in %.0f s", name, delay)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the process outlives any one loop's defect
            log.exception("%s failed; starting it again in %.0f s", name, delay)
        metrics.LOOP_RESTARTS.labels(name).inc()
        if time.monotonic() - started > 10 * max_delay:
            delay = first_delay  # it had run well for a long while: this is a new streak
        await asyncio.sleep(delay)
        delay = min(delay * 2, max_delay)
