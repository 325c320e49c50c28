"""`sextant …` / `kubectl sextant …`.

kubectl's global flags (--kubeconfig, --context, -n/--namespace, -A/--all-namespaces, --token) are accepted
before or after the subcommand. Every failure is reported in one line on stderr with a non-zero exit status
(1: an error, or a job that ended without success; 2: bad usage; `jobs wait`: 124 on timeout); never a stack
trace (SEXTANT_DEBUG=1 shows one for an unexpected failure).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback

import httpx

from ..resources import inputs
from ..kube import kubeconfig
from ..kube.client import ApiError
from . import inspect as inspect_cmd
from ..worker import main as worker_cmd
from . import jobs, queues, schedules, workers
from . import dashboard
from .args import positive_int
from .context import CliError, Context, api_error


def _settings(args: argparse.Namespace, conn: kubeconfig.Connection):
    from ..controller.leader import ElectionSettings
    from ..controller.operator import Settings
    from ..resources.common import parse_duration

    election = None
    if args.leader_elect:
        namespace = args.leader_election_namespace or os.environ.get("POD_NAMESPACE") or conn.namespace
        election = ElectionSettings(namespace=namespace, name=args.leader_election_name,
                                    lease_duration=parse_duration(args.leader_election_lease_duration).total_seconds(),
                                    renew_deadline=parse_duration(args.leader_election_renew_deadline).total_seconds(),
                                    retry_period=parse_duration(args.leader_election_retry_period).total_seconds())
    return Settings(namespaces=args.watch_namespace or [], workers=args.workers, pending_pods=args.max_pending_pods,
                    record_queued_after=parse_duration(args.record_queued_after),
                    idempotency_window=inputs.idempotency_window(os.environ),
                    events=not args.no_events,
                    http_host=args.http_host, http_port=None if args.http_port < 0 else args.http_port,
                    http_tls=(args.http_tls_cert, args.http_tls_key) if args.http_tls_cert else None,
                    http_max_in_flight=args.http_max_in_flight,
                    http_request_timeout=parse_duration(args.http_request_timeout).total_seconds(),
                    leader_election=election, kopf_watches=args.kopf_watches,
                    kopf_liveness=args.kopf_liveness)


def _operator(args: argparse.Namespace) -> int:
    from ..controller.operator import run

    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    conn = kubeconfig.load(args.kubeconfig, args.context)
    run(conn, _settings(args, conn))
    return 0


def _dev(args: argparse.Namespace) -> int:
    from ..dev.command import dev

    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return dev(args.kubeconfig, args.context, args.keep, lambda conn: _settings(args, conn))


OPERATOR_DESCRIPTION = (
    "Run Sextant's operator in the foreground until SIGINT/SIGTERM. It is a kopf operator: kopf runs the process "
    "(start-up, clean-up, login with this kubeconfig, probes, signals) and its handlers watch Queue, Handler and "
    "Schedule; Jobs and the Pods and Leases of jobs are watched by lean informers in the same process and event "
    "loop, which also watch the three low-rate kinds for the admission gate (docs/operator.md). A malformed watch "
    "line, a watch answered 410 or an object nested too deep fails one kopf watch, never the process: it lists "
    "again. kopf writes nothing to Sextant's objects.")


def _operator_flags(op: argparse.ArgumentParser) -> None:
    from ..lifecycle.transitions import RECORD_QUEUED_AFTER

    op.add_argument("--watch-namespace", action="append", help="watch only this namespace (repeatable)")
    op.add_argument("--workers", type=int, default=64, help="parallel reconciles (default 64)")
    op.add_argument("--max-pending-pods", type=int, default=200,
                    help="while the scheduler is behind (it finds no node for one of a queue's pods, or one stays "
                         "unbound over 2 s), at most this many of the queue's pods wait for a node; the rest of the "
                         "queue waits queued, in priority order (default 200; 0: no limit)")
    op.add_argument("--record-queued-after", type=_positive_duration,
                    default=f"{RECORD_QUEUED_AFTER.total_seconds():g}s",
                    help="how long a new job whose attempt's pod is starting, or that waits in line for a slot, may "
                         "go without a state written (default %(default)s). Its start is then its first status write; "
                         "a longer wait writes `queued` first. A longer setting spares that write per job in long "
                         "bursts; meanwhile `kubectl get sjob` shows no STATE for the job and no conditions (Flux's "
                         "kstatus then reads it as Current; docs/gitops.md), and its queue counts it as queued")
    op.add_argument("--no-events", action="store_true", help="post no Kubernetes Events")
    op.add_argument("--log-level", default="warning", help="debug, info, warning (default) or error")
    op.add_argument("--http-port", type=int, default=8080,
                    help="port of health, readiness, metrics and the /v2 API (default 8080; -1: none)")
    op.add_argument("--http-host", default="0.0.0.0", help="address to listen on (default all)")
    op.add_argument("--http-tls-cert", help="serve HTTPS with this PEM certificate (chain); with --http-tls-key. "
                                            "Read again when the file changes")
    op.add_argument("--http-tls-key", help="the certificate's PEM private key")
    op.add_argument("--http-max-in-flight", type=positive_int, default=100,
                    help="/v2 API requests served at once; more are answered 429 with Retry-After (default 100; "
                         "health, readiness and metrics are never refused)")
    op.add_argument("--http-request-timeout", type=_positive_duration, default="30s",
                    help="how long a /v2 API request may take before it is answered 503 (default 30s)")
    op.add_argument("--leader-elect", action="store_true",
                    help="run as one of several replicas: only the holder of a Lease acts (see docs/ha.md)")
    op.add_argument("--leader-election-namespace", help="the Lease's namespace (default: $POD_NAMESPACE, "
                                                        "else the kubeconfig's namespace)")
    op.add_argument("--leader-election-name", default="sextant-operator", help="the Lease's name")
    op.add_argument("--leader-election-lease-duration", default="15s", help="default 15s")
    op.add_argument("--leader-election-renew-deadline", default="10s", help="default 10s")
    op.add_argument("--leader-election-retry-period", default="2s", help="default 2s")
    op.add_argument("--kopf-watches", action=argparse.BooleanOptionalAction, default=True,
                    help="kopf's handlers watch Queues, Handlers and Schedules beside their informers (default); "
                         "--no-kopf-watches leaves them to the informers alone, e.g. to spare kopf's CPU per event "
                         "or to rule kopf out when debugging (docs/operator.md)")
    op.add_argument("--kopf-liveness", metavar="URL",
                    help="also serve kopf's liveness endpoint, with the probes ready and role, e.g. "
                         "http://0.0.0.0:8081/healthz (default: none; /healthz and /readyz are on --http-port)")


def _positive_duration(value: str) -> str:
    from ..resources.common import parse_duration

    try:
        seconds = parse_duration(value).total_seconds()
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"{value!r} is not a duration like 30s, 2m or 1h") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be longer than 0s, got {value}")
    return value


def _global_flags(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """kubectl's global flags. Below the top level their default is SUPPRESS, so a flag given before the
    subcommand is not overwritten by the subcommand's default."""
    default = (lambda value: value) if top else (lambda value: argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", default=default(None), help="path to the kubeconfig file")
    parser.add_argument("--context", default=default(None), help="the kubeconfig context to use")
    parser.add_argument("--token", default=default(None), help="bearer token for the API server (instead of "
                                                               "the kubeconfig's credentials)")
    parser.add_argument("-n", "--namespace", default=default(None),
                        help="the namespace (default: the kubeconfig context's namespace)")
    parser.add_argument("-A", "--all-namespaces", action="store_true", default=default(False),
                        help="list across all namespaces")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sextant", description="Sextant: a job queue that runs on Kubernetes. "
                                     "Also `kubectl sextant ...`.")
    _global_flags(parser, top=True)
    flags = argparse.ArgumentParser(add_help=False)
    _global_flags(flags, top=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    jobs.register(sub, flags)
    inspect_cmd.register(sub, flags)
    queues.register(sub, flags)
    schedules.register(sub, flags)
    workers.register(sub, flags)
    dashboard.register(sub, flags)
    op = sub.add_parser("operator", help="run the operator (a kopf operator) in the foreground",
                        description=OPERATOR_DESCRIPTION)
    _operator_flags(op)
    op.set_defaults(func=_operator)
    dv = sub.add_parser("dev", help="install the CRDs and run the operator; starts a local control plane when "
                                    "no cluster is configured")
    dv.add_argument("--keep", action="store_true", help="leave the local control plane running afterwards")
    _operator_flags(dv)
    dv.set_defaults(func=_dev)
    worker_cmd.register(sub, flags)
    # `sextant run` is dispatched before this parser (main: its arguments are the handler's, untouched); it is
    # listed here for `sextant --help`.
    sub.add_parser("run", add_help=False, help="the entrypoint of attempt pods: run a handler with the job's "
                                               "payload (see `sextant run --help`)")
    return parser


_VALUE_FLAGS = {"--kubeconfig", "--context", "--token", "-n", "--namespace"}


def _runner_argv(argv: list[str]) -> list[str] | None:
    """The arguments of `sextant run`, when that is the command (after any of kubectl's global flags, which the
    runner does not use); None for every other command."""
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        i += 2 if argv[i] in _VALUE_FLAGS else 1
    return argv[i + 1:] if argv[i:i + 1] == ["run"] else None


def _tls_problem(cert: str | None, key: str | None) -> str | None:
    """What is wrong with the HTTPS flags, checked before anything starts; None when nothing is."""
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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    runner = _runner_argv(argv)
    if runner is not None:  # the pod entrypoint: everything after `--` is the handler's command, untouched
        from ..runner.run import main as run_main

        return run_main(runner)
    parser = build_parser()
    args = parser.parse_args(argv)  # bad usage: argparse prints it and exits 2
    problem = _tls_problem(getattr(args, "http_tls_cert", None), getattr(args, "http_tls_key", None))
    if problem:
        parser.error(problem)
    if getattr(args, "cli", False):
        return _run_command(args)
    try:
        return args.func(args)
    except kubeconfig.ConfigError as exc:
        print(f"sextant: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _run_command(args: argparse.Namespace) -> int:
    """A user-facing command: everything that can go wrong becomes one line on stderr and an exit status."""
    ctx = Context(args)
    try:
        return args.func(ctx)
    except CliError as exc:
        _error(str(exc))
        return exc.code
    except inputs.InputError as exc:
        _error(str(exc))
        return 2
    except ApiError as exc:
        _error(str(api_error(exc)))
        return 1
    except kubeconfig.ConfigError as exc:
        _error(str(exc))
        return 1
    except httpx.TimeoutException:
        _error(f"the API server at {ctx.conn.server} did not answer in time")
        return 1
    except httpx.HTTPError as exc:
        server = ctx.conn.server if "conn" in ctx.__dict__ else "the API server"
        _error(f"cannot reach the API server at {server}: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `sextant jobs list | head`
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - so that the interpreter's final flush is quiet
        except OSError:
            pass
        return 0
    except Exception as exc:  # noqa: BLE001 - the last line of defence: never a stack trace
        if os.environ.get("SEXTANT_DEBUG"):
            traceback.print_exc()
        _error(f"unexpected failure: {type(exc).__name__}: {exc} (SEXTANT_DEBUG=1 shows the details)")
        return 1
    finally:
        ctx.close()


def _error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
