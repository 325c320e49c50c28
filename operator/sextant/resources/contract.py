"""Names that the operator, workers, the runner, the CLI and the HTTP API share with each other and with users'
scripts: labels, annotations and lease names. (controller/pods.py still spells the attempt labels itself, with
the same values.)"""

from __future__ import annotations

# An attempt's pod and its Lease (the runner's): whose attempt they are.
LABEL_JOB = "sextant.dev/job"
LABEL_QUEUE = "sextant.dev/queue"
LABEL_HANDLER = "sextant.dev/handler"
LABEL_ATTEMPT = "sextant.dev/attempt"
LABEL_RUN = "sextant.dev/run"

# A job created through the HTTP API: who asked for it.
ANNOTATION_REQUESTED_BY = "sextant.dev/requested-by"

# A schedule's jobs (core-concepts: Schedules): the Schedule's name, and the tick in RFC 3339, UTC.
LABEL_SCHEDULE = "sextant.dev/schedule"
ANNOTATION_SCHEDULED_AT = "sextant.dev/scheduled-at"

# A worker's registration Lease (docs/workers.md §1).
LABEL_WORKER = "sextant.dev/worker"
ANNOTATION_QUEUES = "sextant.dev/queues"
ANNOTATION_HANDLERS = "sextant.dev/handlers"
ANNOTATION_SLOTS = "sextant.dev/slots"
ANNOTATION_DRAINING = "sextant.dev/draining"
WORKER_LEASE_PREFIX = "sextant-worker-"


def worker_lease_name(worker: str) -> str:
    return WORKER_LEASE_PREFIX + worker


def holder_identity(worker: str, incarnation: str) -> str:
    """What a worker's Lease and its attempts' timeline entries name it by: one process start of that worker."""
    return f"{worker}/{incarnation}"


def worker_of(holder: str) -> str:
    return holder.split("/", 1)[0]
