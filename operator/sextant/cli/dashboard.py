"""The `sextant dashboard` subcommand's flags. The server (aiohttp) is imported only when the command runs, so that
every other CLI call starts as fast as before."""

from __future__ import annotations

import argparse

from ..resources.inputs import port_or_zero
from .context import CliError, Context


def _run(ctx: Context) -> int:
    from ..dashboard.server import run

    a = ctx.args
    conn, namespace = ctx.conn, None if ctx.all_namespaces else ctx.namespace
    try:
        run(conn, namespace, a.address, a.port, ctx.say, ctx.note)
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
                                                            "another one lets others act as you)")
    cmd.add_argument("--port", type=port_or_zero, default=8800, help="the port (default 8800; 0 picks a free one)")
    cmd.set_defaults(func=_run, cli=True)

