"""`sextant dev`: run Sextant on the configured cluster, or on a local control plane when there is none.

It installs (server-side applies) the CRDs generated from the models, then runs the operator in the
foreground. On a local control plane it also starts a local node (sextant.dev.localnode) whose pods really run,
as processes on this machine, so a job whose handler is a local command runs without Docker, and gives the
operator a priority level of its own in API Priority and Fairness, as the chart does (sextant.dev.flowcontrol: the
operator runs there as a service account of its own). A local control plane it started is torn down when it
stops, unless --keep.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

from ..kube import kubeconfig
from ..resources import contract

# The Kubernetes client and the CRDs are imported when it runs, so that every other command starts fast.

log = logging.getLogger("sextant.dev")
DEV_CLUSTER = os.environ.get("SEXTANT_DEV_CLUSTER", "sextant-dev")
LOCAL_NODE = "local-node-0"


def configured_cluster() -> str | None:
    """The kubeconfig a user has configured, if any (KUBECONFIG, or ~/.kube/config)."""
    path = os.environ.get("KUBECONFIG")
    if path:
        return path
    default = Path.home() / ".kube" / "config"
    return str(default) if default.exists() else None


async def install_crds(conn: kubeconfig.Connection) -> None:
    from ..kube.client import ApiError, Kube
    from ..resources.crds import RESOURCES, crd

    async with Kube(conn, user_agent="sextant-dev") as kube:
        for entry in RESOURCES:
            body = crd(entry)
            name = body["metadata"]["name"]
            await kube.request("PATCH", contract.crds_path(name),
                               params={"fieldManager": "sextant", "force": "true"}, body=body,
                               content_type="application/apply-patch+yaml")
        for entry in RESOURCES:
            name = crd(entry)["metadata"]["name"]
            for _ in range(100):
                got = await kube.get(contract.crds_path(name))
                conditions = {c["type"]: c["status"] for c in got.get("status", {}).get("conditions", [])}
                if conditions.get("Established") == "True":
                    break
                await asyncio.sleep(0.1)
            else:
                raise ApiError(0, f"CRD {name} did not become Established")


Operate = Callable[[argparse.Namespace, kubeconfig.Connection], None]


def dev(args: argparse.Namespace, operate: Operate) -> int:
    """Install the CRDs and run the operator (operate: with the operator's flags of args) on the configured
    cluster, else on a local control plane started here."""
    cluster = node = None
    path = args.kubeconfig or configured_cluster()
    if path is None:
        from .localcluster import LocalCluster
        from .localnode import AgentProcess

        print("sextant: no cluster configured; starting a local control plane (first time: builds it, ~8 min)",
              flush=True)
        cluster = LocalCluster(name=DEV_CLUSTER, teardown_on_exit=not args.keep).up(reuse=True)
        path = str(cluster.kubeconfig)
        from .localcluster import cache_root

        node = AgentProcess(path, LOCAL_NODE, cache_root() / "localnode" / DEV_CLUSTER).start()
        node.wait_ready()
        print(f"sextant: local control plane ready, with node {LOCAL_NODE} running pods as local processes "
              f"(logs: kubectl logs POD); in another shell:\n  export KUBECONFIG={path}", flush=True)
    try:
        conn = kubeconfig.load(path, args.context)
        asyncio.run(install_crds(conn))
        if cluster is not None:
            from . import flowcontrol

            conn = asyncio.run(flowcontrol.operator_connection(conn))
        print("sextant: CRDs installed; operator running (Ctrl-C stops it)")
        operate(args, conn)
    finally:
        if node is not None and not args.keep:
            node.stop()
        if cluster is not None and not args.keep:
            cluster.down()
    return 0


def register(sub: argparse._SubParsersAction, operator_flags: Callable[[argparse.ArgumentParser], None],
             operate: Operate) -> None:
    """`sextant dev`: the operator's flags (operator_flags adds them) and --keep; operate runs the operator."""
    dv = sub.add_parser("dev", help="install the CRDs and run the operator; starts a local control plane when "
                                    "no cluster is configured")
    dv.add_argument("--keep", action="store_true", help="leave the local control plane running afterwards")
    operator_flags(dv)

    def run(args: argparse.Namespace) -> int:
        logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return dev(args, operate)

    dv.set_defaults(func=run)
