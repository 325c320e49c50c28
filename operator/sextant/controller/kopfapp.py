"""kopf as the operator's runtime: one process, one event loop, kopf's signal handling (docs/operator.md).

kopf runs the process: its start-up handler starts Sextant's machinery (`Operator.start`: the lean informers, the
view, the job and schedule controllers, the timers, the event poster, leader election,
the HTTP server) as tasks on kopf's loop, its clean-up handler stops them (`Operator.stop`), its login handler
uses Sextant's own kubeconfig `Connection`, its probes report readiness and role. kopf's `on.event` handlers
watch Queue, Handler and Schedule and feed the controllers through `feed.Feed`, shared with those kinds' lean
informers (whose first lists are the admission gate); jobs, pods and leases are the lean informers' alone.
`Settings.kopf_watches = False` (`--no-kopf-watches`) leaves the low-rate kinds to the informers too.

kopf ends the whole process when one of its watches raises, and three things make it raise that must not stop
the operator: a malformed line in a watch stream, a watch answered 410 as an HTTP status, an object nested
deeper than the json module decodes (and, after kopf's retries run out, an API server that stays away). Sextant
contains them at one internal seam of kopf, `watching.continuous_watch` (one list, then watches, of one kind in
one namespace): a failure there ends that one stream as an expired resource version does, so kopf's own loop
(`infinite_watch`) lists again, after a backoff; the kind's Feed marks kopf's watch not live until then
(readiness), and the informer brings every change meanwhile. `seam_in_place` checks that the seam is where it
was; tests/unit/test_kopfapp.py pins it.

kopf writes nothing to Sextant's objects: no Event posting, progress and diff-base storages that never patch, no
finalizers (only `on.event` handlers, which need none), standalone (no peering objects), no cluster-wide scanning.
So its handlers, which only feed the in-memory view, can never bypass leadership (docs/ha.md): every write still
goes through the controllers' fenced client.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import inspect
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

import kopf
from kopf._cogs.clients import watching as kopf_watching  # the one internal of kopf Sextant touches (see above)

from ..kube import metrics
from ..kube.kubeconfig import Connection
from ..resources import GROUP, VERSION
from .feed import Feed
from ..kube.informer import RETRY_INITIAL, RETRY_MAX, jittered
from .operator import Operator
from .settings import Settings
from ..kube.workqueue import describe

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
STEADY_SECONDS = 30.0  # a kopf watch that ran this long before failing starts a new streak of backoffs


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


class Backoffs:
    """kopf's retries of a request that failed on the connection or with 5xx/429/403
    (`settings.networking.error_backoffs`, documented as any re-iterable, even infinite): the informers' schedule,
    0.2 s doubling to 2 s with jitter, for ever. kopf's default gives up after ~1 minute and raises, and a raise
    in a watch (or in the discovery at start-up) ends kopf's process."""

    def __iter__(self) -> Iterator[float]:
        delay = RETRY_INITIAL
        while True:
            yield jittered(delay)
            delay = min(delay * 2, RETRY_MAX)


class MalformedEvent(ValueError):
    """A decoded watch event kopf's watcher cannot key (no object, or an object without metadata)."""


def keyable(item: Any) -> bool:
    """What kopf's watcher reads of every event before any error handling of its own: object.metadata."""
    if isinstance(item, kopf_watching.Bookmark):
        return True
    obj = item.get("object") if isinstance(item, dict) else None
    return isinstance(obj, dict) and isinstance(obj.get("metadata"), dict)


ContinuousWatch = Callable[..., AsyncIterator[Any]]


class WatchGuard:
    """Contains the failures of kopf's watches (see the module's docstring) and reports their health to the Feeds.

    A stream of kopf's (one list, then watches, of one kind in one namespace) that raises is ended as if its
    resource version had expired: kopf lists again. Before that it waits a backoff (the informers' schedule, reset
    once a stream has carried events or run for STEADY_SECONDS), so a fault that persists (a proxy that garbles
    every watch; an object too deep for the interpreter) costs a list every 2 s at most. Each failure is counted in
    `sextant_kopf_watch_failures_total`; the first of a streak is logged as a warning."""

    def __init__(self, feeds: Mapping[str, Feed] | None = None, *,
                 sleep: Callable[[float], Any] = asyncio.sleep) -> None:
        self.feeds = feeds or {}
        self.sleep = sleep
        self._delays: dict[tuple[str, str | None], float] = {}
        self._failing: set[tuple[str, str | None]] = set()

    async def stream(self, original: ContinuousWatch, **kwargs: Any) -> AsyncIterator[Any]:
        resource, namespace = kwargs.get("resource"), kwargs.get("namespace")
        plural = str(getattr(resource, "plural", resource))
        feed = self.feeds.get(plural) if getattr(resource, "group", None) == GROUP else None
        key = (plural, namespace)
        if feed is not None:
            feed.kopf_started(namespace)
        started, progressed, listed = time.monotonic(), False, False
        try:
            async for item in original(**kwargs):
                if item is kopf_watching.Bookmark.LISTED:
                    listed = True
                    self._listed(key, feed)
                elif not keyable(item):
                    raise MalformedEvent(f"an event without object.metadata: {item!r:.200}")
                elif listed and not progressed:
                    progressed = True
                yield item
        except Exception as exc:  # noqa: BLE001 - kopf would end the process on it; a fresh list is the cure
            await self._failed(key, feed, exc, progressed or time.monotonic() - started > STEADY_SECONDS)

    def _listed(self, key: tuple[str, str | None], feed: Feed | None) -> None:
        if feed is not None:
            feed.kopf_listed(key[1])
        if key in self._failing:
            self._failing.discard(key)
            log.info("kopf's watch of %s is live again", where(key))

    async def _failed(self, key: tuple[str, str | None], feed: Feed | None, exc: Exception, steady: bool) -> None:
        delay = RETRY_INITIAL if steady else self._delays.get(key, RETRY_INITIAL)
        self._delays[key] = min(delay * 2, RETRY_MAX)
        wait = jittered(delay)
        metrics.KOPF_WATCH_FAILURES.labels(key[0], type(exc).__name__).inc()
        message = describe(exc, 300)
        if feed is not None:
            feed.kopf_failed(key[1], message)
        first = key not in self._failing
        self._failing.add(key)
        log.log(logging.WARNING if first else logging.DEBUG,
                "kopf's watch of %s failed (%s); listing again in %.1f s (the process and the informer go on)",
                where(key), message, wait)
        await self.sleep(wait)


def where(key: tuple[str, str | None]) -> str:
    return f"{key[0]} in {key[1]}" if key[1] else f"{key[0]} (all namespaces)"


_GUARD: ContextVar[WatchGuard | None] = ContextVar("sextant_kopf_watch_guard", default=None)
_FALLBACK = WatchGuard()  # a kopf watch outside serve() (none in Sextant) is contained all the same


def seam_in_place() -> bool:
    """kopf's watchers get their streams from `infinite_watch`, which calls `continuous_watch` by its module-global
    name with these keyword arguments, and restarts it (listing again) whenever it returns. True when kopf still
    reads so; a kopf upgrade that moves it makes this False (and tests/unit/test_kopfapp.py fail)."""
    stream = getattr(kopf_watching, "continuous_watch", None)
    infinite = getattr(kopf_watching, "infinite_watch", None)
    if stream is None or infinite is None or not inspect.isasyncgenfunction(getattr(stream, "__wrapped__", stream)):
        return False
    params = inspect.signature(getattr(stream, "__wrapped__", stream)).parameters
    return ({"settings", "resource", "namespace", "operator_pause_waiter"} <= set(params)
            and "continuous_watch" in infinite.__code__.co_names
            and hasattr(kopf_watching, "Bookmark") and hasattr(kopf_watching.Bookmark, "LISTED"))


def contain_watch_failures() -> bool:
    """Wrap kopf's `continuous_watch` in the current WatchGuard (once per process). False when the seam has moved:
    then kopf's watches must stay off, since they would end the process again."""
    if not seam_in_place():
        return False
    original = kopf_watching.continuous_watch
    if getattr(original, "__wrapped__", None) is not None:
        return True  # already wrapped

    async def continuous_watch(**kwargs: Any) -> AsyncIterator[Any]:
        async for item in (_GUARD.get() or _FALLBACK).stream(original, **kwargs):
            yield item

    continuous_watch.__wrapped__ = original  # type: ignore[attr-defined]
    kopf_watching.continuous_watch = continuous_watch  # type: ignore[assignment]
    return True


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
        return registry  # --no-kopf-watches: kopf runs the process, the informers watch every kind
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
    if settings.kopf_watches and not contain_watch_failures():
        log.error("kopf %s no longer has the seam Sextant contains its watch failures at (docs/operator.md): "
                  "Queue, Handler and Schedule are watched by the informers alone", kopf.__version__)
        settings = dataclasses.replace(settings, kopf_watches=False)
    if settings.kopf_watches:
        allow_deep_json()
    operator = Operator(conn, settings)
    _GUARD.set(WatchGuard(operator.feeds))  # kopf's tasks, created below, inherit it
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
