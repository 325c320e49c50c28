"""Attempt pods: built from the Handler's template, and read back into PodObservations."""

from __future__ import annotations

from typing import Any

from ..lifecycle.attempts import DISRUPTION_TARGET, PodObservation, Report
from ..lifecycle.decision import CreatePod, JobSnapshot
from ..resources import API_VERSION, GROUP
from ..resources.common import parse_duration, time_or_none
from ..resources.handler import HandlerSpec
from ..resources.contract import (ANNOTATION_JOB_ID, LABEL_ATTEMPT, LABEL_HANDLER, LABEL_JOB, LABEL_QUEUE,
                                  LABEL_SEQUENCE, sequence_label)
from ..resources.job import job_id
from ..resources.queue import QueueSpec
from ..resources.report import output_json, read_pod_report, snooze_seconds
from ..runner.env import ATTEMPT_REF, IDENTITY_VARIABLES, POD_VARIABLES, attempt_ref, attempt_variables
from ..lifecycle.reading import job_scheduled_at

# Variables the operator (or the pod's own fields, or the runner) sets: a Handler's template cannot set them.
RESERVED_ENV = IDENTITY_VARIABLES | set(POD_VARIABLES) | {ATTEMPT_REF}


# The downward API: what cannot be known before the pod exists (variable, field).
NODE_NAME_FIELD = ("SEXTANT_NODE_NAME", "spec.nodeName")
POD_NAME_FIELD = ("SEXTANT_POD_NAME", "metadata.name")
POD_UID_FIELD = ("SEXTANT_POD_UID", "metadata.uid")


def field_env(*fields: tuple[str, str]) -> list[dict[str, Any]]:
    """The variables of these downward-API fields; new dicts each time, so that no two pods share one."""
    return [{"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}} for name, path in fields]


def attempt_env(raw: dict[str, Any], job: JobSnapshot, handler: HandlerSpec, queue: QueueSpec,
                create: CreatePod) -> list[dict[str, Any]]:
    """The SEXTANT_* variables of the attempt's first container.

    A heartbeat Handler's image runs the runner, which reads the job's identity and payload from the Job: its pod
    carries one compact SEXTANT_ATTEMPT_REF and the two fields only the pod knows (every variable costs the API
    server and kwok on every pod). An image without the runner (`heartbeat: false`) gets every variable, and a
    small payload, itself."""
    namespace = raw["metadata"]["namespace"]
    if handler.heartbeat:
        ref = attempt_ref(namespace=namespace, job_name=job.name, job_uid=job.uid, sequence=create.sequence,
                          attempt=create.attempt, pod_name=create.name, lease_duration=queue.lease_duration,
                          cancel_grace=queue.cancel_grace)
        return [{"name": ATTEMPT_REF, "value": ref}, *field_env(NODE_NAME_FIELD, POD_UID_FIELD)]
    identity = attempt_variables(
        job_name=job.name, job_uid=job.uid, namespace=namespace, queue=job.spec.queue, handler=job.spec.handler,
        attempt=create.attempt, sequence=create.sequence, scheduled_at=job_scheduled_at(job, raw), payload=job.spec.payload,
        lease_name=create.name, lease_duration=queue.lease_duration, cancel_grace=queue.cancel_grace,
        heartbeat=handler.heartbeat)
    # The runner names its pod as the owner of the attempt's Lease: the operator counts only such a Lease.
    return [*({"name": k, "value": v} for k, v in identity.items()),
            *field_env(NODE_NAME_FIELD, POD_NAME_FIELD, POD_UID_FIELD)]


def build_pod(raw: dict[str, Any], job: JobSnapshot, handler: HandlerSpec, queue: QueueSpec,
              create: CreatePod) -> dict[str, Any]:
    namespace = raw["metadata"]["namespace"]
    template = handler.template
    spec = handler.pod_spec()  # a new dump each time: the Handler's own template is never written into
    spec["restartPolicy"] = "Never"  # a retry is a new attempt, decided by the operator, not the kubelet
    spec.setdefault("terminationGracePeriodSeconds", int(parse_duration(queue.cancel_grace).total_seconds()))
    restrict(spec)  # the Pod Security Standard "restricted", unless the Handler's template says otherwise
    first = spec["containers"][0]
    first["env"] = [e for e in first.get("env", []) if e.get("name") not in RESERVED_ENV] + attempt_env(
        raw, job, handler, queue, create)
    # A failed handler's last log lines become the timeline's message when it writes no termination message.
    first.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    labels = {
        **template.metadata.labels,
        LABEL_JOB: job.name,
        LABEL_QUEUE: job.spec.queue,
        LABEL_HANDLER: job.spec.handler,
        LABEL_ATTEMPT: str(create.attempt),
        LABEL_SEQUENCE: str(create.sequence),
    }
    annotations = {**template.metadata.annotations, ANNOTATION_JOB_ID: job_id(job.name)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": create.name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {"apiVersion": API_VERSION, "kind": "Job", "name": job.name, "uid": job.uid, "controller": True}
            ],
        },
        "spec": spec,
    }


def restrict(spec: dict[str, Any]) -> None:
    """Defaults that meet the Pod Security Standard "restricted"; every field the Handler's template sets wins.

    Pod level: runAsNonRoot and a RuntimeDefault seccomp profile (containers inherit both, so a template may relax
    them per pod or per container). Every container: no privilege escalation, all capabilities dropped (a
    template's `capabilities.add` keeps working: the kernel applies drop before add). A privileged container, or
    one adding CAP_SYS_ADMIN, keeps privilege escalation (the API server refuses the pair). Windows pods are left
    alone: the API server refuses these Linux-only fields there.
    """
    if (spec.get("os") or {}).get("name") == "windows":
        return
    pod = spec.setdefault("securityContext", {})
    pod.setdefault("runAsNonRoot", True)
    pod.setdefault("seccompProfile", {"type": "RuntimeDefault"})
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        sc = container.setdefault("securityContext", {})
        capabilities = sc.setdefault("capabilities", {})
        capabilities.setdefault("drop", ["ALL"])
        if not sc.get("privileged") and not {"SYS_ADMIN", "CAP_SYS_ADMIN"} & set(capabilities.get("add") or []):
            sc.setdefault("allowPrivilegeEscalation", False)


def sequence_of(pod: dict[str, Any]) -> int | None:
    return sequence_label(pod["metadata"].get("labels") or {})


def controller_uid(obj: dict[str, Any], kind: str = "Job", group: str = GROUP) -> str | None:
    """The uid of the object's controller ownerReference when the controller is a `kind` of `group` (as client-go's
    metav1.GetControllerOf reads it): who really owns it, whatever its labels say."""
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == kind and ref.get("apiVersion", "").rpartition("/")[0] == group:
            return ref.get("uid")
    return None


def observe(pod: dict[str, Any]) -> PodObservation | None:
    """The lifecycle's view of an attempt pod; None for a pod that is not one (no sequence label)."""
    sequence = sequence_of(pod)
    if sequence is None:
        return None
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    handler_container = (spec.get("containers") or [{}])[0].get("name")
    exit_code = started_at = waiting = None
    message = status.get("message")
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") != handler_container:
            continue
        state = cs.get("state") or {}
        if "terminated" in state:
            exit_code = state["terminated"].get("exitCode")
            # "Completed" says nothing a succeeded attempt does not; a termination message of its own does.
            message = message or state["terminated"].get("message") or (
                state["terminated"].get("reason") if exit_code != 0 else None)
            started_at = time_or_none(state["terminated"].get("startedAt"))
        elif "running" in state:
            started_at = time_or_none(state["running"].get("startedAt"))
        elif "waiting" in state:
            waiting = state["waiting"].get("reason")
            message = message or state["waiting"].get("message") or waiting
    report = report_in(message)
    if report is not None:
        message = report.message
    conditions = status.get("conditions") or []
    scheduling = next((c for c in conditions if c.get("type") == "PodScheduled" and c.get("status") == "False"
                       and c.get("reason") == "Unschedulable"), None)
    unschedulable = scheduling is not None
    if unschedulable and not spec.get("nodeName"):
        message = message or scheduling.get("message")  # "0/2 nodes are available: ...", for a start timeout
    disruption = next((c for c in conditions if c.get("type") == DISRUPTION_TARGET and c.get("status") == "True"),
                      None)
    return PodObservation(
        name=meta["name"],
        sequence=sequence,
        phase=status.get("phase", "Pending"),
        node=spec.get("nodeName"),
        exit_code=exit_code,
        reason=status.get("reason"),
        message=message,
        deleting=bool(meta.get("deletionTimestamp")),
        started_at=started_at,
        unschedulable=unschedulable and not spec.get("nodeName"),
        disruption=(disruption.get("reason") or DISRUPTION_TARGET) if disruption else None,
        disruption_message=disruption.get("message") if disruption else None,
        uid=meta.get("uid"),
        owner_uid=controller_uid(pod),
        created_at=time_or_none(meta.get("creationTimestamp")),
        waiting_reason=waiting,
        report=report,
    )


def report_in(message: str | None) -> Report | None:
    """The runner's report in a termination message (resources/report.pod_report): a snooze's delay, the output, each
    checked again as a worker's are (a pod's handler may write anything there). None for a plain message."""
    body = read_pod_report(message)
    if body is None:
        return None
    try:
        snooze = snooze_seconds(body["snoozeSeconds"]) if "snoozeSeconds" in body else None
    except ValueError:
        snooze = None  # an exit code 85 without a valid delay is an ordinary failure (lifecycle/attempts.snoozed)
    output, note = output_json(body.get("output"))
    text = body.get("message")
    given_note = body.get("outputNote")
    return Report(snooze_seconds=snooze, output=output,
                  output_note=note or (given_note[:1000] if isinstance(given_note, str) else None),
                  message=text if isinstance(text, str) else None)
