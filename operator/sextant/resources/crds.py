"""Generates crds/*.yaml from the pydantic models: `python -m sextant.resources.crds [--check] [DIR ...]`.

The same files go to charts/sextant/crds/, the Helm chart's copy: one source (the models), two identical outputs,
and tests/unit/test_crds_generated.py fails while either differs. (A copy, not a symlink: Flux's source-controller
and Argo CD's repo-server refuse or drop symlinks that leave the chart's directory, and `helm package` would
inline it anyway.)

Pydantic's JSON Schema is turned into a structural OpenAPI v3 schema: $refs inlined, Optional unwrapped,
titles dropped, open objects marked x-kubernetes-preserve-unknown-fields, CEL rules kept.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from . import CATEGORY, GROUP, VERSION, handler, job, queue, schedule, worker, workerpool
from .common import ANY_JSON

PRESERVE = "x-kubernetes-preserve-unknown-fields"
_DROP = {"title", "additionalProperties"}


def _resolve(node: Any, defs: dict[str, Any], in_status: bool) -> Any:
    if isinstance(node, list):
        return [_resolve(n, defs, in_status) for n in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if "$ref" in node:
        target = copy.deepcopy(defs[node.pop("$ref").rsplit("/", 1)[-1]])
        node = {**target, **node}  # a field's own description beats its type's
    if "anyOf" in node:  # Optional[X] → X: absence, not null, is how Kubernetes spells "unset"
        branches = [b for b in node.pop("anyOf") if b.get("type") != "null"]
        if len(branches) != 1:
            raise ValueError(f"cannot express union {branches} in a structural schema")
        node = {**_resolve(branches[0], defs, in_status), **node}
    if node.get("default", ...) is None or in_status:
        node.pop("default", None)
    open_object = node.get("additionalProperties") is True
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP and not (key == "additionalProperties" and isinstance(value, dict)):
            continue
        if key == "properties":
            out[key] = {
                name: _resolve(sub, defs, in_status or name == "status") for name, sub in value.items()
            }
        elif key in ("items", "additionalProperties"):
            out[key] = _resolve(value, defs, in_status)
        elif key == "const":  # a one-value Literal: structural schemas have no const, an enum of one says it
            out["enum"] = [value]
        else:
            out[key] = value
    if open_object:
        out[PRESERVE] = True
    if out.pop(ANY_JSON, False):  # any JSON value: a structural schema allows no type only with this
        out[PRESERVE] = True
    elif out.get(PRESERVE) and "type" not in out:
        out["type"] = "object"
    return out


def openapi_schema(model: type[BaseModel], *, root_rules: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """The structural openAPIV3Schema of one resource model."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    body = _resolve(raw, defs, in_status=False)
    properties = {
        "apiVersion": {"type": "string", "description": "sextant.dev/v1alpha1"},
        "kind": {"type": "string", "description": model.__name__},
        "metadata": {"type": "object"},
        **body["properties"],
    }
    schema: dict[str, Any] = {
        "type": "object",
        "description": (model.__doc__ or "").strip().splitlines()[0] if model.__doc__ else model.__name__,
        "properties": properties,
        "required": ["spec"] if "spec" in body.get("required", []) else [],
    }
    if not schema["required"]:
        del schema["required"]
    if root_rules:
        schema["x-kubernetes-validations"] = root_rules
    return schema


_NAME_FITS_A_LABEL = {
    "rule": "self.metadata.name.size() <= 63",
    "message": "metadata.name must be at most 63 characters (it is used as a label value on the job's pods)",
}

_SCHEDULE_NAME_FITS_A_LABEL = {
    "rule": "self.metadata.name.size() <= 63",
    "message": "metadata.name must be at most 63 characters (it is the label sextant.dev/schedule on its jobs)",
}



def _cel_states(states: frozenset[job.State]) -> str:
    return "[" + ", ".join(f"'{s.value}'" for s in job.State if s in states) + "]"


# The state lists and their words are resources/job.py's, as the lifecycle reads them.
_RETRY_ONLY_FAILED_OR_DEAD = {
    "rule": "!has(self.spec.retryToken) || (has(oldSelf.spec.retryToken) && oldSelf.spec.retryToken == "
            "self.spec.retryToken) || !has(self.status) || !has(self.status.state) || "
            f"self.status.state in {_cel_states(job.RETRYABLE)}",
    "messageExpression": f"'cannot retry: the job is ' + self.status.state + '; {job.RETRY_ONLY}'",
    "fieldPath": ".spec.retryToken",
    "reason": "FieldValueForbidden",
}
_CANCEL_ONLY_UNFINISHED = {
    "rule": "!has(self.spec.cancel) || !self.spec.cancel || (has(oldSelf.spec.cancel) && oldSelf.spec.cancel) || "
            "!has(self.status) || !has(self.status.state) || "
            f"!(self.status.state in {_cel_states(frozenset(job.State) - job.CANCELLABLE)})",
    "messageExpression": f"'cannot cancel: the job is ' + self.status.state + '; {job.CANCEL_ONLY}'",
    "fieldPath": ".spec.cancel",
    "reason": "FieldValueForbidden",
}

_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
_READY_REASON = '.status.conditions[?(@.type=="Ready")].reason'
_READY_MESSAGE = '.status.conditions[?(@.type=="Ready")].message'

RESOURCES: list[dict[str, Any]] = [
    {
        "module": job,
        "model": job.Job,
        "doc": "A unit of work: a handler, a queue, a JSON payload and a time to run; status is its lifecycle.",
        "root_rules": [_NAME_FITS_A_LABEL, _RETRY_ONLY_FAILED_OR_DEAD, _CANCEL_ONLY_UNFINISHED],
        # A job nobody has written yet reads `queued`, observedGeneration 0 (the API server's default, on every
        # read): the operator writes a runnable job only when what a reader sees changes (resources/job.py,
        # UNWRITTEN_STATUS).
        "status_default": job.UNWRITTEN_STATUS,
        "columns": [
            {"name": "State", "type": "string", "jsonPath": ".status.state"},
            {"name": "Attempt", "type": "integer", "jsonPath": ".status.attempt"},
            {"name": "Queue", "type": "string", "jsonPath": ".spec.queue"},
            {"name": "Handler", "type": "string", "jsonPath": ".spec.handler"},
            _AGE,
            # -o wide: why it waits (Ready's reason is Blocked's while blocked: QueueNotFound, HandlerNotFound,
            # NoWorker; else the state's, lifecycle/health.py) and the status message.
            {"name": "Reason", "type": "string", "priority": 1, "jsonPath": _READY_REASON},
            {"name": "Message", "type": "string", "priority": 1, "jsonPath": ".status.message"},
            {"name": "Key", "type": "string", "priority": 1, "jsonPath": ".spec.concurrencyKey"},
        ],
        # Field selectors (Kubernetes >= 1.32; beta from 1.30): `kubectl get sjob --field-selector
        # status.state=failed`, and the HTTP API's list filters, applied by the API server to each page. The jobs running
        # on a worker: ?fieldSelector=status.worker=NAME (docs/workers.md). Every create
        # path finds the job holding an idempotency key by spec.idempotencyKey (sextant/lifecycle/idempotency.py).
        "selectable": [".spec.queue", ".spec.handler", ".status.state", ".status.worker", ".spec.idempotencyKey"],
    },
    {
        "module": queue,
        "model": queue.Queue,
        "doc": "A named line of jobs with its own concurrency, retry, timeout, lease and retention settings.",
        "columns": [
            {"name": "Concurrency", "type": "integer", "jsonPath": ".spec.concurrency"},
            {"name": "Max-Attempts", "type": "integer", "jsonPath": ".spec.maxAttempts"},
            {"name": "Timeout", "type": "string", "jsonPath": ".spec.timeout"},
            {"name": "Running", "type": "integer", "jsonPath": ".status.running"},
            {"name": "Queued", "type": "integer", "jsonPath": ".status.queued"},
            {"name": "Oldest-Queued", "type": "date", "jsonPath": ".status.oldestQueuedAt"},
            {"name": "Paused", "type": "boolean", "jsonPath": ".status.paused"},
            {"name": "Rate-Limited", "type": "boolean", "jsonPath": ".status.rateLimited"},
            {"name": "Recent-Starts", "type": "integer", "priority": 1, "jsonPath": ".status.recentStarts"},
            {"name": "Keys", "type": "integer", "priority": 1, "jsonPath": ".status.keys"},
            {"name": "Scheduled", "type": "integer", "priority": 1, "jsonPath": ".status.scheduled"},
            {"name": "Failed", "type": "integer", "priority": 1, "jsonPath": ".status.failed"},
            {"name": "Starting", "type": "integer", "priority": 1, "jsonPath": ".status.starting"},
            _AGE,
        ],
    },
    {
        "module": handler,
        "model": handler.Handler,
        "doc": "How a handler runs: the pod template of its attempts, or on workers.",
        "columns": [
            {"name": "Image", "type": "string", "jsonPath": ".spec.template.spec.containers[0].image"},
            {"name": "Command", "type": "string", "priority": 1, "jsonPath": ".spec.worker.command"},
            _AGE,
        ],
    },
    {
        "module": worker,
        "model": worker.Worker,
        "doc": "One worker process: its registration, renewals and results (spec, the worker's) and the attempts "
               "assigned to it (status, the operator's); docs/workers.md.",
        "columns": [
            {"name": "State", "type": "string", "jsonPath": ".status.state"},
            {"name": "Queues", "type": "string", "jsonPath": ".spec.queues"},
            {"name": "Slots", "type": "integer", "jsonPath": ".status.slots"},
            {"name": "Busy", "type": "integer", "jsonPath": ".status.busy"},
            {"name": "Handlers", "type": "string", "priority": 1, "jsonPath": ".spec.handlers"},
            {"name": "Renewed", "type": "date", "priority": 1, "jsonPath": ".spec.renewTime"},
            _AGE,
        ],
    },
    {
        "module": workerpool,
        "model": workerpool.WorkerPool,
        "doc": "A Deployment of workers whose replicas the operator sets from the slots its queues need "
               "(its scale subresource only); docs/workers.md, Autoscaling.",
        "columns": [
            {"name": "Target", "type": "string", "jsonPath": ".spec.scaleTargetRef.name"},
            {"name": "Min", "type": "integer", "jsonPath": ".spec.minReplicas"},
            {"name": "Max", "type": "integer", "jsonPath": ".spec.maxReplicas"},
            {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"},
            {"name": "Desired", "type": "integer", "jsonPath": ".status.desiredReplicas"},
            {"name": "Queued", "type": "integer", "priority": 1, "jsonPath": ".status.queued"},
            {"name": "Running", "type": "integer", "priority": 1, "jsonPath": ".status.running"},
            {"name": "Message", "type": "string", "priority": 1, "jsonPath": ".status.message"},
            _AGE,
        ],
    },
    {
        "module": schedule,
        "model": schedule.Schedule,
        "doc": "Creates jobs on a cron expression or a fixed interval.",
        "root_rules": [_SCHEDULE_NAME_FITS_A_LABEL],
        "columns": [
            {"name": "Cron", "type": "string", "jsonPath": ".spec.cron"},
            {"name": "Interval", "type": "string", "jsonPath": ".spec.interval"},
            {"name": "Suspend", "type": "boolean", "jsonPath": ".spec.suspend"},
            {"name": "Last", "type": "date", "jsonPath": ".status.lastScheduleTime"},
            {"name": "Next", "type": "string", "jsonPath": ".status.nextScheduleTime"},
            # Scheduled, Suspended, or why it never fires (InvalidCron, InvalidTimeZone, ...): Ready's reason.
            {"name": "Status", "type": "string", "jsonPath": _READY_REASON},
            _AGE,
            {"name": "Message", "type": "string", "priority": 1, "jsonPath": _READY_MESSAGE},
        ],
    },
]


def crd(entry: dict[str, Any]) -> dict[str, Any]:
    module = entry["module"]
    schema = openapi_schema(entry["model"], root_rules=entry.get("root_rules"))
    schema["description"] = entry["doc"]
    if "status_default" in entry:
        status = schema["properties"]["status"]
        status["default"] = {}  # so that the field defaults below apply to an object without a status
        for field, value in entry["status_default"].items():
            status["properties"][field]["default"] = value
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{module.PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": module.KIND,
                "listKind": f"{module.KIND}List",
                "plural": module.PLURAL,
                "singular": module.KIND.lower(),
                "shortNames": module.SHORT_NAMES,
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": entry["columns"],
                    **({"selectableFields": [{"jsonPath": p} for p in entry["selectable"]]}
                       if entry.get("selectable") else {}),
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


# Each file starts a YAML document (`---`), so that files simply concatenated stay separate documents: `helm show
# crds charts/sextant | kubectl apply -f -` (helm prints the chart's CRD files back to back) and `cat crds/*`.
GENERATED = "# Generated by `python -m sextant.resources.crds` from operator/sextant/resources/. Do not edit.\n"
HEADER = "---\n" + GENERATED


def render() -> dict[str, str]:
    """File name → YAML text of every CRD."""
    return {
        f"{e['module'].PLURAL}.{GROUP}.yaml": HEADER + yaml.safe_dump(crd(e), sort_keys=False, width=120)
        for e in RESOURCES
    }


REPO_ROOT = Path(__file__).resolve().parents[3]
# Where the CRDs are written: the repository's crds/ (kubectl apply -f crds/) and the Helm chart's crds/.
OUTPUT_DIRS = (REPO_ROOT / "crds", REPO_ROOT / "charts" / "sextant" / "crds")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="*", default=[str(d) for d in OUTPUT_DIRS],
                        help="output directories (default: crds/ and charts/sextant/crds/)")
    parser.add_argument("--check", action="store_true", help="fail if the files differ from the models")
    args = parser.parse_args(argv)
    stale = []
    for out in map(Path, args.dir):
        rendered = render()
        extra = sorted(p.name for p in out.glob("*.yaml") if p.name not in rendered) if out.is_dir() else []
        for name, text in rendered.items():
            path = out / name
            if args.check:
                if not path.exists() or path.read_text() != text:
                    stale.append(str(path))
            else:
                out.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
        for name in extra:  # a CRD no model makes any more: removed if generated here, else reported
            if not args.check and GENERATED in (out / name).read_text()[:300]:
                (out / name).unlink()
            else:
                stale.append(f"{out / name} (no model makes it)")
    if stale:
        print("CRDs differ from the models; run `python -m sextant.resources.crds`: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
