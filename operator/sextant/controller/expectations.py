"""What the job controller wrote and has not yet seen come back from the watch (the Kubernetes Job controller's
expectations): its writes' answers are not stored in the view, whose only writer is the informers. Until the view
shows a write, the job is not reconciled again from a view that predates it (it would act twice: a second pod, a
status write at an old resourceVersion), and the slot it holds by that write stays held."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..kube.informer import Key
from ..resources.job import State

# An expectation the watch never met (a write the watch missed, which a relist would have shown) lapses after this
# long, as the Job controller's do (ExpectationsTimeout): the job is then judged by the view as it is.
TIMEOUT = timedelta(minutes=5)


@dataclass
class _Awaited:
    since: datetime
    version: int = 0  # the job's resourceVersion our status write made (0: none awaited)
    state: State | None = None  # the state that write recorded
    pods: set[int] = field(default_factory=set)  # sequences of attempt pods created, not yet seen


class Expectations:
    def __init__(self, now: Callable[[], datetime]) -> None:
        self.now = now
        self._awaited: dict[Key, _Awaited] = {}

    def _of(self, key: Key) -> _Awaited:
        awaited = self._awaited.get(key)
        if awaited is None:
            awaited = self._awaited[key] = _Awaited(self.now())
        return awaited

    # --- what was written -----------------------------------------------------------------------------------
    def wrote_status(self, key: Key, version: int, state: State | None) -> None:
        awaited = self._of(key)
        awaited.version, awaited.state, awaited.since = max(version, awaited.version), state, self.now()

    def created_pod(self, key: Key, sequence: int) -> None:
        awaited = self._of(key)
        awaited.pods.add(sequence)
        awaited.since = self.now()

    # --- what the watch showed ------------------------------------------------------------------------------
    def saw_job(self, key: Key, version: int) -> bool:
        """The watch showed the job at `version`; True when that is the echo of our status write."""
        awaited = self._awaited.get(key)
        if awaited is not None and awaited.version and version >= awaited.version:
            awaited.version, awaited.state = 0, None
            self._drop_met(key, awaited)
            return True
        return False

    def saw_pod(self, key: Key, sequence: int) -> None:
        awaited = self._awaited.get(key)
        if awaited is not None:
            awaited.pods.discard(sequence)
            self._drop_met(key, awaited)

    def forget(self, key: Key) -> None:
        """The job is gone: nothing of it is awaited."""
        self._awaited.pop(key, None)

    def _drop_met(self, key: Key, awaited: _Awaited) -> None:
        if not awaited.version and not awaited.pods:
            del self._awaited[key]

    # --- reading --------------------------------------------------------------------------------------------
    def _pending(self, key: Key) -> _Awaited | None:
        awaited = self._awaited.get(key)
        if awaited is not None and self.now() - awaited.since >= TIMEOUT:
            del self._awaited[key]
            return None
        return awaited

    def satisfied(self, key: Key) -> bool:
        """The view shows everything written for the job: it may be reconciled."""
        return self._pending(key) is None

    def holds(self, key: Key) -> bool:
        """A write not seen yet holds the job's slot: a pod created, or the state running recorded."""
        awaited = self._pending(key)
        return awaited is not None and (bool(awaited.pods) or awaited.state is State.RUNNING)

    def __len__(self) -> int:
        return len(self._awaited)
