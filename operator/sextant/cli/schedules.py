"""`sextant schedules list` (with the next fire time) and `sextant schedules trigger NAME` (one job now)."""

from __future__ import annotations

import argparse
from typing import Any

from .. import client
from ..resources import contract, inputs
from ..resources.common import age, parse_time, until
from . import output
from .context import Context

COLUMNS = ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "NEXT", "AGE"]


def register(sub: argparse._SubParsersAction, flags: argparse.ArgumentParser) -> None:
    group = sub.add_parser("schedules", parents=[flags], help="schedules: list them, trigger one now",
                           description="Schedules. With no COMMAND, list: `sextant schedules -A` is "
                                       "`sextant schedules list -A`.")
    cmds = group.add_subparsers(dest="schedules_command", required=True, metavar="COMMAND")
    lst = cmds.add_parser("list", parents=[flags], help="schedules with their last and next fire times")
    lst.add_argument("-o", "--output", choices=output.FORMATS, help="json or yaml instead of a table")
    lst.set_defaults(func=list_cmd, cli=True)
    trig = cmds.add_parser("trigger", parents=[flags], help="create one job now from a schedule's jobTemplate",
                           description="Create one job now from the Schedule's jobTemplate and print its id. The "
                                       f"job carries the label {contract.LABEL_SCHEDULE}=NAME and the annotation "
                                       f"{contract.ANNOTATION_SCHEDULED_AT}, and the idempotency key "
                                       "NAME/manual/<now, to the second>: triggering twice within the same "
                                       "second creates one job.")
    trig.add_argument("name", metavar="NAME")
    trig.set_defaults(func=trigger_cmd, cli=True)


def _schedule_text(spec: dict[str, Any]) -> str:
    if spec.get("cron"):
        return spec["cron"]
    return f"every {spec['interval']}" if spec.get("interval") else ""


def list_cmd(ctx: Context) -> int:
    ns = ctx.list_namespace()
    items = sorted(ctx.client.list_schedules(ns),
                   key=lambda s: (s["metadata"].get("namespace", ""), s["metadata"]["name"]))
    if ctx.args.output:
        output.dump({"apiVersion": "sextant.dev/v1alpha1", "kind": "ScheduleList", "items": items},
                    ctx.args.output, ctx.out)
        return 0
    if not items:
        ctx.note(f"No schedules found in namespace {ns}." if ns else "No schedules found.")
        return 0
    now = ctx.now()
    rows = []
    for s in items:
        meta, spec, status = s["metadata"], s.get("spec") or {}, s.get("status") or {}
        last = parse_time(status.get("lastScheduleTime"))
        nxt = parse_time(status.get("nextScheduleTime"))
        invalid = next((c for c in status.get("conditions") or []
                        if c.get("type") == "Invalid" and c.get("status") == "True"), None)
        if invalid:  # never fires: say why, and the whole message on stderr
            next_text = f"<invalid: {invalid.get('reason')}>"
            ctx.note(f"schedule {meta['name']} never fires: {invalid.get('message')}")
        elif spec.get("suspend"):
            next_text = "<suspended>"
        elif nxt:
            next_text = f"{nxt.strftime('%Y-%m-%dT%H:%M:%SZ')} ({until(nxt, now)})"
        else:
            next_text = "<none>"
        cells = [meta["name"], _schedule_text(spec), spec.get("timeZone", "UTC"), str(bool(spec.get("suspend"))),
                 len(status.get("active") or []), age(last, now) + " ago" if last else "<none>", next_text,
                 age(parse_time(meta.get("creationTimestamp")), now)]
        rows.append([meta.get("namespace"), *cells] if ns is None else cells)
    ctx.say(output.table(["NAMESPACE", *COLUMNS] if ns is None else COLUMNS, rows))
    return 0


def trigger_cmd(ctx: Context) -> int:
    name = inputs.object_name("NAME", ctx.args.name, "schedule name")
    ident, note = client.trigger(ctx.client, ctx.single_namespace("schedules trigger"), name)
    if note:
        ctx.note(note)
    ctx.say(ident)
    return 0
