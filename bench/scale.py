"""Scale: N Sextant Jobs present, most of them finished, when the operator starts: its start-to-ready time and memory.

A Job's status can only be written through the status subresource (a create drops it), so the loader creates each
finished job and then merge-patches its status to `succeeded`, as the operator would have left it; many requests
in flight. The unfinished rest are plain new jobs that run once the operator is up. Then the operator is restarted
`restarts` times, each start-up measured the same way.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sextant.kube import kubeconfig

from . import identities, measure
from .api import SEXTANT, Api, Recorder
from .run import CONFIGS, Options, OperatorProcess, log, prepare_namespace, renice, sextant_job, start_cluster


def finished_status(name: str, stamp: str) -> dict[str, Any]:
    return {"status": {
        "state": "succeeded", "attempt": 1, "maxAttempts": 2, "sequence": 1, "queuedAt": stamp, "finishedAt": stamp,
        "observedGeneration": 1, "message": "attempt 1 succeeded",
        "attempts": [{"attempt": 1, "sequence": 1, "pod": f"{name}-1", "node": "node-000000", "startedAt": stamp,
                      "finishedAt": stamp, "result": "succeeded", "exitCode": 0}],
        "conditions": [
            {"type": "Succeeded", "status": "True", "reason": "Succeeded", "message": "attempt 1 succeeded",
             "lastTransitionTime": stamp, "observedGeneration": 1},
            {"type": "Running", "status": "False", "reason": "Succeeded", "message": "",
             "lastTransitionTime": stamp, "observedGeneration": 1},
        ],
    }}


async def load(api: Api, namespace: str, total: int, unfinished: int, in_flight: int) -> dict[str, Any]:
    path = SEXTANT.jobs_path(namespace)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    counter = iter(range(total))
    finished = total - unfinished

    async def worker() -> None:
        for i in counter:
            name = f"job-{i:06d}"
            await api.request("POST", path, sextant_job(name, i, False), ok=(409,))
            if i < finished:
                await api.request("PATCH", f"{path}/{name}/status", finished_status(name, stamp),
                                  content_type="application/merge-patch+json")

    t = time.time()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    seconds = time.time() - t
    requests = sum(api.requests.values())
    return {"jobs": total, "finished": finished, "seconds": round(seconds, 1),
            "jobs_per_s": round(total / seconds, 1), "requests_per_s": round(requests / seconds, 1)}


async def start_measured(cluster: Any, opts: Options, log_name: str,
                         operator_kubeconfig: Path) -> tuple[OperatorProcess, dict[str, Any]]:
    """Start the operator and wait until it is ready: the time, and who worked meanwhile (it, or the API server
    encoding the list pages)."""
    # No count cap on finished jobs (its default, 50k, would delete half of the 100k this workload is about: the
    # figure is what the operator holds with that many present).
    operator = OperatorProcess(operator_kubeconfig, opts.out / log_name, ["--max-finished-jobs", "none"])
    operator.start()
    renice([operator.pid], opts.nice)
    usage = measure.Usage({**cluster.pids(), "operator": operator.pid})
    usage.start()
    try:
        ready = await operator.wait_ready(timeout=600, interval=0.1)
    except BaseException:
        operator.stop()
        raise
    usage.stop()
    return operator, {"start_to_ready_s": round(ready, 2), "usage_to_ready": usage.result(),
                      "cpu_s_to_ready": measure.cpu_seconds(operator.pid),
                      "memory_mb_at_ready": measure.memory_mb(operator.pid)}


async def run_scale(opts: Options, total: int, unfinished: int, restarts: int = 0) -> dict[str, Any]:
    config = CONFIGS["S"]
    cluster = start_cluster(config, opts, "scale")
    result: dict[str, Any] = {"config": "S", "workload": f"scale-{total}", "jobs_present": total,
                              "unfinished": unfinished}
    operator = None
    try:
        namespace = "bench-scale"
        prepare_namespace(cluster, config, namespace, False)
        operator_kubeconfig = identities.setup(cluster, opts.out, "scale").operator  # as in run.run_workload
        conn = kubeconfig.load(str(cluster.kubeconfig))
        async with Api(conn, in_flight=opts.in_flight) as api:
            log(opts, f"scale: loading {total} jobs ({total - unfinished} finished)")
            result["loader"] = await load(api, namespace, total, unfinished, opts.in_flight)
            log(opts, f"scale: loaded in {result['loader']['seconds']} s "
                      f"({result['loader']['requests_per_s']} requests/s)")
            rec = Recorder(api, SEXTANT, namespace)
            operator, started = await start_measured(cluster, opts, "operator-scale.log", operator_kubeconfig)
            result.update(started)
            log(opts, f"scale: operator ready after {started['start_to_ready_s']} s, {started['memory_mb_at_ready']}")
            await rec.start()
            deadline = time.monotonic() + opts.timeout
            unfinished_done = None
            while time.monotonic() < deadline:
                if rec.terminal >= total:
                    unfinished_done = time.monotonic() - operator.started_at
                    break
                rec.changed.clear()
                try:
                    await asyncio.wait_for(rec.changed.wait(), 5)
                except asyncio.TimeoutError:
                    pass
            await rec.stop()
            result["start_to_all_terminal_s"] = round(unfinished_done, 2) if unfinished_done else None
            await asyncio.sleep(5)
            result["memory_mb_after"] = measure.memory_mb(operator.pid)
            result["cpu_s_after"] = measure.cpu_seconds(operator.pid)
            # More samples of the same start-up (now with every job finished) without loading 100k jobs again.
            result["restarts"] = []
            for n in range(restarts):
                operator.stop()
                operator, started = await start_measured(cluster, opts, f"operator-scale-{n + 2}.log",
                                                         operator_kubeconfig)
                result["restarts"].append(started)
                log(opts, f"scale: restart {n + 1}: ready after {started['start_to_ready_s']} s")
    finally:
        if operator is not None:
            operator.stop()
        cluster.down()
    return result
