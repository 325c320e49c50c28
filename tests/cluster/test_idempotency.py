"""Idempotency keys on every create path (the CLI, the HTTP API, the SDK's ctx.jobs.create): a key held by a job
that `kubectl apply` made under a name of its own returns that job, and nothing is created; a key held by a job
with another queue, handler or payload is refused on every path, naming the field, and nothing is created; and the
window's end, with the window shortened for the test (SEXTANT_IDEMPOTENCY_WINDOW, given to the operator and to the
CLI alike): a keyed job outlives a shorter retention until its key expires, and after the window the key makes a
new job."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import httpx

from sextant.kube import kubeconfig
from sextant.client import Client, KeyConflict
from sextant.resources.contract import ENV_IDEMPOTENCY_WINDOW as WINDOW_ENV
from sextant.resources.common import parse_time
from sextant.runner.chaining import Jobs
from tests.harness import wait_for

from .plugin_support import ID_RE, grant, ok, sextant, snapshot
from .support import Operator, apply, handler, job, jobs, queue, status, wait_state

FAST = {"backoff": {"policy": "fixed", "initial": "200ms"}}
WINDOW = 15  # seconds, in the window test


def post_job(operator, namespace: str, token: str, body: dict) -> httpx.Response:
    """POST /v2/jobs as the token's user, once the operator is ready."""
    with httpx.Client(timeout=30) as http:
        wait_for(lambda: http.get(operator.http_url + "/readyz").status_code == 200, 30, message="operator ready")
        return http.post(operator.http_url + "/v2/jobs", params={"namespace": namespace},
                         headers={"Authorization": f"Bearer {token}"}, json=body)


def test_every_create_path_returns_the_applied_job_that_holds_the_key(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", **FAST), handler("ok"),
          job("job-applied", "q", "ok", idempotencyKey="receipt-42", payload={"orderId": 42}))
    wait_state(cluster, namespace, "job-applied", "succeeded")
    before = snapshot(cluster, namespace)

    # The CLI: the id of the applied job on stdout, a note on stderr, nothing created.
    made = sextant(cluster, "jobs", "create", "-n", namespace, "--queue", "q", "--handler", "ok",
                   "--payload", '{"orderId": 42}', "--idempotency-key", "receipt-42")
    assert ok(made).strip() == "job_applied"
    assert "already used" in made.stderr and "job_applied" in made.stderr
    # The HTTP API: 200 with the applied job, Idempotent-Replayed.
    token = grant(cluster, namespace, "api-user")
    answer = post_job(operator, namespace, token, {"queue": "q", "handler": "ok", "payload": {"orderId": 42},
                                                   "idempotency_key": "receipt-42"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["id"] == "job_applied" and answer.headers["Idempotent-Replayed"] == "true"
    # The SDK: ctx.jobs.create, as a handler calls it.
    client = Client(kubeconfig.load(str(cluster.kubeconfig)))
    try:
        sdk = Jobs(lambda: client, namespace)
        assert sdk.create(queue="q", handler="ok", payload={"orderId": 42}, idempotency_key="receipt-42") \
            == "job_applied"
        # A key that holds nothing is created as before; a key with a comma and an equals sign is found again.
        odd = "order=7,retry"
        first = sdk.create(queue="q", handler="ok", idempotency_key=odd)
        assert ID_RE.match(first) and sdk.create(queue="q", handler="ok", idempotency_key=odd) == first
    finally:
        client.close()

    after = snapshot(cluster, namespace)
    assert {k: v for k, v in after.items() if k in before} == before  # the applied job untouched
    assert len(after) == len(before) + 1  # only the odd key's job is new
    assert not [j for j in jobs(cluster, namespace).values() if (j.get("status") or {}).get("duplicateOf")]


def test_a_key_held_by_another_job_is_refused_on_every_create_path_naming_the_field(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", **FAST), handler("ok"))
    client = Client(kubeconfig.load(str(cluster.kubeconfig)))
    token = grant(cluster, namespace, "api-user")
    try:
        held, created = client.create_job(namespace, queue="q", handler="ok", payload={"orderId": 42},
                                          idempotency_key="receipt-42")
        ident = held["metadata"]["name"].replace("-", "_")
        assert created
        wait_state(cluster, namespace, held["metadata"]["name"], "succeeded")
        before = snapshot(cluster, namespace)
        held_by = f"idempotency key 'receipt-42' is held by job {ident} with another"

        # The Python client: KeyConflict (a Refused), naming the field and both values.
        try:
            client.create_job(namespace, queue="other", handler="ok", payload={"orderId": 42},
                              idempotency_key="receipt-42")
        except KeyConflict as exc:
            assert exc.fields == ["queue"] and exc.job == ident
            assert str(exc).startswith(f"{held_by} spec.queue (q, not other)"), str(exc)
        else:
            raise AssertionError("a create with another queue was answered with the key's job")

        # The HTTP API: 409 in the API's error format, error.field naming the field.
        answer = post_job(operator, namespace, token, {"queue": "q", "handler": "other", "payload": {"orderId": 42},
                                                       "idempotency_key": "receipt-42"})
        assert answer.status_code == 409, answer.text
        error = answer.json()["error"]
        assert (error["status"], error["reason"], error["field"]) == (409, "Conflict", "handler"), error
        assert error["message"].startswith(f"{held_by} handler (ok, not other)"), error["message"]

        # The CLI: exit 1, nothing on stdout, that one line on stderr.
        made = sextant(cluster, "jobs", "create", "-n", namespace, "--queue", "q", "--handler", "ok",
                       "--payload", '{"orderId": 43}', "--idempotency-key", "receipt-42")
        assert made.returncode == 1 and made.stdout == "", (made.returncode, made.stdout, made.stderr)
        lines = made.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            f'error: {held_by} spec.payload ({{"orderId":42}}, not {{"orderId":43}})'), made.stderr

        # The SDK's ctx.jobs.create: KeyConflict, every differing field named.
        try:
            Jobs(lambda: client, namespace).create(queue="other", handler="ok", payload={},
                                                   idempotency_key="receipt-42")
        except KeyConflict as exc:
            assert exc.fields == ["queue", "payload"], exc.fields
            assert "spec.queue (q, not other) and spec.payload" in str(exc), str(exc)
        else:
            raise AssertionError("ctx.jobs.create with another queue and payload returned the key's job")

        assert snapshot(cluster, namespace) == before  # no second job, the holder untouched
        # A replay (another priority and run time: not what the job does) still answers the first job.
        again = sextant(cluster, "jobs", "create", "-n", namespace, "--queue", "q", "--handler", "ok",
                        "--payload", '{"orderId": 42}', "--idempotency-key", "receipt-42", "--priority", "9",
                        "--in", "1h")
        assert ok(again).strip() == ident and "already used" in again.stderr
        assert snapshot(cluster, namespace) == before
    finally:
        client.close()


def test_the_window_ends_and_a_keyed_job_outlives_its_retention_until_then(cluster, namespace, crds, tmp_path,
                                                                           request, monkeypatch):
    monkeypatch.setenv(WINDOW_ENV, f"{WINDOW}s")  # the operator started below inherits it
    op = Operator(cluster.kubeconfig, namespace, tmp_path)
    request.node._sextant_operator = op
    op.start()
    env = {**cluster.env, WINDOW_ENV: f"{WINDOW}s"}

    def create(key: str) -> tuple[str, bool]:
        proc = sextant(cluster, "jobs", "create", "-n", namespace, "--queue", "q", "--handler", "ok",
                       "--idempotency-key", key, env=env)
        return ok(proc).strip(), "already used" not in proc.stderr

    def created_at(name: str) -> datetime:
        raw = json.loads(cluster.kubectl("get", "-n", namespace, "jobs.sextant.dev", name, "-o", "json").stdout)
        return parse_time(raw["metadata"]["creationTimestamp"])

    try:
        with httpx.Client(timeout=10) as http:
            wait_for(lambda: http.get(op.http_url + "/readyz").status_code == 200, 60, message="operator ready")
        apply(cluster, namespace, queue("q", retention={"succeeded": "1s"}, **FAST), handler("ok"))
        ident, made = create("receipt-1")
        apply(cluster, namespace, job("job-mine", "q", "ok", idempotencyKey="nightly"))
        assert made and ID_RE.match(ident)
        name = ident.replace("_", "-")
        born = created_at(name)
        finished = parse_time(wait_state(cluster, namespace, name, "succeeded")["finishedAt"])
        assert (finished - born).total_seconds() < WINDOW - 8, "the job finished too late for this test"
        # Past its retention of 1 s, inside the key's window: kept, and the key still returns it.
        wait_for(lambda: (datetime.now(timezone.utc) - finished).total_seconds() > 2, 10, message="retention over")
        assert create("receipt-1") == (ident, False)
        assert create("nightly") == ("job_mine", False)  # an applied job's key, too
        assert status(cluster, namespace, name)["state"] == "succeeded"

        # The key expires WINDOW s after the job's creation; then retention deletes it.
        def gone() -> bool:
            return name not in jobs(cluster, namespace)

        wait_for(gone, WINDOW + 20, interval=0.2, message=f"{name} deleted once its key expired")
        deleted = datetime.now(timezone.utc)
        assert (deleted - born).total_seconds() >= WINDOW - 1, (born, deleted)  # creationTimestamp is to the second

        # After the window the key makes a new job, which runs (no duplicate).
        again, made = create("receipt-1")
        assert made and created_at(again.replace("_", "-")) > born
        wait_for(lambda: "job-mine" not in jobs(cluster, namespace)
                 or (datetime.now(timezone.utc) - created_at("job-mine")).total_seconds() > WINDOW, WINDOW + 10,
                 message="job-mine's key to expire")
        fresh, made = create("nightly")
        assert made and fresh != "job_mine"
        final = wait_state(cluster, namespace, fresh.replace("_", "-"), "succeeded", "cancelled")
        assert final["state"] == "succeeded" and not final.get("duplicateOf"), final
    finally:
        op.stop()
