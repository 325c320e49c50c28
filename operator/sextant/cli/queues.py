"""`sextant queues list`: jobs per state, running vs concurrency, and the age of the oldest queued job."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from ..queuestats import QueueStats, queue_stats
from ..resources.common import format_time
from . import output
from .context import Context

COLUMNS = ["NAME", "RUNNING", "QUEUED", "SCHEDULED", "FAILED", "SUCCEEDED", "DEAD", "CANCELLED", "OLDEST-QUEUED",
           "AGE"]


def register(sub: argparse._SubParsersAction, flags: argparse.ArgumentParser) -> None:
    group = sub.add_parser("queues", parents=[flags], help="queues and their jobs")
    cmds = group.add_subparsers(dest="queues_command", required=True, metavar="COMMAND")
    lst = cmds.add_parser("list", parents=[flags], help="jobs per state, running vs concurrency, oldest queued job",
                          description="One row per queue: RUNNING is running attempts / concurrency; OLDEST-QUEUED "
                                      "is how long the longest-waiting queued job has waited. A queue that jobs "
                                      "name but that does not exist shows AGE <missing> (its jobs are Blocked).")
    lst.add_argument("-o", "--output", choices=output.FORMATS, help="json or yaml instead of a table")
    lst.set_defaults(func=list_cmd, cli=True)


def as_dict(stats: QueueStats, now: datetime) -> dict[str, Any]:
    oldest = stats.oldest_queued_at
    return {
        "namespace": stats.namespace, "name": stats.name, "exists": stats.exists,
        "concurrency": stats.concurrency, "maxAttempts": stats.max_attempts, "running": stats.running,
        "jobs": dict(stats.jobs),
        "oldestQueuedAt": format_time(oldest, precise=False) if oldest else None,
        "oldestQueuedSeconds": round((now - oldest).total_seconds(), 3) if oldest else None,
    }


def list_cmd(ctx: Context) -> int:
    ns = ctx.list_namespace()
    queues = ctx.client.list_queues(ns)
    jobs, _ = ctx.client.list_jobs(ns)
    stats = queue_stats(queues, jobs)
    now = ctx.now()
    if ctx.args.output:
        output.dump({"items": [as_dict(s, now) for s in stats]}, ctx.args.output, ctx.out)
        return 0
    if not stats:
        ctx.note(f"No queues found in namespace {ns}." if ns else "No queues found.")
        return 0
    wide = ns is None
    rows = []
    for s in stats:
        j = s.jobs
        cells = [s.name, f"{s.running}/{s.concurrency if s.concurrency is not None else '-'}", j["queued"],
                 j["scheduled"], j["failed"], j["succeeded"], j["dead"], j["cancelled"],
                 output.age(s.oldest_queued_at, now) if s.oldest_queued_at else "-",
                 output.age(s.created_at, now) if s.exists else "<missing>"]
        rows.append([s.namespace, *cells] if wide else cells)
    ctx.say(output.table(["NAMESPACE", *COLUMNS] if wide else COLUMNS, rows))
    return 0
