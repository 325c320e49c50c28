"""GitOps health of a Job: the conditions Ready, Reconciling and Stalled, as kstatus (Flux) and Argo CD read them.

kstatus (sigs.k8s.io/cli-utils/pkg/kstatus) judges a custom resource by generic rules only: status.observedGeneration
behind metadata.generation is InProgress; a condition Reconciling=True is InProgress, Stalled=True is Failed;
otherwise Ready=True is Current and Ready=False InProgress; nothing of these is Current. Argo CD reads the documented
Lua check (docs/gitops.md). Both tools must tell the same story:

| state                         | Ready | Reconciling       | Stalled           | kstatus    | Argo CD     |
|-------------------------------|-------|-------------------|-------------------|------------|-------------|
| scheduled, queued, running    | False | True (the state)  | False             | InProgress | Progressing |
| failed (a retry will follow)  | False | True (BackingOff) | False             | InProgress | Progressing |
| Blocked (queue, handler, worker missing) | False | True (Blocked's reason) | False | InProgress | Progressing |
| succeeded                     | True  | False             | False             | Current    | Healthy     |
| dead, cancelled               | False | False             | True (the reason) | Failed     | Degraded    |
| Invalid (never runs)          | False | False             | True (Invalid's)  | Failed     | Degraded    |

A Blocked job is still on its way (the missing object may come later in the same sync), so it reconciles, with
the reason in Blocked's words. The conditions are a pure function of the rest of the status, so they change only
in a status write that happens anyway (no write of their own); each carries the generation it was computed for.
"""

from __future__ import annotations

from typing import NamedTuple

from ..resources.job import JobStatus, State

COND_READY, COND_RECONCILING, COND_STALLED = "Ready", "Reconciling", "Stalled"
COND_INVALID = "Invalid"  # on an object the operator cannot read (lifecycle/reading.py)
_BLOCKED, _TERMINAL = "Blocked", {State.DEAD: "Dead", State.CANCELLED: "Cancelled", State.SUCCEEDED: "Succeeded"}
_PROGRESS = {State.SCHEDULED: "Scheduled", State.QUEUED: "Queued", State.RUNNING: "Running",
             State.FAILED: "BackingOff"}


class Health(NamedTuple):
    """One condition's wanted value: type, True/False, reason, message."""

    type: str
    value: bool
    reason: str
    message: str


def health(status: JobStatus) -> list[Health]:
    """Ready, Reconciling and Stalled for a job's status (the operator's own Invalid hold is invalid_health)."""
    state, message = status.state, status.message or ""
    if state is None:
        return [Health(COND_READY, False, "Pending", message), Health(COND_RECONCILING, True, "Pending", message),
                Health(COND_STALLED, False, "Pending", "")]
    if state in _TERMINAL:
        terminal = next((c for c in status.conditions if c.type == _TERMINAL[state] and c.status == "True"), None)
        reason = terminal.reason if terminal is not None and terminal.reason else _TERMINAL[state]
        ok = state == State.SUCCEEDED
        return [Health(COND_READY, ok, reason, message), Health(COND_RECONCILING, False, reason, ""),
                Health(COND_STALLED, not ok, reason, "" if ok else message)]
    blocked = next((c for c in status.conditions if c.type == _BLOCKED and c.status == "True"), None)
    if blocked is not None:
        reason, message = blocked.reason, f"{state.value}, blocked: {blocked.message}"
    else:
        reason = _PROGRESS[state]
    return [Health(COND_READY, False, reason, message), Health(COND_RECONCILING, True, reason, message),
            Health(COND_STALLED, False, reason, "")]


def invalid_health(reason: str, message: str) -> list[Health]:
    """A job the operator cannot read never runs: Stalled, for both tools a failure that needs a person."""
    return [Health(COND_READY, False, reason, message), Health(COND_RECONCILING, False, reason, ""),
            Health(COND_STALLED, True, reason, message)]
