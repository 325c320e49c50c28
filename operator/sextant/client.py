"""A small synchronous client for Sextant's resources, shared by the CLI, the dashboard and the SDK (httpx); and what
its requests mean for a person: an API answer in words, and what a cancel, a retry or a trigger did (the CLI and the
dashboard say the same)."""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Required, TypedDict

import httpx

from .lifecycle import idempotency
from .lifecycle.selection import Selector, Verb
from .lifecycle.worker_view import WorkerView, read_worker_object
from .resources import inputs
from .kube.client import ApiError, Conflict, NotFound
from .kube.clock import utcnow
from .kube.kubeconfig import Connection
from .resources import API_VERSION, contract
from .resources.common import format_time, parse_time
from .resources.job import job_id, object_name

# Requests at once of one create_many or bulk action: enough to hide the round trips, few enough not to crowd out
# everyone else's requests to the API server (its flow control counts them per user).
CONCURRENCY = 8
# A create the API server answered 429 (its flow control, or storage still initializing: nothing was done) is sent
# again after its Retry-After, this many times at most, so that one busy moment does not fail items of a batch.
TOO_MANY_TRIES = 5
_REFUSAL = re.compile(r"(?:^|: )Forbidden: (cannot (?:cancel|retry): .*?)(?:, <nil>)?$")


def refusal_message(message: str) -> str | None:
    """The words of the CEL rule with which the API server refused a cancel or retry for the job's state
    ("cannot cancel: the job is succeeded; only ..."), found in its 422 message; else None."""
    match = _REFUSAL.search(message)
    return match.group(1) if match else None


def _raise_for(resp: httpx.Response) -> None:
    """An answer that is not a success as the async client's ApiError (NotFound, Conflict, Gone …): one family of
    errors for both clients."""
    if resp.status_code < 300:
        return
    try:
        body = resp.json()
    except ValueError:
        body = None
    status = {**body, "message": body.get("message", resp.text)} if isinstance(body, dict) else resp.text
    raise ApiError(resp.status_code, status, resp.request.method, resp.request.url.path)


class HistoryUnavailable(RuntimeError):
    """The archive could not be asked whether an idempotency key names a job that left etcd: nothing is created,
    since creating could make a second job for the key; try again."""


# (namespace, key, since) → the archived Job object (marked archived) of the first job created with the key since
# `since`, or None: what create_job asks once no live job holds the key (the HTTP API and the CLI pass one when an
# archive is configured). Raises HistoryUnavailable when the archive cannot be reached.
ArchivedHolder = Callable[[str, str, datetime], "dict[str, Any] | None"]


class JobRequest(TypedDict, total=False):
    """One job of create_many: create_job's keyword arguments (the HTTP API's CreateJob fields, by name)."""

    queue: Required[str]
    handler: Required[str]
    payload: dict[str, Any]
    run_at: datetime | None
    idempotency_key: str | None
    priority: int
    concurrency_key: str | None


@dataclass(frozen=True)
class CreateResult:
    """One item of create_many: the job (created, or the one already holding its idempotency key), or why not:
    KeyConflict (its key is held by a job with another queue, handler or payload) or the API server's ApiError."""

    job: dict[str, Any] | None
    created: bool = False
    error: Exception | None = None

    @property
    def id(self) -> str | None:
        return job_id(self.job["metadata"]["name"]) if self.job is not None else None

    @property
    def status(self) -> int:
        """As the HTTP API answers one create: 201 created, 200 the key's job, 409 a key conflict, else the API
        server's status."""
        if self.job is not None:
            return 201 if self.created else 200
        if isinstance(self.error, KeyConflict):
            return 409
        return self.error.status if isinstance(self.error, ApiError) else 500


def retry_after(exc: ApiError, most: float = 5.0) -> float:
    """Seconds to wait before sending a request the API server answered 429 again: its retryAfterSeconds (1 s
    without one), at most `most`."""
    details = exc.body.get("details") if isinstance(exc.body, dict) else None
    seconds = details.get("retryAfterSeconds") if isinstance(details, dict) else None
    return min(most, float(seconds)) if isinstance(seconds, int | float) and seconds > 0 else 1.0


def first_uses(keys: Sequence[str | None]) -> tuple[list[int], list[int]]:
    """The items of a batch in two rounds: those without a key or with its first use in the batch, then the later
    uses of a key, which are created after the first so that they return it (or are refused: another job)."""
    seen: set[str] = set()
    first, later = [], []
    for index, key in enumerate(keys):
        if key is not None and key in seen:
            later.append(index)
        else:
            first.append(index)
            if key is not None:
                seen.add(key)
    return first, later


def in_parallel(call: Callable[[int], Any], indices: Sequence[int], concurrency: int = CONCURRENCY) -> list[Any]:
    """call(i) for each index, at most `concurrency` at once (the client's connection pool is shared); in order."""
    if len(indices) <= 1 or concurrency <= 1:
        return [call(i) for i in indices]
    with ThreadPoolExecutor(min(concurrency, len(indices))) as pool:
        return list(pool.map(call, indices))


class Client:
    def __init__(self, conn: Connection, user_agent: str = "sextant-cli", timeout: float = 30,
                 idempotency_window: timedelta | None = None) -> None:
        self.conn = conn
        # The operator's window (SEXTANT_IDEMPOTENCY_WINDOW, read once here unless given): both must agree.
        self.idempotency_window = (idempotency_window if idempotency_window is not None
                                   else inputs.idempotency_window(os.environ))
        self.http = httpx.Client(base_url=conn.server, verify=conn.ssl_context, timeout=timeout,
                                 headers={"User-Agent": user_agent, "Accept": "application/json"})

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        headers = {**self.conn.headers(), **kwargs.pop("headers", {})}
        resp = self.http.request(method, path, headers=headers, **kwargs)
        _raise_for(resp)
        return resp.json() if resp.content else {}

    def list_page(self, path: str, *, limit: int | None = None, continue_: str | None = None,
                  field_selector: str | None = None, label_selector: str | None = None) -> dict[str, Any]:
        """One page of a list: the API server's List object (items, metadata.continue, metadata.resourceVersion)."""
        params = {k: v for k, v in (("limit", limit), ("continue", continue_), ("fieldSelector", field_selector),
                                     ("labelSelector", label_selector)) if v}
        return self.request("GET", path, params=params)

    def list_all(self, path: str, *, page: int = 500, field_selector: str | None = None,
                 label_selector: str | None = None) -> tuple[list[dict[str, Any]], str]:
        """Every item (fetched in pages) and the list's resourceVersion, from which a watch continues."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            body = self.list_page(path, limit=page, continue_=token, field_selector=field_selector,
                                  label_selector=label_selector)
            items.extend(body.get("items") or [])
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return items, (body.get("metadata") or {}).get("resourceVersion", "")

    def watch(self, path: str, resource_version: str, *, field_selector: str | None = None,
              timeout_seconds: int = 300) -> Iterator[tuple[str, dict[str, Any]]]:
        """Watch events (type, object) from resource_version on, until the server ends the watch (at most
        timeout_seconds). BOOKMARK events are passed on; a 410 raises Gone."""
        params = {"watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(max(1, int(timeout_seconds)))}
        if field_selector:
            params["fieldSelector"] = field_selector
        timeout = httpx.Timeout(30, read=timeout_seconds + 30)
        with self.http.stream("GET", path, params=params, headers=self.conn.headers(), timeout=timeout) as resp:
            if resp.status_code >= 300:
                resp.read()
                _raise_for(resp)
            for line in resp.iter_lines():
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise ApiError(status.get("code", 500), {"message": "watch failed", **status}, "WATCH", path)
                yield event["type"], event["object"]

    # --- jobs ----------------------------------------------------------------------------------------------
    def get_job(self, namespace: str, job: str) -> dict[str, Any]:
        return self.request("GET", contract.jobs_path(namespace, object_name(job)))

    def create_job(self, namespace: str, *, queue: str, handler: str, payload: dict[str, Any] | None = None,
                   run_at: datetime | None = None, idempotency_key: str | None = None, priority: int = 0,
                   labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
                   now: datetime | None = None, concurrency_key: str | None = None,
                   archived: ArchivedHolder | None = None) -> tuple[dict[str, Any], bool]:
        """Create a job; returns (job, created). With a key already used within 24 h: (that job, False), whoever
        created it under whatever name (a job applied with kubectl too), and, given `archived`, after that job left
        etcd (the archive's Job object, marked archived); KeyConflict when that job has another queue, handler or
        payload (lifecycle/idempotency.SAME_JOB), and nothing is created."""
        spec: dict[str, Any] = {"queue": queue, "handler": handler, "payload": payload or {}, "priority": priority}
        if run_at is not None:
            spec["runAt"] = format_time(run_at, precise=False)
        if concurrency_key is not None:
            spec["concurrencyKey"] = concurrency_key
        if idempotency_key is not None:
            spec["idempotencyKey"] = idempotency_key
            moment = now or utcnow()
            held = self.key_holder(namespace, idempotency_key, moment)
            if held is None and archived is not None:
                # Asked after the live list, never before: a job is deleted only once its record has landed, so a
                # holder gone from the list is in the archive by then.
                held = archived(namespace, idempotency_key, moment - self.idempotency_window)
            if held is not None:
                return _replayed(held, idempotency_key, spec), False
        for generation in range(1000):
            name = (idempotency.keyed_name(namespace, idempotency_key, generation) if idempotency_key
                    else inputs.random_name())
            body = {"apiVersion": API_VERSION, "kind": "Job",
                    "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
                    "spec": spec}
            try:
                return self.request("POST", contract.jobs_path(namespace), json=body), True
            except Conflict:
                pass  # the name is taken: by this key's job, or another
            if idempotency_key is None:
                continue  # a random name collided: draw another
            existing = self.get_job(namespace, name)
            created = parse_time(existing["metadata"]["creationTimestamp"])
            if (existing["spec"].get("idempotencyKey") == idempotency_key
                    and idempotency.still_claimed(created, now or utcnow(),
                                               self.idempotency_window)):
                return _replayed(existing, idempotency_key, spec), False
            # The key's claim ran out (or, rarely, another key hashed to this name): the next generation.
        raise ApiError(409, {"message": f"no free name for idempotency key {idempotency_key!r}"}, "POST",
                       contract.jobs_path(namespace))

    def create_many(self, namespace: str, jobs: Sequence[JobRequest], *, annotations: dict[str, str] | None = None,
                    concurrency: int = CONCURRENCY, archived: ArchivedHolder | None = None) -> list[CreateResult]:
        """Create many jobs: one CreateResult per item, in order. Each item is created exactly as create_job creates
        one (its idempotency rule included), `concurrency` at a time. A later item with a key that an earlier item
        of the batch uses is created after it, so the first one is created and the later ones return it (or are
        refused, KeyConflict, when they differ). Nothing is checked here that create_job does not check: callers
        validate every item before calling (the CLI, the HTTP API and the SDK do, with the HTTP API's CreateJob)."""
        results: list[CreateResult | None] = [None] * len(jobs)

        def one(index: int) -> None:
            for attempt in range(1, TOO_MANY_TRIES + 1):
                try:
                    job, created = self.create_job(namespace, **jobs[index], annotations=annotations,
                                                   archived=archived)
                    results[index] = CreateResult(job, created)
                    return
                except (KeyConflict, ApiError, HistoryUnavailable) as exc:
                    results[index] = CreateResult(None, error=exc)
                    if not (isinstance(exc, ApiError) and exc.status == 429 and attempt < TOO_MANY_TRIES):
                        return
                    time.sleep(retry_after(exc))

        for indices in first_uses([item.get("idempotency_key") for item in jobs]):
            in_parallel(one, indices, concurrency)
        return [r for r in results if r is not None]

    def select_jobs(self, namespace: str, selector: Selector) -> list[dict[str, Any]]:
        """The namespace's jobs that a selector matches: one list, filtered by the API server (the Job CRD's
        selectable fields, and the label selector); with CRDs older than this client, the fields are filtered
        here."""
        path = contract.jobs_path(namespace)
        fields = selector.field_selector()
        try:
            return self.list_all(path, field_selector=fields, label_selector=selector.labels)[0]
        except ApiError as exc:
            if not (fields and exc.status == 400 and "field label not supported" in exc.message):
                raise
        return [j for j in self.list_all(path, label_selector=selector.labels)[0] if selector.matches_fields(j)]

    def key_holder(self, namespace: str, key: str, now: datetime) -> dict[str, Any] | None:
        """The job that holds an idempotency key now, by any name, or None. One list selected by the field
        spec.idempotencyKey; with CRDs older than this client (no such selectable field) every job of the namespace
        is read instead. Without the right to list jobs (an older role): None, and the keyed name decides alone."""
        path = contract.jobs_path(namespace)
        try:
            try:
                found, _ = self.list_all(path, field_selector="spec.idempotencyKey=" + inputs.selector_value(key))
            except ApiError as exc:
                if not (exc.status == 400 and "field label not supported" in exc.message):
                    raise
                found = [j for j in self.list_all(path)[0] if (j.get("spec") or {}).get("idempotencyKey") == key]
        except ApiError as exc:
            if exc.status == 403:
                return None
            raise
        carriers: dict[str, dict[str, Any]] = {}
        candidates = []
        for job in found:
            meta = job.get("metadata") or {}
            try:
                created = parse_time(meta.get("creationTimestamp"))
            except ValueError:
                continue
            if created is None or meta.get("deletionTimestamp") or (job.get("spec") or {}).get("idempotencyKey") != key:
                continue
            carriers[meta["name"]] = job
            candidates.append((created, meta["name"]))
        tied = len({created for created, _ in candidates}) < len(candidates)
        name = idempotency.holder(((created, idempotency.undecided(carriers[name].get("status"),
                                                                   started=tied and self._has_attempt_pod(namespace, name)),
                                    name) for created, name in candidates), now, self.idempotency_window)
        return carriers[name] if name is not None else None

    def _has_attempt_pod(self, namespace: str, job: str) -> bool:
        """Whether an attempt pod of this job exists: the operator admitted a job on first sight when it created
        one (its state is written when the pod starts). Asked only to break a tie of creation times, as the
        operator does; without the right to list pods, False."""
        try:
            pods, _ = self.list_all(contract.pods_path(namespace),
                                    label_selector=f"{contract.LABEL_JOB}={job}")
        except ApiError as exc:
            if exc.status == 403:
                return False
            raise
        return bool(pods)

    def list_jobs(self, namespace: str | None) -> tuple[list[dict[str, Any]], str]:
        """Every job of a namespace (None: of all namespaces), and the list's resourceVersion."""
        return self.list_all(contract.jobs_path(namespace))

    def patch_job(self, namespace: str, job: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", contract.jobs_path(namespace, object_name(job)), json=patch,
                            headers={"Content-Type": "application/merge-patch+json"})

    def cancel_job(self, namespace: str, job: str) -> dict[str, Any]:
        """Request cancel (spec.cancel=true). The API server refuses it for a finished job (a CEL rule)."""
        return self.patch_job(namespace, job, {"spec": {"cancel": True}})

    def retry_job(self, namespace: str, job: str, token: str | None = None) -> dict[str, Any]:
        """Request a retry with a fresh spec.retryToken. The API server refuses it unless the job is failed or dead."""
        token = token or f"r-{utcnow().strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"
        return self.patch_job(namespace, job, {"spec": {"retryToken": token}})

    # --- queues, schedules, pods ------------------------------------------------------------------------------
    def list_queues(self, namespace: str | None) -> list[dict[str, Any]]:
        return self.list_all(contract.queues_path(namespace))[0]

    def pause_queue(self, namespace: str, queue: str, paused: bool = True) -> dict[str, Any]:
        """Pause (spec.paused=true) or resume a queue: running attempts finish, nothing new starts while paused."""
        return self.request("PATCH", contract.queues_path(namespace, queue), json={"spec": {"paused": paused}},
                            headers={"Content-Type": "application/merge-patch+json"})

    def list_schedules(self, namespace: str | None) -> list[dict[str, Any]]:
        return self.list_all(contract.schedules_path(namespace))[0]

    def get_schedule(self, namespace: str, name: str) -> dict[str, Any]:
        return self.request("GET", contract.schedules_path(namespace, name))

    def trigger_schedule(self, namespace: str, name: str,
                         now: datetime | None = None) -> tuple[dict[str, Any], bool, str]:
        """Create one job now from a Schedule's jobTemplate, as the Schedule would (label sextant.dev/schedule,
        annotation sextant.dev/scheduled-at), with the idempotency key `<schedule>/manual/<now>` so that two
        triggers within the same second create one job. Returns (job, created, key)."""
        schedule = self.get_schedule(namespace, name)
        template = (schedule.get("spec") or {}).get("jobTemplate") or {}
        moment = (now or utcnow()).replace(microsecond=0)
        stamp = format_time(moment, precise=False)
        key = f"{name}/manual/{stamp}"
        job, created = self.create_job(
            namespace, queue=template.get("queue", ""), handler=template.get("handler", ""),
            payload=template.get("payload") or {}, priority=template.get("priority", 0), idempotency_key=key,
            labels={contract.LABEL_SCHEDULE: name}, annotations={contract.ANNOTATION_SCHEDULED_AT: stamp}, now=moment)
        return job, created, key

    def list_workers(self, namespace: str | None) -> list[WorkerView]:
        """The namespace's workers (None: every namespace's): one list of Worker objects."""
        items, _ = self.list_all(contract.path(API_VERSION, "workers", namespace))
        return [read_worker_object(item) for item in items]

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self.request("GET", contract.pods_path(namespace, name))

    def pod_log(self, namespace: str, pod: str, container: str | None = None, *, follow: bool = False,
                tail_lines: int | None = None, limit_bytes: int | None = None) -> Iterator[str]:
        """The container's log through the API server (pods/log), as text chunks; follow streams until it ends.
        tail_lines and limit_bytes are the API server's tailLines and limitBytes: it sends no more than that."""
        params = {k: v for k, v in (("container", container), ("follow", "true" if follow else None),
                                    ("tailLines", None if tail_lines is None else str(tail_lines)),
                                    ("limitBytes", None if limit_bytes is None else str(limit_bytes))) if v}
        timeout = httpx.Timeout(30, read=None if follow else 60)
        with self.http.stream("GET", contract.pods_path(namespace, pod, "log"), params=params,
                              headers={**self.conn.headers(), "Accept": "*/*"}, timeout=timeout) as resp:
            if resp.status_code >= 300:
                resp.read()
                _raise_for(resp)
            yield from resp.iter_text()


def missing_warning(kind: str, name: str, namespace: str) -> str:
    """The warning of a create whose queue or handler does not exist (the job is made, and waits: Blocked)."""
    reason = "QueueNotFound" if kind == "queue" else "HandlerNotFound"
    return (f"{kind} {name} does not exist in namespace {namespace}: the job waits (Blocked, {reason}) until it "
            "is created")


def create_warnings(client: Client, namespace: str, queue: str, handler: str) -> list[str]:
    """Why a job just created will wait: its queue or handler does not exist (a get as the caller; one the caller
    may not read is not reported, rather than wrongly)."""
    out = []
    for kind, name, path in (("queue", queue, contract.queues_path(namespace, queue)),
                             ("handler", handler, contract.handlers_path(namespace, handler))):
        try:
            client.request("GET", path)
        except NotFound:
            out.append(missing_warning(kind, name, namespace))
        except ApiError:
            pass
    return out


# --- what a request means, in words --------------------------------------------------------------------------
class Refused(Exception):
    """A request the API server refused or could not serve, in one line that says what and where (str())."""


class KeyConflict(Refused):
    """A create whose idempotency key is held by a job with another queue, handler or payload. str() names the
    differing fields as spec.queue ...; `fields` lists them (spec keys, which the HTTP API's fields spell alike),
    `job` is the holder's id; words("") names them as the HTTP API does."""

    def __init__(self, key: str, job: str, held: dict[str, Any], wanted: dict[str, Any]) -> None:
        self.key, self.job, self.held, self.wanted = key, job, held, wanted
        self.fields = idempotency.differences(held, wanted)
        super().__init__(self.words())

    def words(self, prefix: str = "spec.") -> str:
        return idempotency.conflict_message(self.key, self.job, self.held, self.wanted, self.fields, prefix)


def _replayed(held: dict[str, Any], key: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The job holding the key, answered for a create of `spec`: the same job, or KeyConflict."""
    held_spec = held.get("spec") or {}
    if idempotency.differences(held_spec, spec):
        raise KeyConflict(key, job_id(held["metadata"]["name"]), held_spec, spec)
    return held


_CRD_MISSING = "the server could not find the requested resource"


def refused(exc: ApiError, *, kind: str | None = None, name: str | None = None,
            namespace: str | None = None) -> Refused:
    """An API answer as a message: not-found names the object and namespace, other errors carry the API
    server's own message, as kubectl prints it ("Error from server (Forbidden): ...")."""
    message = exc.message
    if isinstance(exc, NotFound) and _CRD_MISSING in message:
        return Refused("the Sextant CRDs are not installed in this cluster (the API server does not know "
                       "sextant.dev resources): kubectl apply -f crds/")
    if isinstance(exc, NotFound) and kind and name:
        return Refused(f"{kind} {name} not found in namespace {namespace}")
    if exc.status == 401:
        return Refused("You must be logged in to the server (Unauthorized): the API server did not accept the "
                       "credentials of the kubeconfig (or --token)")
    reason = exc.reason or {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
                            422: "Invalid"}.get(exc.status, str(exc.status))
    return Refused(f"Error from server ({reason}): {message}")


def _job_request(call: Callable[[], dict[str, Any]], namespace: str, name: str) -> dict[str, Any]:
    """Ask for a cancel or a retry; a refusal names the job's state (the API server's CEL rules say why)."""
    ident = job_id(name)
    try:
        return call()
    except ApiError as exc:
        words = refusal_message(exc.message) if exc.status == 422 else None
        if words:
            raise Refused(f"job {ident}: {words}") from None
        raise refused(exc, kind="job", name=ident, namespace=namespace) from None


def cancel(client: Client, namespace: str, name: str) -> str:
    """Request a job's cancel; what it did, in words. Refused when the API server refuses it."""
    ident = job_id(name)
    job = _job_request(lambda: client.cancel_job(namespace, name), namespace, name)
    state = (job.get("status") or {}).get("state")
    if state == "cancelled":
        return f"job {ident} is cancelled"
    if state == "running":
        return (f"job {ident}: cancel requested; the running handler is stopped (SIGTERM, then SIGKILL after the "
                "queue's cancelGrace)")
    return f"job {ident}: cancel requested (it was {state or 'not yet admitted'})"


def retry(client: Client, namespace: str, name: str) -> str:
    """Request a job's retry; what it did, in words. Refused when the API server refuses it."""
    job = _job_request(lambda: client.retry_job(namespace, name), namespace, name)
    state = (job.get("status") or {}).get("state")
    return f"job {job_id(name)}: retry requested (it was {state}); its attempts start again from 1"


@dataclass
class BulkOutcome:
    """What a bulk cancel or retry did: the jobs it was requested for, and those refused (id, why): their state
    changed since they were selected, or they are gone."""

    verb: Verb
    requested: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)

    def words(self, what: str) -> str:
        """"retry requested for 3 of 3 jobs (queue q, state dead)", and the first refusal's words."""
        total = len(self.requested) + len(self.refused)
        text = f"{self.verb} requested for {len(self.requested)} of {total} jobs ({what})"
        return text + (f"; {len(self.refused)} refused, e.g. {self.refused[0][1]}" if self.refused else "")


def bulk(client: Client, verb: Verb, jobs: Sequence[tuple[str, str]],
         concurrency: int = CONCURRENCY) -> BulkOutcome:
    """Cancel or retry each job (namespace, name), each with the request of a single cancel or retry (spec.cancel,
    a fresh spec.retryToken), `concurrency` at a time; a refusal is counted, and the others go on. The one path of
    the CLI's, the HTTP API's and the dashboard's bulk actions."""
    ask = cancel if verb == "cancel" else retry

    def one(index: int) -> str | None:
        namespace, name = jobs[index]
        try:
            ask(client, namespace, name)
            return None
        except Refused as exc:
            return str(exc)

    outcome = BulkOutcome(verb)
    for (_, name), refusal in zip(jobs, in_parallel(one, range(len(jobs)), concurrency)):
        if refusal is None:
            outcome.requested.append(job_id(name))
        else:
            outcome.refused.append((job_id(name), refusal))
    return outcome


def pause(client: Client, namespace: str, name: str, paused: bool = True) -> str:
    """Pause or resume a queue; what it did, in words. Refused when the queue does not exist."""
    try:
        queue = client.pause_queue(namespace, name, paused)
    except NotFound as exc:
        raise refused(exc, kind="queue", name=name, namespace=namespace) from None
    queued = (queue.get("status") or {}).get("queued")
    waiting = f" ({queued} queued)" if isinstance(queued, int) and queued > 0 else ""
    if paused:
        return (f"queue {name} paused{waiting}: running attempts finish, nothing new starts until it is resumed "
                f"(sextant queues resume {name})")
    return f"queue {name} resumed{waiting}: its queued jobs start again, in order"


def trigger(client: Client, namespace: str, name: str) -> tuple[str, str | None]:
    """Create one job now from a Schedule: (the job's id, a note when the trigger of this second made it already).
    Refused when the API server refuses it."""
    try:
        job, created, key = client.trigger_schedule(namespace, name)
    except NotFound as exc:
        if f'"{name}"' in exc.message and "schedules" in exc.message:
            raise refused(exc, kind="schedule", name=name, namespace=namespace) from None
        raise refused(exc) from None
    except ApiError as exc:
        raise refused(exc) from None
    ident = job_id(job["metadata"]["name"])
    note = None if created else (f"schedule {name} was already triggered this second (idempotency key {key!r}): "
                                 f"returning job {ident} instead of creating another")
    return ident, note
