"""The dashboard's pure parts: the jobs filter and its API parameters, the cross-site request check, and the view
models of the pages (queues, the finished-jobs chart, the attempt timeline, schedules). Raw objects in, plain data
out; no I/O, so that every rule here is a unit test (tests/unit/test_dashboard.py)."""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit

from ..resources import inputs
from ..lifecycle.queueing import QueueStats, queue_stats
from ..resources.common import time_or_none
from ..lifecycle.selection import BULK_MAX, Verb, actionable, creation_order, targets
from ..resources.job import is_finished, job_id

PAGE_SIZE = 50  # rows of the jobs view
LABEL_SCHEDULE = "sextant.dev/schedule"
LOOPBACK_NAMES = ("localhost",)


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

    def matches(self, job: Mapping[str, Any], namespace: str | None = None) -> bool:
        """Whether a (cached) job is one the filter selects, in namespace when one is given."""
        meta, spec, status = job["metadata"], job.get("spec") or {}, job.get("status") or {}
        return ((namespace is None or meta.get("namespace") == namespace)
                and (self.queue is None or spec.get("queue") == self.queue)
                and (self.handler is None or spec.get("handler") == self.handler)
                and (self.state is None or status.get("state") == self.state)
                and (self.schedule is None or (meta.get("labels") or {}).get(LABEL_SCHEDULE) == self.schedule)
                and self.matches_text(job))

    def words(self) -> str:
        """The filter for a person ("queue emails, state dead"), for the bulk actions' confirmation."""
        parts = [f"{k} {v}" for k, v in (("queue", self.queue), ("state", self.state), ("handler", self.handler),
                                         ("schedule", self.schedule), ("id containing", self.text)) if v]
        return ", ".join(parts) or "no filter"

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


def newest_first(job: Mapping[str, Any]) -> tuple[str, str]:
    """The jobs view's order key, to sort descending: creation time, then name."""
    return creation_order(job)


def cursor_of(job: Mapping[str, Any]) -> str:
    created, name = newest_first(job)
    return f"{created}/{name}"


def parse_cursor(text: str) -> tuple[str, str]:
    """A `continue` value of the jobs view (the last row shown: its creation time and name)."""
    created, sep, name = text.rpartition("/")
    try:
        inputs.job_name("continue", name)
    except inputs.InputError:
        sep = ""
    if not sep or not created or len(text) > 300:
        raise FilterError("continue: not the cursor of a page of this view (start again from the first page)")
    return created, name


def jobs_page(jobs: Iterable[Mapping[str, Any]], flt: JobFilter, namespace: str | None, after: str | None,
              size: int = PAGE_SIZE) -> tuple[list[Mapping[str, Any]], str | None, int]:
    """One page of the jobs view from the cached jobs: those the filter selects, newest first, after the cursor;
    with the next page's cursor (None on the last page) and how many jobs match in all."""
    matching = sorted((j for j in jobs if flt.matches(j, namespace)), key=newest_first, reverse=True)
    start = 0
    if after is not None:
        bound = parse_cursor(after)
        start = next((i for i, j in enumerate(matching) if newest_first(j) < bound), len(matching))
    shown = matching[start:start + size]
    more = start + size < len(matching)
    return shown, cursor_of(shown[-1]) if shown and more else None, len(matching)


def bulk_targets(jobs: Iterable[Mapping[str, Any]], flt: JobFilter, namespace: str | None,
                 verb: Verb) -> list[Mapping[str, Any]]:
    """What a bulk cancel or retry of a filter acts on: of the jobs it selects, those the verb applies to, oldest
    first, at most BULK_MAX (lifecycle/selection.py: the rule of the CLI's and the HTTP API's bulk actions too)."""
    return targets((j for j in jobs if flt.matches(j, namespace)), verb, BULK_MAX)


def can(verb: Verb, job: Mapping[str, Any]) -> bool:
    """Whether the job's state allows the action (the API server's CEL rules say the same)."""
    return actionable(verb, job)


def last_error(job: Mapping[str, Any]) -> str:
    """The jobs list's error column: the latest failed attempt's reason and message, else a Blocked condition's."""
    status = job.get("status") or {}
    for a in reversed(status.get("attempts") or []):
        if a.get("result") in ("failed", "cancelled"):
            reason, message, code = a.get("reason") or a.get("result"), a.get("message"), a.get("exitCode")
            words = f"{reason} (exit code {code})" if code is not None else reason
            return words + (f": {message}" if message and message != reason else "")
    blocked = waiting_reason(job)
    return blocked or ""


def waiting_reason(job: Mapping[str, Any]) -> str | None:
    """Why an unfinished job does not run: its Blocked condition (QueueNotFound, HandlerNotFound, NoWorker)."""
    status = job.get("status") or {}
    if is_finished(status.get("state")):
        return None
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Blocked" and c.get("status") == "True":
            return f"{c.get('reason', 'Blocked')}: {c.get('message', '')}".rstrip(": ")
    return None


def millis(delta: timedelta) -> str:
    """A duration to the millisecond: 0.042 s, 3.500 s, 2m 5.250s, 1h 2m 3.000s."""
    ms = round(delta.total_seconds() * 1000)
    if ms < 0:
        return "—"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds = f"{rest / 1000:.3f}s"
    if hours:
        return f"{hours}h {minutes}m {seconds}"
    return f"{minutes}m {seconds}" if minutes else seconds


# --- cross-site requests -------------------------------------------------------------------------------------
def allowed_hosts(address: str, port: int) -> frozenset[str] | None:
    """The Host headers this server answers: its address and port, and localhost's names for a loopback one.
    Anything else is a DNS-rebinding page or a mistake. None for a wildcard address (0.0.0.0, ::): any name of the
    machine may reach it, and the secret alone keeps others out."""
    if address in ("0.0.0.0", "::", "[::]"):
        return None
    hosts = {f"{address}:{port}"}
    if address in ("127.0.0.1", "::1", "localhost"):
        hosts |= {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
    if ":" in address and not address.startswith("["):
        hosts.add(f"[{address}]:{port}")
    return frozenset(hosts)


def is_loopback(address: str) -> bool:
    """Whether an address to listen on reaches this machine only (127.0.0.0/8, ::1, localhost)."""
    if address in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


SECRET_PARAM = "secret"  # the query parameter of the printed URL that carries the per-process secret


def cookie_name(port: int) -> str:
    """The session cookie's name: one per port (cookies do not tell ports apart, so two dashboards on this machine
    would overwrite each other's)."""
    return f"sextant-dashboard-{port}"


@dataclass(frozen=True)
class Door:
    """What the guard does with a request: refuse it (status, words), or set the session cookie and send the
    browser to `redirect` (the URL without the secret), or let it in (all None)."""

    refusal: str | None = None
    status: int = 403
    redirect: str | None = None


def door(method: str, path: str, query: Mapping[str, str], headers: Mapping[str, str], cookie: str | None,
         secret: str, hosts: frozenset[str] | None, scheme: str = "http") -> Door:
    """Every request must name one of our hosts (DNS rebinding) and carry the per-process secret: in the session
    cookie, or once, in the URL the dashboard printed (then the cookie is set and the browser sent on without it,
    so that the secret stays out of the history and the address bar). A request that changes something (not
    GET/HEAD) must also come from our own page: an Origin, when sent, that is ours. The cookie is SameSite=Strict
    (another site's page cannot send it) and HttpOnly (no script, ours included, reads it)."""
    host = headers.get("Host", "")
    if not host or (hosts is not None and host not in hosts):
        return Door(f"unexpected Host header {host!r}")
    if method not in ("GET", "HEAD"):
        origin = headers.get("Origin")
        if origin is not None:
            parts = urlsplit(origin)
            if parts.scheme != scheme or parts.netloc not in (hosts if hosts is not None else {host}):
                return Door(f"cross-site request refused (Origin {origin!r})")
    given = query.get(SECRET_PARAM)
    if given is not None and method in ("GET", "HEAD"):
        if not _same(given, secret):
            return Door("wrong secret in the URL: open the URL that `sextant dashboard` printed", 401)
        rest = urlencode([(k, v) for k, v in query.items() if k != SECRET_PARAM])
        return Door(redirect=path + (f"?{rest}" if rest else ""))
    if cookie is None or not _same(cookie, secret):
        return Door("this dashboard needs its secret: open the URL that `sextant dashboard` printed (it carries "
                    "the secret once; the browser then keeps it in a cookie until the dashboard stops)", 401)
    return Door()


def _same(sent: str, secret: str) -> bool:
    return bool(sent) and hmac.compare_digest(sent.encode(), secret.encode())


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
    paused: bool = False
    rate_limit: str | None = None  # "100/1m"
    per_key_concurrency: int | None = None
    rate_limited: bool = False


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
            now - s.oldest_queued_at if s.oldest_queued_at else None, s.paused, s.rate_limit, s.per_key_concurrency,
            s.rate_limited))
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
    invalid: str | None = None  # the Invalid condition's reason and message: the schedule cannot fire


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
        invalid = next((f"{c.get('reason', 'Invalid')}: {c.get('message', '')}" for c in status.get("conditions") or []
                        if isinstance(c, dict) and c.get("type") == "Invalid" and c.get("status") == "True"), None)
        rows.append(ScheduleRow(
            key[0], key[1], when, bool(spec.get("suspend")), time_or_none(status.get("lastScheduleTime")),
            time_or_none(status.get("nextScheduleTime")), sorted(missed.get(key, []), reverse=True)[:recent],
            [(job_id(j["metadata"]["name"]), (j.get("status") or {}).get("state") or "<pending>")
             for j in theirs[:recent]], invalid))
    return rows


__all__ = ["JobFilter", "FilterError", "QueueRow", "QueueStats", "Door", "door", "allowed_hosts", "jobs_page",
           "bulk_targets", "can", "last_error", "waiting_reason", "millis", "is_loopback", "cookie_name",
           "queue_rows", "finished_series", "chart_svg", "timeline", "schedule_rows", "finished_at"]
