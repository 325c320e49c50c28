"""One run: a configuration (S, A0, A1, S0, W) × a workload (a burst, a burst with failing first attempts, a fixed
arrival rate), each on a fresh local control plane with the API server's audit log on."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sextant.kube import kubeconfig
from sextant.resources import contract
from sextant.dev.localcluster import LocalCluster, LocalClusterError, new_name

from . import identities, measure, profile, stages
from .api import BATCH, RECORDER_USER_AGENT, SEXTANT, Api, Kind, Recorder

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO / "crds"
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
NODE_SELECTOR = {"type": "kwok"}
CONTAINER = {"name": "handler", "image": "registry.example/handler:1", "command": ["run"]}

TUNED_CM = ["--kube-api-qps=200", "--kube-api-burst=400", "--concurrent-job-syncs=50"]
# kwokctl starts kube-scheduler without --config, so its (deprecated) client flags still apply.
TUNED_SCHEDULER = ["--kube-api-qps=200", "--kube-api-burst=400"]

# The benchmark's Queue. concurrency: batch/v1 Jobs have no cap across jobs (each runs its one pod as soon as the
# controller gets to it), so Sextant's queue must not be the limit either: 100000 is above every workload here,
# so every job is admitted the moment the operator sees it. maxAttempts 2 and a 10 s exponential backoff without
# jitter mirror the batch side of the failing workloads (backoffLimitPerIndex 1; the Job controller waits 10 s,
# doubling, before replacing a failed pod).
QUEUE_SPEC = {"concurrency": 100000, "maxAttempts": 2,
              "backoff": {"policy": "exponential", "initial": "10s", "factor": 2, "max": "6m", "jitter": 0}}
# Issue 32's admission cost: a rate limit and a per-key limit that every admission checks (each start noted in the
# window, keys taking turns) but that never bind on these workloads, so that the run's shape is S's or W's and only
# the operator's CPU per job differs.
ADMISSION_SPEC = {"rateLimit": {"starts": 100000, "per": "10m"}, "perKeyConcurrency": 100000}
ADMISSION_KEYS = 100


@dataclass(frozen=True)
class Config:
    name: str
    kind: Kind
    extra_args: dict[str, list[str]]
    description: str
    operator_args: tuple[str, ...] = ()
    workers: bool = False  # worker mode: the Handlers are served by `sextant worker` processes, no pods
    admission: bool = False  # issue 32: the Queue with ADMISSION_SPEC, the jobs spread over ADMISSION_KEYS keys
    node: bool = False  # issue 30: the workers are @sextant/node's sextant-worker (sdk/node, built by make node-sdk)
    baseline: bool = False  # the operator of another checkout (Options.baseline), for side-by-side figures


WORKER_MODULE = "bench.workerhandlers"  # the no-op SDK handlers the workers of W serve
NODE_WORKER = REPO / "sdk" / "node" / "dist" / "bin" / "sextant-worker.js"
NODE_WORKER_MODULE = "bench/workerhandlers.mjs"  # the same handlers for WN's Node workers


CONFIGS = {
    "A0": Config("A0", BATCH, {}, "batch/v1 Jobs; kube-controller-manager and kube-scheduler defaults"),
    "A1": Config("A1", BATCH, {"kube-controller-manager": TUNED_CM, "kube-scheduler": TUNED_SCHEDULER},
                 "batch/v1 Jobs; kube-controller-manager " + " ".join(TUNED_CM) + "; kube-scheduler "
                 + " ".join(TUNED_SCHEDULER)),
    # The scheduler binds Sextant's pods as it binds the Job controller's: it is shared infrastructure, so S runs
    # with A1's scheduler (at its default 50 qps it would cap any job system at ~50 pods/s). Nothing of the
    # controller-manager works for S; it keeps its defaults. S0 is Sextant on an all-default control plane.
    "S": Config("S", SEXTANT, {"kube-scheduler": TUNED_SCHEDULER},
                "Sextant operator, shipped defaults; kube-scheduler " + " ".join(TUNED_SCHEDULER)),
    "S0": Config("S0", SEXTANT, {}, "Sextant operator, shipped defaults; all control-plane defaults"),
    # Not shipped: the default before session 2 (16 parallel reconciles), for comparison.
    "S16": Config("S16", SEXTANT, {"kube-scheduler": TUNED_SCHEDULER},
                  "Sextant operator with --workers 16; kube-scheduler " + " ".join(TUNED_SCHEDULER),
                  ("--workers", "16")),
    # Not shipped, for the split of the operator's CPU (issue 17): S without the full-cluster gate.
    "SG": Config("SG", SEXTANT, {"kube-scheduler": TUNED_SCHEDULER},
                 "Sextant operator with --max-pending-pods 0 (no gate); kube-scheduler " + " ".join(TUNED_SCHEDULER),
                 ("--max-pending-pods", "0")),
    # Not shipped: S whose new jobs are written `queued` once they wait over 5 s (the default until issue 44: a job
    # now reads `queued` without a write), for what that write costs a burst.
    "SQ": Config("SQ", SEXTANT, {"kube-scheduler": TUNED_SCHEDULER},
                 "Sextant operator with --record-queued-after 5s; kube-scheduler " + " ".join(TUNED_SCHEDULER),
                 ("--record-queued-after", "5s")),
    # Not shipped: S with the operator of another checkout (--baseline DIR), so that an older commit and this one
    # are measured in one run on one machine (issue 17's side-by-side CPU figures).
    "SB": Config("SB", SEXTANT, {"kube-scheduler": TUNED_SCHEDULER},
                 "S with the operator of the --baseline checkout; kube-scheduler " + " ".join(TUNED_SCHEDULER),
                 baseline=True),
    # Worker mode (issue 15): the same Jobs, served by long-running `sextant worker` processes running a no-op
    # async SDK handler; no pod per attempt, so neither the scheduler nor kwok has anything to do.
    "W": Config("W", SEXTANT, {"kube-scheduler": TUNED_SCHEDULER},
                "Sextant operator, shipped defaults; jobs served by `sextant worker` processes (no-op async SDK "
                "handler, --worker-processes × --worker-slots); kube-scheduler " + " ".join(TUNED_SCHEDULER),
                workers=True),
    # Not shipped: W with the `queued` write of jobs that wait over 5 s for a slot (the default until issue 44), SQ's
    # counterpart.
    "WQ": Config("WQ", SEXTANT, {"kube-scheduler": TUNED_SCHEDULER},
                 "W with --record-queued-after 5s; kube-scheduler " + " ".join(TUNED_SCHEDULER),
                 ("--record-queued-after", "5s"), workers=True),
    # Not shipped: W with the operator and the workers of the --baseline checkout (the previous protocol's workers
    # with their own rights: jobs/status, Leases), for W/WB in one run.
    "WB": Config("WB", SEXTANT, {"kube-scheduler": TUNED_SCHEDULER},
                 "W with the operator and `sextant worker` of the --baseline checkout; kube-scheduler "
                 + " ".join(TUNED_SCHEDULER), workers=True, baseline=True),
    # Issue 30: W with @sextant/node's workers (same processes × slots, the same no-op handlers in JavaScript).
    "WN": Config("WN", SEXTANT, {"kube-scheduler": TUNED_SCHEDULER},
                 "W with @sextant/node's sextant-worker processes (no-op async JavaScript handler, --worker-processes "
                 "× --worker-slots); kube-scheduler " + " ".join(TUNED_SCHEDULER), workers=True, node=True),
    # Not shipped (issue 32): S and W with a rate limit and 100 concurrency keys (ADMISSION_SPEC), beside S and W.
    "SA": Config("SA", SEXTANT, {"kube-scheduler": TUNED_SCHEDULER},
                 "S with a rate limit and perKeyConcurrency on the queue, jobs over 100 concurrency keys",
                 admission=True),
    "WA": Config("WA", SEXTANT, {"kube-scheduler": TUNED_SCHEDULER},
                 "W with a rate limit and perKeyConcurrency on the queue, jobs over 100 concurrency keys",
                 workers=True, admission=True),
}


@dataclass(frozen=True)
class Workload:
    name: str
    jobs: int
    fail: float = 0.0  # fraction of jobs whose first attempt fails
    rate: float | None = None  # arrivals per second; None: a burst (as fast as the load generator goes)

    @property
    def failing(self) -> bool:
        return self.fail > 0


def failing_job(i: int, fraction: float) -> bool:
    """Spread evenly: job i fails its first attempt when the running count of failures would fall behind."""
    return fraction > 0 and math.floor((i + 1) * fraction) > math.floor(i * fraction)


# --- objects --------------------------------------------------------------------------------------------------

def sextant_job(name: str, i: int, fail: bool, keys: int = 0) -> dict[str, Any]:
    spec = {"queue": "bench", "handler": "fail-first" if fail else "ok", "payload": {"i": i}}
    if keys:
        spec["concurrencyKey"] = f"k{i % keys}"
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def batch_job(name: str, i: int, fail: bool, indexed: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"completions": 1, "parallelism": 1}
    if indexed:  # the failing workloads: the per-index failure count is what marks a pod's attempt (stages.py)
        spec.update(completionMode="Indexed", backoffLimitPerIndex=1)
    annotations = dict(stages.FAIL_FIRST_BATCH) if fail else {}
    spec["template"] = {
        "metadata": {"annotations": annotations, "labels": {"bench.sextant.dev/i": str(i)}},
        "spec": {"restartPolicy": "Never", "tolerations": [KWOK_TOLERATION], "nodeSelector": NODE_SELECTOR,
                 "containers": [CONTAINER]},
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def handler(name: str, annotations: dict[str, str], worker: bool = False) -> dict[str, Any]:
    if worker:  # an SDK function of WORKER_MODULE, registered under the Handler's name (docs/workers.md)
        return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler", "metadata": {"name": name},
                "spec": {"worker": {}}}
    # heartbeat false: nothing runs in a kwok pod, so no runner renews a lease (README: an image without the runner)
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler", "metadata": {"name": name},
            "spec": {"heartbeat": False, "template": {
                "metadata": {"annotations": annotations},
                "spec": {"tolerations": [KWOK_TOLERATION], "nodeSelector": NODE_SELECTOR, "containers": [CONTAINER]}}}}


def sextant_setup(namespace: str, workers: bool = False, admission: bool = False) -> list[dict[str, Any]]:
    queue = {"apiVersion": "sextant.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "bench"},
             "spec": {**QUEUE_SPEC, **(ADMISSION_SPEC if admission else {})}}
    objs = [queue, handler("ok", {}, workers), handler("fail-first", dict(stages.FAIL_FIRST_SEXTANT), workers)]
    for obj in objs:
        obj["metadata"]["namespace"] = namespace
    return objs


# --- the operator as a process --------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _entry(source: Path | None) -> str:
    """The module that runs `sextant`: the package itself, or in a checkout from before its composition root
    (sextant/__main__.py), the CLI's module."""
    if source is not None and not (source / "operator" / "sextant" / "__main__.py").exists():
        return "sextant.cli.main"
    return "sextant"


class OperatorProcess:
    """`sextant operator` with its shipped defaults (all namespaces, 64 workers, Events on, log level warning)."""

    def __init__(self, kubeconfig_path: Path, log_path: Path, extra: list[str] | None = None,
                 source: Path | None = None) -> None:
        self.port = free_port()
        self.source = source  # another checkout whose operator/ runs instead of this one's
        self.log_path = log_path
        self.cmd = [sys.executable, "-m", _entry(source), "--kubeconfig", str(kubeconfig_path), "operator",
                    "--http-host", "127.0.0.1", "--http-port", str(self.port), *(extra or [])]
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    def start(self) -> None:
        log = open(self.log_path, "ab")
        self.started_at = time.monotonic()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if self.source is not None:
            env["PYTHONPATH"] = str(self.source / "operator")
        self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def get(self, path: str, timeout: float = 2) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, b""
        except OSError:
            return 0, b""

    async def wait_ready(self, timeout: float = 300, interval: float = 0.05) -> float:
        """Seconds from start until /readyz answers 200."""
        deadline = time.monotonic() + timeout
        loop = asyncio.get_running_loop()
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"the operator exited with {self.proc.returncode}; see {self.log_path}")
            status, _ = await loop.run_in_executor(None, self.get, "/readyz", 1)
            if status == 200:
                return time.monotonic() - self.started_at
            await asyncio.sleep(interval)
        raise RuntimeError(f"the operator was not ready after {timeout:.0f} s; see {self.log_path}")

    def metrics(self) -> dict[str, float]:
        """sextant_api_requests_total by (verb, resource, code), from /metrics."""
        status, body = self.get("/metrics", 10)
        out: dict[str, float] = {}
        if status != 200:
            return out
        for line in body.decode().splitlines():
            if line.startswith("sextant_api_requests_total{"):
                labels, _, value = line.rpartition(" ")
                out[labels.removeprefix("sextant_api_requests_total")] = float(value)
        return out

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


class WorkerProcess:
    """`sextant worker` serving the benchmark's namespace with the no-op SDK handlers of WORKER_MODULE."""

    def __init__(self, kubeconfig_path: Path, namespace: str, name: str, slots: int, log_path: Path,
                 source: Path | None = None, node: bool = False) -> None:
        self.name = name
        self.log_path = log_path
        self.source = source  # another checkout whose worker runs instead of this one's
        flags = ["-n", namespace, "--concurrency", str(slots), "--name", name, "--log-level", "warning"]
        if node:  # @sextant/node's worker takes the same flags
            if not NODE_WORKER.exists():
                raise RuntimeError(f"{NODE_WORKER} is not built: run `make node-sdk` first")
            self.cmd = ["node", str(NODE_WORKER), "--kubeconfig", str(kubeconfig_path), "--module",
                        NODE_WORKER_MODULE, *flags]
        else:
            self.cmd = [sys.executable, "-m", _entry(source), "--kubeconfig", str(kubeconfig_path), "worker",
                        "--module", WORKER_MODULE, *flags]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if self.source is not None:
            env["PYTHONPATH"] = str(self.source / "operator")
        with open(self.log_path, "ab") as log_file:  # cwd: the repository, so that `bench` imports
            self.proc = subprocess.Popen(self.cmd, stdout=log_file, stderr=subprocess.STDOUT, cwd=REPO, env=env)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def check(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"worker {self.name} exited with {self.proc.returncode}; see {self.log_path}")

    def drain(self) -> None:
        """SIGTERM: a drain (nothing runs any more, so it ends within a second or two)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.drain()
        try:
            self.proc.wait(40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


async def wait_workers(api: Api, namespace: str, workers: list[WorkerProcess], leases: bool = False,
                       timeout: float = 60) -> float:
    """Seconds until every worker has registered, so that the operator can assign it jobs: its Worker object
    exists (protocol v2), or with leases=True (the baseline's protocol) its Lease."""
    t0 = time.monotonic()
    wanted = {w.name for w in workers}
    path = (f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases" if leases
            else f"/apis/sextant.dev/v1alpha1/namespaces/{namespace}/workers")
    while time.monotonic() - t0 < timeout:
        for w in workers:
            w.check()
        objs, _ = await api.list_all(path, {"labelSelector": contract.LABEL_WORKER})
        names = {(obj["metadata"].get("labels") or {}).get(contract.LABEL_WORKER) for obj in objs}
        if wanted <= names:
            return time.monotonic() - t0
        await asyncio.sleep(0.2)
    raise RuntimeError(f"workers {sorted(wanted)} did not register within {timeout:.0f} s")


# --- a cluster per configuration ------------------------------------------------------------------------------

@dataclass
class Options:
    out: Path
    nodes: int = 20  # kwok nodes take 110 pods each: 2 would leave pods of a burst unschedulable for a while
    audit: bool = True  # the API server's audit log: API requests per client (costs the API server some CPU)
    nice: int = 0  # renice the measured processes (control plane, operator, load generator); 0: leave them
    in_flight: int = 100
    timeout: float = 1800
    profile: bool = False
    verbose: bool = True
    worker_processes: int = 4  # W: `sextant worker` processes
    worker_slots: int = 64  # W: --concurrency of each
    baseline: Path | None = None  # SB, WB: a checkout whose operator/ is run instead of this one's


def log(opts: Options, message: str) -> None:
    if opts.verbose:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def renice(pids: Any, nice: int) -> None:
    """Set every thread of these processes to `nice` (threads they start later inherit it)."""
    if not nice:
        return
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                os.setpriority(os.PRIO_PROCESS, int(task.name), nice)
            except (OSError, ValueError):
                pass


def start_cluster(config: Config, opts: Options, label: str, attempts: int = 3) -> LocalCluster:
    for attempt in range(1, attempts + 1):
        name = new_name(f"bench-{config.name.lower()}-{label}")[:42].rstrip("-")
        # the API server rotates its audit log at 100 MB by default (a 10k burst writes more): keep one file
        extra = {**config.extra_args, "kube-apiserver": [*config.extra_args.get("kube-apiserver", []),
                                                          "--audit-log-maxsize=0"]}
        cluster = LocalCluster(name=name, nodes=opts.nodes, extra_args=extra if opts.audit else config.extra_args,
                               audit=opts.audit,
                               stages=stages.write(opts.out))
        if cluster.external:
            raise SystemExit("the benchmark starts its own control planes (component flags, audit log): "
                             "unset SEXTANT_TEST_KUBECONFIG")
        t = time.monotonic()
        try:
            cluster.up(timeout=60)
        except LocalClusterError as exc:
            # kwokctl picks free ports when it creates a cluster; another cluster starting at the same moment on
            # this machine can take one first (etcd: "bind: address already in use"). A new cluster gets new ports.
            if attempt == attempts:
                raise
            log(opts, f"{config.name}: cluster {name} did not start ({str(exc).splitlines()[0]}); again")
            continue
        renice(cluster.pids().values(), opts.nice)
        log(opts, f"{config.name}: cluster {name} up in {time.monotonic() - t:.1f} s")
        return cluster
    raise AssertionError("unreachable")


def prepare_namespace(cluster: LocalCluster, config: Config, namespace: str, crds_installed: bool,
                      baseline: Path | None = None) -> None:
    cluster.kubectl("create", "namespace", namespace)
    # pods are refused until the namespace's default service account exists
    cluster.kubectl("wait", "--for=create", "serviceaccount/default", "-n", namespace, "--timeout=60s", timeout=70)
    if config.kind is SEXTANT:
        if not crds_installed:
            # the baseline's operator runs on its own CRDs
            crds = baseline / "crds" if config.baseline and baseline is not None else CRDS
            cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
            cluster.kubectl("wait", "--for=condition=Established", "crd/jobs.sextant.dev", "crd/queues.sextant.dev",
                            "crd/handlers.sextant.dev", "--timeout=60s", timeout=70)
        cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                              "items": sextant_setup(namespace, config.workers,
                                                                                     config.admission)}))


# --- one workload ---------------------------------------------------------------------------------------------

def _apiserver_metrics(cluster: LocalCluster) -> dict[str, dict[str, float]] | None:
    proc = cluster.kubectl("get", "--raw", "/metrics", check=False, timeout=60)
    return measure.apiserver_metrics(proc.stdout) if proc.returncode == 0 else None


async def generate(api: Api, config: Config, workload: Workload, namespace: str, rec: Recorder,
                   in_flight: int) -> dict[str, Any]:
    """Create the workload's jobs: a burst (in_flight creates at a time) or open-loop arrivals at a fixed rate."""
    path = config.kind.jobs_path(namespace)
    indexed = workload.failing

    def body(i: int) -> tuple[str, dict[str, Any]]:
        name = f"job-{i:06d}"
        fail = failing_job(i, workload.fail)
        return name, (sextant_job(name, i, fail, ADMISSION_KEYS if config.admission else 0) if config.kind is SEXTANT
                      else batch_job(name, i, fail, indexed))

    async def create(i: int) -> None:
        name, obj = body(i)
        job = rec.job(name)
        job.sent = time.time()
        created = await api.create(path, obj)
        job.created = time.time()
        job.created_ts = created["metadata"].get("creationTimestamp")

    t0 = time.time()
    late = 0.0
    if workload.rate is None:
        counter = iter(range(workload.jobs))

        async def worker() -> None:
            for i in counter:
                await create(i)

        await asyncio.gather(*(worker() for _ in range(min(in_flight, workload.jobs))))
    else:
        gate = asyncio.Semaphore(in_flight * 4)
        tasks = []

        async def bounded(i: int) -> None:
            async with gate:
                await create(i)

        for i in range(workload.jobs):
            due = t0 + i / workload.rate
            delay = due - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                late = max(late, -delay)
            tasks.append(asyncio.create_task(bounded(i)))
        await asyncio.gather(*tasks)
    t1 = time.time()
    return {"started": t0, "duration_s": round(t1 - t0, 3), "creates": workload.jobs,
            "create_rate": round(workload.jobs / (t1 - t0), 1) if t1 > t0 else None,
            "most_late_s": round(late, 3), "retries": api.retries}


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[k]


def summary(values: list[float], scale: float = 1000.0) -> dict[str, Any]:
    """p50/p99/max (ms by default) and the count."""
    return {"n": len(values), **{k: (round(v * scale, 1) if v is not None else None)
                                 for k, v in (("p50", pct(values, 50)), ("p90", pct(values, 90)),
                                              ("p99", pct(values, 99)), ("max", pct(values, 100)))}}


def ts_seconds(stamp: str | None) -> float | None:
    if not stamp:
        return None
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def arrival(rec: Recorder, t0: float) -> dict[str, Any] | None:
    """Whether completions keep pace while the jobs are still arriving (issue 27: a create flood must not starve the
    lifecycle): jobs succeeded by the moment the last create returned, and the completion rate while creates arrive
    against the rate after the last one."""
    created = [j.created for j in rec.jobs.values() if j.created is not None]
    if not created:
        return None
    last = max(created) - t0
    succeeded = sorted(j.terminal - t0 for j in rec.jobs.values()
                       if j.terminal is not None and j.outcome == "succeeded")
    by_last = sum(1 for t in succeeded if t <= last)
    out: dict[str, Any] = {"last_create_s": round(last, 3),
                           "creates_per_s": round(len(created) / last, 1) if last > 0 else None,
                           "succeeded_by_last_create": by_last,
                           "succeeded_by_last_create_fraction": round(by_last / len(created), 3),
                           "completions_per_s_while_arriving": round(by_last / last, 1) if last > 0 else None,
                           "completions_per_s_after": None}
    if succeeded and succeeded[-1] > last:
        out["completions_per_s_after"] = round((len(succeeded) - by_last) / (succeeded[-1] - last), 1)
    # completions per second of arrivals while they arrive: 1.0 = every created job is done as fast as they come
    rate, per_s = out["creates_per_s"], out["completions_per_s_while_arriving"]
    out["pace"] = round(per_s / rate, 3) if rate and per_s is not None else None
    return out


def figures(rec: Recorder, workload: Workload, t0: float, final_jobs: list[dict], final_pods: list[dict],
            kind: Kind, workers: bool = False) -> dict[str, Any]:
    jobs = rec.jobs
    done = sorted(j.terminal - t0 for j in jobs.values() if j.terminal is not None)
    n = workload.jobs
    out: dict[str, Any] = {"jobs": n, "terminal": len(done)}
    out["outcomes"] = dict(Counter(j.outcome or "unfinished" for j in jobs.values()))
    out["arrival"] = arrival(rec, t0)
    if done:
        wall = done[-1]
        out["wall_s"] = round(wall, 3)
        out["jobs_per_s"] = round(len(done) / wall, 2) if wall > 0 else None
        i10, i90 = math.ceil(0.1 * n) - 1, math.ceil(0.9 * n) - 1
        if len(done) > i90 > i10 and done[i90] > done[i10]:
            out["jobs_per_s_10_90"] = round((i90 - i10) / (done[i90] - done[i10]), 2)
        out["completed_over_time"] = [round(t, 3) for t in done]
    # latencies from the watch (local receive times) and the create responses
    to_pod, to_terminal, e2e, to_pod_ts, create_latency, to_running = [], [], [], [], [], []
    for j in jobs.values():
        if j.sent is not None and j.created is not None:
            create_latency.append(j.created - j.sent)
        # worker mode: the handler's start (the Job shows `running` only for an attempt past its first second);
        # pod mode: the first watch event showing it running
        running = j.started if workers and j.started is not None else j.running
        if running is not None and j.created is not None:
            to_running.append(max(0.0, running - j.created))
        pods = sorted(j.pods.values(), key=lambda p: p.added)
        if pods and j.created is not None:
            to_pod.append(pods[0].added - j.created)
            a, b = ts_seconds(pods[0].created_ts), ts_seconds(j.created_ts)
            if a is not None and b is not None:
                to_pod_ts.append(a - b)
        if pods and j.terminal is not None and pods[-1].finished is not None:
            to_terminal.append(j.terminal - pods[-1].finished)
        if j.terminal is not None and j.created is not None:
            e2e.append(j.terminal - j.created)
    out["latency_ms"] = {
        "create_request": summary(create_latency),
        "create_to_pod_created": summary(to_pod),
        "create_to_pod_created_by_timestamps": summary(to_pod_ts),  # 1 s resolution: differences of whole seconds
        "create_to_running": summary(to_running),
        "pod_finished_to_job_terminal": summary(to_terminal),
        "create_to_job_terminal": summary(e2e),
    }
    # duplicate pods: more pods than the attempts the job counted
    pods_by_job: dict[str, set[str]] = {name: set(j.pods) for name, j in jobs.items()}
    for pod in final_pods:
        job = kind.job_of_pod(pod)
        if job:
            pods_by_job.setdefault(job, set()).add(pod["metadata"]["name"])
    duplicates = []
    for obj in final_jobs:
        name = obj["metadata"]["name"]
        attempts = kind.attempts(obj)
        if len(pods_by_job.get(name, ())) > attempts:
            duplicates.append({"job": name, "pods": sorted(pods_by_job[name]), "attempts": attempts})
    out["duplicate_pods"] = len(duplicates)
    out["duplicates"] = duplicates[:20]
    out["pods"] = sum(len(p) for p in pods_by_job.values())
    out["attempts"] = sum(kind.attempts(o) for o in final_jobs)
    out["watch_events"] = rec.events
    return out


async def run_workload(cluster: LocalCluster, config: Config, workload: Workload, namespace: str,
                       opts: Options, label: str) -> dict[str, Any]:
    conn = kubeconfig.load(str(cluster.kubeconfig))
    # each component as its own service account (identities.py): the admin would skip flow control altogether
    baseline = opts.baseline if config.baseline else None
    # A baseline from before protocol v2 (no Worker CRD) runs workers of the previous protocol, with their rights.
    previous_protocol = baseline is not None and not (baseline / "crds" / "workers.sextant.dev.yaml").exists()
    ids = identities.setup(cluster, opts.out, label, baseline_workers=config.workers and previous_protocol)
    operator = None
    workers: list[WorkerProcess] = []
    spy = None
    result: dict[str, Any] = {"config": config.name, "workload": workload.name, "cluster": cluster.name,
                              "rate": workload.rate, "fail_fraction": workload.fail,
                              "identities": {"operator": identities.OPERATOR_USER, "workers": identities.WORKER_USER,
                                             "loadgen": identities.LOADGEN_USER}}
    try:
        if config.kind is SEXTANT:
            operator = OperatorProcess(ids.operator, opts.out / f"operator-{label}.log",
                                       list(config.operator_args), baseline)
            operator.start()
            renice([operator.pid], opts.nice)
            result["operator_start_to_ready_s"] = round(await operator.wait_ready(), 2)
        async with Api(conn, in_flight=opts.in_flight, user_agent=RECORDER_USER_AGENT) as api, \
                Api(conn.with_token(ids.loadgen_token), in_flight=opts.in_flight) as loadgen_api:
            if config.workers:
                workers = [WorkerProcess(ids.worker, namespace, f"bench-w{i}", opts.worker_slots,
                                         opts.out / f"worker-{label}-{i}.log", baseline, node=config.node)
                           for i in range(opts.worker_processes)]
                for w in workers:
                    w.start()
                renice([w.pid for w in workers], opts.nice)
                result["workers"] = {"processes": len(workers), "slots": opts.worker_slots,
                                     "start_to_registered_s": round(await wait_workers(
                                         api, namespace, workers, leases=previous_protocol), 2)}
            rec = Recorder(api, config.kind, namespace)
            await rec.start()
            pids = cluster.pids()
            if operator is not None:
                pids["operator"] = operator.pid
            pids.update({f"worker-{i}": w.pid for i, w in enumerate(workers)})
            usage = measure.Usage(pids)
            if opts.profile and operator is not None:
                spy = profile.Spy(operator.pid, opts.out / f"profile-{label}.txt")
                spy.start()
                usage.pids["py-spy"] = spy.pid
            served_before = _apiserver_metrics(cluster)
            usage.start()
            t_start = time.time()
            log(opts, f"{config.name} {workload.name}: creating {workload.jobs} jobs")
            gen = await generate(loadgen_api, config, workload, namespace, rec, opts.in_flight)
            t0 = gen["started"]
            deadline = time.monotonic() + opts.timeout
            while rec.terminal < workload.jobs and time.monotonic() < deadline:
                for w in workers:
                    w.check()
                rec.changed.clear()
                try:
                    await asyncio.wait_for(rec.changed.wait(), 5)
                except asyncio.TimeoutError:
                    pass
            t_end = time.time()
            usage.stop()
            if served_before is not None and (served_after := _apiserver_metrics(cluster)) is not None:
                result["apiserver_per_job"] = measure.apiserver_delta(served_before, served_after, workload.jobs)
            timed_out = rec.terminal < workload.jobs
            log(opts, f"{config.name} {workload.name}: {rec.terminal}/{workload.jobs} terminal after "
                      f"{t_end - t0:.1f} s" + (" (timed out)" if timed_out else ""))
            if spy is not None:
                spy.stop()
                result["profile"] = spy.summary(t_end - t_start)
            if operator is not None:
                result["operator_memory_mb"] = measure.memory_mb(operator.pid)
                result["operator_metrics"] = operator.metrics()
            final_jobs, _ = await api.list_all(config.kind.jobs_path(namespace))
            final_pods, _ = await api.list_all(f"/api/v1/namespaces/{namespace}/pods")
            await rec.stop()
            loadgen = {**gen, "requests": dict(loadgen_api.requests)}
        result["timed_out"] = timed_out
        result.update(figures(rec, workload, t0, final_jobs, final_pods, config.kind, config.workers))
        result["usage"] = usage.result()
        result["loadgen"] = loadgen
        window = (t0 - 0.5, t_end + 0.5)
        result["window"] = {"start": t0, "end": t_end}
    finally:
        if spy is not None:
            spy.stop()
        # the workers first, all at once: a drain ends with the operator's removal of each Worker's finalizer
        for w in workers:
            w.drain()
        for w in workers:
            w.stop()
        if operator is not None:
            operator.stop()
    if cluster.audit_log is not None:
        audit = measure.audit_counts(cluster.audit_log, *window)
        result["api"] = audit
        result["api_per_job"] = measure.per_job(audit, workload.jobs)
    return result


@dataclass
class Plan:
    runs: list[tuple[str, Workload]]  # (configuration, workload), in order
    a0_max_jobs: int = 1000
    same_cluster: bool = False  # one cluster per configuration, workloads one after another (the smoke test)
    skipped: list[str] = field(default_factory=list)


async def run_plan(plan: Plan, opts: Options) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    runs = []
    for name, w in plan.runs:
        if name == "A0" and w.jobs > plan.a0_max_jobs:
            plan.skipped.append(f"A0 {w.name}: more than --a0-max-jobs={plan.a0_max_jobs} jobs "
                                f"(at ~3.4 jobs/s it would take ~{w.jobs / 3.4 / 60:.0f} min)")
            continue
        runs.append((name, w))
    cluster: LocalCluster | None = None
    cluster_config: str | None = None
    crds = False
    try:
        for name, w in runs:
            config = CONFIGS[name]
            label = f"{config.name}-{w.name}"
            if cluster is None or not plan.same_cluster or cluster_config != name:
                if cluster is not None:
                    cluster.down()
                cluster, cluster_config, crds = start_cluster(config, opts, w.name), name, False
            namespace = f"bench-{w.name}".lower()
            prepare_namespace(cluster, config, namespace, crds, opts.baseline)
            crds = True
            result = await run_workload(cluster, config, w, namespace, opts, label)
            result["description"] = config.description
            results.append(result)
            (opts.out / f"{label}.json").write_text(json.dumps(result, indent=1))
            if not plan.same_cluster:
                cluster.down()
                cluster = None
    finally:
        if cluster is not None:
            cluster.down()
    return results


def run(plan: Plan, opts: Options) -> list[dict[str, Any]]:
    return asyncio.run(run_plan(plan, opts))
