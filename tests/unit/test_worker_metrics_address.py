"""A worker's metrics (plain HTTP, no authentication) listen on loopback unless an address is asked for (issue 28,
Low: network): `sextant worker --metrics-port` alone serves this host only; the chart, whose metricsPort opens the
port to Prometheus in the worker's NetworkPolicy, asks for every address (tests/cluster/test_helm.py)."""

from __future__ import annotations

from sextant.cli.main import build_parser
from sextant.worker import metrics


def test_worker_metrics_listen_on_loopback_by_default(monkeypatch):
    args = build_parser().parse_args(["worker", "--metrics-port", "9100"])
    assert (args.metrics_port, args.metrics_host) == (9100, "127.0.0.1")
    assert build_parser().parse_args(["worker", "--metrics-host", "0.0.0.0"]).metrics_host == "0.0.0.0"
    served = []
    monkeypatch.setattr(metrics, "start_http_server", lambda port, addr, registry: served.append((port, addr)))
    worker = metrics.WorkerMetrics("w", lambda: (0, 0))
    worker.serve(9100)  # as a program embedding the worker calls it
    worker.serve(9101, args.metrics_host)
    assert served == [(9100, "127.0.0.1"), (9101, "127.0.0.1")]
