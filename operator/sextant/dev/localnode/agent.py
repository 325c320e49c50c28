"""The local node agent: registers a Node, keeps it Ready, and runs the pods bound to it (see __init__)."""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import sys
import threading
from pathlib import Path
from typing import Any

from ...kube import kubeconfig as kubeconfig_module
from ...kube.client import ApiError, Conflict, Kube, NotFound
from ...kube.clock import utcnow
from ...kube.informer import Informer
from ...resources import contract
from ...resources.common import format_time
from .logs import KubeletServer, self_signed_certificate
from .pods import PodRunner, now, reap_leftovers

log = logging.getLogger(__name__)

KUBELET_VERSION = "v1.36.3"
TAINT_KEY = "sextant.dev/local-node"
LOCAL_LABEL = "sextant.dev/local-node"
LEASE_NAMESPACE = "kube-node-lease"
DEFAULT_CAPACITY = {"cpu": "64", "memory": "256Gi", "pods": "500", "ephemeral-storage": "1Ti"}
# The pod tolerations and node selector that put a pod on a local node (for tests and Handler templates).
TOLERATION = {"key": TAINT_KEY, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
NODE_SELECTOR = {"type": "local"}


def default_workdir(name: str) -> Path:
    return Path(os.environ.get("SEXTANT_CACHE") or Path.home() / ".cache" / "sextant") / "localnode" / name


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


class LocalNode:
    """A Node whose pods run as local processes.

        node = LocalNode(kubeconfig="kc.yaml", name="local-node-0", workdir="/tmp/ln")
        await node.run()                     # until node.stop() (or cancelled)

        node.start_in_thread(); node.wait_ready(30); ...; node.stop_thread()   # from synchronous code
    """

    def __init__(
        self,
        kubeconfig: str | Path | None = None,
        name: str = "local-node-0",
        workdir: str | Path | None = None,
        *,
        context: str | None = None,
        node_ip: str = "127.0.0.1",
        kubelet_port: int = 0,
        serve_logs: bool = True,
        lease_interval: float = 10.0,
        lease_duration: int = 40,
        status_interval: float = 60.0,
        capacity: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.kubeconfig = str(kubeconfig) if kubeconfig else None
        self.context = context
        self.name = name
        self.workdir = Path(workdir) if workdir else default_workdir(name)
        self.node_ip = node_ip
        self.kubelet_port = kubelet_port
        self.serve_logs = serve_logs
        self.lease_interval = lease_interval
        self.lease_duration = lease_duration
        self.status_interval = status_interval
        self.capacity = {**DEFAULT_CAPACITY, **(capacity or {})}
        self.labels = {"type": "local", LOCAL_LABEL: "true", "kubernetes.io/hostname": name,
                       "kubernetes.io/os": "linux", "kubernetes.io/arch": _arch(), **(labels or {})}
        self.pods: dict[str, PodRunner] = {}  # uid → runner
        self.ready = threading.Event()  # set once the Node is registered and the pod watch has listed
        self.error: BaseException | None = None
        self.api: Kube
        self.base_env = self._base_env()
        self._ready_since = now()
        self._node_uid: str | None = None
        self._kubelet: KubeletServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stop_requested = False
        self._thread: threading.Thread | None = None

    def _base_env(self) -> dict[str, str]:
        """The environment of every pod process: the agent's, with its Python first on PATH and its kubeconfig.

        So a command `python -m sextant.runner` or `sextant ...` runs this installation's Sextant, and a
        process reaches the API server through KUBECONFIG as a pod would through its service account.
        """
        env = dict(os.environ)
        bindir = str(Path(sys.executable).parent)
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        if self.kubeconfig:
            env["KUBECONFIG"] = str(Path(self.kubeconfig).resolve())
        return env

    # ---- running it ----------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Register the node, serve it until stop() is called (or the task is cancelled), then clean up."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        self.workdir.mkdir(parents=True, exist_ok=True)
        reap_leftovers(self.workdir)
        self.api = Kube(kubeconfig_module.load(self.kubeconfig, self.context), user_agent="sextant-localnode")
        tasks: list[asyncio.Task[None]] = []
        try:
            if self.serve_logs:
                await self._start_kubelet_server()
            await self._register()
            await self._renew_lease()
            listed = asyncio.Event()
            tasks = [asyncio.create_task(self._forever(self._lease_loop), name="lease"),
                     asyncio.create_task(self._forever(self._status_loop), name="node-status"),
                     asyncio.create_task(self._forever(self._watch_pods, listed), name="pod-watch")]
            await listed.wait()
            self.ready.set()
            log.info("node %s is Ready (kubelet endpoint %s:%s, workdir %s)", self.name, self.node_ip,
                     self._kubelet.port if self._kubelet else "-", self.workdir)
            await self._stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._shutdown()

    def stop(self) -> None:
        """Ask run() to finish; callable from any thread and from a signal handler."""
        self._stop_requested = True
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    def start_in_thread(self) -> LocalNode:
        """Run the agent on its own event loop in a daemon thread (see wait_ready and stop_thread)."""

        def target() -> None:
            try:
                asyncio.run(self.run())
            except BaseException as exc:  # noqa: BLE001 - reported by wait_ready
                self.error = exc
                self.ready.set()

        self._thread = threading.Thread(target=target, name=f"localnode-{self.name}", daemon=True)
        self._thread.start()
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        if not self.ready.wait(timeout):
            raise TimeoutError(f"local node {self.name} not ready after {timeout} s")
        if self.error is not None:
            raise RuntimeError(f"local node {self.name} failed: {self.error!r}") from self.error

    def stop_thread(self, timeout: float = 30) -> None:
        self.stop()
        if self._thread is not None:
            self._thread.join(timeout)

    async def _forever(self, loop_fn: Any, *args: Any) -> None:
        """Run a maintenance loop, restarting it after an unexpected error."""
        while True:
            try:
                await loop_fn(*args)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("node %s: %s failed; restarting it", self.name, loop_fn.__name__)
                await asyncio.sleep(1)

    async def _shutdown(self) -> None:
        runners = list(self.pods.values())
        for runner in runners:
            if runner.task is not None:
                runner.task.cancel()
        await asyncio.gather(*(r.task for r in runners if r.task is not None), return_exceptions=True)
        try:
            await asyncio.wait_for(
                asyncio.gather(*(r.abort("the local node agent stopped") for r in runners), return_exceptions=True),
                timeout=10)
        except asyncio.TimeoutError:
            log.warning("node %s: reporting the killed pods timed out", self.name)
        try:
            await asyncio.wait_for(self._patch_node_status(ready=False), timeout=5)
        except Exception as exc:  # noqa: BLE001 - best effort on the way out
            log.warning("node %s: could not mark it NotReady: %s", self.name, exc)
        if self._kubelet is not None:
            await self._kubelet.stop()
        await self.api.close()

    # ---- the Node -------------------------------------------------------------------------------------------

    async def _start_kubelet_server(self) -> None:
        pair = self_signed_certificate(self.workdir / "pki", self.name, self.node_ip)
        if pair is None:
            return
        self._kubelet = KubeletServer(self.workdir, self._container_running)
        await self._kubelet.start(self.node_ip, self.kubelet_port, *pair)

    def _container_running(self, namespace: str, pod: str, container: str) -> bool:
        return any(r.running and r.namespace == namespace and r.name == pod and r.container_name == container
                   for r in self.pods.values())

    def _node_status(self, ready: bool) -> dict[str, Any]:
        stamp = now()
        if ready:
            conditions = [
                ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                ("Ready", "True", "KubeletReady", "the sextant local node agent is running"),
            ]
        else:
            conditions = [("Ready", "False", "LocalNodeStopped", "the sextant local node agent stopped")]
        uname = platform.uname()
        status: dict[str, Any] = {
            "capacity": self.capacity,
            "allocatable": self.capacity,
            "conditions": [{"type": t, "status": s, "reason": r, "message": m, "lastHeartbeatTime": stamp,
                            "lastTransitionTime": self._ready_since if ready else stamp}
                           for t, s, r, m in conditions],
            "addresses": [{"type": "InternalIP", "address": self.node_ip}],
            "nodeInfo": {
                "kubeletVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": _arch(),
                "kernelVersion": uname.release,
                "osImage": f"{uname.system} {uname.release} (sextant local node)",
                "containerRuntimeVersion": "sextant-localnode://0.1",
                "machineID": "", "systemUUID": "", "bootID": "", "kubeProxyVersion": "",
            },
            "phase": "Running",
        }
        if self._kubelet is not None and self._kubelet.port:
            status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self._kubelet.port}}
        return status

    async def _register(self) -> None:
        taint = {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}
        body = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "labels": self.labels},
            "spec": {"taints": [taint]},
            "status": self._node_status(ready=True),
        }
        try:
            node = await self.api.create(contract.nodes_path(), body)
            log.info("node %s registered", self.name)
        except Conflict:
            node = await self._reregister(taint)
        self._node_uid = node["metadata"]["uid"]
        await self._patch_node_status(ready=True)

    async def _reregister(self, taint: dict[str, str]) -> dict[str, Any]:
        """The Node exists (an earlier run): take it over, keeping taints others added."""
        for _ in range(10):
            node = await self.api.get(contract.nodes_path(self.name))
            annotations = node["metadata"].get("annotations") or {}
            if "kwok.x-k8s.io/node" in annotations:
                raise RuntimeError(f"node {self.name} exists and is managed by kwok; pick another --name")
            taints = [t for t in node.get("spec", {}).get("taints") or [] if t.get("key") != TAINT_KEY] + [taint]
            patch = {"metadata": {"labels": self.labels, "resourceVersion": node["metadata"]["resourceVersion"]},
                     "spec": {"taints": taints, "unschedulable": False}}
            try:
                node = await self.api.merge_patch(contract.nodes_path(self.name), patch)
                log.info("node %s existed; taken over", self.name)
                return node
            except Conflict:
                pass  # changed meanwhile: read it again
        raise RuntimeError(f"node {self.name}: could not update it (conflicts)")

    async def _patch_node_status(self, ready: bool) -> None:
        await self.api.merge_patch(contract.nodes_path(self.name, "status"), {"status": self._node_status(ready)})

    async def _status_loop(self) -> None:
        while True:
            await asyncio.sleep(self.status_interval)
            try:
                await self._patch_node_status(ready=True)
            except NotFound:
                log.warning("node %s was deleted; registering it again", self.name)
                await self._register()
                await self._renew_lease()

    async def _renew_lease(self) -> None:
        path = contract.leases_path(LEASE_NAMESPACE, self.name)
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": self.lease_duration,
                "renewTime": format_time(utcnow())}
        try:
            await self.api.merge_patch(path, {"spec": spec})
        except NotFound:
            owner = {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self._node_uid}
            await self.api.create(contract.leases_path(LEASE_NAMESPACE), {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": LEASE_NAMESPACE, "ownerReferences": [owner]},
                "spec": spec,
            })

    async def _lease_loop(self) -> None:
        while True:
            await asyncio.sleep(self.lease_interval)
            try:
                await self._renew_lease()
            except ApiError as exc:
                log.warning("node %s: lease renewal failed: %s", self.name, exc)

    # ---- the pods --------------------------------------------------------------------------------------------

    async def _watch_pods(self, listed: asyncio.Event) -> None:
        """The node's pods, from an informer (kube/informer.py: a list, then a watch; listed again on 410 Gone)."""
        informer = Informer(self.api, contract.pods_path(), self._pod_changed, name=f"node {self.name} pods",
                            field_selector=f"spec.nodeName={self.name}")
        watching = asyncio.ensure_future(informer.run())
        try:
            await informer.synced.wait()
            listed.set()
            await watching
        finally:
            watching.cancel()

    def _pod_changed(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        # A pod deleted while no watch was open is delivered by name only; one replaced under its name by
        # another (a new uid) ends the old one's processes.
        gone = [uid for uid, runner in self.pods.items()
                if (runner.namespace, runner.name) == (meta.get("namespace"), meta["name"])
                and (kind == "delete" or uid != meta.get("uid"))]
        for uid in gone:
            self.pods.pop(uid).vanish()
        if kind == "upsert":
            self._observe(pod)

    def _observe(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        runner = self.pods.get(uid)
        if runner is not None:
            runner.update(pod)
            return
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        if phase in ("Succeeded", "Failed"):
            mode = "finished"
        elif phase == "Running":
            mode = "lost"  # started by an earlier agent, whose processes died with it
        else:
            mode = "new"
        runner = PodRunner(self, pod, mode)
        self.pods[uid] = runner
        runner.task = asyncio.create_task(runner.run(), name=f"pod {pod['metadata']['name']}")
