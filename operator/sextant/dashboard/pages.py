"""The dashboard's HTML: whole pages and the fragments that the page's script fetches again when something changed.
Pure functions of view models; every value passes through html.escape."""

from __future__ import annotations

import json
from datetime import datetime
from html import escape
from typing import Any
from urllib.parse import urlencode

from ..archive.objects import is_archived
from ..resources.common import age, human_duration, time_or_none, until
from ..lifecycle.selection import question
from ..resources.job import job_id, sequence_of
from ..resources.inputs import STATES
from ..resources.report import report_facts
from .views import Bar, JobFilter, QueueRow, ScheduleRow, can, chart_svg, last_error, millis, waiting_reason

NAV = [("queues", "/"), ("jobs", "/jobs"), ("schedules", "/schedules"), ("workers", "/workers")]


def e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def page(title: str, active: str, scope: str, body: str) -> str:
    links = "".join(f'<a href="{href}"{" class=active" if name == active else ""}>{name}</a>' for name, href in NAV)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>{e(title)} · Sextant</title>
<link rel="stylesheet" href="/static/dashboard.css">
<script src="/static/dashboard.js" defer></script>
</head><body>
<header><span class="brand">Sextant</span><nav>{links}</nav><span class="scope">{e(scope)}</span></header>
<div id="flash" role="status" aria-live="polite"></div>
<main>{body}</main>
</body></html>"""


def live(url: str, inner: str, version: int | None) -> str:
    """A region that the page's script fetches again (url) whenever the server's watch saw a change: it sends the
    version it shows, and the server answers 204 while that is still the current one."""
    shown = f' data-version="{version}"' if version is not None else ""
    return f'<div class="live" data-live="{e(url)}"{shown}>{inner}</div>'


def forbidden(what: str, message: str) -> str:
    return (f'<div class="error forbidden"><strong>Forbidden</strong>: your credentials may not {e(what)}. '
            f'The API server said: <code>{e(message)}</code></div>')


def error(message: str) -> str:
    return f'<div class="error">{e(message)}</div>'


def _ago(moment: datetime | None, now: datetime) -> str:
    return "—" if moment is None else f"{age(moment, now)} ago"


# --- queues --------------------------------------------------------------------------------------------------
def queues_fragment(rows: list[QueueRow], series: list[int], now: datetime, wide: bool) -> str:
    head = ["namespace"] if wide else []
    head += ["queue", "concurrency", "running", "queued", "scheduled", "failed (retrying)", "dead",
             "finished/min", "oldest queued", ""]
    body = []
    for r in rows:
        name = e(r.name) + ("" if r.exists else ' <span class="warn" title="no Queue object">missing</span>')
        if r.paused:
            name += ' <span class="warn paused" title="nothing new starts until it is resumed">paused</span>'
        if r.rate_limited:
            name += (f' <span class="warn rate-limited" title="{e(r.rate_limit or "")}: the window\'s starts are '
                     'used up; queued jobs wait">rate limited</span>')
        verb = "resume" if r.paused else "pause"
        what = ("its queued jobs start again, in order" if r.paused else
                "running attempts finish, nothing new starts")
        action = "" if not r.exists else (
            f'<button data-action="/api/queues/{e(r.namespace)}/{e(r.name)}/{verb}" '
            f'data-confirm="{e(verb.capitalize())} queue {e(r.name)}? {e(what)}.">{verb}</button>')
        link = f'/jobs?{urlencode({"queue": r.name, **({"ns": r.namespace} if wide else {})})}'
        cells = [e(r.namespace)] if wide else []
        limits = "".join(f" · {what}" for what in (
            f"{r.per_key_concurrency} per key" if r.per_key_concurrency else "",
            f"{r.rate_limit} starts" if r.rate_limit else "") if what)
        cells += [f'<a href="{e(link)}">{name}</a>', e(("—" if r.concurrency is None else str(r.concurrency)) + limits),
                  f'{r.running}', f'{r.queued}', f'{r.scheduled}', f'{r.failed}', f'{r.dead}',
                  f'{r.finished_last_minute}',
                  "—" if r.oldest_queued_age is None else e(human_duration(r.oldest_queued_age)), action]
        body.append(f'<tr data-queue="{e(r.name)}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    table = _table(head, body, "no queues and no jobs here yet", "queues")
    return (f'<h2>Jobs finished per 10 s, last 5 minutes</h2>{chart_svg(series)}'
            f'<h2>Queues</h2>{table}<p class="muted">as of {e(now.strftime("%H:%M:%S"))} UTC</p>')


def _table(head: list[str], body: list[str], empty: str, ident: str) -> str:
    if not body:
        return f'<p class="empty" id="{ident}-empty">{e(empty)}</p>'
    th = "".join(f"<th>{e(h)}</th>" for h in head)
    return f'<table id="{ident}"><thead><tr>{th}</tr></thead><tbody>{"".join(body)}</tbody></table>'


# --- jobs ----------------------------------------------------------------------------------------------------
def jobs_form(flt: JobFilter, namespace: str | None) -> str:
    options = "".join(f'<option{" selected" if s == flt.state else ""}>{s}</option>' for s in STATES)

    def box(name: str, value: str | None, hint: str, label: str | None = None) -> str:
        return (f'<label>{label or name}<input name="{name}" value="{e(value or "")}" placeholder="{e(hint)}" '
                f'autocomplete="off"></label>')

    ns = f'<input type="hidden" name="ns" value="{e(namespace)}">' if namespace else ""
    return (f'<form class="filters" method="get" action="/jobs" id="filters">{ns}'
            f'{box("queue", flt.queue, "any")}<label>state<select name="state"><option value="">any</option>'
            f'{options}</select></label>{box("handler", flt.handler, "any")}{box("schedule", flt.schedule, "any")}'
            f'{box("q", flt.text, "part of the id", "id")}<button type="submit">filter</button>'
            f'<a href="/jobs">clear</a></form>')


def job_link(namespace: str, name: str) -> str:
    return f"/jobs/{namespace}/{job_id(name)}"


def bulk_buttons(flt: JobFilter, extra: dict[str, str], cancellable: int, retryable: int) -> str:
    """Cancel or retry all that the filter selects (where the state allows it), with one confirmation."""
    query = urlencode({**flt.query(), **extra})
    buttons = []
    for verb, count in (("retry", retryable), ("cancel", cancellable)):
        if count:
            ask = question(verb, count, flt.words())  # the CLI's prompt too
            buttons.append(f'<button class="bulk" data-action="/api/bulk/{verb}?{e(query)}" data-confirm="{e(ask)}">'
                           f'{verb} all {count}</button>')
    return f'<div class="actions bulk">{"".join(buttons)}</div>' if buttons else ""


JOB_HEAD = ["id", "state", "attempt", "sequence", "queue", "handler", "schedule", "created", "error"]


def _job_row(job: dict[str, Any], now: datetime, wide: bool) -> str:
    """One job's row, live or archived (its state then says `(archived)`)."""
    meta, spec, status = job["metadata"], job.get("spec") or {}, job.get("status") or {}
    state = status.get("state") or "<pending>"
    attempt = f'{status.get("attempt", 0)}/{status["maxAttempts"]}' if status.get("maxAttempts") \
        else str(status.get("attempt", 0))
    sequence = sequence_of(status)
    marked = " (archived)" if is_archived(job) else ""
    cells = [e(meta.get("namespace"))] if wide else []
    cells += [f'<a href="{e(job_link(meta.get("namespace", ""), meta["name"]))}">{e(job_id(meta["name"]))}</a>',
              f'<span class="state {e(state)}">{e(state + marked)}</span>', e(attempt), e(sequence or "—"),
              e(spec.get("queue")), e(spec.get("handler")),
              e((meta.get("labels") or {}).get("sextant.dev/schedule", "")),
              f'<span title="{e(meta.get("creationTimestamp"))}">'
              f'{e(age(time_or_none(meta.get("creationTimestamp")), now))} ago</span>',
              f'<span class="error-text">{e(last_error(job))}</span>']
    return f'<tr data-job="{e(job_id(meta["name"]))}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def jobs_fragment(items: list[dict[str, Any]], next_token: str | None, flt: JobFilter, now: datetime, wide: bool,
                  total: int, extra: dict[str, str], cancellable: int = 0, retryable: int = 0) -> str:
    head = (["namespace"] if wide else []) + JOB_HEAD
    body = [_job_row(job, now, wide) for job in items]
    table = _table(head, body, "no jobs match", "jobs")
    more = ""
    if next_token:
        more = f'<a class="next" href="/jobs?{e(urlencode({**flt.query(), **extra, "continue": next_token}))}">next page →</a>'
    return (f'{bulk_buttons(flt, extra, cancellable, retryable)}{table}'
            f'<p class="muted">{len(items)} shown of {total} matching, newest first. {more}</p>')


def archived_section(items: list[dict[str, Any]], next_cursor: str | None, flt: JobFilter, now: datetime,
                     wide: bool, extra: dict[str, str], problem: str | None = None) -> str:
    """The archive's jobs that the filter selects, newest first, a page at a time (`archived` continues it): the
    jobs retention deleted from the cluster. `problem`: why the archive cannot be shown (not configured, down)."""
    if problem is not None:
        return f'<h2>Archived</h2><p class="muted" id="archived-problem">{e(problem)}</p>'
    head = (["namespace"] if wide else []) + JOB_HEAD
    table = _table(head, [_job_row(job, now, wide) for job in items], "no archived jobs match", "archived")
    more = ""
    if next_cursor:
        query = urlencode({**flt.query(), **extra, "archived": next_cursor})
        more = f'<a class="next" href="/jobs?{e(query)}">older archived jobs →</a>'
    return (f'<h2>Archived</h2>{table}<p class="muted">{len(items)} shown, newest first (finished jobs whose '
            f'objects retention deleted, read from the archive). {more}</p>')


# --- one job -------------------------------------------------------------------------------------------------
def job_page_body(namespace: str, job: dict[str, Any], bars: list[Bar], now: datetime, pods: set[str],
                  events: list[dict[str, Any]] | None = None) -> str:
    meta, spec, status = job["metadata"], job.get("spec") or {}, job.get("status") or {}
    ident = job_id(meta["name"])
    state = status.get("state") or "<pending>"
    buttons = []
    archived = is_archived(job)  # its object may be gone: nothing to cancel or retry
    if archived:
        buttons.append('<span class="muted" id="job-archived">archived: read from the archive</span>')
    elif can("cancel", job):
        buttons.append(f'<button data-action="/api/jobs/{e(namespace)}/{e(ident)}/cancel" '
                       f'data-confirm="Cancel job {e(ident)}?">cancel</button>')
    if can("retry", job) and not archived:
        buttons.append(f'<button data-action="/api/jobs/{e(namespace)}/{e(ident)}/retry" '
                       f'data-confirm="Retry job {e(ident)}? Its attempts start again from 1.">retry</button>')
    actions = f'<div class="actions">{"".join(buttons)}</div>'
    waiting = waiting_reason(job)
    facts = [("namespace", namespace), ("state", state), ("waiting", waiting), ("queue", spec.get("queue")),
             ("handler", spec.get("handler")), ("priority", spec.get("priority", 0)),
             ("attempt", f'{status.get("attempt", 0)}' + (f' of {status["maxAttempts"]}' if status.get("maxAttempts")
                                                           else "")),
             ("created", meta.get("creationTimestamp")), ("run at", spec.get("runAt")),
             ("idempotency key", spec.get("idempotencyKey")), ("schedule", (meta.get("labels") or {}).get(
                 "sextant.dev/schedule")), ("message", status.get("message")),
             ("cancel requested", "yes" if spec.get("cancel") else None), ("finished", status.get("finishedAt")),
             *((label.lower(), text) for label, text in report_facts(status))]
    dl = "".join(f'<dt>{e(k)}</dt><dd{" id=job-waiting" if k == "waiting" else ""}>{e(v)}</dd>'
                 for k, v in facts if v not in (None, ""))
    line = []
    for bar in bars:
        a = bar.attempt
        line.append(f'<div class="bar {e(bar.result)}" style="left:{bar.left}%;width:{bar.width}%" '
                    f'title="attempt {e(a.get("attempt"))}: {e(bar.result)}"></div>')
    rows = []
    for bar in bars:
        a = bar.attempt
        pod = a.get("pod")
        where = e(pod or a.get("worker") or "")
        if pod and pod in pods:
            where += f' <a class="log" href="/logs/{e(namespace)}/{e(pod)}">log</a>'
        start, end = time_or_none(a.get("startedAt")), time_or_none(a.get("finishedAt"))
        took = millis((end or now) - start) if start else ""
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in [
            e(a.get("attempt")), e(sequence_of(a) or ""), where, e(a.get("node")), e(a.get("startedAt")),
            e(a.get("finishedAt")), e(took), f'<span class="state {e(bar.result)}">{e(bar.result)}</span>',
            e(a.get("reason")), e(a.get("message")), e(a.get("exitCode"))]) + "</tr>")
    dropped = status.get("droppedAttempts")
    drop = f'<p class="muted">{e(dropped)} attempts between the first and the latest are not kept.</p>' \
        if dropped else ""
    timeline = (f'<div class="timeline">{"".join(line)}</div>' if bars else "") + _table(
        ["attempt", "sequence", "pod or worker", "node", "start", "end", "took", "result", "reason", "message",
         "exit code"], rows, "no attempts yet", "attempts") + drop
    conditions = _table(["type", "status", "reason", "message", "since"], [
        "<tr>" + "".join(f"<td>{e(c.get(k))}</td>" for k in ("type", "status", "reason", "message",
                                                            "lastTransitionTime")) + "</tr>"
        for c in status.get("conditions") or [] if isinstance(c, dict)], "no conditions yet", "conditions")
    payload = json.dumps(spec.get("payload") or {}, indent=2, sort_keys=True)
    spec_text = json.dumps({k: v for k, v in spec.items() if k != "payload"}, indent=2, sort_keys=True)
    return (f'<h1>job {e(ident)} <span class="state {e(state)}" id="job-state">{e(state)}</span></h1>{actions}'
            f'<dl>{dl}</dl><h2>Attempts</h2>{timeline}<h2>Conditions</h2>{conditions}'
            f'<h2>Recent events</h2>{events_table(events)}'
            f'<h2>Payload</h2><pre>{e(payload)}</pre><h2>Spec</h2><pre>{e(spec_text)}</pre>')


def events_table(events: list[dict[str, Any]] | None) -> str:
    if events is None:
        return '<p class="muted">your credentials may not list events here</p>'
    rows = ["<tr>" + "".join(f"<td>{c}</td>" for c in [
        e(ev.get("lastTimestamp") or ev.get("eventTime") or ""), e(ev.get("type")), e(ev.get("reason")),
        e(ev.get("message")), e(ev.get("count") or 1)]) + "</tr>" for ev in events]
    return _table(["last seen", "type", "reason", "message", "count"], rows, "no events", "events")


# --- schedules and workers -----------------------------------------------------------------------------------
def schedules_fragment(rows: list[ScheduleRow], now: datetime, wide: bool) -> str:
    head = (["namespace"] if wide else []) + ["schedule", "when", "last fire", "next fire", "missed or skipped",
                                              "recent jobs", ""]
    body = []
    for r in rows:
        nxt = "suspended" if r.suspended else ("—" if r.next is None else f"{r.next:%H:%M:%S} ({until(r.next, now)})")
        jobs = " ".join(f'<a href="{e(f"/jobs/{r.namespace}/{ident}")}">{e(ident)}</a>'
                        f' <span class="state {e(state)}">{e(state)}</span><br>' for ident, state in r.jobs)
        jobs += f'<a href="/jobs?{e(urlencode({"schedule": r.name}))}">all</a>'
        missed = "<br>".join(e(m) for m in r.missed) or "none"
        run = "" if r.invalid else (f'<button data-action="/api/schedules/{e(r.namespace)}/{e(r.name)}/trigger" '
                                    f'data-confirm="Create one job now from schedule {e(r.name)}?">run now</button>')
        if r.invalid:  # it cannot fire: say why where its next fire would be
            nxt = f'<span class="invalid warn">invalid: {e(r.invalid)}</span>'
        else:
            nxt = e(nxt)
        cells = ([e(r.namespace)] if wide else []) + [e(r.name), e(r.when), e(_ago(r.last, now)), nxt, missed,
                                                     jobs, run]
        body.append(f'<tr data-schedule="{e(r.name)}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return _table(head, body, "no schedules here", "schedules")


def workers_fragment(workers: list[dict[str, Any]], wide: bool) -> str:
    head = (["namespace"] if wide else []) + ["worker", "queues", "handlers", "slots", "busy", "last renewal",
                                              "state", "running jobs"]
    body = []
    for w in workers:
        renewed = "—" if w["lastRenewalSeconds"] is None else f'{w["lastRenewalSeconds"]:.0f}s ago'
        ns = w["namespace"]
        jobs = " ".join(f'<a href="{e(f"/jobs/{ns}/{job_id(j)}")}">{e(job_id(j))}</a>' for j in w["jobs"])
        cells = ([e(w["namespace"])] if wide else []) + [
            e(w["name"]), e(", ".join(w["queues"]) or "—"), e(", ".join(w["handlers"]) or "—"),
            e("—" if w["slots"] is None else w["slots"]), e(w["busy"]), e(renewed),
            f'<span class="state {e(w["state"])}">{e(w["state"])}</span>', jobs]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return _table(head, body, "no workers registered here (sextant worker processes; see docs/workers.md)", "workers")
