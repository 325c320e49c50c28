"""`sextant …` / `kubectl sextant …`."""

from __future__ import annotations

import argparse
import logging
import sys

from .. import kubeconfig


def _settings(args: argparse.Namespace):
    from ..controller.main import Settings

    return Settings(namespaces=args.watch_namespace or [], workers=args.workers, events=not args.no_events,
                    http_host=args.http_host, http_port=None if args.http_port < 0 else args.http_port)


def _operator(args: argparse.Namespace) -> int:
    from ..controller.main import run

    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    conn = kubeconfig.load(args.kubeconfig, args.context)
    run(conn, _settings(args))
    return 0


def _dev(args: argparse.Namespace) -> int:
    from ..dev import dev

    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return dev(args.kubeconfig, args.context, args.keep, _settings(args))


def _operator_flags(op: argparse.ArgumentParser) -> None:
    op.add_argument("--watch-namespace", action="append", help="watch only this namespace (repeatable)")
    op.add_argument("--workers", type=int, default=16, help="parallel reconciles (default 16)")
    op.add_argument("--no-events", action="store_true", help="post no Kubernetes Events")
    op.add_argument("--log-level", default="warning", help="debug, info, warning (default) or error")
    op.add_argument("--http-port", type=int, default=8080,
                    help="port of health, readiness, metrics and the /v2 API (default 8080; -1: none)")
    op.add_argument("--http-host", default="0.0.0.0", help="address to listen on (default all)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sextant", description="Sextant: a job queue that runs on Kubernetes.")
    parser.add_argument("--kubeconfig", help="path to the kubeconfig file")
    parser.add_argument("--context", help="the kubeconfig context to use")
    sub = parser.add_subparsers(dest="command", required=True)
    op = sub.add_parser("operator", help="run the operator in the foreground")
    _operator_flags(op)
    op.set_defaults(func=_operator)
    dv = sub.add_parser("dev", help="install the CRDs and run the operator; starts a local control plane when "
                                    "no cluster is configured")
    dv.add_argument("--keep", action="store_true", help="leave the local control plane running afterwards")
    _operator_flags(dv)
    dv.set_defaults(func=_dev)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:  # the pod entrypoint: everything after `--` is the handler's command, untouched
        from ..runner.run import main as run_main

        return run_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except kubeconfig.ConfigError as exc:
        print(f"sextant: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
