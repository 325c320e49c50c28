"""Hardening (issue 16): no object, no outage and no broken connection stops the operator.

- Adversarial objects (hypothesis): Jobs, Queues, Handlers, Schedules and Leases with extreme and malformed times
  and durations, huge numbers, unicode, deep payloads, missing and extra fields, created against the real API
  server with the operator running. Whatever the server accepts, the operator stays alive and ready, no loop of
  it ever restarts, and a normal job created afterwards in the same namespace succeeds.
- The control plane stopped for ~10 s in the middle of a run (its own cluster, not the session's): the operator
  stays up (same process), all jobs succeed, one pod per attempt; the recovery time is measured and printed.
- A proxy in front of the API server that cuts watches mid-chunk, slips malformed lines in, answers 429/503/410
  and loses answers to writes: no exit, no lost event, no job run twice.
- The watches of Queues and Schedules struck with what used to end the process when kopf watched them: a
  malformed line, a watch answered 410, an object nested 9,900 levels deep. The process stays up, readiness
  drops while a watch is down and comes back, and a change made afterwards reaches the controllers.
"""

from __future__ import annotations

import itertools
import json
import time
from datetime import datetime
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sextant.kube import kubeconfig
from sextant.dev.localcluster import LocalCluster, new_name
from tests.harness import Cluster, holds_for, wait_for
from tests.harness.faultproxy import FaultProxy

from .conftest import CRDS
from .support import KWOK_TOLERATION, Operator, apply, get_json, handler, job, proxied_kubeconfig, queue, wait_state

API = "/apis/sextant.dev/v1alpha1"
DEEP = "__DEEP_PAYLOAD__"  # replaced by a payload nested this deep, written as text (no Python recursion)


def ready(op: Operator) -> bool:
    try:
        return httpx.get(f"{op.http_url}/readyz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def alive(op: Operator) -> bool:
    return op.proc is not None and op.proc.poll() is None


def metric(op: Operator, name: str) -> float:
    """The sum of a metric's samples on the operator's /metrics (0 when it has none)."""
    text = httpx.get(f"{op.http_url}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))


def metric_lines(op: Operator, name: str) -> list[str]:
    text = httpx.get(f"{op.http_url}/metrics", timeout=10).text
    return [line for line in text.splitlines() if line.startswith(name)]


# ================================================================ adversarial objects
# Each object is a sane one (already full of extreme but valid values: times at the ends of the range, the longest
# durations, 64-bit counts, unicode, deep and large payloads, odd but well-formed crons and zones) with a few
# fields then mutated to something wild (out of range, malformed, of the wrong type, missing) and unknown fields
# added. The server refuses some; the operator must digest whatever it accepts.
def rfc3339(moment: Any, minutes: int | None) -> str:
    """Any datetime with any offset Go accepts (±23:59), or Z."""
    if minutes is None:
        return moment.isoformat() + "Z"
    return f"{moment.isoformat()}{'+' if minutes >= 0 else '-'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


OFFSETS = st.none() | st.integers(-(24 * 60 - 1), 24 * 60 - 1)
SANE_TIMES = st.sampled_from(["9000-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "2000-01-01T00:00:00Z",
                              "2026-12-01T10:00:00.123456789Z", "2026-12-01T10:00:00+23:59",
                              "2020-02-29T23:59:59.999999Z", "2999-12-31T23:59:59-23:59"]) | st.builds(
    rfc3339, st.datetimes(datetime(1970, 1, 2), datetime(8999, 12, 30)), OFFSETS)
WILD_TIMES = st.sampled_from([
    "9999-12-31T23:59:59-01:00", "9999-12-31T23:59:59Z", "0000-01-01T00:00:00Z", "0001-01-01T00:00:00Z",
    "1969-12-31T23:59:59Z", "8999-12-31T23:59:59-23:59", "2026-12-01t10:00:00z", "2026-12-31T23:59:60Z",
    "2100-02-29T00:00:00Z", "", "now", "2026-12-01"]) | st.builds(rfc3339, st.datetimes(), OFFSETS) | st.text(max_size=30)
MICROTIMES = st.sampled_from([
    "0000-01-01T00:00:00.000000Z", "0001-01-01T00:00:00.000000Z", "9999-12-31T23:59:59.999999-01:00",
    "9999-12-31T23:59:59.999999Z", "1969-01-01T00:00:00.000000Z", "2026-12-01T10:00:00.000000Z",
    "2000-01-01T00:00:00.000000+14:00", "garbage", ""]) | st.builds(
    lambda m: m.isoformat(timespec="microseconds") + "Z", st.datetimes())
SANE_DURATIONS = st.sampled_from(["0s", "1ms", "0.0001ms", "1s", "2s", "30s", "1h30m", "87600h", "1.5h", "10m",
                                  "500ms", "87599h59m59s999ms", "0.5s"])
LEASES = st.sampled_from(["1s", "1.5s", "30s", "87600h", "2s"])
WILD_DURATIONS = st.sampled_from(["87600h1ms", "99999999h", "9" * 31 + "s", "1d", "-1s", "", "2562047h", "2562048h",
                                  "0.9s"]) | st.from_regex(r"\A([0-9]{1,12}(\.[0-9]{1,4})?(ms|s|m|h)){1,3}\Z") | st.text(max_size=12)
SANE_INTS = st.sampled_from([0, 1, 2, 5, 100, 1000, 2**31 - 1, -(2**31)])
WILD_INTS = st.sampled_from([-1, 1001, 2**31, -(2**31) - 1, 2**53 + 1, 2**63 - 1, -(2**63)]) | st.integers(
    -(2**63), 2**63 - 1)
FLOATS = st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 100.0, 1e-300, 0.1, 100.0001, 1e308, -1.0]) | st.floats(
    allow_nan=False, allow_infinity=False)
TEXT = st.sampled_from(["q1", "h1", "\u202e\u0000", "🙂" * 20, "a/b", "Ω", "x" * 63, "k-1", "", "x" * 300]) | st.text(
    min_size=1, max_size=40)
JSON_VALUES = st.recursive(st.none() | st.booleans() | WILD_INTS | FLOATS | TEXT,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                           max_leaves=12)
PAYLOADS = st.one_of(st.dictionaries(TEXT, JSON_VALUES, max_size=4), st.just(DEEP), st.just({"big": "x" * 200_000}))
WRONG_TYPE = st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=5),
                       st.booleans(), st.just([1, 2]), st.just({"x": 1}), st.none())
QUEUES, HANDLERS = ["q1", "q2"], ["h1", "h2"]
DEPTHS = st.sampled_from([101, 255, 300, 1_100, 5_000, 9_990])
KWOK_OUTCOMES = st.fixed_dictionaries({}, optional={
    "sextant.dev/test-exit-code": st.sampled_from(["0", "1", "2", "137", "255"]),
    "sextant.dev/test-duration": st.sampled_from(["0s", "300ms", "2s"]),
    "sextant.dev/test-outcome": st.just("run-forever"),
})


def sane_backoff() -> st.SearchStrategy[dict[str, Any]]:
    ordered = st.tuples(SANE_DURATIONS, SANE_DURATIONS).map(
        lambda pair: sorted(pair, key=lambda d: _seconds(d)))
    return st.builds(lambda policy, pair, factor, jitter: {"policy": policy, "initial": pair[0], "max": pair[1],
                                                          "factor": factor, "jitter": jitter},
                     st.sampled_from(["exponential", "fixed"]), ordered, st.floats(1.0, 100.0), st.floats(0.0, 1.0))


def _seconds(duration: str) -> float:
    from sextant.resources.common import parse_duration

    return parse_duration(duration).total_seconds()


SANE = {
    "Job": {"queue": st.sampled_from([*QUEUES, "no-such-queue"]), "handler": st.sampled_from([*HANDLERS, "nobody"]),
            "payload": PAYLOADS, "runAt": SANE_TIMES, "idempotencyKey": TEXT.filter(lambda t: 0 < len(t) <= 253),
            "priority": SANE_INTS, "cancel": st.booleans(), "retryToken": TEXT.filter(lambda t: len(t) <= 253)},
    "Queue": {"concurrency": st.sampled_from([1, 2, 5, 2**31, 2**63 - 1]), "maxAttempts": st.sampled_from([1, 2, 1000]),
              "backoff": sane_backoff(), "timeout": SANE_DURATIONS, "leaseDuration": LEASES,
              "cancelGrace": SANE_DURATIONS,
              "retention": st.fixed_dictionaries({}, optional={k: SANE_DURATIONS for k in
                                                               ("succeeded", "cancelled", "dead", "pods")})},
    "Handler": {"template": st.builds(
        lambda extra, annotations: {"metadata": {"annotations": annotations}, "spec": {
            "containers": [{"name": "handler", "image": "registry.example/h:1", "command": ["run"], **extra}],
            "tolerations": [KWOK_TOLERATION], "nodeSelector": {"type": "kwok"}}},
        st.dictionaries(st.sampled_from(["env", "args", "unknownContainerField"]), JSON_VALUES, max_size=1),
        KWOK_OUTCOMES),
        "heartbeat": st.booleans(), "nonRetryableExitCodes": st.lists(st.integers(1, 255), max_size=3)},
    "Schedule": {"interval": st.sampled_from(["1s", "2s", "1h", "87600h", "1.5s"]),
                 "timeZone": st.sampled_from(["UTC", "Mars/Olympus", "Etc/GMT+14", "Europe/Berlin", "A/B/C_D-E+F"]),
                 "jitter": SANE_DURATIONS, "startingDeadline": LEASES,
                 "jobTemplate": st.fixed_dictionaries({"queue": st.sampled_from(QUEUES),
                                                       "handler": st.sampled_from(HANDLERS)},
                                                      optional={"payload": PAYLOADS, "priority": SANE_INTS}),
                 "concurrencyPolicy": st.sampled_from(["Allow", "Forbid", "Replace"]),
                 "missedRunPolicy": st.sampled_from(["Skip", "Once", "All"]), "suspend": st.booleans(),
                 "successfulJobsHistoryLimit": st.sampled_from([0, 3, 2**63 - 1]),
                 "failedJobsHistoryLimit": st.sampled_from([0, 1, 2**63 - 1])},
    "Lease": {"holderIdentity": TEXT, "leaseDurationSeconds": SANE_INTS, "renewTime": MICROTIMES,
              "acquireTime": MICROTIMES, "leaseTransitions": SANE_INTS},
}
CRONS = st.sampled_from(["* * * * *", "@yearly", "@hourly", "0 0 30 2 *", "0 0 29 2 1", "59 23 31 12 *",
                         "H * * * *", "61 * * * *", "*/0 * * * *", "@every 1s", ""]) | TEXT
WILD = {
    "Job": {"runAt": WILD_TIMES, "priority": WILD_INTS, "queue": TEXT, "handler": TEXT, "payload": WRONG_TYPE,
            "idempotencyKey": TEXT},
    "Queue": {"concurrency": WILD_INTS, "maxAttempts": WILD_INTS, "timeout": WILD_DURATIONS,
              "leaseDuration": WILD_DURATIONS, "cancelGrace": WILD_DURATIONS,
              "backoff": st.fixed_dictionaries({}, optional={"policy": TEXT, "initial": WILD_DURATIONS,
                                                             "max": WILD_DURATIONS, "factor": FLOATS,
                                                             "jitter": FLOATS}),
              "retention": st.fixed_dictionaries({}, optional={"dead": WILD_DURATIONS, "pods": WILD_DURATIONS})},
    "Handler": {"template": st.sampled_from([
        {"spec": {"containers": []}}, {"spec": {"containers": [{"name": "", "image": ""}]}},
        {"spec": {"containers": [{"name": "Bad_Name!", "image": "x"}]}}, {"spec": {"containers": DEEP}},
        {"spec": {"containers": [{"name": "h", "image": "x", "deep": DEEP}], "unknownPodField": DEEP}},
        {"metadata": {"labels": {"bad label": "x"}}, "spec": {"containers": [{"name": "h", "image": "x"}]}}]),
        "nonRetryableExitCodes": st.lists(WILD_INTS, max_size=3)},
    "Schedule": {"cron": CRONS, "interval": WILD_DURATIONS, "timeZone": TEXT, "jitter": WILD_DURATIONS,
                 "startingDeadline": WILD_DURATIONS, "successfulJobsHistoryLimit": WILD_INTS,
                 "jobTemplate": st.fixed_dictionaries({"queue": TEXT, "handler": TEXT, "payload": PAYLOADS,
                                                       "priority": WILD_INTS})},
    "Lease": {"leaseDurationSeconds": WILD_INTS, "renewTime": MICROTIMES, "leaseTransitions": WILD_INTS},
}
OPTIONAL = {"Job": {"payload", "runAt", "idempotencyKey", "priority", "cancel", "retryToken"},
            "Queue": set(SANE["Queue"]), "Handler": {"heartbeat", "nonRetryableExitCodes"},
            "Schedule": set(SANE["Schedule"]) - {"jobTemplate", "interval"}, "Lease": set(SANE["Lease"])}


@st.composite
def adversarial(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    """A sane spec of `kind`, with some optional fields left out, 0–2 fields set to wild values (or a wrong type,
    or deleted), and maybe an unknown field."""
    spec = {}
    for name, strategy in SANE[kind].items():
        if name not in OPTIONAL[kind] or draw(st.booleans()):
            spec[name] = draw(strategy)
    if kind == "Schedule" and draw(st.booleans()):  # the other way to say when
        spec.pop("interval", None)
        spec["cron"] = draw(st.sampled_from(["* * * * *", "@yearly", "0 0 30 2 *", "59 23 31 12 *", "0 2 * * 0"]))
    for name in draw(st.lists(st.sampled_from(sorted(WILD[kind])), max_size=2, unique=True)):
        spec[name] = draw(st.one_of(WILD[kind][name], WILD[kind][name], WRONG_TYPE))
    if draw(st.integers(0, 9)) == 9 and spec:  # (not 0: hypothesis draws its simplest values most often)
        spec.pop(draw(st.sampled_from(sorted(spec))))
    if draw(st.booleans()):
        spec[draw(st.sampled_from(["extra", "unknownField", "🙂"]))] = draw(JSON_VALUES)
    return spec


JOB_STATUS = st.fixed_dictionaries({}, optional={
    "state": st.sampled_from(["scheduled", "queued", "running", "succeeded", "failed", "dead", "cancelled"]),
    "attempt": SANE_INTS | WILD_INTS, "sequence": SANE_INTS | WILD_INTS, "maxAttempts": WILD_INTS,
    "queuedAt": SANE_TIMES | WILD_TIMES, "nextAttemptAt": SANE_TIMES | WILD_TIMES, "timeoutAt": WILD_TIMES,
    "finishedAt": WILD_TIMES, "stopReason": TEXT, "stopRequestedAt": WILD_TIMES, "cancelRequested": TEXT,
    "attempts": st.lists(st.fixed_dictionaries({"attempt": SANE_INTS, "sequence": SANE_INTS, "pod": TEXT,
                                                "result": TEXT}, optional={"startedAt": WILD_TIMES,
                                                                           "exitCode": WILD_INTS}), max_size=3),
    "conditions": st.lists(st.fixed_dictionaries({"type": TEXT, "status": TEXT, "reason": TEXT},
                                                 optional={"message": TEXT}), max_size=2)})
LABEL_VALUES = st.sampled_from(["1", "0", "2", "99999999999999999999", "x", "-1", "", "9" * 63])

ADVERSARY = st.fixed_dictionaries({
    "jobs": st.lists(st.tuples(adversarial("Job"), st.none() | JOB_STATUS), min_size=1, max_size=3),
    "queue": st.none() | st.tuples(st.sampled_from(QUEUES), adversarial("Queue")),
    "handler": st.none() | st.tuples(st.sampled_from(HANDLERS), adversarial("Handler")),
    "schedule": st.none() | adversarial("Schedule"),
    "leases": st.lists(st.tuples(st.booleans(), LABEL_VALUES, adversarial("Lease")), max_size=2),
    "depth": DEPTHS,
})


class Writer:
    """Creates objects from JSON text straight through the API (so payloads of any depth can be sent), and keeps
    count of what the server accepted and refused."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        conn = kubeconfig.load(str(cluster.kubeconfig))
        self.http = httpx.Client(base_url=conn.server, verify=conn.ssl_context, timeout=60, headers=conn.headers())
        self.namespace = namespace
        self.accepted: dict[str, int] = {}
        self.refused: dict[str, int] = {}
        self.names = itertools.count()
        self.jobs: list[str] = []

    def text(self, obj: Any, depth: int) -> str:
        return json.dumps(obj).replace(json.dumps(DEEP), '{"a":' * depth + "{}" + "}" * depth)

    def send(self, method: str, path: str, kind: str, obj: Any, depth: int,
             content_type: str = "application/json") -> bool:
        response = self.http.request(method, path, content=self.text(obj, depth), headers={"Content-Type": content_type})
        bucket = self.accepted if response.status_code < 300 else self.refused
        bucket[kind] = bucket.get(kind, 0) + 1
        assert response.status_code < 500, f"the API server failed on a {kind}: {response.text[:500]}"
        return response.status_code < 300

    def create(self, plural: str, kind: str, name: str, spec: dict[str, Any], depth: int, *,
               api: str = API, labels: dict[str, str] | None = None) -> bool:
        obj = {"apiVersion": api.removeprefix("/apis/"), "kind": kind,
               "metadata": {"name": name, **({"labels": labels} if labels else {})}, "spec": spec}
        return self.send("POST", f"{api}/namespaces/{self.namespace}/{plural}", kind, obj, depth)

    def put(self, plural: str, kind: str, name: str, spec: dict[str, Any], depth: int) -> bool:
        """Create the object, or replace the spec of the one there (a JSON patch: no resourceVersion needed)."""
        path = f"{API}/namespaces/{self.namespace}/{plural}/{name}"
        if self.http.get(path).status_code == 404:
            obj = {"apiVersion": "sextant.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}
            return self.send("POST", path.rsplit("/", 1)[0], kind, obj, depth)
        patch = [{"op": "replace", "path": "/spec", "value": spec}]
        return self.send("PATCH", path, kind, patch, depth, "application/json-patch+json")

    def job_status(self, name: str, status: dict[str, Any], depth: int) -> bool:
        """What someone allowed to write jobs/status could write there."""
        path = f"{API}/namespaces/{self.namespace}/jobs/{name}/status"
        return self.send("PATCH", path, "Job status", {"status": status}, depth, "application/merge-patch+json")

    def delete_schedules(self) -> None:
        self.http.delete(f"{API}/namespaces/{self.namespace}/schedules")


ADVERSARIAL_EXAMPLES = 400


def test_adversarial_objects_never_stop_the_operator(cluster, namespace, operator, crds):
    writer = Writer(cluster, namespace)
    wait_for(lambda: ready(operator), 60, message="the operator to be ready")
    examples = 0
    started = time.monotonic()

    @settings(max_examples=ADVERSARIAL_EXAMPLES, deadline=None, derandomize=False, database=None,
              suppress_health_check=list(HealthCheck))
    @given(ADVERSARY)
    def adversary(case: dict[str, Any]) -> None:
        nonlocal examples
        examples += 1
        n, depth = next(writer.names), case["depth"]
        if case["queue"]:
            writer.put("queues", "Queue", case["queue"][0], case["queue"][1], depth)
        if case["handler"]:
            writer.put("handlers", "Handler", case["handler"][0], case["handler"][1], depth)
        for i, (spec, status) in enumerate(case["jobs"]):
            name = f"adv-{n}-{i}"
            if writer.create("jobs", "Job", name, spec, depth):
                writer.jobs.append(name)
                if status is not None:
                    writer.job_status(name, status, depth)
        if case["schedule"] is not None:
            writer.create("schedules", "Schedule", f"adv-{n}", case["schedule"], depth)
        for i, (for_a_job, sequence, spec) in enumerate(case["leases"]):
            job_name = writer.jobs[-1] if for_a_job and writer.jobs else "adv-nobody"
            writer.create("leases", "Lease", f"adv-{n}-lease-{i}", spec, depth, api="/apis/coordination.k8s.io/v1",
                          labels={"sextant.dev/job": job_name, "sextant.dev/sequence": sequence})
        assert alive(operator), f"the operator exited with {operator.proc.returncode}"
        assert ready(operator), "the operator is not ready"
        if examples % 10 == 0:
            writer.delete_schedules()  # a schedule firing every second must not flood the rest of the run

    adversary()
    writer.delete_schedules()
    elapsed = time.monotonic() - started
    # Whatever was taken in or refused, the operator goes on: alive, ready, no loop restarted, and a normal job
    # in the same namespace runs to success.
    holds_for(lambda: alive(operator) and ready(operator), 5, message="the operator to stay alive and ready")
    apply(cluster, namespace, queue("final-q", backoff={"policy": "fixed", "initial": "200ms"}),
          handler("final-h"), job("final-job", "final-q", "final-h", payload={"orderId": 42}))
    final = wait_state(cluster, namespace, "final-job", "succeeded", timeout=120)
    assert final["attempt"] == 1
    assert alive(operator) and ready(operator)
    assert metric(operator, "sextant_loop_restarts_total") == 0, metric_lines(operator, "sextant_loop_restarts")
    print(f"\nadversarial run: {examples} examples in {elapsed:.0f} s; accepted {writer.accepted}, "
          f"refused {writer.refused}; isolated failures: {metric_lines(operator, 'sextant_object_errors_total')}")
    log_lines = operator.log_path.read_text(errors="replace").splitlines()
    errors = sorted({line.split(" ERROR ", 1)[1][:300] for line in log_lines if " ERROR " in line})
    refused = sorted({line.split(" WARNING ", 1)[1].split(": ", 1)[1][:160] for line in log_lines
                      if "cannot take it in" in line or "is invalid and does not run" in line})
    print(f"operator errors (each isolated to its object): {errors or 'none'}\nobjects it refused "
          f"({len(refused)}), e.g.:\n  " + "\n  ".join(refused[:12]))
    assert sum(writer.accepted.values()) >= examples, "the server accepted too little for the test to mean much"


# ================================================================ the API server stopped mid-run
@pytest.fixture(scope="module")
def own_cluster() -> Any:
    """A control plane of this module's own: the test stops it, which the session's shared one must never be."""
    local = LocalCluster(name=new_name("sextant-outage"), nodes=2)
    try:
        local.up()
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"no control plane: {exc}", pytrace=False)
    try:
        own = Cluster(local)
        own.kubectl("apply", "--server-side", "-f", str(CRDS))
        own.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        yield own
    finally:
        local.down()


def api_ready(cluster: Cluster) -> bool:
    return cluster.kubectl("get", "--raw=/readyz", check=False, timeout=5).returncode == 0


def pods_of(cluster: Cluster, namespace: str) -> dict[str, list[str]]:
    pods: dict[str, list[str]] = {}
    for pod in get_json(cluster, namespace, "pods", "-l", "sextant.dev/job")["items"]:
        pods.setdefault(pod["metadata"]["labels"]["sextant.dev/job"], []).append(pod["metadata"]["name"])
    return pods


def all_succeeded(cluster: Cluster, namespace: str, count: int) -> dict[str, dict]:
    items = get_json(cluster, namespace, "jobs.sextant.dev")["items"]
    found = {j["metadata"]["name"]: j for j in items}
    return found if len(found) == count and all((j.get("status") or {}).get("state") == "succeeded"
                                                for j in found.values()) else {}


def progress(cluster: Cluster, namespace: str) -> str:
    """Where the jobs and their pods are, for a failure message."""
    jobs_ = {j["metadata"]["name"]: (j.get("status") or {}).get("state")
             for j in get_json(cluster, namespace, "jobs.sextant.dev")["items"]}
    pods = {p["metadata"]["name"]: (p.get("status") or {}).get("phase")
            for p in get_json(cluster, namespace, "pods")["items"]}
    return f"jobs {jobs_}; pods {pods}"


def assert_each_job_ran_once(cluster: Cluster, namespace: str, found: dict[str, dict]) -> None:
    pods = pods_of(cluster, namespace)
    for name, obj in found.items():
        attempts = obj["status"]["attempts"]
        assert [a["result"] for a in attempts] == ["succeeded"], (name, attempts)
        assert sorted(pods.get(name, [])) == [a["pod"] for a in attempts], (name, pods.get(name), attempts)


def test_the_operator_rides_out_a_control_plane_outage(own_cluster, tmp_path):
    cluster = own_cluster
    ns = cluster.create_namespace("outage")
    jobs_count = 12
    # heartbeat false: kwok runs no runner to renew the attempt's lease, and the restarted scheduler may place a
    # pod late; every attempt then runs once, to its end.
    apply(cluster, ns, queue("q", concurrency=4),
          handler("h", annotations={"sextant.dev/test-duration": "4s"}, heartbeat=False))
    op = Operator(cluster.kubeconfig, ns, tmp_path)
    op.start()
    try:
        wait_for(lambda: ready(op), 60, message="the operator to be ready")
        pid = op.proc.pid
        apply(cluster, ns, *(job(f"job-{i}") for i in range(jobs_count)))

        def mid_run() -> bool:
            states = [(j.get("status") or {}).get("state") for j in get_json(cluster, ns, "jobs.sextant.dev")["items"]]
            return states.count("running") >= 2 and states.count("succeeded") < jobs_count - 4

        wait_for(mid_run, 60, interval=0.2, message="jobs to be running")
        components = {name: cluster.local.component_command(name) for name in cluster.local.pids()}
        apiserver = cluster.local.stop_component("kube-apiserver")
        stopped = time.monotonic()
        wait_for(lambda: not ready(op), 30, message="readiness to drop while the API server is away")
        holds_for(lambda: alive(op), max(0.0, 10 - (time.monotonic() - stopped)),
                  message="the operator to stay up while the API server is down")
        cluster.local.start_component(apiserver)
        back = time.monotonic()
        wait_for(lambda: api_ready(cluster), 60, interval=0.05, message="the API server to be back")
        api_back = time.monotonic()
        wait_for(lambda: ready(op), 60, interval=0.05, message="the operator to be ready again")
        recovery = time.monotonic() - api_back
        print(f"\nAPI server down {back - stopped:.1f} s; ready {api_back - back:.1f} s after its start; "
              f"operator ready again {recovery:.2f} s after the API server")

        def succeeded() -> dict[str, dict]:
            # The scheduler and controller manager exit when their leader lease lapsed during the outage, as they
            # do in any cluster: start them again, as kubelet would.
            for name, command in components.items():
                if name not in cluster.local.pids():
                    cluster.local.start_component(command)
            return all_succeeded(cluster, ns, jobs_count)

        found = wait_for(succeeded, 180, interval=0.5,
                         message=lambda: f"every job to succeed after the outage; now {progress(cluster, ns)}")
        assert alive(op) and op.proc.pid == pid, "the operator restarted"
        assert op.starts == 1
        assert_each_job_ran_once(cluster, ns, found)
        assert metric(op, "sextant_loop_restarts_total") == 0, metric_lines(op, "sextant_loop_restarts")
        assert recovery < 15, f"the operator took {recovery:.1f} s to be ready again"
    finally:
        op.stop()


# ================================================================ a misbehaving connection
def test_cut_watches_and_refused_requests_lose_no_event(cluster, namespace, crds, tmp_path):
    jobs_count = 40
    upstream = kubeconfig.load(str(cluster.kubeconfig))
    with FaultProxy(upstream, lifetime=500) as proxy:
        op = Operator(proxied_kubeconfig(cluster, proxy.url, tmp_path / "kubeconfig"), namespace, tmp_path)
        op.start()
        try:
            proxy.faulty = False  # readiness needs every watch open at once, which the faults below never allow
            wait_for(lambda: ready(op), 120, message="the operator to be ready through the proxy")
            proxy.faulty = True
            pid = op.proc.pid
            apply(cluster, namespace, queue("q", concurrency=5, backoff={"policy": "fixed", "initial": "200ms"}),
                  handler("h", annotations={"sextant.dev/test-duration": "500ms"}),
                  *(job(f"job-{i}") for i in range(jobs_count)))
            found = wait_for(lambda: all_succeeded(cluster, namespace, jobs_count), 300, interval=0.5,
                             message=lambda: f"every job to succeed through the proxy (faults so far: {proxy.counts}); "
                                             f"now {progress(cluster, namespace)}")
            assert alive(op) and op.proc.pid == pid and op.starts == 1, "the operator exited"
            assert_each_job_ran_once(cluster, namespace, found)
            for fault in ("refused 429", "refused 503", "answer lost 503", "watch cut mid-chunk", "watch 410",
                          "watch ERROR 410", "watch garbage line"):
                assert proxy.counts[fault] > 0, f"the proxy never injected {fault!r}: {proxy.counts}"
            proxy.faulty = False
            wait_for(lambda: ready(op), 60, message="the operator to be ready once the connection behaves")
            assert metric(op, "sextant_loop_restarts_total") == 0
            print(f"\nproxy faults injected: {dict(proxy.counts)}")
        finally:
            op.stop()


# ================================================================ the low-rate kinds' watches struck
def informer_watch(kind: str):
    """Which of the proxied watches are the operator's watches of this kind (the only ones: kopf watches nothing)."""
    return lambda request: (request.headers.get("User-Agent", "") == "sextant-operator"
                            and request.path.endswith(f"/{kind}"))


def schedule_obj(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Schedule", "metadata": {"name": name},
            "spec": {"jobTemplate": {"queue": "q", "handler": "h"}, **spec}}


@pytest.mark.parametrize("fault", ["garbage", "gone", "deep"])
def test_low_rate_watch_faults_never_stop_the_operator(cluster, namespace, crds, tmp_path, fault):
    """(a) a malformed watch line, (b) a watch answered 410 as an HTTP status, (c) an object nested deeper than the
    json module decodes by default, on the watches of Queues and Schedules: kopf's own watches of them ended its
    process on each; their one watch now, the informer's, fails and lists again (or decodes the deep object)."""
    kinds = ("queues", "schedules")
    upstream = kubeconfig.load(str(cluster.kubeconfig))
    with FaultProxy(upstream, lifetime=400) as proxy:
        proxy.faulty = False  # no rotating faults: only the strikes below
        op = Operator(proxied_kubeconfig(cluster, proxy.url, tmp_path / "kubeconfig"), namespace, tmp_path)
        op.start()
        try:
            wait_for(lambda: ready(op), 90, message="the operator to be ready through the proxy")
            pid = op.proc.pid
            apply(cluster, namespace, queue("q", backoff={"policy": "fixed", "initial": "200ms"}), handler("h"),
                  schedule_obj("before", interval="1h"))
            if fault == "deep":
                writer = Writer(cluster, namespace)
                deep = {"jobTemplate": {"queue": "q", "handler": "h", "payload": {"x": DEEP}}, "interval": "1h"}
                assert writer.create("schedules", "Schedule", "deep", deep, 9_900), writer.refused
                # Decoded and judged: a payload deeper than the models allow makes the schedule Invalid (jsonpath:
                # kubectl reads it, no deep decoding here).
                wait_for(lambda: cluster.kubectl(
                    "get", "-n", namespace, "schedules.sextant.dev/deep", "-o",
                    'jsonpath={.status.conditions[?(@.type=="Invalid")].reason}').stdout.strip() == "InvalidSpec",
                    30, message="the operator to take the deep schedule in")
            else:
                for kind in kinds:
                    proxy.strike(fault, 4, informer_watch(kind))
                wait_for(lambda: not ready(op), 30, interval=0.05,
                         message="readiness to drop while a watch is down")
                wait_for(lambda: proxy.counts[f"struck {fault}"] == 8, 60,
                         message=lambda: f"the watches to be struck (proxy: {dict(proxy.counts)})")
            assert alive(op) and op.proc.pid == pid, f"the operator exited: {op.log_tail()}"
            wait_for(lambda: ready(op), 60, message="the operator to be ready again")

            # A change made afterwards reaches the controllers: a new queue's job runs, a new schedule fires.
            apply(cluster, namespace, queue("q2", backoff={"policy": "fixed", "initial": "200ms"}),
                  schedule_obj("after", interval="1s"), job("job-after", queue_name="q2"))
            wait_state(cluster, namespace, "job-after", "succeeded")
            wait_for(lambda: (get_json(cluster, namespace, "schedules.sextant.dev/after").get("status") or {})
                     .get("lastScheduleTime"), 30, message="the schedule created after the fault to fire")
            assert alive(op) and op.proc.pid == pid and op.starts == 1
            assert ready(op)
            assert metric(op, "sextant_loop_restarts_total") == 0
        finally:
            op.stop()
