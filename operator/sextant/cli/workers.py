"""`sextant workers`: the live workers of a namespace, read from their registration Leases (docs/workers.md §1),
with how many of their slots are busy (the jobs assigned to them and still running).

Costs one list of Leases (label-selected) and one list of jobs per worker with `fieldSelector=status.worker=NAME`
(the operator clears status.worker when an attempt ends, so that list is the worker's running jobs alone): never
a list of every job of the namespace.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from ..resources import contract
from ..resources.common import format_time, parse_time
from . import output
from .context import Context

COLUMNS = ["NAME", "QUEUES", "HANDLERS", "SLOTS", "BUSY", "LAST-RENEWAL", "STATE"]
WIDE = ["HOLDER", "LEASE", "JOBS", "AGE"]
LIVE, DRAINING, EXPIRED = "live", "draining", "expired"
DEFAULT_LEASE_SECONDS = 30  # a Lease without leaseDurationSeconds: the queues' default leaseDuration


def register(sub: argparse._SubParsersAction, flags: argparse.ArgumentParser) -> None:
    cmd = sub.add_parser(
        "workers", parents=[flags], help="live workers: their queues, handlers, slots and busy slots",
        description="One row per worker (`sextant worker` processes) of the namespace, from its registration Lease: "
                    "the queues and handlers it serves, SLOTS (--concurrency), BUSY (jobs assigned to it and still "
                    "running), LAST-RENEWAL (how long ago it renewed its Lease) and STATE: live; draining (stopping, "
                    "takes nothing new); expired (not renewed within its lease duration: its running attempts "
                    "fail with LeaseExpired). `-o wide` adds the holder (<name>/<incarnation>), the lease "
                    "duration, the running jobs and the age.")
    cmd.add_argument("verb", nargs="?", choices=["list"], help="optional, as in `queues list`")
    cmd.add_argument("-o", "--output", choices=("wide", *output.FORMATS), help="wide, json or yaml")
    cmd.set_defaults(func=list_cmd, cli=True)


@dataclass(frozen=True)
class Worker:
    """One worker as its registration Lease announces it."""

    namespace: str
    name: str
    holder: str
    queues: tuple[str, ...]
    handlers: tuple[str, ...]
    slots: int | None
    draining: bool
    renewed_at: datetime | None
    lease_duration: timedelta
    created_at: datetime | None
    jobs: tuple[str, ...] = field(default=())  # running jobs assigned to it (object names)

    def state(self, now: datetime) -> str:
        """expired wins over draining: an expired worker's attempts are being failed, whatever it last said."""
        if self.renewed_at is None or now >= self.renewed_at + self.lease_duration:
            return EXPIRED
        return DRAINING if self.draining else LIVE


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(sorted({part.strip() for part in (text or "").split(",") if part.strip()}))


def read_lease(lease: Mapping[str, Any]) -> Worker | None:
    """A worker from its registration Lease; None for a Lease that is not one (no sextant.dev/worker label).
    Odd values show as what they are (no slots, no renewal: expired) rather than failing the whole list."""
    meta = lease.get("metadata") or {}
    name = (meta.get("labels") or {}).get(contract.LABEL_WORKER)
    if not name:
        return None
    notes = meta.get("annotations") or {}
    spec = lease.get("spec") or {}
    try:
        slots: int | None = int(notes[contract.ANNOTATION_SLOTS])
    except (KeyError, ValueError):
        slots = None
    try:
        renewed = parse_time(spec.get("renewTime") or spec.get("acquireTime"))
    except ValueError:
        renewed = None
    seconds = spec.get("leaseDurationSeconds")
    if not isinstance(seconds, int) or seconds <= 0:
        seconds = DEFAULT_LEASE_SECONDS
    return Worker(
        namespace=meta.get("namespace", ""), name=name, holder=spec.get("holderIdentity") or "",
        queues=_names(notes.get(contract.ANNOTATION_QUEUES)), handlers=_names(notes.get(contract.ANNOTATION_HANDLERS)),
        slots=slots, draining=notes.get(contract.ANNOTATION_DRAINING) == "true", renewed_at=renewed,
        lease_duration=timedelta(seconds=seconds),
        created_at=parse_time(meta.get("creationTimestamp")),
    )


def running_jobs(jobs: Iterable[Mapping[str, Any]], worker: str) -> tuple[str, ...]:
    """The jobs that hold a slot of `worker`: assigned to it (status.worker) and running."""
    out = []
    for job in jobs:
        status = job.get("status") or {}
        if status.get("worker") == worker and status.get("state") == "running":
            out.append(job["metadata"]["name"])
    return tuple(sorted(out))


def as_dict(worker: Worker, now: datetime) -> dict[str, Any]:
    renewed = worker.renewed_at
    return {
        "namespace": worker.namespace, "name": worker.name, "holder": worker.holder,
        "queues": list(worker.queues), "handlers": list(worker.handlers), "slots": worker.slots,
        "busy": len(worker.jobs), "jobs": list(worker.jobs), "state": worker.state(now),
        "draining": worker.draining, "renewTime": format_time(renewed) if renewed else None,
        "lastRenewalSeconds": round((now - renewed).total_seconds(), 3) if renewed else None,
        "leaseDurationSeconds": int(worker.lease_duration.total_seconds()),
    }


def _list(values: Sequence[str]) -> str:
    return ",".join(values) if values else "<none>"


def render(workers: Sequence[Worker], now: datetime, *, all_namespaces: bool, wide: bool) -> str:
    """The table: one row per worker, by namespace and name."""
    rows = []
    for w in sorted(workers, key=lambda w: (w.namespace, w.name)):
        cells: list[Any] = [w.name, _list(w.queues), _list(w.handlers), "<none>" if w.slots is None else w.slots,
                            len(w.jobs), output.age(w.renewed_at, now), w.state(now)]
        if wide:
            cells += [w.holder, output.human_duration(w.lease_duration), _list(w.jobs), output.age(w.created_at, now)]
        rows.append([w.namespace, *cells] if all_namespaces else cells)
    headers = [*COLUMNS, *(WIDE if wide else [])]
    return output.table(["NAMESPACE", *headers] if all_namespaces else headers, rows)


def list_workers(ctx: Context, namespace: str | None) -> list[Worker]:
    """The namespace's workers (None: every namespace's), each with its running jobs."""
    path = contract.leases_path(namespace)
    leases, _ = ctx.client.list_all(path, label_selector=contract.LABEL_WORKER)
    workers = [w for w in map(read_lease, leases) if w is not None]
    out = []
    for w in workers:
        jobs, _ = ctx.client.list_all(contract.jobs_path(w.namespace), field_selector=f"status.worker={w.name}")
        out.append(replace(w, jobs=running_jobs(jobs, w.name)))
    return out


def list_cmd(ctx: Context) -> int:
    ns = ctx.list_namespace()
    workers = list_workers(ctx, ns)
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
