"""`sextant dashboard`: a web server on loopback that shows queues, jobs, schedules and workers live, and acts with
the user's own kubeconfig credentials (like `kubectl proxy`): every read goes to the API server as that user, every
action is the CLI's own request (client.py's cancel, retry and trigger), so its refusals are worded the same.

Live: one server-side list+watch of the scope's jobs keeps a cache (for the queue counts, the chart and the
schedules' jobs) and a version number that every watch event bumps; the page's script asks its regions again
every second with the version it shows, and gets 204 while nothing changed. The jobs view itself is paged through
the API server (fieldSelector on the Job CRD's selectableFields, labelSelector for the schedule, limit/continue)."""

from __future__ import annotations

import asyncio
import logging
import secrets
import ssl
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

import httpx
from aiohttp import web

from .. import client as requests
from ..resources import contract, inputs
from ..client import Client, Refused, refused
from ..kube.client import ApiError, Kube, NotFound
from ..kube.clock import utcnow
from ..kube.informer import Informer, key_of
from ..kube.kubeconfig import Connection
from ..lifecycle.worker_view import as_dict
from ..resources.job import job_id
from . import pages
from .history import ArchivedJobs
from .views import (SECRET_PARAM, FilterError, JobFilter, allowed_hosts, bulk_targets, cookie_name, door,
                    finished_series, is_loopback, jobs_page, queue_rows, schedule_rows, timeline)

log = logging.getLogger(__name__)
LOG_LIMIT = 512 * 1024  # bytes of a pod's log read at most (the API server's limitBytes)
LOG_LINES = 5000  # of its last this many lines (tailLines)
EVENTS_SHOWN = 10  # a job page's recent Events


def _slim(job: dict[str, Any]) -> dict[str, Any]:
    """What the cache keeps of a job: no payload and no managedFields (10k jobs stay small); the job's own
    page reads the whole object."""
    meta = {k: v for k, v in job["metadata"].items() if k != "managedFields"}
    spec = {k: v for k, v in (job.get("spec") or {}).items() if k != "payload"}
    return {"metadata": meta, "spec": spec, "status": job.get("status") or {}}


class JobCache:
    """The scope's jobs, kept by an informer (kube/informer.py); `version` changes with every change, `error`
    holds what the API server refused (a 403 stays visible while the informer keeps trying)."""

    def __init__(self, kube: Kube, namespace: str | None) -> None:
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 0
        self.error: ApiError | None = None
        self.synced = asyncio.Event()  # the first list arrived, or the API server refused it
        self.informer = Informer(kube, contract.jobs_path(namespace), self._changed, name="jobs",
                                 on_failure=self._failed, on_reconnect=self._recovered)

    async def run(self) -> None:
        informer = asyncio.ensure_future(self.informer.run())
        try:
            await self.informer.synced.wait()
            self._recovered()
            await informer
        finally:
            informer.cancel()

    def _changed(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "delete":
            self.jobs.pop(key_of(obj), None)
        else:
            self.jobs[key_of(obj)] = _slim(obj)
        self.version += 1

    def _failed(self, exc: Exception) -> None:
        if not isinstance(exc, ApiError):
            return  # a connection that broke: the informer resumes it, the cache stays as it was
        if self.error is None or str(self.error) != str(exc):
            self.version += 1
        self.error = exc
        self.synced.set()

    def _recovered(self) -> None:
        if self.error is not None:
            self.error = None
            self.version += 1
        self.synced.set()


class Dashboard:
    def __init__(self, conn: Connection, namespace: str | None, archive_dsn: str | None = None) -> None:
        self.conn, self.namespace = conn, namespace
        self.archived = ArchivedJobs(archive_dsn)
        self.kube = Kube(conn, user_agent="sextant-dashboard", attempts=3)
        self.client = Client(conn, user_agent="sextant-dashboard")
        self.cache = JobCache(self.kube, namespace)
        self.secret = secrets.token_urlsafe(32)
        self.hosts: frozenset[str] | None = frozenset()
        self.port = 0
        self.tls = False
        self.static = {name: (resources.files(__package__) / "static" / name).read_bytes()
                       for name in ("dashboard.js", "dashboard.css")}

    # --- the app ------------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        r = app.router
        r.add_get("/", self.queues_page)
        r.add_get("/fragment/queues", self.queues_fragment)
        r.add_get("/jobs", self.jobs_page)
        r.add_get("/fragment/jobs", self.jobs_fragment)
        r.add_get("/jobs/{ns}/{id}", self.job_page)
        r.add_get("/fragment/job/{ns}/{id}", self.job_fragment)
        r.add_get("/schedules", self.schedules_page)
        r.add_get("/fragment/schedules", self.schedules_fragment)
        r.add_get("/workers", self.workers_page)
        r.add_get("/fragment/workers", self.workers_fragment)
        r.add_get("/logs/{ns}/{pod}", self.pod_log)
        r.add_post("/api/jobs/{ns}/{id}/{verb:cancel|retry}", self.job_action)
        r.add_post("/api/bulk/{verb:cancel|retry}", self.bulk_action)
        r.add_post("/api/schedules/{ns}/{name}/trigger", self.trigger)
        r.add_post("/api/queues/{ns}/{name}/{verb:pause|resume}", self.queue_action)
        r.add_get("/static/{name}", self.static_file)
        r.add_get("/favicon.ico", lambda request: web.Response(status=204))
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, app: web.Application) -> None:
        app["cache"] = asyncio.create_task(self.cache.run())
        await self.archived.open()

    async def _stop(self, app: web.Application) -> None:
        app["cache"].cancel()
        await self.archived.close()
        await self.kube.close()
        self.client.close()

    @web.middleware
    async def _guard(self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
        cookie = cookie_name(self.port)
        entry = door(request.method, request.path, request.query, request.headers, request.cookies.get(cookie),
                     self.secret, self.hosts, "https" if self.tls else "http")
        if entry.redirect is not None:
            response: web.StreamResponse = web.HTTPSeeOther(entry.redirect)
            response.set_cookie(cookie, self.secret, httponly=True, samesite="Strict", secure=self.tls, path="/")
        elif entry.refusal is not None:
            if request.method in ("GET", "HEAD"):
                response = web.Response(text=entry.refusal + "\n", status=entry.status)
            else:
                response = web.json_response({"ok": False, "message": entry.refusal}, status=entry.status)
        else:
            response = await handler(request)
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Frame-Options"] = "DENY"  # no clickjacking of the action buttons
        response.headers["Content-Security-Policy"] = "default-src 'self'; style-src 'self' 'unsafe-inline'"
        response.headers["Referrer-Policy"] = "no-referrer"  # continue tokens stay here
        return response

    # --- helpers ------------------------------------------------------------------------------------------
    @property
    def wide(self) -> bool:
        return self.namespace is None

    def scope(self) -> str:
        return "all namespaces" if self.namespace is None else f"namespace {self.namespace}"

    def html(self, title: str, active: str, body: str) -> web.Response:
        return web.Response(text=pages.page(title, active, self.scope(), body), content_type="text/html")

    @staticmethod
    def fragment(text: str, version: int | None = None) -> web.Response:
        response = web.Response(text=text, content_type="text/html")
        if version is not None:
            response.headers["X-Version"] = str(version)
        return response

    def unchanged(self, request: web.Request) -> bool:
        return request.query.get("v") == str(self.cache.version)

    def where(self, namespace: str | None = None) -> str:
        ns = namespace or self.namespace
        return f"in namespace {ns}" if ns else "in any namespace"

    def refused(self, exc: ApiError, what: str) -> str:
        if exc.status == 403:
            return pages.forbidden(what, exc.message)
        return pages.error(f"the API server refused to {what}: {exc.status} {exc.reason}: {exc.message}"
                           if exc.status else f"cannot reach the API server at {self.conn.server}: {exc}")

    async def _wait_synced(self) -> None:
        try:
            await asyncio.wait_for(self.cache.synced.wait(), 30)
        except asyncio.TimeoutError:
            pass

    # --- queues -------------------------------------------------------------------------------------------
    async def _queues(self) -> str:
        await self._wait_synced()
        if self.cache.error is not None:
            return self.refused(self.cache.error, f"list or watch jobs {self.where()}")
        try:
            queues, _ = await self.kube.list(contract.queues_path(self.namespace))
        except ApiError as exc:
            return self.refused(exc, f"list queues {self.where()}")
        now = utcnow()
        jobs = list(self.cache.jobs.values())
        return pages.queues_fragment(queue_rows(queues, jobs, now), finished_series(jobs, now), now, self.wide)

    async def queues_page(self, request: web.Request) -> web.Response:
        body = pages.live("/fragment/queues", await self._queues(), self.cache.version)
        return self.html("queues", "queues", "<h1>Queues</h1>" + body)

    async def queues_fragment(self, request: web.Request) -> web.Response:
        if self.unchanged(request):
            return web.Response(status=204)
        version = self.cache.version
        return self.fragment(await self._queues(), version)

    # --- jobs ---------------------------------------------------------------------------------------------
    def _jobs_ns(self, request: web.Request) -> str | None:
        given = request.query.get("ns") or None
        if given and self.namespace is None:
            return inputs.namespace("ns", given)
        return self.namespace

    async def _jobs(self, request: web.Request) -> tuple[str, JobFilter | None]:
        """A page of the jobs view from the cache (newest first, which the API server's lists cannot do): no list
        call per request, whatever the filter."""
        try:
            flt = JobFilter.parse(request.query)
            ns = self._jobs_ns(request)
            await self._wait_synced()
            if self.cache.error is not None:
                return self.refused(self.cache.error, f"list jobs {self.where(ns)}"), flt
            jobs = list(self.cache.jobs.values())
            shown, token, total = jobs_page(jobs, flt, ns, request.query.get("continue") or None)
        except (FilterError, inputs.InputError) as exc:
            return pages.error(str(exc)), None
        cancellable = len(bulk_targets(jobs, flt, ns, "cancel"))
        retryable = len(bulk_targets(jobs, flt, ns, "retry"))
        extra = {"ns": ns} if ns and self.namespace is None else {}
        return pages.jobs_fragment(shown, token, flt, utcnow(), self.wide, total, extra,
                                   cancellable, retryable), flt

    async def _archived(self, request: web.Request, flt: JobFilter | None) -> str:
        if flt is None:
            return ""
        ns = self._jobs_ns(request)
        extra = {"ns": ns} if ns and self.namespace is None else {}
        return await self.archived.section(flt, ns, request.query.get("archived") or None, utcnow(), self.wide,
                                           extra)

    async def jobs_page(self, request: web.Request) -> web.Response:
        version = self.cache.version
        inner, flt = await self._jobs(request)
        query = request.query_string
        form = pages.jobs_form(flt or JobFilter(), request.query.get("ns"))
        return self.html("jobs", "jobs", "<h1>Jobs</h1>" + form +
                         pages.live("/fragment/jobs" + (f"?{query}" if query else ""), inner, version) +
                         await self._archived(request, flt))

    async def jobs_fragment(self, request: web.Request) -> web.Response:
        if self.unchanged(request):
            return web.Response(status=204)
        version = self.cache.version
        inner, _ = await self._jobs(request)
        return self.fragment(inner, version)

    # --- one job ------------------------------------------------------------------------------------------
    async def _job(self, ns: str, ident: str) -> str:
        try:
            inputs.namespace("namespace", ns)
            name = inputs.job_name("ID", ident)
        except inputs.InputError as exc:
            return pages.error(str(exc))
        try:
            job = await self.kube.get(contract.jobs_path(ns, name))
        except NotFound:
            archived = await self.archived.job(ns, name)
            if archived is None:
                problem = self.archived.problem
                return pages.error(f"job {job_id(name)} not found in namespace {ns}" + (f" ({problem})" if problem
                                                                                        else ""))
            return pages.job_page_body(ns, archived, timeline(archived["status"]["attempts"], utcnow()), utcnow(),
                                       set(), None)
        except ApiError as exc:
            return self.refused(exc, f"get job {job_id(name)} in namespace {ns}")
        attempts = (job.get("status") or {}).get("attempts") or []
        pods = {a["pod"] for a in attempts if a.get("pod")}
        try:
            events, _ = await self.kube.list(contract.events_path(ns), {
                "fieldSelector": f"involvedObject.kind=Job,involvedObject.name={name}"})
            recent: list[dict[str, Any]] | None = sorted(events, key=_event_time, reverse=True)[:EVENTS_SHOWN]
        except ApiError:
            recent = None  # may not read Events: the page says so, the rest is shown
        return pages.job_page_body(ns, job, timeline(attempts, utcnow()), utcnow(), pods, recent)

    async def job_page(self, request: web.Request) -> web.Response:
        ns, ident = request.match_info["ns"], request.match_info["id"]
        version = self.cache.version
        body = pages.live(f"/fragment/job/{ns}/{ident}", await self._job(ns, ident), version)
        return self.html(f"job {ident}", "jobs", body)

    async def job_fragment(self, request: web.Request) -> web.Response:
        if self.unchanged(request):
            return web.Response(status=204)
        version = self.cache.version
        return self.fragment(await self._job(request.match_info["ns"], request.match_info["id"]), version)

    async def pod_log(self, request: web.Request) -> web.Response:
        ns, pod = request.match_info["ns"], request.match_info["pod"]
        try:
            inputs.namespace("namespace", ns)
            inputs.object_name("pod", pod, "pod name")
        except inputs.InputError as exc:
            return web.Response(text=str(exc), status=400)

        def read() -> str:  # the API server cuts it: a huge log never passes through this process whole
            return "".join(self.client.pod_log(ns, pod, tail_lines=LOG_LINES, limit_bytes=LOG_LIMIT))

        try:
            text = await asyncio.to_thread(read)
        except ApiError as exc:
            return web.Response(text=f"the API server refused the log of pod {pod} in namespace {ns}: "
                                     f"{exc.status}: {exc.message}", status=exc.status if exc.status >= 400 else 502)
        except httpx.HTTPError as exc:
            return web.Response(text=f"cannot reach the API server at {self.conn.server}: {exc}", status=502)
        if len(text.encode()) >= LOG_LIMIT:
            text = (f"[at most the last {LOG_LINES} lines and {LOG_LIMIT // 1024} KiB of them are shown; "
                    f"`sextant logs` shows the whole log]\n") + text
        return web.Response(text=text, content_type="text/plain")

    # --- schedules and workers ----------------------------------------------------------------------------
    async def _schedules(self) -> str:
        try:
            schedules, _ = await self.kube.list(contract.schedules_path(self.namespace))
        except ApiError as exc:
            return self.refused(exc, f"list schedules {self.where()}")
        try:
            events, _ = await self.kube.list(contract.events_path(self.namespace),
                                             {"fieldSelector": "involvedObject.kind=Schedule"})
        except ApiError:
            events = []  # may not read Events: the missed runs stay unknown, the rest is shown
        await self._wait_synced()
        rows = schedule_rows(schedules, self.cache.jobs.values(), events)
        return pages.schedules_fragment(rows, utcnow(), self.wide)

    async def schedules_page(self, request: web.Request) -> web.Response:
        return self.html("schedules", "schedules", "<h1>Schedules</h1>" +
                         pages.live("/fragment/schedules", await self._schedules(), self.cache.version))

    async def schedules_fragment(self, request: web.Request) -> web.Response:
        return self.fragment(await self._schedules(), self.cache.version)

    async def _workers(self) -> str:
        try:
            found = await asyncio.to_thread(self.client.list_workers, self.namespace)
        except ApiError as exc:
            return self.refused(exc, f"list Worker objects {self.where()}")
        except httpx.HTTPError as exc:
            return pages.error(f"cannot reach the API server at {self.conn.server}: {exc}")
        now = utcnow()
        rows = [as_dict(w, now) for w in sorted(found, key=lambda w: (w.namespace, w.name))]
        return pages.workers_fragment(rows, self.wide)

    async def workers_page(self, request: web.Request) -> web.Response:
        return self.html("workers", "workers", "<h1>Workers</h1>" +
                         pages.live("/fragment/workers", await self._workers(), None))

    async def workers_fragment(self, request: web.Request) -> web.Response:
        return self.fragment(await self._workers())

    # --- actions: the CLI's own requests -----------------------------------------------------------------------
    async def _act(self, request: Callable[[], str]) -> web.Response:
        """Run a request as the CLI does (the same checks, the same words for what it did or why it was refused)."""
        def call() -> tuple[bool, str]:
            try:
                return True, request()
            except (Refused, inputs.InputError) as exc:
                return False, f"error: {exc}"
            except ApiError as exc:
                return False, f"error: {refused(exc)}"
            except httpx.HTTPError as exc:
                return False, f"error: cannot reach the API server at {self.conn.server}: {exc}"

        ok, message = await asyncio.to_thread(call)
        return web.json_response({"ok": ok, "message": message}, status=200 if ok else 409)

    async def job_action(self, request: web.Request) -> web.Response:
        ask = requests.cancel if request.match_info["verb"] == "cancel" else requests.retry
        ns, ident = request.match_info["ns"], request.match_info["id"]

        def call() -> str:
            name = inputs.job_name("ID", ident)
            return ask(self.client, inputs.namespace("--namespace", ns), name)

        return await self._act(call)

    async def bulk_action(self, request: web.Request) -> web.Response:
        """Cancel or retry every job that the jobs view's filter selects and whose state allows it (at most
        BULK_MAX): client.bulk, the one path of `sextant jobs cancel|retry --queue ...` and POST /v2/jobs:cancel
        and :retry, which asks for each job as a single cancel or retry does; one answer that counts what was done
        and refused. The jobs come from the dashboard's cache (its watch of the same jobs), by the same rule
        (lifecycle/selection.py)."""
        verb = request.match_info["verb"]
        try:
            flt = JobFilter.parse(request.query)
            ns = self._jobs_ns(request)
        except (FilterError, inputs.InputError) as exc:
            return web.json_response({"ok": False, "message": f"error: {exc}"}, status=422)
        await self._wait_synced()
        targets = [(j["metadata"]["namespace"], j["metadata"]["name"])
                   for j in bulk_targets(list(self.cache.jobs.values()), flt, ns, verb)]
        return await self._act(lambda: requests.bulk(self.client, verb, targets).words(flt.words()))

    async def trigger(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]

        def call() -> str:
            schedule = inputs.object_name("NAME", name, "schedule name")
            ident, note = requests.trigger(self.client, inputs.namespace("--namespace", ns), schedule)
            return f"{ident} {note}" if note else ident  # as the CLI prints them: stdout, then stderr

        return await self._act(call)

    async def queue_action(self, request: web.Request) -> web.Response:
        ns, name, paused = request.match_info["ns"], request.match_info["name"], request.match_info["verb"] == "pause"

        def call() -> str:
            queue = inputs.object_name("NAME", name, "queue name")
            return requests.pause(self.client, inputs.namespace("--namespace", ns), queue, paused)

        return await self._act(call)

    async def static_file(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.static:
            raise web.HTTPNotFound()
        kind = "application/javascript" if name.endswith(".js") else "text/css"
        return web.Response(body=self.static[name], content_type=kind)


class TlsFiles(ValueError):
    """The certificate or key cannot be read or do not match; the message names the flags and the files."""


def _event_time(event: dict[str, Any]) -> str:
    return event.get("lastTimestamp") or event.get("eventTime") or (event.get("metadata") or {}).get(
        "creationTimestamp") or ""


async def serve(dashboard: Dashboard, address: str, port: int, say: Callable[[str], None],
                tls: ssl.SSLContext | None = None) -> None:
    runner = web.AppRunner(dashboard.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, address, port, ssl_context=tls)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1] if port == 0 else port  # type: ignore[union-attr]
    dashboard.hosts = allowed_hosts(address, bound)
    dashboard.port, dashboard.tls = bound, tls is not None
    host = f"[{address}]" if ":" in address else address
    scheme = "https" if tls is not None else "http"
    say(f"Sextant dashboard for {dashboard.scope()} at {scheme}://{host}:{bound}/?{SECRET_PARAM}={dashboard.secret} "
        "(as the kubeconfig's user; the URL carries this process's secret once: open it, do not share it; "
        "Ctrl-C stops it)")
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def run(conn: Connection, namespace: str | None, address: str, port: int, say: Callable[[str], None],
        note: Callable[[str], None], tls: tuple[str, str] | None = None, archive_dsn: str | None = None) -> None:
    """Serve the dashboard of namespace (None: every namespace) until Ctrl-C, over HTTPS with tls (certificate
    and key files); TlsFiles when it cannot read those, OSError when it cannot listen."""
    context = None
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(*tls)
        except OSError as exc:  # ssl.SSLError is one
            raise TlsFiles(f"cannot read --tls-cert {tls[0]} and --tls-key {tls[1]}: "
                           f"{exc.strerror or exc}") from None
    dashboard = Dashboard(conn, namespace, archive_dsn)
    if not is_loopback(address):
        note(f"warning: serving on {address}: anyone who can reach it and has its URL acts with your credentials")
    asyncio.run(serve(dashboard, address, port, say, context))
