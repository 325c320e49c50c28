"""What the operator is told (`sextant operator`'s flags): its Settings and the leader election's, every default
once. Light, so that the CLI reads the flags' defaults from here without importing the operator."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from ..archive.settings import ArchiveSettings
from ..lifecycle.retention import MAX_FINISHED_JOBS
from ..lifecycle.workers import MAX_WORKER_SLOTS
from ..resources.job import IDEMPOTENCY_WINDOW
from .writes import RECORD_QUEUED_AFTER


@dataclass(frozen=True)
class ElectionSettings:
    namespace: str
    name: str = "sextant-operator"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


@dataclass
class Settings:
    namespaces: list[str] = field(default_factory=list)  # empty: all namespaces
    workers: int = 64  # an admission is one write (its pod, or the job's status); completions must not wait behind them
    pending_pods: int = 200  # per queue, attempt pods waiting for a node (0: no limit); see slots.py
    record_queued_after: timedelta | None = RECORD_QUEUED_AFTER  # a job about to start goes unwritten (None: until it does)
    max_worker_slots: int = MAX_WORKER_SLOTS  # the most slots one Worker is believed to have (lifecycle/workers.py)
    idempotency_window: timedelta = IDEMPOTENCY_WINDOW  # SEXTANT_IDEMPOTENCY_WINDOW: every client must agree
    events: bool = True
    # Loopback: without TLS flags the server is plain HTTP, and on every interface it would offer the /v2 API to
    # the network. The chart listens on all interfaces explicitly (--http-host=0.0.0.0), with TLS by default.
    http_host: str = "127.0.0.1"
    http_port: int | None = 8080  # health, readiness, metrics and the /v2 API; None: no server
    http_tls: tuple[str, str] | None = None  # (certificate, key) files: serve HTTPS
    http_max_in_flight: int = 100  # /v2 requests served at once; more are answered 429
    http_request_timeout: float = 30.0  # seconds a /v2 request may take; then 503
    http_user_rate: float = 20.0  # /v2 requests per second per user, on average; beyond, 429 with Retry-After
    http_user_burst: int = 100  # of which this many at once
    leader_election: ElectionSettings | None = None  # None: this replica acts alone
    # The most finished Job objects kept across the cluster (oldest deleted first; docs/archive.md); None: no cap.
    max_finished_jobs: int | None = MAX_FINISHED_JOBS
    archive: ArchiveSettings | None = None  # None: no archive, a job's history ends with its retention
    archive_migrate: bool = False  # create or migrate its schema at start (the embedded SQLite file of `sextant dev`)
    kopf_liveness: str | None = None  # kopf's liveness endpoint with its probes (ready, role), e.g. :8081/healthz
