"""The operator's view holding N finished jobs, fed as the jobs' informer feeds it: its RSS growth, or (--trace) its
Python allocations per job (tracemalloc; it inflates the RSS itself). Run it against any checkout:

    PYTHONPATH=<checkout>/operator python bench/view_memory.py 100000 [--informer-versions] [--trace] [--pages 3000]

--pages N delivers the jobs as the informer does a list: pages of N jobs as JSON, each parsed (orjson) and digested
before the next, then the view compacted and the C heap trimmed as after the operator's first list (what the
allocator keeps of the pages shows; without it the figure is the view's objects alone).

--informer-versions also keeps the map of versions the jobs' informer kept of its own before issue 41 (since then it
diffs a relist against the view's versions), so that a checkout from before is measured with it."""

from __future__ import annotations

import argparse
import gc
import tracemalloc
import uuid
from collections.abc import Iterator
from typing import Any

import orjson

from sextant.controller.view import View
from sextant.kube.informer import key_of


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


def finished_job(n: int) -> dict[str, Any]:
    """A finished job as the watch delivers it (the scale workload's shape: a label no rule reads, managedFields)."""
    name, at = f"scale-{n:06d}", "2026-12-07T19:00:0"
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": "bench", "uid": str(uuid.uuid4()),
                         "resourceVersion": str(10_000_000 + n), "generation": 1, "creationTimestamp": at + "0Z",
                         "labels": {"bench": "scale"},
                         "managedFields": [{"manager": "bench", "operation": "Update", "fieldsType": "FieldsV1",
                                            "fieldsV1": {"f:spec": {"f:queue": {}, "f:handler": {}}}}]},
            "spec": {"queue": "q", "handler": "h", "payload": {"n": n}},
            "status": {"state": "succeeded", "sequence": 1, "attempt": 1, "observedGeneration": 1,
                       "queuedAt": at + "0Z", "startedAt": at + "1Z", "finishedAt": at + "2.123456Z",
                       "message": "the handler succeeded",
                       "attempts": [{"attempt": 1, "sequence": 1, "pod": f"{name}-1", "result": "succeeded",
                                     "startedAt": at + "1Z", "finishedAt": at + "2.123456Z"}],
                       "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded",
                                       "lastTransitionTime": at + "2Z", "message": "done"}]}}


def delivered(jobs: int, page: int | None) -> Iterator[dict[str, Any]]:
    """The jobs one by one; with `page`, parsed from JSON list pages of that many (each dropped once digested)."""
    if page is None:
        yield from (finished_job(n) for n in range(jobs))
        return
    for start in range(0, jobs, page):
        body = orjson.dumps({"items": [finished_job(n) for n in range(start, min(jobs, start + page))]})
        items = orjson.loads(body)["items"]
        del body
        items.reverse()
        while items:
            yield items.pop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("jobs", type=int)
    p.add_argument("--informer-versions", action="store_true")
    p.add_argument("--trace", action="store_true")
    p.add_argument("--pages", type=int, metavar="N", help="deliver the jobs in parsed list pages of N (see above)")
    args = p.parse_args()
    view, versions = View(), {}
    gc.collect()
    before = rss_mb()
    if args.trace:
        tracemalloc.start()
    for obj in delivered(args.jobs, args.pages):
        if args.informer_versions:
            versions[key_of(obj)] = obj["metadata"]["resourceVersion"]
        view.upsert_job(obj)
    if args.pages and hasattr(view, "compact"):  # a checkout from before issue 41's compaction has none
        view.compact()
    gc.collect()
    if args.trace:
        print(f"{args.jobs} finished jobs: {tracemalloc.get_traced_memory()[0] / args.jobs:.0f} B/job allocated")
    else:
        grown = rss_mb() - before
        print(f"{args.jobs} finished jobs: RSS +{grown:.1f} MB ({grown * 2**20 / args.jobs:.0f} B/job)")


if __name__ == "__main__":
    main()
