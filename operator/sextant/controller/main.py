"""The operator process: informers → view → reconciler, plus the central timers and the event poster."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass, field

from .. import metrics
from ..kubeconfig import Connection
from ..resources import GROUP, VERSION
from .events import EventRecorder
from .informer import Informer
from .leader import ElectionSettings, LeaderElector, default_identity
from .jobs import JobController, utcnow
from ..kube import Kube
from .pods import LABEL_JOB
from .schedules import ScheduleController
from .timers import Timers
from .view import View

log = logging.getLogger("sextant.operator")


@dataclass
class Settings:
    namespaces: list[str] = field(default_factory=list)  # empty: all namespaces
    workers: int = 64  # an admission is 2 sequential writes; completions must not wait behind them
    pending_pods: int = 200  # per queue, attempt pods waiting for a node (0: no limit); see admission.py
    events: bool = True
    http_host: str = "0.0.0.0"
    http_port: int | None = 8080  # health, readiness, metrics and the /v2 API; None: no server
    http_tls: tuple[str, str] | None = None  # (certificate, key) files: serve HTTPS
    http_max_in_flight: int = 100  # /v2 requests served at once; more are answered 429
    http_request_timeout: float = 30.0  # seconds a /v2 request may take; then 503
    leader_election: ElectionSettings | None = None  # None: this replica acts alone


def _paths(plural: str, group: str | None, namespaces: list[str], version: str = VERSION) -> list[str]:
    base = f"/apis/{group}/{version}" if group else "/api/v1"
    if not namespaces:
        return [f"{base}/{plural}"]
    return [f"{base}/namespaces/{ns}/{plural}" for ns in namespaces]


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
        self.view = View()
        self.events = EventRecorder(self.kube, utcnow, enabled=self.settings.events)
        self.timers = Timers(utcnow)
        self.jobs = JobController(self.kube, self.view, self.events, self.timers, workers=self.settings.workers,
                                  pending_pods=self.settings.pending_pods)
        self.schedules = ScheduleController(self.kube, self.events, self.timers)
        if self.elector is not None:
            self.jobs.leading.clear()
            self.schedules.leading.clear()
        self.collector = self._collector()
        ns = self.settings.namespaces
        c = self.jobs
        self.informers = [
            *(Informer(self.kube, p, c.on_queue, name="queues") for p in _paths("queues", GROUP, ns)),
            *(Informer(self.kube, p, c.on_handler, name="handlers") for p in _paths("handlers", GROUP, ns)),
            *(Informer(self.kube, p, self._on_job, name="jobs") for p in _paths("jobs", GROUP, ns)),
            *(Informer(self.kube, p, self.schedules.on_schedule, name="schedules")
              for p in _paths("schedules", GROUP, ns)),
            # Only Sextant's own pods: a server-side label selector, never every pod of the cluster.
            *(Informer(self.kube, p, c.on_pod, label_selector=LABEL_JOB, name="pods")
              for p in _paths("pods", None, ns)),
            *(Informer(self.kube, p, c.on_lease, label_selector=LABEL_JOB, name="leases")
              for p in _paths("leases", "coordination.k8s.io", ns, version="v1")),
        ]

    @property
    def leading(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def role(self) -> str:
        if self.elector is None:
            return "leader (no leader election)"
        if self.elector.is_leader():
            return f"leader ({self.identity})"
        return f"standby ({self.identity}; the leader is {self.elector.leader_identity or 'unknown'})"

    def _on_leadership(self, leading: bool) -> None:
        for controller in (self.jobs, self.schedules):
            (controller.leading.set if leading else controller.leading.clear)()
        if leading and self.jobs.started.is_set():
            self.jobs.resync()  # start from the warm view: no cold list on takeover
        if leading and self.schedules.started.is_set():
            self.schedules.resume()  # ticks due while no replica led were missed runs

    def _on_job(self, kind: str, obj: dict) -> None:
        self.jobs.on_job(kind, obj)
        self.schedules.on_job(kind, obj)

    @property
    def ready(self) -> bool:
        return (self.jobs.started.is_set() and self.schedules.started.is_set()
                and all(i.healthy for i in self.informers))

    def metrics(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(metrics.REGISTRY), CONTENT_TYPE_LATEST

    def _collector(self) -> metrics.ViewCollector:
        return metrics.ViewCollector(
            jobs=lambda: self.view.jobs.values(),
            requests=lambda: self.kube.requests,
            depths=lambda: {"timers": len(self.timers), "reconcile": len(self.jobs.queue),
                            "events": self.events.pending},
            leader=lambda: self.leading,
            api_requests=lambda: self.api_kube.requests,
        )

    async def run(self) -> None:
        metrics.REGISTRY.register(self.collector)
        web_runner = None
        if self.settings.http_port is not None:
            from ..http.api import routes
            from ..http.server import ServingCertificate, build_app, serve

            tls = ServingCertificate(*self.settings.http_tls) if self.settings.http_tls else None
            web_runner = await serve(build_app(lambda: self.ready, self.metrics, routes(self), self.role),
                                     self.settings.http_host, self.settings.http_port, tls)
        tasks = [asyncio.create_task(i.run(), name=f"informer {i.name}") for i in self.informers]
        tasks.append(asyncio.create_task(self.events.run(), name="events"))
        tasks.append(asyncio.create_task(self.timers.run(), name="timers"))
        if self.elector is not None:
            tasks.append(asyncio.create_task(self.elector.run(), name="leader election"))
        tasks.append(asyncio.create_task(self.jobs.run([i.synced for i in self.informers]), name="jobs"))
        tasks.append(asyncio.create_task(self.schedules.run([i.synced for i in self.informers]), name="schedules"))
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if web_runner is not None:
                await web_runner.cleanup()
            metrics.REGISTRY.unregister(self.collector)
            for kube in (self.kube, self.api_kube, self.elector.kube if self.elector else None):
                if kube is not None:
                    await kube.close()


def run(conn: Connection, settings: Settings | None = None) -> None:
    """Run until SIGINT/SIGTERM."""
    try:
        import uvloop  # kopf does not enable it; it halves the event loop's cost per watch event

        uvloop.install()
    except ImportError:
        pass

    async def main() -> None:
        operator = Operator(conn, settings)
        task = asyncio.create_task(operator.run())
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            log.info("stopped")

    asyncio.run(main())
