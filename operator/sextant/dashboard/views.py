"""The dashboard's pure parts: the jobs filter and its API parameters, the cross-site request check, and the view
models of the pages (queues, the finished-jobs chart, the attempt timeline, schedules). Raw objects in, plain data
out; no I/O, so that every rule here is a unit test (tests/unit/test_dashboard.py)."""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from ..resources import inputs
from ..lifecycle.queueing import QueueStats, queue_stats
from ..resources.common import time_or_none
from ..resources.job import is_finished, job_id

PAGE_SIZE = 50  # rows of the jobs view
SCAN_PAGE = 500  # jobs per API request while the id text filters (most rows of a page are not shown)
SCAN_LIMIT = 200  # API requests at most for one page of the jobs view (100k jobs at SCAN_PAGE)
LABEL_SCHEDULE = "sextant.dev/schedule"


class FilterError(ValueError):
    """A filter value that cannot be a queue, state, handler or schedule; the message names the field."""


@dataclass(frozen=True)
class JobFilter:
    queue: str | None = None
    state: str | None = None
    handler: str | None = None
    schedule: str | None = None
    text: str | None = None  # a part of the job id

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> JobFilter:
        """From the page's query string. Empty fields are absent; a bad one raises FilterError naming it (the
        same rules as the CLI's --queue/--state/--handler, inputs.py)."""
        def value(key: str) -> str | None:
            text = (query.get(key) or "").strip()
            return text or None

        try:
            queue, handler, schedule = value("queue"), value("handler"), value("schedule")
            state = value("state")
            return cls(queue=inputs.object_name("queue", queue, "queue name") if queue else None,
                       state=inputs.state("state", state) if state else None,
                       handler=inputs.object_name("handler", handler, "handler name") if handler else None,
                       schedule=inputs.object_name("schedule", schedule, "schedule name") if schedule else None,
                       text=value("q"))
        except inputs.InputError as exc:
            raise FilterError(str(exc)) from None

    def field_selector(self) -> str | None:
        """The Job CRD's selectableFields (spec.queue, spec.handler, status.state): the API server filters."""
        parts = [f"{path}={value}" for path, value in (("spec.queue", self.queue), ("spec.handler", self.handler),
                                                       ("status.state", self.state)) if value]
        return ",".join(parts) or None

    def label_selector(self) -> str | None:
        return f"{LABEL_SCHEDULE}={self.schedule}" if self.schedule else None

    def matches_text(self, job: Mapping[str, Any]) -> bool:
        """The id text: a part of the id in either spelling (job_ab12 or job-ab12), case-insensitive."""
        if not self.text:
            return True
        name = job["metadata"]["name"]
        needle = self.text.lower()
        return needle in name.lower() or needle in job_id(name).lower()

    def query(self) -> dict[str, str]:
        """Back into the query string (for links that keep the filter)."""
        return {k: v for k, v in (("queue", self.queue), ("state", self.state), ("handler", self.handler),
                                  ("schedule", self.schedule), ("q", self.text)) if v}


def list_params(flt: JobFilter, continue_token: str | None) -> dict[str, str]:
    """The API server's list parameters for one request of the jobs view: the selectors, a limit (one page of
    rows, or a larger scanning page when the id text filters what comes back) and the continue token."""
    params = {"limit": str(SCAN_PAGE if flt.text else PAGE_SIZE)}
    if (selector := flt.field_selector()) is not None:
        params["fieldSelector"] = selector
    if (labels := flt.label_selector()) is not None:
        params["labelSelector"] = labels
    if continue_token:
        params["continue"] = continue_token
    return params


# --- cross-site requests -------------------------------------------------------------------------------------
def allowed_hosts(address: str, port: int) -> frozenset[str]:
    """The Host headers this server answers: its address and port, and localhost's names for a loopback one.
    Anything else is a DNS-rebinding page or a mistake."""
    hosts = {f"{address}:{port}"}
    if address in ("127.0.0.1", "::1", "localhost"):
        hosts |= {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
    if ":" in address and not address.startswith("["):
        hosts.add(f"[{address}]:{port}")
    return frozenset(hosts)


def request_refusal(method: str, headers: Mapping[str, str], token: str, hosts: frozenset[str]) -> str | None:
    """Why a request is refused, or None. Every request must name one of our hosts (DNS rebinding); a request that
    changes something (not GET/HEAD) must also come from our own page: an Origin, when sent, that is ours, and
    the per-process token the page carries (another site cannot read it, so it cannot send it)."""
    host = headers.get("Host", "")
    if host not in hosts:
        return f"unexpected Host header {host!r}"
    if method in ("GET", "HEAD"):
        return None
    origin = headers.get("Origin")
    if origin is not None:
        parts = urlsplit(origin)
        if parts.scheme != "http" or parts.netloc not in hosts:
            return f"cross-site request refused (Origin {origin!r})"
    sent = headers.get("X-Sextant-Token", "")
    if not sent or not hmac.compare_digest(sent.encode(), token.encode()):
        return "missing or wrong X-Sextant-Token: reload the page"
    return None


# --- queues --------------------------------------------------------------------------------------------------
@dataclass
class QueueRow:
    namespace: str
    name: str
    exists: bool
    concurrency: int | None
    running: int
    queued: int
    scheduled: int
    failed: int  # failed, awaiting a retry
    dead: int
    finished_last_minute: int
    oldest_queued_age: timedelta | None


def finished_at(job: Mapping[str, Any]) -> datetime | None:
    """When a finished job finished: status.finishedAt, else its last attempt's end; None for an unfinished one."""
    status = job.get("status") or {}
    if not is_finished(status.get("state")):
        return None
    when = time_or_none(status.get("finishedAt"))
    if when is None and status.get("attempts"):
        when = time_or_none(status["attempts"][-1].get("finishedAt"))
    return when


def queue_rows(queues: Iterable[dict[str, Any]], jobs: Iterable[dict[str, Any]], now: datetime) -> list[QueueRow]:
    jobs = list(jobs)
    per_queue: dict[tuple[str, str], int] = {}
    for job in jobs:
        when = finished_at(job)
        if when is not None and now - timedelta(seconds=60) < when <= now:
            key = (job["metadata"].get("namespace", ""), (job.get("spec") or {}).get("queue", ""))
            per_queue[key] = per_queue.get(key, 0) + 1
    rows = []
    for s in queue_stats(queues, jobs, now):
        rows.append(QueueRow(
            s.namespace, s.name, s.exists, s.concurrency, s.jobs["running"], s.jobs["queued"], s.jobs["scheduled"],
            s.jobs["failed"], s.jobs["dead"], per_queue.get((s.namespace, s.name), 0),
            now - s.oldest_queued_at if s.oldest_queued_at else None))
    return rows


def finished_series(jobs: Iterable[Mapping[str, Any]], now: datetime, buckets: int = 30,
                    width: timedelta = timedelta(seconds=10)) -> list[int]:
    """Jobs finished per interval, oldest first: `buckets` intervals of `width` ending now."""
    counts = [0] * buckets
    start = now - width * buckets
    for job in jobs:
        when = finished_at(job)
        if when is None or not start < when <= now:
            continue
        index = min(buckets - 1, int((when - start) / width))
        counts[index] += 1
    return counts


def chart_svg(counts: list[int], width: int = 600, height: int = 80) -> str:
    """A bar chart of the counts as inline SVG (no script, no library), with the maximum as its label."""
    top = max(counts) if counts else 0
    bar = width / max(1, len(counts))
    rects = []
    for i, count in enumerate(counts):
        h = 0 if top == 0 else round((height - 14) * count / top, 1)
        rects.append(f'<rect x="{round(i * bar + 1, 1)}" y="{round(height - h, 1)}" width="{round(bar - 2, 1)}" '
                     f'height="{h}"><title>{count}</title></rect>')
    return (f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
            f'aria-label="jobs finished per interval">'
            f'<text x="2" y="11">max {top}</text>{"".join(rects)}</svg>')


# --- one job: the attempt timeline ---------------------------------------------------------------------------
@dataclass
class Bar:
    """One attempt on the time line: where it starts and how wide it is, in percent of the line."""

    attempt: dict[str, Any]
    left: float
    width: float
    result: str


def timeline(attempts: list[dict[str, Any]], now: datetime) -> list[Bar]:
    """The attempts as bars on one time axis, from the first start to the last end (a running one ends now)."""
    spans = []
    for a in attempts:
        start = time_or_none(a.get("startedAt"))
        end = time_or_none(a.get("finishedAt")) or (now if a.get("result") == "running" else start)
        spans.append((a, start, end))
    known = [t for _, s, e in spans for t in (s, e) if t is not None]
    if not known:
        return [Bar(a, 0.0, 0.0, a.get("result", "")) for a in attempts]
    first, last = min(known), max(known)
    total = max((last - first).total_seconds(), 0.001)
    bars = []
    for a, start, end in spans:
        if start is None:
            bars.append(Bar(a, 0.0, 0.0, a.get("result", "")))
            continue
        left = (start - first).total_seconds() / total * 100
        width = max(((end or start) - start).total_seconds() / total * 100, 0.5)
        bars.append(Bar(a, round(left, 2), round(min(width, 100 - left), 2), a.get("result", "")))
    return bars


# --- schedules -----------------------------------------------------------------------------------------------
MISSED_REASONS = ("MissedDeadline", "MissedTicks", "TickSkipped")


@dataclass
class ScheduleRow:
    namespace: str
    name: str
    when: str
    suspended: bool
    last: datetime | None
    next: datetime | None
    missed: list[str] = field(default_factory=list)  # the Events that say a tick was missed or skipped
    jobs: list[tuple[str, str]] = field(default_factory=list)  # (job id, state), newest first


def schedule_rows(schedules: Iterable[dict[str, Any]], jobs: Iterable[Mapping[str, Any]],
                  events: Iterable[Mapping[str, Any]], recent: int = 5) -> list[ScheduleRow]:
    made: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for job in jobs:
        meta = job["metadata"]
        owner = (meta.get("labels") or {}).get(LABEL_SCHEDULE)
        if owner:
            made.setdefault((meta.get("namespace", ""), owner), []).append(job)
    missed: dict[tuple[str, str], list[str]] = {}
    for ev in events:
        obj = ev.get("involvedObject") or {}
        if obj.get("kind") == "Schedule" and ev.get("reason") in MISSED_REASONS:
            stamp = ev.get("lastTimestamp") or ev.get("eventTime") or ""
            count = ev.get("count") or 1
            missed.setdefault((obj.get("namespace", ""), obj.get("name", "")), []).append(
                f"{stamp} {ev['reason']}{f' ×{count}' if count > 1 else ''}: {ev.get('message', '')}")
    rows = []
    for s in sorted(schedules, key=lambda s: (s["metadata"].get("namespace", ""), s["metadata"]["name"])):
        meta, spec, status = s["metadata"], s.get("spec") or {}, s.get("status") or {}
        key = (meta.get("namespace", ""), meta["name"])
        when = spec.get("cron") or (f"every {spec['interval']}" if spec.get("interval") else "")
        theirs = sorted(made.get(key, []), key=lambda j: j["metadata"].get("creationTimestamp", ""), reverse=True)
        rows.append(ScheduleRow(
            key[0], key[1], when, bool(spec.get("suspend")), time_or_none(status.get("lastScheduleTime")),
            time_or_none(status.get("nextScheduleTime")), sorted(missed.get(key, []), reverse=True)[:recent],
            [(job_id(j["metadata"]["name"]), (j.get("status") or {}).get("state") or "<pending>")
             for j in theirs[:recent]]))
    return rows


__all__ = ["JobFilter", "FilterError", "QueueRow", "QueueStats", "list_params", "request_refusal", "allowed_hosts",
           "queue_rows", "finished_series", "chart_svg", "timeline", "schedule_rows", "finished_at"]
