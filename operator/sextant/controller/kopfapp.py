"""kopf as the operator's runtime: one process, one event loop, kopf's signal handling (docs/operator.md).

kopf runs the process: its start-up handler starts Sextant's machinery (`Operator.start`: the lean informers, the
view, the job and schedule controllers, the timers, the event poster, leader election,
the HTTP server) as tasks on kopf's loop, its clean-up handler stops them (`Operator.stop`), its login handler
uses Sextant's own kubeconfig `Connection`, its probes report readiness and role. Every kind is watched by the
lean informers (jobs, pods and leases need their cost and server-side label selectors; the low-rate kinds need
their resilience: kopf's watch ends the whole process on a malformed watch line, a watch answered 410, or an object
nested deeper than the json module decodes). With `Settings.kopf_watches` (`--kopf-watches`) kopf's `on.event`
handlers watch Queue, Handler and Schedule too and feed the controllers through `feed.Feed`, shared with those
kinds' informers.

kopf writes nothing to Sextant's objects: no Event posting, progress and diff-base storages that never patch, no
finalizers (only `on.event` handlers, which need none), standalone (no peering objects), no cluster-wide scanning.
So its handlers, which only feed the in-memory view, can never bypass leadership (docs/ha.md): every write still
goes through the controllers' fenced client.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Iterable
from typing import Any

import kopf

from ..kubeconfig import Connection
from ..resources import GROUP, VERSION
from .main import Operator, Settings

log = logging.getLogger("sextant.operator")

# kopf (and aiohttp under it) decode with the standard json module, which stops at the interpreter's recursion
# limit (1000 levels). The API server stores objects nested up to 10,000 levels (jsontext.py); one such Queue,
# Handler or Schedule would end kopf's watch with a RecursionError, and kopf ends the process with it. CPython 3.11
# decodes 10,000 levels within a recursion limit of 12,000 on an 8 MiB main-thread stack (kopf decodes ~100 frames
# deep); the lean informers decode with jsontext.loads, which has no limit.
RECURSION_LIMIT = 12_000

KINDS = ("queues", "handlers", "schedules")  # the kinds kopf watches (plural names in sextant.dev)
WORKER_LIMIT = 16  # kopf's concurrent per-object workers per watch: bounded (unbounded = one task per object)
EXIT_TIMEOUT = 20.0  # seconds from SIGTERM to a forced exit if a clean-up hangs (Kubernetes grants 30 by default)


class NoProgressStorage(kopf.ProgressStorage):
    """Handler progress kept nowhere: `on.event` handlers have none, and kopf must never patch an object."""

    def fetch(self, *, key: Any, body: Any) -> None:
        return None

    def store(self, *, key: Any, record: Any, body: Any, patch: Any) -> None:
        return None

    def purge(self, *, key: Any, body: Any, patch: Any) -> None:
        return None

    def touch(self, *, body: Any, patch: Any, value: str | None) -> None:
        return None

    def clear(self, *, essence: Any) -> Any:
        return essence


class NoDiffBaseStorage(kopf.DiffBaseStorage):
    """No last-handled configuration: it serves kopf's change handlers, which Sextant does not use."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        return {}  # no essence to compare: spares a deep copy of every object per event

    def fetch(self, *, body: Any) -> None:
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None


def operator_settings(log_level: int = logging.WARNING) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False  # kopf posts no Events: Sextant's EventRecorder posts its own, rate-limited
    settings.posting.level = logging.WARNING
    settings.persistence.progress_storage = NoProgressStorage()
    settings.persistence.diffbase_storage = NoDiffBaseStorage()
    settings.scanning.disabled = True  # no watch of every CRD and namespace of the cluster
    settings.peering.standalone = True  # no KopfPeering objects: Sextant's Lease elects the leader
    settings.peering.mandatory = False
    settings.queueing.worker_limit = WORKER_LIMIT
    settings.process.ultimate_exiting_timeout = EXIT_TIMEOUT
    # kopf logs every handler's success at INFO: WARNING unless the operator runs at DEBUG.
    logging.getLogger("kopf").setLevel(logging.DEBUG if log_level <= logging.DEBUG else logging.WARNING)
    return settings


def login_info(conn: Connection) -> kopf.ConnectionInfo:
    """kopf's credentials from Sextant's Connection: the same server, CA, token or client certificate, so
    --kubeconfig/--context (and in-cluster service accounts) mean the same to both."""
    https = conn.server.startswith("https")
    cert, key = conn.client_cert or (None, None)
    return kopf.ConnectionInfo(
        server=conn.server,
        ca_path=conn.ca_file if https and conn.verify and conn.ca_file else None,
        insecure=True if https and not conn.verify else None,
        scheme="Bearer" if conn.token() else None,
        token=conn.token() or None,
        certificate_path=cert,
        private_key_path=key,
        default_namespace=conn.namespace,
    )


def namespace_scope(namespaces: Iterable[str]) -> dict[str, Any]:
    """kopf.operator's scope arguments for --watch-namespace: those namespaces, or cluster-wide when none."""
    chosen = list(dict.fromkeys(namespaces))
    return {"namespaces": chosen, "clusterwide": False} if chosen else {"namespaces": [], "clusterwide": True}


def registry_for(operator: Operator, conn: Connection) -> kopf.OperatorRegistry:
    """An explicit registry (never kopf's global default): what this process's kopf does, and nothing else."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry, errors=kopf.ErrorsMode.PERMANENT)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return login_info(conn)

    @kopf.on.startup(registry=registry, errors=kopf.ErrorsMode.PERMANENT)
    async def startup(**_: Any) -> None:
        await operator.start()

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        await operator.stop()
        log.info("stopped")

    @kopf.on.probe(id="ready", registry=registry)
    async def ready(**_: Any) -> bool:
        return operator.ready

    @kopf.on.probe(id="role", registry=registry)
    async def role(**_: Any) -> str:
        return operator.role()

    if not operator.settings.kopf_watches:
        return registry  # the default: kopf runs the process and watches nothing (docs/operator.md says why)
    for plural in KINDS:
        feed = operator.feeds[plural]

        async def on_event(event: dict[str, Any], _feed: Any = feed, **_: Any) -> None:
            _feed.from_kopf(event.get("type"), event.get("object") or {})

        kopf.on.event(group=GROUP, version=VERSION, plural=plural, id=f"feed-{plural}",
                      registry=registry)(on_event)
    return registry


def allow_deep_json() -> None:
    """Let kopf's json decoding read any object the API server stores (see RECURSION_LIMIT)."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))


async def serve(conn: Connection, settings: Settings, *, log_level: int = logging.WARNING,
                stop_flag: asyncio.Event | None = None) -> None:
    """Run the operator on kopf on the running loop until SIGINT/SIGTERM (or stop_flag)."""
    if settings.kopf_watches:
        allow_deep_json()
    operator = Operator(conn, settings)
    await kopf.operator(
        registry=registry_for(operator, conn),
        settings=operator_settings(log_level),
        standalone=True,
        liveness_endpoint=settings.kopf_liveness,
        stop_flag=stop_flag,
        **namespace_scope(settings.namespaces),
    )


def run(conn: Connection, settings: Settings) -> None:
    try:
        import uvloop  # kopf does not enable it; it halves the event loop's cost per watch event

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(conn, settings, log_level=logging.getLogger().getEffectiveLevel()))
