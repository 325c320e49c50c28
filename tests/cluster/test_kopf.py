"""kopf as the operator's runtime (docs/operator.md): by default it watches Queues, Handlers and Schedules with the
operator's own credentials and namespace scope, and writes nothing to them: no annotations, no finalizers, no
Events. With --no-kopf-watches it runs the process and watches nothing."""

from __future__ import annotations

import json
import signal
import time

import httpx

from tests.harness import wait_for

from .support import Operator, apply, get_json, handler, job, queue, wait_state


def schedule(name: str, **spec) -> dict:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Schedule", "metadata": {"name": name},
            "spec": {"jobTemplate": {"queue": "q", "handler": "h"}, **spec}}


def kopf_events(op, kind: str) -> float:
    text = httpx.get(f"{op.http_url}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("sextant_kopf_events_total") and f'kind="{kind}"' in line)


def test_by_default_kopf_feeds_the_low_rate_kinds_and_writes_nothing_to_them(cluster, namespace, operator):
    handled_and_untouched(cluster, namespace, operator)


def handled_and_untouched(cluster, namespace, operator) -> None:
    apply(cluster, namespace, queue("q", backoff={"policy": "fixed", "initial": "200ms"}), handler("h"),
          schedule("tick", interval="2s"), job("job-k"))
    wait_state(cluster, namespace, "job-k", "succeeded")
    wait_for(lambda: (get_json(cluster, namespace, "schedules.sextant.dev/tick").get("status") or {})
             .get("lastScheduleTime"), 30, message="the schedule to fire")
    # kopf's own watches (its login and namespace scope) saw every kind; its handlers feed the controllers.
    for kind in ("queues", "handlers", "schedules"):
        wait_for(lambda: kopf_events(operator, kind) >= 1, 30, message=f"kopf to see the {kind}")

    for what in ("queues.sextant.dev/q", "handlers.sextant.dev/h", "schedules.sextant.dev/tick"):
        meta = get_json(cluster, namespace, what)["metadata"]
        assert not meta.get("finalizers"), (what, meta.get("finalizers"))
        kopfish = [k for k in (meta.get("annotations") or {}) if "kopf" in k]
        assert not kopfish, (what, kopfish)
    events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
    components = {(e.get("source") or {}).get("component") or e.get("reportingComponent") for e in events}
    assert not {c for c in components if c and "kopf" in c}, components
    # No kopf peering objects either (standalone): the cluster has no kopf CRDs to hold them.
    crds = cluster.kubectl("get", "crd", "-o", "name").stdout
    assert "kopf" not in crds


def test_sigterm_stops_the_kopf_operator_promptly_and_cleanly(cluster, namespace, operator):
    apply(cluster, namespace, queue("q"), handler("h"))
    wait_for(lambda: httpx.get(f"{operator.http_url}/readyz", timeout=2).status_code == 200, 30,
             message="the operator to be ready")
    started = time.monotonic()
    operator.proc.send_signal(signal.SIGTERM)
    code = operator.proc.wait(15)
    took = time.monotonic() - started
    assert code == 0, operator.log_tail()
    assert took < 10, took
    assert "stopped" in operator.log_tail(20)


def test_with_no_kopf_watches_kopf_runs_the_process_and_watches_nothing(cluster, namespace, crds, tmp_path):
    operator = Operator(cluster.kubeconfig, namespace, tmp_path, "--no-kopf-watches")
    operator.start()
    try:
        apply(cluster, namespace, queue("q", backoff={"policy": "fixed", "initial": "200ms"}), handler("h"),
              job("job-n"))
        wait_state(cluster, namespace, "job-n", "succeeded")  # the informers alone carry the low-rate kinds
        for what in ("queues.sextant.dev/q", "handlers.sextant.dev/h"):
            meta = get_json(cluster, namespace, what)["metadata"]
            assert not meta.get("finalizers") and not [k for k in (meta.get("annotations") or {}) if "kopf" in k]
        assert all(kopf_events(operator, kind) == 0 for kind in ("queues", "handlers", "schedules"))
    finally:
        operator.stop()
