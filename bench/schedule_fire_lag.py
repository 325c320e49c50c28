"""Schedule fire lag: from a tick to its Job, over many fires, on a local control plane (or $SEXTANT_TEST_KUBECONFIG).

    .venv/bin/python bench/schedule_fire_lag.py [--schedules 10] [--interval 1s] [--fires 200] [--jitter 0s]

Prints one JSON line with three measurements, each p50/p99/max in milliseconds:
- watch:     tick → the Job's ADDED event seen by a watching client (what a user sees; includes the watch,
             and the jitter when --jitter is given);
- operator:  tick (+ jitter) → the create request answered, as the operator logs it per fire;
- evaluated: tick (+ jitter) → the operator's evaluation started (the timer heap's own lateness).
The machine's load average is printed with it: the numbers mean little on a machine busy with other work.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from sextant.dev.localcluster import LocalCluster, new_name  # noqa: E402

KWOK = {"tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"type": "kwok"}}


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summary(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"p50_ms": round(1000 * quantile(values, 0.5), 1), "p99_ms": round(1000 * quantile(values, 0.99), 1),
            "max_ms": round(1000 * max(values), 1), "n": len(values)}


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", type=int, default=10)
    parser.add_argument("--interval", default="1s")
    parser.add_argument("--fires", type=int, default=200)
    parser.add_argument("--jitter", default=None, help="e.g. 500ms; default none")
    args = parser.parse_args()

    cluster = LocalCluster(name=new_name("sextant-bench"), nodes=2)
    cluster.up()
    work = Path(tempfile.mkdtemp(prefix="sextant-bench-"))
    operator = None
    try:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
        cluster.kubectl("wait", "--for=condition=Established", "crd/schedules.sextant.dev", "--timeout=60s")
        ns = "bench-" + new_name("lag").rsplit("-", 1)[1]
        cluster.kubectl("create", "namespace", ns)
        cluster.kubectl("wait", "--for=create", "serviceaccount/default", "-n", ns, "--timeout=30s")
        log_path = work / "operator.log"
        operator = subprocess.Popen(
            [sys.executable, "-m", "sextant", "--kubeconfig", str(cluster.kubeconfig), "operator",
             "--watch-namespace", ns, "--log-level", "info", "--http-port", "-1"],
            stdout=open(log_path, "wb"), stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        api = k8s_client.CustomObjectsApi(k8s_config.new_client_from_config(str(cluster.kubeconfig)))
        seen: list[tuple[float, float]] = []  # (local time seen, tick)
        ready = threading.Event()

        def record() -> None:
            listed = api.list_namespaced_custom_object("sextant.dev", "v1alpha1", ns, "jobs")
            version = listed["metadata"]["resourceVersion"]
            ready.set()
            while len(seen) < args.fires:
                try:
                    for event in k8s_watch.Watch().stream(api.list_namespaced_custom_object, "sextant.dev",
                                                          "v1alpha1", ns, "jobs", resource_version=version,
                                                          timeout_seconds=5):
                        now = time.time()
                        meta = event["object"]["metadata"]
                        version = meta["resourceVersion"]
                        tick = (meta.get("annotations") or {}).get("sextant.dev/scheduled-at")
                        if event["type"] == "ADDED" and tick:
                            seen.append((now, ts(tick)))
                except Exception:  # noqa: BLE001 - a dropped watch resumes from the last version seen
                    time.sleep(0.2)

        threading.Thread(target=record, daemon=True).start()
        ready.wait(30)
        template = {"queue": "q", "handler": "h"}
        objects = [
            {"apiVersion": "sextant.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "q"},
             "spec": {"concurrency": 100}},
            {"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler", "metadata": {"name": "h"},
             "spec": {"template": {"spec": {"containers": [{"name": "h", "image": "bench:1"}], **KWOK}}}},
            *({"apiVersion": "sextant.dev/v1alpha1", "kind": "Schedule", "metadata": {"name": f"lag-{i}"},
               "spec": {"interval": args.interval, "jobTemplate": template,
                        **({"jitter": args.jitter} if args.jitter else {})}}
              for i in range(args.schedules)),
        ]
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(objects))
        deadline = time.time() + 600
        while len(seen) < args.fires and time.time() < deadline and operator.poll() is None:
            time.sleep(0.5)
        operator.terminate()
        operator.wait(10)
        lines = [line for line in log_path.read_text().splitlines() if " fired as job " in line]
        logged = [float(line.rsplit("lag ", 1)[1].split()[0]) for line in lines]
        evaluated = [float(line.rsplit("evaluated at +", 1)[1].split()[0].rstrip(")")) for line in lines
                     if "evaluated at +" in line]
        # The first fire of each schedule is evaluated when the operator starts, not by the timer: leave it out.
        warm = sorted(seen)[args.schedules:]
        print(json.dumps({
            "schedules": args.schedules, "interval": args.interval, "jitter": args.jitter,
            "watch": summary([at - tick for at, tick in warm]),
            "operator": summary(logged[args.schedules:]),
            "evaluated": summary(evaluated[args.schedules:]),
            "loadavg": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
        }))
        return 0
    finally:
        if operator is not None and operator.poll() is None:
            operator.kill()
        cluster.down()


if __name__ == "__main__":
    sys.exit(main())
