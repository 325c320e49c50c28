"""`sextant queues list`: each queue's live numbers as the operator keeps them in the Queue's status
(controller/queuestatus.py: counted from its view, written on change, at most every 3 s per queue, less often
with a large backlog).

One list of Queues and no list of jobs, so it costs the same at any number of jobs. The numbers are only as live as
the operator: a queue whose status was never written (no operator running, or one that does not watch its
namespace) or was written for an older spec (observedGeneration behind metadata.generation) is said to be so,
rather than shown as zeros."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from .. import client as requests
from ..resources import inputs
from ..resources.common import age, format_time, time_or_none
from ..resources.queue import QueueSpec
from . import output
from .context import Context

COLUMNS = ["NAME", "RUNNING", "QUEUED", "STARTING", "SCHEDULED", "FAILED", "OLDEST-QUEUED", "PAUSED", "STARTS",
           "RATE-LIMITED", "KEYS", "AGE"]
COUNTS = ("running", "queued", "starting", "scheduled", "failed")
CURRENT, STALE, ABSENT = "current", "stale", "absent"  # how far the status can be believed


def register(sub: argparse._SubParsersAction, flags: argparse.ArgumentParser) -> None:
    group = sub.add_parser("queues", parents=[flags], help="queues and their live numbers",
                           description="Queues. With no COMMAND, list: `sextant queues -A` is "
                                       "`sextant queues list -A`.")
    cmds = group.add_subparsers(dest="queues_command", required=True, metavar="COMMAND")
    lst = cmds.add_parser("list", parents=[flags], help="running vs concurrency, queued, oldest queued job",
                          description="One row per queue, read from the Queue's status, which the operator keeps "
                                      "(updated within seconds of a change): RUNNING is running attempts / "
                                      "concurrency; QUEUED includes STARTING (their pod is starting); FAILED waits "
                                      "for a retry; OLDEST-QUEUED is how long the longest-waiting queued job has "
                                      "waited; STARTS is the attempts started in the rate limit's window / "
                                      "rateLimit.starts / rateLimit.per, RATE-LIMITED whether queued jobs wait for "
                                      "it; KEYS counts the concurrency keys of queued and running jobs (/ "
                                      "perKeyConcurrency). A queue without a status, or with one older than its spec, is "
                                      "named on stderr (is the operator running?).")
    lst.add_argument("-o", "--output", choices=output.FORMATS, help="json or yaml instead of a table")
    lst.set_defaults(func=list_cmd, cli=True)
    for verb, paused, what in (("pause", True, "running attempts finish; nothing new starts; jobs still arrive "
                                "queued and keep their place in line"),
                               ("resume", False, "the queue starts its queued jobs again, in order")):
        cmd = cmds.add_parser(verb, parents=[flags], help=f"{verb} a queue: {what}",
                              description=f"{verb.capitalize()} a queue (spec.paused={str(paused).lower()}): {what}. "
                                          "Under GitOps, set spec.paused in the repository instead: a pause made "
                                          "here is drift there.")
        cmd.add_argument("queue", metavar="QUEUE", help="the queue's name")
        cmd.set_defaults(func=pause_cmd, paused=paused, cli=True)


def _count(value: object) -> int | None:
    """A count of the status, read totally: what is not a whole number ≥ 0 is unknown."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@dataclass(frozen=True)
class QueueRow:
    namespace: str
    name: str
    concurrency: int | None  # None: a spec the operator cannot read either
    max_attempts: int | None
    created_at: datetime | None
    generation: int | None
    observed_generation: int | None
    counts: dict[str, int | None]
    oldest_queued_at: datetime | None
    freshness: str  # CURRENT, STALE (counted for an older spec) or ABSENT (never counted)
    paused: bool | None = None  # spec.paused; None: a spec the operator cannot read either
    rate_limit: tuple[int, str] | None = None  # spec.rateLimit (starts, per)
    per_key_concurrency: int | None = None
    recent_starts: int | None = None  # status: starts in the rate limit's window
    rate_limited: bool | None = None  # status: queued jobs wait for the rate limit
    keys: int | None = None  # status: concurrency keys of the queued and running jobs


def read_queue(raw: dict[str, Any]) -> QueueRow:
    meta = raw.get("metadata") or {}
    try:
        spec: QueueSpec | None = QueueSpec.model_validate(raw.get("spec") or {})
    except ValidationError:
        spec = None
    status = raw.get("status")
    status = status if isinstance(status, dict) else {}
    counts = {k: _count(status.get(k)) for k in COUNTS}
    generation, observed = _count(meta.get("generation")), _count(status.get("observedGeneration"))
    if all(v is None for v in counts.values()):
        freshness = ABSENT
    elif generation is not None and observed != generation:
        freshness = STALE
    else:
        freshness = CURRENT
    return QueueRow(meta.get("namespace", ""), meta.get("name", ""), spec.concurrency if spec else None,
                    spec.max_attempts if spec else None, time_or_none(meta.get("creationTimestamp")), generation,
                    observed, counts, time_or_none(status.get("oldestQueuedAt")), freshness,
                    spec.paused if spec else None,
                    (spec.rate_limit.starts, spec.rate_limit.per) if spec and spec.rate_limit else None,
                    spec.per_key_concurrency if spec else None, _count(status.get("recentStarts")),
                    status.get("rateLimited") if isinstance(status.get("rateLimited"), bool) else None,
                    _count(status.get("keys")))


def holding_back(row: QueueRow) -> str | None:
    """What the Queue itself says holds its queued jobs back (`sextant inspect` of a queued job): paused, or its
    rate limit; None when neither."""
    if row.paused:
        return "paused (sextant queues resume " + row.name + ")"
    if row.rate_limited and row.rate_limit:
        starts, per = row.rate_limit
        return f"rate limited (RateLimited): {_cell(row.recent_starts)} of {starts} starts in the last {per}"
    return None


def read_queues(raws: Iterable[dict[str, Any]]) -> list[QueueRow]:
    return sorted((read_queue(r) for r in raws), key=lambda q: (q.namespace, q.name))


def as_dict(row: QueueRow, now: datetime) -> dict[str, Any]:
    oldest = row.oldest_queued_at
    return {
        "namespace": row.namespace, "name": row.name, "concurrency": row.concurrency, "maxAttempts": row.max_attempts,
        **row.counts,
        "oldestQueuedAt": format_time(oldest, precise=False) if oldest else None,
        "oldestQueuedSeconds": round((now - oldest).total_seconds(), 3) if oldest else None,
        "generation": row.generation, "observedGeneration": row.observed_generation, "status": row.freshness,
        "paused": row.paused,
        "rateLimit": {"starts": row.rate_limit[0], "per": row.rate_limit[1]} if row.rate_limit else None,
        "perKeyConcurrency": row.per_key_concurrency, "recentStarts": row.recent_starts,
        "rateLimited": row.rate_limited, "keys": row.keys,
    }


def _cell(value: int | None) -> str:
    return "-" if value is None else str(value)


def render(rows: Sequence[QueueRow], now: datetime, all_namespaces: bool) -> str:
    lines = []
    for q in rows:
        c = q.counts
        cells = [q.name, f"{_cell(c['running'])}/{_cell(q.concurrency)}", _cell(c["queued"]), _cell(c["starting"]),
                 _cell(c["scheduled"]), _cell(c["failed"]),
                 age(q.oldest_queued_at, now) if q.oldest_queued_at else "-",
                 "-" if q.paused is None else ("yes" if q.paused else "no"),
                 f"{_cell(q.recent_starts)}/{q.rate_limit[0]}/{q.rate_limit[1]}" if q.rate_limit else "-",
                 "yes" if q.rate_limited else "no" if q.rate_limit else "-",
                 _cell(q.keys) + (f"/{q.per_key_concurrency}" if q.per_key_concurrency else ""),
                 age(q.created_at, now)]
        lines.append([q.namespace, *cells] if all_namespaces else cells)
    return output.table(["NAMESPACE", *COLUMNS] if all_namespaces else COLUMNS, lines)


def warnings(rows: Sequence[QueueRow], all_namespaces: bool) -> list[str]:
    """What stderr says about numbers that cannot be believed: one line per kind, naming the queues."""
    def names(freshness: str) -> str:
        return ", ".join(f"{q.namespace}/{q.name}" if all_namespaces else q.name
                         for q in rows if q.freshness == freshness)

    out = []
    if absent := names(ABSENT):
        out.append(f"No numbers for {absent}: the operator has not written this queue's status yet "
                   "(is the operator running, and does it watch this namespace?).")
    if stale := names(STALE):
        out.append(f"Numbers for {stale} were counted for an older spec of the queue: the operator has not "
                   "caught up with its last change (is the operator running?).")
    return out


def list_cmd(ctx: Context) -> int:
    ns = ctx.list_namespace()
    rows = read_queues(ctx.client.list_queues(ns))
    now = ctx.now()
    if ctx.args.output:
        output.dump({"items": [as_dict(q, now) for q in rows]}, ctx.args.output, ctx.out)
        return 0
    if not rows:
        ctx.note(f"No queues found in namespace {ns}." if ns else "No queues found.")
        return 0
    ctx.say(render(rows, now, ns is None))
    for line in warnings(rows, ns is None):
        ctx.note(line)
    return 0


def pause_cmd(ctx: Context) -> int:
    name = inputs.object_name("QUEUE", ctx.args.queue, "queue name")
    ctx.say(requests.pause(ctx.client, ctx.namespace, name, ctx.args.paused))
    return 0
