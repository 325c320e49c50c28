"""The `sextant dashboard` subcommand's flags. The server (aiohttp) is imported only when the command runs, so that
every other CLI call starts as fast as before."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..cli.context import Context


def _run(ctx: Context) -> int:
    from .server import dashboard_cmd

    return dashboard_cmd(ctx)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0 to 65535; 0 picks a free one)")
    return value


def register(sub: argparse._SubParsersAction, flags: argparse.ArgumentParser) -> None:
    cmd = sub.add_parser(
        "dashboard", parents=[flags], help="a live web view of queues, jobs, schedules and workers on localhost",
        description="Serve a web dashboard on 127.0.0.1 (like `kubectl proxy`: it acts with your kubeconfig's "
                    "credentials; what you may not see or do, it cannot either) and print its URL. Shows the "
                    "namespace of -n (default: the kubeconfig context's), or every namespace with -A.")
    cmd.add_argument("--address", default="127.0.0.1", help="the address to listen on (default 127.0.0.1; "
                                                            "another one lets others act as you)")
    cmd.add_argument("--port", type=_port, default=8800, help="the port (default 8800; 0 picks a free one)")
    cmd.set_defaults(func=_run, cli=True)

