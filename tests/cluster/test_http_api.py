"""The /v2 HTTP API, served by a real `sextant operator` process, authenticated and authorized by the real API
server (TokenReview, SubjectAccessReview) against service-account tokens; checked against its OpenAPI document
with schemathesis."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sextant.http.openapi import document
from tests.harness import holds_for, wait_for

from .plugin_support import ID_RE, grant, job_json, sextant, snapshot
from .support import apply, handler, job, queue
from .test_worker import marks, serve_nap, wait_registered, worker_handler, workers  # noqa: F401

EXIT = "sextant.dev/test-exit-code"
FOREVER = {"sextant.dev/test-outcome": "run-forever"}
FAST = {"backoff": {"policy": "fixed", "initial": "200ms"}}


@dataclass
class Api:
    url: str
    namespace: str
    token: str
    http: httpx.Client

    def call(self, method: str, path: str, *, token: str | None = None, namespace: str | None = None,
             auth: str | None = None, **kwargs: Any) -> httpx.Response:
        params = {"namespace": namespace or self.namespace, **kwargs.pop("params", {})}
        header = auth if auth is not None else f"Bearer {token or self.token}"
        headers = {"Authorization": header} if header else {}
        resp = self.http.request(method, self.url + path, params=params, headers=headers, **kwargs)
        assert resp.headers["content-type"].startswith("application/json"), resp.text
        return resp

    def state(self, ident: str) -> str | None:
        return self.call("GET", f"/v2/jobs/{ident}").json()["state"]

    def wait_state(self, ident: str, state: str, timeout: float = 30) -> None:
        wait_for(lambda: self.state(ident) == state, timeout,
                 message=lambda: f"job {ident} to be {state}, it is {self.state(ident)}")


@pytest.fixture
def api(cluster, namespace, operator):
    token = grant(cluster, namespace, "api-user")
    with httpx.Client(timeout=30) as http:
        wait_for(lambda: http.get(operator.http_url + "/readyz").status_code == 200, 30,
                 message="the operator to be ready")
        yield Api(operator.http_url, namespace, token, http)


def test_jobs_through_the_api(cluster, api):
    apply(cluster, api.namespace, queue("q", maxAttempts=1, cancelGrace="1s", **FAST), handler("ok"),
          handler("fails", annotations={EXIT: "3"}), handler("slow", annotations=FOREVER))
    created = api.call("POST", "/v2/jobs", json={"queue": "q", "handler": "ok", "payload": {"orderId": 42},
                                                 "idempotency_key": "receipt-42", "priority": 2})
    assert created.status_code == 201, created.text
    job = created.json()
    assert ID_RE.match(job["id"]) and job["name"] == job["id"].replace("_", "-")
    assert created.headers["Location"] == f"/v2/jobs/{job['id']}?namespace={api.namespace}"
    assert {k: job[k] for k in ("queue", "handler", "payload", "idempotency_key", "priority", "namespace")} == {
        "queue": "q", "handler": "ok", "payload": {"orderId": 42}, "idempotency_key": "receipt-42", "priority": 2,
        "namespace": api.namespace}
    annotations = job_json(cluster, api.namespace, job["id"])["metadata"]["annotations"]
    assert annotations["sextant.dev/requested-by"] == f"system:serviceaccount:{api.namespace}:api-user"
    again = api.call("POST", "/v2/jobs", json={"queue": "q", "handler": "ok", "payload": {"orderId": 42},
                                               "idempotency_key": "receipt-42"})  # a replay: the same job
    assert again.status_code == 200 and again.json()["id"] == job["id"]
    assert again.headers["Idempotent-Replayed"] == "true"
    api.wait_state(job["id"], "succeeded")
    got = api.call("GET", f"/v2/jobs/{job['name']}").json()  # either spelling
    assert got["id"] == job["id"] and got["attempt"] == 1 and got["attempts"][0]["result"] == "succeeded"
    assert got["attempts"][0]["pod"] == f"{job['name']}-1" and got["attempts"][0]["node"]

    slow = api.call("POST", "/v2/jobs", json={"queue": "q", "handler": "slow"}).json()["id"]
    doomed = api.call("POST", "/v2/jobs", json={"queue": "q", "handler": "fails"}).json()["id"]
    later = api.call("POST", "/v2/jobs", json={"queue": "q", "handler": "ok",
                                               "run_at": "2099-01-01T00:00:00+01:00"}).json()
    assert later["run_at"] == "2098-12-31T23:00:00Z"
    api.wait_state(slow, "running")
    api.wait_state(doomed, "dead")
    api.wait_state(later["id"], "scheduled")

    refused = api.call("POST", f"/v2/jobs/{slow}/retry")
    assert refused.status_code == 409
    assert refused.json()["error"] == {"status": 409, "reason": "Conflict", "field": None, "message":
                                       f"job {slow}: cannot retry: the job is running; only failed or dead jobs "
                                       "can be retried"}
    refused = api.call("POST", f"/v2/jobs/{job['id']}/cancel")
    assert refused.status_code == 409 and "cannot cancel: the job is succeeded" in refused.json()["error"]["message"]
    assert job_json(cluster, api.namespace, job["id"])["spec"].get("cancel") is not True
    cancelled = api.call("POST", f"/v2/jobs/{slow}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["cancel_requested"] is True
    api.wait_state(slow, "cancelled")
    retried = api.call("POST", f"/v2/jobs/{doomed}/retry")
    assert retried.status_code == 200
    wait_for(lambda: len(api.call("GET", f"/v2/jobs/{doomed}").json()["attempts"]) == 2
             and api.state(doomed) == "dead", 30, message="the retried job to run again")

    def ids(**params: Any) -> list[str]:
        body = api.call("GET", "/v2/jobs", params=params).json()
        return [j["id"] for j in body["items"]]

    everything = sorted([job["id"], slow, doomed, later["id"]])  # the API server's order: by name
    assert ids() == everything
    # The filters are the API server's field selectors (the CRD's selectableFields), kubectl's too.
    assert ids(state="dead") == [doomed] and ids(handler="slow") == [slow] and ids(queue="nowhere") == []
    assert ids(state="cancelled", handler="slow", queue="q") == [slow]
    listed = cluster.kubectl("get", "-n", api.namespace, "jobs.sextant.dev", "--field-selector", "status.state=dead",
                             "-o", "name").stdout.split()
    assert listed == [f"job.sextant.dev/{doomed.replace('_', '-')}"]
    pages, token = [], None
    while True:
        body = api.call("GET", "/v2/jobs", params={"limit": 3, **({"continue": token} if token else {})}).json()
        pages.append([j["id"] for j in body["items"]])
        token = body["continue"]
        if token is None:
            break
    assert pages == [everything[:3], everything[3:]]

    counted = {"scheduled": 1, "queued": 0, "running": 0, "succeeded": 1, "failed": 0, "dead": 1, "cancelled": 1}
    # The unfinished numbers are the Queue's status, written every few seconds: they agree within a few.
    wait_for(lambda: api.call("GET", "/v2/queues").json()["items"][0]["jobs"] == counted, 30,
             message=lambda: f"/v2/queues to count {counted}: {api.call('GET', '/v2/queues').json()}")
    queues = api.call("GET", "/v2/queues").json()["items"]
    assert [(q["name"], q["exists"], q["concurrency"], q["running"]) for q in queues] == [("q", True, 10, 0)]
    missing = api.call("GET", "/v2/jobs/job_zzzzzzzz")
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == f"job job_zzzzzzzz not found in namespace {api.namespace}"
    assert api.call("POST", "/v2/jobs/job_zzzzzzzz/cancel").status_code == 404


def test_a_create_whose_queue_or_handler_does_not_exist_warns_and_every_create_answers_its_first_state(cluster,
                                                                                                     api):
    apply(cluster, api.namespace, queue("q"), handler("ok"))
    ns = api.namespace
    lost = api.call("POST", "/v2/jobs", json={"queue": "gretings", "handler": "nope"})
    assert lost.status_code == 201, lost.text  # created all the same: it runs once they exist
    words = [f"queue gretings does not exist in namespace {ns}: the job waits (Blocked, QueueNotFound) until it is "
             "created",
             f"handler nope does not exist in namespace {ns}: the job waits (Blocked, HandlerNotFound) until it is "
             "created"]
    assert lost.json()["warnings"] == words and lost.json()["state"] == "queued"
    assert lost.headers.get_list("Warning") == [f'299 - "{w}"' for w in words]  # as the API server sends them
    fine = api.call("POST", "/v2/jobs", json={"queue": "q", "handler": "ok", "run_at": "2099-01-01T00:00:00Z"})
    assert fine.status_code == 201 and fine.json()["warnings"] == [] and "Warning" not in fine.headers
    assert fine.json()["state"] == "scheduled"  # not null: the first state, before the operator writes it

    def blocked() -> list[str]:
        conditions = (job_json(cluster, ns, lost.json()["id"]).get("status") or {}).get("conditions") or []
        return [c["reason"] for c in conditions if c["type"] == "Blocked" and c["status"] == "True"]

    wait_for(lambda: blocked() == ["QueueNotFound"], 30, message=lambda: f"the job to be Blocked: {blocked()}")
    # The CLI says the same on stderr, and succeeds: the job exists.
    made = sextant(cluster, "jobs", "create", "-n", ns, "--queue", "gretings", "--handler", "ok")
    assert made.returncode == 0 and ID_RE.match(made.stdout.strip()), made.stderr
    assert made.stderr == f"Warning: {words[0]}\n"
    quiet = sextant(cluster, "jobs", "create", "-n", ns, "--queue", "q", "--handler", "ok")
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_queues_are_served_from_the_queues_status_and_the_finished_counts(cluster, api):
    apply(cluster, api.namespace, queue("q", concurrency=2, maxAttempts=1), handler("slow", annotations=FOREVER),
          handler("fails", annotations={EXIT: "3"}))
    doomed = api.call("POST", "/v2/jobs", json={"queue": "q", "handler": "fails"}).json()["id"]
    api.wait_state(doomed, "dead")
    for _ in range(3):
        api.call("POST", "/v2/jobs", json={"queue": "q", "handler": "slow"})
    api.call("POST", "/v2/jobs", json={"queue": "q", "handler": "slow", "run_at": "2099-01-01T00:00:00Z"})
    api.call("POST", "/v2/jobs", json={"queue": "gretings", "handler": "slow"})

    def status() -> dict[str, Any]:
        return job_json_queue(cluster, api.namespace, "q")

    wanted = {"running": 2, "queued": 1, "scheduled": 1, "failed": 0}
    wait_for(lambda: {k: status().get(k) for k in wanted} == wanted, 60,
             message=lambda: f"the Queue's status to count {wanted}: {status()}")
    items = {q["name"]: q for q in api.call("GET", "/v2/queues").json()["items"]}
    q = items["q"]
    kept = status()
    assert (q["running"], q["starting"]) == (kept["running"], kept["starting"])  # `kubectl get squeue`'s numbers
    assert q["jobs"] == {"scheduled": 1, "queued": 1, "running": 2, "failed": 0, "succeeded": 0, "dead": 1,
                         "cancelled": 0}
    assert q["oldest_queued_at"] == kept["oldestQueuedAt"]
    lost = items["gretings"]  # no Queue, so no status: counted from its jobs
    assert lost["exists"] is False and lost["jobs"]["queued"] == 1 and lost["concurrency"] is None


def job_json_queue(cluster, namespace: str, name: str) -> dict[str, Any]:
    return json.loads(cluster.kubectl("get", "-n", namespace, "queues.sextant.dev", name, "-o", "json").stdout
                      ).get("status") or {}


def test_twenty_concurrent_creates_with_one_key_make_one_job(cluster, api):
    start = threading.Barrier(20)

    def create(_: int) -> httpx.Response:
        start.wait()
        return api.call("POST", "/v2/jobs", json={"queue": "q", "handler": "h", "idempotency_key": "charge-7"})

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(create, range(20)))
    assert sorted(a.status_code for a in answers) == [200] * 19 + [201], [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
    assert len(snapshot(cluster, api.namespace)) == 1


def test_authentication_and_authorization(cluster, api):
    other = cluster.create_namespace(f"{api.namespace[:50]}-b")
    try:
        theirs = cluster.kubectl("create", "-n", other, "-o", "name", "-f", "-", input=(
            "apiVersion: sextant.dev/v1alpha1\nkind: Job\nmetadata: {name: job-theirs}\n"
            "spec: {queue: q, handler: h}\n")).stdout.strip()
        assert theirs.endswith("job-theirs")
        before = snapshot(cluster, other)
        for auth, words in [("", "no credentials"), ("Basic dXNlcjpwdw==", "must be `Bearer <token>`"),
                            ("Bearer not-a-token", "the token was not accepted")]:
            answer = api.call("GET", "/v2/jobs", auth=auth)
            assert answer.status_code == 401 and words in answer.json()["error"]["message"]
            assert answer.headers["WWW-Authenticate"].startswith("Bearer")
        user = f"system:serviceaccount:{api.namespace}:api-user"
        for method, path, verb, resource, body in [
            ("POST", "/v2/jobs", "create", "jobs", {"queue": "q", "handler": "h"}),
            ("GET", "/v2/jobs", "list", "jobs", None),
            ("GET", "/v2/jobs/job_theirs", "get", "jobs", None),
            ("POST", "/v2/jobs/job_theirs/cancel", "patch", "jobs", None),
            ("POST", "/v2/jobs/job_theirs/retry", "patch", "jobs", None),
            ("GET", "/v2/queues", "list", "queues", None),
        ]:
            answer = api.call(method, path, namespace=other, json=body)
            assert answer.status_code == 403, (path, answer.text)
            assert answer.json()["error"]["message"] == (
                f'User "{user}" cannot {verb} resource "{resource}" in API group "sextant.dev" in the namespace '
                f'"{other}"')
        assert snapshot(cluster, other) == before
        assert api.call("GET", "/v2/jobs").status_code == 200  # the same caller, in its own namespace
        # A caller of that other namespace: its jobs are listed (the API server's pages), but queue numbers come
        # from the operator's view, and this operator does not watch it.
        theirs_token = grant(cluster, other, "their-user")
        listed = api.call("GET", "/v2/jobs", token=theirs_token, namespace=other)
        assert listed.status_code == 200 and [j["id"] for j in listed.json()["items"]] == ["job_theirs"]
        unwatched = api.call("GET", "/v2/queues", token=theirs_token, namespace=other)
        assert unwatched.status_code == 404
        assert unwatched.json()["error"]["message"].startswith(f"namespace {other} is not watched by this operator")
        readonly = grant(cluster, api.namespace, "reader", verbs="get,list")
        denied = api.call("POST", "/v2/jobs", token=readonly, json={"queue": "q", "handler": "h"})
        assert denied.status_code == 403 and "cannot create resource" in denied.json()["error"]["message"]
        assert snapshot(cluster, api.namespace) == {}
    finally:
        cluster.delete_namespace(other)


def test_cancel_and_retry_are_authorized_as_the_patch_they_make(cluster, api):
    apply(cluster, api.namespace, queue("q", maxAttempts=1, **FAST), handler("fails", annotations={EXIT: "3"}))
    doomed = api.call("POST", "/v2/jobs", json={"queue": "q", "handler": "fails"}).json()["id"]
    later = api.call("POST", "/v2/jobs", json={"queue": "q", "handler": "fails",
                                               "run_at": "2099-01-01T00:00:00Z"}).json()["id"]
    api.wait_state(doomed, "dead")
    api.wait_state(later, "scheduled")
    before = snapshot(cluster, api.namespace)
    # get, create and update, but not patch: refused by the API's own check, naming the verb, nothing changes
    no_patch = grant(cluster, api.namespace, "no-patch", verbs="get,list,create,update")
    for verb, ident in (("cancel", later), ("retry", doomed)):
        answer = api.call("POST", f"/v2/jobs/{ident}/{verb}", token=no_patch)
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["message"].startswith(
            f'User "system:serviceaccount:{api.namespace}:no-patch" cannot patch resource "jobs"')
    assert snapshot(cluster, api.namespace) == before
    # get and patch, nothing else: what cancel and retry need
    patch_only = grant(cluster, api.namespace, "patch-only", verbs="get,patch")
    assert api.call("POST", f"/v2/jobs/{doomed}/retry", token=patch_only).status_code == 200
    cancelled = api.call("POST", f"/v2/jobs/{later}/cancel", token=patch_only)
    assert cancelled.status_code == 200 and cancelled.json()["cancel_requested"] is True
    api.wait_state(later, "cancelled")


def test_lists_are_the_api_servers_pages(cluster, api):
    """More jobs than a page: every job once, in pages of at most `limit`, each page one list request of the API
    server (never the whole namespace), the filters applied there so that filtered pages are full too."""
    jobs = [job(f"job-page{i:04d}", "emails" if i % 3 else "reports", "h") for i in range(45)]
    apply(cluster, api.namespace, *jobs)
    names = sorted(j["metadata"]["name"].replace("-", "_") for j in jobs)
    reports = sorted(n for i, n in enumerate(f"job_page{i:04d}" for i in range(45)) if i % 3 == 0)

    def upstream_lists() -> float:
        return metric(api, "sextant_http_kube_requests_total", verb="list", resource="jobs", code="200")

    def walk(limit: int, **filters: str) -> list[list[str]]:
        pages, token = [], None
        while True:
            params = {"limit": limit, **filters, **({"continue": token} if token else {})}
            body = api.call("GET", "/v2/jobs", params=params).json()
            pages.append([j["id"] for j in body["items"]])
            token = body["continue"]
            if token is None:
                return pages

    before = upstream_lists()
    pages = walk(10)
    assert [len(p) for p in pages] == [10, 10, 10, 10, 5]
    assert [i for p in pages for i in p] == names
    assert upstream_lists() - before == len(pages)  # one request of one page each
    pages = walk(4, queue="reports")
    assert [len(p) for p in pages] == [4, 4, 4, 3] and [i for p in pages for i in p] == reports
    bogus = api.call("GET", "/v2/jobs", params={"limit": 10, "continue": "bm90LWEtdG9rZW4"})  # "not-a-token"
    assert bogus.status_code == 422 and bogus.json()["error"]["field"] == "continue"


def metric(api: Api, name: str, **labels: str) -> float:
    """A sample of the operator's /metrics (0 when absent)."""
    text = api.http.get(api.url + "/metrics").text
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_bad_input_is_422_naming_the_field_and_changes_nothing(cluster, api):
    existing = api.call("POST", "/v2/jobs", json={"queue": "q", "handler": "h"}).json()["id"]
    before = snapshot(cluster, api.namespace)
    post = "/v2/jobs"
    cases = [
        ("POST", post, {"content": b"{not json"}, {}, "body", "not valid JSON"),
        ("POST", post, {"json": [1, 2]}, {}, "body", "a JSON object"),
        ("POST", post, {"content": b"[" * 100_000 + b"]" * 100_000}, {}, "body", "nests deeper than 101 levels"),
        ("POST", post, {"content": b'{"queue": "q", "handler": "h", "payload": ' + b'{"a": ' * 200 + b"{}"
                                   + b"}" * 201}, {}, "body", "the payload at most 100"),
        ("POST", post, {"json": {"handler": "h"}}, {}, "queue", "required"),
        ("POST", post, {"json": {"queue": "Emails!", "handler": "h"}}, {}, "queue", "not a valid queue name"),
        ("POST", post, {"json": {"queue": "q", "handler": "h", "payload": [1]}}, {}, "payload", "an object"),
        ("POST", post, {"json": {"queue": "q", "handler": "h", "run_at": "2026-01-01T10:00:00"}}, {}, "run_at",
         "timezone"),
        ("POST", post, {"json": {"queue": "q", "handler": "h", "run_at": "tomorrow"}}, {}, "run_at", "datetime"),
        ("POST", post, {"json": {"queue": "q", "handler": "h", "idempotency_key": ""}}, {}, "idempotency_key",
         "at least 1 character"),
        ("POST", post, {"json": {"queue": "q", "handler": "h", "priority": 2**40}}, {}, "priority", "less than"),
        ("POST", post, {"json": {"queue": "q", "handler": "h", "priorty": 1}}, {}, "priorty", "unknown field"),
        ("POST", post, {"json": {"queue": "q", "handler": "h"}}, {"namespace": "Not_A_Namespace"}, "namespace",
         "not a valid namespace"),
        ("GET", post, {}, {"state": "done"}, "state", "'done' is not a state"),
        ("GET", post, {}, {"limit": "0"}, "limit", "between 1 and 1000"),
        ("GET", post, {}, {"limit": "many"}, "limit", "not an integer"),
        ("GET", post, {}, {"continue": "garbage"}, "continue", "not a continue token"),
        ("GET", post, {}, {"queue": "Q!"}, "queue", "not a valid queue name"),
        ("POST", "/v2/jobs/JOB!/cancel", {}, {}, "job_id", "is not a job id"),
        ("GET", "/v2/jobs/job_x_", {}, {}, "job_id", "is not a job id"),
    ]
    for method, path, body, params, field, words in cases:
        namespace = params.pop("namespace", None)
        answer = api.call(method, path, params=params, namespace=namespace, **body)
        error = answer.json()["error"]
        assert answer.status_code == 422 and error["field"] == field, (path, body, params, answer.text)
        assert words in error["message"] and error["message"].startswith(f"{field}: "), error["message"]
    assert snapshot(cluster, api.namespace) == before and existing.replace("_", "-") in before


def test_the_implementation_matches_its_openapi_document(cluster, api, tmp_path):
    served = api.http.get(api.url + "/v2/openapi.json")
    assert served.status_code == 200 and served.json() == document()
    config = tmp_path / "schemathesis.toml"
    config.write_text(f'[parameters]\n"query.namespace" = "{api.namespace}"\n')
    st = Path(sys.executable).with_name("st")
    run = subprocess.run(
        [str(st), "--config-file", str(config), "run", api.url + "/v2/openapi.json", "--max-examples", "20",
         "--phases", "examples,coverage,fuzzing", "--workers", "1", "--seed", "1", "--no-color",
         "--header", f"Authorization: Bearer {api.token}",
         "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
                     "response_schema_conformance,response_headers_conformance,negative_data_rejection",
         "--generation-database", "none", "--suppress-health-check", "all", "--request-timeout", "30"],
        capture_output=True, text=True, timeout=300, env=cluster.env, cwd=tmp_path)  # its .schemathesis/ goes there
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]


def test_pause_and_resume_through_the_api_hold_a_worker_queue_and_keep_its_order(cluster, api, workers,  # noqa: F811
                                                                                   tmp_path):
    apply(cluster, api.namespace, queue("q", concurrency=1, **FAST), worker_handler("nap"))
    serve_nap(workers, "w0", "--concurrency", "4")
    wait_registered(cluster, api.namespace, "w0")
    paused = api.call("POST", "/v2/queues/q/pause")
    assert paused.status_code == 200 and paused.json()["paused"] is True, paused.text
    made = [api.call("POST", "/v2/jobs", json={"queue": "q", "handler": "nap",
                                               "payload": {"seconds": 0.3, "dir": str(tmp_path)}}).json()
            for _ in range(3)]
    names = [m["name"] for m in made]
    # Jobs keep arriving queued; nothing starts on the worker while the queue is paused, and its status says so.
    wait_for(lambda: (json.loads(cluster.kubectl("get", "squeue", "q", "-n", api.namespace, "-o", "json").stdout)
                      .get("status") or {}).get("paused") is True, 20, message="the operator to say q is paused")
    holds_for(lambda: all(api.state(m["id"]) == "queued" for m in made)
              and not list(tmp_path.glob("*.started")), 3, interval=0.5, message="nothing starts while paused")
    resumed = api.call("POST", "/v2/queues/q/resume")
    assert resumed.status_code == 200 and resumed.json()["paused"] is False, resumed.text
    for m in made:
        api.wait_state(m["id"], "succeeded")
    # concurrency 1: one after the other, in the order they were created
    started = {n: float(marks(tmp_path, f"{n}.1.started")[0].split()[1]) for n in names}
    assert sorted(names, key=started.__getitem__) == names, started
    missing = api.call("POST", "/v2/queues/nope/pause")
    assert missing.status_code == 404 and "queue nope not found" in missing.json()["error"]["message"]
