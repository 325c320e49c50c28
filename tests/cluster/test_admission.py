"""Rate limits and concurrency keys (issue #32) on the real control plane: what the API server stored, not what the
operator says. Pod mode on kwok nodes, worker mode with `sextant worker --module napping`."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timedelta

from tests.harness import wait_for
from tests.harness.watching import Versions, live_assignments

from sextant.resources.common import parse_time

from .support import PodRecorder, apply, get_json, handler, job, jobs, queue, wait_all
from .test_worker import FAST, running_at_once, start_order, wait_registered, worker_handler, workers  # noqa: F401


def queue_status(cluster, namespace: str, name: str = "q") -> dict:
    return json.loads(cluster.kubectl("get", "squeue", name, "-n", namespace, "-o", "json").stdout).get("status") or {}


def most_in(times: list[datetime], window: timedelta) -> int:
    """The most of these moments in any half-open window [t, t + window)."""
    times = sorted(times)
    return max((sum(1 for u in times if t <= u < t + window) for t in times), default=0)


def assignments(seen: Versions) -> dict[tuple[str, int], dict]:
    """Every assignment any Worker version showed, by (job, sequence)."""
    found: dict[tuple[str, int], dict] = {}
    for v in seen.versions():
        for a in (v.obj.get("status") or {}).get("assignments") or []:
            found.setdefault((a["job"], a["sequence"]), a)
    return found


def test_a_rate_limit_holds_across_the_queues_pods_and_says_so(cluster, namespace, operator):
    # 3 starts per 5 s; 12 jobs that end at once: the rate limit, not the concurrency, paces them.
    apply(cluster, namespace, queue("q", concurrency=50, rateLimit={"starts": 3, "per": "5s"}), handler("h"),
          *(job(f"job-{i:02d}") for i in range(12)))
    seen: list[dict] = []

    def limited() -> bool:
        seen.append(queue_status(cluster, namespace))
        return seen[-1].get("rateLimited") is True

    wait_for(limited, 20, message=lambda: f"the queue to say it is rate limited, got {seen[-1:]}")
    st = seen[-1]
    assert st["recentStarts"] == 3 and st["queued"] >= 6
    head, row = (line.split() for line in cluster.kubectl("get", "squeue", "q", "-n", namespace).stdout.splitlines())
    assert row[head.index("RATE-LIMITED")] == "true"
    final = wait_all(cluster, namespace, 12, {"succeeded"}, 90)
    assert len(final) == 12
    # An attempt starts when its pod is created (creationTimestamp, to the second): any 4 seconds of them hold at
    # most 3 (a pod made at second s was made within [s, s + 1); a second more allows for the create's latency).
    pods = get_json(cluster, namespace, "pods", "-l", "sextant.dev/queue=q")["items"]
    created = [parse_time(p["metadata"]["creationTimestamp"]) for p in pods]
    assert len(created) == 12
    assert most_in(created, timedelta(seconds=3)) <= 3, sorted(created)
    assert max(created) - min(created) >= timedelta(seconds=14), "four windows' worth at least: it paced them"
    wait_for(lambda: queue_status(cluster, namespace).get("rateLimited") is False, 20,
             message="the queue to say it no longer waits for the rate limit")


def test_a_rate_limit_holds_across_workers(cluster, namespace, operator, workers):  # noqa: F811
    with Versions(cluster.kubeconfig, namespace, "workers") as seen:
        apply(cluster, namespace, queue("q", concurrency=20, rateLimit={"starts": 4, "per": "3s"}, **FAST),
              worker_handler("nap"), *(job(f"job-{i:02d}", handler_name="nap", payload={"seconds": 0})
                                       for i in range(16)))
        for name in ("w0", "w1"):
            workers(name, "--module", "napping", "--handler", "nap", "--concurrency", "8")
        final = wait_all(cluster, namespace, 16, {"succeeded"}, 90)
    assert len(final) == 16
    # An attempt starts when the operator assigns it (assignedAt, its clock, to the microsecond): any 2.5 s of
    # them hold at most 4 (half a second allows for the time between the grant and the assignment's write).
    assigned = [parse_time(a["assignedAt"]) for a in assignments(seen).values()]
    assert len(assigned) == 16
    assert most_in(assigned, timedelta(seconds=2.5)) <= 4, sorted(assigned)
    assert max(assigned) - min(assigned) >= timedelta(seconds=8.5), "three windows' worth at least"


def test_a_small_tenant_starts_within_the_first_admissions_behind_a_large_ones_backlog(cluster, namespace, operator,
                                                                                         workers):  # noqa: F811
    big = [f"job-big-{i:04d}" for i in range(1000)]
    small = [f"job-small-{i:02d}" for i in range(10)]
    with Versions(cluster.kubeconfig, namespace, "workers") as seen:
        apply(cluster, namespace, queue("q", concurrency=4, **FAST), worker_handler("nap"),
              *(job(n, handler_name="nap", payload={"seconds": 0.05}, concurrencyKey="big") for n in big))
        # The small tenant's jobs come after the whole backlog of the large one, and all wait for a worker.
        apply(cluster, namespace,
              *(job(n, handler_name="nap", payload={"seconds": 0.05}, concurrencyKey="small") for n in small))
        wait_for(lambda: len(jobs(cluster, namespace)) == 1010, 60, message="1010 jobs")
        workers("w0", "--module", "napping", "--handler", "nap", "--concurrency", "4")
        wait_for(lambda: all((j.get("status") or {}).get("state") == "succeeded"
                             for n, j in jobs(cluster, namespace).items() if n in small), 90,
                 message="the small tenant's jobs to succeed")
        order = start_order(seen)
    firsts = [n for n in order if n in small]
    assert sorted(firsts) == small
    # Keys take turns: one of each at a time, so the 10 small jobs are within the first 20 starts (a little slack
    # for the order assignments land in one Worker write), not after 1000.
    assert order.index(firsts[-1]) < 24, order[:30]
    # FIFO within a key, as far as the order the assignments land in shows it (reconciles run in parallel)
    assert set([n for n in order if n in big][:5]) <= set(big[:8]), order[:30]
    assert queue_status(cluster, namespace).get("keys") in (1, 2)


def test_per_key_concurrency_holds_and_the_others_keys_use_the_rest(cluster, namespace, operator, workers):  # noqa: F811
    tenants = {f"job-{t}-{i}": t for t in ("a", "b", "c") for i in range(6)}
    with Versions(cluster.kubeconfig, namespace, "workers") as seen:
        apply(cluster, namespace, queue("q", concurrency=6, perKeyConcurrency=2, **FAST), worker_handler("nap"),
              *(job(n, handler_name="nap", payload={"seconds": 0.6}, concurrencyKey=t) for n, t in tenants.items()))
        workers("w0", "--module", "napping", "--handler", "nap", "--concurrency", "10")
        final = wait_all(cluster, namespace, 18, {"succeeded"}, 90)
    assert {j["spec"]["concurrencyKey"] for j in final.values()} == {"a", "b", "c"}
    most: dict[str, int] = defaultdict(int)
    for moment in seen.replay():
        per_key: dict[str, int] = defaultdict(int)
        for v in moment.values():
            for a in live_assignments(v.obj):
                per_key[tenants[a["job"]]] += 1
        for key, n in per_key.items():
            most[key] = max(most[key], n)
    assert dict(most) == {"a": 2, "b": 2, "c": 2}, "each key at most 2 at once, and used to it"
    assert running_at_once(seen)[0] <= 6


def test_per_key_concurrency_holds_for_pods_and_the_others_keys_use_the_rest(cluster, namespace, operator):
    tenants = {f"job-{t}-{i}": t for t in ("a", "b", "c") for i in range(5)}
    with PodRecorder(cluster.kubeconfig, namespace) as pods:
        apply(cluster, namespace, queue("q", concurrency=6, perKeyConcurrency=2),
              handler("h", annotations={"sextant.dev/test-duration": "1s"}),
              *(job(n, concurrencyKey=t) for n, t in tenants.items()))
        final = wait_all(cluster, namespace, 15, {"succeeded"}, 120)
    assert {j["spec"]["concurrencyKey"] for j in final.values()} == {"a", "b", "c"}
    most = pods.max_unfinished_by(lambda p: tenants[p.job])
    assert most == {"a": 2, "b": 2, "c": 2}, "each key at most 2 pods at once, and used to it"
    assert pods.max_unfinished("q") <= 6
