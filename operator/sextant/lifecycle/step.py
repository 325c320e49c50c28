"""One reconcile's working state (Step) and the edits it makes to a job's status: conditions, the health conditions
for GitOps tools, the timeline's bounds."""

from __future__ import annotations

from datetime import datetime

from ..resources.common import Condition, format_time
from ..resources.job import JobStatus, State
from .decision import (COND_BLOCKED, COND_CANCELLED, COND_DEAD, COND_SUCCEEDED, Decision, Event, JobSnapshot,
                       Observations, effective_queue)
from .health import health
from .states import CANCELLED, DEAD, QUEUED, SUCCEEDED

# The timeline's bounds, so that a job retried for ever never nears etcd's 1.5 MB object limit: the first attempt
# and the most recent ones (TIMELINE_MAX in all, the rest counted in droppedAttempts), each message at most
# MESSAGE_MAX_BYTES of UTF-8.
TIMELINE_MAX = 20
MESSAGE_MAX_BYTES = 1024
_CUT = " […] "


def set_condition(status: JobStatus, type_: str, value: bool, reason: str, message: str, now: datetime,
                  generation: int) -> None:
    """Sets one condition; lastTransitionTime moves only when the value changes."""
    text = "True" if value else "False"
    for i, cond in enumerate(status.conditions):
        if cond.type == type_:
            if cond.status == text and cond.reason == reason and cond.message == message:
                return
            moved = cond.last_transition_time if cond.status == text else format_time(now, precise=False)
            status.conditions[i] = Condition(type=type_, status=text, reason=reason, message=message,
                                             last_transition_time=moved, observed_generation=generation)
            return
    if not value and reason == "":
        return
    status.conditions.append(Condition(type=type_, status=text, reason=reason, message=message,
                                       last_transition_time=format_time(now, precise=False),
                                       observed_generation=generation))


def keep_transition_times(stored: JobStatus, status: JobStatus) -> None:
    """A condition cleared and set again within one reconcile (an attempt that started and ended at once while its
    queue is missing: Blocked) has not changed: its lastTransitionTime stays the stored one."""
    old = {c.type: c for c in stored.conditions}
    for i, cond in enumerate(status.conditions):
        before = old.get(cond.type)
        if before is not None and before.status == cond.status and before.last_transition_time != cond.last_transition_time:
            status.conditions[i] = cond.model_copy(update={"last_transition_time": before.last_transition_time})


def set_health(status: JobStatus, now: datetime, generation: int) -> None:
    """Ready, Reconciling and Stalled for GitOps tools (lifecycle/health.py), from the rest of the status."""
    for h in health(status):
        set_condition(status, h.type, h.value, h.reason, h.message, now, generation)


def clear_condition(status: JobStatus, type_: str, reason: str, now: datetime, generation: int) -> None:
    if any(c.type == type_ and c.status == "True" for c in status.conditions):
        set_condition(status, type_, False, reason, "", now, generation)


def bound_timeline(status: JobStatus) -> None:
    """Keep the first attempt and the most recent ones, TIMELINE_MAX in all; count the ones left out."""
    extra = len(status.attempts) - TIMELINE_MAX
    if extra > 0:
        del status.attempts[1:1 + extra]
        status.dropped_attempts = (status.dropped_attempts or 0) + extra


def clip(text: str | None, limit: int = MESSAGE_MAX_BYTES) -> str | None:
    """At most `limit` bytes of UTF-8: the start (what failed) and the end (a traceback's last line) of a long text."""
    if text is None:
        return None
    data = text.encode()
    if len(data) <= limit:
        return text
    room = limit - len(_CUT.encode())
    head = data[: room // 4].decode(errors="ignore")
    tail = data[len(data) - (room - len(head.encode())):].decode(errors="ignore")
    return head + _CUT + tail


def waiting_for_a_slot(queue: str) -> str:
    return "runnable, waiting for a slot in queue " + queue


class Step:
    """One reconcile's working state: the status being built, and what it decided."""

    def __init__(self, job: JobSnapshot, obs: Observations, now: datetime) -> None:
        self.job, self.obs, self.now = job, obs, now
        self.queue = effective_queue(obs)
        self.status = job.status.duplicate()
        self.decision = Decision(self.status)

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        self.decision.events.append(Event(reason, message, "Warning" if warning else "Normal"))

    def cond(self, type_: str, value: bool, reason: str, message: str = "") -> None:
        set_condition(self.status, type_, value, reason, message, self.now, self.job.generation)

    def move(self, state: State, reason: str, message: str, warning: bool = False) -> None:
        self.status.state = state
        self.status.message = message
        self.event(reason, message, warning)

    def finish(self, state: State, reason: str, message: str, warning: bool = False) -> None:
        self.move(state, reason, message, warning)
        self.status.finished_at = format_time(self.now)
        self.status.next_attempt_at = None
        clear_condition(self.status, COND_BLOCKED, "Finished", self.now, self.job.generation)
        cond = {SUCCEEDED: COND_SUCCEEDED, DEAD: COND_DEAD, CANCELLED: COND_CANCELLED}.get(state)
        if cond:
            self.cond(cond, True, reason, message)

    def queued(self, since: datetime, reason: str, message: str) -> None:
        self.move(QUEUED, reason, message)
        self.status.queued_at = format_time(since)
        self.status.next_attempt_at = None
