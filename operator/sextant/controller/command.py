"""`sextant operator`: its flags (also `sextant dev`'s), read into the operator's Settings. Every default is the
dataclass's (settings.py); the operator itself is imported only when it runs, so that every other command starts
fast."""

from __future__ import annotations

import argparse
import logging
import os

from ..archive.settings import ENV_DSN, ArchiveSettings, SettingsError, default_dsn
from ..kube import kubeconfig
from ..resources import inputs
from ..resources.common import parse_duration
from ..resources.worker import MAX_SLOTS
from .settings import ElectionSettings, Settings

DESCRIPTION = (
    "Run Sextant's operator in the foreground until SIGINT/SIGTERM. It is a kopf operator: kopf runs the process "
    "(start-up, clean-up, login with this kubeconfig, probes, signals) and watches nothing; every kind (Jobs, the "
    "Pods and Leases of jobs, Queue, Handler and Schedule) is watched once, by a lean informer in the same process "
    "and event loop (docs/operator.md). A malformed watch line, a watch answered 410 or an object nested too deep "
    "fails one watch, never the process: it lists again. kopf writes nothing to Sextant's objects. With "
    "SEXTANT_ARCHIVE_DSN set (postgresql://... or sqlite:///PATH, migrated by `sextant archive migrate`), every "
    "finished job's record is written there before retention deletes it; without it, a job's history ends with its "
    "retention (docs/archive.md).")


def _seconds(seconds: float) -> str:
    """A default in seconds as the duration flags take it: 30.0 → '30s'."""
    return f"{seconds:g}s"


def _positive_duration(value: str) -> str:
    try:
        seconds = parse_duration(value).total_seconds()
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"{value!r} is not a duration like 30s, 2m or 1h") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be longer than 0s, got {value}")
    return value


def _slots(text: str) -> int:
    """--max-worker-slots: a whole number from 1 to the most a Worker may announce."""
    if not text.isdigit() or not 1 <= int(text) <= MAX_SLOTS:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number from 1 to {MAX_SLOTS}")
    return int(text)


def _cap(text: str) -> int | None:
    """--max-finished-jobs: a whole number from 1, or `none`."""
    if text.strip().lower() == "none":
        return None
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of jobs from 1, or none (no cluster-wide cap)")
    return int(text)


def archive_settings(args: argparse.Namespace, environ: dict[str, str] | os._Environ[str] = os.environ
                     ) -> tuple[ArchiveSettings | None, bool]:
    """The archive the operator writes to, and whether it may create or migrate its schema: $SEXTANT_ARCHIVE_DSN
    when set (never migrated: `sextant archive migrate` does it); else, for `sextant dev` only, the embedded SQLite
    file (its own: migrated at start); else none."""
    if environ.get(ENV_DSN):
        return ArchiveSettings.from_env(environ), False
    if getattr(args, "embedded_archive", False):
        return ArchiveSettings.from_env({**environ, ENV_DSN: default_dsn()}), True
    return None, False


def flags(op: argparse.ArgumentParser) -> None:
    """The operator's flags, on `sextant operator` and `sextant dev`."""
    op.add_argument("--watch-namespace", action="append", help="watch only this namespace (repeatable)")
    op.add_argument("--workers", type=int, default=Settings.workers,
                    help=f"parallel reconciles (default {Settings.workers})")
    op.add_argument("--max-pending-pods", type=int, default=Settings.pending_pods,
                    help="while the scheduler is behind (it finds no node for one of a queue's pods, or one stays "
                         "unbound over 2 s), at most this many of the queue's pods wait for a node; the rest of the "
                         f"queue waits queued, in priority order (default {Settings.pending_pods}; 0: no limit)")
    op.add_argument("--record-queued-after", type=_positive_duration, default=None,
                    help="how long a new job whose attempt's pod is starting, or that waits in line for a slot, goes "
                         "unwritten before its `queued` status (queuedAt, message, conditions) is written (default: "
                         "not written; its start is its first status write). It reads `queued` all along, the CRD's "
                         "default; meanwhile it has no conditions (Flux's kstatus reads it as Current; docs/gitops.md)")
    op.add_argument("--max-worker-slots", type=_slots, default=Settings.max_worker_slots,
                    help="the most slots the operator believes one Worker has, whatever it announces; a Worker "
                         f"announcing more gets a Warning Event SlotsCapped (default {Settings.max_worker_slots})")
    op.add_argument("--max-finished-jobs", type=_cap, default=Settings.max_finished_jobs, metavar="N",
                    help="the most finished jobs kept as objects across the cluster: past it the oldest finished "
                         "ones are deleted before their retention (archived first when there is an archive), with a "
                         "Warning Event RetentionCapped on their Queue; a Queue's spec.retention.maxJobs caps it "
                         f"per queue (default {Settings.max_finished_jobs}, ~3.1 KB of etcd each: docs/archive.md; "
                         "none: no cluster-wide cap)")
    op.add_argument("--no-events", action="store_true", help="post no Kubernetes Events")
    op.add_argument("--log-level", default="warning", help="debug, info, warning (default) or error")
    op.add_argument("--http-port", type=int, default=Settings.http_port,
                    help=f"port of health, readiness, metrics and the /v2 API (default {Settings.http_port}; -1: none)")
    op.add_argument("--http-host", default=Settings.http_host,
                    help="address to listen on (default %(default)s: this machine only; 0.0.0.0: every interface, "
                         "as the Helm chart does)")
    op.add_argument("--http-tls-cert", help="serve HTTPS with this PEM certificate (chain); with --http-tls-key. "
                                            "Read again when the file changes")
    op.add_argument("--http-tls-key", help="the certificate's PEM private key")
    op.add_argument("--http-max-in-flight", type=inputs.positive_int, default=Settings.http_max_in_flight,
                    help="/v2 API requests served at once; more are answered 429 with Retry-After (default "
                         f"{Settings.http_max_in_flight}; health, readiness and metrics are never refused)")
    op.add_argument("--http-request-timeout", type=_positive_duration, default=_seconds(Settings.http_request_timeout),
                    help="how long a /v2 API request may take before it is answered 503 (default %(default)s)")
    op.add_argument("--http-user-rate", type=inputs.positive_int, default=int(Settings.http_user_rate),
                    help="/v2 API requests per second per user, on average; beyond it 429 with Retry-After "
                         f"(default {int(Settings.http_user_rate)})")
    op.add_argument("--http-user-burst", type=inputs.positive_int, default=Settings.http_user_burst,
                    help=f"of which this many at once (default {Settings.http_user_burst})")
    op.add_argument("--leader-elect", action="store_true",
                    help="run as one of several replicas: only the holder of a Lease acts (see docs/ha.md)")
    op.add_argument("--leader-election-namespace", help="the Lease's namespace (default: $POD_NAMESPACE, "
                                                        "else the kubeconfig's namespace)")
    op.add_argument("--leader-election-name", default=ElectionSettings.name, help="the Lease's name")
    op.add_argument("--leader-election-lease-duration", default=_seconds(ElectionSettings.lease_duration),
                    help="default %(default)s")
    op.add_argument("--leader-election-renew-deadline", default=_seconds(ElectionSettings.renew_deadline),
                    help="default %(default)s")
    op.add_argument("--leader-election-retry-period", default=_seconds(ElectionSettings.retry_period),
                    help="default %(default)s")
    op.add_argument("--kopf-liveness", metavar="URL",
                    help="also serve kopf's liveness endpoint, with the probes ready and role, e.g. "
                         "http://0.0.0.0:8081/healthz (default: none; /healthz and /readyz are on --http-port)")
    op.set_defaults(usage_problem=_tls_problem, embedded_archive=False)


def _tls_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the HTTPS flags, checked before anything starts; None when nothing is."""
    cert, key = args.http_tls_cert, args.http_tls_key
    if not cert and not key:
        return None
    if not cert or not key:
        return "--http-tls-cert and --http-tls-key go together: give both or neither"
    import ssl

    from ..http.server import ServingCertificate

    try:
        ServingCertificate(cert, key)
    except (OSError, ssl.SSLError) as exc:
        return f"--http-tls-cert/--http-tls-key: cannot use {cert} and {key}: {exc}"
    return None


def settings(args: argparse.Namespace, conn: kubeconfig.Connection) -> Settings:
    """The operator's Settings from its flags (and SEXTANT_IDEMPOTENCY_WINDOW, POD_NAMESPACE)."""
    election = None
    if args.leader_elect:
        namespace = args.leader_election_namespace or os.environ.get("POD_NAMESPACE") or conn.namespace
        election = ElectionSettings(namespace=namespace, name=args.leader_election_name,
                                    lease_duration=parse_duration(args.leader_election_lease_duration).total_seconds(),
                                    renew_deadline=parse_duration(args.leader_election_renew_deadline).total_seconds(),
                                    retry_period=parse_duration(args.leader_election_retry_period).total_seconds())
    try:
        archive, migrate = archive_settings(args)
    except SettingsError as exc:
        named = str(exc) if str(exc).startswith("SEXTANT_") else f"{ENV_DSN}: {exc}"  # always name the variable
        raise SystemExit(f"sextant operator: {named}") from None
    return Settings(namespaces=args.watch_namespace or [], workers=args.workers, pending_pods=args.max_pending_pods,
                    record_queued_after=parse_duration(args.record_queued_after) if args.record_queued_after else None,
                    max_worker_slots=args.max_worker_slots,
                    idempotency_window=inputs.idempotency_window(os.environ),
                    events=not args.no_events,
                    http_host=args.http_host, http_port=None if args.http_port < 0 else args.http_port,
                    http_tls=(args.http_tls_cert, args.http_tls_key) if args.http_tls_cert else None,
                    http_max_in_flight=args.http_max_in_flight,
                    http_request_timeout=parse_duration(args.http_request_timeout).total_seconds(),
                    http_user_rate=float(args.http_user_rate), http_user_burst=args.http_user_burst,
                    leader_election=election, kopf_liveness=args.kopf_liveness,
                    max_finished_jobs=args.max_finished_jobs, archive=archive, archive_migrate=migrate)


def run(args: argparse.Namespace, conn: kubeconfig.Connection) -> None:
    """Run the operator on conn with the flags' settings until SIGINT/SIGTERM (`sextant operator`, `sextant dev`), on
    kopf (controller/kopfapp.py; imported here, so that the flags' help does not load kopf)."""
    from .kopfapp import run as run_on_kopf

    told = settings(args, conn)
    if told.archive is not None:
        import asyncio

        from .archiving import refusal

        problem = asyncio.run(refusal(told.archive, told.archive_migrate))
        if problem:
            raise SystemExit(f"sextant operator: {problem}")
    run_on_kopf(conn, told)


def _operator(args: argparse.Namespace) -> int:
    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run(args, kubeconfig.load(args.kubeconfig, args.context))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """`sextant operator` (kubectl's global flags go before it: they are not its own)."""
    op = sub.add_parser("operator", help="run the operator (a kopf operator) in the foreground",
                        description=DESCRIPTION)
    flags(op)
    op.set_defaults(func=_operator)
