"""One low-rate kind (Queue, Handler, Schedule) seen through two watches, each version applied once.

The lean informer of the kind and kopf's `on.event` handler (kopfapp.py) both watch it. The informer is kept
because its first list is the admission gate's "every Queue and Handler is known" signal, which kopf gives no
code outside its handlers (docs/operator.md); kopf's handler is the kopf side of the operator. Both hand their
changes to one `Feed`, which passes a change to the controller's callback only when it is newer than what was
last applied for that object, whichever watch brought it first:

- an upsert is applied when its resourceVersion is above the last applied one (or either is unknown);
- a delete is applied when the object is present and the delete is not older than it (a delete of an earlier
  incarnation, arriving late from the slower watch, does not remove the object created again since);
- a change whose callback raises is not recorded, so the other watch's copy of it is tried again, and the
  informer's per-object isolation (log, count, Warning Event, retry with backoff) applies as before.

resourceVersions are compared as integers (as the schedule controller does); one that is not an integer is
"unknown" and never blocks a change.

It also keeps the health of kopf's watches of the kind (one per watched namespace, or one cluster-wide), for
readiness: a kopf watch is not live from its start, or from a failure (which kopfapp.py contains and turns into a
fresh list), until its list is in.
"""

from __future__ import annotations

import copy
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ..kube import metrics
from ..kube.informer import Key, OnChange, key_of, trim

log = logging.getLogger(__name__)

TOMBSTONE_SECONDS = 600.0  # how long a delete is remembered: far longer than the two watches drift apart


def version(obj: dict[str, Any]) -> int | None:
    meta = obj.get("metadata")
    raw = meta.get("resourceVersion") if isinstance(meta, dict) else None
    try:
        return int(raw) if isinstance(raw, str) else None
    except ValueError:
        return None


class Feed:
    def __init__(self, name: str, on_change: OnChange, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.on_change = on_change
        self.clock = clock
        self._applied: dict[Key, tuple[int | None, bool]] = {}  # key → (resourceVersion, deleted)
        self._tombstones: deque[tuple[float, Key]] = deque()
        self._deleted_at: dict[Key, float] = {}
        self.applied = {"informer": 0, "kopf": 0}  # changes each watch brought first (tests, docs)
        self.skipped = 0
        self._kopf: dict[str | None, str | None] = {}  # kopf's watch per namespace (None: cluster-wide) → why not live

    # --- kopf's watches of the kind -------------------------------------------------------------------------
    def kopf_started(self, namespace: str | None) -> None:
        """kopf started a watch of the kind (in a namespace; None: cluster-wide): not live until it has listed.
        Only started watches count: one kopf never starts (its CRD was unknown to kopf's discovery at start-up)
        does not hold readiness down for ever; the informer carries the kind."""
        self._kopf.setdefault(namespace, "its first list is not in")

    def kopf_listed(self, namespace: str | None) -> None:
        self._kopf[namespace] = None

    def kopf_failed(self, namespace: str | None, why: str) -> None:
        self._kopf[namespace] = why

    @property
    def healthy(self) -> bool:
        """Every kopf watch of the kind is live (true when kopf watches none). The informer's health is its own."""
        return all(why is None for why in self._kopf.values())

    def unhealthy(self) -> dict[str | None, str]:
        """kopf's watches of the kind that are not live, and why (for logs and tests)."""
        return {ns: why for ns, why in self._kopf.items() if why is not None}

    def __call__(self, kind: str, obj: dict[str, Any]) -> None:
        """The informer's callback: raises when the controller's callback does (the informer isolates it)."""
        self.deliver(kind, obj, "informer")

    def deliver(self, kind: str, obj: dict[str, Any], source: str) -> bool:
        """Apply one change if it is new; True when it was applied."""
        key = key_of(obj)
        rv = version(obj)
        if not self.fresh(kind, key, rv):
            self.skipped += 1
            return False
        self.on_change(kind, obj)
        self._record(kind, key, rv)
        self.applied[source] = self.applied.get(source, 0) + 1
        return True

    def from_kopf(self, event_type: str | None, raw: dict[str, Any]) -> None:
        """kopf's raw watch event (type None: from its initial list). Never raises: one object must not stop
        kopf's watch; a failure is left to the informer, which brings the same version, reports and retries it."""
        metrics.KOPF_EVENTS.labels(self.name).inc()
        try:
            obj = trim(copy.deepcopy(raw))  # kopf keeps its own body; the controllers keep and amend theirs
            self.deliver("delete" if event_type == "DELETED" else "upsert", obj, "kopf")
        except Exception as exc:  # noqa: BLE001 - per-object isolation, as in the informer
            meta = raw.get("metadata") if isinstance(raw, dict) else None
            where = f"{meta.get('namespace')}/{meta.get('name')}" if isinstance(meta, dict) else "?"
            log.debug("%s %s: kopf's copy not taken in (%s); the informer reports and retries it", self.name,
                      where, exc)

    def fresh(self, kind: str, key: Key, rv: int | None) -> bool:
        previous = self._applied.get(key)
        if previous is None:
            return True
        last, deleted = previous
        if kind == "delete":
            return not deleted and (rv is None or last is None or rv >= last)
        return rv is None or last is None or rv > last

    def _record(self, kind: str, key: Key, rv: int | None) -> None:
        if kind != "delete":
            self._applied[key] = (rv, False)
            return
        # A delete without a version (the informer's relist found the object gone) lets any later upsert in.
        self._applied[key] = (rv, True)
        now = self.clock()
        self._deleted_at[key] = now
        self._tombstones.append((now, key))
        while self._tombstones and now - self._tombstones[0][0] > TOMBSTONE_SECONDS:
            at, old = self._tombstones.popleft()
            if self._deleted_at.get(old) == at:  # not deleted again since
                del self._deleted_at[old]
                if self._applied.get(old, (None, False))[1]:
                    del self._applied[old]

    def __len__(self) -> int:
        return len(self._applied)

