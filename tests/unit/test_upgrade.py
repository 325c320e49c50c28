"""Taking over from the previous version, which called the attempt's sequence number `run` (status.run,
attempts[].run, the label sextant.dev/run, SEXTANT_RUN, the reference's `run` key): its jobs, pods, Leases and
runners may still be in flight, and each is read as this version's `sequence`. A job that had started its third
pod goes on with <job>-4, never with <job>-1 (a name its own finished pod may still hold)."""

from __future__ import annotations

import json
from typing import Any

from _builders import JOB, T0, UID, Job, creates, queue
from sextant.cli.inspect import timeline
from sextant.controller.pods import observe
from sextant.controller.records import attempt_of
from sextant.lifecycle.reading import read_job
from sextant.http.models import job_out
from sextant.resources import contract
from sextant.resources.common import format_time
from sextant.resources.crds import RESOURCES, crd
from sextant.resources.job import JobStatus, sequence_of
from sextant.runner.env import ATTEMPT_REF, AttemptEnv
from sextant.runner.lease import lease_body

# A status as the previous version wrote it: the third pod failed, the retry waits in the queue.
OLD_STATUS: dict[str, Any] = {
    "state": "queued", "attempt": 3, "run": 3, "maxAttempts": 5, "queuedAt": "2026-03-01T11:59:00Z",
    "attempts": [{"attempt": a, "run": a, "pod": f"{JOB}-{a}", "node": "node-a", "result": "failed",
                  "exitCode": 1, "startedAt": "2026-03-01T11:50:00Z", "finishedAt": "2026-03-01T11:51:00Z"}
                 for a in (1, 2, 3)],
}


def old_job(status: dict[str, Any] = OLD_STATUS) -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
            "metadata": {"name": JOB, "namespace": "shop", "uid": UID, "generation": 1, "resourceVersion": "9",
                         "creationTimestamp": format_time(T0, precise=False)},
            "spec": {"queue": "emails", "handler": "send-receipt"}, "status": status}


def test_a_status_written_by_the_previous_version_is_read_with_its_sequence() -> None:
    status = JobStatus.model_validate(OLD_STATUS)
    assert (status.sequence, status.attempt) == (3, 3)
    assert [a.sequence for a in status.attempts] == [1, 2, 3]
    wire = status.wire()  # what this version writes back: `sequence` only
    assert wire["sequence"] == 3 and "run" not in wire
    assert [e["sequence"] for e in wire["attempts"]] == [1, 2, 3] and all("run" not in e for e in wire["attempts"])
    assert read_job(old_job()).status.sequence == 3


def test_of_both_names_the_larger_number_counts() -> None:
    """An operator of the previous version that wrote `run` after this one wrote `sequence` (a rollback and
    back) moved on from it: a sequence number is never used twice."""
    assert JobStatus.model_validate({"run": 3, "sequence": 5}).sequence == 5
    assert JobStatus.model_validate({"run": 6, "sequence": 5}).sequence == 6
    assert (sequence_of({"run": 6, "sequence": 5}), sequence_of({"run": 2}), sequence_of(None)) == (6, 2, 0)


def test_the_job_goes_on_with_its_fourth_pod() -> None:
    job = Job(status=JobStatus.model_validate(OLD_STATUS), queue=queue(maxAttempts=5))
    made = creates(job.admit())
    assert [(c.name, c.sequence, c.attempt) for c in made] == [(f"{JOB}-4", 4, 4)]


def test_pods_and_leases_labelled_by_the_previous_version_are_the_jobs_attempts() -> None:
    labels = {contract.LABEL_JOB: JOB, contract.LEGACY_LABEL_SEQUENCE: "3"}
    pod = {"metadata": {"name": f"{JOB}-3", "namespace": "shop", "uid": "p-3", "labels": labels},
           "status": {"phase": "Running"}}
    assert attempt_of(pod) == (JOB, 3)
    seen = observe(pod)
    assert seen is not None and seen.sequence == 3


def test_a_runner_of_this_version_reads_the_previous_operators_reference_and_labels_for_both() -> None:
    ref = {"namespace": "shop", "job": JOB, "uid": UID, "run": 3, "attempt": 3, "pod": f"{JOB}-3",
           "leaseDuration": "30s", "cancelGrace": "10s"}
    env = AttemptEnv.from_environ({ATTEMPT_REF: json.dumps(ref), "SEXTANT_POD_UID": "p-3"})
    assert env.sequence == 3
    labels = lease_body(env, T0)["metadata"]["labels"]
    # The previous operator reads only sextant.dev/run: images are rebuilt before the operator is upgraded.
    assert labels[contract.LABEL_SEQUENCE] == labels[contract.LEGACY_LABEL_SEQUENCE] == "3"
    handler_env = env.from_job(old_job(), {}).expanded({ATTEMPT_REF: json.dumps(ref)})
    assert handler_env["SEXTANT_SEQUENCE"] == handler_env["SEXTANT_RUN"] == "3"  # SEXTANT_RUN: deprecated alias
    full = {"SEXTANT_JOB_NAME": JOB, "SEXTANT_NAMESPACE": "shop", "SEXTANT_HANDLER": "h", "SEXTANT_RUN": "3"}
    assert AttemptEnv.from_environ(full).sequence == 3  # a `heartbeat: false` pod of the previous operator


def test_the_user_facing_readers_take_the_old_name_too() -> None:
    """(A worker of protocol v2 reads its sequence from its Worker's status.assignments, never from the Job.)"""
    assert [a.sequence for a in job_out(old_job()).attempts] == [1, 2, 3]
    assert [a["sequence"] for a in timeline(old_job(), T0)] == [1, 2, 3]


def test_the_crd_keeps_the_old_name_deprecated_and_requires_neither() -> None:
    """Else the API server prunes `run` from jobs in flight (they would start again at <job>-1), and refuses the
    writes of an operator of the previous version still running while the CRDs are upgraded."""
    schema = crd(next(e for e in RESOURCES if e["model"].__name__ == "Job"))["spec"]["versions"][0]["schema"]
    status = schema["openAPIV3Schema"]["properties"]["status"]
    entry = status["properties"]["attempts"]["items"]
    for node in (status, entry):
        assert {"run", "sequence"} <= set(node["properties"])
        assert node["properties"]["run"]["description"].startswith("Deprecated")
        assert not {"run", "sequence"} & set(node.get("required", []))


def test_a_status_the_lifecycle_never_wrote_is_read_without_its_default_state():
    """The Job CRD's default (state: queued) is not a state the lifecycle decided: a job read with it alone, or with
    what other writers add (a Schedule's cancelRequested, the Invalid condition), is new to the lifecycle; a status
    of this version or the previous one (queuedAt, attempts, observedGeneration...) is read as written."""
    from sextant.resources.job import UNWRITTEN_STATUS, written_status

    raw = {"metadata": {"name": JOB, "uid": UID, "creationTimestamp": format_time(T0), "generation": 1},
           "spec": {"queue": "q", "handler": "h"}}
    for status in (UNWRITTEN_STATUS, {**UNWRITTEN_STATUS, "cancelRequested": "replaced"}):
        assert read_job({**raw, "status": status}).status.state is None, status
    assert written_status({**UNWRITTEN_STATUS, "cancelRequested": "replaced"}) == {"cancelRequested": "replaced"}
    assert written_status({"state": "queued"}) == {}  # (created before the observedGeneration default)
    invalid = [{"type": "Invalid", "status": "True", "reason": "Invalid"}]
    assert written_status({**UNWRITTEN_STATUS, "conditions": invalid}) == {"conditions": invalid}
    assert read_job({**raw, "status": OLD_STATUS}).status.state == "queued"
    # A status the previous version wrote without observedGeneration reads the default 0 now: still as written.
    assert read_job({**raw, "status": {**OLD_STATUS, "observedGeneration": 0}}).status.state == "queued"
    assert written_status({"state": "queued", "observedGeneration": 1}) == {"state": "queued", "observedGeneration": 1}
    assert read_job({**raw, "status": {"state": "queued", "queuedAt": "2026-03-01T11:59:00Z"}}).status.state == "queued"
    assert written_status(None) == {} and written_status({"state": "running"}) == {"state": "running"}
