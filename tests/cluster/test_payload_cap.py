"""Bounded growth, end to end (issue 16): a payload over 256 KiB is refused by the CLI, the HTTP API and the SDK,
and by the operator when kubectl applies it; one at the cap runs, its command gets it whole on stdin (the local
node runs real processes), never through one huge environment variable."""

from __future__ import annotations

import json

import httpx

from sextant.resources.job import PAYLOAD_MAX_BYTES, payload_size
from tests.harness import holds_for, wait_for

from .plugin_support import grant, sextant, snapshot
from .support import apply, get_json, handler, jobs, queue, wait_events, wait_state
from .test_runner import HANDLERS_DIR, local_handler, sh

CAP = PAYLOAD_MAX_BYTES  # 256 KiB (tests/unit/test_bounded_growth.py pins the number)


def sized(size: int, tag: str) -> dict:
    base = payload_size({"tag": tag, "blob": ""})
    return {"tag": tag, "blob": "x" * (size - base)}


def test_over_the_cap_is_refused_by_every_create_path_and_at_the_cap_the_command_gets_it_on_stdin(
        cluster, namespace, operator, local_node, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    sink = sh(f'cat > {out}/$SEXTANT_JOB_ID.json; printenv SEXTANT_PAYLOAD > {out}/$SEXTANT_JOB_ID.env; exit 0')
    apply(cluster, namespace, queue("q", maxAttempts=1), local_handler("sink", sink),
          local_handler("chain-sized", ["--module", "payloads"], env={"PYTHONPATH": str(HANDLERS_DIR)}))
    over, at_cap = tmp_path / "over.json", tmp_path / "at-cap.json"
    over.write_text(json.dumps(sized(CAP + 1, "cli-over")))
    at_cap.write_text(json.dumps(sized(CAP, "cli")))

    # The CLI: refused before any request, naming the flag and the cap; nothing created.
    refused = sextant(cluster, "-n", namespace, "jobs", "create", "--queue", "q", "--handler", "sink",
                      "--payload", f"@{over}")
    assert refused.returncode == 2 and f"--payload @{over}" in refused.stderr, refused.stderr
    assert f"{CAP + 1} bytes" in refused.stderr and "262144 bytes (256 KiB)" in refused.stderr
    # The HTTP API: 422 naming the field.
    token = grant(cluster, namespace, "api-user")
    with httpx.Client(timeout=30) as http:
        wait_for(lambda: http.get(operator.http_url + "/readyz").status_code == 200, 30, message="the API")
        post = lambda payload: http.post(  # noqa: E731
            operator.http_url + "/v2/jobs", params={"namespace": namespace}, headers={"Authorization": f"Bearer {token}"},
            json={"queue": "q", "handler": "sink", "payload": payload})
        answer = post(sized(CAP + 1, "http-over"))
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert error["field"] == "payload" and "over the limit" in error["message"]
        assert snapshot(cluster, namespace) == {}, "refused input created nothing"
        by_http = post(sized(CAP, "http"))
        assert by_http.status_code == 201, by_http.text
    by_cli = sextant(cluster, "-n", namespace, "jobs", "create", "--queue", "q", "--handler", "sink",
                     "--payload", f"@{at_cap}")
    assert by_cli.returncode == 0, by_cli.stderr
    small = sextant(cluster, "-n", namespace, "jobs", "create", "--queue", "q", "--handler", "sink",
                    "--payload", '{"tag": "small", "note": "ünïcode ✓"}')
    assert small.returncode == 0, small.stderr
    # The SDK (ctx.jobs.create in a handler): refused with InputError; at the cap, created and run.
    apply(cluster, namespace, {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job", "metadata": {"name": "job-sdk"},
                               "spec": {"queue": "q", "handler": "chain-sized"}})
    wait_state(cluster, namespace, "job-sdk", "succeeded", timeout=90)
    log = local_node.logs(namespace, "job-sdk-1")
    assert "refused: payload: the payload is 262145 bytes as JSON, over the limit of 262144 bytes" in log, log

    def all_ran() -> bool:
        found = jobs(cluster, namespace)
        return len(found) == 5 and all((j.get("status") or {}).get("state") == "succeeded" for j in found.values())

    wait_for(all_ran, 120, interval=0.5, message=lambda: f"every job to succeed: {jobs(cluster, namespace).keys()}")
    received = {json.loads(f.read_text())["tag"]: f for f in out.glob("*.json")}
    assert set(received) == {"http", "cli", "sdk", "small"}
    for tag in ("http", "cli", "sdk"):
        got = json.loads(received[tag].read_text())
        assert got == sized(CAP, tag), f"{tag}: the payload arrived whole on stdin"
        assert received[tag].with_suffix(".env").read_text() == "", "over 32 KiB: not in the handler's environment"
    assert json.loads(received["small"].with_suffix(".env").read_text()) == {"tag": "small", "note": "ünïcode ✓"}
    for job in jobs(cluster, namespace).values():
        pod = get_json(cluster, namespace, "pod", job["status"]["attempts"][0]["pod"])
        env = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
        assert "SEXTANT_PAYLOAD" not in env, "the pod itself never carries the payload"


def test_a_job_applied_over_the_cap_ends_dead_and_never_runs(cluster, namespace, operator):
    apply(cluster, namespace, queue("q"), handler("h"))
    big = {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job", "metadata": {"name": "job-huge"},
           "spec": {"queue": "q", "handler": "h", "payload": sized(CAP + 1, "kubectl")}}
    # `kubectl create`: `apply` would also copy it into an annotation, which the API server caps at 256 KiB.
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(big))
    final = wait_state(cluster, namespace, "job-huge", "dead", timeout=60)
    dead = next(c for c in final["conditions"] if c["type"] == "Dead")
    assert (dead["status"], dead["reason"]) == ("True", "PayloadTooLarge")
    assert "spec.payload" in dead["message"] and "262144 bytes (256 KiB)" in dead["message"]
    assert final["attempt"] == 0 and not final.get("attempts")
    holds_for(lambda: not get_json(cluster, namespace, "pods")["items"], 3, message="no pod for it, ever")
    wait_events(cluster, namespace, "--field-selector", "involvedObject.name=job-huge",
                until=lambda events: "PayloadTooLarge" in {e["reason"] for e in events},
                what="a PayloadTooLarge Event on the job")
