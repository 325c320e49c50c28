"""`sextant jobs create|list|get|cancel|retry|wait`: thin adapters over client.py."""

from __future__ import annotations

import argparse
import math
import sys
import time
from datetime import datetime
from typing import Any

from .. import client
from ..archive import merged
from ..archive.objects import is_archived
from ..history import NOT_CONFIGURED
from ..resources import inputs
from ..client import create_warnings, refused
from ..kube.client import ApiError, Gone
from ..resources import contract
from ..resources.common import age, parse_time, precise_duration, time_or_none, until
from ..resources.job import is_finished, job_id
from . import bulk, output
from .context import CliError, Context, archive_flag
from .listing import list_filters, pages, sort_key

EXIT_TIMEOUT = 124  # as timeout(1)


def register(sub: argparse._SubParsersAction, flags: argparse.ArgumentParser) -> None:
    group = sub.add_parser("jobs", parents=[flags], help="create, list, get, cancel, retry and wait for jobs",
                           description="Jobs: ids are accepted as job_8f3k2m9q or job-8f3k2m9q. With no COMMAND, "
                                       "list: `sextant jobs --state failed` is `sextant jobs list --state failed`.")
    cmds = group.add_subparsers(dest="jobs_command", required=True, metavar="COMMAND")

    create = cmds.add_parser("create", parents=[flags], help="create a job (or many: --from-file) and print its id",
                             description="Create a job and print its id alone on stdout, so that "
                                         "ID=$(sextant jobs create ...) works. With an idempotency key used "
                                         "within the last 24 hours, print the first job's id instead (and say so "
                                         "on stderr); exit 1, creating nothing, when that job has another queue, "
                                         "handler or payload. With --from-file, one job per line (JSON objects "
                                         "with the fields of POST /v2/jobs: queue, handler, payload, run_at, "
                                         "idempotency_key, priority): every line is checked first (a bad one: "
                                         "each named by line and field, exit 2, nothing created), then one id "
                                         "per job is printed in the file's order (an empty line, and an error "
                                         "naming the line on stderr, for a job not created: exit 1).")
    create.add_argument("--queue", help="the Queue it runs on (required; with --from-file, for lines without one)")
    create.add_argument("--handler", help="the Handler that runs it (required; with --from-file, for lines "
                                          "without one)")
    create.add_argument("-f", "--from-file", metavar="FILE", help="create the jobs of an ndjson file, one JSON "
                                                                  "object per line (- reads stdin)")
    create.add_argument("--payload", default=None,
                        help="the JSON object handed to the handler: inline JSON, @FILE, or - (stdin)")
    when = create.add_mutually_exclusive_group()
    when.add_argument("--run-at", metavar="TIME", help="do not run before this RFC 3339 time, e.g. "
                                                       "2026-12-01T10:00:00Z")
    when.add_argument("--in", dest="delay", metavar="DURATION", help="do not run before this long from now, "
                                                                     "e.g. 10m or 1h30m")
    create.add_argument("--idempotency-key", metavar="KEY",
                        help="a second create with this key within 24 h returns the first job (refused "
                             "when that job has another queue, handler or payload)")
    create.add_argument("--priority", type=int, default=None, help="higher runs first within its queue (default 0)")
    create.add_argument("--concurrency-key", metavar="KEY",
                        help="its concurrency key (spec.concurrencyKey), e.g. a tenant: the queue's "
                             "perKeyConcurrency limits running attempts per key, and keys take turns")
    archive_flag(create)
    create.add_argument("-o", "--output", choices=output.FORMATS,
                        help="print the whole job as json or yaml instead of its id")
    create.set_defaults(func=create_cmd, cli=True)

    lst = cmds.add_parser("list", parents=[flags], help="list jobs, live and archived (a table, or -o json|yaml)",
                          description="Live jobs, then, with an archive configured (--archive or "
                                      "SEXTANT_ARCHIVE_DSN), archived ones, newest first, marked (archived). "
                                      "With --limit, one page, and the command that continues it on stderr.")
    lst.add_argument("--queue", help="only jobs of this queue")
    lst.add_argument("--state", help=f"only jobs in this state ({', '.join(inputs.STATES)})")
    lst.add_argument("--handler", help="only jobs of this handler")
    lst.add_argument("--label", metavar="KEY=VALUE", help="only jobs with this label")
    lst.add_argument("--since", metavar="TIME", help="only jobs that finished at or after TIME (RFC 3339, or a "
                                                     "duration before now: 1h); unfinished jobs pass")
    lst.add_argument("--until", metavar="TIME", help="only jobs that finished before TIME (RFC 3339, or a duration "
                                                     "before now); unfinished jobs do not pass")
    lst.add_argument("--limit", type=int, metavar="N", help="one page of at most N jobs (1-1000)")
    lst.add_argument("--continue", dest="cursor", metavar="CURSOR", help="the next page of a --limit list")
    archive_flag(lst)
    lst.add_argument("-w", "--watch", action="store_true", help="after the list, print every change")
    lst.add_argument("-o", "--output", choices=output.FORMATS, help="json or yaml instead of a table")
    lst.set_defaults(func=list_cmd, cli=True)

    get = cmds.add_parser("get", parents=[flags], help="show one job (live, or else archived)")
    get.add_argument("id", metavar="ID")
    archive_flag(get)
    get.add_argument("-o", "--output", choices=output.FORMATS, help="json or yaml instead of a table")
    get.set_defaults(func=get_cmd, cli=True)

    selected = ("Instead of an ID, --queue, --state, --handler and -l select jobs (all must match): the command "
                "counts those whose state allows it, asks once for confirmation (--yes in scripts: without a "
                "terminal it refuses, changing nothing), then asks for each as for one ID and prints how many.")
    cancel = cmds.add_parser("cancel", parents=[flags], help="cancel a scheduled, queued, running or failed job "
                                                             "(or all that --queue/--state/... select)",
                             description="Cancel a scheduled, queued, running or failed job. " + selected)
    cancel.add_argument("id", metavar="ID", nargs="?")
    bulk.selection_flags(cancel)
    cancel.set_defaults(func=cancel_cmd, cli=True)

    retry = cmds.add_parser("retry", parents=[flags], help="retry a failed or dead job (attempts start again; or "
                                                           "all that --queue/--state/... select)",
                            description="Retry a failed or dead job: its attempts start again. " + selected)
    retry.add_argument("id", metavar="ID", nargs="?")
    bulk.selection_flags(retry)
    retry.set_defaults(func=retry_cmd, cli=True)

    wait = cmds.add_parser("wait", parents=[flags], help="wait until a job finishes; exit 0 only if it succeeded",
                           description="Wait until the job is succeeded (exit 0), dead or cancelled (exit 1), or "
                                       f"the timeout passes (exit {EXIT_TIMEOUT}).")
    wait.add_argument("id", metavar="ID")
    wait.add_argument("--timeout", metavar="DURATION", help="give up after this long, e.g. 30s or 10m "
                                                            "(default: wait forever)")
    wait.set_defaults(func=wait_cmd, cli=True)


# --- rows ----------------------------------------------------------------------------------------------------
HEADERS = ["ID", "STATE", "ATTEMPT", "QUEUE", "HANDLER", "PRIORITY", "RUN-AT", "AGE"]


def state_text(job: dict[str, Any]) -> str:
    """The state, with why a job waits when it is Blocked ("queued (blocked: QueueNotFound)")."""
    status = job.get("status") or {}
    if status.get("duplicateOf"):
        return f"{status.get('state') or 'duplicate'} (duplicate of {job_id(status['duplicateOf'])})"
    blocked = next((c for c in status.get("conditions") or []
                    if c.get("type") == "Blocked" and c.get("status") == "True"), None)
    state = status.get("state") or "<pending>"
    if is_archived(job):
        return f"{state} (archived)"
    return f"{state} (blocked: {blocked.get('reason')})" if blocked else state


def attempt_text(job: dict[str, Any]) -> str:
    status = job.get("status") or {}
    attempt, most = status.get("attempt", 0), status.get("maxAttempts")
    return f"{attempt}/{most}" if most else str(attempt)


def run_at_text(job: dict[str, Any], now: datetime) -> str | None:
    """RUN-AT: when a job with spec.runAt may run ('in 2h', or '5m ago' once that has passed); None without."""
    run_at = time_or_none((job.get("spec") or {}).get("runAt"))
    return until(run_at, now) if run_at else None


def row(job: dict[str, Any], now: datetime, with_namespace: bool) -> list[Any]:
    meta, spec = job["metadata"], job.get("spec") or {}
    cells = [job_id(meta["name"]), state_text(job), attempt_text(job), spec.get("queue"), spec.get("handler"),
             spec.get("priority", 0), run_at_text(job, now), age(parse_time(meta.get("creationTimestamp")), now)]
    return [meta.get("namespace"), *cells] if with_namespace else cells


def headers(with_namespace: bool) -> list[str]:
    return ["NAMESPACE", *HEADERS] if with_namespace else HEADERS


def job_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "JobList", "items": items}


# --- commands ------------------------------------------------------------------------------------------------
def _payload(ctx: Context, text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    source = "--payload"
    if text == "-":
        text, source = sys.stdin.read(), "--payload - (stdin)"
    elif text.startswith("@"):
        path = text[1:]
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise inputs.InputError("--payload", f"cannot read {path}: {exc.strerror or exc}") from None
        source = f"--payload @{path}"
    return inputs.payload_text(source, text)


def create_cmd(ctx: Context) -> int:
    a = ctx.args
    if a.from_file is not None:
        return bulk.create_from_file(ctx)
    if a.queue is None or a.handler is None:
        raise CliError("--queue and --handler are required (or --from-file FILE)", 2)
    queue = inputs.object_name("--queue", a.queue, "queue name")
    handler = inputs.object_name("--handler", a.handler, "handler name")
    payload = _payload(ctx, a.payload)
    run_at = inputs.run_at("--run-at", a.run_at) if a.run_at else None
    if a.delay:
        run_at = inputs.delay("--in", a.delay, ctx.now())
    key = inputs.idempotency_key("--idempotency-key", a.idempotency_key) if a.idempotency_key is not None else None
    priority = inputs.priority("--priority", a.priority if a.priority is not None else 0)
    concurrency_key = (inputs.concurrency_key("--concurrency-key", a.concurrency_key)
                       if a.concurrency_key is not None else None)
    ns = ctx.single_namespace("jobs create")
    try:
        job, created = ctx.client.create_job(ns, queue=queue, handler=handler, payload=payload, run_at=run_at,
                                             idempotency_key=key, priority=priority,
                                             concurrency_key=concurrency_key, archived=ctx.history.key_holder())
    except ApiError as exc:
        raise refused(exc) from None
    ident = job_id(job["metadata"]["name"])
    if not created:
        made = age(parse_time(job["metadata"].get("creationTimestamp")), ctx.now())
        ctx.note(f"idempotency key {key!r} was already used {made} ago in namespace {ns}: returning job {ident} "
                 "instead of creating another")
    for warning in create_warnings(ctx.client, ns, queue, handler):  # as kubectl prints the API server's
        ctx.note(f"Warning: {warning}")
    if a.output:
        output.dump(job, a.output, ctx.out)
    else:
        ctx.say(ident)
    return 0


def list_cmd(ctx: Context) -> int:
    a = ctx.args
    filters = list_filters(ctx)
    if a.output and a.watch:
        raise CliError("-w/--watch prints a table; it cannot be combined with -o", 2)
    if a.watch and (a.limit is not None or a.cursor):
        raise CliError("-w/--watch lists every live job; it cannot be combined with --limit or --continue", 2)
    ns = ctx.list_namespace()
    wide = ns is None
    if not ctx.history.configured and (filters.since or filters.until):
        ctx.note(f"Note: {NOT_CONFIGURED}.")
    if a.watch:  # a watch follows what is live: the list it continues is the live one
        items, version = ctx.client.list_jobs(ns)
        shown = sorted((j for j in items if merged.live_matches(j, filters)), key=sort_key)
    else:
        shown, more = pages(ctx, ns, filters)
    if a.output:
        output.dump(job_list(shown), a.output, ctx.out)
    else:
        now = ctx.now()
        table = output.Table(headers(wide))
        rows = [row(j, now, wide) for j in shown]
        if rows or a.watch:
            ctx.say(table.render(rows))
        else:
            ctx.note(f"No jobs found in namespace {ns}." if ns else "No jobs found.")
    if not a.watch and more:
        ctx.note(f"More jobs follow: add --continue {more}")
    if a.watch:
        _watch(ctx, ns, version, table, lambda j: merged.live_matches(j, filters), wide,
               {(j["metadata"].get("namespace"), j["metadata"]["name"]): j["metadata"].get("resourceVersion")
                for j in items})
    return 0


def _watch(ctx: Context, ns: str | None, version: str, table: output.Table, keep, wide: bool,
           seen: dict[tuple[str, str], str]) -> None:
    """Print a row for every change of a job that passes the filters (as `kubectl get -w`), until Ctrl-C."""
    path = contract.jobs_path(ns)
    while True:
        try:
            for kind, job in ctx.client.watch(path, version):
                version = job.get("metadata", {}).get("resourceVersion", version)
                if kind == "BOOKMARK":
                    continue
                key = (job["metadata"].get("namespace"), job["metadata"]["name"])
                if kind == "DELETED":
                    seen.pop(key, None)
                    if keep(job):
                        ctx.say(table.line(row(job, ctx.now(), wide)[:-1] + ["<deleted>"]))
                    continue
                if seen.get(key) == job["metadata"].get("resourceVersion"):
                    continue
                seen[key] = job["metadata"].get("resourceVersion")
                if keep(job):
                    ctx.say(table.line(row(job, ctx.now(), wide)))
        except Gone:
            items, version = ctx.client.list_jobs(ns)  # too old to resume: list again, print what changed
            for job in sorted(items, key=sort_key):
                key = (job["metadata"].get("namespace"), job["metadata"]["name"])
                if seen.get(key) != job["metadata"].get("resourceVersion"):
                    seen[key] = job["metadata"].get("resourceVersion")
                    if keep(job):
                        ctx.say(table.line(row(job, ctx.now(), wide)))


def fetch(ctx: Context, ns: str, name: str) -> dict[str, Any]:
    """The live job, else the archived one (when an archive is configured)."""
    try:
        return ctx.history.get_job(ns, name)
    except ApiError as exc:
        problem = refused(exc, kind="job", name=job_id(name), namespace=ns)
        if exc.status == 404 and not ctx.history.configured:
            raise CliError(f"{problem} ({NOT_CONFIGURED})") from None
        raise problem from None


def get_cmd(ctx: Context) -> int:
    name = inputs.job_name("ID", ctx.args.id)
    ns = ctx.single_namespace("jobs get")
    job = fetch(ctx, ns, name)
    if ctx.args.output:
        output.dump(job, ctx.args.output, ctx.out)
    else:
        ctx.say(output.table(HEADERS, [row(job, ctx.now(), False)]))
    return 0


def _one_or_selected(ctx: Context, verb: str) -> str | None:
    """The job name of `jobs cancel|retry ID`, or None when flags select the jobs instead (exactly one way)."""
    a = ctx.args
    selecting = any(getattr(a, name) is not None for name in ("queue", "state", "handler", "selector"))
    if a.id is not None and selecting:
        raise CliError("give a job ID or select jobs with --queue, --state, --handler or -l, not both", 2)
    if a.id is None and not selecting:
        raise CliError(f"name what to {verb}: a job ID, or --queue, --state, --handler or -l", 2)
    return inputs.job_name("ID", a.id) if a.id is not None else None


def cancel_cmd(ctx: Context) -> int:
    name = _one_or_selected(ctx, "cancel")
    if name is None:
        return bulk.act_on_selection(ctx, "cancel")
    ctx.say(client.cancel(ctx.client, ctx.single_namespace("jobs cancel"), name))
    return 0


def retry_cmd(ctx: Context) -> int:
    name = _one_or_selected(ctx, "retry")
    if name is None:
        return bulk.act_on_selection(ctx, "retry")
    ctx.say(client.retry(ctx.client, ctx.single_namespace("jobs retry"), name))
    return 0


def _outcome(job: dict[str, Any]) -> tuple[int, str] | None:
    """(exit status, message) once the job has finished, else None."""
    ident = job_id(job["metadata"]["name"])
    status = job.get("status") or {}
    state = status.get("state")
    if status.get("duplicateOf"):
        return 1, (f"job {ident} does not run: its idempotency key is held by job {job_id(status['duplicateOf'])}")
    if not is_finished(state):
        return None
    attempts = status.get("attempts") or []
    last = attempts[-1] if attempts else {}
    if state == "succeeded":
        took = ""
        started, finished = parse_time(last.get("startedAt")), parse_time(last.get("finishedAt"))
        if started and finished:
            took = f", {precise_duration(finished - started)}"
        return 0, f"job {ident} succeeded (attempt {status.get('attempt', len(attempts))}{took})"
    if state == "dead":
        why = error_text(last)
        return 1, f"job {ident} is dead after {status.get('attempt', len(attempts))} attempt(s)" + (
            f"; last attempt: {why}" if why else "")
    return 1, f"job {ident} was cancelled" + (f": {status['message']}" if status.get("message") else "")


def error_text(attempt: dict[str, Any]) -> str:
    """Reason, exit code and message of a failed or stopped attempt: 'Error (exit code 3): boom'."""
    reason, code, message = attempt.get("reason"), attempt.get("exitCode"), attempt.get("message")
    head = reason or ""
    if code not in (None, 0):
        head = f"{head} (exit code {code})".strip()
    if message and message != reason:
        head = f"{head}: {message}" if head else message
    return head


def _describe(job: dict[str, Any]) -> str:
    status = job.get("status") or {}
    text = f"it is {status.get('state') or 'not yet admitted'}"
    if status.get("attempt"):
        text += f" (attempt {attempt_text(job)})"
    blocked = [c for c in status.get("conditions") or [] if c.get("type") == "Blocked" and c.get("status") == "True"]
    if blocked:
        text += f"; blocked: {blocked[0].get('message') or blocked[0].get('reason')}"
    return text


def wait_cmd(ctx: Context) -> int:
    name = inputs.job_name("ID", ctx.args.id)
    limit = inputs.timeout("--timeout", ctx.args.timeout) if ctx.args.timeout else None
    ns = ctx.single_namespace("jobs wait")
    ident = job_id(name)
    deadline = None if limit is None else time.monotonic() + limit.total_seconds()
    job = fetch(ctx, ns, name)
    path = contract.jobs_path(ns)
    while True:
        done = _outcome(job)
        if done is not None:
            code, message = done
            if code == 0:
                ctx.say(message)
            else:
                ctx.note(f"error: {message}")
            return code
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            ctx.note(f"error: timed out after {ctx.args.timeout} waiting for job {ident} to finish; {_describe(job)}")
            return EXIT_TIMEOUT
        window = 300 if left is None else max(1, min(300, math.ceil(left)))
        try:
            for kind, obj in ctx.client.watch(path, job["metadata"]["resourceVersion"],
                                              field_selector=f"metadata.name={name}", timeout_seconds=window):
                if kind == "DELETED":
                    raise CliError(f"job {ident} was deleted while waiting for it")
                if kind in ("ADDED", "MODIFIED"):
                    job = obj
                    if _outcome(job) is not None:
                        break
                elif kind == "BOOKMARK":
                    job["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
                if deadline is not None and time.monotonic() >= deadline:
                    break
        except Gone:
            job = fetch(ctx, ns, name)  # the watch fell behind: read it again
