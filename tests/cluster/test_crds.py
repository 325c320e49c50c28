"""The CRDs on a real API server: they install, accept the examples, and refuse invalid objects with a
message that names the field and the rule, storing nothing (or leaving the stored object as it was)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from sextant.resources import API_VERSION
from sextant.resources.handler import Handler
from sextant.resources.job import Job
from sextant.resources.queue import Queue
from sextant.resources.schedule import Schedule
from tests.harness import Cluster, kstatus, namespace_name, repo_root

CRDS = repo_root() / "crds"
EXAMPLES = repo_root() / "examples"
CRD_NAMES = sorted(p.name.removesuffix(".yaml") for p in CRDS.glob("*.yaml"))
MODELS = {"Job": Job, "Queue": Queue, "Handler": Handler, "Schedule": Schedule}
PLURALS = {"Job": "jobs.sextant.dev", "Queue": "queues.sextant.dev", "Handler": "handlers.sextant.dev",
           "Schedule": "schedules.sextant.dev", "Worker": "workers.sextant.dev",
           "WorkerPool": "workerpools.sextant.dev"}  # fmt: skip


@pytest.fixture(scope="module")
def installed(cluster: Cluster) -> Cluster:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRDS))
    cluster.kubectl("wait", "--for=condition=Established", *(f"crd/{n}" for n in CRD_NAMES), "--timeout=60s",
                    timeout=70)  # fmt: skip
    return cluster


@pytest.fixture(scope="module")
def ns(installed: Cluster) -> Iterator[str]:
    """One namespace for the whole module: custom resources need no service account, and each case names its own."""
    name = installed.create_namespace(namespace_name("test-crds"), wait_service_account=False)
    yield name
    installed.delete_namespace(name)


def obj(kind: str, name: str, spec: Any, **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name, **metadata}, "spec": spec}


def get(cluster: Cluster, ns: str, kind: str, name: str) -> dict[str, Any] | None:
    out = cluster.kubectl("get", PLURALS[kind], name, "-n", ns, "-o", "json", "--ignore-not-found").stdout
    return json.loads(out) if out.strip() else None


def contains(expected: Any, actual: Any) -> bool:
    """Everything in `expected` is in `actual` (which may hold more, e.g. defaults the API server added)."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and contains(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(map(contains, expected, actual))
    return expected == actual


def test_the_six_crds_are_established_and_served(installed):
    crds = json.loads(installed.kubectl("get", "crd", *CRD_NAMES, "-o", "json").stdout)["items"]
    assert sorted(c["metadata"]["name"] for c in crds) == [
        "handlers.sextant.dev", "jobs.sextant.dev", "queues.sextant.dev", "schedules.sextant.dev",
        "workerpools.sextant.dev", "workers.sextant.dev",
    ]  # fmt: skip
    for crd in crds:
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conditions.get("Established") == "True", crd["metadata"]["name"]
        assert conditions.get("NamesAccepted") == "True", crd["metadata"]["name"]
    resources = installed.kubectl("api-resources", "--api-group=sextant.dev", "-o", "name").stdout.split()
    assert sorted(resources) == sorted(PLURALS.values())
    installed.kubectl("get", "sextant", "-A")  # the category
    installed.kubectl("get", "sjob,squeue,shandler,ssched,sworker,spool", "-A")  # the short names


def test_the_examples_are_accepted_as_written(installed, ns):
    files = sorted(EXAMPLES.glob("*.yaml"))
    assert {f.name for f in files} >= {"queue.yaml", "handler.yaml", "job.yaml", "schedule.yaml"}
    installed.kubectl("apply", "-n", ns, *(arg for f in files for arg in ("-f", str(f))))
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            MODELS[doc["kind"]].model_validate(doc)  # the examples are valid for the operator's models too
            stored = get(installed, ns, doc["kind"], doc["metadata"]["name"])
            assert stored is not None, path.name
            assert contains(doc["spec"], stored["spec"]), f"{path.name}: stored {stored['spec']}"
    listed = installed.kubectl("get", "sextant", "-n", ns, "-o", "name").stdout.split()
    assert len(listed) >= 4


def test_a_job_nobody_has_written_reads_queued_everywhere_a_reader_looks(installed, ns):
    """No operator here: the API server's default says `queued` on the create's answer, a GET, a list by field
    selector and the printer column, and keeps it beside what another writer merges into the status; its
    observedGeneration 0 tells kstatus the job is in progress (not Current)."""
    created = json.loads(installed.kubectl("create", "-n", ns, "-o", "json", "-f", "-", input=json.dumps(
        obj("Job", "job-unwritten", {"queue": "q", "handler": "h"}))).stdout)
    unwritten = {"state": "queued", "observedGeneration": 0}
    assert created["status"] == unwritten
    assert get(installed, ns, "Job", "job-unwritten")["status"] == unwritten
    listed = installed.kubectl("get", PLURALS["Job"], "-n", ns, "--field-selector", "status.state=queued",
                               "-o", "name").stdout.split()
    assert f"job.sextant.dev/job-unwritten" in listed
    column = installed.kubectl("get", PLURALS["Job"], "job-unwritten", "-n", ns, "-o",
                               "custom-columns=STATE:.status.state", "--no-headers").stdout.strip()
    assert column == "queued"
    assert kstatus.compute(get(installed, ns, "Job", "job-unwritten")).status == kstatus.IN_PROGRESS
    installed.kubectl("patch", PLURALS["Job"], "job-unwritten", "-n", ns, "--subresource=status", "--type=merge",
                      "-p", '{"status": {"cancelRequested": "replaced"}}')
    assert get(installed, ns, "Job", "job-unwritten")["status"] == {**unwritten, "cancelRequested": "replaced"}


@dataclass
class Invalid:
    """An object the API server must refuse: created as `manifest`, or `manifest` created and then `patch`ed."""

    id: str
    manifest: dict[str, Any]
    expect: list[str]  # the field and the rule, as the API server words them
    patch: dict[str, Any] | None = None


def job(name: str, **spec: Any) -> dict[str, Any]:
    return obj("Job", name, {"queue": "emails", "handler": "send-receipt", "payload": {"orderId": 42}, **spec})


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return obj("Queue", name, spec)


def schedule(name: str, **spec: Any) -> dict[str, Any]:
    return obj("Schedule", name, {"jobTemplate": {"queue": "emails", "handler": "send-receipt"}, **spec})


def handler(name: str, **spec: Any) -> dict[str, Any]:
    return obj("Handler", name, spec)


CONTAINER = {"name": "handler", "image": "registry.example/receipts:1.4"}

INVALID = [
    Invalid("job-without-handler", obj("Job", "j-no-handler", {"queue": "emails", "payload": {}}),
            ["spec.handler", "Required value"]),
    Invalid("job-without-queue", obj("Job", "j-no-queue", {"handler": "send-receipt"}),
            ["spec.queue", "Required value"]),
    Invalid("payload-is-a-list", job("j-payload-list", payload=[1, 2]),
            ["spec.payload", "must be of type object"]),
    Invalid("payload-is-a-string", job("j-payload-string", payload="orderId=42"),
            ["spec.payload", "must be of type object"]),
    Invalid("payload-changed", job("j-payload-changed"), ["spec.payload", "payload is immutable"],
            patch={"spec": {"payload": {"orderId": 43}}}),
    Invalid("payload-key-added", job("j-payload-added"), ["spec.payload", "payload is immutable"],
            patch={"spec": {"payload": {"coupon": "x"}}}),
    Invalid("handler-changed", job("j-handler-changed"), ["spec.handler", "handler is immutable"],
            patch={"spec": {"handler": "other"}}),
    Invalid("queue-changed", job("j-queue-changed"), ["spec.queue", "queue is immutable"],
            patch={"spec": {"queue": "other"}}),
    Invalid("run-at-changed", job("j-runat-changed", runAt="2026-12-01T10:00:00Z"), ["spec.runAt", "runAt is immutable"],
            patch={"spec": {"runAt": "2026-12-02T10:00:00Z"}}),
    Invalid("cancel-withdrawn", job("j-cancel-withdrawn", cancel=True), ["spec.cancel", "cannot be withdrawn"],
            patch={"spec": {"cancel": False}}),
    Invalid("job-name-over-63", job("j" + "x" * 63), ["metadata.name", "63"]),
    Invalid("concurrency-0", queue("q-concurrency-0", concurrency=0),
            ["spec.concurrency", "greater than or equal to 1"]),
    Invalid("max-attempts-0", queue("q-max-attempts-0", maxAttempts=0),
            ["spec.maxAttempts", "greater than or equal to 1"]),
    Invalid("negative-timeout", queue("q-negative-timeout", timeout="-5s"), ["spec.timeout", "should match"]),
    Invalid("malformed-duration", queue("q-parsecs", timeout="10 parsecs"), ["spec.timeout", "should match"]),
    Invalid("unknown-backoff-policy", queue("q-linear", backoff={"policy": "linear"}),
            ["spec.backoff.policy", 'Unsupported value: "linear"']),
    Invalid("initial-backoff-above-max", queue("q-initial-above-max", backoff={"initial": "20m", "max": "10m"}),
            ["spec.backoff.initial", "backoff.initial must not be greater than backoff.max"]),
    Invalid("initial-backoff-above-default-max", queue("q-initial-above-default", backoff={"initial": "1h"}),
            ["spec.backoff.initial", "backoff.initial must not be greater than backoff.max"]),
    Invalid("jitter-above-1", queue("q-jitter", backoff={"jitter": 1.5}),
            ["spec.backoff.jitter", "less than or equal to 1"]),
    Invalid("misspelt-field", queue("q-typo", concurency=3), ['unknown field "spec.concurency"']),
    Invalid("cron-with-4-fields", schedule("s-cron-4", cron="0 2 * *"), ["spec.cron", "should match"]),
    Invalid("cron-with-6-fields", schedule("s-cron-6", cron="0 0 2 * * *"), ["spec.cron", "should match"]),
    Invalid("cron-minute-61", schedule("s-cron-61", cron="61 * * * *"),
            ["spec.cron", "the minute field must be 0-59"]),
    Invalid("cron-hour-24", schedule("s-cron-h24", cron="0 24 * * *"), ["spec.cron", "the hour field must be 0-23"]),
    Invalid("cron-day-0", schedule("s-cron-d0", cron="0 0 0 * *"),
            ["spec.cron", "the day-of-month field must be 1-31"]),
    Invalid("cron-month-13", schedule("s-cron-m13", cron="0 0 1 13 *"), ["spec.cron", "the month field must be 1-12"]),
    Invalid("cron-weekday-8", schedule("s-cron-w8", cron="0 0 * * 8"),
            ["spec.cron", "the day-of-week field must be 0-7"]),
    Invalid("cron-step-0", schedule("s-cron-step0", cron="*/0 * * * *"), ["spec.cron", "the minute field"]),
    Invalid("cron-hashed", schedule("s-cron-hashed", cron="H * * * *"), ["spec.cron", "the minute field"]),
    Invalid("timeout-0s", queue("q-timeout-0", timeout="0s"), ["spec.timeout", "timeout must be at least 1ms"]),
    Invalid("job-handler-with-spaces", job("j-handler-spaces", handler="send receipt"),
            ["spec.handler", "should match"]),
    Invalid("job-queue-with-spaces", job("j-queue-spaces", queue="my queue"), ["spec.queue", "should match"]),
    Invalid("schedule-handler-with-spaces",
            schedule("s-handler-spaces", interval="1m", jobTemplate={"queue": "emails", "handler": "Send Receipt"}),
            ["spec.jobTemplate.handler", "should match"]),
    Invalid("cron-and-interval", schedule("s-both", cron="0 2 * * *", interval="30s"),
            ["spec", "set exactly one of cron and interval"]),
    Invalid("neither-cron-nor-interval", schedule("s-neither"), ["spec", "set exactly one of cron and interval"]),
    Invalid("malformed-interval", schedule("s-interval", interval="every minute"), ["spec.interval", "should match"]),
    Invalid("handler-without-containers", handler("h-no-containers", template={"spec": {"containers": []}}),
            ["spec.template.spec.containers", "at least 1 items"]),
    Invalid("container-without-image", handler("h-no-image", template={"spec": {"containers": [{"name": "c"}]}}),
            ["spec.template.spec.containers[0].image", "Required value"]),
    Invalid("exit-code-above-255",
            handler("h-exit-300", template={"spec": {"containers": [CONTAINER]}}, nonRetryableExitCodes=[300]),
            ["spec.nonRetryableExitCodes[0]", "less than or equal to 255"]),
    Invalid("pool-min-above-max", obj("WorkerPool", "p-min-max", {"scaleTargetRef": {"name": "w"}, "minReplicas": 3,
                                                                  "maxReplicas": 2}),
            ["spec.minReplicas", "minReplicas must not be greater than maxReplicas"]),
    Invalid("pool-of-a-statefulset", obj("WorkerPool", "p-sts", {"scaleTargetRef": {"name": "w", "kind": "StatefulSet"}}),
            ["spec.scaleTargetRef.kind", "Deployment"]),
]  # fmt: skip


# Every form of cron the operator evaluates (tests/unit/test_input_rules.py): the CRD's rules admit them all.
GOOD_CRONS = ["*/15 9-17 * * mon-fri", "0 0 1 JAN,jul ?", "0 0 ? * 7", "59/15 23/2 31/3 12/5 6/2", "00 09 * * *",
              "50-10 22-2 * nov-feb sat-mon", "0,15,30,45 * 1-7,15 */3 0-7", "0 0 L * *", "0 0 15-L/5 * *",
              "0\t0  *\t*  *", "0 0 30 2 *", "@hourly"]


def test_every_cron_form_the_operator_evaluates_is_accepted(installed, ns):
    for i, cron in enumerate(GOOD_CRONS):
        manifest = schedule(f"s-good-{i}", cron=cron)
        installed.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(manifest))
        assert get(installed, ns, "Schedule", f"s-good-{i}")["spec"]["cron"] == cron
        Schedule.model_validate(manifest)


@pytest.mark.parametrize("case", INVALID, ids=[c.id for c in INVALID])
def test_invalid_objects_are_refused_naming_field_and_rule(installed, ns, case: Invalid):
    kind, name = case.manifest["kind"], case.manifest["metadata"]["name"]
    if case.patch is None:
        proc = installed.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(case.manifest), check=False)
        assert proc.returncode != 0, f"accepted: {proc.stdout}"
        assert get(installed, ns, kind, name) is None, "a refused object was stored"
    else:
        installed.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(case.manifest))
        before = get(installed, ns, kind, name)
        assert before is not None
        proc = installed.kubectl("patch", PLURALS[kind], name, "-n", ns, "--type=merge", "-p", json.dumps(case.patch),
                                 check=False)  # fmt: skip
        assert proc.returncode != 0, f"accepted: {proc.stdout}"
        after = get(installed, ns, kind, name)
        assert after is not None
        assert after["spec"] == before["spec"]
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    error = proc.stderr
    missing = [text for text in case.expect if text not in error]
    assert not missing, f"the error does not say {missing}: {error}"
