"""A backlog of fat jobs (issue 28): the operator's view keeps no payload, a list page holds a bounded number of
fat jobs, and the payload still reaches every handler whole: a pod's (its runner reads the Job), a `heartbeat:
false` pod's SEXTANT_PAYLOAD (the operator reads the Job for it), a worker's (it reads the Job), and the HTTP API
shows it (it reads the Job: the view has none)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from sextant.controller.view import View
from sextant.kube import kubeconfig
from sextant.kube.client import Kube
from sextant.kube.informer import Informer
from sextant.resources import contract
from sextant.resources.job import PAYLOAD_MAX_BYTES, payload_size
from tests.harness import wait_for

from .plugin_support import grant
from .support import WorkerProcess, apply, get_json, jobs, queue, wait_state
from .test_runner import local_handler, sh
from .test_worker import worker_handler

API = "sextant.dev/v1alpha1"


@pytest.fixture
def worker(cluster, namespace, tmp_path_factory, request):
    """One `sextant worker` of the namespace, started with the given arguments."""
    made: list[WorkerProcess] = []
    request.node._sextant_workers = made  # its log joins a failed test's report (conftest.py)

    def start(name: str, *args: str) -> WorkerProcess:
        made.append(WorkerProcess(cluster.kubeconfig, namespace, name, tmp_path_factory.mktemp("worker"),
                                  *args).start())
        return made[-1]

    yield start
    for process in made:
        process.kill()


def fat(tag: str, size: int = PAYLOAD_MAX_BYTES) -> dict:
    """A legal payload of small keys (the heaviest kind once parsed: ~2.5 MiB as Python objects), tagged."""
    payload = {"tag": tag, **{f"k{i:06d}": i % 10 for i in range(size // 12)}}
    while payload_size(payload) > size:
        payload.popitem()
    return payload


def create(cluster, namespace: str, name: str, handler_name: str, payload: dict, queue_name: str = "q") -> None:
    """`kubectl create`: `apply` would also copy the job into an annotation, which the API server caps at 256 KiB."""
    body = {"apiVersion": API, "kind": "Job", "metadata": {"name": name},
            "spec": {"queue": queue_name, "handler": handler_name, "payload": payload}}
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(body))


def test_the_view_holds_no_payload_and_a_list_page_holds_few_fat_jobs(cluster, namespace, crds):
    """The operator's own informer and view, against the API server: 40 jobs of 256 KiB are listed in pages of a
    few (before: one page of all 40, each kept whole in the view)."""
    count = 40
    payload = fat("same")

    async def run() -> tuple[View, int]:
        async with Kube(kubeconfig.load(str(cluster.kubeconfig))) as kube:
            path = contract.jobs_path(namespace)
            names = iter(range(count))

            async def creator() -> None:
                for i in names:
                    await kube.create(path, {"apiVersion": API, "kind": "Job", "metadata": {"name": f"fat-{i:03d}"},
                                             "spec": {"queue": "q", "handler": "h", "payload": payload}})

            await asyncio.gather(*(creator() for _ in range(8)))
            view = View()
            informer = Informer(kube, path, lambda kind, obj: view.upsert_job(obj), name="jobs")
            task = asyncio.ensure_future(informer.run())
            try:
                await asyncio.wait_for(informer.synced.wait(), 120)
            finally:
                task.cancel()
            return view, kube.requests[("list", "jobs", 200)]

    view, pages = asyncio.run(run())
    assert len(view.jobs) == count
    for record in view.jobs.values():
        assert "payload" not in record.raw["spec"] and record.payload_bytes == payload_size(payload)
        assert "managedFields" not in record.raw["metadata"]
    # ~0.5 MB of JSON per job (its managedFields name every key of the payload too): 10 on the first page, then
    # what 8 MiB holds.
    assert 3 <= pages <= 8, pages


def test_fat_payloads_reach_pod_and_worker_handlers_whole_and_the_api_shows_them(
        cluster, namespace, operator, local_node, worker, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    keep = f"cat > {out}/$SEXTANT_JOB_ID.json"
    apply(cluster, namespace, queue("q", maxAttempts=1), queue("held"),
          local_handler("pod", sh(keep)),
          local_handler("bare", sh(f"{keep}; printenv SEXTANT_PAYLOAD > {out}/$SEXTANT_JOB_ID.env"), heartbeat=False),
          worker_handler("wk", ["sh", "-c", keep]), worker_handler("nobody"))
    sent = {"job_pod": fat("pod"), "job_worker": fat("worker"), "job_bare": {"tag": "bare", "note": "ünïcode ✓"},
            "job_held": fat("held")}
    create(cluster, namespace, "job-pod", "pod", sent["job_pod"])
    create(cluster, namespace, "job-bare", "bare", sent["job_bare"])
    create(cluster, namespace, "job-worker", "wk", sent["job_worker"])
    create(cluster, namespace, "job-held", "nobody", sent["job_held"], queue_name="held")  # no worker: stays queued
    worker("w", "--queue", "q", "--handler", "wk", "--allow-command", "wk")
    for name in ("job-pod", "job-bare", "job-worker"):
        wait_state(cluster, namespace, name, "succeeded", timeout=120)
    for job_id in ("job_pod", "job_bare", "job_worker"):
        assert json.loads((out / f"{job_id}.json").read_text()) == sent[job_id], f"{job_id}: whole on stdin"
    # The `heartbeat: false` pod carries a small payload itself: the operator read it from the Job.
    bare = get_json(cluster, namespace, "pod", jobs(cluster, namespace)["job-bare"]["status"]["attempts"][0]["pod"])
    env = {e["name"]: e.get("value") for e in bare["spec"]["containers"][0]["env"]}
    assert json.loads(env["SEXTANT_PAYLOAD"]) == sent["job_bare"]
    assert json.loads((out / "job_bare.env").read_text()) == sent["job_bare"]
    # The HTTP API serves a queued job from the view, but its payload from the API server: whole.
    wait_state(cluster, namespace, "job-held", "queued", timeout=60)
    token = grant(cluster, namespace, "api-user")
    with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {token}"}) as http:
        wait_for(lambda: http.get(operator.http_url + "/readyz").status_code == 200, 30, message="the API")
        for job_id in ("job_held", "job_pod"):
            answer = http.get(f"{operator.http_url}/v2/jobs/{job_id}", params={"namespace": namespace})
            assert answer.status_code == 200, answer.text
            assert answer.json()["payload"] == sent[job_id]
        assert answer.json()["state"] == "succeeded"
