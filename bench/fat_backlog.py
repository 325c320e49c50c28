"""Fat backlog (issue 28): N queued jobs with ~256 KiB payloads (of small keys, or with --shape strings of 4 KiB
strings), then the operator starts; its peak RSS and its time to "view complete", on a local control plane.

    PYTHONPATH=operator .venv/bin/python -m bench.fat_backlog --jobs 1000,2000 [--operator-tree /tmp/base-p]
        [--payload-bytes 262144] [--shape keys|strings] [--restarts 1] [--address-space-gb 8] [--out bench/results]

The jobs' Handler is a worker-mode one (`spec.worker: {}`) and no worker runs, so every job stays queued (it waits
for a worker) and unfinished: the view holds each one. The jobs are created before the operator starts (the start
is a relist of a backlog, as after an OOM kill); each start is measured by itself:

- start_to_view_complete_s: from the process's start to its log line "view complete: N jobs";
- peak_rss_mb: the kernel's high-water mark of its resident memory (VmHWM), read at "view complete" and again
  `--settle` seconds later (the operator meanwhile writes each new job `queued`: each write's answer and its watch
  event carry the whole payload); rss_mb at both times (VmRSS).

Then the operator is stopped and started again `--restarts` times (the relist of jobs it has written). Each
`--operator-tree` given (default: this checkout) is measured in turn on the same backlog, its `operator/` first on
the path, e.g. a baseline: `git worktree add /tmp/base-p b958706`; only the first tree's first start sees jobs
that no operator has written yet. `--address-space-gb` caps the operator's address space (prlimit) so that
an operator that would take the machine's memory fails instead (reported as `died`).

Writes <out>/<stamp>-fat-backlog.json and .md (no logs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OPERATOR_COMMAND = Path("operator/sextant/controller/command.py")  # in an operator tree: its flags
sys.path.insert(0, str(ROOT / "operator"))

from sextant.dev.localcluster import KubectlError, LocalCluster, new_name  # noqa: E402
from sextant.kube import kubeconfig  # noqa: E402
from sextant.kube.client import Conflict, Kube  # noqa: E402
from sextant.resources import API_VERSION as API, contract  # noqa: E402
from sextant.resources.job import PAYLOAD_MAX_BYTES, payload_size  # noqa: E402

from .report import git_revision, write_report  # noqa: E402


STRING_BYTES = 4096  # --shape strings: each value this long
SHAPES = {"keys": "small keys", "strings": "4 KiB strings"}  # --shape, and how the report says it


def fat_payload(size: int, shape: str = "keys") -> dict[str, Any]:
    """A payload of at most `size` bytes as compact JSON. "keys": small keys ("k000000": 0, ...), the worst case
    for a parsed object's weight (each key a str object, each value an int, one dict slot each), and for the API
    server's (it holds every job decoded in its watch cache: ~1,000 such jobs took it past 17 GB here). "strings":
    4 KiB strings ("s0000": "xxx…"), as a document or an image's metadata would be: as many bytes, a fraction of
    the objects."""
    if shape == "strings":
        per_key = len('"s0000":"",') + STRING_BYTES
        payload: dict[str, Any] = {f"s{i:04d}": "x" * STRING_BYTES for i in range(max(1, (size - 2) // per_key))}
    else:
        per_key = len('"k000000":0,')
        payload = {f"k{i:06d}": i % 10 for i in range(max(1, (size - 2) // per_key))}
    while payload_size(payload) > size:
        payload.popitem()
    return payload


async def create_jobs(kube: Kube, namespace: str, count: int, payload: dict[str, Any], in_flight: int) -> float:
    path = contract.jobs_path(namespace)
    names = iter(range(count))

    async def worker() -> None:
        for i in names:
            body = {"apiVersion": API, "kind": "Job", "metadata": {"name": f"fat-{i:06d}"},
                    "spec": {"queue": "held", "handler": "nobody", "payload": payload}}
            try:
                await kube.request("POST", path, body=body, timeout=120)
            except Conflict:
                pass  # a create that timed out on a loaded machine landed all the same, and its retry met it

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return time.monotonic() - started


def status_mb(pid: int) -> dict[str, float]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


def written(cluster: LocalCluster, namespace: str) -> int | None:
    """Jobs the operator has written a state to: `kubectl get`'s table is printed by the API server (the STATE
    column), so no payload crosses the wire. None when the API server cannot print it in time (a table of 1,000
    jobs of small keys takes it over its one-minute deadline)."""
    try:
        rows = cluster.kubectl("get", "jobs.sextant.dev", "-n", namespace, "--no-headers",
                               timeout=90).stdout.splitlines()
    except (subprocess.TimeoutExpired, KubectlError):  # the API server's own deadline is a minute
        return None
    return sum(1 for cells in map(str.split, rows) if len(cells) > 1 and cells[1] != "<none>")


def start_once(cluster: LocalCluster, tree: Path, namespace: str, jobs: int, log_path: Path, settle: float,
               address_space_gb: float, timeout: float) -> dict[str, Any]:
    """One start of the operator: time to "view complete", its peak and current RSS then and after `settle` s."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(tree / "operator")}
    limit = int(address_space_gb * 1024**3)

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    log = open(log_path, "ab")
    log.write(b"--- start\n")
    log.flush()
    started = time.monotonic()
    # An operator of faff2a0 or older watches Queue, Handler and Schedule with kopf too unless told not to (its
    # figures were measured without); since issue 41 kopf watches nothing, and the flag is gone.
    kopf_off = ["--no-kopf-watches"] if "--kopf-watches" in (tree / OPERATOR_COMMAND).read_text() else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "sextant", "--kubeconfig", str(cluster.kubeconfig), "operator", "--watch-namespace",
         namespace, "--log-level", "info", "--http-port", "-1", *kopf_off],
        stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=cap if limit > 0 else None, cwd=str(tree))
    pattern = re.compile(r"view complete: (\d+) jobs")
    result: dict[str, Any] = {"jobs": jobs}
    try:
        seen = None
        peak = 0.0
        while time.monotonic() - started < timeout and proc.poll() is None:
            peak = max(peak, status_mb(proc.pid).get("VmHWM", 0.0))
            text = log_path.read_text(errors="replace")
            match = pattern.search(text.rsplit("--- start", 1)[-1])
            if match:
                seen = int(match.group(1))
                break
            time.sleep(0.05)
        if seen is None:
            result["died" if proc.poll() is not None else "timed_out"] = True
            result["exit_code"] = proc.poll()
            result["peak_rss_mb"] = peak
            result["seconds_until_then"] = round(time.monotonic() - started, 1)
            return result
        result["start_to_view_complete_s"] = round(time.monotonic() - started, 2)
        result["view_jobs"] = seen
        at_view = status_mb(proc.pid)
        result["at_view_complete"] = {"peak_rss_mb": at_view["VmHWM"], "rss_mb": at_view["VmRSS"]}
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
        if proc.poll() is not None:
            result["died"], result["exit_code"] = True, proc.poll()
            return result
        later = status_mb(proc.pid)
        result[f"after_{int(settle)}s"] = {"peak_rss_mb": later["VmHWM"], "rss_mb": later["VmRSS"]}
        result["written_by_then"] = written(cluster, namespace)
        return result
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        log.close()


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Fat backlog (issue 28) — {report['stamp']}", "",
             f"`{report['command']}`", "",
             f"Operator trees: {', '.join(f'`{t}` at {c}' for t, c in report['operator_trees'].items())}; payload "
             f"{report['payload_bytes']} bytes of {report['payload_shape']} per job ({report['payload_keys']} keys); "
             f"{report['cpus']} CPUs, load average {report['loadavg']} at the end.", "",
             "| jobs | operator | start | to view complete (s) | peak RSS at view complete (MB) | RSS then | "
             f"peak RSS +{report['settle_s']} s | RSS then | jobs written by then | note |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for run in report["runs"]:
        for i, start in enumerate(run["starts"]):
            at = start.get("at_view_complete", {})
            later = start.get(f"after_{int(report['settle_s'])}s", {})
            note = ("died (exit %s) after %s s, peak %s MB" % (start.get("exit_code"), start.get("seconds_until_then"),
                                                                start.get("peak_rss_mb"))
                    if start.get("died") else "timed out" if start.get("timed_out") else "")
            lines.append(f"| {run['jobs']} | {run['commit']} | {'first' if i == 0 else f'restart {i}'} | "
                         f"{start.get('start_to_view_complete_s', '–')} | {at.get('peak_rss_mb', '–')} | "
                         f"{at.get('rss_mb', '–')} | {later.get('peak_rss_mb', '–')} | {later.get('rss_mb', '–')} | "
                         f"{'–' if start.get('written_by_then') is None else start['written_by_then']} | {note} |")
    first = [r for r in report["runs"] if r["tree"] == report["runs"][0]["tree"]]
    lines += ["", "Backlogs created in: " + ", ".join(f"{r['jobs']} jobs {r['create_s']} s" for r in first)]
    lines += ["", "The control plane holding each backlog (after its creation; MB, VmRSS / peak VmHWM): " + "; ".join(
        f"{r['jobs']} jobs: " + ", ".join(f"{c} {m.get('VmRSS')} / {m.get('VmHWM')}"
                                          for c, m in sorted(r.get("control_plane_mb", {}).items())) for r in first)]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", default="1000", help="comma-separated backlog sizes, each on a fresh namespace")
    parser.add_argument("--payload-bytes", type=int, default=PAYLOAD_MAX_BYTES)
    parser.add_argument("--shape", choices=tuple(SHAPES), default="keys",
                        help="small keys (the heaviest once parsed) or 4 KiB strings")
    parser.add_argument("--operator-tree", type=Path, action="append", default=None,
                        help="a checkout whose operator runs (repeat to compare; default: this one)")
    parser.add_argument("--restarts", type=int, default=1)
    parser.add_argument("--settle", type=float, default=20.0, help="seconds measured after view complete")
    parser.add_argument("--in-flight", type=int, default=8, help="creates at once")
    parser.add_argument("--address-space-gb", type=float, default=8.0, help="the operator's RLIMIT_AS; 0: none")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for view complete")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    sizes = [int(n) for n in args.jobs.split(",")]
    trees = [t.resolve() for t in (args.operator_tree or [ROOT])]
    payload = fat_payload(args.payload_bytes, args.shape)
    # etcd's default quota is 2 GiB: 10,000 jobs of 256 KiB are 2.5 GB (and each first write is a revision more).
    cluster = LocalCluster(name=new_name("sextant-fat"), nodes=1,
                           extra_args={"etcd": ["--quota-backend-bytes=17179869184"]})
    cluster.up()
    work = Path(tempfile.mkdtemp(prefix="sextant-fat-"))
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    report: dict[str, Any] = {
        "stamp": stamp, "command": " ".join(["python -m bench.fat_backlog", *sys.argv[1:]]),
        "operator_trees": {str(t): (git_revision(t) or "?") for t in trees}, "payload_bytes": payload_size(payload),
        "payload_keys": len(payload), "payload_shape": SHAPES[args.shape], "settle_s": args.settle,
        "cpus": os.cpu_count(), "runs": []}
    try:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
        cluster.kubectl("wait", "--for=condition=Established", "crd/jobs.sextant.dev", "--timeout=60s")
        for n in sizes:
            ns = f"fat-{n}-" + new_name("x").rsplit("-", 1)[1]
            cluster.kubectl("create", "namespace", ns)
            cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps({
                "apiVersion": "v1", "kind": "List", "items": [
                    {"apiVersion": API, "kind": "Queue", "metadata": {"name": "held"}, "spec": {"concurrency": 10}},
                    {"apiVersion": API, "kind": "Handler", "metadata": {"name": "nobody"}, "spec": {"worker": {}}}]}))

            async def load() -> float:
                async with Kube(kubeconfig.load(str(cluster.kubeconfig))) as kube:
                    return await create_jobs(kube, ns, n, payload, args.in_flight)

            created = asyncio.run(load())
            print(f"{n} jobs created in {created:.0f} s", file=sys.stderr)
            # The API server's and etcd's memory beside the backlog: the API server's watch cache holds every job
            # decoded, which is what bounds the size of a backlog this machine can hold (not the operator).
            held = {c: status_mb(pid) for c, pid in cluster.pids().items() if c in ("kube-apiserver", "etcd")}
            for t, tree in enumerate(trees):
                starts = []
                for i in range(1 + args.restarts):
                    start = start_once(cluster, tree, ns, n, work / f"operator-{n}-{t}.log", args.settle,
                                       args.address_space_gb, args.timeout)
                    print(json.dumps({"tree": str(tree), **start}), file=sys.stderr)
                    starts.append(start)
                report["runs"].append({"jobs": n, "tree": str(tree), "commit": (git_revision(tree) or "?"),
                                       "create_s": round(created, 1), "control_plane_mb": held, "starts": starts})
            cluster.kubectl("delete", "namespace", ns, "--wait=false")
        report["loadavg"] = [round(x, 2) for x in os.getloadavg()]
        base = write_report(args.out, f"{stamp}-fat-backlog", report, markdown(report))
        print(f"wrote {base}.json and .md; operator logs in {work}", file=sys.stderr)
        return 0
    finally:
        cluster.down()


if __name__ == "__main__":
    sys.exit(main())
