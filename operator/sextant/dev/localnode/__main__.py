"""python -m sextant.dev.localnode --kubeconfig K --name local-node-0 [--workdir DIR]: run the local node agent."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from .agent import LocalNode, default_workdir


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sextant.dev.localnode",
                                     description="A node whose pods run as local processes (images are ignored).")
    parser.add_argument("--kubeconfig", help="default: KUBECONFIG, then ~/.kube/config")
    parser.add_argument("--context")
    parser.add_argument("--name", default="local-node-0", help="the Node's name (default: %(default)s)")
    parser.add_argument("--workdir", type=Path, help="logs, pod directories, certificate "
                                                     "(default: ~/.cache/sextant/localnode/<name>)")
    parser.add_argument("--node-ip", default="127.0.0.1", help="InternalIP and bind address (default: %(default)s)")
    parser.add_argument("--kubelet-port", type=int, default=0, help="port of the logs endpoint (default: any free)")
    parser.add_argument("--no-logs-endpoint", action="store_true", help="do not serve kubectl logs")
    parser.add_argument("--lease-interval", type=float, default=10.0, help="seconds (default: %(default)s)")
    parser.add_argument("--status-interval", type=float, default=60.0, help="seconds (default: %(default)s)")
    parser.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                        help="a node label, added or overriding the defaults (type=local, ...); repeatable")
    parser.add_argument("--ready-file", type=Path, help="write this file once the node is Ready")
    parser.add_argument("--log-level", default="info")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    node = LocalNode(
        kubeconfig=args.kubeconfig, context=args.context, name=args.name,
        workdir=args.workdir or default_workdir(args.name), node_ip=args.node_ip, kubelet_port=args.kubelet_port,
        serve_logs=not args.no_logs_endpoint, lease_interval=args.lease_interval,
        status_interval=args.status_interval, labels=dict(kv.split("=", 1) for kv in args.label),
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, node.stop)
    task = asyncio.create_task(node.run())
    while not node.ready.is_set() and not task.done():
        await asyncio.sleep(0.05)
    if node.ready.is_set() and args.ready_file:
        args.ready_file.parent.mkdir(parents=True, exist_ok=True)
        args.ready_file.write_text(f"{node.name}\n")
    await task


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    try:
        asyncio.run(serve(args))
    except Exception as exc:  # noqa: BLE001 - one line for the user, the trace in the log
        logging.getLogger("sextant.dev.localnode").exception("the local node agent failed")
        print(f"sextant.dev.localnode: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
