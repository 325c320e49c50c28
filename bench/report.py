"""The table (S, W, A0, A1 and the ratios S/A0, S/A1, W/A1, W/S, W/WB per workload), API writes per job by client and
request, the JSON, and the plot of jobs completed over time."""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

from .measure import is_write


def git_revision(checkout: Path | None = None) -> str | None:
    """The short commit of a checkout (default: this one), for a report's meta; None when git cannot say."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=checkout or Path(__file__).parent, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None

ORDER = ("W", "WN", "WA", "WQ", "WB", "S", "SA", "SQ", "SB", "A0", "A1", "S0", "S16", "SG")
# Each job system against the baselines it must beat: the Job controller (A0 default, A1 tuned) and, for workers,
# Sextant's own pod mode.
RATIOS = (("W", "A1"), ("WN", "W"), ("WA", "W"), ("WQ", "W"), ("SA", "S"), ("W", "WB"), ("W", "S"), ("S", "A0"), ("S", "A1"))
# The processes measured, each on its own row of CPU ms per job (the workers summed).
COMPONENTS = ("operator", "kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok-controller")


def write_report(out: Path, name: str, report: dict[str, Any], markdown: str) -> Path:
    """A report as out/NAME.json and out/NAME.md (the two files a closing note cites); the .md is also printed."""
    out.mkdir(parents=True, exist_ok=True)
    base = out / name
    base.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    base.with_suffix(".md").write_text(markdown)
    print(markdown)
    return base


def _get(result: dict[str, Any], path: str) -> Any:
    value: Any = result
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _cpu(result: dict[str, Any], *names: str) -> float | None:
    cpu = _get(result, "usage.cpu_seconds") or {}
    values = [cpu[n] for n in names if n in cpu]
    return round(sum(values), 1) if values else None


def _controllers(result: dict[str, Any]) -> tuple[str, ...]:
    """The job system's own clients: the operator (and its workers), or the controller-manager."""
    return ("operator", "worker") if result.get("config", "")[:1] in ("S", "W") else ("controller-manager",)


def _controller_figure(result: dict[str, Any], figure: str) -> float | None:
    per_job = result.get("api_per_job") or {}
    values = [per_job[c][figure] for c in _controllers(result) if figure in (per_job.get(c) or {})]
    return round(sum(values), 3) if values else None


def _controller_writes(result: dict[str, Any]) -> float | None:
    """Writes per job (Events apart) of the job system's own controller(s)."""
    return _controller_figure(result, "writes")


def _controller_events(result: dict[str, Any]) -> float | None:
    return _controller_figure(result, "event_writes")


def _workers_cpu(result: dict[str, Any]) -> float | None:
    cpu = _get(result, "usage.cpu_seconds") or {}
    return _cpu(result, *(n for n in cpu if n.startswith("worker-")))


def _system_cpu(result: dict[str, Any]) -> float | None:
    values = [v for v in (_cpu(result, "operator", "kube-apiserver", "etcd", "kwok-controller", "kube-scheduler",
                                "kube-controller-manager"), _workers_cpu(result)) if v is not None]
    return round(sum(values), 1) if values else None


def _per_job_ms(seconds: float | None, result: dict[str, Any]) -> float | None:
    return round(1000 * seconds / result["jobs"], 2) if seconds is not None and result.get("jobs") else None


# (label, getter, better: "higher" | "lower" | None)
ROWS: list[tuple[str, Any, str | None]] = [
    ("wall time until all terminal (s)", lambda r: r.get("wall_s"), "lower"),
    ("jobs/s overall", lambda r: r.get("jobs_per_s"), "higher"),
    ("jobs/s 10–90 %", lambda r: r.get("jobs_per_s_10_90"), "higher"),
    # while the burst is still arriving (issue 27): completions keep pace when the lifecycle is not starved
    ("last create returned at (s)", lambda r: _get(r, "arrival.last_create_s"), None),
    ("succeeded by the last create (jobs)", lambda r: _get(r, "arrival.succeeded_by_last_create"), "higher"),
    ("succeeded by the last create (% of jobs)",
     lambda r: (round(100 * f, 1) if (f := _get(r, "arrival.succeeded_by_last_create_fraction")) is not None
                else None), "higher"),
    ("completions/s while creates arrive", lambda r: _get(r, "arrival.completions_per_s_while_arriving"), "higher"),
    ("completions/s after the last create", lambda r: _get(r, "arrival.completions_per_s_after"), None),
    ("pace: completions/s ÷ creates/s while arriving", lambda r: _get(r, "arrival.pace"), "higher"),
    ("create → running p50 (ms)", lambda r: _get(r, "latency_ms.create_to_running.p50"), "lower"),
    ("create → running p99 (ms)", lambda r: _get(r, "latency_ms.create_to_running.p99"), "lower"),
    ("create → succeeded/terminal p50 (ms)", lambda r: _get(r, "latency_ms.create_to_job_terminal.p50"), "lower"),
    ("create → succeeded/terminal p99 (ms)", lambda r: _get(r, "latency_ms.create_to_job_terminal.p99"), "lower"),
    ("create → pod created p50 (ms)", lambda r: _get(r, "latency_ms.create_to_pod_created.p50"), "lower"),
    ("create → pod created p99 (ms)", lambda r: _get(r, "latency_ms.create_to_pod_created.p99"), "lower"),
    ("create → pod created p99, timestamps (ms, 1 s res.)",
     lambda r: _get(r, "latency_ms.create_to_pod_created_by_timestamps.p99"), "lower"),
    ("pod finished → job terminal p50 (ms)", lambda r: _get(r, "latency_ms.pod_finished_to_job_terminal.p50"),
     "lower"),
    ("pod finished → job terminal p99 (ms)", lambda r: _get(r, "latency_ms.pod_finished_to_job_terminal.p99"),
     "lower"),
    ("API requests / job, all clients", lambda r: _get(r, "api_per_job.all.requests"), "lower"),
    ("API writes / job, all clients (no Events)", lambda r: _get(r, "api_per_job.all.writes"), "lower"),
    ("Event writes / job, all clients", lambda r: _get(r, "api_per_job.all.event_writes"), "lower"),
    ("controller writes / job (operator + workers | c-m), no Events", _controller_writes, "lower"),
    ("controller Event writes / job", _controller_events, "lower"),
    ("scheduler requests / job", lambda r: _get(r, "api_per_job.scheduler.requests"), "lower"),
    ("kwok requests / job", lambda r: _get(r, "api_per_job.kwok.requests"), "lower"),
    ("load generator requests / job", lambda r: _get(r, "api_per_job.loadgen.requests"), None),
    ("load generator create rate (jobs/s)", lambda r: _get(r, "loadgen.create_rate"), None),
    ("worker requests / job", lambda r: _get(r, "api_per_job.worker.requests"), "lower"),
    ("CPU s: operator", lambda r: _cpu(r, "operator"), "lower"),
    ("CPU s: workers (all processes)", _workers_cpu, "lower"),
    *((f"CPU ms / job: {name}", lambda r, name=name: _per_job_ms(_cpu(r, name), r), "lower")
      for name in COMPONENTS[:1]),
    ("CPU ms / job: workers", lambda r: _per_job_ms(_workers_cpu(r), r), "lower"),
    *((f"CPU ms / job: {name}", lambda r, name=name: _per_job_ms(_cpu(r, name), r), "lower")
      for name in COMPONENTS[1:]),
    ("CPU s: kube-apiserver", lambda r: _cpu(r, "kube-apiserver"), "lower"),
    ("CPU s: etcd", lambda r: _cpu(r, "etcd"), "lower"),
    ("CPU s: kwok-controller", lambda r: _cpu(r, "kwok-controller"), "lower"),
    ("CPU s: kube-scheduler", lambda r: _cpu(r, "kube-scheduler"), "lower"),
    ("CPU s: kube-controller-manager", lambda r: _cpu(r, "kube-controller-manager"), "lower"),
    ("CPU s: control plane + job system", _system_cpu, "lower"),
    ("CPU ms / job: control plane + job system", lambda r: _per_job_ms(_system_cpu(r), r), "lower"),
    ("CPU s: bench (load generator + watches)", lambda r: _cpu(r, "bench (load generator + watches)"), None),
    ("operator peak RSS (MB)", lambda r: _get(r, "operator_memory_mb.VmHWM"), "lower"),
    ("machine busy (% of all CPUs)", lambda r: (round(100 * r["usage"]["machine"]["busy_fraction"])
                                                if _get(r, "usage.machine.busy_fraction") is not None else None), None),
    ("CPU s of other work on the machine", lambda r: _get(r, "usage.machine.other_cpu_s"), None),
    ("loadavg (1 min) mean / max", lambda r: (f"{_get(r, 'usage.machine.loadavg1_mean')} / "
                                              f"{_get(r, 'usage.machine.loadavg1_max')}"), None),
    ("duplicate pods", lambda r: r.get("duplicate_pods"), None),
    ("outcomes", lambda r: " ".join(f"{k}:{v}" for k, v in sorted((r.get("outcomes") or {}).items())), None),
]


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 10 else f"{value:,.1f}".rstrip("0").rstrip(".")
    return str(value)


def _ratio(a: Any, b: Any) -> str:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b:
        return "–"
    return f"{a / b:.2f}"


def tables(results: list[dict[str, Any]]) -> str:
    by_workload: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in results:
        by_workload[r["workload"]][r["config"]] = r
    out: list[str] = []
    for workload, runs in by_workload.items():
        configs = [c for c in ORDER if c in runs]
        ratios = [(f"{a}/{b}", a, b) for a, b in RATIOS if a in runs and b in runs]
        jobs = next(iter(runs.values()))["jobs"]
        out.append(f"\n### {workload} ({jobs} jobs)\n")
        header = ["figure", *configs, *(label for label, _, _ in ratios)]
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "|".join(["---"] * len(header)) + "|")
        for label, getter, _ in ROWS:
            values = {c: getter(runs[c]) for c in configs}
            if all(v is None or v == "None / None" for v in values.values()):
                continue
            row = [label, *(_fmt(values[c]) for c in configs)]
            row += [_ratio(values[a], values[b]) for _, a, b in ratios]
            out.append("| " + " | ".join(row) + " |")
        out.append(writes_by_client(runs, configs))
        for c in configs:
            if runs[c].get("timed_out"):
                out.append(f"\n{c} timed out: {runs[c]['terminal']} of {jobs} jobs terminal.")
    return "\n".join(out) + "\n"


def writes_by_client(runs: dict[str, dict[str, Any]], configs: list[str]) -> str:
    """API writes per job of every client (Events apart), and each client's writes by verb and resource: Job status,
    Worker spec (`patch workers.sextant.dev`) and status (`…/status`), Leases, pods."""
    clients = sorted({c for r in runs.values() for c in (r.get("api_per_job") or {}) if c != "all"})
    rows: list[list[str]] = []
    for client in clients:
        per = {c: _get(runs[c], f"api_per_job.{client}") or {} for c in configs}
        totals = [per[c].get("writes") for c in configs]
        requests = sorted({k for p in per.values() for k in p.get("by_request", {}) if is_write(k)})
        if not any(totals) and not requests:
            continue
        rows.append([f"**{client}**", *(_fmt(v) for v in totals)])
        rows += [[f"{client}: {k}", *(_fmt(per[c].get("by_request", {}).get(k)) for c in configs)]
                 for k in requests]
        events = [per[c].get("event_writes") for c in configs]
        if any(events):
            rows.append([f"{client}: Event writes (apart)", *(_fmt(v) for v in events)])
    if not rows:
        return ""
    all_writes = [_fmt(_get(runs[c], "api_per_job.all.writes")) for c in configs]
    out = ["\nAPI writes per job by client (Events apart; audit log):\n",
           "| client: request | " + " | ".join(configs) + " |", "|" + "|".join(["---"] * (len(configs) + 1)) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    out.append("| **all clients** | " + " | ".join(all_writes) + " |")
    return "\n".join(out) + "\n"


# Sustained arrivals pass when the job starts soon enough: for pod mode and batch/v1 the pod exists within 1 s
# (issue 10); for workers the job is running within 250 ms at 100 jobs/s (issue 15).
def _sustains(r: dict[str, Any]) -> bool:
    if r.get("terminal") != r.get("jobs"):
        return False
    if r["config"] in ("W", "WN", "WB"):
        p99 = _get(r, "latency_ms.create_to_running.p99")
        return p99 is not None and p99 < 250
    p99 = _get(r, "latency_ms.create_to_pod_created.p99")
    return p99 is not None and p99 < 1000


def rate_table(results: list[dict[str, Any]]) -> str:
    rows = [r for r in results if r.get("rate")]
    if not rows:
        return ""
    out = ["\n### sustained arrivals\n",
           "| config | rate (jobs/s) | achieved create rate | create → running p50 / p99 (ms) | "
           "create → succeeded p50 / p99 (ms) | create → pod p50 / p99 / max (ms) | pod finished → terminal p99 (ms) | "
           "operator CPU s | workers CPU s | machine busy % | loadavg mean | passes (W: running p99 < 250 ms; "
           "others: pod p99 < 1 s) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def label(r: dict[str, Any]) -> str:
        return r["config"] + (" (no audit log)" if "no audit" in r["workload"] else "")

    def pair(r: dict[str, Any], path: str, *keys: str) -> str:
        lat = _get(r, path) or {}
        return " / ".join(_fmt(lat.get(k)) for k in keys)

    for r in sorted(rows, key=lambda r: (label(r), r["rate"])):
        out.append(" | ".join([
            f"| {label(r)}", _fmt(r["rate"]), _fmt(_get(r, "loadgen.create_rate")),
            pair(r, "latency_ms.create_to_running", "p50", "p99"),
            pair(r, "latency_ms.create_to_job_terminal", "p50", "p99"),
            pair(r, "latency_ms.create_to_pod_created", "p50", "p99", "max"),
            _fmt(_get(r, "latency_ms.pod_finished_to_job_terminal.p99")),
            _fmt(_cpu(r, "operator")), _fmt(_workers_cpu(r)),
            _fmt(round(100 * busy) if (busy := _get(r, "usage.machine.busy_fraction")) else None),
            _fmt(_get(r, "usage.machine.loadavg1_mean")),
            ("yes" if _sustains(r) else "no") + " |"]))
    sustained: dict[str, float] = {}
    for r in rows:
        if _sustains(r):
            sustained[label(r)] = max(sustained.get(label(r), 0), r["rate"])
    for config, rate in sorted(sustained.items()):
        out.append(f"\nhighest rate {config} sustains (as the last column says): {rate:g} jobs/s")
    return "\n".join(out) + "\n"


def profile_text(results: list[dict[str, Any]], top: int = 15) -> str:
    out = []
    for r in results:
        prof = r.get("profile")
        if not prof or "top_own" not in prof:
            continue
        out.append(f"\n### operator profile: {r['config']} {r['workload']} ({prof['samples']} samples at "
                   f"100/s, busy {prof['busy_fraction']})\n")
        out.append("own time (uvloop is C: the event loop's own work, socket and TLS I/O, shows as Runner.run):\n")
        out += [f"  {e['percent']:5.1f}%  {e['function']}" for e in prof["top_own"][:top]]
        out.append("\nincluding callees (without the frames every sample shares):\n")
        shared = max((e["percent"] for e in prof["top_inclusive"]), default=0) * 0.95
        inclusive = [e for e in prof["top_inclusive"] if e["percent"] < shared]
        out += [f"  {e['percent']:5.1f}%  {e['function']}" for e in inclusive[:top]]
    return "\n".join(out) + ("\n" if out else "")


def apiserver_text(results: list[dict[str, Any]], top: int = 12) -> str:
    """Where the API server's time went (ms of request time per job, by request) and the watch bytes it sent (per
    job, by kind), from its own metrics: request time is latency, not CPU, but it ranks what costs it most."""
    out = []
    for r in results:
        served = r.get("apiserver_per_job")
        if not served:
            continue
        out.append(f"\n### API server: {r['config']} {r['workload']} (its /metrics, per job)\n")
        out.append("| request | requests / job | request time / job (ms) |\n|---|---|---|")
        requests = [(k, v) for k, v in served.items() if "seconds" in v][:top]
        out += [f"| {k} | {v.get('requests', 0):g} | {v['seconds'] * 1000:.2f} |" for k, v in requests]
        out.append("\n| watch events of | events / job | KiB / job |\n|---|---|---|")
        watched = sorted(((k, v) for k, v in served.items() if "bytes" in v), key=lambda kv: -kv[1]["bytes"])[:top]
        out += [f"| {k.removeprefix('watch ')} | {v.get('events', 0):g} | {v['bytes'] / 1024:.1f} |" for k, v in watched]
    return "\n".join(out) + ("\n" if out else "")


def plot(results: list[dict[str, Any]], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    bursts = [w for w in dict.fromkeys(r["workload"] for r in results if not r.get("rate"))]
    if not bursts:
        return None
    cols = min(3, len(bursts))
    rows = -(-len(bursts) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4.5 * rows), squeeze=False)
    for ax in axes.flat[len(bursts):]:
        ax.set_visible(False)
    for ax, workload in zip(axes.flat, bursts):
        for r in sorted((r for r in results if r["workload"] == workload), key=lambda r: ORDER.index(r["config"])):
            times = r.get("completed_over_time") or []
            ax.step([0, *times], range(len(times) + 1), where="post",
                    label=f"{r['config']} ({r.get('wall_s', '?')} s)")
        ax.set_title(f"{workload}: jobs completed over time")
        ax.set_xlabel("seconds since the first create")
        ax.set_ylabel("jobs terminal")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
