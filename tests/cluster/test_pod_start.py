"""Pod mode, running = taken by a worker: a job is queued until its pod's handler starts, its
startedAt is the container's start, a pod that does not start in time fails the attempt with the reason; and the
Queue's status shows its live numbers, written at a bounded rate."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from tests.harness import holds_for, wait_for

from .support import (JobRecorder, apply, follow, get_json, handler, job, queue, status, timeline_of, wait_all,
                      wait_state)


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def nowhere_handler(name: str = "h") -> dict:
    """A Handler whose pods no node accepts: the scheduler says Unschedulable."""
    h = handler(name)
    h["spec"]["template"]["spec"]["nodeSelector"] = {"type": "nowhere"}
    return h


def test_an_unschedulable_pod_keeps_the_job_queued_then_fails_unschedulable(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", maxAttempts=1, startTimeout="6s"), nowhere_handler(), job("job-stuck"))
    # Written queued (it read queued before, the CRD's default) once the scheduler said Unschedulable: why it waits.
    wait_for(lambda: "Unschedulable" in status(cluster, namespace, "job-stuck").get("message", ""), 30,
             message="the job to say its pod is unschedulable")
    seen = status(cluster, namespace, "job-stuck")
    assert seen["state"] == "queued", seen
    assert seen.get("sequence", 0) == 0 and not seen.get("attempts"), seen
    assert "job-stuck-1" in seen.get("message", ""), seen
    assert get_json(cluster, namespace, "pod", "job-stuck-1")["status"]["phase"] == "Pending"
    final = wait_state(cluster, namespace, "job-stuck", "dead", timeout=40)
    assert timeline_of(final) == [("failed", "Unschedulable")]
    entry = final["attempts"][0]
    assert entry["message"].startswith("pod job-stuck-1 did not start within startTimeout 6s"), entry
    assert "startedAt" not in entry and final["attempt"] == 1 and final["sequence"] == 1
    wait_for(lambda: not get_json(cluster, namespace, "pods")["items"], 20, message="the stuck pod to be gone")


def test_an_image_that_cannot_be_pulled_fails_the_attempt_with_the_kubelets_reason(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", maxAttempts=1, startTimeout="4s"),
          handler("h", annotations={"sextant.dev/test-waiting": "ErrImagePull"}), job("job-pull"))
    final = wait_state(cluster, namespace, "job-pull", "dead", timeout=40)
    assert timeline_of(final) == [("failed", "ErrImagePull")]
    assert final["attempts"][0]["message"].endswith("simulated: ErrImagePull"), final["attempts"][0]


def test_started_at_is_the_container_start_and_the_job_costs_two_status_writes(cluster, namespace, operator):
    with JobRecorder(cluster.kubeconfig, namespace) as recorder:
        apply(cluster, namespace, queue("q"),
              handler("h", annotations={"sextant.dev/test-start-delay": "2s", "sextant.dev/test-duration": "3s"}),
              job("job-slow-start"))
        final = wait_state(cluster, namespace, "job-slow-start", "succeeded", timeout=40)
    pod = get_json(cluster, namespace, "pod", "job-slow-start-1")
    container = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    started = ts(final["attempts"][0]["startedAt"])
    assert started == ts(container["startedAt"]), (final["attempts"][0], container)
    assert (started - ts(pod["metadata"]["creationTimestamp"])).total_seconds() >= 1.5  # the start delay
    # The job itself: created (by the test), then the operator's writes: running, then succeeded. The pod's
    # create is the third operator write: 3 per job.
    changes = [r.state for r in recorder.records if r.name == "job-slow-start" and r.kind == "MODIFIED"]
    assert changes == ["running", "succeeded"], changes


def test_a_job_that_ends_within_a_second_of_its_start_is_written_once_to_its_end(cluster, namespace, operator):
    """RECORD_RUNNING_AFTER: the start of a job that ends at once is recorded with its end, in one write (the pod's
    create and that write: 2 operator writes); the attempt still carries the container's start."""
    with JobRecorder(cluster.kubeconfig, namespace) as recorder:
        apply(cluster, namespace, queue("q"), handler("h"), job("job-quick"))
        final = wait_state(cluster, namespace, "job-quick", "succeeded", timeout=40)
    changes = [r.state for r in recorder.records if r.name == "job-quick" and r.kind == "MODIFIED"]
    assert changes[-1:] == ["succeeded"] and "running" not in changes, changes
    assert final["attempts"][0]["startedAt"] and final["attempts"][0]["result"] == "succeeded"


def test_queued_until_the_handler_starts(cluster, namespace, operator):
    """A pod that takes a while to start: the job reads queued meanwhile (not running), the CRD's default, from
    its creation on, without a write of its own: its start is its first write."""
    with JobRecorder(cluster.kubeconfig, namespace) as recorder:
        apply(cluster, namespace, queue("q"),
              handler("h", annotations={"sextant.dev/test-start-delay": "8s", "sextant.dev/test-duration": "3s"}),
              job("job-late"))
        seen = wait_state(cluster, namespace, "job-late", "queued", "running", "succeeded", timeout=30)
        assert seen["state"] == "queued", seen
        final = wait_state(cluster, namespace, "job-late", "succeeded", timeout=40)
    seen = [(r.kind, r.state) for r in recorder.records if r.name == "job-late"]
    assert seen == [("ADDED", "queued"), ("MODIFIED", "running"), ("MODIFIED", "succeeded")], seen
    pod = get_json(cluster, namespace, "pod", "job-late-1")
    started = ts(final["attempts"][0]["startedAt"])
    assert (started - ts(pod["metadata"]["creationTimestamp"])).total_seconds() >= 7


@dataclass
class QueueRecorder:
    """Every change of one Queue, from a watch started before the test acts."""

    kubeconfig: Path
    namespace: str
    name: str
    statuses: list[tuple[float, dict]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> QueueRecorder:
        api = k8s_client.CustomObjectsApi(k8s_config.new_client_from_config(str(self.kubeconfig)))
        listed = api.list_namespaced_custom_object("sextant.dev", "v1alpha1", self.namespace, "queues")
        self._thread = threading.Thread(target=self._run, args=(api, listed["metadata"]["resourceVersion"]),
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def _run(self, api: k8s_client.CustomObjectsApi, version: str) -> None:
        args = ("sextant.dev", "v1alpha1", self.namespace, "queues")
        last = None

        def record(event: dict[str, Any]) -> None:
            nonlocal last
            obj = event["object"]
            if obj["metadata"]["name"] == self.name and obj.get("status") != last:
                last = obj.get("status")
                if last:
                    self.statuses.append((time.monotonic(), last))

        follow(api.list_namespaced_custom_object, *args, on_event=record, stop=self._stop, version=version)


def test_a_queue_shows_its_live_numbers_written_at_a_bounded_rate(cluster, namespace, operator):
    with QueueRecorder(cluster.kubeconfig, namespace, "q") as recorder:
        apply(cluster, namespace, queue("q", concurrency=4),
              handler("h", annotations={"sextant.dev/test-duration": "2s"}),
              *(job(f"job-burst-{i}") for i in range(16)))
        table: list[str] = []

        def busy() -> bool:
            out = cluster.kubectl("get", "-n", namespace, "squeue", "q").stdout
            table[:] = [out]
            header, row = out.splitlines()[:2]
            cells = dict(zip(header.split(), row.split()))
            return cells.get("RUNNING") == "4" and cells.get("QUEUED") not in (None, "0", "<none>")

        wait_for(busy, 30, interval=0.3, message=lambda: f"the queue to show 4 running and some queued: {table}")
        started = time.monotonic()
        wait_all(cluster, namespace, 16, {"succeeded"}, timeout=90)
        wait_for(lambda: (get_json(cluster, namespace, "squeue", "q").get("status") or {}).get("queued") == 0
                 and get_json(cluster, namespace, "squeue", "q")["status"].get("running") == 0, 20,
                 message="the queue's numbers to settle at zero")
        elapsed = time.monotonic() - started
    final = get_json(cluster, namespace, "squeue", "q")
    assert final["status"]["observedGeneration"] == final["metadata"]["generation"]
    assert "oldestQueuedAt" not in final["status"]
    print(table[0])
    writes = [at for at, _ in recorder.statuses]
    # At most one write per 3 s interval (plus the first one and the rounding of the edges).
    assert len(writes) <= (writes[-1] - writes[0]) / 3 + 2, (len(writes), writes[-1] - writes[0], elapsed)
    gaps = [b - a for a, b in zip(writes, writes[1:])]
    assert all(g >= 2.5 for g in gaps), gaps
    # Nothing changes any more: no more writes.
    settled = len(recorder.statuses)
    holds_for(lambda: len(recorder.statuses) == settled, 7,  # two write intervals
              message="an unchanged queue not written again")
