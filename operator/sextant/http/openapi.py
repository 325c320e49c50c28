"""The OpenAPI 3.1 document of the /v2 API, generated from the pydantic models in models.py (so it cannot
drift from them). Served at GET /v2/openapi.json; `python -m sextant.http.openapi` prints it."""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic.json_schema import models_json_schema

from ..resources import inputs, request
from . import models
from ..lifecycle.selection import BULK_MAX
from .models import BATCH_MAX, CONTINUE_MAX, CONTINUE_PATTERN, DEFAULT_LIMIT, MAX_LIMIT

REF = "#/components/schemas/{model}"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


def _content(name: str) -> dict[str, Any]:
    return {"application/json": {"schema": _ref(name)}}


ERRORS = {
    401: "No bearer token, or the API server did not accept it (TokenReview).",
    403: "The caller may not do this in this namespace (SubjectAccessReview against sextant.dev RBAC).",
    404: "No such job (or namespace).",
    409: "The job's state forbids the transition (cancel of a finished job, retry of one not failed or dead).",
    410: "The continue token has expired (a list's snapshot lasts a few minutes): list again from the start.",
    422: "Invalid input; error.field names it.",
    429: "Too many requests: the operator serves a bounded number at once and a bounded rate per user, and a client "
         "whose tokens the API server keeps refusing is slowed down. Retry after Retry-After seconds.",
    502: "The Kubernetes API failed to do what was asked.",
    503: "Not now: the credentials could not be checked with the Kubernetes API, the operator is still starting, "
         "the request was not done within the operator's deadline, or the archive could not be reached (reason "
         "ArchiveUnavailable; for a list, also ArchiveBehind: its writer is catching up). Retry after Retry-After "
         "seconds.",
}
RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before retrying.", "required": True,
                               "schema": {"type": "string", "pattern": "^[0-9]+$"}}}


def _responses(ok: dict[int, tuple[str, str]], *errors: int, words: dict[int, str] | None = None) -> dict[str, Any]:
    """An operation's answers: `ok`, and the errors (ERRORS' descriptions unless `words` has the operation's own)."""
    out: dict[str, Any] = {str(code): {"description": text, "content": _content(schema)}
                           for code, (schema, text) in ok.items()}
    for code in (401, 403, *errors, 429, 502, 503):
        out[str(code)] = {"description": (words or {}).get(code, ERRORS[code]), "content": _content("Error"),
                          **({"headers": RETRY_AFTER} if code in (429, 503) else {})}
    return out


NAMESPACE = {
    "name": "namespace", "in": "query", "required": False,
    "description": "The Kubernetes namespace of the jobs (default: default). Every request is authorized "
                   "in this namespace.",
    "schema": {"type": "string", "default": "default", "pattern": inputs.NAMESPACE_PATTERN, "minLength": 1,
               "maxLength": inputs.NAME_MAX},
}
JOB_ID = {
    "name": "job_id", "in": "path", "required": True,
    "description": "The job's id: job_8f3k2m9q (or its object name job-8f3k2m9q).",
    "schema": {"type": "string", "pattern": inputs.JOB_ID_PATTERN, "minLength": 1, "maxLength": inputs.NAME_MAX},
}


WARNING = {"Warning": {"description": "Why the job will wait (its queue or handler does not exist), one header "
                                      "each: `299 - \"<text>\"` (RFC 7234).", "required": False,
                       "schema": {"type": "string", "pattern": '^299 - ".*"$'}}}


def _created(responses: dict[str, Any]) -> dict[str, Any]:
    for code in ("200", "201"):
        responses[code]["headers"] = WARNING
    return responses


def _name_param(name: str, what: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": f"Only jobs of this {what}.",
            "schema": {"type": "string", "pattern": inputs.NAME_PATTERN, "minLength": 1,
                       "maxLength": inputs.NAME_MAX}}


def _transition(verb: str, summary: str) -> dict[str, Any]:
    return {"post": {
        "operationId": f"{verb}Job", "summary": summary, "parameters": [JOB_ID, NAMESPACE],
        "description": "Authorized as `patch` on jobs.sextant.dev (the request patches the job's spec). Answers "
                       "the job as it is right after the request (the operator acts on it asynchronously).",
        "responses": _responses({200: ("Job", f"The {verb} was requested.")}, 404, 409, 422),
    }}


def _selected(verb: str, summary: str) -> dict[str, Any]:
    return {"post": {
        "operationId": f"{verb}SelectedJobs", "summary": summary, "parameters": [NAMESPACE],
        "description": "Authorized as `list` and `patch` on jobs.sextant.dev. Selects the namespace's jobs that match "
                       "every given field of the body (at least one) and whose state allows the action, oldest "
                       f"first, and asks for each as POST /v2/jobs/{{job_id}}/{verb} does (the same request, per "
                       f"job; `sextant jobs {verb} --queue ...` and the dashboard's bulk buttons take this path "
                       f"too), at most {BULK_MAX} per call: `remaining` counts the rest, so call again until it "
                       "is 0. With `dry_run` nothing changes: the count and the ids to confirm. A job whose state "
                       "changed since it was selected is listed in `refused`, and the others go on. A `state` the "
                       "action never applies to (retry of queued jobs) is refused (422, field state).",
        "requestBody": {"required": True, "content": _content("JobSelection")},
        "responses": _responses({200: ("BulkResult", "What was done (or, with dry_run, would be).")}, 404, 422),
    }}


QUEUE = {
    "name": "queue", "in": "path", "required": True, "description": "The queue's name.",
    "schema": {"type": "string", "pattern": inputs.NAME_PATTERN, "minLength": 1, "maxLength": inputs.NAME_MAX},
}


def _pause(verb: str, summary: str) -> dict[str, Any]:
    return {"post": {
        "operationId": f"{verb}Queue", "summary": summary, "parameters": [QUEUE, NAMESPACE],
        "description": "Authorized as `patch` on queues.sextant.dev (the request sets the Queue's spec.paused). "
                       "Answers the queue right after the request; its numbers are its status as last written.",
        "responses": _responses({200: ("Queue", f"The {verb} was made.")}, 404, 422),
    }}


def document() -> dict[str, Any]:
    _, schemas = models_json_schema(
        [(request.CreateJob, "validation"), (models.Job, "serialization"), (models.CreatedJob, "serialization"),
         (models.JobList, "serialization"), (models.CreateJobs, "validation"), (models.BatchResult, "serialization"),
         (models.JobSelection, "validation"), (models.BulkResult, "serialization"),
         (models.QueueList, "serialization"), (models.Queue, "serialization"), (models.Error, "serialization")],
        ref_template=REF, by_alias=True)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Sextant API", "version": "2.0.0",
            "description": "Jobs and queues of Sextant, a job queue on Kubernetes. Authenticate with a Kubernetes "
                           "bearer token (`Authorization: Bearer $(kubectl create token SA)`); choose the "
                           "namespace with the query parameter `namespace` (default: default). Every request is "
                           "authorized against the cluster's RBAC for the API group sextant.dev: create/list/get "
                           "jobs, patch jobs for cancel and retry, list queues, patch queues for pause and resume.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": {
            "/v2/jobs": {
                "post": {
                    "operationId": "createJob", "summary": "Create a job",
                    "description": "With an idempotency_key already used in the namespace within 24 hours, the "
                                   "first job is answered (200, header Idempotent-Replayed: true) instead of "
                                   "creating another (201), when it has the same queue, handler and payload; "
                                   "else 409 (run_at and priority are not compared). Atomic: concurrent creates "
                                   "with one key make one job. A job whose queue or handler does not exist is "
                                   "created all the same (it waits, Blocked, until they exist), and the answer says "
                                   "so: in `warnings`, and in one `Warning: 299 - \"...\"` header each (as the "
                                   "Kubernetes API server sends its warnings). `state` is the job's first state: "
                                   "queued, or scheduled when run_at is ahead. With an archive configured, the "
                                   "key's first job is answered for the whole window even after it left etcd "
                                   "(`archived: true`); when the archive cannot be asked, 503 and nothing is "
                                   "created.",
                    "parameters": [NAMESPACE],
                    "requestBody": {"required": True, "content": _content("CreateJob")},
                    "responses": _created(_responses({201: ("CreatedJob", "Created."),
                                             200: ("CreatedJob", "The job that already holds the idempotency key.")},
                                            404, 409, 422,
                                            words={409: "The idempotency_key is held by a job with another queue, "
                                                        "handler or payload; error.field names the first such "
                                                        "field, the message all of them. Nothing is created."})),
                },
                "get": {
                    "operationId": "listJobs", "summary": "List live and archived jobs",
                    "description": "One list: the live jobs first, in the Kubernetes API server's order (by id), "
                                   "from one snapshot; then, with an archive configured, the archived ones "
                                   "(`archived: true`), newest first, those that finished before the list began. "
                                   "`limit` at a time; follow `continue` until it is null: each job is listed once, "
                                   "even as jobs are archived and deleted meanwhile. A page may hold fewer than "
                                   "`limit` jobs while more follow. In the live part a token expires within a few "
                                   "minutes (410).",
                    "parameters": [
                        NAMESPACE, _name_param("queue", "queue"), _name_param("handler", "handler"),
                        {"name": "state", "in": "query", "required": False, "description": "Only jobs in this state.",
                         "schema": {"type": "string", "enum": inputs.STATES}},
                        {"name": "label", "in": "query", "required": False,
                         "description": "Only jobs with this label: key=value.",
                         "schema": {"type": "string", "pattern": "^[^=]+=[^=]*$"}},
                        {"name": "since", "in": "query", "required": False,
                         "description": "Only jobs that finished at or after this time (RFC 3339, or a duration "
                                        "before now: 1h); an unfinished job finishes after any.",
                         "schema": {"type": "string"}},
                        {"name": "until", "in": "query", "required": False,
                         "description": "Only jobs that finished before this time (RFC 3339, or a duration before "
                                        "now), after `since`; excludes unfinished jobs.",
                         "schema": {"type": "string"}},
                        {"name": "limit", "in": "query", "required": False, "description": "Page size.",
                         "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT}},
                        {"name": "continue", "in": "query", "required": False,
                         "description": "The `continue` of the previous page.",
                         "schema": {"type": "string", "pattern": CONTINUE_PATTERN, "maxLength": CONTINUE_MAX}},
                    ],
                    "responses": _responses({200: ("JobList", "A page of jobs.")}, 404, 410, 422),
                },
            },
            "/v2/jobs:batch": {
                "post": {
                    "operationId": "createJobs", "summary": f"Create many jobs (at most {BATCH_MAX} per call)",
                    "description": "Authorized as one create is (`create` on jobs.sextant.dev, and `list` to find "
                                   "a key's holder). `items` are bodies of POST /v2/jobs. Every item is checked "
                                   "before any is created: one invalid item refuses the call (422, error.field "
                                   "`items[i].FIELD`) and nothing is created; more than "
                                   f"{BATCH_MAX} items too (field `items`), and a body over 1 MiB (413). Then each "
                                   "is created as POST /v2/jobs creates one, a few at a time, and answered in "
                                   "order with the status that route would give it: 201 created, 200 the job "
                                   "already holding its idempotency_key, 409 when that job has another queue, "
                                   "handler or payload (error.field names it). An item whose key an earlier item "
                                   "uses returns that item's job (or 409). The call itself answers 200.",
                    "parameters": [NAMESPACE],
                    "requestBody": {"required": True, "content": _content("CreateJobs")},
                    "responses": _responses({200: ("BatchResult", "One answer per item, in order.")}, 404, 422,
                                            words={422: "An item is invalid (error.field items[i].FIELD), or "
                                                        f"there are more than {BATCH_MAX}: nothing is created."}),
                },
            },
            "/v2/jobs:cancel": _selected("cancel", "Cancel every job that a selection matches (queue, state, "
                                                   "handler, labels)"),
            "/v2/jobs:retry": _selected("retry", "Retry every failed or dead job that a selection matches"),
            "/v2/jobs/{job_id}": {
                "get": {
                    "operationId": "getJob", "summary": "Get a job, with its timeline of attempts",
                    "description": "The live job; when it is not live and an archive is configured, its archived "
                                   "record (`archived: true`).",
                    "parameters": [JOB_ID, NAMESPACE],
                    "responses": _responses({200: ("Job", "The job.")}, 404, 422),
                },
            },
            "/v2/jobs/{job_id}/cancel": _transition(
                "cancel", "Cancel a scheduled, queued, running or failed job"),
            "/v2/jobs/{job_id}/retry": _transition(
                "retry", "Retry a failed or dead job (its attempt counter starts again)"),
            "/v2/queues/{queue}/pause": _pause(
                "pause", "Pause a queue: running attempts finish, nothing new starts"),
            "/v2/queues/{queue}/resume": _pause(
                "resume", "Resume a queue: its queued jobs start again, in order"),
            "/v2/queues": {
                "get": {
                    "operationId": "listQueues", "summary": "Queues: jobs per state, running vs concurrency",
                    "description": "Authorized as `list` on queues.sextant.dev. The unfinished jobs' numbers are "
                                   "the Queue's status (written by the operator every few seconds: those of "
                                   "`kubectl get squeue`), the finished jobs' are counted by the operator as they "
                                   "finish; a queue that jobs name but that does not exist is counted from its "
                                   "jobs. 404 for a namespace the operator does not watch.",
                    "parameters": [NAMESPACE],
                    "responses": _responses({200: ("QueueList", "Every queue of the namespace, and every queue "
                                                                "its jobs name.")}, 404, 422),
                },
            },
        },
        "components": {
            "schemas": schemas["$defs"],
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "A Kubernetes bearer token (checked with a TokenReview)."}},
        },
    }


if __name__ == "__main__":
    json.dump(document(), sys.stdout, indent=2)
    sys.stdout.write("\n")
