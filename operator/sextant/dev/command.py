"""`sextant dev`: run Sextant on the configured cluster, or on a local control plane when there is none.

It installs (server-side applies) the CRDs generated from the models, then runs the operator in the
foreground. On a local control plane it also starts a local node (sextant.dev.localnode) whose pods really run,
as processes on this machine, so a job whose handler is a local command runs without Docker. A local
control plane it started is torn down when it stops, unless --keep.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from ..kube import kubeconfig
from ..kube.client import ApiError, Kube
from ..resources import contract
from ..resources.crds import RESOURCES, crd

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


def dev(kubeconfig_path: str | None, context: str | None, keep: bool, settings) -> int:
    from ..controller.operator import run

    cluster = node = None
    path = kubeconfig_path or configured_cluster()
    if path is None:
        from .localcluster import LocalCluster
        from .localnode import AgentProcess

        print("sextant: no cluster configured; starting a local control plane (first time: builds it, ~8 min)",
              flush=True)
        cluster = LocalCluster(name=DEV_CLUSTER, teardown_on_exit=not keep).up(reuse=True)
        path = str(cluster.kubeconfig)
        from .localcluster import cache_root

        node = AgentProcess(path, LOCAL_NODE, cache_root() / "localnode" / DEV_CLUSTER).start()
        node.wait_ready()
        print(f"sextant: local control plane ready, with node {LOCAL_NODE} running pods as local processes "
              f"(logs: kubectl logs POD); in another shell:\n  export KUBECONFIG={path}", flush=True)
    try:
        conn = kubeconfig.load(path, context)
        asyncio.run(install_crds(conn))
        print("sextant: CRDs installed; operator running (Ctrl-C stops it)")
        run(conn, settings(conn))
    finally:
        if node is not None and not keep:
            node.stop()
        if cluster is not None and not keep:
            cluster.down()
    return 0
