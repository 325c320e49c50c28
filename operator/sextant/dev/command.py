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
import sys
from collections.abc import Awaitable, Callable
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


async def _wait_for(ready: Callable[[], Awaitable[bool]], tries: int, failure: Exception) -> None:
    """Poll `ready` every 0.1 s until it says so, at most `tries` times; then raise `failure`."""
    for _ in range(tries):
        if await ready():
            return
        await asyncio.sleep(0.1)
    raise failure


async def install_crds(conn: kubeconfig.Connection) -> None:
    from ..kube.client import ApiError, Kube
    from ..resources import API_VERSION
    from ..resources.crds import RESOURCES, crd

    async with Kube(conn, user_agent="sextant-dev") as kube:
        bodies = [crd(entry) for entry in RESOURCES]
        for body in bodies:
            await kube.request("PATCH", contract.crds_path(body["metadata"]["name"]),
                               params={"fieldManager": "sextant", "force": "true"}, body=body,
                               content_type="application/apply-patch+yaml")

        for body in bodies:
            name = body["metadata"]["name"]

            async def established(name: str = name) -> bool:
                got = await kube.get(contract.crds_path(name))
                conditions = {c["type"]: c["status"] for c in got.get("status", {}).get("conditions", [])}
                return conditions.get("Established") == "True"

            await _wait_for(established, 100, ApiError(0, f"CRD {name} did not become Established"))
        # Established comes before the API server's storage for the kind is ready: until then a list or watch is
        # answered 429 "storage is (re)initializing", which the operator would log as failures at its start.
        for entry in RESOURCES:
            path = contract.path(API_VERSION, entry["module"].PLURAL)

            async def storage_ready(path: str = path) -> bool:
                try:
                    await kube.request("GET", path, params={"limit": "1"})
                    return True
                except ApiError as exc:
                    if exc.status != 429:
                        raise
                    return False

            await _wait_for(storage_ready, 300,
                            ApiError(429, f"the API server's storage for {path} did not become ready"))

Operate = Callable[[argparse.Namespace, kubeconfig.Connection], None]


def commands_line() -> str:
    """The PATH line for another shell: kubectl, sextant and kubectl's plugin kubectl-sextant live beside this
    Python (.venv/bin for `make run`), not necessarily on that shell's PATH."""
    return f"  export PATH={Path(sys.executable).parent}:$PATH    # kubectl, sextant, kubectl sextant"


def what_runs_where(kubeconfig_path: str) -> str:
    return (f"sextant: local control plane ready: etcd, kube-apiserver, kube-controller-manager and kube-scheduler on "
            f"loopback. Where pods run:\n"
            f"  node {LOCAL_NODE}: pods that select type: local (examples/local/) run their command as a process on "
            f"this machine (images are ignored; kubectl logs POD works)\n"
            f"  simulated (kwok) nodes: every other pod; nothing runs there, kwok only plays the pod's phases "
            f"(examples/ for a real cluster end there without running)\n"
            f"In another shell:\n  export KUBECONFIG={kubeconfig_path}\n{commands_line()}")


def dev(args: argparse.Namespace, operate: Operate) -> int:
    """Install the CRDs and run the operator (operate: with the operator's flags of args) on the configured
    cluster, else on a local control plane started here."""
    cluster = node = None
    path = args.kubeconfig or configured_cluster()
    if path is None:
        from .localcluster import LocalCluster, cache_root, controlplane_built
        from .localnode import AgentProcess

        first = "" if controlplane_built() else " (first time: builds it from the Go module proxy, ~8 min)"
        print(f"sextant: no cluster configured; starting a local control plane{first}", flush=True)
        cluster = LocalCluster(name=DEV_CLUSTER, teardown_on_exit=not args.keep).up(reuse=True)
        path = str(cluster.kubeconfig)
        node = AgentProcess(path, LOCAL_NODE, cache_root() / "localnode" / DEV_CLUSTER).start()
        node.wait_ready()
        print(what_runs_where(path), flush=True)
    else:
        print(f"sextant: using the cluster of {path}; in another shell:\n{commands_line()}", flush=True)
    try:
        conn = kubeconfig.load(path, args.context)
        asyncio.run(install_crds(conn))
        if cluster is not None:
            from . import flowcontrol

            conn = asyncio.run(flowcontrol.operator_connection(conn))
        print("sextant: CRDs installed; operator running (Ctrl-C stops it)", flush=True)
        operate(args, conn)
    except KeyboardInterrupt:
        pass  # Ctrl-C before the operator took over its signals: stop as it would
    finally:
        if node is not None and not args.keep:
            node.stop()
        if cluster is not None and not args.keep:
            cluster.down()
    if cluster is None:
        print("sextant: operator stopped", flush=True)
    elif args.keep:
        print(f"sextant: operator stopped; the local control plane keeps running (--keep): KUBECONFIG={path}",
              flush=True)
    else:
        print("sextant: operator stopped; local control plane torn down", flush=True)
    return 0


def register(sub: argparse._SubParsersAction, operator_flags: Callable[[argparse.ArgumentParser], None],
             operate: Operate) -> None:
    """`sextant dev`: the operator's flags (operator_flags adds them) and --keep; operate runs the operator."""
    dv = sub.add_parser("dev", help="install the CRDs and run the operator; starts a local control plane when "
                                    "no cluster is configured")
    dv.add_argument("--keep", action="store_true", help="leave the local control plane running afterwards")
    operator_flags(dv)
    # The operator's embedded archive (SQLite in the local cache) unless $SEXTANT_ARCHIVE_DSN names one: one process
    # owns it here (docs/archive.md).
    dv.set_defaults(embedded_archive=True)

    def run(args: argparse.Namespace) -> int:
        logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return dev(args, operate)

    dv.set_defaults(func=run)
