"""Sextant against the Kubernetes Job controller on the same local control plane (issue 10).

    make bench                                  # everything (installs the bench extra first)
    .venv/bin/python -m bench                   # the same
    .venv/bin/python -m bench --quick           # a few minutes: small bursts, two short rates, 5k-job scale
    .venv/bin/python -m bench --sizes 1000 --workloads burst --configs S,A1
    .venv/bin/python -m bench --configs W,S,A1 --workloads burst,rate --rate-configs W --rates 50,100,200
    .venv/bin/python -m bench --configs W,WA,S,SA --workloads burst --sizes 10000   # issue 32: admission cost
    git worktree add /tmp/base main    # issue 27: W beside WB (the previous main's workers) and A1
    .venv/bin/python -m bench --configs W,WB,A1 --baseline /tmp/base --workloads burst,rate --rate-configs W,WB

Each configuration × workload runs on a fresh local control plane (audit log on). Each component runs as a service
account of its own (bench/identities.py): the operator and the workers in their priority level (API Priority and
Fairness, as the chart sets it up), the load generator as a plain service account that may only create jobs.
Results: a table on stdout and in bench/results/<timestamp>.md, every figure in bench/results/<timestamp>.json, the
plot in bench/results/<timestamp>.png, logs and profiles in bench/results/<timestamp>/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path

from sextant.dev.localcluster import build_controlplane

from . import report
from .run import CONFIGS, Options, Plan, Workload, renice, run, run_plan

RESULTS = Path(__file__).resolve().parent / "results"


def _size_name(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 and n >= 1000 else str(n)


def _list(text: str, cast=str) -> list:
    return [cast(x) for x in text.split(",") if x.strip()]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--configs", default="W,S,A0,A1",
                   help="of W, WN, WB, WQ, S, A0, A1, S0, S16, SG, SQ, SB, SA, WA (default W,S,A0,A1)")
    p.add_argument("--workloads", default="burst,fail,rate,scale",
                   help="of burst, fail (10%% of first attempts fail), rate (sustained arrivals), scale "
                        "(default all)")
    p.add_argument("--sizes", default="1000,10000", help="burst sizes (default 1000,10000)")
    p.add_argument("--fail-fraction", type=float, default=0.1, help="first attempts failing in `fail` (0.1)")
    p.add_argument("--rates", default="25,50,75,100", help="arrival rates, jobs/s (default 25,50,75,100)")
    p.add_argument("--rate-seconds", type=float, default=30, help="how long each rate lasts (default 30)")
    p.add_argument("--rate-configs", default="S", help="configurations the rates run on (default S)")
    p.add_argument("--scale-jobs", type=int, default=100_000, help="jobs present for `scale` (default 100000)")
    p.add_argument("--scale-unfinished", type=int, default=1000,
                   help="of which new (unfinished) ones (default 1000)")
    p.add_argument("--baseline", type=Path, metavar="DIR",
                   help="SB: run the operator of this checkout (e.g. `git worktree add /tmp/base <commit>`), WB: its "
                        "operator and workers, so that it and this one are measured side by side in one run")
    p.add_argument("--scale-restarts", type=int, default=2,
                   help="start-ups measured again on the loaded cluster after the first (default 2)")
    p.add_argument("--a0-max-jobs", type=int, default=1000,
                   help="skip A0 on bursts larger than this (A0 does ~3.4 jobs/s; default 1000)")
    p.add_argument("--no-profile", dest="profile", action="store_false",
                   help="do not profile the operator (py-spy) during S's largest burst")
    p.add_argument("--quick", action="store_true",
                   help="sizes 200,1000; rates 25,50 for 10 s; scale 5000 (overrides those options)")
    p.add_argument("--same-cluster", action="store_true",
                   help="one cluster per configuration, workloads one after another (faster, less clean)")
    p.add_argument("--nodes", type=int, default=20, help="kwok nodes, 110 pods each (default 20)")
    p.add_argument("--nice", type=int, default=0,
                   help="renice the measured processes (control plane, operator, load generator) to this value, "
                        "e.g. -5 on a machine shared with other work (root only; default 0: leave them)")
    p.add_argument("--worker-processes", type=int, default=4, help="W: `sextant worker` processes (default 4)")
    p.add_argument("--worker-slots", type=int, default=64, help="W: slots (--concurrency) of each (default 64)")
    p.add_argument("--in-flight", type=int, default=100, help="the load generator's concurrent creates (100)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds a run may take (default 1800)")
    p.add_argument("--out", type=Path, default=RESULTS, help="results directory (default bench/results)")
    p.add_argument("--no-audit", dest="audit", action="store_false",
                   help="no audit log: no API requests per client, but none of the audit log's cost to the API server")
    p.add_argument("--no-plot", dest="plot", action="store_false")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--merge", nargs="+", type=Path, metavar="JSON",
                   help="run nothing: one report from the results of earlier runs (their JSON files)")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.rates, args.rate_seconds, args.scale_jobs = "200,1000", "25,50", 10, 5000
        args.scale_unfinished = min(args.scale_unfinished, 500)
    for c in _list(args.configs) + _list(args.rate_configs):
        if c not in CONFIGS:
            p.error(f"unknown configuration {c!r}; one of {', '.join(CONFIGS)}")
    if {"SB", "WB"} & set(_list(args.configs) + _list(args.rate_configs)) and args.baseline is None:
        p.error("SB and WB run the operator (WB: and the workers) of --baseline DIR: give --baseline")
    return args


def plan_of(args: argparse.Namespace) -> tuple[Plan, int | None]:
    configs = _list(args.configs)
    kinds = _list(args.workloads)
    sizes = _list(args.sizes, int)
    workloads: list[Workload] = []
    if "burst" in kinds:
        workloads += [Workload(f"burst-{_size_name(n)}", n) for n in sizes]
    if "fail" in kinds:
        workloads += [Workload(f"fail-{_size_name(n)}", n, fail=args.fail_fraction) for n in sizes]
    # Workload by workload, each on every config in turn: configs compared run close in time on the same machine.
    runs = [(c, w) for w in workloads for c in configs]
    if "rate" in kinds:
        for c in _list(args.rate_configs):
            runs += [(c, Workload(f"rate-{r:g}", max(1, int(r * args.rate_seconds)), rate=r))
                     for r in _list(args.rates, float)]
    scale = args.scale_jobs if "scale" in kinds else None
    return Plan(runs=runs, a0_max_jobs=args.a0_max_jobs, same_cluster=args.same_cluster), scale


def _operator_digest(checkout: Path | None = None) -> str:
    """A digest of the operator's source as run (the working tree, which may differ from the commit)."""
    import hashlib

    root = (checkout or Path(__file__).resolve().parents[1]) / "operator" / "sextant"
    digest = hashlib.sha1()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def merge(args: argparse.Namespace, stamp: str) -> int:
    docs = [json.loads(path.read_text()) for path in args.merge]
    results, seen = [], Counter()
    for d in docs:
        for r in d["results"]:
            key = (r["config"], r["workload"])
            seen[key] += 1
            if seen[key] > 1:  # the same run again: its own table
                r = {**r, "workload": f"{r['workload']} (run {seen[key]})"}
            if not d["meta"].get("audit", True):
                r = {**r, "workload": f"{r['workload']} (no audit log)"}
            results.append(r)
    scale = next((d["scale"] for d in reversed(docs) if d.get("scale")), None)
    meta = {**docs[0]["meta"], "command": " | ".join(d["meta"]["command"] for d in docs),
            "merged_from": [str(p) for p in args.merge],
            "loadavg_at_end": docs[-1]["meta"].get("loadavg_at_end", []),
            "skipped": [s for d in docs for s in d["meta"].get("skipped", [])]}
    print(write_outputs(args.out, stamp, meta, results, scale, args.plot))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if args.merge:
        return merge(args, stamp)
    out_dir = args.out / stamp
    out_dir.mkdir(parents=True, exist_ok=True)
    # the profile: during S's largest burst (and SB's, to compare them)
    plan, scale = plan_of(args)
    bursts = [w for c, w in plan.runs if c == "S" and w.rate is None]
    profiled = max(bursts, key=lambda w: (w.jobs, not w.failing)).name if bursts and args.profile else None
    opts = Options(out=out_dir, nodes=args.nodes, nice=args.nice, audit=args.audit, in_flight=args.in_flight,
                   timeout=args.timeout, verbose=not args.quiet, worker_processes=args.worker_processes,
                   worker_slots=args.worker_slots, baseline=args.baseline)
    renice([os.getpid()], args.nice)
    meta = {
        "command": " ".join([Path(sys.executable).name, "-m", "bench", *(argv if argv is not None else sys.argv[1:])]),
        "started": stamp, "git": report.git_revision(), "operator_source": _operator_digest(),
        "cpus": os.cpu_count(), "cpu_model": _cpu_model(),
        "python": platform.python_version(), "nodes": args.nodes, "nice": args.nice, "audit": args.audit,
        "workers": {"processes": args.worker_processes, "slots": args.worker_slots},
        "loadavg_at_start": Path("/proc/loadavg").read_text().split()[:3],
        # which build of the control plane (its cache directory names the versions, and kwok's resume-watch build)
        "control_plane": str(build_controlplane(quiet=True)),
        "configs": {name: c.description for name, c in CONFIGS.items()},
    }
    if args.baseline is not None:
        meta["baseline"] = {"dir": str(args.baseline), "git": report.git_revision(args.baseline),
                            "operator_source": _operator_digest(args.baseline)}

    async def everything() -> list:
        out = []
        for config, workload in plan.runs:  # one at a time, so that only S's (and SB's) largest burst is profiled
            single = Plan(runs=[(config, workload)], a0_max_jobs=plan.a0_max_jobs)
            opts.profile = config in ("S", "SB") and workload.name == profiled
            out += await run_plan(single, opts)
            plan.skipped += single.skipped
        return out

    results = run(plan, opts) if plan.same_cluster else asyncio.run(everything())
    scale_result = None
    if scale:
        from .scale import run_scale

        scale_result = asyncio.run(run_scale(opts, scale, min(args.scale_unfinished, scale), args.scale_restarts))
    meta["loadavg_at_end"] = Path("/proc/loadavg").read_text().split()[:3]
    meta["skipped"] = plan.skipped
    text = write_outputs(args.out, stamp, meta, results, scale_result, args.plot)
    print(text)
    return 0


def write_outputs(out: Path, stamp: str, meta: dict, results: list, scale_result: dict | None, plot: bool) -> str:
    doc = {"meta": meta, "results": results, "scale": scale_result}
    json_path = out / f"{stamp}.json"
    json_path.write_text(json.dumps(doc, indent=1))
    parts = [f"# Sextant benchmark {stamp}\n", f"command: `{meta['command']}`  ",
             f"machine: {meta['cpus']} CPUs ({meta['cpu_model']}), "
             f"loadavg at start {' '.join(meta['loadavg_at_start'])}"
             f", at end {' '.join(meta.get('loadavg_at_end', []))}  ",
             f"control plane: {meta.get('control_plane', '?')}\n"]
    parts += [f"- {name}: {desc}" for name, desc in meta["configs"].items()]
    parts += [f"- skipped: {s}" for s in meta.get("skipped", [])]
    parts.append(report.tables([r for r in results if not r.get("rate")]))
    parts.append(report.rate_table(results))
    if scale_result:
        parts.append("\n### scale\n\n```\n" + json.dumps(scale_result, indent=1) + "\n```\n")
    parts.append(report.profile_text(results))
    parts.append(report.apiserver_text(results))
    if plot:
        png = report.plot(results, out / f"{stamp}.png")
        if png:
            parts.append(f"\nplot: {png}\n")
    parts.append(f"\nJSON: {json_path}\n")
    text = "\n".join(parts)
    (out / f"{stamp}.md").write_text(text)
    return text


if __name__ == "__main__":
    sys.exit(main())
