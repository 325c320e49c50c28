"""kopf as the operator's runtime: one process, one event loop, kopf's signal handling (docs/operator.md).

kopf runs the process: its start-up handler starts Sextant's machinery (`Operator.start`: the lean informers, the
view, the job and schedule controllers, the timers, the event poster, leader election, the HTTP server) as tasks
on kopf's loop, its clean-up handler stops them (`Operator.stop`), its login handler uses Sextant's own kubeconfig
`Connection`, its probes report readiness and role.

kopf watches no resource: every kind (Queue, Handler and Schedule too) is watched once, by its lean informer,
whose first list is the admission gate and whose failures (a malformed line, a watch answered 410, an object
nested deeper than the json module decodes) fail one watch, which lists again. kopf ends its whole process when
one of its own watches raises, and no public setting of kopf's changes that. With no resource handler kopf
patches, annotates and finalizes nothing, so it can never bypass leadership (docs/ha.md): every write goes
through the controllers' fenced client.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from collections.abc import Iterable, Iterator
from typing import Any

# kopf imports the `kubernetes` package, when installed, only to recognise its model objects (the operator hands it
# none): ~18 MB of RSS for nothing. Hidden while kopf loads (kopf takes the package's absence as documented), unless
# already loaded (by a kubeconfig only the package reads); importable again right after.
_HIDE_KUBERNETES = "kubernetes" not in sys.modules
if _HIDE_KUBERNETES:
    sys.modules["kubernetes"] = None  # type: ignore[assignment]
try:
    import kopf
finally:
    if _HIDE_KUBERNETES:
        del sys.modules["kubernetes"]

from ..kube.kubeconfig import Connection
from ..kube.informer import RETRY_INITIAL, RETRY_MAX, jittered
from .operator import Operator
from .settings import Settings

log = logging.getLogger("sextant.operator")

EXIT_TIMEOUT = 20.0  # seconds from SIGTERM to a forced exit if a clean-up hangs (Kubernetes grants 30 by default)


class Backoffs:
    """kopf's retries of a request that failed on the connection or with 5xx/429/403
    (`settings.networking.error_backoffs`, documented as any re-iterable, even infinite): the informers' schedule,
    0.2 s doubling to 2 s with jitter, for ever. kopf's default gives up after ~1 minute and raises, and a raise
    in its discovery at start-up ends kopf's process."""

    def __iter__(self) -> Iterator[float]:
        delay = RETRY_INITIAL
        while True:
            yield jittered(delay)
            delay = min(delay * 2, RETRY_MAX)


def operator_settings(log_level: int = logging.WARNING) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False  # kopf posts no Events: Sextant's EventRecorder posts its own, rate-limited
    settings.posting.level = logging.WARNING
    settings.scanning.disabled = True  # no watch of every CRD and namespace of the cluster
    settings.peering.standalone = True  # no KopfPeering objects: Sextant's Lease elects the leader
    settings.peering.mandatory = False
    settings.process.ultimate_exiting_timeout = EXIT_TIMEOUT
    settings.networking.error_backoffs = Backoffs()  # kopf never gives up on an API server that is away
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
    """An explicit registry (never kopf's global default): what this process's kopf does, and nothing else: the
    process's activities, no resource handler (so kopf lists, watches and writes no object)."""
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

    return registry


async def serve(conn: Connection, settings: Settings, *, log_level: int = logging.WARNING,
                stop_flag: asyncio.Event | None = None) -> None:
    """Run the operator on kopf on the running loop until SIGINT/SIGTERM (or stop_flag)."""
    operator = Operator(conn, settings)
    await kopf.operator(
        registry=registry_for(operator, conn),
        settings=operator_settings(log_level),
        standalone=True,
        liveness_endpoint=settings.kopf_liveness,
        stop_flag=stop_flag,
        **namespace_scope(settings.namespaces),
    )


# The cyclic garbage collector's thresholds: a young collection every 50,000 net allocations, not 700. The heap is
# mostly the view's JSON, which has no cycles, and each watch event allocates hundreds of containers that live on;
# with the defaults a 3k burst ran 875 young collections that freed 4 objects each (3.6 s inside them, against 21 s of
# operator CPU).
# Cycles (an exception's traceback, say) are still collected, a few seconds later.
GC_THRESHOLDS = (50_000, 20, 10)


def run(conn: Connection, settings: Settings) -> None:
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        import uvloop  # kopf does not enable it; it halves the event loop's cost per watch event

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(conn, settings, log_level=logging.getLogger().getEffectiveLevel()))
