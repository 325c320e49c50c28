"""The `sextant dashboard` subcommand's flags. The server (aiohttp) is imported only when the command runs, so that
every other CLI call starts as fast as before."""

from __future__ import annotations

import argparse

from ..resources.inputs import port_or_zero
from ..history import HistoryError, archive_dsn
from .context import CliError, Context, archive_flag


def _problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the address and TLS flags together, checked before anything starts (a usage error)."""
    from ..dashboard.views import is_loopback

    if bool(args.tls_cert) != bool(args.tls_key):
        return "--tls-cert and --tls-key go together: give both or neither"
    if not is_loopback(args.address) and not args.tls_cert and not args.allow_plain_http:
        # Anyone on the path would read the secret, the payloads and the logs, and act as you.
        return (f"--address {args.address} is not a loopback address: serving it over plain HTTP sends the "
                "dashboard's secret and your data unencrypted; give --tls-cert and --tls-key, or "
                "--allow-plain-http to do it anyway")
    return None


def _run(ctx: Context) -> int:
    from ..dashboard.server import TlsFiles, run  # aiohttp: only now

    a = ctx.args

    conn, namespace = ctx.conn, None if ctx.all_namespaces else ctx.namespace
    tls = (a.tls_cert, a.tls_key) if a.tls_cert else None
    try:
        dsn = archive_dsn(a.archive)
    except HistoryError as exc:
        raise CliError(str(exc)) from None
    try:
        run(conn, namespace, a.address, a.port, ctx.say, ctx.note, tls, dsn)
    except TlsFiles as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot listen on {a.address}:{a.port}: {exc.strerror or exc}") from None
    return 0


def register(sub: argparse._SubParsersAction, flags: argparse.ArgumentParser) -> None:
    cmd = sub.add_parser(
        "dashboard", parents=[flags], help="a live web view of queues, jobs, schedules and workers on localhost",
        description="Serve a web dashboard on 127.0.0.1 (like `kubectl proxy`: it acts with your kubeconfig's "
                    "credentials; what you may not see or do, it cannot either) and print its URL. Shows the "
                    "namespace of -n (default: the kubeconfig context's), or every namespace with -A.")
    cmd.add_argument("--address", default="127.0.0.1", help="the address to listen on (default 127.0.0.1; "
                                                            "another one lets others act as you, and needs "
                                                            "--tls-cert and --tls-key or --allow-plain-http)")
    cmd.add_argument("--tls-cert", help="serve HTTPS with this PEM certificate (chain); with --tls-key")
    cmd.add_argument("--tls-key", help="the certificate's PEM private key")
    cmd.add_argument("--allow-plain-http", action="store_true",
                     help="serve a non-loopback --address over plain HTTP (the secret and your data travel "
                          "unencrypted)")
    cmd.add_argument("--port", type=port_or_zero, default=8800, help="the port (default 8800; 0 picks a free one)")
    archive_flag(cmd)
    cmd.set_defaults(func=_run, cli=True, usage_problem=_problem)

