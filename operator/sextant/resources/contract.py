"""Names that the operator, workers, the runner, the CLI and the HTTP API share with each other and with users'
scripts: labels, annotations, lease names, the idempotency window's environment variable and the API server's paths.
(The SEXTANT_* variables of an attempt's handler are runner/env.py's.)"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from . import API_VERSION

# The worker protocol's numbers and words (exit codes, limits, the id alphabet, the fence): protocol.json beside this
# file, the one definition. The Node SDK gets the same file generated into sdk/node/src/generated/protocol.ts
# (resources/typescript.py), and both sides' parity tests check against its golden values.
PROTOCOL: dict[str, Any] = json.loads(
    resources.files(__package__).joinpath("protocol.json").read_text(encoding="utf-8"))["constants"]

# An attempt's pod and its Lease (the runner's): whose attempt they are.
LABEL_JOB = "sextant.dev/job"
LABEL_QUEUE = "sextant.dev/queue"
LABEL_HANDLER = "sextant.dev/handler"
LABEL_ATTEMPT = "sextant.dev/attempt"
LABEL_SEQUENCE = "sextant.dev/sequence"  # the attempt's sequence number over the job's life: names the pod
# The previous version's name of LABEL_SEQUENCE, on pods and Leases it made that may still be in flight: read as a
# fallback. The operator never writes it; the runner still labels its Lease with it too (runner/lease.py), for an
# operator of the previous version. Drop with the version after next.
LEGACY_LABEL_SEQUENCE = "sextant.dev/run"
# The job-id annotation of an attempt's pod (`sextant.dev/job-id=job_8f3k2m9q`, the id users see: the CLI, the /v2 API).
ANNOTATION_JOB_ID = "sextant.dev/job-id"

# An attempt's Lease (pod mode): its handler's latest progress, {"fraction": 0.4, "message": "..."} as JSON, written
# by the runner with its renewals (README, "Snooze, output and progress").
ANNOTATION_PROGRESS = "sextant.dev/progress"

# A job created through the HTTP API: who asked for it.
ANNOTATION_REQUESTED_BY = "sextant.dev/requested-by"

# A schedule's jobs (README, "Schedules"): the Schedule's name, and the tick in RFC 3339, UTC.
LABEL_SCHEDULE = "sextant.dev/schedule"
ANNOTATION_SCHEDULED_AT = "sextant.dev/scheduled-at"

# A Worker object's label: the worker's name (docs/workers.md §1).
LABEL_WORKER = PROTOCOL["workerLabel"]


def sequence_label(labels: dict[str, str]) -> int | None:
    """The sequence number an attempt's pod or Lease is labelled with, whichever version labelled it; None for none."""
    value = labels.get(LABEL_SEQUENCE, labels.get(LEGACY_LABEL_SEQUENCE, ""))
    return int(value) if value.isdigit() and value.isascii() else None


def holder_identity(worker: str, incarnation: str) -> str:
    """What a Worker object and its attempts' timeline entries name it by: one process start of that worker."""
    return f"{worker}/{incarnation}"


# How long an idempotency key stays claimed (a duration; default 24h), for tests and experiments: the operator and
# every client must be given the same value (resources/inputs.idempotency_window reads it).
ENV_IDEMPOTENCY_WINDOW = PROTOCOL["idempotencyWindowEnv"]

# The API groups (group/version) Sextant calls besides its own (API_VERSION); "v1" is the core group, under /api.
CORE = "v1"
COORDINATION = "coordination.k8s.io/v1"
AUTHENTICATION = "authentication.k8s.io/v1"
AUTHORIZATION = "authorization.k8s.io/v1"
APIEXTENSIONS = "apiextensions.k8s.io/v1"
APPS = "apps/v1"


def path(group_version: str, plural: str, namespace: str | None = None, name: str | None = None,
         subresource: str | None = None) -> str:
    """The API server's path of a collection or of one object (and its subresource): the core group under
    /api/v1, every other under /apis/GROUP/VERSION; without a namespace, across all namespaces (or cluster-wide).
    Names are put in as they are: Kubernetes names need no escaping."""
    out = "/api/v1" if group_version == CORE else f"/apis/{group_version}"
    out += (f"/namespaces/{namespace}" if namespace else "") + f"/{plural}"
    out += f"/{name}" if name else ""
    return out + (f"/{subresource}" if subresource else "")


def jobs_path(namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
    return path(API_VERSION, "jobs", namespace, name, subresource)


def queues_path(namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
    return path(API_VERSION, "queues", namespace, name, subresource)


def handlers_path(namespace: str | None = None, name: str | None = None) -> str:
    return path(API_VERSION, "handlers", namespace, name)


def schedules_path(namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
    return path(API_VERSION, "schedules", namespace, name, subresource)


def workers_path(namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
    """Worker objects (resources/worker.py): one per worker process, the worker protocol."""
    return path(API_VERSION, "workers", namespace, name, subresource)


def workerpools_path(namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
    """WorkerPool objects (resources/workerpool.py): a Deployment of workers the operator scales."""
    return path(API_VERSION, "workerpools", namespace, name, subresource)


def deployments_path(namespace: str, name: str, subresource: str | None = None) -> str:
    """A Deployment (apps/v1), for a WorkerPool's target: only its `scale` subresource is read and written."""
    return path(APPS, "deployments", namespace, name, subresource)


def pods_path(namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
    return path(CORE, "pods", namespace, name, subresource)


def leases_path(namespace: str | None = None, name: str | None = None) -> str:
    return path(COORDINATION, "leases", namespace, name)


def events_path(namespace: str | None = None) -> str:
    return path(CORE, "events", namespace)


def nodes_path(name: str | None = None, subresource: str | None = None) -> str:
    """Nodes: only `sextant dev`'s local node registers one."""
    return path(CORE, "nodes", None, name, subresource)


def crds_path(name: str | None = None) -> str:
    return path(APIEXTENSIONS, "customresourcedefinitions", None, name)


TOKEN_REVIEWS_PATH = path(AUTHENTICATION, "tokenreviews")
ACCESS_REVIEWS_PATH = path(AUTHORIZATION, "subjectaccessreviews")
