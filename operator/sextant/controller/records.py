"""What the view keeps of each object, as typed records: the informers' transform (client-go's TransformFunc) turns an
object into its record as it arrives, and nothing else writes the view (controller/view.py).

A job is one of two records. `LiveJob`, while the rules still have something to decide: the object without what
they never read (managedFields, a payload over KEPT_PAYLOAD_BYTES, the labels and annotations they do not read).
`FinishedJob`, once it finished and its spec was acted upon ("settled"): the few fields retention, counting,
idempotency and its schedule read, so that 100k finished jobs cost the operator a few tens of MB. Whoever needs
more of a finished job (a status write, the HTTP API) reads it from the API server.
"""

from __future__ import annotations

import json
import math
import struct
import sys
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from ..kube.informer import Key, trim
from ..lifecycle import workers as W
from ..lifecycle.reading import lean_job
from ..lifecycle.states import FINISHED
from ..lifecycle.transitions import pod_name
from ..resources import API_VERSION, contract
from ..resources.common import time_or_none
from ..resources.contract import LABEL_JOB, sequence_label
from ..resources.job import State, sequence_of, written_status
from ..resources.report import Progress
from ..resources.worker import Assignment

# The only labels and annotations of a job the operator reads: a schedule's jobs carry its name and their tick. The
# rest (a user may put megabytes there) is left out of the view.
KEPT_LABELS = frozenset({contract.LABEL_SCHEDULE})
KEPT_ANNOTATIONS = frozenset({contract.ANNOTATION_SCHEDULED_AT})


def version_of(obj: dict[str, Any]) -> int:
    """An object's resourceVersion as a number (an etcd revision; 0 when it has none)."""
    value = obj["metadata"].get("resourceVersion", "")
    return int(value) if isinstance(value, str) and value.isdigit() else 0


def state_of(raw: dict[str, Any] | None) -> State | None:
    value = written_status((raw or {}).get("status")).get("state")
    try:
        return State(value) if value else None
    except ValueError:
        return None


def _epoch(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def _moment(epoch: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, timezone.utc) if epoch is not None else None


@dataclass(slots=True, eq=False)
class LiveJob:
    """A job the rules still decide on: `raw` is what read_job reads (see the module docstring)."""

    raw: dict[str, Any]
    payload_bytes: int | None  # the size of the payload left out of raw (None: raw has it, or an empty one)
    whole: bool  # nothing but managedFields was left out: the HTTP API may show raw as the job
    seen: int  # the order jobs were first seen in (their creation order, from the watch): ties in a queue's line
    uid: str
    version: int
    state: State | None
    queue: str
    handler: str
    sequence: int
    idempotency_key: str | None
    schedule: str | None
    duplicate_of: str | None

    @property
    def resource_version(self) -> str:
        return self.raw["metadata"].get("resourceVersion", "")

    @property
    def created_at(self) -> datetime | None:
        return time_or_none(self.raw["metadata"].get("creationTimestamp"))

    @property
    def status(self) -> dict[str, Any]:
        status = self.raw.get("status")
        return status if isinstance(status, dict) else {}

    @property
    def finished_at(self) -> datetime | None:
        return time_or_none(self.status.get("finishedAt"))

    @property
    def unfinished(self) -> bool:
        return self.state not in FINISHED


# A finished job's fixed fields, packed: uid (16 bytes), resourceVersion, finish time (epoch seconds; NaN: none),
# sequence, queue (its number in _QUEUES) and state (its number in _STATES). 39 bytes make a 72-byte object.
_FIXED = struct.Struct("<16sQdIHB")
_NONE = float("nan")
_STATES = tuple(State)
_STATE_NUMBER = {state: n for n, state in enumerate(_STATES)}
# Every queue name a finished job has named, numbered: a job keeps 2 bytes, not a pointer to its string. Grows
# with the distinct queue names seen (a few, to thousands), never per job; past 65,535 the name goes in the tail.
_QUEUES: list[str] = []
_QUEUE_NUMBER: dict[str, int] = {}
_QUEUE_IN_TAIL = 0xFFFF
_SEQUENCE_MAX = 0xFFFFFFFF  # this or more (or less than 0): the sequence is in the tail
_VERSION_IN_TAIL = 2**64 - 1


def _queue_number(queue: str) -> int:
    number = _QUEUE_NUMBER.get(queue)
    if number is None and len(_QUEUES) < _QUEUE_IN_TAIL:
        number = _QUEUE_NUMBER[queue] = len(_QUEUES)
        _QUEUES.append(sys.intern(queue))
    return _QUEUE_IN_TAIL if number is None else number


class FinishedJob(bytes):
    """A settled job: what retention, counting, idempotency and its schedule read of it, and nothing else, packed
    into one bytes object (no per-field objects, no GC header: 72 bytes for a typical job, not ~300 for a slotted
    record of its fields). What few jobs have (an idempotency key, a schedule and its tick, being a duplicate, a uid
    that is no UUID, a huge sequence) and what only those read (the creation time) is a JSON tail after the fixed
    fields, absent for the others. Compared by identity, as the records it replaced."""

    __slots__ = ()
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__

    unfinished = False

    @classmethod
    def pack(cls, uid: str, version: int, state: State, queue: str, sequence: int, finished: float | None,
             rare: tuple[str | None, str | None, str | None, str | None, float | None] = (None,) * 5) -> FinishedJob:
        """rare: (idempotency key, schedule, its tick, duplicateOf, creation as epoch seconds)."""
        try:
            parsed = uuid.UUID(uid)
            packed_uid = parsed.bytes if str(parsed) == uid else None  # only what reads back the same
        except ValueError:
            packed_uid = None
        number = _queue_number(queue)
        tail: dict[str, Any] = {}
        if packed_uid is None:
            tail["u"] = uid
        if number == _QUEUE_IN_TAIL:
            tail["q"] = queue
        if not 0 <= sequence < _SEQUENCE_MAX:
            tail["s"] = sequence
        if not 0 <= version < _VERSION_IN_TAIL:
            tail["v"] = version
        if any(field is not None for field in rare[:4]):
            tail["r"] = rare
        fixed = _FIXED.pack(packed_uid or bytes(16), version if "v" not in tail else _VERSION_IN_TAIL,
                            _NONE if finished is None else finished, sequence if "s" not in tail else _SEQUENCE_MAX,
                            number, _STATE_NUMBER[state])
        return cls(fixed + json.dumps(tail, separators=(",", ":")).encode() if tail else fixed)

    def _fields(self) -> tuple[bytes, int, float, int, int, int]:
        return _FIXED.unpack_from(self)

    def _tail(self) -> dict[str, Any]:
        return json.loads(self[_FIXED.size:]) if len(self) > _FIXED.size else {}

    def _rare(self, n: int) -> Any:
        rare = self._tail().get("r") if len(self) > _FIXED.size else None
        return rare[n] if rare else None

    @property
    def uid(self) -> str:
        if len(self) > _FIXED.size and "u" in (tail := self._tail()):
            return tail["u"]
        return str(uuid.UUID(bytes=bytes(self[:16])))

    @property
    def version(self) -> int:
        version = self._fields()[1]
        return self._tail()["v"] if version == _VERSION_IN_TAIL else version

    @property
    def resource_version(self) -> str:
        version = self.version
        return str(version) if version else ""

    @property
    def state(self) -> State:
        return _STATES[self[_FIXED.size - 1]]

    @property
    def queue(self) -> str:
        number = self._fields()[4]
        return self._tail()["q"] if number == _QUEUE_IN_TAIL else _QUEUES[number]

    @property
    def sequence(self) -> int:
        sequence = self._fields()[3]
        return self._tail()["s"] if sequence == _SEQUENCE_MAX else sequence

    @property
    def finished_at(self) -> datetime | None:
        finished = self._fields()[2]
        return None if math.isnan(finished) else _moment(finished)

    @property
    def idempotency_key(self) -> str | None:
        return self._rare(0)

    @property
    def schedule(self) -> str | None:
        schedule = self._rare(1)
        return sys.intern(schedule) if schedule is not None else None

    @property
    def tick(self) -> str | None:
        return self._rare(2)

    @property
    def duplicate_of(self) -> str | None:
        return self._rare(3)

    @property
    def created_at(self) -> datetime | None:
        return _moment(self._rare(4))

    def __repr__(self) -> str:
        return (f"FinishedJob(uid={self.uid!r}, version={self.version}, state={self.state}, queue={self.queue!r}, "
                f"sequence={self.sequence}, finished_at={self.finished_at})")

    __str__ = __repr__  # not bytes' own


JobRecord = LiveJob | FinishedJob


def settled(raw: dict[str, Any]) -> bool:
    """Finished, and its spec already acted upon: only retention and counting read it until the next change."""
    status = raw.get("status") or {}
    return state_of(raw) in FINISHED and status.get("observedGeneration") == raw["metadata"].get("generation")


def job_record(raw: dict[str, Any], previous: JobRecord | None, seen: int) -> JobRecord:
    """The transform: a job object as it arrives → its record. `previous` lends its payload verdict (measured once
    per generation, not on each watch event) and its order of first sight."""
    raw = trim(raw)
    return finished_record(raw) if settled(raw) else live_record(raw, previous, seen)


def _labelled(raw: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """A job's idempotency key, schedule and duplicateOf, when they are strings."""
    idem = (raw.get("spec") or {}).get("idempotencyKey")
    schedule = (raw["metadata"].get("labels") or {}).get(contract.LABEL_SCHEDULE)
    duplicate = (raw.get("status") or {}).get("duplicateOf")
    return (idem if isinstance(idem, str) and idem else None, sys.intern(schedule) if isinstance(schedule, str) else None,
            duplicate if isinstance(duplicate, str) else None)


def _queue(spec: dict[str, Any], field: str) -> str:
    value = spec.get(field, "")
    return sys.intern(value) if isinstance(value, str) else ""


def finished_record(raw: dict[str, Any]) -> FinishedJob:
    """A settled job's record."""
    meta, status = raw["metadata"], raw.get("status") or {}
    idem, schedule, duplicate = _labelled(raw)
    tick = (meta.get("annotations") or {}).get(contract.ANNOTATION_SCHEDULED_AT)
    rare = (idem, schedule, tick, duplicate, _epoch(time_or_none(meta.get("creationTimestamp")))) \
        if idem or schedule or tick or duplicate else (None, None, None, None, None)
    state = state_of(raw)
    assert state is not None
    uid = meta.get("uid", "")
    return FinishedJob.pack(uid if isinstance(uid, str) else "", version_of(raw), state,
                            _queue(raw.get("spec") or {}, "queue"), sequence_of(status),
                            _epoch(time_or_none(status.get("finishedAt"))), rare)


def live_record(raw: dict[str, Any], previous: JobRecord | None, seen: int) -> LiveJob:
    """The record of a job the rules still decide on (or of one read whole to act on it: controller/jobs.py)."""
    raw = trim(raw)
    meta = raw["metadata"]
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    kept_labels = {k: v for k, v in labels.items() if k in KEPT_LABELS}
    kept_notes = {k: v for k, v in notes.items() if k in KEPT_ANNOTATIONS}
    whole = len(kept_labels) == len(labels) and len(kept_notes) == len(notes)
    if not whole:
        raw = {**raw, "metadata": {**meta, "labels": kept_labels, "annotations": kept_notes}}
    before = (previous.raw, previous.payload_bytes) if isinstance(previous, LiveJob) else None
    raw, left_out = lean_job(raw, before)
    spec, status = raw.get("spec") or {}, raw.get("status") or {}
    idem, schedule, duplicate = _labelled(raw)
    return LiveJob(
        raw, left_out, whole and left_out is None, previous.seen if isinstance(previous, LiveJob) else seen,
        meta.get("uid", ""), version_of(raw), state_of(raw), _queue(spec, "queue"), _queue(spec, "handler"),
        sequence_of(status), idem, schedule, duplicate)


def event_object(key: Key, record: JobRecord) -> dict[str, Any]:
    """The job as an Event's involved object."""
    return {"apiVersion": API_VERSION, "kind": "Job",
            "metadata": {"namespace": key[0], "name": key[1], "uid": record.uid,
                         "resourceVersion": record.resource_version}}


@dataclass(frozen=True)
class Placed:
    """An assignment in a Worker's status, indexed by its job: which worker (and which object of that name) has it."""

    worker: str
    worker_uid: str
    assignment: Assignment
    # When the operator first saw it in the Worker's status (durable): its attempt runs from then at the earliest, so
    # the first second of controller/writes.RECORD_RUNNING_AFTER counts from here, not from the decision to assign
    # (under load a status write takes longer than that second to land).
    landed_at: datetime | None = None


@dataclass(frozen=True)
class WorkerChange:
    """A Worker object as it was and is now in the view (before None: new; after None: deleted)."""

    key: Key
    before: W.Believed | None
    after: W.Believed | None


@dataclass(frozen=True)
class LeaseObservation:
    """An attempt's Lease as the runner writes it: what it says, and whose it claims to be."""

    renewed_at: datetime  # its renewTime, but never later than when the operator saw it
    pod_uid: str | None  # the uid of the Pod its ownerReference names
    progress: Progress | None = None  # its handler's latest, as the runner annotated it


def lease_progress(lease: dict[str, Any]) -> Progress | None:
    """The progress annotation of an attempt's Lease; None when absent or unreadable (never an error)."""
    text = ((lease["metadata"].get("annotations") or {}).get(contract.ANNOTATION_PROGRESS))
    if not isinstance(text, str) or len(text) > 4096:
        return None
    try:
        return Progress.model_validate(json.loads(text))
    except (ValueError, ValidationError):
        return None


def attempt_of(obj: dict[str, Any]) -> tuple[str, int] | None:
    """(job name, sequence) of an attempt's pod or Lease, when its name is the one the operator gives that attempt.

    Labels alone prove nothing (anyone may label a pod sextant.dev/job=X): an object named otherwise is not an
    attempt, whatever it says. Whose it really is, the ownerReferences tell (compared when the job is read).
    """
    meta = obj["metadata"]
    labels = meta.get("labels") or {}
    job, sequence = labels.get(LABEL_JOB), sequence_label(labels)
    if not job or sequence is None or meta.get("name") != pod_name(job, sequence):
        return None
    return job, sequence
