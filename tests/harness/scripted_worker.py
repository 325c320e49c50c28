"""A worker made of API calls only: protocol v2 (docs/workers.md) as a worker in any language speaks it, so the
cluster tests can drive the operator's side of the protocol step by step, and misbehave on purpose.

It creates its Worker object with the finalizer and its label, renews it with ONE JSON-patch request (a `test` of
its incarnation, then a `replace` of the whole spec), reads its assignments from status.assignments and reports
results in spec.results, dropping each once its assignment has left status. A test decides when (and whether) it
renews and what it reports; `raw_spec` lets a test write a spec no honest worker would.
"""

from __future__ import annotations

import secrets
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

GROUP, VERSION, PLURAL = "sextant.dev", "v1alpha1", "workers"
FINALIZER = "sextant.dev/attempts"
LABEL = "sextant.dev/worker"
JSON_PATCH = "application/json-patch+json"


def micro(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_text() -> str:
    return micro(datetime.now(timezone.utc))


def new_incarnation() -> str:
    return secrets.token_hex(6)


class TakenOver(Exception):
    """The write's `test` of the incarnation failed (422): another process holds the name now."""


class ScriptedWorker:
    """One worker process, as API calls. Thread-safe: the renewal thread and the test share one write lock, so at
    most one spec write is in flight (as the protocol asks)."""

    def __init__(self, kubeconfig: Path, namespace: str, name: str, *, queues: tuple[str, ...] = ("q",),
                 handlers: tuple[str, ...] = ("h",), slots: int = 1, lease_seconds: int = 3,
                 incarnation: str | None = None) -> None:
        api = k8s_config.new_client_from_config(str(kubeconfig))
        self.objects = k8s_client.CustomObjectsApi(api)
        self.namespace, self.name = namespace, name
        self.incarnation = incarnation or new_incarnation()
        self.queues, self.handlers, self.slots, self.lease_seconds = list(queues), list(handlers), slots, lease_seconds
        self.results: list[dict[str, Any]] = []
        self.extra: dict[str, Any] = {}  # fields a test puts into every spec it writes (renewTime in year 3000...)
        self.skew = timedelta(0)  # its clock's error: renewTime (a new one each write, so each is a new generation)
        self.draining = False
        self.writes = 0
        self.refused: list[ApiException] = []  # renewals the API server refused (the thread keeps going)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the spec -------------------------------------------------------------------------------------------
    def spec(self) -> dict[str, Any]:
        return {"incarnation": self.incarnation, "queues": self.queues, "handlers": self.handlers,
                "slots": self.slots, "leaseDurationSeconds": self.lease_seconds, "draining": self.draining,
                "renewTime": micro(datetime.now(timezone.utc) + self.skew), "results": list(self.results), **self.extra}

    def body(self) -> dict[str, Any]:
        return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Worker",
                "metadata": {"name": self.name, "labels": {LABEL: self.name}, "finalizers": [FINALIZER]},
                "spec": self.spec()}

    def register(self) -> dict[str, Any]:
        """Create the object; if one of that name exists (a predecessor under the same name), take it over with a
        write that tests the incarnation it read."""
        try:
            return self.objects.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.body())
        except ApiException as exc:
            if exc.status != 409:
                raise
        seen = self.read()
        return self._patch([{"op": "test", "path": "/spec/incarnation", "value": seen["spec"]["incarnation"]},
                            {"op": "replace", "path": "/spec", "value": self.spec()}])

    def renew(self) -> dict[str, Any]:
        """One write: renewal plus every result ready, less those whose assignments have left status (recorded).
        A real worker knows its status from its watch; this one reads it first."""
        with self._lock:
            self._drop_recorded(self.read())
            return self._patch([{"op": "test", "path": "/spec/incarnation", "value": self.incarnation},
                                {"op": "replace", "path": "/spec", "value": self.spec()}])

    def raw_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Write `spec` as given (merged over the honest one), still as the protocol's one JSON patch."""
        with self._lock:
            return self._patch([{"op": "test", "path": "/spec/incarnation", "value": self.incarnation},
                                {"op": "replace", "path": "/spec", "value": {**self.spec(), **spec}}])

    def _patch(self, ops: list[dict[str, Any]]) -> dict[str, Any]:
        try:
            obj = self.objects.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name, ops,
                                                              _content_type=JSON_PATCH)
        except ApiException as exc:
            # A failed `test` is a bare 422 (no field named): the object names another incarnation now.
            if exc.status == 422 and self.read()["spec"].get("incarnation") != self.incarnation:
                raise TakenOver(exc.body) from exc
            raise
        self.writes += 1
        return obj

    def _drop_recorded(self, obj: dict[str, Any]) -> None:
        assigned = {(a["uid"], a["sequence"]) for a in (obj.get("status") or {}).get("assignments", [])}
        self.results = [r for r in self.results if (r["uid"], r["sequence"]) in assigned]

    # --- renewing in the background -------------------------------------------------------------------------
    def start(self, every: float | None = None) -> ScriptedWorker:
        """Register and renew every leaseDuration/3 (or `every` seconds) until stop_renewing()."""
        self.register()
        self._stop.clear()
        period = every if every is not None else self.lease_seconds / 3
        self._thread = threading.Thread(target=self._loop, args=(period,), daemon=True)
        self._thread.start()
        return self

    def _loop(self, period: float) -> None:
        while not self._stop.wait(period):
            try:
                self.renew()
            except ApiException as exc:  # a refused renewal is the test's business; the worker goes on
                self.refused.append(exc)
            except Exception:  # noqa: BLE001 - a missed renewal is what the lease is for
                pass

    def stop_renewing(self) -> None:
        """As the operator sees a SIGKILL: no more writes."""
        self._stop.set()
        if self._thread:
            self._thread.join(10)
            self._thread = None

    # --- reading --------------------------------------------------------------------------------------------
    def read(self) -> dict[str, Any]:
        return self.objects.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)

    def status(self) -> dict[str, Any]:
        try:
            return self.read().get("status") or {}
        except ApiException as exc:
            if exc.status == 404:
                return {}
            raise

    def assignments(self, *, mine: bool = True) -> list[dict[str, Any]]:
        """status.assignments (only those for this incarnation unless mine=False)."""
        found = self.status().get("assignments") or []
        return [a for a in found if not mine or a.get("incarnation") == self.incarnation]

    def assignment(self, job: str) -> dict[str, Any] | None:
        return next((a for a in self.assignments() if a["job"] == job), None)

    # --- results --------------------------------------------------------------------------------------------
    def result(self, assignment: dict[str, Any], exit_code: int | None = 0, *, reason: str | None = None,
               message: str | None = None, started_at: str | None = None,
               finished_at: str | None = None, **override: Any) -> dict[str, Any]:
        entry: dict[str, Any] = {"job": assignment["job"], "uid": assignment["uid"],
                                 "sequence": assignment["sequence"], "incarnation": self.incarnation,
                                 "startedAt": started_at or assignment.get("assignedAt") or now_text(),
                                 "finishedAt": finished_at or now_text()}
        if exit_code is not None:
            entry["exitCode"] = exit_code
        if reason is not None:
            entry["reason"] = reason
        if message is not None:
            entry["message"] = message
        entry.update(override)
        return entry

    def report(self, assignment: dict[str, Any], exit_code: int | None = 0, **kw: Any) -> dict[str, Any]:
        """Put the attempt's result in spec.results and write it now."""
        entry = self.result(assignment, exit_code, **kw)
        with self._lock:
            self.results.append(entry)
        return self.renew()

    def delete(self) -> None:
        self.objects.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)
