"""A worker inside your own asyncio program (README, "A worker in your own program"): the same worker as
`sextant worker`, serving the SDK functions you give it, on your event loop.

    import sextant.worker
    from myapp.handlers import charge        # a function registered with @sextant.sdk.handler("charge-card")

    await sextant.worker.serve(namespace="shop", handlers=[charge], concurrency=16)   # until cancelled

or, to stop it yourself (a drain, as SIGTERM to `sextant worker`):

    worker = sextant.worker.Worker(namespace="shop", handlers=[charge])
    task = asyncio.create_task(worker.run())
    ...
    worker.stop()
    await task

It serves exactly the functions given (every registered one when none are), on every Queue of the namespace unless
`queues` names some; it installs no signal handlers (your program owns them). Bad input (no such queue, a function
without a worker-mode Handler, nothing to serve) raises ValueError naming it before anything is registered; run()
raises Stopped when another process took the worker's name over, and returns after a drain.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..resources import inputs
from .registration import default_name, name_problem
from .settings import Settings

Handlers = Iterable[Callable[..., Any]] | Mapping[str, Callable[..., Any]]


class Stopped(Exception):
    """The worker stopped on its own: another process registered under its name (it is no longer that worker)."""


def _functions(handlers: Handlers | None) -> dict[str, Callable[..., Any]]:
    """Handler name → function: a mapping as given, functions by the name @sextant.sdk.handler registered them
    under, every registered function for None."""
    from .. import sdk

    registered = sdk.registered()
    if handlers is None:
        return registered
    if isinstance(handlers, Mapping):
        return dict(handlers)
    out: dict[str, Callable[..., Any]] = {}
    for fn in handlers:
        names = [name for name, known in registered.items() if known is fn]
        if not names:
            raise ValueError(f"handlers: {getattr(fn, '__qualname__', fn)!r} is not registered with "
                             "@sextant.sdk.handler(NAME): register it, or pass {NAME: function}")
        out.update((name, fn) for name in names)
    return out


class Worker:
    """One worker: start() reads and checks what it serves, run() registers and serves until stop() has drained it."""

    def __init__(self, namespace: str | None = None, handlers: Handlers | None = None, *,
                 queues: Iterable[str] | None = None, concurrency: int = Settings.concurrency,
                 name: str | None = None, drain_grace: float = Settings.drain_grace, kubeconfig: str | None = None,
                 context: str | None = None, connection: Any = None) -> None:
        from ..kube import kubeconfig as config

        if name is not None and (problem := name_problem(name)):
            raise ValueError(problem.replace("--name", "name", 1))
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency: must be a whole number of at least 1, not {concurrency!r}")
        if drain_grace < 0:
            raise ValueError(f"drain_grace: must be 0 seconds or more, not {drain_grace!r}")
        conn = connection if connection is not None else config.load(kubeconfig, context, None)
        namespace = namespace or conn.namespace or "default"
        inputs.namespace("namespace", namespace)
        functions = _functions(handlers)
        settings = Settings(namespace=namespace, name=name or default_name(), concurrency=concurrency,
                            drain_grace=drain_grace, want_queues=frozenset(queues) if queues is not None else None,
                            want_handlers=frozenset(functions))
        self._setup(conn, settings, functions)

    @classmethod
    def of(cls, conn: Any, settings: Settings, functions: dict[str, Callable[..., Any]]) -> Worker:
        """`sextant worker`'s: its flags as Settings (it also serves command handlers, and filters by --handler)."""
        worker = cls.__new__(cls)
        worker._setup(conn, settings, functions)
        return worker

    def _setup(self, conn: Any, settings: Settings, functions: dict[str, Callable[..., Any]]) -> None:
        from .metrics import WorkerMetrics

        self.connection, self.settings, self.functions = conn, settings, functions
        self.name, self.namespace = settings.name, settings.namespace
        self._service: Any = None
        self._kube: Any = None
        self._clients: list[Any] = []
        self._stop_asked = False
        self.metrics = WorkerMetrics(self.name, lambda: self._service.slots() if self._service
                                     else (0, settings.concurrency))

    async def start(self) -> None:
        """Read the namespace's Queues and Handlers and check what to serve (ValueError naming what is wrong;
        ApiError when they cannot be read). Nothing is registered yet."""
        if self._service is not None:
            return
        from ..kube.client import Kube
        from ..resources import API_VERSION, contract
        from ..resources.handler import HandlerSpec
        from ..resources.queue import QueueSpec
        from .plan import plan
        from .registration import pod_owner
        from .service import Worker as Service

        kube = self._kube = Kube(self.connection, user_agent=f"sextant-worker/{self.name}")
        queues = _read(QueueSpec, await _listed(kube, contract.path(API_VERSION, "queues", self.namespace)))
        handlers = _read(HandlerSpec, await _listed(kube, contract.path(API_VERSION, "handlers", self.namespace)))
        s = self.settings
        plan(self.namespace, queues, handlers, self.functions, s.want_queues, s.want_handlers, s.allow_commands)
        owner = pod_owner()
        self._service = Service(kube, s, self.functions, queues, handlers, self._jobs_client, self.metrics,
                                owner=owner, user=None if owner else await _user(kube))

    def _jobs_client(self) -> Any:
        """One client for every handler's ctx.jobs (httpx.Client is thread-safe)."""
        if not self._clients:
            from ..client import Client

            self._clients.append(Client(self.connection, user_agent="sextant-sdk"))
        return self._clients[0]

    async def run(self) -> None:
        """Register and serve until stop() has drained it; Stopped when another process took its name over."""
        try:
            await self.start()
            if self._stop_asked:
                asyncio.get_running_loop().call_soon(self._service.drain)
            code = await self._service.run()
            if code != 0:
                raise Stopped(self._service.registration.taken_over_reason or "the worker stopped")
        finally:
            await self.close()

    def stop(self) -> None:
        """Drain: take nothing new, let running handlers finish within drain_grace, stop the rest, deregister; run()
        then returns. A second stop() skips what is left of the grace."""
        self._stop_asked = True
        if self._service is not None:
            self._service.drain()

    async def close(self) -> None:
        if self._kube is not None:
            await self._kube.close()
        for client in self._clients:
            client.close()
        self._clients.clear()


async def serve(namespace: str | None = None, handlers: Handlers | None = None, **options: Any) -> None:
    """Run a worker until the task running it is cancelled (then it drains first) or it is stopped."""
    worker = Worker(namespace, handlers, **options)
    task = asyncio.ensure_future(worker.run())
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        worker.stop()
        await task
        raise


async def _listed(kube: Any, path: str) -> list[dict[str, Any]]:
    items, _ = await kube.list(path)
    return items


def _read(kind: Any, items: list[dict[str, Any]]) -> dict[str, Any]:
    import logging

    found = {}
    for item in items:
        try:
            found[item["metadata"]["name"]] = kind.model_validate(item.get("spec") or {})
        except ValueError as exc:
            logging.getLogger("sextant.worker").warning("%s %s cannot be read: %s", kind.__name__,
                                                        item["metadata"]["name"], exc)
    return found


async def _user(kube: Any) -> str | None:
    """Outside a pod, the user its credentials authenticate as (a SelfSubjectReview), for spec.user; None when the
    API does not say."""
    from ..kube.client import ApiError

    try:
        review = await kube.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                    body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
                                    retry=False, timeout=5.0)
    except ApiError:
        return None
    name = ((review.get("status") or {}).get("userInfo") or {}).get("username")
    return str(name)[:256] if name else None
