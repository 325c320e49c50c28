"""Every version of some Sextant objects, from one watch opened before the test acts: what the API server stored and
in which order (not what a process says it did). For counting a Job's writes and replaying Worker statuses."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch

from tests.harness import wait_for

GROUP, VERSION = "sextant.dev", "v1alpha1"


@dataclass(frozen=True)
class Version:
    at: float  # monotonic, when the watch delivered it
    kind: str  # ADDED | MODIFIED | DELETED
    obj: dict[str, Any]

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]

    @property
    def status(self) -> dict[str, Any]:
        return self.obj.get("status") or {}


@dataclass
class Versions:
    """A watch of one plural (optionally one object by name) in a namespace, from before the test's first step."""

    kubeconfig: Path
    namespace: str
    plural: str
    name: str | None = None
    seen: list[Version] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _ready: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> Versions:
        self._api = k8s_client.CustomObjectsApi(k8s_config.new_client_from_config(str(self.kubeconfig)))
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(30), f"the {self.plural} watch did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def _args(self) -> dict[str, Any]:
        return {"field_selector": f"metadata.name={self.name}"} if self.name else {}

    def _run(self) -> None:
        call = self._api.list_namespaced_custom_object
        args = (GROUP, VERSION, self.namespace, self.plural)
        listed = call(*args, **self._args())
        with self._lock:
            self.seen.extend(Version(time.monotonic(), "ADDED", obj) for obj in listed["items"])
        version = listed["metadata"]["resourceVersion"]
        self._ready.set()
        while not self._stop.is_set():
            try:
                for event in k8s_watch.Watch().stream(call, *args, resource_version=version, timeout_seconds=5,
                                                      allow_watch_bookmarks=False, **self._args()):
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    with self._lock:
                        self.seen.append(Version(time.monotonic(), event["type"], obj))
                    if self._stop.is_set():
                        return
            except Exception:  # noqa: BLE001 - a dropped watch resumes from the last version seen
                self._stop.wait(0.2)

    def versions(self, name: str | None = None) -> list[Version]:
        with self._lock:
            return [v for v in self.seen if name is None or v.name == name]

    def wait_seen(self, name: str, state: str, timeout: float = 30) -> None:
        """Until this watch has delivered the object in `state`: a GET can show a write before its event arrives,
        and a count of writes taken then would miss it."""
        wait_for(lambda: any(v.status.get("state") == state for v in self.versions(name)), timeout,
                 message=f"the watch to deliver {name} {state}")

    def writes(self, name: str) -> int:
        """How many times the object was written (created included), deletion apart: its distinct versions."""
        return len({v.obj["metadata"]["resourceVersion"] for v in self.versions(name) if v.kind != "DELETED"})

    def replay(self) -> list[dict[str, Version]]:
        """After each event: every object as it then was."""
        current: dict[str, Version] = {}
        out = []
        for v in self.versions():
            if v.kind == "DELETED":
                current.pop(v.name, None)
            else:
                current[v.name] = v
            out.append(dict(current))
        return out


def live_assignments(worker: dict[str, Any]) -> list[dict[str, Any]]:
    """The assignments a Worker may be running: for its current incarnation, while the operator believes it live
    (an expired worker's assignments stay listed until their LeaseExpired is recorded; it runs none of them)."""
    st, spec = worker.get("status") or {}, worker.get("spec") or {}
    if st.get("state") == "expired" or worker["metadata"].get("deletionTimestamp"):
        return []
    return [a for a in st.get("assignments") or [] if a.get("incarnation") == spec.get("incarnation")]


def most_at_once(workers: Versions) -> tuple[dict[str, int], dict[str, int]]:
    """The most live assignments at one moment, per job uid and per worker, over every Worker version seen."""
    per_job: dict[str, int] = defaultdict(int)
    per_worker: dict[str, int] = defaultdict(int)
    for moment in workers.replay():
        jobs: dict[str, int] = defaultdict(int)
        for name, v in moment.items():
            live = live_assignments(v.obj)
            per_worker[name] = max(per_worker[name], len(live))
            for a in live:
                jobs[a["uid"]] += 1
        for uid, n in jobs.items():
            per_job[uid] = max(per_job[uid], n)
    return dict(per_job), dict(per_worker)


def most_in_total(workers: Versions) -> int:
    """The most live assignments over all workers at one moment."""
    return max((sum(len(live_assignments(v.obj)) for v in moment.values()) for moment in workers.replay()), default=0)
