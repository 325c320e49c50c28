"""Acting on what a selector matches (bulk cancel and retry): the selector's checks, and which of the jobs it matches
a verb applies to. One rule for the CLI (`sextant jobs retry --state dead -q emails`), the HTTP API
(`POST /v2/jobs:retry`) and the dashboard's bulk buttons; each job is then asked for exactly as a single cancel or
retry is (client.py), so the API server's CEL rules still refuse a job whose state changed in between.

Pure: jobs in, jobs out; the listing and the requests are client.py's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..resources import inputs
from ..resources.job import CANCEL_ONLY, CANCELLABLE, RETRY_ONLY, RETRYABLE, State

Verb = Literal["cancel", "retry"]
VERBS: tuple[Verb, ...] = ("cancel", "retry")
# Jobs at most that one bulk request of the HTTP API or the dashboard acts on (the answer counts the rest: ask
# again); a request makes one write per job, and must end within the API's request deadline.
BULK_MAX = 1000
LABEL_SELECTOR_MAX = 1024
# The jobs CRD's selectable fields (resources/crds.py) by which the API server filters a list.
FIELDS = {"queue": "spec.queue", "handler": "spec.handler", "state": "status.state"}


@dataclass(frozen=True)
class Selector:
    """What a bulk action selects in one namespace: every given part must match (an AND, as kubectl's selectors)."""

    queue: str | None = None
    state: str | None = None
    handler: str | None = None
    labels: str | None = None  # a Kubernetes label selector ("team=mail,tier!=batch"), evaluated by the API server

    def field_selector(self) -> str | None:
        """The fields as the API server's fieldSelector ("spec.queue=emails,status.state=dead"), None without."""
        parts = [f"{path}={value}" for name, path in FIELDS.items() if (value := getattr(self, name)) is not None]
        return ",".join(parts) or None

    def matches_fields(self, job: Mapping[str, Any]) -> bool:
        """Whether a job matches the fields (for an API server without the selectable fields: older CRDs)."""
        spec, status = job.get("spec") or {}, job.get("status") or {}
        return ((self.queue is None or spec.get("queue") == self.queue)
                and (self.handler is None or spec.get("handler") == self.handler)
                and (self.state is None or status.get("state") == self.state))

    def words(self) -> str:
        """For a person: "queue emails, state dead"."""
        parts = [f"{k} {v}" for k, v in (("queue", self.queue), ("state", self.state), ("handler", self.handler),
                                         ("labels", self.labels)) if v]
        return ", ".join(parts) or "no filter"


def selector(verb: Verb, *, queue: str | None = None, state: str | None = None, handler: str | None = None,
             labels: str | None = None, names: Mapping[str, str] | None = None) -> Selector:
    """A checked Selector for a bulk cancel or retry. InputError, naming the field as the caller spells it (`names`:
    queue/state/handler/labels → "--queue" ...), for a bad value, a state the verb never applies to (retry of
    queued jobs), or no part at all: an empty selector would act on the whole namespace by accident."""
    spelled = {"queue": "queue", "state": "state", "handler": "handler", "labels": "labels", **(names or {})}
    if verb not in VERBS:
        raise inputs.InputError("action", f"{verb!r} is not a bulk action; use cancel or retry")
    if queue is not None:
        inputs.object_name(spelled["queue"], queue, "queue name")
    if handler is not None:
        inputs.object_name(spelled["handler"], handler, "handler name")
    if state is not None:
        inputs.state(spelled["state"], state)
        allowed, only = (CANCELLABLE, CANCEL_ONLY) if verb == "cancel" else (RETRYABLE, RETRY_ONLY)
        if state not in allowed:
            raise inputs.InputError(spelled["state"], f"{state} jobs cannot be {verb_past(verb)}: {only}")
    if labels is not None:
        if not labels.strip() or len(labels) > LABEL_SELECTOR_MAX or any(c in labels for c in "\r\n\t"):
            raise inputs.InputError(spelled["labels"], f"{labels!r} is not a label selector: e.g. team=mail or "
                                                       f"'tier in (a,b)', at most {LABEL_SELECTOR_MAX} characters")
    if queue is None and state is None and handler is None and labels is None:
        raise inputs.InputError(spelled["queue"], f"name what to {verb}: at least one of {spelled['queue']}, "
                                                  f"{spelled['state']}, {spelled['handler']} or {spelled['labels']}")
    return Selector(queue=queue, state=state, handler=handler, labels=labels)


def verb_past(verb: Verb) -> str:
    return "cancelled" if verb == "cancel" else "retried"


def actionable(verb: Verb, job: Mapping[str, Any]) -> bool:
    """Whether the job's state allows the verb (the API server's CEL rules say the same); a job whose cancel is
    already requested is not asked again."""
    status, spec = job.get("status") or {}, job.get("spec") or {}
    if verb == "cancel":
        return status.get("state") in CANCELLABLE and not spec.get("cancel")
    return status.get("state") in RETRYABLE


def creation_order(job: Mapping[str, Any]) -> tuple[str, str]:
    """Creation time (RFC 3339 in UTC sorts as text), then name."""
    meta = job["metadata"]
    return meta.get("creationTimestamp") or "", meta["name"]


def targets(jobs: Iterable[Mapping[str, Any]], verb: Verb, limit: int | None = None) -> list[Mapping[str, Any]]:
    """Of the jobs a selector matched, those the verb applies to, oldest first, at most `limit` (None: all)."""
    chosen = sorted((j for j in jobs if actionable(verb, j)), key=creation_order)
    return chosen if limit is None else chosen[:limit]


def question(verb: Verb, count: int, what: str) -> str:
    """The one confirmation of a bulk action (the CLI's prompt, the dashboard's dialog)."""
    names = [s.value for s in State if s in (CANCELLABLE if verb == "cancel" else RETRYABLE)]
    states = ", ".join(names[:-1]) + " or " + names[-1]
    return f"{verb.capitalize()} the {count} {states} job{'s' if count != 1 else ''} that match ({what})?"
