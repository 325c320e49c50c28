"""Prometheus metrics (prometheus_client, one registry per process): the operator's, the /v2 API's among them (a
worker keeps its own, worker/metrics.py). An attempt here is one entry of a job's timeline, one sequence number
(status.attempts[].sequence), whatever its attempt number after a retry.

Counters move only after the status write that records the change succeeded, so a retried reconcile never
counts twice; gauges are read from the operator's in-memory view at scrape time.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..resources.common import parse_time
from ..resources.job import JobSpec, JobStatus

REGISTRY = CollectorRegistry(auto_describe=True)

_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)

ATTEMPTS = Counter("sextant_attempts_total", "Attempts finished, by queue, handler and result.",
                   ["namespace", "queue", "handler", "result"], registry=REGISTRY)
ATTEMPT_DURATION = Histogram("sextant_attempt_duration_seconds", "How long attempts ran, start to finish.",
                             ["namespace", "queue", "handler"], buckets=_DURATION_BUCKETS, registry=REGISTRY)
QUEUE_WAIT = Histogram("sextant_queue_wait_seconds", "How long jobs waited from queued to running.",
                       ["namespace", "queue"], buckets=_DURATION_BUCKETS, registry=REGISTRY)
LEASE_EXPIRATIONS = Counter("sextant_lease_expirations_total", "Attempts failed because their lease expired.",
                            ["namespace", "queue"], registry=REGISTRY)
RECONCILE_ERRORS = Counter("sextant_reconcile_errors_total", "Reconciles that raised an unexpected error.",
                           registry=REGISTRY)
OBJECT_ERRORS = Counter("sextant_object_errors_total", "Failures to take in (stage digest) or reconcile (stage "
                        "reconcile) one object, by kind; each is retried with a per-object backoff.",
                        ["kind", "stage"], registry=REGISTRY)
LOOP_RESTARTS = Counter("sextant_loop_restarts_total", "Long-running loops of the operator restarted after an "
                        "unexpected error (the process keeps running).", ["loop"], registry=REGISTRY)
SCHEDULE_FIRE_LAG = Histogram("sextant_schedule_fire_lag_seconds", "From a schedule's tick to its job's creation.",
                              ["namespace", "schedule"], buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60),
                              registry=REGISTRY)
JOBS_DELETED = Counter("sextant_jobs_deleted_total", "Finished jobs deleted, by reason: retention (their time was "
                       "over) or cap (too many finished jobs kept: the queue's retention.maxJobs or the operator's "
                       "--max-finished-jobs).", ["namespace", "queue", "reason"], registry=REGISTRY)
ARCHIVE_PENDING = Gauge("sextant_archive_pending", "Finished jobs whose record waits to be written to the archive.",
                        registry=REGISTRY)
ARCHIVE_UNAVAILABLE = Gauge("sextant_archive_unavailable", "1 from a failed write to the archive until one succeeds "
                            "(records wait, retention deletes nothing unarchived); 0 otherwise, and without an "
                            "archive.", registry=REGISTRY)
ARCHIVE_WRITE_FAILURES = Counter("sextant_archive_write_failures_total", "Batches of records the archive could not "
                                 "take (database down, slow or refusing); each is written again after a backoff.",
                                 registry=REGISTRY)
ARCHIVE_WRITTEN = Counter("sextant_archive_records_written_total", "Records of finished jobs written to the archive.",
                          registry=REGISTRY)
EVENTS_DROPPED = Counter("sextant_events_dropped_total", "Events not posted: over their budget (Normal) or "
                         "beyond the backlog.", ["type"], registry=REGISTRY)
TOKEN_REVIEWS = Counter("sextant_http_token_reviews_total", "TokenReviews the /v2 API sent, by result (accepted, "
                        "refused, error).", ["result"], registry=REGISTRY)
HTTP_REFUSED = Counter("sextant_http_refused_total", "/v2 requests refused to protect the operator, by reason "
                       "(in-flight: over the concurrency cap; deadline: not done in time; failed-authentication: "
                       "the client's failed token reviews over their rate; user-rate: the user's requests over "
                       "--http-user-rate).", ["reason"], registry=REGISTRY)
HTTP_IN_FLIGHT = Gauge("sextant_http_in_flight", "/v2 requests being served now (at most --http-max-in-flight).",
                       registry=REGISTRY)


def record_transition(namespace: str, spec: JobSpec, before: JobStatus, after: JobStatus, now: datetime) -> None:
    """Count what a successful status write recorded: attempts that started and attempts that finished."""
    ran = {a.sequence: a for a in before.attempts}
    for attempt in after.attempts:
        previous = ran.get(attempt.sequence)
        # A new timeline entry is an attempt taken from the queue, also one recorded only once it had ended (its pod
        # started and finished between two looks of the operator).
        if previous is None:
            queued = parse_time(after.queued_at)
            if queued is not None:
                QUEUE_WAIT.labels(namespace, spec.queue).observe(max(0.0, (now - queued).total_seconds()))
        if attempt.result != "running" and (previous is None or previous.result == "running"):
            ATTEMPTS.labels(namespace, spec.queue, spec.handler, attempt.result).inc()
            started, finished = parse_time(attempt.started_at), parse_time(attempt.finished_at)
            if started and finished:
                ATTEMPT_DURATION.labels(namespace, spec.queue, spec.handler).observe(
                    max(0.0, (finished - started).total_seconds()))
            if attempt.reason == "LeaseExpired":
                LEASE_EXPIRATIONS.labels(namespace, spec.queue).inc()


class ViewCollector:
    """Gauges from the operator's view, computed when Prometheus scrapes."""

    def __init__(self, jobs: Callable[[], Iterable[tuple[str, str, str]]], requests: Callable[[], Tally],
                 depths: Callable[[], dict[str, int]], leader: Callable[[], bool],
                 api_requests: Callable[[], Tally] | None = None, fenced: Callable[[], int] | None = None) -> None:
        self._jobs, self._requests, self._depths, self._leader = jobs, requests, depths, leader
        self._api_requests, self._fenced = api_requests, fenced

    def collect(self) -> Iterable[Metric]:
        by_state: Tally[tuple[str, str, str]] = Tally()
        for labels in self._jobs():  # (namespace, queue, state)
            by_state[labels] += 1
        jobs = GaugeMetricFamily("sextant_jobs", "Jobs by queue and state.", labels=["namespace", "queue", "state"])
        for labels, count in sorted(by_state.items()):
            jobs.add_metric(list(labels), count)
        yield jobs
        api = CounterMetricFamily("sextant_api_requests", "The operator's Kubernetes API requests by verb, "
                                  "resource and code (0: no answer).", labels=["verb", "resource", "code"])
        for (verb, resource, code), count in sorted(self._requests().items()):
            api.add_metric([verb, resource, str(code)], count)
        yield api
        if self._api_requests is not None:
            http = CounterMetricFamily("sextant_http_kube_requests", "The /v2 HTTP API's own Kubernetes API requests "
                                       "(TokenReviews, SubjectAccessReviews, reads) by verb, resource and code.",
                                       labels=["verb", "resource", "code"])
            for (verb, resource, code), count in sorted(self._api_requests().items()):
                http.add_metric([verb, resource, str(code)], count)
            yield http
        depth = GaugeMetricFamily("sextant_scheduler_depth", "Pending items of the operator's loops: timer "
                                  "wake-ups, reconcile queue, unposted events.", labels=["loop"])
        for loop, value in sorted(self._depths().items()):
            depth.add_metric([loop], value)
        yield depth
        yield GaugeMetricFamily("sextant_leader", "1 when this replica leads (admits jobs, writes status).",
                                value=1 if self._leader() else 0)
        if self._fenced is not None:
            yield CounterMetricFamily("sextant_writes_fenced", "Writes of the controllers refused before they were "
                                      "sent because this replica did not lead (docs/ha.md).", value=self._fenced())
