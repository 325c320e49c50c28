"""`sextant inspect ID` (the job's timeline of attempts) and `sextant logs ID [--attempt N]` (an attempt's log)."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from ..resources import contract, inputs
from ..client import refused
from ..kube.client import ApiError, NotFound
from ..resources.common import age, parse_time, precise_duration, until
from ..resources.job import job_id, sequence_of
from ..resources.report import report_facts
from . import output
from ..archive.objects import is_archived
from .context import CliError, Context, archive_flag
from .jobs import attempt_text, error_text, fetch, state_text
from .queues import holding_back, read_queue

TIMELINE = ["ATTEMPT", "POD", "NODE", "STARTED", "FINISHED", "DURATION", "RESULT", "ERROR"]


def register(sub: argparse._SubParsersAction, flags: argparse.ArgumentParser) -> None:
    ins = sub.add_parser("inspect", parents=[flags], help="a job and its timeline of attempts",
                         description="The job and its timeline: for each attempt where it ran (its pod, or "
                                     "worker/NAME for a worker's attempt, and the node), start, end, duration, "
                                     "result and error. A job no longer live is read from the archive, when one "
                                     "is configured (--archive, SEXTANT_ARCHIVE_DSN), and says so.")
    ins.add_argument("id", metavar="ID")
    archive_flag(ins)
    ins.add_argument("-o", "--output", choices=output.FORMATS, help="json or yaml instead of text")
    ins.set_defaults(func=inspect_cmd, cli=True)

    logs = sub.add_parser("logs", parents=[flags], help="the log of a job's attempt (the latest by default)",
                          description="Print the handler's log of one attempt, read through the API server "
                                      "(pods/log). Available while the attempt's pod exists.")
    logs.add_argument("id", metavar="ID")
    logs.add_argument("--attempt", type=int, metavar="N",
                      help="this attempt (after a retry, the latest attempt with that number); default: the latest")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing while the handler writes")
    logs.set_defaults(func=logs_cmd, cli=True)


def _stamp(text: str | None) -> str:
    moment = parse_time(text)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment else ""


def _duration(attempt: dict[str, Any], now: datetime) -> str:
    started, finished = parse_time(attempt.get("startedAt")), parse_time(attempt.get("finishedAt"))
    if started is None:
        return ""
    if finished is None:
        return precise_duration(now - started) + " so far"
    return precise_duration(finished - started)


def ran_in(attempt: dict[str, Any]) -> str | None:
    """The POD column: the attempt's pod, or on a worker (no pod) `worker/<name>`, kubectl's kind/name (a pod's
    name has no slash); the worker's incarnation is in -o json."""
    if attempt.get("pod") or not attempt.get("worker"):
        return attempt.get("pod")
    return f"worker/{str(attempt['worker']).split('/', 1)[0]}"


def timeline(job: dict[str, Any], now: datetime) -> list[dict[str, Any]]:
    out = []
    for a in (job.get("status") or {}).get("attempts") or []:
        started, finished = parse_time(a.get("startedAt")), parse_time(a.get("finishedAt"))
        out.append({
            "attempt": a.get("attempt"), "sequence": sequence_of(a), "pod": a.get("pod"), "worker": a.get("worker"),
            "node": a.get("node"),
            "startedAt": a.get("startedAt"), "finishedAt": a.get("finishedAt"),
            "durationSeconds": round(((finished or now) - started).total_seconds(), 3) if started else None,
            "result": a.get("result"), "exitCode": a.get("exitCode"), "reason": a.get("reason"),
            "message": a.get("message"),
        })
    return out


def inspect_cmd(ctx: Context) -> int:
    name = inputs.job_name("ID", ctx.args.id)
    ns = ctx.single_namespace("inspect")
    job = fetch(ctx, ns, name)
    now = ctx.now()
    meta, spec, status = job["metadata"], job.get("spec") or {}, job.get("status") or {}
    if ctx.args.output:
        output.dump({"id": job_id(meta["name"]), "name": meta["name"], "namespace": meta.get("namespace"),
                     "queue": spec.get("queue"), "handler": spec.get("handler"), "state": status.get("state"),
                     "attempt": status.get("attempt", 0), "maxAttempts": status.get("maxAttempts"),
                     "duplicateOf": status.get("duplicateOf"), "message": status.get("message"),
                     "snoozes": status.get("snoozes") or 0, "output": status.get("output"),
                     "outputNote": status.get("outputNote"), "progress": status.get("progress"),
                     "archived": is_archived(job), "attempts": timeline(job, now)}, ctx.args.output, ctx.out)
        return 0
    created = parse_time(meta.get("creationTimestamp"))
    fields = [
        ("Job", job_id(meta["name"])),
        ("Namespace", meta.get("namespace")),
        ("Queue", spec.get("queue")),
        ("Handler", spec.get("handler")),
        ("State", state_text(job)),
        ("Attempt", attempt_text(job)),
        ("Created", f"{_stamp(meta.get('creationTimestamp'))} ({age(created, now)} ago)"),
    ]
    if spec.get("runAt"):
        fields.append(("Run at", _stamp(spec["runAt"])))
    if status.get("nextAttemptAt") and status.get("state") in ("scheduled", "failed"):
        fields.append(("Next attempt", f"{_stamp(status['nextAttemptAt'])} "
                                       f"({until(parse_time(status['nextAttemptAt']), now)})"))
    if spec.get("idempotencyKey"):
        fields.append(("Idempotency key", spec["idempotencyKey"]))
    fields.append(("Priority", str(spec.get("priority", 0))))
    if spec.get("concurrencyKey"):
        fields.append(("Concurrency key", spec["concurrencyKey"]))
    fields.append(("Payload", status.get("payloadNote") or json.dumps(spec.get("payload") or {}, ensure_ascii=False)))
    if is_archived(job):  # its object may be gone: what is shown is its record in the archive
        fields.append(("Archived", f"yes: finished {_stamp(status.get('finishedAt'))}, read from the archive"))
    if status.get("message"):
        fields.append(("Message", status["message"]))
    fields.extend(report_facts(status))
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Blocked" and cond.get("status") == "True":
            fields.append(("Blocked", f"{cond.get('reason')}: {cond.get('message')}"))
    if status.get("state") in (None, "queued") and spec.get("queue"):
        held = _queue_holds_back(ctx, ns, spec["queue"])
        if held:
            fields.append(("Queue", held))
    width = max(len(k) for k, _ in fields) + 2
    for key, value in fields:
        ctx.say(f"{key + ':':<{width}}{value if value not in (None, '') else '<none>'}")
    ctx.say("")
    attempts = (status.get("attempts") or [])
    if not attempts:
        ctx.say("Timeline: no attempts yet")
        return 0
    rows = [[a.get("attempt"), ran_in(a), a.get("node"), _stamp(a.get("startedAt")), _stamp(a.get("finishedAt")),
             _duration(a, now), a.get("result"), error_text(a)] for a in attempts]
    ctx.say("Timeline:")
    ctx.say(output.table(TIMELINE, rows))
    if status.get("droppedAttempts"):  # the timeline keeps the first attempt and the most recent ones
        ctx.say(f"({status['droppedAttempts']} attempts between the first and the ones shown are not kept)")
    return 0


def _queue_holds_back(ctx: Context, ns: str, queue: str) -> str | None:
    """Why a queued job's Queue holds it back (paused, rate limited): the Queue says it, not each job."""
    try:
        return holding_back(read_queue(ctx.client.request("GET", contract.queues_path(ns, queue))))
    except NotFound:
        return None  # the job's Blocked condition says QueueNotFound


def logs_cmd(ctx: Context) -> int:
    name = inputs.job_name("ID", ctx.args.id)
    if ctx.args.attempt is not None and ctx.args.attempt < 1:
        raise inputs.InputError("--attempt", f"attempts are numbered from 1, got {ctx.args.attempt}")
    ns = ctx.single_namespace("logs")
    ident = job_id(name)
    job = fetch(ctx, ns, name)
    status = job.get("status") or {}
    attempts = status.get("attempts") or []
    if not attempts:
        raise CliError(f"job {ident} has not run yet (it is {status.get('state') or 'not yet admitted'}): "
                       "there are no logs")
    if ctx.args.attempt is None:
        chosen = attempts[-1]
    else:
        matching = [a for a in attempts if a.get("attempt") == ctx.args.attempt]
        if not matching:
            have = ", ".join(str(a.get("attempt")) for a in attempts)
            raise CliError(f"job {ident} has no attempt {ctx.args.attempt} (its attempts: {have})")
        chosen = matching[-1]
    pod_name = chosen.get("pod")
    label = f"attempt {chosen.get('attempt')} of job {ident}"
    if not pod_name and chosen.get("worker"):  # worker mode (docs/workers.md): no pod, no pods/log
        raise CliError(f"{label} ran on worker {chosen['worker']}, not in a pod: its output is in that worker's own "
                       "output (its pod's log, or the terminal of `sextant worker`)")
    try:
        pod = ctx.client.get_pod(ns, pod_name)
    except NotFound:
        raise CliError(f"the pod {pod_name} of {label} is gone (deleted after the attempt ended, or by "
                       "cancel or retention): its log is no longer available") from None
    except ApiError as exc:
        raise refused(exc) from None
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    try:
        for chunk in ctx.client.pod_log(ns, pod_name, containers[0].get("name"), follow=ctx.args.follow):
            ctx.out.write(chunk)
            ctx.out.flush()
    except NotFound:
        raise CliError(f"the pod {pod_name} of {label} is gone: its log is no longer available") from None
    except ApiError as exc:
        raise CliError(f"cannot read the log of {label} (pod {pod_name}): {exc.message}") from None
    return 0
