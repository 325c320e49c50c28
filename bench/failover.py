"""Failover time of two operator replicas (issue 11): leader killed → first admission by the new leader.

    .venv/bin/python -m bench.failover [--trials 10] [--lease 15s --renew 10s --retry 2s]

A fresh local control plane, two `sextant operator --leader-elect` replicas and a steady trickle of jobs
(10/s). Each trial kills the leader with SIGKILL and measures, from the kill, (a) when the other replica
holds the Lease and (b) when the first pod created more than a second after the kill appears (the dead
leader's last creates land within that second; nobody else admits until the standby leads). The killed
replica is then started again as the standby.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch

from sextant.client import Client
from sextant.kube.kubeconfig import load
from sextant.dev.localcluster import LocalCluster, new_name
from sextant.resources.crds import RESOURCES, crd

NS = "failover"
QUEUE = {"apiVersion": "sextant.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "q", "namespace": NS},
         "spec": {"concurrency": 50}}
HANDLER = {"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler", "metadata": {"name": "h", "namespace": NS},
           "spec": {"heartbeat": False, "template": {"spec": {
               "nodeSelector": {"type": "kwok"},
               "containers": [{"name": "h", "image": "example/h:1"}]}}}}


def replica(kubeconfig: Path, log: Path, timing: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sextant", "--kubeconfig", str(kubeconfig), "operator", "--leader-elect",
         "--leader-election-namespace", NS, "--watch-namespace", NS, "--http-port", "-1", "--no-events", *timing],
        stdout=log.open("ab"), stderr=subprocess.STDOUT)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--lease", default="15s")
    p.add_argument("--renew", default="10s")
    p.add_argument("--retry", default="2s")
    args = p.parse_args(argv)
    timing = ["--leader-election-lease-duration", args.lease, "--leader-election-renew-deadline", args.renew,
              "--leader-election-retry-period", args.retry]
    cluster = LocalCluster(name=new_name("sextant-failover")).up()
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / cluster.name
    logs.mkdir(parents=True, exist_ok=True)
    try:
        cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(crd(e)) for e in RESOURCES))
        cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        cluster.kubectl("create", "namespace", NS)
        cluster.kubectl("apply", "-f", "-", input=json.dumps(QUEUE) + "\n---\n" + json.dumps(HANDLER))
        api = k8s_client.ApiClient(k8s_config.load_kube_config(str(cluster.kubeconfig)) or None)
        core, coord = k8s_client.CoreV1Api(api), k8s_client.CoordinationV1Api(api)
        pods_seen: dict[str, float] = {}  # pod → local time first seen
        stop = threading.Event()

        def watch_pods() -> None:
            while not stop.is_set():
                try:
                    for ev in k8s_watch.Watch().stream(core.list_namespaced_pod, NS, timeout_seconds=5):
                        pods_seen.setdefault(ev["object"].metadata.name, time.monotonic())
                except Exception:
                    time.sleep(0.1)

        def trickle() -> None:
            client = Client(load(str(cluster.kubeconfig)), user_agent="bench-failover")
            while not stop.is_set():
                client.create_job(NS, queue="q", handler="h")
                time.sleep(0.1)

        def holder() -> str:
            try:
                return coord.read_namespaced_lease("sextant-operator", NS).spec.holder_identity or ""
            except Exception:
                return ""

        threading.Thread(target=watch_pods, daemon=True).start()
        procs = [replica(cluster.kubeconfig, logs / f"replica-{i}.log", timing) for i in range(2)]
        threading.Thread(target=trickle, daemon=True).start()
        lease_times, admission_times = [], []
        for trial in range(args.trials):
            deadline = time.monotonic() + 60
            while not holder() and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(3)  # both replicas warm
            lead = holder()
            index = next(i for i, proc in enumerate(procs) if f"_{proc.pid}_" in lead)
            procs[index].send_signal(signal.SIGKILL)
            procs[index].wait()
            killed = time.monotonic()
            while holder() in ("", lead) and time.monotonic() < killed + 60:
                time.sleep(0.05)
            lease_times.append(time.monotonic() - killed)
            while time.monotonic() < killed + 60:
                after = [at for at in list(pods_seen.values()) if at > killed + 1.0]
                if after:
                    admission_times.append(min(after) - killed)
                    break
                time.sleep(0.05)
            print(f"trial {trial + 1}: lease taken after {lease_times[-1]:.2f}s, "
                  f"first admission after {admission_times[-1]:.2f}s", flush=True)
            procs[index] = replica(cluster.kubeconfig, logs / f"replica-{index}.log", timing)
        stop.set()
        for proc in procs:
            proc.terminate()
            proc.wait(20)
        print(json.dumps({"trials": args.trials, "lease": args.lease,
                          "first_admission_s": {"p50": statistics.median(admission_times),
                                                "max": max(admission_times)},
                          "lease_taken_s": {"p50": statistics.median(lease_times), "max": max(lease_times)}}))
    finally:
        cluster.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
