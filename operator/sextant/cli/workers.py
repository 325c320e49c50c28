"""`sextant workers`: the workers of a namespace, read from their Worker objects (docs/workers.md): the queues and
handlers each serves and its last renewal from its spec (the worker's), its state, slots and busy slots from its
status (the operator's judgement, by the operator's clock). Costs one list of Worker objects, never a list of jobs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..lifecycle.worker_view import WorkerView, as_dict
from ..resources.common import age, human_duration
from . import output
from .context import Context

COLUMNS = ["NAME", "QUEUES", "HANDLERS", "SLOTS", "BUSY", "LAST-RENEWAL", "STATE"]
WIDE = ["HOLDER", "LEASE", "JOBS", "AGE"]


def register(sub: argparse._SubParsersAction, flags: argparse.ArgumentParser) -> None:
    cmd = sub.add_parser(
        "workers", parents=[flags], help="live workers: their queues, handlers, slots and busy slots",
        description="One row per worker (`sextant worker` processes, workers in programs) of the namespace, from "
                    "its Worker object: the queues and handlers it serves, SLOTS (as the operator believes them: "
                    "--concurrency, capped), BUSY (attempts assigned to it and not yet recorded), LAST-RENEWAL (how "
                    "long ago it last wrote its object, by its own clock) and STATE, as the operator judges it: "
                    "live; draining (stopping, takes nothing new); expired (no renewal observed within its lease "
                    "duration: its attempts fail with LeaseExpired); unknown (not judged yet). `-o wide` adds the "
                    "holder (<name>/<incarnation>), the lease duration, the assigned jobs and the age.")
    cmd.add_argument("verb", nargs="?", choices=["list"], help="optional, as in `queues list`")
    cmd.add_argument("-o", "--output", choices=("wide", *output.FORMATS), help="wide, json or yaml")
    cmd.set_defaults(func=list_cmd, cli=True)


def _list(values: Sequence[str]) -> str:
    return ",".join(values) if values else "<none>"


def render(workers: Sequence[WorkerView], now: datetime, *, all_namespaces: bool, wide: bool) -> str:
    """The table: one row per worker, by namespace and name."""
    rows = []
    for w in sorted(workers, key=lambda w: (w.namespace, w.name)):
        cells: list[Any] = [w.name, _list(w.queues), _list(w.handlers), "<none>" if w.slots is None else w.slots,
                            w.busy, age(w.renewed_at, now), w.state]
        if wide:
            cells += [w.holder, human_duration(w.lease_duration) if w.lease_duration else "<none>", _list(w.jobs),
                      age(w.created_at, now)]
        rows.append([w.namespace, *cells] if all_namespaces else cells)
    headers = [*COLUMNS, *(WIDE if wide else [])]
    return output.table(["NAMESPACE", *headers] if all_namespaces else headers, rows)


def list_cmd(ctx: Context) -> int:
    ns = ctx.list_namespace()
    workers = ctx.client.list_workers(ns)
    now = ctx.now()
    fmt = ctx.args.output
    if fmt in output.FORMATS:
        items = [as_dict(w, now) for w in sorted(workers, key=lambda w: (w.namespace, w.name))]
        output.dump({"items": items}, fmt, ctx.out)
        return 0
    if not workers:
        ctx.note(f"No workers found in namespace {ns}." if ns else "No workers found.")
        return 0
    ctx.say(render(workers, now, all_namespaces=ns is None, wide=fmt == "wide"))
    return 0
