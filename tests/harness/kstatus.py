"""kstatus' rules for a custom resource, re-stated in Python from its documentation (sigs.k8s.io/cli-utils,
pkg/kstatus: the README's Statuses, Conditions and "The Ready Condition"), so tests judge a Sextant Job as Flux's
kustomize-controller and helm-controller do (`wait: true`, `healthChecks`).

kstatus knows no rule of its own for the kinds of sextant.dev, so only its generic rules apply, in this order:
1. metadata.deletionTimestamp set: Terminating.
2. status.observedGeneration present and not metadata.generation: InProgress (the controller has not acted on
   the latest spec).
3. The standard conditions, "abnormal-true": the first of Reconciling=True (InProgress) or Stalled=True (Failed)
   in the conditions' order decides.
4. A Ready condition: True is Current, False is InProgress.
5. Otherwise Current (kstatus assumes a resource it cannot judge is reconciled).
"""

from __future__ import annotations

from typing import Any, NamedTuple

CURRENT, IN_PROGRESS, FAILED, TERMINATING = "Current", "InProgress", "Failed", "Terminating"


class Result(NamedTuple):
    status: str
    message: str


def compute(obj: dict[str, Any]) -> Result:
    meta = obj.get("metadata") or {}
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    if meta.get("deletionTimestamp"):
        return Result(TERMINATING, "Resource scheduled for deletion")
    generation, observed = meta.get("generation"), status.get("observedGeneration")
    if generation is not None and observed is not None and observed != generation:
        return Result(IN_PROGRESS, f"generation is {generation}, but latest observed generation is {observed}")
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    for cond in conditions:
        if cond.get("type") == "Reconciling" and cond.get("status") == "True":
            return Result(IN_PROGRESS, cond.get("message") or "")
        if cond.get("type") == "Stalled" and cond.get("status") == "True":
            return Result(FAILED, cond.get("message") or "")
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") == "True":
        return Result(CURRENT, ready.get("message") or "Resource is Ready")
    if ready is not None and ready.get("status") == "False":
        return Result(IN_PROGRESS, ready.get("message") or "Resource not Ready")
    return Result(CURRENT, "Resource is current")
