"""Bulk on the real control plane: `sextant jobs create --from-file` (a few hundred jobs, ids in the file's order,
a repeated key returns the first job, a mismatch is refused naming the field, a bad line creates nothing), the SDK's
create_many, POST /v2/jobs:batch (per-item statuses, the cap), and acting on a selection: a bulk retry of one
queue's dead jobs leaves another queue's alone, a bulk cancel of queued jobs, the HTTP API's :cancel and :retry,
and the confirmation (without a terminal and without --yes: refused, nothing changed)."""

from __future__ import annotations

import json

import httpx

from sextant.client import Client, KeyConflict
from sextant.http.models import BATCH_MAX
from sextant.kube import kubeconfig
from sextant.runner.chaining import Jobs
from tests.harness import wait_for

from .plugin_support import ID_RE, grant, ok, sextant, snapshot
from .support import apply, handler, jobs, queue, wait_state

EXIT = "sextant.dev/test-exit-code"
FAST = {"backoff": {"policy": "fixed", "initial": "200ms"}}


def api_call(operator, namespace: str, token: str, path: str, body: dict) -> httpx.Response:
    with httpx.Client(timeout=60) as http:
        wait_for(lambda: http.get(operator.http_url + "/readyz").status_code == 200, 30, message="operator ready")
        return http.post(operator.http_url + path, params={"namespace": namespace},
                         headers={"Authorization": f"Bearer {token}"}, json=body)


def specs(cluster, namespace: str) -> dict[str, dict]:
    """Every job's spec by name: what a request changes (the operator writes only status)."""
    return {name: j["spec"] for name, j in jobs(cluster, namespace).items()}


def ndjson(lines: list[dict | str]) -> str:
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)


def test_create_from_file_makes_every_job_in_order_and_keys_name_one_job(cluster, namespace, operator, tmp_path):
    apply(cluster, namespace, queue("q", paused=True), handler("h"))  # paused: the jobs stay queued
    lines: list[dict | str] = [{"payload": {"n": n}} for n in range(300)]
    lines[10] = {"payload": {"n": 10}, "idempotency_key": "k-10"}
    lines[200] = {"payload": {"n": 10}, "idempotency_key": "k-10"}  # the same job again: line 11's
    lines.insert(100, "")  # a blank line holds no job
    path = tmp_path / "jobs.ndjson"
    path.write_text(ndjson(lines))

    made = sextant(cluster, "jobs", "create", "-n", namespace, "--queue", "q", "--handler", "h", "--from-file",
                   str(path), timeout=300)
    ids = ok(made).splitlines()
    assert len(ids) == 300 and all(ID_RE.match(i) for i in ids), made.stdout[:500]
    assert ids[200] == ids[10] and len(set(ids)) == 299
    assert "1 of 300 jobs were already created with their idempotency key" in made.stderr
    found = jobs(cluster, namespace)
    assert len(found) == 299
    # the n-th id is the n-th line's job
    assert [found[i.replace("_", "-")]["spec"]["payload"]["n"] for i in ids] == [
        10 if n == 200 else n for n in range(300)]

    # A key held by a job with another payload: that line is refused naming the field, the others are created.
    before = snapshot(cluster, namespace)
    path.write_text(ndjson([{"payload": {"n": 1000}}, {"payload": {"n": 11}, "idempotency_key": "k-10"},
                            {"payload": {"n": 1001}}]))
    mixed = sextant(cluster, "jobs", "create", "-n", namespace, "--queue", "q", "--handler", "h", "--from-file",
                    str(path))
    assert mixed.returncode == 1, mixed.stderr
    out = mixed.stdout.split("\n")
    assert ID_RE.match(out[0]) and out[1] == "" and ID_RE.match(out[2]), mixed.stdout
    assert (f"error: {path} line 2: idempotency key 'k-10' is held by job {ids[10]} with another spec.payload "
            '({"n":10}, not {"n":11})') in mixed.stderr, mixed.stderr
    assert len(snapshot(cluster, namespace)) == len(before) + 2

    # A bad line: every bad line named by number and field, exit 2, nothing created at all.
    before = specs(cluster, namespace)
    bad = sextant(cluster, "jobs", "create", "-n", namespace, "--from-file", "-",
                  input=ndjson([{"queue": "q", "handler": "h"}, {"queue": "q", "handler": "h", "priority": "hi"},
                                {"queue": "Q", "handler": "h"}]))
    assert bad.returncode == 2 and bad.stdout == "", bad.stderr
    assert bad.stderr.splitlines() == [
        "error: stdin line 2: priority: Input should be a valid integer",
        "error: stdin line 3: queue: 'Q' is not a valid queue name: use lower-case letters, digits, '-' and '.', "
        "starting and ending with a letter or digit, at most 63 characters",
        "error: 2 of 3 lines are not valid jobs: nothing was created"], bad.stderr
    assert specs(cluster, namespace) == before


def test_the_sdk_and_the_http_api_create_many_with_a_result_per_item(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", paused=True), handler("h"))
    client = Client(kubeconfig.load(str(cluster.kubeconfig)))
    try:
        results = Jobs(lambda: client, namespace).create_many([
            {"queue": "q", "handler": "h", "idempotency_key": "a", "payload": {"x": 1}},
            {"queue": "q", "handler": "h"},
            {"queue": "q", "handler": "h", "idempotency_key": "a", "payload": {"x": 2}}])
    finally:
        client.close()
    assert [r.status for r in results] == [201, 201, 409]
    assert isinstance(results[2].error, KeyConflict) and results[2].error.fields == ["payload"]
    held = results[0].id

    token = grant(cluster, namespace, "api-user")
    before = specs(cluster, namespace)
    item = {"queue": "q", "handler": "h"}
    # One invalid item, or too many: 422 naming it, and nothing is created.
    invalid = api_call(operator, namespace, token, "/v2/jobs:batch", {"items": [item, {**item, "queue": "Q"}]})
    assert invalid.status_code == 422 and invalid.json()["error"]["field"] == "items[1].queue", invalid.text
    too_many = api_call(operator, namespace, token, "/v2/jobs:batch", {"items": [item] * (BATCH_MAX + 1)})
    assert too_many.status_code == 422 and too_many.json()["error"]["field"] == "items", too_many.text
    assert f"at most {BATCH_MAX}" in too_many.json()["error"]["message"]
    assert specs(cluster, namespace) == before

    answer = api_call(operator, namespace, token, "/v2/jobs:batch", {"items": [
        {**item, "payload": {"n": 1}},
        {**item, "idempotency_key": "a", "payload": {"x": 1}},  # the SDK's first job
        {**item, "idempotency_key": "a", "payload": {"x": 3}},  # held by it, with another payload
        {**item, "idempotency_key": "b"}, {**item, "idempotency_key": "b"},  # the second returns the first
        {"queue": "q", "handler": "nowhere"}]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    items = body["items"]
    assert [i["status"] for i in items] == [201, 200, 409, 201, 200, 201]
    assert (body["created"], body["replayed"], body["failed"]) == (3, 2, 1)
    assert items[1]["job"]["id"] == held and items[4]["job"]["id"] == items[3]["job"]["id"]
    assert items[2]["job"] is None and items[2]["error"]["field"] == "payload"
    assert items[2]["error"]["message"].startswith(f"idempotency key 'a' is held by job {held} with another payload")
    assert items[0]["job"]["payload"] == {"n": 1} and items[0]["job"]["state"] == "queued"
    assert "handler nowhere does not exist" in items[5]["job"]["warnings"][0]
    assert len(specs(cluster, namespace)) == len(before) + 3


def test_bulk_retry_of_one_queues_dead_jobs_leaves_other_queues_alone(cluster, namespace, operator):
    apply(cluster, namespace, queue("emails", maxAttempts=1, **FAST), queue("reports", maxAttempts=1, **FAST),
          handler("fails", annotations={EXIT: "3"}))
    create = ["jobs", "create", "-n", namespace, "--handler", "fails", "--queue"]
    emails = [ok(sextant(cluster, *create, "emails")).strip() for _ in range(3)]
    reports = [ok(sextant(cluster, *create, "reports")).strip() for _ in range(2)]
    for ident in emails + reports:
        wait_state(cluster, namespace, ident.replace("_", "-"), "dead")
    before = specs(cluster, namespace)

    # No terminal and no --yes: the count and the question, refused, nothing changed.
    asked = sextant(cluster, "jobs", "retry", "-n", namespace, "--state", "dead", "-q", "emails")
    assert asked.returncode == 1 and asked.stdout == "", asked.stderr
    assert asked.stderr.strip() == (f"error: Retry the 3 failed or dead jobs that match (queue emails, state dead, "
                                    f"in namespace {namespace})? Not asked: standard input is not a terminal; add "
                                    "--yes to confirm (nothing changed)")
    assert specs(cluster, namespace) == before

    done = sextant(cluster, "jobs", "retry", "-n", namespace, "--state", "dead", "-q", "emails", "--yes")
    assert ok(done).strip() == f"retry requested for 3 of 3 jobs (queue emails, state dead, in namespace {namespace})"
    for ident in emails:
        name = ident.replace("_", "-")
        wait_for(lambda: len(jobs(cluster, namespace)[name]["status"].get("attempts") or []) == 2
                 and jobs(cluster, namespace)[name]["status"].get("state") == "dead", 60,
                 message=f"job {ident} to run again and die")
    now = jobs(cluster, namespace)
    for ident in reports:  # the other queue's dead jobs: not asked, not run again
        job = now[ident.replace("_", "-")]
        assert "retryToken" not in job["spec"] and len(job["status"]["attempts"]) == 1, job
    # The HTTP API's dry run: the other queue's dead jobs counted and named, nothing changed.
    token = grant(cluster, namespace, "api-user")
    before = specs(cluster, namespace)
    dry = api_call(operator, namespace, token, "/v2/jobs:retry", {"queue": "reports", "dry_run": True})
    assert dry.status_code == 200, dry.text
    assert {k: dry.json()[k] for k in ("action", "dry_run", "matched", "requested", "remaining")} == {
        "action": "retry", "dry_run": True, "matched": 2, "requested": 0, "remaining": 0}
    assert sorted(dry.json()["ids"]) == sorted(reports)  # oldest first: by creation second, then id
    assert specs(cluster, namespace) == before
    wrong = api_call(operator, namespace, token, "/v2/jobs:retry", {"queue": "reports", "state": "queued"})
    assert wrong.status_code == 422 and wrong.json()["error"]["field"] == "state", wrong.text
    empty = api_call(operator, namespace, token, "/v2/jobs:retry", {})
    assert empty.status_code == 422 and "at least one of" in empty.json()["error"]["message"], empty.text
    assert specs(cluster, namespace) == before


def test_bulk_cancel_of_queued_jobs(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", paused=True), queue("other", paused=True), handler("h"))
    create = ["jobs", "create", "-n", namespace, "--handler", "h", "--queue"]
    mine = [ok(sextant(cluster, *create, "q")).strip() for _ in range(4)]
    theirs = [ok(sextant(cluster, *create, "other")).strip() for _ in range(2)]
    for ident in mine + theirs:
        wait_state(cluster, namespace, ident.replace("_", "-"), "queued")

    done = sextant(cluster, "jobs", "cancel", "-n", namespace, "--queue", "q", "--state", "queued", "--yes")
    assert ok(done).strip() == f"cancel requested for 4 of 4 jobs (queue q, state queued, in namespace {namespace})"
    for ident in mine:
        wait_state(cluster, namespace, ident.replace("_", "-"), "cancelled")
    assert {jobs(cluster, namespace)[i.replace("_", "-")]["status"]["state"] for i in theirs} == {"queued"}
    # Again: nothing left to cancel, and it says so.
    again = sextant(cluster, "jobs", "cancel", "-n", namespace, "--queue", "q", "--yes")
    assert again.returncode == 0 and again.stdout == "" and "no job to cancel" in again.stderr

    # The HTTP API: the other queue's, by a selection, with a count.
    token = grant(cluster, namespace, "api-user")
    answer = api_call(operator, namespace, token, "/v2/jobs:cancel", {"queue": "other", "state": "queued"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["matched"], body["requested"], body["refused"], body["remaining"]) == (2, 2, [], 0)
    assert sorted(body["ids"]) == sorted(theirs)
    for ident in theirs:
        wait_state(cluster, namespace, ident.replace("_", "-"), "cancelled")
