"""The load generator's own lean async client (aiohttp, many requests in flight) and the watch recorder.

kubectl apply manages ~35 jobs/s; this client creates several hundred per second, so that the load generator is
never what limits a run. Its user agent, `sextant-bench`, separates its requests from everyone else's in the
API server's audit log.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from sextant.kube.kubeconfig import Connection

USER_AGENT = "sextant-bench"
RECORDER_USER_AGENT = "sextant-bench-recorder"  # the observer's watches and lists, apart from the load
RETRYABLE = {429, 500, 502, 503, 504}
LIST_TIMEOUT = 300.0  # the recorder's first lists: 100k jobs (scale) on a busy machine took over 60 s


class ApiError(Exception):
    def __init__(self, status: int, text: str, what: str) -> None:
        super().__init__(f"{what}: {status} {text[:300]}")
        self.status = status


class Api:
    def __init__(self, conn: Connection, in_flight: int = 100, user_agent: str = USER_AGENT) -> None:
        self.conn = conn
        self.in_flight = in_flight
        self.user_agent = user_agent
        self.requests: Counter[str] = Counter()  # method → count
        self.retries = 0
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Api:
        connector = aiohttp.TCPConnector(ssl=self.conn.ssl_context, limit=self.in_flight + 16)
        self._session = aiohttp.ClientSession(
            connector=connector, headers={"User-Agent": self.user_agent, "Accept": "application/json"},
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10), read_bufsize=2**20)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use `async with Api(...)`"
        return self._session

    async def request(self, method: str, path: str, body: Any = None, *, params: dict[str, str] | None = None,
                      content_type: str = "application/json", ok: tuple[int, ...] = ()) -> dict[str, Any]:
        data = json.dumps(body, separators=(",", ":")) if body is not None else None
        headers = {**self.conn.headers(), **({"Content-Type": content_type} if data else {})}
        for attempt in range(8):
            try:
                async with self.session.request(method, self.conn.server + path, data=data, params=params,
                                                headers=headers, timeout=aiohttp.ClientTimeout(total=120)) as resp:
                    self.requests[method] += 1
                    text = await resp.text()
                    if resp.status < 300 or resp.status in ok:
                        return json.loads(text) if text else {}
                    if resp.status not in RETRYABLE or attempt == 7:
                        raise ApiError(resp.status, text, f"{method} {path}")
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError):
                if attempt == 7:
                    raise
            self.retries += 1
            await asyncio.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
        raise AssertionError("unreachable")

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, body)

    async def list_all(self, path: str, params: dict[str, str] | None = None,
                       page: int = 2000) -> tuple[list[dict[str, Any]], str]:
        items: list[dict[str, Any]] = []
        query = {**(params or {}), "limit": str(page)}
        while True:
            body = await self.request("GET", path, params=query)
            items.extend(body.get("items") or [])
            meta = body.get("metadata") or {}
            if not meta.get("continue"):
                return items, meta.get("resourceVersion", "")
            query["continue"] = meta["continue"]


# --- the recorder -----------------------------------------------------------------------------------------------

@dataclass
class JobRecord:
    sent: float | None = None  # local time the create was sent
    created: float | None = None  # local time its response arrived (the job exists by then)
    created_ts: str | None = None  # metadata.creationTimestamp (1 s resolution)
    running: float | None = None  # local receive time of the first watch event showing it running
    terminal: float | None = None  # local receive time of the first watch event showing it terminal
    # the first attempt's startedAt as the final status records it (a worker's handler start, this machine's clock,
    # microseconds): in worker mode the Job shows no `running` for an attempt that ends within its first second
    started: float | None = None
    outcome: str | None = None
    pods: dict[str, PodRecord] = field(default_factory=dict)


@dataclass
class PodRecord:
    added: float  # local receive time of the pod's first watch event
    created_ts: str | None
    finished: float | None = None  # local receive time of the first event in phase Succeeded/Failed
    phase: str = "Pending"


@dataclass
class Kind:
    """What differs between Sextant Jobs and batch/v1 Jobs for the recorder."""

    name: str
    jobs_path: Callable[[str], str]  # namespace → collection path
    outcome: Callable[[dict[str, Any]], str | None]  # a job object → its terminal outcome, None while unfinished
    attempts: Callable[[dict[str, Any]], int]  # a job object → attempts (pods) it counted
    job_of_pod: Callable[[dict[str, Any]], str | None]
    running: Callable[[dict[str, Any]], bool]  # a job object → whether an attempt of it runs now


def _batch_running(obj: dict[str, Any]) -> bool:
    return int((obj.get("status") or {}).get("active") or 0) > 0


def _sextant_outcome(obj: dict[str, Any]) -> str | None:
    state = (obj.get("status") or {}).get("state")
    return state if state in ("succeeded", "dead", "cancelled") else None


def _batch_outcome(obj: dict[str, Any]) -> str | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
            return "succeeded" if cond["type"] == "Complete" else "failed"
    return None


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return obj.get("metadata", {}).get("labels") or {}


SEXTANT = Kind(
    "sextant",
    lambda ns: f"/apis/sextant.dev/v1alpha1/namespaces/{ns}/jobs",
    _sextant_outcome,
    lambda obj: len((obj.get("status") or {}).get("attempts") or []),
    lambda pod: _labels(pod).get("sextant.dev/job"),
    lambda obj: (obj.get("status") or {}).get("state") == "running",
)
BATCH = Kind(
    "batch",
    lambda ns: f"/apis/batch/v1/namespaces/{ns}/jobs",
    _batch_outcome,
    lambda obj: sum(int((obj.get("status") or {}).get(k) or 0) for k in ("succeeded", "failed")),
    lambda pod: _labels(pod).get("batch.kubernetes.io/job-name"),
    _batch_running,
)


def _first_start(obj: dict[str, Any]) -> float | None:
    from datetime import datetime

    attempts = (obj.get("status") or {}).get("attempts") or []
    stamp = attempts[0].get("startedAt") if attempts and isinstance(attempts[0], dict) else None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None
    except ValueError:
        return None


class Recorder:
    """Watches the namespace's jobs and pods and stamps each change with the local receive time."""

    def __init__(self, api: Api, kind: Kind, namespace: str) -> None:
        self.api = api
        self.kind = kind
        self.namespace = namespace
        self.jobs: dict[str, JobRecord] = {}
        self.orphan_pods: dict[str, dict[str, PodRecord]] = {}  # pods seen before their job's create returned
        self.terminal = 0
        self.events = 0
        self.changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def job(self, name: str) -> JobRecord:
        rec = self.jobs.get(name)
        if rec is None:
            rec = self.jobs[name] = JobRecord()
            rec.pods = self.orphan_pods.pop(name, {})
        return rec

    async def start(self) -> None:
        ready = [asyncio.Event(), asyncio.Event()]
        self._tasks = [
            asyncio.create_task(self._watch(self.kind.jobs_path(self.namespace), self._on_job, ready[0])),
            asyncio.create_task(self._watch(f"/api/v1/namespaces/{self.namespace}/pods", self._on_pod, ready[1])),
        ]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in ready)), LIST_TIMEOUT)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _on_job(self, obj: dict[str, Any], now: float) -> None:
        meta = obj["metadata"]
        rec = self.job(meta["name"])
        rec.created_ts = rec.created_ts or meta.get("creationTimestamp")
        if rec.running is None and self.kind.running(obj):
            rec.running = now
        if rec.terminal is None:
            outcome = self.kind.outcome(obj)
            if outcome is not None:
                rec.terminal, rec.outcome = now, outcome
                rec.started = _first_start(obj)
                self.terminal += 1
                self.changed.set()

    def _on_pod(self, obj: dict[str, Any], now: float) -> None:
        job = self.kind.job_of_pod(obj)
        if job is None:
            return
        meta = obj["metadata"]
        pods = self.jobs[job].pods if job in self.jobs else self.orphan_pods.setdefault(job, {})
        pod = pods.get(meta["name"])
        if pod is None:
            pod = pods[meta["name"]] = PodRecord(now, meta.get("creationTimestamp"))
        phase = (obj.get("status") or {}).get("phase") or "Pending"
        pod.phase = phase
        if pod.finished is None and phase in ("Succeeded", "Failed"):
            pod.finished = now

    async def _watch(self, path: str, handle: Callable[[dict[str, Any], float], None], ready: asyncio.Event) -> None:
        items, rv = await self.api.list_all(path)
        now = time.time()
        for obj in items:
            handle(obj, now)
        ready.set()
        while True:
            params = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": "600"}
            try:
                async with self.api.session.get(self.api.conn.server + path, params=params,
                                                headers=self.api.conn.headers(),
                                                timeout=aiohttp.ClientTimeout(total=None, sock_read=700)) as resp:
                    if resp.status == 410:
                        items, rv = await self.api.list_all(path)
                        now = time.time()
                        for obj in items:
                            handle(obj, now)
                        continue
                    if resp.status >= 300:
                        raise ApiError(resp.status, await resp.text(), f"WATCH {path}")
                    async for line in resp.content:
                        if not line.strip():
                            continue
                        now = time.time()
                        event = json.loads(line)
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            if obj.get("code") == 410:
                                items, rv = await self.api.list_all(path)
                                for o in items:
                                    handle(o, time.time())
                            break
                        rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            self.events += 1
                            handle(obj, now)
            except (aiohttp.ClientError, asyncio.TimeoutError):
                await asyncio.sleep(0.2)
