"""The /v2 HTTP API (README, "The HTTP API"), served by the operator process (see openapi.py for the document).

    POST /v2/jobs                      create (honours idempotency_key: 201 created, 200 the existing job, 409 when
                                       that job has another queue, handler or payload); `warnings` and Warning
                                       headers when its queue or handler does not exist
    GET  /v2/jobs?queue=&state=&handler=&label=&since=&until=&limit=&continue=
                                       list live and archived jobs as one list, a page at a time (history.py)
    GET  /v2/jobs/{job_id}             one job (job_8f3k2m9q or job-8f3k2m9q); from the archive when it is not
                                       live (`archived: true`)
    POST /v2/jobs:batch                create many ({"items": [...]}, each a POST /v2/jobs body; at most
                                       models.BATCH_MAX): every item checked first (one invalid: 422, nothing
                                       created), then one answer per item in order with its own status
    POST /v2/jobs:cancel, :retry       act on what a selection matches ({"queue", "state", "handler",
                                       "label_selector", "dry_run"}): the count, the ids, each job asked for as
                                       the single routes below ask (at most selection.BULK_MAX per call)
    POST /v2/jobs/{job_id}/cancel      409 when the job's state forbids it
    POST /v2/jobs/{job_id}/retry       409 unless the job is failed or dead
    GET  /v2/queues                    jobs per state, running vs concurrency, oldest queued job (the Queues'
                                       status numbers, and the view's counts of finished jobs: no scan of jobs)
    POST /v2/queues/{queue}/pause      pause a queue (spec.paused): running attempts finish, nothing new starts
    POST /v2/queues/{queue}/resume     resume it: its queued jobs start again, in order
    GET  /v2/openapi.json              the OpenAPI document (no credentials needed)

Every route but the document takes the query parameter `namespace` (default "default") and a bearer token
(`Authorization: Bearer <token>`), authenticated with a TokenReview (auth.py: cached, failures rate-limited per
client); each request is authorized with a SubjectAccessReview for the verb it uses (group sextant.dev, resource
jobs or queues, verb create/list/get/patch, the namespace). Errors are JSON:
{"error": {"status", "reason", "message", "field"}}.

Under load: at most `max_in_flight` /v2 requests are served at once (more: 429 with Retry-After), each has
`request_timeout` seconds (then 503 with Retry-After), and each user (as the TokenReview names them) may make
`user_burst` requests at once and `user_rate` per second after that (more: 429 with Retry-After). /healthz,
/readyz and /metrics are never refused.

A job is read from the operator's in-memory view when it watches the namespace and is ready (a job not yet seen
there is read from the API server, then from the archive); lists are the API server's own pages (the filters as
field and label selectors), then the archive's, so a request costs one page, never the whole namespace. Writes are
made with the caller's token.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, cast

from aiohttp import web
from multidict import CIMultiDict
from pydantic import ValidationError

from ..kube.clock import utcnow
from ..resources import inputs
from ..kube import metrics
from ..archive import merged
from ..client import (Client, CreateResult, HistoryUnavailable, JobRequest, KeyConflict, bulk, missing_warning,
                      refusal_message)
from ..kube import jsontext
from ..kube.client import ApiError, Gone, Kube, NotFound
from ..lifecycle import selection
from ..lifecycle.queueing import QueueNumbers, count_unfinished, numbers_of_status
from ..resources import contract
from ..resources.request import CREATE_FIELDS, CreateJob, validation_problem
from ..resources.common import json_depth
from ..resources.job import MAX_PAYLOAD_DEPTH, job_id
from . import models
from .auth import Authorizer, HttpError, User
from .history import History, invalid, list_cursor, list_filters, not_a_continue_token, unavailable
from .limits import TokenBuckets
from .openapi import document

if TYPE_CHECKING:  # loaded only with an archive configured (archive/errors.py)
    from ..archive.store import Archive

log = logging.getLogger("sextant.http.api")

DEFAULT_NAMESPACE = "default"
# Writes are made with the caller's own token (the API server's audit log names the caller); a created job also
# names its caller, as the authenticated user, for whoever reads the job rather than the audit log.
ANNOTATION_REQUESTED_BY = contract.ANNOTATION_REQUESTED_BY
DEFAULT_LIMIT, MAX_LIMIT = models.DEFAULT_LIMIT, models.MAX_LIMIT
CONTINUE_MAX = models.CONTINUE_MAX
_CONTINUE_RE = re.compile(models.CONTINUE_PATTERN)
# A body is an object whose payload nests at most MAX_PAYLOAD_DEPTH levels; anything deeper is refused before it
# is validated (pydantic and json.loads recurse, and a deep enough body overflows the stack).
MAX_BODY_DEPTH = MAX_PAYLOAD_DEPTH + 1
# The jobs CRD's selectableFields (resources/crds.py): the list filters, applied by the API server.
FIELD_SELECTORS = {"queue": "spec.queue", "handler": "spec.handler", "state": "status.state"}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(body: Any, status: int = 200, headers: dict[str, str] | CIMultiDict[str] | None = None) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type="application/json", headers=headers)


def warning_header(text: str) -> str:
    """An RFC 7234 Warning header value, as the Kubernetes API server sends its warnings: 299 - "text"."""
    quoted = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{quoted}"'


def error_response(exc: HttpError) -> web.Response:
    detail = models.ErrorDetail(status=exc.status, reason=exc.reason, message=exc.message, field=exc.field)
    return _json(models.dump(models.Error(error=detail)), exc.status, exc.headers)


def _from_input_error(exc: inputs.InputError) -> HttpError:
    return invalid(exc.field, exc.message)


def _from_validation(exc: ValidationError, fields: str = CREATE_FIELDS) -> HttpError:
    return invalid(*validation_problem(exc, fields))


def list_error(exc: ApiError, token: str) -> HttpError | None:
    """The API server's refusal of a page, in the API's words; None when it is not about the continue token."""
    if isinstance(exc, Gone):  # the list's snapshot is gone (compacted): the token cannot be continued consistently
        return HttpError(410, "Expired", "continue: the token has expired (a list's snapshot lasts a few minutes); "
                                         "list again from the start", field="continue")
    if exc.status == 400 and token:
        return not_a_continue_token()
    return None


class JobView(Protocol):
    """What the API reads of the operator's in-memory view (controller/view.View), without importing it."""

    queues: dict[tuple[str, str], Any]  # the Queues and Handlers the operator knows (by namespace and name)
    handlers: dict[tuple[str, str], Any]
    unfinished_by_queue: dict[tuple[str, str], set[tuple[str, str]]]
    finished_by_queue: dict[tuple[str, str], Any]  # (namespace, queue) → state → count

    def whole_job(self, key: tuple[str, str]) -> dict[str, Any] | None: ...

    def unfinished_raw(self, queue: tuple[str, str]) -> list[dict[str, Any]]: ...


class Api:
    def __init__(self, kube: Kube, *, view: JobView | None = None, ready: Callable[[], bool] = lambda: False,
                 namespaces: list[str] | tuple[str, ...] = (), now: Callable[[], datetime] = utcnow,
                 max_in_flight: int, request_timeout: float, auth: Authorizer | None = None,
                 user_rate: float = 20.0, user_burst: int = 100, clock: Callable[[], float] = time.monotonic,
                 archive: Callable[[], Archive | None] = lambda: None) -> None:
        self.kube = kube
        self.history = History(archive)
        self.view = view
        self.ready = ready
        self.namespaces = set(namespaces)
        self.now = now
        self.auth = auth or Authorizer(kube)
        self.max_in_flight = max_in_flight
        self.request_timeout = request_timeout
        self.in_flight = 0
        self.user_limit = TokenBuckets(user_burst, user_rate)
        self.clock = clock
        self._document = document()

    def install(self, app: web.Application) -> None:
        app.middlewares.append(self._errors)  # outermost: whatever the guard refuses is answered as JSON
        app.middlewares.append(self._guard)
        app.router.add_get("/v2/openapi.json", self.openapi)
        app.router.add_post("/v2/jobs", self.create)
        app.router.add_post("/v2/jobs:batch", self.create_batch)
        app.router.add_post("/v2/jobs:cancel", self.cancel_selected)
        app.router.add_post("/v2/jobs:retry", self.retry_selected)
        app.router.add_get("/v2/jobs", self.list_jobs)
        app.router.add_get("/v2/jobs/{job_id}", self.get_job)
        app.router.add_post("/v2/jobs/{job_id}/cancel", self.cancel)
        app.router.add_post("/v2/jobs/{job_id}/retry", self.retry)
        app.router.add_get("/v2/queues", self.queues)
        app.router.add_post("/v2/queues/{queue}/pause", self.pause)
        app.router.add_post("/v2/queues/{queue}/resume", self.resume)

    def caller(self, request: web.Request) -> Client:
        """A client that acts with the caller's own token: the API server applies the caller's RBAC to the
        write and its audit log names the caller, and the operator's account needs no right to write specs."""
        token = request.headers.get("Authorization", "").partition(" ")[2].strip()
        return Client(self.kube.conn.with_token(token), user_agent="sextant-api")

    async def as_caller(self, request: web.Request, call: Callable[[Client], Any]) -> Any:
        def run() -> Any:
            client = self.caller(request)
            try:
                return call(client)
            finally:
                client.close()

        return await asyncio.to_thread(run)

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith("/v2"):
            return await handler(request)
        try:
            return await handler(request)
        except HttpError as exc:
            return error_response(exc)
        except web.HTTPException as exc:  # no such route, method not allowed: JSON like every other answer
            if exc.status < 400:
                raise
            reason = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status, exc.reason)
            message = {404: f"no such API path: {request.path}",
                       405: f"{request.method} is not allowed on {request.path}"}.get(exc.status, exc.text or "")
            headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
            return error_response(HttpError(exc.status, reason, message, headers=headers))
        except Exception:  # noqa: BLE001 - logged here, never sent to the caller
            log.exception("%s %s failed", request.method, request.path)
            return error_response(HttpError(500, "InternalError", "internal error; see the operator's log"))

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The concurrency cap and the deadline of /v2 requests (the probes and /metrics pass untouched)."""
        if not request.path.startswith("/v2"):
            return await handler(request)
        if self.in_flight >= self.max_in_flight:
            metrics.HTTP_REFUSED.labels("in-flight").inc()
            raise HttpError(429, "TooManyRequests", f"the operator is serving its maximum of {self.max_in_flight} "
                                                    "API requests at once; retry in 1 s", headers={"Retry-After": "1"})
        self.in_flight += 1
        metrics.HTTP_IN_FLIGHT.inc()
        deadline = asyncio.timeout(self.request_timeout)
        try:
            async with deadline:
                return await handler(request)
        except TimeoutError:
            if not deadline.expired():  # a timeout of something else, inside: not this deadline's
                raise
            metrics.HTTP_REFUSED.labels("deadline").inc()
            log.warning("%s %s: not done within %g s", request.method, request.path, self.request_timeout)
            raise HttpError(503, "Timeout", f"the request was not done within {self.request_timeout:g} s (a slow "
                                            "Kubernetes API, or a request body that did not arrive); a create, "
                                            "cancel or retry may still take effect: repeat it (a create with its "
                                            "idempotency_key)", headers={"Retry-After": "1"}) from None
        finally:
            self.in_flight -= 1
            metrics.HTTP_IN_FLIGHT.dec()

    # --- common steps ------------------------------------------------------------------------------------------
    def _namespace(self, request: web.Request) -> str:
        value = request.query.get("namespace", DEFAULT_NAMESPACE)
        try:
            return inputs.namespace("namespace", value)
        except inputs.InputError as exc:
            raise _from_input_error(exc) from None

    @staticmethod
    def _job_name(request: web.Request) -> str:
        try:
            return inputs.job_name("job_id", request.match_info["job_id"])
        except inputs.InputError as exc:
            raise _from_input_error(exc) from None

    async def _allowed(self, request: web.Request, verb: str, resource: str, name: str | None = None) -> str:
        """Authenticate, read the namespace, authorize: the namespace (the caller is in request["user"])."""
        user = await self.auth.authenticate(request.headers.get("Authorization"), request.remote or "")
        request["user"] = user
        self._rate(user)
        ns = self._namespace(request)
        await self.auth.authorize(user, verb, resource, ns, name)
        return ns

    def _rate(self, user: User) -> None:
        """Each user's own share: one user's loop cannot take every slot (nor every review) of the API."""
        now = self.clock()
        if not self.user_limit.take(user.username, now):
            metrics.HTTP_REFUSED.labels("user-rate").inc()
            wait = self.user_limit.retry_after(user.username, now)
            raise HttpError(429, "TooManyRequests", f"user {user.username} has made more requests than the "
                                                    f"operator serves one user; retry in {wait} s",
                            headers={"Retry-After": str(wait)})

    def _view_serves(self, ns: str) -> bool:
        return self.view is not None and self.ready() and (not self.namespaces or ns in self.namespaces)

    async def _read_job(self, ns: str, name: str) -> dict[str, Any]:
        if self._view_serves(ns):
            raw = self.view.whole_job((ns, name))
            if raw is not None:  # else missing, finished, or not held whole: ask the API server
                return raw
        try:
            return await self.kube.get(contract.jobs_path(ns, name))
        except ApiError as exc:
            raise self._upstream(exc, ns, name) from None

    def _watched(self, ns: str) -> JobView:
        """The view, for a namespace it serves (404 for one the operator does not watch, 503 while it starts)."""
        if self.namespaces and ns not in self.namespaces:
            raise HttpError(404, "NotFound", f"namespace {ns} is not watched by this operator (its "
                                             f"--watch-namespace: {', '.join(sorted(self.namespaces))})")
        if self.view is None or not self._view_serves(ns):
            raise HttpError(503, "ServiceUnavailable", "the operator is still reading the cluster (its first lists "
                                                       "and watches); retry in a few seconds",
                            headers={"Retry-After": "2"})
        return self.view

    async def _warnings(self, ns: str, queue: str, handler: str) -> list[str]:
        """Why a new job will wait, when its queue or handler does not exist. The operator's view answers for what
        it knows (what the operator itself decides by); what it lacks is asked of the API server, since a Queue
        applied a moment ago may not have reached the view yet. [] for what cannot be known."""
        out = []
        for kind, name, known, path in (
                ("queue", queue, self.view.queues if self.view else {}, contract.queues_path(ns, queue)),
                ("handler", handler, self.view.handlers if self.view else {}, contract.handlers_path(ns, handler))):
            if self._view_serves(ns) and (ns, name) in known:
                continue
            try:
                await self.kube.get(path)
            except NotFound:
                out.append(missing_warning(kind, name, ns))
            except ApiError:
                pass  # not known: no warning rather than a wrong one
        return out

    @staticmethod
    def _upstream(exc: ApiError, ns: str, name: str | None = None) -> HttpError:
        status, message = exc.status, exc.message
        if isinstance(exc, NotFound) and name:
            return HttpError(404, "NotFound", f"job {job_id(name)} not found in namespace {ns}")
        if isinstance(exc, NotFound) and "namespaces" in message and f'"{ns}"' in message:
            return HttpError(404, "NotFound", f"namespace {ns} not found")
        if status == 422:
            return HttpError(422, "Invalid", message)
        if status in (401, 403):  # the caller's own token, refused by the API server itself
            return HttpError(status, "Unauthorized" if status == 401 else "Forbidden", message)
        return HttpError(502, "BadGateway", f"the Kubernetes API answered {status}: {message}")

    # --- routes ------------------------------------------------------------------------------------------------
    async def openapi(self, _: web.Request) -> web.Response:
        return _json(self._document)

    @staticmethod
    async def _body(request: web.Request, depth: int, wanted: str) -> bytes:
        """The request's body, when it is a JSON object nested at most `depth` levels (checked before anything
        walks it recursively); else 422 naming body."""
        raw_body = await request.read()
        try:
            data = jsontext.loads(raw_body) if raw_body.strip() else None  # any depth, without recursion
        except ValueError:  # orjson's JSONDecodeError, bad UTF-8 included
            raise invalid("body", "not valid JSON") from None
        if json_depth(data, depth) > depth:
            raise invalid("body", f"the JSON nests deeper than {depth} levels (the payload at most "
                                  f"{MAX_PAYLOAD_DEPTH})")
        if not isinstance(data, dict):
            raise invalid("body", f"{wanted} is required")
        return raw_body

    async def create(self, request: web.Request) -> web.Response:
        ns = await self._allowed(request, "create", "jobs")
        raw_body = await self._body(request, MAX_BODY_DEPTH, "a JSON object with at least queue and handler")
        try:
            spec = CreateJob.model_validate_json(raw_body)  # JSON mode: strict types, RFC 3339 strings
        except ValidationError as exc:
            raise _from_validation(exc) from None
        holder = self.history.key_holder()  # made here, on the event loop that the archive's calls run on
        try:
            job, created = await self.as_caller(request, lambda client: client.create_job(
                ns, queue=spec.queue, handler=spec.handler, payload=spec.payload, run_at=spec.run_at,
                idempotency_key=spec.idempotency_key, priority=spec.priority, concurrency_key=spec.concurrency_key,
                annotations={ANNOTATION_REQUESTED_BY: request["user"].username[:4096]},
                archived=holder))
        except HistoryUnavailable as exc:
            raise unavailable(exc) from None
        except KeyConflict as exc:
            # The API's field names are the spec's for these (queue, handler, payload); the message names them all.
            raise HttpError(409, "Conflict", exc.words(""), field=exc.fields[0]) from None
        except ApiError as exc:
            raise self._upstream(exc, ns) from None
        warnings = await self._warnings(ns, spec.queue, spec.handler)
        out = models.dump(models.created_job_out(job, warnings, self.now()))
        headers: CIMultiDict[str] = CIMultiDict(Location=f"/v2/jobs/{out['id']}?namespace={ns}")
        if not created:
            headers["Idempotent-Replayed"] = "true"
        for text in warnings:
            headers.add("Warning", warning_header(text))
        return _json(out, 201 if created else 200, headers)

    async def create_batch(self, request: web.Request) -> web.Response:
        """Every item is checked before any is created; then each is created as POST /v2/jobs creates one
        (client.create_many), and answered with its own status."""
        ns = await self._allowed(request, "create", "jobs")
        raw_body = await self._body(request, MAX_BODY_DEPTH + 2, 'a JSON object {"items": [{"queue": ..., '
                                                                 '"handler": ...}, ...]}')
        try:
            batch = models.CreateJobs.model_validate_json(raw_body)
        except ValidationError as exc:
            raise _from_validation(exc, "items") from None
        wanted = [cast(JobRequest, spec.model_dump()) for spec in batch.items]  # create_job's keyword arguments
        annotations = {ANNOTATION_REQUESTED_BY: request["user"].username[:4096]}
        holder = self.history.key_holder()
        results = await self.as_caller(request, lambda client: client.create_many(ns, wanted, annotations=annotations,
                                                                                  archived=holder))
        warnings = {pair: await self._warnings(ns, *pair)
                    for pair in dict.fromkeys((r.job["spec"]["queue"], r.job["spec"]["handler"])
                                              for r in results if r.job is not None)}
        now = self.now()
        items = [self._batch_item(r, ns, warnings, now) for r in results]
        body = models.BatchResult(items=items, created=sum(i.status == 201 for i in items),
                                  replayed=sum(i.status == 200 for i in items),
                                  failed=sum(i.status not in (200, 201) for i in items))
        return _json(models.dump(body))

    def _batch_item(self, result: CreateResult, ns: str, warnings: dict[tuple[str, str], list[str]],
                    now: datetime) -> models.BatchItem:
        if result.job is not None:
            spec = result.job["spec"]
            return models.BatchItem(status=result.status, job=models.created_job_out(
                result.job, warnings.get((spec["queue"], spec["handler"]), []), now))
        exc = result.error
        if isinstance(exc, KeyConflict):
            error = HttpError(409, "Conflict", exc.words(""), field=exc.fields[0])
        elif isinstance(exc, ApiError):
            error = self._upstream(exc, ns)
        elif isinstance(exc, HistoryUnavailable):
            error = unavailable(exc)
        else:
            error = HttpError(500, "InternalError", "internal error; see the operator's log")
        return models.BatchItem(status=error.status, error=models.ErrorDetail(
            status=error.status, reason=error.reason, message=error.message, field=error.field))

    async def _act_on_selection(self, request: web.Request, verb: selection.Verb) -> web.Response:
        """A bulk cancel or retry: the jobs the selection matches whose state allows it, oldest first, at most
        BULK_MAX, each asked for as the single route asks (client.bulk: the CLI's and the dashboard's path)."""
        ns = await self._allowed(request, "list", "jobs")
        await self.auth.authorize(request["user"], "patch", "jobs", ns, None)  # the verb of the writes
        raw_body = await self._body(request, 2, "a JSON object naming the jobs (queue, state, handler, "
                                                "label_selector)")
        try:
            wanted = models.JobSelection.model_validate_json(raw_body)
        except ValidationError as exc:
            raise _from_validation(exc, "queue, state, handler, label_selector, dry_run") from None
        try:
            chosen = selection.selector(verb, queue=wanted.queue, state=wanted.state, handler=wanted.handler,
                                        labels=wanted.label_selector, names={"labels": "label_selector"})
        except inputs.InputError as exc:
            raise _from_input_error(exc) from None

        def act(client: Client) -> tuple[int, list[str], Any]:
            matched = selection.targets(client.select_jobs(ns, chosen), verb)
            names = [j["metadata"]["name"] for j in matched[:selection.BULK_MAX]]
            outcome = None if wanted.dry_run else bulk(client, verb, [(ns, name) for name in names])
            return len(matched), names, outcome

        try:
            matched, names, outcome = await self.as_caller(request, act)
        except ApiError as exc:
            if exc.status == 400 and wanted.label_selector:  # the API server's parse of the label selector
                raise invalid("label_selector", exc.message) from None
            raise self._upstream(exc, ns) from None
        body = models.BulkResult(
            action=verb, dry_run=wanted.dry_run, matched=matched, ids=[job_id(n) for n in names],
            requested=len(outcome.requested) if outcome else 0,
            refused=[models.Refusal(id=i, message=m) for i, m in outcome.refused] if outcome else [],
            remaining=matched - len(names))
        return _json(models.dump(body))

    async def cancel_selected(self, request: web.Request) -> web.Response:
        return await self._act_on_selection(request, "cancel")

    async def retry_selected(self, request: web.Request) -> web.Response:
        return await self._act_on_selection(request, "retry")

    async def get_job(self, request: web.Request) -> web.Response:
        name = self._job_name(request)
        ns = await self._allowed(request, "get", "jobs", name)
        try:
            raw = await self._read_job(ns, name)
        except HttpError as exc:
            archived = await self.history.job(ns, name) if exc.status == 404 else None
            if archived is None:
                raise
            raw = archived
        return _json(models.dump(models.job_out(raw)))

    async def list_jobs(self, request: web.Request) -> web.Response:
        q = request.query
        ns = await self._allowed(request, "list", "jobs")
        now = self.now()
        filters = list_filters(q, now)
        limit = DEFAULT_LIMIT
        if "limit" in q:
            try:
                limit = int(q["limit"])
            except ValueError:
                raise invalid("limit", f"{q['limit']!r} is not an integer") from None
            if not 1 <= limit <= MAX_LIMIT:
                raise invalid("limit", f"must be between 1 and {MAX_LIMIT}, got {limit}")
        token = q.get("continue", "")
        if len(token) > CONTINUE_MAX or not _CONTINUE_RE.match(token):
            raise not_a_continue_token()

        async def fetch_live(live_token: str | None, n: int) -> tuple[list[dict[str, Any]], str | None]:
            return await self._page(ns, filters, n, live_token or "")

        page, next_token = await self.history.page(fetch_live, ns, filters, list_cursor(token), limit, now)
        body = models.JobList(items=[models.job_out(j) for j in page], continue_=next_token)
        return _json(models.dump(body))

    async def _page(self, ns: str, filters: merged.ListFilters, limit: int,
                    token: str) -> tuple[list[dict[str, Any]], str | None]:
        """One page of the API server's list (its order: by name), filtered by field and label selectors, and here
        by what they cannot say (the time range). With CRDs older than this operator (no selectableFields: Helm
        never upgrades CRDs), the fields are filtered here too. A page may hold fewer than `limit` jobs."""
        wanted = {k: v for k, v in (("queue", filters.queue), ("handler", filters.handler),
                                    ("state", filters.state)) if v is not None}
        params = {"limit": str(limit), **({"continue": token} if token else {})}
        if filters.label is not None:
            params["labelSelector"] = "=".join(filters.label)
        selector = ",".join(f"{FIELD_SELECTORS[k]}={v}" for k, v in wanted.items())
        try:
            try:
                body = await self.kube.request("GET", contract.jobs_path(ns),
                                               params={**params, "fieldSelector": selector} if selector else params)
            except ApiError as exc:
                if not (selector and exc.status == 400 and "field label not supported" in exc.message):
                    raise
                body = await self.kube.request("GET", contract.jobs_path(ns), params=params)
        except ApiError as exc:
            raise (list_error(exc, token) or self._upstream(exc, ns)) from None
        items = [job for job in body.get("items") or [] if merged.live_matches(job, filters)]
        return items, (body.get("metadata") or {}).get("continue") or None

    async def _transition(self, request: web.Request, patch: dict[str, Any]) -> web.Response:
        name = self._job_name(request)
        ns = await self._allowed(request, "patch", "jobs", name)  # the verb of the write below
        try:
            raw = await self.as_caller(request, lambda client: client.request(
                "PATCH", contract.jobs_path(ns, name), json=patch,
                headers={"Content-Type": "application/merge-patch+json"}))
        except ApiError as exc:
            words = refusal_message(exc.message) if exc.status == 422 else None
            if words:
                raise HttpError(409, "Conflict", f"job {job_id(name)}: {words}") from None
            raise self._upstream(exc, ns, name) from None
        return _json(models.dump(models.job_out(raw)))

    async def cancel(self, request: web.Request) -> web.Response:
        return await self._transition(request, {"spec": {"cancel": True}})

    async def retry(self, request: web.Request) -> web.Response:
        token = f"api-{self.now().strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"
        return await self._transition(request, {"spec": {"retryToken": token}})

    async def queues(self, request: web.Request) -> web.Response:
        ns = await self._allowed(request, "list", "queues")
        view = self._watched(ns)
        try:
            queue_objects, _ = await self.kube.list(contract.queues_path(ns))
        except ApiError as exc:
            raise self._upstream(exc, ns) from None
        now = self.now()
        queues = {(ns, q["metadata"]["name"]): q for q in queue_objects}
        numbers = {key: numbers_of_status(q.get("status")) for key, q in queues.items()}
        # Queues that jobs name but that do not exist have no status: their (Blocked) jobs are counted here.
        for key, members in list(view.unfinished_by_queue.items()):
            if key[0] == ns and key not in queues and members:
                jobs = [(raw, False) for raw in view.unfinished_raw(key)]
                numbers[key] = count_unfinished(jobs, now)
        finished = {key: dict(counts) for key, counts in list(view.finished_by_queue.items()) if key[0] == ns}
        for key in finished:
            numbers.setdefault(key, QueueNumbers())
        items = [models.queue_out(key, queues.get(key), numbers[key], finished.get(key, {}), now)
                 for key in sorted(numbers)]
        return _json(models.dump(models.QueueList(items=items)))

    async def _pause(self, request: web.Request, paused: bool) -> web.Response:
        try:
            name = inputs.object_name("queue", request.match_info["queue"], "queue name")
        except inputs.InputError as exc:
            raise _from_input_error(exc) from None
        ns = await self._allowed(request, "patch", "queues", name)  # the verb of the write below
        try:
            raw = await self.as_caller(request, lambda client: client.pause_queue(ns, name, paused))
        except ApiError as exc:
            if isinstance(exc, NotFound):
                raise HttpError(404, "NotFound", f"queue {name} not found in namespace {ns}") from None
            raise self._upstream(exc, ns) from None
        return _json(models.dump(models.queue_out((ns, name), raw, numbers_of_status(raw.get("status")), {},
                                                  self.now())))

    async def pause(self, request: web.Request) -> web.Response:
        return await self._pause(request, True)

    async def resume(self, request: web.Request) -> web.Response:
        return await self._pause(request, False)


def routes(operator: Any, archive: Callable[[], Archive | None] = lambda: None) -> Callable[[web.Application], None]:
    """extra_routes for http.server.build_app: the /v2 API of this operator process (with the archive the operator
    opened, if any: its readers then show archived jobs too)."""
    settings = operator.settings
    api = Api(operator.api_kube, view=operator.view, ready=lambda: operator.ready, namespaces=settings.namespaces,
              max_in_flight=settings.http_max_in_flight, request_timeout=settings.http_request_timeout,
              user_rate=settings.http_user_rate, user_burst=settings.http_user_burst, archive=archive)
    return api.install
