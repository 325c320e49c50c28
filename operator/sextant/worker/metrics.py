"""The worker's Prometheus metrics (`--metrics-port`), in a registry of its own: attempts by result (as the worker saw
them end), busy and free slots, claim-to-start latency (handler start − the assignment's assignedAt, the moment the
operator assigned it) and results not reported."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class WorkerMetrics:
    def __init__(self, worker: str, slots: Callable[[], tuple[int, int]]) -> None:
        self.worker = worker
        self.registry = CollectorRegistry(auto_describe=True)
        self.attempts = Counter("sextant_worker_attempts_total", "Attempts this worker ran and reported, by "
                                "queue, handler and result as it saw them end (succeeded, failed, cancelled).",
                                ["worker", "queue", "handler", "result"], registry=self.registry)
        self.refused = Counter("sextant_worker_results_refused_total", "Results not reported: the attempt was no "
                               "longer the worker's (fenced, taken over, its assignment dropped).", ["worker"],
                               registry=self.registry)
        self.claim_to_start = Histogram("sextant_worker_claim_to_start_seconds", "From the operator assigning an "
                                        "attempt to this worker (assignedAt) to its handler starting.",
                                        ["worker"], buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.registry.register(_Slots(worker, slots))

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """Plain HTTP, no authentication: loopback unless an address is asked for (`--metrics-host`)."""
        start_http_server(port, addr=host, registry=self.registry)


class _Slots:
    def __init__(self, worker: str, slots: Callable[[], tuple[int, int]]) -> None:
        self.worker, self.slots = worker, slots

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        busy, total = self.slots()
        gauge = GaugeMetricFamily("sextant_worker_slots", "The worker's slots, busy (a handler runs) or free.",
                                  labels=["worker", "state"])
        gauge.add_metric([self.worker, "busy"], busy)
        gauge.add_metric([self.worker, "free"], max(0, total - busy))
        yield gauge
