"""kopf as the operator's runtime (docs/operator.md): it runs the process with the operator's own credentials and
watches nothing; every kind is watched once, by the operator's informers, and kopf writes nothing to Sextant's
objects: no annotations, no finalizers, no Events."""

from __future__ import annotations

import json
import signal
import time

import httpx

from sextant.kube import kubeconfig
from tests.harness import wait_for
from tests.harness.faultproxy import FaultProxy

from .support import Operator, apply, get_json, handler, job, proxied_kubeconfig, queue, wait_state

LOW_RATE = ("queues", "handlers", "schedules")


def schedule(name: str, **spec) -> dict:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Schedule", "metadata": {"name": name},
            "spec": {"jobTemplate": {"queue": "q", "handler": "h"}, **spec}}


def test_kopf_watches_nothing_each_kind_is_watched_once_and_kopf_writes_nothing(cluster, namespace, crds, tmp_path):
    """Through a calm proxy that notes who asks for what: kopf (its User-Agent says kopf/) asks for API discovery
    only; Queue, Handler and Schedule are listed and watched by the operator's informers alone, which carry them."""
    with FaultProxy(kubeconfig.load(str(cluster.kubeconfig)), lifetime=300) as proxy:
        proxy.faulty = False
        operator = Operator(proxied_kubeconfig(cluster, proxy.url, tmp_path / "kubeconfig"), namespace, tmp_path)
        operator.start()
        try:
            apply(cluster, namespace, queue("q", backoff={"policy": "fixed", "initial": "200ms"}), handler("h"),
                  schedule("tick", interval="2s"), job("job-k"))
            wait_state(cluster, namespace, "job-k", "succeeded")
            wait_for(lambda: (get_json(cluster, namespace, "schedules.sextant.dev/tick").get("status") or {})
                     .get("lastScheduleTime"), 30, message="the schedule to fire")
            seen = dict(proxy.seen)
        finally:
            operator.stop()

    kopfs = {path for (agent, path, _), n in seen.items() if agent.startswith("kopf/")}
    assert kopfs, "kopf asked for nothing: is it still what runs the process?"
    assert all(path == "/version" or path == "/api" or path.startswith(("/api/v1", "/apis")) for path in kopfs)
    assert not [path for path in kopfs if "/namespaces/" in path or path.rsplit("/", 1)[1] in LOW_RATE], kopfs
    for plural in LOW_RATE:
        watchers = {agent for (agent, path, watch) in seen if watch and path.endswith(f"/{plural}")}
        assert watchers == {"sextant-operator"}, (plural, watchers)

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
