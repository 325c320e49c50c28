"""What a run costs: CPU seconds per process (/proc/<pid>/stat), the operator's memory (/proc/<pid>/status), the
machine's load (/proc/loadavg, /proc/stat), the API requests of every client (the API server's audit log), and
where the API server's time and watch bytes went by resource and verb (its own /metrics)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import time
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import identities

TICK = os.sysconf("SC_CLK_TCK")
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process (its threads included), in seconds; None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK  # fields 14 and 15 of stat(5), counted after the name


def self_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def memory_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) in MB."""
    out: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = round(int(value.split()[0]) / 1024, 1)
    except OSError:
        pass
    return out


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    total = sum(values[:8])
    return total - idle, total


class Usage:
    """CPU of named processes, and of the whole machine, between start() and stop(); loadavg sampled each second."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)
        self.before: dict[str, float | None] = {}
        self.after: dict[str, float | None] = {}
        self.loadavg: list[float] = []
        self._machine0 = self._machine1 = (0, 0)
        self._wall0 = self._wall1 = 0.0
        self._self0 = self._self1 = 0.0
        self._sampler: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self._machine0 = machine_jiffies()
        self._self0 = self_cpu_seconds()
        self._wall0 = time.monotonic()
        self._sampler = asyncio.get_running_loop().create_task(self._sample())

    async def _sample(self) -> None:
        while True:
            self.loadavg.append(float(Path("/proc/loadavg").read_text().split()[0]))
            await asyncio.sleep(1)

    def stop(self) -> None:
        self.after = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self._machine1 = machine_jiffies()
        self._self1 = self_cpu_seconds()
        self._wall1 = time.monotonic()
        if self._sampler is not None:
            self._sampler.cancel()

    def result(self) -> dict[str, Any]:
        cpu = {name: round(self.after[name] - self.before[name], 2)  # type: ignore[operator]
               for name in self.pids if self.before.get(name) is not None and self.after.get(name) is not None}
        cpu["bench (load generator + watches)"] = round(self._self1 - self._self0, 2)
        busy = (self._machine1[0] - self._machine0[0]) / TICK
        wall = self._wall1 - self._wall0
        ncpu = os.cpu_count() or 1
        return {
            "cpu_seconds": cpu,
            "machine": {
                "cpus": ncpu,
                "wall_s": round(wall, 2),
                "busy_cpu_s": round(busy, 2),
                "busy_fraction": round(busy / (wall * ncpu), 3) if wall else None,
                # what ran besides the measured processes (other work on a shared machine)
                "other_cpu_s": round(busy - sum(cpu.values()), 2),
                "loadavg1_mean": round(sum(self.loadavg) / len(self.loadavg), 2) if self.loadavg else None,
                "loadavg1_max": max(self.loadavg) if self.loadavg else None,
            },
        }


# --- the audit log ----------------------------------------------------------------------------------------------

# The bench runs each component as a service account of its own (identities.py): a request is its component's
# whatever its user agent (the operator's kopf, leader election and HTTP API clients; a worker's SDK client).
CLIENT_OF_USER = {identities.OPERATOR_USER: "operator", identities.WORKER_USER: "worker",
                  identities.LOADGEN_USER: "loadgen"}


def client_of(user_agent: str, username: str = "") -> str:
    if username in CLIENT_OF_USER:
        return CLIENT_OF_USER[username]
    for prefix, name in (("sextant-operator", "operator"), ("sextant-bench-recorder", "recorder"),
                         ("sextant-bench", "loadgen"),
                         ("sextant-worker/", "worker"), ("sextant-sdk", "sdk"),
                         ("kube-scheduler/", "scheduler"), ("kube-controller-manager/", "controller-manager"),
                         ("kwok-controller/", "kwok"), ("kube-apiserver/", "apiserver"), ("kubectl/", "kubectl")):
        if user_agent.startswith(prefix):
            return name
    return "other"


def resource_of(ref: dict[str, Any] | None) -> str:
    if not ref:
        return "(non-resource)"
    name = ref.get("resource", "?")
    if ref.get("apiGroup"):
        name = f"{name}.{ref['apiGroup']}"
    if ref.get("subresource"):
        name = f"{name}/{ref['subresource']}"
    return name


def audit_stamp(moment: float) -> str:
    """A local time as the audit log writes requestReceivedTimestamp (fixed width, so strings compare)."""
    return datetime.fromtimestamp(moment, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def audit_counts(path: Path, start: float, end: float) -> dict[str, Any]:
    """Requests received in [start, end]: per client, verb and resource; non-2xx answers per client and code."""
    lo, hi = audit_stamp(start), audit_stamp(end)
    counts: Counter[tuple[str, str, str]] = Counter()
    errors: Counter[tuple[str, str, int]] = Counter()
    # rotated files too (audit-<time>.log beside audit.log), should rotation be on
    files = sorted(path.parent.glob(f"{path.stem}*{path.suffix}"), key=lambda f: f.stat().st_mtime)
    for file in files:
        counts_file(file, lo, hi, counts, errors)
    by_client: dict[str, dict[str, int]] = defaultdict(dict)
    for (client, verb, res), n in sorted(counts.items()):
        by_client[client][f"{verb} {res}"] = n
    return {
        "requests": dict(by_client),
        "errors": [{"client": c, "request": r, "code": code, "count": n} for (c, r, code), n in sorted(errors.items())],
    }


def counts_file(path: Path, lo: str, hi: str, counts: Counter[tuple[str, str, str]],
                errors: Counter[tuple[str, str, int]]) -> None:
    with path.open("rb") as f:
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            stamp = entry.get("requestReceivedTimestamp", "")
            if not lo <= stamp <= hi:
                continue
            verb = entry.get("verb", "?")
            stage = entry.get("stage")
            # a watch is logged when it starts and when it ends: count it once, when it starts
            if (verb == "watch" and stage != "ResponseStarted") or (verb != "watch" and stage != "ResponseComplete"):
                continue
            client = client_of(entry.get("userAgent", ""), (entry.get("user") or {}).get("username", ""))
            res = resource_of(entry.get("objectRef"))
            counts[(client, verb, res)] += 1
            code = (entry.get("responseStatus") or {}).get("code", 0)
            if code >= 300:
                errors[(client, f"{verb} {res}", code)] += 1


def per_job(audit: dict[str, Any], jobs: int) -> dict[str, Any]:
    """Requests per job: per client, all and writes (Events apart; a write is any create, update, patch or delete, of
    any resource and subresource: Job status, Worker spec and status, Leases, pods...), and every request by kind."""
    out: dict[str, Any] = {}
    for client, reqs in audit["requests"].items():
        total = sum(reqs.values())
        writes = sum(n for k, n in reqs.items() if is_write(k))
        events = sum(n for k, n in reqs.items() if k.split()[0] in WRITE_VERBS and _is_event(k))
        out[client] = {
            "requests": round(total / jobs, 3),
            "writes": round(writes / jobs, 3),
            "event_writes": round(events / jobs, 3),
            "by_request": {k: round(n / jobs, 3) for k, n in sorted(reqs.items(), key=lambda kv: -kv[1])},
        }
    out["all"] = {key: round(sum(c[key] for c in out.values()), 3) for key in ("requests", "writes", "event_writes")}
    return out


# Creates that store nothing: the API server answers them and forgets (a worker's self-review of its identity, the
# bench's own token requests at set-up).
UNSTORED = ("selfsubjectreviews.authentication.k8s.io", "tokenreviews.authentication.k8s.io",
            "subjectaccessreviews.authorization.k8s.io", "selfsubjectaccessreviews.authorization.k8s.io",
            "selfsubjectrulesreviews.authorization.k8s.io", "serviceaccounts/token")


def is_write(request: str) -> bool:
    """A write of the API server's storage ("verb resource"), Events apart."""
    verb, _, res = request.partition(" ")
    return verb in WRITE_VERBS and res not in UNSTORED and not _is_event(request)


def _is_event(request: str) -> bool:
    res = request.split()[1]
    return res == "events" or res.startswith("events.")


# The API server's own account, by resource and verb: time spent serving requests (apiserver_request_duration_seconds,
# which for a watch is its whole life and is left out) and the bytes of the watch events it sent, by kind.
_METRIC = re.compile(r'^(apiserver_request_duration_seconds|apiserver_watch_events_sizes)_(sum|count)\{([^}]*)\} (\S+)$')
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def apiserver_metrics(text: str) -> dict[str, dict[str, float]]:
    """{"<resource>[/<subresource>] <verb>": {"seconds", "requests"}, "watch <kind>": {"bytes", "events"}}: the
    counters as read now (cumulative since the API server started; apiserver_delta takes two readings apart)."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for line in text.splitlines():
        m = _METRIC.match(line)
        if m is None:
            continue
        name, part, labels, value = m.groups()
        lab = dict(_LABEL.findall(labels))
        group = f".{lab['group']}" if lab.get("group") else ""
        if name == "apiserver_request_duration_seconds":
            if lab.get("verb") in ("WATCH", "CONNECT"):
                continue
            resource = lab.get("resource", "") + (f"/{lab['subresource']}" if lab.get("subresource") else "")
            key, field = f"{lab.get('verb', '').lower()} {resource}{group}", "seconds" if part == "sum" else "requests"
        else:
            key, field = f"watch {lab.get('kind', lab.get('resource', ''))}{group}", "bytes" if part == "sum" else "events"
        out[key][field] = out[key].get(field, 0.0) + float(value)
    return dict(out)


def apiserver_delta(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]],
                    jobs: int) -> dict[str, dict[str, float]]:
    """Per job, what the API server served between two readings, largest first."""
    out = {}
    for key, fields in after.items():
        was = before.get(key, {})
        delta = {f: round((v - was.get(f, 0.0)) / jobs, 6) for f, v in fields.items()}
        if any(delta.values()):
            out[key] = delta
    weight = lambda kv: kv[1].get("seconds", 0.0) + kv[1].get("bytes", 0.0) / 1e9  # noqa: E731
    return dict(sorted(out.items(), key=weight, reverse=True))
